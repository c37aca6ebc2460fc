"""float64 forms of exp, exp - 1, log(1 + u), the logistic function, sin and cos, softsign,
softmax and log Σeˣ, for the ops whose builder forms are only float32-accurate in float64
(ops_math.py, ops_tensor.py, ops_reduce.py and ops_activation.py call them for float64
inputs only, but for float32 and float16 Sin, Cos and Tan, which are sin_cos64's rounded; float32 and float16 graphs keep the builder's forms otherwise; Sin keeps SIN's value, so that an exported graph reads back bit for bit, with sin_cos64's slopes). Each is accurate to a few ulps in relative terms, and so
is its gradient, which `diff` takes through the same graph: no branch makes inf or nan
for the gradient of another (the values each branch sees are kept finite).

The builder's exp is 2^(x·log2 e): the product rounds, an error of |x| ulps in the result
(5e-14 at x = 700). log(1 + eˣ), eˣ - 1 and 1 + e⁻ˣ lose every digit where the 1 swamps the
other term."""

from __future__ import annotations

import math

from uopcli import UOp

LOG2E = 1 / math.log(2)
# ln 2 in two parts (fdlibm's): LN2_HI has 32 significant bits, so k·LN2_HI is exact for
# |k| < 2^21, and x - k·LN2_HI is exact (Sterbenz) for k = floor(x·log2 e) but -1 and 0
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
EXP_LOW, EXP_HIGH = -746.0, 711.0  # e^x is 0 below and inf above in float64 (e^x/2 too)


def exp64(x: UOp, scale: int = 0, overflows: bool = True) -> UOp:
    """eˣ = 2^r·log2 e·2^k, k = floor(x·log2 e) (at most 1023), r = x - k·ln 2 in [0, 0.92)
    (from ln 2's two parts, exact to 2^-80): the exponent r·log2 e rounds by at most 1e-16
    instead of |x| ulps. 2^k is two powers of two, so that a subnormal result rounds once;
    2^r·log2 e >= 1 and 2^k finite, so the slope (the cotangent times 2^k first) overflows
    only where eˣ does. x is clamped to [-746, 711] first (0 and inf beyond: k stays
    finite; nan is kept). Below, the slope is 0, as eˣ's; above, where eˣ is inf, it is the
    cotangent times 2^k twice (2^(2046 + 2·scale)): inf for any cotangent from 2^-1020 on,
    0 for 0, where the clamp's 0 was (at x = 711.5 and +inf). `scale`: eˣ·2^scale, in one
    rounding (cosh's eˣ/2 near 710). `overflows=False`: for callers whose x stays below 711
    (x <= 0 mostly), without that branch (its three nodes and x kept alive cost Exp 50%)."""
    above = x > EXP_HIGH  # nan is not
    clamped = (x < EXP_LOW).where(EXP_LOW, above.where(EXP_HIGH, x))
    k = (clamped * LOG2E).floor()
    k = (k > 1023).where(1023.0, k).detach()
    r = (clamped - k * LN2_HI) - k * LN2_LO
    half = (k * 0.5).trunc()
    low, high = half.exp2(), (k - half + scale).exp2()
    mantissa = (r * LOG2E).exp2()
    if overflows:  # x·2^k·2^k (k = 1023): data, so no rewrite folds the powers into one inf constant
        mantissa = above.where(x * low * high, mantissa)
    return mantissa * low * high


def _negative_magnitude(x: UOp) -> tuple[UOp, UOp]:
    """x > 0 and -|x|, by a WHERE (the builder's |x| = x·sign x has slope 0 at 0)."""
    positive = x > 0
    return positive, positive.where(-x, x)


def log1p64(u: UOp) -> UOp:
    """log(1 + u) for u >= 0 (or above -1): log w + e/w with w = 1 + u rounded and e its
    rounding error, exact by Fast2Sum (the larger of 1 and u first). log w alone is 0 for
    u < 1e-16. The slope is 1/w (e is constant to first order). inf stays inf. The error is
    (1 - w) + u, not u - (w - 1): the same exact value, but eval's tinygrad rewrites fold
    (1 + u) - 1 into u (fold_constant_terms), which made it 0 (float64 Softplus(-30) was
    9.348e-14, not 9.358e-14, and 0 below -37 again)."""
    w = 1.0 + u
    error = (u.abs() <= 1).where((1.0 - w) + u, 1.0 - (w - u))
    error = w.ne(math.inf).where(error, 0.0)  # inf - inf
    return w.log() + error / w


def sigmoid64(x: UOp) -> UOp:
    """1/(1 + eˣ) as 1/(1 + e^-|x|) for x > 0 and e^x/(1 + e^x) below: e never overflows,
    so neither the value (subnormal from x = -708) nor the slope (1/(1 + e)² was inf·0)
    is lost."""
    positive, negative = _negative_magnitude(x)
    e = exp64(negative, overflows=False)
    s = 1.0 / (1.0 + e)
    return positive.where(s, e * s)


def softplus64(x: UOp) -> UOp:
    """log(1 + eˣ) = max(x, 0) + log1p(e^-|x|): log(1 + e^-|x|) was 0 below x = -37."""
    positive, negative = _negative_magnitude(x)
    return positive.where(x, 0.0) + log1p64(exp64(negative, overflows=False))


def softsign64(x: UOp) -> UOp:
    """x/(1 + |x|) below |x| = 1 (as the builder), ±(1 - r) with r = 1/(1 + |x|) from 1 on:
    both within an ulp, and the second's slope is r² along one path, where x/(1 + |x|)'s is
    (1 - |y|)/(1 + |x|), whose 1 - |y| cancels as |y| nears 1 (4e-9 off at |x| = 1e8, 0
    from 1e16; below 1, |y| < 1/2). ±inf gives nan, as x/(1 + |x|) does in float32 and in
    onnxruntime, onnx.reference and torch (inf/inf), with slope 0, the limit."""
    negative = x < 0
    magnitude = negative.where(-x, x)
    near = magnitude < 1  # nan is far
    inner = near.where(x, 0.0) / (1.0 + near.where(magnitude, 0.0))
    r = (1.0 + magnitude).reciprocal()
    return magnitude.isinf().where(math.nan, near.where(inner, negative.where(r - 1.0, 1.0 - r)))


def sum_exp_less_one64(x: UOp, top: UOp, axes, keepdim: bool = True) -> UOp:
    """Σ e^(x - top) - 1 over `axes` (() sums nothing) without the rounding of the 1, for
    log1p: log Σ e^(x - top) lost every term below 1e-16 of the largest (0 for x = [0, -41]).
    `top` is x's largest (dims kept) or 0: each of the k x equal to it adds e^0 - 1 = 0 and
    k - 1 comes last, so no 1 meets the small terms; each term is still e^(x - top) less a
    constant, with all of e's derivatives (a tie's slope is e^0/Σ), whether top is detached
    or not. -1 where no x is top and every e is 0 (all -inf, with top 0 for -inf)."""
    tie = x.eq(top).cast(x.dtype)
    terms = exp64(x - top, overflows=False) - tie

    def total(v: UOp) -> UOp:
        return v.sum(axes, keepdim=keepdim) if axes else v
    return total(terms) + (total(tie) - 1.0)


def softmax64(x: UOp, axis: int) -> UOp:
    """e^(x - top) / Σ e^(x - top) along `axis`, top the (detached) largest, by exp64: the
    builder's eˣ was |x - top| ulps off (30 at a logit 30 below the largest)."""
    e = exp64(x - x.max(axis, keepdim=True).detach(), overflows=False)
    return e / e.sum(axis, keepdim=True)


def log_softmax64(x: UOp, axis: int) -> UOp:
    """x - top - log1p(Σ e^(x - top) - 1) along `axis`, top the largest: its own output is
    -log1p of the rest (x - top - log Σ gave 0 from x = [0, -41]). Any top gives the same
    function, and with top detached the same values, but not the same slopes: detached, the
    largest's slope to itself is 1 - 1/Σ, which cancels (0 from x = [0, -41]); attached,
    that 1 comes back through top as the others' Σ p, accurate, but every other output's
    slope to the largest then passes through top's sum too (-p, 50 ulps off among 1000
    close values). So the largest, if alone, takes the attached form, the rest the detached.
    Non-finite x give what x - top - log Σ gave (nan for a row of -inf or with +inf)."""
    top = x.max(axis, keepdim=True)
    tie = x.eq(top)
    alone = tie & tie.cast(x.dtype).sum(axis, keepdim=True).eq(1)
    return alone.where(_shifted_log_softmax64(x, top, axis), _shifted_log_softmax64(x, top.detach(), axis))


def _shifted_log_softmax64(x: UOp, top: UOp, axis: int) -> UOp:
    return (x - top) - log1p64(sum_exp_less_one64(x, top, (axis,)))


def expm1_64(x: UOp, sinh_series) -> UOp:
    """eˣ - 1 for x <= 0: 2·sinh(x/2)·e^(x/2) above -1 (sinh by its series, `sinh_series`),
    where eˣ - 1 cancels (all digits lost at 1e-17), eˣ - 1 below (|eˣ - 1| >= 0.63)."""
    near = x > -1.0
    half = near.where(x, 0.0) * 0.5
    # + 0.0: e^-0 - 1 is +0.0, as onnxruntime's Selu and Celu give it (2·sinh(-0) is -0.0)
    return near.where(2.0 * sinh_series(half) * exp64(half, overflows=False) + 0.0, exp64(x, overflows=False) - 1.0)


def cosh_sinh64(x: UOp) -> tuple[UOp, UOp]:
    """cosh x and sinh x as e^|x|/2 ± e^-|x|/2, each by exp64 with the 1/2 in its power of
    two: finite (value and slope) up to cosh's overflow at 710.48 (eˣ overflowed from 709.78).
    sinh cancels below |x| = 0.5, where its callers take the series."""
    magnitude = (x < 0).where(-x, x)
    big, small = exp64(magnitude, -1), exp64(-magnitude, -1, overflows=False)
    return big + small, (x < 0).where(small - big, big - small)


# π/2 in three parts of 33 bits and a tail (fdlibm's): n·PIO2_1, n·PIO2_2, n·PIO2_3 are exact
# for |n| < 2^20, so x - n·π/2 is known to ~2^-119·n
PIO2_1, PIO2_2, PIO2_3 = 1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21
PIO2_3T = 8.47842766036889956997e-32
REDUCED_BELOW = 2.0 ** 19 * math.pi / 2  # n < 2^19 there


def sin_cos64(x: UOp) -> tuple[UOp, UOp]:
    """sin x and cos x in float64, values and slopes. The builder's cos is sin(π/2 - x),
    whose π/2 - x rounds (cos x of x near π/2 + kπ all wrong, 1e-13 off at x = 100), and
    SIN's slope is that cos. Below |x| = 2^19·π/2: r = x - n·π/2 with n = round(x·2/π)
    (Cody-Waite, π/2 in three parts, the first subtraction exact, the second by TwoSum),
    |r| <= π/4; then sin r, and cos r = 1 - 2·sin²(r/2), with no cancellation (nor in their
    slopes), chosen and signed by n mod 4. Beyond: SIN itself (accurate), and cos x =
    sin 2x / (2 sin x) (1 - 2·sin²(x/2) once 2x overflows), of x detached, turned by
    d = x - x(detached) = 0 through the addition formulas, which gives them their slopes.
    float32 and float16 Cos and Tan are these, rounded."""
    near = x.abs() < REDUCED_BELOW  # nan and inf are far
    xs = near.where(x, 0.0)  # finite for the reduction and its gradient
    n = (xs * (2 / math.pi) + 0.5).floor().detach()
    w = xs - n * PIO2_1  # exact
    b = -(n * PIO2_2)  # exact
    t = w + b  # TwoSum: t + e = w + b exactly
    bv = t - w
    e = (w - (t - bv)) + (b - bv)
    r = t + ((e - n * PIO2_3) - n * PIO2_3T)
    quarter = n - 4.0 * (n * 0.25).floor()  # n mod 4, exactly
    s = r.sin()
    half = (r * 0.5).sin()
    c = 1.0 - 2.0 * half * half
    sin_near = quarter.eq(0).where(s, quarter.eq(1).where(c, quarter.eq(2).where(-s, -c)))
    cos_near = quarter.eq(0).where(c, quarter.eq(1).where(-s, quarter.eq(2).where(-c, s)))
    xf = near.where(1.0, x)  # away from the reduced range; 1 keeps sin x nonzero
    fixed = xf.detach()
    sin_fixed = fixed.sin()
    doubled = fixed.abs() < 8e307
    ratio = doubled.where(fixed, 1.0)
    halved = (fixed * 0.5).sin()
    cos_fixed = doubled.where((ratio * 2.0).sin() / (2.0 * ratio.sin()), 1.0 - 2.0 * halved * halved)
    # sin(x0 + d) = sin x0·cos d + cos x0·sin d at d = x - x0 = 0, x0 = x detached: the values
    # are the accurate sin x0 and cos x0, and so are the slopes of every order (SIN's own
    # slope, sin(π/2 - x), lost π/2 beside a large x: 1e-16 for cos(1e9) = 0.54)
    d = xf - fixed
    half_d = (d * 0.5).sin()
    sin_d, cos_d = d.sin(), 1.0 - 2.0 * half_d * half_d
    sin_far = sin_fixed * cos_d + cos_fixed * sin_d
    cos_far = cos_fixed * cos_d - sin_fixed * sin_d
    sin_near = xs.eq(0).where(xs, sin_near)  # r is +0.0 for x = -0.0
    return near.where(sin_near, sin_far), near.where(cos_near, cos_far)
