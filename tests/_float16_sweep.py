"""The float16 accuracy sweep of the ONNX importer (bench/bench_float16_accuracy.py prints
and writes it; tests/test_onnx_float16_accuracy.py holds the ops it found to their bounds):
one float16 model per case, fed values at each of MAGNITUDES and the op's own edges,
evaluated by uopgrad and by onnxruntime, against the same model in float64 imported by
uopgrad and rounded to float16 once (`sweep_case`); errors in float16 ulps (`ulps`).
SKIPPED lists the import table's ops not swept, with why."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from uopcli import evaluate_graph
from uopcli.interop.onnx.importer import import_model

ort.set_default_logger_severity(3)
MAGNITUDES = (1e-3, 1.0, 30.0, 300.0, 3000.0, 30000.0)
H, D = TensorProto.FLOAT16, TensorProto.DOUBLE


class Case:
    """One op: its opset, attributes, and inputs: name -> (shape, kind), kind one of
    "x" (the swept magnitude), "w" (weights near 1), "pos"/"unit"/"ge1" (x moved into a
    domain), or an ndarray (a constant initializer, kept in its dtype unless float16)."""

    def __init__(self, op, opset, inputs, attrs=None, outputs=1, edges=None, label=None, int_outputs=()):
        self.op, self.opset, self.inputs, self.attrs = op, opset, inputs, attrs or {}
        self.int_outputs = int_outputs
        self.outputs, self.edges, self.label = outputs, edges, label or op


def _sample(rng, shape, magnitude, kind):
    n = int(np.prod(shape))
    a = magnitude * np.exp(rng.uniform(np.log(1 / 3), np.log(2), n)) * rng.choice([-1, 1], n)
    a = np.clip(a, -60000, 60000)
    if kind == "pos":
        a = np.abs(a)
    elif kind == "unit":  # [-1, 1]: the magnitude as the distance from ±1 for the large ones
        a = np.where(np.abs(a) <= 1, a, np.sign(a) * (1 - np.minimum(1 / np.abs(a), 0.999)))
    elif kind == "ge1":
        a = 1 + np.abs(a)
    elif kind == "w":
        a = rng.standard_normal(n)
    return a.reshape(shape).astype(np.float16)


_ROW = [4, 16]
_IMG = [1, 4, 6, 6]
_VEC = [256]


def _u(op, opset, kind="x", attrs=None, edges=None, label=None):
    return Case(op, opset, {"x": (_VEC, kind)}, attrs, edges=edges, label=label)


def _b(op, opset, kinds=("x", "x"), attrs=None, label=None):
    return Case(op, opset, {n: (_VEC, k) for n, k in zip("ab", kinds)}, attrs, label=label)


_I64 = lambda *v: np.array(v, np.int64)  # noqa: E731
_TRIG = np.array([np.pi / 2 * k for k in range(-8, 9)] + [1e-4, -1e-4, 0.0])
_UNIT = np.array([-1, -0.999, -0.9, -0.5, -0.125, -1e-3, 0, 1e-3, 0.125, 0.5, 0.9, 0.999, 1.0])

CASES = [
    # -- elementwise, one input
    _u("Sqrt", 13, "pos"), _u("Exp", 13, edges=np.linspace(-17, 11.1, 40)), _u("Log", 13, "pos"),
    _u("Neg", 13), _u("Abs", 13), _u("Erf", 13, edges=np.linspace(-4, 4, 41)), _u("Tanh", 13),
    _u("Sigmoid", 13, edges=np.linspace(-18, 12, 41)), _u("Relu", 14),
    _u("Gelu", 20, edges=np.linspace(-8, 8, 41)), _u("Gelu", 20, attrs=dict(approximate="tanh"), label="Gelu tanh"),
    _u("Reciprocal", 13), _u("Sin", 22, edges=_TRIG), _u("Cos", 22, edges=_TRIG), _u("Tan", 22, edges=_TRIG),
    _u("Asin", 22, "unit", edges=_UNIT), _u("Acos", 22, "unit", edges=_UNIT), _u("Atan", 22),
    _u("Sinh", 22, edges=np.linspace(-12, 12, 49)), _u("Cosh", 22, edges=np.linspace(-12, 12, 49)),
    _u("Asinh", 22), _u("Acosh", 22, "ge1", edges=np.array([1, 1.001, 1.01, 1.1, 2, 10])),
    _u("Atanh", 22, "unit", edges=_UNIT), _u("Floor", 13), _u("Ceil", 13), _u("Round", 22), _u("Sign", 13),
    _u("LeakyRelu", 16), _u("Elu", 22, edges=np.linspace(-20, 2, 45)), _u("Selu", 22, edges=np.linspace(-20, 2, 45)),
    _u("Celu", 12, edges=np.linspace(-20, 2, 45)), _u("HardSigmoid", 22), _u("HardSwish", 22),
    _u("Softplus", 22, edges=np.linspace(-20, 12, 65)), _u("Softsign", 22),
    _u("Mish", 22, edges=np.linspace(-20, 12, 129)), _u("ThresholdedRelu", 22),
    _u("Swish", 24, edges=np.linspace(-20, 12, 65)), _u("Shrink", 9, attrs=dict(lambd=0.5, bias=0.25)),
    Case("Clip", 13, {"x": (_VEC, "x"), "lo": ([], np.array(-100, np.float16)), "hi": ([], np.array(200, np.float16))}),
    # -- elementwise, several inputs
    _b("Add", 14), _b("Sub", 14), _b("Mul", 14), _b("Div", 14), _b("Max", 13), _b("Min", 13),
    _b("Pow", 15, ("pos", "w")), _b("Mod", 13, attrs=dict(fmod=1)),
    Case("Sum", 13, {n: (_VEC, "x") for n in "abc"}), Case("Mean", 13, {n: (_VEC, "x") for n in "abc"}),
    Case("PRelu", 16, {"x": (_VEC, "x"), "slope": ([1], "w")}),
    Case("Where", 16, {"c": ([256], (np.arange(256) % 3 == 0)), "a": (_VEC, "x"), "b": (_VEC, "x")}),
    # -- along an axis
    Case("Softmax", 13, {"x": (_ROW, "x")}), Case("LogSoftmax", 13, {"x": (_ROW, "x")}),
    Case("Hardmax", 13, {"x": (_ROW, "x")}),
    Case("CumSum", 14, {"x": (_ROW, "x"), "axis": ([], np.array(1, np.int64))}),
    Case("CumProd", 26, {"x": (_ROW, "x"), "axis": ([], np.array(1, np.int64))}),
    Case("TopK", 24, {"x": (_ROW, "x"), "k": ([1], _I64(3))}, outputs=2, int_outputs=(1,)),
    Case("LpNormalization", 22, {"x": (_ROW, "x")}),
    Case("LpNormalization", 22, {"x": (_ROW, "x")}, attrs=dict(p=1), label="LpNormalization p=1"),
    Case("SwiGLU", 28, {"a": (_ROW, "x"), "b": (_ROW, "w")}),
    # -- reductions (keepdims, over the last axis)
    *[Case(op, 18, {"x": (_ROW, kind), "axes": ([1], _I64(1))}) for op, kind in
      [("ReduceSum", "x"), ("ReduceMean", "x"), ("ReduceMax", "x"), ("ReduceMin", "x"), ("ReduceL1", "x"),
       ("ReduceL2", "x"), ("ReduceSumSquare", "x"), ("ReduceLogSum", "pos"), ("ReduceLogSumExp", "x"),
       ("ReduceProd", "x")]],
    Case("GlobalMaxPool", 22, {"x": (_IMG, "x")}), Case("GlobalAveragePool", 22, {"x": (_IMG, "x")}),
    Case("MeanVarianceNormalization", 13, {"x": (_IMG, "x")}),
    # -- windows and products
    Case("MatMul", 13, {"a": ([4, 8], "x"), "b": ([8, 4], "w")}),
    Case("Gemm", 13, {"a": ([4, 8], "x"), "b": ([8, 4], "w"), "c": ([4], "w")}, attrs=dict(alpha=0.5, beta=2.0)),
    Case("Einsum", 12, {"a": ([4, 8], "x"), "b": ([8, 4], "w")}, attrs=dict(equation="ij,jk->ik")),
    Case("Det", 22, {"a": ([2, 3, 3], "x")}),
    Case("Conv", 22, {"x": (_IMG, "x"), "w": ([3, 4, 3, 3], "w"), "b": ([3], "w")}),
    Case("ConvTranspose", 22, {"x": (_IMG, "x"), "w": ([4, 2, 3, 3], "w")}),
    Case("MaxPool", 22, {"x": (_IMG, "x")}, attrs=dict(kernel_shape=[2, 2], strides=[2, 2])),
    Case("AveragePool", 22, {"x": (_IMG, "x")}, attrs=dict(kernel_shape=[3, 3], strides=[1, 1])),
    Case("LpPool", 22, {"x": (_IMG, "x")}, attrs=dict(kernel_shape=[2, 2], strides=[1, 1])),
    Case("MaxUnpool", 22, {"x": ([1, 1, 2, 2], "x"), "i": ([1, 1, 2, 2], _I64(0, 3, 9, 14).reshape(1, 1, 2, 2))},
         attrs=dict(kernel_shape=[2, 2], strides=[2, 2])),
    Case("Col2Im", 18, {"x": ([1, 4, 9], "x"), "image_shape": ([2], _I64(4, 4)), "block_shape": ([2], _I64(2, 2))}),
    # -- normalisation
    Case("BatchNormalization", 15, {"x": (_IMG, "x"), "s": ([4], "w"), "b": ([4], "w"), "m": ([4], "w"),
                                    "v": ([4], np.array([0.5, 1, 2, 4], np.float16))}),
    Case("LayerNormalization", 17, {"x": (_ROW, "x"), "s": ([16], "w"), "b": ([16], "w")}),
    Case("InstanceNormalization", 22, {"x": (_IMG, "x"), "s": ([4], "w"), "b": ([4], "w")}),
    Case("GroupNormalization", 21, {"x": (_IMG, "x"), "s": ([4], "w"), "b": ([4], "w")}, attrs=dict(num_groups=2)),
    Case("RMSNormalization", 23, {"x": (_ROW, "x"), "s": ([16], "w")}),
    Case("LRN", 13, {"x": (_IMG, "x")}, attrs=dict(size=3)),
    # -- resampling, attention, recurrences, losses
    Case("Resize", 19, {"x": ([1, 2, 4, 4], "x"), "roi": ([0], np.zeros(0, np.float32)),
                        "scales": ([4], np.array([1, 1, 1.5, 1.5], np.float32))}, attrs=dict(mode="linear")),
    Case("Resize", 19, {"x": ([1, 2, 4, 4], "x"), "roi": ([0], np.zeros(0, np.float32)),
                        "scales": ([4], np.array([1, 1, 1.5, 1.5], np.float32))}, attrs=dict(mode="cubic"),
         label="Resize cubic"),
    Case("GridSample", 22, {"x": ([1, 2, 4, 4], "x"), "g": ([1, 3, 3, 2], "w")}, attrs=dict(mode="linear")),
    Case("AffineGrid", 20, {"t": ([1, 2, 3], "x"), "size": ([4], _I64(1, 1, 3, 4))}),
    Case("Attention", 23, {"q": ([1, 2, 4, 8], "x"), "k": ([1, 2, 5, 8], "w"), "v": ([1, 2, 5, 8], "w")}),
    Case("RotaryEmbedding", 23, {"x": ([1, 2, 3, 8], "x"), "cos": ([3, 4], "w"), "sin": ([3, 4], "w"),
                                 "pos": ([1, 3], _I64(0, 1, 2).reshape(1, 3))}),
    Case("RNN", 22, {"x": ([3, 1, 4], "x"), "w": ([1, 5, 4], "w"), "r": ([1, 5, 5], "w")}, attrs=dict(hidden_size=5)),
    Case("GRU", 22, {"x": ([3, 1, 4], "x"), "w": ([1, 15, 4], "w"), "r": ([1, 15, 5], "w")}, attrs=dict(hidden_size=5)),
    Case("LSTM", 22, {"x": ([3, 1, 4], "x"), "w": ([1, 20, 4], "w"), "r": ([1, 20, 5], "w")}, attrs=dict(hidden_size=5)),
    Case("SoftmaxCrossEntropyLoss", 13, {"x": (_ROW, "x"), "t": ([4], _I64(0, 3, 7, 15))}),
    Case("NegativeLogLikelihoodLoss", 22, {"x": (_ROW, "x"), "t": ([4], _I64(0, 3, 7, 15))}),
]

SKIPPED = {
    "exact (moves, picks or compares values, no arithmetic)": [
        "Identity", "Dropout", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice",
        "Gather", "GatherElements", "GatherND", "Expand", "Trilu", "Tile", "DepthToSpace", "SpaceToDepth", "Pad",
        "ScatterElements", "ScatterND", "Scatter", "TensorScatter", "CenterCropPad", "ReverseSequence", "ArgMax",
        "ArgMin", "Equal", "Less", "Greater", "GreaterOrEqual", "LessOrEqual", "IsNaN", "IsInf", "Shape", "Size",
        "EyeLike", "OneHot", "Upsample", "Compress", "NonZero", "Unique"],
    "no float16 meaning (bools, integers, types, constants, sequences, control)": [
        "And", "Or", "Not", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift", "Cast",
        "CastLike", "BitCast", "Constant", "ConstantOfShape", "Range", "SequenceEmpty", "SequenceConstruct", "SplitToSequence",
        "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength", "ConcatFromSequence"],
    "its window sampling is tested elsewhere (ops_roi.py is under mutation testing)": ["RoiAlign", "DeformConv"],
    "quantized: integer arithmetic, bit for bit with onnxruntime (tests/test_onnx_import_quant.py)": [
        "QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"],
}


def _model(case: Case, elem: int, consts: dict):
    inputs, inits = [], []
    for name, (shape, kind) in case.inputs.items():
        if isinstance(kind, np.ndarray):
            value = kind.astype(helper.tensor_dtype_to_np_dtype(elem)) if kind.dtype == np.float16 else kind
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, elem, shape))
    outs = [f"y{i}" for i in range(case.outputs)]
    node = helper.make_node(case.op, list(case.inputs), outs, **case.attrs)
    types = [TensorProto.INT64 if i in case.int_outputs else elem for i in range(case.outputs)]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, t, None)
                                                    for o, t in zip(outs, types)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 10
    return model


def _ordered(a: np.ndarray) -> np.ndarray:
    """float16 values as integers in their order: adjacent values differ by one."""
    bits = a.astype(np.float16).view(np.int16).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFF), bits)


def ulps(got: np.ndarray, truth64: np.ndarray) -> tuple[float, int]:
    """(largest distance in float16 steps from truth64 rounded, values non-finite where it is finite)."""
    with np.errstate(over="ignore"):
        truth = np.atleast_1d(truth64).astype(np.float16)
        got = np.atleast_1d(np.asarray(got)).astype(np.float16)
    both_nan = np.isnan(got) & np.isnan(truth)
    one_nan = np.isnan(got) ^ np.isnan(truth)
    distance = np.abs(_ordered(got) - _ordered(truth)).astype(np.float64)
    distance[both_nan] = 0
    distance[one_nan] = np.inf
    nonfinite = int((~np.isfinite(got) & np.isfinite(truth)).sum())
    return (float(distance.max()) if distance.size else 0.0), nonfinite


def _feeds(case: Case, rng, magnitude):
    feeds = {}
    for name, (shape, kind) in case.inputs.items():
        if not isinstance(kind, np.ndarray):
            feeds[name] = _sample(rng, shape, magnitude, kind)
    return feeds


def _edge_feeds(case: Case, rng):
    if case.edges is None:
        return None
    name, (shape, kind) = next(iter(case.inputs.items()))
    edges = np.asarray(case.edges, np.float64)
    values = np.resize(edges, int(np.prod(shape))).reshape(shape).astype(np.float16)
    return {name: values}


def _run_ours(graph_weights, feeds):
    graph, weights = graph_weights
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = evaluate_graph(graph, {**weights, **feeds})
    return [np.asarray(out[f"y{i}"]) for i in range(len(out))]


def sweep_case(case: Case, seed=0):
    rng = np.random.default_rng(seed)
    m16, m64 = _model(case, H, {}), _model(case, D, {})
    ours16 = import_model(m16)
    try:
        ours64 = import_model(m64)
    except Exception:  # noqa: BLE001 - no float64 form (Mod): onnx.reference's float64 is the truth
        ours64 = None
    try:
        session = ort.InferenceSession(m16.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - no float16 kernel: not run
        session = None
    try:
        reference = ReferenceEvaluator(m64)
    except Exception:  # noqa: BLE001
        reference = None
    feed_sets = [(f"±{m:g}", _feeds(case, rng, m)) for m in MAGNITUDES]
    edges = _edge_feeds(case, rng)
    if edges is not None:
        feed_sets.append(("edges", edges))
    row = dict(ours=(0.0, 0, ""), ort=None, ref=None)
    for label, feeds in feed_sets:
        wide = {k: v.astype(np.float64) for k, v in feeds.items()}
        truth = _run_ours(ours64, wide) if ours64 else [np.asarray(r, np.float64) for r in reference.run(None, wide)]
        got = _run_ours(ours16, feeds)
        for g, t in zip(got, truth):
            if t.dtype != np.float64:  # an index output (TopK's): compared elsewhere
                continue
            u, bad = ulps(g, t)
            best = row["ours"]
            row["ours"] = (max(best[0], u), best[1] + bad, label if u > best[0] else best[2])
        if session is not None:
            try:
                theirs = session.run(None, feeds)
            except Exception:  # noqa: BLE001
                theirs = None
            if theirs is not None:
                for g, t in zip(theirs, truth):
                    if t.dtype == np.float64:
                        u, bad = ulps(g, t)
                        best = row["ort"] or (0.0, 0, "")
                        row["ort"] = (max(best[0], u), best[1] + bad, label if u > best[0] else best[2])
        if reference is not None:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    ref = reference.run(None, wide)
                for r, t in zip(ref, truth):
                    if t.dtype == np.float64:
                        u, _ = ulps(np.asarray(r, np.float64), t)
                        row["ref"] = max(row["ref"] or 0.0, u)
            except Exception:  # noqa: BLE001
                pass
    return row
