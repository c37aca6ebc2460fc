"""float64 ONNX elementwise ops computed to float64, values and gradients, against mpmath at
40 digits (uopcli/interop/onnx/float64.py). The builder's forms are float32's: its exp is
2^(x·log2 e), |x| ulps off; log(1 + eˣ), eˣ - 1 and 1/(1 + eˣ) lose every digit where the
1 swamps the other term; cos is sin(π/2 - x), whose π/2 - x rounds; eˣ/2 overflows before
cosh does; x/(1 + |x|)'s slope cancels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime
from uopcli import Graph, evaluate_graph

need_onnx_and_runtime()
mp = pytest.importorskip("mpmath")

from onnx import TensorProto, helper  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402
from uopcli.tools.forward import jvp  # noqa: E402

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
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])  # ±inf: the limits (x/(1 + |x|) was inf/inf)
    graph = _graph("Softsign", 22, len(edges))
    got = evaluate_graph(graph, {"x": edges})["out"]
    assert np.array_equal(got, [0.0, -0.0, 1.0, -1.0, np.nan], equal_nan=True) and np.signbit(got[1])
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    assert np.array_equal(evaluate_graph(gradient, {"x": edges})["grad_x"], [1.0, 1.0, 0.0, 0.0, np.nan], equal_nan=True)
