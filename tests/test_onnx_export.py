"""ONNX export of whole graphs: every sample and its gradient exports, passes onnx.checker
with full shape inference, runs in onnxruntime and equals `uopgrad eval`; names and
metadata travel; calls, tuples and memory ops; the installed CLI; bad requests.
(Each op at its edges: test_onnx_export_ops.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _onnx_helpers import assert_close, evaluated, float64_twin, need_onnx_and_runtime, run_onnx
from uopcli import Graph, Metadata, Ops, UOp, dtypes, load
from uopcli.tools.differentiate import differentiate
from uopcli.core.ops import ALL_OPS
from uopcli.tools.values import gather_inputs

onnx, ort = need_onnx_and_runtime()

from uopcli.interop.onnx.emit import ORT_KERNELS  # noqa: E402 - needs onnx
from uopcli.interop.onnx.exporter import MIN_OPSET, ExportError, to_onnx  # noqa: E402
from uopcli.interop.onnx.export_table import ROWS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.uop"))
BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=BIN) or shutil.which("uopgrad")


def check_against_eval(graph: Graph, seed: int = 0, opset: int | None = None) -> dict:
    """uopgrad eval --random --seed's inputs through both; every output compared."""
    inputs = gather_inputs(graph.inputs, [], seed)
    ours = run_onnx(graph, inputs, opset)
    truth = evaluated(graph, inputs)
    assert list(ours) == list(truth)
    twin = float64_twin(graph)
    exact = evaluated(twin, {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()}) \
        if twin is not None else {}
    for name in truth:
        assert_close(ours[name], truth[name], name, exact=exact.get(name))
    return ours


# ----------------------------------------------------------------------------- the tables

def test_every_op_has_a_row_citing_the_onnx_spec():
    assert set(ROWS) == set(ALL_OPS)
    for op, row in ROWS.items():
        if row.emit is not None:
            assert re.search(r"[A-Z][A-Za-z]+-\d+|onnx\.proto", row.spec), (op, row.spec)


def _one_node_model(op_type: str, dtype) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    from uopcli.interop.onnx.dtypes import TO_ONNX
    t = TO_ONNX[dtype]
    boolean = TensorProto.BOOL
    unary_bool = {"IsNaN", "IsInf"}
    binary_bool = {"Less", "Greater", "Equal"}
    inputs, extra, attrs, out = [("a", t)], [], {}, t
    if op_type in unary_bool:
        out = boolean
    elif op_type == "Where":
        inputs = [("c", boolean), ("a", t), ("b", t)]
    elif op_type.startswith("Reduce"):
        extra, attrs = [numpy_helper.from_array(np.array([1], np.int64), "axes")], {"keepdims": 1}
    elif op_type == "Pad":
        extra = [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")]
    elif op_type not in {"Neg", "Sqrt", "Reciprocal", "Sin", "Floor", "Ceil", "Round", "Log", "Abs", "BitwiseNot",
                         "Not"}:
        inputs.append(("b", t))
        out = boolean if op_type in binary_bool else t
    attrs.update({"Mod": {"fmod": 0}, "BitShift": {"direction": "LEFT"}}.get(op_type, {}))
    node = helper.make_node(op_type, [n for n, _ in inputs] + [i.name for i in extra], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, k, [2, 3]) for n, k in inputs],
                              [helper.make_tensor_value_info("y", out, None)], initializer=extra)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    return model.SerializeToString()


@pytest.mark.parametrize("op_type", sorted(ORT_KERNELS))
def test_ort_kernel_table_holds_on_the_installed_onnxruntime(op_type):
    """Every (operator, type) the exporter emits without a carrier loads in onnxruntime."""
    missing = []
    for dtype in sorted(ORT_KERNELS[op_type], key=lambda d: d.name):
        try:
            ort.InferenceSession(_one_node_model(op_type, dtype), providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
            missing.append(f"{dtype.name}: {str(error)[:120]}")
    assert not missing, missing


# ----------------------------------------------------------------------------- samples

@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_and_its_gradient(path):
    """The forward graph and the gradient of every float input (differentiate, as `uopgrad
    diff --keep-forward` writes it) give uopgrad eval's values in onnxruntime."""
    graph = load(str(path))
    check_against_eval(graph)
    wrt = [node.arg for node in graph.inputs if node.dtype.is_float]
    gradient, _ = differentiate(graph, wrt, None, "ones", True)
    ours = check_against_eval(gradient, seed=1)
    assert [n for n in ours if n.startswith("grad_")] == [f"grad_{name}" for name in wrt]


@pytest.mark.parametrize("opset", [MIN_OPSET, 20, 21, 23])
def test_opsets(opset):
    graph = load(str(ROOT / "samples" / "softmax_xent.uop"))
    gradient, _ = differentiate(graph, ["w", "b"], None, None, False)
    check_against_eval(gradient, opset=opset)
    assert to_onnx(gradient, opset).opset_import[0].version == opset


def test_unsupported_opset_is_refused():
    graph = load(str(ROOT / "samples" / "mlp.uop"))
    with pytest.raises(ExportError, match=f"opset 17 is not supported: the exporter writes opsets {MIN_OPSET} to"):
        to_onnx(graph, 17)


# ----------------------------------------------------------------------------- names, metadata

def test_names_metadata_and_initializers():
    x = UOp.param("x", (2, 3))
    w = UOp.param("w.weight", (3,))
    h = (x * w).set_meta(Metadata("mul", "model.py:3", False, "encoder/layer.0"))
    relu = h.maximum(0.0).set_meta(Metadata("relu", "model.py:4", False, "encoder/layer.0/act"))
    table = UOp.buffer(np.arange(6, dtype=np.float32).reshape(2, 3))
    graph = Graph({"loss": (relu + table).sum()}, inputs=[x, w, UOp.param("unused", (1,), dtypes.int8)],
                  meta={"producer": "test", "name": "tiny"})
    gradient, _ = differentiate(graph, ["x", "w.weight"], keep_forward=True)
    model = to_onnx(gradient)
    inputs = [(i.name, i.type.tensor_type.elem_type, [d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in model.graph.input]
    assert inputs == [("x", 1, [2, 3]), ("w.weight", 1, [3]), ("unused", 3, [1])]
    assert [o.name for o in model.graph.output] == ["loss", "grad_x", "grad_w.weight"]
    names = [n.name for n in model.graph.node]
    docs = [n.doc_string for n in model.graph.node]
    assert len(set(names)) == len(names)
    assert any(n.startswith("encoder/layer.0/act/relu/MAX_") for n in names)
    assert any(n.startswith("encoder/layer.0/act/relu.backward/") for n in names)
    assert any("| name=relu | loc=model.py:4 | scope=encoder/layer.0/act | backward" in d for d in docs)
    assert any(d.startswith("MAX float32[2, 3] | name=relu") for d in docs)
    assert {p.key: p.value for p in model.metadata_props}["producer"] == "test"
    assert model.producer_name == "uopgrad"
    assert model.graph.name == "tiny" and to_onnx(Graph({"y": x * 2.0}, inputs=[x])).graph.name == "uopgrad"
    check_against_eval(gradient)
    assert any(np.array_equal(onnx.numpy_helper.to_array(t), np.arange(6, dtype=np.float32).reshape(2, 3))
               for t in to_onnx(graph).graph.initializer)


# ----------------------------------------------------------------------------- calls, tuples, memory

def _calls_graph() -> Graph:
    x = UOp.param("x", (4,))
    y = UOp.param("y", (4,))
    inner = UOp.trace_function("square_plus", lambda a, b: (a * a + b, a - b), x, y)
    twice = UOp.trace_function("twice", lambda a, b: (a * 2.0, UOp.trace_function(
        "nested", lambda c: (c.sin(),), a)[0] + b), inner[0], inner[1])
    other_site = UOp.trace_function("square_plus", lambda a, b: (a * a + b, a - b), y, x)  # same body, other args
    call = UOp.trace_call("scaled", lambda a: (a * 3.0, a.exp2()), lambda a, g0, g1: (g0 * 3.0,), x)
    store = x.store(y + 1.0)
    return Graph({"t": UOp.tuple(twice[0], UOp.noop(), call[1]), "f": twice, "c": call,
                  "s": store, "after": x.after(store) * 2.0, "o": other_site[0] - other_site[1],
                  "direct": x, "k": UOp.const(-0.0)}, inputs=[x, y])


def test_calls_tuples_and_memory_ops():
    """FUNCTION and CALL inlined per call site (nested, one body at two sites), tuple outputs
    as name[i] without NOOP elements, a FUNCTION output, STORE and AFTER, an input and a
    constant as outputs."""
    graph = _calls_graph()
    ours = check_against_eval(graph)
    assert list(ours) == ["t[0]", "t[2]", "f[0]", "f[1]", "c[0]", "c[1]", "s", "after", "o", "direct", "k"]
    assert np.signbit(ours["k"]) and ours["k"].shape == ()
    names = [n.name for n in to_onnx(graph).graph.node]
    assert any(n.startswith("twice/nested/") for n in names) and any(n.startswith("scaled/") for n in names)


def test_a_call_output_whose_arguments_are_computed():
    """The graph's only output a FUNCTION whose arguments are computed (no other output
    named them first): they are emitted before the call's body is entered."""
    x = UOp.param("x", (4,))
    call = UOp.trace_function("pair", lambda a, b: (a * b, a - b), x.sin(), x * 3.0)
    assert list(check_against_eval(Graph({"f": call}, inputs=[x]))) == ["f[0]", "f[1]"]


def test_gradient_through_a_call_with_its_backward_body():
    graph = _calls_graph()
    loss = Graph({"loss": graph.outputs["c"][0].sum() + graph.outputs["o"].sum()}, inputs=graph.inputs)
    gradient, _ = differentiate(loss, ["x", "y"], keep_forward=True)
    check_against_eval(gradient)


def test_graphs_that_cannot_be_exported_say_which_node_and_why():
    x = UOp.param("x", (2,))
    with pytest.raises(ExportError, match="nothing to export"):
        to_onnx(Graph({"n": UOp.tuple(UOp.noop(), UOp.noop())}, inputs=[x]))
    with pytest.raises(ExportError, match=r"output name 't\[0\]' \(a tuple element\) is also the name"):
        to_onnx(Graph({"t": UOp.tuple(x, x), "t[0]": x}))
    with pytest.raises(ExportError, match=r"output name 't\[1\]' \(a tuple element\) is also the name"):
        to_onnx(Graph({"t": UOp.tuple(x * 2.0, x.sin())}, inputs=[x, UOp.param("t[1]", (2,))]))
    with pytest.raises(ExportError, match=r"node %0 \(PARAM\): slot PARAM 0 outside a function body"):
        to_onnx(Graph({"y": UOp.slot(0, (2,)) + 1.0}))


def test_a_shrink_of_whole_axes_from_a_file_exports():
    """The builder drops a SHRINK that keeps every axis whole; a saved graph may still hold one."""
    x = UOp.param("x", (3, 4))
    check_against_eval(Graph({"y": UOp.make(Ops.SHRINK, x.dtype, (x,), ((0, 3), (0, 4))) * 2.0}, inputs=[x]))


def test_a_long_chain_exports_without_recursion():
    x = UOp.param("x", (3,))
    y = x
    for _ in range(3_000):  # 6,000 deep: a recursive walk would pass Python's limit of 1,000
        y = (y * 0.999).sin()
    model = to_onnx(Graph({"y": y}))
    assert len(model.graph.node) == 6_001
    check_against_eval(Graph({"y": y}))


# ----------------------------------------------------------------------------- the installed CLI

needs_cli = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


def uopgrad(*args, cwd, env=None):
    return subprocess.run([UOPGRAD, *args], cwd=cwd, capture_output=True, env=env, timeout=120)


@needs_cli
def test_cli_diff_to_onnx_runs_in_onnxruntime(tmp_path):
    """uopgrad diff samples/mlp.uop --wrt w1 -o grad.onnx, then onnxruntime on the inputs
    `uopgrad eval --random` uses: the values of `uopgrad eval` on the .uop gradient."""
    sample = str(ROOT / "samples" / "mlp.uop")
    done = uopgrad("diff", sample, "--wrt", "w1", "-o", "grad.onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert uopgrad("diff", sample, "--wrt", "w1", "-o", "grad.uop", cwd=tmp_path).returncode == 0
    done = uopgrad("eval", "grad.uop", "--random", "--seed", "3", "-o", "values.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    truth = dict(np.load(tmp_path / "values.npz"))
    model = onnx.load(str(tmp_path / "grad.onnx"))
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(str(tmp_path / "grad.onnx"), providers=["CPUExecutionProvider"])
    inputs = gather_inputs(load(str(tmp_path / "grad.uop")).inputs, [], 3)
    ours = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    assert list(ours) == ["grad_w1"] == list(truth)
    assert_close(ours["grad_w1"], truth["grad_w1"], "grad_w1")
    # and back: .uop -> .onnx -> .uop, the same inputs and values
    assert uopgrad("convert", "grad.onnx", "-o", "back.uop", cwd=tmp_path).returncode == 0
    assert not (tmp_path / "back.npz").exists()  # our constants read back as constants, not weights
    done = uopgrad("eval", "back.uop", "--random", "--seed", "3", "-o", "back.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert_close(np.load(tmp_path / "back.npz")["grad_w1"], truth["grad_w1"], "grad_w1 read back")


@needs_cli
def test_cli_convert_with_opset_and_to_stdout(tmp_path):
    sample = str(ROOT / "samples" / "gpt.uop")
    assert uopgrad("convert", sample, "-o", "gpt.onnx", "--opset", "21", cwd=tmp_path).returncode == 0
    assert onnx.load(str(tmp_path / "gpt.onnx")).opset_import[0].version == 21
    with open(tmp_path / "piped.onnx", "wb") as out:
        done = subprocess.run([UOPGRAD, "convert", sample, "--to", "onnx", "-o", "-"], stdout=out, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "piped.onnx").read_bytes() == to_onnx(load(sample)).SerializeToString()


@needs_cli
def test_cli_errors_are_one_line_and_write_nothing(tmp_path):
    sample = str(ROOT / "samples" / "mlp.uop")
    (tmp_path / "kept.onnx").write_bytes(b"old")
    done = uopgrad("convert", sample, "-o", "kept.onnx", "--opset", "5", cwd=tmp_path)
    assert done.returncode == 1 and (tmp_path / "kept.onnx").read_bytes() == b"old"
    assert done.stderr.decode().count("\n") == 1 and f"{sample}: opset 5 is not supported" in done.stderr.decode()
    for opset in ("0", "-3"):  # said by the exporter, with the opsets it writes, not by click's range
        done = uopgrad("convert", sample, "-o", "kept.onnx", "--opset", opset, cwd=tmp_path)
        assert done.returncode == 1 and (tmp_path / "kept.onnx").read_bytes() == b"old"
        assert f"opset {opset} is not supported: the exporter writes opsets {MIN_OPSET} to" in done.stderr.decode()
    assert b"x>=1" not in uopgrad("convert", "--help", cwd=tmp_path).stdout
    done = uopgrad("diff", sample, "--wrt", "w1", "-o", "grad.uop", "--opset", "20", cwd=tmp_path)
    assert done.returncode == 2 and b"--opset is for ONNX output" in done.stderr
    from uopcli import save
    save(Graph({"n": UOp.tuple(UOp.noop())}, inputs=[UOp.param("x", (1,))]), str(tmp_path / "noop.uop"))
    done = uopgrad("convert", "noop.uop", "-o", "noop.onnx", cwd=tmp_path)
    assert done.returncode == 1 and not (tmp_path / "noop.onnx").exists()
    assert done.stderr.decode().strip() == ("uopgrad: error: noop.uop: nothing to export: the graph's outputs hold "
                                            "no value (tuples of NOOPs only)")


@needs_cli
def test_cli_without_onnx_says_how_to_get_it(tmp_path):
    """A Python without the onnx package: one line naming the extra, nothing written."""
    fake = tmp_path / "fake" / "onnx"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'onnx'\", name='onnx')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    done = uopgrad("convert", str(ROOT / "samples" / "mlp.uop"), "-o", "m.onnx", cwd=tmp_path, env=env)
    assert done.returncode == 1 and not (tmp_path / "m.onnx").exists()
    assert "writing ONNX needs the onnx package, which is not installed: pip install 'uopgrad[onnx]'" in \
        done.stderr.decode()


def test_onnx_is_imported_only_when_writing_onnx():
    code = ("import sys, uopcli, uopcli.cli, uopcli.interop.onnx, uopcli.interop.onnx.dtypes; "
            "sys.exit('onnx' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# ----------------------------------------------------------------------------- contractions

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_matmuls_are_einsums_and_never_build_the_product(dtype):
    """x @ w (EXPANDs, MUL, REDUCE ADD as tinygrad spells it) and its gradient: Einsum over
    the factors; no node of the model has the (batch, n, k) product's shape."""
    x, w = UOp.param("x", (5, 7), dtype), UOp.param("w", (7, 3), dtype)
    graph = Graph({"loss": ((x @ w).relu() * (x @ w)).sum() + (x * x).sum()}, inputs=[x, w])
    gradient, _ = differentiate(graph, ["x", "w"], keep_forward=True)
    model = to_onnx(gradient)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info]
    assert sum(n.op_type == "Einsum" for n in model.graph.node) >= 4
    assert [5, 3, 7] not in shapes and [5, 7, 3] not in shapes and [7, 3, 5] not in shapes
    if dtype is dtypes.float16:  # the evaluator multiplies and adds float16 contractions in float32, as ours
        inputs = gather_inputs(gradient.inputs, [], 0)
        ours, truth = run_onnx(gradient, inputs), evaluated(gradient, inputs)
        for name in truth:
            assert_close(ours[name], truth[name], name, rtol=2e-3)
    else:
        check_against_eval(gradient)


def test_products_that_are_not_contractions_run_node_by_node():
    """A product broadcast along an axis neither factor has is summed as written."""
    x = UOp.param("x", (4, 1))
    product = x.expand(4, 6) * UOp.param("y", (4, 1)).expand(4, 6)
    graph = Graph({"s": product.r("ADD", (1,))})
    assert not any(n.op_type == "Einsum" for n in to_onnx(graph).graph.node)
    check_against_eval(graph)


def test_convolutions_and_their_gradients_are_einsums_and_never_build_the_product():
    """conv2d as tinygrad spells it: one factor a PERMUTE of an EXPAND (the windows moved
    beside the weight's axes), and its weight gradient a PERMUTE between the MUL and the
    REDUCE. Both relabel the product's axes only, so the Einsum takes the un-broadcast
    factors: no value of the model is as large as the product (before, each was built:
    0.9 GB per 3x3 convolution of DenseNet-121's gradient, which onnxruntime could not
    hold). The values equal PyTorch's float64 gradients."""
    torch = pytest.importorskip("torch")
    n, groups, c_in, c_out, size, k = 2, 2, 6, 64, 9, 3  # the product: 32 times the windows
    x, w = UOp.param("x", (n, c_in, size, size), dtypes.float64), UOp.param("w", (c_out, c_in // groups, k, k),
                                                                            dtypes.float64)
    c = UOp.param("c", (n, c_out, 5, 5), dtypes.float64)
    loss = (x.conv2d(w, groups=groups, stride=2, padding=1) * c).sum()
    gradient, _ = differentiate(Graph({"loss": loss}, inputs=[x, w, c]), ["x", "w"], keep_forward=True)
    model = to_onnx(gradient)
    inferred = onnx.shape_inference.infer_shapes(model)
    sizes = [int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim])) for v in inferred.graph.value_info]
    product = n * c_out * (c_in // groups) * 5 * 5 * k * k
    assert sum(node.op_type == "Einsum" for node in model.graph.node) >= 3
    assert max(sizes) < product, (max(sizes), product)
    inputs = gather_inputs(gradient.inputs, [], 0)
    ours = run_onnx(gradient, inputs)
    tx, tw = (torch.from_numpy(inputs[name]).requires_grad_() for name in ("x", "w"))
    tloss = (torch.nn.functional.conv2d(tx, tw, groups=groups, stride=2, padding=1) * torch.from_numpy(inputs["c"])).sum()
    tloss.backward()
    for name, truth in (("grad_x", tx.grad.numpy()), ("grad_w", tw.grad.numpy())):
        np.testing.assert_allclose(ours[name], truth, rtol=1e-12, atol=1e-12 * np.abs(truth).max(), err_msg=name)
    check_against_eval(gradient)
