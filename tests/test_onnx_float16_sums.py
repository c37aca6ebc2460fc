"""Float16 models: the ops that sum many values to a result of their own size (ReduceMean,
ReduceLogSum, GlobalAveragePool, AveragePool, LpPool, InstanceNormalization,
MeanVarianceNormalization) are computed in float32 and rounded to float16 once
(import_table._float32_inside). In float16 their sums overflowed: a mean of values near
4,500 was inf, an instance norm nan, where onnxruntime (its float32 kernels between casts)
and numpy (float32 accumulators) give the finite value. Checked against onnxruntime and
against the float64 value rounded to float16, within one float16 ulp."""

from __future__ import annotations

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime

onnx, ort = need_onnx_and_runtime()

from onnx import TensorProto, helper  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

H = TensorProto.FLOAT16
RNG = np.random.default_rng(16)
# positive values near 2,000-11,000: every sum of a few of them overflows float16 (65,504)
BIG = (np.abs(RNG.standard_normal((2, 3, 6, 6))) * 3000 + 2000).astype(np.float16)


def _model(op, attrs, feeds: dict, opset: int):
    inputs = [helper.make_tensor_value_info(n, H, list(a.shape)) for n, a in feeds.items()]
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", H, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _ours(model, feeds) -> np.ndarray:
    graph, weights = import_model(model)
    assert graph.outputs["y"].dtype.name == "float16"
    return np.asarray(evaluate_graph(graph, {**weights, **feeds})["y"])


def _within_an_ulp(ours: np.ndarray, truth: np.ndarray, what: str, ulps: int = 1) -> None:
    assert ours.dtype == np.float16 and ours.shape == truth.shape, (ours.dtype, ours.shape, truth.shape)
    assert np.isfinite(ours).all(), f"{what}: {ours.reshape(-1)[:4]}"
    off = np.abs(ours.astype(np.float64) - truth.astype(np.float64)) / np.spacing(np.abs(truth).astype(np.float16))
    assert off.max() <= ulps, f"{what}: {off.max()} ulps"


def _instance_norm64(x, scale, bias, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)


def _pool64(x, size, reduce):
    n, c, h, w = x.shape
    windows = x[:, :, :h - h % size, :w - w % size].reshape(n, c, h // size, size, w // size, size)
    return reduce(windows, (3, 5))


ones, zeros = np.ones(3, np.float16), np.zeros(3, np.float16)
CASES = {   # name: (op, attrs, extra inputs, opset, the float64 value)
    "ReduceMean": ("ReduceMean", dict(keepdims=1), {}, 18, lambda x: x.mean(keepdims=True)),
    "ReduceMean-13 axes": ("ReduceMean", dict(keepdims=0, axes=[2, 3]), {}, 13, lambda x: x.mean((2, 3))),
    "ReduceLogSum": ("ReduceLogSum", dict(keepdims=1), {}, 18, lambda x: np.log(x.sum(keepdims=True))),
    "GlobalAveragePool": ("GlobalAveragePool", {}, {}, 22, lambda x: x.mean((2, 3), keepdims=True)),
    "AveragePool": ("AveragePool", dict(kernel_shape=[6, 6], strides=[6, 6]), {}, 19,
                    lambda x: _pool64(x, 6, np.mean)),
    "LpPool": ("LpPool", dict(kernel_shape=[2, 2], strides=[2, 2], p=2), {}, 18,
               lambda x: np.sqrt(_pool64(x ** 2, 2, np.sum))),
    "InstanceNormalization": ("InstanceNormalization", {}, dict(scale=ones * np.float16(1.5), bias=ones), 22,
                              lambda x: _instance_norm64(x, np.full(3, 1.5), np.ones(3))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_float16_sum_that_overflows_is_computed_as_onnxruntime_does(case):
    op, attrs, extra, opset, exact = CASES[case]
    feeds = {"x": BIG, **extra}
    model = _model(op, attrs, feeds, opset)
    ours = _ours(model, feeds)
    _within_an_ulp(ours, exact(BIG.astype(np.float64)).astype(np.float16), f"{case} against float64")
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _within_an_ulp(ours, theirs, f"{case} against onnxruntime")


def test_mean_variance_normalization_against_float64():
    """onnxruntime has no float16 MeanVarianceNormalization; numpy's float64 decides."""
    model = _model("MeanVarianceNormalization", {}, {"x": BIG}, 13)
    x = BIG.astype(np.float64)
    mean = x.mean((0, 2, 3), keepdims=True)
    truth = (x - mean) / (np.sqrt(((x - mean) ** 2).mean((0, 2, 3), keepdims=True)) + 1e-9)
    _within_an_ulp(_ours(model, {"x": BIG}), truth.astype(np.float16), "MeanVarianceNormalization")


@pytest.mark.parametrize("case", sorted(CASES))
def test_ordinary_float16_values_are_within_an_ulp_of_float64(case):
    """Values near 1: within one ulp of the float64 value rounded (the float16 arithmetic
    before was 1,594 ulps off it in InstanceNormalization's x - mean), and within two of
    onnxruntime's (which is itself up to two off)."""
    op, attrs, extra, opset, exact = CASES[case]
    x = (np.abs(RNG.standard_normal((2, 3, 6, 6))) + 0.5).astype(np.float16) if "Log" in case \
        else RNG.standard_normal((2, 3, 6, 6)).astype(np.float16)
    feeds = {"x": x, **extra}
    model = _model(op, attrs, feeds, opset)
    ours = _ours(model, feeds)
    _within_an_ulp(ours, exact(x.astype(np.float64)).astype(np.float16), f"{case} against float64")
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _within_an_ulp(ours, theirs, f"{case} against onnxruntime", ulps=2)


def test_float32_and_float64_models_are_built_as_before():
    """The widening is for float16 alone: a float32 ReduceMean has no CAST."""
    model = _model("ReduceMean", dict(keepdims=1), {"x": BIG}, 18)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    graph, _ = import_model(model)
    assert all(n.op != "CAST" for n in graph.nodes())


def test_the_gradient_of_a_float16_mean_is_its_share():
    """d mean(x) / dx = 1/n for every element (1/216, rounded to float16), through the casts."""
    model = _model("ReduceMean", dict(keepdims=0), {"x": BIG}, 18)
    graph, _ = import_model(model)
    grad, _ = differentiate(graph, ["x"], cotangent="ones")
    got = np.asarray(evaluate_graph(grad, {"x": BIG})["grad_x"])
    assert got.dtype == np.float16 and np.all(got == np.float16(1 / BIG.size))
