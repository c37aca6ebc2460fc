"""ONNX inputs fixed when importing (`import_model(..., constants=...)`, the CLI's
--constant): a model whose Resize scales, OneHot depth or Reshape shape is a graph input
imports with that input fixed, and computes what onnxruntime computes with the same value
given at run time; without it the refusal names the input and the option; a value that does
not fit the input's type or shape is refused in one line, with nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto as T, helper  # noqa: E402

from _onnx_helpers import assert_close, assert_exact  # noqa: E402
from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
X = np.array([[[[0.0, 1.0, 5.0], [2.0, -3.0, 0.5]]]], dtype=np.float32)


def _model(nodes, inputs, opset=19) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def resize_model(mode="linear") -> onnx.ModelProto:
    return _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)],
                  [("x", T.FLOAT, [1, 1, 2, 3]), ("scales", T.FLOAT, [4])])


def onehot_model() -> onnx.ModelProto:
    """OneHot's depth as a float input, of symbolic shape [1] ('one'); the output made float."""
    nodes = [helper.make_node("OneHot", ["i", "depth", "values"], ["h"], axis=-1),
             helper.make_node("Cast", ["h"], ["y"], to=T.FLOAT)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("i", T.INT64, [3]),
                                           helper.make_tensor_value_info("depth", T.FLOAT, ["one"]),
                                           helper.make_tensor_value_info("values", T.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def reshape_model() -> onnx.ModelProto:
    """Reshape's shape as an int64 input, then a product that sees order: y = reshape(x) * w."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Mul", ["r", "w"], ["y"])]
    return _model(nodes, [("x", T.FLOAT, [1, 1, 2, 3]), ("shape", T.INT64, [2]), ("w", T.FLOAT, [3, 2])])


def onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def ours(model, feeds, constants):
    graph, weights = import_model(model, constants=constants)
    assert not set(constants) & set(graph.input_names), "a fixed input stays an input"
    return np.asarray(evaluate_graph(graph, {**weights, **feeds})["y"])


# ----------------------------------------------------------------------------- values, against onnxruntime

@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.5, 1.5], [1, 1, 3, 1]])
def test_resize_with_its_scales_fixed_equals_onnxruntime_given_them_when_running(mode, scales):
    scales = np.array(scales, dtype=np.float32)
    want = onnxruntime(resize_model(mode), {"x": X, "scales": scales})
    got = ours(resize_model(mode), {"x": X}, {"scales": scales.tolist()})  # Python floats: converted to float32
    assert_close(got, want, f"Resize {mode} {scales}")  # (cubic: onnxruntime is 47 ulps off the exact value, ours 3)


def test_onehot_depth_fills_a_symbolic_shape_and_equals_onnxruntime():
    i, values = np.array([0, 4, -1], dtype=np.int64), np.array([-2.0, 7.0], dtype=np.float32)
    want = onnxruntime(onehot_model(), {"i": i, "depth": np.array([5.0], np.float32), "values": values})
    got = ours(onehot_model(), {"i": i, "values": values}, {"depth": [5]})  # an int given for a float input
    assert_exact(got, want, "OneHot")
    assert got.shape == (3, 5)


def test_reshape_shape_from_an_npy_file_and_a_gradient_that_sees_order(tmp_path):
    """Through the installed CLI: eval equals onnxruntime; diff with respect to x gives w
    reshaped back (each element of x meets its own weight: a wrong order moves them)."""
    onnx.save(reshape_model(), tmp_path / "reshape.onnx")
    w = np.arange(1, 7, dtype=np.float32).reshape(3, 2) / 10
    np.save(tmp_path / "shape.npy", np.array([3, -1], dtype=np.int64))
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", w)
    run = subprocess.run([UOPGRAD, "eval", "reshape.onnx", "--constant", "shape=shape.npy", "-i", "x=x.npy",
                          "-i", "w=w.npy", "-o", "y.npz"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    want = onnxruntime(reshape_model(), {"x": X, "shape": np.array([3, -1], np.int64), "w": w})
    assert_exact(np.load(tmp_path / "y.npz")["y"], want, "eval")
    run = subprocess.run([UOPGRAD, "diff", "reshape.onnx", "--constant", "shape=3,-1", "--wrt", "x",
                          "--cotangent", "ones", "-o", "g.uop"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([UOPGRAD, "eval", "g.uop", "-i", "x=x.npy", "-i", "w=w.npy", "-o", "g.npz"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert_exact(np.load(tmp_path / "g.npz")["grad_x"], w.reshape(X.shape), "the gradient")


def test_check_passes_on_a_resize_with_fixed_scales(tmp_path):
    onnx.save(resize_model("cubic"), tmp_path / "resize.onnx")
    run = subprocess.run([UOPGRAD, "check", "resize.onnx", "--constant", "scales=1,1,1.5,2", "--wrt", "x"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok" in (run.stdout + run.stderr).lower()


# ----------------------------------------------------------------------------- refusals

def test_without_the_value_the_refusal_names_the_input_and_the_option(tmp_path):
    onnx.save(resize_model(), tmp_path / "resize.onnx")
    np.save(tmp_path / "x.npy", X)
    run = subprocess.run([UOPGRAD, "eval", "resize.onnx", "-i", "x=x.npy", "-o", "y.npz"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 1 and run.stdout == "" and not (tmp_path / "y.npz").exists()
    assert run.stderr == ("uopgrad: error: resize.onnx: node '#0' (Resize): scales (input 2) must be known when "
                          "importing (a constant or a shape), but it is the model's input 'scales': give its value "
                          "with --constant scales=...\n")


def test_a_value_computed_from_an_input_is_refused_naming_the_input_to_fix():
    """Scales computed from the model's input (through Abs) are refused, naming the input
    that fixing would fix them (it named none: "computed from the model's inputs")."""
    nodes = [helper.make_node("Abs", ["s"], ["scales"]),
             helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    model = _model(nodes, [("x", T.FLOAT, [1, 1, 2, 3]), ("s", T.FLOAT, [4])])
    with pytest.raises(FormatError, match=r"scales \(input 2\) must be known when importing \(a constant or a "
                                          r"shape\), but it is computed from the model's input 's': give its value "
                                          r"with --constant s=\.\.\.$"):
        import_model(model)
    got = ours(model, {"x": X}, {"s": [1, 1, -2, 2]})  # fixing s fixes what is computed from it
    want = onnxruntime(model, {"x": X, "s": np.array([1, 1, -2, 2], np.float32)})
    assert_exact(got, want, "Abs then Resize")


@pytest.mark.parametrize("model, constants, why", [
    (reshape_model, {"shape": [3.5, 2]}, "--constant shape: 3.5 is no value of the input's type int64"),
    (reshape_model, {"shape": [3, float("nan")]}, "--constant shape: nan is no value of the input's type int64"),
    (reshape_model, {"shape": [2 ** 63, 1]}, "--constant shape: 9.223372036854776e+18 is no value of the input's "
                                              "type int64"),  # a float64 array: 2^63 exactly, one past int64's end
    (reshape_model, {"shape": np.array([2 ** 63, 1], np.uint64)}, "--constant shape: 9223372036854775808 is no "
                                                                  "value of the input's type int64"),  # a cast wraps
    (reshape_model, {"shape": [float("inf"), 1]}, "--constant shape: inf is no value of the input's type int64"),
    (reshape_model, {"shape": [3, -1, 1]}, "--constant shape: 3 values of shape [3] do not fit the file's shape [2]"),
    (reshape_model, {"shape": ["3", "2"]}, "--constant shape: give numbers, not <U1"),
    (reshape_model, {"shapes": [3, 2]}, "--constant names no input of the model: shapes; inputs: x, shape, w"),
    (onehot_model, {"depth": [[5]]}, "--constant depth: 1 value of shape [1, 1] do not fit the file's shape [one]"),
])
def test_values_that_do_not_fit_are_refused_in_one_line(model, constants, why):
    with pytest.raises(FormatError) as refused:
        import_model(model(), constants=constants, source="m.onnx")
    assert str(refused.value) == f"m.onnx: {why}"


def test_a_bool_input_takes_only_zero_and_one():
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["y"])]
    model = _model(nodes, [("c", T.BOOL, [3]), ("a", T.FLOAT, [3]), ("b", T.FLOAT, [3])])
    a, b = np.array([1, 2, 3], np.float32), np.array([-1, -2, -3], np.float32)
    assert_exact(ours(model, {"a": a, "b": b}, {"c": [1, 0, True]}), np.array([1, -2, 3], np.float32), "Where")
    with pytest.raises(FormatError, match=r"^m.onnx: --constant c: 2 is no value of the input's type bool$"):
        import_model(model, constants={"c": [1, 2, 0]}, source="m.onnx")


def test_shape_and_constant_on_one_input_and_constant_on_a_uop_are_refused(tmp_path):
    with pytest.raises(FormatError, match="--shape and --constant both name input 'depth'"):
        import_model(onehot_model(), shapes={"depth": (1,)}, constants={"depth": [3]})
    from uopcli import Graph, UOp, save
    save(Graph({"y": UOp.param("x", (2,)).sin()}), tmp_path / "m.uop")
    run = subprocess.run([UOPGRAD, "info", "m.uop", "--constant", "x=1,2"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""  # a usage error: the option does not apply to a .uop IN
    assert run.stderr == ("uopgrad: error: --constant fixes inputs of an ONNX IN when importing; a .uop IN (m.uop) "
                          "takes its inputs' values with -i/--input (see 'uopgrad info --help')\n")


@pytest.mark.parametrize("given, why, status", [("scales=1,1,x,2", "'x' is not a number", 2),
                                                ("scales=", "give NAME=V1,V2,... or NAME=FILE.npy", 2),
                                                # the command line is right, the file is not there: 1
                                                ("scales=missing.npy", "--constant scales=missing.npy: cannot read "
                                                 "missing.npy: No such file or directory", 1)])
def test_the_option_refuses_what_is_no_value(tmp_path, given, why, status):
    onnx.save(resize_model(), tmp_path / "resize.onnx")
    run = subprocess.run([UOPGRAD, "info", "resize.onnx", "--constant", given], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == status and run.stdout == "" and why in run.stderr and run.stderr.count("\n") == 1, \
        run.stderr


def test_float16_values_are_rounded_to_the_input_type():
    """A float16 input fixed to 0.1 is float16's 0.0999755859375, as onnxruntime reads it:
    c + c (folded when importing), cast to float32, equals onnxruntime's bit for bit
    (0.1 + 0.1 kept in float64 would cast to 0.2f, another value)."""
    nodes = [helper.make_node("Add", ["c", "c"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=T.FLOAT)]
    model = _model(nodes, [("c", T.FLOAT16, [2])])
    got = ours(model, {}, {"c": [0.1, 2e-8]})  # 2e-8: under half float16's least subnormal, so 0
    want = onnxruntime(model, {"c": np.array([0.1, 2e-8], np.float16)})
    assert_exact(got, want, "float16 c + c")
    assert got[0] == np.float32(np.float16(0.1) + np.float16(0.1)) != np.float32(0.2) and got[1] == 0


def test_a_single_value_fills_a_scalar_input():
    nodes = [helper.make_node("Mul", ["k", "x"], ["y"])]
    model = _model(nodes, [("k", T.FLOAT, []), ("x", T.FLOAT, [1, 1, 2, 3])])
    got = ours(model, {"x": X}, {"k": [-2]})
    assert got.shape == X.shape
    assert_exact(got, onnxruntime(model, {"k": np.array(-2, np.float32), "x": X}), "k * x")
    graph, _ = import_model(model, constants={"k": 3})  # a bare number too
    assert graph.input_names == ["x"]
    alone = _model([helper.make_node("Add", ["k", "k"], ["y"])], [("k", T.FLOAT, [])])
    assert ours(alone, {}, {"k": [1.5]}).shape == () == onnxruntime(alone, {"k": np.array(1.5, np.float32)}).shape
