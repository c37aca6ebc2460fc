"""No command writes over a file it reads (cli/io.py's one policy), tested through the installed
`uopgrad`: -o, --report and the weights beside OUT naming IN, the values beside a .uop IN, an
-i, --values or --constant file, or a shard, are a usage error (exit 2) in one line naming
both, and every file is left byte for byte; convert and simplify still write IN in place.
Beside it, what a newcomer's CI runs found near it: the weights of an ONNX IN beside an OUT
that is a device or a descriptor (none: a note, as for stdout), beside an OUT named .npz
(OUT itself: refused), eval -o not named .npz (refused), an OUT name of 231 to 255 bytes
(its temporary now fits), and an empty IN or OUT (a usage error naming it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from uopcli import UOp
from uopcli.core.graph import Graph
from uopcli.formats.uop import load, loads, save

ROOT = Path(__file__).resolve().parent.parent
UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
MLP_ONNX = ROOT / "samples" / "onnx" / "mlp-legacy17.onnx"  # weights fc1.weight, fc1.bias, fc2.weight, fc2.bias

pytestmark = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def uopgrad(cwd: Path, *args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{os.path.dirname(UOPGRAD)}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, env=env, input=stdin, capture_output=True,
                          timeout=120)


def sh(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{os.path.dirname(UOPGRAD)}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          timeout=120)


def files(directory: Path) -> dict:
    """Every file under `directory`, by its relative path, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def refused(run: subprocess.CompletedProcess, line: str, code: int = 2) -> None:
    """Exit `code`, nothing on stdout, and stderr exactly the one line `uopgrad: error: {line}`."""
    assert (run.returncode, run.stderr.decode()) == (code, f"uopgrad: error: {line}\n")
    assert run.stdout == b""


def usage(command: str) -> str:
    return f" (see 'uopgrad {command} --help')"


@pytest.fixture
def work(tmp_path):
    """m.uop, y = sum(x*x*w), with m.npz beside it (the model's values, as convert writes
    them); x.npy, w.npy; vals.npz (eval --keep-intermediates'); shards/a.npz."""
    x, w = UOp.param("x", (3,)), UOp.param("w", (3,))
    save(Graph({"y": (x * x * w).sum()}, inputs=[x, w]), tmp_path / "m.uop")
    np.savez(tmp_path / "m.npz", w=np.array([1, 10, 100], np.float32))
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    np.save(tmp_path / "w.npy", np.array([1, 10, 100], np.float32))
    (tmp_path / "shards").mkdir()
    np.savez(tmp_path / "shards" / "a.npz", x=np.array([1, 2, 3], np.float32))
    done = uopgrad(tmp_path, "eval", "m.uop", "-i", "m.npz", "-i", "x=x.npy", "--keep-intermediates", "-o", "vals.npz")
    assert done.returncode == 0, done.stderr.decode()
    return tmp_path


def reshape_model(path: Path) -> None:
    """rs.onnx: t = sum(reshape(x [3, 4], shape)), shape an input that --constant fixes."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T, helper as h
    graph = h.make_graph([h.make_node("Reshape", ["x", "shape"], ["r"]), h.make_node("ReduceSum", ["r"], ["t"], keepdims=0)],
                         "rs", [h.make_tensor_value_info("x", T.FLOAT, [3, 4]),
                                h.make_tensor_value_info("shape", T.INT64, [2])],
                         [h.make_tensor_value_info("t", T.FLOAT, [])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), path)


# ----------------------------------------------------------------------------- an output naming a file read

IS_IN = "is IN: writing it would replace the file read; give -o another file"
BESIDE = "is the model's values beside IN m.uop: writing it would replace the file read; give -o another file"

REFUSALS = [  # (arguments, the error line without its "(see ...)")
    (["eval", "m.uop", "--random", "-o", "m.uop"], f"-o m.uop {IS_IN}"),
    (["eval", "m.uop", "--random", "-o", "./sub/../m.uop"], f"-o ./sub/../m.uop {IS_IN}"),
    (["eval", "m.uop", "--random", "-o", "hard.uop"], f"-o hard.uop {IS_IN}"),  # a hard link to m.uop
    (["eval", "m.uop", "--map", "shards/*.npz", "-i", "w=w.npy", "-o", "m.uop"], f"-o m.uop {IS_IN}"),
    (["eval", "m.uop", "--map", "shards/*.npz", "-i", "w=w.npy", "-o", "shards/a.npz"],
     "-o shards/a.npz is the shard shards/a.npz: writing it would replace the file read; give -o another file"),
    (["eval", "m.uop", "-i", "m.npz", "-i", "x=x.npy", "-o", "x.npy"],
     "-o x.npy is the file -i x=x.npy reads: writing it would replace the file read; give -o another file"),
    (["eval", "m.uop", "--random", "-o", "m.npz"], f"-o m.npz {BESIDE}"),
    (["diff", "m.uop", "--wrt", "w", "-o", "g.uop", "--report", "m.uop"],
     "--report m.uop is IN: writing it would replace the file read; give --report another file"),
    (["diff", "m.uop", "--wrt", "w", "-o", "m.npz"], f"-o m.npz {BESIDE}"),
    (["diff", "m.uop", "--wrt", "w", "--report", "m.npz"],
     "--report m.npz is the model's values beside IN m.uop: writing it would replace the file read; give --report "
     "another file"),
    (["jvp", "m.uop", "--wrt", "w", "-o", "m.uop"], f"-o m.uop {IS_IN}"),
    (["hvp", "m.uop", "--wrt", "w", "-o", "m.npz"], f"-o m.npz {BESIDE}"),
    (["jacobian", "m.uop", "--wrt", "w", "-o", "m.uop"], f"-o m.uop {IS_IN}"),
    (["hessian", "m.uop", "--wrt", "w", "-o", "m.npz"], f"-o m.npz {BESIDE}"),
    (["convert", "m.uop", "-o", "m.npz"], f"-o m.npz {BESIDE}"),        # in place of IN, not of the values
    (["simplify", "m.uop", "-o", "m.npz"], f"-o m.npz {BESIDE}"),
    (["render", "m.uop", "--format", "dot", "-o", "m.uop"], f"-o m.uop {IS_IN}"),
    (["render", "m.uop", "--format", "html", "--values", "vals.npz", "-o", "vals.npz"],
     "-o vals.npz is the file --values reads: writing it would replace the file read; give -o another file"),
]


@pytest.mark.parametrize("args, line", REFUSALS, ids=[" ".join(args) for args, _ in REFUSALS])
def test_an_output_naming_a_file_the_command_reads_is_refused_and_every_file_kept(work, args, line):
    """`eval model.onnx --random -o model.onnx` replaced the model with an .npz, exit 0; diff
    --report IN, render -o its --values file, and -o the model's values beside IN (the only
    copy of a converted model's weights) did the same."""
    (work / "sub").mkdir()
    os.link(work / "m.uop", work / "hard.uop")
    before = files(work)
    refused(uopgrad(work, *args), line + usage(args[0]))
    assert files(work) == before


def test_the_weights_beside_a_converted_model_are_not_replaced_by_a_gradient(tmp_path):
    """The newcomer's slip: `convert model.onnx -o model.uop` wrote the weights as model.npz;
    `diff model.uop ... -o model.npz` replaced them with a MessagePack graph, exit 0."""
    assert uopgrad(tmp_path, "convert", MLP_ONNX, "-o", "model.uop").returncode == 0
    before = files(tmp_path)
    assert sorted(before) == ["model.npz", "model.uop"]
    run = uopgrad(tmp_path, "diff", "model.uop", "--wrt", "fc1.weight", "--cotangent", "ones", "-o", "model.npz")
    refused(run, "-o model.npz is the model's values beside IN model.uop: writing it would replace the file read; "
                 "give -o another file" + usage("diff"))
    assert files(tmp_path) == before


def test_an_onnx_model_read_is_not_replaced_by_evals_values(tmp_path):
    shutil.copy(MLP_ONNX, tmp_path / "model.onnx")
    before = files(tmp_path)
    refused(uopgrad(tmp_path, "eval", "model.onnx", "--random", "-o", "model.onnx"),
            f"-o model.onnx {IS_IN}" + usage("eval"))
    assert files(tmp_path) == before


def test_a_constant_file_is_not_replaced(tmp_path):
    reshape_model(tmp_path / "rs.onnx")
    np.save(tmp_path / "shape.npy", np.array([2, 6], np.int64))
    before = files(tmp_path)
    run = uopgrad(tmp_path, "eval", "rs.onnx", "--constant", "shape=shape.npy", "-i", "x=1", "-o", "shape.npy")
    refused(run, "-o shape.npy is the file --constant shape=shape.npy reads: writing it would replace the file read; "
                 "give -o another file" + usage("eval"))
    assert files(tmp_path) == before
    done = uopgrad(tmp_path, "eval", "rs.onnx", "--constant", "shape=shape.npy", "-i", "x=1", "-o", "t.npz")
    assert done.returncode == 0, done.stderr.decode()


def test_convert_and_simplify_still_write_in_place(work):
    done = uopgrad(work, "convert", "m.uop", "--to", "json", "-o", "m.uop")
    assert done.returncode == 0 and (work / "m.uop").read_bytes().lstrip().startswith(b"{")
    done = uopgrad(work, "simplify", "m.uop", "-o", "./m.uop")
    assert done.returncode == 0 and (work / "m.uop").read_bytes().startswith(b"\x85")  # MessagePack again
    assert load(work / "m.uop").output_names == ["y"]


def test_rerunning_eval_replaces_its_own_outputs_beside_in(work):
    """`eval h.uop -o h.npz` wrote h's outputs beside h.uop; the same command again was
    refused (exit 2) as if h.npz were h's weights. An .npz beside IN that holds a value for
    none of IN's inputs is not the model's values: the rerun replaces it, and its values are
    still d2/dx2 sum(x x w) = diag(2 w), as torch.func.hessian gives it."""
    torch = pytest.importorskip("torch")
    assert uopgrad(work, "hessian", "m.uop", "--wrt", "x", "-o", "h.uop").returncode == 0
    command = ("eval", "h.uop", "-i", "m.npz", "-i", "x=x.npy", "-o", "h.npz")
    for _ in range(2):
        run = uopgrad(work, *command)
        assert (run.returncode, run.stderr) == (0, b"")
        with np.load(work / "h.npz") as got:
            assert list(got) == ["hessian_x_x"]
            hess = got["hessian_x_x"]
    w = torch.tensor(np.load(work / "w.npy"), dtype=torch.float64)
    want = torch.func.hessian(lambda x: (x * x * w).sum())(torch.tensor(np.load(work / "x.npy"), dtype=torch.float64))
    np.testing.assert_array_equal(hess, want.numpy())
    # and what is written of h.uop does not call h.npz its values (jvp's note), while m.npz is m.uop's (diff's)
    run = uopgrad(work, "jvp", "h.uop", "--wrt", "x", "-o", "j.uop")
    assert (run.returncode, b"h.npz" in run.stderr) == (0, False), run.stderr.decode()
    run = uopgrad(work, "diff", "m.uop", "--wrt", "x", "-o", "g.uop")
    assert b"m.npz beside m.uop holds the model's values: evaluate g.uop with -i m.npz" in run.stderr


@pytest.mark.parametrize("held", ["values", "no npz"])
def test_the_file_beside_in_is_kept_when_it_may_be_the_models_values(work, held):
    """h.npz holding a value of an input of h.uop (w, as convert writes it), or a file that
    is no .npz (nothing says what it is), stays the model's values: refused, kept."""
    assert uopgrad(work, "hessian", "m.uop", "--wrt", "x", "-o", "h.uop").returncode == 0
    if held == "values":
        shutil.copy(work / "m.npz", work / "h.npz")
    else:
        (work / "h.npz").write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    before = files(work)
    refused(uopgrad(work, "eval", "h.uop", "-i", "w=w.npy", "-i", "x=x.npy", "-o", "h.npz"),
            "-o h.npz is the model's values beside IN h.uop: writing it would replace the file read; give -o "
            "another file" + usage("eval"))
    assert files(work) == before


# ----------------------------------------------------------------------------- the weights beside OUT

def test_an_out_whose_weights_would_be_itself_is_refused(tmp_path):
    """`diff model.onnx ... -o grad.npz`: the weights "beside" OUT were OUT, and replaced the
    graph just written (exit 0); from a file and from stdin, for diff and convert."""
    shutil.copy(MLP_ONNX, tmp_path / "model.onnx")
    before = files(tmp_path)
    why = ("an ONNX model's weights go beside a .uop OUT as OUT.npz, here {out} itself, which would replace the "
           "graph; give -o {stem}.uop (the weights then in {stem}.npz) or -o {stem}.onnx (which holds them)")
    run = uopgrad(tmp_path, "diff", "model.onnx", "--wrt", "fc1.weight", "--cotangent", "ones", "-o", "grad.npz")
    refused(run, "-o grad.npz: " + why.format(out="grad.npz", stem="grad") + usage("diff"))
    run = uopgrad(tmp_path, "convert", "model.onnx", "-o", "model.NPZ.npz")
    refused(run, "-o model.NPZ.npz: " + why.format(out="model.NPZ.npz", stem="model.NPZ") + usage("convert"))
    run = uopgrad(tmp_path, "jvp", "-", "--wrt", "fc1.weight", "-o", "j.npz", stdin=before["model.onnx"])
    refused(run, "-o j.npz: " + why.format(out="j.npz", stem="j") + usage("jvp"))
    assert files(tmp_path) == before
    run = uopgrad(tmp_path, "diff", "model.onnx", "--wrt", "fc1.weight", "--cotangent", "ones", "-o", "g.uop",
                  "--report", "./g.npz")
    refused(run, "g.npz, the model's weights beside -o g.uop, is also --report ./g.npz: one would replace the other; "
                 "give --report another file" + usage("diff"))
    run = uopgrad(tmp_path, "diff", "model.onnx", "--wrt", "fc1.weight", "--cotangent", "ones", "-o", "g.uop",
                  "--report", "g.npz")
    refused(run, "g.npz, the model's weights beside -o g.uop, is also --report g.npz: one would replace the other; "
                 "give --report another file" + usage("diff"))
    assert files(tmp_path) == before
    done = uopgrad(tmp_path, "convert", "model.onnx", "-o", "model.uop")  # the rule's own case still works
    assert done.returncode == 0 and sorted(files(tmp_path)) == ["model.npz", "model.onnx", "model.uop"]


def test_an_onnx_model_told_by_its_bytes_is_refused_before_any_work(tmp_path):
    """IN is read by its bytes: an ONNX model named `model` (or model.uop) is read as ONNX, so
    -o grad.npz would be its graph and its weights at once. The refusal came only after the
    import and the differentiation (the early check went by the name); it comes first now:
    a model with an op the importer refuses gets the -o line, exit 2, not the import's."""
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("Bernoulli", ["x"], ["y"])  # refused on import: random values
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    why = ("an ONNX model's weights go beside a .uop OUT as OUT.npz, here grad.npz itself, which would replace the "
           "graph; give -o grad.uop (the weights then in grad.npz) or -o grad.onnx (which holds them)")
    for name in ("model", "model.uop"):
        onnx.save(model, tmp_path / name)
        before = files(tmp_path)
        run = uopgrad(tmp_path, "diff", name, "--wrt", "x", "--cotangent", "ones", "-o", "grad.npz")
        refused(run, "-o grad.npz: " + why + usage("diff"))
        assert files(tmp_path) == before
        (tmp_path / name).unlink()


WEIGHTS_NOTE = ("uopgrad: the model's weights are not written with OUT {out}, which is not a file (nothing beside it "
                "holds them): give -o FILE to get FILE.npz beside it\n")


def test_no_weights_beside_a_descriptor_or_a_fifo(tmp_path):
    """`convert model.onnx -o /dev/null` made /dev/null.npz, `-o /dev/stdout` /dev/stdout.npz,
    and `-o >(consumer)` failed on /dev/fd/63.npz: such an OUT is written as stdout is, the
    weights left out with a note (and named in the graph's meta, for eval to say)."""
    shutil.copy(MLP_ONNX, tmp_path / "model.onnx")
    piped = sh("uopgrad convert model.onnx -o - > piped.uop", tmp_path)
    assert piped.returncode == 0
    done = sh("uopgrad convert model.onnx -o /dev/stdout > stdout.uop", tmp_path)
    assert (done.returncode, done.stderr.decode()) == (0, WEIGHTS_NOTE.format(out="/dev/stdout"))
    assert (tmp_path / "stdout.uop").read_bytes() == (tmp_path / "piped.uop").read_bytes()  # as -o - writes it
    done = sh("uopgrad convert model.onnx -o >(cat > fd.uop) && wait", tmp_path)
    assert done.returncode == 0 and done.stderr.decode().startswith("uopgrad: the model's weights are not written "
                                                                    "with OUT /dev/fd/")
    os.mkfifo(tmp_path / "out.fifo")
    got = []
    reader = threading.Thread(target=lambda: got.append((tmp_path / "out.fifo").read_bytes()))
    reader.start()
    done = uopgrad(tmp_path, "diff", "model.onnx", "--wrt", "fc1.weight", "--cotangent", "ones", "-o", "out.fifo")
    reader.join(60)
    assert (done.returncode, done.stderr.decode()) == (0, WEIGHTS_NOTE.format(out="out.fifo"))
    assert loads(got[0]).output_names == ["grad_fc1.weight"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fd.uop", "model.onnx", "out.fifo", "piped.uop",
                                                          "stdout.uop"]  # no out.npz, no fd.npz
    assert (tmp_path / "fd.uop").read_bytes() == (tmp_path / "piped.uop").read_bytes()


# ----------------------------------------------------------------------------- eval -o is an .npz

def test_eval_o_not_named_npz_is_refused(work):
    """`eval -o results.json` wrote a zip archive under that name, exit 0."""
    before = files(work)
    for out, hint in (("results.json", "results.npz, or print them with --json > results.json"), ("y.npy", "y.npz"),
                      ("out", "out.npz")):
        for mapped in ([], ["--map", "shards/*.npz"]):
            run = uopgrad(work, "eval", "m.uop", *mapped, "-i", "m.npz", "-i", "x=x.npy", "-o", out)
            refused(run, f"-o {out}: eval writes its outputs as an .npz archive, whatever the name; give -o {hint}"
                    + usage("eval"))
    assert files(work) == before
    done = sh("uopgrad eval m.uop -i m.npz -i x=x.npy -o UPPER.NPZ && uopgrad eval m.uop -i m.npz -i x=x.npy -o - "
              "> piped.npz && uopgrad eval m.uop -i m.npz -i x=x.npy -o /dev/stdout > stdout.npz", work)
    assert done.returncode == 0, done.stderr.decode()
    assert (work / "UPPER.NPZ").read_bytes() == (work / "piped.npz").read_bytes() == (work / "stdout.npz").read_bytes()


# ----------------------------------------------------------------------------- long names, empty names

def test_an_out_name_of_255_bytes_is_written(work):
    """A legal 231-255-byte OUT failed "File name too long": its temporary name was longer."""
    name_max = os.pathconf(work, "PC_NAME_MAX")
    graph, values, directory = "g" * (name_max - 4) + ".uop", "v" * (name_max - 4) + ".npz", "d" * name_max
    done = sh(f"uopgrad diff m.uop --wrt x -o {graph} && uopgrad diff m.uop --wrt x -o short.uop && "
              f"uopgrad eval m.uop -i m.npz -i x=x.npy -o {values}", work)
    assert done.returncode == 0, done.stderr.decode()
    assert (work / graph).read_bytes() == (work / "short.uop").read_bytes()
    for _ in range(2):  # the second replaces the directory: its temporary and the old one's name fit too
        done = uopgrad(work, "eval", "m.uop", "--map", "shards/*.npz", "-i", "m.npz", "--reduce", "none", "-o",
                       directory)
        assert done.returncode == 0, done.stderr.decode()
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == []  # no temporary left
    assert os.listdir(work / directory) == ["a.npz"]


def test_a_temporary_name_is_cut_by_characters_within_the_limit(tmp_path):
    from uopcli.formats.atomic import temporary_beside
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    for base in ("é" * ((name_max - 4) // 2) + ".uop", "g" * name_max, "short.uop"):
        temp = os.path.basename(temporary_beside(str(tmp_path / base), reserve=4))
        assert len(os.fsencode(temp)) + 4 <= name_max and temp.endswith(".tmp") and temp.startswith("." + base[:3])
    assert os.path.basename(temporary_beside(str(tmp_path / "short.uop"))).startswith(".short.uop.")


@pytest.mark.parametrize("args, line", [
    (["diff", "m.uop", "--wrt", "x", "-o", ""], "-o is an empty path: name a file (or - for stdout)"),
    (["diff", "m.uop", "--wrt", "x", "--report", ""], "--report is an empty path: name a file (or - for stdout)"),
    (["eval", "m.uop", "--random", "-o", ""], "-o is an empty path: name a file (or - for stdout)"),
    (["convert", "m.uop", "-o", ""], "-o is an empty path: name a file (or - for stdout)"),
    (["render", "m.uop", "--format", "html", "--values", "", "-o", "p.html"], "--values is an empty path: name a file"),
    (["diff", "", "--wrt", "x", "-o", "g.uop"], "IN is an empty path: name a file (or - for stdin)"),
    (["info", ""], "IN is an empty path: name a file (or - for stdin)"),
    (["validate", ""], "IN is an empty path: name a file (or - for stdin)"),
])
def test_an_empty_path_is_a_usage_error_naming_its_option(work, args, line):
    """-o "" said ": cannot write: Is a directory" (exit 1), IN "" "cannot read: No such file"."""
    before = files(work)
    refused(uopgrad(work, *args), line + usage(args[0]))
    assert files(work) == before
