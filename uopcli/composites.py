"""More of tinygrad's Tensor functions, each built from UOp's primitives.

`UOp` takes these as a mixin: activations, losses, normalisation, attention, convolution
(and its transpose) and pooling, log-sum-exp, argmax, sorting and top-k, cumulative sums,
products and maxima, inverse trigonometry, diagonals and windows, one-hot codes,
numpy-style indexing, gathering and scattering, and einops' rearrange,
spelled and meaning what tinygrad 0.14's are and do, so a model ported from tinygrad builds
here with the same code and has the same values and gradients. Nothing here is new to the
file format: every function is a small graph of the format's ops (the maths beside each),
and `diff` differentiates it node by node. Most graphs are tinygrad's own; where another
graph gives the same values more cheaply (`arange`, `cumsum`), its docstring says so.
"""

from __future__ import annotations

import math
import string
from typing import Sequence

from .errors import GraphError
from .ops import dtypes

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
# erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), the polynomial tinygrad uses
ERF_P = 0.3275911
ERF_COEFFICIENTS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
# arcsin by Abramowitz and Stegun 4.4.46 (|error| <= 2e-8 on [0, 1]), the polynomial tinygrad uses
ASIN_COEFFICIENTS = (-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874,
                     -0.2145988016, 1.5707963050)  # highest power first
REDUCTIONS = ("mean", "sum", "none")
CUMSUM_BLOCK = 256  # tinygrad's split of long cumulative sums


class TensorFunctions:
    """Composites on top of UOp's primitives; every method returns a new UOp."""

    __slots__ = ()

    # ------------------------------------------------------------------ activations
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
        """log(eᵃ + eᵇ), shifted by max(a, b) so that neither exponential overflows."""
        top = self.maximum(other)
        other = other if hasattr(other, "shape") else top.const_like(other)
        return ((self - top).exp() + (other - top).exp()).log() + top

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

    # ------------------------------------------------------------------ more elementwise maths
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
        """The remainder with the dividend's sign (C's fmod): a - trunc(a / b)·b."""
        if self.dtype.is_int and getattr(other, "dtype", self.dtype).is_int and not isinstance(other, float):
            return self.cmod(other)
        return self - (self / other).trunc() * other

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
        magnitude = self.abs()
        other = other if hasattr(other, "shape") else type(self).full(self.shape, other, self.dtype)
        return ((other < 0) | (other.reciprocal() < 0)).where(-magnitude, magnitude)

    def full_like(self, fill_value, dtype=None):
        return type(self).full(self.shape, fill_value, self.dtype if dtype is None else dtype)

    def shrink_to(self, *shape):
        """The first `shape[i]` elements of each axis (None: the whole axis)."""
        return self.shrink(tuple(None if size is None else (0, size) for size in varargs(shape)))

    def pad_to(self, *shape, value=0.0):
        """Padded after each axis up to `shape[i]` (None: as it is), with `value`."""
        shape = varargs(shape)
        if len(shape) != len(self.shape):
            raise GraphError(f"pad_to: {len(shape)} sizes for a tensor of rank {len(self.shape)}")
        return self.pad(tuple((0, 0 if new is None else new - size) for size, new in zip(self.shape, shape)),
                        value=value)

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
        """x / max(‖x‖_p, eps) along `dim` (p = 0: the count of non-zeros), as torch's."""
        norm = self.ne(0).sum(dim, keepdim=True) if p == 0 else self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return self / norm.maximum(eps)

    # ------------------------------------------------------------------ reductions
    def any(self, axis=None, keepdim: bool = False):
        return self.cast(dtypes.bool).max(axis, keepdim)  # max of bools: of their 0/1 bytes

    def all(self, axis=None, keepdim: bool = False):
        # REDUCE takes no bools: the product of the 0/1 bytes
        return self.cast(dtypes.bool).cast(dtypes.uint8).prod(axis, keepdim).cast(dtypes.bool)

    def var_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple:
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple:
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def logsumexp(self, axis=None, keepdim: bool = False):
        """log Σ eˣ, less the (detached) max before exp and plus it after, as softmax does."""
        top = self.max(axis, keepdim=True).detach()
        total = (self - top).exp().sum(axis, keepdim).log()
        return total + top.reshape(total.shape)

    def argmax(self, axis=None, keepdim: bool = False):
        """The first index of the largest value along `axis` (int32; None: of the flat tensor).
        Each position where the max is reached scores n - index; the best score is the first."""
        if axis is None:
            return self.flatten().argmax(0)
        axis = _axis(axis, len(self.shape))
        size = self.shape[axis]
        at_max = self.eq(self.max(axis, keepdim=True))
        scores = self.arange(size, 0, -1).reshape((size,) + (1,) * (len(self.shape) - axis - 1))
        return (size - at_max.where(scores, 0).max(axis, keepdim)).cast(dtypes.int32)

    def argmin(self, axis=None, keepdim: bool = False):
        return self._order_flipped().argmax(axis, keepdim)

    def cumsum(self, axis: int = 0):
        """Running sums along `axis`: out[i] = Σ_{j ≤ i} x[j]. Up to 2·CUMSUM_BLOCK long, one
        masked sum over an (n, n) expansion (tinygrad's pool of the padded axis is n × n as
        well); longer, in two stages as tinygrad: running sums within blocks of CUMSUM_BLOCK,
        plus the running total of the blocks before (n·CUMSUM_BLOCK elements, not n²)."""
        if not self.shape or 0 in self.shape:
            return self.cast(self.sum().dtype)  # nothing to add up
        axis = _axis(axis, len(self.shape))
        last = self.transpose(axis, -1)
        size = last.shape[-1]
        if size <= 2 * CUMSUM_BLOCK:
            return _running(last, "ADD").transpose(axis, -1)
        blocks = -(-size // CUMSUM_BLOCK)
        padded = last.pad((None,) * (len(last.shape) - 1) + ((0, blocks * CUMSUM_BLOCK - size),))
        within = _running(padded.unflatten(-1, (blocks, CUMSUM_BLOCK)), "ADD")  # (..., blocks, block)
        before = _running(within[..., -1], "ADD") - within[..., -1]  # the totals of earlier blocks
        sums = (within + before.unsqueeze(-1)).flatten(-2)
        return sums.shrink((None,) * (len(sums.shape) - 1) + ((0, size),)).transpose(axis, -1)

    def cumprod(self, axis: int):
        """Running products along `axis`: out[i] = Π_{j ≤ i} x[j] (staged as cumsum is)."""
        return self._cumulative(axis, "MUL")

    def cummax(self, axis: int = 0):
        """(running maxima along `axis`, the index of the first element equal to each), as
        tinygrad's: indices are int32."""
        values = self._cumulative(axis, "MAX")
        return values, self._first_index_of(values, axis)

    def cummin(self, axis: int = 0):
        """(running minima along `axis`, the index of the first element equal to each)."""
        flipped = self._order_flipped()
        values = flipped._cumulative(axis, "MAX")
        return values._order_flipped(), flipped._first_index_of(values, axis)

    def logcumsumexp(self, axis: int = 0):
        """log Σ_{j ≤ i} e^x[j], each place shifted by the running maximum m_i, as tinygrad's:
        m_i + log Σ_{j ≤ i} e^(x[j] - m_i) over an (n, n) mask, so that neither an overflow
        nor a whole axis's maximum (which makes the early terms underflow to 0) gets in."""
        if not self.shape or 0 in self.shape:
            return self
        axis = _axis(axis, len(self.shape))
        x = self.transpose(axis, -1)
        size = x.shape[-1]
        top = x._cumulative(-1, "MAX").detach()
        earlier = type(self).full((size, size), True).tril()  # [i, j]: j <= i
        shifted = earlier.where(x.unsqueeze(-2) - top.unsqueeze(-1), _lowest(self.dtype))
        return (shifted.exp().sum(-1).log() + top).transpose(-1, axis)

    def sort(self, dim: int = -1, descending: bool = False):
        """(values, indices) along `dim`, by tinygrad's bitonic network: the axis is padded to
        2^s (with the dtype's largest value, or lowest when descending) and split into s axes
        of 2, one per bit of the position; stage t sorts blocks of 2^t by comparing the
        positions that differ in one bit, from bit t - 1 down (every other block reversed
        while it does, so each is sorted the other way and the next stage merges them).
        Equal values keep their order: index r is the original position of the same value's
        same occurrence (an O(n²) comparison, as tinygrad's)."""
        dim = _axis(dim, len(self.shape))
        size = self.shape[dim]
        if size <= 1:
            return self, type(self).full(self.shape, 0, dtypes.int32)
        stages = (size - 1).bit_length()
        lead = (None,) * dim
        fill = _lowest(self.dtype) if descending else _highest(self.dtype)
        x = self.pad(lead + ((0, 2 ** stages - size),) + (None,) * (len(self.shape) - dim - 1), value=fill)
        x = x.unflatten(dim, (2,) * stages)  # axis dim + k holds bit stages - 1 - k of the position

        def bit_axis(bit: int) -> int:
            return dim + stages - 1 - bit

        for stage in range(1, stages + 1):
            within = tuple(bit_axis(b) for b in range(stage))  # the position inside a block of 2^stage
            if stage < stages:  # blocks with bit `stage` set run backwards during this stage
                x = _odd_blocks_flipped(x, bit_axis(stage), within)
            for bit in reversed(range(stage)):
                top, bottom = x.split(1, bit_axis(bit))
                smaller, larger = top.minimum(bottom), top.maximum(bottom)
                x = larger.cat(smaller, dim=bit_axis(bit)) if descending else smaller.cat(larger, dim=bit_axis(bit))
            if stage < stages:
                x = _odd_blocks_flipped(x, bit_axis(stage), within)
        values = x.flatten(dim, dim + stages - 1).shrink_to(self.shape)
        return values, self._sorted_positions(values, dim)

    def _sorted_positions(self, values, dim: int):
        """For each sorted place r: the position i of the element with the same value and the
        same occurrence number among equal values (so ties keep their order)."""
        size = self.shape[dim]
        trailing = (1,) * (len(self.shape) - dim - 1)
        earlier = type(self).full((size, size), True).tril().reshape(size, size, *trailing)  # [i, j]: j <= i

        def occurrence(t):  # how many of t[0..i] equal t[i]
            return (earlier & t.unsqueeze(dim + 1).eq(t.unsqueeze(dim))).sum(dim + 1)

        same = self.unsqueeze(dim + 1).eq(values.unsqueeze(dim)) \
            & occurrence(self).unsqueeze(dim + 1).eq(occurrence(values).unsqueeze(dim))  # [i, r]
        positions = self.arange(size).reshape(size, 1, *trailing)
        return same.where(positions, 0).sum(dim).cast(dtypes.int32)

    def argsort(self, dim: int = -1, descending: bool = False):
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
        """(values, indices) of the k largest (or smallest) along `dim`, in order."""
        dim = _axis(dim, len(self.shape))
        if not sorted_:
            raise GraphError("topk: only sorted_=True, as tinygrad's")
        if not isinstance(k, int) or not 0 <= k <= self.shape[dim]:
            raise GraphError(f"topk: k must be in [0, {self.shape[dim]}], got {k!r}")
        values, indices = self.sort(dim, descending=largest)
        keep = tuple(k if axis == dim else None for axis in range(len(self.shape)))
        return values.shrink_to(keep), indices.shrink_to(keep)

    def _cumulative(self, axis: int, op: str):
        """Running `op` (MUL or MAX) along `axis`; long axes in two stages, as cumsum: within
        blocks of CUMSUM_BLOCK, then combined with the running result of the blocks before."""
        if not self.shape or 0 in self.shape:
            return self
        axis = _axis(axis, len(self.shape))
        last = self.transpose(axis, -1)
        size = last.shape[-1]
        if size <= 2 * CUMSUM_BLOCK:
            return _running(last, op).transpose(axis, -1)
        identity = 1 if op == "MUL" else _lowest(self.dtype)
        blocks = -(-size // CUMSUM_BLOCK)
        lead = (None,) * (len(last.shape) - 1)
        padded = last.pad(lead + ((0, blocks * CUMSUM_BLOCK - size),), value=identity)
        within = _running(padded.unflatten(-1, (blocks, CUMSUM_BLOCK)), op)       # (..., blocks, block)
        totals = _running(within[..., -1], op)                                    # running over block totals
        before = totals.pad(lead + ((1, -1),), value=identity).unsqueeze(-1)       # of the blocks before
        combined = within * before if op == "MUL" else within.maximum(before)
        return combined.flatten(-2).shrink(lead + ((0, size),)).transpose(axis, -1)

    def _first_index_of(self, values, axis: int):
        """For each i along `axis`, the smallest j ≤ i with x[j] == values[i] (int32)."""
        if not self.shape:
            return type(self).full((), 0, dtypes.int32)
        axis = _axis(axis, len(self.shape))
        size = self.shape[axis]
        x, best = self.transpose(axis, -1), values.transpose(axis, -1)
        match = x.unsqueeze(-1).eq(best.unsqueeze(-2)) & type(self).full((size, size), True).triu()  # [..., j, i]
        positions = self.arange(size).reshape(size, 1)
        return match.where(positions, size).min(-2).cast(dtypes.int32).transpose(-1, axis)

    # ------------------------------------------------------------------ building tensors
    @staticmethod
    def zeros(*shape, dtype=None):
        from .uop import UOp
        return UOp.full(varargs(shape), 0.0 if dtype is None else 0, dtype or dtypes.float32)

    @staticmethod
    def ones(*shape, dtype=None):
        from .uop import UOp
        return UOp.full(varargs(shape), 1.0 if dtype is None else 1, dtype or dtypes.float32)

    @staticmethod
    def linspace(start, stop, steps: int, dtype=None):
        """`steps` evenly spaced values from `start` to `stop`, both included (float32 unless `dtype`)."""
        from .uop import UOp
        dtype = dtype or dtypes.float32
        if not isinstance(steps, int) or steps < 0:
            raise GraphError(f"linspace: steps must be a whole number >= 0, got {steps!r}")
        if dtype is dtypes.bool:
            raise GraphError("linspace: no bool dtype")
        if steps == 1:
            return UOp.full((1,), start, dtype)
        spacing = (stop - start) / (steps - 1) if steps else 0.0
        return (start + UOp.arange(steps, dtype=dtypes.float32) * spacing).cast(dtype)

    def meshgrid(self, *others, indexing: str = "ij"):
        """Coordinate grids of this vector and `others` (scalars or vectors): tensor k varies
        along axis k ("ij"), or, with "xy", the first two along axes 1 and 0."""
        if indexing not in ("ij", "xy"):
            raise GraphError(f"meshgrid: indexing is 'ij' or 'xy', got {indexing!r}")
        tensors = (self, *others)
        if len(tensors) == 1:
            return tensors
        if any(len(t.shape) > 1 for t in tensors):
            raise GraphError("meshgrid takes scalars and vectors")
        along = list(range(len(tensors))) if indexing == "ij" else [1, 0, *range(2, len(tensors))]
        sizes = [t.numel() for t in tensors]
        shape = tuple(sizes[along.index(axis)] for axis in range(len(tensors)))
        return tuple(t.reshape(tuple(sizes[k] if axis == along[k] else 1 for axis in range(len(tensors)))).expand(shape)
                     for k, t in enumerate(tensors))

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None):
        """[start, stop) by `step` as a vector (int32, or float32 if any bound is a float).
        tinygrad sums a run of `step`s with its pool; this doubles [0] to [0 .. 2ᵏ) by
        `cat(a, a + len(a))`, a few nodes a doubling, then scales and shifts."""
        from .uop import UOp
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise GraphError("arange: step must not be 0")
        if dtype is None:
            dtype = dtypes.float32 if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.int32
        if not all(math.isfinite(v) for v in (start, stop, step)):
            raise GraphError(f"arange: bounds and step must be finite, got {start}, {stop}, {step}")
        count = max(0, math.ceil((stop - start) / step))
        if count == 0:
            return UOp.full((0,), 0, dtype)
        counting = UOp.const(0, dtypes.int32).reshape(1)
        while counting.shape[0] < count:
            counting = counting.cat(counting + counting.shape[0])
        counting = counting.shrink(((0, count),))
        scaled = counting.cast(dtype) if step == 1 else counting.cast(dtype) * step
        return scaled if start == 0 else scaled + start

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=None):
        """The identity (n × m, float32 unless `dtype`): 1 where row equals column."""
        from .uop import UOp
        columns = n if m is None else m
        if n < 0 or columns < 0:
            raise GraphError(f"eye: sizes must be >= 0, got {n} and {columns}")
        return UOp.arange(n).unsqueeze(-1).eq(UOp.arange(columns)).cast(dtype or dtypes.float32)

    @staticmethod
    def einsum(formula: str, *operands):
        """Einstein summation ("ij,jk->ik", implicit output, `...`, a repeated letter in one
        operand for its diagonal): each operand permuted to the sorted letters and reshaped
        with 1 for the letters it lacks, all multiplied, summed over the letters not in the
        output, permuted to the output's order (the evaluator runs it as one contraction)."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        inputs, output = _einsum_letters(formula.replace(" ", ""), operands)
        operands, inputs = zip(*(_diagonals(x, letters) for x, letters in zip(operands, inputs)))
        sizes: dict[str, int] = {}
        for x, letters in zip(operands, inputs):
            for letter, size in zip(letters, x.shape):
                known = sizes.get(letter, size)
                if size != known and 1 not in (size, known):  # size 1 broadcasts, as in numpy
                    raise GraphError(f"einsum {formula!r}: letter {letter!r} is {known} and {size}")
                sizes[letter] = max(known, size)
        alphabet = sorted(sizes)
        product = None
        for x, letters in zip(operands, inputs):
            aligned = x.permute([letters.index(c) for c in sorted(letters)]) if letters else x
            aligned = aligned.reshape(tuple(sizes[c] if c in letters else 1 for c in alphabet))
            product = aligned if product is None else product * aligned
        summed_axes = tuple(i for i, c in enumerate(alphabet) if c not in output)
        kept = [c for c in alphabet if c in output]
        out = product.sum(summed_axes) if summed_axes else product.reshape(tuple(sizes[c] for c in kept))
        return out.permute([kept.index(c) for c in output]) if len(output) > 1 else out

    def one_hot(self, num_classes: int):
        """1 where the last axis (new, of num_classes) equals the integer value, else 0 (int32)."""
        if not self.dtype.is_int:
            raise GraphError(f"one_hot needs an integer dtype, got {self.dtype.name}")
        if not isinstance(num_classes, int) or num_classes < 0:
            raise GraphError(f"one_hot: num_classes must be a whole number >= 0, got {num_classes!r}")
        return self._one_hot_mask(num_classes, len(self.shape)).cast(dtypes.int32)

    def _one_hot_mask(self, num_classes: int, axis: int):
        """Bool: a new axis `axis` of num_classes, true where it equals this integer value."""
        classes = self.arange(num_classes).reshape((num_classes,) + (1,) * (len(self.shape) - axis))
        return self.unsqueeze(axis).eq(classes)

    def repeat(self, *repeats):
        """Tile `repeats[i]` copies along axis i (numpy's tile; leading repeats add axes)."""
        repeats = varargs(repeats)
        if len(repeats) < len(self.shape):
            raise GraphError(f"repeat: {len(repeats)} repeats for rank {len(self.shape)}")
        shape = (1,) * (len(repeats) - len(self.shape)) + self.shape
        spread = self.reshape(tuple(s for size in shape for s in (1, size)))
        tiled = spread.expand(tuple(s for r, size in zip(repeats, shape) for s in (r, size)))
        return tiled.reshape(tuple(r * size for r, size in zip(repeats, shape)))

    def unflatten(self, dim: int, sizes: Sequence[int]):
        dim = _axis(dim, len(self.shape))
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

    def rearrange(self, formula: str, **sizes):
        """einops' rearrange, as tinygrad's: "b c (h w) -> b (c h) w" splits each group of
        the left side into its axes (`sizes` names those it cannot infer: at most one per
        group is unknown), orders the axes as the right side names them, and merges each
        group there. "..." stands for the axes no name covers, "()" or "1" for an axis of
        size 1. A RESHAPE, a PERMUTE and a RESHAPE (each left out when it changes nothing)."""
        left, right = _rearrange_sides(formula)
        left_names = [name for group in left for name in group]
        for name, size in sizes.items():
            if name not in left_names:
                raise GraphError(f"rearrange {formula!r}: size given for {name!r}, which the left side does not name")
            if size.__class__ is not int or size < 0:
                raise GraphError(f"rearrange {formula!r}: the size of {name} must be a whole number >= 0, got {size!r}")
        if any("..." in group and _BARE not in group for group in left):
            raise GraphError(f"rearrange {formula!r}: '...' cannot be inside a group on the left side")
        left, right = _rearrange_ellipsis(formula, left, right, len(self.shape))
        if len(left) != len(self.shape):
            raise GraphError(f"rearrange {formula!r}: the left side has {len(left)} axes, the tensor "
                             f"{list(self.shape)} has {len(self.shape)}")
        axis_size = {}
        for group, size in zip(left, self.shape):
            axis_size.update(_split_group(formula, group, size, sizes))
        order = [name for group in left for name in group]
        split = self.reshape(tuple(axis_size[name] for name in order))
        moved = split.permute([order.index(name) for group in right for name in group])
        return moved.reshape(tuple(math.prod(axis_size[name] for name in group) for group in right))

    def view(self, *shape):
        """reshape, by its torch name."""
        return self.reshape(*shape)

    def clone(self):
        """A copy: in a graph, the same value (a CONTIGUOUS node)."""
        return self.contiguous()

    def diag(self):
        """The square matrix with this vector on its diagonal, from movement ops: each row of
        (x, n zeros) read n at a time puts x[i] at column i."""
        if len(self.shape) != 1:
            raise GraphError(f"diag needs a vector, got shape {list(self.shape)}")
        n = self.shape[0]
        spread = self.reshape(n, 1).pad(((0, 0), (0, n))).flatten()  # x[0], 0 × n, x[1], ...
        return spread.shrink(((0, n * n),)).reshape(n, n)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The elements x[..., i, i + offset] of axes dim1 and dim2, as a new last axis (torch's)."""
        rank = len(self.shape)
        dim1, dim2 = _axis(dim1, rank), _axis(dim2, rank)
        if dim1 == dim2:
            raise GraphError(f"diagonal: dim1 and dim2 must differ, got {dim1} twice")
        x = self.permute(*(a for a in range(rank) if a not in (dim1, dim2)), dim1, dim2)
        rows, columns = x.shape[-2:]
        lead = (None,) * (rank - 2)
        first_row, first_column = max(0, -offset), max(0, offset)
        m = max(0, min(rows - first_row, columns - first_column))
        x = x.shrink(lead + ((min(first_row, rows), min(first_row, rows) + m),
                             (min(first_column, columns), min(first_column, columns) + m)))
        if m == 0:
            return x.reshape(*x.shape[:-2], 0)
        # the diagonal of an (m, m) block: every (m + 1)-th element of it, flattened
        x = x.flatten(-2).pad(lead + ((0, m),)).unflatten(-1, (m, m + 1))
        return x.shrink(lead + ((0, m), (0, 1))).reshape(*x.shape[:-2], m)

    def unfold(self, dim: int, size: int, step: int):
        """Windows of `size` elements every `step` along `dim`: that axis becomes the window
        count, and a new last axis of `size` holds each window (torch's unfold)."""
        dim = _axis(dim, len(self.shape))
        if not isinstance(size, int) or not 1 <= size <= self.shape[dim]:
            raise GraphError(f"unfold: size must be in [1, {self.shape[dim]}], got {size!r}")
        if not isinstance(step, int) or step < 1:
            raise GraphError(f"unfold: step must be >= 1, got {step!r}")
        order = [a for a in range(len(self.shape)) if a != dim] + [dim]
        windows = self.permute(*order)._pool((size,), step)  # (..., count, size)
        back = [order.index(a) for a in range(len(self.shape))]
        return windows.permute(*back, len(self.shape))

    def roll(self, shifts, dims=None):
        """Elements moved `shifts` places along `dims` (those leaving one end enter at the
        other): two copies side by side, cut at the shifted start. dims None: the flat tensor."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if len(dims) != len(shifts):
            raise GraphError(f"roll: {len(shifts)} shifts for {len(dims)} axes")
        if 0 in self.shape:
            return self
        dims = tuple(_axis(d, len(self.shape)) for d in dims)
        bounds = [None] * len(self.shape)
        for d, shift in zip(dims, shifts):
            start = self.shape[d] - shift % self.shape[d]
            bounds[d] = (start, start + self.shape[d])
        return self.repeat(tuple(2 if i in dims else 1 for i in range(len(self.shape)))).shrink(tuple(bounds))

    def split(self, sizes, dim: int = 0) -> tuple:
        """Pieces along `dim`: each of `sizes` (an int: that size, the last one smaller)."""
        dim = _axis(dim, len(self.shape))
        length = self.shape[dim]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise GraphError(f"split: size must be > 0, got {sizes}")
            sizes = [min(sizes, length - start) for start in range(0, max(1, length), sizes)]  # empty: [0]
        if not all(isinstance(size, int) and size >= 0 for size in sizes) or sum(sizes) != length:
            raise GraphError(f"split: sizes {list(sizes)} are not whole numbers >= 0 adding up to {length}, "
                             f"the size of axis {dim}")
        pieces, start = [], 0
        for size in sizes:
            pieces.append(self.shrink(tuple((start, start + size) if i == dim else None
                                            for i in range(len(self.shape)))))
            start += size
        return tuple(pieces)

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        dim = _axis(dim, len(self.shape))
        if chunks <= 0:
            raise GraphError(f"chunk: chunks must be > 0, got {chunks}")
        length = self.shape[dim]
        return self.split(math.ceil(length / chunks) if length else [0] * chunks, dim)

    # ------------------------------------------------------------------ layers
    def dot(self, w):
        return self.matmul(w)  # tinygrad's dot: the last axis against w's second-to-last (or only)

    def linear(self, weight, bias=None):
        """x·w (+ b); a 1-D weight scales elementwise, as in tinygrad."""
        out = self * weight if len(weight.shape) == 1 else self.matmul(weight)
        return out if bias is None else out + bias

    def layernorm(self, axis=-1, eps: float = 1e-5):
        """(x - mean) / √(mean square deviation + eps) over `axis` (no scale or shift)."""
        centred = self - self.mean(axis, keepdim=True)
        return centred * ((centred * centred).mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(self, weight, bias, mean, invstd, axis=1):
        """(x - mean)·weight·invstd + bias, the four shaped along `axis` (an int or a tuple)."""
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        shape = tuple(s if a in axes else 1 for a, s in enumerate(self.shape))
        out = self - mean.reshape(shape)
        if weight is not None:
            out = out * weight.reshape(shape)
        out = out * (invstd.reshape(shape) if len(invstd.shape) == len(axes) else invstd)
        return out if bias is None else out + bias.reshape(shape)

    def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0,
                                     is_causal: bool = False):
        """softmax(q·kᵀ/√d + mask)·v; a bool mask keeps where true, is_causal keeps j ≤ i."""
        if dropout_p:
            raise GraphError("scaled_dot_product_attention: dropout is random, and a graph here is not")
        scores = self.matmul(key.transpose(-2, -1)) / math.sqrt(self.shape[-1])
        if is_causal:
            if attn_mask is not None:
                raise GraphError("scaled_dot_product_attention: attn_mask and is_causal=True exclude each other")
            attn_mask = type(self).full(scores.shape, True).tril()
        if attn_mask is not None:
            if attn_mask.dtype.is_bool:
                attn_mask = attn_mask.where(0.0, -math.inf)
            scores = scores + attn_mask
        return scores.softmax(-1).matmul(value)

    def tril(self, diagonal: int = 0):
        """Zero above diagonal `diagonal` of the last two axes."""
        return self._upper(diagonal + 1).where(self.const_like(0), self)

    def triu(self, diagonal: int = 0):
        return self._upper(diagonal).where(self, self.const_like(0))

    def _upper(self, diagonal: int):
        """Bool (rows, columns): true where column j ≥ row i + diagonal."""
        if len(self.shape) < 2:
            raise GraphError(f"tril and triu need a rank of 2 or more, got shape {list(self.shape)}")
        rows, columns = self.shape[-2:]
        return self.arange(rows).unsqueeze(-1) + diagonal <= self.arange(columns)

    def masked_fill(self, mask, value):
        return mask.where(value, self)

    def gather(self, dim: int, index):
        """out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim` (index: same rank),
        as a one-hot mask of the index against the axis, multiplied in and summed."""
        if not index.dtype.is_int:
            raise GraphError(f"gather: the index must be integers, got {index.dtype.name}")
        if len(index.shape) != len(self.shape):
            raise GraphError(f"gather: index rank {len(index.shape)} differs from the tensor's {len(self.shape)}")
        dim = _axis(dim, len(self.shape))
        if any(i > s for d, (s, i) in enumerate(zip(self.shape, index.shape)) if d != dim):
            raise GraphError(f"gather: index shape {list(index.shape)} is larger than {list(self.shape)} "
                             f"off axis {dim}")
        kept = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        kept = kept.unsqueeze(-1).transpose(-1, dim)  # the gathered axis last, beside the index's
        return index._one_hot_mask(self.shape[dim], len(index.shape)).where(kept, 0).sum(-1)

    def scatter(self, dim: int, index, src, reduce: str | None = None):
        """A copy with src[..., i, ...] written at index[..., i, ...] along `dim` (index of the
        same rank; where an index repeats, the last write wins), as tinygrad's. A number as
        src is written at every index; with it, reduce "add" or "multiply" combines with
        what is there (scatter_reduce does that for a tensor src)."""
        if reduce not in (None, "add", "multiply"):
            raise GraphError(f"scatter: reduce is None, 'add' or 'multiply', got {reduce!r}")
        if not hasattr(src, "shape"):
            src = type(self).full(index.shape, src, self.dtype)
        elif reduce is not None:
            raise GraphError("scatter: reduce takes a number as src; for a tensor src use scatter_reduce")
        if reduce is not None:
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        values, mask = self._scatter_operands("scatter", dim, index, src)
        if not mask.shape[-1]:
            return self  # an empty index writes nothing
        written, value = mask[..., 0], values[..., 0]
        for k in range(1, mask.shape[-1]):  # later writes over earlier ones
            written, value = written | mask[..., k], mask[..., k].where(values[..., k], value)
        return written.where(value, self)

    def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
        """Each element of src combined, by `reduce` ("sum", "prod", "mean", "amax" or
        "amin"), into the place index names along `dim`, with this tensor's own value
        there too unless include_self is False (a place nothing is written to keeps it)."""
        if reduce not in _SCATTER_IDENTITY:
            raise GraphError(f"scatter_reduce: reduce is one of {', '.join(_SCATTER_IDENTITY)}, got {reduce!r}")
        values, mask = self._scatter_operands("scatter_reduce", dim, index, src)
        untouched = mask.any(-1).logical_not()

        def own(identity):  # this tensor's values where they take part, else the reduce's identity
            return self if include_self else untouched.where(self, identity)
        identity = _SCATTER_IDENTITY[reduce](self.dtype)
        written = mask.where(values, identity)
        if reduce == "mean":
            count = mask.where(1, 0).sum(-1) + (1 if include_self else untouched.where(1, 0))
            return (written.sum(-1) + own(identity)) / count
        if reduce == "sum":
            return written.sum(-1) + own(identity)
        if reduce == "prod":
            return written.prod(-1) * own(identity)
        if reduce == "amax":
            return written.max(-1).maximum(own(identity))
        return written.min(-1).minimum(own(identity))

    def _scatter_operands(self, name: str, dim: int, index, src) -> tuple:
        """(values, mask), each of shape (*self.shape, k) for the k places of index along
        `dim`: at place p and k, src and whether index writes there, each from position p
        with p[dim] replaced by k (padded with zeros and False beyond index's shape)."""
        if not index.dtype.is_int:
            raise GraphError(f"{name}: the index must be integers, got {index.dtype.name}")
        if not len(index.shape) == len(src.shape) == len(self.shape):
            raise GraphError(f"{name}: the tensor, index and src have ranks {len(self.shape)}, {len(index.shape)} "
                             f"and {len(src.shape)}: they must be equal")
        dim = _axis(dim, len(self.shape))
        if any((d != dim and i > s) or i > t for d, (s, i, t) in enumerate(zip(self.shape, index.shape, src.shape))):
            raise GraphError(f"{name}: index shape {list(index.shape)} must fit in src's {list(src.shape)} and, "
                             f"off axis {dim}, in the tensor's {list(self.shape)}")
        if src.dtype is not self.dtype:
            raise GraphError(f"{name}: src is {src.dtype.name}, the tensor {self.dtype.name}: they must be equal")
        size = self.shape[dim]
        values = src.shrink_to(index.shape).unsqueeze(-1).expand(*index.shape, size).transpose(-1, dim)
        mask = index._one_hot_mask(size, len(index.shape)).transpose(-1, dim)
        return values.pad_to(*self.shape, None), mask.pad_to(*self.shape, None)

    def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False):
        """Resampled to `size` along the last len(size) axes, one axis after another (last
        first), as tinygrad's: gathers at integer positions made from arange. For an output
        position o of an axis from n to m elements:
          linear         x[lo]·(1 - t) + x[hi]·t at the source point p = (o + ½)·n/m - ½
                         (align_corners: o·(n - 1)/(m - 1)), clipped to [0, n - 1];
                         lo, hi = floor, ceil(p), t = p - lo (exact: integer numerator / den)
          nearest        x[floor(o·n/m)]
          nearest-exact  x[floor((o + ½)·n/m)]"""
        size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        if not size or len(size) > len(self.shape) or not all(isinstance(m, int) and m > 0 for m in size):
            raise GraphError(f"interpolate: size is 1 to {len(self.shape)} sizes > 0, got {size!r}")
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise GraphError(f"interpolate: mode is 'linear', 'nearest' or 'nearest-exact', got {mode!r}")
        if align_corners and mode != "linear":
            raise GraphError("interpolate: align_corners is for mode 'linear' only")
        x, grown = self, list(self.shape)
        for axis in range(len(self.shape) - 1, len(self.shape) - 1 - len(size), -1):
            n, m = self.shape[axis], size[axis - len(self.shape)]
            grown[axis] = m
            along = tuple(m if a == axis else 1 for a in range(len(self.shape)))

            def spread(positions):
                return positions.reshape(along).expand(tuple(grown))
            if mode == "linear":
                o = type(self).arange(m)
                num, den = (o * (n - 1), max(m - 1, 1)) if align_corners else ((o * 2 + 1) * n - m, m * 2)
                num = num.clamp(0, (n - 1) * den)
                low, high = spread(num // den), spread((num + den - 1) // den)
                weight = spread((num % den).cast(dtypes.float32) / den)
                x = x.gather(axis, low).lerp(x.gather(axis, high), weight)
            else:
                o = type(self).arange(m, dtype=dtypes.float32)
                x = x.gather(axis, spread(((o + 0.5 if mode == "nearest-exact" else o) * (n / m)).cast(dtypes.int32)))
        return x.cast(self.dtype)

    def softmin(self, axis: int = -1):
        return (-self).softmax(axis)

    def conv2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0):
        """Cross-correlation of x[N, C·groups... ] with weight[F, C, *k] over the last len(k)
        axes (any number, not only 2), as tinygrad's conv2d: the windows of the padded input
        (`_pool`), expanded against the weight, multiplied and summed over C and the window.
        `padding` is an int, one per spatial axis, or (left, right, top, bottom, ...)."""
        (batch, channels), (filters, per_group), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if len(self.shape) != len(weight.shape) or groups * per_group != channels:
            raise GraphError(f"conv2d: input {list(self.shape)} does not fit weight {list(weight.shape)} "
                             f"with groups={groups}")
        windows = self._pad_value(_pool_padding(padding, len(kernel)), 0.0)._pool(kernel, stride, dilation)
        outputs = windows.shape[2:2 + len(kernel)]
        spatial = len(outputs)
        per_filter_group = filters // groups
        x = windows.reshape(batch, groups, per_group, 1, *outputs, *kernel)
        x = x.expand(batch, groups, per_group, per_filter_group, *outputs, *kernel)
        x = x.permute(0, 1, 3, *range(4, 4 + spatial), 2, *range(4 + spatial, 4 + 2 * spatial))
        # (batch, groups, filters per group, *outputs, channels per group, *kernel)
        w = weight.reshape(1, groups, per_filter_group, *(1,) * spatial, per_group, *kernel)
        out = (x * w).sum(tuple(range(-1 - len(kernel), 0))).reshape(batch, filters, *outputs)
        return out if bias is None else out + bias.reshape(1, filters, *(1,) * spatial)

    def conv_transpose2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0,
                         output_padding=0):
        """The transpose of conv2d (its gradient with respect to the input), as torch's and
        tinygrad's: x[N, C_in, *i] with weight[C_in, C_out / groups, *k] gives
        [N, C_out, *((i - 1)·s - p_before - p_after + d·(k - 1) + output_padding + 1)]. It is
        the conv2d of x with s - 1 zeros between its elements, padded by d·(k - 1) - p on
        each side (plus output_padding after), with the kernel flipped and each group's
        in and out channels swapped."""
        kernel = weight.shape[2:]
        spatial = len(kernel)
        in_channels, out_per_group = weight.shape[:2]
        if len(self.shape) != 2 + spatial or self.shape[1] != in_channels or in_channels % groups:
            raise GraphError(f"conv_transpose2d: input {list(self.shape)} does not fit weight {list(weight.shape)} "
                             f"with groups={groups}")
        strides, dilations = _per_axis(stride, spatial), _per_axis(dilation, spatial)
        extra = (output_padding,) * spatial if isinstance(output_padding, int) else tuple(output_padding)
        if len(extra) != spatial or not all(isinstance(e, int) and 0 <= e < max(s, d)
                                            for e, s, d in zip(extra, strides, dilations)):
            raise GraphError(f"conv_transpose2d: output_padding must be >= 0 and below the stride or dilation, "
                             f"got {output_padding!r}")
        pads = _pool_padding(padding, spatial)
        sizes = [(i - 1) * s - before - after + d * (k - 1) + e + 1
                 for i, s, d, k, (before, after), e in zip(self.shape[2:], strides, dilations, kernel, pads, extra)]
        if any(n <= 0 for n in sizes):
            raise GraphError(f"conv_transpose2d: padding {padding!r} leaves an output of size {sizes} "
                             f"for input {list(self.shape)} and weight {list(weight.shape)}")
        in_per_group = in_channels // groups
        w = weight.reshape(groups, in_per_group, out_per_group, *kernel).transpose(1, 2)
        w = w.flip(tuple(range(3, 3 + spatial))).reshape(groups * out_per_group, in_per_group, *kernel)
        x = self._spread(strides)
        around = tuple((d * (k - 1) - before, d * (k - 1) - after + e)
                       for k, d, (before, after), e in zip(kernel, dilations, pads, extra))
        return x.pad(((0, 0), (0, 0)) + around).conv2d(w, bias, groups=groups, dilation=dilations)

    def _spread(self, strides: tuple):
        """s - 1 zeros between neighbours along each trailing axis (as many as `strides`)."""
        if all(s == 1 for s in strides):
            return self
        lead, sizes = self.shape[:-len(strides)], self.shape[-len(strides):]
        x = self.reshape(*lead, *(n for size in sizes for n in (size, 1)))
        x = x.pad(((0, 0),) * len(lead) + tuple(p for s in strides for p in ((0, 0), (0, s - 1))))
        x = x.reshape(*lead, *(size * s for size, s in zip(sizes, strides)))
        return x.shrink((None,) * len(lead) + tuple((0, size * s - (s - 1)) for size, s in zip(sizes, strides)))

    def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                   count_include_pad: bool = True):
        """Means of the windows over the last len(kernel_size) axes (stride: the kernel).
        ceil_mode's last, partial windows divide by what they cover of the padded input."""
        kernel, strides, dilations = _pool_geometry(kernel_size, stride, dilation)
        regular = _pool_padding(padding, len(kernel))
        pads = self._ceil_mode_padding(regular, kernel, strides, dilations) if ceil_mode else regular
        axes = tuple(range(-len(kernel), 0))
        windows = self._pad_value(pads, 0.0)._pool(kernel, strides, dilations)
        if count_include_pad and not ceil_mode:
            return windows.mean(axes)
        if count_include_pad:  # the padding counts, the room ceil_mode adds does not
            lead = len(self.shape) - len(kernel)
            padded = self.shape[:lead] + tuple(i + b + a for i, (b, a) in zip(self.shape[lead:], regular))
            ones = type(self).full(padded, 1.0, self.dtype)
            extra = tuple((b - rb, a - ra) for (b, a), (rb, ra) in zip(pads, regular))
            counted = ones._pad_value(extra, 0.0)
        else:
            counted = type(self).full(self.shape, 1.0, self.dtype)._pad_value(pads, 0.0)
        return windows.sum(axes) / counted._pool(kernel, strides, dilations).sum(axes)

    def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                   return_indices: bool = False):
        """Maxima of the windows (padding counts as -inf); with return_indices also where
        each maximum is, as a flat index into the unpadded spatial axes (the first one)."""
        kernel, strides, dilations = _pool_geometry(kernel_size, stride, dilation)
        pads = _pool_padding(padding, len(kernel))
        if ceil_mode:
            pads = self._ceil_mode_padding(pads, kernel, strides, dilations)
        axes = tuple(range(-len(kernel), 0))
        windows = self._pad_value(pads, _lowest(self.dtype))._pool(kernel, strides, dilations)
        pooled = windows.max(axes)
        if not return_indices:
            return pooled
        spatial = self.shape[-len(kernel):]
        count = math.prod(spatial)
        scores = self.arange(count, 0, -1).reshape(spatial)  # the first maximum scores highest
        scores = scores._pad_value(pads, _lowest(dtypes.int32))._pool(kernel, strides, dilations)
        at_max = windows.eq(windows.max(axes, keepdim=True))
        return pooled, count - at_max.where(scores, 0).max(axes)

    def _ceil_mode_padding(self, pads: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
        """ceil_mode's padding: room after each spatial axis for a last, partial window
        (ceil((i + pads - span) / s) + 1 windows, span = d·(k - 1) + 1), less where a window
        would start inside the after-padding (arXiv:1603.07285, relationship 15, as tinygrad)."""
        if len(self.shape) < len(kernel):
            raise GraphError(f"pool: a kernel of {len(kernel)} axes on a tensor of rank {len(self.shape)}")
        sizes = self.shape[len(self.shape) - len(kernel):]
        out = []
        for (before, after), i, k, s, d in zip(pads, sizes, kernel, strides, dilations):
            span, padded = d * (k - 1) + 1, i + before + after
            last_start = s * (-(-(padded - span) // s))  # the last window's start, ceil division
            out.append((before, after + last_start + span - padded - max(last_start - (before + i - 1), 0)))
        return tuple(out)

    def _pad_value(self, pads: tuple, value):
        """PAD with `value` instead of 0: the zero padding, with `value` where the mask of
        the original (padded the same way) is false."""
        if all(p == (0, 0) for p in pads):
            return self
        lead = ((0, 0),) * (len(self.shape) - len(pads))
        padded = self.pad(lead + pads)
        if value == 0:
            return padded
        inside = type(self).full(self.shape, True).pad(lead + pads)
        return inside.where(padded, value)

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
        """True division; rounding_mode "trunc" or "floor" rounds it (integers: exactly)."""
        if rounding_mode is None:
            return self / other
        integers = self.dtype.is_int and getattr(other, "dtype", self.dtype).is_int and not isinstance(other, float)
        if rounding_mode == "floor":
            return self // other if integers else (self / other).floor()
        if rounding_mode == "trunc":
            return self.cdiv(other) if integers else (self / other).trunc()
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

    def sequential(self, layers):
        """Each of `layers` (callables) applied in turn."""
        out = self
        for layer in layers:
            out = layer(out)
        return out

    def dropout(self, p: float = 0.5):
        """The identity, as tinygrad's dropout outside training: a saved graph has no random
        source, so there is no training form to build."""
        if not 0 <= p <= 1:
            raise GraphError(f"dropout: p must be in [0, 1], got {p}")
        return self

    def repeat_interleave(self, repeats: int, dim: int | None = None):
        """Each element `repeats` times in a row along `dim` (None: of the flat tensor)."""
        x, dim = (self.flatten(), 0) if dim is None else (self, _axis(dim, len(self.shape)))
        shape = x.shape
        x = x.reshape(shape[:dim + 1] + (1,) + shape[dim + 1:]).expand(shape[:dim + 1] + (repeats,) + shape[dim + 1:])
        return x.reshape(shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1:])

    def _pool(self, kernel: tuple, stride=1, dilation=1):
        """Every window of the last len(kernel) axes: (..., *outputs, *kernel), where
        out[..., o, j] = x[..., o·stride + j·dilation], from movement ops alone. Tile each
        axis (size i) so it holds k rows of i·f + d elements: row j then starts j·d later
        in x, so its elements o·s are x[o·s + j·d]; keep every s-th (fold by s, column 0).
        f ≥ 1 makes a row long enough for o·s elements."""
        kernel = tuple(kernel)
        strides, dilations = _per_axis(stride, len(kernel)), _per_axis(dilation, len(kernel))
        lead = len(self.shape) - len(kernel)
        if lead < 0:
            raise GraphError(f"pool: a kernel of {len(kernel)} axes on a tensor of rank {len(self.shape)}")
        sizes, keep = self.shape[lead:], self.shape[:lead]
        outputs = tuple(math.ceil((i - d * (k - 1)) / s) for i, k, s, d in zip(sizes, kernel, strides, dilations))
        if any(o <= 0 for o in outputs):
            raise GraphError(f"pool: kernel {list(kernel)} (dilation {list(dilations)}) is larger than "
                             f"the input's {list(sizes)}")
        factors = [max(1, math.ceil((o * s - d) / i)) for o, s, i, d in zip(outputs, strides, sizes, dilations)]
        rows = [i * f + d for i, f, d in zip(sizes, factors, dilations)]  # one row per kernel position
        x = self.repeat((1,) * lead + tuple(math.ceil(k * r / i) for k, r, i in zip(kernel, rows, sizes)))
        x = x.shrink((None,) * lead + tuple((0, k * r) for k, r in zip(kernel, rows)))
        x = x.reshape(keep + _interleave(kernel, rows))
        x = x.shrink((None,) * lead + _interleave([(0, k) for k in kernel], [(0, o * s) for o, s in zip(outputs, strides)]))
        x = x.reshape(keep + tuple(n for k, o, s in zip(kernel, outputs, strides) for n in (k, o, s)))
        x = x.shrink((None,) * lead + tuple(b for k, o in zip(kernel, outputs) for b in ((0, k), (0, o), (0, 1))))
        x = x.reshape(keep + _interleave(kernel, outputs))
        window_axes = [lead + 2 * i for i in range(len(kernel))]
        return x.permute(*range(lead), *(a + 1 for a in window_axes), *window_axes)

    # ------------------------------------------------------------------ losses
    def cross_entropy(self, target, reduction: str = "mean", label_smoothing: float = 0.0):
        """-Σ_c y_c·log softmax(x)_c over the class axis (1, or 0 for a vector); `target` is
        class probabilities shaped like the logits, or class indices (one axis fewer)."""
        _check_smoothing(label_smoothing)
        if not self.shape or 0 in self.shape:
            raise GraphError(f"cross_entropy needs logits with classes, got shape {list(self.shape)}")
        classes_axis = 0 if len(self.shape) == 1 else 1
        classes = self.shape[classes_axis]
        if target.shape != self.shape:
            if target.shape != self.shape[:classes_axis] + self.shape[classes_axis + 1:]:
                raise GraphError(f"cross_entropy: target shape {list(target.shape)} fits neither the logits "
                                 f"{list(self.shape)} nor their class indices")
            target = target._one_hot_mask(classes, classes_axis).cast(self.dtype)
        target = (1 - label_smoothing) * target + label_smoothing / classes
        return _reduced(-(self.log_softmax(classes_axis) * target).sum(classes_axis), reduction)

    def sparse_categorical_crossentropy(self, target, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean"):
        """Cross entropy with class indices along the last axis; entries equal to
        `ignore_index` (unless -1) count for nothing, and "mean" divides by the others."""
        _check_smoothing(label_smoothing)
        log_probs = self.log_softmax()
        counted = target.ne(ignore_index) if ignore_index != -1 else type(self).full(target.shape, True)
        picked = target._one_hot_mask(self.shape[-1], len(target.shape)) & counted.unsqueeze(-1)
        smoothing = label_smoothing * counted.where(log_probs.mean(-1), 0.0)
        per_item = (1 - label_smoothing) * picked.where(log_probs, 0.0).sum(-1) + smoothing
        if reduction == "mean":
            return -per_item.sum() / counted.sum()
        return -_reduced(per_item, reduction)

    def nll_loss(self, target, weight=None, ignore_index: int | None = None, reduction: str = "mean"):
        """-x[n, target[n]]·w[target[n]] for log-probabilities x[N, C, ...]; "mean" divides
        by the weights counted (those not at ignore_index)."""
        weight = (type(self).full(target.shape, 1, target.dtype) if weight is None
                  else weight.gather(0, target.flatten()).reshape(target.shape))
        counted = weight if ignore_index is None else weight * target.ne(ignore_index)
        picked = -self.gather(1, target.unsqueeze(1)).squeeze(1) * counted
        return picked.sum() / counted.sum() if reduction == "mean" else _reduced(picked, reduction)

    def binary_crossentropy(self, target, reduction: str = "mean"):
        return _reduced(-target * self.log() - (1 - target) * (1 - self).log(), reduction)

    def binary_crossentropy_logits(self, target, reduction: str = "mean", pos_weight=None):
        """Binary cross entropy of σ(x), through log σ(x) and log σ(-x) (no log of a 0)."""
        positive = target if pos_weight is None else pos_weight * target
        return _reduced(-(positive * self.logsigmoid() + (1 - target) * (-self).logsigmoid()), reduction)

    # ------------------------------------------------------------------ indexing
    def _view(self, index):
        """numpy basic indexing: ints, slices (any step), None (a new axis) and one `...`.
        Ints SHRINK to one element and drop the axis; a step > 1 pads the kept run to a
        multiple of the step, folds it into (count, step) and keeps column 0; a negative
        step FLIPs the axis first."""
        if self.shape is None:
            raise GraphError(f"{self.op} has no shape to index (of a FUNCTION or CALL, [i] is output i)")
        items = _expand_ellipsis(index if isinstance(index, tuple) else (index,), len(self.shape))
        node, axis, out_shape = self, 0, []
        for item in items:
            if item is None:
                out_shape.append(1)
                continue
            size = node.shape[axis]
            if isinstance(item, slice):
                if item.step == 0:
                    raise GraphError(f"index on axis {axis}: a slice step cannot be 0")
                start, stop, step = item.indices(size)
                count = len(range(start, stop, step))
                node = _strided(node, axis, start, step, count)
                out_shape.append(count)
            else:
                position = _int_index(item, size, axis)
                node = node.shrink(tuple((position, position + 1) if i == axis else None
                                         for i in range(len(node.shape))))
            axis += 1
        return node.reshape(tuple(out_shape))


def _einsum_letters(formula: str, operands) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with `...` spelled out as spare letters
    (right-aligned, as numpy broadcasts) and an implicit output made explicit (the letters
    used once, sorted, after the ellipsis's)."""
    lhs, arrow, output = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise GraphError(f"einsum {formula!r}: {len(inputs)} operands in the formula, {len(operands)} given")
    ellipsis = ""
    if "..." in formula:
        spare = [c for c in string.ascii_letters if c not in formula]
        widths = [len(x.shape) - (len(s) - 3) if "..." in s else 0 for s, x in zip(inputs, operands)]
        ellipsis = "".join(spare[:max(widths)])
        inputs = [s.replace("...", ellipsis[len(ellipsis) - w:]) for s, w in zip(inputs, widths)]
        output = output.replace("...", ellipsis)
    if not arrow:
        used = "".join(inputs)
        output = ellipsis + "".join(sorted(c for c in set(used) if used.count(c) == 1 and c not in ellipsis))
    for letters, x in zip(inputs, operands):
        if len(letters) != len(x.shape) or not all(c.isalpha() for c in letters):
            raise GraphError(f"einsum {formula!r}: {letters!r} does not name the {len(x.shape)} axes of "
                             f"{list(x.shape)}")
    if len(set(output)) != len(output) or any(c not in "".join(inputs) for c in output):
        raise GraphError(f"einsum {formula!r}: output {output!r} repeats a letter or names one no operand has")
    return inputs, output


def _diagonals(x, letters: str) -> tuple:
    """x and its letters with each letter repeated in one operand reduced to its diagonal
    (the letter once, last): the two axes moved last and flattened (n·n), padded by n and
    folded to (n, n + 1), where column 0 is the diagonal."""
    while len(set(letters)) != len(letters):
        letter = next(c for c in letters if letters.count(c) > 1)
        first = letters.index(letter)
        second = letters.index(letter, first + 1)
        n = x.shape[first]
        rest = [d for d in range(len(x.shape)) if d not in (first, second)]
        flat = x.permute(rest + [first, second]).flatten(len(rest))
        folded = flat.pad((None,) * len(rest) + ((0, n),)).reshape(flat.shape[:-1] + (n, n + 1))
        x = folded.shrink((None,) * (len(rest) + 1) + ((0, 1),)).reshape(flat.shape[:-1] + (n,))
        letters = "".join(letters[d] for d in rest) + letter
    return x, letters


def _rearrange_sides(formula: str) -> tuple[list[list[str]], list[list[str]]]:
    """The two sides of a rearrange formula, each a list of groups (an axis each) of axis
    names: "a (b c) 1" is [["a"], ["b", "c"], []]; a bare "..." stays a group ["..."] and
    "(... c)" a group holding it (they differ: _rearrange_ellipsis tells them apart by
    the _BARE marker a bare one carries). Names are Python identifiers that neither start nor end with "_",
    each once per side, the same names on both sides."""
    if not isinstance(formula, str) or formula.count("->") != 1:
        raise GraphError(f"rearrange {formula!r}: the formula needs exactly one '->'")
    sides = [_rearrange_side(formula, side) for side in formula.split("->")]
    names = [[name for group in side for name in group if name is not _BARE] for side in sides]
    for side_names in names:
        for name in side_names:
            if name != "..." and not (name.isidentifier() and name[0] != "_" and name[-1] != "_"):
                raise GraphError(f"rearrange {formula!r}: {name!r} is not an axis name")
        repeated = {name for name in side_names if side_names.count(name) > 1}
        if repeated:
            raise GraphError(f"rearrange {formula!r}: {sorted(repeated)[0]!r} is named twice on one side")
    if sorted(names[0]) != sorted(names[1]):
        raise GraphError(f"rearrange {formula!r}: the two sides name different axes")
    return sides[0], sides[1]


_BARE = object()  # marks the group of a "..." outside parentheses: one axis per axis it covers


def _rearrange_side(formula: str, side: str) -> list[list]:
    tokens = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
    groups, open_group = [], None
    for token in tokens:
        if token == "(":
            if open_group is not None:
                raise GraphError(f"rearrange {formula!r}: groups cannot nest")
            open_group = []
        elif token == ")":
            if open_group is None:
                raise GraphError(f"rearrange {formula!r}: ')' without '('")
            groups.append(open_group)
            open_group = None
        elif token == "1":  # an axis of size 1: an empty group, or nothing inside a group
            if open_group is None:
                groups.append([])
        elif open_group is not None:
            open_group.append(token)
        else:
            groups.append([token, _BARE] if token == "..." else [token])
    if open_group is not None:
        raise GraphError(f"rearrange {formula!r}: '(' without ')'")
    return groups


def _rearrange_ellipsis(formula: str, left: list, right: list, rank: int) -> tuple[list, list]:
    """Both sides with "..." replaced by the names "...0", "...1", ... of the axes it covers:
    a bare "..." one group per axis, "(... c)" all of them merged with c."""
    if not any("..." in group for group in left + right):
        return left, right
    covered = rank - (len(left) - 1)
    if covered < 0:
        raise GraphError(f"rearrange {formula!r}: the left side names more axes than the tensor's {rank}")
    names = [f"...{i}" for i in range(covered)]

    def expand(side):
        out = []
        for group in side:
            if "..." not in group:
                out.append(group)
            elif _BARE in group:
                out.extend([name] for name in names)
            else:
                at = group.index("...")
                out.append(group[:at] + names + group[at + 1:])
        return out
    return expand(left), expand(right)


def _split_group(formula: str, group: list[str], size: int, sizes: dict) -> dict[str, int]:
    """The sizes of the axes `group` splits an axis of `size` into: given ones from `sizes`,
    one unknown inferred; an empty group is an axis of size 1."""
    if not group:
        if size != 1:
            raise GraphError(f"rearrange {formula!r}: '()' stands for an axis of size 1, the tensor's is {size}")
        return {}
    unknown = [name for name in group if name not in sizes]
    known = math.prod(sizes[name] for name in group if name in sizes)
    if len(unknown) > 1:
        raise GraphError(f"rearrange {formula!r}: give the size of all but one of {', '.join(group)} "
                         f"(e.g. {unknown[0]}=...)")
    if unknown:
        if known <= 0 or size % known:
            raise GraphError(f"rearrange {formula!r}: an axis of {size} does not split into "
                             f"{' x '.join(group)} with the sizes given")
        return {**{name: sizes[name] for name in group if name in sizes}, unknown[0]: size // known}
    if known != size:
        raise GraphError(f"rearrange {formula!r}: {' x '.join(f'{n}={sizes[n]}' for n in group)} is {known}, "
                         f"the axis has {size}")
    return {name: sizes[name] for name in group}


def _axis(dim: int, rank: int) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise GraphError(f"axis {dim!r} out of range for rank {rank}")
    return dim % rank


def _running(x, op: str):
    """Running `op` (ADD, MUL or MAX) along the last axis as one masked reduce over
    (..., n, n): x expanded, kept where column j ≤ row i, else the op's identity."""
    size = x.shape[-1]
    lower = x.arange(size).reshape(1, size) <= x.arange(size).reshape(size, 1)
    rows = x.unsqueeze(-2).expand(*x.shape[:-1], size, size)
    if op == "ADD":
        return lower.where(rows, 0).sum(-1)
    if op == "MUL":
        return lower.where(rows, 1).prod(-1)
    return lower.where(rows, _lowest(x.dtype)).max(-1)


def _per_axis(value, count: int) -> tuple:
    """An int for every axis, or one per axis."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
    if len(values) != count or not all(isinstance(v, int) and v > 0 for v in values):
        raise GraphError(f"expected a positive int or {count} of them, got {value!r}")
    return values


def _odd_blocks_flipped(x, halves: int, within: tuple):
    """x with the blocks whose `halves` bit is set reversed along the `within` axes."""
    first, second = x.split(1, halves)
    return first.cat(second.flip(within), dim=halves)


# scatter_reduce's reduces and the value each starts from (where nothing is written)
_SCATTER_IDENTITY = {"sum": lambda dtype: 0, "prod": lambda dtype: 1, "mean": lambda dtype: 0,
                     "amax": lambda dtype: _lowest(dtype), "amin": lambda dtype: _highest(dtype)}


def _highest(dtype):
    """The value above every other of the dtype: what an ascending sort pads with."""
    if dtype.is_float:
        return math.inf
    if dtype.is_bool:
        return True
    bits = 8 * dtype.itemsize
    return (1 << bits) - 1 if dtype.kind == "u" else (1 << (bits - 1)) - 1


def _lowest(dtype):
    """The value below every other of the dtype: what max pooling pads with."""
    if dtype.is_float:
        return -math.inf
    if dtype.is_bool:
        return False
    return 0 if dtype.kind == "u" else -(1 << (8 * dtype.itemsize - 1))


def _interleave(first, second) -> tuple:
    return tuple(v for pair in zip(first, second) for v in pair)


def _pool_padding(padding, spatial: int) -> tuple:
    """tinygrad's padding forms as (before, after) per spatial axis: an int for all sides,
    one int per axis, or 2·axes ints listing the last axis first (left, right, top, bottom)."""
    flat = [padding] * 2 * spatial if isinstance(padding, int) else list(padding)
    if len(flat) == spatial:
        flat = [p for p in reversed(flat) for _ in range(2)]
    if len(flat) != 2 * spatial or not all(isinstance(p, int) and p >= 0 for p in flat):
        raise GraphError(f"padding is an int >= 0, {spatial} of them or {2 * spatial}, got {padding!r}")
    return flat_padding_pairs(flat)


def varargs(args: tuple):
    """f(2, 3) or f((2, 3)): the ints of a tinygrad-style variadic argument."""
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def flat_padding_pairs(flat) -> tuple:
    """tinygrad's flat padding, last axis first ((left, right, top, bottom) pads W, then H),
    as (before, after) pairs in axis order for the trailing len(flat) // 2 axes."""
    return tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))[::-1]


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def cut_by_negative_padding(pairs: tuple, shape: tuple) -> tuple:
    """The SHRINK bounds that a padding's negative amounts stand for (the positive ones
    keep the whole axis): (-3, 1) on an axis of 5 keeps [3, 5)."""
    _check_pair_count(pairs, shape)
    return tuple((-min(before, 0), size + min(after, 0)) for (before, after), size in zip(pairs, shape))


def pad_from_inside(x, pairs: tuple, mode: str):
    """pad's modes that fill with x's own elements, one axis after another (so corners
    take the values padded along the earlier axes, as numpy.pad's and tinygrad's):
      reflect    x[p], ..., x[1] | x | x[-2], ..., x[-1-p]     (the edge not repeated; p < size)
      replicate  x[0] p times    | x | x[-1] p times
      circular   x[-p:]          | x | x[:p]                   (p <= size, after the cuts)
    Negative amounts cut: after reflect and replicate (they fill from the whole axis),
    before circular (it wraps what is left), as tinygrad's."""
    if mode not in PAD_MODES:
        raise GraphError(f"pad: mode is one of {', '.join(map(repr, PAD_MODES))}, got {mode!r}")
    _check_pair_count(pairs, x.shape)
    if mode == "circular":
        x = x.shrink(cut_by_negative_padding(pairs, x.shape))
    for axis, (before, after) in enumerate(pairs):
        before, after, size = max(before, 0), max(after, 0), x.shape[axis]
        if not before and not after:
            continue
        if (mode == "reflect" and max(before, after) >= size) or (mode == "circular" and max(before, after) > size) \
                or size == 0:
            limit = "less than" if mode == "reflect" else "at most"
            raise GraphError(f"pad: {mode} padding ({before}, {after}) of axis {axis} must be {limit} its size {size}")
        pieces = [p for p in (_edge(x, axis, before, mode, at_start=True), x,
                              _edge(x, axis, after, mode, at_start=False)) if p is not None]
        x = pieces[0].cat(*pieces[1:], dim=axis)
    return x if mode == "circular" else x.shrink(cut_by_negative_padding(pairs, x.shape))


def _edge(x, axis: int, amount: int, mode: str, at_start: bool):
    """The `amount` elements that pad_from_inside puts before (at_start) or after x on `axis`."""
    if not amount:
        return None
    size = x.shape[axis]

    def along(start, end):
        return x.shrink(tuple((start, end) if i == axis else None for i in range(len(x.shape))))
    if mode == "reflect":
        return (along(1, amount + 1) if at_start else along(size - 1 - amount, size - 1)).flip(axis)
    if mode == "replicate":
        edge = along(0, 1) if at_start else along(size - 1, size)
        return edge.expand(tuple(amount if i == axis else s for i, s in enumerate(x.shape)))
    return along(size - amount, size) if at_start else along(0, amount)  # circular


def _check_pair_count(pairs: tuple, shape: tuple) -> None:
    if len(pairs) != len(shape):
        raise GraphError(f"pad: {len(pairs)} (before, after) pairs for a tensor of rank {len(shape)}")


def _pool_geometry(kernel_size, stride, dilation) -> tuple:
    """A pool's kernel (an int: 2 axes; a tuple: as many axes as it has), strides (None: the
    kernel's) and dilations, one int per axis."""
    kernel = _per_axis(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size))
    return kernel, _per_axis(kernel if stride is None else stride, len(kernel)), _per_axis(dilation, len(kernel))


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise GraphError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def _reduced(loss, reduction: str):
    if reduction not in REDUCTIONS:
        raise GraphError(f"reduction is one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _expand_ellipsis(items: tuple, rank: int) -> tuple:
    """The index with `...` (or nothing, at the end) replaced by whole-axis slices."""
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise GraphError("an index can have only one ellipsis (...)")
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    if used > rank:
        raise GraphError(f"too many indices: {used} for a tensor of rank {rank}")
    fill = (slice(None),) * (rank - used)
    if not ellipses:
        return items + fill
    at = next(i for i, item in enumerate(items) if item is Ellipsis)
    return items[:at] + fill + items[at + 1:]


def _int_index(item, size: int, axis: int) -> int:
    if isinstance(item, bool) or not isinstance(item, int):
        hint = " (for a tensor of indices, use gather)" if hasattr(item, "shape") else ""
        raise GraphError(f"index on axis {axis}: an index is an int, a slice, None or ..., "
                         f"not {type(item).__name__}{hint}")
    if not -size <= item < size:
        raise GraphError(f"index {item} out of range for axis {axis} of size {size}")
    return item % size


def _strided(node, axis: int, start: int, step: int, count: int):
    """Elements start, start + step, ... (count of them) of `axis`."""
    rank = len(node.shape)

    def along(pair):
        return tuple(pair if i == axis else None for i in range(rank))

    if count == 0:
        return node.shrink(along((0, 0)))
    if step < 0:  # walk the flipped axis forwards
        node, start, step = node.flip(axis), node.shape[axis] - 1 - start, -step
    end = start + (count - 1) * step + 1
    node = node.shrink(along((start, end)))
    if step == 1:
        return node
    node = node.pad(along((0, count * step - (end - start))))
    shape = node.shape
    folded = node.reshape(shape[:axis] + (count, step) + shape[axis + 1:])
    first = folded.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(rank + 1)))
    return first.reshape(shape[:axis] + (count,) + shape[axis + 1:])


# every public method above is a composite: uop.py tags the nodes each makes with its name
# (not the static ones, arange, eye and einsum, which have no self to stay beside)
COMPOSITES: Sequence[str] = tuple(name for name, member in vars(TensorFunctions).items()
                                  if not name.startswith("_") and not isinstance(member, staticmethod))
