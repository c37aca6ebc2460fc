"""The installed `uopgrad` through a subprocess: how options are given (repeated, for the
wrong kind of IN), which stream says what, and which exit status a refusal has (2: the
command line is wrong by itself; 1: the files, the data, the environment, a failed check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from uopcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
MLP, POLY = SAMPLES / "mlp.uop", SAMPLES / "poly.uop"
UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")

pytestmark = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def uopgrad(cwd, *args, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, input=stdin, capture_output=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})


def ok(run) -> bytes:
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout


def refusal(run, code: int) -> str:
    """The one error line of a failed run (nothing on stdout, no traceback), its prefix off."""
    assert run.returncode == code, (run.returncode, run.stderr.decode())
    assert run.stdout == b"" and b"Traceback" not in run.stderr
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uopgrad: error: "), lines
    return lines[0][len("uopgrad: error: "):]


def outputs_of(tmp_path, graph: str) -> list[str]:
    return [o["name"] for o in json.loads(ok(uopgrad(tmp_path, "info", graph, "--json")))["outputs"]]


# ----------------------------------------------------------------------------- repeated options

def test_repeated_wrt_and_of_add_up_as_a_comma_list_does(tmp_path):
    """`--wrt w1 --wrt w2` kept w2 alone (exit 0); a Makefile's foreach writes that form."""
    ok(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1", "--wrt", "w2", "-o", "repeated.uop"))
    ok(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1,w2", "-o", "listed.uop"))
    assert (tmp_path / "repeated.uop").read_bytes() == (tmp_path / "listed.uop").read_bytes()
    assert outputs_of(tmp_path, "repeated.uop") == ["grad_w1", "grad_w2"]
    ok(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1", "--wrt", "b1,w2", "--keep-forward", "-o", "three.uop"))
    assert outputs_of(tmp_path, "three.uop") == ["loss", "grad_w1", "grad_b1", "grad_w2"]
    multi = "multi.uop"  # two outputs: --of's repeats add up too
    ok(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1", "--keep-forward", "-o", multi))
    ok(uopgrad(tmp_path, "jvp", multi, "--wrt", "x", "--of", "loss", "--of", "grad_w1", "-o", "j.uop"))
    assert outputs_of(tmp_path, "j.uop") == ["jvp_loss", "jvp_grad_w1"]


def test_check_checks_every_repeated_target(tmp_path):
    """`check --wrt w1 --wrt b2` checked b2 alone and passed."""
    report = json.loads(ok(uopgrad(tmp_path, "check", MLP, "--wrt", "w1", "--wrt", "b2", "--samples", "1",
                                   "--json")))
    assert [target["target"] for target in report["targets"]] == ["w1", "b2"] and report["passed"]


def test_render_outputs_repeated_add_up(tmp_path):
    ok(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1", "--keep-forward", "-o", "multi.uop"))
    ok(uopgrad(tmp_path, "render", "multi.uop", "--outputs", "loss", "--outputs", "grad_w1", "-o", "a.dot"))
    ok(uopgrad(tmp_path, "render", "multi.uop", "--outputs", "loss,grad_w1", "-o", "b.dot"))
    assert (tmp_path / "a.dot").read_bytes() == (tmp_path / "b.dot").read_bytes()


def test_an_empty_name_among_repeats_is_a_usage_error(tmp_path):
    assert refusal(uopgrad(tmp_path, "diff", MLP, "--wrt", "w1", "--wrt", "", "-o", "g.uop"), 2) == (
        "Invalid value for --wrt: '' is not a comma-separated list of names (see 'uopgrad diff --help')")
    assert not (tmp_path / "g.uop").exists()


def test_a_single_valued_option_given_twice_is_a_usage_error(tmp_path):
    """render -o a.svg -o b.svg wrote b.svg alone (exit 0): now nothing is written, exit 2."""
    run = uopgrad(tmp_path, "render", MLP, "-o", "a.svg", "-o", "b.svg")
    assert refusal(run, 2) == "-o/--output is given twice: it takes one value, give it once " \
                              "(see 'uopgrad render --help')"
    assert list(tmp_path.iterdir()) == []
    run = uopgrad(tmp_path, "eval", POLY, "--random", "--seed", "1", "--seed=2")
    assert refusal(run, 2) == "--seed is given twice: it takes one value, give it once (see 'uopgrad eval --help')"
    run = uopgrad(tmp_path, "eval", POLY, "--random", "--json", "--backend", "numpy", "--backend", "numpy")
    assert run.returncode == 2 and json.loads(run.stdout) == {
        "error": "--backend is given twice: it takes one value, give it once (see 'uopgrad eval --help')",
        "exit_status": 2}
    ok(uopgrad(tmp_path, "eval", POLY, "--random", "--random", "--stats", "--stats"))  # a flag may repeat


def _commands():
    return sorted(main.commands.items())


@pytest.mark.parametrize("name, command", _commands(), ids=[name for name, _ in _commands()])
def test_every_option_of_every_command_accumulates_or_is_refused_twice(name, command):
    """The rule holds for every command, including ones added later: a NAMES list repeats
    (adding up), a single-valued option given twice is refused (click kept the last)."""
    runner = CliRunner()
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag or param.count:
            continue
        if param.metavar == "NAMES":
            assert param.multiple, f"{name} {param.opts}: a NAMES list that does not accumulate"
            continue
        if param.multiple:
            continue
        option = param.opts[-1]
        result = runner.invoke(main, [name, str(POLY), option, "1", option, "1"])
        assert result.exit_code == 2, (name, option, result.output)
        assert f"{'/'.join(param.opts)} is given twice: it takes one value, give it once" in result.output


def test_a_names_list_says_its_repeats_add_up_and_stays_required_in_process():
    """_accumulating's rebuilt option (in-process, where mutation testing sees it): its help
    says how repeats add up, a required list stays required, an unrequired one absent is None
    to the command (jvp --of: every output), and its repeats reach the command joined."""
    runner = CliRunner()
    diff_help = " ".join(runner.invoke(main, ["diff", "--help"]).output.split())  # as one line
    assert "--wrt NAMES" in diff_help and "Repeats add up: --wrt a --wrt b is --wrt a,b. [required]" in diff_help
    assert "Repeats add up: --of a --of b is --of a,b." in diff_help
    missing = runner.invoke(main, ["diff", str(POLY), "-o", "-"])
    assert (missing.exit_code, missing.output) == (2, "uopgrad: error: Missing option '--wrt'. (see 'uopgrad diff "
                                                      "--help')\n")
    empty = runner.invoke(main, ["diff", str(POLY), "--wrt", "x", "--wrt", ",", "-o", "-"])
    assert empty.exit_code == 2 and "Invalid value for --wrt: ',' is not a comma-separated list of names" in \
        empty.output
    seen = {}

    @click.command(cls=type(main.commands["diff"]))
    @click.option("--a", metavar="NAMES")
    @click.option("--n", type=int)
    def probe(a, n):
        seen.update(a=a, n=n)
    from uopcli.cli.app import _accumulating
    probe.params = [_accumulating(p) for p in probe.params]
    assert runner.invoke(probe, ["--a", "x", "--a", "y,z", "--n", "1"]).exit_code == 0 and seen == {"a": "x,y,z", "n": 1}
    assert runner.invoke(probe, []).exit_code == 0 and seen == {"a": None, "n": None}
    twice = runner.invoke(probe, ["--n", "1", "--n", "2"])
    assert twice.exit_code == 2 and "--n is given twice: it takes one value, give it once" in twice.output


def test_each_command_is_made_with_its_name_help_and_options_in_process():
    """_command's work, in-process: the command under its name with its short help in the
    list, its docstring and example in --help, -q first and the common options last, each
    once, and its name in the --json error document (check's has "passed": false)."""
    runner = CliRunner()
    listing = " ".join(runner.invoke(main, ["--help"]).output.split())
    assert "info Statistics: nodes, ops, inputs, outputs, depth, FLOPs, sha256." in listing
    assert "eval Evaluate a graph on given or random inputs." in listing
    assert [p.name for p in main.commands["info"].params] == ["quiet", "source", "as_json", "constant", "shape",
                                                               "limit", "debug"]
    assert [p.name for p in main.commands["diff"].params] == [
        "quiet", "source", "wrt", "of_", "cotangent", "keep_forward", "output", "report_path", "stats", "simplify_",
        "opset", "constant", "shape", "limit", "debug"]
    info_help = runner.invoke(main, ["info", "--help"]).output
    assert info_help.startswith("Usage: uopgrad info [OPTIONS] IN\n\n  Node count, count per op,") and \
        "\n\n  Example:\n    uopgrad info model.uop\n" in info_help
    assert "None" not in info_help
    failed = runner.invoke(main, ["check", str(POLY), "--wrt", "nope", "--json"])
    assert failed.exit_code == 1 and json.loads(failed.stdout) == {
        "passed": False, "error": f"{POLY}: no input named 'nope' to differentiate with respect to; inputs: x",
        "exit_status": 1}
    failed = runner.invoke(main, ["info", str(POLY), "--json", "--limit", "max_nodes=1"])
    assert failed.exit_code != 0 and "passed" not in json.loads(failed.stdout)


# ----------------------------------------------------------------------------- options for an ONNX IN only

@pytest.mark.parametrize("shape", ["x=3,3", "BATCH=4", "x=16,8"])
def test_shape_for_a_uop_in_is_a_usage_error_not_ignored(tmp_path, shape):
    """--shape x=3,3 was silently ignored for a .uop IN (x stayed [16,8], exit 0), and
    --shape BATCH=4 accepted: a .uop's shapes are in the file. The same holds on stdin."""
    (tmp_path / "mlp.uop").write_bytes(MLP.read_bytes())
    run = uopgrad(tmp_path, "eval", "mlp.uop", "--shape", shape, "--random", "-o", "out.npz")
    assert refusal(run, 2) == ("--shape sizes an ONNX IN's inputs and symbolic dimensions when importing; a .uop IN "
                               "(mlp.uop) has its shapes in the file (uopgrad info lists them) "
                               "(see 'uopgrad eval --help')")
    assert not (tmp_path / "out.npz").exists()
    run = uopgrad(tmp_path, "diff", "-", "--wrt", "x", "--shape", shape, "-o", "g.uop", stdin=MLP.read_bytes())
    assert refusal(run, 2).startswith("--shape sizes an ONNX IN's inputs and symbolic dimensions when importing; "
                                      "a .uop IN (<stdin>) has its shapes in the file")


def test_constant_for_a_uop_in_is_refused_as_shape_is(tmp_path):
    (tmp_path / "mlp.uop").write_bytes(MLP.read_bytes())
    run = uopgrad(tmp_path, "eval", "mlp.uop", "--constant", "x=0", "--random")
    assert refusal(run, 2) == ("--constant fixes inputs of an ONNX IN when importing; a .uop IN (mlp.uop) takes its "
                               "inputs' values with -i/--input (see 'uopgrad eval --help')")


# ----------------------------------------------------------------------------- streams

def test_eval_stats_go_to_stderr_with_the_table_as_with_a_file(tmp_path):
    """eval --stats printed its time on stdout after the table (two runs' stdout differed),
    while -o, --map and diff put theirs on stderr."""
    import re
    table = "name  shape  dtype    min  mean  max  values\ny     []     float32  4    4     4    4\n"
    timing = r"time [0-9.]+ ms, peak live bytes \d+ \(\d+ B\)\n"
    run = uopgrad(tmp_path, "eval", POLY, "-i", "x=1", "--stats")
    assert run.returncode == 0 and run.stdout.decode() == table and re.fullmatch(timing, run.stderr.decode())
    run = uopgrad(tmp_path, "eval", POLY, "-i", "x=1", "--stats", "-o", "out.npz")
    assert run.returncode == 0 and run.stdout == b"" and re.fullmatch(timing, run.stderr.decode())
    run = uopgrad(tmp_path, "eval", POLY, "-i", "x=1", "--stats", "--json")  # asked for in the document
    assert run.returncode == 0 and run.stderr == b"" and set(json.loads(run.stdout)) == {"outputs", "stats"}


# ----------------------------------------------------------------------------- -i values: headers first, memory

def _limited_memory():
    """preexec_fn: at most 3 GB of address space, so that a huge allocation fails here as
    MemoryError (not by the kernel's OOM killer, whatever its overcommit policy)."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def limited(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, capture_output=True, timeout=300,
                          preexec_fn=_limited_memory)


def _npy_header(shape) -> bytes:
    import io
    import numpy as np
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _huge_graph(tmp_path, shape) -> str:
    graph = {"format": "uop", "version": 1, "meta": {}, "inputs": [0], "outputs": [["y", 1]],
             "nodes": [["PARAM", "float32", [], {"name": "x", "shape": list(shape)}],
                       ["REDUCE", "float32", [0], ["ADD", list(range(len(shape)))]]]}
    (tmp_path / "huge.json").write_text(json.dumps(graph))
    return "huge.json"


def test_a_number_for_an_input_too_large_for_memory_says_out_of_memory(tmp_path):
    """-i x=0 said "cannot read 0: a damaged file (MemoryError ...)" where --random said
    "out of memory": both say out of memory, naming the input and its size."""
    huge = _huge_graph(tmp_path, (100000, 100000, 100))
    prefix = "huge.json: input 'x' (float32[100000,100000,100], 3.6 TiB): out of memory"
    assert refusal(limited(tmp_path, "eval", huge, "-i", "x=0"), 1) == f"{prefix} filling it with 0"
    assert refusal(limited(tmp_path, "eval", huge, "--random"), 1) == f"{prefix} drawing its random values"


def test_an_npy_of_the_input_s_shape_too_large_for_memory_says_out_of_memory(tmp_path):
    huge = _huge_graph(tmp_path, (100000, 100000))
    (tmp_path / "big.npy").write_bytes(_npy_header((100000, 100000)) + bytes(16))
    assert refusal(limited(tmp_path, "eval", huge, "-i", "x=big.npy"), 1) == (
        "huge.json: input 'x' (float32[100000,100000], 37.3 GiB): out of memory reading big.npy")


def test_an_input_file_s_shape_is_checked_from_its_header_before_its_data_is_read(tmp_path):
    """A 144-byte .npy whose header claims [100000,100000] was "a damaged file (MemoryError:
    ... 37.3 GiB)"; it is the wrong shape for x, and says so."""
    (tmp_path / "lie.npy").write_bytes(_npy_header((100000, 100000)) + bytes(16))
    assert refusal(limited(tmp_path, "eval", MLP, "-i", "x=lie.npy", "--random"), 1) == (
        f"{MLP}: input 'x' is float32[16,8] but lie.npy is float32[100000,100000]")


def test_an_npz_member_of_the_wrong_shape_is_not_decompressed(tmp_path):
    """A 0.4 MB .npz whose member x is float32[10000,10000] of zeros was decompressed (about
    430 MB resident) before the shape error; now only its header is read."""
    import zipfile
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as member:
            member.write(_npy_header((10000, 10000)))
            for _ in range(25):
                member.write(bytes(1 << 24))
    probe = ("import resource, subprocess, sys; run = subprocess.run(sys.argv[1:], capture_output=True); "
             "sys.stdout.write(run.stderr.decode() + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))")
    for spec in ("x=bomb.npz", "x=bomb.npz:x", "bomb.npz"):
        done = subprocess.run([sys.executable, "-c", probe, UOPGRAD, "eval", str(MLP), "-i", spec, "--random"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        error, peak_kib = done.stdout.rsplit("\n", 1)
        assert error == f"uopgrad: error: {MLP}: input 'x' is float32[16,8] but bomb.npz:x is float32[10000,10000]"
        assert int(peak_kib) < 200_000, (spec, peak_kib)  # decompressed, x alone is 400 MB


# ----------------------------------------------------------------------------- messages

@pytest.mark.parametrize("command", [("view",), ("render", "-o", "page.html"), ("render", "-o", "picture.svg")])
def test_an_output_not_in_the_file_is_named_with_the_file(tmp_path, command):
    """view --outputs nope said "no output named 'nope'" without the file; render named it."""
    run = uopgrad(tmp_path, command[0], MLP, "--outputs", "loss", "--outputs", "nope", *command[1:])
    assert refusal(run, 1) == f"{MLP}: no output named 'nope'; outputs: loss"
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- exit status: 2 usage, 1 the rest

def test_a_malformed_dask_target_is_a_usage_error(tmp_path):
    """--dask local:0 exited 1, as if the cluster had failed: the text is wrong (2), said
    before dask is looked for or the shards are globbed."""
    run = uopgrad(tmp_path, "eval", POLY, "--map", "none/*.npz", "--dask", "local:0")
    assert refusal(run, 2) == ("--dask local:0: give local:N with N a number of workers >= 1 "
                               "(see 'uopgrad eval --help')")


def test_the_environment_is_no_usage_error(tmp_path):
    """Binary output on a terminal is refused with 1, as gzip does: the command line is
    right (the same one works in a pipe)."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout on the terminal
        os.execv(UOPGRAD, [UOPGRAD, "diff", str(POLY), "--wrt", "x"])
    said = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        said += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    assert said.decode().strip() == ("uopgrad: error: refusing to write binary msgpack data to a terminal: redirect "
                                     "or pipe it (> file, | uopgrad ...) or give -o FILE")


# ----------------------------------------------------------------------------- reproducible pictures

def _pdf_objects_where_xref_says(pdf: bytes) -> bool:
    """Every object the xref table lists starts at its offset (the date's rewrite kept them)."""
    import re
    table = pdf[int(pdf.rsplit(b"startxref", 1)[1].split()[0]):].split(b"\n")
    assert table[0].strip() == b"xref"
    first, count = map(int, table[1].split())
    entries = [line.split() for line in table[2:2 + count]]
    return all(re.match(rb"%d 0 obj" % (first + i), pdf[int(offset):]) for i, (offset, _, kind) in enumerate(entries)
               if kind == b"n")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_a_pdf_renders_to_the_same_bytes_every_time(tmp_path):
    """render -o x.pdf embedded the wall-clock time (cairo's /CreationDate), so two renders
    differed; SOURCE_DATE_EPOCH did nothing. The date is now 1980-01-01, or the epoch's."""
    import time
    ok(uopgrad(tmp_path, "render", POLY, "-o", "a.pdf"))
    time.sleep(1.1)  # the date has whole seconds
    ok(uopgrad(tmp_path, "render", POLY, "-o", "b.pdf"))
    a = (tmp_path / "a.pdf").read_bytes()
    assert a == (tmp_path / "b.pdf").read_bytes()
    assert b"/CreationDate (D:19800101000000Z)" in a and _pdf_objects_where_xref_says(a)
    ok(uopgrad(tmp_path, "render", POLY, "-o", "c.pdf", env={"SOURCE_DATE_EPOCH": "1700000000"}))
    c = (tmp_path / "c.pdf").read_bytes()
    assert b"/CreationDate (D:20231114221320Z)" in c and len(c) == len(a) and _pdf_objects_where_xref_says(c)
