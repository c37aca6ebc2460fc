"""Second and third derivatives through the reduce rules at zeros and ties (issue 25).

`prod` is a polynomial, so its derivatives at every order have a closed form: the
derivative with respect to distinct elements i, j, l, ... of one reduced group is w times
the product of the group's other elements (0 when two indices repeat or lie in different
groups). Higher orders are taken as compute_gradient of the previous gradient seeded
with a direction u (then v): second = H·u, third = T(u, v, ·); they are compared with
that closed form and with central differences in float64 of the previous order's graph.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _reference_eval import assert_shapes_as_inferred, reference_evaluate
from uopcli import Graph, UOp, dtypes, evaluate, save
from uopcli.core.gradient import compute_gradient

f64 = dtypes.float64


def derivative_graphs(build, shape):
    """x, and the graphs of the first (seeded with w), second (H·u) and third (T(u, v, ·))
    derivatives of sum(w * build(x)) with respect to x; w, u, v are inputs."""
    x = UOp.param("x", shape, f64)
    out = build(x)
    w, u, v = UOp.param("w", out.shape, f64), UOp.param("u", shape, f64), UOp.param("v", shape, f64)
    first = compute_gradient(out, w, [x])[x]
    second = compute_gradient(first, u, [x])[x]
    third = compute_gradient(second, v, [x])[x]
    assert_shapes_as_inferred([first, second, third])
    return x, out, (first, second, third)


def central_difference(graph, inputs: dict, direction: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """d/dt graph(x + t·direction) at t = 0, by central differences (reference evaluator)."""
    up = dict(inputs, x=inputs["x"] + h * direction)
    down = dict(inputs, x=inputs["x"] - h * direction)
    return (reference_evaluate([graph], up)[0] - reference_evaluate([graph], down)[0]) / (2 * h)


def prod_derivative_tensor(x: np.ndarray, weights: np.ndarray, groups: list, order: int) -> np.ndarray:
    """The closed form: order-th derivative tensor of sum_r weights[r] * prod(x[group r])."""
    flat = x.reshape(-1)
    tensor = np.zeros((flat.size,) * order)
    for weight, group in zip(weights.reshape(-1), groups):
        for picked in itertools.permutations(group, order):
            rest = [k for k in group if k not in picked]
            tensor[picked] += weight * math.prod(flat[rest])
    return tensor


def groups_of(shape, axes):
    """Flat indices of the elements each reduced output gathers, in output order."""
    index = np.arange(math.prod(shape)).reshape(shape)
    kept = [a for a in range(len(shape)) if a not in axes]
    moved = np.transpose(index, kept + list(axes)).reshape(-1, math.prod(shape[a] for a in axes))
    return [list(row) for row in moved]


# (shape, axes): one axis (odd and even lengths: an odd one is padded with a 1 at some
# level), adjacent axes (merged in place) and axes that are not adjacent (moved last)
PROD_LAYOUTS = {
    "one axis of 5": ((2, 5), (1,)),
    "one axis of 4, first": ((4, 3), (0,)),
    "adjacent axes": ((2, 3, 2), (1, 2)),
    "axes 0 and 2": ((3, 2, 2), (0, 2)),
    "axes 0 and 2 of 4": ((2, 3, 2, 2), (0, 2)),  # moved last by an order that is not its own inverse
    "all axes": ((2, 3), (0, 1)),
}


@pytest.mark.parametrize("zeros", [0, 1, 2, 3])
@pytest.mark.parametrize("layout", list(PROD_LAYOUTS))
def test_prod_derivatives_up_to_third_order_match_closed_form_and_finite_differences(layout, zeros):
    shape, axes = PROD_LAYOUTS[layout]
    rng = np.random.default_rng(zeros)
    x_value = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    groups = groups_of(shape, axes)
    for group in groups[:1]:  # the first group gets `zeros` zeros (-0.0 for one of them)
        for k, position in enumerate(rng.choice(group, zeros, replace=False)):
            x_value.reshape(-1)[position] = -0.0 if k == 1 else 0.0
    if len(groups) > 1 and zeros:  # another group, one zero fewer: mixed counts in one reduce
        for position in rng.choice(groups[1], zeros - 1, replace=False):
            x_value.reshape(-1)[position] = 0.0
    _, out, (first, second, third) = derivative_graphs(lambda x: x.prod(axes), shape)
    inputs = {"x": x_value, "w": rng.uniform(0.5, 1.5, out.shape),
              "u": rng.normal(size=shape), "v": rng.normal(size=shape)}
    got = [g.reshape(-1) for g in evaluate([first, second, third], inputs)]

    jacobian = prod_derivative_tensor(x_value, inputs["w"], groups, 1)
    hessian = prod_derivative_tensor(x_value, inputs["w"], groups, 2)
    third_tensor = prod_derivative_tensor(x_value, inputs["w"], groups, 3)
    u, v = inputs["u"].reshape(-1), inputs["v"].reshape(-1)
    np.testing.assert_allclose(got[0], jacobian, rtol=1e-12, atol=1e-12, err_msg="first, closed form")
    np.testing.assert_allclose(got[1], hessian @ u, rtol=1e-12, atol=1e-12, err_msg="second, closed form")
    np.testing.assert_allclose(got[2], np.einsum("ijl,i,j->l", third_tensor, u, v), rtol=1e-12, atol=1e-12,
                               err_msg="third, closed form")
    # and each order is the derivative of the one before, as finite differences see it
    np.testing.assert_allclose(got[1], central_difference(first, inputs, inputs["u"]).reshape(-1),
                               rtol=1e-6, atol=1e-8, err_msg="second vs differences of the first")
    np.testing.assert_allclose(got[2], central_difference(second, inputs, inputs["v"]).reshape(-1),
                               rtol=1e-6, atol=1e-8, err_msg="third vs differences of the second")


def test_prod_hessian_entry_between_two_zeros_is_the_product_of_the_rest():
    """The issue's case, entry by entry: prod(x) at x = [0, 0, 2, 3] has d²/dx0dx1 = 6."""
    x, _, (first, second, _) = derivative_graphs(lambda x: x.prod(), (4,))
    x_value = np.array([0.0, 0.0, 2.0, 3.0])
    columns = [evaluate([second], {"x": x_value, "w": np.array(1.0), "u": e, "v": e})[0] for e in np.eye(4)]
    np.testing.assert_array_equal(np.array(columns), [[0, 6, 0, 0], [6, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])


def test_prod_gradient_of_large_reductions_has_no_division_and_logarithmic_depth():
    """The rule is made of MULs and movement ops (exact at zeros, derivatives too), with one
    level per halving: about 3 multiplies per element, a few dozen nodes for 10^6."""
    x = UOp.param("x", (1_000_000,), f64)
    grad = compute_gradient(x.prod(), UOp.const(1.0, f64), [x])[x]
    ops = {node.op for node in grad.toposort()}
    assert ops <= {"PARAM", "CONST", "RESHAPE", "EXPAND", "SHRINK", "FLIP", "PAD", "WHERE", "MUL"}, ops
    multiplies = [n for n in grad.toposort() if n.op == "MUL"]
    assert len(multiplies) == 2 * 20 - 1  # 2^20 > 10^6: 20 halvings, a MUL up each and down but the last
    assert sum(math.prod(n.shape) for n in multiplies) < 3.2 * 1_000_000


def test_prod_of_one_element_and_of_an_empty_axis():
    x = UOp.param("x", (3, 1), f64)
    grad = compute_gradient(x.prod(1), UOp.param("g", (3,), f64), [x])[x]
    np.testing.assert_array_equal(evaluate([grad], {"x": np.zeros((3, 1)), "g": np.array([1.0, 2.0, 3.0])})[0],
                                  [[1.0], [2.0], [3.0]])
    empty = UOp.param("e", (2, 0), f64)
    grad = compute_gradient(empty.prod(1), UOp.full((2,), 1.0, f64), [empty])[empty]
    assert evaluate([grad], {"e": np.zeros((2, 0))})[0].shape == (2, 0)


def test_prod_gradient_in_float32_and_float16_keeps_the_dtype():
    for dtype, tolerance in ((dtypes.float32, 1e-6), (dtypes.float16, 2e-3)):
        x = UOp.param("x", (2, 5), dtype)
        grad = compute_gradient(x.prod(1), UOp.full((2,), 1.0, dtype), [x])[x]
        value = np.array([[0.0, 1.5, 2.0, 0.5, 3.0], [1.0, 2.0, 0.0, 0.0, 4.0]], dtype=dtype.np)
        (got,) = evaluate([grad], {"x": value})
        assert got.dtype == dtype.np
        np.testing.assert_allclose(got, [[4.5, 0, 0, 0, 0], [0, 0, 0, 0, 0]], rtol=tolerance)


UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_cli_second_and_third_derivatives_of_prod_at_repeated_zeros(tmp_path):
    """The issue's pipeline: diff, then diff --of grad_x --cotangent ones (twice), then eval."""
    x = UOp.param("x", (3,), f64)
    save(Graph({"y": x.prod()}), tmp_path / "prod.uop")
    np.save(tmp_path / "x.npy", np.array([0.0, 0.0, 2.0]))
    steps = [f"{UOPGRAD} diff prod.uop --wrt x -o g.uop",
             f"{UOPGRAD} diff g.uop --of grad_x --cotangent ones --wrt x -o h.uop",
             f"{UOPGRAD} diff h.uop --of grad_x --cotangent ones --wrt x -o t.uop",
             f"{UOPGRAD} eval h.uop -i x=x.npy -o h.npz",
             f"{UOPGRAD} eval t.uop -i x=x.npy -o t.npz"]
    for step in steps:
        done = subprocess.run(step, shell=True, cwd=tmp_path, capture_output=True, timeout=120)
        assert done.returncode == 0, (step, done.stderr.decode())
    # Hessian row sums at [0, 0, 2]: [x1 x2 ... ] = [0+2, 2+0, 0+0]; third: every pair of
    # the other two, in both orders, times 1 = 2 each
    np.testing.assert_array_equal(np.load(tmp_path / "h.npz")["grad_x"], [2.0, 2.0, 0.0])
    np.testing.assert_array_equal(np.load(tmp_path / "t.npz")["grad_x"], [2.0, 2.0, 2.0])


# ----------------------------------------------------------------------------- the other reduces, ties
# Cubes make the second and third derivatives nonzero. Each case: build, x, and the closed
# forms of the first derivative, H·u and T(u, v, ·) of sum(w * build(x)). Ties are between
# copies of one value (the same function), where the function is smooth and the even split
# adds back up; zeros sit where the third derivative still is not.
ROW_SUM = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=float)  # row membership, flat


def _rows(values):  # per-row sums of a flat (6,) vector
    return ROW_SUM @ values.reshape(-1)


TIE_CASES = {
    "sum cubed, zeros": (
        lambda x: x.sum(1) * x.sum(1) * x.sum(1), np.array([[0.0, 0.0, 0.0], [1.0, -1.0, 0.5]]),
        lambda x, w, u, v: ROW_SUM.T @ (3 * w * _rows(x) ** 2),
        lambda x, w, u, v: ROW_SUM.T @ (6 * w * _rows(x) * _rows(u)),
        lambda x, w, u, v: ROW_SUM.T @ (6 * w * _rows(u) * _rows(v))),
    "max of 4 copies cubed, zeros": (
        lambda x: _cube(x.reshape(2, 3, 1).expand(2, 3, 4).max(2)), np.array([[0.0, -0.0, 2.0], [0.0, 1.0, 0.0]]),
        lambda x, w, u, v: 3 * w * x ** 2, lambda x, w, u, v: 6 * w * x * u, lambda x, w, u, v: 6 * w * u * v),
    "row max cubed, tied zeros below it": (
        lambda x: _cube(x.max(1)), np.array([[0.0, -0.0, 2.0], [0.0, -1.0, 0.5]]),
        lambda x, w, u, v: _at_max(x, 3 * w[:, None] * x ** 2),
        lambda x, w, u, v: _at_max(x, 6 * w[:, None] * x * u),
        lambda x, w, u, v: _at_max(x, 6 * w[:, None] * u * v)),
    "row max of copied rows cubed": (
        lambda x: _cube(x.reshape(2, 1, 3).expand(2, 2, 3).reshape(4, 3).max(1)),
        np.array([[1.0, 0.0, 2.0], [0.0, 0.5, -1.0]]),
        lambda x, w, u, v: _at_max(x, 3 * (w[0::2] + w[1::2])[:, None] * x ** 2),
        lambda x, w, u, v: _at_max(x, 6 * (w[0::2] + w[1::2])[:, None] * x * u),
        lambda x, w, u, v: _at_max(x, 6 * (w[0::2] + w[1::2])[:, None] * u * v)),
    "MAX of x*c and c*x cubed": (
        lambda x: _cube((x * UOp.const(1.5, f64)).maximum(UOp.const(1.5, f64) * x)),
        np.array([[0.0, 0.0, 2.0], [-1.0, 0.0, 0.5]]),
        lambda x, w, u, v: 3 * 1.5 ** 3 * w * x ** 2, lambda x, w, u, v: 6 * 1.5 ** 3 * w * x * u,
        lambda x, w, u, v: 6 * 1.5 ** 3 * w * u * v),
    "MAX of x with itself cubed": (
        lambda x: _cube(x.maximum(x)), np.array([[0.0, -0.0, 2.0], [-1.0, 0.0, 0.5]]),
        lambda x, w, u, v: 3 * w * x ** 2, lambda x, w, u, v: 6 * w * x * u, lambda x, w, u, v: 6 * w * u * v),
}


def _cube(x):
    return x * x * x


def _at_max(x, values):
    """values where x holds its row's (unique) maximum, else 0."""
    return np.where(x == x.max(1, keepdims=True), values, 0.0)


@pytest.mark.parametrize("case", list(TIE_CASES))
def test_reduce_and_max_rules_up_to_third_order_at_ties_and_zeros(case):
    build, x_value, *closed = TIE_CASES[case]
    shape = x_value.shape
    _, out, graphs = derivative_graphs(build, shape)
    rng = np.random.default_rng(len(case))
    inputs = {"x": x_value, "w": rng.uniform(0.5, 1.5, out.shape), "u": rng.normal(size=shape),
              "v": rng.normal(size=shape)}
    got = evaluate(list(graphs), inputs)
    for order, (value, form) in enumerate(zip(got, closed), start=1):
        expected = form(x_value, inputs["w"], inputs["u"], inputs["v"])
        np.testing.assert_allclose(value, np.reshape(expected, shape), rtol=1e-12, atol=1e-12,
                                   err_msg=f"order {order}, closed form")
    np.testing.assert_allclose(got[1], central_difference(graphs[0], inputs, inputs["u"]), rtol=1e-6, atol=1e-8,
                               err_msg="second vs differences of the first")
    np.testing.assert_allclose(got[2], central_difference(graphs[1], inputs, inputs["v"]), rtol=1e-6, atol=1e-8,
                               err_msg="third vs differences of the second")
