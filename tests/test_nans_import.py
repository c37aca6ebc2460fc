"""The NaN tracer on a nan an imported op's definition gives: Softmax and LogSoftmax of a
row that is -inf throughout (attention whose mask hides a whole row) are nan, as ONNX
and onnxruntime define them; the importer writes that as WHERE(row max == -inf, CONST nan,
...). The finding names the op and its node, the row and the input node, cause
"defined"; it said "a CONST of the file holds 1 nan: given, not made", and the file holds
no nan. A nan constant the file does hold is still given."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime
from uopcli import Ops
from uopcli.tools.nans import hunt_nans

onnx, ort = need_onnx_and_runtime()

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from uopcli.interop.onnx.importer import import_model  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
MASK = np.ones((2, 3, 4), bool)
MASK[1, 2, :] = False  # row [1,2,:] hidden throughout
MASK[0, 1, 3] = False


def _model(op: str = "Softmax", opset: int = 18, dtype=TensorProto.FLOAT, file_nan: str | None = None):
    """scores = Where(mask, x, -inf), then `op` along the last axis (node /Softmax). With
    file_nan: a Constant nan of the file, added to the output ("add") or taken by a Where
    ("where")."""
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    nodes = [helper.make_node("Constant", [], ["ninf"], value=numpy_helper.from_array(np.array(-np.inf, np_type))),
             helper.make_node("Where", ["mask", "x", "ninf"], ["scores"], name="/Where"),
             helper.make_node(op, ["scores"], ["p" if file_nan else "out"], name=f"/{op}", axis=-1 if opset >= 13 else 2)]
    if file_nan:
        nodes.insert(0, helper.make_node("Constant", [], ["nan"], value=numpy_helper.from_array(np.array(np.nan, np_type))))
        nodes.append(helper.make_node("Add", ["p", "nan"], ["out"], name="/Add") if file_nan == "add" else
                     helper.make_node("Where", ["keep", "p", "nan"], ["out"], name="/Where_1"))
    inputs = [helper.make_tensor_value_info("x", dtype, [2, 3, 4]), helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 3, 4])]
    if file_nan == "where":
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 3, 4]))
    graph = helper.make_graph(nodes, "masked", inputs, [helper.make_tensor_value_info("out", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _feeds(np_type=np.float32) -> dict:
    return {"x": np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np_type), "mask": MASK}


def _numbered(graph, op, name, pick=max):
    """The %index of the last (pick=min: first) node of `op` made for ONNX node `name`, as
    `uopgrad print` numbers it."""
    return pick(i for i, n in enumerate(graph.nodes()) if n.op == op and n.meta is not None and n.meta.loc == name)


@pytest.mark.parametrize("op, opset, dtype", [("Softmax", 18, TensorProto.FLOAT), ("LogSoftmax", 18, TensorProto.FLOAT),
                                              ("Softmax", 18, TensorProto.DOUBLE), ("Softmax", 11, TensorProto.FLOAT)])
def test_a_row_of_minus_inf_is_the_softmaxs_nan(op, opset, dtype):
    model = _model(op, opset, dtype)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.isnan(runtime.run(None, _feeds(np_type))[0][1, 2]).all()  # the definition: nan, onnxruntime's too
    graph = import_model(model)[0]
    finding = hunt_nans(graph, _feeds(np_type))
    where = _numbered(graph, Ops.WHERE, f"/{op}")
    masked = _numbered(graph, Ops.WHERE, "/Where")
    kind = dtype_name = "float64" if dtype == TensorProto.DOUBLE else "float32"
    if opset < 13:  # Softmax-11 normalises the input seen as 2-D [6, 4]: its row 5 is [1,2,:]
        flat = _numbered(graph, Ops.RESHAPE, f"/{op}", min)
        shape, first, row, values = "6,4", "[5,0]", "[5,:]", f"%{flat} RESHAPE {kind}[6,4] ({op}, at /{op})"
    else:
        shape, first, row, values = "2,3,4", "[1,2,0]", "[1,2,:]", f"%{masked} WHERE {kind}[2,3,4] (Where, at /Where)"
    assert finding.lines()[0] == (
        f"first nan: %{where} WHERE {dtype_name}[{shape}], {op}, at /{op}: 4 nans among 24 elements (first made at "
        f"{first}): made by {op}, whose definition gives nan for a row that is -inf throughout: its input "
        f"{values} is -inf throughout {row}")
    assert (finding.kind, finding.cause, finding.origin) == ("nan", "defined", None)
    assert finding.to_dict()["cause"] == "defined" and finding.to_dict()["made"] == finding.made


@pytest.mark.parametrize("use", ["add", "where"])
def test_a_nan_constant_of_the_file_is_still_given(use):
    """An Add of the file's Constant nan, or an ONNX Where taking it, rows unmasked: the
    nan is the file's. (Its metadata is not pinned: equal constants are one node, the
    Softmax's nan and the file's, tagged by the first op that made it.)"""
    model = _model(file_nan=use)
    graph = import_model(model)[0]
    feeds = {"x": _feeds()["x"], "mask": np.ones((2, 3, 4), bool), **({"keep": MASK} if use == "where" else {})}
    finding = hunt_nans(graph, feeds)
    constant = next(i for i, n in enumerate(graph.nodes()) if n.op == Ops.CONST and n.arg != n.arg)
    assert (finding.node, finding.made) == (f"%{constant} CONST float32[]", "a CONST of the file holds 1 nan among 1 "
                                            "elements: given, not made")
    assert finding.to_dict()["cause"] == "given" and finding.sources == finding.elements == []


def test_a_nan_made_from_finite_values_is_computed():
    graph = import_model(_model())[0]
    x = _feeds()["x"]
    x[0, 0, 0] = math.inf  # an inf in a row: inf - inf in the softmax, from sources without a nan
    finding = hunt_nans(graph, {"x": x, "mask": np.ones((2, 3, 4), bool)})
    assert finding.cause == "computed" and finding.made.endswith("from sources that hold no nan there")


def test_eval_debug_nans_json_says_the_softmax_made_it(tmp_path):
    onnx.save(_model(), tmp_path / "attn.onnx")
    np.savez(tmp_path / "in.npz", **_feeds())
    done = subprocess.run([UOPGRAD, "eval", "attn.onnx", "-i", "in.npz", "--debug-nans", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    found = json.loads(done.stdout)["not_finite"]
    assert done.returncode == 1 and found["cause"] == "defined" and found["meta"] == "Softmax, at /Softmax"
    assert found["made"].endswith("made by Softmax, whose definition gives nan for a row that is -inf throughout: "
                                  "its input %3 WHERE float32[2,3,4] (Where, at /Where) is -inf throughout [1,2,:]")
    assert done.stderr.splitlines()[0] == f"uopgrad: first nan: {found['node']}, {found['meta']}: {found['made']}"


def _torch_export(attention, dynamo: bool):
    import contextlib
    import io
    import warnings
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: its exports are not compared")

    class Attention(torch.nn.Module):
        def forward(self, q, k, mask):
            return attention(torch, q, k, mask)
    q, k = torch.randn(1, 1, 4, 8, generator=torch.Generator().manual_seed(5)), torch.ones(1, 1, 4, 8)
    mask = torch.ones(1, 1, 4, 4)
    mask[0, 0, 2] = 0  # query 2 sees nothing
    options = dict(dynamo=True, optimize=False, external_data=False) if dynamo else dict(dynamo=False)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention(), (q, k, mask), buffer, input_names=["q", "k", "mask"], output_names=["p"], **options)
    return onnx.load_from_string(buffer.getvalue()), {"q": q.numpy(), "k": k.numpy(), "mask": mask.numpy()}


def _masked_fill(torch, q, k, mask):
    return torch.softmax((q @ k.transpose(-1, -2)).masked_fill(mask == 0, float("-inf")), -1)


def _sdpa(torch, q, k, mask):
    return torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=mask.bool())


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_torchs_exports_keep_a_masked_fill_softmaxs_nan(dynamo):
    """What the README says of torch's exports: masked_fill(-inf) then softmax is left nan
    (no IsNaN; the finding names the Softmax); scaled_dot_product_attention with a boolean
    mask gets Where(IsNaN(p), 0, p), and is finite."""
    model, feeds = _torch_export(_masked_fill, dynamo)
    assert "IsNaN" not in {n.op_type for n in model.graph.node}
    graph = import_model(model)[0]
    finding = hunt_nans(graph, feeds)
    assert finding.cause == "defined" and finding.meta.startswith("Softmax")
    assert finding.made.startswith("4 nans among 16 elements (first made at [0,0,2,0]): made by Softmax")
    assert finding.made.endswith("is -inf throughout [0,0,2,:]")
    model, feeds = _torch_export(_sdpa, dynamo)
    assert "IsNaN" in {n.op_type for n in model.graph.node}
    assert hunt_nans(import_model(model)[0], feeds) is None
