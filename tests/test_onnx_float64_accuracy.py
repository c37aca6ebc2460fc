"""float64 ONNX elementwise ops, and log Σeˣ and LogSoftmax, computed to float64, values and
gradients, against mpmath at 40 digits (uopcli/interop/onnx/float64.py). The builder's forms
are float32's: its exp is 2^(x·log2 e), |x| ulps off; log(1 + eˣ), eˣ - 1 and 1/(1 + eˣ)
lose every digit where the 1 swamps the other term, and so does log Σeˣ when the largest
term swamps the others; cos is sin(π/2 - x), whose π/2 - x rounds; eˣ/2 overflows before
cosh does; x/(1 + |x|)'s slope cancels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime
from uopcli import Graph, UOp, evaluate_graph

_, ort = need_onnx_and_runtime()
mp = pytest.importorskip("mpmath")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from test_onnx_edges import _one_node  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402
from uopcli.tools.forward import hvp, jvp  # noqa: E402

mp.mp.dps = 40
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _sigmoid(x):
    return 1 / (1 + mp.exp(-x))


def _softplus(x):
    return mp.log1p(mp.exp(x))


# op: (opset, value, slope)
OPS = {
    "Exp": (13, mp.exp, mp.exp),
    "Sigmoid": (13, _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x)),
    "Swish": (24, lambda x: x * _sigmoid(x), lambda x: _sigmoid(x) + x * _sigmoid(x) * _sigmoid(-x)),
    "Softplus": (22, _softplus, _sigmoid),
    "Mish": (22, lambda x: x * mp.tanh(_softplus(x)),
             lambda x: mp.tanh(_softplus(x)) + x * mp.sech(_softplus(x)) ** 2 * _sigmoid(x)),
    "Elu": (22, lambda x: x if x >= 0 else mp.expm1(x), lambda x: 1 if x >= 0 else mp.exp(x)),
    "Celu": (22, lambda x: x if x > 0 else mp.expm1(x), lambda x: 1 if x > 0 else mp.exp(x)),
    "Selu": (22, lambda x: SELU_GAMMA * (x if x > 0 else SELU_ALPHA * mp.expm1(x)),
             lambda x: SELU_GAMMA * (1 if x > 0 else SELU_ALPHA * mp.exp(x))),
    "Sinh": (22, mp.sinh, mp.cosh),
    "Cosh": (22, mp.cosh, mp.sinh),
    "Sin": (22, mp.sin, mp.cos),
    "Cos": (22, mp.cos, lambda x: -mp.sin(x)),
    "Tan": (22, mp.tan, lambda x: mp.sec(x) ** 2),
    "Softsign": (22, lambda x: x / (1 + abs(x)), lambda x: 1 / (1 + abs(x)) ** 2),
}

_QUARTERS = np.pi / 2 * np.arange(-64, 65)
# dense, tiny and large magnitudes, the overflow edges of exp and cosh, multiples of π/2 and
# their neighbours (where cos was all wrong), the branch ends (±0.5, -1)
GRID = np.concatenate([np.linspace(-12, 12, 241), np.geomspace(1e-300, 1, 60), -np.geomspace(1e-300, 1, 60),
                       np.geomspace(10, 800, 40), -np.geomspace(10, 800, 40), np.linspace(709, 711, 17),
                       -np.linspace(700, 746, 24), _QUARTERS, np.nextafter(_QUARTERS, np.inf),
                       np.nextafter(_QUARTERS, -np.inf), [1e5 + 0.1, -3e5 - 0.3, 8e5], np.nextafter([-1.0, -0.5, 0.5], 0.0),
                       np.nextafter([-1.0, -0.5, 0.5], -np.inf)])
TINY = 2.2250738585072014e-308


def _graph(op: str, opset: int, size: int) -> Graph:
    node = helper.make_node(op, ["x"], ["out"])
    graph = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [size])],
                              [helper.make_tensor_value_info("out", TensorProto.DOUBLE, None)])
    return import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))[0]


def _truth(f, x: np.ndarray) -> np.ndarray:
    return np.array([float(f(mp.mpf(v))) for v in x])


def _assert_close(got, want, rtol: float, what: str):
    """Relative error where the truth is a normal float64 (a subnormal has fewer digits)."""
    normal = np.isfinite(want) & (np.abs(want) >= TINY)
    error = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    worst = int(np.argmax(error))
    assert error[worst] <= rtol, f"{what}: {error[worst]:.3g} off at x = {GRID[normal][worst]!r}"


@pytest.mark.parametrize("op", list(OPS))
def test_float64_op_values_and_slopes_to_float64(op):
    opset, value, slope = OPS[op]
    graph = _graph(op, opset, len(GRID))
    got = evaluate_graph(graph, {"x": GRID})["out"]
    _assert_close(got, _truth(value, GRID), 1e-15 if op not in ("Mish", "Swish") else 1e-14, f"{op} value")
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": GRID})["grad_x"]
    if op == "Sin":  # SIN itself, so that our own exported Sin reads back bit for bit: its slope is
        # the reverse rule's cos, sin(π/2 - x), off by up to about ulp(x) absolutely (π/2 - x
        # rounds), as much as x's own rounding moves cos x; relative only away from cos's zeros
        want = _truth(slope, GRID)
        bound = 1e-14 * np.abs(want) + np.spacing(np.abs(GRID)) + 3e-16
        assert np.all(np.abs(slopes - want) <= bound), f"Sin slope: {np.max(np.abs(slopes - want) / bound):.3g} bounds off"
        return
    _assert_close(slopes, _truth(slope, GRID), 1e-14 if op not in ("Mish", "Swish") else 1e-13, f"{op} slope")


# the limits, the sign of a zero and nan: as math (and onnxruntime) give them
EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("op", list(OPS))
def test_float64_op_edges_as_math_gives_them(op):
    graph = _graph(op, OPS[op][0], len(EDGES))
    got = evaluate_graph(graph, {"x": EDGES})["out"]
    python = {"Exp": math.exp, "Sinh": math.sinh, "Cosh": math.cosh, "Sin": math.sin, "Cos": math.cos,
              "Tan": math.tan}.get(op)
    for x, y in zip(EDGES, got):
        if python is not None:
            try:
                want = python(x)
            except (ValueError, OverflowError):
                want = math.nan if math.isinf(x) and op in ("Sin", "Cos", "Tan") else math.copysign(math.inf, x)
            if op == "Exp" and x == -math.inf:
                want = 0.0
            if op == "Cosh" and math.isinf(x):
                want = math.inf
        elif x == 0:  # mpmath has no -0.0: x itself for Elu, Swish, Mish, Softsign (x·...), +0.0 for eˣ - 1
            want = x if op in ("Elu", "Swish", "Mish", "Softsign") else float(OPS[op][1](mp.mpf(x)))
        else:
            want = float(OPS[op][1](mp.mpf(x))) if math.isfinite(x) else y  # the limits: below
        assert (math.isnan(y) and math.isnan(want)) or (y == want and math.copysign(1, y) == math.copysign(1, want)), \
            f"{op}({x}) = {y}, not {want}"
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": np.array([0.0, -0.0, 1e-300, -1e-300, 800.0])})["grad_x"]
    assert np.all(np.isfinite(slopes[:4])), f"{op}: the slope at 0 is {slopes[:4]}"
    if op in ("Sigmoid", "Softplus"):
        ends = evaluate_graph(graph, {"x": np.array([np.inf, -np.inf, np.nan, -800.0, 800.0])})["out"]
        assert ends[1] == 0 and np.isnan(ends[2]) and ends[3] <= 0 and ends[0] == (1.0 if op == "Sigmoid" else np.inf)


def test_float64_acosh_near_one_and_far_out():
    """Acosh: log(x + √(x² - 1)) cancelled near 1 (x² - 1: 2e-7 off) and overflowed beyond
    1.3e154 (x²); now values within 1e-15 and slopes 1/√(x² - 1) within 1e-13 from 1 + 1e-15
    to 1e308, nan below 1, inf at inf."""
    x = np.concatenate([1 + np.geomspace(1e-15, 1, 40), np.geomspace(2, 1e308, 60), [1e8, np.nextafter(1e8, 2e8)]])
    graph = _graph("Acosh", 22, len(x))
    got = evaluate_graph(graph, {"x": x})["out"]
    np.testing.assert_allclose(got, [float(mp.acosh(mp.mpf(v))) for v in x], rtol=1e-15, atol=0)
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": x})["grad_x"]
    want = np.array([float(1 / mp.sqrt(mp.mpf(v) ** 2 - 1)) for v in x])
    normal = want > TINY
    np.testing.assert_allclose(slopes[normal], want[normal], rtol=1e-13, atol=0)
    edges = _graph("Acosh", 22, 5)
    with np.errstate(invalid="ignore"):
        ends = evaluate_graph(edges, {"x": np.array([1.0, 0.5, -np.inf, np.inf, np.nan])})["out"]
    assert ends[0] == 0 and np.isnan(ends[1]) and np.isnan(ends[2]) and ends[3] == np.inf and np.isnan(ends[4])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulps of want (a subnormal's ulp is 2^-1074); 0 where equal."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(got == want, 0.0, np.abs(got - want) / np.spacing(np.abs(want)))


# x/(1 + |x|) from 1e-300 to 1e300: its slope 1/(1 + |x|)² is 1e-16 at 1e8 and 1e-40 at 1e20
# (the form's slope (1 - |y|)/(1 + |x|) was 4e-9 off at 1e8 and 0 from 1e16)
SOFTSIGN_FAR = np.array([1e-300, 1e-8, 0.5, 1.0, np.nextafter(1.0, 0.0), 1.5, 1e8, 1e16, 1e20, 1e150, 1e300])


def test_float64_softsign_far_out_and_at_its_limits():
    """Values to an ulp, slopes to 3 in reverse and forward mode, out to 1e300."""
    x = np.concatenate([SOFTSIGN_FAR, -SOFTSIGN_FAR, np.geomspace(1, 1e300, 301), -np.linspace(0, 30, 301)])
    graph = _graph("Softsign", 22, len(x))
    got = evaluate_graph(graph, {"x": x})["out"]
    assert _ulps(got, _truth(lambda v: v / (1 + abs(v)), x)).max() <= 1
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    want = _truth(lambda v: 1 / (1 + abs(v)) ** 2, x)
    assert _ulps(evaluate_graph(gradient, {"x": x})["grad_x"], want).max() <= 3
    tangents = evaluate_graph(jvp(graph, ["x"]), {"x": x, "tangent_x": np.ones_like(x)})["jvp_out"]
    assert _ulps(tangents, want).max() <= 3
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])  # ±inf: nan (inf/inf), as float32 and the peers
    graph = _graph("Softsign", 22, len(edges))
    got = evaluate_graph(graph, {"x": edges})["out"]
    assert np.array_equal(got, [0.0, -0.0, np.nan, np.nan, np.nan], equal_nan=True) and np.signbit(got[1])
    model = _one_node("Softsign", {"x": edges}, {}, {}, 22)
    with np.errstate(all="ignore"):  # onnxruntime has no float64 Softsign
        theirs = ReferenceEvaluator(model).run(None, {"x": edges})[0]
    assert np.array_equal(got, theirs, equal_nan=True) and np.signbit(theirs[1])
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    assert np.array_equal(evaluate_graph(gradient, {"x": edges})["grad_x"], [1.0, 1.0, 0.0, 0.0, np.nan], equal_nan=True)


def _rows(*rows) -> np.ndarray:
    return np.array(rows, np.float64)


# rows of 4 whose x - max is exact (mpmath's truth is of the given x; a rounded x - max is an
# error of |x - max| ulps in e^(x - max) that no form of the sum can undo): one largest and the
# rest below an ulp of it (e^-37 = 8.5e-17), ties, subnormal and underflowing terms, far shifts
_RNG = np.random.default_rng(41)
LSE_ROWS = np.concatenate([_rows([0, -41, -50, -60], [0, -37, -37, -1000], [5, -36, -36.5, -40], [0, 0, -41, -41],
                                 [-3, -53, -63, -3], [0, -1, -2, -3], [0, -1e-10, -2, -745], [700, 0, -1, -2],
                                 [-700, -741, -745, -800], [1e-20, 0, -5, -9], [0, -700, -710, -744],
                                 [2, 2, 2, 2], [-1e300, -1e300, -1e300, -1e300 - 2e284]),
                           np.round(_RNG.normal(0, 1, (8, 4)) * 8) / 8, np.round(_RNG.normal(0, 30, (8, 4)) * 8) / 8])


def _log_sum_exp_truth(row):
    """(largest, Σe^(x - largest) - 1) of a row, in mpmath: the 1 of the largest kept apart,
    as 40 digits would lose a term below 1e-40 of it."""
    xs = [mp.mpf(v) for v in row]
    top = max(xs)
    return top, mp.fsum([mp.exp(v - top) for v in xs if v != top]) + (xs.count(top) - 1)


def _lse_graph(x: np.ndarray):
    model = _one_node("ReduceLogSumExp", {"x": x}, {"axes": np.array([1], np.int64)}, {"keepdims": 0})
    return import_model(model)[0]


def test_float64_log_sum_exp_keeps_the_terms_below_an_ulp_of_the_largest():
    """ReduceLogSumExp to an ulp and its slope (softmax) to 3: m + log Σe^(x - m) returned m
    itself where the rest was below an ulp of the largest term (log(1 + 1.6e-18) is 0), and
    its exp was |x - m| ulps off."""
    graph = _lse_graph(LSE_ROWS)
    truth = [_log_sum_exp_truth(row) for row in LSE_ROWS]
    got = evaluate_graph(graph, {"x": LSE_ROWS})["out"]
    assert _ulps(got, [float(top + mp.log1p(rest)) for top, rest in truth]).max() <= 1
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": LSE_ROWS})["grad_x"]
    want = [[float(mp.exp(mp.mpf(v) - top - mp.log1p(rest))) for v in row] for row, (top, rest) in zip(LSE_ROWS, truth)]
    assert _ulps(slopes, want).max() <= 3


def _log_softmax_jacobian(x: np.ndarray):
    """LogSoftmax along axis 1 of each row of x, and J[r, i, j] = d out[r, i] / d x[r, j]
    twice: by `diff`, the gradient of Σ c·out for each cotangent c = e_i, and by `jvp`
    along each tangent e_j, each in one evaluation (each row of x repeated n times)."""
    rows, n = x.shape
    graph = import_model(_one_node("LogSoftmax", {"x": x}, {}, {"axis": 1}, 13))[0]
    values = evaluate_graph(graph, {"x": x})["out"]
    wide = import_model(_one_node("LogSoftmax", {"x": np.repeat(x, n, 0)}, {}, {"axis": 1}, 13))[0]
    out = wide.outputs["out"]
    cotangent = UOp.param("c", out.shape, out.dtype)
    gradient, _ = differentiate(Graph({"loss": (out * cotangent).sum()}), ["x"])
    units = np.tile(np.eye(n), (rows, 1))
    reverse = evaluate_graph(gradient, {"x": np.repeat(x, n, 0), "c": units})["grad_x"].reshape(rows, n, n)
    forward = evaluate_graph(jvp(wide, ["x"]), {"x": np.repeat(x, n, 0), "tangent_x": units})["jvp_out"]
    return values, reverse, forward.reshape(rows, n, n).transpose(0, 2, 1)


def _log_softmax_truth(row):
    """Values and Jacobian δij - p_j of one row in mpmath; the largest's own 1 - p, where it is
    alone, as rest/(1 + rest) (1 - p would need more than 40 digits)."""
    top, rest = _log_sum_exp_truth(row)
    shifted = [mp.mpf(v) - top for v in row]
    p = [mp.exp(d - mp.log1p(rest)) for d in shifted]
    alone = list(row).count(max(row)) == 1
    jacobian = [[(rest / (1 + rest) if alone and row[i] == max(row) else 1 - p[i]) if i == j else -p[j]
                 for j in range(len(row))] for i in range(len(row))]
    return [float(d - mp.log1p(rest)) for d in shifted], [[float(v) for v in line] for line in jacobian]


def test_float64_log_softmax_of_the_largest_and_its_slopes():
    """LogSoftmax to 2 ulps and every entry of its Jacobian to 4, in reverse and forward
    mode: the largest's output was 0
    where the rest was below an ulp of it, and its slope to itself, 1 - p with p = 1/Σ
    rounded to 1, 0; the slopes to the largest stay as they were (-p, exact), also among 300
    close values (where the largest's own output comes back through the others' Σ p)."""
    values, reverse, forward = _log_softmax_jacobian(LSE_ROWS)
    for row, got, slopes, tangents in zip(LSE_ROWS, values, reverse, forward):
        want, want_slopes = _log_softmax_truth(row)
        assert _ulps(got, want).max() <= 2, (row, got, want)
        assert _ulps(slopes, want_slopes).max() <= 4, (row, slopes, want_slopes)
        assert _ulps(tangents, want_slopes).max() <= 4, (row, tangents, want_slopes)
    close = np.round(_RNG.uniform(-2, 0, (1, 300)) * 8) / 8
    close[0, 7] = 0.125  # alone at the top, p = 1/250
    values, reverse, forward = _log_softmax_jacobian(close)
    want, want_slopes = _log_softmax_truth(close[0])
    assert _ulps(values[0], want).max() <= 2
    assert _ulps(reverse[0], want_slopes).max() <= 4 and _ulps(forward[0], want_slopes).max() <= 4


def test_float64_log_sum_exp_and_log_softmax_at_their_limits():
    """Non-finite rows give what they gave: log Σeˣ is -inf for a row of -inf (and for no
    element), inf with +inf, nan with nan, as onnxruntime; LogSoftmax is -inf where x is,
    nan for a row of -inf or with +inf (inf - inf), as onnx.reference."""
    x = _rows([-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0], [np.inf, np.inf], [np.inf, -np.inf], [1.0, -np.inf],
              [-0.0, 0.0], [0.0, -np.inf])
    model = _one_node("ReduceLogSumExp", {"x": x}, {"axes": np.array([1], np.int64)}, {"keepdims": 0})
    got = evaluate_graph(import_model(model)[0], {"x": x})["out"]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(got, [-np.inf, np.inf, np.nan, np.inf, np.inf, 1.0, math.log(2), 0.0], equal_nan=True)
    assert np.array_equal(got, theirs, equal_nan=True)
    empty = np.zeros((2, 0))
    model = _one_node("ReduceLogSumExp", {"x": empty}, {"axes": np.array([1], np.int64)}, {"keepdims": 0})
    assert np.array_equal(evaluate_graph(import_model(model)[0], {"x": empty})["out"], [-np.inf, -np.inf])
    model = _one_node("LogSoftmax", {"x": x}, {}, {"axis": 1}, 13)
    got = evaluate_graph(import_model(model)[0], {"x": x})["out"]
    nan, inf = np.nan, np.inf
    want = [[nan, nan], [nan, nan], [nan, nan], [nan, nan], [nan, nan], [0.0, -inf], [-math.log(2)] * 2, [0.0, -inf]]
    assert np.array_equal(got, want, equal_nan=True)
    with np.errstate(all="ignore"):
        assert np.array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0], equal_nan=True)


def test_float64_log_sum_exp_second_derivatives_at_ties():
    """The largest's e^(x - m) - 1, 0 for each tie, still has e^(x - m)'s derivatives: the
    Hessian diag(p) - ppᵀ of log Σeˣ by `hvp` (forward over reverse) to 4 ulps where ties
    hold the top (a tie's term as the constant 0 would give 0 for its row)."""
    x = _rows([0, 0, -1, -41], [1, 1, 1, 1], [-2, 5, 5, 3], [0, 0, -41, -41])
    rows, n = x.shape
    graph = _lse_graph(np.repeat(x, n, 0))
    hessian = evaluate_graph(hvp(graph, ["x"], cotangent="ones"), {"x": np.repeat(x, n, 0), "tangent_x": np.tile(np.eye(n), (rows, 1))})
    for row, got in zip(x, hessian["hvp_x"].reshape(rows, n, n)):
        top, rest = _log_sum_exp_truth(row)
        p = [mp.exp(mp.mpf(v) - top - mp.log1p(rest)) for v in row]
        want = [[float((p[i] if i == j else 0) - p[i] * p[j]) for j in range(n)] for i in range(n)]
        assert _ulps(got, want).max() <= 4, (row, got, want)


# logits spread far below the largest (the builder's eˣ was |x - max| ulps off: 700 at -700)
SOFTMAX_ROWS = _rows([0, -1, -2, -3], [0, -30, -300, -700], [5.5, -20.25, 3, 1e-10], [700, 0, -1, 699.5],
                     [1e-300, -1e-300, 0, -744], [-3, -3, -3, -3])


def _softmax_truth(row):
    e = [mp.exp(mp.mpf(v) - mp.mpf(max(row))) for v in row]
    total = sum(e)
    return np.array([float(v / total) for v in e])


def test_float64_softmax_to_its_last_digits():
    """Softmax-13 and Softmax-1 (the 2-D view) in float64: every probability within 2 ulps of
    mpmath's, down to e^-700 of the largest; and the Attention op's softmax too, whose
    weights reach the output: within 4 ulps of onnx.reference's (numpy's float64 exp)."""
    for opset in (13, 1):
        model = _one_node("Softmax", {"x": SOFTMAX_ROWS}, {}, {"axis": 1} if opset == 1 else {}, opset)
        got = evaluate_graph(import_model(model)[0], {"x": SOFTMAX_ROWS})["out"]
        want = np.array([_softmax_truth(row) for row in SOFTMAX_ROWS])
        assert _ulps(got, want).max() <= 2, opset
    rng = np.random.default_rng(5)
    # quarters: every score is exact, so its e^(x - max) is the one rounding compared
    q, k = rng.integers(-40, 40, (1, 1, 3, 4)) / 4.0, rng.integers(-40, 40, (1, 1, 5, 4)) / 4.0
    v = np.eye(5)[None, None]  # the output is the weights themselves
    model = _one_node("Attention", {"q": q, "k": k, "v": v}, {}, {"scale": 1.0}, 23)  # q, k times √scale: 1
    got = evaluate_graph(import_model(model)[0], {"q": q, "k": k, "v": v})["out"]
    scores = (q @ k.transpose(0, 1, 3, 2))[0, 0]
    want = np.array([_softmax_truth(row) for row in scores])
    assert _ulps(got[0, 0], want).max() <= 4


def test_float64_softmax_cross_entropy_keeps_a_confident_loss():
    """SoftmaxCrossEntropyLoss computes log_softmax as LogSoftmax does: a loss of
    log(1 + e^-41 + e^-50) = 1.6e-18 at a confident right label (it was 0), and its
    gradient p - onehot, whose label entry -1.6e-18 was 0 too; both within 4 ulps."""
    scores, labels = _rows([0, -41, -50], [2, 1, -3]), np.array([0, 2], np.int64)
    model = _one_node("SoftmaxCrossEntropyLoss", {"scores": scores, "labels": labels}, {}, {"reduction": "none"}, 13)
    graph = import_model(model)[0]
    got = evaluate_graph(graph, {"scores": scores, "labels": labels})["out"]
    p = np.array([_softmax_truth(row) for row in scores])
    want = [float(mp.log1p(mp.exp(-41) + mp.exp(-50))), -float(mp.log(mp.mpf(_softmax_truth(scores[1])[2])))]
    assert got[0] > 0 and _ulps(got, want).max() <= 4
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["scores"])
    slopes = evaluate_graph(gradient, {"scores": scores, "labels": labels})["grad_scores"]
    exact = p - np.eye(3)[labels]
    exact[0, 0] = -float((mp.exp(-41) + mp.exp(-50)) / (1 + mp.exp(-41) + mp.exp(-50)))  # p0 - 1 without the 1
    assert _ulps(slopes, exact).max() <= 4


@pytest.mark.parametrize("activation", ["Sigmoid", "Softsign", "Softplus", "Elu"])
def test_float64_recurrent_activations_are_the_ops_own(activation):
    """An RNN's activation in float64 is computed as the op of its name is: one unit with
    W = 1, R = 0, no bias, so Y_t = f(x_t), values to 2 ulps and slopes (reverse mode) to
    4 of mpmath's where the builder's forms were float32-grade (sigmoid's slope 0 below
    -708, softplus 0 below -37, softsign's slope 0 from 1e16, elu's eˣ - 1 at -1e-17)."""
    _, value, slope = OPS[activation]
    x = np.array([-745.0, -720.0, -40.0, -12.5, -1.0, -1e-17, 0.5, 3.0, 1e8, 1e16, 1e300])
    model = _one_node("RNN", {"x": x.reshape(-1, 1, 1)}, {"w": np.ones((1, 1, 1)), "r": np.zeros((1, 1, 1))},
                      {"hidden_size": 1, "activations": [activation]}, 22)
    graph = import_model(model)[0]
    values = {"x": x.reshape(-1, 1, 1), "w": np.ones((1, 1, 1)), "r": np.zeros((1, 1, 1))}
    got = evaluate_graph(graph, values)["out"].reshape(-1)
    assert _ulps(got, _truth(value, x)).max() <= 2
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}, graph.inputs), ["x"])
    slopes = evaluate_graph(gradient, values)["grad_x"].reshape(-1)
    assert _ulps(slopes, _truth(slope, x)).max() <= 4


REDUCED_BELOW = 2.0 ** 19 * math.pi / 2  # float64.py's sin_cos64 reduces x by π/2 below it
DOUBLED_BELOW = 8e307  # and takes cos x = sin 2x / (2 sin x) below it (2x finite)


def test_float64_cos_and_tan_keep_the_reduction_exact():
    """Below 2^19·π/2, x - n·π/2 is taken exactly (π/2 in three parts, the second step by
    TwoSum): cos within 1 ulp and tan within 3 up to 8e5 (the most measured on 53,000 points
    on x86-64). A TwoSum with its error's sign or its middle term wrong made cos 2-4 ulps off
    and tan 4-6: within the 1e-15 of the grid test above."""
    rng = np.random.default_rng(5)
    n = rng.integers(-2 ** 19, 2 ** 19, 1000)
    x = np.concatenate([rng.uniform(-REDUCED_BELOW, REDUCED_BELOW, 4000), np.pi / 2 * n,
                        np.nextafter(np.pi / 2 * n, np.inf)])
    for op, f, bound in (("Cos", mp.cos, 1), ("Tan", mp.tan, 3)):
        got = evaluate_graph(_graph(op, 22, len(x)), {"x": x})["out"]
        ulps = _ulps(got, _truth(f, x))
        worst = int(np.argmax(ulps))
        assert ulps[worst] <= bound, f"{op}: {ulps[worst]:.3g} ulps off at x = {x[worst]!r}"


def test_float64_cos_and_tan_beyond_the_reduced_range():
    """Past |x| = 2^19·π/2 (no grid point above reached it): sin x is SIN's, cos x is
    sin 2x / (2 sin x), within 2 ulps (tan too), and past 8e307, where 2x overflows,
    1 - 2·sin²(x/2), within 2 ulps of 1 absolutely (relatively it cancels where cos x is
    near 0: 67 ulps at x = 1.04e308). Both edges, and float64's largest value."""
    rng = np.random.default_rng(6)
    doubled = np.concatenate([np.geomspace(REDUCED_BELOW, DOUBLED_BELOW, 300), [np.nextafter(DOUBLED_BELOW, 0)]])
    halved = np.concatenate([rng.uniform(DOUBLED_BELOW, np.finfo(np.float64).max, 200),
                             [DOUBLED_BELOW, 1e308, np.finfo(np.float64).max]])
    x = np.concatenate([doubled, -doubled, halved, -halved])
    far = np.abs(x) >= DOUBLED_BELOW
    for op, f in (("Cos", mp.cos), ("Tan", mp.tan), ("Sin", mp.sin)):
        graph = _graph(op, 22, len(x))
        got, want = evaluate_graph(graph, {"x": x})["out"], _truth(f, x)
        ulps = _ulps(got[~far], want[~far])
        assert ulps.max() <= 2, f"{op}: {ulps.max():.3g} ulps off at x = {x[~far][np.argmax(ulps)]!r}"
        if op != "Tan":  # tan = sin/cos: cos's absolute error over |cos x|, unbounded at its poles
            error = np.abs(got[far] - want[far])
            assert error.max() <= 2 * np.spacing(1.0), f"{op}: {error.max():.3g} off at x = {x[far][np.argmax(error)]!r}"
        gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
        slopes = evaluate_graph(gradient, {"x": x})["grad_x"]  # the builder's there: finite, not accurate
        assert np.all(np.isfinite(slopes)), f"{op}: slope {slopes[~np.isfinite(slopes)][:3]}"
