"""NaN in the builder's index searches and sorts (argmax, argmin, cummax, cummin, sort,
argsort, topk), against torch and numpy: a NaN is the largest value, as both take it. The
tinygrad constructions these follow gave an index outside the axis (argmax of [1, nan, 0.5]
was 3) and sorts of NaN copies with index 0 everywhere (a differential fuzzer found both).
Rows of every length from 1 to 9 (the sort pads to a power of two), drawn from a pool with
NaN, infinities, signed zeros and repeats, in every float dtype and in int32 (no NaN: the
same graph as before)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopcli import Graph, UOp, dtypes, evaluate_graph
from uopcli.backends.reference import reference_evaluate_graph

POOL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 2.5, 2.5, -7.0, math.nan]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def _rows(length: int, count: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + length)
    return rng.choice(np.array(POOL), size=(count, length))


def _run(graph: Graph, inputs: dict) -> list[dict]:
    """The graph by the numpy evaluator (simplified as tinygrad runs it, and as written) and
    by the reference evaluator: all three must agree with the oracle."""
    with np.errstate(all="ignore"):
        return [evaluate_graph(graph, inputs), evaluate_graph(graph, inputs, simplify=None),
                reference_evaluate_graph(graph, inputs)]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values, NaN where NaN (a signed zero's sign aside: ties of -0.0 and 0.0 are equal)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return got.shape == want.shape and bool(np.all((got == want) | (np.isnan(got) & np.isnan(want))))


@pytest.mark.parametrize("dtype", FLOATS + [dtypes.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("length", range(1, 10))
def test_argmax_and_argmin_take_nan_as_the_largest_value(dtype, length):
    rows = _rows(length)
    if not dtype.is_float:
        rows = np.nan_to_num(rows, nan=3.0, posinf=9.0, neginf=-9.0)
    data = rows.astype(dtype.np)
    x = UOp.param("x", data.shape, dtype)
    graph = Graph({"argmax": x.argmax(1), "argmin": x.argmin(1), "flat": x.argmax()}, inputs=[x])
    for got in _run(graph, {"x": data}):
        assert got["argmax"].tolist() == np.argmax(data, axis=1).tolist()
        assert got["argmin"].tolist() == np.argmin(data, axis=1).tolist()
        assert got["flat"].tolist() == int(np.argmax(data))
        assert got["argmax"].tolist() == torch.from_numpy(data.astype(np.float64)).argmax(1).tolist()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("length", range(1, 10))
def test_sort_and_topk_put_nan_where_torch_does(dtype, length):
    data = _rows(length, seed=100).astype(dtype.np)
    x = UOp.param("x", data.shape, dtype)
    up, up_at = x.sort(1)
    down, down_at = x.sort(1, descending=True)
    k = (length + 1) // 2
    top, top_at = x.topk(k, 1)
    low, low_at = x.topk(k, 1, largest=False)
    graph = Graph({"up": up, "up_at": up_at, "down": down, "down_at": down_at, "top": top, "top_at": top_at,
                   "low": low, "low_at": low_at}, inputs=[x])
    t = torch.from_numpy(data)
    want_up, want_up_at = torch.sort(t, dim=1, stable=True)
    want_down, want_down_at = torch.sort(t, dim=1, descending=True, stable=True)
    for got in _run(graph, {"x": data}):
        assert _same(got["up"], want_up.numpy()) and got["up_at"].tolist() == want_up_at.tolist()
        assert _same(got["down"], want_down.numpy()) and got["down_at"].tolist() == want_down_at.tolist()
        assert _same(got["top"], want_down.numpy()[:, :k]) and got["top_at"].tolist() == want_down_at[:, :k].tolist()
        assert _same(got["low"], want_up.numpy()[:, :k]) and got["low_at"].tolist() == want_up_at[:, :k].tolist()
        # each row's indices are a permutation that reproduces its values
        for row, order, values in zip(data, got["up_at"], got["up"]):
            assert sorted(order.tolist()) == list(range(length))
            assert _same(row[order], values)


@pytest.mark.parametrize("length", range(1, 10))
def test_cummax_and_cummin_index_the_first_nan(length):
    data = _rows(length, seed=200).astype(np.float32)
    x = UOp.param("x", data.shape, dtypes.float32)
    high, high_at = x.cummax(1)
    low, low_at = x.cummin(1)
    graph = Graph({"high": high, "high_at": high_at, "low": low, "low_at": low_at}, inputs=[x])
    with np.errstate(invalid="ignore"):
        want_high, want_low = np.maximum.accumulate(data, axis=1), np.minimum.accumulate(data, axis=1)

    def first_index(values):  # the first j <= i with data[j] == values[i], NaN equal to NaN
        equal = (data[:, :, None] == values[:, None, :]) | (np.isnan(data)[:, :, None] & np.isnan(values)[:, None, :])
        before = np.triu(np.ones((length, length), bool))  # [j, i]: j <= i
        return np.argmax(equal & before, axis=1)

    for got in _run(graph, {"x": data}):
        assert _same(got["high"], want_high) and _same(got["low"], want_low)
        assert got["high_at"].tolist() == first_index(want_high).tolist()
        assert got["low_at"].tolist() == first_index(want_low).tolist()
        assert (got["high_at"] < length).all() and (got["low_at"] < length).all()


def test_sort_gradient_is_unchanged_where_there_is_no_nan():
    """The NaN branches route nothing where no NaN is: the gradient of an order-seeing loss of
    the sorted values is torch's (ties aside: the pool here has none)."""
    data = np.array([[0.3, -1.2, 2.0, 0.7, -0.1]], np.float64)
    weights = np.arange(1.0, 6.0)
    x = UOp.param("x", data.shape, dtypes.float64)
    loss = (x.sort(1)[0] * UOp.const(1.0, dtypes.float64) * UOp.buffer(weights)).sum()
    from uopcli.tools.differentiate import differentiate
    grad, _ = differentiate(Graph({"loss": loss}, inputs=[x]), ["x"])
    got = evaluate_graph(grad, {"x": data})["grad_x"]
    t = torch.tensor(data, requires_grad=True)
    (torch.sort(t, 1)[0] * torch.tensor(weights)).sum().backward()
    assert np.array_equal(got, t.grad.numpy())
