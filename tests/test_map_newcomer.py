"""`eval --map` / map_graph defects a newcomer found, each against numpy: an OUT directory's
sub-directory named like an .npz (never removed), a sum of bool outputs (a count, as
np.sum), float16 sums and means (float64, rounded once: no overflow where the exact result
is finite), two outputs stored under one name (refused), 0-d outputs (always an ndarray),
and the OUT refusals (one line naming OUT)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
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
