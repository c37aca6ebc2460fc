"""`uopgrad eval --map` without Dask: a graph over a data set's shards in this process (the
library's map_graph and the installed CLI): sums in a fixed tree equal to the whole batch's
gradient, one file per shard equal to `eval` of that shard alone, every shard's headers
checked before anything runs, nothing partial left by a failure or an interruption, and
dask never imported."""

from __future__ import annotations

import glob
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.backends.numpy import evaluate_graph
from uopcli.errors import EvaluationError
from uopcli.formats.uop import save
from uopcli.tools.map import ShardError, SumTree, check_shards, map_graph, read_members

from _map_helpers import (UOPGRAD, mlp_gradient, on_terminal, relative_error, uopgrad, uopgrad_process,
                          write_gradient, write_shards, write_weights)

needs_cli = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def weights(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((5, 7)), "w2": rng.standard_normal((7, 3))}


# ----------------------------------------------------------------------------- the sum tree

def level_by_level(values: list, combine):
    """The tree SumTree promises, written the plain way: pairs, then pairs of pairs."""
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


@pytest.mark.parametrize("count", [1, 2, 3, 5, 6, 7, 8, 13, 16, 17])
def test_the_sum_tree_has_one_shape_whatever_the_order_of_arrival(count):
    """Leaves arriving in any order give the same tree: combining as text shows the shape."""
    combine = lambda a, b: f"({a}+{b})"
    expected = level_by_level([str(i) for i in range(count)], combine)
    orders = [list(range(count)), list(reversed(range(count)))]
    rng = np.random.default_rng(count)
    orders += [list(rng.permutation(count)) for _ in range(20)]
    for order in orders:
        tree = SumTree(count, combine)
        for index in order:
            assert tree.root is None
            tree.add(int(index), str(index))
        assert tree.root == expected, order
        assert tree.waiting == {}
    if count == 5:
        assert expected == "(((0+1)+(2+3))+4)"


def test_the_sum_tree_fixes_float_rounding():
    """Float addition is not associative: the tree's order is what makes the bits the same."""
    values = [1e16, 1.0, -1e16, 1.0, 3.0, 1e-3, -3.0]
    sums = set()
    for order in itertools.permutations(range(len(values))):
        tree = SumTree(len(values), lambda a, b: a + b)
        for index in order:
            tree.add(index, values[index])
        sums.add(tree.root)
    assert sums == {level_by_level(values, lambda a, b: a + b)}
    assert sum(values) != level_by_level(values, lambda a, b: a + b)  # the order is seen


# ----------------------------------------------------------------------------- equal results

def test_sum_over_16_shards_is_the_whole_batch_gradient(tmp_path):
    """The gradient of a summed loss over 16 shards of 4 rows, added in the tree, equals the
    gradient graph made for all 64 rows, evaluated on the concatenated data (float64)."""
    paths, data = write_shards(tmp_path / "shards", 16, 4)
    fixed = weights()
    report = map_graph(mlp_gradient(4), paths, fixed)
    whole = evaluate_graph(mlp_gradient(64), {**data, **fixed}, simplify="tinygrad")
    assert list(report.outputs) == ["loss", "grad_w1", "grad_w2"]
    for name, value in whole.items():
        assert report.outputs[name].dtype == np.float64 and report.outputs[name].shape == value.shape
        assert relative_error(report.outputs[name], value) < 1e-12, name
    # and it is the sum of each shard's own gradient, in the tree's order, bit for bit
    one = [evaluate_graph(mlp_gradient(4), {**dict(np.load(p)), **fixed}, simplify="tinygrad") for p in paths]
    for name in whole:
        expected = level_by_level([r[name] for r in one], np.add)
        assert report.outputs[name].tobytes() == expected.tobytes()
    assert [os.path.basename(s.shard) for s in report.shards] == [p.name for p in paths]


def test_mean_is_the_sum_divided_by_the_number_of_shards(tmp_path):
    paths, _ = write_shards(tmp_path / "shards", 7, 3)
    graph, fixed = mlp_gradient(3), weights()
    total = map_graph(graph, paths, fixed, reduce="sum").outputs
    mean = map_graph(graph, paths, fixed, reduce="mean").outputs
    for name, value in total.items():
        assert mean[name].tobytes() == (value / 7).tobytes()


def test_sums_keep_the_outputs_dtype_and_its_edge_values(tmp_path):
    """int32 sums wrap as the graph's own ADD does; -0.0 + -0.0 stays -0.0; nan and inf
    pass through: the per-dtype addition, bit for bit."""
    n, f = UOp.param("n", (3,), dtypes.int32), UOp.param("f", (4,), dtypes.float32)
    graph = Graph({"n2": n + n, "f2": f + f}, inputs=[n, f])
    big = np.array([2**30, -(2**30), 7], np.int32)
    edge = np.array([-0.0, np.nan, np.inf, 1e-45], np.float32)
    for i in range(3):
        np.savez(tmp_path / f"s{i}.npz", n=big, f=edge)
    out = map_graph(graph, sorted(tmp_path.glob("s*.npz")), {}).outputs
    assert out["n2"].dtype == np.int32 and out["n2"].tolist() == [-(2**31), -(2**31), 42]  # 6 * 2^30 wraps
    assert out["f2"].dtype == np.float32
    assert np.signbit(out["f2"][0]) and out["f2"][0] == 0 and np.isnan(out["f2"][1]) and out["f2"][2] == np.inf
    assert out["f2"][3] == np.float32(1e-45) * 6 and out["f2"][3] < np.finfo(np.float32).tiny  # subnormals, exact
    with pytest.raises(EvaluationError, match="output 'n2' is int32"):
        map_graph(graph, sorted(tmp_path.glob("s*.npz")), {}, reduce="mean")


def test_a_worker_compiles_the_graph_once_and_runs_its_shards_in_threads_at_once(tmp_path):
    """A Work compiles its graph on first use in a process; shards in several threads run
    that one program, each giving what evaluate_graph gives for that shard, bit for bit.
    A pickled Work (as Dask sends it) carries no program: the worker compiles its own."""
    import pickle
    import threading

    from uopcli.core.simplify import simplify
    from uopcli.tools.map import Work, run_shard
    paths, _ = write_shards(tmp_path / "shards", 8, 4)
    fixed = weights()
    graph = simplify(mlp_gradient(4))  # as map_graph hands it over
    work = Work(graph, fixed, ["x", "y"])
    expected = {str(p): evaluate_graph(graph, {**dict(np.load(p)), **fixed}, simplify=None) for p in paths}
    first = run_shard(work, str(paths[0]))
    program = work._program
    assert program is not None and first.stats[0].prepare_seconds > 0
    results, failures = {}, []

    def worker(mine):
        try:
            for path in mine:
                results[str(path)] = run_shard(work, str(path))
        except BaseException as error:  # noqa: BLE001 - reported in the main thread
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(paths[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    assert work._program is program  # compiled once
    for path, result in results.items():
        assert result.stats[0].prepare_seconds == 0.0
        for name, value in expected[path].items():
            assert result.outputs[name].tobytes() == value.tobytes(), (path, name)
    assert pickle.loads(pickle.dumps(work))._program is None


# ----------------------------------------------------------------------------- the CLI, end to end

@needs_cli
def test_cli_sum_equals_the_library_and_none_equals_eval_of_each_shard(tmp_path):
    """--reduce sum writes the library's sum; --reduce none writes, per shard, the very bytes
    `eval -i shard.npz -o` writes for that shard alone."""
    grad = write_gradient(tmp_path / "grad.uop", 4)
    specs = write_weights(tmp_path)
    paths, _ = write_shards(tmp_path / "shards", 3, 4)
    inputs = [a for spec in specs for a in ("-i", spec)]
    done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "-o", "sum.npz", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()
    fixed = {"w1": np.load(tmp_path / "w1.npy"), "w2": np.load(tmp_path / "w2.npy")}
    expected = map_graph(mlp_gradient(4), paths, fixed).outputs
    with np.load(tmp_path / "sum.npz") as stored:
        assert list(stored.files) == list(expected)
        for name in expected:
            assert stored[name].tobytes() == expected[name].tobytes()
    done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "--reduce", "none", "-o", "each", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(os.listdir(tmp_path / "each")) == [p.name for p in paths]
    for path in paths:
        alone = uopgrad("eval", grad, "-i", path, *inputs, "-o", "-", cwd=tmp_path)
        assert alone.returncode == 0, alone.stderr.decode()
        assert (tmp_path / "each" / path.name).read_bytes() == alone.stdout
    # again, over the earlier outputs: the directory is replaced whole
    os.remove(tmp_path / "shards" / paths[-1].name)
    done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "--reduce", "none", "-o", "each", cwd=tmp_path)
    assert done.returncode == 0 and sorted(os.listdir(tmp_path / "each")) == [p.name for p in paths[:-1]]
    assert not glob.glob(str(tmp_path / ".each*"))


@needs_cli
def test_cli_mean_json_table_and_stats(tmp_path):
    grad = write_gradient(tmp_path / "grad.uop", 2)
    inputs = [a for spec in write_weights(tmp_path) for a in ("-i", spec)]
    paths, _ = write_shards(tmp_path / "shards", 3, 2)
    done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "--reduce", "mean", "--json", "--stats",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    fixed = {"w1": np.load(tmp_path / "w1.npy"), "w2": np.load(tmp_path / "w2.npy")}
    expected = map_graph(mlp_gradient(2), paths, fixed, reduce="mean").outputs
    values = {k: v["values"] for k, v in json.loads(done.stdout)["outputs"].items()}
    assert values["loss"] == float(expected["loss"])
    assert np.array(values["grad_w2"]).tolist() == expected["grad_w2"].tolist()
    document = json.loads(done.stdout)["stats"]  # eval --help: with --json, under "stats" in the document
    assert [s["shard"] for s in document["shards"]] == [f"shards/part-0{i}.npz" for i in range(3)]
    assert document["workers"] == 1 and document["startup_seconds"] == 0.0 and document["overhead_seconds_per_shard"] >= 0
    assert all(s["eval_seconds"] > 0 and s["not_finite"] == [] for s in document["shards"])
    assert done.stderr.decode() == ""
    table = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "--stats", cwd=tmp_path)
    assert [line.split()[0] for line in table.stdout.decode().splitlines()] == ["name", "loss", "grad_w1", "grad_w2"]
    stats = table.stderr.decode().splitlines()
    assert [line.split()[0] for line in stats[1:4]] == ["part-00.npz", "part-01.npz", "part-02.npz"]
    assert stats[4].startswith("3 shards on 1 worker: start-up 0.000 s")
    assert stats[5].startswith("overhead per shard: ") and "(2 gaps: " in stats[5]


@needs_cli
def test_a_progress_bar_of_shards_on_a_terminal(tmp_path):
    grad = write_gradient(tmp_path / "grad.uop", 2)
    write_shards(tmp_path / "shards", 3, 2)
    status, shown, out = on_terminal(["eval", grad, "--map", "shards/*.npz", "--random", "-o", "-"], tmp_path)
    assert status == 0 and out.startswith(b"PK")
    assert b"shards" in shown and b"100%" in shown, shown


@needs_cli
@pytest.mark.parametrize("args, message", [
    (["--reduce", "sum"], "--reduce is for a run over shards: give --map"),
    (["--dask", "local:2"], "--dask is for a run over shards: give --map"),
    (["--map", "s/*.npz", "--reduce", "none"], "give -o DIR"),
    (["--map", "s/*.npz", "--reduce", "none", "-o", "-"], "give -o DIR"),
    (["--map", "s/*.npz", "--reduce", "none", "-o", "x.npz"], "a directory of one .npz per shard, not the file x.npz"),
    (["--map", "s/*.npz", "--reduce", "none", "-o", "out/X.NPZ"], "not the file out/X.NPZ"),
    (["--map", "s/*.npz", "--keep-intermediates", "-o", "o.npz"], "not --map"),
    (["--map", "s/*.npz", "--backend", "tinygrad"], "not with --backend tinygrad"),
    (["--map", "s/*.npz", "--json", "-o", "o.npz"], "either -o OUT.npz or --json"),
    (["--map", "s/*.npz", "--seed", "3"], "--seed is the seed of --random"),
    (["--map", "s/*.npz", "-i", "w=w.npz:w", "-o", "w.npz"], "-o w.npz is the file -i w=w.npz:w reads"),
])
def test_cli_usage_errors(tmp_path, args, message):
    done = uopgrad("eval", "grad.uop", *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr.decode(), done.stderr.decode()
    assert not list(tmp_path.iterdir())          # nothing written (no directory named x.npz)


@needs_cli
def test_an_output_that_is_a_shard_is_refused(tmp_path):
    """-o naming one of the shards would overwrite the data set: a usage error, nothing written."""
    grad = write_gradient(tmp_path / "grad.uop", 2)
    paths, _ = write_shards(tmp_path / "shards", 3, 2)
    before = paths[1].read_bytes()
    done = uopgrad("eval", grad, "--map", "shards/*.npz", "--random", "-o", "./shards/../shards/part-01.npz",
                   cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.decode().startswith(
        "uopgrad: error: -o ./shards/../shards/part-01.npz is the shard shards/part-01.npz: writing it would "
        "replace the file read; give -o another file")
    assert paths[1].read_bytes() == before


@needs_cli
@pytest.mark.parametrize("out, holds", [
    ("shards", "the shard shards/part-00.npz"),                    # the data set replaced by its outputs
    ("./shards/", "the shard shards/part-00.npz"),
    ("data", "the file -i w1=data/w/w1.npy reads"),                # an -i file, deeper down
    ("model", "IN (model/grad.uop)"),
])
def test_reduce_none_into_a_directory_this_run_reads_is_refused(tmp_path, out, holds):
    """--reduce none replaces -o DIR whole: a DIR holding a shard, an -i file or IN (at any
    depth) is a usage error, and every file stays as it was (-o shards replaced the data set
    with the per-shard outputs, exit 0)."""
    (tmp_path / "model").mkdir()
    write_gradient(tmp_path / "model" / "grad.uop", 2)
    (tmp_path / "data" / "w").mkdir(parents=True)
    write_weights(tmp_path / "data" / "w")
    inputs = ["-i", "w1=data/w/w1.npy", "-i", "w2=data/w/w2.npy"]
    paths, _ = write_shards(tmp_path / "shards", 2, 2)
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    done = uopgrad("eval", "model/grad.uop", "--map", "shards/*.npz", *inputs, "--reduce", "none", "-o", out,
                   cwd=tmp_path)
    assert done.returncode == 2, done.stderr.decode()
    assert done.stderr.decode().splitlines()[0] == (
        f"uopgrad: error: -o {out} holds {holds}: --reduce none replaces the directory as a whole, which would "
        "lose it; give -o a directory of its own (see 'uopgrad eval --help')")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files
    done = uopgrad("eval", "model/grad.uop", "--map", "shards/*.npz", *inputs, "--reduce", "none", "-o", "each",
                   cwd=tmp_path)
    assert done.returncode == 0 and sorted(os.listdir(tmp_path / "each")) == [p.name for p in paths]


@needs_cli
def test_the_shards_that_gave_nan_or_inf_are_named(tmp_path):
    """A sum over shards one of which gives nan is nan with no word of where it came from
    (--debug-nans is for one evaluation): a note names each shard whose outputs hold nan or
    inf, and which outputs, in path order, and how to trace the first; the traced command
    names the culprit. A run with finite outputs has no such note."""
    grad = write_gradient(tmp_path / "grad.uop", 2)
    inputs = [a for spec in write_weights(tmp_path) for a in ("-i", spec)]
    paths, _ = write_shards(tmp_path / "shards", 4, 2)
    for index, member, value in ((1, "x", np.nan), (3, "y", 1e300)):
        with np.load(paths[index]) as shard:
            arrays = {name: shard[name].copy() for name in shard.files}
        arrays[member][1, 2] = value  # a target of 1e300: its square, the loss, overflows to inf (the gradients stay finite)
        np.savez(paths[index], **arrays)
    done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "-o", "sum.npz", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stderr.decode().splitlines() == [
        "uopgrad: 2 of 4 shards gave nan or inf: shards/part-01.npz (loss, grad_w1, grad_w2); shards/part-03.npz "
        f"(loss): `uopgrad eval {grad} -i shards/part-01.npz --debug-nans` (with the same -i) names "
        "the node that made it"]
    traced = uopgrad("eval", grad, "-i", "shards/part-01.npz", *inputs, "--debug-nans", cwd=tmp_path)
    assert traced.returncode == 1 and "input x holds 1 nan among 10 elements: given, not made" in traced.stderr.decode()
    report = map_graph(mlp_gradient(2), paths[::2], {"w1": np.load(tmp_path / "w1.npy"),
                                                     "w2": np.load(tmp_path / "w2.npy")})
    assert report.not_finite_note("grad.uop") is None and all(s.not_finite == () for s in report.shards)


# ----------------------------------------------------------------------------- bad shards

def bad_shards(directory):
    """(file name, members, the line's words) of shards that do not fit mlp_gradient(4)."""
    good = {"x": np.zeros((4, 5)), "y": np.zeros((4, 3))}
    return [
        ("wrong-shape.npz", {**good, "x": np.zeros((5, 5))}, "member 'x' is float64[5,5] but input 'x' is float64[4,5]"),
        ("short.npz", {"x": np.zeros((3, 5)), "y": np.zeros((3, 3))},
         "member 'x' is float64[3,5] but input 'x' is float64[4,5]: every shard must hold the graph's 4 rows; "),
        ("short-and-wide.npz", {"x": np.zeros((3, 6)), "y": np.zeros((3, 3))},
         "member 'x' is float64[3,6] but input 'x' is float64[4,5]"),
        ("wrong-dtype.npz", {**good, "y": np.zeros((4, 3), np.float32)},
         "member 'y' is float32[4,3] but input 'y' is float64[4,3]"),
        ("unknown.npz", {**good, "z": np.zeros(2)}, "member 'z' names no input; inputs: x, y, w1, w2"),
        ("missing.npz", {"x": good["x"]}, "no member 'y' (input float64[4,3]); "),
        ("fixed-too.npz", {**good, "w1": np.zeros((5, 7))}, "member 'w1' is an input given once for every shard"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_bad_shard_is_refused_before_anything_runs(tmp_path, case):
    """The bad shard is the last: it is found from its header before the first shard runs."""
    name, members, words = bad_shards(tmp_path)[case]
    paths, _ = write_shards(tmp_path / "shards", 3, 4)
    bad = tmp_path / "shards" / f"z-{name}"
    np.savez(bad, **members)
    ran = []
    with pytest.raises(ShardError) as refused:
        map_graph(mlp_gradient(4), [*paths, bad], weights(), reduce="none", out_dir=str(tmp_path / "out"),
                  progress=ran.append)
    assert str(refused.value).startswith(f"{bad}: ") and words in str(refused.value)
    assert ran == [] and os.listdir(tmp_path) == ["shards"]
    if name in ("wrong-shape.npz", "short-and-wide.npz"):  # not a shorter shard alone: no hint about those
        assert str(refused.value).endswith("but input 'x' is float64[4,5]")


@needs_cli
def test_cli_refuses_a_bad_shard_with_one_line_and_writes_nothing(tmp_path):
    grad = write_gradient(tmp_path / "grad.uop", 4)
    inputs = [a for spec in write_weights(tmp_path) for a in ("-i", spec)]
    write_shards(tmp_path / "shards", 2, 4)
    before = sorted(os.listdir(tmp_path))
    for case, (name, members, words) in enumerate(bad_shards(tmp_path)):
        np.savez(tmp_path / "shards" / name, **members)
        for reduce, out in [(("sum", "out.npz"), ("none", "out"))[case % 2]]:
            done = uopgrad("eval", grad, "--map", "shards/*.npz", *inputs, "--reduce", reduce, "-o", out, cwd=tmp_path)
            lines = done.stderr.decode().splitlines()
            assert done.returncode == 1 and len(lines) == 1, lines
            assert lines[0].startswith(f"uopgrad: error: shards/{name}: ") and words in lines[0], lines
            assert sorted(os.listdir(tmp_path)) == before
        os.remove(tmp_path / "shards" / name)
    done = uopgrad("eval", grad, "--map", "none/*.npz", *inputs, "-o", "out.npz", cwd=tmp_path)
    assert done.returncode == 1 and b"--map 'none/*.npz' matches no file" in done.stderr


def test_headers_alone_are_read_when_checking(tmp_path):
    """A shard whose data is cut short but whose headers are whole passes the check (its
    data was not read), and fails when it runs, naming the shard."""
    paths, _ = write_shards(tmp_path / "shards", 2, 4)
    cut = tmp_path / "shards" / "part-01.npz"
    with zipfile.ZipFile(paths[1]) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(cut, "w") as target:
        for name, data in members:
            target.writestr(name, data[:-8])  # the header stays, the last element goes
    assert read_members(str(cut)) == {"x": ((4, 5), np.dtype("float64")), "y": ((4, 3), np.dtype("float64"))}
    assert check_shards(mlp_gradient(4), paths) == ["x", "y"]
    with pytest.raises(ShardError, match=f"^{cut}: "):
        map_graph(mlp_gradient(4), paths, weights())


def test_shards_named_alike_cannot_be_written_into_one_directory(tmp_path):
    a, _ = write_shards(tmp_path / "a", 1, 4)
    b, _ = write_shards(tmp_path / "b", 1, 4)
    with pytest.raises(ShardError, match="would both be written as part-00.npz"):
        map_graph(mlp_gradient(4), [*a, *b], weights(), reduce="none", out_dir=str(tmp_path / "out"))
    assert map_graph(mlp_gradient(4), [*a, *b], weights()).outputs  # a sum is fine


def test_an_output_directory_is_replaced_only_when_it_holds_outputs(tmp_path):
    paths, _ = write_shards(tmp_path / "shards", 2, 4)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(EvaluationError, match="holds 'todo.txt', which this run did not write"):
        map_graph(mlp_gradient(4), paths, weights(), reduce="none", out_dir=str(tmp_path / "notes"))
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(EvaluationError, match="exists and is not a directory"):
        map_graph(mlp_gradient(4), paths, weights(), reduce="none", out_dir=str(tmp_path / "file"))
    assert sorted(os.listdir(tmp_path)) == ["file", "notes", "shards"]
    before = {p: p.read_bytes() for p in paths}  # the shards' own directory (all .npz): never replaced
    for out in (tmp_path / "shards", tmp_path):
        with pytest.raises(EvaluationError, match=f"holds the shard {paths[0]}: replacing the directory would lose"):
            map_graph(mlp_gradient(4), paths, weights(), reduce="none", out_dir=str(out))
    assert {p: p.read_bytes() for p in paths} == before and sorted(os.listdir(tmp_path)) == ["file", "notes", "shards"]


# ----------------------------------------------------------------------------- interrupted

def slow_graph(path):
    """About 20-50 ms a shard: a 300x300 float64 input through four matrix products."""
    x, w = UOp.param("x", (300, 300), dtypes.float64), UOp.param("w", (300, 300), dtypes.float64)
    h = x
    for _ in range(4):
        h = (h @ w).tanh()
    save(Graph({"h": h}, inputs=[x, w]), path)


@needs_cli
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_leaves_no_partial_output(tmp_path, stop):
    """Stopped while the per-shard files are being written: no OUT, no temporary directory."""
    slow_graph(tmp_path / "slow.uop")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "w.npy", rng.standard_normal((300, 300)) / 20)
    (tmp_path / "shards").mkdir()
    for i in range(60):
        np.savez(tmp_path / "shards" / f"s{i:02d}.npz", x=rng.standard_normal((300, 300)))
    process = uopgrad_process("eval", "slow.uop", "--map", "shards/*.npz", "-i", "w=w.npy", "--reduce", "none",
                              "-o", "out", cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not any(os.listdir(d) for d in glob.glob(str(tmp_path / ".out.*.tmp"))):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    process.send_signal(stop)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    assert err.decode().strip() == ("uopgrad: error: interrupted" if stop == signal.SIGINT
                                    else "uopgrad: error: stopped by SIGTERM")
    assert sorted(os.listdir(tmp_path)) == ["shards", "slow.uop", "w.npy"]


# ----------------------------------------------------------------------------- dask stays out

@needs_cli
def test_neither_import_uopcli_nor_eval_map_without_dask_imports_dask(tmp_path):
    grad = write_gradient(tmp_path / "grad.uop", 2)
    write_weights(tmp_path)
    write_shards(tmp_path / "shards", 2, 2)
    script = (
        "import sys, uopcli, uopcli.cli\n"
        "from uopcli.cli.app import main\n"
        "code = main.main(['eval', sys.argv[1], '--map', 'shards/*.npz', '-i', 'w1=w1.npy', '-i', 'w2=w2.npy',"
        " '--reduce', 'none', '-o', 'out'], standalone_mode=False)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "print(code, loaded, sorted(os.listdir('out')) if (os := __import__('os')) else None)\n")
    done = subprocess.run([sys.executable, "-c", script, str(grad)], cwd=tmp_path, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("\n")[0] == "0 [] ['part-00.npz', 'part-01.npz']"


def test_dask_missing_says_how_to_install_it(tmp_path):
    grad = write_gradient(tmp_path / "grad.uop", 2)
    script = ("import sys; sys.modules['distributed'] = None\n"
              "from uopcli.cli.app import main\n"
              "sys.exit(main.main(sys.argv[1:], standalone_mode=False))\n")
    done = subprocess.run([sys.executable, "-c", script, "eval", grad, "--map", "shards/*.npz", "--dask", "local:2"],
                          cwd=tmp_path, capture_output=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.decode().strip().endswith("pip install 'uopgrad[dask]'"), done.stderr.decode()
