"""Values a differential fuzzer (ONNX models of one node, uopgrad against onnxruntime and
onnx.reference) found wrong in what the importer accepted, each now bit for bit the
peers' (or within the stated ulps of the truth), and the one it accepted that the peers
refuse, now refused in one line: integer means in their own type, float32 cos and tan of
large arguments, Acosh below 1, float32 softplus/Mish/exp/sinh/cosh by float64, TopK with
nan, float16 ReduceProd, Concat of mismatched ranks."""

from __future__ import annotations

import numpy as np
import pytest

from _onnx_helpers import assert_exact, need_onnx_and_runtime
from uopcli import FormatError, evaluate_graph

_, ort = need_onnx_and_runtime()

from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402


def _model(op, inputs: dict, initializers: dict | None = None, attrs: dict | None = None, opset: int = 18,
           outputs: int = 1, output_types=None):
    initializers = initializers or {}
    kinds = {n: helper.np_dtype_to_tensor_dtype(a.dtype) for n, a in inputs.items()}
    names = [f"out{i}" for i in range(outputs)]
    types = output_types or [next(iter(kinds.values()))] * outputs
    node = helper.make_node(op, [*inputs, *initializers], names, name=f"/fuzz/{op}", **(attrs or {}))
    graph = helper.make_graph([node], "one", [helper.make_tensor_value_info(n, kinds[n], a.shape) for n, a in inputs.items()],
                              [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
                              [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _ours(model, feeds: dict) -> list[np.ndarray]:
    """The graph's values as `uopgrad eval` computes them (after tinygrad's rewrites), which
    must be those of the graph as written (--literal), bit for bit."""
    graph, weights = import_model(model)
    literal = evaluate_graph(graph, {**weights, **feeds})
    values = evaluate_graph(graph, {**weights, **feeds}, simplify="tinygrad")
    for name in graph.output_names:
        assert_exact(values[name], literal[name], f"{name}: eval's rewrites against the graph as written")
    return [np.asarray(values[name]) for name in graph.output_names]


def _onnxruntime(model, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _reference(model, feeds: dict) -> list[np.ndarray]:
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def _ulps(ours: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """How many representable values of ours' type lie between ours and truth (rounded to it)."""
    kind = {2: np.int16, 4: np.int32, 8: np.int64}[ours.dtype.itemsize]
    def ordered(v):
        bits = np.asarray(v, ours.dtype).view(kind).astype(np.int64)
        return np.where(bits < 0, np.iinfo(kind).min - bits, bits)
    return np.abs(ordered(ours) - ordered(np.asarray(truth).astype(ours.dtype)))


# ----------------------------------------------------------------------------- 1. integer means


INTEGER_ROWS = [[1, -1, 2], [-4, -1], [-5, 0, 0], [7, 0, 0], [-3, -3, -2], [9], [0, 0, 1]]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("values", INTEGER_ROWS, ids=lambda v: str(v))
def test_integer_reduce_mean_is_the_truncated_mean_in_the_type(dtype, values):
    """The fuzzer's [1, -1, 2]: float32 0.6666667 where both peers give the declared int 0;
    the quotient truncates toward 0 (-5/2 is -2, not floor's -3), in both peers."""
    x = np.array(values, dtype)
    model = _model("ReduceMean", {"x": x}, attrs=dict(keepdims=0))
    ours = _ours(model, {"x": x})[0]
    assert ours.dtype == dtype
    assert_exact(ours, _onnxruntime(model, {"x": x})[0], "against onnxruntime")
    assert_exact(ours, _reference(model, {"x": x})[0], "against onnx.reference")
    assert int(ours) == int(np.trunc(np.sum(values) / len(values)))


def test_integer_reduce_mean_over_axes_and_its_wrapping_sum():
    """Over one axis, kept; and where an int32 sum wraps, the reference's value (its sum
    wraps in the type; onnxruntime sums in float64 and gives 2147483647)."""
    x = np.array([[3, -4], [5, 6]], np.int64)
    model = _model("ReduceMean", {"x": x}, {"axes": np.array([1], np.int64)})
    assert_exact(_ours(model, {"x": x})[0], _onnxruntime(model, {"x": x})[0], "against onnxruntime")
    assert _ours(model, {"x": x})[0].tolist() == [[0], [5]]
    big = np.array([2 ** 31 - 1, 2 ** 31 - 1], np.int32)
    model = _model("ReduceMean", {"x": big}, attrs=dict(keepdims=0))
    assert_exact(_ours(model, {"x": big})[0], _reference(model, {"x": big})[0], "against onnx.reference")


def test_integer_reduce_mean_of_nothing_is_refused():
    x = np.zeros((0,), np.int32)
    with pytest.raises(FormatError, match=r"node '/fuzz/ReduceMean'.*mean of an empty set of int32"):
        import_model(_model("ReduceMean", {"x": x}, attrs=dict(keepdims=0)))


@pytest.mark.parametrize("op, values, dtype", [
    ("ReduceL2", [3037000499, 1, 7], np.int64),        # float32's √ gave 3037000448
    ("ReduceL2", [46339, 9, 300], np.int32),
    ("ReduceLogSumExp", [3037000499, 1, 7], np.int64),  # float32 gave 3037000448
    ("ReduceLogSumExp", [20, 20], np.int32),
    ("ReduceLogSum", [1318815734], np.int64),           # log is 20.9999999996: float32's was 21
    ("ReduceLogSum", [1318815735], np.int64),
], ids=lambda v: str(v))
def test_integer_norms_and_log_sums_are_computed_in_float64(op, values, dtype):
    x = np.array(values, dtype)
    model = _model(op, {"x": x}, attrs=dict(keepdims=0))
    ours = _ours(model, {"x": x})[0]
    assert_exact(ours, _onnxruntime(model, {"x": x})[0], "against onnxruntime")
    if op == "ReduceL2":  # the reference refuses integer log-sums
        assert_exact(ours, _reference(model, {"x": x})[0], "against onnx.reference")


# ----------------------------------------------------------------------------- 2. cos and tan of large float32


def _float32_sample(seed: int = 0, count: int = 20000) -> np.ndarray:
    """Random float32 bit patterns (every exponent), multiples of π/2 and their neighbours."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, count, dtype=np.uint64).astype(np.uint32).view(np.float32)
    quarters = (np.pi / 2 * np.arange(-300, 300)).astype(np.float32)
    x = np.concatenate([bits[np.isfinite(bits)], quarters, np.nextafter(quarters, np.float32(np.inf)),
                        np.nextafter(quarters, np.float32(-np.inf)), np.float32([1e3, 1e7, 3e9, 1e15, 1e17, 1e20])])
    return np.concatenate([x, -x]).astype(np.float32)


# the fuzzer's arguments and onnxruntime's values (the old ones in the comments)
LARGE = np.array([1000.0, 1e7, 3e9, 1e15, 1e17, 1e20, -3.4028235e38], np.float32)
COS_LARGE = np.array([0.5623790621757507, -0.9072703719139099, -0.16069024801254272,  # was -0.16069008
                      0.10535848140716553, -0.8216643333435059, 0.7542592883110046,  # was 0.159, 0.570, -0.657
                      0.8530210256576538], np.float32)                                # was -0.5218765
TAN_LARGE = np.array([1.470324158668518, -0.46353083848953247, -6.142282485961914,    # was -6.142288
                      9.438578605651855, 0.6936794519424438, 0.8704919815063477,      # was 6.25, -1, -1
                      0.6117979288101196], np.float32)                                # was -1


@pytest.mark.parametrize("op, want", [("Cos", COS_LARGE), ("Tan", TAN_LARGE)])
def test_float32_cos_and_tan_of_large_arguments(op, want):
    model = _model(op, {"x": LARGE}, opset=22)
    ours = _ours(model, {"x": LARGE})[0]
    assert_exact(ours, want, "the fuzzer's values")
    assert_exact(ours, _onnxruntime(model, {"x": LARGE})[0], "against onnxruntime")


@pytest.mark.parametrize("op, f", [("Cos", np.cos), ("Tan", np.tan)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cos_and_tan_are_float64s_rounded_once(op, f, dtype):
    """Every float16, and 40,000 float32s of every exponent: float64's value rounded to the
    type, bit for bit (onnxruntime's float32 is up to 2 ulps from it); nan at ±inf."""
    x = np.arange(2 ** 16, dtype=np.uint16).view(np.float16) if dtype is np.float16 else _float32_sample()
    model = _model(op, {"x": x}, opset=22)
    with np.errstate(invalid="ignore"):
        truth = f(x.astype(np.float64)).astype(dtype)
        ours = _ours(model, {"x": x})[0]
    assert_exact(ours, truth, "float64's, rounded")
    finite = np.isfinite(truth)
    assert _ulps(ours[finite], _onnxruntime(model, {"x": x})[0][finite]).max() <= 2


def _float32_slopes(op: str, x: np.ndarray, opset: int = 22) -> np.ndarray:
    from uopcli import Graph
    from uopcli.tools.differentiate import differentiate
    graph, _ = import_model(_model(op, {"x": x}, opset=opset))
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out0"].sum()}), ["x"])
    return np.asarray(evaluate_graph(gradient, {"x": x})["grad_x"])


@pytest.mark.parametrize("op, slope", [("Cos", lambda x: -np.sin(x)), ("Tan", lambda x: 1 / np.cos(x) ** 2)])
def test_float32_cos_and_tan_slopes(op, slope):
    """The gradient of the float64 forms, rounded to float32: within 2 ulps of float64's slope."""
    x = _float32_sample(1, 4000)
    x = x[np.abs(x) < 1e30]  # beyond, 1/cos² of a float32 is still finite; tested apart below
    got = _float32_slopes(op, x)
    want = slope(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want)
    assert _ulps(got[finite], want[finite]).max() <= 2
    assert _ulps(_float32_slopes(op, LARGE), slope(LARGE.astype(np.float64)).astype(np.float32)).max() <= 2


def test_float64_cos_and_tan_slopes_beyond_the_reduced_range():
    """Beyond |x| = 2^19·π/2 the forms' values were right but their slopes SIN's,
    sin(π/2 - x): cos' slope at 1e9 was 1e-16, not -sin(1e9) = -0.55. Now the addition
    formulas turn the accurate sin and cos by d = 0: slopes and second slopes within 1e-15."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    from uopcli import Graph
    from uopcli.tools.differentiate import differentiate
    x = np.array([1e6, -3e7, 1e9, 1e15, -1e17, 1e20, 3e300, -1.7e308])
    for op, slope, second in [("Cos", lambda v: -mp.sin(v), lambda v: -mp.cos(v)),
                              ("Tan", lambda v: mp.sec(v) ** 2, lambda v: 2 * mp.sec(v) ** 2 * mp.tan(v))]:
        graph, _ = import_model(_model(op, {"x": x}, opset=22))
        gradient, _ = differentiate(Graph({"loss": graph.outputs["out0"].sum()}), ["x"])
        got = np.asarray(evaluate_graph(gradient, {"x": x})["grad_x"])
        np.testing.assert_allclose(got, [float(slope(mp.mpf(v))) for v in x], rtol=1e-15, err_msg=op)
        hessian, _ = differentiate(Graph({"loss": gradient.outputs["grad_x"].sum()}), ["x"])
        got = np.asarray(evaluate_graph(hessian, {"x": x})["grad_x"])
        np.testing.assert_allclose(got, [float(second(mp.mpf(v))) for v in x], rtol=1e-14, err_msg=f"{op}''")


# ----------------------------------------------------------------------------- 3. Acosh


@pytest.mark.parametrize("dtype, x", [
    (np.float32, [-3.4028235e38, -8.507059e37, -1e20, -1e4, -2.0, 0.5, -np.inf, np.nan]),  # were inf, inf, inf, -inf
    (np.float16, [-65504.0, -16376.0, -1e4, -2.0, 0.5, -np.inf, np.nan]),                   # were -inf
    (np.float64, [-1.7976931348623157e308, -4.4942328371557893e307, -1e20, -2.0, 0.5, -np.inf, np.nan]),  # inf, inf, 0.0
])
def test_acosh_below_one_is_nan(dtype, x):
    x = np.array(x, dtype)
    model = _model("Acosh", {"x": x}, opset=22)
    ours = _ours(model, {"x": x})[0]
    assert np.isnan(ours).all(), ours
    with np.errstate(invalid="ignore"):
        assert_exact(ours, _reference(model, {"x": x})[0], "against onnx.reference")
    if dtype is not np.float64:  # onnxruntime has no float64 Acosh
        assert_exact(ours, _onnxruntime(model, {"x": x})[0], "against onnxruntime")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_acosh_is_float64s_rounded_once(dtype):
    """From 1 up (1.001: 0.044718165, now 0.04471868, onnxruntime's) to the largest float,
    every float16 and 40,000 float32s: float64's value rounded, bit for bit."""
    x = np.arange(2 ** 16, dtype=np.uint16).view(np.float16) if dtype is np.float16 else \
        np.concatenate([_float32_sample(), 1 + np.float32(2.0 ** -23) * np.arange(2000, dtype=np.float32),
                        np.float32([1.001, 1.0, np.inf])])
    model = _model("Acosh", {"x": x}, opset=22)
    with np.errstate(invalid="ignore"):
        truth = np.arccosh(x.astype(np.float64)).astype(dtype)
        assert_exact(_ours(model, {"x": x})[0], truth, "float64's, rounded")
    one = np.array([1.001], dtype)
    assert_exact(_ours(_model("Acosh", {"x": one}, opset=22), {"x": one})[0],
                 _onnxruntime(_model("Acosh", {"x": one}, opset=22), {"x": one})[0], "at 1.001 against onnxruntime")


def test_float32_acosh_slopes():
    """1/√(x² - 1) within 2 ulps from just above 1 to 3e38; nan below 1 (torch's)."""
    x = np.concatenate([1 + np.float32(2.0 ** -23) * np.geomspace(1, 2 ** 22, 200).astype(np.float32),
                        np.geomspace(2, 3e38, 300).astype(np.float32), np.float32([1e8, 1.0000001e8])])
    want = (1 / np.sqrt(x.astype(np.float64) ** 2 - 1)).astype(np.float32)
    assert _ulps(_float32_slopes("Acosh", x), want).max() <= 2
    assert np.isnan(_float32_slopes("Acosh", np.float32([0.5, -1e20, -2.0]))).all()


# ----------------------------------------------------------------------------- 4. float32 by float64


def _softplus64(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


UNARY64 = {"Exp": np.exp, "Sinh": np.sinh, "Cosh": np.cosh, "Softplus": _softplus64,
           "Mish": lambda x: x * np.tanh(_softplus64(x))}
# (ulps from float64's value rounded: the float64 forms are a few float64 ulps off, which
# rounds differently only near a tie)
FUZZED = np.array([-5.0, -10.0, -11.0, -17.0, -20.0, -30.0, -88.0, -100.0, 12.0, 30.0, 88.0, 89.0], np.float32)


def _dense(dtype) -> np.ndarray:
    if dtype is np.float16:
        return np.arange(2 ** 16, dtype=np.uint16).view(np.float16)
    x = _float32_sample(2)
    return np.concatenate([x[np.abs(x) < 200], np.linspace(-120, 120, 20001, dtype=np.float32), FUZZED])


@pytest.mark.parametrize("op", list(UNARY64))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float32_and_float16_exp_family_are_float64s_rounded(op, dtype):
    """Softplus(-10) was 5,170 ulps off, Softplus(-17 ... -88) 0 (4.1e-8 ... 6.1e-39), Mish
    -0.0 there, Exp(-30) 17 ulps off, Sinh and Cosh 2e-6 off from |x| = 12: now float64's
    value rounded once, bit for bit, over every float16 and 60,000 float32s (nan, ±inf too)."""
    x = _dense(dtype)
    with np.errstate(all="ignore"):
        truth = UNARY64[op](x.astype(np.float64)).astype(dtype)
        ours = _ours(_model(op, {"x": x}, opset=22), {"x": x})[0]
    assert_exact(ours, truth, f"{op}: float64's, rounded")


SOFTPLUS_FUZZED = np.array([0.006715348456054926, 4.539889778243378e-05, 1.6701560525689274e-05,  # was 4.5417706e-05, 1.6689160e-05
                            4.139937459513021e-08, 2.06115369216775e-09, 9.357622912219837e-14,  # were 0.0
                            6.054601485195952e-39], np.float32)


def test_the_fuzzers_float32_softplus_values():
    x = FUZZED[:7]
    model = _model("Softplus", {"x": x}, opset=22)
    assert_exact(_ours(model, {"x": x})[0], SOFTPLUS_FUZZED, "the true values, rounded")
    # onnxruntime's differ from the rounded truth by an ulp at -5 and -17
    assert _ulps(_ours(model, {"x": x})[0], _onnxruntime(model, {"x": x})[0]).max() <= 1


SLOPES64 = {"Exp": np.exp, "Sinh": np.cosh, "Cosh": np.sinh, "Softplus": lambda x: 1 / (1 + np.exp(-x)),
            "Mish": lambda x: np.tanh(_softplus64(x)) + x / np.cosh(_softplus64(x)) ** 2 / (1 + np.exp(-x))}


@pytest.mark.parametrize("op", list(UNARY64))
def test_float32_exp_family_slopes(op):
    """The slopes of the float64 forms, rounded: within 2 ulps of float64's (where normal)."""
    x = np.concatenate([np.linspace(-100, 88, 1881, dtype=np.float32), FUZZED])
    with np.errstate(all="ignore"):
        want = SLOPES64[op](x.astype(np.float64)).astype(np.float32)
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
    got = _float32_slopes(op, x)
    assert _ulps(got[normal], want[normal]).max() <= 2, op


# ----------------------------------------------------------------------------- 5. TopK with nan


def _top_k(x: np.ndarray, k: int, **attrs):
    kind = helper.np_dtype_to_tensor_dtype(x.dtype)
    return _model("TopK", {"x": x}, {"k": np.array([k], np.int64)}, attrs, outputs=2,
                  output_types=[kind, helper.np_dtype_to_tensor_dtype(np.dtype(np.int64))])


ROWS_WITH_NAN = [[5.96e-8, np.nan, -0.73],  # the fuzzer's: [nan, nan] at [0, 0], not [nan, 6e-8] at [1, 0]
                 [np.nan, 1, np.nan, np.inf, -np.inf, -0.0, 0.0, 2, 2], [np.nan, np.nan, np.nan]]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("row", ROWS_WITH_NAN, ids=["fuzzer", "mixed", "all-nan"])
def test_top_k_ranks_nan_largest(dtype, largest, row):
    x = np.array(row, dtype)
    for k in range(len(row) + 1):
        model = _top_k(x, k, largest=largest)
        ours = _ours(model, {"x": x})
        for mine, theirs, what in zip(ours, _reference(model, {"x": x}), ("values", "indices")):
            assert_exact(mine, theirs, f"{what} against onnx.reference")
        if dtype is not np.float64 or largest:
            for mine, theirs, what in zip(ours, _onnxruntime(model, {"x": x}), ("values", "indices")):
                assert_exact(mine, theirs, f"{what} against onnxruntime")
    if row[0] == 5.96e-8 and largest:
        ours = _ours(_top_k(x, 2, largest=1), {"x": x})
        assert np.isnan(ours[0][0]) and ours[0][1] == x[0] and ours[1].tolist() == [1, 0]


def test_top_k_along_a_middle_axis_with_nan_and_its_gradient():
    from uopcli import Graph
    from uopcli.tools.differentiate import differentiate
    x = np.random.default_rng(0).standard_normal((3, 6, 4)).astype(np.float32)
    x[1, 2, 0] = x[2, 4, 3] = x[2, 5, 3] = np.nan
    x[0, 1, 1] = x[0, 3, 1]  # a tie
    model = _top_k(x, 3, axis=1)
    ours = _ours(model, {"x": x})
    for theirs in (_onnxruntime(model, {"x": x}), _reference(model, {"x": x})):
        for mine, other in zip(ours, theirs):
            assert_exact(mine, other, "TopK along axis 1")
    graph, _ = import_model(model)
    gradient, _ = differentiate(Graph({"loss": graph.outputs["out0"].sum()}), ["x"])
    slopes = np.asarray(evaluate_graph(gradient, {"x": x})["grad_x"])
    want = np.zeros_like(x)
    np.put_along_axis(want, ours[1], 1.0, axis=1)
    assert_exact(slopes, want, "the gradient: 1 at each chosen element")


@pytest.mark.parametrize("op, attrs", [("ArgMax", {}), ("ArgMin", {}), ("ArgMax", {"select_last_index": 1}),
                                       ("ArgMin", {"select_last_index": 1}), ("ReduceMax", {}), ("ReduceMin", {})])
def test_nan_in_arg_and_extreme_reductions(op, attrs):
    """nan wins ArgMax and ArgMin and is ReduceMax's and ReduceMin's value, as onnx.reference
    (numpy) gives them; onnxruntime's skip the nan (its comparisons are false): the two
    disagree, and we follow the reference."""
    x = np.array([[5.96e-8, np.nan, -0.73, np.nan], [1.0, -1.0, 2.0, 2.0]], np.float32)
    model = _model(op, {"x": x}, attrs=dict(axis=1, **attrs) if op.startswith("Arg") else {"keepdims": 0},
                   opset=13 if op.startswith("Arg") else 18,
                   output_types=[helper.np_dtype_to_tensor_dtype(np.dtype(np.int64))] if op.startswith("Arg") else None)
    if not op.startswith("Arg"):
        model = _model(op, {"x": x}, {"axes": np.array([1], np.int64)}, {"keepdims": 0})
    ours = _ours(model, {"x": x})[0]
    assert_exact(ours, _reference(model, {"x": x})[0], "against onnx.reference")
    assert_exact(ours[1:], _onnxruntime(model, {"x": x})[0][1:], "against onnxruntime, the row without nan")


# ----------------------------------------------------------------------------- 6. float16 ReduceProd


FUZZED_PROD = np.array([[[100.0, 5.3125], [1.4853515625, 0.71923828125], [-3.103515625, -65504.0], [2.138671875, 4.5625]],
                        [[-1.603515625, 1.5712890625], [-1.7490234375, 0.53466796875],
                         [5.960464477539063e-08, 5.960464477539063e-08], [0.8857421875, 4.6372413635253906e-05]],
                        [[65504.0, 0.0], [-1.4033203125, 3.6171875], [-0.798828125, -1.212890625], [2.681640625, 3.0]]],
                       np.float16)


def test_float16_reduce_prod_multiplies_in_float32():
    """The fuzzer's [3, 4, 2] over axes (0, 1): the float16 running product overflowed to inf,
    which met a 0 (nan) and was 2 ulps off in the other column: [-28.71875, nan] where
    onnxruntime (a float32 product, rounded once) and float64's rounded give [-28.75, 0.0].
    onnx.reference multiplies in float16 (np.prod's dtype), as we did: we follow onnxruntime."""
    model = _model("ReduceProd", {"x": FUZZED_PROD}, {"axes": np.array([0, 1], np.int64)}, {"keepdims": 0})
    ours = _ours(model, {"x": FUZZED_PROD})[0]
    assert_exact(ours, np.array([-28.75, 0.0], np.float16), "the float64 product, rounded")
    assert_exact(ours, _onnxruntime(model, {"x": FUZZED_PROD})[0], "against onnxruntime")


@pytest.mark.parametrize("axes", [[0], [1], [2], [0, 1], [1, 2], [0, 1, 2]])
def test_float16_reduce_prod_against_onnxruntime(axes):
    rng = np.random.default_rng(len(axes) * 7 + axes[0])
    x = (rng.standard_normal((5, 6, 7)) * np.exp(rng.uniform(-3, 3, (5, 6, 7)))).astype(np.float16)
    x[0, 0, 0], x[1, 2, 3], x[4, 5, 6] = 60000.0, 0.0, 1e-7
    model = _model("ReduceProd", {"x": x}, {"axes": np.array(axes, np.int64)}, {"keepdims": 1})
    ours = _ours(model, {"x": x})[0]
    theirs = _onnxruntime(model, {"x": x})[0]
    finite = np.isfinite(theirs)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs)) and np.array_equal(ours[~finite], theirs[~finite])
    assert _ulps(ours[finite], theirs[finite]).max() <= 1  # float32 products in another order


# ----------------------------------------------------------------------------- 7. Concat of mismatched inputs


@pytest.mark.parametrize("a, b, axis, why", [
    (np.zeros(3, np.bool_), np.array(True), 0, r"input 1 \[\] does not fit input 0 \[3\] along axis 0"),  # the fuzzer's seed 524
    (np.zeros(3, np.float32), np.float32(1.0).reshape(()), -1, r"input 1 \[\] does not fit input 0 \[3\] along axis 0"),
    (np.zeros((2, 3), np.float32), np.zeros((2,), np.float32), 0, r"input 1 \[2\] does not fit input 0 \[2, 3\]"),
    (np.zeros((2, 3), np.float32), np.zeros((3, 3), np.float32), 1, r"input 1 \[3, 3\] does not fit input 0 \[2, 3\] along axis 1"),
    (np.array(1.0, np.float32), np.array(2.0, np.float32), 0, r"input 0 is a scalar"),
], ids=["rank1-rank0-bool", "rank1-rank0", "rank2-rank1", "sizes-off-the-axis", "scalars"])
def test_concat_of_inputs_that_do_not_fit_is_refused_naming_the_node(a, b, axis, why):
    """Accepted before (a rank-0 input beside a rank-1 one); onnxruntime and onnx.reference
    refuse each."""
    model = _model("Concat", {"a": a, "b": b}, attrs=dict(axis=axis))
    with pytest.raises(FormatError, match=r"node '/fuzz/Concat' \(Concat\): " + why) as refused:
        import_model(model)
    assert "\n" not in str(refused.value)
    with pytest.raises(Exception):
        _onnxruntime(model, {"a": a, "b": b})
    with pytest.raises(Exception):
        _reference(model, {"a": a, "b": b})


def test_concat_still_joins_what_fits_and_skips_empty_pieces():
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 3), np.float32)
    model = _model("Concat", {"a": a, "b": b, "c": a}, attrs=dict(axis=0))
    assert_exact(_ours(model, {"a": a, "b": b, "c": a})[0], _onnxruntime(model, {"a": a, "b": b, "c": a})[0], "Concat")
