"""Format v1 ops that no ONNX operator computes exactly, written as small exact ONNX subgraphs.

The truth is uopcli's numpy evaluator (uopcli/backends/numpy/table.py, IMPL): each function below
says which numpy expression it matches and why its ONNX nodes give the same values,
edges included (negative operands, -0.0, inf, nan, division by zero, INT_MIN / -1,
shifts by the width or more). Every function is `fn(e, node, *sources) -> value name`,
`e` the Emitter, the sources' ONNX value names in the node's own order.

ONNX spec references are to https://onnx.ai/onnx/operators/ (operator-version).
"""

from __future__ import annotations

import math

from onnx import TensorProto

from uopcli.core.ops import DType, dtypes

from .dtypes import TO_ONNX
from .emit import FLOATS, VALUE_CARRIER, Emitter

_INV_LN2 = 1.0 / math.log(2.0)
_F64 = dtypes.float64
_I64 = dtypes.int64
_UNSIGNED_OF = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
# IEEE formats: (exponent bits, mantissa bits) by float dtype
_FORMAT = {dtypes.float16: (5, 10), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}


def may_be_minus_zero(node) -> bool:
    """False when node's value is known to hold no -0.0 (a CONST other than -0.0, or a
    reshape or expansion of one): the cheap form of Emitter.where applies."""
    while node.op in ("RESHAPE", "EXPAND", "CONTIGUOUS", "DETACH", "COPY", "CONTIGUOUS_BACKWARD"):
        node = node.src[0]
    if node.op != "CONST":
        return True
    return node.arg == 0 and math.copysign(1.0, node.arg) < 0


def _f64(e: Emitter, x: str, dtype: DType) -> str:
    """x as float64: exact for every float16/float32 value (and every int up to 2^53)."""
    return e.cast(x, dtype, _F64)


def in_float32(e: Emitter, op_type: str, inputs, dtype: DType, extra=(), **attrs) -> str:
    """A float op as numpy does float16 maths: in float32, rounded back once."""
    if dtype is not dtypes.float16:
        return e.op(op_type, [*inputs, *extra], **attrs)
    wide = [e.cast(x, dtype, dtypes.float32) for x in inputs]
    return e.cast(e.op(op_type, [*wide, *extra], **attrs), dtypes.float32, dtype)


# ----------------------------------------------------------------------------- float unary

def trunc(e: Emitter, node, x: str) -> str:
    """np.trunc: Floor-13 of Abs-13, given x's sign by a multiply (-0.5 -> -0.0, -0.0 ->
    -0.0; inf and nan pass through). A Where of Ceil and Floor would lose the sign of
    zero (see Emitter.where). float16 in float32 (exact both ways)."""
    dtype = node.dtype
    wide = dtypes.float32 if dtype is dtypes.float16 else dtype
    x = e.cast(x, dtype, wide)
    zero = e.scalar(0, wide)
    negative = e.op("Or", [e.op("Less", [x, zero]), e.op("Less", [e.op("Reciprocal", [x]), zero])])
    magnitude = e.op("Floor", [e.op("Abs", [x])])
    return e.cast(e.op("Mul", [magnitude, e.sign_factor(negative, wide)]), wide, dtype)


def exp2(e: Emitter, node, x: str) -> str:
    """np.exp2 as Pow(2, x) (Pow-15): exact at integers (2^-149 .. 2^127 are powers of two
    pow returns exactly), inf -> inf, -inf -> 0, nan -> nan; elsewhere within an ulp."""
    return in_float32(e, "Pow", [e.scalar(2, node.dtype), x], node.dtype)


def log2(e: Emitter, node, x: str) -> str:
    """np.log2. float16/float32: Log in float64 times 1/ln 2 (Log-13), rounded once to the
    type: within 1e-16 relative before rounding, so powers of two give their exponent
    exactly. float64: the same product is within 2 ulp; where Round of it is an exponent
    k with Pow(2, k) == x exactly (Round-11, Pow-15), k is returned, so powers of two are
    exact too. 0 -> -inf, negative -> nan, inf -> inf, nan -> nan."""
    if node.dtype is not _F64:
        wide = e.op("Mul", [e.op("Log", [_f64(e, x, node.dtype)]), e.scalar(_INV_LN2, _F64)])
        return e.cast(wide, _F64, node.dtype)
    estimate = e.op("Mul", [e.op("Log", [x]), e.scalar(_INV_LN2, _F64)])
    nearest = e.op("Round", [estimate])
    exact = e.op("Equal", [e.op("Pow", [e.scalar(2, _F64), nearest]), x])
    return e.op("Where", [exact, nearest, estimate])


# ----------------------------------------------------------------------------- MAX

def maximum(e: Emitter, node, a: str, b: str) -> str:
    """np.maximum. Floats: a where a is nan or a > b, else b (Where-16, IsNaN-20,
    Greater-13): nan from either side, and b when the two are equal, as numpy's float32
    and float64 maximum returns b for maximum(-0.0, 0.0) = 0.0 and maximum(0.0, -0.0) =
    -0.0; its float16 maximum returns a when they are equal (a >= b, GreaterOrEqual-16).
    Integers: Max-13 (exact), in int32/int64 where ORT has no kernel for the type."""
    dtype = node.dtype
    if dtype in FLOATS:
        greater = "GreaterOrEqual" if dtype is dtypes.float16 else "Greater"
        take_a = e.op("Or", [e.op("IsNaN", [a]), e.op(greater, [a, b])])
        return e.where(take_a, a, b, dtype, *(may_be_minus_zero(s) for s in node.src))
    return e.carried("Max", [a, b], dtype, VALUE_CARRIER.get(dtype, dtype))


# ----------------------------------------------------------------------------- C division

def _nonzero_divisor(e: Emitter, b: str, dtype: DType) -> tuple[str, str, str | None]:
    """(b with 0 and -1 replaced by 1, b == 0, b == -1 or None for unsigned): division by
    zero and INT_MIN / -1 trap in C, so ORT never sees them."""
    zero = e.compare("Equal", b, e.scalar(0, dtype), dtype)
    minus_one = None
    bad = zero
    if dtype.kind == "i":
        minus_one = e.compare("Equal", b, e.scalar(-1, dtype), dtype)
        bad = e.op("Or", [zero, minus_one])
    return e.where(bad, e.scalar(1, dtype), b, dtype), zero, minus_one


def _c_remainder(e: Emitter, a: str, b_safe: str, dtype: DType) -> str:
    """fmod(a, b) for b not 0 or -1: Mod-13 with fmod=0 (integer %, adjusted to the
    divisor's sign, exact; fmod=1 goes through double in ORT, inexact past 2^53), moved
    to the dividend's sign: r - b where r != 0 and the signs of a and b differ."""
    floor_mod = e.op("Mod", [a, b_safe], fmod=0)
    if dtype.kind == "u":
        return floor_mod
    zero = e.scalar(0, dtype)
    signs_differ = e.op("Xor", [e.compare("Less", a, zero, dtype), e.compare("Less", b_safe, zero, dtype)])
    nonzero = e.op("Not", [e.compare("Equal", floor_mod, zero, dtype)])
    moved = e.carried("Sub", [floor_mod, b_safe], dtype, VALUE_CARRIER.get(dtype, _I64))
    return e.where(e.op("And", [nonzero, signs_differ]), moved, floor_mod, dtype)


def cmod(e: Emitter, node, a: str, b: str) -> str:
    """np.fmod of integers (format v1's CMOD takes no floats): C's remainder, the
    dividend's sign; x % 0 is 0 (numpy's integer fmod); x % -1 is 0."""
    dtype = node.dtype
    b_safe, _, _ = _nonzero_divisor(e, b, dtype)
    return _c_remainder(e, a, b_safe, dtype)  # b == 0 or -1: Mod(a, 1) == 0


def cdiv(e: Emitter, node, a: str, b: str) -> str:
    """The evaluator's _cdiv: C division, truncating toward zero; x / 0 is 0; INT_MIN / -1
    wraps to INT_MIN. (a - fmod(a, b)) / b is an exact division, so Div-14's rounding
    never matters; b == -1 becomes a negation. Floats: Div-14 (IEEE)."""
    dtype = node.dtype
    if dtype in FLOATS:
        return in_float32(e, "Div", [a, b], dtype)
    if dtype is dtypes.uint64:
        return _uint64_divide(e, a, b)
    b_safe, zero, minus_one = _nonzero_divisor(e, b, dtype)
    exact = e.carried("Sub", [a, _c_remainder(e, a, b_safe, dtype)], dtype, VALUE_CARRIER.get(dtype, _I64))
    quotient = e.carried("Div", [exact, b_safe], dtype, VALUE_CARRIER.get(dtype, _I64))
    if minus_one is not None:
        negated = e.carried("Sub", [e.scalar(0, dtype), quotient], dtype, _I64)  # wraps: -INT_MIN == INT_MIN
        quotient = e.where(minus_one, negated, quotient, dtype)
    return e.where(zero, e.scalar(0, dtype), quotient, dtype)


def _uint64_divide(e: Emitter, a: str, b: str) -> str:
    """a // b for uint64 without a uint64 Div kernel (onnxruntime 1.20 has none): for
    b < 2^63, q = 2 * ((a >> 1) // b) in int64 is the quotient or one less (a correction
    by comparing the remainder with b); for b >= 2^63 the quotient is a >= b. b == 0 gives 0."""
    u64 = dtypes.uint64
    as_i64 = lambda x: e.op("Cast", [x], to=TensorProto.INT64)  # noqa: E731 - bits kept
    b_bits = as_i64(b)
    huge = e.op("Less", [b_bits, e.scalar(0, _I64)])                       # b >= 2^63
    zero = e.op("Equal", [b_bits, e.scalar(0, _I64)])
    divisor = e.op("Where", [e.op("Or", [huge, zero]), e.scalar(1, _I64), b_bits])
    half = as_i64(e.op("BitShift", [a, e.scalar(1, u64)], direction="RIGHT"))
    guess = e.op("Mul", [e.op("Div", [half, divisor]), e.scalar(2, _I64)])  # wraps to the uint64 bits
    remainder = e.op("Sub", [as_i64(a), e.op("Mul", [guess, b_bits])])
    one_more = e.op("Not", [e.op("Less", [e.ordered_int64(e.cast(remainder, _I64, u64)), e.ordered_int64(b)])])
    small_b = e.op("Add", [guess, e.op("Cast", [one_more], to=TensorProto.INT64)])
    big_b = e.op("Cast", [e.op("Not", [e.op("Less", [e.ordered_int64(a), e.ordered_int64(b)])])],
                 to=TensorProto.INT64)
    quotient = e.op("Where", [huge, big_b, small_b])
    return e.cast(e.op("Where", [zero, e.scalar(0, _I64), quotient]), _I64, u64)


# ----------------------------------------------------------------------------- POW

def power(e: Emitter, node, a: str, b: str) -> str:
    """Floats: Pow-15 (std::pow, as numpy's a ** b; float16 in float32). Integers: the
    evaluator's _int_pow, C-style: a^b by squaring in int64 (wrapping, so the low bits
    are the type's wrapped product whatever the order: Pow-15 goes through double in ORT,
    inexact past 2^53), and for b < 0: 1 for a == 1, +-1 for a == -1 by b's parity, else 0."""
    dtype = node.dtype
    if dtype in FLOATS:
        return in_float32(e, "Pow", [a, b], dtype)
    exponent = node.src[1]
    constant = exponent.arg if exponent.op == "CONST" else None
    base = e.cast(a, dtype, _I64)  # uint64: the bits
    result = _power_by_squaring(e, base, b, dtype, constant)
    if dtype.kind == "i" and (constant is None or constant < 0):
        result = _negative_exponent(e, a, b, dtype, result, constant)
    return e.op("Cast", [result], to=TO_ONNX[dtype])


def _power_by_squaring(e: Emitter, base: str, b: str, dtype: DType, constant) -> str:
    """base^b in int64 (b >= 0; b < 0 gives 1): one multiply per bit of b, the base
    squared between bits. A CONST exponent uses only its own bits."""
    one = e.scalar(1, _I64)
    if constant is not None:
        bits = bin(max(constant, 0))[:1:-1]  # lowest bit first
        if "1" not in bits:
            return e.op("Expand", [one, e.op("Shape", [base])])
        result = None
        for i, bit in enumerate(bits):
            if bit == "1":
                result = base if result is None else e.op("Mul", [result, base])
            if i < len(bits) - 1:
                base = e.op("Mul", [base, base])
        return result
    u64 = dtypes.uint64
    nonnegative = b if dtype.kind == "u" else e.where(
        e.compare("Less", b, e.scalar(0, dtype), dtype), e.scalar(0, dtype), b, dtype)
    exponent = e.op("Cast", [nonnegative], to=TensorProto.UINT64)
    result, count = one, dtype.itemsize * 8 - (dtype.kind == "i")
    for i in range(count):
        shifted = e.op("BitShift", [exponent, e.scalar(i, u64)], direction="RIGHT")
        bit = e.op("Cast", [e.op("BitwiseAnd", [shifted, e.scalar(1, u64)])], to=TensorProto.BOOL)
        result = e.op("Where", [bit, e.op("Mul", [result, base]), result])
        if i < count - 1:
            base = e.op("Mul", [base, base])
    return result


def _negative_exponent(e: Emitter, a: str, b: str, dtype: DType, result: str, constant) -> str:
    a64, b64 = e.cast(a, dtype, _I64), e.cast(b, dtype, _I64)
    one, zero = e.scalar(1, _I64), e.scalar(0, _I64)
    even = e.op("Equal", [e.op("Mod", [b64, e.scalar(2, _I64)], fmod=0), zero])
    minus_one_to_b = e.op("Where", [even, one, e.scalar(-1, _I64)])
    small = e.op("Where", [e.op("Equal", [a64, one]), one,
                           e.op("Where", [e.op("Equal", [a64, e.scalar(-1, _I64)]), minus_one_to_b, zero])])
    if constant is not None:
        return e.op("Add", [small, e.op("Mul", [result, zero])])  # the shape of a ** b
    return e.op("Where", [e.op("Less", [b64, zero]), small, result])


# ----------------------------------------------------------------------------- shifts

def shift_left(e: Emitter, node, a: str, b: str) -> str:
    """The evaluator's a << b (numpy): 0 when b < 0 or b >= the width; bools: a (C shifts
    a bool as an int and converts back: nonzero). BitShift-11 on the unsigned type of the
    same size (Cast between integer types keeps the bits), never by the width or more
    (undefined in C)."""
    dtype = node.dtype
    if dtype is dtypes.bool:
        return e.op("Identity", [a])
    inside = _shift_inside(e, b, dtype)
    amount = _unsigned(e, e.where(inside, b, e.scalar(0, dtype), dtype), dtype)
    shifted = e.op("Cast", [_bit_shift(e, _unsigned(e, a, dtype), amount, dtype, "LEFT")], to=TO_ONNX[dtype])
    return e.where(inside, shifted, e.scalar(0, dtype), dtype)


def shift_right(e: Emitter, node, a: str, b: str) -> str:
    """The evaluator's a >> b (numpy): unsigned, 0 when b is past the width; signed,
    arithmetic (the sign fills in), so a shift by b < 0 or >= the width gives -1 or 0,
    as a shift by width - 1 does: ~(~a >> b) for negative a. Bools: a and not b."""
    dtype = node.dtype
    if dtype is dtypes.bool:
        return e.op("And", [a, e.op("Not", [b])])
    inside = _shift_inside(e, b, dtype)
    bits = _unsigned(e, a, dtype)
    if dtype.kind == "u":
        amount = e.where(inside, b, e.scalar(0, dtype), dtype)
        return e.where(inside, _bit_shift(e, bits, amount, dtype, "RIGHT"), e.scalar(0, dtype), dtype)
    amount = _unsigned(e, e.where(inside, b, e.scalar(dtype.itemsize * 8 - 1, dtype), dtype), dtype)
    plain = _bit_shift(e, bits, amount, dtype, "RIGHT")
    filled = e.op("BitwiseNot", [_bit_shift(e, e.op("BitwiseNot", [bits]), amount, dtype, "RIGHT")])
    negative = e.compare("Less", a, e.scalar(0, dtype), dtype)
    unsigned = _UNSIGNED_OF[dtype.itemsize]
    return e.op("Cast", [e.where(negative, filled, plain, unsigned)], to=TO_ONNX[dtype])


def _unsigned(e: Emitter, x: str, dtype: DType) -> str:
    return x if dtype.kind == "u" else e.op("Cast", [x], to=TO_ONNX[_UNSIGNED_OF[dtype.itemsize]])


def _shift_inside(e: Emitter, b: str, dtype: DType) -> str:
    """0 <= b < the width of dtype."""
    inside = e.compare("Less", b, e.scalar(dtype.itemsize * 8, dtype), dtype)
    if dtype.kind == "u":
        return inside
    return e.op("And", [inside, e.op("Not", [e.compare("Less", b, e.scalar(0, dtype), dtype)])])


def _bit_shift(e: Emitter, bits: str, amount: str, dtype: DType, direction: str) -> str:
    unsigned = _UNSIGNED_OF[dtype.itemsize]
    return e.carried("BitShift", [bits, amount], unsigned, dtypes.uint32, direction=direction)


# ----------------------------------------------------------------------------- CAST

def cast(e: Emitter, node, x: str) -> str:
    """numpy's astype. Float to integer (Cast-19 only ever sees values that fit): what
    x86-64 gives, as numpy's array casts there (its SSE/AVX conversions): truncation
    toward zero where the value fits; else int32 and int64 get their minimum (the
    'integer indefinite' value, nan too); int8/int16/uint8/uint16 the low bits of the
    int32 conversion, uint32 of the int64 conversion (C's scalar code); uint64 takes
    [2^63, 2^64) as itself, 0 from 2^64 up (+inf too), the int64 conversion's bits below.
    (For float32/float64 -> uint32 of values outside (-2^31, 2^32) numpy itself gives
    different results by position in the array, its vector loop against its scalar
    tail: no exporter can match both; this is the scalar tail's.)
    Every other cast is Cast-19: integers wrap, nonzero and nan are true, float to float
    rounds to nearest."""
    src, dst = node.src[0].dtype, node.dtype
    if src in FLOATS and dst.is_int:
        return _float_to_int(e, x, src, dst)
    return e.cast(x, src, dst)


def _float_to_int(e: Emitter, x: str, src: DType, dst: DType) -> str:
    wide = _f64(e, x, src)
    bits = 64 if dst.itemsize == 8 or dst is dtypes.uint32 else 32
    converted = _signed_conversion(e, wide, bits)  # int32 or int64
    if dst.kind == "i" and dst.itemsize * 8 == bits:
        return converted
    if dst.itemsize * 8 < bits:  # the low bits
        return e.op("Cast", [converted], to=TO_ONNX[dst])
    top = float(2 ** (bits - 1))
    beyond = e.op("GreaterOrEqual", [wide, e.scalar(2 * top, _F64)])  # +inf too, nan not
    upper = e.op("And", [e.op("GreaterOrEqual", [wide, e.scalar(top, _F64)]), e.op("Not", [beyond])])
    # [2^(n-1), 2^n): x - 2^(n-1) is exact and fits; adding the type's minimum gives the bits
    shifted = e.op("Sub", [e.op("Where", [upper, wide, e.scalar(top, _F64)]), e.scalar(top, _F64)])
    carrier = TensorProto.INT64
    high = e.op("Add", [e.op("Cast", [shifted], to=carrier), e.scalar(-(1 << 63) if bits == 64 else 1 << 31, _I64)])
    low = e.op("Cast", [converted], to=carrier)
    value = e.op("Where", [upper, high, e.op("Where", [beyond, e.scalar(0, _I64), low])])
    return e.op("Cast", [value], to=TO_ONNX[dst])


def _signed_conversion(e: Emitter, wide: str, bits: int) -> str:
    """float64 -> int32/int64 as cvttsd2si: truncated where it fits, else the minimum."""
    limit = float(2 ** (bits - 1))
    fits = e.op("And", [e.op("GreaterOrEqual", [wide, e.scalar(-limit, _F64)]),
                        e.op("Less", [wide, e.scalar(limit, _F64)])])  # nan: false
    safe = e.op("Where", [fits, wide, e.scalar(0.0, _F64)])
    kind = dtypes.int64 if bits == 64 else dtypes.int32
    return e.op("Where", [fits, e.op("Cast", [safe], to=TO_ONNX[kind]), e.scalar(-(1 << (bits - 1)), kind)])


# ----------------------------------------------------------------------------- BITCAST

def bitcast(e: Emitter, node, x: str) -> str:
    """ndarray.view: the same bytes read as another type of the same size. Between
    integer types (and bool) Cast-19 keeps the bits; between a float and an integer the
    IEEE fields are computed exactly in float64/int64 (sign, including -0.0's; exponent;
    mantissa; subnormals, inf). A nan becomes the quiet nan of its type, sign clear: its
    payload cannot be read by arithmetic. (BitCast-26 would keep it, but onnxruntime
    1.32 has kernels for few of its types.)"""
    src, dst = node.src[0].dtype, node.dtype
    if src is dst:
        return e.op("Identity", [x])
    if src in FLOATS:
        return e.op("Cast", [_float_bits(e, x, src)], to=TO_ONNX[dst])
    if dst in FLOATS:
        return _bits_to_float(e, x, src, dst)
    return e.cast(x, src, dst)


def _pow2(e: Emitter, exponent: str) -> str:
    """2^exponent in float64 (an integer-valued float64): exact from 2^-1074 to 2^1023."""
    return e.op("Pow", [e.scalar(2, _F64), exponent])


def _float_bits(e: Emitter, x: str, dtype: DType) -> str:
    """The bits of x (a float of `dtype`) as an int64 holding the unsigned pattern."""
    exp_bits, man_bits = _FORMAT[dtype]
    bias, n = (1 << (exp_bits - 1)) - 1, dtype.itemsize * 8
    wide = _f64(e, x, dtype)
    zero = e.scalar(0.0, _F64)
    magnitude = e.op("Abs", [wide])
    nan, inf = e.op("IsNaN", [wide]), e.op("IsInf", [wide])
    negative = e.op("Or", [e.op("Less", [wide, zero]),  # -0.0: 1 / -0.0 is -inf
                           e.op("Less", [e.op("Reciprocal", [wide]), zero])])
    negative = e.op("And", [negative, e.op("Not", [nan])])
    ordinary = e.op("And", [e.op("Not", [e.op("Or", [nan, inf])]), e.op("Greater", [magnitude, zero])])
    a = e.op("Where", [ordinary, magnitude, e.scalar(1.0, _F64)])
    # floor(log2 a), corrected by one either way: Pow(2, k) is exact, Log is within an ulp
    guess = e.op("Floor", [e.op("Mul", [e.op("Log", [a]), e.scalar(_INV_LN2, _F64)])])
    one = e.scalar(1.0, _F64)
    guess = e.op("Sub", [guess, e.op("Cast", [e.op("Greater", [_pow2(e, guess), a])], to=TensorProto.DOUBLE)])
    guess = e.op("Add", [guess, e.op("Cast", [e.op("Not", [e.op("Greater", [_pow2(e, e.op("Add", [guess, one])), a])])],
                                     to=TensorProto.DOUBLE)])
    subnormal = e.op("Less", [guess, e.scalar(float(1 - bias), _F64)])
    exponent = e.op("Where", [subnormal, e.scalar(float(1 - bias), _F64), guess])
    # mantissa = a / 2^exponent * 2^man_bits (less the hidden bit): two exact scalings, as
    # 2^(man_bits - exponent) overflows for float64's subnormals
    half = e.op("Floor", [e.op("Div", [e.op("Sub", [e.scalar(float(man_bits), _F64), exponent]), e.scalar(2.0, _F64)])])
    rest = e.op("Sub", [e.op("Sub", [e.scalar(float(man_bits), _F64), exponent]), half])
    scaled = e.op("Mul", [e.op("Mul", [a, _pow2(e, half)]), _pow2(e, rest)])
    hidden = e.op("Where", [subnormal, zero, e.scalar(float(1 << man_bits), _F64)])
    mantissa = e.op("Cast", [e.op("Sub", [scaled, hidden])], to=TensorProto.INT64)
    biased = e.op("Cast", [e.op("Where", [subnormal, zero, e.op("Add", [exponent, e.scalar(float(bias), _F64)])])],
                  to=TensorProto.INT64)
    pattern = e.op("Add", [e.op("Mul", [biased, e.scalar(1 << man_bits, _I64)]), mantissa])
    pattern = e.op("Where", [ordinary, pattern, e.scalar(0, _I64)])
    all_ones = ((1 << exp_bits) - 1) << man_bits
    pattern = e.op("Where", [inf, e.scalar(all_ones, _I64), pattern])
    pattern = e.op("Where", [nan, e.scalar(all_ones | 1 << (man_bits - 1), _I64), pattern])
    sign = -(1 << 63) if n == 64 else 1 << (n - 1)
    return e.op("Add", [pattern, e.op("Where", [negative, e.scalar(sign, _I64), e.scalar(0, _I64)])])


def _bits_to_float(e: Emitter, x: str, src: DType, dtype: DType) -> str:
    """The float of `dtype` whose bits are x (an integer or bool type of the same size)."""
    exp_bits, man_bits = _FORMAT[dtype]
    bias, n = (1 << (exp_bits - 1)) - 1, dtype.itemsize * 8
    bits = e.op("Cast", [x], to=TensorProto.INT64 if n == 64 else TO_ONNX[_UNSIGNED_OF[dtype.itemsize]])
    bits = e.cast(bits, _UNSIGNED_OF[dtype.itemsize], _I64) if n < 64 else bits  # zero-extended
    negative = e.op("Not", [e.op("Less", [bits, e.scalar(1 << (n - 1), _I64)])]) if n < 64 else \
        e.op("Less", [bits, e.scalar(0, _I64)])
    magnitude = e.op("BitwiseAnd", [bits, e.scalar((1 << (n - 1)) - 1, _I64)])
    field = e.op("Div", [magnitude, e.scalar(1 << man_bits, _I64)])
    fraction = e.op("Cast", [e.op("BitwiseAnd", [magnitude, e.scalar((1 << man_bits) - 1, _I64)])], to=TensorProto.DOUBLE)
    exponent = e.op("Cast", [field], to=TensorProto.DOUBLE)
    is_subnormal = e.op("Equal", [field, e.scalar(0, _I64)])
    scale = _pow2(e, e.op("Sub", [e.op("Max", [exponent, e.scalar(1.0, _F64)]), e.scalar(float(bias + man_bits), _F64)]))
    hidden = e.op("Where", [is_subnormal, e.scalar(0.0, _F64), e.scalar(float(1 << man_bits), _F64)])
    value = e.op("Mul", [e.op("Add", [fraction, hidden]), scale])
    special = e.op("Equal", [field, e.scalar((1 << exp_bits) - 1, _I64)])
    fraction_zero = e.op("Equal", [fraction, e.scalar(0.0, _F64)])
    value = e.op("Where", [special, e.op("Where", [fraction_zero, e.scalar(math.inf, _F64), e.scalar(math.nan, _F64)]),
                           value])
    return e.cast(e.op("Mul", [value, e.sign_factor(negative, _F64)]), _F64, dtype)
