"""torch's norms exported to ONNX, at a zero row (a padded token, a masked embedding):
F.normalize, torch.linalg.vector_norm, Tensor.norm and F.cosine_similarity become
ReduceL2 (p = 2) or ReduceL1 (p = 1), with Clip and Div, under both exporters. torch's
norm backward masks a zero norm (gradient 0 there), so their gradients are finite;
ReduceL2's root had an infinite slope at 0 and made them nan (0·inf). The gradients are
torch autograd's in float64 (within 1e-12), the forward values onnxruntime's bit for bit
(nan, inf and -0.0 rows too). An explicit Sqrt keeps torch's infinite slope at 0 (nan
there in torch too): the legacy exporter writes cosine_similarity as one."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest

from _onnx_helpers import assert_exact, need_onnx_and_runtime
from uopcli import Graph, evaluate_graph

onnx, ort = need_onnx_and_runtime()
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the torch norm comparisons skip")

from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

F = torch.nn.functional
EPS = 2.0 ** -40  # a float32 too: the dynamo exporter writes eps as one
ROWS = [[1.0, 2.0, -2.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-0.0, 0.0, -0.0, -0.0], [3e-3, -1.0, 0.0, 5.0]]
ODD_ROWS = [[np.inf, 1.0, 2.0, 3.0], [np.nan, 1.0, 2.0, 3.0], [-np.inf, np.inf, 0.0, 1.0], [0.0, -0.0, 0.0, 0.0]]


def _norms(x):
    w = torch.arange(1.0, 5.0, dtype=x.dtype)
    return (F.normalize(x, dim=-1, eps=EPS) * w, F.normalize(x, p=1, dim=-1, eps=EPS) * w,
            torch.linalg.vector_norm(x, dim=-1), x.norm(dim=-1) * 3.0, x.norm(p=1, dim=-1),
            F.cosine_similarity(x, x.flip(-1) + 1.0, dim=-1, eps=EPS))


def _cosine_as_the_legacy_exporter_writes_it(x):
    """Its symbolic: Σxy / max(√(Σx²·Σy²), eps), an explicit Sqrt."""
    y = x.flip(-1) + 1.0
    root = torch.sqrt((x * x).sum(-1) * (y * y).sum(-1))
    return (x * y).sum(-1) / torch.maximum(root, torch.tensor(EPS, dtype=x.dtype))


OUTPUTS = ["normalize", "normalize_p1", "vector_norm", "norm", "norm_p1", "cosine"]


class Norms(torch.nn.Module):
    def forward(self, x):
        return _norms(x)


def _export(dynamo: bool, x: np.ndarray):
    options = dict(dynamo=True, optimize=False, external_data=False) if dynamo else \
        dict(dynamo=False, do_constant_folding=False)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(Norms(), (torch.from_numpy(x),), buffer, input_names=["x"], output_names=OUTPUTS, **options)
    return onnx.load_from_string(buffer.getvalue())


def _torch_gradient(f, x: np.ndarray) -> np.ndarray:
    leaf = torch.from_numpy(x.copy()).requires_grad_()
    f(leaf).sum().backward()
    return leaf.grad.numpy()


def _our_gradient(graph: Graph, name: str, x: np.ndarray) -> np.ndarray:
    gradient = differentiate(Graph({"loss": graph.outputs[name].sum()}), ["x"])[0]
    with np.errstate(all="ignore"):
        return evaluate_graph(gradient, {"x": x})["grad_x"]


def _assert_gradient(ours: np.ndarray, want: np.ndarray, what: str) -> None:
    assert np.array_equal(np.isnan(ours), np.isnan(want)), f"{what}: nan at {np.argwhere(np.isnan(ours)).tolist()}"
    np.testing.assert_allclose(ours, want, rtol=1e-12, atol=0, err_msg=what)


_MODELS: dict = {}


def _imported(dynamo: bool, x: np.ndarray):
    """The export of Norms for x's shape and type (kept: the dynamo exporter takes a second),
    and its import."""
    key = dynamo, x.shape, x.dtype
    if key not in _MODELS:
        model = _export(dynamo, x)
        assert {n.op_type for n in model.graph.node} >= {"ReduceL2", "ReduceL1", "Clip", "Div"}
        _MODELS[key] = model, import_model(model)[0]
    return _MODELS[key]


EXPORTERS = pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])


@EXPORTERS
@pytest.mark.parametrize("index", range(len(OUTPUTS)), ids=OUTPUTS)
def test_a_zero_row_has_torchs_gradient(dynamo, index):
    """Zero rows (+0 and -0.0) and ordinary ones: torch autograd's gradient, float64, to
    1e-12 (not where Σx² underflows: torch's norm is then 0, ours scaled; test_onnx_edges). The legacy exporter's cosine_similarity
    has an explicit Sqrt: its gradient is that form's in torch (nan at the zero rows)."""
    x = np.array(ROWS)
    explicit = index == OUTPUTS.index("cosine") and not dynamo
    want = _torch_gradient(_cosine_as_the_legacy_exporter_writes_it if explicit else lambda v: _norms(v)[index], x)
    assert np.isnan(want[1:3]).all() if explicit else np.isfinite(want).all()
    _assert_gradient(_our_gradient(_imported(dynamo, x)[1], OUTPUTS[index], x), want, OUTPUTS[index])


@EXPORTERS
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_forward_values_are_onnxruntimes(dynamo, dtype):
    """Every output, bit for bit, on zero, -0.0, inf and nan rows. (Not where Σx²
    underflows: there onnxruntime's is 0, ours scaled; test_onnx_edges.)"""
    for rows in (ROWS, ODD_ROWS):
        x = np.array(rows, dtype)
        model, graph = _imported(dynamo, x)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        with np.errstate(all="ignore"):
            theirs = dict(zip(OUTPUTS, session.run(None, {"x": x})))
            ours = evaluate_graph(graph, {"x": x})
        for name in OUTPUTS:
            assert_exact(ours[name], theirs[name], name)
