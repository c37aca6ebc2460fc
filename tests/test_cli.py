"""uopgrad's commands through click's CliRunner: every command, every error the issue names.

Graphs are built with the builder API and saved with the real file format; results are
checked as numbers (evaluated gradients against known derivatives), not as structure.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
import re

import numpy as np
import pytest
from click.testing import CliRunner

import uopcli
from uopcli import UOp, dtypes
from uopcli.cli import main
from uopcli.backends.numpy import evaluate_graph
from uopcli.formats.uop import load, save
from uopcli.core.graph import Graph

COMMANDS = ["diff", "eval", "check", "info", "print", "convert", "validate", "render"]


def run(*args, input=None):
    runner = CliRunner()
    return runner.invoke(main, list(map(str, args)), input=input, catch_exceptions=False)


def error_line(result) -> str:
    """The one error line; fails when stderr holds anything else."""
    text = result.stderr.strip()
    assert "\n" not in text, text
    assert text.startswith("uopgrad: error: "), text
    return text


# ----------------------------------------------------------------------------- graphs

def cube_graph() -> Graph:
    """y = x**3 for a scalar x: y' = 3x^2, y'' = 6x."""
    x = UOp.param("x", (), dtypes.float32)
    return Graph({"y": x * x * x}, inputs=[x])


def vector_graph() -> Graph:
    """Outputs prod = x*w (non-scalar) and loss = sum(x*w) + sum(x); inputs x, w, z (unused), d (detached)."""
    x, w = UOp.param("x", (3,)), UOp.param("w", (3,))
    z, d = UOp.param("z", (3,)), UOp.param("d", (3,))
    prod = x * w
    loss = prod.sum() + x.sum() + d.detach().sum()
    return Graph({"prod": prod, "loss": loss}, inputs=[x, w, z, d])


def function_graph() -> Graph:
    x = UOp.param("x", (2, 2))
    call = UOp.trace_function("square", lambda a: a * a, x)
    return Graph({"s": call.gettuple(0).sum()}, inputs=[x])


def bad_backward_graph() -> Graph:
    """A CALL whose backward body is wrong (gives g instead of 2*x*g): check must fail."""
    x = UOp.param("x", (4,))
    call = UOp.trace_call("square", lambda a: a * a, lambda a, g: g, x)
    return Graph({"s": call.gettuple(0).sum()}, inputs=[x])


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name, graph in {"cube": cube_graph(), "vec": vector_graph(), "fn": function_graph(),
                        "bad": bad_backward_graph()}.items():
        paths[name] = tmp_path / f"{name}.uop"
        save(graph, paths[name])
    paths["dir"] = tmp_path
    return paths


# ----------------------------------------------------------------------------- group

def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"uopgrad {uopcli.__version__}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_has_an_example(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.stdout and f"uopgrad {command}" in result.stdout.split("Example:")[1]
    assert "--quiet" in result.stdout and "--debug" in result.stdout


def test_group_help_and_unknown_command():
    assert "Example:" in run("--help").stdout
    bare = run()
    assert bare.exit_code == 2 and "Usage: uopgrad" in bare.stderr and "Commands:" in bare.stderr
    result = run("frobnicate")
    assert result.exit_code == 2
    assert "frobnicate" in error_line(result)


def test_usage_errors_exit_2_with_one_line(files):
    result = run("diff", files["cube"])                 # --wrt missing
    assert result.exit_code == 2 and "--wrt" in error_line(result)
    result = run("diff", files["cube"], "--wrt", "x", "--bogus")
    assert result.exit_code == 2 and "--bogus" in error_line(result)
    result = run("diff", files["cube"], "--wrt", "x,,y")
    assert result.exit_code == 2 and "--wrt" in error_line(result)
    result = run("eval", files["cube"], "--json", "-o", files["dir"] / "o.npz")
    assert result.exit_code == 2 and "either" in error_line(result)


# ----------------------------------------------------------------------------- diff

def test_diff_outputs_grads_in_wrt_order_and_keeps_inputs(files):
    out = files["dir"] / "g.uop"
    result = run("diff", files["vec"], "--of", "loss", "--wrt", "w,x", "-o", out)
    assert result.exit_code == 0, result.stderr
    grad = load(out)
    assert grad.output_names == ["grad_w", "grad_x"]
    assert grad.input_names == ["x", "w", "z", "d"]
    x, w = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    values = evaluate_graph(grad, {"x": x, "w": w, "z": x, "d": x})
    np.testing.assert_allclose(values["grad_w"], x)
    np.testing.assert_allclose(values["grad_x"], w + 1)


def test_diff_to_stdout_and_json_form(files):
    result = run("diff", files["cube"], "--wrt", "x")
    assert result.exit_code == 0
    assert load(result.stdout_bytes).output_names == ["grad_x"]
    out = files["dir"] / "g.json"
    assert run("diff", files["cube"], "--wrt", "x", "-o", out).exit_code == 0
    assert out.read_bytes().lstrip().startswith(b"{")


def test_diff_stats_times_each_step_on_stderr_and_changes_nothing_else(files):
    plain = run("diff", files["vec"], "--of", "loss", "--wrt", "x", "--quiet")
    started = time.perf_counter()
    timed = run("diff", files["vec"], "--of", "loss", "--wrt", "x", "--quiet", "--stats")
    elapsed = time.perf_counter() - started
    assert timed.exit_code == 0, timed.stderr
    assert timed.stdout_bytes == plain.stdout_bytes  # the graph on stdout, untouched
    lines = timed.stderr.strip().splitlines()
    assert lines[0].split() == ["step", "wall", "CPU"]
    rows = [re.fullmatch(r"(\w+) +(\d+\.\d{3}) s +(\d+\.\d{3}) s", line) for line in lines[1:]]
    assert all(rows), lines
    assert [row[1] for row in rows] == ["reading", "differentiating", "encoding", "writing"]
    walls = [float(row[2]) for row in rows]
    assert all(wall >= 0 and float(row[3]) >= 0 for wall, row in zip(walls, rows))
    # the steps are parts of the command: together no longer than the whole (+ rounding)
    assert sum(walls) <= elapsed + 0.002 * len(walls)


def test_diff_keep_forward_puts_forward_outputs_first(files):
    result = run("diff", files["vec"], "--of", "loss", "--wrt", "x", "--keep-forward")
    assert load(result.stdout_bytes).output_names == ["prod", "loss", "grad_x"]


def test_diff_several_outputs_without_of_lists_them(files):
    result = run("diff", files["vec"], "--wrt", "x")
    assert result.exit_code == 1
    line = error_line(result)
    assert "prod" in line and "loss" in line and "--of" in line and "vec.uop" in line


def test_diff_non_scalar_needs_a_cotangent(files):
    result = run("diff", files["vec"], "--of", "prod", "--wrt", "x")
    assert result.exit_code == 1
    line = error_line(result)
    assert "prod" in line and "not a scalar" in line and "--cotangent" in line


def test_diff_cotangent_ones_and_input(files):
    ones = load(run("diff", files["vec"], "--of", "prod", "--wrt", "x", "--cotangent", "ones").stdout_bytes)
    x, w = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    feed = {"x": x, "w": w, "z": x, "d": x}
    np.testing.assert_allclose(evaluate_graph(ones, feed)["grad_x"], w)
    given = load(run("diff", files["vec"], "--of", "prod", "--wrt", "x", "--cotangent", "input").stdout_bytes)
    assert given.input_names == ["x", "w", "z", "d", "cotangent_prod"]
    cot = np.array([1, -1, 2], np.float32)
    np.testing.assert_allclose(evaluate_graph(given, {**feed, "cotangent_prod": cot})["grad_x"], w * cot)


def test_diff_several_outputs_add_up(files):
    result = run("diff", files["vec"], "--of", "loss,prod", "--cotangent", "ones", "--wrt", "x,w")
    grad = load(result.stdout_bytes)
    x, w = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    values = evaluate_graph(grad, {"x": x, "w": w, "z": x, "d": x})
    np.testing.assert_allclose(values["grad_x"], 2 * w + 1)   # loss gives w + 1, prod gives w
    np.testing.assert_allclose(values["grad_w"], 2 * x)


def test_diff_second_derivative(files):
    first = files["dir"] / "d1.uop"
    assert run("diff", files["cube"], "--wrt", "x", "-o", first).exit_code == 0
    result = run("diff", first, "--of", "grad_x", "--cotangent", "ones", "--wrt", "x")
    assert result.exit_code == 0, result.stderr
    second = load(result.stdout_bytes)
    value = evaluate_graph(second, {"x": np.array(2.0, np.float32)})["grad_x"]
    assert float(value) == pytest.approx(12.0)


def test_diff_reports_zero_gradients(files):
    report = files["dir"] / "report.json"
    result = run("diff", files["vec"], "--of", "loss", "--wrt", "x,z,d", "--report", report, "-o",
                 files["dir"] / "g.uop")
    assert result.exit_code == 0
    assert "z is identically zero: not reached" in result.stderr
    assert "d is identically zero: reached only through DETACH" in result.stderr
    data = json.loads(report.read_text())
    assert data["zero_gradients"] == [{"target": "z", "reason": "not reached"},
                                      {"target": "d", "reason": "reached only through DETACH"}]
    quiet = run("diff", files["vec"], "--of", "loss", "--wrt", "x,z", "--quiet", "-o", files["dir"] / "g2.uop")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_diff_writes_the_graph_and_its_report_together_or_neither(files, tmp_path):
    """A report that cannot be written (no such directory, a directory) leaves the graph
    file as it was, and a report naming the graph's own file is refused before any work."""
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    graph = tmp_path / "keep.uop"
    graph.write_bytes(b"OLD")
    (tmp_path / "adir").mkdir()
    for report, why in ((tmp_path / "nodir" / "r.json", "No such file or directory"), (tmp_path / "adir", "Is a directory")):
        result = run("diff", files["cube"], "--wrt", "x", "-o", graph, "--report", report)
        assert result.exit_code == 1 and error_line(result) == f"uopgrad: error: {report}: cannot write: {why}"
        assert graph.read_bytes() == b"OLD" and sorted(p.name for p in tmp_path.iterdir()) == ["adir", "keep.uop"]
    same = run("diff", files["cube"], "--wrt", "x", "-o", graph, "--report", graph)
    assert same.exit_code == 2 and "--report and -o name the same file" in same.stderr and graph.read_bytes() == b"OLD"
    both = run("diff", files["cube"], "--wrt", "x", "-o", tmp_path / "g.uop", "--report", tmp_path / "r.json")
    assert both.exit_code == 0 and load(tmp_path / "g.uop").output_names == ["grad_x"]
    assert json.loads((tmp_path / "r.json").read_text())["zero_gradients"] == []


def test_usage_mistakes_exit_2_and_options_that_would_do_nothing_are_refused(files, tmp_path):
    out = tmp_path / "o.svg"
    for args, words in ((["eval", files["cube"], "-i", "x"], "'x' must look like NAME=VALUE"),
                        (["check", files["cube"], "--wrt", "x", "-i", "=3"], "'=3' must look like NAME=VALUE"),
                        (["eval", files["cube"], "-i", "x=1", "--seed", "5"], "--seed is the seed of --random"),
                        (["render", files["vec"], "-o", out, "--around", "x", "--outputs", "loss"],
                         "give either --outputs or --around, not both"),
                        (["render", files["vec"], "-o", out, "--depth", "3"], "--depth is the distance for --around")):
        result = run(*args)
        assert result.exit_code == 2 and words in error_line(result), (args, result.stderr)
        assert not out.exists()
    noted = run("diff", files["cube"], "--wrt", "x", "--cotangent", "ones", "-o", tmp_path / "g.uop")
    assert noted.exit_code == 0 and noted.stderr == (
        "uopgrad: --cotangent ones has no effect: the outputs differentiated are scalars (seeded with 1)\n")


def test_damaged_npy_and_npz_inputs_are_named_in_one_line(files, tmp_path):
    np.savez(tmp_path / "d.npz", x=np.float32(2))
    whole = (tmp_path / "d.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[:50])
    flipped = bytearray(whole)
    flipped[60] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(bytes(flipped))
    (tmp_path / "text.npz").write_text("hello")
    np.save(tmp_path / "v.npy", np.zeros((2,), np.float32))
    (tmp_path / "bad.npy").write_bytes((tmp_path / "v.npy").read_bytes().replace(b"(2,)", b"(2, "))
    for name, words in (("cut.npz", "a damaged file (BadZipFile: File is not a zip file)"),
                        ("crc.npz", "a damaged file (BadZipFile: Bad CRC-32 for file 'x.npy')"),
                        ("text.npz", "not a .npz file (it does not start with a zip archive's bytes)"),
                        ("bad.npy", "a damaged file (")):
        result = run("eval", files["cube"], "-i", f"x={tmp_path / name}")
        assert result.exit_code == 1 and f"input 'x': cannot read {tmp_path / name}: {words}" in error_line(result)
        assert "internal error" not in result.stderr


def test_diff_unknown_and_integer_targets(files, tmp_path):
    result = run("diff", files["cube"], "--wrt", "nope")
    assert result.exit_code == 1 and "nope" in error_line(result) and "inputs: x" in error_line(result)
    n = UOp.param("n", (2,), dtypes.int32)
    path = tmp_path / "int.uop"
    save(Graph({"s": n.cast(dtypes.float32).sum()}, inputs=[n]), path)
    result = run("diff", path, "--wrt", "n")
    assert result.exit_code == 1 and "int32" in error_line(result)


def test_call_without_backward_is_named(tmp_path):
    x = UOp.param("x", (3,))
    call = UOp.trace_call("opaque", lambda a: a * a, None, x)
    path = tmp_path / "opaque.uop"
    save(Graph({"s": call.gettuple(0).sum()}), path)
    result = run("diff", path, "--wrt", "x", "-o", tmp_path / "g.uop")
    assert result.exit_code == 1 and "opaque" in error_line(result) and "opaque.uop" in error_line(result)
    assert not (tmp_path / "g.uop").exists()


def test_missing_and_corrupt_files_name_the_file(files, tmp_path):
    result = run("info", tmp_path / "absent.uop")
    assert result.exit_code == 1 and "absent.uop" in error_line(result)
    corrupt = tmp_path / "corrupt.uop"
    corrupt.write_bytes(b"\x93not a uop file")
    result = run("diff", corrupt, "--wrt", "x")
    assert result.exit_code == 1 and "corrupt.uop" in error_line(result)
    result = run("validate", "-", input=b'{"format": "uop", "version": 7}')
    assert result.exit_code == 1 and "<stdin>" in error_line(result)


def test_debug_shows_a_traceback(tmp_path):
    corrupt = tmp_path / "corrupt.uop"
    corrupt.write_bytes(b"garbage")
    quiet = run("validate", corrupt)
    assert "Traceback" not in quiet.stderr
    loud = run("--debug", "validate", corrupt)
    assert loud.exit_code == 1 and "Traceback" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1].startswith("uopgrad: error: ")
    assert "Traceback" in run("validate", corrupt, "--debug").stderr


# ----------------------------------------------------------------------------- atomic outputs

def test_failing_command_leaves_existing_output_alone(files):
    out = files["dir"] / "keep.uop"
    out.write_bytes(b"precious")
    result = run("diff", files["vec"], "--wrt", "x", "-o", out)  # fails: several outputs
    assert result.exit_code == 1
    assert out.read_bytes() == b"precious"
    new = files["dir"] / "new.uop"
    assert run("diff", files["vec"], "--wrt", "x", "-o", new).exit_code == 1
    assert not new.exists()
    assert not [p for p in files["dir"].iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("command", [["diff", "--wrt", "x"], ["convert"], ["eval", "-i", "x=2"]])
def test_unwritable_output_is_named_in_the_error_not_its_temporary_file(files, command):
    """The error names the path the user gave (a missing directory, a directory), never
    the hidden temporary file the atomic write goes through."""
    for out in (files["dir"] / "no-such-dir" / "out.uop", files["dir"]):
        if command[0] == "eval":
            out = out.with_suffix(".npz") if out != files["dir"] else out
        result = run(command[0], files["cube"], *command[1:], "-o", out)
        assert result.exit_code == 1
        line = error_line(result)
        assert line.startswith(f"uopgrad: error: {out}: "), line
        assert ".tmp" not in line
    assert not [p for p in files["dir"].iterdir() if p.name.endswith(".tmp")]


def test_output_to_a_fifo_is_written_in_place(files, tmp_path):
    """A FIFO (like /dev/null or /dev/stdout, not a regular file) is written to, never
    renamed over: the node must still be a FIFO afterwards."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run("convert", files["cube"], "--to", "json", "-o", fifo)
    reader.join(timeout=10)
    assert result.exit_code == 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received and received[0].lstrip().startswith(b"{")


def test_output_through_a_symlink_replaces_its_target(files, tmp_path):
    real = tmp_path / "real.uop"
    real.write_bytes(b"old")
    link = tmp_path / "link.uop"
    link.symlink_to(real)
    assert run("convert", files["cube"], "-o", link).exit_code == 0
    assert link.is_symlink() and real.read_bytes() == files["cube"].read_bytes()


def test_output_may_name_the_input_where_it_is_the_same_graph(files):
    """convert and simplify write IN in place (the same graph, in another form or smaller);
    diff's OUT is another function: -o IN would replace the model with its gradient."""
    source = files["cube"]
    assert run("convert", source, "--to", "json", "-o", source).exit_code == 0
    assert source.read_bytes().lstrip().startswith(b"{")
    names = load(source).output_names
    assert run("simplify", source, "-o", source).exit_code == 0 and load(source).output_names == names
    kept = source.read_bytes()
    result = run("diff", source, "--wrt", "x", "-o", source)
    assert result.exit_code == 2 and f"-o {source} is IN: writing it would replace the file read" in error_line(result)
    assert source.read_bytes() == kept


# ----------------------------------------------------------------------------- eval

def test_eval_value_forms(files, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    np.savez(tmp_path / "vals.npz", w=np.array([4, 5, 6], np.float32), other=np.array([1, 1, 1], np.float32))
    result = run("eval", files["vec"], "-i", f"x={tmp_path / 'x.npy'}", "-i", f"w={tmp_path / 'vals.npz'}",
                 "-i", f"z={tmp_path / 'vals.npz'}:other", "-i", "d=0.5", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["outputs"]
    assert out["prod"] == {"dtype": "float32", "shape": [3], "values": [4.0, 10.0, 18.0]}
    assert out["loss"]["values"] == pytest.approx(32 + 6 + 1.5)


def test_eval_table_and_stats(files):
    result = run("eval", files["cube"], "-i", "x=2", "--stats")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "shape", "dtype", "min", "mean", "max", "values"]
    assert lines[1].split() == ["y", "[]", "float32", "8", "8", "8", "8"]
    assert len(lines) == 2  # the time is a diagnostic, on stderr: stdout is the same table every run
    assert re.fullmatch(r"time [0-9.]+ ms, peak live bytes \d+ \([0-9.]+ [KMG]?i?B\)\n", result.stderr)
    started = time.perf_counter()
    stats = json.loads(run("eval", files["vec"], "-i", "x=1.5", "-i", "w=2", "-i", "z=0", "-i", "d=1",
                           "--stats", "--json").stdout)["stats"]
    elapsed = time.perf_counter() - started
    assert 0 < stats["seconds"] <= elapsed
    # the evaluator made prod (3 float32) and held it while computing loss from it
    assert stats["peak_bytes"] >= 12


def test_eval_writes_npz(files):
    out = files["dir"] / "out.npz"
    result = run("eval", files["vec"], "-i", "x=1", "-i", "w=2", "-i", "z=0", "-i", "d=0", "-o", out)
    assert result.exit_code == 0 and result.stdout == ""
    with np.load(out) as archive:
        assert archive.files == ["prod", "loss"]
        np.testing.assert_allclose(archive["prod"], [2, 2, 2])
    # stdout: the same archive bytes
    piped = run("eval", files["vec"], "-i", "x=1", "-i", "w=2", "-i", "z=0", "-i", "d=0", "-o", "-")
    assert piped.stdout_bytes == out.read_bytes()


def test_eval_refuses_an_output_that_is_an_input_file(files, monkeypatch):
    """eval -i gg.npz -o gg.npz overwrote the values it read (exit 0): every way -i names a
    file (a bare data.npz, NAME=data.npz, NAME=data.npz:key, NAME=x.npy), compared by real
    path, is a usage error that writes nothing."""
    d = files["dir"]
    monkeypatch.chdir(d)
    np.savez(d / "data.npz", x=np.ones(3, np.float32), w=np.ones(3, np.float32))
    np.save(d / "z.npy", np.zeros(3, np.float32))
    os.symlink(d / "data.npz", d / "link.npz")
    rest = ["-i", "z=0", "-i", "d=0"]
    before = (d / "data.npz").read_bytes()
    for inputs, output in ((["-i", "data.npz"], "data.npz"),
                           (["-i", "x=data.npz", "-i", "w=1"], "./data.npz"),
                           (["-i", "x=data.npz:w", "-i", "w=1"], d / "data.npz"),
                           (["-i", "data.npz"], "link.npz"),
                           (["-i", "data.npz", "-i", "z=z.npy", "-i", "d=0"], "z.npy")):
        result = run("eval", files["vec"], *inputs, *rest, "-o", output)
        assert result.exit_code == 2 and f"-o {output} is the file -i " in error_line(result), result.stderr
        assert (d / "data.npz").read_bytes() == before and np.load(d / "z.npy").tolist() == [0, 0, 0]
    result = run("eval", files["vec"], "-i", "data.npz", *rest, "-o", "out.npz")   # another file: fine
    assert result.exit_code == 0 and (d / "out.npz").exists()


def test_eval_missing_inputs_list_shape_and_dtype(files):
    result = run("eval", files["vec"], "-i", "x=1")
    assert result.exit_code == 1
    line = error_line(result)
    assert "w float32[3]" in line and "z float32[3]" in line and "d float32[3]" in line and "--random" in line
    assert "x float32" not in line


def test_eval_random_is_seeded(files):
    first = run("eval", files["vec"], "--random", "--seed", "3", "--json").stdout
    assert first == run("eval", files["vec"], "--random", "--seed", "3", "--json").stdout
    assert first != run("eval", files["vec"], "--random", "--seed", "4", "--json").stdout
    # a value given for one input does not change the random values of the others
    a = json.loads(run("eval", files["vec"], "--random", "--json").stdout)["outputs"]["prod"]["values"]
    b = json.loads(run("eval", files["vec"], "--random", "-i", "z=9", "--json").stdout)["outputs"]["prod"]["values"]
    assert a == b


def test_eval_wrong_values_name_the_input(files, tmp_path):
    np.save(tmp_path / "bad_shape.npy", np.zeros((4,), np.float32))
    np.save(tmp_path / "bad_dtype.npy", np.zeros((3,), np.float64))
    result = run("eval", files["vec"], "--random", "-i", f"x={tmp_path / 'bad_shape.npy'}")
    assert result.exit_code == 1 and "'x'" in error_line(result) and "float32[4]" in error_line(result)
    result = run("eval", files["vec"], "--random", "-i", f"w={tmp_path / 'bad_dtype.npy'}")
    assert result.exit_code == 1 and "'w'" in error_line(result) and "float64[3]" in error_line(result)
    result = run("eval", files["vec"], "--random", "-i", "q=1")
    assert result.exit_code == 1 and "'q'" in error_line(result)
    result = run("eval", files["vec"], "--random", "-i", "x")  # wrong usage, before any reading
    assert result.exit_code == 2 and "NAME=VALUE" in error_line(result)
    result = run("eval", files["vec"], "--random", "-i", "x=banana")
    assert result.exit_code == 1 and "banana" in error_line(result)
    result = run("eval", files["vec"], "--random", "-i", f"x={tmp_path / 'none.npy'}")
    assert result.exit_code == 1 and "none.npy" in error_line(result)
    np.savez(tmp_path / "v.npz", a=np.zeros(3, np.float32))
    result = run("eval", files["vec"], "--random", "-i", f"x={tmp_path / 'v.npz'}")
    assert result.exit_code == 1 and "no member 'x'" in error_line(result)


# ----------------------------------------------------------------------------- check

def test_check_passes_and_is_deterministic(files):
    result = run("check", files["vec"], "--of", "loss", "--wrt", "x,w", "--seed", "1")
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("ok")
    assert result.stdout == run("check", files["vec"], "--of", "loss", "--wrt", "x,w", "--seed", "1").stdout
    report = json.loads(run("check", files["fn"], "--wrt", "x", "--json").stdout)
    assert report["passed"] and report["targets"][0]["target"] == "x" and report["targets"][0]["samples"] == 4


def test_check_of_an_output_not_there_is_one_line_naming_the_outputs(files):
    """--of naming no output: "no output named", as diff says it, also on the way to the
    progress bar's length (it divided by the work of evaluating no output: an internal error)."""
    for extra in ([], ["--directions", "0"], ["--json"]):
        result = run("check", files["vec"], "--of", "nosuch", "--wrt", "x", *extra)
        assert result.exit_code == 1 and "no output named 'nosuch'; outputs: " in error_line(result), result.output
        assert "internal error" not in result.output


def test_check_non_scalar_output_uses_random_cotangents(files):
    result = run("check", files["vec"], "--of", "prod", "--wrt", "x,w", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["passed"]


def test_check_fails_on_a_wrong_gradient(files):
    result = run("check", files["bad"], "--wrt", "x", "--samples", "2", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    target = report["targets"][0]
    assert not report["passed"] and target["samples"] == 2 and target["max_rel_error"] > 0.1
    assert "CALL square" in target["note"]
    text = run("check", files["bad"], "--wrt", "x")
    assert text.exit_code == 1 and "FAILED" in text.stdout


def test_check_uses_given_inputs(files):
    result = run("check", files["cube"], "--wrt", "x", "-i", "x=2", "--json")
    target = json.loads(result.stdout)["targets"][0]
    assert target["analytic"] == pytest.approx(12.0) and target["numeric"] == pytest.approx(12.0, rel=1e-6)


# ----------------------------------------------------------------------------- info, print

def test_info_text_and_json(files):
    result = run("info", files["vec"], "--json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    graph = load(files["vec"])
    assert info["nodes"] == len(graph.nodes())
    assert info["inputs"][0] == {"name": "x", "dtype": "float32", "shape": [3]}
    assert [o["name"] for o in info["outputs"]] == ["prod", "loss"]
    assert info["input_elements"] == 12 and info["embedded_bytes"] == 0
    assert info["sha256"] == hashlib.sha256(save(graph)).hexdigest()
    assert info["ops"]["PARAM"] == 4 and info["flops"] > 0 and info["depth"] >= 3
    as_json = files["dir"] / "vec.json"
    run("convert", files["vec"], "-o", as_json)
    assert json.loads(run("info", as_json, "--json").stdout)["sha256"] == info["sha256"]   # canonical bytes
    text = run("info", files["vec"]).stdout
    assert "sha256" in text and "x float32[3]" in text


def test_print_listing(files):
    result = run("print", files["vec"])
    assert result.exit_code == 0
    assert re.search(r"^%\d+ = MUL float32\[3\] %\d+ %\d+$", result.stdout, re.M)
    assert re.search(r"^%\d+ = PARAM float32\[3\] x$", result.stdout, re.M)
    assert "output loss = %" in result.stdout
    diffed = run("diff", files["fn"], "--wrt", "x").stdout_bytes
    listing = run("print", "-", input=diffed).stdout
    assert re.search(r"^  %\d+ = PARAM float32\[2,2\] slot 0", listing, re.M)      # body indented
    assert re.search(r"^%\d+ = FUNCTION void %\d+ %\d+ %\d+ square_backward  # backward$", listing, re.M)
    assert re.search(r"^  %\d+ = MUL float32\[2,2\] %\d+ %\d+  # backward$", listing, re.M)  # its body


# ----------------------------------------------------------------------------- convert, validate

def test_convert_forms_and_round_trip(files, tmp_path):
    as_json = tmp_path / "v.json"
    assert run("convert", files["vec"], "-o", as_json).exit_code == 0
    assert as_json.read_bytes().lstrip().startswith(b"{")
    back = tmp_path / "back.uop"
    assert run("convert", as_json, "-o", back).exit_code == 0
    assert back.read_bytes() == files["vec"].read_bytes() == save(load(files["vec"]))
    forced = run("convert", files["vec"], "--to", "json", "-o", "-")
    assert forced.stdout_bytes == as_json.read_bytes()
    msgpack = run("convert", as_json, "--to", "msgpack", "-o", tmp_path / "x.uop")
    assert msgpack.exit_code == 0 and (tmp_path / "x.uop").read_bytes() == back.read_bytes()
    # --to that OUT's name contradicts is a usage error (MessagePack in x.json was written, exit 0)
    contradicted = run("convert", as_json, "--to", "msgpack", "-o", tmp_path / "x.json")
    assert contradicted.exit_code == 2 and not (tmp_path / "x.json").exists()


def test_convert_writes_to_stdout_without_o(files):
    # -o defaults to - as diff's does (the README: `convert --to onnx` also to stdout)
    as_json = run("convert", files["vec"], "--to", "json")
    assert as_json.exit_code == 0 and as_json.stdout_bytes == run("convert", files["vec"], "--to", "json",
                                                                   "-o", "-").stdout_bytes
    as_msgpack = run("convert", files["vec"])                    # not a terminal: binary is fine
    assert as_msgpack.exit_code == 0 and as_msgpack.stdout_bytes == files["vec"].read_bytes()


def test_validate(files):
    result = run("validate", files["vec"])
    graph = load(files["vec"])
    assert result.exit_code == 0 and result.stdout == f"ok: {len(graph.nodes())} nodes, 4 inputs, 2 outputs\n"
    bad = files["dir"] / "bad.json"
    bad.write_text('{"format": "uop", "version": 1, "nodes": [["FOO", "float32", [], null]], '
                   '"inputs": [], "outputs": [["a", 0]]}')
    result = run("validate", bad)
    assert result.exit_code == 1 and "bad.json" in error_line(result) and "FOO" in error_line(result)


# ----------------------------------------------------------------------------- render

def test_render_dot_and_svg(files, tmp_path):
    result = run("render", files["vec"], "--format", "dot", "-o", "-")
    assert result.exit_code == 0 and result.stdout.startswith("digraph")
    svg = tmp_path / "v.svg"
    import shutil
    if shutil.which("dot"):
        assert run("render", files["vec"], "-o", svg).exit_code == 0
        assert b"<svg" in svg.read_bytes()
    result = run("render", files["vec"], "-o", tmp_path / "v.bmp")
    assert result.exit_code == 2 and "--format" in error_line(result)
    too_big = tmp_path / "big.svg"
    result = run("render", files["vec"], "--max-nodes", "3", "-o", too_big)
    assert result.exit_code == 1 and "--around" in error_line(result) and not too_big.exists()
