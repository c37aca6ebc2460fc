"""The op table: one row per op of format v1, the numpy that computes a node from its
sources' values, and which ufuncs may write their result into a source array.

Exact dtype semantics: every result is in the node's dtype. Sources of a binary op share
one dtype, and numpy keeps it (a source of shape () broadcasts as numpy broadcasts).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...core.ops import Ops, accumulation_dtype, accumulation_np


# ----------------------------------------------------------------------------- op helpers
# Exact dtype semantics: every result is in the node's dtype. Sources of a binary op share
# one dtype, and numpy keeps it (a source of shape () broadcasts as numpy broadcasts).

def _uint_of(dtype) -> np.dtype:
    """The unsigned integer type of the same item size: WHERE moves bits through it."""
    return np.dtype(f"u{dtype.itemsize}")


def const_value(node):
    return node.dtype.np.type(node.arg)  # a numpy scalar: cheapest operand for ufuncs


def _cdiv(node, a, b):
    if node.dtype.is_float:
        return a / b
    if node.dtype.kind == "u":
        return np.floor_divide(a, b)
    # C division truncates toward zero: a - fmod(a, b) is an exact multiple of b
    # (and cannot overflow, |fmod| < |b| with a's sign), so floor division is exact.
    return np.floor_divide(np.subtract(a, np.fmod(a, b)), b)


def _int_pow(a, b):
    """Integer power as C code would write it: negative exponents give 1/a^|b| truncated
    (so 1, -1 or 0); numpy refuses them."""
    if b.dtype.kind == "u" or not np.any(b < 0):
        return np.power(a, b)
    negative = b < 0
    out = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    one, zero = a.dtype.type(1), a.dtype.type(0)
    small = np.where(a == 1, one, np.where(a == -1, np.where(b % 2 == 0, one, -one), zero))
    return np.where(negative, small, out).astype(a.dtype)


def _pow(node, a, b):
    return a ** b if node.dtype.is_float else _int_pow(np.asarray(a), np.asarray(b))


def _shl(node, a, b):
    """a << b; bools shift as C's ints do and convert back (nonzero is true): a << b is a."""
    return (a.astype(np.uint8) << b).astype(np.bool_) if node.dtype.is_bool else a << b


def _shr(node, a, b):
    """a >> b; bools as in C: true >> true is 0, so the result is a and not b."""
    return (a.astype(np.uint8) >> b).astype(np.bool_) if node.dtype.is_bool else a >> b


def _is_zero_bits(x) -> bool:
    return x.ndim == 0 and not x.view(_uint_of(x.dtype))  # +0.0, 0, False (not -0.0)


def _where(node, cond, a, b):
    """`a` where cond else `b`, bit for bit. np.where is 5-10x slower than a few passes of
    integer arithmetic on a random mask, so the bits are selected arithmetically:
    b ^ ((a ^ b) * cond), exact for every value (-0.0, inf, nan); a zero branch (relu and
    its gradient) needs only the multiply."""
    if not node.shape:
        return np.where(cond, a, b)
    uint = _uint_of(node.dtype)
    if _is_zero_bits(b):
        return np.multiply(a.view(uint), cond, dtype=uint).view(node.dtype.np)
    if _is_zero_bits(a):
        return np.multiply(b.view(uint), np.logical_not(cond), dtype=uint).view(node.dtype.np)
    b_bits = b.view(uint)
    bits = np.bitwise_xor(a.view(uint), b_bits)
    if bits.shape == node.shape:
        np.multiply(bits, cond, out=bits)
    else:  # both branches are scalars
        bits = np.multiply(bits, cond, dtype=uint)
    return np.bitwise_xor(bits, b_bits, out=bits).view(node.dtype.np)


def where_into_a(node, cond, a, b):
    """WHERE written into a dying `a` (see _where)."""
    return _select_into(node, a, b, cond) if a.flags.writeable else _where(node, cond, a, b)


def where_into_b(node, cond, a, b):
    """WHERE written into a dying `b`."""
    return _select_into(node, b, a, np.logical_not(cond)) if b.flags.writeable else _where(node, cond, a, b)


def _select_into(node, target, other, keep):
    """`target` where `keep`, else `other`, in place: target ^= other; target *= keep;
    target ^= other (on the bits, so exact for every value; a zero `other` needs only the multiply)."""
    bits = target.view(_uint_of(node.dtype))
    if _is_zero_bits(other):
        np.multiply(bits, keep, out=bits)
        return target
    other_bits = other.view(bits.dtype)
    np.bitwise_xor(bits, other_bits, out=bits)
    np.multiply(bits, keep, out=bits)
    np.bitwise_xor(bits, other_bits, out=bits)
    return target


def _mulacc(node, a, b, c):
    product = np.multiply(a, b)
    if isinstance(product, np.ndarray) and product.shape == node.shape:
        return np.add(product, c, out=product)
    return np.add(product, c)


def _keep_negative_zero(total, x, axes):
    """A sum of only -0.0 is -0.0, as IEEE addition (and the sum written out as ADDs) gives;
    numpy starts a contiguous sum from +0.0 and returns +0.0. Costs a pass over the result,
    and one over x only where some sum is zero."""
    if not isinstance(total, np.ndarray) or total.all() or any(x.shape[a] == 0 for a in axes):
        return total
    only_negative_zeros = np.all(np.signbit(x) & (x == 0), axis=axes, keepdims=True)
    if only_negative_zeros.any():
        total = np.where(only_negative_zeros, total.dtype.type(-0.0), total)
    return total


def reduce_values(node, x):
    op, axes = node.arg
    if _reduce_by_positions_pays(x, axes):
        return _reduce_by_positions(node, x, op, axes)
    if op == "ADD":
        wide = accumulation_dtype(node.dtype)
        if wide is not node.dtype:  # float16 sums accumulate in float32
            return _keep_negative_zero(np.sum(x, axis=axes, keepdims=True, dtype=wide.np).astype(node.dtype.np), x, axes)
        total = np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)  # ints wrap in their own dtype
        return _keep_negative_zero(total, x, axes) if node.dtype.is_float else total
    if op == "MUL":
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)
    if any(node.src[0].shape[a] == 0 for a in axes):  # max over nothing: the identity
        low = -np.inf if node.dtype.is_float else np.iinfo(x.dtype).min
        return np.max(x, axis=axes, keepdims=True, initial=low)
    return np.max(x, axis=axes, keepdims=True)


_POSITIONS_MAX = 64        # reduced elements per result, at most, to reduce one position at a time
_POSITIONS_MIN_OUT = 4096  # result elements, at least: below it the Python loop costs more than it saves


def _reduce_by_positions_pays(x, axes) -> bool:
    """A REDUCE of a strided view over a few small axes (a stride-1 pool's overlapping
    windows): numpy's reduce loops over the tiny axes per element, 3-10x slower than a
    ufunc over one slice per reduced position."""
    if not isinstance(x, np.ndarray) or x.flags.c_contiguous or not axes:
        return False
    count = math.prod(x.shape[a] for a in axes)
    return 2 <= count <= _POSITIONS_MAX and x.size // count >= _POSITIONS_MIN_OUT


def _reduce_by_positions(node, x, op, axes):
    """The REDUCE as a running np.add/multiply/maximum over its reduced positions, one
    slice each (float16 sums accumulate in float32, as reduce_values's)."""
    ufunc = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum}[op]
    compute = accumulation_np(x.dtype) if op == "ADD" else x.dtype
    index = [slice(None)] * x.ndim
    out = None
    for position in itertools.product(*(range(x.shape[a]) for a in axes)):
        for axis, p in zip(axes, position):
            index[axis] = slice(p, p + 1)
        part = x[tuple(index)]
        if out is None:
            out = part.astype(compute, copy=True)
        else:
            ufunc(out, part, out=out)
    return out if out.dtype == node.dtype.np else out.astype(node.dtype.np)


def _pad(node, x):
    out = np.zeros(node.shape, dtype=node.dtype.np)
    out[tuple(slice(before, before + n) for (before, _), n in zip(node.arg, np.shape(x)))] = x
    return out


def _shrink(node, x):
    return x[tuple(slice(start, end) for start, end in node.arg)]


def _flip(node, x):
    return x[tuple(slice(None, None, -1) if f else slice(None) for f in node.arg)]


class _ExactExp2:
    """2^x as np.exp2 computes it, but exact at every integer x, where 2^x is a power of two
    the type holds: graphs make exact scales with EXP2 (ldexp's 2^e; the ONNX L2 norms'
    2^-e). numpy 2.4.6's float32 exp2 on AVX-512 CPUs gives 2^127 one ulp low (every other
    integer exact; non-integers within 3 ulps, as its other float32 transcendentals);
    float16 and float64 are exact at every integer. The fix-up costs a trunc and a compare
    per element. To the passes it is np.exp2: called with `out` and `order`, and its nin,
    types and name are np.exp2's."""
    __slots__ = ()

    def __getattr__(self, name):
        return getattr(np.exp2, name)

    def __call__(self, x, out=None, **kwargs):
        if x.dtype != _FLOAT32:
            return np.exp2(x, out=out, **kwargs)
        whole = np.trunc(x) == x  # before `out` (maybe x itself) is written; nan is not whole
        if not whole.any():
            return np.exp2(x, out=out, **kwargs)
        # ±inf are whole: clipped, 2^±200 is inf and 0 in float32, as exp2 gives (nan: 0, unused)
        exact = np.ldexp(_FLOAT32.type(1), np.where(whole, np.clip(x, -200, 200), 0).astype(np.int32))
        result = np.exp2(x, out=out, **kwargs)
        if result.__class__ is not np.ndarray:  # a 0-d operand gives a numpy scalar
            return exact[()] if exact.__class__ is np.ndarray else exact
        np.copyto(result, exact, where=whole)
        return result


_FLOAT32 = np.dtype(np.float32)
exp2 = _ExactExp2()


# Markers for ops the compiler handles without a step.
SAME_AS_SOURCE_0 = "same value as source 0"   # the register of src[0] is reused
SAME_AS_SOURCE_1 = "same value as source 1"   # the register of src[1] is reused
STRUCTURAL = "handled by the compiler"        # inputs, call plumbing, tuples

# ----------------------------------------------------------------------------- the op table
# One row per op of format v1: the numpy that computes the node from its sources' values,
# called as impl(node, *source_values); the maths beside it. Python operators are used
# where they mean the same ufunc: on numpy scalars they are ~20x faster than np.add(...).
IMPL = {
    Ops.PARAM: STRUCTURAL,                                               # the input's array, or call arg i for slot i
    Ops.CONST: const_value,                                                   # the scalar, in the node's dtype
    Ops.BUFFER: lambda n: n.buffer_array(),                              # the embedded bytes, zero-copy
    Ops.NOOP: STRUCTURAL,                                                # None (only inside a TUPLE)
    Ops.NEG: lambda n, x: -x,                                            # -x (unsigned wraps)
    Ops.RECIPROCAL: lambda n, x: np.reciprocal(x),                       # 1/x
    Ops.SQRT: lambda n, x: np.sqrt(x),                                   # √x
    Ops.EXP2: lambda n, x: exp2(x),                                      # 2^x (exact at integers)
    Ops.LOG2: lambda n, x: np.log2(x),                                   # log₂ x
    Ops.SIN: lambda n, x: np.sin(x),                                     # sin x
    Ops.TRUNC: lambda n, x: np.trunc(x),                                 # x rounded toward 0
    Ops.CAST: lambda n, x: np.asarray(x).astype(n.dtype.np),             # value converted; float -> int truncates
    Ops.BITCAST: lambda n, x: x.view(n.dtype.np),                        # same bytes, new dtype
    Ops.ADD: lambda n, a, b: a + b,                                      # a + b
    Ops.SUB: lambda n, a, b: a - b,                                      # a - b
    Ops.MUL: lambda n, a, b: a * b,                                      # a * b
    Ops.FDIV: _cdiv,                                                     # a / b (integers: as CDIV)
    Ops.MAX: lambda n, a, b: np.maximum(a, b),                           # max(a, b)
    Ops.POW: _pow,                                                       # a^b (integers: C-style, b<0 -> 1/a^|b|)
    Ops.CDIV: _cdiv,                                                     # a / b truncated toward 0
    Ops.CMOD: lambda n, a, b: np.fmod(a, b),                             # a - b*trunc(a/b): the dividend's sign
    Ops.AND: lambda n, a, b: a & b,                                      # a & b (bool: and)
    Ops.OR: lambda n, a, b: a | b,                                       # a | b (bool: or)
    Ops.XOR: lambda n, a, b: a ^ b,                                      # a ^ b (bool: xor)
    Ops.SHL: _shl,                                                       # a << b (bool: as C, via int)
    Ops.SHR: _shr,                                                       # a >> b (signed: arithmetic)
    Ops.CMPLT: lambda n, a, b: a < b,                                    # a < b
    Ops.CMPNE: lambda n, a, b: a != b,                                   # a != b
    Ops.CMPEQ: lambda n, a, b: a == b,                                   # a == b
    Ops.WHERE: _where,                                                   # cond ? a : b
    Ops.MULACC: _mulacc,                                                 # a*b + c
    Ops.REDUCE: reduce_values,                                                 # Σ / Π / max over axes, kept as size 1
    Ops.RESHAPE: lambda n, x: np.reshape(x, n.arg),                      # same elements, new shape (a view when it can)
    Ops.EXPAND: lambda n, x: np.broadcast_to(x, n.arg),                  # size-1 axes repeated: a zero-copy view
    Ops.PERMUTE: lambda n, x: np.transpose(x, n.arg),                    # axes reordered: a view
    Ops.PAD: _pad,                                                       # zeros around x
    Ops.SHRINK: _shrink,                                                 # x[start:end, ...]: a view
    Ops.FLIP: _flip,                                                     # x[::-1] on marked axes: a view
    Ops.CONTIGUOUS: SAME_AS_SOURCE_0,                                    # x (layout is numpy's business)
    Ops.CONTIGUOUS_BACKWARD: SAME_AS_SOURCE_0,                           # x
    Ops.DETACH: SAME_AS_SOURCE_0,                                        # x (only gradients stop)
    Ops.COPY: SAME_AS_SOURCE_0,                                          # x (everything runs on the CPU)
    Ops.TUPLE: STRUCTURAL,                                               # (elements...), as an output only
    Ops.FUNCTION: STRUCTURAL,                                            # body run once with slot i = arg i
    Ops.CALL: STRUCTURAL,                                                # the same (its backward body is not run)
    Ops.GETTUPLE: STRUCTURAL,                                            # body output i of that call
    Ops.STORE: SAME_AS_SOURCE_1,                                         # the stored value
    Ops.AFTER: SAME_AS_SOURCE_1,                                         # the value its STORE wrote
}


# Ops that can write their result into a source dying at that step (same shape and dtype):
# no allocation and no fresh pages to fault in, and a lower peak. Hand-written numpy does
# the same (`z += b`).
UFUNC_INTO = {
    Ops.NEG: np.negative, Ops.RECIPROCAL: np.reciprocal, Ops.SQRT: np.sqrt, Ops.EXP2: exp2,
    Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.TRUNC: np.trunc,
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
    Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.CMOD: np.fmod,
}
_SHIFTS = frozenset({Ops.SHL, Ops.SHR})
FLOAT_UFUNC_INTO = {Ops.FDIV: np.divide, Ops.POW: np.power}  # integer FDIV/POW are C-style, not ufuncs

# Ufuncs numpy computes wrongly in place (out= its input) on some non-contiguous arrays:
# they run in place only on contiguous ones, elsewhere out of place (what np.negative(x)
# defines: -0.0, nan's sign, integer wrap). tests/test_evaluate_in_place.py checks every
# ufunc above in place against out of place on strides of 1 to 16 elements, and fails when
# numpy fixes a row here or breaks another ufunc.
NOT_INTO_STRIDED = {
    # numpy 2.4.6, AVX2/AVX-512 CPUs: np.negative(v, out=v) with v stepping 8 elements of 8
    # bytes or 4 of 4 bytes reads the wrong elements (issue 25: a strided NEG gave
    # [-10, -12, -14, -16] for [-10, -26, -42, -58])
    np.negative: "wrong in place on 8-element (8-byte) and 4-element (4-byte) strides, numpy 2.4.6",
}


def ufunc_of(node):
    """The ufunc that computes `node` as it stands, or None (integer FDIV/POW are C-style)."""
    if node.op in _SHIFTS and node.dtype.is_bool:
        return None  # numpy shifts no bools: _shl and _shr go through uint8
    return UFUNC_INTO.get(node.op) or (FLOAT_UFUNC_INTO.get(node.op) if node.dtype.is_float else None)


COMPARE_UFUNCS = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}
