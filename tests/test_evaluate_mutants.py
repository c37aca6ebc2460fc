"""The numpy evaluator's values where its first mutation run (docs/mutation.md, 2026-12-07)
found the tests blind: each test pins a value (bit for bit where the evaluator promises it:
-0.0, nan, integer wrap, float16 rounding, the dtype) against an independent numpy
computation, through the public evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import EvaluationError, Graph, Ops, UOp, dtypes
from uopcli.backends.numpy import EvalStats, evaluate, evaluate_graph

RNG = np.random.default_rng(2026)


def bits(value, expected):
    """The same dtype, shape and bytes (so -0.0 is not 0.0 and nan is the same nan)."""
    value, expected = np.asarray(value), np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    assert value.tobytes() == expected.tobytes(), (value, expected)


def one(output, **inputs):
    (value,) = evaluate([output], inputs)
    return value


# ----------------------------------------------------------------------------- evaluate_graph

def test_evaluate_graph_simplifies_as_asked():
    # the sigmoid's literal gradient is nan at -1000 (exp overflows); tinygrad's rewrites
    # make it 0: "exact" keeps every bit of the literal graph, "tinygrad" does not
    from uopcli import differentiate
    x = UOp.param("x", (2,))
    graph, _ = differentiate(Graph({"y": x.sigmoid().sum()}), ["x"])
    points = {"x": np.array([-1000.0, 0.0], np.float32)}
    literal = evaluate_graph(graph, points, simplify=None)["grad_x"]
    bits(evaluate_graph(graph, points, simplify="exact")["grad_x"], literal)
    assert np.isnan(literal[0]) and literal[1] == 0.25
    bits(evaluate_graph(graph, points, simplify="tinygrad")["grad_x"], np.array([0.0, 0.25], np.float32))


def test_evaluate_graph_refusals_in_full():
    x = UOp.param("x", (2,))
    graph = Graph({"y": x * 2.0})
    with pytest.raises(EvaluationError) as error:
        evaluate_graph(graph, {"x": np.ones(2, np.float32)}, simplify="fast")
    assert str(error.value) == "simplify must be one of tinygrad, exact or None, got 'fast'"
    with pytest.raises(EvaluationError) as error:
        evaluate_graph(Graph({"y": UOp.param("a", (2,)) + UOp.param("b", (2,))}),
                       {"a": np.ones(2, np.float32), "c": np.ones(2, np.float32)})
    assert str(error.value) == "unknown input 'c'; the graph's inputs: a, b"
    with pytest.raises(EvaluationError) as error:
        evaluate_graph(Graph({"y": UOp.const(1.0) + 1.0}), {"c": np.ones(2, np.float32)})
    assert str(error.value) == "unknown input 'c'; the graph's inputs: none"


def test_evaluate_graph_fills_the_stats_it_is_given():
    x = UOp.param("x", (4,))
    stats = EvalStats()
    out = evaluate_graph(Graph({"y": (x * 2.0).sin()}), {"x": np.ones(4, np.float32)}, stats=stats)
    bits(out["y"], np.sin(np.full(4, 2.0, np.float32)))
    assert stats.nodes_evaluated == 3 and stats.seconds > 0  # CONST, MUL, SIN
    assert stats.peak_bytes == 20  # the CONST's 4 bytes and one float32[4]: SIN writes into the MUL's dying array


# ----------------------------------------------------------------------------- call bodies

def test_renaming_nodes_inside_a_function_body_share_their_sources_value():
    x = UOp.param("x", (3,))
    xv = np.array([1.5, -2.0, 4.0], np.float32)

    def body(s):
        doubled = (s * 2.0).contiguous()
        return (doubled.detach() + 1.0, doubled.contiguous_backward() * 3.0)

    f = UOp.trace_function("f", body, x)
    first, second = evaluate([f[0], f[1]], {"x": xv})
    bits(first, xv * np.float32(2) + np.float32(1))
    bits(second, xv * np.float32(2) * np.float32(3))


def test_store_and_after_inside_a_function_body_are_the_stored_value():
    x = UOp.param("x", (3,))
    xv = np.array([1.5, -2.0, 4.0], np.float32)

    def body(s, dest):
        store = dest.store(s * 5.0)
        return (dest.after(store) + 1.0,)

    f = UOp.trace_function("f", body, x, x * 0.0)
    bits(one(f[0], x=xv), xv * np.float32(5) + np.float32(1))


def test_a_body_writing_into_a_dying_array_never_overwrites_a_view_of_it():
    # m + m.T inside a body: m dies at the ADD, but the PERMUTE is a view of it, read there
    x = UOp.param("x", (3, 3))
    xv = np.arange(9, dtype=np.float32).reshape(3, 3)
    f = UOp.trace_function("f", lambda s: ((m := s * 2.0) + m.permute((1, 0)),), x)
    bits(one(f[0], x=xv), xv * 2 + (xv * 2).T)


# ----------------------------------------------------------------------------- the op table

def test_integer_power_with_no_negative_exponent_wraps_as_repeated_products():
    a, b = UOp.param("a", (5,), dtypes.int32), UOp.param("b", (5,), dtypes.int32)
    av, bv = np.array([3, -2, 7, 0, -1], np.int32), np.array([40, 31, 0, 0, 7], np.int32)
    wrapped = [(int(x) ** int(y) + 2 ** 31) % 2 ** 32 - 2 ** 31 for x, y in zip(av, bv)]  # C's int32 product
    bits(one(a.pow(b), a=av, b=bv), np.array(wrapped, np.int32))
    # beside a negative exponent, the others still wrap (not computed in float64 and cast)
    bv[4] = -2  # (-1)^-2 is 1
    wrapped[4] = 1
    bits(one(a.pow(b), a=av, b=bv), np.array(wrapped, np.int32))
    u, v = UOp.param("u", (3,), dtypes.uint8), UOp.param("v", (3,), dtypes.uint8)
    bits(one(u.pow(v), u=np.array([3, 2, 255], np.uint8), v=np.array([5, 9, 2], np.uint8)),
         np.array([243, 0, 1], np.uint8))  # 512 and 65025 wrap to 0 and 1


def test_minus_one_to_a_negative_power_is_one_or_minus_one_by_its_parity():
    a, b = UOp.param("a", (6,), dtypes.int64), UOp.param("b", (6,), dtypes.int64)
    av = np.array([-1, -1, -1, 1, 2, -2], np.int64)
    bv = np.array([-2, -3, -4, -5, -1, -1], np.int64)
    bits(one(a.pow(b), a=av, b=bv), np.array([1, -1, 1, 1, 0, 0], np.int64))


def test_a_sum_over_an_empty_axis_is_plus_zero_and_over_negative_zeros_minus_zero():
    empty = UOp.param("e", (0, 3))
    bits(one(empty.r("ADD", (0,)), e=np.zeros((0, 3), np.float32)), np.zeros((1, 3), np.float32))
    x = UOp.param("x", (1, 4))
    zeros = np.array([[-0.0, -0.0, -0.0, -0.0]], np.float32)
    bits(one(x.r("ADD", (0, 1)), x=zeros), np.full((1, 1), -0.0, np.float32))
    mixed = np.array([[-0.0, 0.0, -0.0, -0.0]], np.float32)
    bits(one(x.r("ADD", (0, 1)), x=mixed), np.zeros((1, 1), np.float32))


def test_mulacc_of_scalars():
    a, b, c = UOp.param("a", ()), UOp.param("b", ()), UOp.param("c", ())
    av, bv, cv = np.float32(1.5), np.float32(-3.0), np.float32(0.25)
    bits(one(a.mulacc(b, c), a=np.array(av), b=np.array(bv), c=np.array(cv)), np.array(av * bv + cv))
    v = UOp.param("v", (3,))
    vv = np.array([1.0, 2.0, -4.0], np.float32)
    bits(one(a.mulacc(b, v), a=np.array(av), b=np.array(bv), v=vv), av * bv + vv)


def _windows_3x3(value):
    """A stride-1 3x3 pool's windows of an (N, C, H, W) array, (N, C, H-2, W-2, 3, 3)."""
    return np.lib.stride_tricks.sliding_window_view(value, (3, 3), axis=(2, 3))


def _running(windows, ufunc, dtype):
    """ufunc over the 9 window positions, one position at a time in row-major order, in dtype."""
    total = windows[..., 0, 0].astype(dtype)
    for i in range(3):
        for j in range(3):
            if i or j:
                total = ufunc(total, windows[..., i, j].astype(dtype))
    return total


def _pool_reduce(value, op, dtype):
    x = UOp.param("x", value.shape, dtype)
    return one(x._pool((3, 3), 1, 1).r(op, (4, 5)).reshape(x.shape[:2] + (value.shape[2] - 2, value.shape[3] - 2)),
               x=value)


def test_window_sums_of_float16_accumulate_in_float32_and_round_once():
    # 66 x 66 images: 4,096 windows of 9, summed one window position at a time
    value = RNG.integers(0, 2049, (1, 2, 66, 66)).astype(np.float16)  # integers: float32 sums are exact
    exact = _windows_3x3(value.astype(np.int64)).sum((-2, -1))
    bits(_pool_reduce(value, "ADD", dtypes.float16), exact.astype(np.float64).astype(np.float16))


def test_window_sums_of_float32_accumulate_in_float32():
    value = np.ones((1, 1, 66, 66), np.float32)
    value[0, 0, ::4, 1::3] = 2.0 ** 24  # 1 + 2^24 rounds to 2^24 in float32, not in float64
    expected = _running(_windows_3x3(value), np.add, np.float32)
    bits(_pool_reduce(value, "ADD", dtypes.float32), expected)
    assert not np.array_equal(expected, _windows_3x3(value.astype(np.float64)).sum((-2, -1)).astype(np.float32))


def test_window_sums_of_int32_wrap():
    value = RNG.integers(2 ** 28, 2 ** 30, (1, 1, 66, 66)).astype(np.int32)
    exact = _windows_3x3(value.astype(np.int64)).sum((-2, -1))
    bits(_pool_reduce(value, "ADD", dtypes.int32), exact.astype(np.int32))  # int64 -> int32 wraps


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_window_products_multiply_in_their_own_dtype(dtype):
    value = RNG.uniform(0.5, 2.0, (1, 1, 66, 66)).astype(dtype)
    expected = _running(_windows_3x3(value), np.multiply, dtype)
    bits(_pool_reduce(value, "MUL", dtypes.float16 if dtype == np.float16 else dtypes.float32), expected)


# ----------------------------------------------------------------------------- one-hot selections and scatter-adds

def _one_hot(rows: int, n: int, cols: int):
    """index (rows, 1, cols) == arange(n) along axis 1, both expanded to (rows, n, cols): the
    class axis is not the last one, and an axis (cols) is kept after it."""
    index = UOp.param("i", (rows, 1, cols), dtypes.int32)
    classes = UOp.arange(n).reshape((1, n, 1))
    return index, index.expand((rows, n, cols)).eq(classes.expand((rows, n, cols)))


@pytest.mark.parametrize("rows, n, cols", [(5, 4, 2), (5, 2, 3), (1, 4, 2)])
def test_a_selection_along_a_middle_axis_picks_each_value_exactly(rows, n, cols):
    index, mask = _one_hot(rows, n, cols)
    v = UOp.param("v", (rows, n, cols))
    iv = RNG.integers(-1, n + 1, (rows, 1, cols)).astype(np.int32)   # some outside [0, n): nothing picked
    vv = RNG.standard_normal((rows, n, cols)).astype(np.float32)
    vv[:, ::2] = -0.0  # a picked -0.0 plus the masked-out +0.0s is +0.0
    hot = iv == np.arange(n).reshape(1, n, 1)
    stats = EvalStats()
    plus, minus = evaluate([mask.where(v, 0.0).r("ADD", (1,)), mask.where(v, -0.0).r("ADD", (1,))],
                           {"i": iv, "v": vv}, stats=stats)
    assert stats.contractions == 2
    bits(plus, np.where(hot, vv, np.float32(0)).sum(1, keepdims=True))  # -0.0 + 0.0 is 0.0
    picked = np.take_along_axis(vv, np.clip(iv, 0, n - 1), axis=1)
    bits(minus, np.where((iv >= 0) & (iv < n), picked, np.float32(-0.0)))  # -0.0 fills: the value itself


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_scatter_add_along_another_axis_adds_each_value_at_its_class(dtype):
    rows, n, cols = 6, 4, 2
    index, mask = _one_hot(rows, n, cols)
    kind = dtypes.float32 if dtype == np.float32 else dtypes.int32
    g = UOp.param("g", (rows, 1, cols), kind)
    iv = RNG.integers(-1, n + 1, (rows, 1, cols)).astype(np.int32)
    iv[:3, 0, 0] = 2  # three values added at one class, in index order
    iv[3:, 0, 0] = np.where(iv[3:, 0, 0] == 2, 3, iv[3:, 0, 0])  # and no fourth, whatever RNG's state
    if dtype == np.float32:
        gv = RNG.standard_normal((rows, 1, cols)).astype(np.float32)
        gv[:3, 0, 0] = [2.0 ** 24, 1.0, 1.0]  # float32 adds give 2^24 (float64 ones 2^24 + 2)
    else:
        gv = RNG.integers(2 ** 29, 2 ** 30, (rows, 1, cols)).astype(np.int32)  # sums wrap
    stats = EvalStats()
    (got,) = evaluate([mask.where(g.expand((rows, n, cols)), 0).r("ADD", (0,))], {"i": iv, "g": gv}, stats=stats)
    assert stats.contractions == 1
    expected = np.zeros((1, n, cols), dtype)
    with np.errstate(over="ignore"):  # int32 wraps
        _add_at_classes(expected, iv, gv, n)
    bits(got, expected)
    if dtype == np.float32:
        assert got[0, 2, 0] == np.float32(2.0 ** 24)


def _add_at_classes(expected, iv, gv, n):
    rows, _, cols = iv.shape
    for r in range(rows):
        for c in range(cols):
            if 0 <= iv[r, 0, c] < n:
                expected[0, iv[r, 0, c], c] += gv[r, 0, c]  # in dtype: float32 rounding, int32 wrap


def _sum_of_two_wheres(fill_a: float, fill_b: float, values_a, values_b, masks):
    m, n = values_a.shape[1:]
    a, b = UOp.param("a", (1, m, n)), UOp.param("b", (1, m, n))
    p, q = UOp.param("p", (4, m, n), dtypes.bool), UOp.param("q", (4, m, n), dtypes.bool)
    total = (p.where(a.expand((4, m, n)), fill_a) + q.where(b.expand((4, m, n)), fill_b)).r("ADD", (1,))
    inputs = {"a": values_a, "b": values_b, "p": masks[0], "q": masks[1]}
    return one(total, **inputs), inputs


def _expected_two_wheres(fill_a, fill_b, inputs):
    terms = (np.where(inputs["p"], inputs["a"], np.float32(fill_a))
             + np.where(inputs["q"], inputs["b"], np.float32(fill_b)))
    total = terms.astype(np.float64).sum(1, keepdims=True).astype(np.float32)  # exact here: few small values
    only_negative_zeros = np.all(np.signbit(terms) & (terms == 0), axis=1, keepdims=True)
    return np.where(only_negative_zeros, np.float32(-0.0), total)  # IEEE: a sum is -0.0 only of -0.0s


@pytest.mark.parametrize("fills", [(0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 0.0)])
def test_a_sum_of_two_selections_keeps_each_zeros_sign(fills):
    m, n = 5, 3
    signs = RNG.integers(0, 2, (2, 1, m, n)).astype(bool)
    zeros = np.where(signs, np.float32(-0.0), np.float32(0.0))
    values_a, values_b = zeros[0], zeros[1]
    values_a[0, 0, 0] = 1.5  # one nonzero sum
    values_a[0, :, 1:], values_b[0, :, 1] = 0.0, -0.0  # column 1: only the first selection has +0.0s,
    values_b[0, :, 2] = 0.0                              # column 2: both have
    masks = RNG.integers(0, 2, (2, 4, m, n)).astype(bool)
    masks[:, 0] = True  # every element selected in one row: the values' own signs decide
    masks[:, 1] = False  # none in another: the fills' signs decide
    got, inputs = _sum_of_two_wheres(*fills, values_a, values_b, masks)
    bits(got, _expected_two_wheres(*fills, inputs))


def test_a_sum_of_two_selections_over_a_non_finite_value_adds_both():
    m, n = 5, 3
    values_a = RNG.standard_normal((1, m, n)).astype(np.float32)
    values_b = RNG.standard_normal((1, m, n)).astype(np.float32)
    values_a[0, 2, 1] = np.inf  # inf * 0 would be nan: the WHEREs run as written
    masks = RNG.integers(0, 2, (2, 4, m, n)).astype(bool)
    for fills in ((0.0, 0.0), (-0.0, -0.0)):
        got, inputs = _sum_of_two_wheres(*fills, values_a, values_b, masks)
        expected = (np.where(inputs["p"], values_a, np.float32(fills[0]))
                    + np.where(inputs["q"], values_b, np.float32(fills[1]))).sum(1, keepdims=True)
        np.testing.assert_allclose(got, expected, rtol=1e-6)  # float32 sums of 5 in some order
        assert np.array_equal(np.isinf(got), np.isinf(expected)) and np.isinf(got).any()


def test_a_selection_broadcast_along_a_kept_axis_signs_its_zeros_as_the_where_does():
    # mask and values both broadcast along the kept axis 0: the sum is computed once and
    # broadcast (a read-only result), then turned from -0.0 to +0.0 where something was masked out
    m, n = 6, 4
    p, v = UOp.param("p", (1, m, n), dtypes.bool), UOp.param("v", (1, m, n))
    total = p.expand((3, m, n)).where(v.expand((3, m, n)), 0.0).r("ADD", (1,))
    pv = RNG.integers(0, 2, (1, m, n)).astype(bool)
    pv[0, :, 0] = True  # column 0: everything selected
    vv = RNG.standard_normal((1, m, n)).astype(np.float32)
    vv[0, :, :2] = -0.0  # columns 0 and 1 hold only -0.0
    got = one(total, p=pv, v=vv)
    terms = np.where(pv, vv, np.float32(0))
    expected = np.broadcast_to(np.where(np.all(np.signbit(terms) & (terms == 0), axis=1, keepdims=True),
                                        np.float32(-0.0), terms.sum(1, keepdims=True, dtype=np.float64).astype(np.float32)),
                               (3, 1, n))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert np.array_equal(np.signbit(got), np.signbit(expected)) and got[0, 0, 0] == 0 and np.signbit(got[0, 0, 0])


def test_a_shape_0_factor_anywhere_in_a_product_scales_it():
    x, y = UOp.param("x", (4, 3)), UOp.param("y", (3, 5))
    two = UOp.const(2.0)
    xv = RNG.integers(-8, 8, (4, 3)).astype(np.float32)  # small integers: every sum is exact
    yv = RNG.integers(-8, 8, (3, 5)).astype(np.float32)
    xe, ye = x.reshape((4, 3, 1)).expand((4, 3, 5)), y.reshape((1, 3, 5)).expand((4, 3, 5))
    products = [UOp.make(Ops.MUL, dtypes.float32, (UOp.make(Ops.MUL, dtypes.float32, (two, xe)), ye)),
                UOp.make(Ops.MUL, dtypes.float32, (xe, UOp.make(Ops.MUL, dtypes.float32, (two, ye)))),
                UOp.make(Ops.MUL, dtypes.float32, (UOp.make(Ops.MUL, dtypes.float32, (xe, two)), ye))]
    stats = EvalStats()
    got = evaluate([p.r("ADD", (1,)) for p in products], {"x": xv, "y": yv}, stats=stats)
    assert stats.contractions == 3
    for value in got:
        bits(value, (2 * xv @ yv).reshape(4, 1, 5))


def test_a_where_of_shape_0_picks_its_branch_bit_for_bit():
    c, a, b = UOp.param("c", (), dtypes.bool), UOp.param("a", ()), UOp.param("b", ())
    for cv in (True, False):
        for av, bv in ((-0.0, 2.5), (np.nan, -0.0), (0.0, -np.inf), (3.0, 0.0)):
            expected = np.float32(av if cv else bv)
            bits(one(c.where(a, b), c=np.array(cv), a=np.array(av, np.float32), b=np.array(bv, np.float32)),
                 np.array(expected))


# ----------------------------------------------------------------------------- scatter-adds over padded chains

def _windows_gradient(dtype, length: int = 12):
    """A 3-wide stride-1 window's input gradient spelled as a REDUCE ADD over a PAD chain (as
    the gradient of x._pool spells it): out[j] = g[j, 0] + g[j - 1, 1] + g[j - 2, 2]."""
    count = length - 2
    g = UOp.param("g", (1, 1, count, 3), dtype)
    rows = g.permute((0, 1, 3, 2)).pad(((0, 0), (0, 0), (0, 0), (0, 3)))          # (1, 1, 3, length + 1)
    flat = rows.reshape((1, 1, 3 * (length + 1))).pad(((0, 0), (0, 0), (0, length - 3)))  # (1, 1, 4 * length)
    return g, flat.reshape((1, 1, 1, 1, 4, length)).r("ADD", (4,))


def _windows_gradient_expected(gv, dtype):
    count = gv.shape[2]
    out = np.zeros(count + 2, dtype)
    for k in range(3):  # window position by window position, as the scatter adds them
        out[k:k + count] += gv[0, 0, :, k].astype(dtype)
    return out.reshape(1, 1, 1, 1, 1, count + 2)


def test_a_float16_scatter_add_sums_in_float32_and_rounds_once():
    g, grad = _windows_gradient(dtypes.float16)
    gv = RNG.integers(0, 2049, (1, 1, 10, 3)).astype(np.float16)  # integers: the float32 sums are exact
    stats = EvalStats()
    (got,) = evaluate([grad], {"g": gv}, stats=stats)
    assert stats.nodes_evaluated == 1  # one scatter-add step
    bits(got, _windows_gradient_expected(gv.astype(np.int64), np.int64).astype(np.float64).astype(np.float16))


def test_a_float32_scatter_add_sums_in_float32():
    g, grad = _windows_gradient(dtypes.float32)
    gv = np.ones((1, 1, 10, 3), np.float32)
    gv[0, 0, :, 0] = 2.0 ** 24  # 2^24 + 1 + 1 is 2^24 in float32, added window position by position
    got = one(grad, g=gv)
    bits(got, _windows_gradient_expected(gv, np.float32))
    assert got[0, 0, 0, 0, 0, 5] == np.float32(2.0 ** 24)


# ----------------------------------------------------------------------------- what the contraction pass takes in

def test_sums_of_sums_and_of_selections_with_other_fills():
    x, y = UOp.param("x", (4, 3)), UOp.param("y", (4, 3))
    p = UOp.param("p", (4, 3), dtypes.bool)
    c = UOp.param("c", (), dtypes.bool)
    xv = RNG.integers(-8, 8, (4, 3)).astype(np.float32)
    yv = RNG.integers(-8, 8, (4, 3)).astype(np.float32)
    xv[0, 0] = -0.0
    pv = RNG.integers(0, 2, (4, 3)).astype(bool)
    outputs = [(x + y).r("ADD", (0,)),                       # a sum of inputs: no product, no selection
               p.where(x, 1.0).r("ADD", (0,)),               # a fill of 1 is not a selection
               p.where(x, y).r("ADD", (1,)),
               c.where(x, 0.0).r("ADD", (0,))]               # a shape-() condition
    for cv in (True, False):
        inputs = {"x": xv, "y": yv, "p": pv, "c": np.array(cv)}
        # one at a time: each input read by that sum alone
        got = [one(out, **{k: v for k, v in inputs.items() if k in _input_names(out)}) for out in outputs]
        bits(got[0], (xv + yv).sum(0, keepdims=True))
        bits(got[1], np.where(pv, xv, np.float32(1)).sum(0, keepdims=True))
        bits(got[2], np.where(pv, xv, yv).sum(1, keepdims=True))
        bits(got[3], (xv if cv else np.zeros_like(xv)).sum(0, keepdims=True) + np.float32(0))


def _input_names(out) -> set:
    from uopcli.core.walks import toposort
    return {n.arg for n in toposort([out]) if n.op == Ops.PARAM}


def test_a_selection_read_elsewhere_is_evaluated_and_summed():
    x, y = UOp.param("x", (4, 3)), UOp.param("y", (4, 3))
    p, q = UOp.param("p", (4, 3), dtypes.bool), UOp.param("q", (4, 3), dtypes.bool)
    xv = RNG.standard_normal((4, 3)).astype(np.float32)
    yv = RNG.standard_normal((4, 3)).astype(np.float32)
    pv = RNG.integers(0, 2, (4, 3)).astype(bool)
    qv = RNG.integers(0, 2, (4, 3)).astype(bool)
    picked, other = p.where(x, 0.0), q.where(y, 0.0)
    got = evaluate([picked, picked.r("ADD", (1,)), (picked + other).r("ADD", (1,))], {"x": xv, "y": yv, "p": pv, "q": qv})
    expected = np.where(pv, xv, np.float32(0)), np.where(qv, yv, np.float32(0))
    bits(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[0].sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(got[2], (expected[0] + expected[1]).sum(1, keepdims=True), rtol=1e-6)


def test_a_product_cast_before_its_sum_is_rounded_in_its_own_dtype_first():
    # int8 products wrap before the CAST to int32; float32 products round before the CAST to
    # float64: the contraction may not multiply in the wider dtype
    a, b = UOp.param("a", (4, 6), dtypes.int8), UOp.param("b", (4, 6), dtypes.int8)
    av = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    bv = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    with np.errstate(over="ignore"):
        wrapped = (av * bv).astype(np.int32)
    bits(one((a * b).cast(dtypes.int32).r("ADD", (1,)), a=av, b=bv), wrapped.sum(1, keepdims=True, dtype=np.int32))
    x, y = UOp.param("x", (3, 5)), UOp.param("y", (3, 5))
    xv = (1 + RNG.integers(1, 2 ** 12, (3, 5)) * 2.0 ** -12).astype(np.float32)  # 13-bit mantissas:
    yv = (1 + RNG.integers(1, 2 ** 12, (3, 5)) * 2.0 ** -12).astype(np.float32)  # products need 26 bits
    rounded = (xv * yv).astype(np.float64)
    bits(one((x * y).cast(dtypes.float64).r("ADD", (1,)), x=xv, y=yv), rounded.sum(1, keepdims=True))
    assert not np.array_equal(rounded, xv.astype(np.float64) * yv.astype(np.float64))


# ----------------------------------------------------------------------------- steps over broadcast sources

def test_steps_over_broadcast_sources_with_scalars_and_node_dependent_impls():
    # 64 x 96 x 8 elements: large enough to run once along the broadcast axis
    full = (64, 96, 8)
    a, b = UOp.param("a", (64, 96, 1)), UOp.param("b", (64, 96, 1))
    s = UOp.param("s", ())
    av = RNG.standard_normal((64, 96, 1)).astype(np.float32)
    bv = RNG.standard_normal((64, 96, 1)).astype(np.float32)
    av[0, :4, 0] = -0.0
    sv = np.array(1.5, np.float32)
    ae, be = a.expand(full), b.expand(full)
    outputs = [ae * 2.0, ae * s, (ae < be).where(ae, be), (ae < be).where(ae, -0.0), ae / be]
    got = evaluate(outputs, {"a": av, "b": bv, "s": sv})
    expected = [av * np.float32(2), av * sv, np.where(av < bv, av, bv), np.where(av < bv, av, np.float32(-0.0)), av / bv]
    for value, reference in zip(got, expected):
        bits(value, np.broadcast_to(reference, full))
    i, j = UOp.param("i", (64, 96, 1), dtypes.int32), UOp.param("j", (64, 96, 1), dtypes.int32)
    iv = RNG.integers(-50, 50, (64, 96, 1)).astype(np.int32)
    jv = RNG.integers(1, 7, (64, 96, 1)).astype(np.int32) * np.where(RNG.random((64, 96, 1)) < 0.5, 1, -1).astype(np.int32)
    quotient = one(UOp.make(Ops.FDIV, dtypes.int32, (i.expand(full), j.expand(full))), i=iv, j=jv)  # C division
    bits(quotient, np.broadcast_to((np.trunc(iv / jv)).astype(np.int32), full))


def test_products_of_small_integers_wrap_in_their_dtype():
    x = UOp.param("x", (3, 5), dtypes.int8)
    xv = RNG.integers(-128, 128, (3, 5)).astype(np.int8)
    wide = np.prod(xv.astype(np.int64), axis=1, keepdims=True)  # exact: 5 factors of 8 bits
    bits(one(x.r("MUL", (1,)), x=xv), wide.astype(np.int8))  # int64 -> int8 wraps, as int8 products do
    u = UOp.param("u", (4,), dtypes.uint16)
    uv = np.array([300, 500, 7, 1000], np.uint16)
    bits(one(u.r("MUL", (0,)), u=uv), np.array([300 * 500 * 7 * 1000 % 2 ** 16], np.uint16))


def test_an_integer_max_over_nothing_is_the_dtypes_least_value():
    for dtype, kind in ((np.int32, dtypes.int32), (np.uint8, dtypes.uint8), (np.int8, dtypes.int8)):
        e = UOp.param("e", (2, 0), kind)
        bits(one(e.r("MAX", (1,)), e=np.zeros((2, 0), dtype)), np.full((2, 1), np.iinfo(dtype).min, dtype))



def test_integer_division_and_power_into_dying_arrays_stay_c_style():
    a, b = UOp.param("a", (6,), dtypes.int32), UOp.param("b", (6,), dtypes.int32)
    av = np.array([-7, 7, -7, 7, 9, 2], np.int32)
    bv = np.array([2, 2, -2, -2, 0, 3], np.int32)
    made_a, made_b = a * 1, b * 1  # arrays the evaluator made, dying at the FDIV/POW
    quotient, power = evaluate([UOp.make(Ops.FDIV, dtypes.int32, (made_a, made_b)), made_a.pow(made_b - 1)],
                               {"a": av, "b": bv})
    bits(quotient, np.array([-3, 3, 3, -3, 0, 0], np.int32))   # truncated; x / 0 is 0
    bits(power, np.array([-7, 7, 0, 0, 0, 4], np.int32))      # (+-7)^-3 truncates to 0, 9^-1 to 0


def test_peak_bytes_leave_out_embedded_buffers():
    data = np.arange(8, dtype=np.float32)
    stats = EvalStats()
    (value,) = evaluate([UOp.buffer(data) * 2.0], {}, stats=stats)
    bits(value, data * np.float32(2))
    assert stats.peak_bytes == 4 + 32  # the CONST and the product; the BUFFER's bytes are not the evaluator's


@pytest.mark.parametrize("name", ["conv_transpose2d", "conv2d of a flipped weight"])
def test_gradients_laid_out_for_their_scatter_with_factors_numpy_must_copy(name):
    # a contraction read by a scatter-add lays its result out for it (Contraction.outer); here a
    # factor is a flipped, permuted view that matmul's reshape copies (the copy is counted)
    from uopcli.backends.reference import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    x, w = UOp.param("x", (2, 8, 18, 18)), UOp.param("w", (8, 8, 3, 3))
    y = x.conv_transpose2d(w, stride=2, padding=1) if name == "conv_transpose2d" \
        else x.conv2d(w.flip((2, 3)).permute((1, 0, 2, 3)), padding=1)
    grads = compute_gradient((y * y).sum(), UOp.const(1.0), [x, w])
    inputs = {"x": RNG.standard_normal((2, 8, 18, 18)).astype(np.float32),
              "w": RNG.standard_normal((8, 8, 3, 3)).astype(np.float32)}
    got = evaluate([grads[x], grads[w]], inputs)
    for value, expected in zip(got, reference_evaluate([grads[x], grads[w]], inputs)):
        assert value.dtype == np.float32 and value.shape == expected.shape
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_a_selection_summed_through_a_permute_is_summed_along_the_permuted_axis():
    p, x = UOp.param("p", (3, 5), dtypes.bool), UOp.param("x", (3, 5))
    pv = RNG.integers(0, 2, (3, 5)).astype(bool)
    xv = RNG.integers(-8, 8, (3, 5)).astype(np.float32)  # small integers: exact sums
    got = one(p.where(x, 0.0).permute((1, 0)).r("ADD", (1,)), p=pv, x=xv)
    bits(got, np.where(pv, xv, np.float32(0)).T.sum(1, keepdims=True))


def test_peak_bytes_count_what_is_live_between_frees():
    # three rounds of x*2 < 0.5 (a float32[1000], then a bool[1000], each also seen through a
    # RESHAPE view) selecting x or 1: each round's arrays and their views are dropped after
    # their last reader, so the peak is one round's float and bool arrays and the 3 CONSTs:
    # 4,000 + 1,000 + 12 bytes
    x = UOp.param("x", (1000,))
    x2 = x.reshape((10, 100))
    v = x2
    for _ in range(3):
        v = ((v * 2.0).reshape((1000,)) < 0.5).reshape((10, 100)).where(x2, 1.0)
    stats = EvalStats()
    xv = RNG.standard_normal(1000).astype(np.float32)
    (got,) = evaluate([v], {"x": xv}, stats=stats)
    expected = xv.reshape(10, 100)
    for _ in range(3):
        expected = np.where(expected * np.float32(2) < np.float32(0.5), xv.reshape(10, 100), np.float32(1))
    bits(got, expected)
    assert stats.peak_bytes == 4000 + 1000 + 12 and stats.nodes_evaluated == 19


def test_a_shape_0_sum_added_to_a_tensor_is_not_written_into():
    # x.sum() is a REDUCE reshaped to (): a writeable 0-d view of an array the evaluator made,
    # dying at the ADD, but of another shape than the result: never its output
    x, v = UOp.param("x", (4,)), UOp.param("v", (3,))
    xv = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    vv = np.array([0.5, -1.0, 2.0], np.float32)
    bits(one(x.sum() + v, x=xv, v=vv), xv.sum() + vv)
    bits(one(v * x.sum(), x=xv, v=vv), vv * xv.sum())
