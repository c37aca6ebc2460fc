"""ONNX Scan and Loop, imported unrolled (uopcli/interop/onnx/control.py): values against
onnxruntime for every attribute (axes, directions, several states and scan inputs, Scan-8's
batch, nested scans, captured outer values), gradients against PyTorch's autograd of the
same recurrence in float64, the steps' scopes, and one-line refusals naming the node."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime

onnx, ort = need_onnx_and_runtime()

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402

F, D = TensorProto.FLOAT, TensorProto.DOUBLE
RNG = np.random.default_rng(2026)


def _info(name, kind, shape):
    return helper.make_tensor_value_info(name, kind, shape)


def _body(nodes, inputs, outputs, initializers=()):
    """A body graph; inputs and outputs as (name, kind, shape)."""
    return helper.make_graph(nodes, "body", [_info(*i) for i in inputs], [_info(*o) for o in outputs],
                             list(initializers))


def _model(nodes, inputs: dict, outputs: list, initializers: dict | None = None, opset: int = 21, kind=None):
    """A model whose graph inputs are `inputs` (name -> array), and whose outputs are named,
    of the first input's element type (or `kind`)."""
    kind = kind or helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    graph_inputs = [_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()]
    graph = helper.make_graph(nodes, "scan", graph_inputs, [_info(o, kind, None) for o in outputs],
                              [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _ours(model, feeds: dict) -> list:
    graph, weights = import_model(model, source="scan.onnx")
    values = evaluate_graph(graph, {**weights, **feeds})
    return [np.asarray(values[name]) for name in graph.outputs]


def _onnxruntime(model, feeds: dict) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same_as_onnxruntime(model, feeds: dict, rtol: float) -> list:
    ours, theirs = _ours(model, feeds), _onnxruntime(model, feeds)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=f"output {i}")
    return ours


# ----------------------------------------------------------------------------- values

def _running_sums(kind=F):
    """States sum and product; scan output: sum * 2 - element (sees the order of steps)."""
    body = _body([helper.make_node("Add", ["s_in", "e"], ["s_out"]),
                  helper.make_node("Mul", ["p_in", "e"], ["p_out"]),
                  helper.make_node("Add", ["s_out", "s_out"], ["twice"]),
                  helper.make_node("Sub", ["twice", "e"], ["y"])],
                 [("s_in", kind, [3]), ("p_in", kind, [3]), ("e", kind, [3])],
                 [("s_out", kind, [3]), ("p_out", kind, [3]), ("y", kind, [3])])
    return body


def test_states_and_a_scan_output_step_by_step_as_onnxruntime():
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    s0, p0 = RNG.standard_normal(3).astype(np.float32), np.ones(3, np.float32)
    node = helper.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "ys"], name="scan", num_scan_inputs=1,
                            body=_running_sums())
    s, p, ys = _same_as_onnxruntime(_model([node], dict(s0=s0, p0=p0, x=x), ["s", "p", "ys"]), dict(s0=s0, p0=p0, x=x),
                                    1e-6)
    np.testing.assert_allclose(s, s0 + x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(p, x.prod(0), rtol=1e-6)
    np.testing.assert_allclose(ys, 2 * (s0 + np.cumsum(x, 0)) - x, rtol=1e-5)


@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", [
    ([0, 0], [0, 0], [0, 0], [0, 0]),
    ([1, -1], [0, 1], [-1, 1], [1, 0]),
    ([2, 0], [1, 1], [1, -3], [0, 1]),
    ([-2, 1], [1, 0], [2, 0], [1, 1]),
])
@pytest.mark.parametrize("b_known", [False, True])
def test_axes_and_directions_as_onnxruntime(in_axes, in_dirs, out_axes, out_dirs, b_known):
    """Two scan inputs of rank 3 scanned along any axis, either way; two scan outputs stacked
    along any axis, appended or prepended; the state mixes the elements so that the order
    of the steps shows in every output. `b_known`: b is a Constant node's (its elements are
    sliced when importing)."""
    length = 4
    shapes = []
    for axis in in_axes:
        shape = [2, 3]
        shape.insert(axis % 3, length)
        shapes.append(shape)
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    body = _body([helper.make_node("Mul", ["h_in", "half"], ["halved"]),
                  helper.make_node("Add", ["halved", "ea"], ["mixed"]),
                  helper.make_node("Sub", ["mixed", "eb"], ["h_out"]),
                  helper.make_node("Mul", ["ea", "eb"], ["prod"]),
                  helper.make_node("Add", ["prod", "h_out"], ["y1"]),
                  helper.make_node("Neg", ["h_out"], ["y2"])],
                 [("h_in", F, [2, 3]), ("ea", F, [2, 3]), ("eb", F, [2, 3])],
                 [("h_out", F, [2, 3]), ("y1", F, [2, 3]), ("y2", F, [2, 3])],
                 [numpy_helper.from_array(np.float32(0.5), "half")])
    h0 = RNG.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("Scan", ["h0", "a", "b"], ["h", "y1s", "y2s"], name="scan", num_scan_inputs=2, body=body,
                            scan_input_axes=in_axes, scan_input_directions=in_dirs, scan_output_axes=out_axes,
                            scan_output_directions=out_dirs)
    feeds = dict(h0=h0, a=a, b=b)
    nodes = [node]
    if b_known:
        nodes.insert(0, helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(b)))
        del feeds["b"]
    _same_as_onnxruntime(_model(nodes, feeds, ["h", "y1s", "y2s"]), feeds, 1e-6)


def test_scan8_scans_each_batch_element_on_its_own():
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)     # [batch, sequence, 2]
    s0, p0 = RNG.standard_normal((3, 2)).astype(np.float32), RNG.standard_normal((3, 2)).astype(np.float32)
    body = _body([helper.make_node("Add", ["s_in", "e"], ["s_out"]),
                  helper.make_node("Mul", ["p_in", "e"], ["p_out"]),
                  helper.make_node("Sub", ["s_out", "p_out"], ["y"])],
                 [("s_in", F, [2]), ("p_in", F, [2]), ("e", F, [2])],
                 [("s_out", F, [2]), ("p_out", F, [2]), ("y", F, [2])])
    lengths = np.full(3, 4, np.int64)
    for directions in ([0], [1]):
        node = helper.make_node("Scan", ["lengths", "s0", "p0", "x"], ["s", "p", "ys"], name="scan", num_scan_inputs=1,
                                body=body, directions=directions)
        model = _model([node], dict(s0=s0, p0=p0, x=x), ["s", "p", "ys"], dict(lengths=lengths), opset=8)
        _same_as_onnxruntime(model, dict(s0=s0, p0=p0, x=x), 1e-6)
        node = helper.make_node("Scan", ["", "s0", "p0", "x"], ["s", "p", "ys"], name="scan", num_scan_inputs=1,
                                body=body, directions=directions)
        _same_as_onnxruntime(_model([node], dict(s0=s0, p0=p0, x=x), ["s", "p", "ys"], opset=8),
                             dict(s0=s0, p0=p0, x=x), 1e-6)


def _rnn(opset: int = 21, nested: bool = False):
    """h_t = tanh(h W + x_t U + b) in float64, W, U and b initializers the body captures from
    the outer graph; outputs the last state and every state. `nested`: the body's update is
    itself a Scan over the hidden units (a column at a time), capturing the step's h."""
    update = [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
              helper.make_node("MatMul", ["x_t", "U"], ["xu"]),
              helper.make_node("Add", ["hw", "xu"], ["pre0"]),
              helper.make_node("Add", ["pre0", "b"], ["pre"]),
              helper.make_node("Tanh", ["pre"], ["h_out"]),
              helper.make_node("Identity", ["h_out"], ["y"])]
    if nested:  # the same values: columns of (h W) through an inner scan over W's columns
        inner = _body([helper.make_node("MatMul", ["h_in", "w_col"], ["col"]),
                       helper.make_node("Identity", ["c_in"], ["c_out"])],
                      [("c_in", D, []), ("w_col", D, [4])], [("c_out", D, []), ("col", D, [2])])
        update[0:1] = [helper.make_node("Scan", ["zero", "W"], ["unused", "cols"], name="inner", num_scan_inputs=1,
                                        body=inner, scan_input_axes=[1], scan_output_axes=[1]),
                       helper.make_node("Identity", ["cols"], ["hw"])]
    body = _body(update, [("h_in", D, [2, 4]), ("x_t", D, [2, 3])], [("h_out", D, [2, 4]), ("y", D, [2, 4])],
                 [numpy_helper.from_array(np.float64(0), "zero")] if nested else [])
    node = helper.make_node("Scan", ["h0", "x"], ["h", "hs"], name="rnn", num_scan_inputs=1, body=body,
                            scan_input_axes=[1], scan_output_axes=[1])
    weights = dict(W=RNG.standard_normal((4, 4)) * 0.5, U=RNG.standard_normal((3, 4)), b=RNG.standard_normal(4))
    feeds = dict(h0=RNG.standard_normal((2, 4)), x=RNG.standard_normal((2, 5, 3)))
    return _model([node], feeds, ["h", "hs"], weights, opset), feeds, weights


@pytest.mark.parametrize("nested", [False, True])
def test_a_recurrence_capturing_its_weights_as_onnxruntime(nested):
    model, feeds, _ = _rnn(nested=nested)
    h, hs = _same_as_onnxruntime(model, feeds, 1e-12)
    assert hs.shape == (2, 5, 4) and np.array_equal(h, hs[:, -1])


def test_weights_stay_inputs_and_the_gradients_equal_pytorchs():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the gradient comparison skips")
    model, feeds, weights = _rnn()
    graph, found = import_model(model, source="rnn.onnx")
    assert sorted(found) == ["U", "W", "b"] and {n.arg for n in graph.inputs} == {"h0", "x", "U", "W", "b"}
    grad, _ = differentiate(graph, ["W", "U", "b", "h0", "x"], of=["h", "hs"], cotangent="input")
    weighs = dict(cotangent_h=RNG.standard_normal((2, 4)), cotangent_hs=RNG.standard_normal((2, 5, 4)))
    ours = evaluate_graph(grad, {**feeds, **weights, **weighs})
    t = {n: torch.tensor(a, requires_grad=True) for n, a in {**feeds, **weights}.items()}
    h, states = t["h0"], []
    for step in range(5):
        h = torch.tanh(h @ t["W"] + t["x"][:, step] @ t["U"] + t["b"])
        states.append(h)
    ((h * torch.tensor(weighs["cotangent_h"])).sum()
     + (torch.stack(states, 1) * torch.tensor(weighs["cotangent_hs"])).sum()).backward()
    for name in ("W", "U", "b", "h0", "x"):
        np.testing.assert_allclose(ours[f"grad_{name}"], t[name].grad.numpy(), rtol=1e-12, atol=1e-13, err_msg=name)


def test_a_scanned_weight_stays_an_input_with_its_gradient():
    """x an initializer (a weight): sliced as a node, so that it keeps its gradient:
    ys_t = 2 (s0 + x_0 + ... + x_t) - x_t, so d sum_t u_t ys_t / d x_j = 2 sum_{t >= j} u_t - u_j."""
    x = RNG.standard_normal((5, 3))
    node = helper.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "ys"], name="scan", num_scan_inputs=1,
                            body=_running_sums(D))
    feeds = dict(s0=RNG.standard_normal(3), p0=np.ones(3))
    model = _model([node], feeds, ["s", "p", "ys"], dict(x=x))
    graph, weights = import_model(model)
    assert list(weights) == ["x"]
    grad, _ = differentiate(graph, ["x"], of=["ys"], cotangent="input")
    u = RNG.standard_normal((5, 3))
    got = evaluate_graph(grad, {**feeds, **weights, "cotangent_ys": u})["grad_x"]
    np.testing.assert_allclose(got, 2 * np.cumsum(u[::-1], 0)[::-1] - u, rtol=1e-14)


def test_a_scan_of_constants_is_known_when_importing():
    """Scanned constants fold: a shape computed by a Scan reshapes a tensor."""
    body = _body([helper.make_node("Mul", ["n_in", "e"], ["n_out"]), helper.make_node("Identity", ["n_out"], ["y"])],
                 [("n_in", TensorProto.INT64, []), ("e", TensorProto.INT64, [])],
                 [("n_out", TensorProto.INT64, []), ("y", TensorProto.INT64, [])])
    nodes = [helper.make_node("Scan", ["one", "factors"], ["count", "partial"], name="scan", num_scan_inputs=1,
                              body=body),
             helper.make_node("Reshape", ["x", "partial"], ["out"])]
    x = RNG.standard_normal(24).astype(np.float32)
    model = _model(nodes, dict(x=x), ["out"], dict(one=np.int64(1), factors=np.array([2, 1, 3], np.int64)))
    graph, _ = import_model(model)
    assert graph.outputs["out"].shape == (2, 2, 6)
    (out,) = _same_as_onnxruntime(model, dict(x=x), 0)
    assert np.array_equal(out, x.reshape(2, 2, 6))


# ----------------------------------------------------------------------------- names and scopes

def test_each_step_carries_its_scope_and_the_body_names_do_not_leak():
    """The body's nodes sit under `<scan>.<t>` (the viewer's groups); a body input named as
    an outer value shadows it for the steps only: after the Scan the name is the outer value."""
    body = _body([helper.make_node("Add", ["s_in", "x"], ["s_out"], name="/block/add"),
                  helper.make_node("Identity", ["s_out"], ["y"])],
                 [("s_in", F, [2]), ("x", F, [2])], [("s_out", F, [2]), ("y", F, [2])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], name="/enc/scan", num_scan_inputs=1, body=body),
             helper.make_node("Mul", ["x", "s"], ["out"])]        # x: the outer x, not the body's element
    xs, x, s0 = (RNG.standard_normal(shape).astype(np.float32) for shape in ((3, 2), (2,), (2,)))
    model = _model(nodes, dict(s0=s0, xs=xs, x=x), ["ys", "out"])
    graph, _ = import_model(model)
    ys, out = (np.asarray(v) for v in evaluate_graph(graph, dict(s0=s0, xs=xs, x=x)).values())
    np.testing.assert_allclose(out, x * (s0 + xs.sum(0)), rtol=1e-6)
    np.testing.assert_allclose(ys, s0 + np.cumsum(xs, 0), rtol=1e-6)
    scopes = {n.meta.scope for n in graph.nodes() if n.meta is not None and n.meta.loc == "/block/add"}
    assert scopes == {f"enc/scan.{t}/block" for t in range(3)}


# ----------------------------------------------------------------------------- refusals

def _refusal(model) -> str:
    with pytest.raises(FormatError) as caught:
        import_model(model, source="scan.onnx")
    message = str(caught.value)
    assert "\n" not in message
    return message


def _sums_node(**attrs):
    return helper.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "ys"], name="scan", body=_running_sums(),
                            **{"num_scan_inputs": 1, **attrs})


@pytest.mark.parametrize("attrs, inputs, says", [
    (dict(scan_input_axes=[2]), dict(x=(5, 3)), "scan_input_axes[0] 2 is out of range for rank 2"),
    (dict(scan_output_axes=[-3]), dict(x=(5, 3)), "scan_output_axes[0] -3 is out of range for rank 2"),
    (dict(scan_input_axes=[0, 1]), dict(x=(5, 3)), "scan_input_axes has 2 entries for 1"),
    (dict(num_scan_inputs=4), dict(x=(5, 3)), "needs a body and num_scan_inputs between 1 and its 3 inputs"),
    (dict(num_scan_inputs=2), dict(x=(5, 3)), "its scan inputs have different lengths [3, 5] along their scan axes"),
    (dict(), dict(x=(0, 3)), "scans a sequence of length 0: the shape of its scan outputs is only known by running "
                             "the body"),
    (dict(), dict(s0=(1,)), "its body changes state 0 from float32[1] to float32[3] at step 0: a state keeps its "
                            "type and shape"),
])
def test_a_malformed_scan_is_refused_in_one_line_naming_the_node(attrs, inputs, says):
    shapes = {"s0": (3,), "p0": (3,), "x": (5, 3), **inputs}
    feeds = {n: np.ones(shape, np.float32) for n, shape in shapes.items()}
    message = _refusal(_model([_sums_node(**attrs)], feeds, ["s", "p", "ys"]))
    assert message == "scan.onnx: node 'scan' (Scan): " + says, message


def test_a_body_that_does_not_fit_the_node_is_refused():
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], name="scan", num_scan_inputs=1, body=_running_sums())
    message = _refusal(_model([node], dict(s0=np.ones(3, np.float32), x=np.ones((5, 3), np.float32)), ["s", "ys"]))
    assert message.endswith("node 'scan' (Scan): its body takes 3 inputs and makes 3 outputs, for 1 states and "
                            "1 scan inputs"), message


def test_a_body_that_changes_a_states_type_is_refused():
    body = _body([helper.make_node("Add", ["s_in", "e"], ["sum"]),
                  helper.make_node("Cast", ["sum"], ["s_out"], to=D), helper.make_node("Identity", ["sum"], ["y"])],
                 [("s_in", F, [3]), ("e", F, [3])], [("s_out", D, [3]), ("y", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], name="scan", num_scan_inputs=1, body=body)
    message = _refusal(_model([node], dict(s0=np.ones(3, np.float32), x=np.ones((5, 3), np.float32)), ["s", "ys"]))
    assert "changes state 0 from float32[3] to float64[3] at step 0" in message, message


def test_scan8_refuses_lengths_it_cannot_know_or_that_are_not_the_whole_axis():
    body = _body([helper.make_node("Add", ["s_in", "e"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y"])],
                 [("s_in", F, [2]), ("e", F, [2])], [("s_out", F, [2]), ("y", F, [2])])
    node = helper.make_node("Scan", ["lengths", "s0", "x"], ["s", "ys"], name="scan", num_scan_inputs=1, body=body)
    feeds = dict(s0=np.ones((2, 2), np.float32), x=np.ones((2, 4, 2), np.float32))
    short = _refusal(_model([node], feeds, ["s", "ys"], dict(lengths=np.array([4, 3], np.int64)), opset=8))
    assert short == ("scan.onnx: node 'scan' (Scan): sequence_lens [3, 4] are not all the scan axis' length [4]: "
                     "variable lengths (padded outputs) are not imported"), short
    at_run_time = _refusal(_model([node], {**feeds, "lengths": np.array([4, 4], np.int64)}, ["s", "ys"], opset=8,
                                  kind=F))
    assert at_run_time == ("scan.onnx: node 'scan' (Scan): sequence_lens must be known when importing: the format "
                           "has static shapes"), at_run_time


def test_a_scan_body_op_the_importer_lacks_is_refused_naming_the_body_node():
    body = _body([helper.make_node("Unique", ["e"], ["u"], name="uniq"), helper.make_node("Identity", ["s_in"], ["s_out"])],
                 [("s_in", F, [2]), ("e", F, [2])], [("s_out", F, [2]), ("u", F, None)])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "us"], name="scan", num_scan_inputs=1, body=body)
    message = _refusal(_model([node], dict(s0=np.ones(2, np.float32), x=np.ones((3, 2), np.float32)), ["s", "us"]))
    assert "node 'uniq' (Unique)" in message, message


# ----------------------------------------------------------------------------- the installed CLI

def test_the_cli_differentiates_a_scanned_recurrence_and_refuses_a_bad_one(tmp_path):
    model, feeds, weights = _rnn()
    onnx.save(model, tmp_path / "rnn.onnx")
    np.savez(tmp_path / "in.npz", **feeds)
    run = subprocess.run(["uopgrad", "check", tmp_path / "rnn.onnx", "--wrt", "W,U,b,x", "--of", "hs",
                          "-i", tmp_path / "in.npz", "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    report = __import__("json").loads(run.stdout)
    assert report["passed"] is True, report
    bad = _model([_sums_node(scan_input_axes=[2])], {n: np.ones(s, np.float32) for n, s in
                                                      (("s0", (3,)), ("p0", (3,)), ("x", (5, 3)))}, ["s", "p", "ys"])
    onnx.save(bad, tmp_path / "bad.onnx")
    run = subprocess.run(["uopgrad", "diff", tmp_path / "bad.onnx", "--wrt", "s0", "--of", "s", "-o", tmp_path / "g.uop"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and not (tmp_path / "g.uop").exists()
    assert run.stderr.count("\n") == 1 and "node 'scan' (Scan): scan_input_axes[0] 2 is out of range" in run.stderr


def test_linear_attention_imports_through_its_scan_and_differentiates(tmp_path):
    """LinearAttention-27 (gated delta rule, Gated DeltaNet's token mixer) is defined by a
    function body that runs a Scan over the tokens: values as onnx.reference's on random
    inputs with a past state, gradients of every input as finite differences (the CLI)."""
    from onnx.reference import ReferenceEvaluator
    shapes = dict(query=(1, 3, 8), key=(1, 3, 8), value=(1, 3, 8), past_state=(1, 2, 4, 4), decay=(1, 3, 8),
                  beta=(1, 3, 2))
    node = helper.make_node("LinearAttention", list(shapes), ["output", "present_state"], name="mixer",
                            q_num_heads=2, kv_num_heads=2)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) * 0.5 for n, s in shapes.items()}
    feeds["decay"] = -np.abs(feeds["decay"])        # log-space decays: e^decay in (0, 1]
    feeds["beta"] = 1 / (1 + np.exp(-feeds["beta"]))
    model = _model([node], feeds, ["output", "present_state"], opset=27)
    ours = _ours(model, feeds)
    for i, truth in enumerate(ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(ours[i], truth, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    onnx.save(model, tmp_path / "mixer.onnx")
    np.savez(tmp_path / "in.npz", **feeds)
    run = subprocess.run(["uopgrad", "check", tmp_path / "mixer.onnx", "--wrt", ",".join(shapes), "--of", "output",
                          "-i", tmp_path / "in.npz", "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    assert __import__("json").loads(run.stdout)["passed"] is True


# ----------------------------------------------------------------------------- Loop

I64, BOOL = TensorProto.INT64, TensorProto.BOOL


def _loop_body(extra=(), condition=None, grow=False):
    """Loop body: y_out = y_in * 0.5 + x[i] (x captured, i the iteration number; with `grow`,
    y_out = Concat(y_in, x[i]) instead), a scan output y_out - i; the condition out is
    `condition`'s node output `go`, else the condition in."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
             helper.make_node("Cast", ["i"], ["i_float"], to=F)]
    if grow:
        nodes += [helper.make_node("Concat", ["y_in", "row"], ["y_out"], axis=0),
                  helper.make_node("Mul", ["row", "i_float"], ["scanned"])]
    else:
        nodes += [helper.make_node("Mul", ["y_in", "half"], ["halved"]),
                  helper.make_node("Add", ["halved", "row"], ["y_out"]),
                  helper.make_node("Sub", ["y_out", "i_float"], ["scanned"])]
    nodes += list(extra) + [helper.make_node("Identity", ["go" if condition else "c_in"], ["c_out"])]
    return _body(nodes, [("i", I64, []), ("c_in", BOOL, []), ("y_in", F, None)],
                 [("c_out", BOOL, []), ("y_out", F, None), ("scanned", F, None)],
                 [numpy_helper.from_array(np.float32(0.5), "half")])


def _loop_model(trip, condition, body, y0_shape=(3,)):
    known = {}
    if trip is not None:
        known["M"] = np.array(trip, np.int64)
    if condition is not None:
        known["c"] = np.array(condition)
    node = helper.make_node("Loop", ["M" if trip is not None else "", "c" if condition is not None else "", "y0"],
                            ["y", "ys"], name="loop", body=body)
    feeds = dict(y0=RNG.standard_normal(y0_shape).astype(np.float32), x=RNG.standard_normal((6, 3)).astype(np.float32))
    return _model([node], feeds, ["y", "ys"], known), feeds


def _below(limit: int):
    """The body's `go`: i + 1 < limit (the next iteration number is below it)."""
    return [helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.int64(1))),
            helper.make_node("Add", ["i", "one"], ["next"]),
            helper.make_node("Constant", [], ["limit"], value=numpy_helper.from_array(np.int64(limit))),
            helper.make_node("Less", ["next", "limit"], ["go"])]


@pytest.mark.parametrize("trip, condition, go_below", [
    (4, None, None),        # for
    (None, True, 3),        # while: stops once i + 1 < 3 fails (3 steps)
    (6, True, 4),           # both: the condition first
    (2, True, 5),           # both: the trip count first
    (0, None, None),        # no step: y is y0 (ys is left out: its shape is only known by running the body)
    (5, False, None),       # a false condition: no step
])
def test_a_loop_known_when_importing_as_onnxruntime(trip, condition, go_below):
    body = _loop_body(_below(go_below) if go_below else (), condition=go_below is not None)
    model, feeds = _loop_model(trip, condition, body)
    if trip == 0 or condition is False:   # no step: the scan output's shape is only known by running the body,
        model.graph.node[0].output[:] = ["y", ""]   # so it is left out (which onnxruntime cannot run)
        model.graph.output.pop()
        ours = _ours(model, feeds)
    else:
        ours = _same_as_onnxruntime(model, feeds, 1e-6)
    steps = min(trip if trip is not None else 99, go_below or 99) if condition is not False else 0
    y = feeds["y0"]
    for i in range(steps):
        y = y * np.float32(0.5) + feeds["x"][i]
    np.testing.assert_allclose(ours[0], y, rtol=1e-6)
    if len(ours) > 1:
        assert ours[1].shape == (steps, 3)


def test_a_loop_carried_value_may_grow():
    model, feeds = _loop_model(3, None, _loop_body(grow=True), y0_shape=(0,))
    y, ys = _same_as_onnxruntime(model, feeds, 1e-6)
    assert np.array_equal(y, feeds["x"][:3].reshape(-1)) and ys.shape == (3, 3)


def test_a_loops_gradient_through_every_step():
    """d/dy0 and d/dx of sum(u * ys) + sum(w * y) against the closed form of the recurrence
    y_t = y_{t-1}/2 + x_t, ys_t = y_t - t: float32, so within rounding."""
    model, feeds = _loop_model(4, None, _loop_body())
    graph, _ = import_model(model)
    grad, _ = differentiate(graph, ["y0", "x"], of=["y", "ys"], cotangent="input")
    u, w = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    got = evaluate_graph(grad, {**feeds, "cotangent_y": w, "cotangent_ys": u})
    adjoint = w.astype(np.float64)             # d loss / d y_t, from the last step back
    dx = np.zeros((6, 3))
    for t in reversed(range(4)):
        adjoint = adjoint + u[t]
        dx[t] = adjoint
        adjoint = adjoint * 0.5
    np.testing.assert_allclose(got["grad_x"], dx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["grad_y0"], adjoint, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case, says", [
    ("trip at run time", "its trip count must be known when importing (a constant, or computed from shapes): the "
                         "format has no control flow"),
    ("condition from data", "its condition after step 0 must be known when importing (computed from the iteration "
                            "number or constants): the format has no control flow"),
    ("never ends", "has neither a trip count nor a condition: it would never end"),
    ("no step with scan outputs", "runs no step: the shape of its scan outputs is only known by running the body"),
    ("too many steps", "has a trip count of 70,000: unrolled, its graph would hold a body per step (at most 65,536)"),
    ("scan output changes shape", "its scan output 0 changes shape between steps ([3], [6], [9], ...)"),
    ("carried changes type", "its body changes loop-carried value 0 from float32[3] to float64[3] at step 0"),
])
def test_a_loop_not_known_when_importing_is_refused_in_one_line(case, says):
    if case == "trip at run time":
        model, _ = _loop_model(3, None, _loop_body())
        model.graph.input.append(_info("M", I64, []))
        model.graph.initializer.pop(0)
    elif case == "condition from data":
        extra = [helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                 helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.float32(0))),
                 helper.make_node("Less", ["total", "zero"], ["go"])]
        model, _ = _loop_model(5, True, _loop_body(extra, condition=True))
    elif case == "never ends":
        model, _ = _loop_model(None, None, _loop_body())
    elif case == "no step with scan outputs":
        model, _ = _loop_model(0, None, _loop_body())
    elif case == "too many steps":
        model, _ = _loop_model(70_000, None, _loop_body())
    elif case == "carried changes type":
        model, _ = _loop_model(3, None, _loop_body([helper.make_node("Cast", ["y_out"], ["y_wide"], to=D)]))
        model.graph.node[0].attribute[0].g.output[1].name = "y_wide"
    else:   # four steps: the message shows the first three shapes
        model, _ = _loop_model(4, None, _loop_body(grow=True), y0_shape=(0,))
        model.graph.node[0].attribute[0].g.output[2].name = "y_out"    # the growing value as the scan output
    message = _refusal(model)
    assert message == "scan.onnx: node 'loop' (Loop): " + says, message


def test_a_while_loop_stops_at_the_step_limit(monkeypatch):
    from uopcli.interop.onnx import control
    monkeypatch.setattr(control, "MAX_STEPS", 5)
    extra = [helper.make_node("Constant", [], ["go"], value=numpy_helper.from_array(np.array(True)))]
    model, _ = _loop_model(None, True, _loop_body(extra, condition=True))
    assert "runs more than 5 steps" in _refusal(model)


# ----------------------------------------------------------------------------- Scan-8's batch, the steps' scopes

def _scalar_sums():
    return _body([helper.make_node("Add", ["s_in", "e"], ["s_out"], name="/block/add"),
                  helper.make_node("Identity", ["s_out"], ["y"])],
                 [("s_in", F, []), ("e", F, [])], [("s_out", F, []), ("y", F, [])])


def test_scan8_takes_sequence_lens_over_a_rank_2_scan_input_as_onnxruntime():
    """x [batch, sequence]: each step's element is a scalar; sequence_lens (the whole axis)
    is checked against axis 1 of a rank-2 input."""
    x, s0 = RNG.standard_normal((3, 5)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    node = helper.make_node("Scan", ["lengths", "s0", "x"], ["s", "ys"], name="scan", num_scan_inputs=1,
                            body=_scalar_sums())
    model = _model([node], dict(s0=s0, x=x), ["s", "ys"], dict(lengths=np.full(3, 5, np.int64)), opset=8)
    s, ys = _same_as_onnxruntime(model, dict(s0=s0, x=x), 1e-6)
    sums = [s0]
    for t in range(5):      # the steps' float32 sums, in their order
        sums.append(sums[-1] + x[:, t])
    np.testing.assert_array_equal(ys, np.stack(sums[1:], 1))
    np.testing.assert_array_equal(s, sums[-1])


@pytest.mark.parametrize("shapes, lengths, says", [
    (dict(s0=(3,), x=(2, 5)), None, "Scan-8 takes states and scan inputs with one batch axis 0 of one size; got "
                                    "shapes [[3], [2, 5]]"),
    (dict(s0=(), x=(3, 5)), None, "Scan-8 takes states and scan inputs with one batch axis 0 of one size; got "
                                  "shapes [[], [3, 5]]"),
    (dict(s0=(0,), x=(0, 5)), None, "has a batch of size 0: its outputs' shapes are only known by running the body"),
    (dict(s0=(3,), x=(3,)), [5, 5, 5], "sequence_lens [5] are not all the scan axis' length []: variable lengths "
                                       "(padded outputs) are not imported"),
])
def test_scan8_refuses_a_batch_it_cannot_split_in_one_line(shapes, lengths, says):
    node = helper.make_node("Scan", ["lengths" if lengths else "", "s0", "x"], ["s", "ys"], name="scan",
                            num_scan_inputs=1, body=_scalar_sums())
    feeds = {n: np.ones(shape, np.float32) for n, shape in shapes.items()}
    known = dict(lengths=np.array(lengths, np.int64)) if lengths else None
    message = _refusal(_model([node], feeds, ["s", "ys"], known, opset=8))
    assert message == "scan.onnx: node 'scan' (Scan): " + says, message


def test_scan8_and_loop_steps_carry_their_scopes():
    """Scan-8's steps sit under `<scan>[<batch element>].<t>`, a Loop's under `<loop>.<t>`
    (the viewer's groups)."""
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], name="scan", num_scan_inputs=1,
                            body=_scalar_sums())
    graph, _ = import_model(_model([node], dict(s0=np.ones(2, np.float32), x=np.ones((2, 3), np.float32)),
                                   ["s", "ys"], opset=8))
    scopes = {n.meta.scope for n in graph.nodes() if n.meta is not None and n.meta.loc == "/block/add"}
    assert scopes == {f"scan[{b}].{t}/block" for b in range(2) for t in range(3)}
    body = _loop_body()
    body.node[-2].name = "/block/add"   # y_out = halved + row
    model, _ = _loop_model(3, None, body)
    # an input of its own: nodes are shared (hash-consed) with an earlier test's same graph, and a
    # shared node keeps the metadata of the import that made it first
    model.graph.input[0].name = model.graph.node[0].input[2] = "y0_scoped"
    graph, _ = import_model(model)
    scopes = {n.meta.scope for n in graph.nodes() if n.meta is not None and n.meta.loc == "/block/add"}
    assert scopes == {f"loop.{t}/block" for t in range(3)}


@pytest.mark.parametrize("condition_out", ["two flags", "a weight"])
def test_a_loop_condition_that_is_not_one_known_flag_is_refused(condition_out):
    """The body's condition out must be one value known when importing: two flags, or a
    weight (a graph input once imported, whatever its value in the file), are refused."""
    model, _ = _loop_model(4, True, _loop_body(condition=False))
    body = model.graph.node[0].attribute[0].g
    if condition_out == "two flags":
        body.node.append(helper.make_node("Constant", [], ["flags"], value=numpy_helper.from_array(np.array([True,
                                                                                                            True]))))
        body.output[0].name = "flags"
    else:
        model.graph.initializer.append(numpy_helper.from_array(np.float32(1), "w"))
        body.output[0].name = "w"
    message = _refusal(model)
    assert message == ("scan.onnx: node 'loop' (Loop): its condition after step 0 must be known when importing "
                       "(computed from the iteration number or constants): the format has no control flow"), message


@pytest.mark.parametrize("case, says", [
    ("trip made by no node", "input 'M' is made by no earlier node"),
    ("two trip counts", "its trip count must be known when importing (a constant, or computed from shapes): the "
                        "format has no control flow"),
    ("two conditions", "its condition must be known when importing (a constant, or computed from shapes): the "
                       "format has no control flow"),
])
def test_a_loops_trip_count_and_condition_are_one_known_value_each(case, says):
    model, _ = _loop_model(3, True, _loop_body())
    trip, condition = model.graph.initializer[0], model.graph.initializer[1]
    if case == "trip made by no node":
        model.graph.initializer.remove(trip)
    elif case == "two trip counts":
        trip.CopyFrom(numpy_helper.from_array(np.array([3, 3], np.int64), "M"))
    else:
        condition.CopyFrom(numpy_helper.from_array(np.array([True, True]), "c"))
    message = _refusal(model)
    assert message == "scan.onnx: node 'loop' (Loop): " + says, message


@pytest.mark.parametrize("case, says", [
    ("more outputs than the body", "has 3 outputs; its body makes 2"),
    ("carried made by no node", "input 'y9' is made by no earlier node"),
    ("carried left empty", "has an empty state or scan input"),
    ("too many steps while true", "has a trip count of 70,000: unrolled, its graph would hold a body per step (at "
                                  "most 65,536)"),
])
def test_a_loop_whose_node_does_not_fit_is_refused_in_one_line(case, says):
    model, _ = _loop_model(70_000 if case == "too many steps while true" else 3, True, _loop_body())
    node = model.graph.node[0]
    if case == "more outputs than the body":
        node.output.append("extra")
    elif case == "carried made by no node":
        node.input[2] = "y9"
    elif case == "carried left empty":
        node.input[2] = ""
    message = _refusal(model)
    assert message == "scan.onnx: node 'loop' (Loop): " + says, message


def test_a_carried_sequence_the_body_takes_as_a_tensor_is_refused_at_the_body_node():
    """A Loop may carry a sequence (test_onnx_torch_loops.py); a body that multiplies it as
    a tensor is refused where it does, naming that node (unnamed: labelled by the Loop's
    position in the graph, as a function body's nodes are)."""
    model, _ = _loop_model(3, None, _loop_body())
    model.graph.input[0].name = "y_tensor"
    model.graph.node.insert(0, helper.make_node("SequenceConstruct", ["y_tensor"], ["y0"]))
    assert _refusal(model) == ("scan.onnx: node '#1' (Mul): input 0 'y_in' is a sequence; only input 0 of a "
                               "sequence op takes one")


def test_a_loop_of_exactly_the_step_limit_unrolls_and_a_false_condition_skips_any_trip_count(monkeypatch):
    """MAX_STEPS steps are allowed (one more is refused); a condition false at the start
    runs no step whatever the trip count, so a huge one is not refused."""
    from uopcli.interop.onnx import control
    monkeypatch.setattr(control, "MAX_STEPS", 4)
    model, feeds = _loop_model(4, None, _loop_body())
    y, ys = _same_as_onnxruntime(model, feeds, 1e-6)
    assert ys.shape == (4, 3)
    model, _ = _loop_model(5, None, _loop_body())
    assert _refusal(model) == ("scan.onnx: node 'loop' (Loop): has a trip count of 5: unrolled, its graph would hold "
                               "a body per step (at most 4)")
    model, feeds = _loop_model(70_000, False, _loop_body())
    model.graph.node[0].output[:] = ["y", ""]
    model.graph.output.pop()
    (y,) = _ours(model, feeds)
    np.testing.assert_array_equal(y, feeds["y0"])


@pytest.mark.parametrize("op", ["Scan", "Loop"])
def test_an_unnamed_body_node_is_labelled_by_its_scan_or_loops_position(op):
    """A body node without a name is refused as `#<position of the Scan or Loop in the
    graph>` (here 1: an Identity comes first)."""
    if op == "Scan":
        body = _body([helper.make_node("Unique", ["e"], ["u"]), helper.make_node("Identity", ["s_in"], ["s_out"])],
                     [("s_in", F, [2]), ("e", F, [2])], [("s_out", F, [2]), ("u", F, None)])
        node = helper.make_node("Scan", ["s0", "x"], ["s", "us"], name="scan", num_scan_inputs=1, body=body)
        model = _model([node], dict(s0=np.ones(2, np.float32), x=np.ones((3, 2), np.float32)), ["s", "us"])
    else:
        model, _ = _loop_model(3, None, _loop_body([helper.make_node("Unique", ["row"], ["u"])]))
    model.graph.node.insert(0, helper.make_node("Identity", ["x"], ["x_copy"]))
    message = _refusal(model)
    assert message.startswith("scan.onnx: node '#1' (Unique): "), message


def test_the_nodes_that_slice_and_stack_are_the_scans_own():
    """The nodes a Scan adds around its body (slicing each element out of a scan input,
    stacking the scan outputs) carry the Scan's op, name and module path; the body's
    nodes their step's scope: no node is left without its ONNX node."""
    from uopcli.core.uop import Metadata
    x = np.ones((5, 3), np.float32)
    node = helper.make_node("Scan", ["s0", "p0", "x_own"], ["s", "p", "ys"], name="/enc/scan", num_scan_inputs=1,
                            body=_running_sums())   # x_own: not sharing (hash-consed) nodes with another test's
    graph, _ = import_model(_model([node], dict(s0=x[0], p0=x[0], x_own=x), ["s", "p", "ys"]))
    own = Metadata("Scan", "/enc/scan", False, "enc")
    around = [n for n in graph.nodes() if n.op in ("SHRINK", "PAD")]
    assert len(around) == 5 + 8 and all(n.meta == own for n in around), {n.meta for n in around}
    steps = {n.meta.scope for n in graph.nodes() if n.op in ("MUL", "SUB")}
    assert steps == {f"enc/scan.{t}" for t in range(5)}


def test_a_scan_without_states_or_without_scan_outputs_as_onnxruntime():
    """num_scan_inputs may be every input (no state); a body may make the states only (no
    scan output)."""
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    doubled = _body([helper.make_node("Add", ["e", "e"], ["y"])], [("e", F, [3])], [("y", F, [3])])
    node = helper.make_node("Scan", ["x"], ["ys"], name="scan", num_scan_inputs=1, body=doubled)
    (ys,) = _same_as_onnxruntime(_model([node], dict(x=x), ["ys"]), dict(x=x), 0)
    np.testing.assert_array_equal(ys, x + x)
    summed = _body([helper.make_node("Add", ["s_in", "e"], ["s_out"])], [("s_in", F, [3]), ("e", F, [3])],
                   [("s_out", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s"], name="scan", num_scan_inputs=1, body=summed)
    s0 = RNG.standard_normal(3).astype(np.float32)
    (s,) = _same_as_onnxruntime(_model([node], dict(s0=s0, x=x), ["s"]), dict(s0=s0, x=x), 1e-6)
    np.testing.assert_array_equal(s, s0 + x[0] + x[1] + x[2] + x[3])


@pytest.mark.parametrize("case, says", [
    ("no body", "needs a body and num_scan_inputs between 1 and its 3 inputs"),
    ("no num_scan_inputs", "needs a body and num_scan_inputs between 1 and its 3 inputs"),
    ("more outputs than the body", "has 4 outputs; its body makes 3"),
    ("input made by no node", "input 'x9' is made by no earlier node"),
    ("input left empty", "has an empty state or scan input"),
    ("input a sequence", "input 'x' is a sequence: the format has tensors only"),
])
def test_a_scan_node_without_its_attributes_or_with_extra_outputs_is_refused(case, says):
    node = _sums_node()
    nodes = [node]
    if case.startswith("input"):
        node.input[2] = {"input made by no node": "x9", "input left empty": ""}.get(case, "x")
        if case == "input a sequence":
            nodes.insert(0, helper.make_node("SequenceConstruct", ["x_tensor"], ["x"]))
    elif case == "no body":
        node.attribute.remove(next(a for a in node.attribute if a.name == "body"))
    elif case == "no num_scan_inputs":
        node.attribute.remove(next(a for a in node.attribute if a.name == "num_scan_inputs"))
    else:
        node.output.append("extra")
    feeds = dict(s0=np.ones(3, np.float32), p0=np.ones(3, np.float32), x=np.ones((5, 3), np.float32))
    if case == "input a sequence":
        feeds["x_tensor"] = feeds.pop("x")
    message = _refusal(_model(nodes, feeds, ["s", "p", "ys"]))
    assert message == "scan.onnx: node 'scan' (Scan): " + says, message


def test_a_scan_of_constants_stacks_along_its_output_axis_as_onnxruntime():
    """Every element known when importing: the scan output is stacked by numpy, along
    scan_output_axes (here 1, and -1 prepended), as onnxruntime stacks it."""
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    body = _body([helper.make_node("Add", ["s_in", "e"], ["s_out"]), helper.make_node("Neg", ["s_out"], ["y"])],
                 [("s_in", F, [3]), ("e", F, [3])], [("s_out", F, [3]), ("y", F, [3])])
    z = RNG.standard_normal((3, 4)).astype(np.float32)
    for axis, direction in ((1, 0), (-1, 1)):
        nodes = [helper.make_node("Constant", [], ["a"], value=numpy_helper.from_array(a)),
                 helper.make_node("Constant", [], ["s0"], value=numpy_helper.from_array(a[0])),
                 helper.make_node("Scan", ["s0", "a"], ["s", "ys"], name="scan", num_scan_inputs=1, body=body,
                                  scan_output_axes=[axis], scan_output_directions=[direction]),
                 helper.make_node("Add", ["ys", "z"], ["out"])]
        (out,) = _same_as_onnxruntime(_model(nodes, dict(z=z), ["out"]), dict(z=z), 1e-6)
        assert out.shape == (3, 4)


def test_a_loop_without_carried_values_or_without_scan_outputs_as_onnxruntime():
    """A Loop may carry nothing (its scan outputs only: rows of the captured x) or scan
    nothing (its carried values only)."""
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    rows = _body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
                  helper.make_node("Identity", ["c_in"], ["c_out"])],
                 [("i", I64, []), ("c_in", BOOL, [])], [("c_out", BOOL, []), ("row", F, [3])])
    node = helper.make_node("Loop", ["M", ""], ["rows"], name="loop", body=rows)
    (got,) = _same_as_onnxruntime(_model([node], dict(x=x), ["rows"], dict(M=np.array(4, np.int64))), dict(x=x), 0)
    np.testing.assert_array_equal(got, x[:4])
    body = _loop_body()
    body.output.pop()                                        # no scan output
    model, feeds = _loop_model(4, None, body)
    model.graph.node[0].output.pop()
    model.graph.output.pop()
    (y,) = _same_as_onnxruntime(model, feeds, 1e-6)
    want = feeds["y0"]
    for i in range(4):
        want = want * np.float32(0.5) + feeds["x"][i]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("case, says", [
    ("no body", "needs a body, a trip count and a condition (either may be empty)"),
    ("one input", "needs a body, a trip count and a condition (either may be empty)"),
    ("body takes too few inputs", "its body takes 2 inputs and makes 3 outputs, for 1 loop-carried values (plus the "
                                  "iteration number and the condition)"),
    ("body makes too few outputs", "its body takes 3 inputs and makes 1 outputs, for 1 loop-carried values (plus the "
                                   "iteration number and the condition)"),
])
def test_a_loop_whose_body_does_not_fit_is_refused_in_one_line(case, says):
    model, _ = _loop_model(3, None, _loop_body())
    node = model.graph.node[0]
    body = node.attribute[0].g
    if case == "no body":
        del node.attribute[:]
    elif case == "one input":
        del node.input[1:]
    elif case == "body takes too few inputs":
        body.input.pop()
    else:
        del body.output[1:]
        del node.output[1:]
        model.graph.output.pop()
    message = _refusal(model)
    assert message == "scan.onnx: node 'loop' (Loop): " + says, message
