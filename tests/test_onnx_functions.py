"""Ops imported through the spec's function body (uopcli/interop/onnx/functions.py): the
body's nodes renamed into the node's namespace and its attribute references bound; a body
whose ops the importer lacks refused in one line naming the node; an If whose condition is
known when importing taken as its branch. (Values and gradients of such an op against
PyTorch: test_onnx_import_layer_gradients.py, CausalConvWithState.)"""

from __future__ import annotations

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime

need_onnx_and_runtime()

from onnx import AttributeProto, TensorProto, helper  # noqa: E402

from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.functions import SEPARATOR, expanded_nodes  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from test_onnx_edges import _one_node  # noqa: E402


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


def test_a_context_dependent_body_with_an_output_left_out():
    """CausalConvWithState without its present_state output: the output is still the causal
    depthwise convolution of the zero-padded input (its past_state left out too)."""
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(1, 2, 4)), rng.normal(size=(2, 1, 3))
    graph, weights = import_model(_one_node("CausalConvWithState", {"x": x}, {"w": w}, {}, 27))
    got = evaluate_graph(graph, {"x": x, **weights})["out"]
    padded = np.concatenate([np.zeros((1, 2, 2)), x], axis=2)
    want = np.array([[[sum(padded[0, c, t + k] * w[c, 0, k] for k in range(3)) for t in range(4)] for c in range(2)]])
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_a_body_whose_ops_the_importer_lacks_is_refused_naming_the_node(monkeypatch):
    """DynamicQuantizeLinear-11's body runs a QuantizeLinear: one line naming the node and
    what it lacks (QuantizeLinear's row taken away: every body's ops have rows today)."""
    from uopcli.interop.onnx import import_table
    monkeypatch.delitem(import_table.TABLE, "QuantizeLinear")
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"], name="quant")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(FormatError, match=r"^<model>: node 'quant' \(DynamicQuantizeLinear\): is imported through "
                                          r"its function body, which uses QuantizeLinear-10: not supported by the "
                                          r"importer$"):
        import_model(model)


def _if_model(condition):
    """y = If(c) then x·2 (plus a branch initializer 3) else x + 1, reading the outer x;
    c an initializer when `condition` is given, else a graph input."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["doubled"]),
                              helper.make_node("Add", ["doubled", "three"], ["then_out"])], "then", [],
                             [helper.make_tensor_value_info("then_out", TensorProto.DOUBLE, [3])],
                             [helper.make_tensor("three", TensorProto.DOUBLE, [], [3.0])])
    other = helper.make_graph([helper.make_node("Add", ["x", "one"], ["else_out"])], "else", [],
                              [helper.make_tensor_value_info("else_out", TensorProto.DOUBLE, [3])])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)
    inputs = [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])]
    constants = [helper.make_tensor("two", TensorProto.DOUBLE, [], [2.0]),
                 helper.make_tensor("one", TensorProto.DOUBLE, [], [1.0])]
    if condition is None:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        constants.append(helper.make_tensor("c", TensorProto.BOOL, [], [condition]))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3])],
                              constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_an_if_whose_condition_is_known_when_importing_is_its_branch():
    x = np.array([1.0, -2.0, 0.5])
    for condition, want in ((True, x * 2 + 3), (False, x + 1)):
        graph, weights = import_model(_if_model(condition))
        assert graph.input_names[0] == "x"
        np.testing.assert_array_equal(evaluate_graph(graph, {"x": x, **weights})["y"], want)
    with pytest.raises(FormatError, match=r"^<model>: node 'branch' \(If\): If's condition must be known when "
                                          r"importing \(a constant, or computed from shapes\): the format has no "
                                          r"control flow$"):
        import_model(_if_model(None))


def test_a_body_branch_reads_the_body_values_by_their_new_names():
    """An If inside a body: its branches read the body's values, so they are renamed with
    the body (formal inputs to the node's, the body's own into its namespace)."""
    then = helper.make_graph([helper.make_node("Mul", ["theta", "grid"], ["inner"])], "then", [],
                             [helper.make_tensor_value_info("inner", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["theta"], ["inner2"])], "else", [],
                              [helper.make_tensor_value_info("inner2", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Neg", ["theta"], ["grid"]),
             helper.make_node("If", ["flag"], ["picked"], then_branch=then, else_branch=other)]
    body = helper.make_function("", "AffineGrid", ["theta", "size"], ["grid"], nodes, [helper.make_opsetid("", 20)])
    _, branching = expanded_nodes(body, helper.make_node("AffineGrid", ["t", "s"], ["g"]), "AffineGrid", 20)
    (then_node,) = next(a.g for a in branching.attribute if a.name == "then_branch").node
    assert list(branching.input) == [f"g{SEPARATOR}flag"] and list(branching.output) == [f"g{SEPARATOR}picked"]
    assert list(then_node.input) == ["t", "g"] and list(then_node.output) == [f"g{SEPARATOR}inner"]
    other_graph = next(a.g for a in branching.attribute if a.name == "else_branch")
    assert [o.name for o in other_graph.output] == [f"g{SEPARATOR}inner2"]


def test_the_names_a_body_leaves_empty_and_the_attributes_a_node_leaves_out():
    """A formal input the node leaves out is an empty name, as an optional input left out in
    the body is; an attribute reference to one the node lacks and the schema gives no default
    (Cast's `to`) is left out, where one with a default (Cast-21's `saturate`) takes it."""
    to, saturate = AttributeProto(), AttributeProto()
    to.name, to.ref_attr_name, to.type = "to", "to", AttributeProto.INT
    saturate.name, saturate.ref_attr_name, saturate.type = "saturate", "saturate", AttributeProto.INT
    cast = helper.make_node("Cast", ["input"], ["output"])
    cast.attribute.extend([to, saturate])
    clip = helper.make_node("Clip", ["input", "", "extra"], ["clipped"])
    body = helper.make_function("", "Cast", ["input", "extra"], ["output"], [cast, clip],
                                [helper.make_opsetid("", 21)])
    node = helper.make_node("Cast", ["x"], ["y"])
    bound_cast, bound_clip = expanded_nodes(body, node, "Cast", 21)
    assert [(a.name, a.i) for a in bound_cast.attribute] == [("saturate", 1)]
    assert list(bound_clip.input) == ["x", "", ""]
    older, _ = expanded_nodes(body, node, "Cast", 13)  # the defaults of the version the opset picks: none
    assert list(older.attribute) == []


def test_a_branch_is_renamed_all_the_way_down():
    """Inside an If of a body: a nested If's branches, the branch's initializers and its
    inputs are renamed with the body too."""
    inner = helper.make_graph([helper.make_node("Neg", ["theta"], ["deep"])], "inner", [],
                              [helper.make_tensor_value_info("deep", TensorProto.FLOAT, None)])
    then = helper.make_graph([helper.make_node("If", ["flag"], ["nested"], then_branch=inner, else_branch=inner),
                              helper.make_node("Add", ["nested", "bias"], ["out_then"])], "then",
                             [helper.make_tensor_value_info("arg", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("out_then", TensorProto.FLOAT, None)],
                             [helper.make_tensor("bias", TensorProto.FLOAT, [], [1.0])])
    nodes = [helper.make_node("If", ["flag"], ["grid"], then_branch=then, else_branch=then)]
    body = helper.make_function("", "AffineGrid", ["theta", "size"], ["grid"], nodes, [helper.make_opsetid("", 20)])
    (branching,) = expanded_nodes(body, helper.make_node("AffineGrid", ["t", "s"], ["g"]), "AffineGrid", 20)
    graph = next(a.g for a in branching.attribute if a.name == "then_branch")
    assert [t.name for t in graph.initializer] == [f"g{SEPARATOR}bias"]
    assert [i.name for i in graph.input] == [f"g{SEPARATOR}arg"]
    assert list(graph.node[1].input) == [f"g{SEPARATOR}nested", f"g{SEPARATOR}bias"]
    deep = next(a.g for a in graph.node[0].attribute if a.name == "then_branch").node[0]
    assert list(deep.input) == ["t"] and list(deep.output) == [f"g{SEPARATOR}deep"]


def test_a_body_is_read_at_its_own_opset_and_only_where_the_version_has_one():
    from uopcli.interop.onnx.functions import body_opset, function_of, has_function
    mixed = helper.make_function("", "F", [], [], [], [helper.make_opsetid("com.example", 1),
                                                       helper.make_opsetid("", 20)])
    assert body_opset(mixed, 99) == 20
    assert body_opset(helper.make_function("", "F", [], [], [], [helper.make_opsetid("ai.onnx", 18)]), 99) == 18
    assert body_opset(helper.make_function("", "F", [], [], [], [helper.make_opsetid("com.example", 1)]), 99) == 99
    assert has_function("Gelu", 20) and not has_function("Gelu", 19)  # Gelu is new in 20
    assert not has_function("NoSuchOp", 20) and not has_function("Conv", 20)
    node = helper.make_node("Gelu", ["x"], ["y"])
    assert function_of("Gelu", 19, node, []) is None and function_of("Conv", 20, node, []) is None


def _branch(outputs, nodes=(), initializers=()):
    return helper.make_graph(list(nodes), "branch", [],
                             [helper.make_tensor_value_info(o, TensorProto.DOUBLE, None) for o in outputs],
                             list(initializers))


def _if_with(then, other, condition=True, inputs=("c",), before=()):
    """x (double [3]) in, y out of an If on the constant `condition` (a bool initializer c,
    of shape [] or, as a list, [n]); `before`: nodes ahead of the If (its index moves)."""
    node = helper.make_node("If", list(inputs), ["y"], name="branch",
                            **{k: g for k, g in (("then_branch", then), ("else_branch", other)) if g is not None})
    shape = [len(condition)] if isinstance(condition, list) else []
    values = condition if isinstance(condition, list) else [condition]
    graph = helper.make_graph([*before, node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                              [helper.make_tensor("c", TensorProto.BOOL, shape, values)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


_NEG = _branch(["out"], [helper.make_node("Neg", ["x"], ["out"])])


@pytest.mark.parametrize("model, says", [
    # a second input (malformed): its first is a known constant, yet the node is refused, not taken
    (_if_with(_NEG, _NEG, inputs=("c", "c")), "node 'branch' (If): If's condition must be known when importing"),
    (_if_with(_NEG, _NEG, condition=[True, True]), "node 'branch' (If): If's condition must be known when importing"),
    (_if_with(_branch(["out", "out"], [helper.make_node("Neg", ["x"], ["out"])]), _NEG),
     "node 'branch' (If): its then_branch is missing or makes 2 outputs for 1"),
    (_if_with(_NEG, None, condition=False), "node 'branch' (If): its else_branch is missing or makes 0 outputs for 1"),
    (_if_with(_branch(["ghost"]), _NEG), "node 'branch' (If): its then_branch's output 'ghost' is made by no node"),
    # a branch's initializer is read with its name in the refusal
    (_if_with(_branch(["out"], [helper.make_node("Identity", ["x"], ["out"])],
                      [helper.make_tensor("words", TensorProto.STRING, [1], [b"a"])]), _NEG),
     "initializer 'words': element type STRING is not supported"),
    # a branch's unnamed node is labelled by the If's own position in the graph (#1: after the Identity)
    (_if_with(_branch(["out"], [helper.make_node("Unique", ["x"], ["out"])]), _NEG,
              before=[helper.make_node("Identity", ["x"], ["x2"])]), "node '#1' (Unique)"),
])
def test_a_malformed_if_is_refused_in_one_line_naming_the_node(model, says):
    with pytest.raises(FormatError) as caught:
        import_model(model)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("<model>: ") and says in message, message


def test_an_if_that_picks_a_sequence_is_named_where_the_sequence_is_refused():
    """A branch's sequence output is the If's: a graph output that is a sequence is refused
    naming the If that made it."""
    made = _branch([], [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"])])
    made.output.append(helper.make_tensor_sequence_value_info("seq", TensorProto.DOUBLE, None))
    with pytest.raises(FormatError) as caught:
        import_model(_if_with(made, made))
    assert str(caught.value) == ("<model>: node 'branch' (If): output 'y' is a sequence: the format has tensors "
                                 "only"), str(caught.value)
