"""Which inputs the tinygrad export makes, against the real tinygrad 0.14 (its CPU device):
one input per storage however many views of it the graph reads (an unnamed realized
tensor, one rand draw), so a value given to it and its gradient are the whole tensor's;
the names given that are no input (a tied weight's second name, tensors no output depends
on) are recorded, and `diff --wrt` says why there is no such input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from _tinygrad_usable import import_tinygrad, unusable_reason
tinygrad = import_tinygrad()

from tinygrad import Tensor, nn  # noqa: E402
from tinygrad.nn.state import get_state_dict  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.tinygrad import ExportWarning, export, save  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


_UNUSABLE = unusable_reason()
pytestmark = pytest.mark.skipif(_UNUSABLE is not None, reason=_UNUSABLE or "")

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def _rnn_like(h, w):
    """An RNN's first step reads its state both through a reshape (for the matmul) and as itself."""
    return (h.reshape(2, 1, 3) @ w.T).sum() + (h * w).sum()


def _gradient(graph, values: dict, wrt: str) -> np.ndarray:
    grad_graph, _ = differentiate(graph, [wrt])
    return evaluate_graph(grad_graph, values)[f"grad_{wrt}"]


def test_an_unnamed_tensor_read_through_a_view_is_one_input():
    w = Tensor(W)
    h = Tensor.zeros(2, 3).contiguous().realize()  # the initial state, not named
    exported = export({"out": _rnn_like(h, w)}, {"w": w})
    graph = exported.graph
    assert [(p.arg, p.shape) for p in graph.inputs] == [("w", (2, 3)), ("buffer_0", (2, 3))]
    # another value for the state changes both uses: tinygrad's own, with that state
    ones = Tensor.ones(2, 3).contiguous()
    theirs = _rnn_like(ones, w)
    (their_gradient,) = theirs.gradient(ones)
    values = {**exported.values, "buffer_0": np.ones((2, 3), np.float32)}
    assert evaluate_graph(graph, values)["out"] == theirs.item() == 45.0
    np.testing.assert_array_equal(_gradient(graph, values, "buffer_0"), their_gradient.numpy())


def test_one_rand_draw_read_through_a_view_is_one_input():
    w = Tensor(W)
    noise = Tensor.rand(2, 3)
    out = (noise.reshape(6) * w.flatten()).sum() + (noise * w).sum()
    exported = export({"out": out}, {"w": w})
    assert [p.arg for p in exported.graph.inputs] == ["w", "buffer_0"]
    draw = exported.values["buffer_0"]
    np.testing.assert_allclose(evaluate_graph(exported.graph, exported.values)["out"], 2 * (draw * W).sum(),
                               rtol=1e-6)
    np.testing.assert_array_equal(_gradient(exported.graph, exported.values, "buffer_0"), 2 * W)


def test_a_buffer_two_tensors_view_is_one_flat_input():
    """Two tensors over one buffer (neither the other's view): the input is the buffer, flat."""
    storage = Tensor(np.arange(6, dtype=np.float32)).contiguous().realize().uop.base
    rows, columns = Tensor(storage.reshape((2, 3))), Tensor(storage.reshape((3, 2)))
    a, b = _counting(2, 3), _counting(3, 2)
    exported = export({"out": (rows * a).sum() + (columns * b).sum()}, {"a": a, "b": b})
    assert [(p.arg, p.shape) for p in exported.graph.inputs] == [("a", (2, 3)), ("b", (3, 2)), ("buffer_0", (6,))]
    np.testing.assert_array_equal(exported.values["buffer_0"], np.arange(6, dtype=np.float32))
    assert evaluate_graph(exported.graph, exported.values)["out"] == (np.arange(6) * np.arange(1, 7)).sum() * 2


def _counting(*shape):
    return Tensor(np.arange(1, 7, dtype=np.float32).reshape(shape))


def _uopgrad(*args: str, cwd) -> subprocess.CompletedProcess:
    assert UOPGRAD is not None, "the uopgrad console script is not installed"
    return subprocess.run([UOPGRAD, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_loss_realized_before_the_export_is_warned_of_and_diff_says_why(tmp_path):
    model = nn.Linear(4, 2)
    x = Tensor(np.ones((3, 4), np.float32))
    loss = model(x).square().mean()
    loss.realize()  # as before printing it: its graph is now its value
    with pytest.warns(ExportWarning) as caught:
        save(tmp_path / "m.uop", {"loss": loss}, {"x": x}, get_state_dict(model))
    assert [str(w.message) for w in caught] == [
        "tinygrad export: output 'loss' depends on none of the named tensors given (x, weight, bias): a tensor "
        "realized before the export (loss.realize()) holds its value, not the graph that computed it; export "
        "before realizing"]
    assert caught[0].filename == __file__  # the user's line, not the bridge's
    done = _uopgrad("diff", "m.uop", "--wrt", "weight", "-o", "g.uop", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("uopgrad: error: m.uop: no input named 'weight' to differentiate with respect to; inputs: "
                           "x, buffer_0; weight was given to the tinygrad export, but no output depended on it (an "
                           "output realized before the export holds its value, not the graph that computed it)\n")
    assert not (tmp_path / "g.uop").exists()


def test_an_export_reaching_some_named_tensors_says_nothing():
    """BatchNorm's running statistics in training mode, an input kept unused: no warning."""
    model = nn.Linear(4, 2)
    x = Tensor(np.ones((3, 4), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = export({"loss": model(x).sum()}, {"x": x, "unused": Tensor.ones(2).contiguous()},
                       {**get_state_dict(model), "running_mean": Tensor.zeros(2).contiguous()}).graph
    assert "tinygrad.unreached" not in graph.meta and "tinygrad.same_tensors" not in graph.meta


class _Tied:
    """GPT-2's weight tying: the head reads the embedding's table."""

    def __init__(self):
        self.wte, self.head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
        self.head.weight = self.wte.weight

    def __call__(self, idx):
        return self.head(self.wte(idx).tanh())


def test_a_tied_weights_second_name_is_recorded_and_diff_names_the_first(tmp_path):
    Tensor.manual_seed(2)  # tinygrad seeds from the clock: the same weights every run
    model = _Tied()
    idx, y = Tensor(np.array([1, 3, 4], np.int32)), Tensor(np.array([0, 2, 4], np.int32))
    loss = model(idx).sparse_categorical_crossentropy(y)
    exported = save(tmp_path / "m.uop", {"loss": loss}, {"idx": idx, "y": y}, get_state_dict(model))
    graph = exported.graph
    assert graph.input_names == ["idx", "y", "wte.weight"]
    assert json.loads(graph.meta["tinygrad.same_tensors"]) == {"head.weight": "wte.weight"}
    # the one input's gradient is the sum of both uses: tinygrad's own
    (theirs,) = loss.gradient(model.wte.weight)
    np.testing.assert_allclose(_gradient(graph, exported.values, "wte.weight"), theirs.numpy(), rtol=1e-5, atol=1e-7)
    done = _uopgrad("diff", "m.uop", "--wrt", "head.weight", "-o", "g.uop", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("uopgrad: error: m.uop: no input named 'head.weight' to differentiate with respect to; "
                           "inputs: idx, y, wte.weight; head.weight is the same tensor as wte.weight in the tinygrad "
                           "model exported (tied), so wte.weight's gradient holds the uses of both: --wrt wte.weight\n")
