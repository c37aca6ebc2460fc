"""Sequences unrolled when importing (uopcli/interop/onnx/ops_sequence.py): graphs whose
inputs and outputs are tensors but that build lists inside. Values equal onnxruntime's,
gradients PyTorch's (float64, a loss weighing each element differently, so a reversed or
shifted sequence shows), and what cannot be unrolled is refused in one line naming the node."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

D = TensorProto.DOUBLE
RNG = np.random.default_rng(2911)


def model(nodes, inputs: dict, outputs: list[str], known: dict | None = None, opset: int = 18):
    """float64 inputs {name: shape}; `known` int64 initializers {name: value} (positions, splits)."""
    graph = helper.make_graph(
        [helper.make_node(op, ins, outs, name=name, **attrs) for name, op, ins, outs, attrs in nodes], "seq",
        [helper.make_tensor_value_info(n, D, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "length" else D, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in (known or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def pos(name, value):
    return {name: np.int64(value)}


def abc_nodes(*more):
    return [("make", "SequenceConstruct", ["a", "b", "c"], ["s"], {}), *more]


ABC = {"a": [2, 3], "b": [2, 3], "c": [2, 3]}

# (case, nodes, inputs, known): each model's output "out" is a tensor
CASES = [
    ("insert at -1 (before the last)", abc_nodes(("ins", "SequenceInsert", ["s", "a", "p"], ["t"], {}),
                                                 ("cat", "ConcatFromSequence", ["t"], ["out"], {"axis": 0})),
     ABC, pos("p", -1)),
    ("insert at -3 (the front)", abc_nodes(("ins", "SequenceInsert", ["s", "b", "p"], ["t"], {}),
                                           ("cat", "ConcatFromSequence", ["t"], ["out"], {"axis": 1})),
     ABC, pos("p", -3)),
    ("insert at n and by default at the end", abc_nodes(
        ("ins", "SequenceInsert", ["s", "c", "p"], ["t"], {}), ("ins2", "SequenceInsert", ["t", "a"], ["u"], {}),
        ("cat", "ConcatFromSequence", ["u"], ["out"], {"axis": 0})), ABC, pos("p", 3)),
    ("erase -1, then the default (the last)", abc_nodes(
        ("era", "SequenceErase", ["s", "p"], ["t"], {}), ("ins", "SequenceInsert", ["t", "c", "q"], ["u"], {}),
        ("era2", "SequenceErase", ["u"], ["v"], {}), ("cat", "ConcatFromSequence", ["v"], ["out"], {"axis": -1})),
     ABC, {**pos("p", -2), **pos("q", 0)}),
    ("at -2", abc_nodes(("at", "SequenceAt", ["s", "p"], ["out"], {})), ABC, pos("p", -2)),
    ("at 0 of an empty sequence with inserts", [
        ("empty", "SequenceEmpty", [], ["e"], {"dtype": D}), ("i1", "SequenceInsert", ["e", "a"], ["s"], {}),
        ("i2", "SequenceInsert", ["s", "b", "p"], ["t"], {}), ("at", "SequenceAt", ["t", "q"], ["out"], {})],
     {"a": [2], "b": [2]}, {**pos("p", 0), **pos("q", 1)}),
    ("length after a split", [("split", "SplitToSequence", ["x"], ["s"], {"axis": -1}),
                              ("len", "SequenceLength", ["s"], ["length"], {})], {"x": [2, 5]}, None),
    ("split by a scalar: the last piece smaller", [
        ("split", "SplitToSequence", ["x", "k"], ["s"], {"axis": 1}), ("at", "SequenceAt", ["s", "p"], ["out"], {})],
     {"x": [2, 5]}, {**pos("k", 2), **pos("p", -1)}),
    ("split by a scalar: its length", [  # the last piece alone is the same for a step of 1
        ("split", "SplitToSequence", ["x", "k"], ["s"], {"axis": 1}), ("len", "SequenceLength", ["s"], ["length"], {})],
     {"x": [2, 5]}, pos("k", 2)),
    ("split by sizes, stacked on a new last axis", [
        ("split", "SplitToSequence", ["x", "k"], ["s"], {}),
        ("cat", "ConcatFromSequence", ["s"], ["out"], {"axis": -1, "new_axis": 1})],
     {"x": [4, 3]}, {"k": np.array([2, 2])}),
    ("split one per index, axis dropped", [
        ("split", "SplitToSequence", ["x"], ["s"], {"axis": 0, "keepdims": 0}),
        ("at", "SequenceAt", ["s", "p"], ["out"], {})], {"x": [3, 4]}, pos("p", -3)),
    ("split one per index, axis kept, stacked at 0", [
        ("split", "SplitToSequence", ["x"], ["s"], {"axis": 1}),
        ("cat", "ConcatFromSequence", ["s"], ["out"], {"axis": 0, "new_axis": 1})], {"x": [3, 4]}, None),
]

TESTED_OPS = {node[1] for _, nodes, _, _ in CASES for node in nodes}  # (test_onnx_import_ops.py's every row)


@pytest.mark.parametrize("case, nodes, inputs, known", CASES, ids=[c[0] for c in CASES])
def test_an_unrolled_sequence_gives_onnxruntimes_values(case, nodes, inputs, known):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: the sequence values skip")
    out = nodes[-1][3][0]  # "out", or "length" (int64)
    m = model(nodes, inputs, [out], known)
    feeds = {n: RNG.standard_normal(s) for n, s in inputs.items()}
    truth = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph, weights = import_model(m)
    ours = np.asarray(evaluate_graph(graph, {**weights, **feeds})[out])
    assert ours.dtype == truth.dtype and ours.shape == truth.shape, (ours.dtype, ours.shape, truth.shape)
    np.testing.assert_array_equal(ours, truth)


def test_the_gradient_through_split_insert_at_and_concat_equals_pytorchs():
    """x [5, 3] split into rows of sizes 1, 2, 2; the weight W inserted before the last
    piece; loss = Σ w1·concat(all) + Σ w2·(the piece at -3): d loss/d x and d loss/d W."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the gradient comparison skips")
    x, weight = RNG.standard_normal((5, 3)), RNG.standard_normal((1, 3))
    w1, w2 = RNG.standard_normal((6, 3)), RNG.standard_normal((2, 3))
    nodes = [("split", "SplitToSequence", ["x", "sizes"], ["s"], {}),
             ("ins", "SequenceInsert", ["s", "W", "minus1"], ["t"], {}),
             ("cat", "ConcatFromSequence", ["t"], ["all"], {"axis": 0}),
             ("at", "SequenceAt", ["t", "minus3"], ["piece"], {}),
             ("m1", "Mul", ["all", "w1"], ["p1"], {}), ("m2", "Mul", ["piece", "w2"], ["p2"], {}),
             ("r1", "ReduceSum", ["p1"], ["l1"], {"keepdims": 0}), ("r2", "ReduceSum", ["p2"], ["l2"], {"keepdims": 0}),
             ("sum", "Add", ["l1", "l2"], ["loss"], {})]
    m = model(nodes, {"x": [5, 3], "w1": [6, 3], "w2": [2, 3]}, ["loss"],
              {"sizes": np.array([1, 2, 2]), **pos("minus1", -1), **pos("minus3", -3)})
    m.graph.initializer.append(numpy_helper.from_array(weight, "W"))
    graph, weights = import_model(m)
    grad, _ = differentiate(graph, ["x", "W"], cotangent="ones")
    ours = evaluate_graph(grad, {**weights, "x": x, "w1": w1, "w2": w2})

    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(weight, requires_grad=True)
    pieces = list(torch.split(tx, [1, 2, 2]))
    pieces.insert(len(pieces) - 1, tw)   # [x0, x1:3, W, x3:5]: the piece at -3 is x1:3
    loss = (torch.cat(pieces) * torch.tensor(w1)).sum() + (pieces[-3] * torch.tensor(w2)).sum()
    loss.backward()
    np.testing.assert_allclose(ours["grad_x"], tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["grad_W"], tw.grad.numpy(), rtol=1e-12, atol=1e-12)


def refusal(m) -> str:
    with pytest.raises(FormatError) as info:
        import_model(m)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_a_sequence_output_is_refused_naming_the_node_that_made_it():
    m = model([("split", "SplitToSequence", ["x"], ["s"], {}), ("same", "Identity", ["s"], ["out"], {})],
              {"x": [3]}, ["out"])
    assert "'same' (Identity)" in refusal(m) and "output 'out' is a sequence" in refusal(m)


def test_a_sequence_input_is_refused_naming_the_node_that_takes_it():
    m = model([("at", "SequenceAt", ["s", "p"], ["out"], {})], {}, ["out"], pos("p", 0))
    m.graph.input.append(helper.make_tensor_sequence_value_info("s", D, [2]))
    message = refusal(m)
    assert "'at' (SequenceAt)" in message and "input 's' is not a tensor" in message


def test_a_position_computed_at_run_time_is_refused_naming_the_node():
    nodes = abc_nodes(("shape", "Shape", ["a"], ["sh"], {}), ("arg", "ArgMax", ["a"], ["p"], {"keepdims": 0}),
                      ("first", "Gather", ["p", "zero"], ["q"], {}), ("at", "SequenceAt", ["s", "q"], ["out"], {}))
    message = refusal(model(nodes, ABC, ["out"], pos("zero", 0)))
    assert "'at' (SequenceAt)" in message and "so its positions must be constants" in message


def test_split_sizes_computed_at_run_time_are_refused_as_any_shape_setting_input():
    nodes = [("arg", "ArgMax", ["x"], ["k"], {"keepdims": 0}), ("split", "SplitToSequence", ["x", "k"], ["s"], {}),
             ("len", "SequenceLength", ["s"], ["length"], {})]
    message = refusal(model(nodes, {"x": [4]}, ["length"]))
    assert "'split' (SplitToSequence)" in message and "must be known when importing" in message


def test_a_concat_axis_out_of_range_is_refused_naming_the_node():
    message = refusal(model(abc_nodes(("cat", "ConcatFromSequence", ["s"], ["out"], {"axis": 2})), ABC, ["out"]))
    assert message.endswith("'cat' (ConcatFromSequence): axis 2 is out of range for rank 2"), message


def test_an_empty_sequence_of_an_unsupported_type_is_refused_naming_its_attribute():
    nodes = [("empty", "SequenceEmpty", [], ["e"], {"dtype": TensorProto.STRING}),
             ("len", "SequenceLength", ["e"], ["length"], {})]
    message = refusal(model(nodes, {}, ["length"]))
    assert message.endswith("'empty' (SequenceEmpty): dtype: element type STRING is not supported"), message


def test_out_of_range_positions_and_a_sequence_fed_to_a_tensor_op_are_refused():
    for p, last in ((3, "SequenceAt"), (-4, "SequenceAt")):
        message = refusal(model(abc_nodes(("at", last, ["s", "p"], ["out"], {})), ABC, ["out"], pos("p", p)))
        assert f"position {p} is out of range for a sequence of 3" in message and "'at'" in message
    message = refusal(model(abc_nodes(("ins", "SequenceInsert", ["s", "a", "p"], ["out"], {})), ABC, ["out"],
                            pos("p", -4)))
    assert "position -4 is out of range" in message
    message = refusal(model(abc_nodes(("add", "Add", ["s", "a"], ["out"], {})), ABC, ["out"]))
    assert "'add' (Add)" in message and "input 0 's' is a sequence" in message
