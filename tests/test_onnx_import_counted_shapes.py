"""ONNX ops whose output's shape is a count of values (Compress, NonZero, Unique,
NonMaxSuppression): built
where those values are known when importing (constants, initializers, inputs fixed with
--constant), against onnxruntime and onnx.reference; Compress's data stays an input and its
gradient puts each cotangent element back in its place; what is computed from the model's
inputs is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from test_onnx_import_ops import ours  # noqa: E402 - the ops' own import-and-evaluate
from _onnx_helpers import assert_exact  # noqa: E402
from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

TESTED_OPS = {"Compress", "NonZero", "Unique", "NonMaxSuppression"}
CODES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64, np.dtype(np.bool_): T.BOOL,
         np.dtype(np.int32): T.INT32, np.dtype(np.float64): T.DOUBLE}


def model(op, inputs: dict, constants: dict, outputs: list, opset: int, **attrs) -> onnx.ModelProto:
    """One `op` node reading `inputs` (graph inputs: name -> array) and `constants`
    (initializers: name -> array), in the order inputs then constants."""
    names = list(inputs) + list(constants)
    node = helper.make_node(op, names, [name for name, _ in outputs], name="n", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, CODES[a.dtype], list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, code, None) for n, code in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def peers(m, feeds: dict) -> list:
    """onnxruntime's outputs, checked against onnx.reference's."""
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(theirs, ReferenceEvaluator(m).run(None, feeds)):
        assert_exact(a, b, "onnxruntime against onnx.reference")
    return theirs


X = np.array([[1.5, -0.0, 2.0], [0.0, -4.0, 3.5], [7.0, 8.0, -9.0], [10.0, -0.0, 12.0]], dtype=np.float32)


# ----------------------------------------------------------------------------- Compress

@pytest.mark.parametrize("condition, axis", [
    ([True, False, True, True], 0), ([False, True, True], 1), ([True, False, True], -1),
    ([False, True], 0),                                    # shorter than the axis: the rest left out
    ([True, False, False, True, True, False, True], None),  # flattened
    ([False, False, False], 1),                            # nothing picked: an empty axis
])
def test_compress_equals_onnxruntime(condition, axis):
    attrs = {} if axis is None else {"axis": axis}
    m = model("Compress", {"x": X}, {"condition": np.array(condition)}, [("y", T.FLOAT)], 11, **attrs)
    (want,) = peers(m, {"x": X})
    (got,) = ours(m, {"x": X})
    assert_exact(got, want, f"Compress {condition} axis {axis}")  # -0.0 copied as -0.0


def test_compress_gradient_puts_each_cotangent_element_in_its_place():
    """The gradient of sum(u * compress(x)) is u scattered back to the picked places (order
    seen: each picked element meets its own u), zero elsewhere."""
    m = model("Compress", {"x": X}, {"condition": np.array([True, False, True])}, [("y", T.FLOAT)], 11, axis=1)
    graph, _ = import_model(m)
    grads, _ = differentiate(graph, ["x"], cotangent="input")
    u = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    got = np.asarray(evaluate_graph(grads, {"x": X, "cotangent_y": u})["grad_x"])
    want = np.zeros_like(X)
    want[:, [0, 2]] = u
    assert_exact(got, want, "d sum(u * compress(x)) / dx")


def test_compress_refuses_a_computed_condition_and_names_an_input_one():
    computed = helper.make_graph(
        [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Compress", ["x", "c"], ["y"], name="n")],
        "g", [helper.make_tensor_value_info("x", T.FLOAT, [3])], [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    with pytest.raises(FormatError) as refused:
        import_model(helper.make_model(computed, opset_imports=[helper.make_opsetid("", 11)]), source="m.onnx")
    # the float initializer `zero` is a weight: never known, whatever the user fixes
    assert str(refused.value) == ("m.onnx: node 'n' (Compress): condition (input 1) must be known when importing "
                                  "(a constant or a shape), but it is computed from weights ('zero') and the model's "
                                  "input 'x': weights are never known when importing (they are inputs, to "
                                  "differentiate with respect to), so a shape that follows their values cannot be "
                                  "static; export the model in a form whose shapes do not depend on values")
    given = model("Compress", {"x": X, "c": np.array([True, False])}, {}, [("y", T.FLOAT)], 11, axis=1)
    with pytest.raises(FormatError, match="but it is the model's input 'c': give its value with --constant c=..."):
        import_model(given)
    graph, _ = import_model(given, constants={"c": [0, 1]})  # as --constant c=0,1
    assert_exact(np.asarray(evaluate_graph(graph, {"x": X})["y"]), X[:, [1]], "Compress with c fixed")


def test_compress_refuses_a_condition_longer_than_the_axis():
    m = model("Compress", {"x": X}, {"condition": np.ones(4, bool)}, [("y", T.FLOAT)], 11, axis=1)
    with pytest.raises(FormatError, match=r"^m.onnx: node 'n' \(Compress\): the condition has 4 values for an "
                                          r"axis of 3$"):
        import_model(m, source="m.onnx")


# ----------------------------------------------------------------------------- NonZero

@pytest.mark.parametrize("values", [
    np.array([[1, 0, 3], [0, 0, -2]], np.int64), np.array([0.0, -0.0, np.nan, 2.5], np.float32),
    np.array([[[True, False], [False, True]], [[False, False], [True, True]]]), np.zeros((2, 3), np.int32),
], ids=["int-2d", "float-with-signed-zero-and-nan", "bool-3d", "all-zero"])
def test_nonzero_of_known_values_equals_onnxruntime(values):
    m = model("NonZero", {}, {"c": values}, [("y", T.INT64)], 13)
    (want,) = peers(m, {})
    (got,) = ours(m, {})
    assert_exact(got, want, "NonZero")


def test_nonzero_of_a_scalar_is_refused_where_the_peers_differ():
    m = model("NonZero", {}, {"c": np.array(7, np.int64)}, [("y", T.INT64)], 13)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    assert theirs.shape != ReferenceEvaluator(m).run(None, {})[0].shape  # (1, 1) and (0, 1): else build it
    with pytest.raises(FormatError, match=r"^<model>: node 'n' \(NonZero\): X is a scalar: its nonzero indices are "
                                          r"undefined \(onnxruntime gives \[1, n\], onnx.reference \[0, n\]\)$"):
        import_model(m)


@pytest.mark.parametrize("op, outputs", [("NonZero", [("y", T.INT64)]), ("Unique", [("y", T.FLOAT)])])
def test_nonzero_and_unique_of_data_are_refused_naming_the_input(op, outputs):
    m = model(op, {"x": X}, {}, outputs, 13 if op == "NonZero" else 11)
    with pytest.raises(FormatError) as refused:
        import_model(m)
    assert str(refused.value) == (f"<model>: node 'n' ({op}): X (input 0) must be known when importing (a constant "
                                  "or a shape), but it is the model's input 'x': give its value with --constant x=...")


@pytest.mark.parametrize("op, axis", [("Compress", 2), ("Compress", -3), ("Unique", 2)])
def test_an_axis_outside_the_rank_is_refused(op, axis):
    inputs = {"condition": np.array([True, False])} if op == "Compress" else {}
    data = {"x": X} if op == "Compress" else {}
    constants = inputs if op == "Compress" else {"X": S}
    m = model(op, data, constants, [("y", T.FLOAT if op == "Compress" else T.INT64)], 11, axis=axis)
    with pytest.raises(FormatError) as refused:
        import_model(m)
    assert str(refused.value) == f"<model>: node 'n' ({op}): axis {axis} is out of range for rank 2"


# ----------------------------------------------------------------------------- Unique

U = np.array([2, 1, 1, 3, 4, 3, -7, 2], np.int64)
S = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [-1, 0, 0]], np.int64)
OUTS = [("y", None), ("indices", T.INT64), ("inverse", T.INT64), ("counts", T.INT64)]


@pytest.mark.parametrize("values, attrs", [
    (U, {}), (U, {"sorted": 0}), (S, {"axis": 0}), (S, {"axis": 0, "sorted": 0}), (S, {"axis": -1}),
    (S.reshape(2, 2, 3), {"axis": 1}), (np.array([3.5, -0.0, 0.0, 1.0, -0.0, 3.5], np.float32), {"sorted": 0}),
    (np.array([5], np.int64), {}),
], ids=["flat", "flat-first-occurrence", "rows", "rows-first-occurrence", "columns", "3d-axis-1",
        "float-signed-zeros", "one"])
def test_unique_of_known_values_equals_onnxruntime_in_every_output(values, attrs):
    outputs = [(name, code or CODES[values.dtype]) for name, code in OUTS]
    m = model("Unique", {}, {"X": values}, outputs, 11, **attrs)
    want = peers(m, {})
    got = ours(m, {})
    for name, a, b in zip([o for o, _ in OUTS], got, want):
        assert_exact(a, b, f"Unique {attrs}: {name}")
    assert got[0].dtype == values.dtype


def test_unique_keeps_the_first_occurrence_of_equal_values():
    """-0.0 and 0.0 are one value: the output holds the one that came first, as
    onnxruntime's (compared above) and the indices say."""
    values = np.array([-0.0, 1.0, 0.0], np.float32)
    got = ours(model("Unique", {}, {"X": values}, [("y", T.FLOAT), ("i", T.INT64)], 11), {})
    assert np.signbit(got[0][0]) and got[1].tolist() == [0, 1]


@pytest.mark.parametrize("axis", [None, 0])
def test_unique_refuses_nan_where_the_peers_disagree(axis):
    """onnxruntime puts every element in one class once a nan is met; onnx.reference
    (numpy) makes nans one class flattened and each its own along an axis."""
    values = np.array([[np.nan, 2.0], [1.0, 2.0], [np.nan, 2.0]], np.float32)
    attrs = {} if axis is None else {"axis": axis}
    m = model("Unique", {}, {"X": values}, [("y", T.FLOAT)], 11, **attrs)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    assert theirs.shape != ReferenceEvaluator(m).run(None, {})[0].shape  # they disagree: else build it
    with pytest.raises(FormatError, match=r"^<model>: node 'n' \(Unique\): X holds nan, which no order places: "
                                          r"onnxruntime and onnx.reference disagree on its class$"):
        import_model(m)


def test_a_count_computed_from_weights_or_inputs_says_which_and_what_to_do():
    """A mixture-of-experts router as torch's TorchScript exporter writes HF Mixtral with
    eager experts: logits = x·W (W a weight), TopK, NonZero of the tokens sent to expert 0.
    The count depends on the weights' values, which no option fixes: the refusal says so
    (it said "computed from the model's inputs", as if --constant could help). Computed from
    inputs alone (a + b), it names every input to fix."""
    router = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_router"], ["logits"]),
         helper.make_node("TopK", ["logits", "two"], ["top", "experts"], axis=-1),
         helper.make_node("Equal", ["experts", "zero"], ["chosen"]),
         helper.make_node("NonZero", ["chosen"], ["where"], name="/mlp/experts/NonZero")],
        "router", [helper.make_tensor_value_info("x", T.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("where", T.INT64, None)],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "w_router"),
         numpy_helper.from_array(np.array([2], np.int64), "two"), numpy_helper.from_array(np.array(0, np.int64), "zero")])
    with pytest.raises(FormatError) as refused:
        import_model(helper.make_model(router, opset_imports=[helper.make_opsetid("", 17)]), source="moe.onnx")
    assert str(refused.value) == (
        "moe.onnx: node '/mlp/experts/NonZero' (NonZero): X (input 0) must be known when importing (a constant or a "
        "shape), but it is computed from weights ('w_router') and the model's input 'x': weights are never known when "
        "importing (they are inputs, to differentiate with respect to), so a shape that follows their values cannot "
        "be static; export the model in a form whose shapes do not depend on values")

    summed = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("NonZero", ["c"], ["where"], name="n")], "sum",
        [helper.make_tensor_value_info(n, T.INT64, [3]) for n in ("b", "a")],
        [helper.make_tensor_value_info("where", T.INT64, None)])
    with pytest.raises(FormatError) as refused:
        import_model(helper.make_model(summed, opset_imports=[helper.make_opsetid("", 17)]), source="m.onnx")
    assert str(refused.value) == ("m.onnx: node 'n' (NonZero): X (input 0) must be known when importing (a constant "
                                  "or a shape), but it is computed from the model's inputs 'a', 'b': give their values "
                                  "with --constant a=... --constant b=...")
    graph, _ = import_model(helper.make_model(summed, opset_imports=[helper.make_opsetid("", 17)]),
                            constants={"a": [1, 0, -2], "b": [0, 0, 2]})
    assert_exact(np.asarray(evaluate_graph(graph, {})["where"]), np.array([[0]]), "NonZero of a + b fixed")


# ----------------------------------------------------------------------------- NonMaxSuppression

def _nms_model(boxes, scores, limit=None, iou=None, floor=None, center=0, known=True):
    """One NonMaxSuppression node; boxes and scores initializers (known) or graph inputs."""
    data = {"boxes": boxes, "scores": scores}
    extra = {name: np.array([v], dtype) for name, v, dtype in (("limit", limit, np.int64), ("iou", iou, np.float32),
                                                               ("floor", floor, np.float32)) if v is not None}
    names = list(data) + list(extra)
    node = helper.make_node("NonMaxSuppression", names, ["selected"], name="n", center_point_box=center)
    graph = helper.make_graph(
        [node], "g", [] if known else [helper.make_tensor_value_info(n, T.FLOAT, list(a.shape)) for n, a in data.items()],
        [helper.make_tensor_value_info("selected", T.INT64, None)],
        [numpy_helper.from_array(a, n) for n, a in ({**data, **extra} if known else extra).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _random_boxes(rng, batches, count, center):
    if center:  # x_center, y_center, width, height
        return np.concatenate([rng.uniform(0, 10, (batches, count, 2)), rng.uniform(0.5, 4, (batches, count, 2))],
                              2).astype(np.float32)
    corners = rng.uniform(0, 10, (batches, count, 4)).astype(np.float32)  # either diagonal: y1 x1 y2 x2 in any order
    return corners


@pytest.mark.parametrize("seed", range(6))
def test_non_max_suppression_of_known_boxes_equals_onnxruntime(seed):
    """Random overlapping boxes in both formats, 2 batches and 3 classes, with and without a
    score threshold, limits from 0 to all, scores with ties (kept by the lower index first)."""
    rng = np.random.default_rng(seed)
    center = seed % 2
    boxes = _random_boxes(rng, 2, 12, center)
    scores = rng.choice(np.linspace(0.05, 0.95, 7), (2, 3, 12)).astype(np.float32)  # ties on purpose
    for limit, iou, floor in ((3, 0.3, None), (12, 0.1, 0.4), (0, 0.5, 0.2), (5, 0.0, 0.5), (12, 0.6, None)):
        m = _nms_model(boxes, scores, limit, iou, floor, center)
        (got,) = ours(m, {})
        (theirs,) = peers(m, {})
        assert_exact(got, theirs, f"seed {seed}, limit {limit}, iou {iou}, score threshold {floor}")
        assert got.shape[0] > 0 or limit == 0
    # no max_output_boxes_per_class: 0 boxes a class (onnx.reference 1.23 raises on it)
    m = _nms_model(boxes, scores)
    (theirs,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    assert ours(m, {})[0].shape == theirs.shape == (0, 3)


def test_non_max_suppression_keeps_an_iou_equal_to_the_threshold_and_drops_a_score_equal_to_it():
    """IoU exactly the threshold: kept (the spec: suppressed only when strictly greater);
    a score exactly the threshold: dropped, as both peers do (the spec's 'less than ... are
    removed' would keep it)."""
    boxes = np.array([[[0, 0, 2, 2], [0, 1, 2, 3], [5, 5, 6, 6]]], np.float32)  # IoU of the first two: 2/6 = 1/3
    scores = np.array([[[0.9, 0.8, 0.5]]], np.float32)
    m = _nms_model(boxes, scores, 3, float(np.float32(1 / 3)), 0.5)
    (got,) = ours(m, {})
    (theirs,) = peers(m, {})
    assert_exact(got, theirs, "boundaries")
    assert got.tolist() == [[0, 0, 0], [0, 0, 1]]


def test_non_max_suppression_of_a_models_boxes_is_refused_saying_what_to_differentiate():
    boxes, scores = _random_boxes(np.random.default_rng(1), 1, 4, 0), np.ones((1, 1, 4), np.float32)
    with pytest.raises(FormatError) as refused:
        import_model(_nms_model(boxes, scores, 2, 0.5, known=False))
    assert str(refused.value) == (
        "<model>: node 'n' (NonMaxSuppression): boxes, whose values decide how many boxes are kept (differentiate "
        "the model up to its boxes and scores), (input 0) must be known when importing (a constant or a shape), but "
        "it is the model's input 'boxes': give its value with --constant boxes=...")
    graph, _ = import_model(_nms_model(boxes, scores, 2, 0.5, known=False), constants={"boxes": boxes, "scores": scores})
    assert evaluate_graph(graph, {})["selected"].shape[1] == 3  # fixed with --constant, it imports


def test_non_max_suppression_refuses_boxes_that_do_not_fit_the_scores():
    m = _nms_model(np.zeros((1, 4, 4), np.float32), np.zeros((1, 2, 5), np.float32), 1)
    with pytest.raises(FormatError, match=r"boxes \[1, 4, 4\] and scores \[1, 2, 5\] must be \[batches, boxes, 4\] "
                                          r"and \[batches, classes, boxes\]$"):
        import_model(m)


def test_differentiating_an_input_fixed_with_constant_says_why_it_has_no_gradient(tmp_path):
    """x[x + y > 0].sum() of float tensors: the refusal advises --constant; a newcomer who
    followed it with --wrt x was told PyTorch's exporter may have folded x. Differentiating a
    fixed input now says it was fixed and why that leaves no gradient, also after saving."""
    from uopcli.errors import GradientError
    from uopcli.formats.uop import load, save
    from uopcli.tools.inspect import FIXED_INPUTS
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("NonZero", ["s"], ["where"], name="n"),
             helper.make_node("Cast", ["where"], ["f"], to=T.FLOAT), helper.make_node("ReduceSum", ["f"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, T.FLOAT, [3]) for n in ("x", "y")],
                              [helper.make_tensor_value_info("out", T.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FormatError) as refused:
        import_model(m, source="m.onnx")
    assert str(refused.value) == (
        "m.onnx: node 'n' (NonZero): X (input 0) must be known when importing (a constant or a shape), but it is "
        "computed from the model's inputs 'x', 'y': give their values with --constant x=... --constant y=...")
    fixed, _ = import_model(m, source="m.onnx", constants={"x": [1.0, -2.0, 0.5], "y": [0.0, 1.0, -1.0]})
    assert fixed.meta[FIXED_INPUTS] == '["x", "y"]' and fixed.inputs == []
    save(fixed, tmp_path / "m.uop")
    for graph in (fixed, load(tmp_path / "m.uop")):
        with pytest.raises(GradientError) as caught:
            differentiate(graph, ["x"])
        assert str(caught.value) == (
            "input 'x' was fixed with --constant x=... when importing, so it is a constant of the graph, with no "
            "gradient; where its values set a shape (why an import asks for --constant), the format's static shapes "
            "cannot follow them, and the model cannot be differentiated with respect to x as exported")
        with pytest.raises(GradientError, match="^no input named 'w' to differentiate"):
            differentiate(graph, ["w"])


@pytest.mark.parametrize("computed, wrt", [(False, ["x"]), (True, ["x", "y"]), (True, ["y", "w"])])
def test_a_shape_set_by_an_input_to_differentiate_is_refused_saying_it_cannot_be(computed, wrt):
    """NonZero of x itself, or of x + y: the refusal advised --constant x=... even to a user
    differentiating with respect to x, who then lost x's gradient; given --wrt's names, it
    says why the model cannot be differentiated with respect to them as exported."""
    source = "s" if computed else "x"
    nodes = ([helper.make_node("Add", ["x", "y"], ["s"])] if computed else []) + [
        helper.make_node("NonZero", [source], ["where"], name="n"),
        helper.make_node("Cast", ["where"], ["f"], to=T.FLOAT), helper.make_node("ReduceSum", ["f"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, T.FLOAT, [3]) for n in ("x", "y")],
                              [helper.make_tensor_value_info("out", T.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FormatError) as refused:
        import_model(m, source="m.onnx", wrt=wrt)
    named = [n for n in wrt if n in ("x", "y")]
    what = "computed from the model's inputs 'x', 'y'" if computed else "the model's input 'x'"
    listed = ", ".join(map(repr, named))
    many = len(named) > 1
    assert str(refused.value) == (
        f"m.onnx: node 'n' (NonZero): X (input 0) must be known when importing (a constant or a shape), but it is "
        f"{what}; --wrt names {listed}: a shape that follows {'their' if many else 'its'} values cannot be static, "
        f"so the model cannot be differentiated with respect to {'them' if many else 'it'} as exported (--constant "
        f"would make {'them constants' if many else 'it a constant'}, with no gradient)")
    with pytest.raises(FormatError, match=r"give (its value|their values) with --constant x=\.\.\."):
        import_model(m, source="m.onnx", wrt=["w"])  # an input not differentiated: fixing it is the way
