"""How the builder pairs operands as tinygrad's Tensor does (uop.py's binary methods use
these): which Python numbers count, tinygrad's arithmetic on bools, its divisions of
promoted operands, the wrap of an int into an integer dtype, and how a refusal names an
operand."""

from __future__ import annotations

from ..builder.common import whole
from ..errors import GraphError
from .ops import DType, Ops, dtypes


def one_axis(axis, rank: int) -> int:
    """An existing axis (of a tensor with at least one): -rank <= axis < rank."""
    axis = whole(axis)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise GraphError(f"axis {axis!r} out of range for rank {rank}")
    return axis % rank


PYTHON_NUMBERS = frozenset({bool, int, float})
SHIFTS = frozenset({Ops.SHL, Ops.SHR})
# tinygrad's arithmetic on bools, spelled with the ops the format allows on them
ON_BOOLS = {Ops.ADD: lambda a, b: a | b, Ops.MAX: lambda a, b: a | b, Ops.MUL: lambda a, b: a & b,
             Ops.SUB: lambda a, b: a | b.logical_not()}


def true_division(a, b):
    """a / b of two promoted operands: integers and bools divided as float32, as tinygrad
    (the FDIV node itself, on integers, is C division)."""
    if not a.dtype.is_float:
        a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    return a.make(Ops.FDIV, a.dtype, (a, b))


def reciprocal_division(a, b):
    """a · (1 / b), tinygrad's division, where its rounding decides an integer result:
    float16 100 // 2.5 is floor(100 · 0.39990234) = 40 here and on tinygrad's CPU device (the
    product rounds up to 40 in float16; its PYTHON device keeps 39.99 wider, and floors it to 39)."""
    if not a.dtype.is_float:
        a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    return a * b.reciprocal()


def floor_div_mod(a, b) -> tuple:
    """(a // b, a % b) of two promoted operands, flooring as Python and tinygrad do.
    Integers: C's quotient is one too large, and its remainder has the wrong sign, where
    the remainder is nonzero and the signs of a and b differ. Anything else (bools too, as
    tinygrad) in floats: floor(a / b), and a - floor(a / b) * b."""
    if not (a.dtype.is_int and b.dtype.is_int):
        floor = reciprocal_division(a, b).floor()
        return floor, a - floor * b
    quotient, remainder = a.cdiv(b), a.cmod(b)
    if a.dtype.kind == "u":
        return quotient, remainder
    zero = a.const_like(0)
    off = (remainder.ne(0)) & ((remainder < zero).ne(b < zero))
    return off.where(quotient - 1, quotient), off.where(remainder + b, remainder)


def describe_operand(x) -> str:
    """An operand as a refusal names it: dtype and shape, or the Python number."""
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return f"{x.dtype.name}{list(x.shape) if x.shape is not None else ''}"
    return f"{type(x).__name__} {x!r}"


def wrapped(value: int, dtype: DType) -> int:
    """A Python int as the integer dtype holds it: modulo 2^bits, two's complement."""
    bits = 8 * dtype.itemsize
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype.kind == "i" and value >> (bits - 1) else value
