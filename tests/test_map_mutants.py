"""uopcli/tools/map.py in this process, written for the survivors of its mutation run
(docs/mutation.md): the sums and means over shards bit for bit against the plain pairwise
tree (so a changed order, a dropped or repeated shard shows in the last bits of float32
sums), each refusal by its whole line, the per-shard outputs written, the report's notes
and --stats lines word for word, and the staged output directory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.errors import EvaluationError
from uopcli.tools import map as mapping
from uopcli.tools.map import (MapReport, ShardError, ShardResult, ShardStats, StagedDirectory, SumTree, Work,
                              add_results, check_shards, map_graph, mean_of, output_names, run_shard, shard_paths)


def pairwise(values, combine):
    """The tree SumTree promises: leaf pairs, then pairs of pairs, an odd last one carried up."""
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def scaled_graph():
    """out = x * w (float32, order-sensitive in sums: the shards' values span 2^-20..2^20),
    k = n + 1 (int32, wraps), and a tuple-free second float output."""
    x, w = UOp.param("x", (4,), dtypes.float32), UOp.param("w", (4,), dtypes.float32)
    n = UOp.param("n", (2,), dtypes.int32)
    return Graph({"out": x * w, "k": n + 1, "neg": -x}, inputs=[x, w, n])


def write(directory, count, seed=0):
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths, xs, ns = [], [], []
    for i in range(count):
        x = (rng.standard_normal(4) * 2.0 ** rng.integers(-20, 21, 4)).astype(np.float32)
        n = np.array([2 ** 30 + i, -7 * i], np.int32)
        path = directory / f"s{i:02d}.npz"
        np.savez(path, x=x, n=n)
        paths.append(path)
        xs.append(x)
        ns.append(n)
    return paths, xs, ns


W = np.array([1.5, -3.0, 0.1, 7.0], np.float32)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 6, 9])
def test_sum_and_mean_over_shards_bit_for_bit(tmp_path, count):
    paths, xs, ns = write(tmp_path / "d", count, seed=count)
    report = map_graph(scaled_graph(), paths, {"w": W}, reduce="sum")
    want = pairwise([x * W for x in xs], np.add)
    assert report.outputs["out"].dtype == np.float32 and report.outputs["out"].tobytes() == want.tobytes()
    assert report.outputs["neg"].tobytes() == pairwise([-x for x in xs], np.add).tobytes()
    assert report.outputs["k"].dtype == np.int32
    assert report.outputs["k"].tobytes() == pairwise([n + 1 for n in ns], np.add).tobytes()  # wraps
    assert [os.path.basename(s.shard) for s in report.shards] == [p.name for p in paths]
    assert report.workers == 1 and report.startup_seconds == 0.0 and report.send_seconds == 0.0
    assert report.run_seconds > 0 and report.lost_workers == []
    x, w = UOp.param("x", (4,), dtypes.float32), UOp.param("w", (4,), dtypes.float32)
    n = UOp.param("n", (2,), dtypes.int32)
    mean = map_graph(Graph({"out": x * w, "nf": n.cast(dtypes.float64)}, inputs=[x, w, n]), paths, {"w": W},
                     reduce="mean").outputs
    assert mean["out"].dtype == np.float32
    assert mean["out"].tobytes() == np.divide(want, np.float32(count)).tobytes()
    assert mean["nf"].tobytes() == (pairwise([n.astype(np.float64) for n in ns], np.add) / count).tobytes()


def test_the_tree_order_is_seen_in_float32(tmp_path):
    """With these values, another order of addition (left to right, or reversed) gives other
    bits: a mutant that changes the tree is caught."""
    values = [np.array([v, -v, 1.0, 3.0], np.float32) for v in (1e8, 1.0, -1e8, 1.0, 3.0, 0.25, -3.0)]
    d = tmp_path / "d"
    d.mkdir()
    for i, v in enumerate(values):
        np.savez(d / f"s{i}.npz", x=v)
    x = UOp.param("x", (4,), dtypes.float32)
    out = map_graph(Graph({"y": x}, inputs=[x]), sorted(d.glob("*.npz")), {}).outputs["y"]
    tree = pairwise(values, np.add)
    assert out.tobytes() == tree.tobytes()
    left = values[0]
    for v in values[1:]:
        left = left + v
    assert left.tobytes() != tree.tobytes()
    assert pairwise(values[::-1], np.add).tobytes() != tree.tobytes()


def test_sum_tree_combines_left_then_right_and_holds_only_waiting_nodes():
    seen = []
    tree = SumTree(5, lambda a, b: seen.append((a, b)) or f"({a}+{b})")
    assert tree.widths == [5, 3, 2, 1]
    tree.add(4, "4")
    assert tree.waiting == {(0, 4): "4"} or tree.root is None
    tree.add(1, "1")
    assert (0, 1) in tree.waiting
    tree.add(0, "0")
    assert seen == [("0", "1")] and (1, 0) in tree.waiting
    tree.add(3, "3")
    tree.add(2, "2")
    assert tree.root == "(((0+1)+(2+3))+4)" and tree.waiting == {}
    one = SumTree(1, None)
    assert one.widths == [1]
    one.add(0, "only")
    assert one.root == "only"
    with pytest.raises(ValueError, match="a sum needs at least one leaf"):
        SumTree(0, None)


def test_add_results_and_mean_of_keep_dtypes_and_stats():
    a = ShardResult({"f": np.array([1.5, -0.0], np.float32), "i": np.array([2 ** 31 - 1], np.int32)}, ["s1"])
    b = ShardResult({"f": np.array([2.25, -0.0], np.float32), "i": np.array([1], np.int32)}, ["s2", "s3"])
    total = add_results(a, b)
    assert total.stats == ["s1", "s2", "s3"]
    assert total.outputs["f"].dtype == np.float32 and total.outputs["f"].tobytes() == np.array([3.75, -0.0], np.float32).tobytes()
    assert total.outputs["i"].tolist() == [-2 ** 31]
    means = mean_of(ShardResult({"f": np.array([3.0, 1.0], np.float32), "h": np.array([1.0], np.float16)}), 3)
    assert means["f"].dtype == np.float32 and means["f"].tobytes() == (np.array([3.0, 1.0], np.float32) / np.float32(3)).tobytes()
    assert means["h"].dtype == np.float16 and means["h"].tobytes() == (np.float16(1.0) / np.float16(3)).tobytes()
    with pytest.raises(EvaluationError) as refused:
        mean_of(ShardResult({"i": np.array([1], np.int32)}), 2)
    assert str(refused.value) == ("reduce='mean': output 'i' is int32, and a mean of whole numbers is not one: "
                                  "use reduce='sum'")
    assert refused.value.cli_message == ("--reduce mean: output 'i' is int32, and a mean of whole numbers is not one: "
                                         "use --reduce sum")
    assert mapping.finish(ShardResult({"f": np.array([4.0])}), "sum", 2)["f"].tolist() == [4.0]
    assert mapping.finish(ShardResult({"f": np.array([4.0])}), "mean", 2)["f"].tolist() == [2.0]


def test_flat_names_tuple_elements_and_leaves_out_noops():
    flat = mapping._flat({"a": np.array(1.0), "t": (np.array(2.0), None, np.array(3.0)), "b": None})
    assert list(flat) == ["a", "t[0]", "t[2]"]
    assert float(flat["t[2]"]) == 3.0


def test_reduce_none_writes_each_shards_outputs(tmp_path):
    paths, xs, ns = write(tmp_path / "d", 3)
    out = tmp_path / "out"
    report = map_graph(scaled_graph(), paths, {"w": W}, reduce="none", out_dir=str(out))
    assert report.outputs is None
    assert sorted(os.listdir(out)) == ["s00.npz", "s01.npz", "s02.npz"]
    for path, x, n in zip(paths, xs, ns):
        with np.load(out / path.name) as written:
            assert sorted(written.files) == ["k", "neg", "out"]
            assert written["out"].tobytes() == (x * W).tobytes()
            assert written["k"].tobytes() == (n + 1).tobytes()
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp") or name.endswith(".old")]


def test_map_graph_refusals_word_for_word(tmp_path):
    paths, _, _ = write(tmp_path / "d", 2)
    graph = scaled_graph()

    def refused(**kwargs):
        with pytest.raises(EvaluationError) as e:
            map_graph(graph, kwargs.pop("paths", paths), kwargs.pop("fixed", {"w": W}), **kwargs)
        return str(e.value)
    assert refused(reduce="max") == "reduce must be one of sum, mean, none, got 'max'"
    assert refused(reduce="none") == "reduce='none' writes the shards' outputs into out_dir: give both or neither"
    assert refused(out_dir=str(tmp_path / "o")) == ("reduce='none' writes the shards' outputs into out_dir: give both "
                                                    "or neither")
    assert refused(fixed={}) == ("missing input value: w float32[4] (neither a member of the shards nor in fixed=)")
    assert refused(fixed={"w": W, "q": W}) == "fixed input 'q' names no input; inputs: x, w, n"
    assert refused(reduce="mean").startswith("reduce='mean': output 'k' is int32")
    x = UOp.param("x", (4,), dtypes.float32)
    g2 = Graph({"o": x * UOp.param("a", (4,), dtypes.float32) * UOp.param("b", (4,), dtypes.float32)},
               inputs=[x, UOp.param("a", (4,), dtypes.float32), UOp.param("b", (4,), dtypes.float32)])
    with pytest.raises(EvaluationError) as e:
        map_graph(g2, paths, {})
    assert str(e.value).startswith("member 'n' names no input") or "names no input" in str(e.value)
    twins = tmp_path / "twin"
    twins.mkdir()
    np.savez(twins / "s00.npz", x=np.zeros(4, np.float32), n=np.zeros(2, np.int32))
    with pytest.raises(ShardError) as e:
        map_graph(graph, [paths[0], twins / "s00.npz"], {"w": W}, reduce="none", out_dir=str(tmp_path / "o"))
    assert str(e.value) == (f"{paths[0]} and {twins / 's00.npz'} would both be written as s00.npz: reduce='none' names "
                            f"each output after its shard")
    assert e.value.cli_message == str(e.value).replace("reduce='none'", "--reduce none")


def test_missing_inputs_are_named_in_the_plural():
    x, w, v = (UOp.param(n, (2,), dtypes.float64) for n in "xwv")
    with pytest.raises(EvaluationError) as e:
        mapping._check_fixed(Graph({"o": x * w * v}, inputs=[x, w, v]), {}, ["x"])
    assert str(e.value) == ("missing input values: w float64[2], v float64[2] (neither a member of the shards nor "
                            "in fixed=)")
    assert e.value.cli_message == ("missing input values: w float64[2], v float64[2] (neither a member of the shards "
                                   "nor given with -i)")
    with pytest.raises(EvaluationError) as e:
        mapping._check_fixed(Graph({"o": x}, inputs=[x]), {"w": np.zeros(2)}, ["x"])
    assert str(e.value) == "fixed input 'w' names no input; inputs: x"
    mapping._check_fixed(Graph({"o": x * w}, inputs=[x, w]), {"w": np.zeros(2)}, ["x"])


def test_check_shards_refusals_and_members(tmp_path):
    graph = scaled_graph()
    d = tmp_path / "d"
    d.mkdir()
    np.savez(d / "a.npz", x=np.zeros(4, np.float32), n=np.zeros(2, np.int32))
    np.savez(d / "b.npz", x=np.zeros(4, np.float32))
    assert check_shards(graph, [d / "a.npz"], ["w"]) == ["x", "n"]
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "a.npz", d / "b.npz"], ["w"])
    assert str(e.value) == (f"{d / 'b.npz'}: no member 'n' (input int32[2]); {d / 'a.npz'} has one, and every shard "
                            "must give the same inputs")
    np.savez(d / "c.npz", x=np.zeros(4, np.float32), w=W)
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "c.npz"], ["w"])
    assert str(e.value) == (f"{d / 'c.npz'}: member 'w' is an input given once for every shard (fixed=): give it in "
                            "one place")
    assert e.value.cli_message == str(e.value).replace("(fixed=)", "(-i)")
    np.savez(d / "e.npz", q=np.zeros(1))
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "e.npz"])
    assert str(e.value) == f"{d / 'e.npz'}: member 'q' names no input; inputs: x, w, n"
    np.savez(d / "f.npz", x=np.zeros(4, np.float64))
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "f.npz"])
    assert str(e.value) == f"{d / 'f.npz'}: member 'x' is float64[4] but input 'x' is float32[4]"
    np.savez(d / "g.npz", x=np.zeros(3, np.float32))
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "g.npz"])
    assert str(e.value) == (f"{d / 'g.npz'}: member 'x' is float32[3] but input 'x' is float32[4]: every shard must "
                            f"hold the graph's 4 rows; run a shorter one on its own, with a graph of its size (an ONNX "
                            f"model with a symbolic batch takes it from `-i {d / 'g.npz'}`)")
    np.savez(d / "h.npz", x=np.zeros(5, np.float32))
    with pytest.raises(ShardError) as e:
        check_shards(graph, [d / "h.npz"])
    assert str(e.value) == f"{d / 'h.npz'}: member 'x' is float32[5] but input 'x' is float32[4]"
    np.savez(d / "i.npz", x=np.zeros(4, ">f4"))
    assert check_shards(graph, [d / "i.npz"]) == ["x"]  # big-endian float32 is float32
    x2 = UOp.param("x", (3, 2), dtypes.float32)
    np.savez(d / "j.npz", x=np.zeros((2, 3), np.float32))
    with pytest.raises(ShardError) as e:
        check_shards(Graph({"o": x2}, inputs=[x2]), [d / "j.npz"])
    assert str(e.value) == f"{d / 'j.npz'}: member 'x' is float32[2,3] but input 'x' is float32[3,2]"
    with pytest.raises(ShardError) as e:
        check_shards(Graph({"o": UOp.const(1.0, dtypes.float32)}, inputs=[]), [d / "j.npz"])
    assert str(e.value) == f"{d / 'j.npz'}: member 'x' names no input; inputs: none"


def test_shard_paths_and_output_names(tmp_path):
    for name in ("b.npz", "a.npz", "c.npz"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "dir.npz").mkdir()
    assert shard_paths(str(tmp_path / "*.npz")) == [str(tmp_path / n) for n in ("a.npz", "b.npz", "c.npz")]
    with pytest.raises(ShardError) as e:
        shard_paths(str(tmp_path / "*.none"))
    assert str(e.value) == f"shard_paths({str(tmp_path / '*.none')!r}) matches no file"
    assert e.value.cli_message == f"--map {str(tmp_path / '*.none')!r} matches no file"
    assert output_names(["x/a.npz", "y/b.npz"]) == ["a.npz", "b.npz"]


def test_run_shard_names_the_shard_in_its_errors(tmp_path):
    x = UOp.param("x", (2,), dtypes.float32)
    graph = Graph({"y": x + 1}, inputs=[x])
    np.savez(tmp_path / "s.npz", x=np.array([1.0, 2.0], np.float32))
    work = Work(graph, {}, ["x"])
    result = run_shard(work, str(tmp_path / "s.npz"))
    assert result.outputs["y"].tolist() == [2.0, 3.0] and len(result.stats) == 1
    stats = result.stats[0]
    assert stats.shard == str(tmp_path / "s.npz") and stats.not_finite == ()
    assert stats.prepare_seconds > 0 and stats.ended >= stats.started and stats.eval_seconds >= 0
    again = run_shard(work, str(tmp_path / "s.npz")).stats[0]
    assert again.prepare_seconds == 0.0  # parsed once per process
    np.savez(tmp_path / "n.npz", x=np.array([np.inf, 2.0], np.float32))
    assert run_shard(work, str(tmp_path / "n.npz")).stats[0].not_finite == ("y",)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ShardError) as e:
        run_shard(work, str(tmp_path / "bad.npz"))
    assert str(e.value).startswith(str(tmp_path / "bad.npz") + ": ")
    assert not str(e.value).startswith(f"{tmp_path / 'bad.npz'}: {tmp_path / 'bad.npz'}")
    copy = Work.__new__(Work)
    copy.__dict__.update(work.__getstate__())
    assert copy._graph is None and copy.graph_bytes == work.graph_bytes


def _stats(shard, worker="w:1", thread=1, started=0.0, ended=1.0, read=0.25, ev=0.5, prep=0.0, cpu=0.5, bad=()):
    return ShardStats(shard, worker, thread, started, ended, read, ev, prep, cpu, bad)


def test_report_notes_and_stats_lines_word_for_word():
    shards = [_stats("/d/b.npz", started=2.0, ended=3.0, bad=("y",)), _stats("/d/a.npz", started=0.0, ended=1.5, prep=0.125),
              _stats("/d/c.npz", thread=2, started=5.0, ended=6.0, bad=("y", "z"))]
    report = MapReport({}, shards, 2, 0.5, 0.25, 7.0)
    assert report.lost_workers_note() is None
    assert report.scheduling_gaps() == [0.5]
    assert report.not_finite_note("g.uop") == (
        "2 of 3 shards gave nan or inf: /d/b.npz (y); /d/c.npz (y, z): `uopgrad eval g.uop -i /d/b.npz "
        "--debug-nans` (with the same -i) names the node that made it")
    assert report.not_finite_note("g.uop", {"/d/c.npz": "a/c.npz"}).startswith(
        "2 of 3 shards gave nan or inf: /d/b.npz (y); a/c.npz (y, z)")
    assert report.not_finite_note("g.uop", {"/d/c.npz": "-c.npz"}).split(" -i ")[1].startswith("-c.npz --debug-nans")
    assert report.lines() == [
        "shard       read       eval        CPU  worker",
        "a.npz    0.250 s    0.500 s    0.500 s  w:1 (+0.125 s parsing the graph)",
        "b.npz    0.250 s    0.500 s    0.500 s  w:1",
        "c.npz    0.250 s    0.500 s    0.500 s  w:1",
        "3 shards on 2 workers: start-up 0.500 s, sending the graph and fixed inputs 0.250 s, run 7.000 s, "
        "mean shard 0.792 s",
        "overhead per shard: 500.00 ms (63.2% of a shard's time), the mean gap between a shard's end and the next "
        "one's start on a worker (1 gaps: scheduling, moving, adding or writing outputs)",
    ]
    one = MapReport({}, [_stats("/d/x.npz")], 1, 0.0, 0.0, 1.0, lost_workers=["tcp://h:1"])
    assert one.lines()[-1] == ("1 shards on 1 worker: start-up 0.000 s, sending the graph and fixed inputs 0.000 s, "
                               "run 1.000 s, mean shard 0.750 s")
    assert one.not_finite_note("g") is None
    assert one.lost_workers_note() == (
        "1 worker left the cluster during the run (tcp://h:1): Dask ran the shards and sums it held again on the "
        "others (the result does not depend on where a shard runs)")
    two = MapReport({}, [_stats("/d/x.npz", bad=("q",))], 1, 0.0, 0.0, 1.0, lost_workers=["a", "b"])
    assert two.lost_workers_note() == (
        "2 workers left the cluster during the run (a, b): Dask ran the shards and sums they held again on the "
        "others (the result does not depend on where a shard runs)")
    assert two.not_finite_note("g") == ("1 of 1 shard gave nan or inf: /d/x.npz (q): `uopgrad eval g -i /d/x.npz "
                                        "--debug-nans` (with the same -i) names the node that made it")
    many = MapReport({}, [_stats(f"/d/{i}.npz", bad=("y",)) for i in range(7)], 1, 0.0, 0.0, 1.0)
    assert many.not_finite_note("g").startswith("7 of 7 shards gave nan or inf: /d/0.npz (y); /d/1.npz (y); "
                                                "/d/2.npz (y); /d/3.npz (y); /d/4.npz (y); and 2 more: ")
    six = MapReport({}, [_stats(f"/d/{i}.npz", bad=("y",)) for i in range(6)], 1, 0.0, 0.0, 1.0)
    assert "; and 1 more: " in six.not_finite_note("g")
    five = MapReport({}, [_stats(f"/d/{i}.npz", bad=("y",)) for i in range(5)], 1, 0.0, 0.0, 1.0)
    assert "more" not in five.not_finite_note("g") and "/d/4.npz (y): `" in five.not_finite_note("g")


def test_scheduling_gaps_per_thread_sorted_and_never_negative():
    shards = [_stats("a", worker="w:1", thread=1, started=4.0, ended=5.0),
              _stats("b", worker="w:1", thread=1, started=0.0, ended=1.0),
              _stats("c", worker="w:1", thread=1, started=1.5, ended=3.0),
              _stats("d", worker="w:2", thread=1, started=0.0, ended=2.0),
              _stats("e", worker="w:2", thread=1, started=1.0, ended=2.5)]  # overlapping: 0, not -1
    assert sorted(MapReport({}, shards, 2, 0, 0, 1).scheduling_gaps()) == [0.0, 0.5, 1.0]


def test_staged_directory_replaces_only_outputs(tmp_path):
    target = tmp_path / "out"
    staged = StagedDirectory(str(target))
    staged.write("/x/a.npz", {"y": np.array([1.0])})
    assert not target.exists()
    staged.commit()
    staged.discard()
    assert os.listdir(target) == ["a.npz"]
    again = StagedDirectory(str(target))
    again.write("/x/b.npz", {"y": np.array([2.0])})
    again.commit()
    again.discard()
    assert os.listdir(target) == ["b.npz"]
    assert sorted(os.listdir(tmp_path)) == ["out"]
    (target / "notes.txt").write_text("mine")
    with pytest.raises(EvaluationError) as e:
        StagedDirectory(str(target))
    assert str(e.value) == (f"{target}: holds 'notes.txt', which this run did not write: refusing to replace a "
                            "directory that holds anything but .npz files")
    (tmp_path / "file").write_text("x")
    with pytest.raises(EvaluationError) as e:
        StagedDirectory(str(tmp_path / "file"))
    assert str(e.value) == (f"{tmp_path / 'file'}: exists and is not a directory: --reduce none writes a directory of "
                            ".npz files there")
    with pytest.raises(EvaluationError) as e:
        StagedDirectory(str(target), keep=[str(target / "notes.txt")])
    assert str(e.value) == (f"{target}: holds the shard {target / 'notes.txt'}: replacing the directory would lose the "
                            "data set; write the outputs to a directory of their own")
    StagedDirectory(str(tmp_path / "other"), keep=[str(tmp_path / "others.npz")]).discard()  # a prefix is not inside
    dropped = StagedDirectory(str(tmp_path / "never"))
    dropped.write("/x/a.npz", {"y": np.array([1.0])})
    dropped.discard()
    assert sorted(os.listdir(tmp_path)) == ["file", "out"]


def test_shard_stats_hold_where_and_how_long_it_ran(tmp_path):
    import socket
    import threading
    x = UOp.param("x", (2,), dtypes.float64)
    np.savez(tmp_path / "s.npz", x=np.array([1.0, 2.0]))
    stats = run_shard(Work(Graph({"y": x * 2}, inputs=[x]), {}, ["x"]), str(tmp_path / "s.npz")).stats[0]
    assert stats.worker == f"{socket.gethostname()}:{os.getpid()}" and stats.thread == threading.get_ident()
    for seconds in (stats.read_seconds, stats.eval_seconds, stats.prepare_seconds, stats.cpu_seconds):
        assert isinstance(seconds, float) and 0 <= seconds < 60
    assert 0 < stats.ended - stats.started < 60


def test_blas_runs_on_one_thread_inside_a_shard():
    from threadpoolctl import threadpool_info
    before = {(i["user_api"], i["filepath"]): i["num_threads"] for i in threadpool_info()}
    with Work.one_blas_thread():
        inside = threadpool_info()
    assert any(i["user_api"] == "blas" for i in inside)
    for info in inside:
        if info["user_api"] == "blas":
            assert info["num_threads"] == 1, info
        else:  # OpenMP pools are left as they are
            assert info["num_threads"] == before[(info["user_api"], info["filepath"])], info
    assert mapping._blas_controller() is mapping._blas_controller()


def test_a_label_outside_the_classes_in_a_shard_is_refused_by_the_path_as_given(tmp_path, monkeypatch):
    logits = UOp.param("logits", (3, 4), dtypes.float32)
    labels = UOp.param("labels", (3,), dtypes.int32)
    loss = -(labels.one_hot(4).cast(dtypes.float32) * logits.log_softmax(-1)).sum()
    graph = Graph({"loss": loss}, inputs=[logits, labels])
    monkeypatch.chdir(tmp_path)
    os.mkdir("d")
    np.savez("d/a.npz", labels=np.array([0, 3, 1], np.int32))
    np.savez("d/b.npz", labels=np.array([0, 4, 1], np.int32))
    fixed = {"logits": np.zeros((3, 4), np.float32)}
    with pytest.raises(ShardError) as refused:
        map_graph(graph, ["d/a.npz", "d/b.npz"], fixed)
    message = str(refused.value)
    assert message.startswith("d/b.npz: member 'labels' holds 4 (at [1]), outside 0..3"), message
    assert str(tmp_path) not in message
    total = map_graph(graph, ["d/a.npz"], fixed).outputs["loss"]
    assert total == np.float32(3 * np.log(4.0))
    assert map_graph(graph, ["d/a.npz", "d/b.npz"], fixed, check_indices=False).outputs["loss"] == np.float32(5 * np.log(4.0))


def test_a_bad_shard_is_named_as_given_and_only_once(tmp_path, monkeypatch):
    x = UOp.param("x", (2,), dtypes.float32)
    monkeypatch.chdir(tmp_path)
    os.mkdir("d")
    np.savez("d/a.npz", x=np.zeros(2, np.float32))
    with open("d/b.npz", "wb") as f:
        f.write(b"PK\x03\x04 not a zip at all")
    with pytest.raises(ShardError) as refused:
        map_graph(Graph({"y": x + 1}, inputs=[x]), ["d/a.npz", "d/b.npz"], {}, shard_inputs=["x"])
    message = str(refused.value)
    assert message.startswith("d/b.npz: ") and "d/b.npz: d/b.npz" not in message and str(tmp_path) not in message


def test_progress_counts_one_per_shard_and_a_graph_without_inputs_is_named(tmp_path):
    paths, _, _ = write(tmp_path / "d", 3)
    calls = []
    map_graph(scaled_graph(), paths, {"w": W}, progress=calls.append)
    assert calls == [1, 1, 1]
    with pytest.raises(EvaluationError) as e:
        mapping._check_fixed(Graph({"o": UOp.const(1.0, dtypes.float32)}, inputs=[]), {"w": W}, [])
    assert str(e.value) == "fixed input 'w' names no input; inputs: none"


def test_the_reader_limits_reach_each_shards_parse_and_gaps_are_averaged(tmp_path):
    from uopcli.formats.uop.tables import Limits
    paths, _, _ = write(tmp_path / "d", 2)
    from uopcli.errors import FormatError
    with pytest.raises(FormatError) as refused:
        map_graph(scaled_graph(), paths, {"w": W}, limits=Limits(max_nodes=3))
    assert str(refused.value) == ("<the mapped graph>: 7 nodes exceed the limit of 3 (raise it: Limits(max_nodes=...) "
                                  "in Python, uopgrad --limit max_nodes=N on the command line)")
    assert map_graph(scaled_graph(), paths, {"w": W}, limits=Limits(max_nodes=1000)).outputs["out"].shape == (4,)
    shards = [_stats("a", started=0.0, ended=1.0), _stats("b", started=1.5, ended=2.0), _stats("c", started=3.0, ended=4.0)]
    report = MapReport({}, shards, 1, 0.0, 0.0, 4.0)
    assert report.scheduling_gaps() == [0.5, 1.0]
    assert report.lines()[-1].startswith("overhead per shard: 750.00 ms (100.0% of a shard's time)")
