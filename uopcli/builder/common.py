"""Small helpers the builder's mixins share: axis numbers, per-axis arguments, tinygrad's
variadic shapes and each dtype's extreme values."""

from __future__ import annotations

import math
import operator

from ..errors import GraphError


def named_dtype(dtype):
    """The DType a builder argument names (a DType, its name, a numpy dtype); an unknown
    name is the library's GraphError, as every other bad argument."""
    from ..core.ops import dtype_of
    try:
        return dtype_of(dtype)
    except (ValueError, TypeError) as e:
        raise GraphError(str(e) if isinstance(e, ValueError) else
                         f"not a dtype: {dtype!r} (a DType such as dtypes.float32, its name, or a numpy dtype)") from None


def in_float32(x, build):
    """build(x) of a float narrower than float32 (float16) computed in float32 and rounded
    back once, as torch and tinygrad's CPU compute float16 statistics: in float16 the square
    of a deviation past 256 overflows (var inf, layernorm 0) and each step rounds. Other
    dtypes: build(x) as it is. The gradient flows through the two CASTs (in float32 too)."""
    from ..core.ops import dtypes, least_upper_dtype
    wide = least_upper_dtype(x.dtype, dtypes.float32)
    return build(x) if wide == x.dtype else build(x.cast(wide)).cast(x.dtype)


def whole(value):
    """numpy's and torch's integer scalars (an axis or index from np.argmax, a 0-d integer
    array or tensor) as the Python int they hold; anything else as it is (bools too: the
    checks that follow refuse them)."""
    if value.__class__ is int or isinstance(value, bool) or not hasattr(value, "__index__"):
        return value
    try:
        return operator.index(value)
    except TypeError:  # an array of more than one element, a bool array
        return value


def varargs(args: tuple):
    """f(2, 3) or f((2, 3)): the ints of a tinygrad-style variadic argument."""
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def axis_index(dim: int, rank: int) -> int:
    dim = whole(dim)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise GraphError(f"axis {dim!r} out of range for rank {rank}")
    return dim % rank


def resolve_dim(dim, rank: int, extra: bool = False) -> int:
    """tinygrad's _resolve_dim: an int axis of a tensor of `rank` (one more with `extra`, the
    place of a new axis), made non-negative. A 0-d tensor has axis 0 (and -1) for this, as
    in tinygrad and torch: x.sum(0) and x.softmax(-1) of a scalar work, x.cumsum(1) does not."""
    total = rank + int(extra)
    dim = whole(dim)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise GraphError(f"an axis is an int, got {dim!r}")
    if not -max(1, total) <= dim < max(1, total):
        raise GraphError(f"axis {dim} out of range [{-max(1, total)}, {max(1, total) - 1}] for rank {rank}")
    return dim + total if dim < 0 else dim


def reduce_axes(axis, rank: int) -> tuple[int, ...]:
    """The axes a reduction runs over: None for all, an int or a sequence of ints, each at
    most once (torch and numpy refuse a repeated axis, and so does tinygrad); none of a 0-d
    tensor, whose axis 0 is itself."""
    if axis is None:
        return tuple(range(rank))
    axis = whole(axis)
    axes = [resolve_dim(a, rank) for a in (tuple(axis) if hasattr(axis, "__iter__") else (axis,))]
    repeated = [a for k, a in enumerate(axes) if a in axes[:k]]
    if repeated and rank:
        raise GraphError(f"axis {repeated[0]} appears more than once in {tuple(axis)}")
    return () if rank == 0 else tuple(sorted(axes))


def per_axis(value, count: int) -> tuple:
    """An int for every axis, or one per axis."""
    value = whole(value)
    values = (value,) * count if isinstance(value, int) else tuple(map(whole, value))
    if len(values) != count or not all(isinstance(v, int) and v > 0 for v in values):
        raise GraphError(f"expected a positive int or {count} of them, got {value!r}")
    return values


def highest(dtype):
    """The value above every other of the dtype: what an ascending sort pads with."""
    if dtype.is_float:
        return math.inf
    if dtype.is_bool:
        return True
    bits = 8 * dtype.itemsize
    return (1 << bits) - 1 if dtype.kind == "u" else (1 << (bits - 1)) - 1


def lowest(dtype):
    """The value below every other of the dtype: what max pooling pads with."""
    if dtype.is_float:
        return -math.inf
    if dtype.is_bool:
        return False
    return 0 if dtype.kind == "u" else -(1 << (8 * dtype.itemsize - 1))
