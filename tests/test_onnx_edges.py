"""The ONNX bridge at its edges, bit for bit, against both onnxruntime and onnx.reference:

- export: each exact row's model (every dtype's edge values: -0.0, nan, inf, subnormals,
  integer extremes that wrap) runs in onnx.reference too, not only in onnxruntime, and
  gives our evaluator's bits; WHERE with a -0.0 branch keeps the sign in both runtimes.
- import: the attribute choices a one-sided mistake survives elsewhere: auto_pad SAME_UPPER
  against SAME_LOWER where the padding is odd (MaxPool k=2 on 6x6), and Slices that run
  backwards to the first element (a negative step whose end is clamped to -1, not 0), our
  own exported FLIP read back included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _onnx_helpers import assert_exact, evaluated, need_onnx_and_runtime, run_onnx
from uopcli import FormatError, Graph, Ops, UOp, dtypes, evaluate_graph

onnx, ort = need_onnx_and_runtime()

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import test_onnx_import_ops as import_ops  # noqa: E402 - its one-node models
from test_onnx_export_ops import ALL, FLOATS, INTS, NUMERIC, edge_values, grid  # noqa: E402
from uopcli.interop.onnx.exporter import to_onnx  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402


def run_reference(graph: Graph, inputs: dict) -> dict:
    model = to_onnx(graph)
    names = [i.name for i in model.graph.input]
    with np.errstate(all="ignore"):
        values = ReferenceEvaluator(model).run(None, {n: inputs[n] for n in names})
    return dict(zip([o.name for o in model.graph.output], values))


def in_both(make, arrays: dict, what: str) -> None:
    """make(*params) exported; onnxruntime's and onnx.reference's bits are the evaluator's."""
    in_both_at_once({what: (make, arrays)})


def in_both_at_once(cases: dict) -> None:
    """Several cases {what: (make, {input name: array})} as one model (one session each)."""
    outputs, params, feed = {}, [], {}
    for k, (what, (make, arrays)) in enumerate(cases.items()):
        mine = [UOp.param(f"{name}{k}", a.shape, a.dtype) for name, a in arrays.items()]
        outputs[f"out{k}"] = make(*mine)
        params += mine
        feed.update({f"{name}{k}": a for name, a in arrays.items()})
    graph = Graph(outputs, inputs=params)
    with np.errstate(all="ignore"):
        truth = evaluated(graph, feed)
    ort_values, reference_values = run_onnx(graph, feed), run_reference(graph, feed)
    for k, what in enumerate(cases):
        assert_exact(ort_values[f"out{k}"], truth[f"out{k}"], f"{what} in onnxruntime")
        assert_exact(reference_values[f"out{k}"], truth[f"out{k}"], f"{what} in onnx.reference")


# ----------------------------------------------------------------------------- export, in both runtimes

EXACT_BINARY = {"ADD": Ops.ADD, "SUB": Ops.SUB, "MUL": Ops.MUL, "MAX": Ops.MAX, "CMPLT": Ops.CMPLT,
                "CMPNE": Ops.CMPNE, "CMPEQ": Ops.CMPEQ}


@pytest.mark.parametrize("name", list(EXACT_BINARY))
def test_exact_binary_rows_in_both_runtimes(name):
    """Sums and products wrap in integers, keep -0.0 and nan in floats (every pair of edges,
    every numeric dtype)."""
    op = EXACT_BINARY[name]
    cases = {}
    for dtype in NUMERIC:
        a, b = grid(dtype)
        out_dtype = dtypes.bool if name.startswith("CMP") else dtype
        cases[f"{name} {dtype.name}"] = (lambda x, y, d=out_dtype: UOp.make(op, d, (x, y)), {"a": a, "b": b})
    in_both_at_once(cases)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [Ops.NEG, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC])
def test_exact_float_unary_rows_in_both_runtimes(op, dtype):
    in_both(lambda x: UOp.make(op, dtype, (x,)), {"x": edge_values(dtype)}, f"{op} {dtype.name}")


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_negation_and_division_wrap_in_both_runtimes(dtype):
    a, b = grid(dtype)
    in_both(lambda x: -x, {"x": edge_values(dtype)}, f"NEG {dtype.name}")
    in_both(lambda x, y: UOp.make(Ops.CDIV, dtype, (x, y)), {"a": a, "b": b}, f"CDIV {dtype.name}")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_where_with_a_minus_zero_branch_keeps_its_sign(dtype):
    """onnxruntime's Where loses a -0.0 taken from its first branch; the exporter restores it,
    and onnx.reference (whose Where keeps it) must not then flip it to +0.0."""
    cond = np.array([True, False, True, False, True, False])
    x = np.array([0.0, -0.0, 1.5, np.nan, -np.inf, 0.0], dtype.np)
    zero = UOp.const(-0.0, dtype)
    for make in (lambda c, v: c.where(zero, v), lambda c, v: c.where(v, zero), lambda c, v: c.where(v, -v),
                 lambda c, v: c.where(-v, v)):
        in_both(make, {"c": cond, "x": x}, f"WHERE {dtype.name}")
    params = [UOp.param("c", cond.shape, dtypes.bool), UOp.param("x", x.shape, dtype)]
    out = run_onnx(Graph({"out": params[0].where(zero, params[1])}, inputs=params), {"c": cond, "x": x})["out"]
    assert np.signbit(out[[0, 2, 4]]).all() and not np.signbit(out[[5]]).any()


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_casts_in_both_runtimes(dtype):
    """Every target from each source, on the edges no runtime leaves to the machine (floats
    to integers only within the target's range)."""
    x = edge_values(dtype)
    cases = {}
    for target in ALL:
        values = x
        if dtype.is_float and target.is_int:
            info = np.iinfo(target.np)
            values = x[np.isfinite(x) & (x.astype(np.float64) > info.min) & (x.astype(np.float64) < info.max)]
        cases[f"CAST {dtype.name} -> {target.name}"] = (lambda v, t=target: v.cast(t), {"x": values})
    in_both_at_once(cases)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_movements_in_both_runtimes(dtype):
    x = np.resize(edge_values(dtype), 24).reshape(2, 3, 4).astype(dtype.np)
    in_both(lambda v: UOp.make(Ops.FLIP, v.dtype, (v,), (True, False, True)), {"x": x}, "FLIP")
    in_both(lambda v: UOp.make(Ops.PAD, v.dtype, (v,), ((1, 0), (0, 2), (3, 1))), {"x": x}, "PAD")
    in_both(lambda v: UOp.make(Ops.SHRINK, v.dtype, (v,), ((1, 2), (0, 3), (1, 3))), {"x": x}, "SHRINK")
    in_both(lambda v: v.permute(2, 0, 1).reshape(4, 6), {"x": x}, "PERMUTE")


# ----------------------------------------------------------------------------- import: attribute edges

def _one_node(op, inputs: dict, initializers: dict, attrs: dict, opset: int = 18):
    """A model of one node: its inputs of their arrays' shapes and element type, its output
    `out` of the first input's."""
    kinds = {n: helper.np_dtype_to_tensor_dtype(a.dtype) for n, a in inputs.items()}
    graph_inputs = [helper.make_tensor_value_info(n, kinds[n], a.shape) for n, a in inputs.items()]
    node = helper.make_node(op, [*inputs, *initializers], ["out"], **attrs)
    output = helper.make_tensor_value_info("out", next(iter(kinds.values())), None)
    graph = helper.make_graph([node], "one", graph_inputs, [output],
                              [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _imported_in_all_three(model, feeds: dict, reference: bool = True) -> np.ndarray:
    graph, weights = import_model(model)
    ours = np.asarray(evaluate_graph(graph, {**weights, **feeds})["out"])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if reference:
        assert_exact(ours, ReferenceEvaluator(model).run(None, feeds)[0], "against onnx.reference")
    assert_exact(ours, session.run(None, feeds)[0], "against onnxruntime")
    return ours


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size, kernel, stride", [(6, 2, 1), (7, 4, 1), (8, 3, 3), (5, 2, 3)])
def test_maxpool_same_padding_puts_the_odd_pad_on_its_side(auto_pad, size, kernel, stride):
    x = np.arange(size * size, dtype=np.float32).reshape(1, 1, size, size) * np.float32(-1.5)
    x[0, 0, 0, 0], x[0, 0, -1, -1] = 100.0, 200.0  # a corner only one side's padding reaches
    model = _one_node("MaxPool", {"x": x}, {}, {"kernel_shape": [kernel, kernel], "strides": [stride, stride],
                                                "auto_pad": auto_pad})
    # onnx 1.23's reference MaxPool gives SAME_LOWER with a stride > 1 too small an output
    # (8x8, k=3, s=3: 2x2, not ceil(8/3) = 3): onnxruntime, which follows the spec, judges those
    out = _imported_in_all_three(model, {"x": x}, reference=auto_pad == "SAME_UPPER" or stride == 1)
    assert out.shape[2:] == (-(-size // stride),) * 2


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_padding_with_an_odd_total(auto_pad):
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    w = np.zeros((1, 1, 2, 2), np.float32)
    w[0, 0, 0, 0] = 1.0  # picks one neighbour: which one the padding decides
    model = _one_node("Conv", {"x": x}, {"w": w}, {"auto_pad": auto_pad})
    _imported_in_all_three(model, {"x": x})


INT64_MIN = np.iinfo(np.int64).min


@pytest.mark.parametrize("start, end, step", [(-1, INT64_MIN, -1), (5, -100, -1), (4, -7, -2), (3, -6, -3),
                                              (-1, -6, -1), (9, -9, -1), (2, 0, -1), (4, -1 - 5, -4),
                                              (4, 9, -1), (-1, 4, -1)])  # from the last to past it: empty
def test_slice_backwards_reaches_the_first_element(start, end, step):
    x = (np.arange(5, dtype=np.float32) - 2.0) * np.float32(-0.0 + 1.25)
    x[2] = -0.0
    initializers = {"starts": np.array([start]), "ends": np.array([end]), "axes": np.array([0]),
                    "steps": np.array([step])}
    out = _imported_in_all_three(_one_node("Slice", {"x": x}, initializers, {}), {"x": x})
    assert_exact(out, x[slice(start if start < 5 else None, None if end < -5 else end, step)], "as numpy slices")


def test_exported_flip_reads_back_bit_for_bit():
    x = np.resize(edge_values(dtypes.float32), 30).reshape(5, 6)
    p = UOp.param("x", x.shape)
    graph = Graph({"out": UOp.make(Ops.FLIP, p.dtype, (p,), (True, True))}, inputs=[p])
    back, weights = import_model(to_onnx(graph))
    assert_exact(np.asarray(evaluate_graph(back, {**weights, "x": x})["out"]), x[::-1, ::-1], "FLIP read back")


# The gathers copy a value, -0.0 and nan included; the builder's one-hot sum alone gives +0.0
# for -0.0. (op, inputs, attributes, opset, judged by onnx.reference, by onnxruntime)
_SIGNED = np.array([[0.0, -0.0, np.nan], [-0.0, np.inf, -2.5]], np.float32)
Init = import_ops.Init  # an input given as an initializer, known at import
GATHERS = [
    ("Gather", [_SIGNED, np.array([1, 0, 1])], {}, 18, True, True),
    ("Gather", [_SIGNED, Init(np.array([[1, 0], [2, 0]]))], {"axis": 1}, 18, True, True),
    ("GatherElements", [_SIGNED, np.array([[1, 0, 2], [0, 0, 1]])], {"axis": 1}, 18, True, True),
    ("GatherND", [_SIGNED, np.array([[1, 0], [0, 1], [0, 0]])], {}, 18, True, True),
    ("ReverseSequence", [_SIGNED, np.array([2, 1, 2])], {"time_axis": 0, "batch_axis": 1}, 18, True, True),
    # onnx.reference's nearest Resize is a weighted sum (+0.0); onnxruntime copies, as the spec's nearest
    ("Resize", [_SIGNED.reshape(1, 1, 2, 3), None, Init(np.array([1, 1, 2, 1.5], np.float32))],
     {"mode": "nearest"}, 18, False, True),
    ("TensorScatter", [np.ones((2, 4, 3), np.float32), np.stack([_SIGNED, _SIGNED[::-1]], 1), np.array([2, 0])], {"axis": 1},
     24, True, True),
]


@pytest.mark.parametrize("op, inputs, attrs, opset, by_reference, by_runtime", GATHERS,
                         ids=[f"{g[0]}-{i}" for i, g in enumerate(GATHERS)])
def test_gathers_copy_minus_zero_and_nan(op, inputs, attrs, opset, by_reference, by_runtime):
    model, feeds = import_ops.one_node_model(op, inputs, attrs, opset, 1, [TensorProto.FLOAT])
    (got,) = import_ops.ours(model, feeds)
    if by_reference:
        assert_exact(got, ReferenceEvaluator(model).run(None, feeds)[0], f"{op} against onnx.reference")
    if by_runtime:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert_exact(got, session.run(None, feeds)[0], f"{op} against onnxruntime")


def _float64_unary(op: str, attrs: dict, size: int, opset: int = 20) -> Graph:
    return import_model(_one_node(op, {"x": np.zeros(size)}, {}, attrs, opset))[0]


# every branch and its edges: the series near 0 and its end, the fits beyond, the far tails
_FLOAT64_GRID = np.concatenate([np.linspace(-7.0, 7.0, 2801), np.geomspace(1e-300, 1.0, 120),
                                -np.geomspace(1e-300, 1.0, 120), np.nextafter([0.25, 0.5], 0.0),
                                np.nextafter([0.25, 0.5], 1.0), [26.9, 27.5, 1e10, -1e300]])


def _erf_slope(x):
    return 2 / math.sqrt(math.pi) * math.exp(-x * x)


def _normal_cdf(x):  # erfc, not 1 + erf: that cancels for x < 0, in the reference as in the model
    return math.erfc(-x / math.sqrt(2)) / 2


def _gelu_tanh_inner(x):
    return (x + 0.044715 * x ** 3) * math.sqrt(2 / math.pi) if abs(x) < 1e100 else math.copysign(math.inf, x)


def _logistic(u):  # (1 + tanh(u/2))/2 without the cancellation
    return 1 / (1 + math.exp(-u)) if u > -700 else 0.0


def _logistic_slope(u):
    return _logistic(u) * _logistic(-u)


def _tanh_slope(x):
    return 1 / math.cosh(x) ** 2 if abs(x) < 350 else 0.0


# Gelu's tail is exp of -x^2/2 or of 2u (u ~ x^3): the argument rounds first, an error of
# its size in ulps (1e-14 near x = -7)
@pytest.mark.parametrize("op, attrs, rtol, value, slope", [
    ("Erf", {}, 1e-15, math.erf, _erf_slope),
    ("Tanh", {}, 1e-15, math.tanh, _tanh_slope),
    ("Gelu", {}, 5e-14, lambda x: x * _normal_cdf(x),
     lambda x: _normal_cdf(x) + x * _erf_slope(x / math.sqrt(2)) / math.sqrt(8)),
    ("Gelu", {"approximate": "tanh"}, 5e-14, lambda x: x * _logistic(2 * _gelu_tanh_inner(x)),
     lambda x: _logistic(2 * _gelu_tanh_inner(x)) + x * 2 * _logistic_slope(2 * _gelu_tanh_inner(x))
     * (1 + 3 * 0.044715 * x * x) * math.sqrt(2 / math.pi)),
], ids=["Erf", "Tanh", "Gelu", "Gelu-tanh"])
def test_float64_erf_tanh_and_gelu_are_accurate_to_float64(op, attrs, rtol, value, slope):
    """A float64 model's Erf, Tanh and Gelu (and so GRU, LSTM and BERT layers) computed to
    float64, values and gradients, against Python's math (correctly rounded but for an ulp):
    erf was Abramowitz-Stegun's (absolute error 1.5e-7) and tanh's series float32's (5e-11
    near 0.25), 1e-8 off torch in float64; Gelu's 1 + erf lost every digit near x = -7.
    Exact signs at 0, limits at infinity, nan kept."""
    x = _FLOAT64_GRID
    graph = _float64_unary(op, attrs, len(x))
    # the graph as imported (simplify=None): tinygrad's rewrites, evaluate_graph's default as
    # eval's, rewrite tanh's gradient (a few ulps off, 1.7e-23 flushed to 0), not the import
    got = evaluate_graph(graph, {"x": x}, simplify=None)["out"]
    want = np.array([value(v) for v in x])
    tiny = np.abs(want) < 1e-290  # subnormal results of a tiny x (Gelu): an absolute error
    np.testing.assert_allclose(got[~tiny], want[~tiny], rtol=rtol, atol=0)
    np.testing.assert_allclose(got[tiny], want[tiny], rtol=0, atol=1e-300)
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": x}, simplify=None)["grad_x"]
    want_slopes = np.array([slope(v) for v in x])
    normal = np.abs(want_slopes) > 1e-290
    np.testing.assert_allclose(slopes[normal], want_slopes[normal], rtol=50 * rtol, atol=0)
    cubed = (np.abs(x) > 1e100) & (attrs.get("approximate") == "tanh")  # x^3 overflows: nan, as torch's
    assert np.all(np.abs(slopes[~normal & ~cubed]) < 1e-280) and np.all(np.isnan(slopes[cubed]))
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    graph = _float64_unary(op, attrs, len(edges))
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    got = evaluate_graph(graph, {"x": edges}, simplify=None)["out"]
    want = np.array([value(v) for v in edges])  # Gelu(-inf) = -inf * 0: nan, as the formula
    assert np.array_equal(got, want, equal_nan=True) and np.signbit(got[1]) and not np.signbit(got[0])
    finite = edges[:2] if op == "Gelu" else edges[:4]
    slopes = evaluate_graph(gradient, {"x": np.where(np.isin(edges, finite), edges, 0.0)}, simplify=None)["grad_x"]
    assert np.all(np.isfinite(slopes))


def test_float64_gelu_takes_erfc_itself_below_minus_a_half():
    """Φ(x) = erfc(-s)/2 (s = x/√2) below s = -1/2, where 1 + erf(s) cancels: Gelu within
    8 ulps of x·erfc(-s)/2 at the s the model computes (s's own rounding is not the model's
    error), 6 the most measured over 30,000 points. With 1 + erf down to s = -1.5 it was 13."""
    mp = pytest.importorskip("mpmath")
    x = np.linspace(-1.5 * math.sqrt(2), -0.5 * math.sqrt(2), 2001)
    got = evaluate_graph(_float64_unary("Gelu", {}, len(x)), {"x": x})["out"]
    s = x * (1 / math.sqrt(2))
    with mp.workdps(40):
        want = np.array([float(mp.mpf(a) * mp.erfc(-mp.mpf(b)) / 2) for a, b in zip(x, s)])
    ulps = np.abs(got - want) / np.spacing(np.abs(want))
    assert ulps.max() <= 8, f"{ulps.max()} ulps off at x = {x[np.argmax(ulps)]!r}"


def _gelu_body(dtype, approximate: str, size: int):
    """Gelu-20's function body as nodes (its constants in the model's dtype): ½x(1 + erf(x/√2))
    or ½x(1 + tanh(√(2/π)(x + 0.044715x³))), in the order the import multiplies."""
    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if approximate == "tanh":
        constants = {"k": 0.044715, "c": math.sqrt(2 / math.pi), "one": 1.0, "h": 0.5}
        steps = [("Mul", "k", "x", "a1"), ("Mul", "a1", "x", "a2"), ("Mul", "a2", "x", "a3"), ("Add", "x", "a3", "s"),
                 ("Mul", "s", "c", "inner"), ("Tanh", "inner", None, "f"), ("Add", "one", "f", "u"),
                 ("Mul", "h", "x", "hx"), ("Mul", "hx", "u", "out")]
    else:
        constants = {"c": 1 / math.sqrt(2), "one": 1.0, "h": 0.5}
        steps = [("Mul", "x", "c", "s"), ("Erf", "s", None, "f"), ("Add", "one", "f", "u"),
                 ("Mul", "x", "h", "hx"), ("Mul", "hx", "u", "out")]
    nodes = [helper.make_node(op, [a] + ([b] if b else []), [out]) for op, a, b, out in steps]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", kind, [size])],
                              [helper.make_tensor_value_info("out", kind, None)],
                              [numpy_helper.from_array(np.array(v, dtype), n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float32_and_float16_keep_the_builders_and_the_specs_forms(dtype):
    """Gelu is its spec's function body, bit for bit: the graph these models imported to
    before; in float16 the float32 form's value rounded once (import_table._float32_inside:
    in float16 Gelu's roundings were 2,000 ulps off near x = -8). Sinh and Cosh were the
    builder's (eˣ ∓ e⁻ˣ)/2, 2e-6 off from |x| = 12 in float32 (eˣ is 2^(x·log2 e), whose
    product rounds): now float64's forms rounded once (import_table._float64_inside), so
    numpy's float64 sinh and cosh rounded, bit for bit (tests/test_onnx_differential.py
    sweeps them)."""
    x = np.concatenate([np.linspace(-12, 12, 2401), [0.5, -0.5, np.inf, -np.inf, np.nan]]).astype(dtype)
    wide = np.float32 if dtype == np.float16 else dtype
    with np.errstate(all="ignore"):
        for op, f in (("Sinh", np.sinh), ("Cosh", np.cosh)):
            graph, _ = import_model(_one_node(op, {"x": x}, {}, {}, 22))
            got, want = evaluate_graph(graph, {"x": x})["out"], f(x.astype(np.float64)).astype(dtype)
            number = ~np.isnan(want)  # (a nan's sign is not compared)
            assert got[number].tobytes() == want[number].tobytes() and np.isnan(got[~number]).all(), op
        for approximate in ("none", "tanh"):
            graph, _ = import_model(_one_node("Gelu", {"x": x}, {}, {"approximate": approximate}, 20))
            body, weights = import_model(_gelu_body(wide, approximate, x.size))
            got = evaluate_graph(graph, {"x": x})["out"]
            want = np.asarray(evaluate_graph(body, {**weights, "x": x.astype(wide)})["out"]).astype(dtype)
            assert got.tobytes() == want.tobytes(), approximate


@pytest.mark.parametrize("dtype, start, overflow", [("float32", 87.0, 89.415985), ("float16", 9.5, 11.7825)])
def test_float32_and_float16_sinh_and_cosh_are_finite_where_only_e_to_the_x_overflows(dtype, start, overflow):
    """eˣ overflows from |x| = 88.72 in float32 (11.09 in float16), sinh and cosh only from
    89.42 (11.78): between, (eˣ ∓ e⁻ˣ)/2 gave inf, and now e^(|x|/2)·e^(|x|/2)/2 gives numpy's
    float64 value rounded to the dtype, to the builder's eˣ's accuracy (|x|·1.44 ulps in
    float32), inf beyond, sinh's sign below 0. Their slopes (cosh, sinh) are finite and of the
    right sign wherever eˣ is finite (reverse mode forms eˣ on the way: inf beyond), never nan."""
    x = np.concatenate([np.linspace(start, overflow, 300), [overflow * 1.001, np.inf]]).astype(dtype)
    x = np.concatenate([x, -x])
    bound = 1.44 * start if dtype == "float32" else 2
    for op, f, slope in (("Sinh", np.sinh, np.cosh), ("Cosh", np.cosh, np.sinh)):
        graph, _ = import_model(_one_node(op, {"x": x}, {}, {}, 22))
        with np.errstate(all="ignore"):
            got = evaluate_graph(graph, {"x": x})["out"]
            want = f(x.astype(np.float64)).astype(dtype)
        finite = np.isfinite(want)
        assert finite.sum() >= 500 and np.array_equal(got[~finite], want[~finite]), op
        ulps = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(want[finite]))
        assert ulps.max() <= bound, (op, ulps.max())
        gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
        slopes = evaluate_graph(gradient, {"x": x})["grad_x"]
        with np.errstate(over="ignore"):
            want_slopes = slope(x.astype(np.float64)).astype(dtype)
        inside = np.abs(x) < math.log(float(np.finfo(dtype).max))
        assert not np.isnan(slopes[np.isfinite(x)]).any(), op  # the branch not taken is fed a finite x
        assert np.isfinite(slopes[inside]).all() and np.array_equal(np.sign(slopes[inside]), np.sign(want_slopes[inside]))


def _normalization(op: str, x: np.ndarray, weights: dict, attrs: dict, opset: int, outputs: dict):
    node = helper.make_node(op, ["x", *weights], list(outputs), **attrs)
    graph = helper.make_graph([node], "norm", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
                              [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs.items()],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _imported_float64(model, x: np.ndarray) -> dict:
    graph, weights = import_model(model)
    return evaluate_graph(graph, {**weights, "x": x})


def test_float64_layer_and_rms_normalization_stay_float64_as_both_runtimes_compute_them():
    """torch exports a float64 nn.LayerNorm with the default stash_type, float32; onnxruntime
    and onnx.reference compute LayerNormalization and RMSNormalization in float64 all the
    same, and so does uopgrad now (it cast down: 2e-7 off them). Mean and InvStdDev are of
    the stash type, as onnxruntime requires. GroupNormalization-21, which both cast down,
    still does."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6)) * 3 + 1.2345678901234  # an offset the float32 mean rounds
    ones, zeros = np.ones(6), np.zeros(6)
    cases = [("LayerNormalization", {"g": ones, "b": zeros}, {}, 17, {"y": TensorProto.DOUBLE}),
             ("RMSNormalization", {"g": ones}, {}, 23, {"y": TensorProto.DOUBLE}),
             ("GroupNormalization", {"g": np.ones(4), "b": np.zeros(4)}, {"num_groups": 2}, 21,
              {"y": TensorProto.DOUBLE})]
    for op, weights, attrs, opset, outputs in cases:
        model = _normalization(op, x, weights, attrs, opset, outputs)
        ours = _imported_float64(model, x)["y"]
        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        reference = ReferenceEvaluator(model).run(None, {"x": x})[0]
        for peer in (theirs, reference):
            np.testing.assert_allclose(ours, peer, rtol=0, atol=1e-12 if op != "GroupNormalization" else 1e-6)
        if op == "GroupNormalization":  # computed in float32, as both peers: not float64's values
            grouped = x.reshape(2, 2, -1)
            wide = (grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)
            assert np.max(np.abs(ours - wide.reshape(x.shape))) > 1e-10
    model = _normalization("LayerNormalization", x, {"g": ones, "b": zeros}, {}, 17,
                           {"y": TensorProto.DOUBLE, "mean": TensorProto.FLOAT, "inv": TensorProto.FLOAT})
    ours = _imported_float64(model, x)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert [ours[n].dtype for n in ("y", "mean", "inv")] == [t.dtype for t in theirs] == \
        [np.float64, np.float32, np.float32]
    for got, want in zip((ours["y"], ours["mean"], ours["inv"]), theirs):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-13)


@pytest.mark.parametrize("op", ["Atan", "Asinh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atan_and_asinh_have_slope_one_at_zero(op, dtype):
    """d/dx atan x and asinh x are 1 at 0: the branch not taken there (1/x, log 2|x|) was
    computed at 0 all the same, and its infinite slope times the zero it gets made the
    gradient nan."""
    x = np.array([0.0, -0.0, 1e-30, 2.0], dtype)
    imported = import_model(_one_node(op, {"x": x}, {}, {}, 22))[0]
    gradient, _ = differentiate(Graph({"loss": imported.outputs["out"].sum()}), ["x"])
    slopes = evaluate_graph(gradient, {"x": x})["grad_x"]
    want = 1 / (1 + x.astype(np.float64) ** 2) if op == "Atan" else 1 / np.sqrt(1 + x.astype(np.float64) ** 2)
    np.testing.assert_allclose(slopes, want, rtol=1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("op", ["LeakyRelu", "HardSigmoid", "Selu", "ThresholdedRelu"])
def test_a_default_float_attribute_is_its_float32_value(op):
    """An ONNX float attribute is a float32, its default too: LeakyRelu's alpha 0.01 is
    0.01f, as onnx.reference and onnxruntime take it. Taken as the decimal, a float64
    model was 2e-8 (LeakyRelu) and 6e-8 (HardSigmoid) off them."""
    x = np.linspace(-3.0, 3.0, 13)
    model = _one_node(op, {"x": x}, {}, {}, 22)
    ours = _imported_float64(model, x)["out"]
    np.testing.assert_allclose(ours, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-15, atol=0)


def _l2_graphs(x: np.ndarray, first: bool = False):
    """ReduceL2 (axis 1) and LpNormalization (p = 2, axis 1) of x imported, and each summed
    (LpNormalization's first column only, if `first`) for a gradient: {op: (graph, gradient
    graph)}."""
    graphs = {}
    for op, initializers, attrs, opset in [("ReduceL2", {"axes": np.array([1], np.int64)}, {"keepdims": 0}, 18),
                                           ("LpNormalization", {}, {"axis": 1, "p": 2}, 22)]:
        graph, weights = import_model(_one_node(op, {"x": x}, initializers, attrs, opset))
        assert not weights
        out = graph.outputs["out"]
        loss = out[:, 0].sum() if first and op == "LpNormalization" else out.sum()
        graphs[op] = graph, differentiate(Graph({"loss": loss}), ["x"])[0]
    return graphs


# (3b, 4b) with b from the subnormals to beyond √max of each type: √Σx² overflowed from
# 1.3e154 (float64), 1.8e19 (float32), 256 (float16), and underflowed below their roots of
# the smallest subnormal; onnxruntime and onnx.reference both still do (ReduceL2 inf or 0,
# LpNormalization 0 in float64, nan in float32)
L2_SCALES = {np.float64: [1e-320, 1e-310, 1e-200, 1e-160, 1e-100, 1.0, 1e100, 1e150, 1e154, 1e200, 1e300, 3e307],
             np.float32: [1e-44, 1e-40, 1e-30, 1e-20, 1.0, 1e10, 1e19, 1e20, 1e30, 6e37],
             np.float16: [1e-7, 1e-5, 1e-3, 1.0, 100.0, 300.0, 1e4]}


@pytest.mark.parametrize("dtype", list(L2_SCALES), ids=lambda d: d.__name__)
def test_l2_norms_neither_overflow_nor_underflow(dtype):
    """ReduceL2 of (3b, 4b) is 5b, LpNormalization (0.6, 0.8), each to an ulp of the exact
    value for the rounded inputs (hypot), and the gradients, x/‖x‖ and (y2², -y1·y2)/‖x‖ (of
    the first output), to 3 ulps where they are normal numbers."""
    b = np.array(L2_SCALES[dtype], dtype)
    x = np.stack([b * dtype(3), b * dtype(4)], 1)
    wide = x.astype(np.float64)
    norm = np.array([math.hypot(*row) for row in wide])  # correctly rounded but for an ulp
    y = wide / norm[:, None]
    graphs = _l2_graphs(x, first=True)
    graph, gradient = graphs["ReduceL2"]
    assert _within_ulps(evaluate_graph(graph, {"x": x})["out"], norm.astype(dtype), 1)
    assert _within_ulps(evaluate_graph(gradient, {"x": x})["grad_x"], y.astype(dtype), 3)
    graph, gradient = graphs["LpNormalization"]
    assert _within_ulps(evaluate_graph(graph, {"x": x})["out"], y.astype(dtype), 1)
    slopes = evaluate_graph(gradient, {"x": x})["grad_x"]
    want = np.stack([y[:, 1] ** 2, -y[:, 0] * y[:, 1]], 1) / norm[:, None]
    normal = (np.abs(want) >= np.finfo(dtype).tiny).all(1) & (np.abs(want) <= np.finfo(dtype).max).all(1)
    assert normal.sum() >= len(b) - 3  # 1/‖x‖ overflows at the smallest b, is subnormal at the largest
    assert _within_ulps(slopes[normal], want[normal].astype(dtype), 3)
    empty = np.zeros((2, 0), dtype)  # no element: the norm is 0 (its largest, -inf, has no exponent)
    graph, _ = _l2_graphs(empty)["ReduceL2"]
    assert_exact(evaluate_graph(graph, {"x": empty})["out"], np.zeros(2, dtype), "ReduceL2 of no element")


def _within_ulps(got: np.ndarray, want: np.ndarray, ulps: int) -> bool:
    assert got.dtype == want.dtype and got.shape == want.shape
    error = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.spacing(np.abs(want)).astype(np.float64)
    return bool(np.all((got == want) | (error <= ulps)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16], ids=lambda d: d.__name__)
def test_l2_norms_in_range_are_bit_for_bit_the_plain_forms(dtype):
    """Scaled by a power of two, exactly: where Σx² neither overflows nor underflows, the
    values and gradients are bit for bit those of √Σx² and x/√Σx² (nan, inf and zero rows
    included, but for a zero row's gradient: 0, torch's, not nan), so float32 and float16
    models keep their numbers, and onnxruntime's. A float16 LpNormalization is x/√Σx² in
    float32 rounded once (import_table._float32_inside)."""
    rng = np.random.default_rng(7)
    spread = rng.standard_normal((90, 5)) * np.repeat([0.1, 1.0, 10.0], 30)[:, None]
    x = np.concatenate([np.copysign(np.abs(spread) + 0.01, spread),  # float16's squares normal too
                        [[0.0, -0.0, 0.0, 0.0, 0.0], [np.inf, 1, 2, 3, 4], [np.nan, 1, 2, 3, 4], [-np.inf, np.inf, 0, 0, 1]]]).astype(dtype)
    param = UOp.param("x", x.shape, dtypes.float64 if dtype == np.float64 else
                      dtypes.float32 if dtype == np.float32 else dtypes.float16)

    def l2(v):
        return (v * v).sum(1, keepdim=True).sqrt()
    norm = l2(param)
    wide = param.cast(dtypes.float32) if dtype == np.float16 else param
    zero = l2(wide).eq(0)
    normalised = zero.where(wide.const_like(0), wide / zero.where(1.0, l2(wide)))
    plain = {"ReduceL2": norm.reshape(x.shape[0]), "LpNormalization": normalised.cast(param.dtype)}
    for op, (graph, gradient) in _l2_graphs(x).items():
        by_hand = Graph({"out": plain[op]}, inputs=[param])
        with np.errstate(all="ignore"):
            assert_exact(evaluate_graph(graph, {"x": x})["out"], evaluate_graph(by_hand, {"x": x})["out"], op)
            slopes = evaluate_graph(gradient, {"x": x})["grad_x"]
            by_hand_slopes = evaluate_graph(differentiate(Graph({"loss": plain[op].sum()}, inputs=[param]), ["x"])[0],
                                            {"x": x})["grad_x"]
        # a zero row: 0 (ReduceL2: torch's x·0, -0.0 kept), where the root's slope at 0 made it nan
        assert np.isnan(by_hand_slopes[90]).all()
        assert_exact(slopes[90], np.zeros(5, dtype) if op == "LpNormalization" else x[90] * 0, f"{op} at 0")
        slopes, by_hand_slopes = np.delete(slopes, 90, 0), np.delete(by_hand_slopes, 90, 0)
        assert_exact(slopes, by_hand_slopes, f"{op} gradient")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE], ids=["float32", "float64"])
def test_a_row_of_minus_inf_is_nan_and_its_guarded_gradient_zero(op, dtype):
    """Attention as torch's TorchScript exporter writes it for a padding mask that hides a
    whole row (left padding, causal): scores = q·kᵀ + mask (-inf where hidden), p = Softmax,
    Where(IsNaN(p), 0, p), times v. The hidden row's softmax is nan (the spec; both
    runtimes), the Where makes it 0, and the gradients are torch's with that row 0 (they were
    nan for q's row and all of k: the softmax's slope on the row of -inf was nan, and nan·0
    is nan)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the gradient comparison skips")
    np_type = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    rng = np.random.default_rng(41)
    q, k, v, c = (rng.standard_normal(shape).astype(np_type) for shape in ((4, 3), (5, 3), (5, 2), (4, 2)))
    mask = np.zeros((4, 5), np_type)
    mask[0, 3:], mask[1, :], mask[3, 0] = -np.inf, -np.inf, -np.inf  # row 1 hidden throughout
    nodes = [helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.zeros((), np_type))),
             helper.make_node("Transpose", ["k"], ["kt"]), helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Add", ["qk", "mask"], ["scores"]), helper.make_node(op, ["scores"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["hidden"]), helper.make_node("Where", ["hidden", "zero", "p"], ["kept"]),
             helper.make_node("MatMul", ["kept", "v"], ["out"])]
    inputs = {"q": q, "k": k, "v": v, "mask": mask}
    graph = helper.make_graph(
        nodes, "attention", [helper.make_tensor_value_info(n, dtype, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info("p", dtype, (4, 5)), helper.make_tensor_value_info("out", dtype, (4, 2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8

    ours, _ = import_model(model)
    values = evaluate_graph(ours, inputs)
    p, out = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    assert np.isnan(values["p"][1]).all() and np.isnan(p[1]).all()
    rtol = 1e-12 if dtype == TensorProto.DOUBLE else 1e-5
    np.testing.assert_allclose(values["out"], out, rtol=rtol, atol=rtol)

    grads, _ = differentiate(ours, ["q", "k", "v"], of=["out"], cotangent="input")
    mine = evaluate_graph(grads, {**inputs, "cotangent_out": c})
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    scores = tq @ tk.T + torch.tensor(mask)
    shown = [0, 2, 3]  # the rows with an element above -inf
    kept = torch.zeros(4, 5, dtype=scores.dtype).index_put(
        (torch.tensor(shown),), (torch.softmax if op == "Softmax" else torch.log_softmax)(scores[shown], -1))
    ((kept @ tv) * torch.tensor(c)).sum().backward()
    for name, truth in {"q": tq.grad, "k": tk.grad, "v": tv.grad}.items():
        np.testing.assert_allclose(mine[f"grad_{name}"], truth.numpy(), rtol=rtol, atol=rtol, err_msg=name)


@pytest.mark.parametrize("stored, hint", [("weight", True), ("input", True), ("string", False)])
def test_a_float_type_the_format_lacks_is_refused_with_the_export_that_imports(stored, hint):
    """A model stored in bfloat16, as torch exports a checkpoint loaded in it (transformers
    loads Llama's in bfloat16 by default), or float8: the format has no such float, and the
    refusal says which export imports instead (it said only "is not supported"). A type
    with no float to export in (STRING) gets no such advice."""
    code = {"weight": TensorProto.BFLOAT16, "input": TensorProto.FLOAT8E4M3FN, "string": TensorProto.STRING}[stored]
    if stored == "input":
        inputs, initializers = [helper.make_tensor_value_info("w", code, [2])], []
    else:
        inputs = []
        initializers = [helper.make_tensor("w", code, [2], [b"a", b"b"] if stored == "string" else [16256, 16384])]
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", code, None)], initializers)
    with pytest.raises(FormatError) as caught:
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), source="m.onnx")
    name = {"weight": "BFLOAT16", "input": "FLOAT8E4M3FN", "string": "STRING"}[stored]
    what = "input 'w'" if stored == "input" else "initializer 'w'"
    assert str(caught.value) == f"m.onnx: {what}: element type {name} is not supported" + (
        " (the format's floats are float16, float32 and float64: export the model in one, e.g. torch's "
        "model.float() before torch.onnx.export)" if hint else "")


@pytest.mark.parametrize("alpha", [0.01, 0.2, 0.0, -0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
def test_leaky_relu_values_bit_for_bit_and_torchs_slope_at_zero(dtype, alpha):
    """LeakyRelu's values are the spec's (onnx.reference) bit for bit at -0.0, 0.0, the
    subnormals, nan and inf (a negative alpha too: alpha·(+0) is -0 there, which `x < 0 ?
    alpha·x : x` gave as +0); its gradient at exactly 0 is torch's, alpha (it was 1).
    (onnxruntime differs from the spec in the sign of an underflowing alpha·x, +0 for -0,
    and in float16 rounds alpha·x once in float32.)"""
    import torch
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([-0.0, 0.0, tiny, -tiny, 1.5, -1.5, np.inf, -np.inf, np.nan], dtype)
    model = _one_node("LeakyRelu", {"x": x}, {}, {"alpha": alpha}, 16)
    graph = import_model(model)[0]
    assert_exact(evaluated(graph, {"x": x})["out"], ReferenceEvaluator(model).run(None, {"x": x})[0], "LeakyRelu")
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out"].sum()}), ["x"])
    at = np.array([0.0, -0.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1.0], dtype)  # the model's shape, [9]
    slopes = evaluate_graph(gradient, {"x": at})["grad_x"]
    expected = torch.func.grad(lambda t: torch.nn.functional.leaky_relu(t, float(np.float32(alpha))).sum())(
        torch.tensor(at.astype(np.float64))).numpy()
    np.testing.assert_allclose(slopes.astype(np.float64), expected, rtol=1e-3 if dtype == np.float16 else 1e-7)
