"""A weight several modules read (an exporter merged their equal values, as torch's dynamo
exporter's optimizer does by default; or a tied weight): `diff`, `jvp`, `hvp`, `jacobian`
and `hessian` say so for each --wrt name, since its gradient is the sum of theirs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")

from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.inspect import modules_reading  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


def merged_model(producer: str = "pytorch") -> onnx.ModelProto:
    """y = sum(n2(n1(x) @ w)), n1 and n2 LayerNorms reading ONE scale `n1.weight` (as the
    dynamo optimizer leaves two fresh LayerNorms), each its own bias; node names carry
    the module paths (/n1/..., /n2/...)."""
    nodes = [helper.make_node("LayerNormalization", ["x", "n1.weight", "n1.bias"], ["h"], name="/n1/LayerNormalization"),
             helper.make_node("MatMul", ["h", "w"], ["m"], name="/lin/MatMul"),
             helper.make_node("LayerNormalization", ["m", "n1.weight", "n2.bias"], ["o"], name="/n2/LayerNormalization"),
             helper.make_node("ReduceSum", ["o"], ["y"], name="/ReduceSum", keepdims=0)]
    rng = np.random.default_rng(0)
    weights = {"n1.weight": rng.normal(size=4), "n1.bias": rng.normal(size=4), "n2.bias": rng.normal(size=4),
               "w": rng.normal(size=(4, 4))}
    graph = helper.make_graph(nodes, "merged", [helper.make_tensor_value_info("x", T.DOUBLE, [3, 4])],
                              [helper.make_tensor_value_info("y", T.DOUBLE, [])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name=producer)


def test_the_modules_that_read_each_weight_are_found_through_its_uses():
    graph, _ = import_model(merged_model())
    assert modules_reading(graph, ["n1.weight", "n1.bias", "w", "x"]) == {"n1.weight": ["n1", "n2"]}
    assert modules_reading(graph, ["n1.bias"]) == {}


def test_the_merged_weights_gradient_is_the_sum_of_its_modules():
    """What the note says, in values: the gradient of the one scale equals the sum of the
    two LayerNorms' scale gradients (each computed with the other's scale held)."""
    graph, weights = import_model(merged_model())
    x = np.random.default_rng(1).normal(size=(3, 4))
    grads, _ = differentiate(graph, ["n1.weight"], cotangent=None)
    got = evaluate_graph(grads, {**weights, "x": x})["grad_n1.weight"]
    g, b1, b2, w = weights["n1.weight"], weights["n1.bias"], weights["n2.bias"], weights["w"]

    def norm(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)

    def loss(g1, g2):
        return float(((norm((norm(x) * g1 + b1) @ w) * g2) + b2).sum())
    eps = 1e-6
    numeric = [(loss(g + eps * e, g) - loss(g - eps * e, g) + loss(g, g + eps * e) - loss(g, g - eps * e)) / (2 * eps)
               for e in np.eye(4)]
    np.testing.assert_allclose(got, numeric, rtol=1e-6)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("command", ["diff", "jvp", "hvp", "jacobian", "hessian"])
def test_each_command_notes_a_merged_wrt_weight_once(tmp_path, command):
    onnx.save(merged_model(), tmp_path / "m.onnx")
    done = subprocess.run([UOPGRAD, command, "m.onnx", "--wrt", "n1.weight,w", "-o", "out.uop"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "is read by" in line]
    assert notes == ["uopgrad: n1.weight is read by 2 modules (n1, n2), so its gradient is the sum of theirs: "
                     "torch's dynamo exporter merges weights equal when it runs (its optimizer, on by default); "
                     "torch.onnx.export(..., optimize=False) keeps each module's own"]


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_no_note_for_a_weight_one_module_reads_nor_a_torch_hint_for_another_producer(tmp_path):
    onnx.save(merged_model(), tmp_path / "m.onnx")
    onnx.save(merged_model(producer="tf2onnx"), tmp_path / "tf.onnx")
    alone = subprocess.run([UOPGRAD, "diff", "m.onnx", "--wrt", "n1.bias,w", "-o", "g.uop"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0 and "is read by" not in alone.stderr, alone.stderr
    other = subprocess.run([UOPGRAD, "diff", "tf.onnx", "--wrt", "n1.weight", "-o", "g.uop"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert other.returncode == 0
    assert "uopgrad: n1.weight is read by 2 modules (n1, n2), so its gradient is the sum of theirs\n" in other.stderr
