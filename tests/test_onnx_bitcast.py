"""ONNX BitCast-26 imported as the format's BITCAST: every pair of element types of one width
the format has, on bit patterns that arithmetic cannot make (-0.0, nan payloads, signalling
nans, subnormals, the integers' ends), compared bit for bit with numpy's view (the spec's
definition: the same little-endian bytes) and with onnxruntime where it has the kernel; a
model built on it (Quake's inverse square root) through the installed CLI, with its
gradient and its export back to ONNX; and the refusals."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto, helper  # noqa: E402

from test_onnx_import_ops import ours as _ours  # noqa: E402 - import, evaluate: the outputs
from _onnx_helpers import assert_exact, run_onnx  # noqa: E402
from uopcli import FormatError  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
CODE = {np.dtype(t): c for t, c in [
    (np.bool_, TensorProto.BOOL), (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8),
    (np.int16, TensorProto.INT16), (np.uint16, TensorProto.UINT16), (np.float16, TensorProto.FLOAT16),
    (np.int32, TensorProto.INT32), (np.uint32, TensorProto.UINT32), (np.float32, TensorProto.FLOAT),
    (np.int64, TensorProto.INT64), (np.uint64, TensorProto.UINT64), (np.float64, TensorProto.DOUBLE)]}


def _patterns(dtype) -> np.ndarray:
    """Values of `dtype` whose bits matter: for a float, ±0, ±inf, a quiet and a signalling
    nan with payloads (both signs), the smallest subnormal, the largest finite value; for an
    integer, its ends, -1, 0, 1 and a pattern with every byte different."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([True, False, True], dtype=np.bool_)
    width = np.dtype(f"u{dtype.itemsize}")
    if dtype.kind == "f":
        info = np.finfo(dtype)
        mantissa = info.nmant
        exponent_all = ((1 << (dtype.itemsize * 8 - 1)) - 1) ^ ((1 << mantissa) - 1)
        sign = 1 << (dtype.itemsize * 8 - 1)
        bits = [0, sign, exponent_all, sign | exponent_all,        # ±0, ±inf
                exponent_all | (1 << (mantissa - 1)) | 5,           # a quiet nan with a payload
                sign | exponent_all | 3,                            # a negative signalling nan
                1, sign | 1]                                        # ±the smallest subnormal
        values = np.array(bits, dtype=width).view(dtype)
        return np.concatenate([values, np.array([info.max, -1.5, 0.1], dtype=dtype)])
    info = np.iinfo(dtype)
    mixed = int.from_bytes(bytes(range(0x81, 0x81 + dtype.itemsize)), "little")
    return np.array([info.min, info.max, 0, 1, mixed if dtype.kind == "u" else mixed - (1 << (dtype.itemsize * 8))]
                    + ([-1] if dtype.kind == "i" else []), dtype=dtype)


def _pairs() -> list:
    return [pytest.param(a, b, id=f"{a.name}-to-{b.name}") for a in CODE for b in CODE
            if a.itemsize == b.itemsize and not (b == np.bool_ and a != np.bool_)]


def _model(source: np.dtype, to: np.dtype, shape) -> onnx.ModelProto:
    node = helper.make_node("BitCast", ["x"], ["y"], to=CODE[to])
    graph = helper.make_graph([node], "bitcast", [helper.make_tensor_value_info("x", CODE[source], list(shape))],
                              [helper.make_tensor_value_info("y", CODE[to], list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


def _onnxruntime(model, feeds: dict):
    """onnxruntime's outputs, or None where it has no kernel for the types."""
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - NOT_IMPLEMENTED: no BitCast kernel for this pair
        return None
    return session.run(None, feeds)


@pytest.mark.parametrize("source, to", _pairs())
def test_bitcast_keeps_every_bit(source, to):
    x = _patterns(source).reshape(-1, 1)[:, [0, 0]]  # 2-D, so the shape is kept too
    model = _model(source, to, x.shape)
    (ours,) = _ours(model, {"x": x})
    assert ours.dtype == to and ours.shape == x.shape
    assert ours.tobytes() == x.tobytes(), f"{source} -> {to}: the bytes changed"  # payloads, signs and all
    theirs = _onnxruntime(model, {"x": x})
    if theirs is not None:
        assert_exact(ours, theirs[0], f"{source} -> {to} against onnxruntime")


def test_onnxruntime_has_the_kernels_that_matter():
    """The comparison above must not pass by onnxruntime running nothing: the pairs the
    conformance cases use run in it (float32/int32, float64/int64, int8/uint8, ...)."""
    for source, to in [(np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64),
                       (np.int64, np.float64), (np.int8, np.uint8), (np.uint16, np.int16)]:
        x = _patterns(source)
        assert _onnxruntime(_model(np.dtype(source), np.dtype(to), x.shape), {"x": x}) is not None, (source, to)


def test_a_scalar_and_a_constant_fold_to_the_same_bits():
    """A 0-d input, and a BitCast of a constant (folded when importing): the bits of each."""
    x = np.array(-0.0, dtype=np.float32)
    (ours,) = _ours(_model(np.dtype(np.float32), np.dtype(np.int32), ()), {"x": x})
    assert ours.shape == () and int(ours) == -(1 << 31)
    pattern = np.array([0x7FC00001, 0xFF800000, 1], dtype=np.uint32)
    constant = helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(pattern))
    cast = helper.make_node("BitCast", ["c"], ["y"], to=TensorProto.FLOAT)
    graph = helper.make_graph([constant, cast], "folded", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    (folded,) = _ours(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), {})
    assert folded.dtype == np.float32 and folded.tobytes() == pattern.tobytes()


def test_a_bitcast_without_its_type_is_refused():
    node = helper.make_node("BitCast", ["x"], ["y"], name="bits")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2])])
    with pytest.raises(FormatError) as refused:
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), source="m.onnx")
    assert str(refused.value) == "m.onnx: node 'bits' (BitCast): needs the attribute to"


@pytest.mark.parametrize("source, to, why", [
    (TensorProto.FLOAT, TensorProto.INT64, "to: int64 has 64 bits, the input float32 32: BitCast keeps the width"),
    (TensorProto.UINT8, TensorProto.BOOL, "to: bool from uint8: a byte other than 0 and 1 is no bool"),
    (TensorProto.FLOAT16, TensorProto.BFLOAT16, "to: element type BFLOAT16 is not supported"),
])
def test_refusals_name_the_node_and_say_why(source, to, why):
    node = helper.make_node("BitCast", ["x"], ["y"], to=to, name="bits")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", source, [2])],
                              [helper.make_tensor_value_info("y", to, [2])])
    with pytest.raises(FormatError) as refused:
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), source="m.onnx")
    message = str(refused.value)
    assert message == f"m.onnx: node 'bits' (BitCast): {why}" and "\n" not in message


# ----------------------------------------------------------------------------- a model built on it

MAGIC = 0x5F3759DF


def _inverse_sqrt_model() -> onnx.ModelProto:
    """Quake III's 1/sqrt(x): i = MAGIC - (bits(x) >> 1); y = float(i); one Newton step
    y (1.5 - x/2 y^2). The bits' path is piecewise constant in x: its derivative is 0, so
    the gradient of the model is that of the Newton step with y0 held, -y0^3 / 2."""
    n = helper.make_node
    nodes = [
        n("BitCast", ["x"], ["bits"], to=TensorProto.UINT32),
        n("BitShift", ["bits", "one"], ["half"], direction="RIGHT"),
        n("Sub", ["magic", "half"], ["guess_bits"]),
        n("BitCast", ["guess_bits"], ["y0"], to=TensorProto.FLOAT),
        n("Mul", ["y0", "y0"], ["y0_2"]), n("Mul", ["x", "y0_2"], ["xy2"]), n("Mul", ["xy2", "halff"], ["h"]),
        n("Sub", ["three_halves", "h"], ["step"]), n("Mul", ["y0", "step"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(np.array(1, np.uint32), "one"),
             onnx.numpy_helper.from_array(np.array(MAGIC, np.uint32), "magic"),
             onnx.numpy_helper.from_array(np.array(0.5, np.float32), "halff"),
             onnx.numpy_helper.from_array(np.array(1.5, np.float32), "three_halves")]
    graph = helper.make_graph(nodes, "fast_inverse_sqrt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


X = np.array([0.01, 0.25, 1.0, 2.0, 10.0, 12345.0], dtype=np.float32)


def _by_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model in numpy, float32 step by step: y, and the gradient -y0^3 / 2."""
    y0 = (np.uint32(MAGIC) - (x.view(np.uint32) >> np.uint32(1))).view(np.float32)
    y = y0 * (np.float32(1.5) - (x * (y0 * y0)) * np.float32(0.5))
    return y, -(y0 * y0 * y0) * np.float32(0.5)


def test_the_inverse_square_root_equals_numpy_and_onnxruntime_bit_for_bit():
    model = _inverse_sqrt_model()
    (ours,) = _ours(model, {"x": X})
    want, _ = _by_numpy(X)
    assert_exact(ours, want, "ours against numpy")
    assert_exact(ours, _onnxruntime(model, {"x": X})[0], "ours against onnxruntime")
    assert np.all(np.abs(ours * np.sqrt(X.astype(np.float64)) - 1) < 2e-3)  # the trick works: 0.2% at one step


def test_the_inverse_square_root_through_the_cli_its_gradient_and_its_export(tmp_path):
    """eval and diff through the installed uopgrad; the gradient stops at the bits
    (-y0^3 / 2, float64 closed form); the gradient graph exported to ONNX runs in
    onnxruntime to the same values."""
    onnx.save(_inverse_sqrt_model(), tmp_path / "isqrt.onnx")
    np.save(tmp_path / "x.npy", X)
    run = subprocess.run([UOPGRAD, "eval", "isqrt.onnx", "--input", "x=x.npy", "-o", "y.npz"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    want, slope = _by_numpy(X)
    assert_exact(np.load(tmp_path / "y.npz")["y"], want, "uopgrad eval")
    for out in ("grad.uop", "grad.onnx"):
        run = subprocess.run([UOPGRAD, "diff", "isqrt.onnx", "--wrt", "x", "--cotangent", "ones", "-o", out],
                             cwd=tmp_path, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    run = subprocess.run([UOPGRAD, "eval", "grad.uop", "-i", "grad.npz", "--input", "x=x.npy", "-o", "g.npz"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    grad = np.load(tmp_path / "g.npz")["grad_x"]
    np.testing.assert_allclose(grad, slope, rtol=2e-7)
    session = ort.InferenceSession(str(tmp_path / "grad.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["grad_x"], {"x": X})[0], grad, rtol=1e-7)


def test_the_imported_model_exported_again_runs_in_onnxruntime_to_the_same_bits():
    graph, weights = import_model(_inverse_sqrt_model())  # the float initializers stay weights: inputs
    assert_exact(run_onnx(graph, {**weights, "x": X})["y"], _by_numpy(X)[0], "exported again")
