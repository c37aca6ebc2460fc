"""Small helpers the builder's mixins share: axis numbers, per-axis arguments, tinygrad's
variadic shapes and each dtype's extreme values."""

from __future__ import annotations

import math

from ..errors import GraphError

def varargs(args: tuple):
    """f(2, 3) or f((2, 3)): the ints of a tinygrad-style variadic argument."""
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def axis_index(dim: int, rank: int) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise GraphError(f"axis {dim!r} out of range for rank {rank}")
    return dim % rank


def per_axis(value, count: int) -> tuple:
    """An int for every axis, or one per axis."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
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
