"""The Python API where a newcomer's numpy/torch habits met it: one UOp where a list of
nodes is expected, a str where a list of names is, numpy subclasses and operands, bool()
and == of nodes, bad shapes, pickling, defaults that differ from the CLI's. Every result
is compared with torch or numpy in float64."""

import numpy as np
import pytest
import torch

import uopcli
from uopcli import GradientError, Graph, UOp, compute_gradient, differentiate, dtypes, evaluate, evaluate_graph


def _t(array) -> torch.Tensor:
    return torch.tensor(np.asarray(array, np.float64), requires_grad=True)


# ----------------------------------------------------------------------------- one node is one node

X0 = np.array([[1.5, -2.0], [0.25, 3.0], [-0.5, 4.0]])


def test_compute_gradient_takes_one_uop_as_one_target_as_torch_autograd_grad_does():
    x = UOp.param("x", (3, 2), dtypes.float64)
    loss = (x * x.sin()).sum()
    grads = compute_gradient(loss, loss.const_like(1.0), x)
    assert list(grads) == [x]
    t = _t(X0)
    expected, = torch.autograd.grad((t * t.sin()).sum(), t)
    got, = evaluate([grads[x]], {"x": X0})
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-14)


def test_forward_mode_takes_one_uop_as_one_root_and_one_target():
    from uopcli.core.forward import compute_jvp, jvp, linearize, transpose
    x = UOp.param("x", (3, 2), dtypes.float64)
    v = UOp.param("v", (3, 2), dtypes.float64)
    out = x.exp() * x
    V = np.array([[1.0, 0.5], [-1.0, 2.0], [0.0, 3.0]])
    _, expected = torch.func.jvp(lambda t: t.exp() * t, (torch.tensor(X0),), (torch.tensor(V),))
    found = compute_jvp(out, {x: v})
    assert list(found) == [out]
    primals, tangents = jvp(out, {x: v})
    assert primals == [out] and len(tangents) == 1
    np.testing.assert_allclose(evaluate(tangents, {"x": X0, "v": V})[0], expected.numpy(), rtol=1e-14)
    lin = linearize(out, x)
    assert lin.primals == [out] and [t.arg for t in lin.tangent_inputs] == ["tangent_x"]
    u = UOp.param("u", (3, 2), dtypes.float64)
    back, = transpose(lin, u)  # J^T u
    U = np.array([[2.0, 1.0], [1.0, -1.0], [0.5, 0.25]])
    _, vjp = torch.func.vjp(lambda t: t.exp() * t, torch.tensor(X0))
    np.testing.assert_allclose(evaluate([back], {"x": X0, "u": U})[0], vjp(torch.tensor(U))[0].numpy(), rtol=1e-14)


def test_toposort_and_substitute_take_one_uop_as_one_root():
    from uopcli.core.substitute import substitute
    x = UOp.param("x", (3,), dtypes.float64)
    y = (x * 2).sum()
    assert uopcli.toposort(y) == uopcli.toposort([y])
    assert uopcli.toposort(y)[-1] is y
    z = UOp.param("z", (3,), dtypes.float64)
    out, = substitute(y, {x: z})
    assert evaluate(out, {"z": np.array([1.0, 2.0, 4.0])})[0] == 14.0


def test_a_str_of_names_is_one_name_never_its_letters():
    x, y, xy = (UOp.param(n, (2,), dtypes.float64) for n in ("x", "y", "xy"))
    graph = Graph({"o": (x * y * xy).sum()})
    grad, _ = differentiate(graph, "xy")
    assert grad.output_names == ["grad_xy"]
    values = {"x": np.array([2.0, 3.0]), "y": np.array([5.0, 7.0]), "xy": np.array([1.0, 1.0])}
    np.testing.assert_array_equal(evaluate_graph(grad, values)["grad_xy"], [10.0, 21.0])
    assert differentiate(graph, "xy", of="o")[0].output_names == ["grad_xy"]
    assert uopcli.hvp(graph, "xy").output_names == ["hvp_xy"]
    assert uopcli.jacobian(graph, "xy", of="o").output_names == ["jacobian_o_xy"]
    from uopcli.tools.forward import jvp
    assert jvp(graph, "xy").input_names == ["x", "y", "xy", "tangent_xy"]
    from uopcli.tools.check import check_gradients
    report = check_gradients(graph, "xy", inputs=values)
    assert [t.name for t in report.targets] == ["xy"] and report.passed


def test_a_node_where_a_name_is_expected_is_refused_naming_the_name():
    x = UOp.param("x", (2,), dtypes.float64)
    with pytest.raises(GradientError, match="wrt takes names \\(str\\), got a UOp: name it 'x'"):
        differentiate(Graph({"o": (x * x).sum()}), [x])


# ----------------------------------------------------------------------------- numpy subclasses as inputs

def _square_graphs():
    y = UOp.param("y", (2, 2), dtypes.float32)
    return Graph({"sq": y * y, "s": (y * y).sum()})


PLAIN = np.float32([[1, 2], [3, 4]])


def test_an_np_matrix_input_is_its_plain_array_in_both_evaluators():
    from uopcli.backends.reference import reference_evaluate_graph
    graph = _square_graphs()
    for result in (evaluate_graph(graph, {"y": np.matrix(PLAIN)}), reference_evaluate_graph(graph, {"y": np.matrix(PLAIN)})):
        assert type(result["sq"]) is np.ndarray
        np.testing.assert_array_equal(result["sq"], PLAIN * PLAIN)  # elementwise, not the matrix product
        assert result["s"] == np.float32(30.0)


def test_an_np_matrix_of_another_shape_is_refused_by_shape():
    v = UOp.param("v", (3,), dtypes.float32)
    with pytest.raises(uopcli.EvaluationError, match=r"input 'v': expected float32\[3\], got float32\[1, 3\]"):
        evaluate_graph(Graph({"o": v * 2}), {"v": np.matrix(np.float32([1, 2, 3]))})


def test_a_masked_array_input_is_refused_in_one_line_naming_filled():
    from uopcli.backends.reference import reference_evaluate_graph
    masked = np.ma.masked_array(PLAIN, mask=[[0, 1], [0, 0]])
    for run in (evaluate_graph, reference_evaluate_graph):
        with pytest.raises(uopcli.EvaluationError, match=r"input 'y'.*mask would be ignored; pass value.filled\(v\)"):
            run(_square_graphs(), {"y": masked})
    filled = evaluate_graph(_square_graphs(), {"y": masked.filled(0)})["sq"]
    np.testing.assert_array_equal(filled, np.float32([[1, 0], [9, 16]]))


# ----------------------------------------------------------------------------- bool() and == of nodes

def test_bool_of_a_node_is_refused_as_tinygrad_refuses_it():
    # (tinygrad's Tensor raises TypeError too; not called here: the raise leaves its function
    # metadata set, and every later export in this process lost its module scopes)
    x = UOp.param("x", (3,), dtypes.float32)
    for attempt in (lambda: bool(x < 0), lambda: max(x, 0), lambda: sorted([x * 2, x]), lambda: x if x < 0 else -x,
                    lambda: not x, lambda: x and 1):
        with pytest.raises(TypeError, match="truth value of a graph node is not defined.*maximum"):
            attempt()
    relu = x.maximum(0)  # what max(x, 0) meant
    v = np.float32([-1.5, 0.0, 2.0])
    np.testing.assert_array_equal(evaluate_graph(Graph({"r": relu}), {"x": v})["r"], torch.relu(torch.tensor(v)).numpy())


def test_eq_of_two_nodes_stays_identity_and_keys_dicts():
    x = UOp.param("x", (3,), dtypes.float32)
    assert (x * 2 == x * 2) is True and (x * 2 != x * 3) is True and (x != x) is False
    assert (x + 1) in [x, x + 1] and [x, x * 2].index(x * 2) == 1
    assert {x: 1, x * 2: 2}[x * 2] == 2


def test_eq_and_ne_with_a_number_or_array_are_refused_naming_eq_and_ne():
    x = UOp.param("x", (4,), dtypes.float32)
    for attempt, method in ((lambda: x == 2, "eq"), (lambda: x != 0, "ne"), (lambda: 2 == x, "eq"),
                            (lambda: x == np.float32(2), "eq"), (lambda: np.float32(2) == x, "eq"),
                            (lambda: x == torch.tensor(2.0), "eq"), (lambda: x in [1, 2], "eq")):
        with pytest.raises(TypeError, match=rf"compare nodes \(identity\); for the elementwise comparison use x\.{method}"):
            attempt()
    # None and other non-values stay unequal, so lists of nodes and Nones work as Python's
    assert (x, None, x * 2).count(None) == 1 and (None, x).index(x) == 1 and "a" not in [x] and x != None  # noqa: E711
    val = np.float32([1, 2, 2, 3])
    t = torch.tensor(val)
    y = (x.eq(2) * x).sum()
    w = x.ne(2) * x
    got = evaluate_graph(Graph({"y": y, "w": w}), {"x": val})
    assert got["y"] == ((t == 2) * t).sum().item() == 4.0
    np.testing.assert_array_equal(got["w"], ((t != 2) * t).numpy())


# ----------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("shape", [(-1, 3), (2.7, 3), (True, 3), (3, "a"), (-2,), 3, "ab", (np.float64(2.0),)])
def test_leaf_and_creation_shapes_are_non_negative_ints(shape):
    makers = [lambda: UOp.param("z", shape), lambda: UOp.full(shape, 0.0)]
    if isinstance(shape, tuple):  # zeros(3) is zeros((3,)), as tinygrad's
        makers += [lambda: UOp.zeros(shape), lambda: UOp.zeros(*shape)]
    for make in makers:
        with pytest.raises(uopcli.GraphError, match="a shape (holds|is)"):
            make()


def test_numpy_and_torch_integers_are_sizes_and_reshape_still_infers_minus_one():
    z = UOp.param("z", (np.int64(2), torch.tensor(3)))
    assert z.shape == (2, 3) and all(type(s) is int for s in z.shape)
    assert z.reshape(-1).shape == (6,) and z.reshape(3, -1).shape == (3, 2)
    assert z.reshape(1, 2, 3).expand(4, -1, -1).shape == (4, 2, 3)
    assert UOp.param("v", (3,)).broadcast_to((2, -1)).shape == (2, 3)  # torch's -1: keep the size
    with pytest.raises(uopcli.GraphError, match="a shape holds ints, got 'a'"):
        z.reshape("a")
    with pytest.raises(uopcli.GraphError, match=r"sizes >= 0 \(or -1, inferred\), got \[-2, 3\]"):
        z.reshape(-2, 3)


# ----------------------------------------------------------------------------- numpy and torch operands

V3 = np.float32([10.0, -20.0, 30.0])


def _value(node):
    return evaluate([node], {"x": V3})[0]


@pytest.mark.parametrize("attempt", [
    lambda x: x * np.ones(3, np.float32), lambda x: np.ones(3, np.float32) * x, lambda x: x + np.ones((1, 1)),
    lambda x: np.ones((1, 1)) - x, lambda x: x * torch.ones(3), lambda x: x * [1.0, 2.0, 3.0],
    lambda x: x @ np.eye(3, dtype=np.float32), lambda x: np.eye(3, dtype=np.float32) @ x])
def test_an_array_operand_is_refused_in_one_line_naming_uop_buffer(attempt):
    with pytest.raises(uopcli.GraphError, match=r"UOp.buffer\("):
        attempt(UOp.param("x", (3,), dtypes.float32))


def test_numpy_and_torch_scalars_are_numbers_on_either_side():
    x = UOp.param("x", (3,), dtypes.float32)
    t = torch.tensor(V3)
    for node, expected in ((x * np.float32(2), t * 2), (np.float64(2) * x, 2 * t), (np.array(3.0) - x, 3 - t),
                           (x / torch.tensor(4.0), t / 4), (x + np.int64(1), t + 1)):
        got = _value(node)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected.numpy())


def test_numpy_functions_refuse_nodes_with_a_graph_error_not_an_object_array():
    x = UOp.param("x", (3,), dtypes.float32)
    with pytest.raises(uopcli.GraphError, match="numpy.sum does not take graph nodes: use the node's methods"):
        np.sum(x)
    with pytest.raises(TypeError, match="does not support ufuncs"):  # numpy's own refusal (__array_ufunc__ = None)
        np.exp(x)


def test_numpy_and_torch_integers_index_and_name_axes_as_ints():
    x = UOp.param("x", (3,), dtypes.float32)
    m = UOp.param("m", (2, 3), dtypes.float32)
    M = np.arange(6, dtype=np.float32).reshape(2, 3)
    i = np.argmax(V3)  # np.int64(2)
    cases = [(x[i], V3[i]), (x[np.array([0, 2])], V3[np.array([0, 2])]), (x[torch.tensor(1)], V3[1]),
             (x[torch.tensor([2, 0])], V3[[2, 0]]), (x.sum(axis=np.int64(0)), V3.sum(axis=0)),
             (m[np.int64(1), np.array([0, 2])], M[1, [0, 2]]), (m.sum(axis=(np.int32(1),)), M.sum(axis=1)),
             (m.max(np.int64(-1)), M.max(-1)), (m.softmax(np.int64(0)), torch.tensor(M).softmax(0).numpy())]
    for node, expected in cases:
        np.testing.assert_allclose(evaluate([node], {"x": V3, "m": M})[0], expected, rtol=1e-6)
    with pytest.raises(uopcli.GraphError, match="an axis is an int"):
        m.sum(axis=np.float64(1.0))


def test_a_torch_dtype_is_refused_naming_what_a_dtype_is():
    with pytest.raises(uopcli.GraphError, match=r"not a dtype: torch.float32 \(a DType such as dtypes.float32"):
        UOp.param("t", (3,), torch.float32)
    assert UOp.param("t", (3,), np.float64).dtype is dtypes.float64


# ----------------------------------------------------------------------------- check's inputs

def _checked_graph():
    x, w = UOp.param("x", (3,), dtypes.float32), UOp.param("w", (3,), dtypes.float32)
    return Graph({"loss": ((x * w).relu() ** 2).sum()})


POINT = {"x": np.float32([1, 2, 3]), "w": np.float32([0.5, -1, 2])}


@pytest.mark.parametrize("bad, message", [
    ({"X": POINT["x"], "w": POINT["w"]}, r"unknown input 'X'; the graph's inputs: x, w"),
    ({"x": np.float32([1, 2])}, r"input 'x': expected float32\[3\], got float32\[2\]"),
    ({"x": np.int32([1, 2, 3])}, r"input 'x': expected float32\[3\], got int32\[3\]"),
    ({"w": [0.5, -1, 2]}, r"input 'w': expected a numpy array float32\[3\], got list"),
    ({"x": np.ma.masked_array(POINT["x"], [0, 1, 0])}, r"mask would be ignored")])
def test_the_checks_refuse_the_inputs_evaluate_graph_refuses(bad, message):
    from uopcli.tools.check import check_gradients
    from uopcli.tools.forward_check import check_hvp, check_transpose
    graph = _checked_graph()
    for run in (lambda: evaluate_graph(graph, bad), lambda: check_gradients(graph, ["w"], inputs=bad),
                lambda: check_hvp(graph, ["w"], inputs=bad), lambda: check_transpose(graph, ["w"], inputs=bad)):
        with pytest.raises(uopcli.EvaluationError, match=message):
            run()


def test_check_gradients_checks_at_the_given_point_a_float64_one_too():
    """The checks compute in float64: a float64 point for a float32 input is that point
    (evaluate_graph, which computes in float32, refuses it)."""
    from uopcli.tools.check import check_gradients
    report = check_gradients(_checked_graph(), ["w"], inputs=POINT)
    x, w = (torch.tensor(POINT[n], dtype=torch.float64) for n in ("x", "w"))
    assert report.passed and report.loss == ((x * w).relu() ** 2).sum().item() == 36.25
    fine = {"x": np.array([1.1, 2.0, 3.0]), "w": np.array([0.5, -1.0, 2.0])}
    with pytest.raises(uopcli.EvaluationError, match=r"input 'x': expected float32\[3\], got float64\[3\]"):
        evaluate_graph(_checked_graph(), fine)
    report = check_gradients(_checked_graph(), ["w"], inputs=fine)
    x = torch.tensor(fine["x"], dtype=torch.float64)
    assert report.passed and report.loss == ((x * w).relu() ** 2).sum().item()


# ----------------------------------------------------------------------------- pickle and copy

def _pickled_graph():
    x, w = UOp.param("x", (3,), dtypes.float32), UOp.param("w", (3,), dtypes.float32)
    graph, _ = differentiate(Graph({"loss": ((x * w).sin() ** 2).sum()}), ["w"], keep_forward=True)
    return graph


def test_a_graph_and_a_node_pickle_as_the_very_nodes_hash_consing_finds():
    import pickle
    graph = _pickled_graph()
    back = pickle.loads(pickle.dumps(graph))
    assert isinstance(back, Graph) and back is not graph
    assert back.output_names == graph.output_names and back.inputs == graph.inputs
    assert all(back.outputs[n] is graph.outputs[n] for n in graph.outputs) and back.meta == graph.meta
    node = graph.outputs["grad_w"]
    assert pickle.loads(pickle.dumps(node)) is node
    assert pickle.loads(pickle.dumps({node: 1, "x": graph.inputs[0]})) == {node: 1, "x": graph.inputs[0]}


def test_copies_of_a_node_are_the_node_and_of_a_graph_a_graph_of_the_same_nodes():
    import copy
    graph = _pickled_graph()
    node = graph.outputs["loss"]
    assert copy.copy(node) is node and copy.deepcopy(node) is node and copy.deepcopy([node])[0] is node
    for copied in (copy.copy(graph), copy.deepcopy(graph)):
        assert copied is not graph and copied.outputs is not graph.outputs and copied.inputs is not graph.inputs
        assert all(copied.outputs[n] is graph.outputs[n] for n in graph.outputs) and copied.inputs == graph.inputs
        copied.outputs.pop("loss")
        assert "loss" in graph.outputs


def test_a_long_chain_pickles_without_recursion():
    import pickle
    x = UOp.param("x", (), dtypes.float64)
    y = x
    for _ in range(100_000):
        y = y * 1.0000001
    back = pickle.loads(pickle.dumps(Graph({"y": y})))
    assert back.outputs["y"] is y


def test_evaluate_graph_runs_in_a_process_pool_as_here():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    graph = _pickled_graph()
    values = {"x": np.float32([1, 2, 3]), "w": np.float32([0.5, -1, 2])}
    here = evaluate_graph(graph, values)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = pool.submit(evaluate_graph, graph, values).result(timeout=120)
    assert list(there) == list(here)
    for name in here:
        np.testing.assert_array_equal(there[name], here[name])
    x, w = (torch.tensor(values[n], dtype=torch.float64, requires_grad=True) for n in ("x", "w"))
    loss = ((x * w).sin() ** 2).sum()
    np.testing.assert_allclose(there["grad_w"], torch.autograd.grad(loss, w)[0].numpy(), rtol=1e-5)


# ----------------------------------------------------------------------------- ONNX files

MLP_ONNX = __import__("pathlib").Path(__file__).parent.parent / "samples" / "onnx" / "mlp-dynamo18.onnx"


def test_load_onnx_takes_a_models_bytes_as_its_path_and_computes_as_onnxruntime():
    onnxruntime = pytest.importorskip("onnxruntime")
    from uopcli.interop.onnx.importer import load_onnx
    by_path, weights = load_onnx(str(MLP_ONNX))
    by_bytes, weights_too = load_onnx(MLP_ONNX.read_bytes())
    assert uopcli.save(by_bytes) == uopcli.save(by_path) and weights_too.keys() == weights.keys()
    x = by_bytes.input("x")
    feed = {"x": np.random.default_rng(0).standard_normal(x.shape).astype(x.dtype.np)}
    ours = evaluate_graph(by_bytes, {**feed, **weights_too})
    session = onnxruntime.InferenceSession(str(MLP_ONNX), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feed)
    np.testing.assert_allclose(list(ours.values())[0], theirs[0], rtol=1e-5, atol=1e-6)


def test_onnx_files_fail_as_uop_files_do(tmp_path):
    from uopcli.interop.onnx.exporter import save_onnx
    x = UOp.param("x", (3,), dtypes.float32)
    graph = Graph({"o": x * 2})
    for path in (tmp_path, tmp_path / "no" / "such" / "m.onnx"):
        with pytest.raises(uopcli.FormatError, match=f"^{path}: cannot write: "):
            save_onnx(graph, str(path))
        with pytest.raises(uopcli.FormatError, match=f"^{path}: cannot write: "):
            uopcli.save(graph, str(path))
    with pytest.raises(uopcli.FormatError, match="an ONNX model, not a .uop file: read it with .*load_onnx"):
        uopcli.load(str(MLP_ONNX))


# ----------------------------------------------------------------------------- small inconsistencies

def test_the_node_level_jvp_refuses_a_graph_naming_the_graph_level_one():
    from uopcli.core.forward import compute_jvp, linearize
    from uopcli.tools.forward import jvp as graph_jvp
    x = UOp.param("x", (2,), dtypes.float64)
    graph = Graph({"o": (x * x).sum()})
    for attempt in (lambda: uopcli.jvp(graph, ["x"]), lambda: compute_jvp(graph, {}), lambda: linearize(graph, x)):
        with pytest.raises(GradientError, match=r"takes nodes .* for a Graph use uopcli.tools.forward.jvp\(graph, wrt\)"):
            attempt()
    tangent = evaluate_graph(graph_jvp(graph, ["x"]), {"x": np.array([1.5, -2.0]), "tangent_x": np.array([1.0, 3.0])})
    assert tangent["jvp_o"] == 2 * 1.5 * 1.0 + 2 * -2.0 * 3.0  # d(x.x) = 2 x . dx


def test_render_dot_is_the_utf8_bytes_of_to_dot():
    from uopcli import render, to_dot
    x = UOp.param("x", (2,), dtypes.float32)
    graph = Graph({"o": (x * 2).sum()})
    assert render(graph, "dot") == to_dot(graph).encode("utf-8") and isinstance(to_dot(graph), str)


# ----------------------------------------------------------------------------- evaluate_graph's default

def test_evaluate_graph_gives_what_uopgrad_eval_gives_and_literal_is_asked_for(tmp_path):
    import subprocess
    x = UOp.param("x", (4,), dtypes.float32)
    grad, _ = differentiate(Graph({"o": x.sigmoid().sum()}), ["x"])
    uopcli.save(grad, tmp_path / "g.uop")
    point = np.float32([-100, -5, 0, 3])
    np.save(tmp_path / "x.npy", point)
    subprocess.run(["uopgrad", "eval", "g.uop", "-i", "x=x.npy", "-o", "out.npz"], cwd=tmp_path, check=True,
                   capture_output=True)
    cli = np.load(tmp_path / "out.npz")["grad_x"]
    ours = evaluate_graph(grad, {"x": point})["grad_x"]
    assert ours.tobytes() == cli.tobytes() and ours[0] == 0.0  # sigmoid'(-100): 0, as tinygrad computes it
    t = torch.tensor(point[1:], dtype=torch.float64, requires_grad=True)
    expected = torch.autograd.grad(t.sigmoid().sum(), t)[0].numpy()
    np.testing.assert_allclose(ours[1:], expected, rtol=1e-5)
    literal = evaluate_graph(grad, {"x": point}, simplify=None)["grad_x"]  # as written: 0 * inf
    assert np.isnan(literal[0])
    np.testing.assert_allclose(literal[1:], expected, rtol=1e-5)


# ----------------------------------------------------------------------------- outputs of their own

def test_outputs_are_never_the_callers_inputs_nor_each_other():
    w = UOp.param("w", (3,), dtypes.float32)
    graph, _ = differentiate(Graph({"loss": (w * w).sum()}), ["w"], keep_forward=True)
    graph.outputs.update({"w_out": w, "w_again": w, "w_T": w.reshape(3, 1), "twice": graph.outputs["grad_w"]})
    w0 = np.float32([1, 2, 3])
    res = evaluate_graph(graph, {"w": w0}, simplify=None)
    arrays = list(res.values())
    assert not any(np.shares_memory(a, w0) for a in arrays)
    assert res["grad_w"] is not res["twice"] and not np.shares_memory(res["w_out"], res["w_again"])
    res["w_out"] -= 0.1 * res["grad_w"]  # an SGD step on the returned weights
    t = torch.tensor(w0, requires_grad=True)
    step = (t - 0.1 * torch.autograd.grad((t * t).sum(), t)[0]).detach().numpy()
    np.testing.assert_array_equal(res["w_out"], step)
    np.testing.assert_array_equal(w0, [1, 2, 3])
    np.testing.assert_array_equal(res["w_again"], [1, 2, 3])
    np.testing.assert_array_equal(res["twice"], 2 * w0)


def test_a_graph_takes_one_uop_as_its_one_input():
    x = UOp.param("x", (3, 2), dtypes.float64)
    graph = Graph({"o": (x * 2).sum()}, inputs=x)
    assert graph.inputs == [x]
    assert evaluate_graph(graph, {"x": X0})["o"] == 2 * X0.sum()
