"""Forward mode against PyTorch in float64: `jvp` against torch.func.jvp, `hvp` against
torch.func.vjp of torch.func.grad, `jacobian` against jacfwd and `hessian` against
torch.func.hessian, on the samples and on the core test models (every rule's case of
test_gradient.py, and the benchmark's MLP, attention and chain families). Relative error
(max |ours - torch| / max |torch|) at most 1e-10.

torch differentiates its own ops: the graph is run in torch by a small interpreter (one
torch function per op), so what is compared is our rules against torch's."""

import glob
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0 where it can)")

from test_forward import CASES  # noqa: E402
from uopcli import Ops, UOp, dtypes  # noqa: E402
from uopcli.backends.numpy import evaluate_graph  # noqa: E402
from uopcli.core.graph import Graph  # noqa: E402
from uopcli.formats.uop import load  # noqa: E402
from uopcli.tools import forward  # noqa: E402
from uopcli.tools.check import to_float64  # noqa: E402
from uopcli.tools.values import random_value  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
REL_TOL = 1e-10
f64 = dtypes.float64


# ----------------------------------------------------------------------------- the interpreter

def _torch_dtype(dtype):
    return getattr(torch, "bool" if dtype.name == "bool" else dtype.name)


def _reduce(x, op, axes):
    if op == "ADD":
        return x.sum(dim=axes, keepdim=True)
    if op == "MAX":
        return x.amax(dim=axes, keepdim=True)
    for axis in axes:
        x = x.prod(dim=axis, keepdim=True)
    return x


def _pad(x, pairs):
    flat = [amount for before, after in reversed(pairs) for amount in (before, after)]
    return torch.nn.functional.pad(x, flat)


ELEMENTWISE = {
    Ops.NEG: torch.neg, Ops.RECIPROCAL: torch.reciprocal, Ops.SQRT: torch.sqrt, Ops.EXP2: torch.exp2,
    Ops.LOG2: torch.log2, Ops.SIN: torch.sin, Ops.TRUNC: torch.trunc,
    Ops.ADD: torch.add, Ops.SUB: torch.sub, Ops.MUL: torch.mul, Ops.FDIV: torch.div, Ops.MAX: torch.maximum,
    Ops.POW: torch.pow, Ops.CDIV: lambda a, b: torch.div(a, b, rounding_mode="trunc"), Ops.CMOD: torch.fmod,
    Ops.AND: torch.bitwise_and, Ops.OR: torch.bitwise_or, Ops.XOR: torch.bitwise_xor,
    Ops.SHL: torch.bitwise_left_shift, Ops.SHR: torch.bitwise_right_shift,
    Ops.CMPLT: torch.lt, Ops.CMPNE: torch.ne, Ops.CMPEQ: torch.eq,
    Ops.WHERE: torch.where, Ops.MULACC: lambda a, b, c: a * b + c,
}


def torch_run(roots, inputs: dict, slots=()):
    """The values of `roots` computed by torch ops from `inputs` (name -> tensor)."""
    from uopcli.core.walks import scope_toposort
    values = {}
    for node in scope_toposort(roots):
        op, src = node.op, [values.get(s) for s in node.src]
        if op == Ops.PARAM:
            value = inputs[node.arg] if isinstance(node.arg, str) else slots[node.arg]
        elif op == Ops.CONST:
            value = torch.tensor(node.arg, dtype=_torch_dtype(node.dtype))
        elif op == Ops.BUFFER:
            value = torch.from_numpy(np.array(node.buffer_array()))
        elif op in ELEMENTWISE:
            value = ELEMENTWISE[op](*src)
        elif op == Ops.CAST:
            value = src[0].to(_torch_dtype(node.dtype))
        elif op == Ops.BITCAST:
            value = src[0].view(_torch_dtype(node.dtype))
        elif op == Ops.REDUCE:
            value = _reduce(src[0], *node.arg)
        elif op == Ops.RESHAPE:
            value = src[0].reshape(node.arg)
        elif op == Ops.EXPAND:
            value = src[0].expand(node.arg)
        elif op == Ops.PERMUTE:
            value = src[0].permute(node.arg)
        elif op == Ops.PAD:
            value = _pad(src[0], node.arg)
        elif op == Ops.SHRINK:
            value = src[0][tuple(slice(s, e) for s, e in node.arg)]
        elif op == Ops.FLIP:
            dims = [i for i, f in enumerate(node.arg) if f]
            value = src[0].flip(dims) if dims else src[0]
        elif op in (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.COPY):
            value = src[0]
        elif op == Ops.DETACH:
            value = src[0].detach()
        elif op == Ops.TUPLE:
            value = tuple(src)
        elif op in (Ops.FUNCTION, Ops.CALL):
            value = tuple(torch_run(list(node.src[0].src), inputs, src[1:]))
        elif op == Ops.GETTUPLE:
            value = src[0][node.arg]
        elif op == Ops.STORE:
            value = src[1]
        elif op == Ops.AFTER:
            value = src[1]
        else:
            raise AssertionError(f"no torch op for {op}")
        values[node] = value
    return [values[r] for r in roots]


def _function(graph: Graph, output: str, wrt: list[str], values: dict):
    """f(*wrt tensors) -> output, the other inputs held at `values`."""
    root = graph.outputs[output]

    def f(*args):
        feed = {name: torch.from_numpy(np.array(v)) for name, v in values.items()}
        feed.update(zip(wrt, args))
        return torch_run([root], feed)[0]
    return f


def _rel_error(ours, theirs) -> float:
    theirs = theirs.detach().numpy()
    return float(np.max(np.abs(ours - theirs), initial=0.0) / max(np.max(np.abs(theirs), initial=0.0), 1e-300))


# ----------------------------------------------------------------------------- the models

def _samples():
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "*.uop"))):
        name = os.path.basename(path)[:-4]
        if name == "ste":   # a CALL with its own backward body: refused by forward mode (tested in test_forward.py)
            continue
        yield name, load(path)


def _core_models():
    import graphs
    for family, size in (("mlp", 2), ("attention", 1), ("chain", 6)):
        params = {}

        def param(name, shape):
            params[name] = UOp.param(name, shape, f64)
            return params[name]
        loss, _ = graphs.FAMILIES[family](param, size)
        yield family, Graph({"loss": loss}, inputs=list(params.values()))
    for case in ("MUL", "FDIV", "MAX", "POW", "WHERE", "MULACC", "SIN", "reduce max", "reduce prod",
                 "movement PAD", "movement PERMUTE", "movement softmax", "movement matmul"):
        build, inputs = CASES[case]
        params = {k: UOp.param(k, np.shape(v), f64) for k, v in inputs.items()}
        y = build(**params)
        yield f"case {case}", Graph({"y": y, "loss": (y * y).sum()}, inputs=list(params.values()))


MODELS = dict([*_samples(), *_core_models()])
CASE_VALUES = {f"case {c}": {k: np.asarray(v, np.float64) for k, v in CASES[c][1].items()} for c in CASES}


def _setup(name):
    graph = to_float64(MODELS[name])
    values = CASE_VALUES.get(name) or {n.arg: random_value(n, 0).astype(np.float64) if n.dtype.is_float
                                       else random_value(n, 0) for n in graph.inputs}
    wrt = [n.arg for n in graph.inputs if n.dtype.is_float]
    loss = "loss" if "loss" in graph.outputs else next(iter(graph.outputs))
    return graph, values, wrt, loss


def _smallest(graph, wrt, count=2):
    return sorted(wrt, key=lambda n: (int(np.prod(graph.input(n).shape)), wrt.index(n)))[:count]


# ----------------------------------------------------------------------------- the comparisons

def _jvp_matches_torch_func_jvp(name):
    graph, values, wrt, _ = _setup(name)
    ours = forward.jvp(graph, wrt)
    rng = np.random.default_rng(1)
    tangents = {f"tangent_{n}": rng.standard_normal(graph.input(n).shape) for n in wrt}
    got = evaluate_graph(ours, {**values, **tangents})
    for output in ours.meta["jvp_of"].split(","):
        f = _function(graph, output, wrt, values)
        primals = tuple(torch.from_numpy(np.array(values[n])) for n in wrt)
        _, expected = torch.func.jvp(f, primals, tuple(torch.from_numpy(tangents[f"tangent_{n}"]) for n in wrt))
        assert _rel_error(got[f"jvp_{output}"], expected) <= REL_TOL, output


def _hvp_matches_vjp_of_grad(name):
    graph, values, wrt, loss = _setup(name)
    ours = forward.hvp(graph, wrt, [loss])
    rng = np.random.default_rng(2)
    tangents = {f"tangent_{n}": rng.standard_normal(graph.input(n).shape) for n in wrt}
    got = evaluate_graph(ours, {**values, **tangents})
    f = _function(graph, loss, wrt, values)
    primals = tuple(torch.from_numpy(np.array(values[n])) for n in wrt)
    _, vjp = torch.func.vjp(torch.func.grad(f, argnums=tuple(range(len(wrt)))), *primals)
    expected = vjp(tuple(torch.from_numpy(tangents[f"tangent_{n}"]) for n in wrt))
    for n, e in zip(wrt, expected):
        assert _rel_error(got[f"hvp_{n}"], e) <= REL_TOL, n


def _jacobian_matches_jacfwd(name):
    graph, values, wrt, _ = _setup(name)
    chosen = _smallest(graph, wrt)
    outputs = [n for n, o in graph.outputs.items() if o.dtype.is_float]
    ours = forward.jacobian(graph, chosen, outputs, chunk=7)
    got = evaluate_graph(ours, values)
    for output in outputs:
        f = _function(graph, output, chosen, values)
        primals = tuple(torch.from_numpy(np.array(values[n])) for n in chosen)
        expected = torch.func.jacfwd(f, argnums=tuple(range(len(chosen))))(*primals)
        for n, e in zip(chosen, expected):
            mine = got[f"jacobian_{output}_{n}"]
            assert mine.shape == tuple(e.shape)
            assert _rel_error(mine, e) <= REL_TOL, (output, n)


def _hessian_matches_torch_hessian(name):
    graph, values, wrt, loss = _setup(name)
    chosen = _smallest(graph, wrt)
    ours = forward.hessian(graph, chosen, [loss], chunk=16)
    got = evaluate_graph(ours, values)
    f = _function(graph, loss, chosen, values)
    primals = tuple(torch.from_numpy(np.array(values[n])) for n in chosen)
    expected = torch.func.hessian(f, argnums=tuple(range(len(chosen))))(*primals)
    for i, a in enumerate(chosen):
        for k, b in enumerate(chosen):
            mine = got[f"hessian_{a}_{b}"]
            assert mine.shape == tuple(expected[i][k].shape)
            assert _rel_error(mine, expected[i][k]) <= REL_TOL, (a, b)


def _each_model(check) -> None:
    """check(name) on every model, the failures gathered (one test per comparison: a test's
    teardown collects garbage, and with torch loaded that costs a second)."""
    failures = []
    for name in MODELS:
        try:
            check(name)
        except AssertionError as error:
            failures.append(f"{name}: {error}")
    assert not failures, failures


def test_jvp_matches_torch_func_jvp():
    _each_model(_jvp_matches_torch_func_jvp)


def test_hvp_matches_vjp_of_grad():
    _each_model(_hvp_matches_vjp_of_grad)


def test_jacobian_matches_jacfwd():
    _each_model(_jacobian_matches_jacfwd)


def test_hessian_matches_torch_hessian():
    _each_model(_hessian_matches_torch_hessian)


def test_the_interpreter_computes_the_graphs_values():
    """The torch side runs the same function: its values are the numpy evaluator's."""
    for name in MODELS:
        graph, values, wrt, loss = _setup(name)
        ours = evaluate_graph(graph, values)
        theirs = torch_run([graph.outputs[loss]], {k: torch.from_numpy(np.array(v)) for k, v in values.items()})[0]
        assert _rel_error(ours[loss], theirs) <= 1e-12, name
