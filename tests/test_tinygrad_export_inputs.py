"""Which inputs the tinygrad export makes, against the real tinygrad 0.14 (its CPU device):
one input per storage however many views of it the graph reads (an unnamed realized
tensor, one rand draw), so a value given to it and its gradient are the whole tensor's."""

from __future__ import annotations

import sys

import numpy as np
import pytest

_RECURSION_LIMIT = sys.getrecursionlimit()
tinygrad = pytest.importorskip("tinygrad", reason="tinygrad is not installed for this Python "
                               "(pip install 'uopgrad[tinygrad]'; make test installs it)")
sys.setrecursionlimit(_RECURSION_LIMIT)

from tinygrad import Tensor  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.tinygrad import export  # noqa: E402


def _unusable() -> str | None:
    try:
        Tensor([1.0, 2.0]).add(1).numpy()
    except Exception as e:  # noqa: BLE001 - any reason tinygrad gives is the skip's reason
        return f"tinygrad cannot run on this machine ({type(e).__name__}: {e}); its CPU backend needs clang"
    return None


_UNUSABLE = _unusable()
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
