"""The Python API defects a user found (repros 10, 12, 14, 15 of the API audit), each pinned
against real values: a file save() writes is one load() reads; weights of to_onnx named
as inputs; messages that name Python parameters; render to the HTML page; float16
statistics computed in float32."""

import numpy as np
import pytest

from uopcli import FormatError, Graph, GraphError, UOp, dtypes, evaluate_graph, load, save

F32 = dtypes.float32


def _x():
    return UOp.param("x", (3,), F32)


# ----------------------------------------------------------------------------- 14: save() writes only what load() reads

def _changed_in_place():
    """Graphs whose outputs/inputs were changed after Graph() checked them, with the one
    line Graph() gives for the same thing."""
    x, z = _x(), UOp.param("z", (3,), F32)
    spaced = Graph({"o": x * 2})
    spaced.outputs["loss 2"] = x.sum()
    unlisted = Graph({"o": x * 2})
    unlisted.outputs["p"] = z * 3
    duplicate = Graph({"o": x * 2})
    duplicate.inputs.append(x)
    other_shape = Graph({"o": x * 2})
    other_shape.outputs["p"] = UOp.param("x", (4,), F32) * 3
    not_a_node = Graph({"o": x * 2})
    not_a_node.outputs["p"] = 3.0
    noop = Graph({"o": x * 2})
    noop.outputs["n"] = UOp.noop()
    free_slot = Graph({"o": x * 2})
    free_slot.outputs["s"] = UOp.param(0, (3,), F32) * 2
    not_a_param = Graph({"o": x * 2})
    not_a_param.inputs.append(x * 2)
    return [
        (spaced, "output name 'loss 2' must be non-empty, without '=', ',' or whitespace"),
        (unlisted, "input 'z' is used but not listed in inputs"),
        (duplicate, "duplicate input name 'x'"),
        (other_shape, "duplicate input name 'x' (two PARAMs of different shape or dtype)"),
        (not_a_node, "output 'p' must be a UOp, got float"),
        (noop, "output 'n' is a NOOP (NOOP is only a TUPLE element)"),
        (free_slot, "slot PARAM 0 float32[3] is used outside any FUNCTION or CALL body"),
        (not_a_param, "graph inputs must be named PARAMs, got <UOp MUL"),
    ]


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_save_refuses_a_graph_changed_in_place_into_one_load_refuses(tmp_path, form):
    for graph, message in _changed_in_place():
        path = tmp_path / "g.uop"
        with pytest.raises(GraphError) as caught:
            save(graph, str(path), form=form)
        assert str(caught.value).startswith(message)
        assert "\n" not in str(caught.value)
        assert not path.exists()  # nothing written
        with pytest.raises(GraphError) as again:
            graph.check()
        assert str(again.value) == str(caught.value)


def test_graph_refuses_at_construction_what_load_refuses():
    x = _x()
    with pytest.raises(GraphError, match="output 'n' is a NOOP"):
        Graph({"o": x, "n": UOp.noop()})
    with pytest.raises(GraphError, match="input 'z' is used but not listed in inputs"):
        Graph({"o": x + UOp.param("z", (3,), F32)}, inputs=[x])


def test_a_graph_changed_in_place_into_a_valid_one_saves_loads_and_evaluates(tmp_path):
    x, z = _x(), UOp.param("z", (3,), F32)
    graph = Graph({"o": x * 2})
    graph.outputs["p"] = z * 3
    graph.inputs.append(z)  # the other half of adding an output that reads a new input
    graph.check()
    path = tmp_path / "g.uop"
    save(graph, str(path))
    back = load(str(path))
    assert back.output_names == ["o", "p"] and back.input_names == ["x", "z"]
    values = {"x": np.float32([1, -0.0, np.inf]), "z": np.float32([2, 1e-45, np.nan])}
    got = evaluate_graph(back, values)
    assert got["o"].tobytes() == (values["x"] * np.float32(2)).tobytes()
    assert got["p"].tobytes() == (values["z"] * np.float32(3)).tobytes()


@pytest.mark.parametrize("simplify", ["tinygrad", "exact", None])
def test_evaluate_graph_names_the_unlisted_input_with_or_without_its_value(simplify):
    x, z = _x(), UOp.param("z", (3,), F32)
    graph = Graph({"o": x * 2})
    graph.outputs["p"] = z * 3
    ones = np.ones(3, np.float32)
    # before: "missing input 'z'" without its value, "unknown input 'z'" with it
    for given in ({"x": ones}, {"x": ones, "z": ones}):
        with pytest.raises(GraphError, match="^input 'z' is used but not listed in inputs$"):
            evaluate_graph(graph, given, simplify=simplify)
    graph.outputs["p"] = UOp.param("x", (4,), F32) * 3
    with pytest.raises(GraphError, match=r"^duplicate input name 'x' \(two PARAMs of different shape or dtype\)$"):
        evaluate_graph(graph, {"x": ones}, simplify=simplify)
    graph.outputs["p"] = 3.0
    with pytest.raises(GraphError, match="^output 'p' must be a UOp, got float$"):
        evaluate_graph(graph, {"x": ones}, simplify=simplify)


def test_evaluate_graph_still_reports_a_plain_input_error_as_before():
    graph = Graph({"o": _x() * 2})
    from uopcli import EvaluationError
    with pytest.raises(EvaluationError, match="^missing input 'x': expected float32\\[3\\]$"):
        evaluate_graph(graph, {})
    with pytest.raises(EvaluationError, match="^unknown input 'w'; the graph's inputs: x$"):
        evaluate_graph(graph, {"w": np.ones(3, np.float32)})


def test_load_still_refuses_a_free_slot_naming_its_node():
    # the reader's free-slot walk is now core.walks.free_slot: the same refusal, the same node
    import json
    doc = {"format": "uop", "version": 1, "inputs": [],
           "nodes": [["PARAM", "float32", [], {"shape": [3], "slot": 0}], ["SIN", "float32", [0], None]],
           "outputs": [["o", 1]]}
    with pytest.raises(FormatError, match=r"node 0 \(PARAM\): slot PARAM 0 is used outside any FUNCTION or CALL body"):
        load(json.dumps(doc).encode())


# ----------------------------------------------------------------------------- 10: to_onnx's weights are inputs

def test_to_onnx_refuses_a_weight_that_is_no_input_and_runs_the_ones_that_are(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from uopcli.interop.onnx.exporter import ExportError, onnx_bytes, save_onnx, to_onnx
    x, w1 = _x(), UOp.param("w1", (3,), F32)
    graph = Graph({"o": x * w1})
    w = np.float32([-0.0, 1e-45, 3])
    typo = {"w1x": w}  # before: written without it, w1 still an input
    for export in (lambda: to_onnx(graph, weights=typo), lambda: onnx_bytes(graph, weights=typo),
                   lambda: save_onnx(graph, str(tmp_path / "m.onnx"), weights=typo)):
        with pytest.raises(ExportError, match=r"^unknown weight 'w1x': weights are graph inputs; the graph's "
                           r"inputs: x, w1$"):
            export()
    assert not (tmp_path / "m.onnx").exists()
    save_onnx(graph, str(tmp_path / "m.onnx"), weights={"w1": w})
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]
    xv = np.float32([np.inf, -2, np.nan])
    (got,) = session.run(None, {"x": xv})
    with np.errstate(invalid="ignore"):  # inf * -0.0 is nan, on both sides
        expected = xv * w
    assert got.tobytes() == expected.tobytes() == evaluate_graph(graph, {"x": xv, "w1": w})["o"].tobytes()


def test_the_cli_still_writes_an_onnx_gradient_with_the_models_weights(tmp_path):
    """The CLI hands to_onnx the model IN's weights (every command keeps every input of IN):
    the gradient file runs given the model's own input alone, as torch's autograd says."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch = pytest.importorskip("torch")
    import subprocess
    from pathlib import Path
    model = Path(__file__).resolve().parent.parent / "samples" / "onnx" / "mlp-dynamo18.onnx"
    out = tmp_path / "g.onnx"
    subprocess.run(["uopgrad", "diff", str(model), "--wrt", "fc1.weight", "--cotangent", "ones", "-o", str(out),
                    "--quiet"], check=True)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]
    from uopcli.interop.onnx.importer import load_onnx
    _, weights = load_onnx(str(model))
    xv = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    (got,) = session.run(None, {"x": xv})
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k == "fc1.weight") for k, v in weights.items()}
    hidden = torch.relu(torch.tensor(xv, dtype=torch.float64) @ t["fc1.weight"].T + t["fc1.bias"])
    (hidden @ t["fc2.weight"].T + t["fc2.bias"]).sum().backward()
    np.testing.assert_allclose(got, t["fc1.weight"].grad.numpy(), rtol=1e-5, atol=1e-6)
