"""Import-time memory and time bombs: tiny ONNX models whose import made tables or constants
sized by an attribute, a constant input or a declared shape (a DFT of 40,000 points was a
38 GB table, a MelWeightMatrix of 100,000 bins 40 GB, an AffineGrid over 40,000² points 38
GB, a 10⁹-wide Resize 8 GB). Each is now imported cheaply: its table becomes nodes computed
when the graph runs (above FOLD_LIMIT elements, as ConstantOfShape's), or the model is
refused in one line naming the node and the size.

Peak memory is measured on the `uopgrad` process (resource.getrusage of the child, its
address space limited so a bomb fails fast); values of the run-time tables are checked by
forcing them on small sizes (the module's FOLD_LIMIT patched) against onnxruntime and the
tables they replace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto as T, helper as h, numpy_helper as nh  # noqa: E402

from test_onnx_import_ops import Init, one_node_model, ours  # noqa: E402
from test_onnx_signal import DFT_CASES, _dft_model, _input, _numpy_dft, _stft_model  # noqa: E402
from uopcli.interop.onnx import ops_attention, ops_grid, ops_nn, ops_signal, ops_tensor  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
PEAK_MB = 400  # an import of a tiny model peaks near 60 MB; each bomb took gigabytes

# runs uopgrad ARGS with its address space limited (a bomb fails fast, never swaps), passes
# on its stderr and exit status, and prints its peak resident memory in MB
_MEASURED = """
import resource, subprocess, sys
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
done = subprocess.run(sys.argv[1:], preexec_fn=limit, capture_output=True, timeout=240)
sys.stderr.buffer.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.exit(done.returncode)
"""


def measured(tmp_path, model, *args):
    """(exit status, stderr, peak MB) of `uopgrad ARGS bomb.onnx` (validate by default)."""
    onnx.save(model, tmp_path / "bomb.onnx")
    done = subprocess.run([sys.executable, "-c", _MEASURED, UOPGRAD, *(args or ("validate",)), "bomb.onnx"],
                          cwd=tmp_path, capture_output=True, timeout=300)
    return done.returncode, done.stderr.decode(), int(done.stdout.decode().split()[-1])


def value(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, list(shape))


def ints(name, values):
    return nh.from_array(np.array(values, np.int64), name)


def summed(nodes, inputs, initializers, out, opset, elem=T.FLOAT):
    """A model whose output y = ReduceSum(out): a scalar, whatever the bomb's size."""
    graph = h.make_graph(nodes + [h.make_node("ReduceSum", [out], ["y"], keepdims=0)], "bomb", inputs,
                         [value("y", (), elem)], initializers)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def assert_cheap(tmp_path, model, *args):
    status, stderr, peak = measured(tmp_path, model, *args)
    assert status == 0, stderr
    assert peak < PEAK_MB, f"peak {peak} MB"


# ----------------------------------------------------------------------------- DFT, STFT, MelWeightMatrix

def test_a_dft_of_40000_points_imports_without_its_table(tmp_path):
    """rows x columns = 1.6e9 cosines and sines: 38 GB (out of memory) before."""
    model = summed([h.make_node("DFT", ["x"], ["d"], name="dft")], [value("x", (1, 40000, 1))], [], "d", 20)
    assert_cheap(tmp_path, model)


def test_a_dft_of_a_huge_dft_length_imports_cheaply(tmp_path):
    """dft_length 2e8 of a 2-point signal: 6 GB and 30 s before."""
    model = summed([h.make_node("DFT", ["x", "n"], ["d"], name="dft")], [value("x", (1, 2, 1))],
                   [ints("n", 200_000_000)], "d", 20)
    assert_cheap(tmp_path, model)


def test_an_stft_of_long_frames_imports_cheaply(tmp_path):
    model = summed([h.make_node("STFT", ["x", "step", "", "len"], ["d"], name="stft")], [value("x", (1, 40000, 1))],
                   [ints("step", 1), ints("len", 40000)], "d", 17)
    assert_cheap(tmp_path, model)


def test_a_mel_matrix_of_100000_bins_imports_cheaply_and_too_many_bins_are_refused(tmp_path):
    def mel(bins):
        inits = [ints("bins", bins), ints("n", 100000), ints("rate", 16000),
                 nh.from_array(np.float32(0), "lo"), nh.from_array(np.float32(7999), "hi")]
        return summed([h.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["m"], name="mel")], [],
                      inits, "m", 17)
    assert_cheap(tmp_path, mel(100_000))  # 5e9 elements, 40 GB before
    status, stderr, peak = measured(tmp_path, mel(2_000_000_000))
    assert (status, stderr) == (1, "uopgrad: error: bomb.onnx: node 'mel' (MelWeightMatrix): num_mel_bins 2000000000 "
                                   "makes 2000000002 filter edges when importing, more than 1048576\n")
    assert peak < PEAK_MB


@pytest.fixture
def lazy_signal(monkeypatch):
    """Every signal table made when the graph runs, whatever its size."""
    monkeypatch.setattr(ops_signal, "FOLD_LIMIT", 4)


@pytest.mark.parametrize("shape, axis, length, inverse, onesided", DFT_CASES)
def test_a_dft_whose_tables_are_made_when_running_has_numpys_and_the_tables_values(
        shape, axis, length, inverse, onesided, monkeypatch):
    x = _input(shape)
    (table,) = ours(*_dft_model(x, 20, axis, length, inverse, onesided))
    monkeypatch.setattr(ops_signal, "FOLD_LIMIT", 0)
    model, feeds = _dft_model(x, 20, axis, length, inverse, onesided)
    graph, _ = import_model(model)
    assert not any(node.op == "BUFFER" and node.shape and len(node.shape) == 2 and min(node.shape) > 1
                   for node in graph.nodes())  # no table in the graph
    (got,) = ours(model, feeds)
    want = _numpy_dft(x, axis, length, inverse, onesided)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * max(1.0, np.abs(want).max()))
    np.testing.assert_allclose(got, table, rtol=0, atol=4e-15 * max(1.0, np.abs(want).max()))


def test_a_float32_dft_and_stft_made_when_running_have_onnxruntimes_values(lazy_signal):
    x = _input((2, 37, 2), np.float32)
    signal, window = _input((3, 100, 1), np.float32), np.random.default_rng(3).uniform(0.2, 1, 20).astype(np.float32)
    for model, feeds in (_dft_model(x, 20, 1, None, 0, 0), _dft_model(x, 20, 1, 50, 1, 0),
                         _dft_model(_input((2, 37, 1), np.float32), 20, 1, None, 0, 1),
                         _stft_model(signal, 7, window), _stft_model(signal, 10, None, 32, 0)):
        (got,) = ours(model, feeds)
        (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        assert got.shape == theirs.shape and got.dtype == theirs.dtype
        np.testing.assert_allclose(got, theirs, rtol=0, atol=2e-5 * np.abs(theirs).max())


@pytest.mark.parametrize("bins, length, rate, low, high", [(5, 16, 8192, 0.0, 4096.0), (6, 400, 16000, 0.0, 8000.0),
                                                           (6, 30, 1000, 0.0, 400.0), (3, 64, 1000, 50.0, 400.0)])
def test_a_mel_matrix_made_when_running_is_the_reference_bit_for_bit(bins, length, rate, low, high, monkeypatch):
    from onnx.reference import ReferenceEvaluator
    inputs = [Init(np.array(v, t)) for v, t in ((bins, np.int64), (length, np.int64), (rate, np.int64),
                                                (low, np.float32), (high, np.float32))]
    model, _ = one_node_model("MelWeightMatrix", inputs, {}, 17, 1, [T.FLOAT])
    (table,) = ours(model, {})
    monkeypatch.setattr(ops_signal, "FOLD_LIMIT", 8)
    (got,) = ours(model, {})
    np.testing.assert_array_equal(got, table)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {})[0])
    (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    np.testing.assert_allclose(got, theirs, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- simplify's constant folding

def test_simplify_folds_no_constant_it_would_have_to_make_huge(tmp_path):
    """A Tile of 10^9 constants reshaped and maxed is a node after import (FOLD_LIMIT);
    simplify's constant folding copied the reshaped broadcast (7.7 GB and 45 s), now it
    leaves it to run time. y = x + max(tile) = x + 2."""
    nodes = [h.make_node("Constant", [], ["c"], value=nh.from_array(np.float32([1.0, 2.0]))),
             h.make_node("Tile", ["c", "reps"], ["t"]), h.make_node("Reshape", ["t", "shp"], ["r"]),
             h.make_node("ReduceMax", ["r"], ["s"], keepdims=0), h.make_node("Add", ["x", "s"], ["y"])]
    graph = h.make_graph(nodes, "bomb", [value("x", ())], [value("y", ())],
                         [ints("reps", [1_000_000_000]), ints("shp", [1000, 2_000_000])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    assert_cheap(tmp_path, model, "simplify", "-o", "small.uop")
    small = onnx.helper.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    small.graph.initializer[0].CopyFrom(ints("reps", [3000]))
    small.graph.initializer[1].CopyFrom(ints("shp", [3, 2000]))
    onnx.save(small, tmp_path / "small.onnx")
    done = subprocess.run([UOPGRAD, "simplify", "small.onnx", "-o", "s.onnx"], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr
    (y,) = ort.InferenceSession(str(tmp_path / "s.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array(0.5, np.float32)})
    assert y == np.float32(2.5)


# ----------------------------------------------------------------------------- AffineGrid, Col2Im, Attention

def test_an_affine_grid_col2im_and_attention_of_huge_sizes_import_cheaply(tmp_path):
    """AffineGrid over 40,000² points (its base grid: 38 GB), Col2Im of 200x200 blocks
    (eye(40000): 6 GB), causal Attention of 40,000 queries and keys (their offsets: 12.8 GB)."""
    assert_cheap(tmp_path, summed([h.make_node("AffineGrid", ["theta", "size"], ["g"])], [value("theta", (1, 2, 3))],
                                  [ints("size", [1, 1, 40000, 40000])], "g", 20))
    assert_cheap(tmp_path, summed([h.make_node("Col2Im", ["x", "img", "blk"], ["c"])], [value("x", (1, 40000, 1))],
                                  [ints("img", [200, 200]), ints("blk", [200, 200])], "c", 18))
    qkv = [value(name, (1, 1, 40000, 1)) for name in "qkv"]
    assert_cheap(tmp_path, summed([h.make_node("Attention", ["q", "k", "v"], ["o"], is_causal=1)], qkv, [], "o", 23))


def _same_lazy_or_not(monkeypatch, module, model, feeds):
    """The model's outputs with its tables made when importing, then when running: bit for bit
    the same, and onnxruntime's."""
    before = ours(model, feeds)
    monkeypatch.setattr(module, "FOLD_LIMIT", 0)
    graph, _ = import_model(model)
    assert not any(node.op == "BUFFER" and node.shape and np.prod(node.shape) > 8 for node in graph.nodes())
    after = ours(model, feeds)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, table, want in zip(after, before, theirs):
        np.testing.assert_array_equal(got, table)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size, align", [([2, 3, 5, 7], 0), ([2, 3, 5, 7], 1), ([1, 2, 4, 1, 6], 0),
                                         ([1, 2, 3, 4, 2], 1), ([2, 1, 2, 9], 1), ([1, 1, 3, 50], 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_affine_grid_made_when_running_has_the_tables_and_onnxruntimes_values(size, align, dtype, monkeypatch):
    """(linspace's last point is its stop: 49 steps of 2/49 from -1 end 2^-52 below 1)"""
    dims = len(size) - 2
    theta = np.random.default_rng(5).standard_normal((size[0], dims, dims + 1)).astype(dtype)
    model, feeds = one_node_model("AffineGrid", [theta, Init(np.array(size, np.int64))], {"align_corners": align},
                                  20, 1, [T.FLOAT if dtype == np.float32 else T.DOUBLE])
    _same_lazy_or_not(monkeypatch, ops_grid, model, feeds)


@pytest.mark.parametrize("image, block, attrs", [([5, 6], [2, 3], {}), ([7, 5], [3, 2], {"strides": [2, 1]}),
                                                 ([6, 6], [2, 2], {"dilations": [2, 1], "pads": [1, 0, 1, 2]})])
def test_col2im_made_when_running_has_the_tables_and_onnxruntimes_values(image, block, attrs, monkeypatch):
    spatial = len(image)
    strides, dilations = attrs.get("strides", [1] * spatial), attrs.get("dilations", [1] * spatial)
    pads = attrs.get("pads", [0] * 2 * spatial)
    counts = [(i + pads[a] + pads[a + spatial] - d * (b - 1) - 1) // s + 1
              for a, (i, b, s, d) in enumerate(zip(image, block, strides, dilations))]
    x = np.random.default_rng(6).standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(np.float32)
    model, feeds = one_node_model("Col2Im", [x, Init(np.array(image, np.int64)), Init(np.array(block, np.int64))],
                                  attrs, 18, 1, [T.FLOAT])
    _same_lazy_or_not(monkeypatch, ops_nn, model, feeds)


@pytest.mark.parametrize("q_len, kv_len", [(5, 5), (3, 7), (6, 4)])
def test_causal_attention_made_when_running_has_the_tables_and_onnxruntimes_values(q_len, kv_len, monkeypatch):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, n, 4)).astype(np.float32) for n in (q_len, kv_len, kv_len))
    model, feeds = one_node_model("Attention", [q, k, v], {"is_causal": 1}, 23, 1, [T.FLOAT])
    _same_lazy_or_not(monkeypatch, ops_attention, model, feeds)


# ----------------------------------------------------------------------------- Resize, Upsample, Det

@pytest.mark.parametrize("op, opset, inputs, initializers, attrs, message", [
    ("Resize", 19, ["x", "", "", "sizes"], [ints("sizes", [1, 1, 1, 1_000_000_000])], {"mode": "linear"},
     "resizes axis 3 to 1000000000 positions of 2 taps: its index and weight tables, 2000000000 elements computed "
     "when importing, are more than 1048576"),
    ("Resize", 19, ["x", "", "scales"], [nh.from_array(np.float32([1, 1, 1, 3e5]), "scales")],
     {"mode": "cubic"}, "resizes axis 3 to 600000 positions of 4 taps: its index and weight tables, 2400000 elements "
     "computed when importing, are more than 1048576"),
    ("Upsample", 7, ["x"], [], {"scales": [1.0, 1.0, 1.0, 5e8]},
     "resizes axis 3 to 1000000000 positions of 1 taps: its index and weight tables, 1000000000 elements computed "
     "when importing, are more than 1048576"),
])
def test_a_resize_to_a_huge_axis_is_refused_naming_the_node_and_its_tables(tmp_path, op, opset, inputs, initializers,
                                                                            attrs, message):
    """The sampling tables of a 10^9-wide axis took 8 GB (linear) when importing."""
    model = summed([h.make_node(op, inputs, ["r"], name="rs", **attrs)], [value("x", (1, 1, 1, 2))], initializers, "r",
                   opset)
    status, stderr, peak = measured(tmp_path, model)
    assert (status, stderr) == (1, f"uopgrad: error: bomb.onnx: node 'rs' ({op}): {message}\n")
    assert peak < PEAK_MB


def test_a_resize_just_within_the_limit_imports(tmp_path):
    model = summed([h.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear")], [value("x", (1, 1, 1, 2))],
                   [ints("sizes", [1, 1, 1, 1 << 19])], "r", 19)
    assert_cheap(tmp_path, model)


@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 5), (3, 1, 1)])
def test_det_with_its_masks_made_when_running_has_the_arrays_and_onnxruntimes_values(shape, monkeypatch):
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    x[..., 0, :] = x[..., 2 % shape[-1], :] if shape[-1] == 4 else x[..., 0, :]  # a singular matrix among them
    model, feeds = one_node_model("Det", [x], {}, 22, 1, [T.FLOAT])
    _same_lazy_or_not(monkeypatch, ops_tensor, model, feeds)


# ----------------------------------------------------------------------------- no file read is written over

def test_convert_refuses_to_write_over_the_models_external_data(tmp_path):
    w = nh.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g", [value("x", (1, 2))], [value("y", (1, 3))],
                         [w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    kept = (tmp_path / "model.onnx.data").read_bytes()
    done = subprocess.run([UOPGRAD, "convert", "model.onnx", "-o", "model.onnx.data"], cwd=tmp_path,
                          capture_output=True)
    assert done.returncode == 2
    assert "-o model.onnx.data is the external data of IN model.onnx (model.onnx.data): writing it would replace " \
           "the file read" in done.stderr.decode()
    assert (tmp_path / "model.onnx.data").read_bytes() == kept
