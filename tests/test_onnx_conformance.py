"""ONNX's own conformance data through uopgrad's importer and evaluator, as ONNX backends
test themselves (tests/_onnx_conformance.py runs a case; tests/onnx_conformance_refused.py
lists what is refused and why):

- every node case of `onnx.backend.test.case.node.collect_testcases()`;
- every model of the wheel's onnx/backend/test/data/{simple,pytorch-converted,
  pytorch-operator}, as shipped and converted to opset 18;
- the light model zoo of the wheel (AlexNet ... VGG-19): imported as shipped, and the
  ones whose ops are all built computed on ONNX's runner's input, against its stored output.

A case passes, or is refused for a listed reason; a case refused for an unlisted one,
raising, or computing a value that differs, fails; so does a passing case whose op the
list still names (the list must shrink as ops are built).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: ONNX's conformance data is skipped")

import _onnx_conformance as conformance  # noqa: E402
from onnx_conformance_refused import listed_ops, refusal_reason  # noqa: E402

_NODE_CASES: dict = {}


def _node_cases(config) -> dict:
    if not _NODE_CASES:
        cache = str(config.cache.mkdir("onnx-conformance")) if hasattr(config, "cache") else \
            os.path.join(tempfile.gettempdir(), f"uopgrad-onnx-conformance-{os.getuid()}")
        _NODE_CASES.update((case.name, case) for case in conformance.node_cases(cache))
    return _NODE_CASES


# the node cases run in batches of consecutive names (one test each: pytest's and xdist's
# cost per test is ten times a case's own); a failing batch lists every failing case
BATCH = 24


def _batches(config) -> list[str]:
    names = sorted(_node_cases(config))
    return [f"{names[i]}..{names[min(i + BATCH, len(names)) - 1]}" for i in range(0, len(names), BATCH)]


def pytest_generate_tests(metafunc):
    if "node_batch" in metafunc.fixturenames:
        metafunc.parametrize("node_batch", _batches(metafunc.config))
    if "model_dir" in metafunc.fixturenames:
        dirs = [d for kind in ("simple", "pytorch-converted", "pytorch-operator") for d in conformance.model_dirs(kind)]
        metafunc.parametrize("model_dir", dirs, ids=[os.path.relpath(d, conformance.onnx_data_dir()) for d in dirs])


def ops_of(model_bytes: bytes) -> list[tuple[str, int]]:
    """(op, the since_version its opset picks) of each node of the model."""
    import onnx.defs
    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    out = []
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and opset is not None:
            out.append((node.op_type, onnx.defs.get_schema(node.op_type, opset, "").since_version))
    return out


def problem(case: conformance.Case) -> str:
    """Why the case fails (empty when it passes or is refused for a listed reason)."""
    outcome = conformance.run_case(case)
    if outcome.status == "pass":
        stale = listed_ops(ops_of(case.model))
        return f"{case.name} passes: remove {stale} from tests/onnx_conformance_refused.py" if stale else ""
    if outcome.status == "refused":
        return "" if refusal_reason(outcome.detail, outcome.ops) else \
            f"refused, and not for a listed reason: {outcome.detail}"
    return f"{case.name}: {outcome.status}: {outcome.detail}"


def check(case: conformance.Case) -> None:
    why = problem(case)
    assert not why, why


def test_node_cases(node_batch, request):
    cases = _node_cases(request.config)
    first, last = node_batch.split("..")
    problems = [why for name in sorted(cases) if first <= name <= last and (why := problem(cases[name]))]
    assert not problems, f"{len(problems)} failing:\n" + "\n".join(problems)


def test_model_data_as_shipped(model_dir):
    check(conformance.model_case(model_dir))


def test_model_data_at_opset_18(model_dir):
    check(conformance.model_case(model_dir, opset=18))


# ----------------------------------------------------------------------------- the light zoo

ZOO = [os.path.basename(p) for p in conformance.zoo_models()]
# the ops of the zoo that other branches build (LRN: i29c; Sum: i29b); when they are built,
# these models run as the others do
ZOO_WAITING: dict[str, str] = {}  # a zoo model refused for want of an op: {file: op} (none today)


@pytest.mark.parametrize("name", ZOO)
def test_light_zoo_model(name):
    path = os.path.join(conformance.onnx_data_dir(), "light", name)
    case = conformance.zoo_case(path)
    if name in ZOO_WAITING:
        outcome = conformance.import_outcome(case)
        assert outcome.status == "refused" and {op for op, _ in outcome.ops} == {ZOO_WAITING[name]}, outcome
        assert refusal_reason(outcome.detail, outcome.ops)
        return
    outcome = conformance.run_case(case)
    assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.detail}"


def test_the_comparison_sees_a_wrong_value_a_zero_sign_and_a_dtype():
    truth = np.array([1.0, -0.0, np.nan, np.inf], np.float32)
    assert conformance.mismatch(truth.copy(), truth, 1e-3, 1e-7, signed_zero=True) == ""
    assert "rtol" in conformance.mismatch(truth * np.float32(1.01), truth, 1e-3, 1e-7, signed_zero=False)
    assert "sign of a zero" in conformance.mismatch(np.abs(truth), truth, 1e-3, 1e-7, signed_zero=True)
    assert conformance.mismatch(np.abs(truth), truth, 1e-3, 1e-7, signed_zero=False) == ""
    assert "nan" in conformance.mismatch(np.array([1, 0, 0, np.inf], np.float32), truth, 1e-3, 1e-7, False)
    assert "infinities" in conformance.mismatch(np.array([1, 0, np.nan, -np.inf], np.float32), truth, 1e-3, 1e-7,
                                                 False)
    assert "dtype" in conformance.mismatch(truth.astype(np.float64), truth, 1e-3, 1e-7, False)
    assert "differ" in conformance.mismatch(np.array([3, 5]), np.array([3, 4]), 1e-3, 1e-7, False)


def test_light_squeezenet_gradient_equals_pytorchs_and_runs_in_onnxruntime():
    """The smallest zoo model (bench/bench_onnx_zoo.py does all nine): random weights,
    float64, the gradient of sum(out * c) with respect to the first and the last Conv
    weights, against PyTorch's autograd and onnxruntime running uopgrad's gradient."""
    pytest.importorskip("torch", reason="torch is not installed: the zoo gradient test skips")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python")
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    from bench_onnx_zoo import targets, torch_gradient, with_weights

    from uopcli import differentiate, evaluate_graph
    from uopcli.interop.onnx.exporter import to_onnx
    from uopcli.interop.onnx.importer import import_model
    model = with_weights(onnx.load(os.path.join(conformance.onnx_data_dir(), "light", "light_squeezenet.onnx")),
                         np.float64)
    wrt = targets(model)
    feeds = {k: v.astype(np.float64) for k, v in conformance.zoo_inputs(model).items()}
    out = model.graph.output[0].name
    cotangent = np.random.default_rng(1).standard_normal(
        tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim))
    graph, weights = import_model(model)
    grads, _ = differentiate(graph, wrt=wrt, cotangent="input")
    ours = evaluate_graph(grads, {**weights, **feeds, f"cotangent_{out}": cotangent})
    truth = torch_gradient(model, feeds, cotangent, wrt)
    session = ort.InferenceSession(to_onnx(grads, weights=weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    given = {**feeds, f"cotangent_{out}": cotangent}
    theirs = dict(zip([o.name for o in session.get_outputs()],
                      session.run(None, {i.name: given[i.name] for i in session.get_inputs()})))
    for name in wrt:
        scale = np.abs(truth[name]).max()
        assert scale > 0 and np.abs(ours[f"grad_{name}"] - truth[name]).max() <= 1e-6 * scale, name
        assert np.abs(theirs[f"grad_{name}"] - truth[name]).max() <= 1e-6 * scale, name
