"""The ONNX bridge both ways: a graph written as ONNX reads back to the same values
(`.uop -> .onnx -> .uop`, every sample and its gradient, and the ops only our exporter
writes at their edges), and an imported model's gradient written as ONNX carries the
model's weights as initializers, so onnxruntime runs it given only the model's own inputs
(the installed CLI end to end: tests/test_onnx_import_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _onnx_helpers import assert_close, assert_exact, evaluated, need_onnx_and_runtime
from uopcli import Graph, UOp, dtypes, load
from uopcli.tools.differentiate import differentiate
from uopcli.tools.values import gather_inputs

onnx, ort = need_onnx_and_runtime()

from uopcli.interop.onnx.exporter import ExportError, to_onnx  # noqa: E402 - needs onnx
from uopcli.interop.onnx.importer import import_model, load_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.uop"))


def round_trip(graph: Graph) -> Graph:
    """The graph written as ONNX and read back: its inputs come back as inputs, its
    constants as constants (no weights)."""
    back, weights = import_model(to_onnx(graph))
    assert weights == {}, f"constants read back as weights: {sorted(weights)}"
    assert [(n.arg, n.shape, n.dtype) for n in back.inputs] == [(n.arg, n.shape, n.dtype) for n in graph.inputs]
    return back


def assert_same_values(graph: Graph, back: Graph, seed: int) -> None:
    inputs = gather_inputs(graph.inputs, [], seed)
    truth, ours = evaluated(graph, inputs), evaluated(back, inputs)
    assert list(ours) == list(truth)
    for name in truth:  # sums may run in another order: floats to 1e-5 of the largest, the rest exact
        assert_close(ours[name], truth[name], name)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_and_its_gradient_round_trip(path):
    graph = load(str(path))
    assert_same_values(graph, round_trip(graph), seed=0)
    wrt = [node.arg for node in graph.inputs if node.dtype.is_float]
    gradient, _ = differentiate(graph, wrt, None, "ones", True)
    assert_same_values(gradient, round_trip(gradient), seed=1)


def _edge_values(dtype) -> np.ndarray:
    if dtype.is_float:
        return np.array([-np.inf, -3.5, -2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 7.0, np.inf, np.nan],
                        dtype.np)
    info = np.iinfo(dtype.np)
    return np.array([info.min, info.min + 1, -7, -1, 0, 1, 2, 7, 31, info.max], dtype.np) if info.min < 0 else \
        np.array([0, 1, 2, 7, 31, 32, 63, 200, info.max - 1, info.max], dtype.np)


EXACT_OPS = [  # the ops whose ONNX spelling needs rows only our exporter uses (ops_exact.py)
    ("trunc", lambda x, y: x.trunc(), dtypes.float32), ("trunc16", lambda x, y: x.trunc(), dtypes.float16),
    ("reciprocal", lambda x, y: x.reciprocal(), dtypes.float32), ("sin", lambda x, y: x.sin(), dtypes.float64),
    ("exp2", lambda x, y: x.exp2(), dtypes.float32), ("log2", lambda x, y: x.log2(), dtypes.float32),
    ("max", lambda x, y: x.maximum(y), dtypes.float32), ("max_int", lambda x, y: x.maximum(y), dtypes.int32),
    ("cdiv", lambda x, y: x.cdiv(y), dtypes.int32), ("cmod", lambda x, y: x.cmod(y), dtypes.int64),
    ("cmod8", lambda x, y: x.cmod(y), dtypes.int8), ("pow_int", lambda x, y: x.pow(y.maximum(0)), dtypes.int32),
    ("shl", lambda x, y: x << y, dtypes.int32), ("shr", lambda x, y: x >> y, dtypes.int16),
    ("shr_u", lambda x, y: x >> y, dtypes.uint32), ("and", lambda x, y: x & y, dtypes.int64),
    ("or", lambda x, y: x | y, dtypes.uint8), ("xor", lambda x, y: x ^ y, dtypes.int32),
    ("logical", lambda x, y: (x < y) ^ ((x < 0) | (y > 1)), dtypes.float32),
    ("cast_int", lambda x, y: x.cast(dtypes.int32), dtypes.float32),
    ("bitcast", lambda x, y: x.bitcast(dtypes.int32), dtypes.float32),
    ("prod", lambda x, y: x.reshape((2, 5)).prod(1) if x.shape == (10,) else x.prod(0), dtypes.int32),
    ("pad", lambda x, y: x.pad(((2, 1),), value=-1.5), dtypes.float32),
]


@pytest.mark.parametrize("name, build, dtype", EXACT_OPS, ids=[row[0] for row in EXACT_OPS])
def test_exact_spellings_read_back_bit_for_bit(name, build, dtype):
    """-0.0, inf, nan, halves, integer extremes and shifts past the width: the graph read
    back from our ONNX gives the evaluator's bits on the original."""
    values = _edge_values(dtype)
    x = UOp.param("x", values.shape, dtype)
    y = UOp.param("y", values.shape, dtype)
    graph = Graph({"out": build(x, y)}, [x, y])
    back = round_trip(graph)
    inputs = {"x": values, "y": np.roll(values, 3)}
    if name.startswith(("sh", "pow")):  # shift amounts and exponents: small, past the width too
        inputs["y"] = np.resize(np.array([0, 1, 3, 7, 15, 31, 32, 40], dtype.np), values.shape)
    with np.errstate(all="ignore"):
        ours, truth = evaluated(back, inputs)["out"], evaluated(graph, inputs)["out"]
    if name == "log2":  # through float64, rounded once, where numpy's float32 log2 is an ulp off at times:
        with np.errstate(all="ignore"):  # exact at powers of two, 0, negatives, inf and nan only
            between = (values > 0) & np.isfinite(values) & (np.log2(values.astype(np.float64)) % 1 != 0)
        assert_close(ours[between], truth[between], name, rtol=2e-7)
        ours, truth = ours[~between], truth[~between]
    assert_exact(ours, truth, name)


# ----------------------------------------------------------------------------- weights as initializers

def test_weights_are_initializers_and_unused_ones_are_left_out():
    graph, weights = load_onnx(str(ROOT / "samples" / "onnx" / "cnn-legacy17.onnx"))
    gradient, _ = differentiate(graph, ["conv1.weight"], None, "ones", False)
    model = to_onnx(gradient, weights=weights)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["x"]
    initializers = {t.name for t in model.graph.initializer}
    assert "conv1.weight" in initializers and "conv2.weight" in initializers
    assert "fc.bias" not in initializers  # d out / d conv1.weight never reads it
    # read back, the weights are weights again: inputs of the graph, their values returned
    back, again = import_model(model)
    assert sorted(again) == sorted(initializers & set(weights))
    assert all(np.array_equal(again[name], weights[name]) for name in again)


def test_a_weight_of_the_wrong_type_or_shape_is_refused():
    x, w = UOp.param("x", (2, 3), dtypes.float32), UOp.param("w", (3,), dtypes.float32)
    graph = Graph({"out": x * w}, [x, w])
    with pytest.raises(ExportError, match=r"weight 'w' is float64\[3\] but the input is float32\[3\]"):
        to_onnx(graph, weights={"w": np.zeros(3)})
    with pytest.raises(ExportError, match=r"weight 'w' is float32\[4\]"):
        to_onnx(graph, weights={"w": np.zeros(4, np.float32)})
    with pytest.raises(ExportError, match=r"^unknown weight 'absent': weights are graph inputs; the graph's "
                       r"inputs: x, w$"):
        to_onnx(graph, weights={"w": np.arange(3, dtype=np.float32), "absent": np.zeros(1)})
    model = to_onnx(graph, weights={"w": np.arange(3, dtype=np.float32)})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]
    np.testing.assert_array_equal(session.run(None, {"x": np.ones((2, 3), np.float32)})[0], [[0, 1, 2]] * 2)


def test_the_file_is_the_model_with_its_weights_and_a_model_past_protobufs_limit_is_refused(tmp_path, monkeypatch):
    """onnx_bytes (what the CLI writes) and save_onnx: the model's bytes, weights as
    initializers; the refusal past protobuf's 2 GiB says the model's size in GiB (the
    limit lowered, so an 8 MiB BUFFER passes it)."""
    from uopcli.interop.onnx import exporter
    x, w = UOp.param("x", (2, 3), dtypes.float32), UOp.param("w", (3,), dtypes.float32)
    graph, weights = Graph({"out": x * w}, [x, w]), {"w": np.arange(3, dtype=np.float32)}
    written = exporter.onnx_bytes(graph, 21, weights)  # not the default opset, so a dropped opset shows
    assert written == to_onnx(graph, 21, weights).SerializeToString()
    model = onnx.load_from_string(written)
    assert [i.name for i in model.graph.input] == ["x"] and "w" in {t.name for t in model.graph.initializer}
    assert model.opset_import[0].version == 21
    exporter.save_onnx(graph, str(tmp_path / "m.onnx"), 21, weights)
    assert (tmp_path / "m.onnx").read_bytes() == written
    big = Graph({"out": UOp.buffer(np.zeros(2 ** 21, np.float32)) + 1.0})
    monkeypatch.setattr(exporter, "_PROTOBUF_LIMIT", 2 ** 20)
    with pytest.raises(ExportError, match=r"^the ONNX model would be 0\.01 GiB: protobuf cannot write more than "
                       "2 GiB in one file"):
        exporter.onnx_bytes(big)


def test_imported_round_keeps_the_sign_of_zero_bit_for_bit():
    """Round halves to even and keeps -0.0 (Round(-0.3) is -0.0, as np.round): the import
    tests compare floats by value, so the sign is checked here, against numpy and onnxruntime."""
    from onnx import TensorProto, helper
    values = np.array([-2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, -np.inf, np.nan], np.float32)
    node = helper.make_node("Round", ["x"], ["y"])
    graph = helper.make_graph([node], "round", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [12])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    back, _ = import_model(model)
    ours = evaluated(back, {"x": values})["y"]
    assert_exact(ours, np.round(values), "Round against numpy")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_exact(ours, session.run(None, {"x": values})[0], "Round against onnxruntime")
