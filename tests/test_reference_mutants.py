"""The reference evaluator's values where its mutation run (docs/mutation.md, backends/reference.py)
found the tests blind: integer POW, C division and sums that wrap in their dtype, bool
shifts and maxima, empty reductions, the contraction of a REDUCE ADD of a MUL, and the walk's
promises (each node once, values dropped after their last reader, `known`, `keep`, `observe`,
fresh C-ordered outputs). Each value is pinned bit for bit against numpy or Python integers
computed here, never against the evaluator itself."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import Ops, UOp, dtypes
from uopcli.core.ops import dtype_of
from uopcli.backends.reference import reference_evaluate


def bits(value, expected):
    """The same type, dtype, shape and bytes (so -0.0 is not 0.0 and a numpy scalar is not a 0-d array)."""
    assert type(value) is np.ndarray, type(value)
    expected = np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    assert value.tobytes() == expected.tobytes(), (value, expected)


def one(output, **inputs):
    (value,) = reference_evaluate([output], inputs)
    return value


def binary(op, dtype, a, b):
    """`op` of two inputs holding a and b (numpy arrays of `dtype`), by the reference."""
    x, y = UOp.param("a", a.shape, dtype), UOp.param("b", b.shape, dtype)
    return one(UOp.make(op, dtype, (x, y)), a=a, b=b)


def wrapped(values, dtype):
    """Python integers wrapped into `dtype` (two's complement), as C's arithmetic leaves them."""
    bits_ = np.iinfo(dtype).bits
    low = np.iinfo(dtype).min
    return np.array([(v - low) % (1 << bits_) + low for v in values], dtype)


# ----------------------------------------------------------------------------- POW, C division, shifts

def test_integer_power_with_a_negative_exponent_is_one_over_the_power_truncated():
    a = np.array([1, 1, -1, -1, -1, -1, 2, -2, 0, 5], np.int32)
    b = np.array([-1, -4, -1, -2, -3, -4, -1, -1, -1, -2], np.int32)
    # 1/1^n = 1; 1/(-1)^n = ±1 by n's parity (-3 is odd, -4 even); |a| > 1 truncates to 0; 1/0 gives 0
    bits(binary(Ops.POW, dtypes.int32, a, b), np.array([1, 1, -1, 1, -1, 1, 0, 0, 0, 0], np.int32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint64])
def test_integer_power_wraps_in_its_dtype_as_repeated_multiplication(dtype):
    # 3^21 passes int32's range, 3^39 and 3^40 float64's 53 bits: the product is never a float
    # (uint64's was: its powers went through float64, 3^40 came out 33 low)
    a = np.array([3, 3, -2, 2, 0, 7], np.int64)
    b = np.array([21, 39, 63, 9, 0, 1], np.int64)
    if np.iinfo(dtype).min == 0:
        a, b = np.abs(a), np.where(b == 39, 40, b)
    want = wrapped([int(x) ** int(n) for x, n in zip(a, b)], dtype)
    bits(binary(Ops.POW, dtype_of(np.dtype(dtype)), a.astype(dtype), b.astype(dtype)), want)
