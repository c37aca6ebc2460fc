"""The installed `uopgrad` console script in real shell pipelines: stdin/stdout, exit codes,
atomic outputs, binary output refused on a terminal, and the samples end to end."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import uopcli
from uopcli import UOp, dtypes
from uopcli.formats.uop import load, save
from uopcli.core.graph import Graph

ROOT = Path(__file__).resolve().parent.parent
BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=BIN) or shutil.which("uopgrad")
SAMPLES = sorted((ROOT / "samples").glob("*.uop"))

pytestmark = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def sh(command: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
    """Run a shell pipeline with the installed uopgrad first on PATH; `set -o pipefail` so
    a failing first step fails the pipeline."""
    env = {**os.environ, "PATH": f"{os.path.dirname(UOPGRAD)}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, input=input,
                          capture_output=True, timeout=120)


@pytest.fixture
def work(tmp_path):
    """m.uop: y = sum(x*x*w) (+ outputs for the multi-output cases); x.npy, w.npy."""
    x, w = UOp.param("x", (3,)), UOp.param("w", (3,))
    prod = x * x * w
    save(Graph({"y": prod.sum()}, inputs=[x, w]), tmp_path / "m.uop")
    save(Graph({"prod": prod, "y": prod.sum(), "s": x.sum()}, inputs=[x, w]), tmp_path / "multi.uop")
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    np.save(tmp_path / "w.npy", np.array([1, 10, 100], np.float32))
    return tmp_path


def outputs_json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr.decode()
    return {k: v["values"] for k, v in json.loads(done.stdout)["outputs"].items()}


def test_diff_from_stdin_into_eval(work):
    done = sh("uopgrad diff - --wrt x < m.uop | uopgrad eval - -i x=x.npy -i w=w.npy --json", work)
    assert outputs_json(done) == {"grad_x": [2.0, 40.0, 600.0]}   # 2*x*w


def test_table_output_of_a_pipeline(work):
    done = sh("uopgrad diff m.uop --wrt x,w | uopgrad eval - -i x=x.npy -i w=w.npy", work)
    assert done.returncode == 0 and done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["name", "grad_x", "grad_w"]
    assert lines[2].split() == ["grad_w", "[3]", "float32", "1", "4.66667", "9", "1", "4", "9"]  # grad_w = x*x


def test_second_derivatives_through_a_pipeline(work):
    done = sh("uopgrad diff m.uop --wrt x | uopgrad diff - --of grad_x --cotangent ones --wrt x "
              "| uopgrad eval - -i x=x.npy -i w=w.npy --json", work)
    assert outputs_json(done) == {"grad_x": [2.0, 20.0, 200.0]}   # d/dx sum(2*x*w) = 2*w


def test_several_outputs_and_non_scalar_outputs(work):
    done = sh("uopgrad diff multi.uop --of y,s --wrt x | uopgrad eval - -i x=x.npy -i w=w.npy --json", work)
    assert outputs_json(done) == {"grad_x": [3.0, 41.0, 601.0]}   # 2*x*w + 1
    refused = sh("uopgrad diff multi.uop --wrt x", work)
    assert refused.returncode == 1 and b"prod, y, s" in refused.stderr
    refused = sh("uopgrad diff multi.uop --of prod --wrt x", work)
    assert refused.returncode == 1 and b"--cotangent" in refused.stderr
    np.save(work / "c.npy", np.array([1, 0, -1], np.float32))
    done = sh("uopgrad diff multi.uop --of prod --cotangent input --wrt x,w "
              "| uopgrad eval - -i x=x.npy -i w=w.npy -i cotangent_prod=c.npy --json", work)
    assert outputs_json(done) == {"grad_x": [2.0, 0.0, -600.0], "grad_w": [1.0, 0.0, -9.0]}


def test_exit_codes(work):
    assert sh("uopgrad validate m.uop", work).returncode == 0
    assert sh("uopgrad validate missing.uop", work).returncode == 1
    assert sh("uopgrad diff m.uop", work).returncode == 2           # --wrt missing
    assert sh("uopgrad diff m.uop --wrt x --nonsense", work).returncode == 2
    assert sh("uopgrad eval m.uop -i x=x.npy", work).returncode == 1  # w missing
    failed = sh("uopgrad diff m.uop --wrt nope", work)
    assert failed.returncode == 1
    assert failed.stderr.decode().startswith("uopgrad: error: m.uop: ") and failed.stderr.count(b"\n") == 1


def test_an_error_under_json_is_a_json_document_on_stdout_too(work):
    """A script parsing --json output (or a CI job keeping it as an artifact) reads why the
    command failed, not an empty stdout; stderr keeps its one line, the status is kept."""
    cases = [("check m.uop --wrt nope --json", 1, "m.uop: no input named 'nope'"),
             ("check missing.uop --wrt x --json", 1, "missing.uop: cannot read"),
             ("check m.uop --wrt x --samples 0 --directions 0 --json", 2, "compare nothing"),
             ("eval m.uop -i x=x.npy --json", 1, "m.uop: "),
             ("info missing.uop --json", 1, "missing.uop: cannot read"),
             ("check m.uop --wrt x --json --bogus", 2, "No such option '--bogus'"),  # while click reads the options
             ("eval m.uop --json --shape N=0", 2, "'N=0': give NAME=D1,D2,... with whole sizes >= 1")]
    for command, status, says in cases:
        done = sh(f"uopgrad {command}", work)
        line = done.stderr.decode()
        assert done.returncode == status and line.count("\n") == 1, (command, line)
        document = json.loads(done.stdout)
        assert document["error"] == line.removeprefix("uopgrad: error: ").rstrip("\n"), command
        assert says in document["error"] and document["exit_status"] == status
        assert document.get("passed", "absent") == (False if command.startswith("check") else "absent")
    failed_check = sh("uopgrad check m.uop --wrt x -i x=inf -i w=1 --json", work)  # a failed check is a report
    report = json.loads(failed_check.stdout)
    assert failed_check.returncode == 1 and report["passed"] is False and "error" not in report
    assert sh("uopgrad check m.uop --wrt nope", work).stdout == b""  # without --json: stderr only


def test_a_negative_seed_is_a_usage_error_and_check_keeps_numpy_warnings_to_itself(work):
    for command in ("eval m.uop --random --seed -1", "check m.uop --wrt x --seed -1"):
        done = sh(f"uopgrad {command}", work)
        assert done.returncode == 2 and b"--seed" in done.stderr and b"internal error" not in done.stderr
    at_infinity = sh("uopgrad check m.uop --wrt x -i x=inf -i w=1", work)
    assert at_infinity.returncode == 1 and b"FAILED" in at_infinity.stdout
    assert b"Warning" not in at_infinity.stderr


def test_control_characters_from_a_file_are_shown_escaped_and_drawn(work):
    """Names and tags are the file's: a newline must not forge a line of `print`, an
    escape sequence must not reach the terminal, and dot must still draw them (it refuses
    a NUL and very long strings)."""
    from uopcli import Metadata
    x = UOp.param("x", (3,))
    called = UOp.trace_function("evil\n%99 = FAKE\x1b[31m\x00" + "y" * 100_000, lambda a: (a * 2.0,), x)
    y = called[0].sin().set_meta(Metadata("na\nme", None, False))
    save(Graph({"y": y}, meta={"k\x1bey": "v\nalue"}), work / "evil.uop")
    listed = sh("uopgrad print evil.uop", work)
    assert listed.returncode == 0 and b"\x1b" not in listed.stdout and b"\x00" not in listed.stdout
    lines = listed.stdout.decode().splitlines()
    assert len(lines) == 1 + 8 + 1 and not any(line.startswith("%99") for line in lines)
    assert "evil\\n%99 = FAKE\\x1b[31m\\x00yyy" in listed.stdout.decode() and lines[-2].endswith("# na\\nme")
    info = sh("uopgrad info evil.uop", work)
    assert info.returncode == 0 and "meta.k\\x1bey    v\nalue" in info.stdout.decode()  # a value may span lines
    drawn = sh("uopgrad render evil.uop -o evil.svg", work)
    assert drawn.returncode == 0, drawn.stderr.decode()
    assert b"evil\\n%99 = FAKE\\x1b[31m\\x00yyy" in (work / "evil.svg").read_bytes()


def test_failing_command_writes_nothing(work):
    (work / "out.uop").write_bytes(b"old contents")
    before = sorted(p.name for p in work.iterdir())
    assert sh("uopgrad diff m.uop --wrt nope -o out.uop", work).returncode == 1
    assert sh("uopgrad diff m.uop --wrt nope -o new.uop", work).returncode == 1
    assert sh("uopgrad eval m.uop -o new.npz", work).returncode == 1
    assert (work / "out.uop").read_bytes() == b"old contents"
    assert sorted(p.name for p in work.iterdir()) == before       # no new file, no temporary left over


def test_a_failed_diff_writes_no_report_either(work):
    (work / "r.json").write_bytes(b"old report")
    done = sh("uopgrad diff m.uop --wrt x --report r.json -o nodir/g.uop", work)
    assert done.returncode == 1 and b"nodir/g.uop" in done.stderr
    assert (work / "r.json").read_bytes() == b"old report"
    assert sh("uopgrad diff m.uop --wrt x --report new.json -o /dev/full", work).returncode == 1
    assert not (work / "new.json").exists()
    # the report to a stdout that fails: the graph file is not left behind either (it was, exit 1)
    done = sh("uopgrad diff m.uop --wrt x --report - -o g.uop > /dev/full", work)
    assert done.returncode == 1 and done.stderr == b"uopgrad: error: <stdout>: No space left on device\n"
    assert not (work / "g.uop").exists() and not list(work.glob(".g.uop*"))
    done = sh("uopgrad diff m.uop --wrt x --report - -o g.uop > r2.json", work)  # stdout taken: both written
    assert done.returncode == 0 and json.loads((work / "r2.json").read_text())["of"] == ["y"]
    assert (work / "g.uop").exists()


def test_stdout_that_cannot_take_the_output_is_an_error_naming_stdout(work):
    """A full disk (/dev/full), a closed stdout (>&-), and a pipe that takes only part of
    a large write (non-blocking, nobody reading): exit status 1 and one line naming
    <stdout>, never a cut-short output with status 0."""
    full = sh("uopgrad print m.uop > /dev/full", work)
    assert full.returncode == 1 and full.stderr == b"uopgrad: error: <stdout>: No space left on device\n"
    closed = sh("uopgrad validate m.uop >&-", work)
    assert closed.returncode == 1 and closed.stderr == b"uopgrad: error: <stdout>: Bad file descriptor\n"
    no_stdin = sh("uopgrad validate - <&-", work)
    assert no_stdin.returncode == 1 and b"stdin is closed" in no_stdin.stderr and b"Traceback" not in no_stdin.stderr
    x = UOp.param("x", (3,))
    y = x
    for _ in range(3000):  # about 300 KB of JSON, more than a pipe holds
        y = y * 1.5 + 1.0
    save(Graph({"y": y}), work / "long.uop")
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        done = subprocess.run([UOPGRAD, "convert", "long.uop", "--to", "json", "-o", "-"], cwd=work,
                              stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert done.returncode == 1 and done.stderr.startswith(b"uopgrad: error: <stdout>: ")


def test_o_dev_stdout_writes_to_the_redirection_as_it_is(work):
    """`-o /dev/stdout` (or a shell's >(...)) writes to that descriptor: a `>>` file keeps
    what it held, a pipe gets the bytes, and nothing is renamed over anything."""
    (work / "log.txt").write_bytes(b"before\n")
    appended = sh("uopgrad convert m.uop --to json -o /dev/stdout >> log.txt", work)
    assert appended.returncode == 0
    canonical_json = sh("uopgrad convert m.uop --to json -o -", work).stdout
    assert (work / "log.txt").read_bytes() == b"before\n" + canonical_json
    piped = sh("uopgrad convert m.uop -o /dev/stdout | cmp - m.uop", work)
    assert piped.returncode == 0
    process = sh("uopgrad convert m.uop -o >(cat > copy.uop); wait; sleep 0.2; cmp copy.uop m.uop", work)
    assert process.returncode == 0, process.stderr.decode()


def test_an_oversized_file_is_refused_before_it_is_read(work):
    with open(work / "huge.uop", "wb") as f:
        f.truncate((1 << 30) + 1)  # sparse: no disk, and no memory if it is refused unread
    done = subprocess.run(["/usr/bin/time", "-f", "%M", UOPGRAD, "validate", "huge.uop"], cwd=work,
                          capture_output=True, timeout=60) if os.path.exists("/usr/bin/time") else None
    if done is None:
        pytest.skip("/usr/bin/time is not installed")
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1 and lines[0].startswith("uopgrad: error: huge.uop: file is larger than the limit")
    assert int(lines[-1]) < 200_000  # peak KiB: the gigabyte was never read


def test_limit_raises_and_lowers_a_reader_limit_for_one_command(work):
    """A file over a default limit (rank 17 > max_rank 16) is refused with the way to raise
    it, and read with --limit, before or after the command; --limit can also lower one."""
    x = UOp.param("x", (1,) * 17)
    save(Graph({"y": x.sum()}), work / "rank17.uop")
    refused = sh("uopgrad validate rank17.uop", work)
    assert refused.returncode == 1
    message = refused.stderr.decode()
    assert message.startswith("uopgrad: error: rank17.uop: node 0 (PARAM): PARAM shape has rank 17, over the limit of 16")
    assert "uopgrad --limit max_rank=N" in message and len(message.splitlines()) == 1
    for command in ("uopgrad validate rank17.uop --limit max_rank=17", "uopgrad --limit max_rank=32 validate rank17.uop",
                    "uopgrad diff rank17.uop --wrt x --limit max_rank=17 | uopgrad validate - --limit max_rank=17"):
        done = sh(command, work)
        assert (done.returncode, done.stdout.decode(), done.stderr) == (0, "ok: 3 nodes, 1 input, 1 output\n", b""), command
    lowered = sh("uopgrad info m.uop --limit max_nodes=2 --limit max_file_bytes=100000", work)
    assert lowered.returncode == 1 and "exceed the limit of 2 (raise it:" in lowered.stderr.decode()
    for bad in ("max_nodes", "max_nodes=-1", "max_nodes=many", "nodes=5"):
        done = sh(f"uopgrad validate m.uop --limit {bad}", work)
        assert done.returncode == 2 and "Invalid value for '--limit'" in done.stderr.decode(), bad


def test_tuple_and_function_outputs_evaluate_element_by_element(work):
    x = UOp.param("x", (3,))
    save(Graph({"t": UOp.tuple(x * 2.0, UOp.noop()), "f": UOp.trace_function("f", lambda a: (a * 2.0, a.sum()), x)},
               inputs=[x]), work / "tuples.uop")
    table = sh("uopgrad eval tuples.uop -i x=x.npy", work)
    assert table.returncode == 0 and table.stderr == b""
    assert [line.split()[0] for line in table.stdout.decode().splitlines()] == ["name", "t[0]", "t[1]", "f[0]", "f[1]"]
    assert "(none: a NOOP element)" in table.stdout.decode().splitlines()[2]
    document = json.loads(sh("uopgrad eval tuples.uop -i x=x.npy --json", work).stdout)["outputs"]
    assert document["t"][0]["values"] == [2, 4, 6] and document["t"][1] is None
    assert [e["values"] for e in document["f"]] == [[2, 4, 6], 6]
    assert sh("uopgrad eval tuples.uop -i x=x.npy -o out.npz", work).returncode == 0
    with np.load(work / "out.npz") as archive:
        assert archive.files == ["t[0]", "f[0]", "f[1]"]  # a NOOP element has no value to store
        assert archive["f[1]"] == 6


def test_numbers_a_float_input_cannot_hold_are_refused_and_big_endian_arrays_read(work):
    for value, dtype in (("1e200", "float32"), ("-1e39", "float32"), ("70000", "float16")):
        save(Graph({"y": UOp.param("v", (2,), getattr(dtypes, dtype)) * 1.0}), work / "v.uop")
        done = sh(f"uopgrad eval v.uop -i v={value}", work)
        assert done.returncode == 1 and done.stderr.decode().startswith(
            f"uopgrad: error: v.uop: input 'v': {value} does not fit {dtype} (largest magnitude"), value
        assert len(done.stderr.splitlines()) == 1  # and no numpy warning
    assert outputs_json(sh("uopgrad eval v.uop -i v=65519 --json", work)) == {"y": [65504, 65504]}  # rounds down
    assert outputs_json(sh("uopgrad eval v.uop -i v=-inf --json", work)) == {"y": ["-inf", "-inf"]}
    np.save(work / "be.npy", np.array([1, 2, 3], ">f4"))
    assert outputs_json(sh("uopgrad eval m.uop -i x=be.npy -i w=1 --json", work)) == {"y": 14}


def test_the_table_mean_neither_overflows_nor_warns_and_min_max_skip_nans(work):
    save(Graph({"y": UOp.param("d", (2,), dtypes.float64) * 1.0}), work / "d.uop")
    done = sh("uopgrad eval d.uop -i d=1.7e308", work)
    assert done.returncode == 0 and done.stderr == b""
    assert done.stdout.decode().splitlines()[1].split()[3:6] == ["1.7e+308"] * 3
    np.save(work / "d.npy", np.array([np.inf, -np.inf]))
    both = sh("uopgrad eval d.uop -i d=d.npy", work)
    assert both.returncode == 0 and both.stderr == b""
    assert both.stdout.decode().splitlines()[1].split()[3:6] == ["-inf", "nan", "inf"]
    save(Graph({"y": UOp.param("d", (3,), dtypes.float64).sqrt()}), work / "root.uop")
    np.save(work / "d3.npy", np.array([4.0, -1.0, 9.0]))
    some_nan = sh("uopgrad eval root.uop -i d=d3.npy", work)
    assert some_nan.returncode == 0 and some_nan.stderr == b""
    assert some_nan.stdout.decode().splitlines()[1].split()[3:] == ["2", "nan", "3", "2", "nan", "3"]
    np.save(work / "d3.npy", np.array([-4.0, -1.0, -9.0]))
    assert sh("uopgrad eval root.uop -i d=d3.npy", work).stdout.decode().splitlines()[1].split()[3:6] == ["nan"] * 3
    for values, mean in (([-0.0, -0.0], "-0"), ([-0.0, 0.0], "0")):  # a -0 loss: its mean is -0 too
        np.save(work / "z.npy", np.array(values))
        low, got, high = sh("uopgrad eval d.uop -i d=z.npy", work).stdout.decode().splitlines()[1].split()[3:6]
        assert got == mean and (low, high) == (("-0", "-0") if mean == "-0" else (low, "0"))


def test_convert_replaces_its_own_input_and_diff_refuses_to(work):
    done = sh("uopgrad convert m.uop --to json -o m.uop && uopgrad info m.uop --json", work)
    assert done.returncode == 0 and (work / "m.uop").read_bytes().lstrip().startswith(b"{")
    names = [o["name"] for o in json.loads(done.stdout)["outputs"]]
    refused = sh("uopgrad diff m.uop --wrt x -o m.uop || echo $?", work)
    assert refused.stdout.strip() == b"2" and b"-o m.uop is IN" in refused.stderr
    assert [o["name"] for o in json.loads(sh("uopgrad info m.uop --json", work).stdout)["outputs"]] == names


def test_stdin_stdout_conversion_round_trip(work):
    done = sh("uopgrad convert - --to json -o - < m.uop | uopgrad convert - -o - | uopgrad validate -", work)
    assert done.returncode == 0 and done.stdout.startswith(b"ok: ")
    same = sh("uopgrad convert - --to json -o - < m.uop | uopgrad convert - --to msgpack -o - | cmp - m.uop", work)
    assert same.returncode == 0


def test_the_library_and_the_cli_write_the_same_gradient_bytes(work):
    """The gradient graph depends only on the forward graph, not on the order in which the
    process built it: a process builds the model in an order unlike the file's (the
    sigmoid before the first sum), saves it, reads it back and differentiates it, and the
    bytes are those of `uopgrad diff` in a fresh one. That process is a new one too: nodes
    are shared process-wide and the first tag wins, so nodes other tests keep alive (a
    constant made by log_softmax) would carry their tags into this graph."""
    library = """
import sys
from uopcli import UOp, differentiate
from uopcli.core.graph import Graph
from uopcli.formats.uop import dumps, load, save
x, w = UOp.param("x", (4, 3)), UOp.param("w", (3, 2))
hidden = x @ w
squashed = hidden.sigmoid()
save(Graph({"l": hidden.sum() + squashed.sum()}, inputs=[x, w]), "r.uop")
in_process, _ = differentiate(load("r.uop"), ["w"])
sys.stdout.buffer.write(dumps(in_process))
"""
    in_process = subprocess.run([sys.executable, "-c", library], cwd=work, capture_output=True)
    assert in_process.returncode == 0, in_process.stderr.decode()
    done = sh("uopgrad diff r.uop --wrt w", work)
    assert done.returncode == 0, done.stderr.decode()
    assert in_process.stdout == done.stdout


def test_broken_pipe_is_quiet(work):
    """A reader that stops early (head) is not an error worth a message; the status says
    the output was cut short (1), as PIPESTATUS shows."""
    x = UOp.param("x", ())
    y = x
    for _ in range(3000):          # a listing far larger than a pipe's buffer
        y = y * 1.5 + 1.0
    save(Graph({"y": y}), work / "long.uop")
    done = sh("uopgrad print long.uop | head -n 1; exit ${PIPESTATUS[0]}", work)
    assert done.stdout.startswith(b"# ") and done.stdout.count(b"\n") == 1
    assert done.returncode == 1 and done.stderr == b""


def run_on_terminal(args: list[str], cwd: Path, stream: str = "stdout") -> tuple[int, bytes, bytes]:
    """Run uopgrad with `stream` (stdout or stderr) on a pseudo-terminal and the other on a
    pipe; (exit status, what the terminal got, what the pipe got)."""
    leader, follower = pty.openpty()
    try:
        streams = {"stdout": follower, "stderr": subprocess.PIPE} if stream == "stdout" else \
            {"stdout": subprocess.PIPE, "stderr": follower}
        proc = subprocess.Popen([UOPGRAD, *args], cwd=cwd, **streams)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        out, err = proc.communicate(timeout=60)
        return proc.returncode, shown, err if stream == "stdout" else out
    finally:
        os.close(leader)


def test_binary_output_refused_on_a_terminal(work):
    status, shown, err = run_on_terminal(["diff", "m.uop", "--wrt", "x"], work)
    assert status == 1 and shown == b""
    message = err.decode()
    assert message.startswith("uopgrad: error: ") and "terminal" in message and "-o" in message
    status, shown, err = run_on_terminal(["convert", "m.uop", "--to", "json", "-o", "-"], work)
    assert status == 0 and shown.lstrip().startswith(b"{")      # text is fine
    status, shown, err = run_on_terminal(["convert", "m.uop"], work)   # -o defaults to -: still refused
    assert status == 1 and shown == b"" and b"terminal" in err and b"--to json" in err
    status, _, err = run_on_terminal(["eval", "m.uop", "--random", "-o", "-"], work)
    assert status == 1 and b"terminal" in err


def test_stdin_from_a_terminal_is_refused(work):
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([UOPGRAD, "info", "-"], cwd=work, stdin=follower, capture_output=True, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 1 and b"stdin is a terminal" in done.stderr


def test_progress_bar_only_on_a_terminal(work):
    status, shown, out = run_on_terminal(["check", "m.uop", "--wrt", "x,w"], work, stream="stderr")
    assert status == 0 and b"finite differences" in shown and out.startswith(b"target")
    status, shown, out = run_on_terminal(["check", "m.uop", "--wrt", "x,w", "--quiet"], work, stream="stderr")
    assert status == 0 and shown == b"" and out.startswith(b"target")
    status, shown, _ = run_on_terminal(["diff", "m.uop", "--wrt", "x", "-o", "g.uop"], work, stream="stderr")
    assert status == 0 and b"%" in shown
    piped = sh("uopgrad check m.uop --wrt x,w", work)
    assert piped.returncode == 0 and piped.stderr == b""


def test_quiet_and_version(work):
    # the installed command's version is the package's one version, also in the installed metadata
    installed = importlib.metadata.version("uopgrad")
    assert installed == uopcli.__version__
    assert sh("uopgrad --version", work).stdout.strip() == f"uopgrad {installed}".encode()
    loud = sh("uopgrad diff multi.uop --of y --wrt x,w > /dev/null", work)
    assert loud.returncode == 0 and loud.stderr == b""           # nothing to report
    z = sh("uopgrad diff multi.uop --of s --wrt x,w > /dev/null", work)
    assert b"w is identically zero: not reached" in z.stderr
    assert sh("uopgrad diff multi.uop --of s --wrt x,w --quiet > /dev/null", work).stderr == b""


@pytest.mark.skipif(not SAMPLES, reason="samples/*.uop not built yet")
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_samples_end_to_end(sample, tmp_path):
    """Every sample: validate, info, differentiate with respect to every float input,
    evaluate the gradient on random inputs, print, and gradient-check one input."""
    graph = load(sample)
    floats = [n.arg for n in graph.inputs if n.dtype.is_float]
    wrt = ",".join(floats)
    of = list(graph.outputs)[0]
    cot = "" if graph.outputs[of].shape == () else " --cotangent ones"
    done = sh(f"uopgrad validate {sample} && uopgrad info {sample} > /dev/null && "
              f"uopgrad diff {sample} --of {of}{cot} --wrt {wrt} -o g.uop && "
              f"uopgrad eval g.uop --random --json > vals.json && uopgrad print g.uop > /dev/null", tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    values = json.loads((tmp_path / "vals.json").read_text())["outputs"]
    assert list(values) == [f"grad_{n}" for n in floats]
    assert all(v["shape"] == list(graph.input(n).shape) for n, v in zip(floats, values.values()))
    checked = sh(f"uopgrad check {sample} --of {of} --wrt {floats[0]} --samples 3 --json", tmp_path)
    assert checked.returncode in (0, 1) and json.loads(checked.stdout)["targets"][0]["samples"] >= 1


def test_render_without_dot_says_how_to_install_it(work, tmp_path_factory):
    empty = tmp_path_factory.mktemp("no-dot-here")
    env = {**os.environ, "PATH": str(empty)}     # uopgrad's own path is absolute; `dot` is not found
    failed = subprocess.run([UOPGRAD, "render", "m.uop", "-o", "m.svg"], cwd=work, env=env, capture_output=True)
    message = failed.stderr.decode()
    assert failed.returncode == 1 and message.count("\n") == 1 and message.startswith("uopgrad: error: ")
    assert "install" in message and "graphviz" in message and not (work / "m.svg").exists()
    text = subprocess.run([UOPGRAD, "render", "m.uop", "-o", "m.dot"], cwd=work, env=env, capture_output=True)
    assert text.returncode == 0 and (work / "m.dot").read_text().startswith("digraph")


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_stopped_while_writing_leaves_no_temporary_file(tmp_path, stop):
    """A CI timeout's SIGTERM (or a closed terminal's SIGHUP) while `diff` writes: one line,
    exit 1, no output and no half-written temporary file beside it."""
    import signal
    import time
    from uopcli.core.walks import no_gc
    with no_gc():
        y = UOp.param("x", (8,))
        for _ in range(100_000):
            y = (y * 1.0001 + 0.5).sin()
        save(Graph({"loss": y.sum()}), tmp_path / "big.uop")
    # The write takes 30-60 ms: on a loaded machine the command can finish before the
    # signal lands. Such a try shows nothing (exit 0, a whole g.uop) and is made again; a
    # command that ignored the signal would finish every time, and fail below.
    for _ in range(3):
        proc = subprocess.Popen([UOPGRAD, "diff", "big.uop", "--wrt", "x", "-o", "g.uop"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not list(tmp_path.glob(".g.uop.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.0005)
        if proc.poll() is None:
            proc.send_signal(getattr(signal, stop))
        out, err = proc.communicate(timeout=60)
        if proc.returncode == 0 and (tmp_path / "g.uop").exists():
            (tmp_path / "g.uop").unlink()
            continue
        assert proc.returncode == 1 and out == b""
        assert err.decode().strip() == f"uopgrad: error: stopped by {stop}"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["big.uop"]
        return
    pytest.fail(f"diff finished before {stop} reached it, three times")


def test_binary_output_to_a_path_naming_the_terminal_is_refused(work):
    status, shown, err = run_on_terminal(["convert", "m.uop", "-o", "/dev/stdout"], work)
    assert status == 1 and shown == b"" and b"refusing to write binary msgpack data to a terminal" in err
    status, shown, _ = run_on_terminal(["convert", "m.uop", "--to", "json", "-o", "/dev/fd/1"], work)
    assert status == 0 and shown.lstrip().startswith(b"{")


def test_help_and_version_to_a_full_disk_are_one_line(work):
    for args in (["--help"], ["--version"], ["print", "--help"]):
        done = sh(f"uopgrad {' '.join(args)} > /dev/full", work)
        assert done.returncode == 1, args
        assert done.stderr.decode() == "uopgrad: error: cannot write to stdout: No space left on device\n", args


def test_python_m_uopcli_is_the_uopgrad_command(work):
    """`python -m uopcli` and `python -m uopcli.cli` run the same command as the console
    script (a newcomer's `python -m uopcli` said "No module named uopcli.__main__")."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    expected = subprocess.run([UOPGRAD, "info", "m.uop"], cwd=work, capture_output=True, timeout=60)
    for module in ("uopcli", "uopcli.cli"):
        done = subprocess.run([sys.executable, "-m", module, "info", "m.uop"], cwd=work, env=env, capture_output=True,
                              timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (0, expected.stdout, b""), module
    done = subprocess.run([sys.executable, "-m", "uopcli", "nosuch"], cwd=work, env=env, capture_output=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith(b"uopgrad: error: No such command 'nosuch'.")
