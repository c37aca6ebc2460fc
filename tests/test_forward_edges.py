"""Forward mode at edge inputs, in float64: signed zeros, infinities and NaN in values and
in tangents, ties, zeros in products, empty axes, and batched tangents through movement
ops and calls with fewer directions per walk than the input has elements. Against
torch.func (jvp, jacfwd, hessian) bit for bit where both compute the same formula, and
against our own reverse rules (<u, J v> = <J^T u, v>) where torch's convention differs;
each place where ours and torch's differ on purpose says why."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0 where it can)")

from test_forward import _params  # noqa: E402
from test_forward_torch import torch_run  # noqa: E402
from uopcli import UOp, dtypes  # noqa: E402
from uopcli.backends.numpy import evaluate, evaluate_graph  # noqa: E402
from uopcli.core.forward import compute_jvp  # noqa: E402
from uopcli.core.gradient import compute_gradient  # noqa: E402
from uopcli.core.graph import Graph  # noqa: E402
from uopcli.tools import forward  # noqa: E402

f64 = dtypes.float64
inf, nan = np.inf, np.nan


def a(*values) -> np.ndarray:
    return np.array(values, np.float64)


def ours(build, inputs, tangents):
    """(value, tangent) of build(**inputs) along `tangents` (name -> direction), by compute_jvp."""
    params = _params(inputs)
    out = build(**params)
    seeds = {params[k]: UOp.param(f"t_{k}", np.shape(v), f64) for k, v in tangents.items()}
    (t,) = compute_jvp([out], seeds).values()
    feed = {**inputs, **{f"t_{k}": v for k, v in tangents.items()}}
    if t is None:
        return evaluate([out], feed)[0], np.zeros(out.shape)
    return tuple(evaluate([out, t], feed))


def theirs(build, inputs, tangents):
    """(value, tangent) of the same graph run by torch ops, by torch.func.jvp."""
    params = _params(inputs)
    out = build(**params)
    names = list(tangents)

    def f(*args):
        feed = {k: torch.from_numpy(np.array(v)) for k, v in inputs.items()}
        feed.update(zip(names, args))
        return torch_run([out], feed)[0]
    value, tangent = torch.func.jvp(f, tuple(torch.from_numpy(np.array(inputs[k])) for k in names),
                                    tuple(torch.from_numpy(np.array(tangents[k])) for k in names))
    return value.numpy(), tangent.numpy()


def reverse(build, inputs, cotangent, names):
    """J^T u by our reverse rules, per name."""
    params = _params(inputs)
    out = build(**params)
    grads = compute_gradient(out, UOp.buffer(np.asarray(cotangent, np.float64)), [params[k] for k in names])
    return dict(zip(names, evaluate([grads[params[k]] for k in names], inputs)))


def assert_same_bits(got, expected):
    """Equal values, NaN where NaN, and the same sign on every zero and infinity."""
    got, expected = np.asarray(got), np.asarray(expected)
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


# ----------------------------------------------------------------------------- the same formula as torch

# (build, inputs, tangents): the tangent is torch's bit for bit (value and tangent), at the edges
SAME_AS_TORCH = {
    "SQRT at +0 and -0 (inf, -inf), at 1 and 4": (lambda x: x.sqrt(), {"x": a(0.0, -0.0, 1.0, 4.0)},
                                                 {"x": a(1.0, 1.0, 1.0, 0.0)}),
    "SQRT at 0 along a zero tangent (0/0)": (lambda x: x.sqrt(), {"x": a(0.0, -0.0, 4.0)}, {"x": a(0.0, -0.0, -0.0)}),
    "RECIPROCAL at +-0 and +-inf": (lambda x: x.reciprocal(), {"x": a(0.0, -0.0, inf, -inf)}, {"x": a(1.0, 1.0, 1.0, 1.0)}),
    "RECIPROCAL at +-0 along a zero tangent": (lambda x: x.reciprocal(), {"x": a(0.0, -0.0, inf)},
                                               {"x": a(0.0, 0.0, 0.0)}),
    "FDIV numerator at b = +-0, inf": (lambda p, q: p / q, {"p": a(1.0, 1.0, 0.0, 1.0, 1.0), "q": a(0.0, -0.0, 0.0, inf, 2.0)},
                                       {"p": a(1.0, 1.0, 1.0, 1.0, -0.0)}),
    "FDIV both at b = +-0, inf": (lambda p, q: p / q, {"p": a(1.0, 1.0, 0.0, 1.0, 1.0), "q": a(0.0, -0.0, 0.0, inf, 2.0)},
                                  {"p": a(1.0, 0.0, 1.0, 1.0, 0.0), "q": a(1.0, 1.0, 1.0, 1.0, -0.0)}),
    "LOG2 at +-0, inf, -1": (lambda x: x.log2(), {"x": a(0.0, -0.0, inf, -1.0)}, {"x": a(1.0, 1.0, 1.0, 1.0)}),
    "EXP2 overflowing and underflowing": (lambda x: x.exp2(), {"x": a(2000.0, -2000.0, inf, -inf)},
                                          {"x": a(1.0, 1.0, 1.0, 1.0)}),
    "EXP2 overflowing along a zero tangent (0 * inf)": (lambda x: x.exp2(), {"x": a(2000.0, -2000.0, inf, -inf)},
                                                        {"x": a(0.0, 0.0, 0.0, -0.0)}),
    "POW base: 0^0, 0^2, 0^-1, -0^3, (-2)^2, (-2)^3, 2^0, 0^0.5, (-8)^(1/3)": (
        lambda b, e: b ** e, {"b": a(0, 0, 0, -0.0, -2, -2, 2, 0, -8), "e": a(0, 2, -1, 3, 2, 3, 0, 0.5, 1 / 3)},
        {"b": np.ones(9)}),
    "POW exponent at the same points": (
        lambda b, e: b ** e, {"b": a(0, 0, 0, -0.0, -2, -2, 2, 0, -8), "e": a(0, 2, -1, 3, 2, 3, 0, 0.5, 1 / 3)},
        {"e": np.ones(9)}),
    "POW both at the same points": (
        lambda b, e: b ** e, {"b": a(0, 0, 0, -0.0, -2, -2, 2, 0, -8), "e": a(0, 2, -1, 3, 2, 3, 0, 0.5, 1 / 3)},
        {"b": np.ones(9), "e": np.ones(9)}),
    "POW by constants 2, -1, 0.5 at +-0, -3, inf": (
        lambda b: b ** 2 + b ** -1 + b ** 0.5, {"b": a(0.0, -0.0, -3.0, inf)}, {"b": a(1.0, 1.0, 1.0, 1.0)}),
    "POW of constant bases 0 and 2 (2^2000 overflows)": (lambda e: 0.0 ** e + 2.0 ** (e * 1000.0),
                                                         {"e": a(-1.0, 0.0, 1.0, 2.0)}, {"e": a(1.0, 1.0, 1.0, 1.0)}),
    "WHERE: sqrt, log2 and reciprocal of 0 and -1 in the branch not taken": (
        lambda x: (x > 0).where(x.sqrt() + x.log2(), x.ne(0).where(x.reciprocal(), x * 3.0)),
        {"x": a(-1.0, 0.0, 4.0, -0.0)}, {"x": a(1.0, 1.0, 1.0, 1.0)}),
    "WHERE: inf and NaN tangents in the branch not taken": (
        lambda x, z: (x > 0).where(x, z), {"x": a(-1.0, 0.0, 4.0, 2.0), "z": a(1.0, 1.0, 1.0, 1.0)},
        {"x": a(1.0, 1.0, 1.0, 1.0), "z": a(inf, nan, inf, nan)}),
    "CAST float64 -> float32 -> float64": (lambda x: x.cast(dtypes.float32).cast(f64) * x, {"x": a(1.1, 2.5, -0.0)},
                                           {"x": a(1.0, 1.0, 1.0)}),
    "TRUNC (zero)": (lambda x: x.trunc() * x, {"x": a(1.5, -2.5, 3.0, -0.0)}, {"x": a(1.0, 1.0, 1.0, 1.0)}),
    "MAX ties split, and +0 against -0": (lambda p, q: p.maximum(q), {"p": a(1.0, 2.0, 0.0, inf), "q": a(1.0, 1.0, -0.0, inf)},
                                          {"p": a(1.0, 1.0, 1.0, 1.0), "q": a(3.0, 3.0, 3.0, 3.0)}),
    "REDUCE MAX ties along either axis, a NaN row, an inf tie": (
        lambda x: x.max(axis=1) * 2.0 + x.max(axis=0).sum(),
        {"x": np.array([[1, 3, 3, 2], [5, 5, 5, 5], [nan, 1, 2, 3], [inf, inf, 1, 0]], np.float64)},
        {"x": np.arange(1.0, 17.0).reshape(4, 4)}),
    "REDUCE MUL with one zero, two zeros, inf and NaN in the reduced axis": (
        lambda x: x.prod(axis=1),
        {"x": np.array([[1, 0, 3, 2, 7], [0, 5, 0, 5, 1], [2, 2, 2, 2, inf], [0, 0, 0, 1, inf], [2, nan, 1, 1, 1]],
                       np.float64)},
        {"x": np.arange(25.0).reshape(5, 5) - 3}),
    "REDUCE MUL over either axis and both, zeros": (
        lambda x: x.prod(axis=0) + x.prod(axis=1) + x.prod(),
        {"x": np.array([[1, 0, 3, 2], [0, 5, 0, 5], [2, 2, 2, 2], [0, 0, 0, 1]], np.float64)},
        {"x": np.arange(1.0, 17.0).reshape(4, 4)}),
    "sums and products over an empty axis": (lambda x: x.sum(axis=1) + x.prod(axis=1), {"x": np.zeros((3, 0))},
                                              {"x": np.zeros((3, 0))}),
    "-0, inf and NaN tangents through ADD, SUB, NEG, MUL, MULACC, FDIV": (
        lambda x, z: ((x + z) * (2.0 - x) - (-z)).mulacc(z, x) / z,
        {"x": a(0.5, -1.5, 2.0, 0.25, -3.0, 1.0), "z": a(1.5, 2.0, -0.5, 4.0, 1.0, 1.0)},
        {"x": a(-0.0, 0.0, inf, -inf, nan, 1.0), "z": a(-0.0, -0.0, 1.0, 0.0, 1.0, -inf)}),
    "-0, inf and NaN tangents through SQRT, LOG2, EXP2, RECIPROCAL, REDUCE ADD": (
        lambda x: (x.abs().sqrt() + x.abs().log2() + x.exp2() + x.reciprocal()).sum() * x,
        {"x": a(0.5, -1.5, 2.0, 0.25, -3.0, 1.0)}, {"x": a(-0.0, 0.0, inf, -inf, nan, 1.0)}),
}


@pytest.mark.parametrize("case", list(SAME_AS_TORCH))
def test_edges_match_torch_func_jvp_bit_for_bit(case):
    build, inputs, tangents = SAME_AS_TORCH[case]
    value, tangent = ours(build, inputs, tangents)
    their_value, their_tangent = theirs(build, inputs, tangents)
    np.testing.assert_array_equal(value, their_value)
    assert_same_bits(tangent, their_tangent)


# ----------------------------------------------------------------------------- REDUCE MAX

def test_reduce_max_ignores_the_tangents_of_elements_below_the_maximum():
    """The maximum's tangent is that of the element(s) holding it: an element below it adds
    nothing, even where its own tangent is inf or NaN (log2 of a 0 beside the maximum, a
    tangent 1/0). Multiplying by a 0/1 mask made that 0 * inf = NaN; torch.func.jvp (its
    amax rule selects) and the maths give the finite slope."""
    x = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 3.0]])
    build = lambda x: x.log2().max(axis=1)  # noqa: E731
    value, tangent = ours(build, {"x": x}, {"x": np.ones((2, 3))})
    np.testing.assert_array_equal(value, [1.0, np.log2(3.0)])
    np.testing.assert_allclose(tangent, [1 / (2 * np.log(2)), 1 / (3 * np.log(2))], rtol=1e-15)
    assert_same_bits(tangent, theirs(build, {"x": x}, {"x": np.ones((2, 3))})[1])
    # and directly: inf, -inf and NaN tangents off the maximum, the maximum's own finite
    x, t = a(1.0, 5.0, 2.0, 5.0), a(inf, 2.0, nan, 4.0)
    assert_same_bits(ours(lambda x: x.max(), {"x": x}, {"x": t})[1], 3.0)  # a tie: (2 + 4) / 2
    assert_same_bits(ours(lambda x: x.max(), {"x": x}, {"x": a(-inf, 1.0, nan, 1.0)})[1], 1.0)
    # batched: a Jacobian's columns are basis directions, but the rows of a chunk share the walk
    p, second = UOp.param("x", (2, 3), f64), np.zeros((2, 3))
    second[0, 1], second[1, 1] = nan, 1.0   # the maximum of row 0; the 0 of row 1 (tangent 1/0 there)
    (batched,) = compute_jvp([p.log2().max(axis=1)], {p: UOp.buffer(np.stack([np.full((2, 3), inf), second]))},
                             batch=2).values()
    (got,) = evaluate([batched], {"x": np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 3.0]])})
    assert_same_bits(got, [[inf, inf], [nan, 0.0]])


def test_reduce_max_over_an_empty_axis_has_a_zero_tangent():
    """The maximum of no elements is the constant -inf: its tangent is 0, as the reverse
    rule's empty gradient says (<u, J v> = <J^T u, v> = 0), not 0/0 = NaN from an empty
    count. torch refuses amax over an empty axis."""
    x = np.zeros((0, 3))
    value, tangent = ours(lambda x: x.max(axis=0) + 1.0, {"x": x}, {"x": x})
    np.testing.assert_array_equal(value, [-inf, -inf, -inf])
    assert_same_bits(tangent, np.zeros(3))
    assert reverse(lambda x: x.max(axis=0), {"x": x}, np.ones(3), ["x"])["x"].shape == (0, 3)
    graph = Graph({"y": UOp.param("x", (2, 0), f64).max(axis=1) * 2.0})
    np.testing.assert_array_equal(evaluate_graph(forward.jacobian(graph, ["x"], chunk=1), {"x": np.zeros((2, 0))})
                                  ["jacobian_y_x"], np.zeros((2, 2, 0)))
    value, tangent = ours(lambda x: x.max(axis=1), {"x": np.zeros((2, 0))}, {"x": np.zeros((2, 0))})
    assert_same_bits(tangent, np.zeros(2))


# ----------------------------------------------------------------------------- MAX

def test_max_of_a_nan_is_not_a_tie():
    """max(a, b) with a NaN operand (value NaN): the reverse rule gives neither operand a
    share (a > b, a < b and a == b all fail), so the forward rule's tangent is 0, not the
    tie's mean (da + db) / 2 it gave when "neither is larger" stood for a tie. (torch's
    formula, db + [a == b ? 0.5 : a > b] (da - db), gives db; JAX's gives 0, as ours.)"""
    build = lambda p, q: p.maximum(q)  # noqa: E731
    inputs = {"p": a(nan, 1.0, nan, 1.0, 2.0), "q": a(1.0, nan, nan, 1.0, 1.0)}
    tangents = {"p": a(1.0, 1.0, 1.0, 1.0, 1.0), "q": a(3.0, 3.0, 3.0, 3.0, 3.0)}
    value, tangent = ours(build, inputs, tangents)
    np.testing.assert_array_equal(value, [nan, nan, nan, 1.0, 2.0])
    assert_same_bits(tangent, [0.0, 0.0, 0.0, 2.0, 1.0])
    for name in ("p", "q"):   # one operand's tangent at a time: the transpose of each reverse gradient
        u = a(1.0, 2.0, 3.0, 4.0, 5.0)
        jtu = reverse(build, inputs, u, [name])[name]
        _, jv = ours(build, inputs, {name: tangents[name]})
        np.testing.assert_array_equal(u * jv, jtu * tangents[name])
    np.testing.assert_array_equal(theirs(build, inputs, tangents)[1], [3.0, 3.0, 3.0, 2.0, 1.0])  # torch: db


def test_max_selects_the_larger_tangent_where_torch_mixes_in_the_other():
    """Where one operand is larger, its tangent is the tangent, whatever the other's is:
    ours selects (a > b ? da : ...), torch computes db + [a > b] (da - db), which is NaN
    when db is inf or NaN (inf - inf, 0 * inf). Both are the same linear map on finite
    tangents; ours keeps a non-finite tangent of the smaller operand out, as WHERE does."""
    build = lambda p, q: p.maximum(q)  # noqa: E731
    inputs = {"p": a(2.0, 2.0, 1.0, 1.0), "q": a(1.0, 1.0, 2.0, 2.0)}
    tangents = {"p": a(1.0, -0.0, inf, nan), "q": a(inf, nan, 3.0, -0.0)}
    assert_same_bits(ours(build, inputs, tangents)[1], [1.0, -0.0, 3.0, -0.0])
    assert_same_bits(theirs(build, inputs, tangents)[1], [nan, nan, nan, nan])


# ----------------------------------------------------------------------------- conventions

def test_an_infinite_tangent_times_a_zero_slope_is_nan_as_in_the_reverse_rule():
    """POW's base slope is 0 where e == 0 (b^0 is constant): ours multiplies the tangent by
    that slope, so an infinite tangent gives 0 * inf = NaN, as the reverse rule's g * slope
    does (gradient-rules.md); torch selects 0 after multiplying. Both are IEEE; a tangent
    of inf is no direction, and neither is wrong: we keep the reverse rule's product."""
    build = lambda b, e: b ** e  # noqa: E731
    inputs = {"b": a(0.0, 2.0, 0.0, 3.0), "e": a(0.0, 0.0, 2.0, 2.0)}
    tangents = {"b": a(inf, inf, inf, inf)}
    assert_same_bits(ours(build, inputs, tangents)[1], [nan, nan, nan, inf])
    assert_same_bits(theirs(build, inputs, tangents)[1], [0.0, 0.0, nan, inf])
    assert_same_bits(reverse(build, inputs, a(inf, inf, inf, inf), ["b"])["b"], [nan, nan, nan, inf])


def test_a_zero_tangent_adds_nothing_not_plus_zero():
    """A zero tangent is symbolic (None, no node), as JAX's symbolic zeros: trunc(x) + x
    along -0.0 has the tangent -0.0, where torch adds trunc's materialized +0.0 (and
    +0.0 + -0.0 is +0.0); trunc(x) * x at x = inf has trunc(x) dx = inf, where torch adds
    x * (+0.0) = inf * 0 = NaN. The same maths; ours never multiplies a zero tangent."""
    build = lambda x: x.trunc() + x  # noqa: E731
    inputs, tangents = {"x": a(1.5, -2.5)}, {"x": a(-0.0, -0.0)}
    assert_same_bits(ours(build, inputs, tangents)[1], [-0.0, -0.0])
    assert_same_bits(theirs(build, inputs, tangents)[1], [0.0, 0.0])
    build = lambda x: x.trunc() * x  # noqa: E731
    inputs, tangents = {"x": a(inf, -inf, 2.5)}, {"x": a(1.0, 1.0, 1.0)}
    assert_same_bits(ours(build, inputs, tangents)[1], [inf, -inf, 2.0])
    assert_same_bits(theirs(build, inputs, tangents)[1], [nan, nan, 2.0])


def test_a_cast_to_an_integer_has_a_zero_tangent():
    """A cast to an integer (or bool) is piecewise constant: its tangent is 0, as
    torch.func.jvp gives. The rule cast the tangent too, trunc(dx), which is no
    derivative and not even linear in dx (2 trunc(0.6) != trunc(1.2)). Our reverse rule
    still passes gradients through such casts, truncated, as tinygrad's CAST rule does
    (test_gradient.py::test_an_integer_max_on_the_way_to_a_float_target...): not linear in
    g either, so no forward rule is its transpose there; the forward one is the maths."""
    inputs, tangents = {"x": a(1.7, -2.5, 3.0)}, {"x": a(1.9, -3.5, 0.25)}
    for to in (dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool):
        build = lambda x, to=to: x.cast(to).cast(f64) * 2.0 + x.abs().cast(to).cast(f64)  # noqa: E731
        assert_same_bits(ours(build, inputs, tangents)[1], [0.0, 0.0, 0.0])
        assert_same_bits(theirs(build, inputs, tangents)[1], [0.0, 0.0, 0.0])
    build = lambda x: x.cast(dtypes.int32).cast(f64) * x  # noqa: E731   d(int(x) x) = int(x) dx
    assert_same_bits(ours(build, inputs, tangents)[1], theirs(build, inputs, tangents)[1])
    # batched: the Jacobian of a rounding is 0, the identity's where the value passes as a float
    graph = Graph({"y": UOp.param("x", (3,), f64).cast(dtypes.int32).cast(f64) + UOp.param("x", (3,), f64)})
    jac = evaluate_graph(forward.jacobian(graph, ["x"], chunk=2), inputs)["jacobian_y_x"]
    np.testing.assert_array_equal(jac, np.eye(3))
    # a cast between floats is the identity's derivative in both
    build = lambda x: x.cast(dtypes.float32).cast(f64) * 2.0  # noqa: E731
    assert_same_bits(ours(build, inputs, tangents)[1], theirs(build, inputs, tangents)[1])


def test_the_tangent_of_sin_is_the_reverse_rules_cosine_sin_of_pi_over_2_minus_x():
    """cos x is written sin(pi/2 - x), as the reverse SIN row (gradient-rules.md) writes
    it: forward and reverse agree bit for bit. pi/2 - x rounds to the nearest float, so
    against torch's cos x the absolute error grows as |x| eps (1e-12 at |x| = 1e4, 1e-9
    at 1e8) and past 2^53 the result is no cosine at all: a limit of the spec's formula,
    shared by both tables (not changed here)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-m, m, 200) for m in (1.0, 1e2, 1e4, 1e6, 1e8)])
    _, tangent = ours(lambda x: x.sin(), {"x": x}, {"x": np.ones_like(x)})
    np.testing.assert_array_equal(tangent, reverse(lambda x: x.sin(), {"x": x}, np.ones_like(x), ["x"])["x"])
    _, torch_tangent = theirs(lambda x: x.sin(), {"x": x}, {"x": np.ones_like(x)})
    assert np.all(np.abs(tangent - torch_tangent) <= 2.3e-16 * np.abs(x) + 1e-15)


# ----------------------------------------------------------------------------- batched tangents

RNG = np.random.default_rng(17)
X = RNG.standard_normal((2, 5))
W = RNG.standard_normal(5)
S = np.array(0.7)
C = np.arange(1.0, 11.0).reshape(2, 5) / 4   # a constant weighting that tells positions apart
trace = UOp.trace_function


def _weighted(y):
    """A scalar that sees every position of y, each with its own weight."""
    return (y * y * UOp.buffer(np.arange(1.0, 1.0 + y.size).reshape(y.shape))).sum()


# name: (build, inputs, wrt); every model sees the order of its input's elements
BATCHED = {
    "PAD before and after": (lambda x: x.pad(((1, 2), (3, 0))).sin(), {"x": X}, ["x"]),
    "PAD by a negative amount": (lambda x: x.pad(((0, 1), (-2, 1))) * 2.0, {"x": X}, ["x"]),
    "SHRINK": (lambda x: x.shrink(((1, 2), (1, 4))).exp2(), {"x": X}, ["x"]),
    "FLIP either axis and both": (lambda x: x.flip(0) * UOp.buffer(C) + x.flip(1) * x + x.flip((0, 1)), {"x": X}, ["x"]),
    "PERMUTE of three axes": (lambda x: x.reshape(2, 5, 1).expand(2, 5, 3).permute(2, 0, 1)
                              * UOp.buffer(np.arange(30.0).reshape(3, 2, 5)), {"x": X}, ["x"]),
    "EXPAND and RESHAPE": (lambda x: x.reshape(2, 1, 5).expand(2, 3, 5).reshape(5, 6).sin(), {"x": X}, ["x"]),
    "cat of x and w, flipped": (lambda x, w: x.cat(w.reshape(1, 5), dim=0).flip(0) * x.cat(w.reshape(1, 5)).sin(),
                                {"x": X, "w": W}, ["x", "w"]),
    "stack on a new last axis": (lambda x, w: w.stack(w.flip(0), dim=1) * x.permute(1, 0), {"x": X, "w": W}, ["x", "w"]),
    "matmul": (lambda x, w: (x @ w.reshape(5, 1)).sin(), {"x": X, "w": W}, ["x", "w"]),
    "softmax along the rows": (lambda x: x.softmax(1) * UOp.buffer(C), {"x": X}, ["x"]),
    "a FUNCTION with two outputs": (lambda x, w: trace("f", lambda p, q: ((p * q).sin(), (p - q).flip(1).exp2()),
                                                      x, w.reshape(1, 5).expand(2, 5))[1], {"x": X, "w": W}, ["x", "w"]),
    "a FUNCTION of a scalar": (lambda x, s: trace("f", lambda p, q: ((p * q).sin(), q * q), x, s)[0],
                               {"x": X, "s": S}, ["x", "s"]),
    "a FUNCTION with a scalar output, called twice": (
        lambda x, s: trace("f", lambda p, q: ((p * q).sin().sum(),), x, s)[0]
        * trace("f", lambda p, q: ((p * q).sin().sum(),), x.flip(1), s * 2.0)[0] * x, {"x": X, "s": S}, ["x", "s"]),
    "nested FUNCTIONs": (lambda x, s: trace("g", lambda a, b: (trace("f", lambda p, q: ((p.flip(0) * q).sin() * q,),
                                                                    a, b)[0] * b,), x, s)[0], {"x": X, "s": S}, ["x", "s"]),
    "a scalar input": (lambda s: (UOp.buffer(C) * s).sin() * s, {"s": S}, ["s"]),
    "a scalar input and output": (lambda s: (s * s).sin() * s.exp2(), {"s": S}, ["s"]),
    "a scalar output": (lambda x: x.sin().sum() * x.max(), {"x": X}, ["x"]),
}


def _torch_function(out, inputs, wrt):
    def f(*args):
        feed = {k: torch.from_numpy(np.array(v)) for k, v in inputs.items()}
        feed.update(zip(wrt, args))
        return torch_run([out], feed)[0]
    return f, tuple(torch.from_numpy(np.array(inputs[k])) for k in wrt)


@pytest.mark.parametrize("case", list(BATCHED))
def test_jacobians_and_hessians_in_chunks_match_jacfwd_and_hessian(case):
    """The full Jacobian of each model (and the Hessian of a weighted scalar of it) with
    1, 3 and all directions per batched walk: the batch axis in front of every movement
    op's axes, a chunk that does not divide the input, calls and shape-() inputs and
    outputs. Against torch.func.jacfwd / torch.func.hessian, to rounding."""
    build, inputs, wrt = BATCHED[case]
    params = _params(inputs)
    out = build(**params)
    loss = _weighted(out) if out.shape else out * out
    graph = Graph({"y": out, "loss": loss}, inputs=list(params.values()))
    f, primals = _torch_function(out, inputs, wrt)
    jacobians = torch.func.jacfwd(f, argnums=tuple(range(len(wrt))))(*primals)
    g, _ = _torch_function(loss, inputs, wrt)
    hessians = torch.func.hessian(g, argnums=tuple(range(len(wrt))))(*primals)
    for chunk in (1, 3, 256):
        got = evaluate_graph(forward.jacobian(graph, wrt, ["y"], chunk=chunk), inputs)
        for name, expected in zip(wrt, jacobians):
            mine = got[f"jacobian_y_{name}"]
            assert mine.shape == tuple(expected.shape), (chunk, name)
            np.testing.assert_allclose(mine, expected.numpy(), rtol=1e-13, atol=1e-13, err_msg=f"{chunk} {name}")
        got = evaluate_graph(forward.hessian(graph, wrt, ["loss"], chunk=chunk), inputs)
        for i, first in enumerate(wrt):
            for k, second in enumerate(wrt):
                mine, expected = got[f"hessian_{first}_{second}"], hessians[i][k].numpy()
                assert mine.shape == expected.shape, (chunk, first, second)
                np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-12, err_msg=f"{chunk} {first} {second}")
