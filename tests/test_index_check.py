"""Given labels outside the classes are refused (uopcli/tools/index_range.py,
check_index_values): an integer input the graph compares, through views, with a range
0..n-1 must hold values in it, or a constant it is also compared with (an ignore_index);
else `eval -i`, `eval --map` (a shard, or a fixed -i) and `check -i` refuse it in one line,
exit 1, nothing written, where the one-hot comparison would silently drop its term (torch:
"Target 12 is out of bounds"; onnxruntime: "Out of range value in index tensor").
An index that reaches its comparison through other arithmetic (OneHot's wrap of a negative
index) has no range and stays unchecked; an imported Gather's wrap is followed (-n..n-1,
test_index_check_gathernd.py has GatherND's columns). The evaluator itself checks nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.backends.numpy import evaluate_graph
from uopcli.core.ops import Ops
from uopcli.formats.uop import save
from uopcli.tools.index_range import IndexLimit, IndexOutOfRange, check_index_values, index_limits
from uopcli.tools.map import ShardError, map_graph

from _map_helpers import UOPGRAD, uopgrad

needs_cli = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
WHY = "(torch refuses such labels too)"


def sparse_xent(classes: int = 5, batch: int = 6) -> Graph:
    """tinygrad's sparse_categorical_crossentropy, built with the builder: a one-hot of the
    labels against log_softmax, labels != -1 (its ignore_index) as the mask."""
    logits = UOp.param("logits", (batch, classes))
    labels = UOp.param("labels", (batch,), dtypes.int32)
    picked = labels.one_hot(classes).cast(dtypes.float32) * logits.log_softmax(-1)
    mask = labels.ne(-1).cast(dtypes.float32)
    return Graph({"loss": -(picked.sum(-1) * mask).sum()}, inputs=[logits, labels])


def refusal(run) -> str:
    """The one error line of a failed run (exit 1, nothing on stdout, no traceback)."""
    assert run.returncode == 1, (run.returncode, run.stderr.decode())
    assert run.stdout == b"" and b"Traceback" not in run.stderr
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uopgrad: error: "), lines
    return lines[0][len("uopgrad: error: "):]


# ----------------------------------------------------------------------------- the library

def test_labels_in_range_or_the_ignore_value_pass_and_any_other_is_refused_at_its_element():
    graph = sparse_xent(5)
    (limit,) = index_limits(graph)["labels"]
    assert (limit.n, limit.others, limit.node) == (5, (-1,), "'one_hot'")
    check_index_values(graph, {"labels": np.array([0, 1, 2, 3, 4, -1], np.int32)})  # all classes, and ignored
    for bad, value, at in (([0, 1, 2, 3, 4, 5], 5, 5), ([9, 0, 0, 0, 0, 0], 9, 0), ([0, 0, -2, 0, 0, 7], -2, 2)):
        with pytest.raises(IndexOutOfRange) as refused:
            check_index_values(graph, {"labels": np.array(bad, np.int32)})
        assert str(refused.value) == (f"input 'labels' holds {value} (at [{at}]), outside 0..4, the classes node "
                                      f"'one_hot' compares it with, and not -1, the value it ignores {WHY}")
    check_index_values(graph, {"logits": np.zeros((6, 5), np.float32)})  # labels not given: nothing to check


def test_a_comparison_without_metadata_is_named_by_its_number_and_the_index_by_every_axis():
    labels = UOp.param("labels", (2, 3), dtypes.int64)
    x = UOp.param("x", (2, 3, 4))
    hit = labels.reshape((2, 3, 1)).eq(UOp.arange(4, dtype=dtypes.int64).reshape((1, 1, 4)))
    graph = Graph({"y": hit.where(x, 0.0).sum()}, inputs=[x, labels])
    number = next(i for i, node in enumerate(graph.nodes()) if node.op == Ops.CMPEQ)
    with pytest.raises(IndexOutOfRange) as refused:
        check_index_values(graph, {"labels": np.array([[0, 1, 2], [3, 0, 4]])})
    assert str(refused.value) == (f"input 'labels' holds 4 (at [1,2]), outside 0..3, the classes node %{number} "
                                  f"CMPEQ compares it with {WHY}")


def shifted_labels_loss() -> Graph:
    """A causal LM's label shift as HuggingFace writes it: the labels padded with -100 on the
    right (PAD, then a WHERE on an input-free mask), the first position dropped (SHRINK),
    then a one-hot against 5 classes and a mask of the -100s."""
    labels, logits = UOp.param("labels", (2, 4), dtypes.int64), UOp.param("logits", (2, 4, 5))
    keep = UOp.const(True, dtypes.bool).reshape((1, 1)).expand((2, 4)).pad(((0, 0), (0, 1)))
    shifted = keep.where(labels.pad(((0, 0), (0, 1))), UOp.const(-100, dtypes.int64)).shrink(((0, 2), (1, 5)))
    hit = shifted.reshape((2, 4, 1)).eq(UOp.arange(5, dtype=dtypes.int64).reshape((1, 1, 5)))
    return Graph({"loss": (hit.where(logits, 0.0).sum(-1) * shifted.ne(-100).cast(dtypes.float32)).sum()},
                 inputs=[logits, labels])


def test_a_shifted_label_is_followed_through_padding_and_a_mask_and_checked_where_compared():
    """The index is followed through PAD and the mask's WHERE to the classes; only the
    elements that reach them are checked: the first of each row, dropped by the shift, may
    hold anything (torch's HF loss never reads it), any other must be a class or -100."""
    graph = shifted_labels_loss()
    (limit,) = index_limits(graph)["labels"]
    assert (limit.n, limit.others, limit.reached) == (5, (-100,), (1, 2, 3, 5, 6, 7))
    check_index_values(graph, {"labels": np.array([[9, 1, 2, -100], [-7, 4, 3, 2]])})
    with pytest.raises(IndexOutOfRange, match=r"holds 9 \(at \[0,2\]\), outside 0\.\.4, the classes node %\d+ "
                                              r"CMPEQ compares it with, and not -100, the value it ignores"):
        check_index_values(graph, {"labels": np.array([[9, 1, 9, -100], [0, 4, 3, 2]])})


def test_the_elements_compared_are_followed_through_a_permute_of_rank_3_and_a_shrunk_broadcast():
    """Which elements reach the classes, exactly: labels [2,3,4] permuted to [4,2,3], its
    last axis (the labels' axis 1) cut to 2, keep the flat indices with j < 2; a [3]
    reshaped to [3,1], expanded to [3,5] and cut to rows 0-1, columns 1-2, keeps 0 and 1
    (the expanded axis is held unexpanded: its cut must keep it whole)."""
    labels, x = UOp.param("labels", (2, 3, 4), dtypes.int64), UOp.param("x", (4, 2, 2, 5))
    moved = labels.permute((2, 0, 1)).shrink(((0, 4), (0, 2), (0, 2)))
    hit = moved.reshape((4, 2, 2, 1)).eq(UOp.arange(5, dtype=dtypes.int64).reshape((1, 1, 1, 5)))
    graph = Graph({"y": hit.where(x, 0.0).sum()}, inputs=[x, labels])
    assert [limit.reached for limit in index_limits(graph)["labels"]] == [(*range(8), *range(12, 20))]
    given = np.zeros((2, 3, 4), np.int64)
    given[1, 2, 3] = 9  # j = 2: cut away
    check_index_values(graph, {"labels": given})
    given[1, 1, 3] = 9
    with pytest.raises(IndexOutOfRange, match=r"holds 9 \(at \[1,1,3\]\)"):
        check_index_values(graph, {"labels": given})
    rows, y = UOp.param("rows", (3,), dtypes.int64), UOp.param("y", (2, 2))
    cut = rows.reshape((3, 1)).expand((3, 5)).shrink(((0, 2), (1, 3)))
    hit = cut.eq(UOp.arange(2, dtype=dtypes.int64).reshape((1, 2)).expand((2, 2)))
    graph = Graph({"y": hit.where(y, 0.0).sum()}, inputs=[y, rows])
    assert [limit.reached for limit in index_limits(graph)["rows"]] == [range(0, 2)]  # evenly stepping: a range
    check_index_values(graph, {"rows": np.array([1, 0, 7])})


def test_the_evaluator_checks_nothing_and_values_drawn_at_random_always_pass():
    graph = sparse_xent(3)
    logits = np.zeros((6, 3), np.float32)
    out = evaluate_graph(graph, {"logits": logits, "labels": np.array([0, 1, 2, 3, 7, -1], np.int32)})
    assert out["loss"] == pytest.approx(3 * np.log(3))  # raw: the labels 3 and 7 count as nothing
    from uopcli.tools.values import gather_inputs
    for seed in range(5):
        check_index_values(graph, gather_inputs(graph.inputs, [], seed, roots=graph.outputs.values()))


def test_tinygrads_own_sparse_cross_entropy_refuses_a_label_past_its_classes():
    pytest.importorskip("tinygrad", reason="tinygrad is not installed: the bridge's tests skip")
    import tinygrad_zoo
    from uopcli.interop.tinygrad import to_graph
    case = tinygrad_zoo.conv_avgpool_sparse_xent()
    graph = to_graph(outputs=case.outputs, inputs=case.inputs, state_dict=case.state_dict)
    assert [limit.n for limit in index_limits(graph)["labels"]] == [3]
    check_index_values(graph, {"labels": np.array([2, 0], np.int32)})
    with pytest.raises(IndexOutOfRange, match=r"holds 3 \(at \[1\]\), outside 0\.\.2, the classes node "
                                              r"'sparse_categorical_crossentropy' compares it with, and not -1, "
                                              r"the value it ignores \("):
        check_index_values(graph, {"labels": np.array([0, 3], np.int32)})
    # its default ignore_index -1 builds no mask (Y.ne(-1) is skipped), but -1 is its ignore value: a
    # label -1 is accepted and counts nothing, as in tinygrad (its mean still divides by every label)
    assert [limit.others for limit in index_limits(graph)["labels"]] == [(-1,)]
    check_index_values(graph, {"labels": np.array([-1, 0], np.int32)})
    from tinygrad import Tensor, dtypes as tiny_dtypes
    x = case.inputs["x"]
    ours = evaluate_graph(graph, {"x": x.numpy(), "labels": np.array([-1, 2], np.int32),
                                  **{k: v.numpy() for k, v in case.state_dict.items()}})["loss"]
    tiny = tinygrad_zoo._seeded(tinygrad_zoo._ConvNet())(x).sparse_categorical_crossentropy(
        Tensor([-1, 2], dtype=tiny_dtypes.int32)).numpy()
    assert float(ours) == pytest.approx(float(tiny), rel=1e-6)


def test_map_graph_refuses_a_shards_label_and_a_fixed_one(tmp_path):
    graph = sparse_xent(5)
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    for i, labels in enumerate(([0, 1, 2, 3, 4, -1], [0, 1, 2, 3, 4, 5])):
        np.savez(tmp_path / f"part-{i}.npz", logits=logits, labels=np.array(labels, np.int32))
    paths = [str(tmp_path / "part-0.npz"), str(tmp_path / "part-1.npz")]
    with pytest.raises(ShardError) as refused:
        map_graph(graph, paths)
    assert str(refused.value).startswith(f"{paths[1]}: member 'labels' holds 5 (at [5]), outside 0..4")
    assert map_graph(graph, paths[:1]).outputs["loss"] == pytest.approx(
        evaluate_graph(graph, dict(np.load(paths[0])))["loss"])
    np.savez(tmp_path / "logits.npz", logits=logits)
    with pytest.raises(IndexOutOfRange, match="input 'labels' holds 9"):
        map_graph(graph, [str(tmp_path / "logits.npz")], {"labels": np.full(6, 9, np.int32)})


# ----------------------------------------------------------------------------- ONNX, through the CLI

try:
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import TensorProto as T, helper, numpy_helper
except ImportError:  # onnx, onnxruntime or torch has no wheel here: the tests below skip
    onnx = None
needs_onnx = pytest.mark.skipif(onnx is None or UOPGRAD is None, reason="onnx, onnxruntime, torch or the uopgrad "
                                "console script is missing: the ONNX tests skip")

CLASSES, ROWS = 4, 5
W = np.arange(6 * CLASSES, dtype=np.float32).reshape(6, CLASSES) / 10 - 1.1
LOSS_NODE = "/SoftmaxCrossEntropyLoss"
REFUSED = (f"outside 0..{CLASSES - 1}, the classes node '{LOSS_NODE}' compares it with, and not -100, the value "
           f"it ignores {WHY}")


def xent_model(reduction: str = "mean") -> onnx.ModelProto:
    """scores = x @ W over 4 classes, SoftmaxCrossEntropyLoss against int64 labels,
    ignore_index -100, as torch.onnx.export writes F.cross_entropy."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["scores"], name="/fc/MatMul"),
             helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name=LOSS_NODE,
                              ignore_index=-100, reduction=reduction)]
    graph = helper.make_graph(nodes, "xent", [helper.make_tensor_value_info("x", T.FLOAT, [ROWS, 6]),
                                              helper.make_tensor_value_info("labels", T.INT64, [ROWS])],
                              [helper.make_tensor_value_info("loss", T.FLOAT, [])],
                              initializer=[numpy_helper.from_array(W, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture
def xent(tmp_path):
    onnx.save(xent_model(), tmp_path / "net.onnx")
    x = np.random.default_rng(0).standard_normal((ROWS, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path, x


def torch_loss(x: np.ndarray, labels: np.ndarray) -> float:
    scores = torch.from_numpy(x) @ torch.from_numpy(W)
    return float(torch.nn.functional.cross_entropy(scores, torch.from_numpy(labels), ignore_index=-100))


def eval_loss(cwd, labels: np.ndarray) -> float:
    np.save(cwd / "labels.npy", labels)
    run = uopgrad("eval", "net.onnx", "-i", "x=x.npy", "-i", "labels=labels.npy", "-o", "out.npz", cwd=cwd)
    assert run.returncode == 0, run.stderr.decode()
    return float(np.load(cwd / "out.npz")["loss"])


@needs_onnx
def test_eval_refuses_a_label_past_the_classes_or_negative_in_one_line(xent):
    cwd, _ = xent
    for value in ("11", str(CLASSES), "-5"):
        run = uopgrad("eval", "net.onnx", "-i", "x=x.npy", "-i", f"labels={value}", "-o", "out.npz", cwd=cwd)
        assert refusal(run) == f"net.onnx: input 'labels' holds {value} (at [0]), {REFUSED}"
        assert not (cwd / "out.npz").exists()
    np.save(cwd / "labels.npy", np.array([0, 1, 2, -1, 0]))  # onnxruntime wraps -1 here, torch refuses it
    run = uopgrad("eval", "net.onnx", "-i", "x=x.npy", "-i", "labels=labels.npy", "--json", cwd=cwd)
    assert run.returncode == 1 and b"holds -1 (at [3])" in run.stderr
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        torch_loss(np.zeros((ROWS, 6), np.float32), np.array([0, 1, 2, -1, 0]))


@needs_onnx
def test_labels_in_range_and_the_ignore_index_give_torchs_and_onnxruntimes_loss(xent):
    cwd, x = xent
    session = ort.InferenceSession(xent_model().SerializeToString(), providers=["CPUExecutionProvider"])
    for labels in (np.array([0, 1, 2, 3, 0]), np.array([3, -100, 2, -100, 1])):
        loss = eval_loss(cwd, labels)
        assert loss == pytest.approx(torch_loss(x, labels), rel=1e-5)
        assert loss == pytest.approx(float(session.run(None, {"x": x, "labels": labels})[0]), rel=1e-5)
    run = uopgrad("eval", "net.onnx", "-i", "x=x.npy", "--random", cwd=cwd)  # labels drawn in 0..3: none refused
    assert run.returncode == 0, run.stderr.decode()


@needs_onnx
@pytest.mark.parametrize("mode", [[], ["--hvp"], ["--transpose"]])
def test_check_refuses_a_label_past_the_classes(xent, mode):
    cwd, _ = xent
    np.save(cwd / "labels.npy", np.array([0, 1, 2, 3, 7]))
    run = uopgrad("check", "net.onnx", "--wrt", "x", *mode, "-i", "x=x.npy", "-i", "labels=labels.npy", cwd=cwd)
    assert refusal(run) == f"net.onnx: input 'labels' holds 7 (at [4]), {REFUSED}"
    np.save(cwd / "labels.npy", np.array([0, 1, 2, 3, -100]))
    run = uopgrad("check", "net.onnx", "--wrt", "x", *mode, "-i", "x=x.npy", "-i", "labels=labels.npy", cwd=cwd)
    assert run.returncode == 0, run.stderr.decode()


@needs_onnx
@pytest.mark.parametrize("reduce", ["sum", "none"])
def test_eval_map_refuses_a_shard_with_one_bad_label_naming_it_and_writes_nothing(xent, reduce):
    cwd, x = xent
    (cwd / "shards").mkdir()
    for i, labels in enumerate(([0, 1, 2, 3, -100], [0, 1, 12, 3, 2], [3, 2, 1, 0, 0])):
        np.savez(cwd / "shards" / f"part-{i}.npz", x=x, labels=np.array(labels))
    out = "out.npz" if reduce == "sum" else "outdir"
    run = uopgrad("eval", "net.onnx", "--map", "shards/*.npz", "--reduce", reduce, "-o", out, cwd=cwd)
    assert refusal(run) == f"shards/part-1.npz: member 'labels' holds 12 (at [2]), {REFUSED}"
    assert not (cwd / out).exists()
    (cwd / "shards" / "part-1.npz").unlink()
    run = uopgrad("eval", "net.onnx", "--map", "shards/*.npz", "-o", "out.npz", cwd=cwd)
    assert run.returncode == 0, run.stderr.decode()
    expected = sum(torch_loss(x, np.array(lab)) for lab in ([0, 1, 2, 3, -100], [3, 2, 1, 0, 0]))
    assert float(np.load(cwd / "out.npz")["loss"]) == pytest.approx(expected, rel=1e-5)


@needs_onnx
def test_eval_map_refuses_a_fixed_label_naming_the_model(xent):
    cwd, x = xent
    (cwd / "shards").mkdir()
    np.savez(cwd / "shards" / "part-0.npz", x=x)
    run = uopgrad("eval", "net.onnx", "--map", "shards/*.npz", "-i", "labels=-7", cwd=cwd)
    assert refusal(run) == f"net.onnx: input 'labels' holds -7 (at [0]), {REFUSED}"


def one_node_model(node, inputs, output, initializers) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph([node], "one", inputs, [output], initializer=initializers),
                             opset_imports=[helper.make_opsetid("", 13)])


def ort_run(model: onnx.ModelProto, feeds: dict):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@needs_onnx
def test_a_gather_takes_indices_from_the_end_and_refuses_any_outside_as_onnxruntime(tmp_path):
    """ONNX Gather counts a negative index from the end (the importer wraps it): -5..4 of an
    axis of 5 give onnxruntime's rows; 5 and -6, which onnxruntime refuses, are refused in
    one line (they would read a row of zeros)."""
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    model = one_node_model(helper.make_node("Gather", ["table", "idx"], ["rows"], name="/emb/Gather", axis=0),
                           [helper.make_tensor_value_info("idx", T.INT64, [3])],
                           helper.make_tensor_value_info("rows", T.FLOAT, [3, 3]), [numpy_helper.from_array(table, "table")])
    onnx.save(model, tmp_path / "gather.onnx")
    from uopcli.interop.onnx.importer import load_onnx
    assert index_limits(load_onnx(str(tmp_path / "gather.onnx"))[0]) == {
        "idx": (IndexLimit("idx", 5, "'/emb/Gather'", (), -5),)}
    idx = np.array([-1, 2, -5])
    np.save(tmp_path / "idx.npy", idx)
    run = uopgrad("eval", "gather.onnx", "-i", "idx=idx.npy", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    expected = ort_run(model, {"idx": idx})
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["rows"], expected)
    np.testing.assert_array_equal(expected, table[[4, 2, 0]])
    for bad, at in (([0, 4, 5], 2), ([-6, 0, 1], 0)):
        np.save(tmp_path / "idx.npy", np.array(bad))
        run = uopgrad("eval", "gather.onnx", "-i", "idx=idx.npy", "-o", "bad.npz", cwd=tmp_path)
        assert refusal(run) == (f"gather.onnx: input 'idx' holds {bad[at]} (at [{at}]), outside -5..4, the indices "
                                "node '/emb/Gather' takes along an axis of 5 (onnxruntime and torch refuse such "
                                "indices too)")
        assert not (tmp_path / "bad.npz").exists()
        with pytest.raises(Exception, match="out of data bounds"):
            ort_run(model, {"idx": np.array(bad)})


@needs_onnx
def test_gather_elements_takes_the_same_range_and_one_hot_is_left_unchecked(tmp_path):
    """GatherElements wraps as Gather does, and refuses alike. OneHot's wrap is the same
    arithmetic, but an index outside its depth gives an all-off row (the spec's, and
    onnxruntime's): its index keeps no range, and 7 of a depth of 4 evaluates as there."""
    from uopcli.interop.onnx.importer import load_onnx
    scores = helper.make_tensor_value_info("scores", T.FLOAT, [2, 4])
    model = one_node_model(helper.make_node("GatherElements", ["scores", "pick"], ["picked"], name="pick", axis=1),
                           [scores, helper.make_tensor_value_info("pick", T.INT64, [2, 1])],
                           helper.make_tensor_value_info("picked", T.FLOAT, [2, 1]), [])
    onnx.save(model, tmp_path / "ge.onnx")
    assert index_limits(load_onnx(str(tmp_path / "ge.onnx"))[0]) == {
        "pick": (IndexLimit("pick", 4, "'pick' (GatherElements)", (), -4),)}
    np.save(tmp_path / "s.npy", np.arange(8, dtype=np.float32).reshape(2, 4))
    run = uopgrad("eval", "ge.onnx", "-i", "scores=s.npy", "-i", "pick=4", cwd=tmp_path)
    assert "holds 4 (at [0,0]), outside -4..3, the indices node 'pick' (GatherElements)" in refusal(run)
    run = uopgrad("eval", "ge.onnx", "-i", "scores=s.npy", "-i", "pick=-4", "--json", cwd=tmp_path)
    assert run.returncode == 0 and json.loads(run.stdout)["outputs"]["picked"]["values"] == [[0.0], [4.0]]

    model = one_node_model(helper.make_node("OneHot", ["labels", "depth", "off_on"], ["hot"], name="hot"),
                           [helper.make_tensor_value_info("labels", T.INT64, [3])],
                           helper.make_tensor_value_info("hot", T.FLOAT, [3, 4]),
                           [numpy_helper.from_array(np.array(4, np.int64), "depth"),
                            numpy_helper.from_array(np.array([0, 1], np.float32), "off_on")])
    onnx.save(model, tmp_path / "hot.onnx")
    assert index_limits(load_onnx(str(tmp_path / "hot.onnx"))[0]) == {}
    labels = np.array([7, -1, 2])
    np.save(tmp_path / "labels.npy", labels)
    run = uopgrad("eval", "hot.onnx", "-i", "labels=labels.npy", "-o", "hot.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    expected = ort_run(model, {"labels": labels})
    np.testing.assert_array_equal(np.load(tmp_path / "hot.npz")["hot"], expected)
    np.testing.assert_array_equal(expected, [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]])


@needs_onnx
def test_torchs_embedding_export_refuses_a_token_id_past_the_vocabulary(tmp_path):
    """nn.Embedding(10, 4) exported by torch: token id 10 is torch's IndexError and
    onnxruntime's refusal; uopgrad eval read it as a row of zeros, and now refuses it."""
    embedding = torch.nn.Embedding(10, 4)
    torch.onnx.export(torch.nn.Sequential(embedding), (torch.tensor([[1, 2, 9]]),), str(tmp_path / "emb.onnx"),
                      input_names=["ids"], output_names=["vectors"], dynamo=True, external_data=False, verbose=False)
    np.save(tmp_path / "ids.npy", np.array([[1, 2, 10]]))
    run = uopgrad("eval", "emb.onnx", "-i", "ids=ids.npy", "-o", "out.npz", cwd=tmp_path)
    assert "input 'ids' holds 10 (at [0,2]), outside -10..9, the indices node" in refusal(run)
    with pytest.raises(IndexError):
        embedding(torch.tensor([[1, 2, 10]]))
    np.save(tmp_path / "ids.npy", np.array([[1, 2, 9]]))
    run = uopgrad("eval", "emb.onnx", "-i", "ids=ids.npy", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["vectors"],
                                  embedding(torch.tensor([[1, 2, 9]])).detach().numpy())


@needs_cli
def test_the_builders_graph_saved_refuses_through_eval(tmp_path):
    save(sparse_xent(5), tmp_path / "m.uop")
    np.save(tmp_path / "labels.npy", np.array([0, 1, 2, 3, 4, 8], np.int32))
    run = uopgrad("eval", "m.uop", "-i", "logits=0", "-i", "labels=labels.npy", cwd=tmp_path)
    assert refusal(run) == (f"m.uop: input 'labels' holds 8 (at [5]), outside 0..4, the classes node 'one_hot' "
                            f"compares it with, and not -1, the value it ignores {WHY}")
    np.save(tmp_path / "labels.npy", np.array([0, 1, 2, 3, 4, -1], np.int32))
    run = uopgrad("eval", "m.uop", "-i", "logits=0", "-i", "labels=labels.npy", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()


@needs_onnx
def test_a_huggingface_causal_lm_loss_refuses_a_label_past_its_vocabulary(tmp_path):
    """GPT-2's LM loss shifts the labels before SoftmaxCrossEntropyLoss (pad with -100, drop
    the first): a label 500 of a vocabulary of 100 was accepted (a loss torch refuses, exit 0);
    now it is refused, and one in the first position, which the shift drops, is not (the
    exported graph never reads it; onnxruntime gives the same loss)."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=100,
                                                              n_positions=8)).eval()

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = lm

        def forward(self, ids, labels):
            return self.m(input_ids=ids, labels=labels).loss

    ids = torch.randint(0, 100, (2, 6))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Loss(), (ids, ids), str(tmp_path / "lm.onnx"), input_names=["ids", "labels"],
                          output_names=["loss"], dynamo=False)
    for position, refused in (((0, 3), True), ((1, 0), False)):
        labels = ids.clone()
        labels[position] = 500
        np.savez(tmp_path / "in.npz", ids=ids.numpy(), labels=labels.numpy())
        run = uopgrad("eval", "lm.onnx", "-i", "in.npz", *([] if refused else ["--json"]), cwd=tmp_path)
        if refused:
            assert f"input 'labels' holds 500 (at [{position[0]},{position[1]}]), outside 0..99" in refusal(run)
            with pytest.raises(IndexError, match="out of bounds"):
                Loss()(ids, labels)
        else:
            assert run.returncode == 0, run.stderr.decode()
            loss = json.loads(run.stdout)["outputs"]["loss"]["values"]  # the file's loss, as onnxruntime runs it
            feeds = {"ids": ids.numpy(), "labels": labels.numpy()}
            assert loss == pytest.approx(float(ort.InferenceSession(str(tmp_path / "lm.onnx")).run(None, feeds)[0]),
                                         rel=1e-5)
