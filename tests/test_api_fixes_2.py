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


# ----------------------------------------------------------------------------- 12.3: Python words in Python, flags on the CLI

def _api_and_cli_refusals():
    """(call from Python, the same through the CLI, Python's message, the CLI's line)."""
    from uopcli import differentiate
    from uopcli.tools.forward import hessian, jacobian
    x, y = UOp.param("x", (2,), F32), UOp.param("y", (2,), F32)
    vector = Graph({"o": x * 2})
    two = Graph({"a": x.sum(), "b": y.sum()})
    return [
        (vector, lambda: differentiate(vector, ["x"]), ["diff", "--wrt", "x"],
         "output 'o' is float32[2], not a scalar: its gradient needs a cotangent (cotangent='ones' for all ones, "
         "or cotangent='input' for a new input cotangent_o)",
         "output 'o' is float32[2], not a scalar: its gradient needs a cotangent (--cotangent ones for all ones, "
         "or --cotangent input for a new input cotangent_o)"),
        (two, lambda: differentiate(two, ["x"]), ["diff", "--wrt", "x"],
         "the graph has 2 outputs (a, b): choose which to differentiate with of=[names]",
         "the graph has 2 outputs (a, b): choose which to differentiate with --of"),
        (two, lambda: hessian(two, ["x"], of=["a", "b"]), ["hessian", "--wrt", "x", "--of", "a,b"],
         "a Hessian is of one output; of= names 2", "a Hessian is of one output; --of names 2"),
        (vector, lambda: hessian(vector, ["x"]), ["hessian", "--wrt", "x"],
         "output 'o' is float32[2]: a Hessian needs a floating-point scalar (or a weighting of a float output: "
         "cotangent='ones', or 'input')",
         "output 'o' is float32[2]: a Hessian needs a floating-point scalar (or a weighting of a float output: "
         "--cotangent ones, or input)"),
        (vector, lambda: jacobian(vector, ["x"], limit=3), ["jacobian", "--wrt", "x", "--limit",
                                                             "max_tensor_elements=3"],
         "jacobian_o_x would hold 4 elements (16 bytes of float32), above max_tensor_elements 3: raise it "
         "(limit=N), or use jvp/hvp for products with a few vectors",
         "jacobian_o_x would hold 4 elements (16 bytes of float32), above max_tensor_elements 3: raise it with "
         "--limit max_tensor_elements=N, or use jvp/hvp for products with a few vectors"),
    ]


def test_python_callers_read_parameter_names_and_cli_users_read_flags(tmp_path):
    import subprocess
    from uopcli import GradientError
    for graph, call, command, python_words, cli_words in _api_and_cli_refusals():
        with pytest.raises(GradientError) as caught:
            call()
        assert str(caught.value) == python_words
        assert "--" not in str(caught.value)
        path = tmp_path / "g.uop"
        save(graph, str(path))
        done = subprocess.run(["uopgrad", command[0], str(path), *command[1:], "-o", str(tmp_path / "out.uop")],
                              capture_output=True, text=True)
        assert done.returncode == 1
        assert done.stderr == f"uopgrad: error: {path}: {cli_words}\n"


def test_nothing_to_differentiate_names_wrt_as_each_caller_spells_it():
    from uopcli import GradientError, differentiate
    from uopcli.tools.forward import hvp
    graph = Graph({"s": _x().sum()})
    for call in (lambda: differentiate(graph, []), lambda: hvp(graph, [])):
        with pytest.raises(GradientError, match=r"^nothing to differentiate with respect to: name at least one input "
                           r"\(wrt=\[names\]\)$") as caught:
            call()
        assert caught.value.cli_message == ("nothing to differentiate with respect to: name at least one input "
                                            "(--wrt)")


# ----------------------------------------------------------------------------- 12.4: render(graph, "html")

def _two_outputs():
    x, w = _x(), UOp.param("w", (3,), F32)
    return Graph({"loss": (x * w).sum(), "y": (x + w).exp()})


def test_render_html_is_the_page_the_cli_writes(tmp_path):
    import shutil
    import subprocess
    from uopcli import render
    if shutil.which("dot") is None:
        pytest.skip("the page's levels are laid out by Graphviz's dot")
    graph = _two_outputs()
    save(graph, str(tmp_path / "g.uop"))
    values = tmp_path / "v.npz"
    np.savez(values, x=np.float32([1, -0.0, np.nan]), loss=np.float32(2.5))
    for extra, options in (([], {}), (["--outputs", "y"], {"outputs": ["y"]}),
                           (["--values", str(values)], {"values": str(values)})):
        subprocess.run(["uopgrad", "render", "g.uop", *extra, "-o", "g.html"], cwd=tmp_path, check=True)
        page = render(graph, "html", title="g.uop", **options)
        assert page == (tmp_path / "g.html").read_bytes()
        assert page.startswith(b"<!DOCTYPE html>") and b"<title>g.uop" in page
    only_y = render(graph, "html", outputs=["y"]).decode()
    assert '"loss"' not in only_y and '"y"' in only_y
    assert "<title>graph" in render(graph, "html").decode()  # no title given, no meta name
    # x's min, mean, max (-0.0 kept) and nan count; the loss's value
    assert '"values":{"0":["-0","0.5","1","1"],"4":["2.5","2.5","2.5",""]}' in render(graph, "html", values=values).decode()


def test_render_html_refuses_picture_options_and_unknown_outputs():
    from uopcli import render
    from uopcli.views.graphviz import RenderError
    graph = _two_outputs()
    with pytest.raises(RenderError, match=r"^around, max_nodes: for static pictures; the html page holds every node"):
        render(graph, "html", around="x", max_nodes=3)
    with pytest.raises(RenderError, match=r"^no output named 'z'; outputs: loss, y$"):
        render(graph, "html", outputs=["z"])
    with pytest.raises(RenderError, match=r"^unknown format 'jpg'; one of svg, png, pdf, dot, html$"):
        render(graph, "jpg")


# ----------------------------------------------------------------------------- 15: float16 statistics in float32

F16 = dtypes.float16


def _ulps(ours: np.ndarray, theirs: np.ndarray) -> int:
    """The largest distance in float16 ulps (same-signed values; nan only where nan)."""
    assert ours.dtype == np.float16 and np.array_equal(np.isnan(ours), np.isnan(theirs))
    a, b = (np.where(np.isnan(x), 0, x).astype(np.float16).view(np.int16).astype(np.int64) for x in (ours, theirs))
    return int(np.abs(a - b).max())


def _float16_rows():
    """Rows whose deviations pass 256 (their float16 squares overflow), modest rows, a
    constant row, subnormal values, a row with nan and one with inf, all float16."""
    rng = np.random.default_rng(15)
    rows = [np.arange(8) * 100 - 350.0, rng.standard_normal(8) * 300, rng.standard_normal(8),
            np.full(8, -2.5), np.arange(8) * 6e-8, rng.standard_normal(8) * 3e4,
            [1, 2, np.nan, 4, 5, 6, 7, 8], [1, 2, 3, np.inf, 5, 6, 7, 8]]
    return np.array(rows).astype(np.float16)


@pytest.mark.parametrize("simplify", ["tinygrad", None])
def test_float16_layernorm_var_std_are_torchs_rounded_once(simplify):
    torch = pytest.importorskip("torch")
    values = _float16_rows()
    h = UOp.param("h", values.shape, F16)
    graph = Graph({"ln": h.layernorm(), "var": h.var(1), "var0": h.var(1, correction=0), "std": h.std(1),
                   "all": h[:6].var(), "mean_var": h.var_mean(0)[0]})
    got = evaluate_graph(graph, {"h": values}, simplify=simplify)
    assert all(a.dtype == np.float16 for a in got.values())
    t16, t64 = torch.tensor(values), torch.tensor(values, dtype=torch.float64)
    with np.errstate(over="ignore"):  # 3e4-sized deviations: a variance past float16's range is inf, as torch's
        expected = {"ln": (torch.nn.functional.layer_norm(t16, (8,)), torch.nn.functional.layer_norm(t64, (8,))),
                    "var": (t16.var(1), t64.var(1)), "var0": (t16.var(1, correction=0), t64.var(1, correction=0)),
                    "std": (t16.std(1), t64.std(1)), "all": (t16[:6].var(), t64[:6].var()),
                    "mean_var": (t16.var(0), t64.var(0))}
        for name, (half, double) in expected.items():
            assert _ulps(got[name], double.numpy().astype(np.float16)) == 0, name  # float64's value, rounded once
            assert _ulps(got[name], half.numpy()) == 0, name
    # the repro's row: before, layernorm 0 everywhere and var inf
    assert got["ln"][0, 0] == np.float16(-1.527) and got["var"][0] == np.float16(60000)
    assert np.isinf(got["var"][5]) and np.all(got["ln"][3] == 0)


def test_float16_layernorm_gradient_through_the_casts_is_torchs():
    torch = pytest.importorskip("torch")
    from uopcli import differentiate
    values = _float16_rows()[[0, 1, 2, 4, 5]]  # finite, not constant (std's slope at 0 is another matter)
    weights = np.random.default_rng(1).standard_normal(values.shape).astype(np.float16)
    h, c = UOp.param("h", values.shape, F16), UOp.param("c", values.shape, F16)
    graph = Graph({"loss": (h.layernorm() * c).sum() + h.std(1).sum() * 1e-3})
    grad, _ = differentiate(graph, ["h"])
    got = evaluate_graph(grad, {"h": values, "c": weights})["grad_h"]
    assert got.dtype == np.float16
    t64 = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    ((torch.nn.functional.layer_norm(t64, (8,)) * torch.tensor(weights, dtype=torch.float64)).sum()
     + t64.std(1).sum() * 1e-3).backward()
    expected = t64.grad.numpy()
    # within an ulp of float64's gradient: computed in float32, rounded once (before: 0.0102 off, 27060 ulps)
    assert _ulps(got, expected.astype(np.float16)) <= 1
    np.testing.assert_allclose(got, expected, rtol=2 ** -10, atol=2 ** -24)
    t16 = torch.tensor(values, requires_grad=True)
    ((torch.nn.functional.layer_norm(t16, (8,)) * torch.tensor(weights)).sum() + t16.std(1).sum() * 1e-3).backward()
    # torch's own float16 gradient rounds at its steps (74 ulps off float64's on a cancelling element, and its
    # std backward overflows on the 3e4 row): ours is nowhere farther from float64's than torch's float16 is
    theirs = t16.grad.numpy().astype(np.float64)
    ulp = np.spacing(np.abs(got)).astype(np.float64)
    assert np.all(np.abs(got - expected) <= np.abs(theirs - expected) + ulp)


def test_float32_and_float64_statistics_are_the_graphs_they_were():
    for dtype in (dtypes.float32, dtypes.float64):
        x = UOp.param("x", (4, 8), dtype)
        centred = x - x.mean(1, keepdim=True)
        assert x.var(1) is centred.square().sum(1) / 7
        assert x.std(1, correction=0) is (centred.square().sum(1) / 8).sqrt()
        assert x.layernorm() is centred * ((centred * centred).mean(-1, keepdim=True) + 1e-5).rsqrt()
    ints = UOp.param("i", (4,), dtypes.int32)
    assert ints.var().dtype == dtypes.float32 and ints.layernorm().dtype == dtypes.float32


# ----------------------------------------------------------------------------- 12.5: inputs by node, as evaluate takes them

def test_evaluate_graph_takes_an_inputs_node_as_evaluate_does():
    from uopcli import EvaluationError, evaluate
    x, s = _x(), UOp.param("s", (), F32)
    graph = Graph({"o": (x * s).sum()})
    xv, sv = np.float32([1, -0.0, 3e38]), np.float32(2)
    by_node = evaluate_graph(graph, {x: xv, s: sv}, simplify=None)["o"]
    (direct,) = evaluate([graph.outputs["o"]], {x: xv, s: sv})
    assert by_node.tobytes() == direct.tobytes() == evaluate_graph(graph, {"x": xv, "s": sv})["o"].tobytes()
    assert np.isinf(by_node)  # 3e38 * 2 overflows float32, as in numpy
    with pytest.raises(EvaluationError, match=r"^input 'x' is given twice \(by its name and by its node\)$"):
        evaluate_graph(graph, {x: xv, "x": xv, s: sv})
    other = UOp.param("x", (4,), F32)  # same name, another node: no input of this graph
    with pytest.raises(EvaluationError, match=r"^unknown input <UOp PARAM float32\[4\] 'x'.*; the graph's inputs: x, s$"):
        evaluate_graph(graph, {other: np.zeros(4, np.float32)})
    with pytest.raises(EvaluationError, match=r"^unknown input <UOp MUL"):
        evaluate_graph(graph, {x * s: xv})
