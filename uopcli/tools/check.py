"""Gradient check: the gradient graph `differentiate` makes, against central finite differences.

    report = check_gradients(graph, ["w1", "w2"], inputs={"x": x}, seed=0, samples=16)
    report.passed, report.targets[0].max_abs_error

How, and why so:
- The graph is differentiated in its own dtypes, exactly as `uopgrad diff` would; then the
  gradient graph and the forward graph are both *promoted to float64* (`to_float64`: every
  float PARAM, CONST, BUFFER and node becomes float64, a float-to-float CAST disappears, a
  BITCAST keeps its bit-level meaning by casting to its original dtypes around it). So what
  is checked is the gradient graph's structure (the rules), not float32 rounding, and the
  finite differences are accurate to ~1e-10 instead of ~1e-3.
- The function differentiated is L = sum over the chosen outputs of sum(cotangent * output),
  cotangent 1 for a scalar output and seeded random values for a non-scalar one (fed to the
  gradient graph as its `cotangent_<output>` inputs).
- Inputs not given are seeded random values (values.random_value), in float64 where float.
- Per target, up to `samples` elements are picked (all when the target is that small;
  else a seeded random choice); each gets dL/dx_i = (L(x+h) - L(x-h)) / (2h) with
  h = 6e-6 * max(1, |x_i|) (about eps^(1/3), the step that balances truncation and rounding).
- DETACH means "a constant, as far as gradients go": the finite differences hold every
  DETACH value (outside function bodies) fixed at the point checked, by replacing it with
  a BUFFER of that value, so a stop-gradient is checked as the stop-gradient it is.
- Two evaluators, so that neither can hide a bug of its own: the analytic gradient is
  computed by the numpy evaluator (the fast one `uopgrad eval` uses), the finite
  differences by the reference evaluator (backends/reference: op by op, no fast paths).
  A fast path that computes a wrong value makes the two sides disagree instead of
  cancelling out; the report names both. The numpy side runs the gradient graph simplified
  as `uopgrad eval` does (tinygrad's algebraic rewrites; `simplify="exact"`, --literal, runs
  it as written), the reference side the forward graph as written; the report says which.
- An element passes when |analytic - numeric| <= ATOL * max(1, |L|) + RTOL * max(|analytic|, |numeric|);
  a NaN anywhere fails.
- A kink (relu's 0, max's tie) within h of the point spoils the central difference, not
  the gradient: an element that fails is tried again with a step KINK_STEP_FACTOR times
  smaller, and compared with that when the kink is further away than that. If even then
  the two one-sided differences disagree, L has no derivative there: the element is not
  compared (its analytic gradient is one of the one-sided values, or between them, as a
  subgradient is), and the report counts it as at a kink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .differentiate import differentiate
from ..errors import EvaluationError
from ..core.graph import Graph
from ..core.ops import CALLS, Ops, dtypes
from .inspect import counted
from ..core.substitute import substitute
from ..core.uop import CallArg, UOp
from ..core.walks import scope_sources, toposort

ANALYTIC_EVALUATOR = "numpy"       # computes the gradient graph (backends/numpy)
NUMERIC_EVALUATOR = "reference"    # computes the finite differences (backends/reference)
RTOL = 1e-4
ATOL = 1e-6
STEP = 6e-6
KINK_STEP_FACTOR = 1e-3  # the second, smaller step after a failure (rounding: ~1e-7 relative)


@dataclass
class TargetCheck:
    name: str
    samples: int                 # elements compared
    max_abs_error: float
    max_rel_error: float
    worst_index: tuple           # the element with the largest relative error
    analytic: float              # gradient at worst_index, from the gradient graph
    numeric: float               # ... and from finite differences
    passed: bool
    note: str = ""               # why a failure may be by design (a CALL's own backward body)
    kinks: int = 0               # sampled elements where L has no derivative (not compared)

    def to_dict(self) -> dict:
        return {"target": self.name, "samples": self.samples, "max_abs_error": _json_float(self.max_abs_error),
                "max_rel_error": _json_float(self.max_rel_error), "worst_index": list(self.worst_index),
                "analytic": _json_float(self.analytic), "numeric": _json_float(self.numeric), "passed": self.passed,
                "kinks": self.kinks, **({"note": self.note} if self.note else {})}


@dataclass
class CheckReport:
    of: list[str]
    seed: int
    loss: float
    targets: list[TargetCheck]
    simplify: str | None = "tinygrad"  # how the gradient graph was evaluated (evaluate_graph's simplify)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.targets)

    def to_dict(self) -> dict:
        return {"of": self.of, "seed": self.seed, "passed": self.passed, "rtol": RTOL, "atol": ATOL,
                "dtype": "float64", "evaluators": {"analytic": ANALYTIC_EVALUATOR, "numeric": NUMERIC_EVALUATOR},
                "simplified": self.simplify or "no", "targets": [t.to_dict() for t in self.targets]}

    def lines(self) -> list[str]:
        out = [f"{'target':<12} {'samples':>7} {'max abs err':>12} {'max rel err':>12}  worst at"]
        for t in self.targets:
            where = "[" + ",".join(map(str, t.worst_index)) + "]"
            out.append(f"{t.name:<12} {t.samples:>7} {t.max_abs_error:>12.3e} {t.max_rel_error:>12.3e}  "
                       f"{where} analytic {t.analytic:.6g} numeric {t.numeric:.6g}  "
                       f"{'ok' if t.passed else 'FAILED'}")
        out += [f"note: {t.name}: {t.note}" for t in self.targets if t.note]
        out += [f"note: {t.name}: {counted(t.kinks, 'sampled element')} at a kink (the one-sided differences "
                f"disagree), not compared" for t in self.targets if t.kinks]
        out.append(f"evaluators: analytic by the {ANALYTIC_EVALUATOR} evaluator on the gradient graph "
                   f"{_HOW_EVALUATED[self.simplify]}, finite differences by the {NUMERIC_EVALUATOR} evaluator (op by op)")
        failed = [t.name for t in self.targets if not t.passed]
        out.append(f"FAILED: {', '.join(failed)}" if failed else
                   f"ok: gradients of {', '.join(self.of)} match finite differences (float64)")
        return out


_HOW_EVALUATED = {"tinygrad": "simplified as tinygrad runs it (--literal: as written)",
                  "exact": "as written (--literal)",
                  None: "as written"}


def _json_float(x: float):
    return x if math.isfinite(x) else repr(x)


def check_gradients(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None,
                    inputs: Mapping | None = None, seed: int = 0, samples: int = 16,
                    progress: Callable[[int], None] | None = None, simplify: str | None = "tinygrad") -> CheckReport:
    """Compare the gradients of `graph` with respect to `wrt` with finite differences.
    `inputs` maps input names to arrays (checked by the caller); missing ones are random.
    `progress(n)` is called after every n finite-difference evaluations. `simplify` is how
    the gradient graph is evaluated (as evaluate_graph's: "tinygrad", "exact" or None)."""
    import numpy as np
    from ..backends.reference import reference_evaluate
    from ..backends.numpy import evaluate_graph
    from .values import random_value

    if samples < 1:
        raise EvaluationError(f"samples must be at least 1, got {samples}")
    grad_graph, report = differentiate(graph, wrt, of, cotangent="input")
    of = report.of
    given = dict(inputs or {})
    values = {n.arg: np.asarray(given[n.arg]) if n.arg in given else random_value(n, seed) for n in grad_graph.inputs}
    values64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in values.items()}

    grad64 = to_float64(grad_graph)
    analytic = evaluate_graph(grad64, values64, simplify=simplify)
    forward = to_float64(Graph({name: graph.outputs[name] for name in of}, inputs=graph.inputs))
    outputs = freeze_detached(list(forward.outputs.values()), values64)
    cotangents = [values64.get(f"cotangent_{name}", 1.0) for name in of]

    def loss(feed) -> float:
        results = reference_evaluate(outputs, feed)
        return float(sum(np.sum(c * r) for c, r in zip(cotangents, results)))

    base = loss(values64)
    rng = np.random.default_rng(seed)
    checks = [_check_target(name, analytic[f"grad_{name}"], values64, loss, base, rng, samples, progress)
              for name in report.wrt]
    for target in checks:
        if not target.passed:
            target.note = _custom_backward_note(graph, of, graph.input(target.name))
    return CheckReport(of, seed, base, checks, simplify)


def _custom_backward_note(graph: Graph, of: list[str], target: UOp) -> str:
    """A gradient that flows through a CALL's own backward body (a straight-through
    estimator, say) is whatever that body says, not the derivative of the forward: name
    such calls, so a failure there reads as what it may well be, a design choice."""
    depends: set[UOp] = {target}
    calls, bodies = [], []
    for node in toposort([graph.outputs[name] for name in of], with_call_grads=False):
        if node is not target and any(s in depends for s in node.src):
            depends.add(node)
            if node.op == Ops.CALL and node.arg.grad is not None:
                calls.append(node.arg.name)
            if node.op in CALLS:
                bodies.append(node.src[0])
    # inside a function the target is a slot: name every CALL of such a body (and of the
    # bodies it calls) that has a backward body of its own
    calls += [node.arg.name for node in toposort(bodies, with_call_grads=False)
              if node.op == Ops.CALL and node.arg.grad is not None]
    if not calls:
        return ""
    names = ", ".join(dict.fromkeys(calls))
    return (f"its gradient passes through CALL {names}, whose backward body is given, not derived: "
            f"finite differences of the forward need not match it")


def _check_target(name, analytic, values64, loss, base, rng, samples, progress) -> TargetCheck:
    import numpy as np
    x = values64[name]
    picks = np.arange(x.size) if x.size <= samples else np.sort(rng.choice(x.size, samples, replace=False))
    scale = ATOL * max(1.0, abs(base)) if math.isfinite(base) else ATOL
    worst = (-1.0, (), math.nan, math.nan)  # relative error, index, analytic, numeric
    max_abs, passed = 0.0, True
    kinks = 0
    for flat in picks:
        index = tuple(int(i) for i in np.unravel_index(int(flat), x.shape))
        a = float(analytic[index])

        def agrees(numeric: float) -> bool:
            return _agree(a, numeric, scale)

        numeric = _central_difference(name, values64, index, loss)
        ok = agrees(numeric)
        if not ok and math.isfinite(numeric) and math.isfinite(a):
            closer = _central_difference(name, values64, index, loss, KINK_STEP_FACTOR)
            down, up = _one_sided_differences(name, values64, index, loss, base, KINK_STEP_FACTOR)
            if agrees(closer):  # the kink was within the first step only
                numeric, ok = closer, True
            elif not _agree(down, up, scale) and min(down, up) - scale <= a <= max(down, up) + scale:
                kinks += 1  # no derivative here: a subgradient is all one can ask
                if progress is not None:
                    progress(1)
                continue
        abs_err = abs(a - numeric)
        rel_err = abs_err / max(abs(a), abs(numeric), 1e-300)
        if math.isnan(abs_err):
            abs_err = rel_err = math.inf
        passed = passed and ok
        max_abs = max(max_abs, abs_err)
        if rel_err > worst[0]:
            worst = (rel_err, index, a, numeric)
        if progress is not None:
            progress(1)
    if not picks.size:  # an empty target: nothing to compare, nothing wrong
        return TargetCheck(name, 0, 0.0, 0.0, (), 0.0, 0.0, True)
    if worst[0] < 0:  # every sample at a kink
        worst = (0.0, (), math.nan, math.nan)
    return TargetCheck(name, len(picks) - kinks, max_abs, worst[0], worst[1], worst[2], worst[3], passed,
                       kinks=kinks)


def _agree(a: float, b: float, scale: float) -> bool:
    """The check's tolerance: |a - b| <= scale + RTOL * max(|a|, |b|); False when either is NaN."""
    return bool(abs(a - b) <= scale + RTOL * max(abs(a), abs(b)))


def _one_sided_differences(name, values64, index, loss, base: float, factor: float) -> tuple[float, float]:
    """(L(x) - L(x - h)) / h and (L(x + h) - L(x)) / h, h the central step times `factor`."""
    import numpy as np
    x = values64[name]
    original = float(x[index])
    step = STEP * factor * max(1.0, abs(original))
    feed = dict(values64)
    sides = []
    with np.errstate(all="ignore"):
        for sign in (-1, 1):
            shifted = np.array(x, copy=True)
            shifted[index] = original + sign * step
            actual = abs(shifted[index] - original)
            feed[name] = shifted
            sides.append(sign * (loss(feed) - base) / actual)
    return sides[0], sides[1]


def _central_difference(name, values64, index, loss, factor: float = 1.0) -> float:
    import numpy as np
    x = values64[name]
    original = float(x[index])
    step = STEP * factor * max(1.0, abs(original))
    feed = dict(values64)
    with np.errstate(all="ignore"):  # inf or nan inputs give a nan difference, reported as such
        shifted = np.array(x, copy=True)
        shifted[index] = original + step
        up_step = shifted[index] - original
        feed[name] = shifted
        up = loss(feed)
        shifted = np.array(x, copy=True)
        shifted[index] = original - step
        down_step = original - shifted[index]
        feed[name] = shifted
        down = loss(feed)
        return float((up - down) / (up_step + down_step))


# ----------------------------------------------------------------------------- DETACH

def freeze_detached(outputs: list[UOp], values: Mapping) -> list[UOp]:
    """`outputs` with every DETACH outside function bodies replaced by a BUFFER of its value
    for the inputs `values`: the function finite differences must match when gradients do
    not flow through DETACH. (A DETACH inside a body takes other values at every call, so
    it stays; that is rare.)"""
    from ..backends.reference import reference_evaluate
    detached = [n for n in _main_scope(outputs) if n.op == Ops.DETACH]
    if not detached:
        return outputs
    frozen = {node: UOp.buffer(value) for node, value in zip(detached, reference_evaluate(detached, values))}
    return substitute(outputs, frozen, into_bodies=True, into_backward=True)


def _main_scope(roots: list[UOp]) -> list[UOp]:
    """The nodes reachable from `roots` without entering a call's body or backward body."""
    seen, stack, order = set(roots), list(roots), []
    while stack:
        node = stack.pop()
        order.append(node)
        for s in scope_sources(node):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return order


# ----------------------------------------------------------------------------- float64

def to_float64(graph: Graph) -> Graph:
    """The same graph computed in float64: every float node (inputs, constants, buffers,
    function slots, call bodies and backward bodies) becomes float64. Integer and bool
    nodes stay; a CAST between floats disappears; a BITCAST casts back to its original
    source dtype first (and its float result on to float64), so it means what it meant."""
    promoted: dict[UOp, UOp] = {}
    for node in toposort([*graph.outputs.values(), *graph.inputs]):
        promoted[node] = _promote(node, promoted)
    outputs = [(name, promoted[node]) for name, node in graph.outputs.items()]
    return Graph(outputs, inputs=[promoted[n] for n in graph.inputs], meta=graph.meta)


def _wide(dtype):
    return dtypes.float64 if dtype.is_float else dtype


def _promote(node: UOp, promoted: dict) -> UOp:
    op, dtype = node.op, node.dtype
    if op == Ops.PARAM:
        return UOp.param(node.arg, node.shape, _wide(dtype)) if dtype.is_float else node
    if op == Ops.CONST:
        return UOp.const(node.arg, dtypes.float64) if dtype.is_float else node
    if op == Ops.BUFFER:
        return UOp.buffer(node.buffer_array().astype("float64")) if dtype.is_float else node
    if op == Ops.NOOP:
        return node
    src = tuple(promoted[s] for s in node.src)
    if op == Ops.CAST:
        return src[0] if src[0].dtype is _wide(dtype) else UOp.make(Ops.CAST, _wide(dtype), src)
    if op == Ops.BITCAST:
        source_dtype = node.src[0].dtype
        bits = UOp.make(Ops.BITCAST, dtype, (src[0].cast(source_dtype),))
        return bits.cast(dtypes.float64) if dtype.is_float else bits
    arg = node.arg
    if op == Ops.CALL and arg.grad is not None:
        arg = CallArg(arg.name, promoted[arg.grad])
    return UOp.make(op, _wide(dtype), src, arg)
