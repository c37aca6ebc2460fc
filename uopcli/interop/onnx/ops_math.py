"""ONNX's elementwise maths beyond ops_tensor.py's: the variadic Min/Sum/Mean (Max is in
ops_exact.py), LessOrEqual, Clip, Sign, the trigonometric and hyperbolic functions, Size,
and BitShift-28's signed shifts. Calling conventions as in ops_tensor.py; the table rows
in import_table.py name the spec versions. Each is a small graph of the format's ops, so
`diff` differentiates it."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from uopcli import UOp, dtypes

from .float64 import cosh_sinh64, log1p64, sin_cos64


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _operands(ctx) -> list[UOp]:
    operands = [ctx.x(i) for i in range(ctx.input_count) if ctx.present(i)]
    if not operands:
        ctx.refuse("needs at least one input")
    return operands


def min_(ctx):
    """Min-13: the elementwise smallest of all inputs, broadcast (nan propagates, as np.minimum)."""
    return reduce(UOp.minimum, _operands(ctx))


def sum_(ctx):
    """Sum-13: the elementwise sum of all inputs, broadcast, in the inputs' type."""
    return reduce(UOp.__add__, _operands(ctx))


def mean(ctx):
    """Mean-13: the elementwise sum of all inputs, broadcast, divided by their count."""
    operands = _operands(ctx)
    return reduce(UOp.__add__, operands) / len(operands)


def less_or_equal(ctx):
    """LessOrEqual-16: a < b or a == b, so false where either is nan (the builder's `<=`
    is not(a > b), true there)."""
    a, b = ctx.x(0), ctx.x(1)
    return (a < b) | a.eq(b)


def clip(ctx):
    """Clip-13: min(max(x, low), high), nan kept; low > high gives high everywhere (as
    np.clip). Bounds are attributes before 11 (min, max: float32's range), optional scalar
    inputs from 11 (absent: the type's lowest and largest finite values, as the spec's
    numeric_limits). The gradient passes where low <= x <= high."""
    x = ctx.x(0)
    if ctx.since < 11:  # Clip-6's defaults are float32's range, so ±inf are clipped to it
        low, high = ctx.attr("min", -FLOAT32_MAX), ctx.attr("max", FLOAT32_MAX)
    else:
        low, high = (ctx.x(i) if ctx.present(i) else None for i in (1, 2))
        for bound in (low, high):
            if bound is not None and bound.size != 1:
                ctx.refuse(f"min and max must be scalars (one element), not of shape {list(bound.shape)}")
        low, high = (None if b is None else b.reshape(()) for b in (low, high))
        if x.dtype.is_float:  # an absent bound is the type's finite limit, so ±inf are clipped to it
            limit = float(np.finfo(x.dtype.np).max)
            low = -limit if low is None else low
            high = limit if high is None else high
    if low is not None:
        x = (x < low).where(low, x)
    if high is not None:
        x = (x > high).where(high, x)
    return x


def sign(ctx):
    """Sign-13: -1, 0 or 1 by the sign of x; nan stays nan (np.sign), -0.0 gives 0."""
    x = ctx.x(0)
    signs = x.sign()
    return x.isnan().where(x, signs) if x.dtype.is_float else signs


# ----------------------------------------------------------------------------- trigonometry
# The builder's forms, as tinygrad's; where they lose digits near 0 (a difference of two
# nearly equal values), a short Taylor series takes over, as ops_tensor.py's tanh does.

def _series(x: UOp, small: UOp, coefficients) -> UOp:
    """x·Σ c_k x^(2k) where `small` holds (0 elsewhere, so the series never overflows)."""
    xs = small.where(x, 0.0)
    square, total = xs * xs, xs.const_like(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        total = total * square + coefficient
    return xs * total


def _float(x: UOp) -> UOp:
    return x if x.dtype.is_float else x.cast(dtypes.float32)


def _in_float64(x: UOp, f) -> UOp:
    """f(x) computed in float64 and rounded back: every float32 (and float16) x is a
    float64, and float64's few-ulp error leaves the rounded result correct but for near
    ties."""
    x = _float(x)
    return f(x.cast(dtypes.float64)).cast(x.dtype)


def _sin64(x: UOp) -> UOp:
    """SIN's value (libm's sin, within an ulp: an exported SIN reads back to the same bits)
    with sin_cos64's slopes: SIN's own, sin(π/2 - x), rounds π/2 - x (float32 Sin'(1e4) was
    3e-4 off, Sin'(1e20) of the wrong sign). v - (s0 - s) with s0 = s detached is v + 0, its
    sign kept (-0.0 - (+0.0) is -0.0), and has every slope of s."""
    accurate = sin_cos64(x)[0]
    return x.sin().detach() - (accurate.detach() - accurate)


def sin(ctx):
    """Sin-22: SIN's value in float64, float32 and float16 rounded back once (numpy's own
    float32 and float16 sin were an ulp off at times), with sin_cos64's slopes."""
    x = _float(ctx.x(0))
    return _sin64(x) if x.dtype is dtypes.float64 else _in_float64(x, _sin64)


def cos(ctx):
    """Cos-22: by sin_cos64 in float64 (float32 and float16 rounded back once). The
    builder's sin(π/2 - x), even in float64, lost π/2 beside a large x: float32 Cos(1e15)
    was 0.159 (0.105), Cos(-3.4e38) -0.522 (0.853), Cos(3e9) 1e-6 off."""
    x = _float(ctx.x(0))
    return sin_cos64(x)[1] if x.dtype is dtypes.float64 else _in_float64(x, lambda x: sin_cos64(x)[1])


def _tan64(x: UOp) -> UOp:
    s, c = sin_cos64(x)
    return s / c


def tan(ctx):
    """Tan-22: sin x / cos x by sin_cos64 in float64 (float32 and float16 rounded back
    once): the builder's tan, from sin(π/2 - x), was -1 for every float32 x from 1e17."""
    x = _float(ctx.x(0))
    return _tan64(x) if x.dtype is dtypes.float64 else _in_float64(x, _tan64)


# Taylor coefficients of x·Σ c_n x^(2n): 5 terms are exact to float32 where the rows use the
# series (|x| < 0.125, sinh's |x| < 0.5); float64 needs 10 (0.125^20 < 2^-53), sinh's 8
def _terms(coefficient, float32_count: int, float64_count: int) -> dict:
    return {dtypes.float64: [coefficient(n) for n in range(float64_count)],
            None: [coefficient(n) for n in range(float32_count)]}


def _taylor(table: dict, x: UOp) -> list:
    return table.get(x.dtype) or table[None]


_ASIN_TAYLOR = _terms(lambda n: math.comb(2 * n, n) / (4 ** n * (2 * n + 1)), 5, 10)  # 1, 1/6, 3/40, ...


def _asin(x: UOp) -> UOp:
    if x.dtype is dtypes.float64:
        return _asin64(x)
    small = x.abs() < 0.125
    return small.where(_series(x, small, _taylor(_ASIN_TAYLOR, x)), x.asin())


def _asin_within_half(x: UOp) -> UOp:
    """asin x for |x| <= 0.5 in float64: the series near 0, else the builder's (A&S 4.4.46,
    2e-8 off) refined by a Newton step on sin y = x, which squares the error (to 1e-16)."""
    small = x.abs() < 0.125
    y = x.asin()
    y = y - (y.sin() - x) / y.cos()
    return small.where(_series(x, small, _taylor(_ASIN_TAYLOR, x)), y)


def _asin64(x: UOp) -> UOp:
    """asin x in float64: beyond |x| = 0.5, sign(x)·(π/2 - 2·asin √((1 - |x|)/2)), whose
    argument is within 0.5 and whose 1 - |x| is exact (the Newton steps lose their grip
    where cos y nears 0)."""
    magnitude = x.abs()
    big = magnitude > 0.5
    inner = _asin_within_half(big.where(((1 - magnitude) / 2).sqrt(), x))
    return big.where((x < 0).where(x.const_like(-1.0), x.const_like(1.0)) * (math.pi / 2 - 2 * inner), inner)


def _acos64(x: UOp) -> UOp:
    """acos x in float64 without π/2 - asin x's cancellation near ±1: 2·asin √((1 - x)/2)
    above 0.5, π - 2·asin √((1 + x)/2) below -0.5."""
    above, below = x > 0.5, x < -0.5
    half = _asin_within_half((above | below).where(((1 - x.abs()) / 2).sqrt(), x))
    return above.where(2 * half, below.where(math.pi - 2 * half, math.pi / 2 - half))


def asin(ctx): return _asin(_float(ctx.x(0)))              # noqa: E704 - Asin-22 (A&S 4.4.46; series near 0)


def acos(ctx):
    """Acos-22: π/2 - asin x (float64: _acos64)."""
    x = _float(ctx.x(0))
    return _acos64(x) if x.dtype is dtypes.float64 else math.pi / 2 - _asin(x)


def atan(ctx):
    """Atan-22: asin(x / √(1 + x²)) for |x| <= 1; beyond, sign(x)·π/2 - atan(1/x), so that
    x² never overflows (atan(±inf) = ±π/2)."""
    x = _float(ctx.x(0))
    far = x.abs() > 1
    inner = far.where(far.where(x, 1.0).reciprocal(), x)  # 1/x of a near x is not taken, nor its slope: 1/0 is
    near = _asin(inner / (1 + inner * inner).sqrt())
    half_pi = (x > 0).where(x.const_like(math.pi / 2), x.const_like(-math.pi / 2))  # in x's dtype: a bare float is float32
    return far.where(half_pi - near, near)


_SINH_TAYLOR = _terms(lambda n: 1 / math.factorial(2 * n + 1), 5, 8)  # 1, 1/6, 1/120, ...


def sinh(ctx):
    """Sinh-22: (eˣ - e⁻ˣ)/2, the Taylor series for |x| < 0.5 where the difference cancels."""
    x = _float(ctx.x(0))
    small = x.abs() < 0.5
    if x.dtype is dtypes.float64:  # no overflow at 709.8
        far = cosh_sinh64(small.where(1.0, x))[1]
    else:
        far = _beyond_exp(x, UOp.sinh, odd=True)
    return small.where(sinh_series(x), far)


def _beyond_exp(x: UOp, builder, odd: bool) -> UOp:
    """builder(x), the builder's (eˣ ∓ e⁻ˣ)/2, but within a unit of where eˣ overflows and
    past it e^(|x|/2)·e^(|x|/2)/2 (negated for sinh below 0): eˣ overflows from |x| = 88.7
    in float32 (11.1 in float16), sinh and cosh only from 89.4 (11.8); they were inf between.
    Each branch sees an x it keeps finite, so neither's slope is 0·inf for the other's."""
    limit = math.log(float(np.finfo(x.dtype.np).max)) - 1.0
    magnitude = x.abs()
    beyond = magnitude > limit
    root = (beyond.where(magnitude, 0.0) * 0.5).exp()  # finite below inf: |x|/2 is far from overflow
    large = root * 0.5 * root
    if odd:
        large = (x < 0).where(-large, large)
    return beyond.where(large, builder(beyond.where(0.0, x)))


def sinh_series(x: UOp) -> UOp:
    """sinh x by its series in x's dtype, where |x| < 0.5 (0 elsewhere): Sinh's, Cosh's and
    ops_activation's eˣ - 1 near 0."""
    return _series(x, x.abs() < 0.5, _taylor(_SINH_TAYLOR, x))


def cosh(ctx):
    """Cosh-22: (eˣ + e⁻ˣ)/2; float64 by cosh_sinh64 (eˣ overflowed from 709.8, cosh at 710.5)."""
    x = _float(ctx.x(0))
    if x.dtype is not dtypes.float64:
        return _beyond_exp(x, UOp.cosh, odd=False)
    small = x.abs() < 0.5  # 1 + 2·sinh²(x/2): the slope e^x/2 - e^-x/2 cancelled (0 at 1e-300)
    half = sinh_series(small.where(x, 0.0) * 0.5)
    return small.where(1.0 + 2.0 * half * half, cosh_sinh64(small.where(1.0, x))[0])


_ASINH_TAYLOR = _terms(lambda n: (-1) ** n * math.comb(2 * n, n) / (4 ** n * (2 * n + 1)), 5, 10)  # 1, -1/6, ...


def asinh(ctx):
    """Asinh-22: sign(x)·log(|x| + √(x² + 1)) (odd, so no cancellation for x < 0), the
    series near 0; beyond 1e15, where x² would overflow, log|x| + ln 2, the value to
    float32's precision (log(2|x|) overflowed from |x| = 1.7e38: 2|x| is inf)."""
    x = _float(ctx.x(0))
    magnitude = x.abs()
    small = magnitude < 0.125
    huge = magnitude > 1e15
    big = (huge.where(0.0, magnitude)).asinh()
    far = huge.where(huge.where(magnitude, 1.0).log() + math.log(2), big)  # log 0's slope, not taken, made 0·inf
    return small.where(_series(x, small, _taylor(_ASINH_TAYLOR, x)), (x < 0).where(-far, far))


def acosh(ctx):
    """Acosh-22: log1p(d + √(d(x + 1))), d = x - 1 exact near 1 (log(x + √(x² - 1))
    cancelled there: float32 Acosh(1.001) was 0.044718165, not 0.04471868), and log x + ln 2
    beyond 1e8, where the dropped -1/(4x²) is below 1e-16 of the value (x² overflowed from
    1.8e19 in float32, 1.3e154 in float64); nan below 1 (-1e20 gave inf in float32, 0 in
    float64: x² - 1 is positive there too). float32 and float16 computed in float64 and
    rounded once. Each branch sees an x it keeps finite (no 0·inf slope); below 1 the slope
    is nan, as torch's 1/√(x² - 1)."""
    x = _float(ctx.x(0))
    return _acosh64(x) if x.dtype is dtypes.float64 else _in_float64(x, _acosh64)


def _acosh64(x: UOp) -> UOp:
    inside = x >= 1  # nan is not
    big = x > 1e8
    near = (big | ~inside).where(2.0, x) - 1.0  # 2 where not taken: a finite branch, and its slope
    far = big.where(x, 2.0).log() + math.log(2)
    # below 1: x·nan there, x·0 elsewhere (x·nan everywhere made every slope nan: 0·nan)
    return inside.where(big.where(far, log1p64(near + (near * (near + 2.0)).sqrt())), x * inside.where(0.0, math.nan))


_ATANH_TAYLOR = _terms(lambda n: 1 / (2 * n + 1), 5, 10)  # 1, 1/3, 1/5, ...


def atanh(ctx):
    """Atanh-22: ½·log((1 + x)/(1 - x)), the series near 0."""
    x = _float(ctx.x(0))
    small = x.abs() < 0.125
    return small.where(_series(x, small, _taylor(_ATANH_TAYLOR, x)), x.atanh())


def size(ctx):
    """Size-13: the number of elements, an int64 scalar known at import."""
    return np.array(math.prod(ctx.shape_of(0)), dtype=np.int64)


def bit_shift(ctx):
    """BitShift-28: signed types too; a right shift of a signed value is arithmetic, and a
    shift by a negative amount or by the width or more gives what the sign alone gives
    (-1 for a right shift of a negative value, else 0)."""
    if ctx.since < 28:
        from .ops_exact import bit_shift as unsigned_shift
        return unsigned_shift(ctx)
    x, amount = ctx.x(0), ctx.x(1)
    if not x.dtype.is_int:
        ctx.refuse(f"BitShift takes integers, not {x.dtype.name}")
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        ctx.refuse(f"direction={direction!r} is not 'LEFT' or 'RIGHT'")
    amount = amount.cast(x.dtype)
    width = 8 * x.dtype.itemsize
    inside = (amount >= 0) & (amount < width) if x.dtype.kind == "i" else amount < width
    safe = inside.where(amount, 0)
    shifted = x << safe if direction == "LEFT" else x >> safe
    fill = (x < 0).where(x.const_like(-1), x.const_like(0)) if direction == "RIGHT" and x.dtype.kind == "i" else x.const_like(0)
    return inside.where(shifted, fill)


# ----------------------------------------------------------------------------- Mod of floats

# float32's quotients |a/b| reach 2^277; each step takes 28 bits of it, exactly (below)
_FMOD_STEP_BITS, _FMOD_STEPS = 28, 11


def _negative(x: UOp) -> UOp:
    """x < 0, -0.0 included (1/-0.0 is -inf)."""
    return (x < 0) | (x.eq(0) & (x.reciprocal() < 0))


def float_fmod(a: UOp, b: UOp, floor: bool) -> UOp:
    """C's fmod(a, b) of float32 or float16, exactly, computed in float64: |a| reduced
    modulo m = |b|·2^(28k) for k = 10 .. 0. Each quotient is below 2^28, so q·m (24 + 28
    bits) and r - q·m (below m, a multiple of the smaller of a's and m's lowest bits: at
    most 24 bits) are exact. The division never rounds up to the next integer: r/m is at
    least 2^-23 below it, float64's rounding of a quotient below 2^28 at most 2^-25. The
    sign is a's (-0.0 kept). `floor` (Mod's fmod=0): a
    nonzero remainder of the other sign than b gets b added (rounded once to float64,
    then to the input type), and a zero takes b's sign. Spec 28's special cases: nan for
    a nan, an infinite a or a zero b; a itself for an infinite b."""
    wide = dtypes.float64
    a64, b64 = a.cast(wide), b.cast(wide)
    invalid = a64.isnan() | b64.isnan() | a64.isinf() | b64.eq(0)
    passthrough = b64.isinf() & ~invalid
    rest = (invalid | passthrough).where(0.0, a64.abs())
    divisor = (invalid | passthrough).where(1.0, b64.abs())
    for k in reversed(range(_FMOD_STEPS)):
        step = divisor * float(2 ** (_FMOD_STEP_BITS * k))
        rest = rest - (rest / step).trunc() * step
    signed = _negative(a64).where(-rest, rest)
    if floor:
        other_side = signed.ne(0) & (_negative(signed) ^ _negative(b64))
        signed = other_side.where(signed + b64, signed.eq(0).where(_negative(b64).where(-0.0, 0.0), signed))
    out = invalid.where(math.nan, passthrough.where(a64, signed))
    if floor:  # an infinite b: a when a and b have one sign, else b (the spec's fmod=0 case)
        out = (passthrough & a64.ne(0) & (_negative(a64) ^ _negative(b64))).where(b64, out)
    return out.cast(a.dtype)


def mod(ctx):
    """Mod-28 (and 10, 13): integers as ops_exact.mod; float32 and float16 by float_fmod,
    fmod=1 (C's fmod) or, from version 28, fmod=0 (the divisor's sign). float64 is
    refused: its remainder would need more than float64 to be exact."""
    from .ops_exact import mod as integer_mod
    a, b = ctx.x(0), ctx.x(1)
    if a.dtype.is_int:
        return integer_mod(ctx)
    fmod = ctx.attr("fmod")
    if fmod not in (0, 1) or (fmod == 0 and ctx.since < 28):
        ctx.refuse(f"fmod={fmod} on floats (before version 28 floats need fmod=1)")
    if a.dtype.itemsize > 4 or b.dtype is not a.dtype:
        ctx.refuse(f"Mod of {a.dtype.name} is not supported (no exact float64 remainder in the format)")
    return float_fmod(a, b, floor=fmod == 0)


def det(ctx):
    """Det-22: the determinant of each [M, M] matrix of the last two axes, by Gaussian
    elimination with partial pivoting, as LAPACK's getrf (the first largest |a_ik| of the
    column at and below the diagonal is swapped up): det = (-1)^swaps · Π pivots. Each step
    works on the whole matrix with masks (no per-batch indexing): the pivot's row and row k
    exchange by a rank-one update, the rows below subtract their multiple of the pivot row.
    A zero pivot (a singular matrix: its column below is 0 too) divides nothing. Its
    gradient is det·A⁻ᵀ where A is invertible; the swaps' choices are constant."""
    a = _float(ctx.x(0))
    m = a.shape[-1]
    if len(a.shape) < 2 or a.shape[-2] != m:
        ctx.refuse(f"the input {list(a.shape)} is not a batch of square matrices [..., M, M]")
    batch = a.shape[:-2]
    if m == 0:
        return UOp.full(batch, 1.0, a.dtype)
    # each step's masks over the rows: arrays when small, else nodes computed when the graph
    # runs (m constants a step, m² in all: a 3000 x 3000 Det took 27 s to import, np.eye each step)
    from .ops_tensor import FOLD_LIMIT  # (ops_tensor imports this module)
    lazy = m * m > FOLD_LIMIT
    rows = UOp.arange(m, dtype=dtypes.int64) if lazy else np.arange(m)

    def mask(values, dtype):
        return values.cast(dtype) if lazy else UOp.buffer(values.astype(dtype.np))
    result, sign = None, None
    for k in range(m):
        unit = mask(rows == k if not lazy else rows.eq(k), a.dtype)             # e_k
        column = (a * unit).sum(-1)                                           # a[..., :, k]
        candidates = mask(rows >= k, dtypes.bool).where(column.abs(), -1.0)
        chosen = candidates.argmax(-1)._one_hot_mask(m, len(batch)).cast(a.dtype)  # e_p, per matrix
        row_p = (a * chosen.unsqueeze(-1)).sum(-2)
        row_k = (a * unit.reshape((m, 1))).sum(-2)
        a = a + (unit.reshape((m, 1)) - chosen.unsqueeze(-1)) * (row_p - row_k).unsqueeze(-2)
        swapped = 1.0 - (chosen * unit).sum(-1)                                # 1 where p != k
        flip = 1.0 - 2.0 * swapped
        sign = flip if sign is None else sign * flip
        pivot = (row_p * unit).sum(-1)
        result = pivot if result is None else result * pivot
        if k + 1 < m:
            below = mask(rows > k, a.dtype)
            factor = (a * unit).sum(-1) / pivot.eq(0).where(1.0, pivot).unsqueeze(-1) * below
            a = a - factor.unsqueeze(-1) * row_p.unsqueeze(-2)
    return result * sign
