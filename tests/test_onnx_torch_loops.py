"""PyTorch exports with loops: a TorchScript `for` over the sequence exports as an ONNX
Loop that appends each step's state to a sequence (SequenceEmpty, SequenceInsert in the
body, ConcatFromSequence after). uopgrad unrolls it (control.py): values as PyTorch's and
onnxruntime's, gradients as PyTorch's autograd in float64, through the installed CLI too;
a loop whose end depends on the data is refused in one line."""

from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest

from _onnx_helpers import need_onnx_and_runtime

onnx, ort = need_onnx_and_runtime()
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the loop export tests skip")

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import load_onnx  # noqa: E402


class Recurrence(torch.nn.Module):
    """h_t = tanh(W h_{t-1} + U x_t): every state stacked, and the last."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 4)
        self.u = torch.nn.Linear(3, 4)

    def forward(self, x, h):
        states = []
        for t in range(x.size(0)):
            h = torch.tanh(self.w(h) + self.u(x[t]))
            states.append(h)
        return torch.stack(states), h


class UntilSmall(torch.nn.Module):
    """Halves h while its squared norm is above 1: how many steps depends on the data."""

    def forward(self, h):
        while bool((h * h).sum() > 1.0):
            h = h * 0.5
        return h


def _export(module, inputs: tuple, names: list[str], outputs: list[str], path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), inputs, str(path), input_names=names, output_names=outputs,
                          dynamo=False, opset_version=17)


@pytest.fixture(scope="module")
def recurrence(tmp_path_factory):
    torch.manual_seed(33)
    module = Recurrence().double()
    x, h0 = torch.randn(5, 2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    path = tmp_path_factory.mktemp("loops") / "recurrence.onnx"
    _export(module, (x, h0), ["x", "h0"], ["ys", "h"], path)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "Loop" in ops and "SequenceEmpty" in ops and "ConcatFromSequence" in ops, ops   # what this test is about
    return module, x, h0, path


def test_the_scripted_loop_computes_what_pytorch_and_onnxruntime_do(recurrence):
    module, x, h0, path = recurrence
    graph, weights = load_onnx(str(path))
    ours = evaluate_graph(graph, {**weights, "x": x.numpy(), "h0": h0.numpy()})
    ys, h = (t.detach().numpy() for t in module(x, h0))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ort_ys, ort_h = session.run(None, {"x": x.numpy(), "h0": h0.numpy()})
    for name, truth, peer in (("ys", ys, ort_ys), ("h", h, ort_h)):
        np.testing.assert_allclose(ours[name], truth, rtol=1e-14, atol=1e-15, err_msg=name)
        np.testing.assert_allclose(ours[name], peer, rtol=1e-14, atol=1e-15, err_msg=name)


def test_the_scripted_loop_differentiates_as_pytorch_does(recurrence):
    module, x, h0, path = recurrence
    graph, weights = load_onnx(str(path))
    wrt = ["x", "h0", "w.weight", "w.bias", "u.weight", "u.bias"]
    grad, _ = differentiate(graph, wrt, of=["ys", "h"], cotangent="input")
    rng = np.random.default_rng(33)
    weigh = {"cotangent_ys": rng.standard_normal((5, 2, 4)), "cotangent_h": rng.standard_normal((2, 4))}
    ours = evaluate_graph(grad, {**weights, **weigh, "x": x.numpy(), "h0": h0.numpy()})
    x, h0 = x.clone().requires_grad_(), h0.clone().requires_grad_()
    module.zero_grad()
    ys, h = module(x, h0)
    ((ys * torch.tensor(weigh["cotangent_ys"])).sum() + (h * torch.tensor(weigh["cotangent_h"])).sum()).backward()
    truth = {"x": x.grad, "h0": h0.grad, **{n: p.grad for n, p in module.named_parameters()}}
    for name in wrt:
        np.testing.assert_allclose(ours[f"grad_{name}"], truth[name].numpy(), rtol=1e-12, atol=1e-13, err_msg=name)


def test_the_installed_cli_checks_the_scripted_loops_gradients(recurrence, tmp_path):
    _, x, h0, path = recurrence
    np.savez(tmp_path / "in.npz", x=x.numpy(), h0=h0.numpy())
    run = subprocess.run(["uopgrad", "check", str(path), "--wrt", "w.weight,u.weight,x", "--of", "ys", "-i",
                          str(tmp_path / "in.npz"), "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    assert __import__("json").loads(run.stdout)["passed"] is True


def test_a_loop_that_ends_on_the_data_is_refused_in_one_line(tmp_path):
    path = tmp_path / "until.onnx"
    _export(UntilSmall(), (torch.randn(3),), ["h"], ["out"], path)
    with pytest.raises(FormatError) as caught:
        load_onnx(str(path))
    message = str(caught.value)
    assert "\n" not in message and "(Loop): its condition" in message and "must be known when importing" in message, \
        message
    run = subprocess.run(["uopgrad", "info", str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "(Loop): its" in run.stderr, run.stderr


def test_a_sequence_may_be_carried_but_not_stacked():
    """A Loop's carried value may be a sequence (a list when importing); a scan output that
    is one is refused in one line: stacking needs tensors."""
    from onnx import TensorProto, helper, numpy_helper
    from uopcli.interop.onnx.importer import import_model
    F = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["y_in", "y_in"], ["y_out"]), helper.make_node("SequenceConstruct", ["y_out"], ["s"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("y_out", F, [2]),
         helper.make_tensor_value_info("s", F, None)])
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ss"], name="loop", body=body)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("y0", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])], [numpy_helper.from_array(np.int64(3), "M")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FormatError, match=r"^<model>: node 'loop' \(Loop\): its body's output 's' is a sequence: the "
                                          r"format has tensors only$"):
        import_model(model)


def test_a_carried_sequence_as_the_graphs_output_is_refused_naming_the_loop():
    from onnx import TensorProto, helper, numpy_helper
    from uopcli.interop.onnx.importer import import_model
    F = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Cast", ["c_in"], ["c_float"], to=F), helper.make_node("SequenceInsert", ["s_in", "c_float"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_in", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_sequence_value_info("s_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_sequence_value_info("s", F, None)],
                              [numpy_helper.from_array(np.int64(3), "M")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(FormatError, match=r"^<model>: node 'loop' \(Loop\): output 's' is a sequence: the format has "
                                          r"tensors only$"):
        import_model(model)


def _loop_of(body_nodes, carried_out_info, scan=False):
    """A Loop over 3 steps (or a Scan over 3 elements) whose carried value starts as an empty
    float sequence (a tensor for the Scan) and whose body is `body_nodes`."""
    from onnx import TensorProto, helper, numpy_helper
    F = TensorProto.FLOAT
    if scan:
        body = helper.make_graph(body_nodes, "body", [helper.make_tensor_value_info("s_in", F, [2]),
                                                      helper.make_tensor_value_info("e", F, [2])],
                                 [helper.make_tensor_value_info("s_out", F, [2]), carried_out_info])
        nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], name="scan", num_scan_inputs=1, body=body)]
        inputs = [helper.make_tensor_value_info("s0", F, [2]), helper.make_tensor_value_info("xs", F, [3, 2])]
        return helper.make_model(helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("s", F, [2])]),
                                 opset_imports=[helper.make_opsetid("", 17)])
    body = helper.make_graph(
        [*body_nodes, helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_in", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), carried_out_info])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], name="loop", body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=0)]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("out", F, None)],
                              [numpy_helper.from_array(np.int64(3), "M")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_carried_sequence_that_becomes_a_tensor_and_a_scanned_sequence_are_refused():
    from onnx import TensorProto, helper
    from uopcli.interop.onnx.importer import import_model
    F = TensorProto.FLOAT
    to_tensor = _loop_of([helper.make_node("Cast", ["c_in"], ["s_out"], to=F)],
                         helper.make_tensor_value_info("s_out", F, None))
    with pytest.raises(FormatError, match=r"node 'loop' \(Loop\): its body changes loop-carried value 0 from a "
                                          r"sequence to float32\[\] at step 0$"):
        import_model(to_tensor)
    scanned = _loop_of([helper.make_node("Add", ["s_in", "e"], ["s_out"]),
                        helper.make_node("SequenceConstruct", ["s_out"], ["ys"])],
                       helper.make_tensor_sequence_value_info("ys", F, None), scan=True)
    with pytest.raises(FormatError, match=r"node 'scan' \(Scan\): its body's output 'ys' is a sequence: the format "
                                          r"has tensors only$"):
        import_model(scanned)
