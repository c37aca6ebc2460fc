"""ONNX's quantized ops (ops_quant.py) against onnxruntime's CPU kernels, bit for bit:
QuantizeLinear and DequantizeLinear at every version with a kernel (10-25), per tensor,
per axis (negative axes too) and blocked (block sizes that divide the axis and that do
not), int8/uint8/int16/uint16, negative zero points, output_dtype, precision, float16
scales; QuantizeLinear's edges (ties at .5 rounding to even, saturation at both ends, ±inf,
nan); DynamicQuantizeLinear (its function body); MatMulInteger, ConvInteger, QLinearMatMul
(10, 21) and QLinearConv, exact in int32 and requantized. Where onnxruntime has no kernel
(float64 scales, outside the spec; version 28) or is not exact (uint8 x int8 products with
8-bit weights: its AVX2 kernel adds pairs of products in saturating int16), onnx.reference
judges. A QDQ model (int8 weights as initializers with float scales, as
onnxruntime.quantization.quantize_static writes) evaluates as onnxruntime does, also through
the installed CLI, and its gradient with respect to the float scales and activations
matches finite differences (`uopgrad check`); bad nodes are refused in one line."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

RNG = np.random.default_rng(29)
INT = {np.int8: (-128, 127), np.uint8: (0, 255), np.int16: (-32768, 32767), np.uint16: (0, 65535)}
# quotients x / scale at the edges: ties (to even), the saturation bounds of every type and
# just past them, huge, infinite, nan, signed zeros, tiny
EDGES = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5, 0.49999997, -0.49999997, 126.5, 127.5,
                  128.5, -127.5, -128.5, -129.5, 254.5, 255.5, 256.5, 32766.5, 32767.5, 32768.5, -32768.5,
                  -32769.5, 65534.5, 65535.5, 65536.5, 1e10, -1e10, np.inf, -np.inf, np.nan, 1e-30, -1e-30,
                  3.4e38, -3.4e38])


# ----------------------------------------------------------------------------- running one node


def model_of(op, inputs: list, attrs: dict | None = None, opset: int = 21, initializers: tuple = (),
             outputs: int = 1):
    """One `op` node named 'n' on inputs [(name, array or None)], those named in
    `initializers` stored as initializers, the rest graph inputs. Returns (model, feeds)."""
    graph_inputs, inits, feeds = [], [], {}
    for name, array in inputs:
        if array is None:
            continue
        array = np.asarray(array)
        if name in initializers:
            inits.append(numpy_helper.from_array(array, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype),
                                                              array.shape))
            feeds[name] = array
    names = ["" if array is None else name for name, array in inputs]
    outs = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, name="n", **(attrs or {}))
    graph = helper.make_graph([node], "one", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def ours(model, feeds) -> list:
    graph, weights = import_model(model)
    values = evaluate_graph(graph, {**weights, **feeds})
    return [values[o.name] for o in model.graph.output]


def onnxruntime(model, feeds, optimize: bool = True) -> list:
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def reference(model, feeds) -> list:
    return ReferenceEvaluator(model).run(None, feeds)


def same_bits(got, want, what: str = "") -> None:
    """Equal dtype, shape and bytes (a float's nan, -0.0 and every last bit)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} != " \
                                                                f"{want.dtype}{want.shape}"
    bad = got.reshape(-1).view(np.uint8).reshape(got.size, -1) != want.reshape(-1).view(np.uint8).reshape(want.size, -1)
    where = np.flatnonzero(bad.any(axis=1)) if got.size else []
    assert not len(where), f"{what}: {len(where)} of {got.size} differ, first at {where[0]}: " \
                           f"{got.reshape(-1)[where[0]]} != {want.reshape(-1)[where[0]]}"


def against_onnxruntime(op, inputs, attrs=None, opset=21, initializers=(), outputs=1, optimize=True):
    model, feeds = model_of(op, inputs, attrs, opset, initializers, outputs)
    for i, (got, want) in enumerate(zip(ours(model, feeds), onnxruntime(model, feeds, optimize))):
        same_bits(got, want, f"{op}-{opset} {attrs or {}} output {i}")


def against_reference(op, inputs, attrs=None, opset=21, initializers=()):
    model, feeds = model_of(op, inputs, attrs, opset, initializers)
    same_bits(ours(model, feeds)[0], reference(model, feeds)[0], f"{op}-{opset} {attrs or {}} (onnx.reference)")


def quantized(dtype, shape, low=None, high=None):
    lo, hi = INT[dtype]
    return RNG.integers(lo if low is None else low, (hi if high is None else high) + 1, shape).astype(dtype)


def zero_point(dtype, shape=()):
    """Zero points away from 0: negative for signed types."""
    lo, hi = INT[dtype]
    return RNG.integers(lo // 2 if lo else 1, hi // 2 + 1, shape).astype(dtype) if shape else \
        np.array(lo // 3 if lo else hi // 3 + 1, dtype)


def quotients(scale, dtype=np.float32, n=200):
    """x whose x / scale are the edges (scale a power of 2: exact), then random values
    around every type's range."""
    edges = np.clip(EDGES * scale, -3.4e38, 3.4e38) if dtype == np.float32 else np.clip(EDGES * scale, -6e4, 6e4)
    edges = edges.astype(dtype)
    spread = (RNG.standard_normal(n) * 150 * scale).astype(dtype)
    ties = ((RNG.integers(-300, 300, n) + 0.5) * scale).astype(dtype)
    return np.concatenate([edges, spread, ties])


# the import table's rows this file tests (test_onnx_import_ops.py: every row has a case)
TESTED_OPS = {"QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"}
Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25)
WIDE_TYPES_FROM = 21  # int16 and uint16 quantized types, blocked quantization


def _versions_and(types) -> list:
    """(version, type) pairs the spec allows: int16 and uint16 from WIDE_TYPES_FROM on."""
    return [(v, t) for t in types for v in Q_VERSIONS if v >= WIDE_TYPES_FROM or t not in (np.int16, np.uint16)]


# ----------------------------------------------------------------------------- QuantizeLinear


@pytest.mark.parametrize("version, dtype", _versions_and([np.int8, np.uint8, np.int16, np.uint16, None]))
def test_quantize_per_tensor_edges(version, dtype):
    """Ties to even, saturation at both ends, ±inf, nan (the range's minimum, as onnxruntime),
    for a negative (signed) or positive zero point; no zero point: uint8."""
    for scale in (1.0, 0.25, 8.0):
        x = quotients(scale)
        zp = None if dtype is None else zero_point(dtype)
        against_onnxruntime("QuantizeLinear", [("x", x), ("s", np.float32(scale)), ("z", zp)], opset=version)
    x = (RNG.standard_normal((3, 50)) * 40).astype(np.float32)  # a scale that is no power of 2
    against_onnxruntime("QuantizeLinear", [("x", x), ("s", np.float32(0.3711)),
                                           ("z", None if dtype is None else zero_point(dtype))], opset=version)


@pytest.mark.parametrize("version", Q_VERSIONS[1:])
@pytest.mark.parametrize("axis", [1, -1, -3, 0])
def test_quantize_per_axis(version, axis):
    """A 1-D scale and zero point along `axis` (negative from the back) of a rank-3 x."""
    x = (RNG.standard_normal((2, 3, 5)) * 200).astype(np.float32)
    size = x.shape[axis]
    for dtype in (np.int8, np.uint8) + ((np.int16,) if version >= WIDE_TYPES_FROM else ()):
        scale = RNG.uniform(0.5, 3, size).astype(np.float32)
        against_onnxruntime("QuantizeLinear", [("x", x), ("s", scale), ("z", zero_point(dtype, (size,)))],
                            {"axis": axis}, opset=version)


@pytest.mark.parametrize("version", [13, 21, 25])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_per_axis_of_a_cube(version, axis):
    """x [4, 4, 4]: a scale along the wrong axis would fit the shape too."""
    x = (RNG.standard_normal((4, 4, 4)) * 200).astype(np.float32)
    scale, zp = RNG.uniform(0.5, 3, 4).astype(np.float32), np.array([-100, 0, 50, 7], np.int8)
    against_onnxruntime("QuantizeLinear", [("x", x), ("s", scale), ("z", zp)], {"axis": axis}, opset=version)
    against_onnxruntime("DequantizeLinear", [("x", quantized(np.int8, (4, 4, 4))), ("s", scale), ("z", zp)],
                        {"axis": axis}, opset=version)


@pytest.mark.parametrize("version", Q_VERSIONS[3:])
@pytest.mark.parametrize("axis, block", [(1, 4), (1, 3), (-1, 2), (0, 5), (-2, 8)])
def test_quantize_blocked(version, axis, block):
    """Blocked: the scale's axis has ceil(size / block) entries; 3 and 5 do not divide
    8 and 6 (the last block is short), 8 is the whole axis."""
    x = (RNG.standard_normal((6, 8, 5)) * 100).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block)
    for dtype in (np.int8, np.uint16):
        scale = RNG.uniform(0.5, 3, shape).astype(np.float32)
        against_onnxruntime("QuantizeLinear", [("x", x), ("s", scale), ("z", zero_point(dtype, tuple(shape)))],
                            {"axis": axis, "block_size": block}, opset=version)


@pytest.mark.parametrize("version", Q_VERSIONS[3:])
@pytest.mark.parametrize("code", [TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16])
def test_quantize_output_dtype_without_zero_point(version, code):
    against_onnxruntime("QuantizeLinear", [("x", quotients(0.5)), ("s", np.float32(0.5))],
                        {"output_dtype": code}, opset=version)


@pytest.mark.parametrize("version", [19, 21, 23, 24, 25])
def test_quantize_float16(version):
    """float16 x and scale: divided in float32 before version 23 (onnxruntime's kernels; the
    spec says nothing), in float16 from 23 (the scale's type), or in `precision`'s."""
    x = np.concatenate([quotients(0.25, np.float16), (RNG.standard_normal(3000) * 30).astype(np.float16)])
    scale = np.float16(0.3711)
    against_onnxruntime("QuantizeLinear", [("x", x), ("s", scale), ("z", np.int8(-3))], opset=version)
    against_onnxruntime("QuantizeLinear", [("x", x), ("s", np.float16(0.25)), ("z", np.uint8(7))], opset=version)
    if version >= 23:
        against_onnxruntime("QuantizeLinear", [("x", x), ("s", scale), ("z", np.int8(-3))],
                            {"precision": TensorProto.FLOAT}, opset=version)
        against_onnxruntime("QuantizeLinear", [("x", x.astype(np.float32)), ("s", scale), ("z", np.int8(5))],
                            opset=version)  # x float32, scale float16: divided in float16


def test_the_float16_division_differs_between_versions_21_and_23():
    """(So the test above can tell them apart.)"""
    x = (RNG.standard_normal(3000) * 30).astype(np.float16)
    outs = [ours(*model_of("QuantizeLinear", [("x", x), ("s", np.float16(0.3711)), ("z", np.int8(0))], opset=v))[0]
            for v in (21, 23)]
    assert (outs[0] != outs[1]).sum() > 10


@pytest.mark.parametrize("version", [13, 21, 25, 28])
def test_quantize_float64_and_version_28_against_onnx_reference(version):
    """float64 x and scale (outside the spec; onnxruntime has no kernel) divide in float64;
    version 28 (float6 types added) has no onnxruntime kernel: onnx.reference judges
    (finite quotients only: it converts nan and inf to int32 unspecified)."""
    finite = quotients(0.25)[np.isfinite(quotients(0.25)) & (np.abs(quotients(0.25)) < 1e9)]
    for dtype in (np.float32, np.float64):
        against_reference("QuantizeLinear", [("x", finite.astype(dtype)), ("s", dtype(0.25)), ("z", np.int8(-3))],
                          opset=version)
        per_axis = (RNG.standard_normal((4, 3)) * 100).astype(dtype)
        against_reference("QuantizeLinear", [("x", per_axis), ("s", RNG.uniform(0.5, 2, 3).astype(dtype)),
                                             ("z", np.array([-5, 0, 7], np.int8))], {"axis": -1}, opset=version)


# ----------------------------------------------------------------------------- DequantizeLinear


@pytest.mark.parametrize("version, dtype", _versions_and([np.int8, np.uint8, np.int16, np.uint16, np.int32]))
def test_dequantize_per_tensor(version, dtype):
    """Every value of 8-bit types, both ends of 16-bit ones, int32 (no zero point)."""
    if dtype == np.int32:
        x = np.concatenate([RNG.integers(-2**31, 2**31, 300), [-2**31, 2**31 - 1, 0, 2**24 + 1]]).astype(np.int32)
        against_onnxruntime("DequantizeLinear", [("x", x), ("s", np.float32(0.3711))], opset=version)
        return
    lo, hi = INT[dtype]
    x = np.concatenate([np.arange(lo, hi + 1) if hi < 256 else quantized(dtype, 500), [lo, hi]]).astype(dtype)
    for zp in (zero_point(dtype), None):
        against_onnxruntime("DequantizeLinear", [("x", x), ("s", np.float32(0.3711)), ("z", zp)], opset=version)


@pytest.mark.parametrize("version", Q_VERSIONS[1:])
@pytest.mark.parametrize("axis", [1, -1, -3])
def test_dequantize_per_axis(version, axis):
    x = quantized(np.int8, (2, 3, 5))
    size = x.shape[axis]
    against_onnxruntime("DequantizeLinear", [("x", x), ("s", RNG.uniform(0.01, 1, size).astype(np.float32)),
                                             ("z", zero_point(np.int8, (size,)))], {"axis": axis}, opset=version)


@pytest.mark.parametrize("version", Q_VERSIONS[3:])
@pytest.mark.parametrize("axis, block", [(1, 4), (1, 3), (-1, 2), (0, 5)])
def test_dequantize_blocked(version, axis, block):
    for dtype in (np.uint8, np.int16):
        x = quantized(dtype, (6, 8, 5))
        shape = list(x.shape)
        shape[axis] = -(-shape[axis] // block)
        against_onnxruntime("DequantizeLinear", [("x", x), ("s", RNG.uniform(0.01, 1, shape).astype(np.float32)),
                                                 ("z", zero_point(dtype, tuple(shape)))],
                            {"axis": axis, "block_size": block}, opset=version)


@pytest.mark.parametrize("version", [19, 21, 23, 24, 25])
def test_dequantize_float16_and_output_dtype(version):
    """A float16 scale (multiplied in float32, rounded once to float16); from 23 output_dtype
    float16 of a float32 scale and float32 of a float16 one."""
    dtype = np.uint16 if version >= WIDE_TYPES_FROM else np.uint8
    x = quantized(dtype, 2000)
    against_onnxruntime("DequantizeLinear", [("x", x), ("s", np.float16(0.3711)), ("z", zero_point(dtype))],
                        opset=version)
    if version >= 23:
        against_onnxruntime("DequantizeLinear", [("x", x), ("s", np.float32(0.3711)), ("z", zero_point(dtype))],
                            {"output_dtype": TensorProto.FLOAT16}, opset=version)
        against_onnxruntime("DequantizeLinear", [("x", x), ("s", np.float16(0.3711)), ("z", zero_point(dtype))],
                            {"output_dtype": TensorProto.FLOAT}, opset=version)


@pytest.mark.parametrize("version", [19, 21, 28])  # (onnx.reference has no DequantizeLinear-13)
def test_dequantize_float64_and_version_28_against_onnx_reference(version):
    x = quantized(np.int8, (4, 3))
    for dtype in (np.float32, np.float64):
        against_reference("DequantizeLinear", [("x", x), ("s", RNG.uniform(0.01, 1, 3).astype(dtype)),
                                               ("z", np.array([-5, 0, 7], np.int8))], {"axis": 1}, opset=version)


# ----------------------------------------------------------------------------- DynamicQuantizeLinear


@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "edges"])
def test_dynamic_quantize_linear(kind):
    """Its function body (ReduceMin/Max, Div, QuantizeLinear, ...): y, scale and zero point
    as onnxruntime's kernel computes them."""
    x = {"normal": RNG.standard_normal((3, 40)) * 4, "positive": RNG.uniform(0.5, 9, (3, 40)),
         "negative": -RNG.uniform(0.5, 9, (3, 40)),
         "edges": np.array([-2.55, 0, 2.55, 1.275, -1.275, 0.005, 0.015, 254.5 / 100])}[kind].astype(np.float32)
    against_onnxruntime("DynamicQuantizeLinear", [("x", x)], opset=11, outputs=3)


def test_dynamic_quantize_linear_of_zeros_follows_the_spec_body():
    """All zeros: the spec's body divides a range of 0 by 255, a scale of 0; onnxruntime's
    kernel says 1.0 and onnx.reference's 1/255 (both special-case it). y and the zero point
    (0) agree with both, and y dequantizes to the same zeros."""
    model, feeds = model_of("DynamicQuantizeLinear", [("x", np.zeros((2, 3), np.float32))], opset=11, outputs=3)
    got, theirs = ours(model, feeds), onnxruntime(model, feeds)
    for i in (0, 2):
        same_bits(got[i], theirs[i], f"output {i}")
    assert got[1] == 0 and theirs[1] == 1 and reference(model, feeds)[1] == np.float32(1 / 255)


# ----------------------------------------------------------------------------- integer products


def _a_b(a_type, b_type, a_shape, b_shape, b_bits=8):
    """a and b, b's values in [-64, 63] where `b_bits` is 7 (onnxruntime's uint8 x int8 kernel
    adds pairs of products in int16 and saturates, as quantize_static's reduce_range avoids)."""
    a = quantized(a_type, a_shape)
    b = quantized(b_type, b_shape, -64, 63) if b_bits == 7 and b_type == np.int8 else quantized(b_type, b_shape)
    return a, b


@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_matmul_integer(types):
    """Exact int32 products: scalar and per-column zero points, a batch, a vector operand."""
    a_type, b_type = types
    for a_shape, b_shape in (((5, 40), (40, 7)), ((2, 3, 40), (40, 6)), ((40,), (40, 3))):
        a, b = _a_b(a_type, b_type, a_shape, b_shape, 7)
        against_onnxruntime("MatMulInteger", [("a", a), ("b", b), ("az", zero_point(a_type)),
                                              ("bz", zero_point(b_type))], opset=10)
        against_onnxruntime("MatMulInteger", [("a", a), ("b", b)], opset=10)
        against_onnxruntime("MatMulInteger", [("a", a), ("b", b), ("az", zero_point(a_type)),
                                              ("bz", zero_point(b_type, (b_shape[-1],)))], opset=10)


def test_matmul_integer_full_range_against_onnx_reference():
    """uint8 x int8 with 8-bit weights, where onnxruntime's AVX2 kernel saturates in int16:
    exact against onnx.reference (and so not onnxruntime's on such machines)."""
    a, b = _a_b(np.uint8, np.int8, (6, 64), (64, 5))
    against_reference("MatMulInteger", [("a", a), ("b", b), ("az", np.uint8(3)), ("bz", np.int8(-128))], opset=10)


def test_matmul_integer_accumulates_in_int32_and_wraps():
    """The spec: accumulation may overflow only in 32 bits; (-128)·(-128)·2^17 wraps to 2^31."""
    a, b = np.full((1, 2**17), -128, np.int8), np.full((2**17, 1), -128, np.int8)
    model, feeds = model_of("MatMulInteger", [("a", a), ("b", b)], opset=10)
    got = ours(model, feeds)[0]
    assert got.dtype == np.int32 and got[0, 0] == np.int32(-2**31)


CONV_GEOMETRIES = [dict(), dict(pads=[1, 1, 1, 1]), dict(pads=[0, 1, 2, 1], strides=[2, 1]),
                   dict(dilations=[2, 2], pads=[2, 2, 2, 2]), dict(group=2, auto_pad="SAME_UPPER")]


@pytest.mark.parametrize("geometry", CONV_GEOMETRIES, ids=lambda g: ",".join(g) or "plain")
def test_conv_integer(geometry):
    """uint8 x and w, a scalar zero point (the padding counts as the zero point); per output
    channel zero points against onnx.reference (onnxruntime: "not supported now")."""
    x, w = quantized(np.uint8, (2, 4, 7, 6)), quantized(np.uint8, (6, 4 // geometry.get("group", 1), 3, 3))
    against_onnxruntime("ConvInteger", [("x", x), ("w", w), ("xz", np.uint8(17)), ("wz", np.uint8(130))], geometry,
                        opset=10)
    against_onnxruntime("ConvInteger", [("x", x), ("w", w)], geometry, opset=10)
    against_reference("ConvInteger", [("x", x), ("w", w), ("xz", np.uint8(17)), ("wz", quantized(np.uint8, (6,)))],
                      geometry, opset=10)


def _multiplied(scales_acc: float, acc_bound: float) -> np.float32:
    """A y_scale that maps accumulators up to acc_bound (in real units scales_acc each) onto
    about ±100 quantization steps: few values saturate, most round."""
    return np.float32(acc_bound * scales_acc / 100)


@pytest.mark.parametrize("version", [10, 21])
@pytest.mark.parametrize("types", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                   (np.uint8, np.int8, np.uint8)])
def test_qlinear_matmul(version, types):
    """Requantized as float32(acc)·float32(a_scale·b_scale/y_scale), rounded to even, the
    zero point added, saturated; per-column b scales; float16 scales from 21; a y_scale
    that saturates most outputs."""
    a_type, b_type, y_type = types
    a, b = _a_b(a_type, b_type, (2, 6, 40), (40, 9), 7)
    a_scale, b_scale = np.float32(0.0173), RNG.uniform(0.005, 0.02, 9).astype(np.float32)
    for y_scale in (_multiplied(0.0173 * 0.0125, 64 * 64 * 40 / 4), np.float32(1e-4)):
        for bs in (np.float32(0.0125), b_scale):
            bz = zero_point(b_type, bs.shape) if b_type == np.uint8 else np.zeros(bs.shape, np.int8)
            inputs = [("a", a), ("as", a_scale), ("az", zero_point(a_type)), ("b", b), ("bs", bs), ("bz", bz),
                      ("ys", y_scale), ("yz", zero_point(y_type))]
            against_onnxruntime("QLinearMatMul", inputs, opset=version)
    if version >= 21:
        inputs = [("a", a), ("as", np.float16(0.0173)), ("az", zero_point(a_type)), ("b", b),
                  ("bs", np.float16(0.0125)), ("bz", zero_point(b_type)), ("ys", np.float16(0.05)),
                  ("yz", zero_point(y_type))]
        against_onnxruntime("QLinearMatMul", inputs, opset=version)


@pytest.mark.parametrize("op", ["QLinearMatMul", "QLinearConv"])
def test_requantization_multiplies_in_float32(op):
    """Accumulators 0..255 times float32(1 / y_scale) for y_scales a0 / (k + 0.5), whose
    products land within a float32 rounding of a tie: in float64, or dividing by y_scale,
    hundreds of them round the other way (onnxruntime multiplies in float32)."""
    acc = np.arange(256, dtype=np.uint8)
    differ = 0
    for a0, k in [(3, 2), (5, 1), (7, 1), (9, 2), (11, 5), (13, 5), (21, 20), (101, 50), (255, 20)]:
        y_scale = np.float32(a0 / (k + 0.5))
        exact = np.clip(np.rint(acc.astype(np.float64) / np.float64(y_scale)), 0, 255)
        differ += int((exact != np.clip(np.rint(acc.astype(np.float32) * (np.float32(1) / y_scale)), 0, 255)).sum())
        if op == "QLinearMatMul":
            inputs = [("a", acc.reshape(256, 1)), ("as", np.float32(1)), ("az", np.uint8(0)),
                      ("b", np.ones((1, 1), np.uint8)), ("bs", np.float32(1)), ("bz", np.uint8(0))]
        else:
            inputs = [("x", acc.reshape(1, 1, 16, 16)), ("xs", np.float32(1)), ("xz", np.uint8(0)),
                      ("w", np.ones((1, 1, 1, 1), np.uint8)), ("ws", np.float32(1)), ("wz", np.uint8(0))]
        against_onnxruntime(op, inputs + [("ys", y_scale), ("yz", np.uint8(0))], opset=10)
    assert differ > 20


@pytest.mark.parametrize("geometry", CONV_GEOMETRIES, ids=lambda g: ",".join(g) or "plain")
@pytest.mark.parametrize("types", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                   (np.uint8, np.int8, np.uint8)])
def test_qlinear_conv(geometry, types):
    """The int32 convolution plus the int32 bias, requantized by x_scale·w_scale[m]/y_scale
    per output channel (or per tensor)."""
    x_type, w_type, y_type = types
    group = geometry.get("group", 1)
    x, w = quantized(x_type, (2, 4, 7, 6)), quantized(w_type, (6, 4 // group, 3, 3), -64, 63)
    bias = RNG.integers(-5000, 5000, 6).astype(np.int32)
    for ws in (np.float32(0.011), RNG.uniform(0.005, 0.02, 6).astype(np.float32)):
        wz = zero_point(w_type, ws.shape) if w_type == np.uint8 else np.zeros(ws.shape, np.int8)
        inputs = [("x", x), ("xs", np.float32(0.031)), ("xz", zero_point(x_type)), ("w", w), ("ws", ws),
                  ("wz", wz), ("ys", _multiplied(0.031 * 0.011, 64 * 128 * 36 / 6)), ("yz", zero_point(y_type)),
                  ("b", bias)]
        against_onnxruntime("QLinearConv", inputs, geometry, opset=10, initializers=("w", "ws", "wz", "b"))


# ----------------------------------------------------------------------------- QDQ models


def qdq_model(kind: str, exact: bool, opset: int = 21, dtype=np.float32):
    """x -> QuantizeLinear -> DequantizeLinear -> MatMul (or Conv) with DequantizeLinear(int8
    weights, per output channel scales) + bias -> QuantizeLinear -> DequantizeLinear -> out,
    plus a float branch (x times a float weight) added before the last quantization, so x
    has a gradient; as quantize_static writes (scales and zero points initializers). The
    float z before the last quantization is a second output (a float head, as models that
    keep their last layer unquantized end).
    `exact`: power-of-2 scales and small weights, so every float sum is exact and the
    output is bit for bit whatever the order of the sums. Returns (model, feeds)."""
    conv = kind == "conv"
    channels = 6
    w_shape = (channels, 3, 3, 3) if conv else (12, channels)
    x_shape = (2, 3, 6, 6) if conv else (4, 12)
    small = 16 if exact else 127
    w = RNG.integers(-small, small + 1, w_shape).astype(np.int8)
    w_scale = (2.0 ** -RNG.integers(5, 8, channels) if exact else RNG.uniform(0.002, 0.01, channels)).astype(dtype)
    tensors = {"w_q": w, "w_scale": w_scale, "w_zero": np.zeros(channels, np.int8),
               "x_scale": dtype(2.0 ** -5 if exact else 0.0219), "x_zero": np.uint8(128),
               "y_scale": dtype(2.0 ** -3 if exact else 0.0137), "y_zero": np.int8(-7),
               "bias": (RNG.integers(-8, 8, channels) / 8 if exact else RNG.standard_normal(channels) * 0.1
                        ).astype(dtype),
               "skip": ((RNG.integers(-4, 4, x_shape[1:]) / 4) if exact else RNG.standard_normal(x_shape[1:])
                        ).astype(dtype)[..., :channels] if not conv else
               dtype(0.5)}
    product = helper.make_node("Conv", ["x_dq", "w_dq", "bias"], ["y"], name="conv", pads=[1, 1, 1, 1]) if conv \
        else helper.make_node("MatMul", ["x_dq", "w_dq"], ["mm"], name="matmul")
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="quant_x"),
             helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dequant_x"),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], name="dequant_w",
                              axis=0 if conv else 1), product]
    if not conv:
        nodes.append(helper.make_node("Add", ["mm", "bias"], ["y"], name="bias_add"))
    if conv:  # the float branch: x's first channel, scaled, added to every output channel
        nodes += [helper.make_node("Slice", ["x", "zero1", "one1", "one_axis"], ["x0"], name="first_channel"),
                  helper.make_node("Mul", ["x0", "skip"], ["branch"], name="branch")]
        tensors.update(zero1=np.array([0], np.int64), one1=np.array([1], np.int64), one_axis=np.array([1], np.int64))
    else:
        nodes.append(helper.make_node("Mul", ["x", "skip_full"], ["branch_wide"], name="branch"))
        nodes.append(helper.make_node("Slice", ["branch_wide", "zero1", "six", "one_axis"], ["branch"], name="cut"))
        tensors.update(skip_full=np.concatenate([tensors.pop("skip")] * 2, -1).astype(dtype),
                       zero1=np.array([0], np.int64), six=np.array([channels], np.int64),
                       one_axis=np.array([1], np.int64))
    nodes += [helper.make_node("Add", ["y", "branch"], ["z"], name="residual"),
              helper.make_node("QuantizeLinear", ["z", "y_scale", "y_zero"], ["z_q"], name="quant_out"),
              helper.make_node("DequantizeLinear", ["z_q", "y_scale", "y_zero"], ["out"], name="dequant_out")]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(nodes, f"qdq_{kind}", [helper.make_tensor_value_info("x", elem, x_shape)],
                              [helper.make_tensor_value_info(name, elem, (2, channels, 6, 6) if conv else (4, channels))
                               for name in ("out", "z")],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in tensors.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    x = (RNG.integers(-120, 120, x_shape) * 2.0 ** -5 if exact else RNG.standard_normal(x_shape) * 1.5).astype(dtype)
    return model, {"x": x}


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_qdq_model_bit_for_bit(kind):
    """Exact sums: bit for bit against onnxruntime as written and as it optimizes it (it
    fuses the QDQ pairs into QLinearMatMul/QLinearConv)."""
    model, feeds = qdq_model(kind, exact=True)
    onnx.checker.check_model(model)
    got = ours(model, feeds)[0]
    for optimize in (False, True):
        same_bits(got, onnxruntime(model, feeds, optimize)[0], f"QDQ {kind} (optimized: {optimize})")
    assert len(np.unique(got)) > 10


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_qdq_model_random_scales(kind):
    """Random scales: the float sums run in another order than onnxruntime's, so an output
    may round to the neighbouring step at a near-tie: at most one y_scale apart, and rarely."""
    model, feeds = qdq_model(kind, exact=False)
    got, want = ours(model, feeds)[0], onnxruntime(model, feeds, optimize=False)[0]
    step = np.float32(0.0137)
    assert np.abs(got - want).max() <= step * 1.0001
    assert (got != want).mean() < 0.02


def uopgrad(*args, cwd=None):
    """The installed CLI, its PYTHONPATH led by this checkout (so it runs this code)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(["uopgrad", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_qdq_model_through_the_cli_eval_and_check(kind, tmp_path):
    """`uopgrad eval model.onnx` gives onnxruntime's output bit for bit; `uopgrad check`
    (float64 central differences) agrees with the gradient of the float head z with respect
    to the weights' scales, x's scale, the bias and x, and of the quantized output with
    respect to its scale: x reaches z through the float branch (its quantized path is flat:
    no gradient, as finite differences see), the scales through the DequantizeLinears (the
    QuantizeLinears' integer outputs stop the gradient)."""
    model, feeds = qdq_model(kind, exact=True)
    onnx.save(model, tmp_path / "exact.onnx")
    np.save(tmp_path / "x.npy", feeds["x"])
    run = uopgrad("eval", "exact.onnx", "-i", "x=x.npy", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    same_bits(np.load(tmp_path / "out.npz")["out"], onnxruntime(model, feeds)[0], f"uopgrad eval, QDQ {kind}")
    # random scales: the exact model's quotients all sit on rounding ties, kinks of the loss
    model, feeds = qdq_model(kind, exact=False)
    onnx.save(model, tmp_path / "model.onnx")
    np.save(tmp_path / "x.npy", feeds["x"])
    for out, wrt in (("z", "w_scale,x_scale,bias,x"), ("out", "y_scale")):
        run = uopgrad("check", "model.onnx", "--of", out, "--wrt", wrt, "-i", "x=x.npy", "--samples", "40",
                      cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"ok: gradients of {out} match finite differences (float64)" in run.stdout, run.stdout
        for line in run.stdout.splitlines()[1:len(wrt.split(",")) + 1]:  # every target: a gradient not all 0
            assert "analytic 0 numeric 0" not in line, run.stdout


def test_the_gradient_stops_at_quantize_linear():
    """d out / d x through QuantizeLinear -> DequantizeLinear is zero (no straight-through
    estimator); d out / d scale of DequantizeLinear is (x - zero_point)."""
    model, feeds = model_of("QuantizeLinear", [("x", np.zeros(5, np.float32)), ("s", np.float32(0.1)),
                                                ("z", np.int8(0))])
    q = model.graph.node[0]
    dq = helper.make_node("DequantizeLinear", ["out0", "t", "z"], ["y"], name="dq")
    graph = helper.make_graph([q, dq], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
                              [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z"),
                               numpy_helper.from_array(np.float32(0.5), "t")])
    loaded, weights = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    grad, _ = differentiate(loaded, ["x", "t", "s"], cotangent="ones")
    x = np.array([0.04, 0.06, -0.25, 3.0, 100.0], np.float32)
    values = evaluate_graph(grad, {**weights, "x": x})
    assert np.all(values["grad_x"] == 0) and values["grad_s"] == 0
    assert values["grad_t"] == np.float32(np.rint(x / np.float32(0.1)).clip(-128, 127).sum())


# ----------------------------------------------------------------------------- refusals


REFUSALS = [
    ("QuantizeLinear", [("x", np.zeros((2, 3), np.float32)), ("s", np.float32(1))],
     {"output_dtype": TensorProto.FLOAT8E4M3FN}, r"output_dtype=17: element type FLOAT8E4M3FN is not supported"),
    ("QuantizeLinear", [("x", np.zeros((2, 3), np.float32)), ("s", np.float32(1))],
     {"output_dtype": TensorProto.FLOAT}, r"the output type float32 is not a quantized type \(int8, uint8, int16, "
                                          r"uint16\)"),
    ("QuantizeLinear", [("x", np.zeros((2, 3), np.float32)), ("s", np.float32(1)), ("z", np.int8(0))],
     {"output_dtype": TensorProto.UINT8}, r"output_dtype uint8 differs from y_zero_point's int8"),
    ("QuantizeLinear", [("x", np.zeros((2, 8), np.float32)), ("s", np.ones((2, 3), np.float32))],
     {"axis": 1, "block_size": 2}, r"block_size=2 does not fit: y_scale \[2, 3\] must be \[2, 4\] for x \[2, 8\] "
                                   r"along axis 1"),
    ("DequantizeLinear", [("x", np.zeros((2, 8), np.int8)), ("s", np.ones((2, 2), np.float32))],
     {"axis": 1, "block_size": 3}, r"block_size=3 does not fit: x_scale \[2, 2\] must be \[2, 3\]"),
    ("DequantizeLinear", [("x", np.zeros((2, 8), np.int8)), ("s", np.ones(3, np.float32))],
     {"axis": -1}, r"x_scale \[3\] is neither a scalar nor 1-D of x's axis 1 \(8 for x \[2, 8\]\)"),
    ("DequantizeLinear", [("x", np.zeros((2, 8), np.int8)), ("s", np.float32(1))],
     {"output_dtype": TensorProto.BFLOAT16}, r"output_dtype=16: element type BFLOAT16 is not supported"),
    ("DequantizeLinear", [("x", np.zeros((2, 8), np.int8)), ("s", np.float32(1)), ("z", np.uint8(0))], {},
     r"x_zero_point of uint8 differs from x's int8"),
    ("QuantizeLinear", [("x", np.zeros((2, 3), np.float32)), ("s", np.ones(3, np.float32))], {"axis": 2},
     r"axis 2 is out of range for rank 2"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", REFUSALS, ids=[r[3][:30] for r in REFUSALS])
def test_refusals_name_the_node_in_one_line(op, inputs, attrs, message):
    model, _ = model_of(op, inputs, attrs, opset=25)
    with pytest.raises(FormatError, match=rf"^<model>: node 'n' \({op}\): {message}"):
        import_model(model)
