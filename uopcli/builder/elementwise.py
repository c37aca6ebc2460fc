"""tinygrad's elementwise Tensor functions: activations, more maths (inverse trigonometry,
erf, rounding, bitwise ops, tests for nan and inf) and the short spellings (`float()`,
`add`, `div(rounding_mode=)`, `numel`), each a small graph of the format's ops."""

from __future__ import annotations

import math

from ..errors import GraphError
from ..core.ops import dtypes

LERP_WEIGHT_BITS = 7  # tinygrad's fixed-point weight of a uint8 lerp

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
# erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), the polynomial tinygrad uses
ERF_P = 0.3275911
ERF_COEFFICIENTS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
# arcsin by Abramowitz and Stegun 4.4.46 (|error| <= 2e-8 on [0, 1]), the polynomial tinygrad uses
ASIN_COEFFICIENTS = (-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874,
                     -0.2145988016, 1.5707963050)  # highest power first


class ElementwiseMixin:
    """Activations, elementwise maths and tinygrad's short spellings; every method returns a new UOp."""

    __slots__ = ()

    def gelu(self, approximate: str = "tanh"):
        """x·Φ(x): tanh form 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))), or with erf ("none")."""
        if approximate == "tanh":
            return 0.5 * self * (1 + (SQRT_2_OVER_PI * (self + 0.044715 * self * self * self)).tanh())
        if approximate == "none":
            return self * 0.5 * (1.0 + (self * (1 / math.sqrt(2))).erf())
        raise GraphError(f"gelu: approximate is 'tanh' or 'none', got {approximate!r}")

    def quick_gelu(self):
        return self * (self * 1.702).sigmoid()  # x·σ(1.702x)

    def silu(self):
        return self * self.sigmoid()  # x·σ(x), also called swish

    def swish(self):
        return self.silu()

    def leaky_relu(self, neg_slope: float = 0.01):
        return (self < 0).where(neg_slope * self, self)

    def elu(self, alpha: float = 1.0):
        return self.relu() - alpha * (1 - self.exp()).relu()  # x for x > 0, α(eˣ - 1) below

    def celu(self, alpha: float = 1.0):
        return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)

    def selu(self, alpha: float = 1.67326, gamma: float = 1.0507):
        return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))

    def logaddexp(self, other):
        """log(eᵃ + eᵇ), shifted by max(a, b) so that neither exponential overflows (in the
        dtype both promote to; integers in float32)."""
        a, b = self._pair(other)
        top = a.maximum(b)
        return ((a - top).exp() + (b - top).exp()).log() + top

    def softplus(self, beta: float = 1.0):
        return (1 / beta) * (self * beta).logaddexp(0.0)  # log(1 + e^(βx)) / β

    def mish(self):
        return self * self.softplus().tanh()

    def hardtanh(self, min_val=-1, max_val=1):
        return self.clamp(min_val, max_val)

    def relu6(self):
        return self.relu() - (self - 6).relu()  # min(max(x, 0), 6)

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5):
        line = alpha * self + beta
        return line.relu() - (line - 1).relu()  # αx + β clamped to [0, 1]

    def hardswish(self):
        return self * (self + 3).relu6() * (1 / 6)

    def softsign(self):
        return self / (1 + self.abs())

    def logsigmoid(self):
        return -(-self).softplus()  # log σ(x) = -log(1 + e⁻ˣ)


    # ------------------------------------------------------------------ maths

    def tan(self):
        return self.sin() / self.cos()

    def sinh(self):
        return (self.exp() - (-self).exp()) / 2

    def cosh(self):
        return (self.exp() + (-self).exp()) / 2

    def erf(self):
        """sign(x)·(1 - t·P(t)·e^(-x²)) with t = 1 / (1 + p|x|) (Abramowitz and Stegun 7.1.26)."""
        t = 1.0 / (1.0 + ERF_P * self.abs())
        poly = t.const_like(ERF_COEFFICIENTS[0])
        for coefficient in ERF_COEFFICIENTS[1:]:  # Horner
            poly = poly * t + coefficient
        return self.sign() * (1.0 - t * poly * (-self.square()).exp())

    def log10(self):
        return self.log2() * math.log10(2)

    def asin(self):
        """sign(x)·(π/2 - √(1 - |x|)·P(|x|)) (Abramowitz and Stegun 4.4.46), as tinygrad's."""
        magnitude = self.abs()
        poly = magnitude.const_like(ASIN_COEFFICIENTS[0])
        for coefficient in ASIN_COEFFICIENTS[1:]:  # Horner
            poly = poly * magnitude + coefficient
        return self.sign() * (math.pi / 2 - (1.0 - magnitude).sqrt() * poly)

    def acos(self):
        return math.pi / 2 - self.asin()

    def atan(self):
        return (self / (1 + self * self).sqrt()).asin()  # atan x = asin(x / √(1 + x²))

    def asinh(self):
        return (self + (self.square() + 1).sqrt()).log()  # log(x + √(x² + 1))

    def acosh(self):
        return (self + (self.square() - 1).sqrt()).log()  # log(x + √(x² - 1))

    def atanh(self):
        return ((1 + self) / (1 - self)).log() / 2  # ½·log((1 + x) / (1 - x))

    def mod(self, other):
        """The remainder with the divisor's sign (Python's %, floored)."""
        return self % other

    def fmod(self, other):
        """The remainder with the dividend's sign (C's fmod): a - trunc(a / b)·b, in the
        dtype both promote to (integers exactly; bools, as tinygrad, in float32)."""
        a, b = self._pair(other)
        if a.dtype.is_int:
            return a.cmod(b)
        return a - a._times_reciprocal(b).trunc() * b

    def bitwise_and(self, other):
        return self & other

    def bitwise_or(self, other):
        return self | other

    def bitwise_xor(self, other):
        return self ^ other

    def bitwise_not(self):
        return ~self

    def lshift(self, other):
        return self << other

    def rshift(self, other):
        return self >> other

    def lerp(self, end, weight):
        """self + (end - self)·weight. uint8 with a tensor weight as tinygrad (and torch's
        rounding): the weight in 7-bit fixed point, w = int16(weight·128 + 0.5), and
        self + ((int8(end - self)·w + 64) as uint16 >> 7), all wrapping at 8 bits, so that
        end - self, a difference of two uint8, keeps its sign (interpolate of an image).
        A Python number weight computes end - self in uint8 first, as tinygrad does."""
        if self.dtype is dtypes.uint8 and hasattr(weight, "shape"):
            fixed = (weight * (1 << LERP_WEIGHT_BITS) + 0.5).cast(dtypes.int16)
            step = (end - self).cast(dtypes.int8) * fixed + (1 << (LERP_WEIGHT_BITS - 1))
            return (self + (step.cast(dtypes.uint16) >> LERP_WEIGHT_BITS)).cast(dtypes.uint8)
        return self + (end - self) * weight

    def floor(self):
        truncated = self.trunc()
        return (self < truncated).where(truncated - 1, truncated)

    def ceil(self):
        truncated = self.trunc()
        return (self > truncated).where(truncated + 1, truncated)

    def round(self):
        """To the nearest integer, halves to the even one (as numpy and tinygrad)."""
        half = self.trunc() / 2.0
        even = (self > 0).eq(half.trunc().eq(half))
        return even.where((self - 0.5).ceil(), (self + 0.5).floor())

    def isnan(self):
        return self.ne(self)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True):
        found = type(self).full(self.shape, False)
        if detect_positive:
            found = found | self.eq(math.inf)
        if detect_negative:
            found = found | self.eq(-math.inf)
        return found

    def isfinite(self):
        return (self.isinf() | self.isnan()).logical_not()

    def copysign(self, other):
        """|self| with the sign of `other`, -0.0 counting as negative (1/-0.0 < 0), as tinygrad's."""
        a, b = self._pair(other)
        magnitude = a.abs()
        return ((b < 0) | (b.reciprocal() < 0)).where(-magnitude, magnitude)

    def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
        """|a - b| <= atol + rtol·|b| where both are finite, a == b where either is infinite,
        and with equal_nan two NaNs (numpy's and torch's isclose, spelled as tinygrad's)."""
        if not hasattr(other, "shape"):  # a Python number: its own |b|, finiteness and NaN, as tinygrad's weak one
            finite = self.isfinite() & math.isfinite(other)
            close = (finite & ((self - other).abs() <= atol + rtol * abs(other))) | (self.isinf() & self.eq(other))
            return close | self.isnan() if equal_nan and math.isnan(other) else close
        finite_close = self.isfinite() & other.isfinite() & ((self - other).abs() <= atol + rtol * other.abs())
        infinite_close = (self.isinf() | other.isinf()) & self.eq(other)
        close = finite_close | infinite_close
        return close | (self.isnan() & other.isnan()) if equal_nan else close

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
        return self.isclose(other, rtol, atol, equal_nan).all()

    def masked_fill(self, mask, value):
        return mask.where(value, self)


    # ------------------------------------------------------------------ tinygrad's short spellings

    def float(self):
        return self.cast(dtypes.float32)

    def half(self):
        return self.cast(dtypes.float16)

    def double(self):
        return self.cast(dtypes.float64)

    def int(self):
        return self.cast(dtypes.int32)

    def long(self):
        return self.cast(dtypes.int64)

    def bool(self):
        return self.cast(dtypes.bool)

    def add(self, other):
        return self + other

    def sub(self, other):
        return self - other

    def mul(self, other):
        return self * other

    def div(self, other, rounding_mode: str | None = None):
        """True division; rounding_mode "trunc" or "floor" rounds it, in the dtype both
        promote to (integers exactly, C's and Python's quotients; bools in float32)."""
        if rounding_mode is None:
            return self / other
        a, b = self._pair(other)
        if rounding_mode == "floor":
            return a // b
        if rounding_mode == "trunc":
            return a.cdiv(b) if a.dtype.is_int else a._times_reciprocal(b).trunc()
        raise GraphError(f"div: rounding_mode is None, 'trunc' or 'floor', got {rounding_mode!r}")

    def neg(self):
        return -self

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def is_floating_point(self) -> bool:
        return self.dtype.is_float
