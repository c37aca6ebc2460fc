"""Builder behaviours found missing against tinygrad's own operator tests (issue 32): an
unknown dtype name is the library's error; unfold with size 0; Tensor.stack of a tuple;
sigmoid written as a ratio, x.exp() / (1 + x.exp()), stays finite at +-300 as tinygrad's."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import Graph, UOp, evaluate_graph
from uopcli.errors import GraphError, UOpError
from uopcli.tools.differentiate import differentiate


@pytest.mark.parametrize("reduce", ["sum", "prod"])
@pytest.mark.parametrize("name", ["", "float", "int"])
def test_an_unknown_dtype_name_is_the_librarys_error(reduce, name):
    x = UOp.param("x", (3, 3))
    with pytest.raises(GraphError, match=f"unknown dtype '{name}'"):
        getattr(x, reduce)(dtype=name)
    with pytest.raises(UOpError):
        x.cast(name)


def test_unfold_with_size_zero_has_an_empty_last_axis():
    x = UOp.param("x", (3, 3, 3))
    assert x.unfold(1, 0, 8).shape == (3, 1, 3, 0)   # (3 - 0) // 8 + 1 windows of nothing
    assert x.unfold(2, 0, 2).shape == (3, 3, 2, 0)
    assert x.unfold(0, 0, 1).shape == (4, 3, 3, 0)
    values = evaluate_graph(Graph({"u": x.unfold(1, 0, 8)}, [x]), {"x": np.ones((3, 3, 3), np.float32)})["u"]
    assert values.shape == (3, 1, 3, 0) and values.dtype == np.float32


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack_of_a_tuple_keeps_its_order(dim):
    x, y, z = (UOp.param(n, (2, 3)) for n in "xyz")
    feed = {n: np.arange(6, dtype=np.float32).reshape(2, 3) * (k + 1) + k for k, n in enumerate("xyz")}
    stacked = UOp.stack((x, y, z), dim=dim)
    got = evaluate_graph(Graph({"s": stacked}, [x, y, z]), feed)["s"]
    np.testing.assert_array_equal(got, np.stack([feed["x"], feed["y"], feed["z"]], axis=dim))


def test_sigmoid_as_a_ratio_is_finite_at_300_as_tinygrads():
    """tinygrad 0.14 gives exactly these (its kernels rewrite x*(1+x).reciprocal() and
    x*(d+y)); evaluation simplifies as tinygrad does, so the gradient is 0 where e overflows."""
    x = UOp.param("x", (4,))
    e = x.exp()
    graph, _ = differentiate(Graph({"y": (e / (1 + e)).sum()}, [x]), ["x"])
    values = np.array([-300.0, -1.0, 1.0, 300.0], np.float32)
    grad = evaluate_graph(graph, {"x": values}, simplify="tinygrad")["grad_x"]
    assert np.all(np.isfinite(grad)) and grad[0] == 0 and grad[3] == 0
    np.testing.assert_allclose(grad, [0.0, 0.19661194, 0.19661188, 0.0], atol=2e-7)
    forward = evaluate_graph(Graph({"y": e / (1 + e)}, [x]), {"x": values}, simplify="tinygrad")["y"]
    np.testing.assert_allclose(forward, [0.0, 0.26894143, 0.7310586, 1.0], atol=1e-7)
