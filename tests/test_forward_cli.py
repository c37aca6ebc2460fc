"""The forward-mode commands through the installed `uopgrad`: jvp, hvp, jacobian, hessian
files and what works on them downstream (eval, check --transpose / --hvp, simplify,
render with tangent nodes as their own family, export to ONNX run in onnxruntime); bad
input as one line, exit status 1 and no output file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from uopcli import UOp, dtypes
from uopcli.core.graph import Graph
from uopcli.formats.uop import load, save

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
pytestmark = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def uopgrad(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def ok(*args, cwd=None) -> subprocess.CompletedProcess:
    done = uopgrad(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done


def values(path, *specs, cwd=None) -> dict:
    done = ok("eval", path, *specs, "--json", cwd=cwd)
    return {k: np.array(v["values"]) for k, v in json.loads(done.stdout)["outputs"].items()}


@pytest.fixture
def work(tmp_path):
    """m.uop: y = x * x * w (vector) and loss = sum(sin(y)) ; x.npy, w.npy, v.npy."""
    x, w = UOp.param("x", (3,), dtypes.float64), UOp.param("w", (3,), dtypes.float64)
    y = x * x * w
    save(Graph({"y": y, "loss": y.sin().sum()}, inputs=[x, w]), tmp_path / "m.uop")
    np.save(tmp_path / "x.npy", np.array([1.0, 2.0, 3.0]))
    np.save(tmp_path / "w.npy", np.array([0.5, -0.25, 0.125]))
    np.save(tmp_path / "v.npy", np.array([1.0, -1.0, 2.0]))
    return tmp_path


def test_jvp_file_inputs_outputs_and_values(work):
    ok("jvp", "m.uop", "--wrt", "x", "--keep-forward", "-o", "jvp.uop", cwd=work)
    graph = load(work / "jvp.uop")
    assert graph.input_names == ["x", "w", "tangent_x"] and list(graph.outputs) == ["y", "loss", "jvp_y", "jvp_loss"]
    got = values("jvp.uop", "-i", "x=x.npy", "-i", "w=w.npy", "-i", "tangent_x=v.npy", cwd=work)
    x, w, v = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.25, 0.125]), np.array([1.0, -1.0, 2.0])
    np.testing.assert_allclose(got["jvp_y"], 2 * x * w * v, rtol=1e-14)
    np.testing.assert_allclose(got["jvp_loss"], np.sum(np.cos(x * x * w) * 2 * x * w * v), rtol=1e-14)


def test_hvp_file_and_its_finite_difference_check(work):
    ok("hvp", "m.uop", "--wrt", "x,w", "--of", "loss", "-o", "hvp.uop", cwd=work)
    graph = load(work / "hvp.uop")
    assert graph.input_names == ["x", "w", "tangent_x", "tangent_w"] and list(graph.outputs) == ["hvp_x", "hvp_w"]
    done = ok("check", "m.uop", "--wrt", "x,w", "--of", "loss", "--hvp", "--json", cwd=work)
    report = json.loads(done.stdout)
    assert report["check"] == "hvp" and report["passed"] and [t["target"] for t in report["targets"]] == ["x", "w"]
    assert all(t["max_rel_error"] < 1e-6 for t in report["targets"])


def test_check_transpose_on_the_samples():
    for sample in ("mlp", "attention", "rnn", "conv2d"):
        info = ok("info", SAMPLES / f"{sample}.uop").stdout
        inputs = next(line for line in info.splitlines() if line.startswith("inputs"))[len("inputs"):]
        floats = [part.split()[0] for part in inputs.split(", ") if " float" in f" {part.split()[1]}"]
        done = ok("check", SAMPLES / f"{sample}.uop", "--wrt", ",".join(floats), "--transpose")
        assert done.stdout.strip().splitlines()[-1].startswith("ok: jvp and diff"), done.stdout


def test_jacobian_and_hessian_files(work):
    ok("jacobian", "m.uop", "--wrt", "x,w", "--of", "y", "--chunk", "2", "-o", "jac.uop", cwd=work)
    got = values("jac.uop", "-i", "x=x.npy", "-i", "w=w.npy", cwd=work)
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.25, 0.125])
    np.testing.assert_allclose(got["jacobian_y_x"], np.diag(2 * x * w), rtol=1e-14)
    np.testing.assert_allclose(got["jacobian_y_w"], np.diag(x * x), rtol=1e-14)
    ok("hessian", "m.uop", "--wrt", "x", "--of", "loss", "-o", "hess.uop", cwd=work)
    (hess,) = values("hess.uop", "-i", "x=x.npy", "-i", "w=w.npy", cwd=work).values()
    y = x * x * w   # d2/dx2 sum(sin(x^2 w)) = diag(2w cos(y) - (2xw)^2 sin(y))
    np.testing.assert_allclose(hess, np.diag(2 * w * np.cos(y) - (2 * x * w) ** 2 * np.sin(y)), rtol=1e-12)


@pytest.mark.parametrize("command", ["jacobian", "hessian"])
def test_chunk_help_says_what_a_chunk_trades(command):
    """--chunk said it "bounds the memory of evaluating it"; measured, chunk 1 took 17 times
    the time and 5.6 times the memory of 256: a larger chunk is faster, a smaller one bounds
    only each intermediate tensor."""
    text = " ".join(ok(command, "--help").stdout.split())
    assert "bounds the memory" not in text
    assert "A larger chunk makes fewer nodes, faster to write and to evaluate" in text
    assert "a smaller chunk bounds the size of each intermediate tensor (about chunk x the largest activation)" in text


def test_blocks_large_in_all_get_a_note_of_their_total(work, monkeypatch):
    """Each block is held to --limit max_tensor_elements, not their sum: a Hessian of 9.4 GB
    in all was written without a word and failed in eval. Above forward.TOTAL_NOTE_BYTES
    (1 GiB, lowered here) one note says the total in values and bytes."""
    from click.testing import CliRunner
    from uopcli.cli import main
    from uopcli.cli.commands import forward
    assert forward.TOTAL_NOTE_BYTES == 1 << 30
    monkeypatch.chdir(work)

    def stderr(*args):
        done = CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)
        assert done.exit_code == 0, done.stderr
        return done.stderr
    hessian = ("hessian", "m.uop", "--wrt", "x,w", "--of", "loss", "-o", "h.uop")   # 4 blocks of 3x3 float64
    jacobian = ("jacobian", "m.uop", "--wrt", "x,w", "-o", "j.uop")                 # y: 2 of 3x3, loss: 2 of 3
    assert stderr(*hessian) == stderr(*jacobian) == ""
    monkeypatch.setattr(forward, "TOTAL_NOTE_BYTES", 36 * 8 - 1)
    assert stderr(*hessian) == ("uopgrad: the Hessian blocks hold 36 float64 values (288 bytes) in all: "
                                "evaluating them needs at least that memory\n")
    monkeypatch.setattr(forward, "TOTAL_NOTE_BYTES", 24 * 8 - 1)
    assert stderr(*jacobian) == ("uopgrad: the Jacobian blocks hold 24 float64 values (192 bytes) in all: "
                                 "evaluating them needs at least that memory\n")
    assert stderr(*jacobian, "--quiet") == ""
    monkeypatch.setattr(forward, "TOTAL_NOTE_BYTES", 36 * 8)        # at the threshold: no note
    assert stderr(*hessian) == ""
    big = UOp.param("b", (1001,), dtypes.float64)
    save(Graph({"s": big.sin().sum()}, inputs=[big]), work / "big.uop")
    monkeypatch.setattr(forward, "TOTAL_NOTE_BYTES", 1 << 20)
    assert "hold 1.00e6 float64 values (8.0 MB) in all" in stderr("hessian", "big.uop", "--wrt", "b", "-o", "bh.uop")


def test_a_note_names_the_values_beside_in_for_another_out(work):
    """hvp.npz beside hvp.uop holds the model's values, but jvp hvp.uop -o d3.uop writes no
    d3.npz: one note says to evaluate d3.uop with -i hvp.npz; none for OUT on stdout, for
    OUT of IN's stem (eval finds the .npz beside it), or without an .npz beside IN."""
    ok("hvp", "m.uop", "--wrt", "x", "--of", "loss", "-o", "hvp.uop", cwd=work)

    def notes(*args, cwd=work):  # (bytes: OUT may be stdout)
        done = subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stderr.decode().splitlines() if "holds the model's values" in line]
    assert notes("jvp", "hvp.uop", "--wrt", "x", "-o", "d3.uop") == []
    np.savez(work / "hvp.npz", x=np.load(work / "x.npy"), w=np.load(work / "w.npy"))
    note = "uopgrad: hvp.npz beside hvp.uop holds the model's values: evaluate {} with -i hvp.npz"
    commands = {"jvp": ("--wrt", "x"), "hvp": ("--wrt", "x", "--of", "hvp_x", "--cotangent", "ones"),
                "diff": ("--wrt", "x", "--of", "hvp_x", "--cotangent", "ones"),
                "jacobian": ("--wrt", "x"), "hessian": ("--wrt", "w", "--of", "hvp_x", "--cotangent", "ones")}
    for command, args in commands.items():
        assert notes(command, "hvp.uop", *args, "-o", "d3.uop") == [note.format("d3.uop")], command
        assert notes(command, "hvp.uop", *args) == []                         # OUT on stdout
        assert notes(command, "hvp.uop", *args, "-o", "hvp.json") == []       # IN's stem: eval finds hvp.npz
        assert ok(command, "hvp.uop", *args, "-o", "d3.uop", "--quiet", cwd=work).stderr == ""
    assert notes("jvp", work / "hvp.uop", "--wrt", "x", "-o", work / "d4.uop", cwd=work.parent) == [
        f"uopgrad: {work / 'hvp.npz'} beside {work / 'hvp.uop'} holds the model's values: "
        f"evaluate {work / 'd4.uop'} with -i {work / 'hvp.npz'}"]
    ok("jvp", "hvp.uop", "--wrt", "x", "-o", "d3.uop", cwd=work)
    assert values("d3.uop", "-i", "hvp.npz", "--random", cwd=work)            # what the note says runs


def test_a_matrix_over_the_limit_is_refused_in_one_line_writing_nothing(work):
    done = uopgrad("jacobian", "m.uop", "--wrt", "x", "--of", "y", "--limit", "max_tensor_elements=8",
                   "-o", "jac.uop", cwd=work)
    assert done.returncode == 1 and not (work / "jac.uop").exists()
    assert done.stderr.count("\n") == 1 and "jacobian_y_x would hold 9 elements (72 bytes of float64)" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_call_with_its_own_backward_body_is_refused_in_one_line(tmp_path):
    done = uopgrad("jvp", SAMPLES / "ste.uop", "--wrt", "w", "-o", tmp_path / "out.uop")
    assert done.returncode == 1 and not (tmp_path / "out.uop").exists()
    assert done.stderr.startswith("uopgrad: error: ") and done.stderr.count("\n") == 1
    assert "has its own backward body" in done.stderr and "ste.uop" in done.stderr


def test_a_non_scalar_hvp_needs_a_cotangent(work):
    done = uopgrad("hvp", "m.uop", "--wrt", "x", "--of", "y", "-o", "h.uop", cwd=work)
    assert done.returncode == 1 and "needs a floating-point scalar" in done.stderr and not (work / "h.uop").exists()
    ok("hvp", "m.uop", "--wrt", "x", "--of", "y", "--cotangent", "input", "-o", "h.uop", cwd=work)
    assert load(work / "h.uop").input_names == ["x", "w", "cotangent_y", "tangent_x"]


def test_bad_input_to_each_command_is_one_line_exit_1_and_no_file(tmp_path):
    """An unknown --wrt name, an integer --wrt input, a truncated file, a non-scalar
    Hessian without --cotangent, a block over the limit: for each of jvp, hvp, jacobian
    and hessian, one line `uopgrad: error: ...` naming the file and what is wrong, exit
    status 1, no traceback, and no output file (a file already there is left as it was)."""
    x, n = UOp.param("x", (3,), dtypes.float64), UOp.param("n", (3,), dtypes.int32)
    y = x * n.cast(dtypes.float64)
    save(Graph({"y": y, "loss": y.sin().sum()}, inputs=[x, n]), tmp_path / "m.uop")
    whole = (tmp_path / "m.uop").read_bytes()
    (tmp_path / "cut.uop").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "kept.uop").write_bytes(b"old")
    of = {"jvp": ["--of", "y"], "hvp": ["--of", "loss"], "jacobian": ["--of", "y"], "hessian": ["--of", "loss"]}
    for command in ("jvp", "hvp", "jacobian", "hessian"):
        bad = [(["m.uop", "--wrt", "nope", *of[command]], "no input named 'nope'"),
               (["m.uop", "--wrt", "n", *of[command]], "input 'n' is int32[3]: only floating-point inputs"),
               (["cut.uop", "--wrt", "x", *of[command]], "cut.uop: truncated: the file ends inside the value of the key 'nodes'")]
        if command in ("hvp", "hessian"):
            bad.append((["m.uop", "--wrt", "x", "--of", "y"], "output 'y' is float64[3]: a Hessian needs a "
                                                                "floating-point scalar"))
        if command in ("jacobian", "hessian"):
            bad.append((["m.uop", "--wrt", "x", *of[command], "--limit", "max_tensor_elements=8"],
                        "would hold 9 elements (72 bytes of float64), above max_tensor_elements 8"))
        for k, (args, message) in enumerate(bad):
            for out in ("out.uop", "kept.uop")[: 2 if k == 0 else 1]:
                done = uopgrad(command, *args, "-o", out, cwd=tmp_path)
                assert done.returncode == 1, (command, args, done.stderr)
                assert done.stderr.startswith("uopgrad: error: ") and done.stderr.count("\n") == 1, done.stderr
                assert message in done.stderr and "Traceback" not in done.stderr, (command, done.stderr)
                assert done.stdout == "" and not (tmp_path / "out.uop").exists()
                assert (tmp_path / "kept.uop").read_bytes() == b"old"


def test_simplify_and_render_the_new_files(work):
    ok("hvp", "m.uop", "--wrt", "x,w", "--of", "loss", "-o", "hvp.uop", cwd=work)
    ok("hvp", "m.uop", "--wrt", "x,w", "--of", "loss", "--simplify", "-o", "small.uop", cwd=work)
    assert len(load(work / "small.uop").nodes()) < len(load(work / "hvp.uop").nodes())
    feed = ["-i", "x=x.npy", "-i", "w=w.npy", "-i", "tangent_x=v.npy", "-i", "tangent_w=v.npy"]
    for name, value in values("hvp.uop", *feed, cwd=work).items():
        np.testing.assert_allclose(values("small.uop", *feed, cwd=work)[name], value, rtol=1e-12)
    ok("render", "hvp.uop", "-o", "hvp.dot", cwd=work)
    dot = (work / "hvp.dot").read_text()
    assert 'style="filled,dotted" penwidth=2.6 color="#1f78b4"' in dot and "∂" in dot and "tangent node" in dot
    ok("render", "m.uop", "-o", "m.dot", cwd=work)
    assert "#1f78b4" not in (work / "m.dot").read_text()   # a forward graph has no tangent nodes
    ok("render", "hvp.uop", "-o", "hvp.html", cwd=work)
    page = (work / "hvp.html").read_text()
    assert "isTangent" in page and '"∂' in page    # the viewer's tangent class, and the nodes' scope


def test_an_hvp_of_an_onnx_model_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("onnx", reason="onnx is not installed (make test installs it where it can)")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (make test installs it where it can)")
    model = SAMPLES / "onnx" / "mlp-dynamo18.onnx"
    # a ReLU MLP is piecewise linear in each layer: its curvature is in the cross terms
    ok("hvp", model, "--wrt", "fc1.weight,fc2.weight", "--cotangent", "ones", "-o", tmp_path / "hvp.onnx")
    ok("hvp", model, "--wrt", "fc1.weight,fc2.weight", "--cotangent", "ones", "-o", tmp_path / "hvp.uop")
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((3, 8)).astype(np.float32),
            "tangent_fc1.weight": rng.standard_normal((16, 8)).astype(np.float32),
            "tangent_fc2.weight": rng.standard_normal((4, 16)).astype(np.float32)}
    session = ort.InferenceSession(str(tmp_path / "hvp.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(feed)
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    for name, array in feed.items():
        np.save(tmp_path / f"{name}.npy", array)
    ours = values(tmp_path / "hvp.uop", *[f"-i{n}={tmp_path / n}.npy" for n in feed], "-i", f"{tmp_path}/hvp.npz")
    assert set(theirs) == {"hvp_fc1.weight", "hvp_fc2.weight"}
    for name in theirs:
        np.testing.assert_allclose(theirs[name], ours[name], rtol=1e-4, atol=1e-5)
    assert np.abs(theirs["hvp_fc1.weight"]).max() > 1e-3 and np.abs(theirs["hvp_fc2.weight"]).max() > 1e-3


def test_check_hvp_and_check_of_an_empty_target(tmp_path):
    """A --wrt input with no elements (x: [0,3]) beside one with some: `check` and `check
    --hvp` say ok (the reference evaluator once indexed element 0 of the empty factor of
    a contracted product: an internal error), and the HVP of the other input is its own."""
    x, v = UOp.param("x", (0, 3), dtypes.float64), UOp.param("v", (3,), dtypes.float64)
    save(Graph({"loss": (x * v).sum() + (v * v * v).sum()}, inputs=[x, v]), tmp_path / "m.uop")
    np.save(tmp_path / "v.npy", np.array([1.0, -2.0, 0.5]))
    np.save(tmp_path / "t.npy", np.array([3.0, 1.0, -1.0]))
    for flag in ([], ["--hvp"], ["--transpose"]):
        done = ok("check", "m.uop", "--wrt", "x,v", *flag, "-i", "v=v.npy", cwd=tmp_path)
        assert done.stdout.splitlines()[-1].startswith("ok: "), done.stdout
    ok("hvp", "m.uop", "--wrt", "x,v", "-o", "h.uop", cwd=tmp_path)
    got = values("h.uop", "-i", "x=0", "-i", "v=v.npy", "-i", "tangent_v=t.npy", "-i", "tangent_x=0", cwd=tmp_path)
    assert got["hvp_x"].size == 0 and np.array_equal(got["hvp_v"], 6 * np.array([1.0, -2.0, 0.5]) * [3, 1, -1])


def test_check_hvp_and_transpose_together_is_a_usage_error(work):
    """check --hvp --transpose ran only --hvp, without a word."""
    for flags in (["--hvp", "--transpose"], ["--transpose", "--hvp", "--json"]):
        done = uopgrad("check", "m.uop", "--wrt", "x", "--of", "loss", *flags, cwd=work)
        assert done.returncode == 2 and "give one of --hvp and --transpose" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "ok" not in done.stdout


def test_check_options_of_the_gradient_comparison_are_refused_with_a_forward_check(work):
    """--samples, --directions and --literal shape check's finite-difference comparison of
    the gradient; --hvp and --transpose ignored them without a word."""
    for flag in ("--hvp", "--transpose"):
        for extra, named in ((["--samples", "4"], "--samples is"), (["--literal", "--directions", "3"],
                                                                     "--directions and --literal are")):
            done = uopgrad("check", "m.uop", "--wrt", "x", "--of", "loss", flag, *extra, cwd=work)
            assert done.returncode == 2 and done.stdout == "", done.stderr
            assert done.stderr.startswith(f"uopgrad: error: {named} for check's gradient comparison, not {flag}")
    assert ok("check", "m.uop", "--wrt", "x", "--of", "loss", "--samples", "4", cwd=work).returncode == 0


def test_check_hvp_weights_a_non_scalar_output_as_check_does(work):
    """`check` weights a non-scalar output by seeded random cotangents; `check --hvp` does
    the same (it refused, pointing at a --cotangent option check has not got), and the HVP
    it checks is that of sum(u * y) for those u."""
    for flag in ([], ["--hvp"]):
        done = ok("check", "m.uop", "--wrt", "x,w", "--of", "y", *flag, cwd=work)
        assert done.stdout.splitlines()[-1].startswith("ok: "), done.stdout
    report = json.loads(ok("check", "m.uop", "--wrt", "x", "--of", "y", "--hvp", "--json", cwd=work).stdout)
    assert report["passed"] and report["of"] == ["y"] and [t["target"] for t in report["targets"]] == ["x"]
    assert all(t["max_rel_error"] < 1e-5 for t in report["targets"])


@pytest.mark.parametrize("command", ["jvp", "hvp", "jacobian", "hessian"])
def test_an_input_the_output_does_not_depend_on_is_noted(tmp_path, command):
    """--wrt naming an input the output does not depend on (or only through DETACH) writes
    zeros for it, as diff does, and says so as diff does (it said nothing: a misspelt or
    unused weight gave a zero Hessian block without a word); an input it depends on is not
    noted."""
    x, u, d = (UOp.param(name, (3,), dtypes.float64) for name in ("x", "u", "d"))
    save(Graph({"loss": (x * x).sum() + (d.detach() * x).sum()}, inputs=[x, u, d]), tmp_path / "m.uop")
    done = uopgrad(command, "m.uop", "--wrt", "x,u,d", "-o", "out.uop", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "uopgrad: derivatives of loss with respect to u are identically zero: not reached",
        "uopgrad: derivatives of loss with respect to d are identically zero: reached only through DETACH"]
    tangents = [f"tangent_{n}=1" for n in "xud"] if command in ("jvp", "hvp") else []
    outputs = values(tmp_path / "out.uop", *(a for spec in ("x=1", "u=2", "d=3", *tangents) for a in ("-i", spec)),
                     cwd=tmp_path)
    zero = {"jvp": [], "hvp": ["hvp_u", "hvp_d"], "jacobian": ["jacobian_loss_u", "jacobian_loss_d"],
            "hessian": [f"hessian_{a}_{b}" for a in "xud" for b in "xud" if "x" not in (a, b) or a != b]}[command]
    for name in zero:
        assert not np.any(outputs[name]), name
    done = uopgrad(command, "m.uop", "--wrt", "x", "-o", "out.uop", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize("command", ["jvp", "jacobian"])
def test_an_input_one_of_several_outputs_depends_on_is_not_noted(tmp_path, command):
    x, u = (UOp.param(name, (3,), dtypes.float64) for name in ("x", "u"))
    save(Graph({"a": (u * u).sum(), "b": x.sum()}, inputs=[x, u]), tmp_path / "m.uop")
    done = uopgrad(command, "m.uop", "--wrt", "u", "-o", "out.uop", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    done = uopgrad(command, "m.uop", "--wrt", "u", "--of", "b", "-o", "out.uop", cwd=tmp_path)
    assert done.stderr == "uopgrad: derivatives of b with respect to u are identically zero: not reached\n"


@pytest.mark.parametrize("command, wrt", [("hessian", "w1,w2"), ("jacobian", "w1")])
def test_limit_bounds_every_tensor_of_the_file_not_only_the_blocks(tmp_path, command, wrt):
    """--limit max_tensor_elements lowers --chunk so that no tensor of the file exceeds it:
    it bounded the blocks alone, and `uopgrad --limit ... eval` refused the file `hessian
    --limit ...` had written (intermediates of 131,072 elements, chunk x an activation, and
    the whole n x n identity the basis was cut from). The values are the default chunk's."""
    mlp = Path(__file__).resolve().parent.parent / "samples" / "mlp.uop"
    limit = "max_tensor_elements=70000"
    ok(command, mlp, "--wrt", wrt, "--chunk", "1000", "--limit", limit, "-o", "bounded.uop", cwd=tmp_path)
    ok(command, mlp, "--wrt", wrt, "-o", "default.uop", cwd=tmp_path)
    graph = load(tmp_path / "bounded.uop")
    assert max(int(np.prod(node.shape)) for node in graph.nodes() if node.shape is not None) <= 70000
    assert max(int(np.prod(node.shape)) for node in load(tmp_path / "default.uop").nodes()
               if node.shape is not None) > 70000  # the case bounds something
    bounded = ok("--limit", limit, "eval", "bounded.uop", "--random", "--json", cwd=tmp_path)
    default = ok("eval", "default.uop", "--random", "--json", cwd=tmp_path)
    bounded, default = (json.loads(done.stdout)["outputs"] for done in (bounded, default))
    assert list(bounded) == list(default)
    for name in default:  # float32 products over another batch of directions: their last bits may differ
        np.testing.assert_allclose(bounded[name]["values"], default[name]["values"], rtol=1e-5, atol=1e-6)
