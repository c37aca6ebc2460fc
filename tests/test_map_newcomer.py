"""`eval --map` / map_graph defects a newcomer found, each against numpy: an OUT directory's
sub-directory named like an .npz (never removed), a sum of bool outputs (a count, as
np.sum), float16 sums and means (float64, rounded once: no overflow where the exact result
is finite), two outputs stored under one name (refused), 0-d outputs (always an ndarray),
and the OUT refusals (one line naming OUT)."""

from __future__ import annotations

import functools
import json
import os
import re

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.errors import EvaluationError
from uopcli.formats.uop import save
from uopcli.tools.map import MapError, map_graph

from _map_helpers import UOPGRAD, uopgrad

needs_cli = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def write(directory, arrays_per_shard: list[dict]) -> list[str]:
    directory.mkdir(exist_ok=True)
    paths = []
    for i, arrays in enumerate(arrays_per_shard):
        paths.append(str(directory / f"s{i:02d}.npz"))
        np.savez(paths[-1], **arrays)
    return paths


def identity_graph(n: int, dtype, total: bool = True) -> Graph:
    h = UOp.param("h", (n,), dtype)
    return Graph({"h": h * 1, **({"total": h.sum()} if total else {})}, inputs=[h])


def leftovers(directory) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(".")]


# ----------------------------------------------------------------------------- 10: OUT's sub-directories

@pytest.mark.parametrize("kind", ["directory", "link to a file", "link to a directory"])
def test_reduce_none_never_replaces_what_is_not_a_regular_npz_file(tmp_path, kind):
    paths = write(tmp_path / "s", [{"h": np.ones(3, np.float32)}] * 2)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.npz").write_bytes(b"an earlier output")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    if kind == "directory":
        (out / "archive.npz").mkdir()
        (out / "archive.npz" / "notes.txt").write_text("keep me")
    elif kind == "link to a file":
        (out / "archive.npz").symlink_to(precious / "notes.txt")
    else:
        (out / "archive.npz").symlink_to(precious)
    what = "a directory" if kind == "directory" else "a symbolic link"
    with pytest.raises(MapError, match=f"^{out}: holds 'archive.npz' \\({what}\\), which this run did not write"):
        map_graph(identity_graph(3, dtypes.float32), paths, reduce="none", out_dir=str(out))
    assert sorted(os.listdir(out)) == ["archive.npz", "old.npz"]
    assert (out / "archive.npz" / "notes.txt").read_text() == "keep me" if kind == "directory" else True
    assert (precious / "notes.txt").read_text() == "keep me" and leftovers(tmp_path) == []


def test_reduce_none_still_replaces_a_directory_of_its_own_outputs(tmp_path):
    paths = write(tmp_path / "s", [{"h": np.full(3, i, np.float32)} for i in range(2)])
    out = tmp_path / "out"
    for _ in range(2):  # the second run replaces the first one's files
        map_graph(identity_graph(3, dtypes.float32), paths, reduce="none", out_dir=str(out))
    assert sorted(os.listdir(out)) == ["s00.npz", "s01.npz"]
    assert np.load(out / "s01.npz")["h"].tolist() == [1, 1, 1] and leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- 01: bools count

@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_a_sum_of_bool_outputs_counts_as_numpys_sum(tmp_path, count):
    rng = np.random.default_rng(count)
    shards = [rng.integers(-3, 4, 6).astype(np.int32) for _ in range(count)]
    a = UOp.param("a", (6,), dtypes.int32)
    graph = Graph({"pos": a > 0, "any": (a > 0).sum()}, inputs=[a])
    outputs = map_graph(graph, write(tmp_path / "s", [{"a": s} for s in shards])).outputs
    expected = np.sum([s > 0 for s in shards], axis=0)  # numpy (and torch.sum) count bools in int64
    assert outputs["pos"].dtype == np.int64 and expected.dtype == np.int64
    assert outputs["pos"].tolist() == expected.tolist()
    assert outputs["any"].tolist() == sum(int((s > 0).sum()) for s in shards)  # the graph's own count, summed


# ----------------------------------------------------------------------------- 02: float16 in float64

def float16_edges(rng, n: int) -> np.ndarray:
    """float16 values over the whole range: subnormals, -0.0, the largest finite ones."""
    bits = rng.integers(0, 0x7C00, n, dtype=np.uint16) | (rng.integers(0, 2, n, dtype=np.uint16) << 15)
    values = bits.view(np.float16)
    values[:4] = [-0.0, 6e-8, 65504, -65504]
    return values


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_float16_sum_and_mean_are_numpys_float64_rounded_once(tmp_path, count):
    rng = np.random.default_rng(count)
    shards = [float16_edges(rng, 64) for _ in range(count)]
    if count > 1:  # a column every shard has -0.0 in: the sum keeps its sign
        for s in shards:
            s[0] = -0.0
    paths = write(tmp_path / "s", [{"h": s} for s in shards])
    # the shards added in float64 (exact for these): np.sum would start from +0.0, and turn a sum of -0.0s
    # into +0.0, where the map (as for float32, test_map_mutants) adds the shards themselves: -0.0 stays
    exact = functools.reduce(np.add, [s.astype(np.float64) for s in shards])
    for reduce, expected in (("sum", exact), ("mean", exact / count)):
        got = map_graph(identity_graph(64, dtypes.float16), paths, reduce=reduce).outputs["h"]
        assert got.dtype == np.float16
        with np.errstate(over="ignore"):  # a sum past 65504 rounds to inf
            assert got.tobytes() == expected.astype(np.float16).tobytes(), reduce


def test_a_float16_mean_of_large_values_does_not_overflow(tmp_path):
    paths = write(tmp_path / "s", [{"h": np.array([30000, 2, 65504], np.float16)}] * 5)
    outputs = map_graph(identity_graph(3, dtypes.float16), paths, reduce="mean").outputs
    assert outputs["h"].tolist() == [30000, 2, 65504]
    total = map_graph(identity_graph(3, dtypes.float16), paths).outputs["h"]
    assert total.tobytes() == np.array([np.inf, 10, np.inf], np.float16).tobytes()  # 150000 > 65504: inf, as numpy
    if UOPGRAD is not None:  # the command too, with no RuntimeWarning of numpy's on stderr
        save(identity_graph(3, dtypes.float16, total=False), str(tmp_path / "h.uop"))  # each shard finite
        done = uopgrad("eval", "h.uop", "--map", "s/*.npz", "--reduce", "mean", "--json", cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, b"")
        assert json.loads(done.stdout)["outputs"]["h"]["values"] == [30000, 2, 65504]
        done = uopgrad("eval", "h.uop", "--map", "s/*.npz", "--json", cwd=tmp_path)  # the sum: inf, and said so
        assert json.loads(done.stdout)["outputs"]["h"]["values"] == ["inf", 10, "inf"]
        assert (done.returncode, done.stderr.decode()) == (0, OVERFLOWED.format("h (float16)"))


OVERFLOWED = "uopgrad: the sum over the shards overflowed to inf (or nan) in {}, though every shard's value is finite\n"


@needs_cli
def test_cli_a_float32_sum_that_overflows_is_noted_in_one_line(tmp_path):
    write(tmp_path / "s", [{"h": np.array([3e38, -3e38, 1], np.float32)}] * 2)
    save(identity_graph(3, dtypes.float32, total=False), str(tmp_path / "h.uop"))
    done = uopgrad("eval", "h.uop", "--map", "s/*.npz", "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["outputs"]["h"]["values"] == ["inf", "-inf", 2]  # as numpy's float32 adds
    assert (done.returncode, done.stderr.decode()) == (0, OVERFLOWED.format("h (float32)"))


# ----------------------------------------------------------------------------- 14: one stored name

@pytest.mark.parametrize("tuple_first", [True, False])
def test_two_outputs_stored_under_one_name_are_refused(tmp_path, tuple_first):
    x = UOp.param("x", (2,), dtypes.float32)
    pair = UOp.trace_function("two", lambda a: (a * 2, a * 3), x)
    outputs = {"t": pair, "t[0]": x * 100} if tuple_first else {"t[0]": x * 100, "t": pair}
    graph = Graph(outputs, inputs=[x])
    paths = write(tmp_path / "s", [{"x": np.ones(2, np.float32)}] * 2)
    first, second = ("t", "t[0]") if tuple_first else ("t[0]", "t")
    message = f"outputs '{first}' and '{second}' would both be stored as 't[0]': rename one of them"
    with pytest.raises(EvaluationError, match=re.escape(message)):
        map_graph(graph, paths, reduce="none", out_dir=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    if UOPGRAD is not None and tuple_first:
        save(graph, str(tmp_path / "g.uop"))
        for args in (["--map", "s/*.npz"], ["-i", paths[0]]):
            done = uopgrad("eval", "g.uop", *args, "-o", "o.npz", cwd=tmp_path)
            assert done.returncode == 1 and not (tmp_path / "o.npz").exists()
            assert done.stderr.decode() == f"uopgrad: error: g.uop: {message}\n"


def test_a_tuple_output_alone_is_stored_element_by_element(tmp_path):
    x = UOp.param("x", (2,), dtypes.float32)
    graph = Graph({"t": UOp.trace_function("two", lambda a: (a * 2, a * 3), x), "u": x * 100}, inputs=[x])
    paths = write(tmp_path / "s", [{"x": np.array([1, -2], np.float32)}] * 3)
    outputs = map_graph(graph, paths).outputs
    assert {k: v.tolist() for k, v in outputs.items()} == {"t[0]": [6, -12], "t[1]": [9, -18], "u": [300, -600]}


# ----------------------------------------------------------------------------- 11: always an ndarray

@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_0d_output_is_an_ndarray_whatever_the_number_of_shards(tmp_path, count, reduce):
    shards = [np.arange(4, dtype=np.float32) + i for i in range(count)]
    outputs = map_graph(identity_graph(4, dtypes.float32), write(tmp_path / "s", [{"h": s} for s in shards]),
                        reduce=reduce).outputs
    total = outputs["total"]
    assert type(total) is np.ndarray and total.shape == () and total.dtype == np.float32
    expected = np.float32(sum(s.sum() for s in shards)) / (np.float32(count) if reduce == "mean" else 1)
    assert total.item() == expected
    total[...] = 0  # writable, as an array is


# ----------------------------------------------------------------------------- 03: OUT named in refusals

@needs_cli
def test_cli_refusals_of_out_name_out_in_one_line(tmp_path):
    write(tmp_path / "s", [{"h": np.ones(3, np.float32)}] * 2)
    save(identity_graph(3, dtypes.float32), str(tmp_path / "g.uop"))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    (tmp_path / "lnk").symlink_to(tmp_path / "data")
    cases = {"nodir/sub": "nodir/sub: cannot write: No such file or directory",
             "afile/sub": "afile/sub: cannot write: Not a directory",
             "data": "data: holds 'notes.txt', which this run did not write: refusing to replace a directory that "
                     "holds anything but .npz files",
             "lnk": f"lnk: is a symbolic link: --reduce none replaces the directory itself; give -o the directory "
                    f"it points to ({os.path.realpath(tmp_path / 'data')})"}
    for out, message in cases.items():
        done = uopgrad("eval", "g.uop", "--map", "s/*.npz", "--reduce", "none", "-o", out, cwd=tmp_path)
        assert (done.returncode, done.stderr.decode()) == (1, f"uopgrad: error: {message}\n"), out
    assert sorted(os.listdir(tmp_path)) == ["afile", "data", "g.uop", "lnk", "s"]
    assert os.listdir(tmp_path / "data") == ["notes.txt"]
