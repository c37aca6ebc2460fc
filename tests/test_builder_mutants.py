"""The builder's composites (uopcli/builder/) against outside oracles, written for the survivors
of its first mutation run (docs/mutation.md): torch and numpy in float64 on values, with
order-sensitive inputs (distinct values everywhere, so a permuted, flipped, shifted or
misplaced element changes the result) and edge values (-0.0, nan, inf, ties, integer wrap).
Every case is built with UOp's methods on PARAMs and evaluated by the numpy backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from uopcli import UOp, evaluate
from uopcli.core.ops import dtype_of, dtypes
from uopcli.errors import GraphError

RNG = np.random.default_rng(20261207)


def distinct(*shape, scale=1.0, seed=None):
    """float64 values, all different and none 0, in a shuffled order."""
    rng = np.random.default_rng(seed) if seed is not None else RNG
    n = math.prod(shape)
    values = (np.arange(1, n + 1) * 0.731 + rng.uniform(0, 0.3, n)) * rng.choice([-1, 1], n)
    return rng.permutation(values).reshape(shape) * scale / max(n, 1)


def run(build, *arrays):
    """build(*params) evaluated on `arrays`: one array, or a tuple for a tuple of outputs."""
    params = [UOp.param(f"a{k}", a.shape, dtype_of(a.dtype)) for k, a in enumerate(arrays)]
    out = build(*params)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    values = evaluate(outs, {f"a{k}": a for k, a in enumerate(arrays)})
    return tuple(values) if isinstance(out, (tuple, list)) else values[0]


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def same(got, want, rtol=1e-12, atol=1e-12, dtype=None):
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), got.dtype
    if got.dtype.kind in "biu" or want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def bits(got, want):
    """Equal bit for bit (so -0.0 is not 0.0, and nan is nan)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    assert got.tobytes() == want.tobytes(), (got, want)


# ----------------------------------------------------------------------------- elementwise
X = np.array([-7.25, -3.0, -2.5, -1.0, -0.4, -0.0, 0.0, 0.3, 0.5, 1.0, 1.7, 2.5, 6.5, 9.0])
TX = t(X)


@pytest.mark.parametrize("name, build, oracle, tol", [
    ("gelu_tanh", lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh"), 1e-12),
    ("gelu_erf", lambda x: x.gelu("none"), lambda x: F.gelu(x), 5e-7),
    ("quick_gelu", lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x), 1e-12),
    ("silu", lambda x: x.silu(), F.silu, 1e-12),
    ("swish", lambda x: x.swish(), F.silu, 1e-12),
    ("leaky_relu", lambda x: x.leaky_relu(), lambda x: F.leaky_relu(x, 0.01), 0),
    ("leaky_relu_0.2", lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2), 0),
    ("elu", lambda x: x.elu(), F.elu, 1e-12),
    ("elu_0.7", lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7), 1e-12),
    ("celu", lambda x: x.celu(), F.celu, 1e-12),
    ("celu_0.6", lambda x: x.celu(0.6), lambda x: F.celu(x, 0.6), 1e-12),
    ("selu", lambda x: x.selu(), lambda x: 1.0507 * torch.where(x >= 0, x, 1.67326 * torch.expm1(x)), 1e-12),
    ("selu_args", lambda x: x.selu(2.0, 3.0), lambda x: 3.0 * torch.where(x >= 0, x, 2.0 * torch.expm1(x)), 1e-12),
    ("softplus", lambda x: x.softplus(), F.softplus, 1e-12),
    ("softplus_beta", lambda x: x.softplus(2.5), lambda x: F.softplus(x, beta=2.5, threshold=1e9), 1e-12),
    ("mish", lambda x: x.mish(), F.mish, 1e-12),
    ("hardtanh", lambda x: x.hardtanh(), F.hardtanh, 0),
    ("hardtanh_args", lambda x: x.hardtanh(-2, 1.5), lambda x: F.hardtanh(x, -2, 1.5), 0),
    ("relu6", lambda x: x.relu6(), F.relu6, 0),
    ("hardsigmoid", lambda x: x.hardsigmoid(), F.hardsigmoid, 1e-15),
    ("hardsigmoid_args", lambda x: x.hardsigmoid(0.3, 0.2), lambda x: (0.3 * x + 0.2).clamp(0, 1), 1e-15),
    ("hardswish", lambda x: x.hardswish(), F.hardswish, 1e-15),
    ("softsign", lambda x: x.softsign(), F.softsign, 1e-15),
    ("logsigmoid", lambda x: x.logsigmoid(), F.logsigmoid, 1e-12),
    ("tan", lambda x: x.tan(), torch.tan, 1e-11),
    ("sinh", lambda x: x.sinh(), torch.sinh, 1e-12),
    ("cosh", lambda x: x.cosh(), torch.cosh, 1e-12),
    ("erf", lambda x: x.erf(), torch.erf, 2e-7),
    ("log10", lambda x: x.abs().log10(), lambda x: torch.log10(x.abs()), 1e-12),
    ("asinh", lambda x: x.asinh(), torch.asinh, 1e-9),
    ("softmin", lambda x: x.softmin(), lambda x: F.softmin(x, -1), 1e-12),
    ("neg", lambda x: x.neg(), torch.neg, 0),
])
def test_elementwise_against_torch(name, build, oracle, tol):
    same(run(build, X), oracle(TX), rtol=tol, atol=tol)


@pytest.mark.parametrize("name, build, oracle", [
    ("asin", lambda x: x.asin(), np.arcsin), ("acos", lambda x: x.acos(), np.arccos),
    ("atan", lambda x: x.atan(), np.arctan), ("atanh", lambda x: x.atanh(), np.arctanh),
])
def test_inverse_trigonometry_against_numpy(name, build, oracle):
    x = np.array([-0.999, -0.75, -0.5, -0.2, -0.0, 0.0, 0.1, 0.45, 0.8, 0.97])
    if name == "atan":
        x = np.concatenate([x, [-40.0, -3.0, 2.0, 25.0]])
    same(run(build, x), oracle(x), rtol=0, atol=3e-8 if name != "atanh" else 1e-12)


def test_acosh_against_numpy():
    x = np.array([1.0, 1.2, 2.0, 7.5, 100.0])
    same(run(lambda x: x.acosh(), x), np.arccosh(x), rtol=1e-9, atol=1e-9)


def test_logaddexp_against_numpy_both_orders_and_overflow():
    a = np.array([-800.0, -2.0, 0.0, 1.0, 700.0, 3.0, -np.inf])
    b = np.array([-801.0, 5.0, 0.0, -1.0, 710.0, 3.0, 1.0])
    same(run(lambda a, b: a.logaddexp(b), a, b), np.logaddexp(a, b))
    same(run(lambda a, b: b.logaddexp(a), a, b), np.logaddexp(b, a))


def test_rounding_against_numpy_halves_to_even():
    x = np.array([-3.5, -2.5, -1.5, -0.5, -0.49, 0.5, 1.5, 2.5, 3.5, 4.5, -7.2, 7.7, 0.0, 1e15 + 0.5])
    same(run(lambda x: x.round(), x), np.round(x), rtol=0, atol=0)
    same(run(lambda x: x.floor(), x), np.floor(x), rtol=0, atol=0)
    same(run(lambda x: x.ceil(), x), np.ceil(x), rtol=0, atol=0)


def test_floor_ceil_round_of_negative_and_positive_integral_values():
    x = np.array([-3.0, -1.0, 1.0, 4.0, -2.0000001, 2.0000001])
    same(run(lambda x: x.floor(), x), np.floor(x), rtol=0, atol=0)
    same(run(lambda x: x.ceil(), x), np.ceil(x), rtol=0, atol=0)


def test_mod_fmod_and_rounded_divisions_against_numpy():
    a = np.array([7.5, -7.5, 7.5, -7.5, 3.0, -0.0, 5.25])
    b = np.array([2.0, 2.0, -2.0, -2.0, 1.5, 3.0, -1.25])
    same(run(lambda a, b: a.mod(b), a, b), np.mod(a, b))
    same(run(lambda a, b: a.fmod(b), a, b), np.fmod(a, b))
    same(run(lambda a, b: a.div(b, rounding_mode="trunc"), a, b), np.trunc(a / b))
    same(run(lambda a, b: a.div(b, rounding_mode="floor"), a, b), np.floor(a / b))
    same(run(lambda a, b: a.div(b), a, b), a / b)
    i = np.array([7, -7, 7, -7, 0, 9], np.int32)
    j = np.array([2, 2, -2, -2, 3, -4], np.int32)
    same(run(lambda a, b: a.fmod(b), i, j), np.fmod(i, j), dtype=np.int32)
    same(run(lambda a, b: a.div(b, rounding_mode="trunc"), i, j), (np.trunc(i / j)).astype(np.int32), dtype=np.int32)
    same(run(lambda a, b: a.div(b, rounding_mode="floor"), i, j), np.floor_divide(i, j), dtype=np.int32)
    same(run(lambda a, b: a.mod(b), i, j), np.mod(i, j), dtype=np.int32)
    with pytest.raises(GraphError, match="rounding_mode is None, 'trunc' or 'floor', got 'round'"):
        run(lambda a, b: a.div(b, rounding_mode="round"), a, b)


def test_bitwise_and_shifts_against_numpy_with_wrap():
    a = np.array([0b1011, -6, 127, -128, 0x55], np.int8)
    b = np.array([0b0110, 3, -1, 1, 0x0F], np.int8)
    same(run(lambda a, b: a.bitwise_and(b), a, b), a & b, dtype=np.int8)
    same(run(lambda a, b: a.bitwise_or(b), a, b), a | b, dtype=np.int8)
    same(run(lambda a, b: a.bitwise_xor(b), a, b), a ^ b, dtype=np.int8)
    same(run(lambda a: a.bitwise_not(), a), ~a, dtype=np.int8)
    u = np.array([1, 3, 200, 255], np.uint8)
    s = np.array([1, 2, 3, 1], np.uint8)
    same(run(lambda a, b: a.lshift(b), u, s), np.left_shift(u, s), dtype=np.uint8)   # 200 << 3 wraps
    same(run(lambda a, b: a.rshift(b), u, s), np.right_shift(u, s), dtype=np.uint8)
    same(run(lambda a, b: a.add(b), u, s * 100), u + s * 100, dtype=np.uint8)
    same(run(lambda a, b: a.sub(b), s, u), s - u, dtype=np.uint8)
    same(run(lambda a, b: a.mul(b), u, s), u * s, dtype=np.uint8)


def test_lerp_float_both_weights_and_uint8_fixed_point():
    a, b, w = distinct(6), distinct(6, seed=3), np.linspace(-0.5, 1.5, 6)
    same(run(lambda a, b, w: a.lerp(b, w), a, b, w), torch.lerp(t(a), t(b), t(w)))
    same(run(lambda a, b: a.lerp(b, 0.3), a, b), torch.lerp(t(a), t(b), 0.3))
    ua = np.array([200, 0, 255, 17, 90, 3, 128, 250, 10], np.uint8)
    ub = np.array([100, 255, 0, 18, 91, 250, 1, 5, 10], np.uint8)
    uw = np.array([0.5, 0.25, 0.75, 1.0, 0.3, 0.11, 0.66, 0.02, 0.9], np.float32)
    # tinygrad's fixed point: w7 = int16(w·128 + 0.5), a + ((int8(b - a)·w7 + 64) as uint16 >> 7), mod 256
    w7 = (uw * 128 + 0.5).astype(np.int16)
    step = (ub.astype(np.int16) - ua).astype(np.int8).astype(np.int16) * w7 + 64
    want = (ua.astype(np.int64) + (step.astype(np.uint16) >> 7)).astype(np.uint8)
    same(run(lambda a, b, w: a.lerp(b, w), ua, ub, uw), want, dtype=np.uint8)


def test_nan_and_inf_tests_each_flag():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0, -1e308])
    same(run(lambda x: x.isnan(), x), np.isnan(x))
    same(run(lambda x: x.isinf(), x), np.isinf(x))
    same(run(lambda x: x.isinf(detect_negative=False), x), np.isposinf(x))
    same(run(lambda x: x.isinf(detect_positive=False), x), np.isneginf(x))
    same(run(lambda x: x.isinf(False, False), x), np.zeros(7, bool))
    same(run(lambda x: x.isfinite(), x), np.isfinite(x))


def test_copysign_with_signed_zeros():
    a = np.array([1.5, -1.5, 2.0, -2.0, 0.0, 3.0, 4.0])
    b = np.array([-0.0, 0.0, -3.0, 5.0, -1.0, np.inf, -np.inf])
    bits(run(lambda a, b: a.copysign(b), a, b), np.copysign(a, b))


def test_allclose_masked_fill_and_isclose_number():
    a = np.array([1.0, 2.0, 3.0])
    assert run(lambda a, b: a.allclose(b), a, a + 1e-9) == np.True_
    assert run(lambda a, b: a.allclose(b), a, a + np.array([0, 0, 1e-3])) == np.False_
    assert run(lambda a, b: a.allclose(b, rtol=1e-3), a, a + np.array([0, 0, 1e-3])) == np.True_
    assert run(lambda a, b: a.allclose(b, atol=2e-3, rtol=0), a, a + np.array([0, 0, 1e-3])) == np.True_
    m = np.array([True, False, True])
    same(run(lambda a, m: a.masked_fill(m, -4.0), a, m), np.where(m, -4.0, a))
    x = np.array([1.0, 1.0 + 1e-6, 1.1, np.nan, np.inf, -np.inf])
    same(run(lambda x: x.isclose(1.0), x), np.isclose(x, 1.0))
    same(run(lambda x: x.isclose(np.inf), x), np.isclose(x, np.inf))
    same(run(lambda x: x.isclose(math.nan, equal_nan=True), x), np.isclose(x, np.nan, equal_nan=True))
    same(run(lambda x: x.isclose(1.05, rtol=0.1, atol=0.0), x), np.isclose(x, 1.05, rtol=0.1, atol=0.0))
    y = np.array([1.0, 1.0, 1.0, np.nan, np.inf, np.inf])
    same(run(lambda x, y: x.isclose(y, equal_nan=True), x, y), np.isclose(x, y, equal_nan=True))


def test_short_spellings_dtypes_and_sizes():
    x = np.array([[-1.7, 2.5, 300.9], [0.2, -0.0, 70000.0]])
    got = run(lambda x: (x.float(), x.half(), x.double(), x.int(), x.long(), x.bool()), x)
    want = (x.astype(np.float32), x.astype(np.float16), x, x.astype(np.int32), x.astype(np.int64), x.astype(bool))
    for g, w in zip(got, want):
        bits(g, w)
    p = UOp.param("p", (2, 3, 4), dtypes.float16)
    assert (p.numel(), p.element_size(), p.nbytes(), p.is_floating_point()) == (24, 2, 48, True)
    q = UOp.param("q", (5,), dtypes.int64)
    assert (q.numel(), q.element_size(), q.nbytes(), q.is_floating_point()) == (5, 8, 40, False)


def test_gelu_refuses_an_unknown_approximation():
    with pytest.raises(GraphError, match="gelu: approximate is 'tanh' or 'none', got 'erf'"):
        UOp.param("x", (2,), dtypes.float64).gelu("erf")


# ----------------------------------------------------------------------------- movement
A = distinct(3, 4, 5)
TA = t(A)


def test_shrink_to_pad_to_repeat_unflatten_view_clone():
    same(run(lambda x: x.shrink_to(2, None, 3), A), A[:2, :, :3], rtol=0, atol=0)
    same(run(lambda x: x.shrink_to((None, 1, 5)), A), A[:, :1, :], rtol=0, atol=0)
    want = np.pad(A, ((0, 2), (0, 0), (0, 1)), constant_values=-2.5)
    same(run(lambda x: x.pad_to(5, None, 6, value=-2.5), A), want, rtol=0, atol=0)
    same(run(lambda x: x.pad_to((4, 4, 5)), A), np.pad(A, ((0, 1), (0, 0), (0, 0))), rtol=0, atol=0)
    same(run(lambda x: x.repeat(2, 1, 3), A), np.tile(A, (2, 1, 3)), rtol=0, atol=0)
    same(run(lambda x: x.repeat((2, 3, 1, 2)), A), np.tile(A, (2, 3, 1, 2)), rtol=0, atol=0)
    same(run(lambda x: x.unflatten(1, (2, 2)), A), A.reshape(3, 2, 2, 5), rtol=0, atol=0)
    same(run(lambda x: x.unflatten(-1, (5, 1)), A), A.reshape(3, 4, 5, 1), rtol=0, atol=0)
    same(run(lambda x: x.view(5, 12), A), A.reshape(5, 12), rtol=0, atol=0)
    same(run(lambda x: x.view((4, 15)), A), A.reshape(4, 15), rtol=0, atol=0)
    same(run(lambda x: x.clone(), A), A, rtol=0, atol=0)
    with pytest.raises(GraphError, match=r"pad_to: 2 sizes for a tensor of rank 3"):
        run(lambda x: x.pad_to(5, 5), A)
    with pytest.raises(GraphError, match=r"repeat: 2 repeats for rank 3"):
        run(lambda x: x.repeat(2, 2), A)


@pytest.mark.parametrize("formula, sizes, want", [
    ("a b c -> c a b", {}, lambda x: x.transpose(2, 0, 1)),
    ("a b c -> a (b c)", {}, lambda x: x.reshape(3, 20)),
    ("a b c -> (c b) a", {}, lambda x: x.transpose(2, 1, 0).reshape(20, 3)),
    ("a (h w) c -> a h w c", {"h": 2}, lambda x: x.reshape(3, 2, 2, 5)),
    ("a (h w) c -> w a c h", {"w": 4}, lambda x: x.reshape(3, 1, 4, 5).transpose(2, 0, 3, 1)),
    ("a (h w) c -> (w h) c a", {"h": 2, "w": 2}, lambda x: x.reshape(3, 2, 2, 5).transpose(2, 1, 3, 0).reshape(4, 5, 3)),
    ("... c -> c ...", {}, lambda x: np.moveaxis(x, -1, 0)),
    ("a ... -> ... a", {}, lambda x: np.moveaxis(x, 0, -1)),
    ("a b c -> a 1 b () c", {}, lambda x: x.reshape(3, 1, 4, 1, 5)),
    ("a ... -> (... a)", {}, lambda x: np.moveaxis(x, 0, -1).reshape(60)),
    ("a ... c -> (a ...) c", {}, lambda x: x.reshape(12, 5)),
    ("a ... -> (... a)", {}, lambda x: np.moveaxis(x, 0, -1).reshape(60)),
])
def test_rearrange_against_numpy(formula, sizes, want):
    same(run(lambda x: x.rearrange(formula, **sizes), A), want(A), rtol=0, atol=0)


@pytest.mark.parametrize("formula, sizes, message", [
    ("a b c -> a b", {}, "the two sides name different axes"),
    ("a b c d -> a b c d", {}, "the left side has 4 axes, the tensor [3, 4, 5] has 3"),
    ("a (h w) c -> a h w c", {}, "give the size of all but one of h, w (e.g. h=...)"),
    ("a (h w) c -> a h w c", {"h": 3}, "an axis of 4 does not split into h x w with the sizes given"),
    ("a (h w) c -> a h w c", {"h": 2, "w": 3}, "h=2 x w=3 is 6, the axis has 4"),
    ("a b c -> a b c", {"q": 2}, "size given for 'q', which the left side does not name"),
    ("a b c -> a b c", {"a": -1}, "the size of a must be a whole number >= 0, got -1"),
    ("a b c -> a b c", {"a": 3.0}, "the size of a must be a whole number >= 0, got 3.0"),
    ("a b -> b a", {}, "the left side has 2 axes, the tensor [3, 4, 5] has 3"),
    ("(a ...) c -> a ... c", {}, "'...' cannot be inside a group on the left side"),
    ("a b c () -> a b c", {}, "the left side has 4 axes"),
    ("a b c -> a b c -> a", {}, "the formula needs exactly one '->'"),
    ("a b b -> a b b", {}, "'b' is named twice on one side"),
    ("a b _c -> a b _c", {}, "'_c' is not an axis name"),
    ("a b (c -> a b c", {}, "'(' without ')'"),
    ("a b c) -> a b c", {}, "')' without '('"),
    ("a ((b c)) -> a b c", {}, "groups cannot nest"),
    ("a b c d e ... -> a b c d e ...", {}, "the left side names more axes than the tensor's 3"),
])
def test_rearrange_refusals_word_for_word(formula, sizes, message):
    with pytest.raises(GraphError) as refused:
        run(lambda x: x.rearrange(formula, **sizes), A)
    assert str(refused.value) == f"rearrange {formula!r}: {message}" or \
        str(refused.value).startswith(f"rearrange {formula!r}: {message}")


def test_rearrange_unicode_ellipsis_and_size_one_group():
    x = distinct(2, 1, 3)
    same(run(lambda x: x.rearrange("a () c -> c a"), x), x.reshape(2, 3).T, rtol=0, atol=0)
    same(run(lambda x: x.rearrange("a … -> … a"), x), np.moveaxis(x, 0, -1), rtol=0, atol=0)
    with pytest.raises(GraphError, match=r"'\(\)' stands for an axis of size 1, the tensor's is 3"):
        run(lambda x: x.rearrange("a b () -> a b"), x)


def test_diag_and_diagonal_against_torch():
    v = distinct(5)
    same(run(lambda x: x.diag(), v), np.diag(v), rtol=0, atol=0)
    for offset, d1, d2 in [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (-3, 2, 0), (0, -1, 0), (4, 0, 2), (-4, 1, 2),
                           (7, 0, 1), (1, 2, 1)]:
        same(run(lambda x: x.diagonal(offset, d1, d2), A), torch.diagonal(TA, offset, d1, d2), rtol=0, atol=0)
    with pytest.raises(GraphError, match=r"diag needs a vector, got shape \[3, 4, 5\]"):
        run(lambda x: x.diag(), A)
    with pytest.raises(GraphError, match="diagonal: dim1 and dim2 must differ, got 1 twice"):
        run(lambda x: x.diagonal(0, 1, -2), A)


@pytest.mark.parametrize("dim, size, step", [(0, 2, 1), (1, 3, 1), (2, 2, 2), (2, 5, 3), (-1, 1, 4), (1, 4, 2), (2, 0, 2)])
def test_unfold_against_torch(dim, size, step):
    same(run(lambda x: x.unfold(dim, size, step), A), TA.unfold(dim, size, step), rtol=0, atol=0)


def test_unfold_refusals():
    with pytest.raises(GraphError, match=r"unfold: size must be in \[0, 4\], got 5"):
        run(lambda x: x.unfold(1, 5, 1), A)
    with pytest.raises(GraphError, match="unfold: step must be >= 1, got 0"):
        run(lambda x: x.unfold(1, 2, 0), A)


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), (7, 2), ((1, -3), (0, 2)), ((2, 1, -1), (2, 1, 0)), (3, None),
                                          (-8, None), (0, 1), (4, -1)])
def test_roll_against_torch(shifts, dims):
    same(run(lambda x: x.roll(shifts, dims), A), torch.roll(TA, shifts, dims), rtol=0, atol=0)


def test_roll_of_an_empty_tensor_and_its_refusal():
    e = np.zeros((2, 0, 3))
    assert run(lambda x: x.roll(1, 1), e).shape == (2, 0, 3)
    with pytest.raises(GraphError, match="roll: 2 shifts for 1 axes"):
        run(lambda x: x.roll((1, 2), 0), A)


@pytest.mark.parametrize("name, arg, dim", [
    *(("split", sizes, dim) for sizes, dim in [(2, 0), (3, 1), (2, -1), ([1, 2], 0), ([1, 0, 3], 1), ([5], 2), (4, 1),
                                                (10, 2)]),
    *(("chunk", chunks, dim) for chunks, dim in [(2, 0), (3, 1), (2, 2), (5, 2), (4, 2), (1, 0), (6, 1)]),
])
def test_split_and_chunk_against_torch(name, arg, dim):
    got = run(lambda x: getattr(x, name)(arg, dim), A)
    want = getattr(torch, name)(TA, arg, dim)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        same(g, w, rtol=0, atol=0)


def test_split_and_chunk_refusals_and_empty_axes():
    with pytest.raises(GraphError, match="split: size must be > 0, got 0"):
        run(lambda x: x.split(0, 1), A)
    with pytest.raises(GraphError, match=r"split: sizes \[1, 2\] are not whole numbers >= 0 adding up to 4, the size of axis 1"):
        run(lambda x: x.split([1, 2], 1), A)
    with pytest.raises(GraphError, match=r"split: sizes \[5, -1\] are not whole numbers >= 0"):
        run(lambda x: x.split([5, -1], 1), A)
    with pytest.raises(GraphError, match="chunk: chunks must be > 0, got 0"):
        run(lambda x: x.chunk(0, 1), A)
    e = np.zeros((0, 2))
    pieces = run(lambda x: x.split(3, 0), e)
    assert [p.shape for p in pieces] == [(0, 2)]
    assert [p.shape for p in run(lambda x: x.chunk(3, 0), e)] == [(0, 2)] * 3


@pytest.mark.parametrize("repeats, dim", [(2, 0), (3, 1), (2, 2), (3, -1), (2, None), (1, 1)])
def test_repeat_interleave_against_torch(repeats, dim):
    same(run(lambda x: x.repeat_interleave(repeats, dim), A), torch.repeat_interleave(TA, repeats, dim), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("pads", [(1, 2, 0, 3), (2, 0, 1, 1), (3, 1, 2, 0), (-1, 2, 1, -2), (0, 0, 2, 2), (4, 4, 0, 0)])
def test_pad_modes_against_torch(mode, pads):
    x = distinct(2, 3, 4, 5)
    try:
        want = F.pad(t(x), pads, mode=mode)
    except RuntimeError:
        with pytest.raises(GraphError):
            run(lambda x: x.pad(pads, mode=mode), x)
        return
    same(run(lambda x: x.pad(pads, mode=mode), x), want, rtol=0, atol=0)


def test_pad_modes_along_three_axes_and_value():
    x = distinct(2, 3, 4)
    for mode, np_mode in [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")]:
        want = np.pad(x, ((1, 1), (2, 0), (0, 3)), mode=np_mode)
        same(run(lambda x: x.pad(((1, 1), (2, 0), (0, 3)), mode=mode), x), want, rtol=0, atol=0)
    same(run(lambda x: x.pad(((1, 0), (0, 2), (1, 1)), value=-3.5), x),
         np.pad(x, ((1, 0), (0, 2), (1, 1)), constant_values=-3.5), rtol=0, atol=0)


def test_pad_mode_refusals():
    x = UOp.param("x", (2, 3), dtypes.float64)
    with pytest.raises(GraphError, match=r"pad: reflect padding \(3, 0\) of axis 1 must be less than its size 3"):
        x.pad(((0, 0), (3, 0)), mode="reflect")
    with pytest.raises(GraphError, match=r"pad: circular padding \(0, 4\) of axis 1 must be at most its size 3"):
        x.pad(((0, 0), (0, 4)), mode="circular")
    with pytest.raises(GraphError, match="pad: mode is one of 'constant', 'reflect', 'replicate', 'circular', got 'edge'"):
        x.pad(((0, 0), (0, 1)), mode="edge")
    x.pad(((0, 0), (0, 3)), mode="circular")  # at most its size: accepted
    x.pad(((0, 0), (2, 2)), mode="reflect")


@pytest.mark.parametrize("kernel, stride, dilation, padding", [
    ((2, 2), None, 1, 0), ((3, 2), (2, 1), 1, 0), ((2, 3), 1, (2, 1), 1), ((3, 3), 2, 1, 1), ((2, 2), (1, 3), (1, 2), (1, 0)),
])
def test_max_and_avg_pool_against_torch(kernel, stride, dilation, padding):
    x = distinct(2, 3, 7, 8)
    kw = dict(stride=stride, dilation=dilation, padding=padding)
    tpad = padding if isinstance(padding, int) else tuple(padding)
    want = F.max_pool2d(t(x), kernel, stride=stride or kernel, dilation=dilation, padding=tpad)
    same(run(lambda x: x.max_pool2d(kernel, **kw), x), want, rtol=0, atol=0)
    values, indices = run(lambda x: x.max_pool2d(kernel, return_indices=True, **kw), x)
    want_v, want_i = F.max_pool2d(t(x), kernel, stride=stride or kernel, dilation=dilation, padding=tpad, return_indices=True)
    same(values, want_v, rtol=0, atol=0)
    same(indices, want_i.numpy().astype(indices.dtype))
    if dilation == 1:
        for include in (True, False):
            want = F.avg_pool2d(t(x), kernel, stride=stride or kernel, padding=tpad, count_include_pad=include)
            same(run(lambda x: x.avg_pool2d(kernel, stride=stride, padding=padding, count_include_pad=include), x), want)


@pytest.mark.parametrize("kernel, stride, padding", [((3, 3), 2, 0), ((2, 3), (2, 2), 1), ((3, 2), (3, 2), (1, 0)),
                                                     ((2, 2), 3, 0)])
def test_ceil_mode_pools_against_torch(kernel, stride, padding):
    x = distinct(1, 2, 7, 8)
    tpad = padding if isinstance(padding, int) else tuple(padding)
    same(run(lambda x: x.max_pool2d(kernel, stride=stride, padding=padding, ceil_mode=True), x),
         F.max_pool2d(t(x), kernel, stride=stride, padding=tpad, ceil_mode=True), rtol=0, atol=0)
    values, indices = run(lambda x: x.max_pool2d(kernel, stride=stride, padding=padding, ceil_mode=True,
                                                 return_indices=True), x)
    want_v, want_i = F.max_pool2d(t(x), kernel, stride=stride, padding=tpad, ceil_mode=True, return_indices=True)
    same(indices, want_i.numpy().astype(indices.dtype))
    for include in (True, False):
        same(run(lambda x: x.avg_pool2d(kernel, stride=stride, padding=padding, ceil_mode=True,
                                        count_include_pad=include), x),
             F.avg_pool2d(t(x), kernel, stride=stride, padding=tpad, ceil_mode=True, count_include_pad=include))


def test_max_pool_ties_give_the_first_index_and_one_d_pools():
    x = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, -1.0, 3.0]]]])
    values, indices = run(lambda x: x.max_pool2d((2, 2), return_indices=True), x)
    same(values, [[[[3.0, 3.0]]]], rtol=0, atol=0)
    same(indices, np.array([[[[1, 2]]]], indices.dtype))
    y = distinct(2, 3, 9)
    same(run(lambda x: x.max_pool2d((3,), stride=2), y), F.max_pool1d(t(y), 3, 2), rtol=0, atol=0)
    same(run(lambda x: x.avg_pool2d((2,)), y), F.avg_pool1d(t(y), 2))
    z = distinct(1, 1, 4, 6)
    same(run(lambda x: x.max_pool2d(2), z), F.max_pool2d(t(z), 2), rtol=0, atol=0)


def test_pool_refusals():
    x = UOp.param("x", (1, 1, 3, 3), dtypes.float64)
    with pytest.raises(GraphError, match=r"pool: kernel \[4, 4\] \(dilation \[1, 1\]\) is larger than the input's \[3, 3\]"):
        x.max_pool2d((4, 4))
    with pytest.raises(GraphError, match=r"pool: a kernel of 3 axes on a tensor of rank 2"):
        UOp.param("y", (3, 3), dtypes.float64)._pool((1, 1, 1))
    with pytest.raises(GraphError, match=r"padding is an int, 2 of them or 4, got \(1, 1, 1\)"):
        x.max_pool2d((2, 2), padding=(1, 1, 1))
    with pytest.raises(GraphError, match=r"expected a positive int or 2 of them, got \(1, 0\)"):
        x.max_pool2d((2, 2), stride=(1, 0))


# ----------------------------------------------------------------------------- reduce
B = distinct(4, 6)
TB = t(B)


def test_any_all_over_axes_against_numpy():
    x = np.array([[0.0, 0.0, -0.0], [0.0, 2.0, np.nan], [1.0, -1.0, 3.0]])
    for axis in (None, 0, 1, -1, (0, 1)):
        same(run(lambda x: x.any(axis), x), np.any(x, axis=axis))
        same(run(lambda x: x.all(axis), x), np.all(x, axis=axis))
    same(run(lambda x: x.any(1, keepdim=True), x), np.any(x, axis=1, keepdims=True))
    same(run(lambda x: x.all(0, keepdim=True), x), np.all(x, axis=0, keepdims=True))
    i = np.array([[0, 256, 0], [-1, 1, 2]], np.int32)  # 256 is true, though its low byte is 0
    same(run(lambda x: x.all(1), i), np.all(i, axis=1))
    same(run(lambda x: x.any(), i), np.any(i))


@pytest.mark.parametrize("axis, correction", [(None, 1), (0, 1), (1, 0), (-1, 2), ((0, 1), 1), (1, 7)])
def test_var_std_and_their_means_against_torch(axis, correction):
    for keepdim in (False, True):
        v, m = run(lambda x: x.var_mean(axis, keepdim, correction), B)
        dims = axis if axis is not None else (0, 1)
        tv, tm = torch.var_mean(TB, dim=dims, correction=correction, keepdim=keepdim)
        same(m, tm)
        s, m2 = run(lambda x: x.std_mean(axis, keepdim, correction), B)
        ts, _ = torch.std_mean(TB, dim=dims, correction=correction, keepdim=keepdim)
        same(m2, tm)
        if correction >= 6 and axis == 1:  # count - correction <= 0: inf or nan, as torch
            assert np.all(~np.isfinite(v))
        else:
            same(v, tv)
            same(s, ts)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
def test_logsumexp_against_torch_with_large_values(axis):
    x = B * 300
    for keepdim in (False, True):
        want = torch.logsumexp(t(x), dim=axis if axis is not None else (0, 1), keepdim=keepdim)
        same(run(lambda x: x.logsumexp(axis, keepdim), x), want)


def test_argmax_argmin_take_the_first_of_ties():
    x = np.array([[1.0, 5.0, 5.0, -2.0, -2.0], [7.0, 0.0, 7.0, 7.0, -3.0], [-1.0, -1.0, -1.0, -1.0, -1.0],
                  [0.0, -0.0, np.nan, 3.0, 3.0]])
    x[3] = [0.0, -0.0, 2.0, 3.0, 3.0]
    for axis in (0, 1, -1):
        for keepdim in (False, True):
            same(run(lambda x: x.argmax(axis, keepdim), x), np.expand_dims(np.argmax(x, axis), axis) if keepdim
                 else np.argmax(x, axis).astype(np.int32), dtype=np.int32)
            same(run(lambda x: x.argmin(axis, keepdim), x), np.expand_dims(np.argmin(x, axis), axis) if keepdim
                 else np.argmin(x, axis).astype(np.int32), dtype=np.int32)
    same(run(lambda x: x.argmax(), x), np.int32(np.argmax(x)), dtype=np.int32)
    same(run(lambda x: x.argmin(), x), np.int32(np.argmin(x)), dtype=np.int32)
    i = np.array([[3, -128, 127, 127], [-128, -128, 0, 5]], np.int8)
    same(run(lambda x: x.argmax(1), i), np.argmax(i, 1).astype(np.int32))
    same(run(lambda x: x.argmin(1), i), np.argmin(i, 1).astype(np.int32))
    u = np.array([0, 255, 3, 255, 0], np.uint8)
    same(run(lambda x: x.argmin(0), u), np.int32(0))
    same(run(lambda x: x.argmax(0), u), np.int32(1))


@pytest.mark.parametrize("n", [1, 5, 512, 513, 700, 1030])
def test_cumulative_sums_products_maxima_long_axes_against_numpy(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, n))
    same(run(lambda x: x.cumsum(1), x), np.cumsum(x, 1), rtol=1e-9, atol=1e-9)
    same(run(lambda x: x.cumsum(0), x), np.cumsum(x, 0), rtol=1e-12)
    p = 1 + rng.uniform(-0.01, 0.01, (2, n))
    same(run(lambda x: x.cumprod(-1), p), np.cumprod(p, 1), rtol=1e-9)
    values, indices = run(lambda x: x.cummax(1), x)
    want = torch.cummax(t(x), 1)
    same(values, want.values, rtol=0, atol=0)
    same(indices, want.indices.numpy().astype(np.int32), dtype=np.int32)
    values, indices = run(lambda x: x.cummin(1), x)
    want = torch.cummin(t(x), 1)
    same(values, want.values, rtol=0, atol=0)
    same(indices, want.indices.numpy().astype(np.int32), dtype=np.int32)
    same(run(lambda x: x.logcumsumexp(1), x * 50), torch.logcumsumexp(t(x * 50), 1), rtol=1e-9, atol=1e-9)


def test_cumulative_integer_dtypes_and_ties():
    i = np.array([[3, -2, 3, 5, -7, 5, 5], [-1, -1, -9, 2, 2, -9, 4]], np.int32)
    same(run(lambda x: x.cumsum(1), i), np.cumsum(i, 1).astype(np.int32))
    for name, fn in (("cummax", torch.cummax), ("cummin", torch.cummin)):
        values, indices = run(lambda x: getattr(x, name)(1), i)
        want = fn(t(i), 1)
        same(values, want.values)
        # the index of the first element equal to each running value (torch picks the last of ties)
        first = np.array([[list(row).index(v) for v in vrow] for row, vrow in zip(i, want.values.numpy())], np.int32)
        same(indices, first, dtype=np.int32)
    big = np.full((600,), 2 ** 20, np.int32)
    same(run(lambda x: x.cumsum(), big), np.cumsum(big).astype(np.int32))  # wraps as int32 does
    u = np.arange(1, 601, dtype=np.uint8)
    same(run(lambda x: x.cumprod(0), u), np.cumprod(u, dtype=np.uint8))
    values, _ = run(lambda x: x.cummax(0), np.tile(np.array([-5, -9, -3], np.int8), 200))
    same(values, np.maximum.accumulate(np.tile(np.array([-5, -9, -3], np.int8), 200)))
    long = np.concatenate([np.full(300, -100.0), np.full(300, -200.0), np.full(10, -50.0)])
    values, indices = run(lambda x: x.cummin(0), long)
    same(values, np.minimum.accumulate(long), rtol=0, atol=0)
    same(indices, np.array([0] * 300 + list(range(300, 301)) * 310, np.int32))


def test_cumulative_on_three_axes_and_scalars():
    x = distinct(3, 4, 5)
    for axis in (0, 1, 2, -2):
        same(run(lambda x: x.cumsum(axis), x), np.cumsum(x, axis))
        same(run(lambda x: x.cumprod(axis), x), np.cumprod(x, axis))
        same(run(lambda x: x.logcumsumexp(axis), x), torch.logcumsumexp(TA.new_tensor(x), axis))
        same(run(lambda x: x.cummax(axis)[0], x), np.maximum.accumulate(x, axis), rtol=0, atol=0)
    s = np.array(2.5)
    same(run(lambda x: x.cumsum(), s), s)
    same(run(lambda x: x.cummax()[1], s), np.int32(0), dtype=np.int32)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_topk_against_torch_with_ties(n, descending):
    rng = np.random.default_rng(n)
    x = rng.integers(-3, 4, (3, n)).astype(np.float64)
    x[0, 0] = -np.inf
    x[1, -1] = np.inf
    for dim in (1, 0, -1):
        values, indices = run(lambda x: x.sort(dim, descending), x)
        want = torch.sort(t(x), dim=dim, descending=descending, stable=True)
        same(values, want.values, rtol=0, atol=0)
        same(indices, want.indices.numpy().astype(np.int32), dtype=np.int32)
        same(run(lambda x: x.argsort(dim, descending), x), want.indices.numpy().astype(np.int32))
    k = min(n, 3)
    values, indices = run(lambda x: x.topk(k, 1, largest=not descending), x)
    want = torch.topk(t(x), k, 1, largest=not descending)
    same(values, want.values, rtol=0, atol=0)
    np.testing.assert_array_equal(np.take_along_axis(x, indices.astype(np.int64), 1), want.values.numpy())


def test_sort_integers_pads_with_the_dtype_bounds():
    i = np.array([127, -128, 5, 127, -128], np.int8)
    for descending in (False, True):
        values, indices = run(lambda x: x.sort(0, descending), i)
        want = torch.sort(t(i), dim=0, descending=descending, stable=True)
        same(values, want.values)
        same(indices, want.indices.numpy().astype(np.int32))
    u = np.array([255, 0, 7, 255, 1], np.uint8)
    for descending in (False, True):
        values, _ = run(lambda x: x.sort(0, descending), u)
        same(values, np.sort(u)[::-1] if descending else np.sort(u))
    b = np.array([True, False, True, False, False])
    same(run(lambda x: x.sort(0)[0], b), np.sort(b))
    same(run(lambda x: x.sort(0, True)[0], b), np.sort(b)[::-1])
    one = np.array([[4.0], [2.0]])
    values, indices = run(lambda x: x.sort(1), one)
    same(values, one, rtol=0, atol=0)
    same(indices, np.zeros((2, 1), np.int32), dtype=np.int32)


def test_topk_refusals():
    x = UOp.param("x", (2, 4), dtypes.float64)
    with pytest.raises(GraphError, match=r"topk: k must be in \[0, 4\], got 5"):
        x.topk(5)
    with pytest.raises(GraphError, match="topk: only sorted_=True, as tinygrad's"):
        x.topk(2, sorted_=False)
    assert x.topk(0)[0].shape == (2, 0)


@pytest.mark.parametrize("formula, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ij->ji", [(3, 4)]), ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]), ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("i...->...", [(3, 2, 4)]), ("iji->j", [(3, 4, 3)]),
    ("ij,ij->i", [(3, 4), (3, 4)]), ("ba,ca->bc", [(3, 4), (5, 4)]), ("ij,kj->ikj", [(3, 4), (2, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("bi,bi->b", [(1, 4), (3, 4)]), ("iij->ji", [(3, 3, 2)]),
    ("i,i->", [(5,), (5,)]), ("ji", [(3, 4)]), ("...,...->...", [(2, 3), (2, 3)]),
])
def test_einsum_against_numpy(formula, shapes):
    arrays = [distinct(*s, seed=k) for k, s in enumerate(shapes)]
    want = np.einsum(formula, *arrays)
    same(run(lambda *ops: UOp.einsum(formula, *ops), *arrays), want)
    same(run(lambda *ops: UOp.einsum(formula, list(ops)), *arrays), want)


def test_einsum_refusals():
    a, b = UOp.param("a", (3, 4), dtypes.float64), UOp.param("b", (5, 6), dtypes.float64)
    with pytest.raises(GraphError, match=r"einsum 'ij,jk->ik': letter 'j' is 4 and 5"):
        UOp.einsum("ij,jk->ik", a, b)
    with pytest.raises(GraphError, match=r"einsum 'ij->ik': output 'ik' repeats a letter or names one no operand has"):
        UOp.einsum("ij->ik", a)
    with pytest.raises(GraphError, match=r"einsum 'ij->ii': output 'ii' repeats a letter"):
        UOp.einsum("ij->ii", a)
    with pytest.raises(GraphError, match=r"einsum 'ijk->i': 'ijk' does not name the 2 axes of \[3, 4\]"):
        UOp.einsum("ijk->i", a)
    with pytest.raises(GraphError, match=r"einsum 'i1->i': 'i1' does not name the 2 axes"):
        UOp.einsum("i1->i", a)
    with pytest.raises(GraphError, match=r"einsum 'ij,jk->ik': 2 operands in the formula, 1 given"):
        UOp.einsum("ij,jk->ik", a)


# ----------------------------------------------------------------------------- creation
def test_zeros_ones_full_like_and_their_dtypes():
    bits(run(lambda: UOp.zeros(2, 3)), np.zeros((2, 3), np.float32))
    bits(run(lambda: UOp.ones((3,), dtype=dtypes.int8)), np.ones(3, np.int8))
    bits(run(lambda: UOp.zeros((2,), dtype="int32")), np.zeros(2, np.int32))
    bits(run(lambda: UOp.ones(2, 2)), np.ones((2, 2), np.float32))
    bits(run(lambda x: x.full_like(-2.5), B), np.full(B.shape, -2.5))
    bits(run(lambda x: x.full_like(7, dtype=dtypes.int16), B), np.full(B.shape, 7, np.int16))


@pytest.mark.parametrize("start, stop, steps, dtype", [(0.0, 1.0, 5, None), (-3, 7, 11, None), (2.5, -1.5, 4, None),
                                                        (5, 9, 1, None), (0, 10, 0, None), (-4, 4, 5, "int32"),
                                                        (0, 1, 3, "float64")])
def test_linspace_against_torch(start, stop, steps, dtype):
    want = torch.linspace(start, stop, steps, dtype=getattr(torch, dtype or "float32"))
    same(run(lambda: UOp.linspace(start, stop, steps, dtype=dtype and dtype_of(dtype))), want, rtol=1e-6, atol=1e-6,
         dtype=dtype or "float32")


def test_linspace_refusals():
    with pytest.raises(GraphError, match="linspace: steps must be a whole number >= 0, got -1"):
        UOp.linspace(0, 1, -1)
    with pytest.raises(GraphError, match="linspace: no bool dtype"):
        UOp.linspace(0, 1, 3, dtype=dtypes.bool)


@pytest.mark.parametrize("args, dtype", [((7,), None), ((2, 9), None), ((9, 2, -2), None), ((1, 2, 0.25), None),
                                         ((-3, 4, 3), None), ((0,), None), ((5, 5), None), ((10, 0, -3), None),
                                         ((3, 17, 5), "int16"), ((0, 1000), None), ((-1.5, 2.0, 0.5), "float64"),
                                         ((1, 2 ** 31 + 2, 2 ** 30), None)])
def test_arange_against_numpy(args, dtype):
    want = np.arange(*args, dtype=dtype)
    if dtype is None:
        want = want.astype(np.float32 if any(isinstance(a, float) for a in args) else
                           np.int32 if want.size == 0 or (-2 ** 31 <= want.min() and want.max() < 2 ** 31) else np.int64)
    same(run(lambda: UOp.arange(*args, dtype=dtype)), want, rtol=0, atol=0, dtype=want.dtype)


def test_arange_dtype_reads_the_last_value_made_not_stop_minus_step():
    """A real bug, fixed: the dtype and the refusal read stop - step as the last value, so a
    step not dividing the range wrapped its last value (1, 2^31 + 2 by 2^30 gave -2^31 + 1 in
    int32; 250, 257 by 3 in uint8 gave 0, where 250, 260 was refused), and an empty range
    was int64 (tinygrad's is int32)."""
    same(run(lambda: UOp.arange(1, 2 ** 31 + 2, 2 ** 30)), np.array([1, 2 ** 30 + 1, 2 ** 31 + 1], np.int64),
         dtype=np.int64)
    same(run(lambda: UOp.arange(10, -2 ** 31 - 5, -2 ** 30)), np.arange(10, -2 ** 31 - 5, -2 ** 30).astype(np.int32),
         dtype=np.int32)   # its last value, 10 - 2^31, fits
    same(run(lambda: UOp.arange(-5, -2 ** 31 - 6, -2 ** 30)), np.arange(-5, -2 ** 31 - 6, -2 ** 30), dtype=np.int64)
    with pytest.raises(GraphError, match=r"arange \[250, 257\) by 3 does not fit uint8"):
        UOp.arange(250, 257, 3, dtype="uint8")
    with pytest.raises(GraphError, match=r"arange \[1, 2147483650\) by 1073741824 does not fit int32"):
        UOp.arange(1, 2 ** 31 + 2, 2 ** 30, dtype="int32")
    same(run(lambda: UOp.arange(250, 256, 5, dtype="uint8")), np.array([250, 255], np.uint8), dtype=np.uint8)
    for args in ((0,), (5, 5), (3, 0), (0, 3, -1)):
        assert UOp.arange(*args).dtype is dtypes.int32 and UOp.arange(*args).shape == (0,)


def test_arange_refusals():
    with pytest.raises(GraphError, match="arange: step must not be 0"):
        UOp.arange(0, 3, 0)
    with pytest.raises(GraphError, match="arange: bounds and step must be finite, got 0, inf, 1"):
        UOp.arange(0, math.inf)
    with pytest.raises(GraphError, match=r"arange \[250, 260\) by 1 does not fit uint8"):
        UOp.arange(250, 260, dtype="uint8")
    with pytest.raises(GraphError, match=r"arange \[-1, 3\) by 1 does not fit uint8"):
        UOp.arange(-1, 3, dtype="uint8")
    UOp.arange(250, 256, dtype="uint8")  # 255 is the last: it fits


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (0, 3), (1, 1)])
def test_eye_against_numpy(n, m):
    bits(run(lambda: UOp.eye(n, m)), np.eye(n, m, dtype=np.float32))
    bits(run(lambda: UOp.eye(n, m, dtype=dtypes.int32)), np.eye(n, m, dtype=np.int32))


def test_eye_refusal():
    with pytest.raises(GraphError, match="eye: sizes must be >= 0, got 2 and -1"):
        UOp.eye(2, -1)
    with pytest.raises(GraphError, match="eye: sizes must be >= 0, got -2 and -2"):
        UOp.eye(-2)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_against_torch(indexing):
    a, b, c = distinct(3), distinct(4, seed=1), distinct(2, seed=2)
    for arrays in ((a, b), (a, b, c), (a, np.array(1.5), c)):
        got = run(lambda *xs: xs[0].meshgrid(*xs[1:], indexing=indexing), *arrays)
        want = torch.meshgrid(*(t(x) for x in arrays), indexing=indexing)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, rtol=0, atol=0)
    assert len(run(lambda x: x.meshgrid(), a)) == 1
    with pytest.raises(GraphError, match="meshgrid: indexing is 'ij' or 'xy', got 'yx'"):
        run(lambda x, y: x.meshgrid(y, indexing="yx"), a, b)
    with pytest.raises(GraphError, match="meshgrid takes scalars and vectors"):
        run(lambda x, y: x.meshgrid(y), a, B)


def test_one_hot_tril_triu_against_torch():
    i = np.array([[0, 3, 1], [2, 2, -1]], np.int64)
    same(run(lambda x: x.one_hot(4), i), F.one_hot(t(np.maximum(i, 0)), 4).numpy().astype(np.int32) * (i >= 0)[..., None],
         dtype=np.int32)
    same(run(lambda x: x.one_hot(0), i), np.zeros((2, 3, 0), np.int32))
    with pytest.raises(GraphError, match="one_hot needs an integer dtype, got float64"):
        run(lambda x: x.one_hot(3), B)
    with pytest.raises(GraphError, match="one_hot: num_classes must be a whole number >= 0, got -1"):
        run(lambda x: x.one_hot(-1), i)
    x = distinct(2, 4, 5)
    for d in (-5, -2, -1, 0, 1, 3, 6):
        same(run(lambda x: x.tril(d), x), torch.tril(t(x), d), rtol=0, atol=0)
        same(run(lambda x: x.triu(d), x), torch.triu(t(x), d), rtol=0, atol=0)
    with pytest.raises(GraphError, match=r"tril and triu need a rank of 2 or more, got shape \[5\]"):
        run(lambda x: x.tril(), distinct(5))


# ----------------------------------------------------------------------------- nn
def test_linear_dot_layernorm_batchnorm_normalize_against_torch():
    x, w, b = distinct(2, 3, 4), distinct(4, 5, seed=1), distinct(5, seed=2)
    same(run(lambda x, w, b: x.linear(w, b), x, w, b), F.linear(t(x), t(w).T, t(b)))
    same(run(lambda x, w: x.linear(w), x, w), t(x) @ t(w))
    w1 = distinct(4, seed=3)
    same(run(lambda x, w, b: x.linear(w, b), x, w1, distinct(4, seed=4)), t(x) * t(w1) + t(distinct(4, seed=4)))
    same(run(lambda x, w: x.dot(w), x, w), t(x) @ t(w))
    for axis in (-1, 1, (1, 2)):
        dims = [axis] if isinstance(axis, int) else list(axis)
        mean = t(x).mean(dims, keepdim=True)
        want = (t(x) - mean) / torch.sqrt(((t(x) - mean) ** 2).mean(dims, keepdim=True) + 1e-5)
        same(run(lambda x: x.layernorm(axis), x), want)
    same(run(lambda x: x.layernorm(eps=0.5), x), F.layer_norm(t(x), (4,), eps=0.5))
    y = distinct(2, 3, 4, 2)
    wt, bs, mu, var = distinct(3, seed=5), distinct(3, seed=6), distinct(3, seed=7), 1 + np.abs(distinct(3, seed=8))
    want = F.batch_norm(t(y), t(mu), t(var), t(wt), t(bs), training=False, eps=0.0)
    same(run(lambda y, w, b, m, v: y.batchnorm(w, b, m, v.rsqrt()), y, wt, bs, mu, var), want)
    same(run(lambda y, b, m, v: y.batchnorm(None, b, m, v.rsqrt()), y, bs, mu, var),
         F.batch_norm(t(y), t(mu), t(var), None, t(bs), training=False, eps=0.0))
    same(run(lambda y, w, m, v: y.batchnorm(w, None, m, v.rsqrt()), y, wt, mu, var),
         F.batch_norm(t(y), t(mu), t(var), t(wt), None, training=False, eps=0.0))
    same(run(lambda y, w, b, m: y.batchnorm(w, b, m, UOp.const(0.5, dtypes.float64)), y, wt, bs, mu),
         (t(y) - t(mu)[:, None, None]) * t(wt)[:, None, None] * 0.5 + t(bs)[:, None, None])
    z, mz = distinct(2, 3, 4), distinct(4, seed=9)
    same(run(lambda z, m, v: z.batchnorm(None, None, m, v, axis=2), z, mz, np.abs(mz)), (t(z) - t(mz)) * t(np.abs(mz)))
    for p, dim in ((2.0, 1), (1.0, -1), (3.0, 0), (0, 1)):
        want = F.normalize(t(x), p=p, dim=dim) if p else t(x) / (t(x) != 0).sum(dim, keepdim=True).clamp(min=1e-12)
        same(run(lambda x: x.normalize(p, dim), x), want)
    same(run(lambda x: x.normalize(eps=10.0), x), F.normalize(t(x), eps=10.0))


@pytest.mark.parametrize("mask", [None, "bool", "float", "causal"])
def test_scaled_dot_product_attention_against_torch(mask):
    q, k, v = distinct(2, 3, 4, 5, seed=1), distinct(2, 3, 6, 5, seed=2), distinct(2, 3, 6, 3, seed=3)
    m = {"bool": RNG.random((4, 6)) < 0.7, "float": distinct(4, 6, seed=4)}.get(mask)
    if mask == "bool":
        m[:, 0] = True
    args = [q, k, v] + ([m] if m is not None else [])
    got = run(lambda q, k, v, *m: q.scaled_dot_product_attention(k, v, m[0] if m else None, is_causal=mask == "causal"),
              *args)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), None if m is None else t(m), is_causal=mask == "causal")
    same(got, want)


def test_attention_refusals():
    q = UOp.param("q", (1, 4, 3, 2), dtypes.float64)
    k = UOp.param("k", (1, 3, 3, 2), dtypes.float64)
    with pytest.raises(GraphError, match=r"4 query heads \(axis -3 of \[1, 4, 3, 2\]\) are not a multiple of the key's \[1, 3, 3, 2\]"):
        q.scaled_dot_product_attention(k, k, enable_gqa=True)
    with pytest.raises(GraphError, match="dropout is random"):
        q.scaled_dot_product_attention(q, q, dropout_p=0.1)
    with pytest.raises(GraphError, match="attn_mask and is_causal=True exclude each other"):
        q.scaled_dot_product_attention(q, q, UOp.param("m", (3, 3), dtypes.bool), is_causal=True)


@pytest.mark.parametrize("groups, stride, dilation, padding", [(1, 1, 1, 0), (2, 2, 1, 1), (1, (2, 1), (1, 2), (1, 2)),
                                                                (3, 1, 2, (0, 1, 2, 1)), (6, 2, 1, 2)])
def test_conv2d_against_torch(groups, stride, dilation, padding):
    x = distinct(2, 6, 7, 8, seed=1)
    w = distinct(6, 6 // groups, 3, 2, seed=2)
    b = distinct(6, seed=3)
    if isinstance(padding, tuple) and len(padding) == 4:
        want = F.conv2d(F.pad(t(x), padding), t(w), t(b), stride=stride, dilation=dilation, groups=groups)
    else:
        want = F.conv2d(t(x), t(w), t(b), stride=stride, dilation=dilation, groups=groups, padding=padding)
    same(run(lambda x, w, b: x.conv2d(w, b, groups, stride, dilation, padding), x, w, b), want)
    same(run(lambda x, w: x.conv2d(w, None, groups, stride, dilation, padding), x, w),
         want - t(b)[None, :, None, None], rtol=1e-11, atol=1e-11)


def test_conv1d_and_3d_against_torch():
    x, w = distinct(2, 4, 9, seed=1), distinct(4, 2, 3, seed=2)
    same(run(lambda x, w: x.conv2d(w, groups=2, stride=2, padding=1), x, w), F.conv1d(t(x), t(w), groups=2, stride=2,
                                                                                     padding=1))
    x3, w3 = distinct(1, 2, 4, 5, 3, seed=3), distinct(2, 2, 2, 3, 2, seed=4)
    same(run(lambda x, w: x.conv2d(w, dilation=(1, 1, 2)), x3, w3), F.conv3d(t(x3), t(w3), dilation=(1, 1, 2)))
    with pytest.raises(GraphError, match=r"conv2d: input \[2, 4, 9\] does not fit weight \[4, 2, 3\] with groups=1"):
        run(lambda x, w: x.conv2d(w), x, w)


@pytest.mark.parametrize("groups, stride, dilation, padding, output_padding", [
    (1, 1, 1, 0, 0), (1, 2, 1, 1, 1), (2, (2, 3), 1, (1, 0), (1, 2)), (1, 1, 2, 1, 0), (3, 2, (2, 1), 0, (1, 0)),
    (1, 3, 1, 2, 2), (1, 2, 3, 0, 2),
])
def test_conv_transpose2d_against_torch(groups, stride, dilation, padding, output_padding):
    x = distinct(2, 6, 4, 5, seed=1)
    w = distinct(6, 4 // groups if groups != 3 else 2, 3, 2, seed=2)
    b = distinct(w.shape[1] * groups, seed=3)
    want = F.conv_transpose2d(t(x), t(w), t(b), stride=stride, padding=padding, output_padding=output_padding,
                              groups=groups, dilation=dilation)
    got = run(lambda x, w, b: x.conv_transpose2d(w, b, groups, stride, dilation, padding, output_padding), x, w, b)
    same(got, want)


def test_conv_transpose2d_one_and_three_spatial_axes_and_refusals():
    x, w = distinct(1, 2, 5, seed=1), distinct(2, 3, 3, seed=2)
    same(run(lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1), x, w),
         F.conv_transpose1d(t(x), t(w), stride=2, padding=1, output_padding=1))
    x3, w3 = distinct(1, 2, 3, 2, 2, seed=3), distinct(2, 1, 2, 2, 3, seed=4)
    same(run(lambda x, w: x.conv_transpose2d(w, stride=(1, 2, 1)), x3, w3), F.conv_transpose3d(t(x3), t(w3), stride=(1, 2, 1)))
    with pytest.raises(GraphError, match=r"conv_transpose2d: output_padding must be >= 0 and below the stride or dilation, got 2"):
        run(lambda x, w: x.conv_transpose2d(w, stride=2, output_padding=2), x, w)
    with pytest.raises(GraphError, match=r"conv_transpose2d: input \[1, 2, 5\] does not fit weight \[3, 3, 3\] with groups=1"):
        run(lambda x, w: x.conv_transpose2d(w), x, distinct(3, 3, 3))
    with pytest.raises(GraphError, match=r"conv_transpose2d: padding 4 leaves an output of size \[-1\]"):
        run(lambda x, w: x.conv_transpose2d(w, padding=4), x, w)


@pytest.mark.parametrize("size, mode, align", [((7,), "linear", False), ((3,), "linear", False), ((7,), "linear", True),
                                               ((2, 9), "linear", False), ((5, 3), "linear", True), ((1,), "linear", True),
                                               ((7,), "nearest", False), ((3, 8), "nearest", False),
                                               ((7,), "nearest-exact", False), ((2, 7), "nearest-exact", False)])
def test_interpolate_against_torch(size, mode, align):
    x = distinct(2, 3, 4, 5)
    torch_mode = {1: "linear", 2: "bilinear"}[len(size)] if mode == "linear" else mode
    want = F.interpolate(t(x).reshape(-1, *x.shape[-len(size) - 1:]) if len(size) == 1 else t(x), size, mode=torch_mode,
                         align_corners=align if mode == "linear" else None)
    got = run(lambda x: x.interpolate(size, mode, align), x)
    same(got, want.reshape(got.shape), rtol=1e-6, atol=1e-6)  # the weights are float32, as tinygrad's


def test_interpolate_refusals_and_dtype():
    x = UOp.param("x", (2, 3), dtypes.float64)
    with pytest.raises(GraphError, match=r"interpolate: size is 1 to 2 sizes > 0, got \(1, 2, 3\)"):
        x.interpolate((1, 2, 3))
    with pytest.raises(GraphError, match=r"interpolate: size is 1 to 2 sizes > 0, got \(0,\)"):
        x.interpolate(0)
    with pytest.raises(GraphError, match="interpolate: mode is 'linear', 'nearest' or 'nearest-exact', got 'cubic'"):
        x.interpolate((4,), "cubic")
    with pytest.raises(GraphError, match="interpolate: align_corners is for mode 'linear' only"):
        x.interpolate((4,), "nearest", True)
    assert x.interpolate(5).shape == (2, 5) and x.interpolate(5).dtype is dtypes.float64


def test_sequential_and_dropout():
    x = distinct(3)
    same(run(lambda x: x.sequential([lambda y: y * 2, lambda y: y - 1, UOp.relu]), x), np.maximum(x * 2 - 1, 0))
    same(run(lambda x: x.dropout(0.3), x), x)
    same(run(lambda x: x.dropout(1), x), x)
    with pytest.raises(GraphError, match=r"dropout: p must be in \[0, 1\], got 1.5"):
        run(lambda x: x.dropout(1.5), x)
    with pytest.raises(GraphError, match=r"dropout: p must be in \[0, 1\], got -0.1"):
        run(lambda x: x.dropout(-0.1), x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_family_against_torch(reduction, smoothing):
    logits = distinct(5, 4, seed=1) * 4
    classes = np.array([0, 3, 1, 3, 2], np.int32)
    probs = F.softmax(t(distinct(5, 4, seed=2)), 1).numpy()
    tl = t(logits)
    same(run(lambda x, c: x.cross_entropy(c, reduction, smoothing), logits, classes),
         F.cross_entropy(tl, t(classes).long(), reduction=reduction, label_smoothing=smoothing))
    same(run(lambda x, p: x.cross_entropy(p, reduction, smoothing), logits, probs),
         F.cross_entropy(tl, t(probs), reduction=reduction, label_smoothing=smoothing))
    lp0 = F.log_softmax(tl[0], 0)  # torch's 1-D cross_entropy with smoothing fails; its definition
    same(run(lambda x, c: x.cross_entropy(c, reduction, smoothing), logits[0], classes[1]),
         -(1 - smoothing) * lp0[classes[1]] - smoothing * lp0.mean())
    logits4 = distinct(2, 4, 3, seed=3)
    cls4 = np.array([[0, 3, 2], [1, 1, 0]], np.int32)
    same(run(lambda x, c: x.cross_entropy(c, reduction, smoothing), logits4, cls4),
         F.cross_entropy(t(logits4), t(cls4).long(), reduction=reduction, label_smoothing=smoothing))
    ignored = np.array([0, 3, 1, 2, 1], np.int32)
    for ignore in (-1, 1):
        want = F.cross_entropy(tl, t(ignored).long(), reduction=reduction, label_smoothing=smoothing, ignore_index=ignore)
        same(run(lambda x, c: x.sparse_categorical_crossentropy(c, ignore, smoothing, reduction), logits, ignored), want)
    lp = F.log_softmax(tl, 1).numpy()
    weight = np.abs(distinct(4, seed=4)) + 0.5
    for ignore in (None, 3):
        for w in (None, weight):
            want = F.nll_loss(t(lp), t(classes).long(), None if w is None else t(w), reduction=reduction,
                              ignore_index=-100 if ignore is None else ignore)
            got = run(lambda x, c, *w: x.nll_loss(c, w[0] if w else None, ignore, reduction), lp, classes,
                      *([] if w is None else [w]))
            same(got, want)
    p = 1 / (1 + np.exp(-logits))
    y = RNG.random((5, 4))
    same(run(lambda x, y: x.binary_crossentropy(y, reduction), p, y), F.binary_cross_entropy(t(p), t(y), reduction=reduction))
    same(run(lambda x, y: x.binary_crossentropy_logits(y, reduction), logits, y),
         F.binary_cross_entropy_with_logits(tl, t(y), reduction=reduction))
    pw = np.abs(distinct(4, seed=5)) + 0.3
    same(run(lambda x, y, w: x.binary_crossentropy_logits(y, reduction, w), logits, y, pw),
         F.binary_cross_entropy_with_logits(tl, t(y), reduction=reduction, pos_weight=t(pw)))


def test_loss_refusals():
    x = UOp.param("x", (3, 4), dtypes.float64)
    c = UOp.param("c", (3,), dtypes.int32)
    with pytest.raises(GraphError, match="reduction is one of mean, sum, none, got 'avg'"):
        x.cross_entropy(c, "avg")
    with pytest.raises(GraphError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        x.cross_entropy(c, label_smoothing=1.5)
    with pytest.raises(GraphError, match=r"label_smoothing must be in \[0, 1\], got -0.5"):
        x.sparse_categorical_crossentropy(c, label_smoothing=-0.5)
    with pytest.raises(GraphError, match=r"cross_entropy needs logits with classes, got shape \[\]"):
        UOp.param("s", (), dtypes.float64).cross_entropy(c)
    with pytest.raises(GraphError, match=r"cross_entropy: target shape \[4\] fits neither the logits \[3, 4\] nor their class indices"):
        x.cross_entropy(UOp.param("d", (4,), dtypes.int32))


# ----------------------------------------------------------------------------- indexing
@pytest.mark.parametrize("index", [
    (slice(None, None, 2),), (slice(1, None), slice(None, None, -1)), (slice(None, None, -2), 1, slice(4, 0, -3)),
    (Ellipsis, slice(1, 4, 2)), (None, 2, Ellipsis, None), (-1, -2, -3), (slice(5, 9),), (slice(0, 3, 5), None),
    (slice(-1, -4, -1), slice(-3, None, 2), slice(None, None, 4)), (1, Ellipsis), (Ellipsis,), (slice(2, 1),),
    (slice(None), slice(None, None, 3), -5),
])
def test_basic_indexing_against_numpy(index):
    same(run(lambda x: x[index], A), A[index], rtol=0, atol=0)


def test_basic_indexing_refusals():
    x = UOp.param("x", (3, 4), dtypes.float64)
    with pytest.raises(GraphError, match="index on axis 1: a slice step cannot be 0"):
        x[:, ::0]
    with pytest.raises(GraphError, match="index 4 out of range for axis 1 of size 4"):
        x[0, 4]
    with pytest.raises(GraphError, match="index -4 out of range for axis 0 of size 3"):
        x[-4]
    with pytest.raises(GraphError, match="an index can have only one ellipsis"):
        x[..., 0, ...]
    with pytest.raises(GraphError, match="too many indices: 3 for a tensor of rank 2"):
        x[0, 0, 0]
    with pytest.raises(GraphError, match=r"index on axis 0: an index is an int, a slice, None or \.\.\., not bool"):
        x[True]
    with pytest.raises(GraphError, match=r"not float \(for a tensor of indices, use gather\)|not float"):
        x[1.5]


@pytest.mark.parametrize("index", [
    lambda i, j: (i,), lambda i, j: (slice(None), j), lambda i, j: (i, j), lambda i, j: (i, slice(None), j),
    lambda i, j: (Ellipsis, j), lambda i, j: (i, Ellipsis, j), lambda i, j: (slice(1, None), None, j),
    lambda i, j: (slice(None), i, j), lambda i, j: (i, 2, j), lambda i, j: (None, i, None, j),
])
def test_tensor_indexing_against_torch(index):
    i = np.array([[2, -1, 0], [1, 1, -3]], np.int64)
    j = np.array([3, -4, 0], np.int64)
    got = run(lambda x, i, j: x[index(i, j)], A, i, j)
    same(got, TA[index(t(i), t(j))], rtol=0, atol=0)
    same(run(lambda x: x[index([[2, -1, 0], [1, 1, -3]], [3, -4, 0])], A), TA[index(t(i), t(j))], rtol=0, atol=0)


def test_tensor_index_out_of_range_selects_zero_and_refusals():
    x = np.array([[1.5, -2.0], [3.0, -0.0]])
    same(run(lambda x, i: x[i], x, np.array([0, 2, -3, 1], np.int32)), np.array([[1.5, -2.0], [0, 0], [0, 0], [3.0, 0.0]]))
    same(run(lambda x, i, j: x[i, j], x, np.array([0, 1, 2, 1], np.int32), np.array([1, 0, 0, 2], np.int32)),
         np.array([-2.0, 3.0, 0.0, 0.0]))
    with pytest.raises(GraphError, match=r"an index tensor holds integers"):
        run(lambda x, i: x[i], x, np.array([0.0]))
    with pytest.raises(GraphError, match=r"holds something other than ints"):
        run(lambda x: x[[[0, 1.5]]], x)
    with pytest.raises(GraphError, match=r"index shapes \[\[2\], \[3\]\] do not broadcast"):
        run(lambda x, i, j: x[i, j], x, np.array([0, 1], np.int32), np.array([0, 1, 1], np.int32))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_against_torch(dim):
    index = RNG.integers(0, A.shape[dim], (2, 3, 4))
    index[0, 0, 0] = A.shape[dim] - 1
    got = run(lambda x, i: x.gather(dim, i), A, index.astype(np.int32))
    same(got, torch.gather(TA, dim, t(index)), rtol=0, atol=0)


def test_gather_copies_negative_zero_as_tinygrad_and_refusals():
    x = np.array([[-0.0, 2.0], [3.0, -4.0]])
    i = np.array([[0, 0], [1, 0]], np.int32)
    same(run(lambda x, i: x.gather(1, i), x, i), np.array([[0.0, 0.0], [-4.0, 3.0]]), rtol=0, atol=0)
    with pytest.raises(GraphError, match="gather: the index must be integers, got float64"):
        run(lambda x, i: x.gather(1, i), x, x)
    with pytest.raises(GraphError, match="gather: index rank 1 differs from the tensor's 2"):
        run(lambda x, i: x.gather(1, i), x, np.array([0], np.int32))
    with pytest.raises(GraphError, match=r"gather: index shape \[3, 1\] is larger than \[2, 2\] off axis 1"):
        run(lambda x, i: x.gather(1, i), x, np.zeros((3, 1), np.int32))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_against_torch_without_repeats(dim):
    x = distinct(4, 5)
    src = distinct(3, 4, seed=9)
    index = np.stack([RNG.permutation(x.shape[dim])[:3 if dim == 0 else 4] for _ in range(4 if dim == 0 else 3)], 1 - (dim % 2))
    index = index[:3, :4] if dim == 0 else index
    got = run(lambda x, i, s: x.scatter(dim, i, s), x, index.astype(np.int32), src)
    same(got, torch.scatter(t(x), dim, t(index).long(), t(src)), rtol=0, atol=0)
    got = run(lambda x, i: x.scatter(dim, i, -7.5), x, index.astype(np.int32))
    same(got, torch.scatter(t(x), dim, t(index).long(), -7.5), rtol=0, atol=0)
    for reduce, treduce in (("add", "add"), ("multiply", "multiply")):
        got = run(lambda x, i: x.scatter(dim, i, 1.5, reduce=reduce), x, index.astype(np.int32))
        same(got, torch.scatter(t(x), dim, t(index).long(), 1.5, reduce=treduce))


def test_scatter_repeated_index_last_write_wins_and_empty_index():
    x = np.zeros(5)
    index = np.array([1, 3, 1, 1, 3], np.int32)
    src = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    same(run(lambda x, i, s: x.scatter(0, i, s), x, index, src), np.array([0, 40.0, 0, 50.0, 0]), rtol=0, atol=0)
    same(run(lambda x, i: x.scatter(0, i, 2.0, reduce="add"), x, index), np.array([0, 6.0, 0, 4.0, 0]))
    same(run(lambda x, i: x.scatter(0, i, 2.0, reduce="multiply"), x + 1, index), np.array([1, 8.0, 1, 4.0, 1]))
    same(run(lambda x, i, s: x.scatter(0, i, s), x + 3, np.zeros(0, np.int32), np.zeros(0)), x + 3, rtol=0, atol=0)
    with pytest.raises(GraphError, match="scatter: reduce is None, 'add' or 'multiply', got 'max'"):
        run(lambda x, i: x.scatter(0, i, 1.0, reduce="max"), x, index)
    with pytest.raises(GraphError, match="scatter: reduce takes a number as src; for a tensor src use scatter_reduce"):
        run(lambda x, i, s: x.scatter(0, i, s, reduce="add"), x, index, src)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_against_torch(reduce, include_self):
    x = distinct(4, 5, seed=11)
    src = distinct(4, 6, seed=12)
    index = np.array([[0, 2, 0, 4, 4, 0], [1, 1, 1, 3, 2, 0], [4, 0, 2, 2, 2, 1], [3, 3, 3, 3, 0, 1]], np.int32)
    for dim, idx in ((1, index), (0, index[:, :5] % 4)):
        s = src if dim == 1 else src[:, :5]
        got = run(lambda x, i, s: x.scatter_reduce(dim, i, s, reduce, include_self), x, idx, s)
        want = torch.scatter_reduce(t(x), dim, t(idx).long(), t(s), reduce, include_self=include_self)
        same(got, want)
    xi = np.array([[5, -3, 0, 7]], np.int32)
    si = np.array([[2, 9, -8, 4, -1]], np.int32)
    ii = np.array([[0, 0, 3, 1, 1]], np.int32)
    got = run(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self), xi, ii, si)
    want = torch.scatter_reduce(t(xi), 1, t(ii).long(), t(si), reduce, include_self=include_self)
    if reduce == "mean":  # torch's integer mean rounds toward zero; the builder's is a float mean
        return
    same(got, want)


def test_scatter_refusals():
    x = UOp.param("x", (3, 4), dtypes.float64)
    i = UOp.param("i", (2, 2), dtypes.int32)
    with pytest.raises(GraphError, match="scatter_reduce: reduce is one of sum, prod, mean, amax, amin, got 'max'"):
        x.scatter_reduce(0, i, x, "max")
    with pytest.raises(GraphError, match="scatter: the index must be integers, got float64"):
        x.scatter(0, x, x)
    with pytest.raises(GraphError, match="scatter_reduce: the tensor, index and src have ranks 2, 2 and 1: they must be equal"):
        x.scatter_reduce(0, i, UOp.param("s", (4,), dtypes.float64), "sum")
    with pytest.raises(GraphError, match=r"scatter: index shape \[2, 5\] must fit in src's \[3, 5\] and, off axis 0, in the tensor's \[3, 4\]"):
        x.scatter(0, UOp.param("j", (2, 5), dtypes.int32), UOp.param("s", (3, 5), dtypes.float64))
    with pytest.raises(GraphError, match=r"scatter: index shape \[2, 2\] must fit in src's \[1, 4\]"):
        x.scatter(0, i, UOp.param("s", (1, 4), dtypes.float64))
    with pytest.raises(GraphError, match="scatter: src is float32, the tensor float64: they must be equal"):
        x.scatter(0, i, UOp.param("s", (2, 2), dtypes.float32))
    x.scatter(0, UOp.param("k", (5, 2), dtypes.int32), UOp.param("s", (5, 2), dtypes.float64))  # along dim: any size


def test_masked_select_and_nonzero_with_sizes():
    x = distinct(3, 4)
    m = RNG.random((3, 4)) < 0.5
    m[0, 1] = True
    kept = x[m]
    for size in (1, kept.size, kept.size + 3):
        want = np.concatenate([kept, np.full(max(0, size - kept.size), -9.0)])[:size]
        same(run(lambda x, m: x.masked_select(m, size=size, fill_value=-9.0), x, m), want, rtol=0, atol=0)
    row = m[1]
    same(run(lambda x, m: x.masked_select(m, size=12), x, row),
         np.concatenate([x[:, row].reshape(-1), np.zeros(12 - 3 * row.sum())]), rtol=0, atol=0)
    i = np.array([[0, 2, 0], [3, 0, -4]], np.int32)
    want = np.argwhere(i).astype(np.int32)
    same(run(lambda x: x.nonzero(size=3), i), want, dtype=np.int32)
    same(run(lambda x: x.nonzero(size=5, fill_value=-1), i), np.concatenate([want, np.full((2, 2), -1, np.int32)]))
    same(run(lambda x: x.nonzero(size=2), np.array(5.0)), np.zeros((2, 0), np.int32), dtype=np.int32)
    with pytest.raises(GraphError, match="masked_select: the mask must be bool, got float64"):
        run(lambda x: x.masked_select(x, size=1), x)


# ----------------------------------------------------------------------------- gradients where the form matters
def grads(build, *arrays, wrt=(0,)):
    """d sum(w * build(*params)) / d params[k], w distinct weights (order-sensitive)."""
    from uopcli import Graph
    from uopcli.backends.numpy import evaluate_graph
    from uopcli.tools.differentiate import differentiate
    params = [UOp.param(f"a{k}", a.shape, dtype_of(a.dtype)) for k, a in enumerate(arrays)]
    out = build(*params)
    weights = distinct(*out.shape, seed=77) if out.shape else np.array(1.3)
    loss = (out * UOp.buffer(weights)).sum()
    graph, _ = differentiate(Graph({"loss": loss}, params), [f"a{k}" for k in wrt])
    values = evaluate_graph(graph, {f"a{k}": a for k, a in enumerate(arrays)})
    return [values[f"grad_a{k}"] for k in wrt], weights


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_max_min_split_a_tie_evenly_as_torch(reduce, include_self):
    # with include_self, ties between the tensor's own value and the written ones (3.0, 5.0);
    # without, own values equal to no result: torch's backward splits with an own value that
    # equals the result even when include_self=False left it out
    x = np.array([[3.0, 1.0, 5.0, 0.0]]) if include_self else np.array([[-7.0, 2.5, -9.0, 0.5]])
    src = np.array([[3.0, 3.0, 1.0, 5.0, -2.0]])
    index = np.array([[0, 0, 1, 2, 3]], np.int32)
    (gx, gs), w = grads(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self), x, index, src, wrt=(0, 2))
    tx, ts = t(x).requires_grad_(), t(src).requires_grad_()
    out = torch.scatter_reduce(tx, 1, t(index).long(), ts, reduce, include_self=include_self)
    (out * t(w)).sum().backward()
    same(gx, tx.grad)
    same(gs, ts.grad)


@pytest.mark.parametrize("build, oracle", [
    (lambda x: x.logsumexp(1), lambda x: torch.logsumexp(x, 1)),
    (lambda x: x.logcumsumexp(1), lambda x: torch.logcumsumexp(x, 1)),
    (lambda x: x.softmin(1), lambda x: F.softmin(x, 1)),
    (lambda x: x.cummax(1)[0], lambda x: torch.cummax(x, 1).values),
    (lambda x: x.sort(1)[0], lambda x: torch.sort(x, 1).values),
    (lambda x: x.layernorm(1), lambda x: F.layer_norm(x, (6,), eps=1e-5)),
    (lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),
    (lambda x: x.cumsum(1), lambda x: torch.cumsum(x, 1)),
    (lambda x: x.cumprod(1), lambda x: torch.cumprod(x, 1)),
    (lambda x: x.pad(((0, 0), (2, 3)), mode="reflect"), lambda x: F.pad(x, (2, 3), mode="reflect")),
    (lambda x: x.roll(2, 1), lambda x: torch.roll(x, 2, 1)),
])
def test_composite_gradients_against_torch(build, oracle):
    x = distinct(4, 6, seed=5)
    (g,), w = grads(build, x)
    tx = t(x).requires_grad_()
    (oracle(tx) * t(w)).sum().backward()
    same(g, tx.grad, rtol=1e-10, atol=1e-10)


def test_cumulative_ops_with_a_size_one_axis_beside_the_running_one():
    x = distinct(1, 6, seed=8)
    same(run(lambda x: x.cumsum(1), x), np.cumsum(x, 1))
    same(run(lambda x: x.cumprod(1), x), np.cumprod(x, 1))
    same(run(lambda x: x.logcumsumexp(1), x), torch.logcumsumexp(t(x), 1))
    same(run(lambda x: x.cummax(1)[0], x), np.maximum.accumulate(x, 1), rtol=0, atol=0)
    same(run(lambda x: x.cummin(1)[1], x), torch.cummin(t(x), 1).indices.numpy().astype(np.int32))
    same(run(lambda x: x.cumsum(0), x), x)
    e = np.zeros((3, 0))
    assert run(lambda x: x.cumsum(0), e).shape == (3, 0) and run(lambda x: x.logcumsumexp(1), e).shape == (3, 0)
    assert run(lambda x: x.cummax(0)[0], e).shape == (3, 0)


def test_attention_of_rank_three_and_grouped_heads_against_torch():
    q, k, v = distinct(4, 3, 5, seed=1), distinct(2, 6, 5, seed=2), distinct(2, 6, 3, seed=3)
    same(run(lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), q, k, v),
         F.scaled_dot_product_attention(t(q), t(k), t(v), enable_gqa=True))
    k4, v4 = distinct(4, 6, 5, seed=4), distinct(4, 6, 3, seed=5)
    same(run(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), q, k4, v4),
         F.scaled_dot_product_attention(t(q), t(k4), t(v4), is_causal=True))
    q5, k5, v5 = distinct(2, 6, 3, 4, seed=6), distinct(2, 3, 5, 4, seed=7), distinct(2, 3, 5, 2, seed=8)
    same(run(lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), q5, k5, v5),
         F.scaled_dot_product_attention(t(q5), t(k5), t(v5), enable_gqa=True))
    with pytest.raises(GraphError, match=r"6 query heads \(axis -3 of \[2, 6, 3, 4\]\) are not a multiple of the value's \[4, 5, 2\]"):
        run(lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), q5, k5, distinct(4, 5, 2))


def test_max_unpool_of_one_and_three_spatial_axes_with_an_int_kernel():
    x = distinct(2, 3, 8, seed=3)
    pooled, indices = F.max_pool1d(t(x), 2, return_indices=True)
    same(run(lambda p, i: p.max_unpool2d(i, 2), pooled.numpy(), indices.numpy().astype(np.int32)),
         F.max_unpool1d(pooled, indices, 2), rtol=0, atol=0)
    y = distinct(1, 2, 4, 4, 6, seed=4)
    pooled, indices = F.max_pool3d(t(y), 2, return_indices=True)
    same(run(lambda p, i: p.max_unpool2d(i, 2), pooled.numpy(), indices.numpy().astype(np.int32)),
         F.max_unpool3d(pooled, indices, 2), rtol=0, atol=0)
    z = distinct(1, 2, 5, 5, seed=5)  # windows that do not overlap: no index twice (the builder adds repeats up)
    pooled, indices = F.max_pool2d(t(z), 2, stride=2, padding=1, return_indices=True)
    w = distinct(1, 2, 6, 6, seed=6)
    pw, iw = F.max_pool2d(t(w), 2, stride=2, padding=1, return_indices=True)  # 4 x 4 windows: the default size is 6
    same(run(lambda p, i: p.max_unpool2d(i, 2, stride=2, padding=1), pw.numpy(), iw.numpy().astype(np.int32)),
         F.max_unpool2d(pw, iw, 2, stride=2, padding=1), rtol=0, atol=0)
    same(run(lambda p, i: p.max_unpool2d(i, 2, stride=2, padding=1, output_size=(1, 2, 5, 5)), pooled.numpy(),
             indices.numpy().astype(np.int32)),
         F.max_unpool2d(pooled, indices, 2, stride=2, padding=1, output_size=(5, 5)), rtol=0, atol=0)
    with pytest.raises(GraphError, match=r"max_unpool2d: values \[1, 2, 3, 3\] and indices \[1, 2, 3\] must be one shape"):
        run(lambda p, i: p.max_unpool2d(i), pooled.numpy(), np.zeros((1, 2, 3), np.int32))


def test_split_an_axis_of_one_and_isclose_with_a_nan_number():
    x = distinct(3, 1, 2)
    for sizes in (1, 2, [1]):
        got, want = run(lambda x: x.split(sizes, 1), x), torch.split(t(x), sizes, 1)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, rtol=0, atol=0)
    y = np.array([1.0, np.nan, np.inf, 2.0])
    for other in (1.0, math.nan, math.inf):
        for equal_nan in (False, True):
            same(run(lambda y: y.isclose(other, equal_nan=equal_nan), y), np.isclose(y, other, equal_nan=equal_nan))


def test_more_einsum_forms_and_default_diagonal():
    a, b, c = distinct(2, 3, 4, seed=1), distinct(4, 5, seed=2), distinct(3, 2, 2, seed=3)
    for formula, ops in (("ij, jk -> ik", (a[0], b)), (" ...ij,jk->...ik", (a, b)), ("...ij,jk", (a, b)),
                         ("jii->j", (c,)), ("ijj", (c,))):
        same(run(lambda *xs: UOp.einsum(formula, *xs), *ops), np.einsum(formula.replace(" ", ""), *ops))
    same(run(lambda x: x.diagonal(), a), torch.diagonal(t(a)), rtol=0, atol=0)
    same(run(lambda x: x.diagonal(1), a), torch.diagonal(t(a), 1), rtol=0, atol=0)


def test_selu_at_signed_zeros_and_its_gradient_there_are_tinygrads():
    """tinygrad 0.14: selu(-0.0) = -0.0 and d selu / dx = gamma at 0 (its mask is x >= 0;
    torch's x > 0 gives +0.0 and gamma·alpha)."""
    z = np.array([-0.0, 0.0])
    bits(run(lambda x: x.selu(), z), np.array([-0.0, 0.0]))
    (g,), w = grads(lambda x: x.selu(), z)
    same(g, 1.0507 * w)


def test_zeros_and_ones_take_any_dtype():
    for dtype, np_dtype in ((dtypes.int8, np.int8), (dtypes.float64, np.float64), (dtypes.uint16, np.uint16),
                            (dtypes.bool, np.bool_)):
        bits(run(lambda: UOp.zeros(2, 3, dtype=dtype)), np.zeros((2, 3), np_dtype))
        bits(run(lambda: UOp.ones((3,), dtype=dtype)), np.ones(3, np_dtype))


def test_defaults_and_messages_the_first_run_left_unread():
    x = distinct(4, 3)
    got, want = run(lambda x: x.split(3), x), torch.split(t(x), 3)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    i = np.array([[0, 2, 0], [3, 0, -4]], np.int32)
    same(run(lambda x: x.nonzero(size=5), i), np.concatenate([np.argwhere(i), np.zeros((2, 2))]).astype(np.int32))
    p = UOp.param("p", (2, 3), dtypes.float64)
    with pytest.raises(GraphError) as refused:
        p.sum(dtype=3.5)
    assert str(refused.value) == "not a dtype: 3.5 (a DType such as dtypes.float32, its name, or a numpy dtype)"
    with pytest.raises(GraphError) as refused:
        p.cumsum(5)
    assert str(refused.value) == "axis 5 out of range [-2, 1] for rank 2"
    with pytest.raises(GraphError) as refused:
        UOp.tuple(p, p)[0:1]
    assert str(refused.value) == "TUPLE has no shape to index (of a FUNCTION or CALL, [i] is output i)"
    # a range whose last value is int32's largest is int32, as tinygrad's
    same(run(lambda: UOp.arange(2 ** 31 - 3, 2 ** 31)), np.arange(2 ** 31 - 3, 2 ** 31).astype(np.int32), dtype=np.int32)
    same(run(lambda: UOp.arange(-2 ** 31, -2 ** 31 + 2)), np.array([-2 ** 31, -2 ** 31 + 1], np.int32), dtype=np.int32)
    v = distinct(2, 7)
    same(run(lambda x: x._pool((3,)), v), t(v).unfold(1, 3, 1), rtol=0, atol=0)  # stride and dilation 1 by default


def _dilated_avg_pool(x, kernel, stride, dilation, padding):
    """numpy: the mean of each dilated window over the elements inside the unpadded input."""
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=np.nan)
    span = [dilation * (k - 1) + 1 for k in kernel]
    rows = (padded.shape[2] - span[0]) // stride + 1
    cols = (padded.shape[3] - span[1]) // stride + 1
    out = np.empty(x.shape[:2] + (rows, cols))
    for r in range(rows):
        for c in range(cols):
            window = padded[:, :, r * stride:r * stride + span[0]:dilation, c * stride:c * stride + span[1]:dilation]
            out[:, :, r, c] = np.nanmean(window.reshape(*x.shape[:2], -1), axis=-1)
    return out


def test_pools_defaults_dilation_and_dtypes():
    x = distinct(1, 2, 6, 7, seed=9)
    same(run(lambda x: x.avg_pool2d((2, 2), stride=1, dilation=2, padding=1, count_include_pad=False), x),
         _dilated_avg_pool(x, (2, 2), 1, 2, 1))
    same(run(lambda x: x.avg_pool2d((3, 3), stride=2, padding=1), x), F.avg_pool2d(t(x), 3, 2, 1))  # counts the padding
    h = x.astype(np.float16)
    got = run(lambda x: x.avg_pool2d((3, 3), stride=2, padding=1, count_include_pad=False), h)
    assert got.dtype == np.float16
    same(got.astype(np.float64), F.avg_pool2d(t(x), 3, 2, 1, count_include_pad=False), rtol=2e-3, atol=2e-3)


def test_batchnorm_over_a_tuple_of_axes_and_default_reductions():
    y = distinct(2, 3, 4, seed=3)
    mean, invstd = distinct(3, 4, seed=4), np.abs(distinct(3, 4, seed=5)) + 0.5
    weight, bias = distinct(3, 4, seed=6), distinct(3, 4, seed=7)
    same(run(lambda y, w, b, m, v: y.batchnorm(w, b, m, v, axis=(1, 2)), y, weight, bias, mean, invstd),
         (y - mean) * weight * invstd + bias)
    logits, classes = distinct(5, 4, seed=1) * 4, np.array([0, 3, 1, 3, 2], np.int32)
    tl = t(logits)
    same(run(lambda x, c: x.cross_entropy(c), logits, classes), F.cross_entropy(tl, t(classes).long()))
    lp = F.log_softmax(tl, 1)
    same(run(lambda x, c: x.nll_loss(c), lp.numpy(), classes), F.nll_loss(lp, t(classes).long()))
    y01 = RNG.random((5, 4))
    same(run(lambda x, y: x.binary_crossentropy_logits(y), logits, y01), F.binary_cross_entropy_with_logits(tl, t(y01)))
    same(run(lambda x, y: x.binary_crossentropy(y), 1 / (1 + np.exp(-logits)), y01),
         F.binary_cross_entropy(torch.sigmoid(tl), t(y01)))
    same(run(lambda x, c: x.sparse_categorical_crossentropy(c), logits, classes), F.cross_entropy(tl, t(classes).long()))
    # ignore_index -1 means no index is ignored: a label -1 picks no class and still counts in the mean
    minus = np.array([0, -1, 1, 3, 2], np.int32)
    want = -F.log_softmax(tl, 1)[[0, 2, 3, 4], [0, 1, 3, 2]].sum() / 5
    same(run(lambda x, c: x.sparse_categorical_crossentropy(c), logits, minus), want)
    # class indices along the last axis of (N, T, C) logits
    l3, c3 = distinct(2, 3, 4, seed=8), np.array([[0, 3, 1], [2, 2, 0]], np.int32)
    for smoothing in (0.0, 0.3):
        same(run(lambda x, c: x.sparse_categorical_crossentropy(c, label_smoothing=smoothing), l3, c3),
             F.cross_entropy(t(l3).permute(0, 2, 1), t(c3).long(), label_smoothing=smoothing))
    h = logits.astype(np.float16)
    assert run(lambda x, c: x.cross_entropy(c, "none"), h, classes).dtype == np.float16


def test_small_outputs_defaults_and_exact_words_of_layers():
    x, w = distinct(1, 1, 1, seed=1), distinct(1, 1, 1, seed=2)
    same(run(lambda x, w: x.conv_transpose2d(w, stride=2, output_padding=1), x, w),
         F.conv_transpose1d(t(x), t(w), stride=2, output_padding=1))
    v = distinct(2, 3, 5, seed=3)
    same(run(lambda x: x.interpolate((2,), align_corners=True), v),
         F.interpolate(t(v), (2,), mode="linear", align_corners=True), rtol=1e-6, atol=1e-6)
    big = distinct(2, 3, 4) * 100
    same(run(lambda x: x.normalize(), big), F.normalize(t(big)))
    p = UOp.param("p", (2, 3), dtypes.float64)
    for build, words in ((lambda: p.interpolate((4,), "nearest", True), "interpolate: align_corners is for mode 'linear' only"),
                         (lambda: p.reshape(1, 2, 3).scaled_dot_product_attention(p.reshape(1, 2, 3), p.reshape(1, 2, 3),
                                                                                  dropout_p=0.5),
                          "scaled_dot_product_attention: dropout is random, and a graph here is not")):
        with pytest.raises(GraphError) as refused:
            build()
        assert str(refused.value) == words


def test_cumulative_defaults_and_a_running_max_taken_along_its_own_axis():
    x = distinct(4, 3, seed=2)
    values, indices = run(lambda x: x.cummin(), x)
    want = torch.cummin(t(x), 0)
    same(values, want.values, rtol=0, atol=0)
    same(run(lambda x: x.logcumsumexp(), x), torch.logcumsumexp(t(x), 0))
    # rows a thousand apart: a maximum from another row would overflow exp or lose every term
    far = np.array([[1000.0, 999.0, 1001.0, 1000.5], [-1000.0, -1002.0, -999.0, -1000.5], [0.5, 0.25, -0.5, 1.0]])
    for axis in (0, 1):
        same(run(lambda x: x.logcumsumexp(axis), far), torch.logcumsumexp(t(far), axis))


@pytest.mark.parametrize("index", [
    lambda i: (None, slice(1, None), Ellipsis, i), lambda i: (0, Ellipsis, i), lambda i: (slice(None), None, Ellipsis, i),
    lambda i: (i, Ellipsis, 1), lambda i: (1, None, Ellipsis, i), lambda i: (None, i, Ellipsis, i),
    lambda i: (slice(1, None), i, Ellipsis),
])
def test_tensor_indexing_after_an_ellipsis_counts_the_axes_before_it(index):
    i = np.array([[2, -1], [0, 1]], np.int64)
    same(run(lambda x, i: x[index(i)], A, i), TA[index(t(i))], rtol=0, atol=0)
