"""Run a Graph on tinygrad: `to_tinygrad(graph)(**inputs) -> {output name: Tensor}`.

Every node becomes a call of tinygrad's public `Tensor` API (one row of `_RULES` per op:
the API stays from release to release, its internal UOps do not), so the outputs are lazy
Tensors on tinygrad's device (`device=`, else tinygrad's own default, `DEV`): realize them
together and tinygrad compiles one computation for all. FUNCTION and CALL bodies are
inlined: each call evaluates its body with the slots bound to the call's arguments.

`evaluate_on_tinygrad(graph, inputs, simplify="tinygrad")` is what `uopgrad eval --backend
tinygrad` runs: the same simplified graph as the numpy evaluator's, computed by tinygrad.

Ops that go to tinygrad as themselves (Tensor.alu) must be ones the device's renderer has
(its `code_for_op`); where it lacks one, `_SPELLINGS` spells it with ops it has. The one
such op is FDIV (the format's one-rounding a / b; tinygrad's own `/` is a * (1/b)). The
PYTHON interpreter has no FDIV: there a float16 or float32 division is computed in float64
as a * (1/b) and rounded back, which is the correctly rounded quotient (two roundings in
float64 are within 2^-52 of a / b, relatively, and a quotient of two p-bit floats is
never a midpoint of the p-bit grid nor within about 2^-(2p+2) of one, p = 24 or 11); a float64 division is a * (1/b),
within one ulp of a / b (two roundings) where 1/b is finite (not for a subnormal b). A
device without float64 does the same in the operands' dtype.

tinygrad folds an op whose sources are constants with a Python table of its ops, which has
no FDIV (its own `/` makes none): where its rewrites turn both sources of an FDIV into
constants (a sum over an empty axis, padding inside a kernel), compiling fails with
KeyError FDIV. `to_tinygrad(graph, fdiv=False)` spells every FDIV as above, and
`evaluate_on_tinygrad` runs the graph that way when the first attempt fails so.
"""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Mapping

from ...errors import EvaluationError
from ...core.ops import CALLS, Ops
from ...core.uop import UOp
from ...core.walks import scope_toposort
from ._tinygrad import import_tinygrad, tinygrad_dtype, unknown_device


def to_tinygrad(graph, device: str | None = None, fdiv: bool = True):
    """A function of the graph's inputs (numpy arrays or tinygrad Tensors, by name) that
    returns {output name: Tensor} (a tuple of Tensors, None for NOOP, for a tuple output).
    `fdiv=False`: every FDIV spelled as a * (1/b), as on a renderer without it (see the
    module's docstring: for a graph tinygrad cannot compile with FDIV)."""
    tg = import_tinygrad()
    unknown = device and unknown_device(device)
    if unknown:
        raise EvaluationError(f"no tinygrad device {unknown}")

    def run(**inputs) -> dict:
        missing = [n for n in graph.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in graph.input_names]
        if missing or unknown:
            raise EvaluationError("; ".join(filter(None, [
                missing and f"missing input values: {', '.join(missing)}",
                unknown and f"no inputs named {', '.join(unknown)}; inputs: {', '.join(graph.input_names) or 'none'}"])))
        bound = {node: _tensor(tg, inputs[node.arg], node, device) for node in graph.inputs}
        values = _Runner(tg, device, spelled=frozenset() if fdiv else _SPELLED_WITHOUT_FDIV).run(
            list(graph.outputs.values()), bound)
        return {name: values[node] for name, node in graph.outputs.items()}

    return run


def evaluate_on_tinygrad(graph, inputs: Mapping, device: str | None = None, *, simplify: str | None = None) -> dict:
    """{output name: numpy array (or tuple of them)}: the graph run by tinygrad, all outputs
    realized in one schedule. `simplify` as evaluate_graph's (None: as written; "exact";
    "tinygrad", what `uopgrad eval` runs), so both backends compute the same graph."""
    tg = import_tinygrad()
    if simplify is not None:
        graph = _simplified(graph, simplify)
    try:  # placing the inputs and constants on the device can fail as realizing can
        try:
            outputs = _realized(tg, graph, inputs, device, fdiv=True)
        except KeyError as e:
            if not _unfoldable_fdiv(e):
                raise
            outputs = _realized(tg, graph, inputs, device, fdiv=False)  # see the module's docstring
    except EvaluationError:
        raise
    except Exception as e:  # noqa: BLE001 - tinygrad's own failure (no device, a compiler missing)
        raise EvaluationError(f"tinygrad could not run the graph: {type(e).__name__}: {' '.join(str(e).split())}") \
            from None

    def array(t):
        return None if t is None else t.numpy()
    return {name: tuple(map(array, v)) if isinstance(v, tuple) else array(v) for name, v in outputs.items()}


def _realized(tg, graph, inputs: Mapping, device: str | None, fdiv: bool) -> dict:
    with _metadata_kept():
        outputs = to_tinygrad(graph, device, fdiv)(**inputs)
        tg.Tensor.realize(*(t for v in outputs.values() for t in (v if isinstance(v, tuple) else (v,)) if t is not None))
    return outputs


@contextlib.contextmanager
def _metadata_kept():
    """tinygrad keeps the name of the Tensor method running in a global (tinygrad.tensor's
    _METADATA) and does not put it back when the method raises: after one failed realize,
    every Tensor the process makes is tagged `realize`, and an export loses its names and
    scopes. It is put back here, whatever happens (a no-op where tinygrad has no such global)."""
    holder = getattr(sys.modules.get("tinygrad.tensor"), "_METADATA", None)
    saved = getattr(holder, "state", None)
    try:
        yield
    finally:
        if hasattr(holder, "state"):
            holder.state = saved


def _unfoldable_fdiv(error: KeyError) -> bool:
    """Whether tinygrad failed to fold an FDIV of two constants (its ALU table has none)."""
    return len(error.args) == 1 and getattr(error.args[0], "name", None) == "FDIV"


def _simplified(graph, mode: str):
    from ...core.simplify import MODES
    from ...core.simplify import simplify as simplified
    if mode not in MODES:
        raise EvaluationError(f"simplify must be one of {', '.join(MODES)} or None, got {mode!r}")
    return simplified(graph, exact=mode == "exact")


def close_compile_workers() -> None:
    """End tinygrad's pool of compile workers. Python's exit does it, but a process that
    leaves with os._exit (the CLI, to skip tearing down large graphs) would leave the
    workers' semaphores behind, and the resource tracker complains about them on stderr."""
    import sys
    worker = sys.modules.get("tinygrad.engine.worker")
    if worker is None or getattr(worker, "worker_pool", None) is None:
        return
    worker.terminate_worker_pool()
    import multiprocessing.util
    multiprocessing.util._run_finalizers()  # what Python's exit runs: unlinks the pool's semaphores


def _tensor(tg, value, node: UOp, device):
    """An input's value as a Tensor of exactly the input's shape and dtype."""
    import numpy as np
    if isinstance(value, tg.Tensor):
        shape, dtype = tuple(value.shape), value.dtype
        if shape != node.shape or dtype != tinygrad_dtype(node.dtype):
            raise EvaluationError(f"input {node.arg!r} is {node.dtype.name}{list(node.shape)} but the Tensor is "
                                  f"{dtype.name}{list(shape)}")
        return value if device is None else value.to(device)
    array = np.asarray(value)
    if array.shape != node.shape or array.dtype != node.dtype.np:
        raise EvaluationError(f"input {node.arg!r} is {node.dtype.name}{list(node.shape)} but the value is "
                              f"{array.dtype.name}{list(array.shape)}")
    # np.require, not np.ascontiguousarray: that one makes a 0-d array 1-d
    return tg.Tensor(np.require(array, requirements="C"), device=device)


class _Runner:
    """Evaluates nodes in topological order (iteratively); a call evaluates its body with
    a runner of its own, the slots bound to the call's argument Tensors."""

    def __init__(self, tg, device, spelled: frozenset = frozenset()):
        self.tg, self.device = tg, device
        self.spelled = spelled  # ops spelled (_SPELLINGS) even where the renderer has them
        from tinygrad.uop.ops import Ops as TOps
        self.tinygrad_ops = TOps
        self._renderer = None

    def run(self, roots: list[UOp], bound: dict) -> dict:
        values = dict(bound)
        for node in scope_toposort(roots):  # a call's body is run by the call, in its own scope
            if node in values:
                continue
            if node.op == Ops.PARAM:
                raise EvaluationError(f"no value for parameter {node.arg!r}")
            rule = _RULES.get(node.op)
            if rule is None:
                raise EvaluationError(f"the tinygrad backend has no rule for {node.op}")
            body = node.op in CALLS
            values[node] = rule(self, node, [None if body and i == 0 else values[s] for i, s in enumerate(node.src)])
        return values

    def call(self, node: UOp, srcs: list) -> tuple:
        """FUNCTION/CALL: the body TUPLE's elements, slot i bound to argument i."""
        body, args = node.src[0], srcs[1:]
        slots = {n: args[n.arg] for n in scope_toposort([body]) if n.op == Ops.PARAM and isinstance(n.arg, int)}
        runner = _Runner(self.tg, self.device, self.spelled)
        runner._renderer = self._renderer
        return runner.run([body], slots)[body]

    def renderer(self):
        """The device's renderer: which ops it has (`code_for_op`) and which dtypes."""
        if self._renderer is None:
            device = self.tg.Device
            self._renderer = device[device.canonicalize(self.device) if self.device else device.DEFAULT].renderer
        return self._renderer

    def has_op(self, op_name: str) -> bool:
        return getattr(self.tinygrad_ops, op_name) in self.renderer().code_for_op

    def has_dtype(self, tg_dtype) -> bool:
        return tg_dtype in self.renderer().supported_dtypes()

    def const(self, node: UOp):
        return self.tg.Tensor(node.arg, dtype=tinygrad_dtype(node.dtype), device=self.device)

    def buffer(self, node: UOp):
        return self.tg.Tensor(node.buffer_array().copy(), device=self.device)

    def alu(self, op_name: str, a, *rest):
        """Ops whose public functions round differently (a / b is a * (1/b) in tinygrad):
        the op itself, through Tensor.alu, where the device's renderer has it; else its
        spelling in ops it has (`_SPELLINGS`)."""
        if op_name not in self.spelled and self.has_op(op_name):
            return a.alu(getattr(self.tinygrad_ops, op_name), *rest)
        return _SPELLINGS[op_name](self, a, *rest)


def _divide_without_fdiv(run, a, b):
    """a / b on a renderer without FDIV: a * (1/b) in float64 rounded back (the correctly
    rounded quotient for float16 and float32: see the module's docstring); float64, or a
    device without float64: a * (1/b) in the operands' dtype (within one ulp)."""
    wide = run.tg.dtypes.float64
    if a.dtype == wide or not run.has_dtype(wide):
        return a * b.reciprocal()
    return (a.cast(wide) * b.cast(wide).reciprocal()).cast(a.dtype)


# ops sent as themselves (Runner.alu) -> their spelling where the device's renderer lacks them
_SPELLINGS = {
    "FDIV": _divide_without_fdiv,   # a * (1/b), in float64 where the device has it
}
_SPELLED_WITHOUT_FDIV = frozenset({"FDIV"})  # to_tinygrad(fdiv=False)


def _reduce(run, node, srcs):
    """keepdim reductions in the node's dtype; float16 sums accumulate in float32 (the format's
    rule, and tinygrad's own default for half)."""
    x, (op, axes) = srcs[0], node.arg
    if op == "MAX":
        return _nan_wins(x.max(axes, keepdim=True), x.isnan().any(axes, keepdim=True), node)
    if op == "MUL":
        return x.prod(axes, keepdim=True, dtype=x.dtype)
    return x.sum(axes, keepdim=True) if node.dtype.name == "float16" else x.sum(axes, keepdim=True, dtype=x.dtype)


def _maximum(run, node, srcs):
    """max(a, b), nan wins: tinygrad's maximum is a comparison and a where, which keeps a
    where b is nan."""
    a, b = srcs
    return _nan_wins(a.maximum(b), b.isnan(), node)


def _power(run, node, srcs):
    """a^b, C's pow (np.power) for floats. tinygrad's pow is exp2(b log2|a|), negated where
    a < 0 and b is odd, which it tells by casting b to int32: an infinite or nan b raises on
    PYTHON (int(inf)) and gives nan on CPU (for (-2)^inf, 1^nan), and a -0.0 base is not
    below 0. So b goes to it finite, and what C's pow gives elsewhere is put back:
    a^+-inf is 1 where |a| = 1, inf where |a| > 1 is b > 0, else 0; 1^b = 1; x^nan = nan;
    (-0)^b = -(0^b) for an odd integer b. (The finite b is realized apart: tinygrad moves
    the int32 cast into a `where`, and PYTHON runs both of its branches.)"""
    a, b = srcs
    if not node.dtype.is_float:
        return _integer_power(a, b, node)
    finite = b.isinf().logical_not() & b.isnan().logical_not()
    powered = a.pow(finite.where(b, 0.0).contiguous())
    size = a.abs()
    at_infinity = size.eq(1).where(1.0, (size > 1).eq(b > 0).where(float("inf"), 0.0))
    powered = finite.where(powered, (b.isinf() & a.isnan().logical_not()).where(at_infinity, float("nan")))
    half = b * 0.5
    odd = b.eq(b.trunc()) & half.ne(half.trunc())  # an odd integer (no int cast: any size)
    negative_zero = a.eq(0) & (a.reciprocal() < 0)
    return a.eq(1).where(1.0, (negative_zero & odd).where(-powered, powered))


def _integer_power(a, b, node):
    """a^b in the integers' own arithmetic, wrapping as their products do: the numpy
    evaluator's C-style power (backends/numpy/table.py's _int_pow). tinygrad 0.14 computes
    an integer power with an exponent tensor through floats, which does not compile (CPU)
    or run (PYTHON). So: square and multiply, one step per bit an exponent of the dtype can
    have; a negative exponent gives 1/a^|b| truncated (1 for a = 1, +-1 for a = -1 by b's
    parity, else 0)."""
    signed = node.dtype.name.startswith("int")
    steps = node.dtype.itemsize * 8 - signed  # a negative b's bits: replaced below
    exponent = node.src[1]
    if exponent.op is Ops.CONST and exponent.arg >= 0:  # x ** 3: a constant's own bits only
        steps = max(1, exponent.arg.bit_length())
    result, base = a.ones_like(), a
    for step in range(steps):
        if step:  # each square realized: unrealized, tinygrad's rewrites grow exponentially with the steps
            base = (base * base).contiguous()
        result = ((b >> step) & 1).eq(1).where(result * base, result)
    if not signed:
        return result
    one = a.ones_like()
    small = a.eq(1).where(one, a.eq(-1).where((b & 1).eq(1).where(-one, one), a.zeros_like()))
    return (b < 0).where(small, result)


# 2 pi in three parts (Cody and Waite): the first two have 27 significant bits, so k times
# each is exact for |k| < 2^26, and x - k * 2 pi loses nothing up to |x| = 4e8
_TWO_PI_PARTS = (float.fromhex("0x1.921fb54p+2"), float.fromhex("0x1.10b46p-28"), float.fromhex("0x1.1a62633145c07p-52"))


def _sine(run, node, srcs):
    """sin x. Where the renderer has no SIN (CPU) tinygrad computes it, and in float64 its
    reduction of a large x (past |x| = 30) loses digits: sin(72.3) was off by 3e-8, sin(1e5)
    by 1e-5. So float64 x is first reduced by 2 pi here, to where tinygrad's is exact."""
    x = srcs[0]
    if node.dtype.name != "float64" or run.has_op("SIN"):
        return x.sin()
    turns = (x * (1 / (2 * math.pi))).round()
    reduced = x
    for part in _TWO_PI_PARTS:  # each step realized: tinygrad would add the parts' products into one
        reduced = (reduced - turns * part).contiguous()
    return reduced.sin()


def _nan_wins(value, any_nan, node):
    """`value` where no source was nan, else nan (floats: only they have one)."""
    return any_nan.where(float("nan"), value) if node.dtype.is_float else value


def _dtype(node):
    return tinygrad_dtype(node.dtype)


# node -> Tensor, given the source Tensors. Maths beside each row: the format's meaning.
_RULES = {
    Ops.CONST: lambda r, n, s: r.const(n),                                 # scalar of the node's dtype
    Ops.BUFFER: lambda r, n, s: r.buffer(n),                               # embedded array
    Ops.NOOP: lambda r, n, s: None,                                        # no value (a TUPLE element)
    Ops.NEG: lambda r, n, s: -s[0],                                        # -x
    Ops.RECIPROCAL: lambda r, n, s: s[0].reciprocal(),                     # 1/x
    Ops.SQRT: lambda r, n, s: s[0].sqrt(),
    Ops.EXP2: lambda r, n, s: s[0].exp2(),                                 # 2^x
    Ops.LOG2: lambda r, n, s: s[0].log2(),
    Ops.SIN: _sine,                                                        # float64: reduced by 2 pi first
    Ops.TRUNC: lambda r, n, s: s[0].trunc(),                               # toward zero
    Ops.CAST: lambda r, n, s: s[0].cast(_dtype(n)),                        # value conversion
    Ops.BITCAST: lambda r, n, s: s[0].bitcast(_dtype(n)),                  # same bytes
    Ops.ADD: lambda r, n, s: s[0] + s[1],
    Ops.SUB: lambda r, n, s: s[0] - s[1],
    Ops.MUL: lambda r, n, s: s[0] * s[1],
    Ops.FDIV: lambda r, n, s: r.alu("FDIV", s[0], s[1]),                   # a / b, one rounding
    Ops.MAX: _maximum,                                                     # max(a, b), nan wins
    Ops.POW: _power,                                                       # a^b, C's pow
    Ops.CDIV: lambda r, n, s: s[0].div(s[1], rounding_mode="trunc"),       # integers, toward zero
    Ops.CMOD: lambda r, n, s: s[0].fmod(s[1]),                             # integers, dividend's sign
    Ops.AND: lambda r, n, s: s[0] & s[1],
    Ops.OR: lambda r, n, s: s[0] | s[1],
    Ops.XOR: lambda r, n, s: s[0] ^ s[1],
    Ops.SHL: lambda r, n, s: s[0] << s[1],
    Ops.SHR: lambda r, n, s: s[0] >> s[1],
    Ops.CMPLT: lambda r, n, s: s[0] < s[1],
    Ops.CMPNE: lambda r, n, s: s[0].ne(s[1]),
    Ops.CMPEQ: lambda r, n, s: s[0].eq(s[1]),
    Ops.WHERE: lambda r, n, s: s[0].where(s[1], s[2]),                     # a where cond, else b
    Ops.MULACC: lambda r, n, s: s[0] * s[1] + s[2],                        # a*b+c
    Ops.REDUCE: _reduce,                                                   # reduced axes kept as 1; MAX: nan wins
    Ops.RESHAPE: lambda r, n, s: s[0].reshape(n.arg),
    Ops.EXPAND: lambda r, n, s: s[0].expand(n.arg),                        # size-1 axes grow
    Ops.PERMUTE: lambda r, n, s: s[0].permute(n.arg),
    Ops.PAD: lambda r, n, s: s[0].pad(n.arg),                              # (before, after) zeros
    Ops.SHRINK: lambda r, n, s: s[0].shrink(n.arg),                        # (start, end)
    Ops.FLIP: lambda r, n, s: s[0].flip(tuple(i for i, f in enumerate(n.arg) if f)) if any(n.arg) else s[0],
    Ops.CONTIGUOUS: lambda r, n, s: s[0].contiguous(),
    Ops.CONTIGUOUS_BACKWARD: lambda r, n, s: s[0].contiguous_backward(),
    Ops.DETACH: lambda r, n, s: s[0].detach(),
    Ops.COPY: lambda r, n, s: s[0],                                        # one device here: the value
    Ops.TUPLE: lambda r, n, s: tuple(s),
    Ops.FUNCTION: lambda r, n, s: r.call(n, s),                            # body with slots bound
    Ops.CALL: lambda r, n, s: r.call(n, s),                                # (its backward body is for diff)
    Ops.GETTUPLE: lambda r, n, s: s[0][n.arg],
    Ops.STORE: lambda r, n, s: s[1],                                       # the stored value
    Ops.AFTER: lambda r, n, s: s[1],                                       # dest after the store
}
