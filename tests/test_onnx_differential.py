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
    graph, weights = import_model(model)
    values = evaluate_graph(graph, {**weights, **feeds})
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
