"""How an ONNX model comes in through the CLI, tested through the installed `uopgrad`:

- on stdin (`uopgrad info - < model.onnx`): the bytes tell a .uop file (a MessagePack or
  JSON map) from an ONNX model; the commands give what the path gives (values, the weights
  written beside a .uop OUT), and refusals (a truncated model, other bytes, no onnx
  package) are one line naming <stdin>;
- with symbolic dimensions (a dynamic batch): `--shape N=5` sizes N in every input,
  `--shape x=5,6` one input's shape, and eval's and check's `-i` arrays size what is left;
  sizes missing or contradicting each other are refused at once, in one line that says
  what to type."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

from _onnx_helpers import assert_close  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
W = np.arange(18, dtype=np.float32).reshape(6, 3) / 10 - 0.8


def batch_model(x_dims=("N", 6), y_dims=("N", 3)) -> onnx.ModelProto:
    """d = x @ W - y, loss = sum(d * d): x [N, 6] and y [N, 3] share the symbolic batch N;
    W [6, 3] is a weight (an initializer)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Sub", ["h", "y"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["e"]), helper.make_node("ReduceSum", ["e"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "batch", [helper.make_tensor_value_info("x", T.FLOAT, list(x_dims)),
                                               helper.make_tensor_value_info("y", T.FLOAT, list(y_dims))],
                              [helper.make_tensor_value_info("d", T.FLOAT, None),
                               helper.make_tensor_value_info("loss", T.FLOAT, [])],
                              initializer=[numpy_helper.from_array(W, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def data(rows: int, seed: int = 0) -> dict:
    r = np.random.default_rng(seed)
    return {"x": r.standard_normal((rows, 6)).astype(np.float32), "y": r.standard_normal((rows, 3)).astype(np.float32)}


def onnxruntime(model, feeds) -> dict:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def uopgrad(cwd, *args, stdin: bytes | None = None):
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, input=stdin, capture_output=True, timeout=120)


def ok(run) -> str:
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout.decode()


def refusal(run, code: int = 1) -> str:
    """The one error line of a failed run (nothing on stdout, no traceback)."""
    assert run.returncode == code, (run.returncode, run.stderr.decode())
    assert run.stdout == b"" and b"Traceback" not in run.stderr
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uopgrad: error: "), lines
    return lines[0][len("uopgrad: error: "):]


@pytest.fixture
def saved(tmp_path):
    """The batch model as m.onnx and its bytes, with 4 rows of data as data.npz."""
    model = batch_model()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "data.npz", **data(4))
    return tmp_path, model, (tmp_path / "m.onnx").read_bytes()


# ----------------------------------------------------------------------------- an ONNX model on stdin

def test_info_eval_and_diff_on_stdin_give_what_the_path_gives(saved):
    tmp_path, model, raw = saved
    by_path = ok(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=4")).splitlines()
    on_stdin = ok(uopgrad(tmp_path, "info", "-", "--shape", "N=4", stdin=raw)).splitlines()
    assert "inputs          x float32[4,6], y float32[4,3], W float32[6,3]" in on_stdin
    # the same graph, to the byte: its meta has the model's sha256, not the file's name
    assert by_path == on_stdin
    assert f"meta.onnx.sha256 {hashlib.sha256(raw).hexdigest()}" in by_path

    ok(uopgrad(tmp_path, "eval", "m.onnx", "-i", "data.npz", "-o", "path.npz"))
    ok(uopgrad(tmp_path, "eval", "-", "-i", "data.npz", "-o", "stdin.npz", stdin=raw))
    want = onnxruntime(model, dict(np.load(tmp_path / "data.npz")))
    for name in ("d", "loss"):
        assert np.array_equal(np.load(tmp_path / "stdin.npz")[name], np.load(tmp_path / "path.npz")[name]), name
        assert_close(np.load(tmp_path / "stdin.npz")[name], want[name], name)

    (tmp_path / "p").mkdir()
    ok(uopgrad(tmp_path, "diff", "m.onnx", "--shape", "N=4", "--wrt", "W", "--of", "loss", "-o", "p/g.uop"))
    run = uopgrad(tmp_path, "diff", "-", "--shape", "N=4", "--wrt", "W", "--of", "loss", "-o", "g.uop", stdin=raw)
    ok(run)
    assert "weights are not written" not in run.stderr.decode()
    assert (tmp_path / "g.npz").read_bytes() == (tmp_path / "p" / "g.npz").read_bytes()  # the weights, beside OUT
    assert list(np.load(tmp_path / "g.npz")) == ["W"] and np.array_equal(np.load(tmp_path / "g.npz")["W"], W)
    assert ok(uopgrad(tmp_path, "print", "g.uop")) == ok(uopgrad(tmp_path, "print", "p/g.uop"))
    ok(uopgrad(tmp_path, "eval", "g.uop", "-i", "data.npz", "-i", "g.npz", "-o", "grad.npz"))
    x, y = np.load(tmp_path / "data.npz")["x"], np.load(tmp_path / "data.npz")["y"]
    assert_close(np.load(tmp_path / "grad.npz")["grad_W"], 2 * x.T @ (x @ W - y), "d loss / d W")


def test_options_work_on_stdin_as_on_a_path(tmp_path):
    """--constant fixes an input of an ONNX model on stdin (and is refused for a .uop on
    stdin); --opset writes the gradient of a model read from stdin as ONNX."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Mul", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [1, 6]),
                                           helper.make_tensor_value_info("shape", T.INT64, [2]),
                                           helper.make_tensor_value_info("w", T.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    raw = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    out = ok(uopgrad(tmp_path, "eval", "-", "--constant", "shape=3,-1", "-i", "x=2", "-i", "w=0.5", stdin=raw))
    assert out.splitlines()[1].split()[:2] == ["y", "[3,2]"] and "1 1 1 1 1 1" in out
    assert "must be known when importing" in refusal(uopgrad(tmp_path, "info", "-", stdin=raw))
    ok(uopgrad(tmp_path, "diff", "-", "--constant", "shape=3,-1", "--wrt", "x", "--cotangent", "ones", "-o",
               "g.onnx", "--opset", "19", stdin=raw))
    assert onnx.load(tmp_path / "g.onnx").opset_import[0].version == 19
    uop = ok(uopgrad(tmp_path, "convert", "-", "--constant", "shape=3,-1", "-o", "-", "--to", "json", stdin=raw))
    assert refusal(uopgrad(tmp_path, "info", "-", "--constant", "x=1", stdin=uop.encode()), 2).startswith(
        "--constant fixes inputs of an ONNX IN when importing; a .uop IN (<stdin>)")


def test_a_truncated_model_on_stdin_is_refused_in_one_line_as_from_a_path(saved):
    tmp_path, _, raw = saved
    (tmp_path / "cut.onnx").write_bytes(raw[:100])
    by_path = refusal(uopgrad(tmp_path, "eval", "cut.onnx", "--random"))
    on_stdin = refusal(uopgrad(tmp_path, "eval", "-", "--random", stdin=raw[:100]))
    assert on_stdin.startswith("<stdin>: not an ONNX model (truncated or another kind of file: ")
    assert by_path == on_stdin.replace("<stdin>", "cut.onnx", 1)


def test_weights_in_an_external_file_need_the_models_path(saved):
    tmp_path, model, _ = saved
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    assert "x float32[2,6]" in ok(uopgrad(tmp_path, "info", "ext.onnx", "--shape", "N=2"))
    assert refusal(uopgrad(tmp_path, "info", "-", "--shape", "N=2", stdin=(tmp_path / "ext.onnx").read_bytes())) == (
        "<stdin>: initializer 'W': its values are in an external file 'ext.data', read from the model's folder: "
        "give the model's path (not its bytes, as on stdin)")


def test_external_data_outside_the_models_folder_is_refused_as_such(saved):
    """A location climbing out of the model's folder was reported as "missing" (whether the
    file was there or not): it is refused because it lies outside; a file truly missing
    inside the folder is still "missing"."""
    tmp_path, model, _ = saved
    (tmp_path / "secret.data").write_bytes(b"\0" * 72)            # there, beside the folder
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    for location, why in (("../secret.data", "it lies outside the model's folder"),
                          ("../../../etc/passwd", "it lies outside the model's folder"),
                          ("sub/../../secret.data", "it lies outside the model's folder"),
                          (str(tmp_path / "secret.data"), "an absolute path"),
                          ("gone.data", None)):
        moved = onnx.load(tmp_path / "m" / "ext.onnx", load_external_data=False)
        for tensor in moved.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location
        onnx.save(moved, tmp_path / "m" / "moved.onnx")
        line = refusal(uopgrad(tmp_path, "info", "m/moved.onnx", "--shape", "N=2"))
        if why is None:
            assert line == "m/moved.onnx: initializer 'W': its external data file 'gone.data' is missing", line
        else:
            assert line.startswith(f"m/moved.onnx: initializer 'W': its external data file {location!r} is refused: "
                                   f"{why}"), line


@pytest.mark.parametrize("given, looks", [
    (b"digraph G { a -> b }\n", "text starting 'digraph G { a -> b }'"),
    (b"PK\x03\x04\x14\x00\x00\x00", "a zip archive (an .npz?)"),
    (b"\x05\x00\xff\x13", "binary data starting 05 00 ff 13"),
])
def test_other_bytes_on_stdin_are_said_to_be_neither(tmp_path, given, looks):
    assert refusal(uopgrad(tmp_path, "info", "-", stdin=given)) == (
        f"<stdin>: neither a .uop file (a MessagePack or JSON map) nor an ONNX model: {looks}")


def test_a_damaged_uop_on_stdin_still_gets_the_uop_readers_words(tmp_path):
    assert refusal(uopgrad(tmp_path, "info", "-", stdin=b'{"format": "uop"')).startswith("<stdin>: ")
    assert "ONNX" not in refusal(uopgrad(tmp_path, "info", "-", stdin=b"\x81\xa6format"))
    assert refusal(uopgrad(tmp_path, "info", "-", stdin=b"  [1, 2]")) == (
        "<stdin>: not a .uop file: the top level is an array, not a map")


def test_without_the_onnx_package_stdin_says_what_the_bytes_look_like(saved):
    tmp_path, _, raw = saved
    script = ("import sys; sys.modules['onnx'] = None\n"
              "from uopcli.cli.app import main\n"
              "sys.exit(main.main(sys.argv[1:], standalone_mode=False))\n")
    done = subprocess.run([sys.executable, "-c", script, "info", "-"], cwd=tmp_path, input=raw, capture_output=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == ("uopgrad: error: <stdin>: not a .uop file (a MessagePack or JSON map) but "
                                    "protobuf starting as an ONNX model does (ir_version first); reading ONNX "
                                    "models needs the onnx package: pip install 'uopgrad[onnx]'\n")


# ----------------------------------------------------------------------------- symbolic dimensions

def test_shape_by_dimension_name_sizes_both_inputs_as_onnxruntime_computes(saved):
    tmp_path, model, _ = saved
    feeds = data(5, seed=1)
    np.save(tmp_path / "x.npy", feeds["x"])
    np.save(tmp_path / "y.npy", feeds["y"])
    ok(uopgrad(tmp_path, "eval", "m.onnx", "--shape", "N=5", "-i", "x=x.npy", "-i", "y=y.npy", "-o", "out.npz"))
    want = onnxruntime(model, feeds)
    for name in ("d", "loss"):
        assert_close(np.load(tmp_path / "out.npz")[name], want[name], name)
    # an input's whole shape still sizes it, and N with it; the gradient written as ONNX is static
    ok(uopgrad(tmp_path, "diff", "m.onnx", "--shape", "x=5,6", "--wrt", "W", "--of", "loss", "-o", "g.onnx"))
    inputs = {i.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in i.type.tensor_type.shape.dim]
              for i in onnx.load(tmp_path / "g.onnx").graph.input}
    assert inputs["x"] == [5, 6] and inputs["y"] == [5, 3]
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    grad = session.run(["grad_W"], feeds)[0]
    assert_close(grad, 2 * feeds["x"].T @ (feeds["x"] @ W - feeds["y"]), "d loss / d W")


def test_missing_sizes_are_one_line_listing_every_input_and_what_to_type(saved):
    tmp_path, _, _ = saved
    assert refusal(uopgrad(tmp_path, "convert", "m.onnx", "-o", "m.uop")) == (
        "m.onnx: inputs with symbolic dimensions: x [N, 6], y [N, 3]: give their sizes with --shape N=<size> "
        "(or --shape x=<dims>)")
    onnx.save(batch_model(("B", "T"), (None, 3)), tmp_path / "two.onnx")
    assert refusal(uopgrad(tmp_path, "convert", "two.onnx", "-o", "two.uop", "--shape", "B=2")) == (
        "two.onnx: inputs with symbolic dimensions: x [2, T], y [?, 3]: give their sizes with --shape T=<size> "
        "--shape y=<dims>")
    # info counts a named dimension left unsized as 1, but a dimension with no name it cannot
    assert refusal(uopgrad(tmp_path, "info", "two.onnx", "--shape", "B=2")) == (
        "two.onnx: input with a symbolic dimension: y [?, 3]: give its size with --shape y=<dims>")


def test_contradicting_sizes_are_refused_at_once_naming_both(saved):
    tmp_path, _, _ = saved
    assert refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "x=5,6", "--shape", "y=4,3")) == (
        "m.onnx: --shape y=4,3 gives N=4, but --shape x=5,6 gives N=5: a symbolic dimension has one size")
    assert refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=4", "--shape", "x=5,6")) == (
        "m.onnx: --shape x=5,6 gives N=5, but --shape N=4: a symbolic dimension has one size")
    assert refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "x=4,7")) == (
        "m.onnx: --shape x=4,7 does not fit the file's shape [N, 6] of input 'x'")


def test_a_size_below_one_is_refused_naming_the_value(saved):
    """--shape N=0 made an empty batch: diff then called every gradient "identically zero:
    not reached"."""
    tmp_path, _, _ = saved
    for value in ("N=0", "x=0,6", "N=-1"):
        line = refusal(uopgrad(tmp_path, "diff", "m.onnx", "--shape", value, "--wrt", "W", "--of", "loss",
                               "-o", "g.uop"), code=2)
        assert f"--shape': '{value}': give NAME=D1,D2,... with whole sizes >= 1" in line, line
    assert not (tmp_path / "g.uop").exists()


def test_a_name_sized_twice_differently_is_refused_naming_both(saved):
    """--shape N=5 --shape N=6 used 6 without a word; the same size twice is fine, also
    when one is the group's option and one the command's."""
    tmp_path, _, _ = saved
    line = refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=5", "--shape", "N=6"), code=2)
    assert "--shape': 'N=5' and 'N=6' give N two sizes: give one" in line, line
    line = refusal(uopgrad(tmp_path, "--shape", "x=5,6", "info", "m.onnx", "--shape", "x=4,6"), code=2)
    assert "'x=5,6' and 'x=4,6' give x two sizes" in line, line
    assert "x float32[5,6]" in ok(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=5", "--shape", "N=05"))
    assert "x float32[5,6]" in ok(uopgrad(tmp_path, "--shape", "N=5", "info", "m.onnx", "--shape", "N=5"))


def test_eval_and_check_take_sizes_from_the_input_arrays(saved):
    tmp_path, model, raw = saved
    np.savez(tmp_path / "seven.npz", **data(7, seed=2))
    want = onnxruntime(model, data(7, seed=2))
    for source, stdin in (("m.onnx", None), ("-", raw)):
        ok(uopgrad(tmp_path, "eval", source, "-i", "seven.npz", "-o", "out.npz", stdin=stdin))
        assert np.load(tmp_path / "out.npz")["d"].shape == (7, 3)
        assert_close(np.load(tmp_path / "out.npz")["loss"], want["loss"], f"loss ({source})")
    np.save(tmp_path / "x.npy", data(7, seed=2)["x"])
    out = ok(uopgrad(tmp_path, "eval", "m.onnx", "-i", "x=x.npy", "--random", "--json"))
    assert '"shape": [7, 3]' in out  # y, random, takes N from x's array
    assert "ok: gradients of loss match" in ok(uopgrad(tmp_path, "check", "m.onnx", "--wrt", "W", "--of", "loss",
                                                       "-i", "seven.npz"))
    np.savez(tmp_path / "odd.npz", x=data(7)["x"], y=data(5)["y"])
    assert refusal(uopgrad(tmp_path, "eval", "m.onnx", "-i", "odd.npz")) == (
        "m.onnx: the value given for y ([5, 3]) gives N=5, but the value given for x ([7, 6]) gives N=7: "
        "a symbolic dimension has one size")
    assert refusal(uopgrad(tmp_path, "eval", "m.onnx", "-i", "seven.npz", "--shape", "N=3")) == (
        "m.onnx: the value given for x ([7, 6]) gives N=7, but --shape N=3: a symbolic dimension has one size")


def test_eval_map_takes_sizes_from_the_first_shard(saved):
    """--map over shards of 7 rows: N is 7, from the first shard's members (as -i's arrays
    give it); the sum over the shards is onnxruntime's, shard by shard."""
    tmp_path, model, _ = saved
    (tmp_path / "shards").mkdir()
    for k in range(3):
        np.savez(tmp_path / "shards" / f"part-{k}.npz", **data(7, seed=10 + k))
    ok(uopgrad(tmp_path, "eval", "m.onnx", "--map", "shards/*.npz", "-o", "sum.npz"))
    want = sum(onnxruntime(model, data(7, seed=10 + k))["loss"] for k in range(3))
    assert_close(np.load(tmp_path / "sum.npz")["loss"], want, "loss summed over the shards")
    np.savez(tmp_path / "shards" / "part-3.npz", **data(5, seed=13))  # a shorter last shard: static shapes
    assert refusal(uopgrad(tmp_path, "eval", "m.onnx", "--map", "shards/*.npz", "-o", "sum.npz")) == (
        "shards/part-3.npz: member 'x' is float32[5,6] but input 'x' is float32[7,6]: every shard must hold the "
        "graph's 7 rows; run a shorter one on its own, with a graph of its size (an ONNX model with a symbolic batch "
        "takes it from `-i shards/part-3.npz`)")
    alone = uopgrad(tmp_path, "eval", "m.onnx", "-i", "shards/part-3.npz", "-o", "last.npz")  # as the hint says
    ok(alone)
    assert_close(np.load(tmp_path / "last.npz")["loss"], onnxruntime(model, data(5, seed=13))["loss"], "the short one")


def test_a_name_the_model_does_not_have_is_refused_listing_its_dimensions(saved):
    tmp_path, _, _ = saved
    assert refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "M=3")) == (
        "m.onnx: --shape names no input or symbolic dimension of the model: M; inputs: x, y; symbolic dimensions: N")
    assert refusal(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=3,4")) == (
        "m.onnx: --shape N=3,4: N is a symbolic dimension: give one size, --shape N=<size>")
    run = uopgrad(tmp_path, "info", "m.onnx", "--shape", "x=N,6")  # the size is a number, the name goes left
    assert "--shape N=<size>" in refusal(run, code=2)


def test_an_input_named_like_a_dimension_wins(tmp_path):
    """--shape N=3 where N is an input and a dimension's name: the input's shape, as --help says."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Add", ["s", "N"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 2]),
                                           helper.make_tensor_value_info("N", T.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), tmp_path / "n.onnx")
    assert refusal(uopgrad(tmp_path, "info", "n.onnx", "--shape", "N=3")) == (
        "n.onnx: --shape N=3 does not fit the file's shape [1] of input 'N'")
    assert "x float32[3,2], N float32[1]" in ok(uopgrad(tmp_path, "info", "n.onnx", "--shape", "x=3,2"))


# ----------------------------------------------------------------------------- weights a pipe cannot carry

SAMPLE_MLP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples", "onnx",
                          "mlp-legacy14.onnx")


def _pipe(command: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{os.path.dirname(UOPGRAD)}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_eval_of_a_piped_onnx_graph_says_its_weights_did_not_come_with_it(tmp_path):
    """`hvp model.onnx | eval - --random` filled the model's weights with noise, and only the
    first command's note said the weights stay behind: the .uop on stdout now names them in
    its meta, and eval says which inputs they are, with --random and without."""
    weights = "fc1.weight, fc1.bias, fc2.weight, fc2.bias: the ONNX model's weights"
    rest = "which were not written with the graph on stdout; -o FILE.uop writes them beside it as FILE.npz, for -i FILE.npz"
    head = f"uopgrad hvp {SAMPLE_MLP} --wrt fc1.weight --cotangent ones 2>/dev/null"
    filled = _pipe(f"{head} | uopgrad eval - --random -o out.npz", tmp_path)
    assert filled.returncode == 0 and filled.stderr == f"uopgrad: random values fill {weights}, {rest}\n"
    missing = _pipe(f"{head} | uopgrad eval -", tmp_path)
    note, error = missing.stderr.splitlines()
    assert missing.returncode == 1 and note == f"uopgrad: no value is given for {weights}, {rest}"
    assert error.startswith("uopgrad: error: <stdin>: missing input values: x float32[3,8], fc1.weight")
    # given the values (as -o FILE writes them), no note; a graph never piped has no such meta
    written = _pipe(f"uopgrad hvp {SAMPLE_MLP} --wrt fc1.weight --cotangent ones -o h.uop && "
                    "uopgrad eval h.uop -i h.npz --random -o out.npz && uopgrad eval h.uop --random -o out.npz", tmp_path)
    assert written.returncode == 0 and "were not written" not in written.stderr
    assert "h.npz beside h.uop holds values" in written.stderr
    kept = _pipe(f"uopgrad convert {SAMPLE_MLP} -o - | uopgrad diff - --wrt x --cotangent ones | "
                 "uopgrad eval - --random -o out.npz", tmp_path)  # the meta goes down the pipeline
    assert kept.returncode == 0 and f"random values fill {weights}" in kept.stderr


def test_info_counts_unsized_symbolic_dimensions_as_1_and_says_so(saved):
    """info looks at a model nobody has sized yet (it refused, asking for --shape, before
    the user could see what to size); every other command still refuses."""
    tmp_path, _, data = saved
    shown = ok(uopgrad(tmp_path, "info", "m.onnx")).splitlines()
    assert "inputs          x float32[1,6], y float32[1,3], W float32[6,3]" in shown
    assert "meta.onnx.assumed_sizes N=1 (given no size; --shape NAME=N sets one)" in shown
    as_json = json.loads(ok(uopgrad(tmp_path, "info", "-", "--json", stdin=data)))
    assert as_json["meta"]["onnx.assumed_sizes"].startswith("N=1 ")
    sized = ok(uopgrad(tmp_path, "info", "m.onnx", "--shape", "N=4")).splitlines()
    assert "inputs          x float32[4,6], y float32[4,3], W float32[6,3]" in sized
    assert not any("assumed" in line for line in sized)
    assert refusal(uopgrad(tmp_path, "convert", "m.onnx", "-o", "m.uop")).startswith(
        "m.onnx: inputs with symbolic dimensions")


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("command", [["diff", "--cotangent", "ones"], ["hvp"], ["check"]])
def test_the_commands_tell_the_import_which_inputs_they_differentiate(tmp_path, command):
    """x[x > 0].sum(): the import's refusal advised --constant x=..., a dead end for --wrt x;
    every differentiating command passes its --wrt names to the import, which then says why."""
    nodes = [helper.make_node("NonZero", ["x"], ["where"], name="n"),
             helper.make_node("Cast", ["where"], ["f"], to=T.FLOAT), helper.make_node("ReduceSum", ["f"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                              [helper.make_tensor_value_info("out", T.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    said = refusal(uopgrad(tmp_path, command[0], "m.onnx", "--wrt", "x", *command[1:]))
    assert said.endswith("but it is the model's input 'x'; --wrt names 'x': a shape that follows its values cannot "
                         "be static, so the model cannot be differentiated with respect to it as exported (--constant "
                         "would make it a constant, with no gradient)")
    assert refusal(uopgrad(tmp_path, "eval", "m.onnx", "-i", "x=1")).endswith("give its value with --constant x=...")


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_eval_of_a_piped_graph_names_the_values_beside_the_uop_it_came_from(tmp_path):
    """`jvp pp.uop | eval - --random`, pp.npz beside pp.uop: random values filled the model's
    weights without a word (the pipe carries no values); eval now names the file that holds
    them. A .uop with nothing beside it gets no such note."""
    made = _pipe(f"uopgrad convert {SAMPLE_MLP} -o pp.uop", tmp_path)
    assert made.returncode == 0 and (tmp_path / "pp.npz").is_file(), made.stderr
    filled = _pipe("uopgrad jvp pp.uop --wrt fc1.weight | uopgrad eval - --random -o out.npz", tmp_path)
    assert filled.returncode == 0 and filled.stderr == (
        "uopgrad: random values fill fc1.weight, fc1.bias, fc2.weight, fc2.bias: their values are in pp.npz, which "
        "a pipe does not carry; -i pp.npz gives them\n")
    given = _pipe("uopgrad jvp pp.uop --wrt fc1.weight | uopgrad eval - -i pp.npz --random -o out.npz", tmp_path)
    assert given.returncode == 0 and given.stderr == ""
    (tmp_path / "pp.npz").rename(tmp_path / "elsewhere.npz")
    alone = _pipe("uopgrad jvp pp.uop --wrt fc1.weight | uopgrad eval - --random -o out.npz", tmp_path)
    assert alone.returncode == 0 and alone.stderr == ""


# ----------------------------------------------------------------------------- outputs that would destroy a file

@pytest.mark.parametrize("command", [["diff", "--wrt", "W"], ["hvp", "--wrt", "W"], ["render", "--format", "dot"]])
def test_an_output_naming_the_input_is_refused_and_the_model_kept(saved, command):
    """`uopgrad diff m.onnx --wrt W -o m.onnx` replaced the model with its gradient, exit 0.
    (convert and simplify may write IN in place: the same graph; tests/test_cli.py.)"""
    tmp_path, _, raw = saved
    run = uopgrad(tmp_path, command[0], "m.onnx", *command[1:], "--shape", "N=4", "-o", "./m.onnx")
    assert refusal(run, 2).startswith("-o ./m.onnx is IN: writing it would replace the file read; give -o another "
                                      "file")
    assert (tmp_path / "m.onnx").read_bytes() == raw


def test_the_weights_beside_a_uop_out_replace_an_earlier_runs_but_no_other_file(saved):
    """convert m.onnx -o m.uop writes m.npz beside it: over an earlier run's m.npz (a
    member in common), but not over a file of other arrays, or no .npz at all (kept)."""
    tmp_path, _, _ = saved
    np.savez(tmp_path / "m.npz", W=np.zeros((6, 3), np.float32), old=np.zeros(1))  # an earlier version's
    ok(uopgrad(tmp_path, "convert", "m.onnx", "--shape", "N=4", "-o", "m.uop"))
    with np.load(tmp_path / "m.npz") as written:
        assert written.files == ["W"] and np.array_equal(written["W"], W)
    (tmp_path / "m.uop").unlink()
    for other, held in ((lambda p: np.savez(p, x=np.ones(2), y=np.ones(3)), "holds other arrays (x, y)"),
                        (lambda p: p.write_bytes(b"a note"), "is no .npz")):
        other(tmp_path / "m.npz")
        kept = (tmp_path / "m.npz").read_bytes()
        run = uopgrad(tmp_path, "diff", "m.onnx", "--wrt", "W", "--of", "loss", "--shape", "N=4", "-o", "m.uop")
        assert refusal(run) == (f"m.npz {held}: writing the model's weights beside m.uop would replace it; move it, "
                                "or give -o another name")  # exit status 1: a file in the way, the command line right
        assert (tmp_path / "m.npz").read_bytes() == kept and not (tmp_path / "m.uop").exists()


def test_a_limit_is_refused_for_an_onnx_model_not_ignored(saved):
    """--limit max_nodes=5 bounded a .uop IN but was silently ignored for an .onnx one."""
    tmp_path, _, raw = saved
    for source, stdin in (("m.onnx", None), ("-", raw)):
        run = uopgrad(tmp_path, "info", source, "--shape", "N=4", "--limit", "max_nodes=5", stdin=stdin)
        assert refusal(run, 2).startswith("--limit bounds a .uop file as it is read; an ONNX IN is read by onnx")
    ok(uopgrad(tmp_path, "convert", "m.onnx", "--shape", "N=4", "-o", "m.uop"))
    run = uopgrad(tmp_path, "info", "m.uop", "--limit", "max_nodes=5")
    assert refusal(run).startswith("m.uop: ") and "max_nodes" in refusal(run)
