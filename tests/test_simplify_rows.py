"""Every simplification row on its own: each row is applied alone (a table of that one row)
to a pool of expressions; wherever it rewrites one, the values before and after must be
equal bit for bit (EXACT: -0.0, inf and nan inputs included; every NaN counts as one
value), or within the row's stated ulps (TINYGRAD, on normal-range inputs). Every row
must rewrite at least one expression of the pool, so none goes untested."""

import math

import numpy as np
import pytest

from uopcli import Ops, UOp, dtypes, evaluate
from uopcli.core.pattern import PatternMatcher
from uopcli.core.simplify import EXACT, TINYGRAD_ROWS, simplify_nodes
from uopcli.core.simplify.walk import Rewriter

from _row_scale import row_scale

EDGES = [-0.0, 0.0, math.inf, -math.inf, math.nan, 1.5, -2.25, 3e-39, 3e38, -7.0, 0.1, 1e-3]
N = len(EDGES)


def _values(dtype, values):
    return np.array(values, dtype=np.dtype(dtype))


def _edge_inputs():
    x, y = _values("float32", EDGES), _values("float32", EDGES[::-1])
    h = _values("float16", [-0.0, 0.0, math.inf, -math.inf, math.nan, 1.5, -2.25, 3e-6, 6e4, -7.0, 0.1, 1e-3])
    i = _values("int32", [0, -1, 1, 2**31 - 1, -2**31, 7, -7, 100, 3, -3, 12, 5])
    i8 = _values("int8", [0, -1, 1, 127, -128, 7, -7, 100, 3, -3, 12, 5])
    c = np.array([True, False] * (N // 2))
    b = np.arange(N, dtype=np.float32).reshape(N, 1)
    return {"x": x, "y": y, "h": h, "i": i, "i8": i8, "c": c, "s": np.array(-0.0, np.float32), "m": x.reshape(3, 4), "b": b,
            "k": np.array(-5, np.int32)}


def _params():
    return dict(x=UOp.param("x", (N,)), y=UOp.param("y", (N,)), h=UOp.param("h", (N,), dtypes.float16),
                i=UOp.param("i", (N,), dtypes.int32), i8=UOp.param("i8", (N,), dtypes.int8),
                c=UOp.param("c", (N,), dtypes.bool), s=UOp.param("s", ()), m=UOp.param("m", (3, 4)),
                b=UOp.param("b", (N, 1)))


def _make(op, like, src, arg=None, dtype=None):
    return UOp.make(op, like.dtype if dtype is None else dtype, src, arg)


def exact_pool():
    """Expressions that exercise the EXACT rows, each with its own edge cases."""
    p = _params()
    x, y, h, i, i8, c, s, m, b = (p[k] for k in "x y h i i8 c s m b".split())
    two, three = UOp.const(2.0), UOp.const(3.0)
    buffer = UOp.buffer(np.arange(6, dtype=np.int32))
    return [
        x * 1.0, 1.0 * x, x / 1.0, i / 1,
        x + UOp.const(-0.0), UOp.const(-0.0) + x, x + 0.0, i + 0, 0 + i, x - 0.0, i - 0,
        c.cast(dtypes.float32) + 0.0, x.exp2() + 0.0, (x + 0.0) + 0.0,
        UOp.param("k", (), dtypes.int32) * 0, x + x, i + i,
        -(-x), -(x * 2.5), (-x) * 2.5, (-x) / 2.5, (-x) * (-y), x + (-y), (-x) + y, x - (-y), (-x) * y, x * (-y),
        (-y) / x, m + (-(m.sum(1, keepdim=True))).expand(3, 4), (-(m.sum(1, keepdim=True))).expand(3, 4) + m,
        (i * 3) * 5,
        _make(Ops.CAST, x, (x,)), h.cast(dtypes.float32).cast(dtypes.float16), i8.cast(dtypes.int32).cast(dtypes.int8),
        c.cast(dtypes.float32).cast(dtypes.bool), i8.cast(dtypes.float32).cast(dtypes.int8),
        c.where(x, x), _make(Ops.WHERE, x, (UOp.const(True), x, y)), _make(Ops.WHERE, x, (UOp.const(False), x, y)),
        c.where(1.0, 0.0), c.where(1.0, UOp.const(-0.0)), c.where(i, 0) * 1,
        x * (two * three), x + (two / three), x + (three - two), x + (two - three) * 0.5, x * two.maximum(three),
        x * -three, x * (UOp.const(2) & 3).cast(dtypes.float32), x * (UOp.const(6) | 1).cast(dtypes.float32),
        x * (UOp.const(6) ^ 3).cast(dtypes.float32), x * two.sqrt(), x * two.eq(three).cast(dtypes.float32),
        x * two.ne(three).cast(dtypes.float32), x * (three < two).cast(dtypes.float32),
        x * UOp.const(3.0, dtypes.float64).cast(dtypes.float32), x * UOp.const(-0.0).sqrt(), x + three.reciprocal(),
        x * (UOp.const(1e38) * 10.0), x + UOp.const(math.nan) * 0.0, (UOp.const(7) // 2).cast(dtypes.float32) * x,
        x * (two < three).cast(dtypes.float32), x * UOp.const(2.5).cast(dtypes.int32).cast(dtypes.float32),
        x * UOp.const(-0.0) - UOp.const(0.0), x * (-UOp.const(0.0)),
        x * UOp.full((N,), 2.0), s + x, x * s.broadcast_to((N,)), UOp.full((N,), 2.0).sqrt() * x,
        UOp.full((N,), 2.0) + UOp.full((N,), -0.0), c.where(UOp.full((N,), 1.0), UOp.full((N,), 0.0)),
        UOp.full((3, 4), 2.0).reshape(12) * x, UOp.full((3, 4), 2.0).permute(1, 0).reshape(12) + x,
        _make(Ops.RESHAPE, x, (x,), (N,)), x.reshape(3, 4).reshape(N, 1), _make(Ops.EXPAND, x, (x,), (N,)),
        m.permute(1, 0).permute(1, 0), m.reshape(2, 3, 2).permute(1, 0, 2).permute(0, 2, 1), _make(Ops.PERMUTE, m, (m,), (0, 1)), _make(Ops.PAD, x, (x,), ((0, 0),)),
        _make(Ops.SHRINK, x, (x,), ((0, N),)), _make(Ops.FLIP, x, (x,), (False,)), x.flip(0).flip(0),
        m.reshape(3, 1, 4).permute(2, 1, 0).reshape(4, 3), m.reshape(1, 3, 4).permute(0, 2, 1).reshape(4, 3, 1),
        m.reshape(3, 4, 1).permute(2, 0, 1).reshape(3, 4),
        (buffer + UOp.buffer(np.ones(6, np.int32))) * 2, buffer.reshape(2, 3).permute(1, 0),
        buffer.reshape(6, 1).expand(6, 2).eq(3), buffer.r(Ops.ADD, (0,)), buffer.r(Ops.MAX, (0,)),
        x.reshape(N, 1).r(Ops.MAX, (1,)), x.reshape(N, 1).r(Ops.MUL, (1,)), c.cast(dtypes.float32).reshape(N, 1).r(Ops.ADD, (1,)),
        i.reshape(N, 1).r(Ops.ADD, (1,)), x.reshape(N, 1).r(Ops.ADD, (1,)),
        x.reshape(N, 1).expand(N, 4).r(Ops.MAX, (1,)), b.expand(N, 5).r(Ops.MAX, (0, 1)),
        m.reshape(3, 1, 4).expand(3, 5, 4).r(Ops.MAX, (1,)),
    ]


def _bits(value):
    """An array's bits, with every NaN the same value (IEEE leaves a NaN's sign and payload
    to the machine)."""
    a = np.array(value)
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
    return a.dtype.str, a.shape, a.tobytes()


def _row_tables(matcher):
    return [(k, Rewriter(PatternMatcher([row]))) for k, row in enumerate(matcher.rules)]


def _describe(row) -> str:
    fn = row[1]
    return f"{getattr(fn, '__name__', 'row')} {row[0]!r}"


# Function scope, not module: the rows run inside each test that uses the fixture, so
# `make mutation` (mutmut runs only the tests that reached a mutated function) runs the
# test that compares values too, not only the first test that built the fixture.
@pytest.fixture
def exact_results():
    """For every EXACT row, the expressions it rewrote: (before, after) pairs."""
    pool = exact_pool()
    rewritten = {}
    for k, rewriter in _row_tables(EXACT):
        outs = rewriter.rewrite_roots(pool)
        rewritten[k] = [(before, after) for before, after in zip(pool, outs) if after is not before]
    return pool, rewritten


def test_every_exact_row_rewrites_some_expression(exact_results):
    _, rewritten = exact_results
    untested = [_describe(EXACT.rules[k]) for k, pairs in rewritten.items() if not pairs]
    assert not untested, f"rows no expression exercises: {untested}"


def test_every_exact_row_keeps_every_bit(exact_results):
    _, rewritten = exact_results
    inputs = _edge_inputs()
    for k, pairs in rewritten.items():
        befores = [b for b, _ in pairs]
        afters = [a for _, a in pairs]
        feed = {name: value for name, value in inputs.items()}
        used = {n.arg for e in befores for n in e.toposort() if n.op == Ops.PARAM}
        values = evaluate(befores + afters, {name: feed[name] for name in used})
        for j, (before, after) in enumerate(pairs):
            assert after.shape == before.shape and after.dtype is before.dtype
            assert _bits(values[j]) == _bits(values[len(pairs) + j]), \
                f"{_describe(EXACT.rules[k])} changed a value: {values[j]} -> {values[len(pairs) + j]}"


def test_exact_rows_leave_what_is_not_exact():
    p = _params()
    x, s = p["x"], p["s"]
    keep = [x + 0.0,                 # -0.0 + 0.0 is +0.0
            x * 0.0,                 # inf * 0 is nan
            x - x,                   # inf - inf is nan
            x.reshape(N, 1).r(Ops.ADD, (1,)),  # numpy's sum turns -0.0 into +0.0
            x.reshape(N, 1).expand(N, 3).r(Ops.ADD, (1,)),  # a sum of copies rounds
            UOp.const(2.0).exp2() * x]  # transcendental constants are not folded
    rewriter = Rewriter(EXACT)
    out = rewriter.rewrite_roots(keep)
    for before, after in zip(keep, out):
        assert after is before, f"{before.op} was rewritten"
    # s * broadcast(1.0) is s broadcast: the shape is kept by broadcasting s, not by the MUL
    assert Rewriter(EXACT).rewrite_roots([s * UOp.const(1.0).broadcast_to((N,))])[0] is s.broadcast_to((N,))


# ----------------------------------------------------------------------------- TINYGRAD rows

MODERATE = np.array([0.75, -1.5, 2.0, 3.25, -0.1, 10.0, 0.3, -4.5, 1e-3, 7.0, -2.0, 0.5], np.float32)


def tinygrad_pool():
    p = _params()
    x, y, m, h = p["x"], p["y"], p["m"], p["h"]
    e = (x * -1.4426950408889634).exp2()
    ratio = (e + 1).reciprocal()
    return [
        (x * 1.7) * 2.3, 2.3 * (x * 1.7), (x / 1.7) * 2.3, (x * 1.7) / 2.3, (h * 1.7) * 2.3,
        x / (y * 3.0),
        (x + 1.5) + 2.25, 1.0 + (x - 1.0), (x - 0.5) + 0.5, (x * 2 - 1) + 1,
        e * ratio, ratio * e, e * (ratio * ratio) * 0.6931471805599453, -(y * (ratio * ratio)) * e,
        (y / ((e + 1) * 0.6931471805599453)) * e, e / (1 + e), x.sigmoid() * (1 - x.sigmoid()) * e,
        e * (y / (1 + e) - ratio * (1 - ratio)), (y - ratio * x) * e,  # x/(1+x)'s gradient: through a sum
        x.reshape(N, 1).expand(N, 5).r(Ops.ADD, (1,)), m.reshape(3, 1, 4).expand(3, 6, 4).r(Ops.ADD, (1,)),
        m.reshape(1, 3, 4).expand(5, 3, 4).r(Ops.ADD, (0,)),
        (-m).r(Ops.ADD, (1,)), (-x).reshape(3, 4).r(Ops.ADD, (0, 1)),
    ]


def _ulps(a, b, scale):
    spacing = np.spacing(np.maximum(np.abs(scale), np.finfo(a.dtype).tiny).astype(a.dtype))
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / spacing.astype(np.float64)


def _bound(row, before, after) -> float:
    if row.ulps == "count":  # the number of copies summed: the grown axes' sizes
        e = before.src[0]
        return float(math.prod(e.shape[a] for a in before.arg[1]))
    return float(row.ulps)


# Function scope here too, not module: the rows run inside each test that uses the fixture, so
# `make mutation` (mutmut runs only the tests that reached a mutated function) runs the
# test that compares values too, not only the first test that built the fixture.
@pytest.fixture
def tinygrad_results():
    pool = tinygrad_pool()
    rewritten = {}
    for k, row in enumerate(TINYGRAD_ROWS):
        bookkeeping = [(r.pattern, r.fn) for r in TINYGRAD_ROWS if r.fn.__name__ == "note_ratio"]
        outs = Rewriter(PatternMatcher(bookkeeping + [(row.pattern, row.fn)])).rewrite_roots(pool)
        rewritten[k] = [(before, after) for before, after in zip(pool, outs) if after is not before]
    return rewritten


def test_every_tinygrad_row_rewrites_some_expression(tinygrad_results):
    untested = [TINYGRAD_ROWS[k].fn.__name__ for k, pairs in tinygrad_results.items()
                if not pairs and TINYGRAD_ROWS[k].fn.__name__ != "note_ratio"]  # bookkeeping, rewrites nothing
    assert not untested, f"rows no expression exercises: {untested}"


def test_every_tinygrad_row_stays_within_its_ulps(tinygrad_results):
    feed_all = {"x": MODERATE, "y": MODERATE[::-1].copy(), "m": MODERATE.reshape(3, 4),
                "h": MODERATE.astype(np.float16)}
    for k, pairs in tinygrad_results.items():
        row = TINYGRAD_ROWS[k]
        for before, after in pairs:
            used = {n.arg for n in before.toposort() if n.op == Ops.PARAM}
            feed = {name: feed_all[name] for name in used}
            a, b = (np.asarray(v) for v in evaluate([before, after], feed))
            assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
            ulps = _ulps(a, b, row_scale(row, before, a, after, feed))
            assert ulps.max() <= _bound(row, before, after), \
                f"{row.fn.__name__} ({row.follows}) moved a value by {ulps.max()} ulps: {a} -> {b}"


@pytest.mark.parametrize("one_side", ["e + 1", "1 + e"])
def test_the_ratio_row_makes_sigmoid_gradient_finite_where_the_literal_is_nan(one_side):
    x = UOp.param("x", (4,))
    e = (x * -1.4426950408889634).exp2()
    one = UOp.const(1.0)
    y = UOp.make(Ops.RECIPROCAL, dtypes.float32, (UOp.make(Ops.ADD, dtypes.float32, (e, one) if one_side == "e + 1" else (one, e)),))
    grad = -(y * y) * e  # sigmoid's gradient as the rules write it
    out = Rewriter(EXACT, PatternMatcher([(r.pattern, r.fn) for r in TINYGRAD_ROWS])).rewrite_roots([grad])[0]
    values = np.array([-1000.0, -100.0, 0.0, 100.0], np.float32)
    literal, simplified = evaluate([grad, out], {"x": values})
    assert np.isnan(literal[0]) and np.all(np.isfinite(simplified))
    with np.errstate(over="ignore"):  # exp(1000) is inf in float64 too: sigmoid is exactly 0 there
        sigmoid = 1 / (1 + np.exp(-values.astype(np.float64)))
    np.testing.assert_allclose(simplified, -sigmoid * (1 - sigmoid), atol=1e-7)


def test_the_ratio_row_needs_the_constant_one():
    """e * 1/(e + k) is 1 - 1/(e + k) only for k the CONST 1: not for another constant, nor
    for a PARAM whose name is the number 1 (a slot); those are only divided, e / (e + k), as
    tinygrad's devices divide (the quotient row)."""
    x, slot = UOp.param("x", (4,)), UOp.param(1, (4,))
    e = (x * -1.4426950408889634).exp2()
    values = {x: np.array([-2.0, 0.0, 0.5, 3.0], np.float32), slot: np.full(4, 3.0, np.float32)}
    for k in (UOp.const(2.0), slot):
        total = UOp.make(Ops.ADD, dtypes.float32, (e, k))
        expr, divided = e * total.reciprocal(), UOp.make(Ops.FDIV, dtypes.float32, (e, total))
        out = simplify_nodes([expr])[0]
        quotient, simplified = evaluate([divided, out], values)
        assert _bits(quotient) == _bits(simplified), f"e * 1/(e + {k.op} {k.arg}) was rewritten: {quotient} -> {simplified}"
