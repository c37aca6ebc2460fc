"""Each algebraic (TINYGRAD) row held to its stated ulp bound, and the bound to what the row
does: every row is applied on its own to many expressions of its shape (random constants,
both operand orders, float16, float32 and float64) on thousands of normal-range values at
once, the worst ulp seen is measured, and must be within the row's bound and above a tenth
of it (a bound loose by 10x says nothing). WORST_SEEN records what was measured here (seed
0), beside each row's bound, so a change in a row's rounding shows in review.

Forms a row must leave alone (`c - x` is not `x + c`; a sum over grown and kept axes is not
a sum of copies) are in the same pools: a row that rewrote them would move a value by far
more than its bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopcli import Ops, UOp, dtypes, evaluate
from uopcli.backends.reference import reference_evaluate
from uopcli.core.pattern import PatternMatcher
from uopcli.core.simplify import TINYGRAD_ROWS, simplify_nodes
from uopcli.core.simplify.walk import Rewriter

from _row_scale import _other_factors, row_scale

M = 4096  # values per input
FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
ROW = {row.fn.__name__: row for row in TINYGRAD_ROWS}

# row -> (its stated bound, the worst seen here with seed 0: in ulps, for "count" as a share of the count)
WORST_SEEN = {
    "fold_constant_factors": (3.0, 2.0),
    "reciprocal_of_scaled": (3.0, 3.0),
    "fold_constant_terms": (2.0, 2.0),  # was stated 1.0: this test measured 2 (algebraic.py says why)
    "sigmoid_ratio": (3.0, 2.5),  # was 2.0 of the values on the way: y * (k * (ratio * e)) measured 4
    "ratio_through_sum": (2.0, 2.0),
    "sum_of_copies": ("count", 0.29),
    "negated_sum": (0.0, 0.0),
    "quotient": (2.0, 1.0),  # two floats less than 2 ulps apart: 1 within a binade
}


def _values(rng, dtype, shape=(M,), low=-3.0, high=3.0):
    """Normal-range values: |v| in [2^low, 2^high], either sign."""
    magnitude = np.exp2(rng.uniform(low, high, shape))
    return (magnitude * rng.choice([-1.0, 1.0], shape)).astype(dtype.np)


def _constant(rng, dtype):
    v = float(np.exp2(rng.uniform(-3, 3)) * rng.choice([-1.0, 1.0]))
    return UOp.const(float(np.array(v, dtype.np)), dtype)


def _factor_forms(rng, dtype):
    x = UOp.param("x", (M,), dtype)
    for _ in range(6):
        c1, c2 = _constant(rng, dtype), _constant(rng, dtype)
        yield from ((x * c1) * c2, c2 * (x * c1), (c1 * x) * c2, (x / c1) * c2, (x * c1) / c2, (x / c1) / c2,
                    c2 * (c1 * x))


def _reciprocal_forms(rng, dtype):
    x, y = UOp.param("x", (M,), dtype), UOp.param("y", (M,), dtype)
    for _ in range(8):
        c = _constant(rng, dtype)
        yield from (x / (y * c), y / (x * c))


def _term_forms(rng, dtype):
    x = UOp.param("x", (M,), dtype)
    for _ in range(8):
        c1, c2 = _constant(rng, dtype), _constant(rng, dtype)
        yield from ((x + c1) + c2, (x - c1) + c2, (c1 + x) + c2, c2 + (x + c1), (x + c1) - c2, (x - c1) - c2,
                    c2 + (x - c1), (c1 - x) + c2, c2 + (c1 - x), (c1 - x) - c2, c2 - (x + c1))


def _ratio_forms(rng, dtype):
    x, y = UOp.param("x", (M,), dtype), UOp.param("y", (M,), dtype)
    e = (x * -1.4426950408889634).exp2()
    ratio = (e + 1).reciprocal()
    k = _constant(rng, dtype)
    yield from (e * ratio, ratio * e, e * (ratio * ratio) * k, -(y * (ratio * ratio)) * e, (y / ((e + 1) * k)) * e,
                e / (1 + e), (e * y) * ratio, y * (e * ratio), e / (e + 1) * y,
                ratio * ((e / y) * y),  # a quotient taken apart with a factor still to come
                (e / UOp.const(4.0, dtype)) / (1 + e))  # a constant in the denominator: divided, not multiplied
    # the other factors larger than any value on the way: 1 - 1/(1+e) is off by an ulp of 1
    # times them (the bound's "factors" scale); k stays small enough for float16
    for k in (UOp.const(float(np.array(c, dtype.np)), dtype) for c in (0.75, -0.6, 1.25)):
        yield from (ratio * ((e / y) * k), ratio * ((e / k) * y), y * (k * (ratio * e)), (e * ratio) * (y / k))


def _ratio_sum_forms(rng, dtype):
    """e * (t ± y) with 1/(1+e) in t: distributed so that e*t meets sigmoid_ratio."""
    x, y = UOp.param("x", (M,), dtype), UOp.param("y", (M,), dtype)
    e = (x * -1.4426950408889634).exp2()
    ratio = (e + 1).reciprocal()
    k = _constant(rng, dtype)
    yield from (e * (ratio + y), e * (y + ratio), e * (ratio - y), e * (y - ratio), (ratio * k + y) * e,
                e * (ratio * y + y))


def _sum_forms(rng, dtype):
    """Sums of expanded values: over grown axes only (the row's case), and over grown and
    kept axes together (not a sum of copies: left alone)."""
    for grown in (1, 0):
        base = UOp.param("m", (3, 1, 4), dtype) if grown == 1 else UOp.param("n", (1, 3, 4), dtype)
        for count in (2, 3, 5, 7, 40, 129):
            shape = (3, count, 4) if grown == 1 else (count, 3, 4)
            e = base.expand(*shape)
            for axes in ((grown,), (0, 1), (grown, 2), (0, 1, 2)):
                yield e.r(Ops.ADD, tuple(sorted(axes)))
    both = UOp.param("k", (1, 1, 4), dtype)  # two grown axes summed: count is their product
    for a, b in ((2, 3), (5, 7)):
        yield both.expand(a, b, 4).r(Ops.ADD, (0, 1))


def _negated_sum_forms(rng, dtype):
    m = UOp.param("m", (3, 1, 4), dtype)
    x = UOp.param("x", (M,), dtype)
    yield from ((-m).r(Ops.ADD, (1,)), (-m).r(Ops.ADD, (0, 2)), (-x).r(Ops.ADD, (0,)))


def _quotient_forms(rng, dtype):
    """a * (1/b) in both orders, broadcast, and with a reciprocal on each side."""
    x, y = UOp.param("x", (M,), dtype), UOp.param("y", (M,), dtype)
    m, k = UOp.param("m", (3, 1, 4), dtype), UOp.param("k", (1, 1, 4), dtype)
    yield from (x * y.reciprocal(), y.reciprocal() * x, x.reciprocal() * y.reciprocal(), -x * y.reciprocal(),
                m.expand(3, 5, 4) * k.reciprocal().expand(3, 5, 4), (x * y) * y.reciprocal())


FORMS = {"quotient": _quotient_forms, "fold_constant_factors": _factor_forms, "reciprocal_of_scaled": _reciprocal_forms,
         "fold_constant_terms": _term_forms, "sigmoid_ratio": _ratio_forms,
         "ratio_through_sum": _ratio_sum_forms, "sum_of_copies": _sum_forms,
         "negated_sum": _negated_sum_forms}


def _feed(rng, dtype, name):
    if name in ("sigmoid_ratio", "ratio_through_sum"):  # e = 2^(-x/ln2) stays normal: |x| up to 8
        return {"x": _values(rng, dtype, low=-4, high=3), "y": _values(rng, dtype)}
    return {"x": _values(rng, dtype), "y": _values(rng, dtype), "m": _values(rng, dtype, (3, 1, 4)),
            "n": _values(rng, dtype, (1, 3, 4)), "k": _values(rng, dtype, (1, 1, 4))}


def _ulps(literal, rewritten, scale):
    spacing = np.spacing(np.maximum(np.abs(scale), np.finfo(literal.dtype).tiny).astype(literal.dtype))
    return np.abs(literal.astype(np.float64) - rewritten.astype(np.float64)) / spacing.astype(np.float64)


def _row_alone(row) -> Rewriter:
    bookkeeping = [(r.pattern, r.fn) for r in TINYGRAD_ROWS if r.fn.__name__ == "note_ratio"]
    return Rewriter(PatternMatcher(bookkeeping + [(row.pattern, row.fn)]))


def measure(name: str, seed: int = 0) -> tuple[float, int]:
    """The worst ulp (for "count", ulps over the count) row `name` moves a value by, and how
    many expressions it rewrote."""
    row, rng = ROW[name], np.random.default_rng(seed)
    worst, rewritten = 0.0, 0
    for dtype in FLOATS:
        exprs = list(FORMS[name](rng, dtype))
        outs = _row_alone(row).rewrite_roots(exprs)
        feed = _feed(rng, dtype, name)
        for before, after in zip(exprs, outs):
            if after is before:
                continue
            rewritten += 1
            assert after.shape == before.shape and after.dtype is before.dtype
            used = {n.arg for n in before.toposort() if n.op == Ops.PARAM}
            inputs = {k: v for k, v in feed.items() if k in used}
            literal = np.asarray(reference_evaluate([before], inputs)[0])
            ours = np.asarray(evaluate([after], inputs)[0])
            assert np.all(np.isfinite(literal)), f"{name}: a form left the normal range: {before}"
            ulps = _ulps(literal, ours, row_scale(row, before, literal, after, inputs))
            if row.ulps == "count":
                ulps = ulps / math.prod(before.src[0].shape[a] for a in before.arg[1])
                bound = 1.0
            else:
                bound = float(row.ulps)
            assert ulps.max() <= bound, (f"{name} ({row.follows}) moved a {dtype.name} value by {ulps.max():.2f} "
                                         f"ulps, over its bound {row.ulps}:\n{before}\n-> {after}")
            worst = max(worst, float(ulps.max()))
    return worst, rewritten


@pytest.mark.parametrize("name", list(WORST_SEEN))
def test_each_row_within_its_bound_and_the_bound_tight(name):
    row = ROW[name]
    bound, recorded = WORST_SEEN[name]
    assert row.ulps == bound, f"{name}: its bound changed from {bound} to {row.ulps}: measure it and record it here"
    worst, rewritten = measure(name)
    assert rewritten >= 6, f"{name} rewrote only {rewritten} of its forms"
    stated = 1.0 if bound == "count" else bound
    assert worst <= stated
    if stated:  # a bound of 0 is exact: nothing to be loose by
        assert worst > stated / 10, f"{name}: bound {bound} but the worst seen is {worst:.3f} ulps: loose by 10x or more"
    assert math.isclose(worst, recorded, rel_tol=0.5, abs_tol=0.05), \
        f"{name}: worst {worst:.3f} ulps, recorded {recorded}: record what a change to the row measures"


def test_every_algebraic_row_is_measured():
    assert set(WORST_SEEN) | {"note_ratio"} == set(ROW)


@pytest.mark.parametrize("case", ["(2 - x) + 1", "1 + (2 - x)", "(2 - x) - 1"])
def test_a_constant_minus_x_is_not_x_plus_the_constant(case):
    """fold_constant_terms reads only x + c, x - c and c + x: `c - x` is -x + c, and whatever
    the default simplification makes of it, the value is the written one's."""
    x = UOp.param("x", (5,))
    two, one = UOp.const(2.0), UOp.const(1.0)
    expr = {"(2 - x) + 1": (two - x) + one, "1 + (2 - x)": one + (two - x), "(2 - x) - 1": (two - x) - one}[case]
    values = np.array([0.0, 1.0, -3.0, 0.25, 10.0], np.float32)
    written = reference_evaluate([expr], {"x": values})[0]
    for exact in (False, True):
        simplified = evaluate(simplify_nodes([expr], exact=exact), {"x": values})[0]
        np.testing.assert_array_equal(simplified, written)
    expected = {"(2 - x) + 1": 3.0 - values, "1 + (2 - x)": 3.0 - values, "(2 - x) - 1": 1.0 - values}[case]
    np.testing.assert_array_equal(written, expected)


def _range_edge_cases():
    """(dtype, expression, x, y): two constants whose folded product or reciprocal leaves the
    dtype's normal range, where every value the written graph computes is normal."""
    f16, f32, f64 = dtypes.float16, dtypes.float32, dtypes.float64
    cases = []
    for dtype, big, small, x, tiny, y in ((f16, 256.0, 1 / 256, 0.01, 2.0 ** -17, 2.0 ** 14),
                                          (f32, 1e20, 1e-30, 1e-30, 1e-39, 1e30),
                                          (f64, 1e200, 1e-200, 1e-200, 1e-309, 1e300)):
        def c(v, dtype=dtype):
            return UOp.const(v, dtype)
        p, q = UOp.param("x", (2,), dtype), UOp.param("y", (2,), dtype)
        cases += [(dtype, (p * c(big)) * c(big * 2), x, 1.0),        # the product overflows
                  (dtype, (p * c(small)) * c(small / 2), 1 / x, 1.0),  # ... falls below the normal range
                  (dtype, (p / c(small)) * c(big), x, 1.0),           # (x/c1)*c2 = x*(c2/c1)
                  (dtype, (p * c(big)) / c(small), x, 1.0),           # (x*c1)/c2 = x*(c1/c2)
                  (dtype, p / (q * c(tiny)), x, y)]                   # x/(y*c) = (x/y)*(1/c): 1/c overflows
    return cases


@pytest.mark.parametrize("dtype, expr, x, y", _range_edge_cases(),
                         ids=lambda v: v.name if hasattr(v, "name") and not isinstance(v, UOp) else None)
def test_a_folded_constant_that_leaves_the_normal_range_is_not_folded(dtype, expr, x, y):
    """fold_constant_factors and reciprocal_of_scaled fold two constants into one rounded to
    the dtype; where that one overflows (inf) or falls below the normal range (0 or a
    subnormal), their 3-ulp bound breaks though every value written is normal: float16
    (x*256)*512 at x = 0.01 gave inf, float32 (x*1e-30)*1e-30 at x = 1e30 gave 0."""
    values = {"x": np.full(2, x, dtype.np), "y": np.full(2, y, dtype.np)}
    used = {n.arg for n in expr.toposort() if n.op == Ops.PARAM}
    values = {k: v for k, v in values.items() if k in used}
    literal = np.asarray(reference_evaluate([expr], values)[0])
    assert np.all(np.isfinite(literal)) and np.all(np.abs(literal) >= np.finfo(dtype.np).smallest_normal)
    simplified = np.asarray(evaluate(simplify_nodes([expr]), values)[0])
    assert np.all(_ulps(literal, simplified, literal) <= 3.0), (literal, simplified)


# ----------------------------------------------------------------------------- the ratio where x is tiny

LOG2E = 1.4426950408889634
LARGE_X = [5.0, 25.0, 40.0, 100.0, 745.0, 800.0]  # e = exp(-x) from 7e-3 to below float64's subnormals


def _sigmoid_parts(dtype, size):
    x, y = UOp.param("x", (size,), dtype), UOp.param("y", (size,), dtype)
    e = (x * -LOG2E).exp2()  # exp(-x) as tinygrad writes it
    return x, y, e, (1.0 + e).reciprocal()


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float32], ids=lambda d: d.name)
def test_a_product_that_divides_by_e_keeps_its_value_where_e_is_tiny(dtype):
    """(y*r/e)*e and (y*e*r)/(e*r), r = sigmoid(x) = 1/(1+e): merged, 1 - r is off by an ulp
    of 1 and the division by e scaled that to the product's size (float64 x = 40: 0 for 2,
    and 0/0 = nan for 2; x = 25: 5e-6 off; tinygrad's CPU gives 2 and inf). The first is left
    as written (its value is the literal's, bit for bit: inf and nan once y*r/e overflows);
    in the second the merged e*r below the bar cancels the one above: y exactly, where the
    literal is 0/0 once e underflows."""
    x, y, e, r = _sigmoid_parts(dtype, len(LARGE_X))
    feed = {"x": np.array(LARGE_X, dtype.np), "y": np.full(len(LARGE_X), 2.0, dtype.np)}
    truth = 2.0 / (1.0 + np.exp(-np.array(LARGE_X)))  # float64: y * sigmoid(x)
    divided, cancelled = (y * r / e) * e, (y * e * r) / (e * r)
    with np.errstate(all="ignore"):
        literal = reference_evaluate([divided, cancelled], feed)
        ours = evaluate(simplify_nodes([divided, cancelled]), feed)
    np.testing.assert_array_equal(ours[0], literal[0])
    finite = np.isfinite(literal[0])
    assert finite[:3].all()  # up to x = 40 both precisions hold y*r/e
    np.testing.assert_allclose(ours[0][finite], truth[finite], rtol=2 * np.finfo(dtype.np).eps)
    np.testing.assert_array_equal(ours[1], feed["y"])
    assert np.isnan(literal[1][-1])  # e underflowed to 0: the literal is 0/0


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float32], ids=lambda d: d.name)
def test_sigmoid_and_its_gradient_stay_finite_at_large_x(dtype):
    """What the ratio rows are for (tinygrad's rewrite): sigmoid's gradient as the rules write
    it is nan where exp(-x) overflows; simplified, it is sigmoid * (1 - sigmoid), finite, and
    within 2 ulps of 1 of torch's in float64 everywhere (sigmoid too: its values, in [0, 1],
    carry exp2's rounding of x * -log2(e), relatively large where x is)."""
    torch = pytest.importorskip("torch")
    from uopcli import Graph, differentiate
    values = np.array([-1000.0, -745.0, -100.0, -88.8, -20.0, 0.0, 3.0, 40.0, 100.0, 1000.0], dtype.np)
    x = UOp.param("x", values.shape, dtype)
    graph, _ = differentiate(Graph({"y": x.sigmoid().sum()}), ["x"])
    roots = [x.sigmoid(), *graph.outputs.values()][:2]
    with np.errstate(all="ignore"):
        literal = reference_evaluate(roots[1:], {"x": values})[0]
        forward, grad = evaluate(simplify_nodes(roots), {"x": values})
    assert np.isnan(literal).any()  # exp(1000) overflows in both precisions
    assert np.all(np.isfinite(forward)) and np.all(np.isfinite(grad))
    t = torch.tensor(values.astype(np.float64), requires_grad=True)
    torch.sigmoid(t).sum().backward()
    eps = float(np.finfo(dtype.np).eps)
    np.testing.assert_allclose(forward, torch.sigmoid(t).detach().numpy(), rtol=0, atol=2 * eps)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=0, atol=2 * eps)


def _random_ratio_product(rng):
    """Steps of a random product of e, r = 1/(1+e), y, z and a constant: MUL (either side),
    FDIV, NEG; 2 to 6 of them."""
    steps = [("leaf", int(rng.integers(5)))]
    for _ in range(int(rng.integers(2, 7))):
        steps.append((str(rng.choice(["mul", "mul", "rmul", "div", "neg"])), int(rng.integers(5))))
    return steps


def _built(steps, leaves):
    node = leaves[steps[0][1]]
    for kind, k in steps[1:]:
        f = leaves[k]
        node = {"mul": lambda: node * f, "rmul": lambda: f * node, "div": lambda: node / f, "neg": lambda: -node}[kind]()
    return node


def _values_of(root, feed, size) -> np.ndarray:
    """root's value by the reference evaluator, float64, broadcast to (size,) (a product of
    constants alone is shape ())."""
    return np.broadcast_to(np.asarray(reference_evaluate([root], _used(root, feed))[0]).astype(np.float64), (size,))


def _used(root, feed):
    names = {m.arg for m in root.toposort() if m.op == Ops.PARAM}
    return {k: v for k, v in feed.items() if k in names}


def _ulps_beyond_the_literal(ours, literal, exact, scale, dtype):
    """How much further from the exact value ours is than the literal, in ulps of `scale`."""
    with np.errstate(all="ignore"):  # where the literal overflows: not compared
        spacing = np.spacing(np.maximum(scale.astype(dtype.np), np.finfo(dtype.np).tiny)).astype(np.float64)
        return (np.abs(ours - exact) - np.abs(literal - exact)) / spacing


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float32], ids=lambda d: d.name)
def test_random_ratio_products_within_the_stated_bound_of_the_exact_value(dtype):
    """sigmoid_ratio's bound, as its docstring states it, on random products with x in
    [-8, 40] (e from 3000 to 4e-18, where 1 - 1/(1+e) is 0), against the exact value (the
    literal in float64), beyond the literal's own error in `dtype`: for x >= 0, at most 3 ulps
    of |P|, P the product with each merged 1 - 1/(1+e) taken as 1, and P holds no 1/e: |P| is
    at most B, the product with e and 1/(1+e) taken as 1 (times 2 per factor: a divisor
    1/(1+e) is 1+e <= 2); for x <= 0 (e/(1+e) >= 1/2), at most 6 ulps of the result. Merged
    across a division by e (the old row), P was y/e: up to 2e14 ulps off."""
    rng, m = np.random.default_rng(0), 64
    checked = 0
    for steps in PINNED_PRODUCTS + [_random_ratio_product(rng) for _ in range(200)]:
        c = float(rng.choice([2.0, -0.5, 3.0]))

        def product(dt, ratio_leaves=True):
            x, y, e, r = _sigmoid_parts(dt, m)
            if not ratio_leaves:
                e, r = UOp.param("E", (m,), dt), UOp.param("R", (m,), dt)
            return _built(steps, [e, r, y, UOp.param("z", (m,), dt), UOp.const(c, dt)])

        feed = {"x": rng.uniform(-8, 40, m), "y": rng.uniform(0.5, 2, m) * rng.choice([-1, 1], m),
                "z": rng.uniform(0.5, 2, m) * rng.choice([-1, 1], m)}
        narrow = {k: v.astype(dtype.np) for k, v in feed.items()}
        wide = {k: v.astype(np.float64) for k, v in narrow.items()}
        expr, exact_expr, bounding = product(dtype), product(dtypes.float64), product(dtypes.float64, False)
        after = simplify_nodes([expr])[0]
        with np.errstate(all="ignore"):
            ours = np.broadcast_to(np.asarray(evaluate([after], _used(after, narrow))[0]).astype(np.float64), (m,))
            literal, exact = _values_of(expr, narrow, m), _values_of(exact_expr, wide, m)
            b = np.abs(_values_of(bounding, dict(wide, E=np.ones(m), R=np.ones(m)), m)) * 2.0 ** len(steps)
            p = _other_factors(after, (m,), _used(after, narrow))
        fine = np.isfinite(literal) & np.isfinite(exact)
        tiny, large = fine & (wide["x"] >= 0), fine & (wide["x"] <= 0)
        if p is None:  # nothing merged: the rewrites change rounding only
            p = np.zeros(m)
        assert np.all(p[tiny] <= b[tiny] * (1 + 1e-6)), f"P holds 1/e: {steps}"
        extra = _ulps_beyond_the_literal(ours, literal, exact, np.maximum(np.abs(exact), p), dtype)
        assert np.all(extra[tiny] <= 3.0), f"{steps}: {extra[tiny].max():.3g} ulps of |P| beyond the literal's error"
        relative = _ulps_beyond_the_literal(ours, literal, exact, np.abs(exact), dtype)
        assert np.all(relative[large] <= 6.0), f"{steps}: {relative[large].max():.3g} ulps of the result, e >= 1"
        checked += int(fine.sum())
    assert checked > 200 * m * 0.9


# products a seed-0 sweep does not reach: e*e*r merged is e * (1 - r), which split as a sum
# (ratio_through_sum) is e - (1 - r), off by an ulp of 1 where the value is e^2; (e*r)/e with
# e*r merged first is (1 - r)/e, its ulp of 1 divided by e
PINNED_PRODUCTS = [[("leaf", 0), ("mul", 0), ("mul", 1)], [("leaf", 0), ("mul", 0), ("mul", 1), ("div", 0)],
                   [("leaf", 1), ("mul", 0), ("div", 0)], [("leaf", 0), ("rmul", 0), ("rmul", 1), ("div", 0)]]


def test_merged_divisors_cancel_what_they_meet_and_nothing_else():
    """_cancel_merged, divisor by divisor, float64 against the exact values: a merged e*r
    below the bar cancels e and r above it, ((y*e)/(e*r))*r = y exactly; one behind another
    divisor, y*(e*r) / (z*(e*r)) = y/z and y*(e*r) / ((f*s)*(e*r)) = y/(f*s), f = exp(x),
    s = 1/(1+f), f*s merged and kept (at x = 40 the uncancelled 0/0 is nan); (e*r)/(z*(e*r))
    = 1/z and -3(e*r)/(e*r) = -3, nothing left on one side or both. A merged divisor
    with only e above it, (y*e)/(e*r), keeps it: y*(1+e), as tinygrad computes it (inf at
    x = 40: not here)."""
    values = np.array([-3.0, 0.5, 5.0, 25.0, 40.0])
    x, y, e, r = _sigmoid_parts(dtypes.float64, len(values))
    z = UOp.param("z", (len(values),), dtypes.float64)
    f = (x * LOG2E).exp2()
    s = (1.0 + f).reciprocal()
    feed = {"x": values, "y": np.full(len(values), 2.0), "z": np.full(len(values), -0.75)}
    exact_e = np.exp(-values)
    cases = [(((y * e) / (e * r)) * r, np.full(len(values), 2.0)),
             (y * (e * r) / (z * (e * r)), np.full(len(values), 2.0 / -0.75)),
             (y * (e * r) / ((f * s) * (e * r)), 2.0 * (1.0 + np.exp(values)) / np.exp(values)),
             ((e * r) / (z * (e * r)), np.full(len(values), 1 / -0.75)),  # nothing left above the bar
             (((e * r) * -3.0) / (e * r), np.full(len(values), -3.0))]  # nor below: the constant
    roots = simplify_nodes([c for c, _ in cases])
    for (case, exact), out in zip(cases, evaluate(roots, feed)):
        # 1e-13: f*s merged is off by an ulp of 1, 20 ulps of it at x = -3 (f = 0.05)
        np.testing.assert_allclose(out, exact, rtol=1e-13, err_msg=str(case))
    _, y3, e3, r3 = _sigmoid_parts(dtypes.float64, 3)
    out = evaluate(simplify_nodes([(y3 * e3) / (e3 * r3)]), {"x": values[:3], "y": feed["y"][:3]})[0]
    np.testing.assert_allclose(out, 2.0 * (1.0 + exact_e[:3]), rtol=1e-12)  # 1 - r is off by an ulp of 1: e = 7e-3


def test_a_sum_is_split_only_for_a_ratio_that_merges():
    """ratio_through_sum splits e * (t + y) only where e*t then merges: with t = (z/(1+e))/e
    (the product divides by e, sigmoid_ratio leaves it) it keeps the literal's bits, where a
    split would round e*t and e*y apart."""
    values = np.linspace(-6.0, 30.0, 64)
    x, y, e, r = _sigmoid_parts(dtypes.float64, len(values))
    z = UOp.param("z", (len(values),), dtypes.float64)
    expr = e * ((z / (1.0 + e)) / e + y)
    rng = np.random.default_rng(1)
    feed = {"x": values, "y": rng.uniform(-2, 2, len(values)), "z": rng.uniform(-2, 2, len(values))}
    literal = reference_evaluate([expr], feed)[0]
    np.testing.assert_array_equal(evaluate(simplify_nodes([expr]), feed)[0], literal)
