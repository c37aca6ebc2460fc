"""What the ONNX export tests share: skip reasons, run a graph through onnx.checker and
onnxruntime, evaluate it with uopcli's evaluator (the truth), compare the two."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from uopcli import Graph, evaluate_graph

_PYTHON = f"Python {sys.version_info[0]}.{sys.version_info[1]}"


def need_onnx_and_runtime():
    """Import onnx and onnxruntime, or skip the module saying why (make test installs both;
    a Python they publish no wheel for cannot have them)."""
    onnx = pytest.importorskip("onnx", reason=f"onnx is not installed for {_PYTHON} (no wheel? `make test` "
                               "installs it): ONNX export tests skipped")
    ort = pytest.importorskip("onnxruntime", reason=f"onnxruntime is not installed for {_PYTHON} (no wheel? "
                              "`make test` installs it): tests running exported ONNX skipped")
    ort.set_default_logger_severity(3)
    return onnx, ort


def run_onnx(graph: Graph, inputs: dict, opset: int | None = None) -> dict:
    """Export, check (full shape inference, strict), run on onnxruntime's CPU provider:
    {output name: array}."""
    import onnx
    import onnxruntime as ort
    from uopcli.interop.onnx.exporter import to_onnx
    model = to_onnx(graph, opset)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def evaluated(graph: Graph, inputs: dict) -> dict:
    """uopgrad eval --literal's outputs (the graph as written, as the exported model holds
    it), one array each (a tuple output as name[i], as eval lists it)."""
    flat = {}
    for name, value in evaluate_graph(graph, inputs, simplify=None).items():
        if isinstance(value, tuple):
            flat.update((f"{name}[{i}]", v) for i, v in enumerate(value) if v is not None)
        elif value is not None:
            flat[name] = np.asarray(value)
    return flat


def same_bits(ours: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits, or both nan (a nan's payload is not compared)."""
    ours, truth = np.asarray(ours), np.asarray(truth)
    assert ours.dtype == truth.dtype and ours.shape == truth.shape, (ours.dtype, ours.shape, truth.dtype, truth.shape)
    if truth.dtype == np.bool_:
        return ours == truth
    width = f"u{truth.dtype.itemsize}"
    same = ours.view(width) == truth.view(width)
    if truth.dtype.kind == "f":
        same |= np.isnan(ours) & np.isnan(truth)
    return same


def assert_exact(ours, truth, what: str = "") -> None:
    same = same_bits(ours, truth)
    if not np.all(same):
        bad = np.flatnonzero(~same.reshape(-1))[:6]
        raise AssertionError(f"{what}: {(~same).sum()} of {same.size} differ; first at {bad.tolist()}: "
                             f"ours {np.asarray(ours).reshape(-1)[bad].tolist()} "
                             f"truth {np.asarray(truth).reshape(-1)[bad].tolist()}")


def assert_close(ours, truth, what: str = "", rtol: float = 1e-5, exact=None) -> None:
    """Floats: within rtol of the output's largest magnitude (sums run in another order in
    onnxruntime; a gradient's near-zero elements are differences of large terms), and
    non-finite values where the truth has them; integers and bools exactly.

    Where cancellation leaves an output far smaller than the terms it sums (a loss that
    sums thousands of products), float32 rounding alone exceeds that: given `exact`, the
    same graph evaluated in float64, ours may then be at most 4x as far from it as the
    evaluator's own float32 result is."""
    ours, truth = np.asarray(ours), np.asarray(truth)
    assert ours.dtype == truth.dtype and ours.shape == truth.shape, (what, ours.dtype, ours.shape, truth.dtype)
    if truth.dtype.kind != "f":
        assert_exact(ours, truth, what)
        return
    finite = np.isfinite(truth)
    assert_exact(ours[~finite], truth[~finite], f"{what} (non-finite elements)")
    if not finite.any():
        return
    wide_ours, wide_truth = ours[finite].astype(np.float64), truth[finite].astype(np.float64)
    scale = float(np.max(np.abs(wide_truth)))
    worst = float(np.max(np.abs(wide_ours - wide_truth)))
    if worst <= rtol * scale:
        return
    message = f"{what}: worst difference {worst:.3g} > {rtol} x largest magnitude {scale:.3g}"
    assert exact is not None, message
    reference = np.asarray(exact, np.float64)[finite]
    ours_error = float(np.max(np.abs(wide_ours - reference)))
    eval_error = float(np.max(np.abs(wide_truth - reference)))
    assert ours_error <= 4 * eval_error, (f"{message}; against float64, ours is {ours_error:.3g} off, "
                                          f"the evaluator {eval_error:.3g}")


def float64_twin(graph: Graph) -> Graph | None:
    """The same graph computing in float64 where it computes in float32 (None when it
    reinterprets float32 bits, which float64 cannot mirror)."""
    from uopcli import Ops, UOp, dtypes, toposort
    from uopcli.core.uop import CallArg
    wide = lambda d: dtypes.float64 if d is dtypes.float32 else d  # noqa: E731
    twin: dict = {}
    for node in toposort(list(graph.outputs.values()) + list(graph.inputs)):
        dtype, src = wide(node.dtype), tuple(twin[s] for s in node.src)
        if node.op == Ops.BITCAST and dtypes.float32 in (node.dtype, node.src[0].dtype):
            return None
        if node.op == Ops.PARAM:
            made = UOp.param(node.arg, node.shape, dtype)
        elif node.op == Ops.CONST:
            made = UOp.const(node.arg, dtype)
        elif node.op == Ops.BUFFER:
            made = UOp.buffer(node.buffer_array().astype(dtype.np))
        elif node.op == Ops.NOOP:
            made = UOp.noop()
        elif node.op == Ops.CALL:
            made = UOp.make(Ops.CALL, dtype, src, CallArg(node.arg.name, None if node.arg.grad is None else twin[node.arg.grad]))
        else:
            made = UOp.make(node.op, dtype, src, node.arg)
        twin[node] = made
    return Graph({name: twin[node] for name, node in graph.outputs.items()}, [twin[n] for n in graph.inputs])
