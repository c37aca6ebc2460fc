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
    """uopgrad eval's outputs, one array each (a tuple output as name[i], as eval lists it)."""
    flat = {}
    for name, value in evaluate_graph(graph, inputs).items():
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


def assert_close(ours, truth, what: str = "", rtol: float = 1e-5) -> None:
    """Floats: within rtol of the output's largest magnitude (sums run in another order in
    onnxruntime; a gradient's near-zero elements are differences of large terms), and
    non-finite values where the truth has them; integers and bools exactly."""
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
    assert worst <= rtol * scale, f"{what}: worst difference {worst:.3g} > {rtol} x largest magnitude {scale:.3g}"
