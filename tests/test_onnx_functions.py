"""Ops imported through the spec's function body (uopcli/interop/onnx/functions.py): the
body's nodes renamed into the node's namespace and its attribute references bound; a body
whose ops the importer lacks refused in one line naming the node. (Values and gradients of
such an op against PyTorch: test_onnx_import_layer_gradients.py, CausalConvWithState.)"""

from __future__ import annotations

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime

need_onnx_and_runtime()

from onnx import AttributeProto, TensorProto, helper  # noqa: E402

from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.functions import SEPARATOR, expanded_nodes  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402


def _body():
    """A body of AffineGrid's signature (theta, size -> grid) that reads its own output
    `grid` again, makes a second output, and refers to the op's attribute align_corners."""
    ref = AttributeProto()
    ref.name, ref.ref_attr_name, ref.type = "value_int", "align_corners", AttributeProto.INT
    constant = helper.make_node("Constant", [], ["flag"])
    constant.attribute.append(ref)
    nodes = [constant, helper.make_node("Mul", ["theta", "theta"], ["grid"]),
             helper.make_node("Neg", ["grid"], ["extra"]),
             helper.make_node("Constant", [], ["unused"], value_float=2.0)]
    return helper.make_function("", "AffineGrid", ["theta", "size"], ["grid", "extra"], nodes,
                                [helper.make_opsetid("", 20)], attributes=["align_corners"])


def test_a_body_is_renamed_into_the_nodes_namespace_and_its_references_bound():
    node = helper.make_node("AffineGrid", ["t"], ["g", ""], name="affine", align_corners=1)
    helper.set_metadata_props(node, {"pkg.torch.onnx.name_scopes": "['', 'stn']"})
    flag, mul, neg, unused = expanded_nodes(_body(), node, "AffineGrid", 20)
    assert all(list(n.metadata_props) == list(node.metadata_props) for n in (flag, mul, neg, unused))
    assert [n.name for n in (flag, mul, neg)] == ["affine/Constant", "affine/Mul", "affine/Neg"]
    assert list(mul.input) == ["t", "t"] and list(mul.output) == ["g"]      # formal -> actual
    assert list(neg.input) == ["g"] and list(neg.output) == [f"g{SEPARATOR}extra"]  # left out: a name of its own
    assert list(unused.output) == [f"g{SEPARATOR}unused"]                     # a body value: in g's namespace
    (bound,) = flag.attribute
    assert (bound.name, bound.i, bound.ref_attr_name) == ("value_int", 1, "")
    default = helper.make_node("AffineGrid", ["t", "s"], ["g"])               # no align_corners: the schema's 0
    (bound,) = expanded_nodes(_body(), default, "AffineGrid", 20)[0].attribute
    assert (bound.name, bound.i) == ("value_int", 0)


def _one_node_model(op, inputs: dict, attrs: dict, opset: int, outputs: list[str]):
    node = helper.make_node(op, list(inputs), outputs, name="the_node", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, list(a.shape))
                                            for n, a in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in outputs if n])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_a_context_dependent_body_with_an_output_left_out():
    """CausalConvWithState without its present_state output: the output is still the causal
    depthwise convolution of the zero-padded input (its past_state left out too)."""
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(1, 2, 4)), rng.normal(size=(2, 1, 3))
    graph, _ = import_model(_one_node_model("CausalConvWithState", {"x": x, "w": w}, {}, 27, ["y", ""]))
    got = evaluate_graph(graph, {"x": x, "w": w})["y"]
    padded = np.concatenate([np.zeros((1, 2, 2)), x], axis=2)
    want = np.array([[[sum(padded[0, c, t + k] * w[c, 0, k] for k in range(3)) for t in range(4)] for c in range(2)]])
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_a_body_whose_ops_the_importer_lacks_is_refused_naming_the_node():
    size = np.array([1, 1, 2, 2], np.int64)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="stn")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("theta", TensorProto.DOUBLE, [1, 2, 3])],
                              [helper.make_tensor_value_info("grid", TensorProto.DOUBLE, None)],
                              [helper.make_tensor("size", TensorProto.INT64, [4], size)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(FormatError, match=r"^<model>: node 'stn' \(AffineGrid\): is imported through its function "
                                          r"body, which uses If-19: not supported by the importer$"):
        import_model(model)
