"""tinygrad's Tensor constructors (zeros, ones, arange, linspace, eye, meshgrid) and the
masks built from arange: one-hot codes, tril and triu."""

from __future__ import annotations

import math

from ..errors import GraphError
from ..core.ops import dtype_of, dtypes
from .common import highest, lowest, varargs

class CreationMixin:
    """Constructors and arange-built masks; the static ones need no tensor to start from."""

    __slots__ = ()

    @staticmethod
    def zeros(*shape, dtype=None):
        from ..core.uop import UOp
        return UOp.full(varargs(shape), 0.0 if dtype is None else 0, dtype or dtypes.float32)

    @staticmethod
    def ones(*shape, dtype=None):
        from ..core.uop import UOp
        return UOp.full(varargs(shape), 1.0 if dtype is None else 1, dtype or dtypes.float32)

    def full_like(self, fill_value, dtype=None):
        return type(self).full(self.shape, fill_value, self.dtype if dtype is None else dtype)

    @staticmethod
    def linspace(start, stop, steps: int, dtype=None):
        """`steps` evenly spaced values from `start` to `stop`, both included (float32 unless `dtype`)."""
        from ..core.uop import UOp
        dtype = dtype or dtypes.float32
        if not isinstance(steps, int) or steps < 0:
            raise GraphError(f"linspace: steps must be a whole number >= 0, got {steps!r}")
        if dtype is dtypes.bool:
            raise GraphError("linspace: no bool dtype")
        if steps == 1:
            return UOp.full((1,), start, dtype)
        spacing = (stop - start) / (steps - 1) if steps else 0.0
        return (start + UOp.arange(steps, dtype=dtypes.float32) * spacing).cast(dtype)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None):
        """[start, stop) by `step` as a vector: float32 if any bound is a float, else int32,
        or int64 when the values do not fit int32, as tinygrad (whose own check reads
        stop - step as the last value, so it wraps arange(1, 2^31 + 2, 2^30) in int32; here
        the last value is the last one made, and an empty range is int32, as tinygrad's);
        a range the dtype cannot hold is refused. tinygrad sums a run of `step`s with its pool; this doubles [0] to
        [0 .. 2ᵏ) by `cat(a, a + len(a))`, a few nodes a doubling, then scales and shifts."""
        from ..core.uop import UOp
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise GraphError("arange: step must not be 0")
        if not all(math.isfinite(v) for v in (start, stop, step)):
            raise GraphError(f"arange: bounds and step must be finite, got {start}, {stop}, {step}")
        count = max(0, math.ceil((stop - start) / step))
        # the values are start .. start + (count - 1)·step: the last is not stop - step when
        # step does not divide the range (1, 2^31 + 2 by 2^30 ends at 2^31 + 1); none when empty
        last = start + (count - 1) * step if count else start
        low, high = min(start, last), max(start, last)
        if dtype is None:
            dtype = dtypes.float32 if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.int32
            if dtype is dtypes.int32 and not lowest(dtype) <= low <= high <= highest(dtype):
                dtype = dtypes.int64
        dtype = dtype_of(dtype)
        if dtype.is_int and not (lowest(dtype) <= low and high <= highest(dtype)):
            raise GraphError(f"arange [{start}, {stop}) by {step} does not fit {dtype.name}")
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
        from ..core.uop import UOp
        columns = n if m is None else m
        if n < 0 or columns < 0:
            raise GraphError(f"eye: sizes must be >= 0, got {n} and {columns}")
        return UOp.arange(n).unsqueeze(-1).eq(UOp.arange(columns)).cast(dtype or dtypes.float32)

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
