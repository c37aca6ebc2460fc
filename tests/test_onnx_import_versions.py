"""Older op versions (import_versions.py) read as the rows' newer ones, each rewrite against
numpy's answer; every unsupported op, version and attribute of a model refused at once, in
one line, through the installed `uopgrad`; an Identity of a weight named like a parameter
(torch's legacy exporter merging equal initializers) a weight of its own, its gradient
apart, against PyTorch's."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.import_table import TABLE  # noqa: E402
from uopcli.interop.onnx.import_versions import VERSIONS  # noqa: E402
from uopcli.interop.onnx.importer import UnsupportedOps, import_model  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def one_node(op, inputs: dict, opset: int, outputs=1, initializers=None, **attrs):
    """A one-node model: `inputs` {name: array} graph inputs, `initializers` {name: array}."""
    initializers = initializers or {}
    node = helper.make_node(op, list(inputs) + list(initializers), [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                      for n, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(outputs)],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def run(model, inputs: dict):
    graph, weights = import_model(model)
    result = evaluate_graph(graph, {**weights, **inputs})
    return [np.asarray(result[name]) for name in graph.outputs]


def test_every_old_version_names_a_version_its_row_follows():
    for (op, since), old in VERSIONS.items():
        assert op in TABLE and old.target in TABLE[op].versions, (op, since, old.target)
        assert since < old.target and since not in TABLE[op].versions, (op, since)
        import onnx.defs
        assert onnx.defs.get_schema(op, since, "").since_version == since, f"{op}-{since} is not a version of the spec"


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)])
def test_the_legacy_broadcast_lines_b_up_from_axis(op, fn):
    a, b = f32(2, 3, 4, 5), f32(3, 4)
    (y,) = run(one_node(op, {"a": a, "b": b}, 6, broadcast=1, axis=1), {"a": a, "b": b})
    np.testing.assert_array_equal(y, fn(a, b.reshape(3, 4, 1)))   # numpy alone would line b up with the last axes
    c = f32(4, 5)
    (y,) = run(one_node(op, {"a": a, "c": c}, 6, broadcast=1), {"a": a, "c": c})  # no axis: the last ones
    np.testing.assert_array_equal(y, fn(a, c))
    with pytest.raises(FormatError, match="differ and broadcast is 0"):
        import_model(one_node(op, {"a": a, "c": c}, 6))
    with pytest.raises(FormatError, match="does not broadcast"):
        import_model(one_node(op, {"a": a, "c": c}, 6, broadcast=1, axis=0))


def test_attributes_that_became_inputs():
    x = f32(3, 6)
    (y,) = run(one_node("Pad", {"x": x}, 6, pads=[0, 1, 2, 0], value=-1.5), {"x": x})
    np.testing.assert_array_equal(y, np.pad(x, ((0, 2), (1, 0)), constant_values=-1.5))
    (y,) = run(one_node("Slice", {"x": x}, 6, starts=[1, -4], ends=[3, 100], axes=[0, 1]), {"x": x})
    np.testing.assert_array_equal(y, x[1:3, -4:])
    (y,) = run(one_node("Reshape", {"x": x}, 4, shape=[0, 2, -1]), {"x": x})  # 0 copies the input's size
    np.testing.assert_array_equal(y, x.reshape(3, 2, 3))
    model = one_node("Split", {"x": x}, 1, outputs=2, axis=1,
                     initializers={"s": np.array([2, 4], np.int64)})
    model.graph.initializer[0].data_type = TensorProto.INT64
    first, second = run(model, {"x": x})
    np.testing.assert_array_equal(first, x[:, :2]) and np.testing.assert_array_equal(second, x[:, 2:])
    parts = [f32(2, 2), f32(2, 3)]
    (y,) = run(one_node("Concat", {"p": parts[0], "q": parts[1]}, 1), {"p": parts[0], "q": parts[1]})
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=1))  # Concat-1: axis 1 by default


def test_pad_1_reads_paddings_and_prelu_before_7_slopes_per_channel():
    x = f32(3, 6)
    (y,) = run(one_node("Pad", {"x": x}, 1, paddings=[1, 0, 0, 2], value=2.5), {"x": x})  # Pad-1's name for pads
    np.testing.assert_array_equal(y, np.pad(x, ((1, 0), (0, 2)), constant_values=2.5))
    x, slope = f32(2, 3, 4, 5), np.array([0.5, -2.0, 3.0], np.float32)
    for version in (1, 6):  # a [C] slope is per channel (axis 1), not lined up with the last axis as from 7
        (y,) = run(one_node("PRelu", {"x": x}, version, initializers={"slope": slope}), {"x": x})
        np.testing.assert_array_equal(y, np.where(x < 0, x * slope[:, None, None], x))


def test_batch_norm_and_dropout_before_7_are_inference_only():
    x, scale, bias, mean = f32(2, 3, 4), f32(3), f32(3), f32(3)
    var = np.abs(f32(3)) + 0.5
    weights = {"scale": scale, "bias": bias, "mean": mean, "var": var}
    (y,) = run(one_node("BatchNormalization", {"x": x}, 6, initializers=weights, is_test=1, epsilon=1e-3), {"x": x})
    want = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-3) * scale[:, None] + bias[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(FormatError, match="is_test=0"):
        import_model(one_node("BatchNormalization", {"x": x}, 6, initializers=weights))
    with pytest.raises(FormatError, match="spatial=0"):
        import_model(one_node("BatchNormalization", {"x": x}, 7, initializers=weights, spatial=0))
    (y,) = run(one_node("Dropout", {"x": x}, 6, is_test=1, ratio=0.3), {"x": x})
    np.testing.assert_array_equal(y, x)
    (y,) = run(one_node("Dropout", {"x": x}, 7, ratio=0.3), {"x": x})
    np.testing.assert_array_equal(y, x)
    with pytest.raises(FormatError, match="is_test=0"):
        import_model(one_node("Dropout", {"x": x}, 6, ratio=0.3))
    y, mask = run(one_node("Dropout", {"x": x}, 7, outputs=2), {"x": x})
    assert mask.dtype == np.float32 and (mask == 1).all()  # the input's type before 10


def test_cast_1_takes_a_type_name():
    x = np.array([1.7, -2.2, 300.0], np.float32)
    (y,) = run(one_node("Cast", {"x": x}, 1, to="INT32"), {"x": x})
    assert y.dtype == np.int32 and y.tolist() == [1, -2, 300]
    with pytest.raises(FormatError, match="'WORD' is not an ONNX element type"):
        import_model(one_node("Cast", {"x": x}, 1, to="WORD"))


# ----------------------------------------------------------------------------- all refusals at once


def many_refusals_model():
    """StringNormalizer twice, TfIdfVectorizer, a Gemm with an attribute it has not, an op of another domain."""
    x = helper.make_tensor_value_info("x", F, [2, 2])
    nodes = [helper.make_node("StringNormalizer", ["x"], ["n1"], name="sn1"),
             helper.make_node("StringNormalizer", ["x"], ["n2"], name="sn2"),
             helper.make_node("TfIdfVectorizer", ["x"], ["u"], name="tf"),
             helper.make_node("Gemm", ["x", "x"], ["g"], name="gm", colour=3),
             helper.make_node("Foo", ["x"], ["f"], name="foo", domain="com.example")]
    outs = [helper.make_tensor_value_info(n, F, None) for n in ("n1", "n2", "u", "g", "f")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], outs),
                             opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])


def test_every_refusal_of_a_model_in_one_line(tmp_path):
    with pytest.raises(UnsupportedOps) as refused:
        import_model(many_refusals_model())
    assert refused.value.missing == [("StringNormalizer", 10, 2), ("TfIdfVectorizer", 9, 1), ("Gemm", 13, 1),
                                     ("com.example.Foo", None, 1)]
    path = tmp_path / "many.onnx"
    onnx.save(many_refusals_model(), str(path))
    done = subprocess.run(["uopgrad", "convert", str(path), "-o", str(tmp_path / "out.uop")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (f"uopgrad: error: {path}: the importer does not support 4 of the model's ops, versions or "
                    "attributes (opset 13): StringNormalizer-10 (2 nodes, first 'sn1'); TfIdfVectorizer-9 (node 'tf'); "
                    "Gemm-13 attribute 'colour' (node 'gm'); com.example.Foo (node 'foo')")
    assert not list(tmp_path.glob("out*"))


def test_one_refused_node_is_named_as_before():
    model = many_refusals_model()
    del model.graph.node[1:]
    del model.graph.output[1:]
    with pytest.raises(FormatError, match=r"^<model>: node 'sn1' \(StringNormalizer\): this op \(version 10, "
                                          r"opset 13\) "
                                          r"is not supported by the importer$"):
        import_model(model)


# ----------------------------------------------------------------------------- weights merged by exporters


def merged_bias_model():
    """y = (x + b1) * (x + b2) with b1 == b2 merged into one initializer `ln1.bias`, reached as
    `ln2.bias` through an Identity (torch's legacy exporter's constant folding does this)."""
    bias = np.array([0.5, -1.0, 2.0], np.float32)
    nodes = [helper.make_node("Identity", ["ln1.bias"], ["ln2.bias"]),
             helper.make_node("Add", ["x", "ln1.bias"], ["a"]),
             helper.make_node("Add", ["x", "ln2.bias"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3])],
                              [helper.make_tensor_value_info("y", F, [3])], [numpy_helper.from_array(bias, "ln1.bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), bias


def test_an_identity_of_a_weight_named_like_a_parameter_is_a_weight_of_its_own():
    model, bias = merged_bias_model()
    graph, weights = import_model(model)
    assert list(weights) == ["ln1.bias", "ln2.bias"] and graph.input_names == ["x", "ln1.bias", "ln2.bias"]
    np.testing.assert_array_equal(weights["ln2.bias"], bias)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    grads, _ = differentiate(graph, wrt=["ln1.bias", "ln2.bias"], cotangent="ones")
    result = evaluate_graph(grads, {**weights, "x": x})
    np.testing.assert_array_equal(result["grad_ln1.bias"], x + bias)  # d/db1 (x+b1)(x+b2) = x + b2
    np.testing.assert_array_equal(result["grad_ln2.bias"], x + bias)
    model.graph.node[0].output[0] = "onnx::Add_7"  # an exporter's name: not a parameter, still the one weight
    model.graph.node[2].input[1] = "onnx::Add_7"
    assert list(import_model(model)[1]) == ["ln1.bias"]


def test_torch_legacy_export_with_merged_biases_gives_each_parameter_its_gradient(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed: the legacy export test skips")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(4), torch.nn.LayerNorm(4)
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.ln2(self.fc(self.ln1(x))).tanh()

    torch.manual_seed(0)
    block = Block().double()
    with torch.no_grad():
        block.fc.bias.zero_()  # equal to the LayerNorms' zero biases: the exporter merges all three
    x = torch.randn(2, 4, dtype=torch.float64)
    path = tmp_path / "block.onnx"
    torch.onnx.export(block.float(), (x.float(),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17)
    model = onnx.load(str(path))
    assert any(n.op_type == "Identity" for n in model.graph.node), "the exporter merged no initializer"
    grad_path = tmp_path / "grad.uop"
    np.save(tmp_path / "x.npy", x.float().numpy())
    done = subprocess.run(["uopgrad", "diff", str(path), "--wrt", "ln1.bias,ln2.bias,fc.bias", "--cotangent", "ones",
                           "-o", str(grad_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["uopgrad", "eval", str(grad_path), "-i", str(tmp_path / "grad.npz"),
                           "-i", f"x={tmp_path / 'x.npy'}", "-o",
                           str(tmp_path / "g.npz")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = dict(np.load(tmp_path / "g.npz"))
    block = block.double()
    block.zero_grad()
    block(x).sum().backward()
    for name in ("ln1.bias", "ln2.bias", "fc.bias"):
        want = dict(block.named_parameters())[name].grad.numpy()
        np.testing.assert_allclose(got[f"grad_{name}"], want, rtol=1e-4, atol=1e-5, err_msg=name)
    assert not np.allclose(got["grad_ln1.bias"], got["grad_ln2.bias"])
