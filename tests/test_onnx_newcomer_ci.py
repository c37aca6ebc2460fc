"""What a CI engineer found in the ONNX bridge (newcomer 8), through the installed `uopgrad`
and onnxruntime:

- names: an ONNX name that is no valid graph name (whitespace, '=', ',') is renamed to one
  that collides with no name of the model, and valid names keep theirs (initializer "a b"
  took "a_b" and the real "a_b" became "a_b_2": --wrt a_b differentiated the other one);
  the renaming is noted on stderr and kept in meta.onnx.renamed;
- export: a graph output that is a graph input (output x = PARAM x, a model that returns
  an input or an initializer) is a valid model (it was `Identity(x) -> x`, not SSA);
- the graph's bytes depend on the model's bytes only, not on its file's name or a pipe;
- ConstantOfShape of a huge constant shape costs nothing when importing;
- a file's content, not only its extension, says what it is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto as T, helper as h, numpy_helper as nh  # noqa: E402

from uopcli.interop.onnx.importer import import_model  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


def uopgrad(cwd, *args, stdin: bytes | None = None):
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, input=stdin, capture_output=True, timeout=120)


def run(path, feeds) -> dict:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def vec(name, shape=(3,)):
    return h.make_tensor_value_info(name, T.FLOAT, list(shape))


# ----------------------------------------------------------------------------- names

AB_SPACE, AB, A_COMMA = np.float32([1, 2, 3]), np.float32([10, 20, 30]), np.float32([-1, 5, 7])
X = np.float32([0.5, 1.5, 2.5])


def colliding_model() -> onnx.ModelProto:
    """s = sum(x * "a b" * a_b + "a,b"), output "s t": the unsafe names come before the safe ones."""
    return model([h.make_node("Mul", ["x", "a b"], ["m1"]), h.make_node("Mul", ["m1", "a_b"], ["m2"]),
                  h.make_node("Add", ["m2", "a,b"], ["m3"]), h.make_node("ReduceSum", ["m3"], ["s t"], keepdims=0)],
                 [vec("x")], [vec("s t", ())],
                 [nh.from_array(AB_SPACE, "a b"), nh.from_array(AB, "a_b"), nh.from_array(A_COMMA, "a,b")])


def test_valid_names_keep_theirs_and_the_others_collide_with_none():
    graph, weights = import_model(colliding_model())
    assert graph.input_names == ["x", "a_b_2", "a_b", "a_b_3"]
    assert list(graph.outputs) == ["s_t"]
    np.testing.assert_array_equal(weights["a_b"], AB)
    np.testing.assert_array_equal(weights["a_b_2"], AB_SPACE)
    np.testing.assert_array_equal(weights["a_b_3"], A_COMMA)
    assert json.loads(graph.meta["onnx.renamed"]) == {"a b": "a_b_2", "a,b": "a_b_3", "s t": "s_t"}


def test_a_renamed_name_collides_with_no_node_output_either():
    """An intermediate value named a_b_2 reserves that name too: "a b" takes a_b_3... and a
    node's output named like a parameter can become a weight of its own (merged weights)."""
    m = model([h.make_node("Mul", ["x", "a b"], ["a_b_2"]), h.make_node("Mul", ["a_b_2", "a_b"], ["y"])],
              [vec("x")], [vec("y")], [nh.from_array(AB_SPACE, "a b"), nh.from_array(AB, "a_b")])
    graph, _ = import_model(m)
    assert graph.input_names == ["x", "a_b_3", "a_b"]


def test_no_renaming_no_meta():
    m = model([h.make_node("Mul", ["x", "a_b"], ["y"])], [vec("x")], [vec("y")], [nh.from_array(AB, "a_b")])
    assert "onnx.renamed" not in import_model(m)[0].meta


def test_wrt_the_valid_name_is_that_tensor_through_onnxruntime(tmp_path):
    onnx.save(colliding_model(), tmp_path / "col.onnx")
    done = uopgrad(tmp_path, "diff", "col.onnx", "--wrt", "a_b,a_b_2", "-o", "grad.onnx")
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().splitlines() == [
        "uopgrad: col.onnx: ONNX names with whitespace, '=' or ',' are renamed: 'a b' is a_b_2, 'a,b' is a_b_3, "
        "'s t' is s_t"]
    got = run(tmp_path / "grad.onnx", {"x": X})
    np.testing.assert_allclose(got["grad_a_b"], X * AB_SPACE, rtol=1e-6)    # d s / d a_b
    np.testing.assert_allclose(got["grad_a_b_2"], X * AB, rtol=1e-6)        # d s / d "a b"
    forward = run(tmp_path / "col.onnx", {"x": X})["s t"]                   # the model itself, as onnxruntime runs it
    np.testing.assert_allclose(forward, np.sum(X * AB_SPACE * AB + A_COMMA), rtol=1e-6)


def test_wrt_the_onnx_name_says_the_graphs(tmp_path):
    onnx.save(colliding_model(), tmp_path / "col.onnx")
    done = uopgrad(tmp_path, "diff", "col.onnx", "--wrt", "a b", "-q", "-o", "grad.onnx")
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "uopgrad: error: col.onnx: no input named 'a b' to differentiate with respect to: the ONNX model's 'a b' is "
        "input a_b_2 (renamed: a graph's names have no whitespace, '=' or ','); --wrt a_b_2\n")
    assert not (tmp_path / "grad.onnx").exists()


def test_info_shows_the_renaming(tmp_path):
    onnx.save(colliding_model(), tmp_path / "col.onnx")
    done = uopgrad(tmp_path, "info", "col.onnx", "-q")
    assert done.returncode == 0, done.stderr
    assert 'meta.onnx.renamed {"a b": "a_b_2", "a,b": "a_b_3", "s t": "s_t"}' in done.stdout.decode().splitlines()


# ----------------------------------------------------------------------------- outputs that are inputs

def checked(path) -> onnx.ModelProto:
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    return m


def test_an_input_output_under_its_own_name_exports_valid(tmp_path):
    """output x = PARAM x (and y = 2x): convert and diff --keep-forward write models the checker
    and onnxruntime take, with the values."""
    from uopcli import Graph, UOp, dtypes, save
    x = UOp.param("x", (3,), dtypes.float32)
    save(Graph({"x": x, "y": x * 2.0}, inputs=[x]), str(tmp_path / "ident.uop"))
    done = uopgrad(tmp_path, "convert", "ident.uop", "-o", "ident.onnx")
    assert done.returncode == 0, done.stderr
    done = uopgrad(tmp_path, "diff", "ident.uop", "--of", "y", "--wrt", "x", "--cotangent", "ones", "--keep-forward",
                   "-o", "grad.onnx")
    assert done.returncode == 0, done.stderr
    for name in ("ident.onnx", "grad.onnx"):
        m = checked(tmp_path / name)
        assert [o.name for o in m.graph.output][:2] == ["x", "y"]
        assert "x" not in [o for n in m.graph.node for o in n.output]
        got = run(tmp_path / name, {"x": X})
        np.testing.assert_array_equal(got["x"], X)
        np.testing.assert_array_equal(got["y"], X * 2)
    np.testing.assert_array_equal(run(tmp_path / "grad.onnx", {"x": X})["grad_x"], np.full(3, 2, np.float32))


def returning_model() -> onnx.ModelProto:
    """Returns its input x, its initializer w, y = x * w twice (y and y2), and a Constant."""
    return model([h.make_node("Mul", ["x", "w"], ["y"]), h.make_node("Identity", ["y"], ["y2"]),
                  h.make_node("Constant", [], ["c"], value=nh.from_array(np.float32(3.5)))],
                 [vec("x")], [vec("x"), vec("w"), vec("y"), vec("y2"), vec("c", ())], [nh.from_array(AB, "w")])


def test_a_model_returning_its_input_and_initializer_round_trips(tmp_path):
    onnx.save(returning_model(), tmp_path / "ret.onnx")
    truth = run(tmp_path / "ret.onnx", {"x": X})
    done = uopgrad(tmp_path, "convert", "ret.onnx", "-o", "out.onnx")
    assert done.returncode == 0, done.stderr
    m = checked(tmp_path / "out.onnx")
    assert [o.name for o in m.graph.output] == ["x", "w", "y", "y2", "c"]
    got = run(tmp_path / "out.onnx", {"x": X})
    assert got.keys() == truth.keys()
    for name in truth:
        np.testing.assert_array_equal(got[name], truth[name], err_msg=name)
    done = uopgrad(tmp_path, "diff", "ret.onnx", "--of", "y", "--wrt", "w", "--cotangent", "ones", "--keep-forward",
                   "-o", "grad.onnx")
    assert done.returncode == 0, done.stderr
    checked(tmp_path / "grad.onnx")
    got = run(tmp_path / "grad.onnx", {"x": X})
    np.testing.assert_array_equal(got["grad_w"], X)
    np.testing.assert_array_equal(got["w"], AB)


def test_an_output_named_like_another_input_is_refused(tmp_path):
    from uopcli import Graph, UOp, dtypes, save
    x = UOp.param("x", (3,), dtypes.float32)
    save(Graph({"x": x * 2.0}, inputs=[x]), str(tmp_path / "clash.uop"))
    done = uopgrad(tmp_path, "convert", "clash.uop", "-o", "clash.onnx")
    assert done.returncode == 1
    assert done.stderr.decode() == ("uopgrad: error: clash.uop: output 'x' is named like input 'x' but is another "
                                    "value: ONNX names each value once; rename the output\n")
    assert not (tmp_path / "clash.onnx").exists()


# ----------------------------------------------------------------------------- bytes from the model's bytes alone

def test_the_gradient_file_depends_on_the_models_bytes_not_its_name(tmp_path):
    """Two copies of a model, named differently, and the same bytes on stdin: one gradient
    file, byte for byte; its meta holds the model's sha256 (what sha256sum prints)."""
    import hashlib
    raw = colliding_model().SerializeToString()
    (tmp_path / "model-build1.onnx").write_bytes(raw)
    (tmp_path / "model-build2.onnx").write_bytes(raw)
    outputs = []
    for name in ("model-build1.onnx", "model-build2.onnx", "-"):
        done = uopgrad(tmp_path, "diff", name, "--wrt", "a_b", "--cotangent", "ones", "-q", "-o", "-",
                       stdin=raw if name == "-" else None)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    infos = [uopgrad(tmp_path, "info", name, "-q", stdin=raw if name == "-" else None).stdout
             for name in ("model-build1.onnx", "model-build2.onnx", "-")]
    assert infos[0] == infos[1] == infos[2]
    assert f"meta.onnx.sha256 {hashlib.sha256(raw).hexdigest()}".encode() in infos[0].splitlines()
    assert b"model-build" not in outputs[0] + infos[0]


# ----------------------------------------------------------------------------- constants of the model's size

def scalar_model(nodes, initializers, opset=17, x_shape=()) -> onnx.ModelProto:
    """y = x + s, s made by `nodes` from `initializers`."""
    return model(nodes + [h.make_node("Add", ["x", "s"], ["y"])], [vec("x", x_shape)], [vec("y", x_shape)],
                 initializers, opset)


def shape(dims, name="shp"):
    return nh.from_array(np.array(dims, np.int64), name)


def limited(args, cwd, megabytes=1500):
    """uopgrad with its address space limited (a bomb fails fast instead of swapping)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
    return subprocess.run([UOPGRAD, *args], cwd=cwd, capture_output=True, timeout=120, preexec_fn=limit)


@pytest.mark.parametrize("dims", [[8192, 16384], [100000, 100000, 10]], ids=["half", "huge"])
def test_constant_of_shape_of_a_huge_shape_costs_nothing_to_import(tmp_path, dims):
    m = scalar_model([h.make_node("ConstantOfShape", ["shp"], ["big"], value=nh.from_array(np.float32([1.0]))),
                      h.make_node("ReduceSum", ["big"], ["s"], keepdims=0, name="sum")], [shape(dims)])
    onnx.save(m, tmp_path / "bomb.onnx")
    done = limited(["validate", "bomb.onnx"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("ok: ")


def test_expand_of_constants_to_a_huge_shape_is_not_computed_when_importing(tmp_path):
    m = scalar_model([h.make_node("Constant", [], ["one"], value=nh.from_array(np.float32(2.0))),
                      h.make_node("Expand", ["one", "shp"], ["big"]),
                      h.make_node("ReduceSum", ["big"], ["s"], keepdims=0)], [shape([100000, 100000, 10])])
    onnx.save(m, tmp_path / "bomb.onnx")
    done = limited(["validate", "bomb.onnx"], tmp_path)
    assert done.returncode == 0, done.stderr


def test_large_constants_made_when_the_graph_runs_have_onnxruntimes_values(tmp_path):
    """Above the import limit (2 million elements): ConstantOfShape, an integer Range, an
    EyeLike and a Tile of constants are nodes, and eval gives onnxruntime's values."""
    n = 2_000_000
    nodes = [h.make_node("ConstantOfShape", ["shp"], ["c"], value=nh.from_array(np.float32([0.25]))),
             h.make_node("ReduceSum", ["c"], ["c_sum"], keepdims=0),
             h.make_node("Range", ["r0", "r1", "r2"], ["r"]), h.make_node("Cast", ["r"], ["r_f"], to=T.FLOAT),
             h.make_node("ReduceMax", ["r_f"], ["r_max"], keepdims=0),
             h.make_node("EyeLike", ["e_in"], ["e"], k=3), h.make_node("ReduceSum", ["e"], ["e_sum"], keepdims=0),
             h.make_node("Tile", ["tile_in", "reps"], ["tl"]), h.make_node("ReduceSum", ["tl"], ["t_sum"], keepdims=0),
             h.make_node("Add", ["c_sum", "r_max"], ["s1"]), h.make_node("Add", ["s1", "e_sum"], ["s2"]),
             h.make_node("Add", ["s2", "t_sum"], ["s"])]
    inits = [shape([n // 1000, 1000]), nh.from_array(np.int64(5), "r0"), nh.from_array(np.int64(3 * n + 5), "r1"),
             nh.from_array(np.int64(3), "r2"), nh.from_array(np.float32([1, 2]), "tile_in"),
             nh.from_array(np.int64([n]), "reps")]
    m = model(nodes + [h.make_node("Add", ["x", "s"], ["y"])],
              [vec("x", ()), vec("e_in", (1000, 2001))], [vec("y", ())], inits)
    onnx.save(m, tmp_path / "big.onnx")
    feeds = {"x": np.array(0.5, np.float32), "e_in": np.zeros((1000, 2001), np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    truth = run(tmp_path / "big.onnx", feeds)["y"]
    assert truth == 0.25 * n + 3 * n + 2 + 1000 + 3 * n + 0.5  # 6000007.5 in float32: the sums, as ORT adds them
    done = limited(["eval", "big.onnx", "-i", "in.npz", "-o", "out.npz"], tmp_path, 4000)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], truth)
    graph, _ = import_model(m)
    assert not any(node.op == "BUFFER" and node.arg is not None and getattr(node.arg, "size", 0) > 1 << 20
                   for node in graph.nodes())


def test_a_static_value_made_of_a_huge_constant_is_refused_naming_its_node(tmp_path):
    nodes = [h.make_node("ConstantOfShape", ["shp"], ["big"], name="ones",
                         value=nh.from_array(np.int64([1]))),
             h.make_node("ReduceMax", ["big"], ["m"], keepdims=1, name="most"),
             h.make_node("Reshape", ["x", "m"], ["s"], name="reshape")]
    m = model(nodes, [vec("x", (1,))], [vec("s", (1,))], [shape([100000, 100000, 10])])
    onnx.save(m, tmp_path / "m.onnx")
    done = limited(["validate", "m.onnx"], tmp_path)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "uopgrad: error: m.onnx: node 'reshape' (Reshape): shape (input 1) must be known when importing, but it is "
        "computed from the 100000000000 elements that ConstantOfShape 'ones' makes, more than the 1048576 computed "
        "when importing\n")


def test_a_float_range_too_long_to_compute_is_refused(tmp_path):
    nodes = [h.make_node("Range", ["r0", "r1", "r2"], ["r"], name="rng"),
             h.make_node("ReduceSum", ["r"], ["s"], keepdims=0)]
    inits = [nh.from_array(np.float32(v), n) for v, n in ((0, "r0"), (2.0 ** 40, "r1"), (1, "r2"))]
    onnx.save(scalar_model(nodes, inits), tmp_path / "m.onnx")
    done = limited(["validate", "m.onnx"], tmp_path)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "uopgrad: error: m.onnx: node 'rng' (Range): makes 1099511627776 elements when importing, more than 1048576: "
        "a float Range that long is not imported\n")


# ----------------------------------------------------------------------------- what a file is, by its bytes

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")
POLY, MLP = os.path.join(SAMPLES, "poly.uop"), os.path.join(SAMPLES, "onnx", "mlp-legacy17.onnx")


def test_an_onnx_model_without_its_extension_is_read_as_onnx(tmp_path):
    shutil.copy(MLP, tmp_path / "model")
    shutil.copy(MLP, tmp_path / "model.bin")
    truth = uopgrad(tmp_path, "validate", MLP)
    assert truth.returncode == 0 and truth.stdout == b"ok: 32 nodes, 5 inputs, 1 output\n"
    for name in ("model", "model.bin"):
        done = uopgrad(tmp_path, "validate", name)
        assert (done.returncode, done.stdout, done.stderr) == (0, truth.stdout, b""), name


def test_a_descriptor_and_a_fifo_are_told_by_their_bytes(tmp_path):
    """<(cat model.onnx) is /dev/fd/63, no extension, readable once; so is a FIFO."""
    done = subprocess.run(["bash", "-c", f'"{UOPGRAD}" validate <(cat "{MLP}") && "{UOPGRAD}" validate <(cat "{POLY}")'],
                          cwd=tmp_path, capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    assert done.stdout == b"ok: 32 nodes, 5 inputs, 1 output\nok: 14 nodes, 1 input, 1 output\n"
    os.mkfifo(tmp_path / "fifo")
    done = subprocess.run(["bash", "-c", f'cat "{MLP}" > fifo & "{UOPGRAD}" info fifo -q --json; wait'],
                          cwd=tmp_path, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"] == 32


def test_bytes_that_contradict_the_extension_are_read_as_they_are_with_a_note(tmp_path):
    shutil.copy(POLY, tmp_path / "out.onnx")
    shutil.copy(MLP, tmp_path / "model.uop")
    done = uopgrad(tmp_path, "validate", "out.onnx")
    assert done.returncode == 0 and done.stdout == b"ok: 14 nodes, 1 input, 1 output\n"
    assert done.stderr == (b"uopgrad: out.onnx: read as a .uop file (a MessagePack or JSON map), as its bytes are, "
                           b"though its name ends in .onnx\n")
    done = uopgrad(tmp_path, "validate", "model.uop")
    assert done.returncode == 0 and done.stdout == b"ok: 32 nodes, 5 inputs, 1 output\n"
    assert done.stderr == b"uopgrad: model.uop: read as an ONNX model, as its bytes are, though its name ends in .uop\n"


def test_bytes_of_neither_kind_are_said_in_one_line(tmp_path):
    (tmp_path / "notes").write_text("hello world\n")
    (tmp_path / "bad.onnx").write_text("hello world\n")
    done = uopgrad(tmp_path, "validate", "notes")
    assert done.returncode == 1 and done.stderr == (b"uopgrad: error: notes: neither a .uop file (a MessagePack or "
                                                    b"JSON map) nor an ONNX model: text starting 'hello world'\n")
    done = uopgrad(tmp_path, "validate", "bad.onnx")
    assert done.returncode == 1 and done.stderr.startswith(b"uopgrad: error: bad.onnx: not an ONNX model")
    assert done.stderr.count(b"\n") == 1


@pytest.mark.parametrize("to, out", [("msgpack", "out.onnx"), ("json", "out.onnx"), ("onnx", "out.json"),
                                     ("onnx", "out.uop"), ("msgpack", "out.json"), ("json", "out.msgpack")])
def test_to_that_outs_name_contradicts_is_a_usage_error(tmp_path, to, out):
    done = uopgrad(tmp_path, "convert", POLY, "--to", to, "-o", out)
    assert done.returncode == 2 and not (tmp_path / out).exists()
    named = {".onnx": "ONNX", ".json": "JSON", ".msgpack": "MessagePack", ".uop": "the .uop format"}[
        os.path.splitext(out)[1]]
    right = {"onnx": ".onnx", "json": ".json or .uop", "msgpack": ".uop or .msgpack"}[to]
    assert done.stderr.decode() == (f"uopgrad: error: --to {to} contradicts -o {out}, whose name says {named}: give "
                                    f"-o a {right} name, or leave out --to (see 'uopgrad convert --help')\n")


@pytest.mark.parametrize("to, out", [("json", "out.uop"), ("msgpack", "out.uop"), ("onnx", "out.onnx"),
                                     ("onnx", "out.bin"), ("json", "-")])
def test_to_that_agrees_with_outs_name_writes_what_reads_back(tmp_path, to, out):
    done = uopgrad(tmp_path, "convert", POLY, "--to", to, "-o", out)
    assert done.returncode == 0, done.stderr
    if out != "-":
        back = uopgrad(tmp_path, "validate", out)
        assert (back.returncode, back.stdout, back.stderr) == (0, b"ok: 14 nodes, 1 input, 1 output\n", b"")
