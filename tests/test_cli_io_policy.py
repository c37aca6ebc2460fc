"""cli/io.py's "no file read is written over" policy, each piece in-process under a click
context (written for the mutation run of 2026-12-07, docs/mutation.md): what _reading and
_writing record and refuse, _refuse_read's exceptions (stdout, devices, IN in place),
_write_together's backstop of two outputs on one file and its words when a write fails,
_is_stream and _same_file on each kind of path, the weights beside OUT, and how a file's
form is told (_form_of_file). test_cli_files_read.py holds the same policy end to end;
there the first check refuses, and the backstop is never reached."""

from __future__ import annotations

import os
import socket

import click
import pytest

from uopcli.cli import io
from uopcli.cli.app import CommandFailed


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    """A command's context, current, in tmp_path: m.uop (with m.npz beside it), x.npy."""
    monkeypatch.chdir(tmp_path)
    for name in ("m.uop", "m.npz", "x.npy"):
        (tmp_path / name).write_bytes(name.encode())
    with click.Context(click.Command("eval")) as context:
        yield context


def usage_error(call, *args, **kwargs) -> str:
    with pytest.raises(click.UsageError) as caught:
        call(*args, **kwargs)
    return caught.value.message


def test_reading_records_each_file_but_stdin_and_refuses_an_empty_path(ctx):
    io._reading("IN", "m.uop", "IN")
    io._reading("IN", "-", "IN")
    io._reading("the file -i x=x.npy reads", "x.npy", "-i")
    assert ctx.meta["uopgrad.read"] == [("IN", "m.uop"), ("the file -i x=x.npy reads", "x.npy")]
    assert usage_error(io._reading, "IN", "", "IN") == "IN is an empty path: name a file (or - for stdin)"
    assert usage_error(io._reading, "the file --values reads", "", "--values") == \
        "--values is an empty path: name a file"


def test_reading_a_graph_records_the_values_beside_it(ctx, tmp_path):
    io._reading_graph("m.uop")
    assert ctx.meta["uopgrad.read"] == [("IN", "m.uop"), ("the model's values beside IN m.uop", "m.npz")]
    (tmp_path / "m.npz").unlink()
    ctx.meta.clear()
    io._reading_graph("m.uop")
    assert ctx.meta["uopgrad.read"] == [("IN", "m.uop")]


def test_the_values_beside_in_are_told_by_the_graph_once_read(ctx, tmp_path):
    """A readable m.npz is the model's values only if it holds one of m.uop's inputs: not
    recorded before IN is read; once read, recorded (and an output named on it refused)
    or, holding none (an earlier eval's outputs), never."""
    import numpy as np
    from uopcli import UOp
    from uopcli.core.graph import Graph
    graph = Graph({"y": UOp.param("w", (2,)).sum()})
    np.savez(tmp_path / "m.npz", y=np.zeros(()))
    io._reading_graph("m.uop")
    io._writing("m.npz", "-o")
    io._reading_graph("m.uop", graph)
    assert ctx.meta["uopgrad.read"] == [("IN", "m.uop")]
    np.savez(tmp_path / "m.npz", w=np.zeros(2))
    assert usage_error(io._reading_graph, "m.uop", graph) == \
        "-o m.npz is the model's values beside IN m.uop: writing it would replace the file read; give -o another file"
    assert ctx.meta["uopgrad.read"][-1] == ("the model's values beside IN m.uop", "m.npz")


def test_nothing_is_recorded_or_refused_without_a_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.uop").write_bytes(b"m")
    io._reading("IN", "m.uop", "IN")
    io._writing("m.uop", "-o")
    io._refuse_read("m.uop", "-o m.uop", "-o")
    io._refuse_written_twice([("m.uop", b""), ("m.uop", b"")])


def test_writing_refuses_a_file_read_and_records_its_label(ctx, tmp_path):
    io._reading_graph("m.uop")
    io._writing("g.uop", "-o")
    io._writing("r.json", "--report", "the report r.json")
    assert ctx.meta["uopgrad.written"] == {"g.uop": ("-o g.uop", "-o"), "r.json": ("the report r.json", "--report")}
    assert usage_error(io._writing, "m.uop", "-o") == \
        "-o m.uop is IN: writing it would replace the file read; give -o another file"
    assert usage_error(io._writing, "./m.npz", "--report", "the report ./m.npz") == (
        "the report ./m.npz is the model's values beside IN m.uop: writing it would replace the file read; give "
        "--report another file")
    assert usage_error(io._writing, "", "--report") == "--report is an empty path: name a file (or - for stdout)"


def test_writing_one_file_under_two_labels_is_refused(ctx):
    io._writing("g.uop", "-o")
    io._writing("g.uop", "-o")  # the same output named again: no clash with itself
    assert usage_error(io._writing, "./g.uop", "--report") == \
        "--report ./g.uop is also -o g.uop: one would replace the other; give -o another file"
    io._writing("-", "-o")
    io._writing("-", "--report")  # stdout twice: written in turn, nothing replaced
    io._writing("/dev/null", "-o")
    io._writing("/dev/null", "--report")
    io._writing("other.uop", "--report")


def test_a_read_file_may_be_written_in_place_only_if_it_is_in(ctx):
    io._reading_graph("m.uop")
    io._reading("the file -i x=x.npy reads", "x.npy", "-i")
    ctx.meta["uopgrad.in_place"] = True
    io._refuse_read("m.uop", "-o m.uop", "-o")
    assert usage_error(io._refuse_read, "m.npz", "-o m.npz", "-o") == \
        "-o m.npz is the model's values beside IN m.uop: writing it would replace the file read; give -o another file"
    assert usage_error(io._refuse_read, "x.npy", "-o x.npy", "-o") == \
        "-o x.npy is the file -i x=x.npy reads: writing it would replace the file read; give -o another file"
    ctx.meta["uopgrad.in_place"] = False
    assert usage_error(io._refuse_read, "m.uop", "-o m.uop", "-o") == \
        "-o m.uop is IN: writing it would replace the file read; give -o another file"
    ctx.meta["uopgrad.read"].append(("stdin", "-"))  # as if recorded: "-" and devices are never refused
    ctx.meta["uopgrad.read"].append(("a device", "/dev/null"))
    io._refuse_read("-", "-o -", "-o")
    io._refuse_read("/dev/null", "-o /dev/null", "-o")


def test_refuse_writing_read_before_any_work(ctx, tmp_path):
    assert usage_error(io._refuse_writing_read, "m.uop", {"-o": "g.uop", "--report": "m.npz"}) == (
        "--report m.npz is the model's values beside IN m.uop: writing it would replace the file read; give "
        "--report another file")
    ctx.meta.clear()
    io._refuse_writing_read("m.uop", {"-o": "m.uop", "--report": None}, in_place=True)
    assert ctx.meta["uopgrad.in_place"] is True and list(ctx.meta["uopgrad.written"]) == ["m.uop"]
    ctx.meta.clear()
    io._refuse_writing_read(None, {"-o": "g.uop"})
    assert "uopgrad.read" not in ctx.meta and "uopgrad.in_place" not in ctx.meta
    ctx.meta.clear()
    (tmp_path / "model.ONNX").write_bytes(b"")
    message = usage_error(io._refuse_writing_read, "model.ONNX", {"-o": "grad.npz"}, graph_form="uop")
    assert message.startswith("-o grad.npz: an ONNX model's weights go beside a .uop OUT as OUT.npz, here grad.npz")
    for out, form in (("grad.npz", None), ("grad.npz", "onnx"), ("-", "uop"), ("/dev/null", "uop"),
                      ("/dev/stdout", "uop")):
        ctx.meta.clear()
        io._refuse_writing_read("model.ONNX", {"-o": out}, graph_form=form)


def test_two_outputs_on_one_file_are_refused_before_any_is_written(ctx, tmp_path):
    for files in ([("a.uop", b"1"), ("./a.uop", b"2")], [("b.uop", b"0"), ("a.uop", b"1"), ("a.uop", b"2")]):
        with pytest.raises(click.UsageError) as caught:
            io._write_together(files)
        assert caught.value.message == (f"two outputs name the file {files[-1][0]}: one would replace the other; "
                                        "give one another file")
    assert not (tmp_path / "a.uop").exists() and not (tmp_path / "b.uop").exists()
    os.link(tmp_path / "m.uop", tmp_path / "hard.uop")
    assert usage_error(io._refuse_written_twice, [("hard.uop", b""), ("m.uop", b"")]) == \
        "two outputs name the file m.uop: one would replace the other; give one another file"
    io._refuse_written_twice([("-", b""), ("-", b""), ("/dev/null", b""), ("/dev/null", b""), ("c.uop", b"")])


def test_the_backstop_names_a_file_read_with_the_option_that_named_it(ctx):
    io._reading_graph("m.uop")
    ctx.meta["uopgrad.written"] = {"m.uop": ("the report m.uop", "--report")}
    assert usage_error(io._refuse_written_twice, [("-", b""), ("m.uop", b"")]) == \
        "the report m.uop is IN: writing it would replace the file read; give --report another file"
    assert usage_error(io._refuse_written_twice, [("./m.npz", b"")]) == (
        "-o ./m.npz is the model's values beside IN m.uop: writing it would replace the file read; give -o another "
        "file")


def test_write_together_writes_files_and_stdout(ctx, tmp_path, capfdbinary):
    io._write_together([("a.bin", b"A"), ("-", b"to stdout"), ("b.bin", [b"B", b"b"])])
    assert (tmp_path / "a.bin").read_bytes() == b"A" and (tmp_path / "b.bin").read_bytes() == b"Bb"
    assert capfdbinary.readouterr().out == b"to stdout"
    assert not (tmp_path / "-").exists()
    with pytest.raises(CommandFailed) as caught:
        io._write_together([("nowhere/a.bin", b"A")])
    assert caught.value.message == "nowhere/a.bin: cannot write: No such file or directory"


def test_is_stream(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_bytes(b"")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    try:
        streams = {path: io._is_stream(str(path)) for path in
                   ("/dev/null", "/dev/stdout", "/dev/fd/63", "/dev/zero", tmp_path / "fifo", tmp_path / "sock",
                    tmp_path / "file", tmp_path / "missing", tmp_path, "a\0b")}
    finally:
        listening.close()
    assert list(streams.values()) == [True, True, True, True, True, True, False, False, False, False]


def test_same_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").write_bytes(b"")
    (tmp_path / "b").write_bytes(b"")
    os.link("a", "hard")
    os.symlink("a", "soft")
    assert io._same_file("a", "./a") and io._same_file("a", "hard") and io._same_file("soft", "a")
    assert io._same_file("missing", "./sub/../missing")  # by path where neither exists
    assert not io._same_file("a", "b") and not io._same_file("missing", "a")
    assert not io._same_file("-", "-") and not io._same_file("a", "-") and not io._same_file("-", "a")


def test_the_weights_beside_an_out(tmp_path):
    assert [io._weights_beside(p) for p in ("g.uop", "dir.d/g", "g.tar.gz", "/dev/null")] == \
        ["g.npz", "dir.d/g.npz", "g.tar.npz", "/dev/null.npz"]
    io._refuse_weights_as_graph("g.uop")
    assert usage_error(io._refuse_weights_as_graph, "out/grad.npz") == (
        "-o out/grad.npz: an ONNX model's weights go beside a .uop OUT as OUT.npz, here out/grad.npz itself, which "
        "would replace the graph; give -o out/grad.uop (the weights then in out/grad.npz) or -o out/grad.onnx (which "
        "holds them)")


def test_form_of_file(tmp_path, capsys):
    uop, onnx = b"\x85\xa6format", b"\x08\x07\x12\x07pytorch"
    cases = {"a.uop": uop, "b.onnx": onnx, "c.MSGPACK": b"", "d.JSON": b"", "e": b"", "f.txt": b"plain",
             "g": uop, "h": onnx, "i.onnx": uop, "j.uop": onnx, "k.json": b"{}"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    os.mkfifo(tmp_path / "fifo.onnx")
    forms = {name: io._form_of_file(str(tmp_path / name)) for name in [*cases, "fifo.onnx", "missing.onnx", "missing"]}
    assert forms == {"a.uop": "uop", "b.onnx": "onnx", "c.MSGPACK": "uop", "d.JSON": "uop", "e": None, "f.txt": None,
                     "g": "uop", "h": "onnx", "i.onnx": "uop", "j.uop": "onnx", "k.json": "uop", "fifo.onnx": None,
                     "missing.onnx": "onnx", "missing": None}
    assert capsys.readouterr().err == (
        f"uopgrad: {tmp_path}/i.onnx: read as a .uop file (a MessagePack or JSON map), as its bytes are, though its "
        f"name ends in .onnx\nuopgrad: {tmp_path}/j.uop: read as an ONNX model, as its bytes are, though its name "
        "ends in .uop\n")


def test_stdout_is_never_a_file_and_its_own_error_is_raised_as_it_is(ctx, tmp_path, monkeypatch):
    """"-" is stdout even beside a file named "-"; stdout's own write error goes on as the
    OSError it is (worded where every stdout error is), and no file is renamed into place."""
    (tmp_path / "-").write_bytes(b"")
    assert not io._same_file("-", "./-") and not io._same_file("./-", "-")
    assert usage_error(io._reading_graph, "") == "IN is an empty path: name a file (or - for stdin)"

    class Full:
        def write(self, data):
            raise OSError(28, "No space left on device", "<stdout>")

        def flush(self):
            pass

    class Stdout:
        buffer = Full()
    monkeypatch.setattr("sys.stdout", Stdout())
    with pytest.raises(OSError) as caught:
        io._write_together([("a.bin", b"A"), ("-", b"to stdout")])
    assert not isinstance(caught.value, click.ClickException) and caught.value.filename == "<stdout>"
    assert not (tmp_path / "a.bin").exists()
