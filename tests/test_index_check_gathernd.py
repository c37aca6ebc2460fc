"""ONNX GatherND's indices are checked column by column (uopcli/tools/index_range.py): the
importer wraps each column j of the index's last axis with its own axis' size and combines
the columns into one place by arithmetic (linear * size + column), which hid every column
from the check: [0, 7] of data [3, 5] read data[1, 2] (7 = 1 * 5 + 2) where onnxruntime
refuses it ("invalid index found"). Each column may hold -size_j..size_j-1, on its own
elements alone; anything else is refused in one line by `eval`, `check` and `eval --map`
(a shard's member), with batch_dims too. Values in range, negative ones included, give
onnxruntime's output bit for bit; values drawn by --random suit every column.

ScatterND, built by the same arithmetic, is checked the same way. An input meeting several
ranges keeps each as a limit of its own (IndexLimit per range, on the elements that reach
it), and drops those another makes redundant."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.tools import index_range
from uopcli.tools.index_range import IndexLimit, IndexOutOfRange, check_index_values, index_limits, index_ranges

from _map_helpers import UOPGRAD, uopgrad
from test_index_check import refusal

try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto as T, helper, numpy_helper
except ImportError:  # onnx or onnxruntime has no wheel here: the ONNX tests skip
    onnx = None
needs_onnx = pytest.mark.skipif(onnx is None, reason="onnx or onnxruntime is missing: the ONNX tests skip")
needs_cli = pytest.mark.skipif(onnx is None or UOPGRAD is None,
                               reason="onnx, onnxruntime or the uopgrad console script is missing")

NODE = "'gnd' (GatherND)"
SND = "'snd' (ScatterND)"
WHY = "(onnxruntime and torch refuse such indices too)"

# (id, data shape, indices shape, batch_dims): the columns index axes of distinct sizes, so
# that a column held to another's size is told apart
CASES = [
    ("k1", (3, 5), (4, 1), 0),  # one column: data's axis 0, of 3
    ("k2", (3, 5), (4, 2), 0),  # axes of 3 and 5
    ("k3", (2, 3, 4, 2), (5, 3), 0),  # axes of 2, 3 and 4
    ("batch1-k2", (2, 3, 4, 2), (2, 3, 2), 1),  # per batch element, axes of 3 and 4
]


def sizes_of(data_shape: tuple, index_shape: tuple, batch: int) -> list[int]:
    """The size of the axis each column of the index's last axis takes places along."""
    return list(data_shape[batch:batch + index_shape[-1]])


def gathernd_model(data: np.ndarray, index_shape: tuple, batch: int) -> onnx.ModelProto:
    """One GatherND node 'gnd': data an initializer, int64 indices the graph's input."""
    out_shape = [*index_shape[:-1], *data.shape[batch + index_shape[-1]:]]
    node = helper.make_node("GatherND", ["data", "indices"], ["out"], name="gnd", batch_dims=batch)
    graph = helper.make_graph([node], "gnd", [helper.make_tensor_value_info("indices", T.INT64, list(index_shape))],
                              [helper.make_tensor_value_info("out", T.FLOAT, out_shape)],
                              initializer=[numpy_helper.from_array(data, "data")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def in_range(index_shape: tuple, sizes: list[int], seed: int = 0) -> np.ndarray:
    """Indices whose column j holds -size_j..size_j-1, both ends in each column (and a value
    in range of its own column but not of a narrower one's)."""
    rng = np.random.default_rng(seed)
    index = np.empty(index_shape, np.int64)
    rows = index.reshape(-1, index_shape[-1])
    for j, size in enumerate(sizes):
        rows[:, j] = rng.integers(-size, size, rows.shape[0])
        rows[0, j], rows[-1, j] = -size, size - 1
    return index


def ort_run(model: onnx.ModelProto, feeds: dict):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def bad_cases(index_shape: tuple, sizes: list[int]):
    """(column, value, flat row, the refusal's words after the position) for a value just past
    each end of each column's range, placed in a middle row."""
    middle = int(np.prod(index_shape[:-1])) // 2
    for j, size in enumerate(sizes):
        for value in (size, -size - 1):
            yield j, value, middle, f"outside {-size}..{size - 1}, the indices node {NODE} takes along an axis of {size}"


def placed(good: np.ndarray, row: int, column: int, value: int) -> tuple[np.ndarray, tuple]:
    """`good` with `value` at (flat row, column), and that element's index."""
    bad = good.copy()
    bad.reshape(-1, good.shape[-1])[row, column] = value
    at = np.unravel_index(row * good.shape[-1] + column, good.shape)
    return bad, tuple(int(i) for i in at)


def refused_as_onnxruntime(graph, model, good: np.ndarray, cases, ort_says: str) -> None:
    """Each of `cases` (column, value, row, why) placed in `good` is refused by the check in
    its one line, and by onnxruntime."""
    for column, value, row, why in cases:
        bad, at = placed(good, row, column, value)
        with pytest.raises(IndexOutOfRange) as refused:
            check_index_values(graph, {"indices": bad})
        assert str(refused.value) == f"input 'indices' holds {value} {where(at)}, {why} {WHY}"
        with pytest.raises(Exception, match=ort_says):
            ort_run(model, {"indices": bad})


def where(at: tuple) -> str:
    return f"(at [{','.join(map(str, at))}])"


@pytest.fixture(params=CASES, ids=[case[0] for case in CASES])
def case(request, tmp_path):
    """The model saved as gnd.onnx in tmp_path, its data (a -0.0 among it: bits are compared),
    its indices' shape and the columns' sizes."""
    _, data_shape, index_shape, batch = request.param
    data = np.random.default_rng(1).standard_normal(data_shape).astype(np.float32)
    data.reshape(-1)[1] = -0.0
    model = gathernd_model(data, index_shape, batch)
    onnx.save(model, tmp_path / "gnd.onnx")
    return tmp_path, model, index_shape, sizes_of(data_shape, index_shape, batch)


# ----------------------------------------------------------------------------- the limits found

@needs_onnx
def test_each_column_is_a_limit_of_its_own_on_its_elements_and_random_draws_suit_every_one(case):
    from uopcli.interop.onnx.importer import load_onnx
    cwd, _, index_shape, sizes = case
    graph = load_onnx(str(cwd / "gnd.onnx"))[0]
    k, count = index_shape[-1], int(np.prod(index_shape))
    expected = tuple(IndexLimit("indices", size, NODE, (), -size, None if k == 1 else range(j, count, k))
                     for j, size in sorted(enumerate(sizes), key=lambda c: c[1]))
    assert index_limits(graph) == {"indices": expected}
    assert index_ranges(graph.outputs.values()) == {"indices": min(sizes)}
    from uopcli.tools.values import gather_inputs
    for seed in range(4):  # drawn below the narrowest axis: never refused
        check_index_values(graph, gather_inputs(graph.inputs, [], seed, roots=graph.outputs.values()))


@needs_onnx
def test_every_column_refuses_a_value_past_either_end_of_its_own_axis_as_onnxruntime_does(case):
    """In process: each column's value one past each end is refused, naming that column's
    axis, and onnxruntime refuses the same indices; the values in range pass."""
    from uopcli.interop.onnx.importer import load_onnx
    cwd, model, index_shape, sizes = case
    graph = load_onnx(str(cwd / "gnd.onnx"))[0]
    good = in_range(index_shape, sizes)
    check_index_values(graph, {"indices": good})
    refused_as_onnxruntime(graph, model, good, bad_cases(index_shape, sizes), "invalid index found")


@needs_cli
def test_eval_gives_onnxruntimes_bits_for_indices_in_range_and_refuses_one_past_in_one_line(case):
    cwd, model, index_shape, sizes = case
    good = in_range(index_shape, sizes)
    np.save(cwd / "idx.npy", good)
    run = uopgrad("eval", "gnd.onnx", "-i", "indices=idx.npy", "-o", "out.npz", cwd=cwd)
    assert run.returncode == 0, run.stderr.decode()
    ours, theirs = np.load(cwd / "out.npz")["out"], ort_run(model, {"indices": good})
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()
    bad = list(bad_cases(index_shape, sizes))
    for column, value, row, why in (bad[0], bad[-1]):  # the first column's past its top, the last's below
        given, at = placed(good, row, column, value)
        np.save(cwd / "idx.npy", given)
        run = uopgrad("eval", "gnd.onnx", "-i", "indices=idx.npy", "-o", "bad.npz", cwd=cwd)
        assert refusal(run) == f"gnd.onnx: input 'indices' holds {value} {where(at)}, {why} {WHY}"
        assert not (cwd / "bad.npz").exists()
        with pytest.raises(Exception, match="invalid index found"):
            ort_run(model, {"indices": given})


@needs_cli
def test_the_issues_example_and_the_first_element_refused_in_row_major_order(tmp_path):
    """[[0, 7]] of data [3, 5] read data[1, 2] (exit 0, 7.0); now refused. Of two bad
    elements in different columns the first in row-major order is named, whichever
    column's limit is the narrower."""
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    model = gathernd_model(data, (2, 2), 0)
    onnx.save(model, tmp_path / "gnd.onnx")
    np.save(tmp_path / "idx.npy", np.array([[0, 7], [9, 0]]))
    run = uopgrad("eval", "gnd.onnx", "-i", "indices=idx.npy", "--json", cwd=tmp_path)
    assert run.returncode == 1 and b"holds 7 (at [0,1]), outside -5..4" in run.stderr, run.stderr.decode()
    np.save(tmp_path / "idx.npy", np.array([[0, 4], [-3, -5]]))
    run = uopgrad("eval", "gnd.onnx", "-i", "indices=idx.npy", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["out"], [4.0, 0.0])


@needs_cli
def test_check_refuses_a_column_past_its_axis_and_random_draws_evaluate(tmp_path):
    """check -i refuses as eval does; eval --random draws every column in range (the k3
    case's columns index axes of 2, 3 and 4: a draw up to 3 in the first would be refused)."""
    _, data_shape, index_shape, batch = CASES[2]
    data = np.random.default_rng(1).standard_normal(data_shape).astype(np.float32)
    onnx.save(gathernd_model(data, index_shape, batch), tmp_path / "gnd.onnx")
    bad = in_range(index_shape, sizes_of(data_shape, index_shape, batch))
    bad[3, 2] = 4
    np.save(tmp_path / "idx.npy", bad)
    run = uopgrad("check", "gnd.onnx", "--wrt", "data", "-i", "indices=idx.npy", cwd=tmp_path)
    assert refusal(run) == (f"gnd.onnx: input 'indices' holds 4 (at [3,2]), outside -4..3, the indices node {NODE} "
                            f"takes along an axis of 4 {WHY}")
    for seed in ("0", "1"):
        run = uopgrad("eval", "gnd.onnx", "--random", "--seed", seed, "--json", cwd=tmp_path)
        assert run.returncode == 0, run.stderr.decode()


# ----------------------------------------------------------------------------- eval --map

@needs_cli
def test_eval_map_refuses_a_shard_with_one_column_past_its_axis_and_writes_nothing(tmp_path):
    data = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    model = gathernd_model(data, (4, 2), 0)
    onnx.save(model, tmp_path / "gnd.onnx")
    (tmp_path / "shards").mkdir()
    shards = [in_range((4, 2), [3, 5], seed) for seed in range(3)]
    shards[1][2, 1] = -6
    for i, indices in enumerate(shards):
        np.savez(tmp_path / "shards" / f"part-{i}.npz", indices=indices)
    run = uopgrad("eval", "gnd.onnx", "--map", "shards/*.npz", "-o", "out.npz", cwd=tmp_path)
    assert refusal(run) == (f"shards/part-1.npz: member 'indices' holds -6 (at [2,1]), outside -5..4, the indices "
                            f"node {NODE} takes along an axis of 5 {WHY}")
    assert not (tmp_path / "out.npz").exists()
    with pytest.raises(Exception, match="invalid index found"):
        ort_run(model, {"indices": shards[1]})
    (tmp_path / "shards" / "part-1.npz").unlink()
    run = uopgrad("eval", "gnd.onnx", "--map", "shards/*.npz", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    expected = ort_run(model, {"indices": shards[0]}) + ort_run(model, {"indices": shards[2]})
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out"], expected, rtol=1e-6)


@needs_onnx
def test_map_graph_refuses_the_bad_member_and_its_work_carries_the_limits_as_plain_data(tmp_path):
    """The limits map_graph hands its workers (Work.index_limits) survive pickling, as Dask
    sends them, and refuse there as here."""
    from uopcli.interop.onnx.importer import load_onnx
    from uopcli.tools.map import ShardError, Work, map_graph
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    onnx.save(gathernd_model(data, (4, 2), 0), tmp_path / "gnd.onnx")
    graph, defaults = load_onnx(str(tmp_path / "gnd.onnx"))[:2]
    good = in_range((4, 2), [3, 5])
    bad, _ = placed(good, 1, 0, 3)
    for i, indices in enumerate((good, bad)):
        np.savez(tmp_path / f"part-{i}.npz", indices=indices)
    paths = [str(tmp_path / "part-0.npz"), str(tmp_path / "part-1.npz")]
    with pytest.raises(ShardError) as refused:
        map_graph(graph, paths, defaults)
    assert str(refused.value) == (f"{paths[1]}: member 'indices' holds 3 (at [1,0]), outside -3..2, the indices "
                                  f"node {NODE} takes along an axis of 3 {WHY}")
    limits = dict(index_limits(graph))
    work = pickle.loads(pickle.dumps(Work(graph, defaults, ["indices"], index_limits=limits)))
    assert work.index_limits == limits and len(work.index_limits["indices"]) == 2
    assert isinstance(work.index_limits["indices"][1].reached, range)  # three numbers, however many rows
    assert map_graph(graph, paths[:1], defaults).outputs["out"].tolist() == data[good[:, 0], good[:, 1]].tolist()


# ----------------------------------------------------------------------------- several limits on one input

def test_an_input_keeps_each_range_that_adds_a_check_and_drops_those_that_do_not():
    """labels [6]: its first half compared with 3 classes, all of it with 5: two limits (4
    passes in the second half only); a third comparison, with 7 classes, adds nothing and is
    dropped, as is a second one with 3 classes on the first half's first element alone."""
    labels, x = UOp.param("labels", (6,), dtypes.int64), UOp.param("x", (6, 7))

    def picked(index: UOp, classes: int, rows: int) -> UOp:
        hit = index.reshape((rows, 1)).eq(UOp.arange(classes, dtype=dtypes.int64).reshape((1, classes)))
        return hit.where(x.shrink(((0, rows), (0, classes))), 0.0).sum()

    loss = (picked(labels.shrink(((0, 3),)), 3, 3) + picked(labels, 5, 6) + picked(labels, 7, 6)
            + picked(labels.shrink(((0, 1),)), 3, 1))
    graph = Graph({"loss": loss}, inputs=[x, labels])
    limits = index_limits(graph)["labels"]
    assert [(limit.n, limit.reached) for limit in limits] == [(3, range(0, 3)), (5, None)]
    assert index_ranges(graph.outputs.values()) == {"labels": 3}
    check_index_values(graph, {"labels": np.array([0, 1, 2, 4, 4, 0])})
    for bad, value, at, n in (([0, 3, 0, 0, 0, 0], 3, 1, 3), ([0, 0, 0, 0, 5, 0], 5, 4, 5),
                              ([0, 5, 0, 0, 0, -1], 5, 1, 3)):  # 5 at [1] is outside both: the narrower names it
        with pytest.raises(IndexOutOfRange, match=rf"holds {value} \(at \[{at}\]\), outside 0\.\.{n - 1}, "):
            check_index_values(graph, {"labels": np.array(bad)})


@needs_onnx
def test_an_index_too_large_to_follow_is_left_unchecked_not_held_to_one_columns_axis(tmp_path, monkeypatch):
    """Past the id map's size (_MOST_TRACKED) which elements are a column's is unknown: a
    limit on all of them would refuse the 4 of an axis of 5 against the other's 3, so the
    index is left unchecked, as before."""
    from uopcli.interop.onnx.importer import load_onnx
    monkeypatch.setattr(index_range, "_MOST_TRACKED", 4)
    monkeypatch.setattr(index_range, "_CACHE", {})  # the same model's nodes are the same UOps: walked before
    onnx.save(gathernd_model(np.zeros((3, 5), np.float32), (4, 2), 0), tmp_path / "gnd.onnx")
    graph = load_onnx(str(tmp_path / "gnd.onnx"))[0]
    assert index_limits(graph) == {}
    check_index_values(graph, {"indices": np.array([[0, 4], [2, 4], [1, 1], [0, 0]])})


# ----------------------------------------------------------------------------- ScatterND, built the same way

@needs_cli
def test_scatter_nd_checks_each_column_as_gather_nd_does(tmp_path):
    """ScatterND combines its columns by the same arithmetic: [0, 7] of data [3, 5] wrote
    data[1, 2] (exit 0) where onnxruntime refuses it ("invalid indice found"). Each column
    one past either end of its axis is refused; indices in range, negative ones at both
    ends, give onnxruntime's bits."""
    from uopcli.interop.onnx.importer import load_onnx
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["out"], name="snd")
    graph = helper.make_graph([node], "snd", [helper.make_tensor_value_info("indices", T.INT64, [3, 2])],
                              [helper.make_tensor_value_info("out", T.FLOAT, [3, 5])],
                              initializer=[numpy_helper.from_array(data, "data"),
                                           numpy_helper.from_array(np.array([-0.0, 100, 200], np.float32), "updates")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "snd.onnx")
    good = np.array([[-3, -5], [2, 4], [0, -1]])
    np.save(tmp_path / "idx.npy", good)
    run = uopgrad("eval", "snd.onnx", "-i", "indices=idx.npy", "-o", "out.npz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr.decode()
    assert np.load(tmp_path / "out.npz")["out"].tobytes() == ort_run(model, {"indices": good}).tobytes()
    loaded = load_onnx(str(tmp_path / "snd.onnx"))[0]
    cases = [(column, value, row, why.replace(NODE, SND)) for column, value, row, why in bad_cases((3, 2), [3, 5])]
    refused_as_onnxruntime(loaded, model, good, cases, "invalid indice found")
    np.save(tmp_path / "idx.npy", np.array([[0, 7], [1, 1], [2, 2]]))
    run = uopgrad("eval", "snd.onnx", "-i", "indices=idx.npy", "-o", "bad.npz", cwd=tmp_path)
    assert refusal(run) == (f"snd.onnx: input 'indices' holds 7 (at [0,1]), outside -5..4, the indices node {SND} "
                            f"takes along an axis of 5 {WHY}")
    assert not (tmp_path / "bad.npz").exists()
