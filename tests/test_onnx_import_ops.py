"""Every ONNX op the importer takes, on one-node models built with onnx.helper (attributes
varied, edge values included): the imported graph evaluated by our numpy evaluator equals
onnxruntime's result and onnx.reference.ReferenceEvaluator's (float32 within 1e-5
relative; an absolute 1e-6 floor where results cross zero)."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.interop.onnx.import_table import TABLE  # noqa: E402

RNG = np.random.default_rng(0)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


class Init:
    """An input given as an initializer (known at import when it is an integer tensor)."""

    def __init__(self, array):
        self.array = np.asarray(array)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def n32(*shape):
    """float32 values for cases added after the others: their own generator, so that adding
    one leaves every other case's values as they were."""
    return NEW_RNG.standard_normal(shape).astype(np.float32)


NEW_RNG = np.random.default_rng(30)


def i64(values):
    return np.array(values, dtype=np.int64)


EDGES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-4, -3e-3, 0.3, -0.7, 2.5, -12.0, 40.0, -90.0, np.inf, -np.inf, np.nan],
                 dtype=np.float32)


def case(op, *inputs, opset=18, outs=1, types=None, id=None, **attrs):
    return pytest.param(op, inputs, attrs, opset, outs, types or [F] * outs, id=id or op)


CASES = [
    # elementwise, broadcasting, edges
    case("Add", f32(3, 4), f32(4)), case("Sub", f32(2, 1, 4), f32(3, 1)), case("Mul", EDGES, EDGES[::-1].copy()),
    case("Div", f32(3, 4), f32(3, 4)), case("Div", EDGES, np.float32(0.0), id="Div-by-zero"),
    case("Div", i64([7, -7, 7, -7]), i64([2, 2, -2, -2]), types=[I64], id="Div-int-truncates"),
    case("Pow", np.abs(f32(5)) + 0.1, f32(5)), case("Pow", f32(6), i64([2, 3, 0, 1, 2, 3]), id="Pow-int-exponent"),
    case("Sqrt", np.abs(EDGES)), case("Exp", EDGES), case("Log", np.abs(EDGES)), case("Neg", EDGES),
    case("Abs", EDGES), case("Erf", EDGES), case("Erf", f32(200, scale=1.5), id="Erf-spread"),
    case("Tanh", EDGES), case("Tanh", f32(200, scale=0.6), id="Tanh-spread"),
    case("Sigmoid", EDGES[np.abs(EDGES) < 80]), case("Relu", EDGES),
    case("Gelu", f32(50, scale=2), opset=20), case("Gelu", f32(50, scale=2), opset=20, approximate="tanh", id="Gelu-tanh"),
    case("Softmax", f32(2, 3, 5)), case("Softmax", f32(2, 3, 5), axis=1, id="Softmax-axis1"),
    case("Softmax", f32(2, 3, 5), opset=11, id="Softmax-11-coerced"),
    case("LogSoftmax", f32(4, 6)), case("LogSoftmax", f32(4, 6), axis=0, id="LogSoftmax-axis0"),
    case("Equal", i64([1, 2, 3]), i64([1, 0, 3]), types=[B]), case("Equal", EDGES, EDGES, types=[B], id="Equal-nan"),
    case("Less", EDGES, np.float32(0.3), types=[B]), case("Greater", EDGES, np.float32(-0.7), types=[B]),
    case("GreaterOrEqual", EDGES, np.float32(0.3), types=[B]),
    case("And", np.array([True, True, False, False]), np.array([True, False, True, False]), types=[B]),
    case("Not", np.array([True, False]), types=[B]), case("IsNaN", EDGES, types=[B]),
    case("Where", np.array([[True], [False]]), f32(2, 3), f32(3)),
    case("Cast", EDGES[np.isfinite(EDGES)], to=TensorProto.INT32, types=[TensorProto.INT32]),
    case("Cast", i64([0, 1, -3]), to=TensorProto.BOOL, types=[B], id="Cast-bool"),
    case("Cast", np.array([True, False]), to=TensorProto.FLOAT, id="Cast-float"),
    case("CastLike", i64([3, -2]), np.float32(0)), case("Identity", f32(2, 3)),
    case("Dropout", f32(3, 3), opset=13), case("Dropout", f32(3, 3), Init(np.float32(0.5)), opset=13, outs=2,
                                               types=[F, B], id="Dropout-mask"),
    # products, windows
    case("MatMul", f32(3, 4), f32(4, 5)), case("MatMul", f32(2, 1, 3, 4), f32(5, 4, 2), id="MatMul-batch"),
    case("MatMul", f32(4), f32(4, 3), id="MatMul-vector"),
    case("Gemm", f32(3, 4), f32(4, 5), f32(5)),
    case("Gemm", f32(4, 3), f32(5, 4), f32(3, 1), transA=1, transB=1, alpha=0.5, beta=-2.0, id="Gemm-trans"),
    case("Conv", f32(1, 2, 6, 6), f32(3, 2, 3, 3), f32(3)),
    case("Conv", n32(1, 1, 3, 2), n32(2, 1, 3, 2), id="Conv-kernel-as-large-as-the-input"),
    case("Conv", f32(2, 4, 7, 6), f32(4, 2, 3, 2), pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2], group=2,
         id="Conv-pads-strides-dilations-groups"),
    case("Conv", f32(1, 2, 7, 7), f32(2, 2, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2], id="Conv-same-upper"),
    case("Conv", f32(1, 2, 6), f32(2, 2, 4), auto_pad="SAME_LOWER", id="Conv-1d-same-lower"),
    case("MaxPool", f32(1, 2, 6, 6), kernel_shape=[2, 2], strides=[2, 2]),
    case("MaxPool", f32(1, 1, 7, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
         id="MaxPool-ceil-pads"),
    case("MaxPool", f32(1, 1, 8, 8), kernel_shape=[2, 3], dilations=[2, 1], id="MaxPool-dilations"),
    case("MaxPool", -np.abs(f32(1, 1, 5, 5)), kernel_shape=[3, 3], auto_pad="SAME_UPPER", id="MaxPool-same-negative"),
    case("AveragePool", f32(1, 2, 6, 6), kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1],
         id="AveragePool-pads-excluded"),
    case("AveragePool", f32(1, 2, 6, 6), kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1,
         id="AveragePool-pads-counted"),
    case("AveragePool", f32(1, 1, 7, 7), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, id="AveragePool-ceil"),
    case("GlobalAveragePool", f32(2, 3, 4, 5)),
    # normalisation
    case("BatchNormalization", f32(2, 3, 4, 4), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.5, epsilon=1e-3),
    case("BatchNormalization", f32(4, 3, 2), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.5, training_mode=1,
         momentum=0.8, outs=3, id="BatchNormalization-training"),
    case("LayerNormalization", f32(2, 3, 8), f32(8), f32(8)),
    case("LayerNormalization", f32(2, 3, 4), f32(3, 4), axis=1, epsilon=1e-2, outs=3, id="LayerNormalization-axis1-stats"),
    # reductions
    case("ReduceMean", f32(2, 3, 4), Init(i64([1, -1]))), case("ReduceMean", f32(2, 3, 4), opset=13, axes=[0],
                                                              keepdims=0, id="ReduceMean-13-attr"),
    case("ReduceSum", f32(2, 3, 4), Init(i64([1])), keepdims=0), case("ReduceSum", f32(2, 3), id="ReduceSum-all"),
    case("ReduceSum", f32(2, 3), Init(i64([])), noop_with_empty_axes=1, id="ReduceSum-noop"),
    case("ReduceMax", EDGES[:12].reshape(3, 4), Init(i64([1]))), case("ReduceMax", f32(2, 3, 4), opset=13, axes=[0, 2],
                                                                id="ReduceMax-13-attr"),
    # shapes and movement
    case("Shape", f32(2, 3, 4), types=[I64]), case("Shape", f32(2, 3, 4), start=1, end=-1, types=[I64], id="Shape-slice"),
    case("Reshape", f32(2, 3, 4), Init(i64([0, -1]))), case("Reshape", f32(2, 3, 4), Init(i64([4, 0, 2])),
                                                            allowzero=0, id="Reshape-copy-zero"),
    case("Reshape", np.zeros((0, 3), np.float32), Init(i64([3, 0])), allowzero=1, id="Reshape-allowzero"),
    case("Transpose", f32(2, 3, 4)), case("Transpose", f32(2, 3, 4), perm=[1, 2, 0], id="Transpose-perm"),
    case("Flatten", f32(2, 3, 4)), case("Flatten", f32(2, 3, 4), axis=0, id="Flatten-axis0"),
    case("Flatten", f32(2, 3, 4), axis=-1, id="Flatten-axis-1"),
    case("Squeeze", f32(1, 3, 1), Init(i64([-1]))), case("Squeeze", f32(1, 3, 1), id="Squeeze-all"),
    case("Unsqueeze", f32(3, 4), Init(i64([0, -1]))), case("Unsqueeze", f32(3), opset=11, axes=[1], id="Unsqueeze-11"),
    case("Concat", f32(2, 3), f32(2, 1), f32(2, 0), axis=-1),
    case("Split", f32(6, 2), Init(i64([1, 2, 3])), outs=3),
    case("Split", f32(7, 2), num_outputs=3, outs=3, id="Split-num-outputs"),
    case("Split", f32(2, 6), opset=13, axis=1, outs=2, id="Split-13-equal"),
    case("Split", n32(5, 2), outs=2, id="Split-18-by-outputs"),
    case("Slice", f32(5, 6), Init(i64([1, -4])), Init(i64([4, 100])), Init(i64([0, 1])), Init(i64([2, 1]))),
    case("Slice", f32(5, 6), Init(i64([-1])), Init(i64([-100])), Init(i64([1])), Init(i64([-2])), id="Slice-negative-step"),
    case("Slice", f32(5, 6), Init(i64([10])), Init(i64([1])), Init(i64([0])), Init(i64([-1])), id="Slice-clamped"),
    case("Slice", f32(5, 6), Init(i64([4, 5])), Init(i64([0, -7])), Init(i64([0, 1])), Init(i64([-1, -3])),
         id="Slice-negative-step-ends"),
    case("Gather", f32(5, 3), i64([[0, 4], [-1, 2]])), case("Gather", f32(2, 5, 3), Init(i64(1)), axis=1,
                                                            id="Gather-scalar-index"),
    case("Gather", f32(2, 5), Init(i64([4, -5, 0])), axis=-1, id="Gather-known-indices"),
    case("GatherElements", f32(3, 4), i64([[0, 2], [1, -1], [3, 0]]), axis=1),
    case("GatherND", f32(3, 4, 2), i64([[0, 1], [2, -1]])),
    case("GatherND", f32(2, 3, 4), i64([[1], [0]]), batch_dims=1, id="GatherND-batch"),
    # one index vector (1-D indices); three batch elements (each one's offset), with an axis
    # between the batch and the index vector; empty index vectors (each picks all of data)
    case("GatherND", n32(3, 4, 2), i64([2, 1]), id="GatherND-1d-indices"),
    case("GatherND", n32(3, 4, 5), i64([[[1], [3]], [[0], [0]], [[2], [-1]]]), batch_dims=1, id="GatherND-batch-3"),
    case("GatherND", n32(3, 4), np.zeros((2, 0), np.int64), id="GatherND-empty-index"),
    case("Expand", f32(3, 1), Init(i64([2, 1, 4]))),
    case("Trilu", f32(4, 5)), case("Trilu", f32(2, 4, 5), Init(i64(-1)), upper=0, id="Trilu-lower"),
    # constants
    case("ConstantOfShape", Init(i64([2, 3])), value=numpy_helper.from_array(np.array([1.5], np.float32))),
    case("Range", Init(np.float32(1.0)), Init(np.float32(3.0)), Init(np.float32(0.5)), opset=18),
    # recurrences and losses
    case("LSTM", f32(4, 2, 3), f32(1, 16, 3), f32(1, 16, 4), f32(1, 32), hidden_size=4, outs=3),
    case("LSTM", f32(3, 2, 3), f32(2, 16, 3), f32(2, 16, 4), f32(2, 32), None, f32(2, 2, 4), f32(2, 2, 4), f32(2, 12),
         hidden_size=4, direction="bidirectional", outs=3, id="LSTM-bidirectional-peepholes"),
    case("LSTM", f32(2, 3, 3), f32(2, 16, 3), f32(2, 16, 4), f32(2, 32), Init(np.array([3, 3], np.int32)),
         f32(2, 2, 4), f32(2, 2, 4), hidden_size=4, direction="bidirectional", layout=1, outs=3, id="LSTM-layout1"),
    case("LSTM", f32(3, 1, 2), f32(1, 8, 2), f32(1, 8, 2), hidden_size=2, direction="reverse", outs=2,
         id="LSTM-reverse"),
    case("SoftmaxCrossEntropyLoss", f32(4, 5), i64([0, 4, 2, 2])),
    case("SoftmaxCrossEntropyLoss", f32(3, 4, 2), i64([[0, 1], [3, 2], [1, 1]]), np.abs(f32(4)), ignore_index=1,
         outs=2, id="SoftmaxCrossEntropyLoss-weights-ignore-logprob"),
    case("SoftmaxCrossEntropyLoss", f32(4, 5), i64([0, -100, 2, 2]), ignore_index=-100, reduction="sum",
         id="SoftmaxCrossEntropyLoss-sum-ignore"),
    case("SoftmaxCrossEntropyLoss", f32(4, 5), i64([0, 1, 2, 2]), reduction="none", id="SoftmaxCrossEntropyLoss-none"),
    # what uopgrad's exporter writes besides (ops_exact.py): edges, attributes, integer types
    case("Reciprocal", EDGES), case("Sin", f32(40, scale=4)), case("Floor", EDGES), case("Ceil", EDGES),
    case("Round", np.array([-2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.5, 1.5, 2.5, 3.49, np.inf, np.nan], np.float32)),
    case("IsInf", EDGES, opset=20, types=[B]),
    case("IsInf", EDGES, opset=20, detect_negative=0, types=[B], id="IsInf-positive-only"),
    case("Max", f32(3, 4), f32(4)), case("Max", f32(2, 3), f32(3), f32(2, 1), id="Max-three-inputs"),
    case("Max", i64([-5, 3, 0]), i64([2, -9, 0]), types=[I64], id="Max-int"),
    case("Mod", i64([7, -7, 7, -7, 0]), i64([3, 3, -3, -3, 5]), types=[I64]),
    case("Mod", np.array([7, -7, 7, -7], np.int32), np.array([3, 3, -3, -3], np.int32), fmod=1,
         types=[TensorProto.INT32], id="Mod-fmod"),
    case("Or", np.array([True, True, False, False]), np.array([True, False, True, False]), types=[B]),
    case("Xor", np.array([True, True, False, False]), np.array([True, False, True, False]), types=[B]),
    case("BitwiseAnd", i64([-1, 12, 7, -8]), i64([5, 10, -1, 3]), types=[I64]),
    case("BitwiseOr", np.array([0, 12, 255, 1], np.uint8), np.array([1, 3, 0, 128], np.uint8), types=[TensorProto.UINT8]),
    case("BitwiseXor", np.array([-1, 12, 7, -8], np.int32), np.array([5, 10, -1, 3], np.int32),
         types=[TensorProto.INT32]),
    case("BitwiseNot", i64([0, -1, 5, 2 ** 62]), types=[I64]),
    case("BitShift", np.array([1, 255, 2 ** 31, 7], np.uint32), np.array([3, 4, 1, 0], np.uint32), direction="LEFT",
         types=[TensorProto.UINT32]),
    case("BitShift", np.array([1, 255, 2 ** 31, 7], np.uint32), np.array([3, 4, 31, 0], np.uint32), direction="RIGHT",
         types=[TensorProto.UINT32], id="BitShift-right"),
    case("Einsum", f32(3, 4), f32(4, 5), equation="ij,jk->ik", opset=12),
    case("Einsum", f32(2, 3, 4), f32(2, 4, 5), equation="bij,bjk->bki", opset=12, id="Einsum-batch-permuted"),
    case("Einsum", f32(3, 4), equation="ij->j", opset=12, id="Einsum-sum"),
    case("Pad", f32(2, 3), Init(i64([1, 0, 2, 3]))),
    case("Pad", f32(2, 3), Init(i64([0, 2, 1, -1])), Init(np.float32(-1.5)), id="Pad-value-negative"),
    case("Pad", f32(2, 3, 4), Init(i64([1, 2])), Init(np.float32(7.0)), Init(i64([-1])), id="Pad-axes"),
    case("ReduceProd", f32(2, 3, 4), Init(i64([1]))),
    case("ReduceProd", i64([[1, 2, 3], [4, 5, -6]]), opset=13, axes=[1], keepdims=0, types=[I64], id="ReduceProd-13-int"),
    # training mode with a ratio of 0 drops nothing: the identity, every mask element true
    case("Dropout", n32(3, 4), Init(np.float32(0.0)), Init(np.array(True)), opset=13, outs=2, types=[F, B],
         id="Dropout-training-ratio-0"),
    # found by test_onnx_fuzz.py. A SAME_* pool whose window is shorter than its stride: the
    # spec's pad_shape, (out - 1)·s + k - in, is negative (-2 here), a cut of the input's
    # ends, not 0 (ours read x[0], the peers x[1]; SAME_LOWER's -3 cuts (-3 + 1)/2 = -1 first)
    case("MaxPool", np.array([[[[0.125, -0.25, 0.625]]]], np.float32), kernel_shape=[1, 1], strides=[1, 3],
         dilations=[1, 2], auto_pad="SAME_UPPER", opset=11, id="MaxPool-same-upper-cuts"),
    case("AveragePool", np.array([[[[0.125, -0.25, 0.625]]]], np.float32), kernel_shape=[1, 1], strides=[1, 3],
         auto_pad="SAME_UPPER", opset=19, id="AveragePool-same-upper-cuts"),
    case("LpPool", np.array([[[[0.125, -0.25, 0.625]]]], np.float32), kernel_shape=[1, 1], strides=[1, 3],
         auto_pad="SAME_UPPER", opset=18, id="LpPool-same-upper-cuts"),
    case("AveragePool", np.array([[[[0.125, -0.25, 0.625, 0.5]]]], np.float32), kernel_shape=[1, 1],
         strides=[1, 6], auto_pad="SAME_LOWER", opset=19, id="AveragePool-same-lower-cuts"),
    # Pad's negative pads cutting more than the axis holds: the output is the fill alone
    # (it was refused: the builder's pad cuts before it pads)
    case("Pad", np.array([[0.5]], np.float32), Init(i64([0, -2, 0, 1])), id="Pad-cut-past-the-axis-empty"),
    case("Pad", np.array([[0.5, -1.0]], np.float32), Init(i64([-2, 0, 3, 0])), Init(np.float32(1.5)),
         id="Pad-cut-past-the-axis-filled"),
    # wrap wider than the axis repeats it (numpy's wrap; it was refused)
    case("Pad", np.arange(6, dtype=np.float32).reshape(2, 3), Init(i64([2, 7, 1, 0])), mode="wrap", opset=19,
         id="Pad-wrap-wider-than-the-axis"),
    case("Pad", np.arange(6, dtype=np.float32).reshape(2, 3), Init(i64([-1, 0, 3, -2])), mode="wrap", opset=19,
         id="Pad-wrap-wider-than-what-the-cut-leaves"),
    # a scalar's einsum: the equation "" (it was taken for a missing attribute)
    case("Einsum", np.array(0.75, np.float32), equation="", opset=12, id="Einsum-scalar"),
    # an ellipsis of size 1 broadcast against one of 2 (it was refused: the operand reshaped to 2)
    case("Einsum", np.array([0.5], np.float32), np.array([0.25, -2.0], np.float32), equation="...,...", opset=12,
         id="Einsum-ellipsis-broadcast"),
    case("Einsum", np.array([[0.5], [3.0]], np.float32), np.array([[0.25, -2.0, 1.5]], np.float32),
         equation="i...,j...->ij...", opset=12, id="Einsum-ellipsis-broadcast-both"),
    # num_outputs that leave the last part empty: 4 in 3 is [2, 2, 0] (it was refused)
    case("Split", np.arange(4, dtype=np.float32), num_outputs=3, outs=3, id="Split-num-outputs-last-empty"),
    # gathers of bools and narrow integers by indices known only when evaluating keep the
    # data's type (they came out int32, uint32: a Where on the gathered mask of torch's
    # dynamo-exported attention was refused, "the condition must be bool")
    case("Gather", np.array([[True, False, True], [False, False, True]]), i64([[2, 0], [-1, 1]]), axis=1, types=[B],
         id="Gather-bool"),
    case("Gather", np.array([3, -4, 127, -128], np.int8), i64([3, 0, 2]), types=[TensorProto.INT8], id="Gather-int8"),
    case("Gather", np.array([3, 4, 255], np.uint8), i64([[2], [0]]), types=[TensorProto.UINT8], id="Gather-uint8"),
    case("GatherND", np.array([[True, False], [False, True]]), i64([[0, 1], [1, 1], [0, 0]]), types=[B],
         id="GatherND-bool"),
]

_ONNX_TYPE = {np.dtype(np.float32): F, np.dtype(np.int64): I64, np.dtype(bool): B, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.uint32): TensorProto.UINT32,
              np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.float16): TensorProto.FLOAT16}


def one_node_model(op, inputs, attrs, opset, outs, types):
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for i, value in enumerate(inputs):
        if value is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if isinstance(value, Init):
            initializers.append(numpy_helper.from_array(value.array, name))
        else:
            array = np.asarray(value)
            graph_inputs.append(helper.make_tensor_value_info(name, _ONNX_TYPE[array.dtype], array.shape))
            feeds[name] = array
    outputs = [f"out{i}" for i in range(outs)]
    node = helper.make_node(op, names, outputs, name=f"/block/{op}", **attrs)
    graph = helper.make_graph([node], "one", graph_inputs, [helper.make_tensor_value_info(o, t, None)
                                                             for o, t in zip(outputs, types)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, feeds


def ours(model, feeds):
    graph, weights = import_model(model)
    values = evaluate_graph(graph, {**weights, **feeds})
    return [values[name] for name in graph.output_names]


def assert_same(got, want, what, zero_signs=True):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
        # allclose counts -0.0 as 0.0 and any nan as any nan: where the values are exact
        # (zeros, non-finite ones) the bits are compared too
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: where nan is")
        exact = ((want == 0) if zero_signs else np.zeros(want.shape, bool)) | np.isinf(want)
        same = np.signbit(got[exact]) == np.signbit(want[exact])
        assert same.all() and (got[exact] == want[exact]).all(), \
            f"{what}: the signs of zeros or infinities differ: ours {got[exact][~same]}, theirs {want[exact][~same]}"
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# Where one of the two peers does not implement the spec, the other one is the judge:
NOT_BY_REFERENCE = {  # onnx 1.23's reference normalises Softmax-11 along the last axis only,
    "Softmax-11-coerced", "Pad-value-negative",  # and its Pad (np.pad) refuses negative pads,
    "GatherND-empty-index",  # and its GatherND cannot reshape indices whose last axis is 0,
    # and its AveragePool and LpPool fail on a negative pad_shape, as its Pad on negative pads
    "AveragePool-same-upper-cuts", "AveragePool-same-lower-cuts", "LpPool-same-upper-cuts",
    "Pad-cut-past-the-axis-empty", "Pad-cut-past-the-axis-filled", "Pad-wrap-wider-than-what-the-cut-leaves",
    "Einsum-scalar"}  # and its Einsum refuses the equation "" ("equation is empty")
# onnxruntime's Relu keeps -0.0 (x >= 0 ? x : 0); onnx.reference's, np.maximum(x, 0), gives
# +0.0, and the spec (max(0, x)) does not say: ours follows the reference, so the sign of a
# zero is compared with onnx.reference only
ZERO_SIGN_BY_REFERENCE_ONLY = {"Relu"}
NOT_BY_ONNXRUNTIME = {  # onnxruntime's CPU LSTM refuses layout=1 ("Batchwise recurrent operations")
    "LSTM-layout1",
    # Split-18 with neither split nor num_outputs (the spec asks for one): onnxruntime refuses
    # it, onnx.reference splits by the outputs as Split-13 does, and so do we
    "Split-18-by-outputs"}


@pytest.mark.parametrize("op, inputs, attrs, opset, outs, types", CASES)
def test_op_matches_onnxruntime_and_the_reference(request, op, inputs, attrs, opset, outs, types):
    case_id = request.node.callspec.id
    model, feeds = one_node_model(op, inputs, attrs, opset, outs, types)
    got = ours(model, feeds)
    if case_id not in NOT_BY_REFERENCE:
        for i, (mine, theirs) in enumerate(zip(got, ReferenceEvaluator(model).run(None, feeds))):
            assert_same(mine, theirs, f"{op} output {i} against onnx.reference")
    if case_id in NOT_BY_ONNXRUNTIME:
        return
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for i, (mine, theirs) in enumerate(zip(got, session.run(None, feeds))):
        assert_same(mine, theirs, f"{op} output {i} against onnxruntime", case_id not in ZERO_SIGN_BY_REFERENCE_ONLY)


@pytest.mark.parametrize("data, indices, batch_dims, why", [
    (n32(3, 4), np.int64(1), 0, "indices [] do not fit data [3, 4] with batch_dims=0"),
    (n32(3, 4), i64([[0, 1, 2]]), 0, "indices [1, 3] do not fit data [3, 4] with batch_dims=0"),
    (n32(2, 3, 4), i64([[0, 1, 2], [1, 0, 0]]), 1, "indices [2, 3] do not fit data [2, 3, 4] with batch_dims=1"),
    (n32(2, 3, 4), i64([[0], [1], [2]]), 1, "indices [3, 1] do not fit data [2, 3, 4] with batch_dims=1"),
], ids=["scalar-indices", "index-too-long", "index-too-long-after-batch", "batch-differs"])
def test_gather_nd_refusals_name_the_shapes(data, indices, batch_dims, why):
    model, _ = one_node_model("GatherND", [data, indices], dict(batch_dims=batch_dims), 18, 1, [F])
    with pytest.raises(FormatError) as caught:
        ours(model, {})
    message = str(caught.value)
    assert "\n" not in message and "node '/block/GatherND' (GatherND)" in message and why in message, message


def test_constant_from_value_floats_and_value_int():
    nodes = [helper.make_node("Constant", [], ["a"], value_floats=[1.5, -2.0, 0.25]),
             helper.make_node("Constant", [], ["b"], value_int=3),
             helper.make_node("Cast", ["b"], ["bf"], to=F),
             helper.make_node("Add", ["a", "bf"], ["out"])]
    graph = helper.make_graph(nodes, "constants", [], [helper.make_tensor_value_info("out", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (got,) = ours(model, {})
    assert_same(got, ReferenceEvaluator(model).run(None, {})[0], "Constant value_floats + value_int")
    assert got.tolist() == [4.5, 1.0, 3.25]


def test_every_row_of_the_table_is_tested():
    from test_onnx_import_layers import LAYER_CASES  # issue 29's layer ops
    tested = {p.values[0] for p in CASES + LAYER_CASES} | {"Constant"}  # Constant: in every exported model (test_onnx_import)
    from test_onnx_import_families import CASES as FAMILY_CASES  # the elementwise, activation, reduce, index ops
    tested |= {p.values[0] for p in FAMILY_CASES}
    from test_onnx_import_sequences import TESTED_OPS as SEQUENCE_OPS  # unrolled at import
    tested |= SEQUENCE_OPS
    from test_onnx_import_quant import TESTED_OPS as QUANTIZED_OPS  # against onnxruntime bit for bit
    tested |= QUANTIZED_OPS
    tested.add("BitCast")  # test_onnx_bitcast: every pair of one width, bit for bit
    from test_onnx_import_counted_shapes import TESTED_OPS as COUNTED_OPS  # shapes counted from known values
    tested |= COUNTED_OPS
    from test_onnx_signal import TESTED_OPS as SIGNAL_OPS  # against numpy.fft, torch.stft, onnxruntime
    tested |= SIGNAL_OPS
    assert set(TABLE) <= tested, f"ops without a case: {sorted(set(TABLE) - tested)}"


def test_constant_in_all_its_forms():
    nodes = [helper.make_node("Constant", [], ["a"], value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))),
             helper.make_node("Constant", [], ["b"], value_float=2.5),
             helper.make_node("Constant", [], ["c"], value_ints=[1, 2, 3]),
             helper.make_node("Mul", ["a", "b"], ["ab"]),
             helper.make_node("Cast", ["c"], ["cf"], to=F),
             helper.make_node("Add", ["ab", "cf"], ["out"])]
    graph = helper.make_graph(nodes, "constants", [], [helper.make_tensor_value_info("out", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (got,) = ours(model, {})
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {})[0])
    assert math.isclose(float(got[1, 2]), 5 * 2.5 + 3)
