"""The export table: one row per format v1 op, the ONNX nodes that compute it exactly.

Each row is `emit(e, node, *sources) -> value name` and the ONNX operator spec it relies
on (https://onnx.ai/onnx/operators/, operator-version, as of opset 20), with why the
result equals uopcli's numpy evaluator (uopcli/backends/numpy/table.py, IMPL), the truth. Ops ONNX
has no exact operator for are written in exact.py. Rows marked STRUCTURAL are handled by
the exporter's walk itself (inputs, aliases, calls, tuples): they make no ONNX node.

Types: sources of an elementwise op share one dtype (format v1 has no implicit
promotion); shape () broadcasts, as ONNX's multidirectional broadcasting does. Where
onnxruntime has no CPU kernel for a type, Emitter.carried runs the op in a carrier type
(emit.py). float16 arithmetic runs in float32 and is rounded once, as numpy computes it.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy

from uopcli.core.ops import ALL_OPS, DType, Ops, dtypes

from . import exact
from .dtypes import TO_ONNX
from .emit import FLOATS, VALUE_CARRIER, Emitter

STRUCTURAL = None


class Row(NamedTuple):
    emit: Callable | None   # None: STRUCTURAL
    spec: str               # the ONNX operators relied on, and why the values are the same


def _arith(op_type: str) -> Callable:
    """Add/Sub/Mul: floats IEEE (float16 in float32, rounded once, as numpy); integers
    wrap, in int64 where ORT has no kernel (the low bits of a wrapped int64 result are the
    type's wrapped result)."""
    def emit(e: Emitter, node, a: str, b: str) -> str:
        return _arith_op(e, op_type, node.dtype, a, b)
    return emit


def _arith_op(e: Emitter, op_type: str, dtype: DType, a: str, b: str) -> str:
    if dtype is dtypes.float16:
        return e.cast(e.op(op_type, [e.cast(a, dtype, dtypes.float32), e.cast(b, dtype, dtypes.float32)]),
                      dtypes.float32, dtype)
    return e.carried(op_type, [a, b], dtype, dtypes.int64)


def _float_unary(op_type: str) -> Callable:
    def emit(e: Emitter, node, x: str) -> str:
        return exact.in_float32(e, op_type, [x], node.dtype)
    return emit


def _neg(e: Emitter, node, x: str) -> str:
    if e.native("Neg", node.dtype):
        return e.op("Neg", [x])
    return e.carried("Sub", [e.scalar(0, node.dtype), x], node.dtype, dtypes.int64)  # unsigned: wraps


def _fdiv(e: Emitter, node, a: str, b: str) -> str:
    return exact.cdiv(e, node, a, b)  # floats: Div; integers: C division, as the evaluator's _cdiv


def _logical(bool_op: str, bitwise_op: str) -> Callable:
    def emit(e: Emitter, node, a: str, b: str) -> str:
        return e.op(bool_op if node.dtype is dtypes.bool else bitwise_op, [a, b])
    return emit


def _compare(op_type: str, negate: bool = False) -> Callable:
    def emit(e: Emitter, node, a: str, b: str) -> str:
        result = e.compare(op_type, a, b, node.src[0].dtype)
        return e.op("Not", [result]) if negate else result
    return emit


def _where(e: Emitter, node, cond: str, a: str, b: str) -> str:
    return e.where(cond, a, b, node.dtype, *(exact.may_be_minus_zero(s) for s in node.src[1:]))


def _mulacc(e: Emitter, node, a: str, b: str, c: str) -> str:
    return _arith_op(e, "Add", node.dtype, _arith_op(e, "Mul", node.dtype, a, b), c)


def _const(e: Emitter, node) -> str:
    return e.scalar(node.arg, node.dtype)


def _buffer(e: Emitter, node) -> str:
    return e.initializer("buffer", node.dtype, node.shape, node.arg)


# ----------------------------------------------------------------------------- REDUCE

_REDUCERS = {"ADD": "ReduceSum", "MUL": "ReduceProd", "MAX": "ReduceMax"}


def _reduce(e: Emitter, node, x: str) -> str:
    """np.sum / np.prod / np.max with keepdims. ReduceSum-13, ReduceProd-18, ReduceMax-18
    (axes as an input, keepdims=1). No axes: the value itself. An empty reduced axis: the
    identity (0, 1, -inf or the type's minimum), as numpy's reductions over nothing give.
    float16 sums and products in float32 (the evaluator's sums accumulate in float32);
    integer sums and products in int64 where ORT has no kernel (they wrap alike). MAX of
    floats is nan where a nan is reduced, as np.max, whatever ReduceMax does with nans."""
    reduce_op, axes = node.arg
    dtype, shape = node.dtype, node.src[0].shape
    if not axes:
        return e.op("Identity", [x])
    if any(shape[a] == 0 for a in axes):
        return e.filled(node.shape, _reduce_identity(reduce_op, dtype), dtype)
    onnx_op, axes_name = _REDUCERS[reduce_op], e.ints(axes)
    if reduce_op != "MAX":
        if dtype.is_int:
            return _integer_tree(e, node, x)
        return exact.in_float32(e, onnx_op, [x], dtype, extra=[axes_name], keepdims=1)
    if dtype is dtypes.uint64:  # max of the order-keeping int64 images, mapped back
        largest = e.op(onnx_op, [e.ordered_int64(x), axes_name], keepdims=1)
        return e.op("BitwiseXor", [e.cast(largest, dtypes.int64, dtype), e.scalar(1 << 63, dtype)])
    largest = e.carried(onnx_op, [x], dtype, VALUE_CARRIER.get(dtype), extra=[axes_name], keepdims=1)
    if dtype not in FLOATS:
        return largest
    flags = e.op("Cast", [e.op("IsNaN", [x])], to=TO_ONNX[dtypes.uint8])  # ReduceMax takes bool from opset 20
    any_nan = e.op("Cast", [e.op("ReduceMax", [flags, axes_name], keepdims=1)], to=TO_ONNX[dtypes.bool])
    return e.op("Where", [any_nan, e.scalar(float("nan"), dtype), largest])


def _integer_tree(e: Emitter, node, x: str) -> str:
    """An integer sum or product that wraps as numpy's: ORT's ReduceSum and ReduceProd
    go through double for integers (inexact past 2^53, saturating instead of wrapping),
    so the reduced elements are moved to one last axis (Transpose-13, Reshape-19) and
    halved log2(n) times (Split-18, Add-14 / Mul-14, Pad-19 with the identity for an odd
    count): exact, in int64 for the types ORT has no Add/Mul kernel for."""
    reduce_op, axes = node.arg
    dtype, shape = node.dtype, node.src[0].shape
    carrier = dtype if e.native("Add", dtype) else dtypes.int64
    kept = [i for i in range(len(shape)) if i not in axes]
    count = math.prod(shape[a] for a in axes)
    x = e.cast(x, dtype, carrier)
    if kept + list(axes) != list(range(len(shape))):
        x = e.op("Transpose", [x], perm=kept + list(axes))
    x = e.op("Reshape", [x, e.ints([*(shape[i] for i in kept), count])])
    binary, identity = ("Add", 0) if reduce_op == "ADD" else ("Mul", 1)
    rank = len(kept) + 1
    while count > 1:
        if count % 2:
            x = e.op("Pad", [x, e.ints([0] * (2 * rank - 1) + [1]), e.scalar(identity, carrier)])
            count += 1
        first, second = e.op("Split", [x], outputs=2, axis=-1, num_outputs=2)
        x = e.op(binary, [first, second])
        count //= 2
    return e.cast(e.op("Reshape", [x, e.ints(node.shape)]), carrier, dtype)


def _reduce_identity(reduce_op: str, dtype: DType):
    if reduce_op == "ADD":
        return 0
    if reduce_op == "MUL":
        return 1
    return float("-inf") if dtype in FLOATS else int(numpy.iinfo(dtype.np).min)


# ----------------------------------------------------------------------------- movement

def _reshape(e: Emitter, node, x: str) -> str:
    """Reshape-19; allowzero=1 where the shape has a 0 (else 0 would mean 'keep')."""
    if 0 in node.arg:
        return e.op("Reshape", [x, e.ints(node.arg)], allowzero=1)
    return e.op("Reshape", [x, e.ints(node.arg)])


def _expand(e: Emitter, node, x: str) -> str:
    return e.op("Expand", [x, e.ints(node.arg)])


def _permute(e: Emitter, node, x: str) -> str:
    return e.op("Transpose", [x], perm=list(node.arg))


def _pad(e: Emitter, node, x: str) -> str:
    """Pad-19, mode constant, value 0 (False for bool); int16/uint16 in int32."""
    pads = e.ints([before for before, _ in node.arg] + [after for _, after in node.arg])
    return e.carried("Pad", [x], node.dtype, VALUE_CARRIER.get(node.dtype), extra=[pads])


def _shrink(e: Emitter, node, x: str) -> str:
    """Slice-13 over the axes that shrink."""
    axes = [i for i, ((start, end), n) in enumerate(zip(node.arg, node.src[0].shape)) if (start, end) != (0, n)]
    if not axes:
        return e.op("Identity", [x])
    starts, ends = [node.arg[i][0] for i in axes], [node.arg[i][1] for i in axes]
    return e.op("Slice", [x, e.ints(starts), e.ints(ends), e.ints(axes)])


def _flip(e: Emitter, node, x: str) -> str:
    """Slice-13 with step -1 from the last element past the first (end INT64_MIN)."""
    axes = [i for i, flipped in enumerate(node.arg) if flipped]
    if not axes:
        return e.op("Identity", [x])
    n = len(axes)
    return e.op("Slice", [x, e.ints([-1] * n), e.ints([-(1 << 63)] * n), e.ints(axes), e.ints([-1] * n)])


# ----------------------------------------------------------------------------- the table

ROWS: dict[str, Row] = {
    Ops.PARAM: Row(STRUCTURAL, "a graph input (name, dtype, shape); a body's slot is its call's arg i"),
    Ops.CONST: Row(_const, "a shape-() initializer (onnx.proto TensorProto raw_data: the value's bytes, -0.0 "
                           "and nan kept)"),
    Ops.BUFFER: Row(_buffer, "an initializer holding the BUFFER's own little-endian bytes (onnx.proto TensorProto "
                             "raw_data)"),
    Ops.NOOP: Row(STRUCTURAL, "no value: a TUPLE's NOOP element is no ONNX output"),
    Ops.NEG: Row(_neg, "Neg-13 (-0.0 and nan kept); unsigned: Sub-14 from 0 in int64, wrapping as numpy's -x"),
    Ops.RECIPROCAL: Row(_float_unary("Reciprocal"), "Reciprocal-13: 1/x, IEEE (1/-0.0 = -inf)"),
    Ops.SQRT: Row(_float_unary("Sqrt"), "Sqrt-13: correctly rounded, sqrt(-0.0) = -0.0, negative -> nan"),
    Ops.EXP2: Row(exact.exp2, "Pow-15 of 2 (exact.exp2)"),
    Ops.LOG2: Row(exact.log2, "Log-13 in float64 / ln 2; float64: Round-11 + Pow-15 check (exact.log2)"),
    Ops.SIN: Row(_float_unary("Sin"), "Sin-7 (libm-grade: within an ulp of numpy's sin)"),
    Ops.TRUNC: Row(exact.trunc, "Where-16(x < 0, Ceil-13, Floor-13) (exact.trunc)"),
    Ops.CAST: Row(exact.cast, "Cast-19; float to int guarded as x86-64 converts (exact.cast)"),
    Ops.BITCAST: Row(exact.bitcast, "Cast-19 between integers; exact IEEE field arithmetic with floats (exact.bitcast)"),
    Ops.ADD: Row(_arith("Add"), "Add-14: IEEE; integers wrap (int64 carrier where ORT lacks a kernel)"),
    Ops.SUB: Row(_arith("Sub"), "Sub-14: as Add"),
    Ops.MUL: Row(_arith("Mul"), "Mul-14: as Add"),
    Ops.FDIV: Row(_fdiv, "Div-14 for floats; integers as CDIV (the evaluator's _cdiv)"),
    Ops.MAX: Row(exact.maximum, "Where-16/IsNaN-20/Greater-13 for floats (nan, signed zeros), Max-13 for ints"),
    Ops.POW: Row(exact.power, "Pow-15 for floats; integers by squaring in int64 (exact.power)"),
    Ops.CDIV: Row(exact.cdiv, "Mod-13 (fmod=0) + Div-14 exact division, guarded (exact.cdiv)"),
    Ops.CMOD: Row(exact.cmod, "Mod-13: fmod=0 moved to the dividend's sign; floats fmod=1 (exact.cmod)"),
    Ops.AND: Row(_logical("And", "BitwiseAnd"), "And-7 (bool), BitwiseAnd-18 (integers)"),
    Ops.OR: Row(_logical("Or", "BitwiseOr"), "Or-7 (bool), BitwiseOr-18 (integers)"),
    Ops.XOR: Row(_logical("Xor", "BitwiseXor"), "Xor-7 (bool), BitwiseXor-18 (integers)"),
    Ops.SHL: Row(exact.shift_left, "BitShift-11 LEFT on the unsigned type, range-guarded (exact.shift_left)"),
    Ops.SHR: Row(exact.shift_right, "BitShift-11 RIGHT, arithmetic for signed (exact.shift_right)"),
    Ops.CMPLT: Row(_compare("Less"), "Less-13 (nan -> false); uint64 by order-keeping int64 images"),
    Ops.CMPNE: Row(_compare("Equal", negate=True), "Not-1 of Equal-19 (nan != nan is true)"),
    Ops.CMPEQ: Row(_compare("Equal"), "Equal-19 (-0.0 == 0.0, nan == nan false)"),
    Ops.WHERE: Row(_where, "Where-16 (bits kept; a -0.0 ORT's Where loses restored: Emitter.where); "
                   "bool/int16/uint16/uint32/uint64 through a carrier"),
    Ops.MULACC: Row(_mulacc, "Mul-14 then Add-14, two roundings as the evaluator's multiply then add"),
    Ops.REDUCE: Row(_reduce, "ReduceSum-13, ReduceProd-18, ReduceMax-18, keepdims=1; integer sums and products "
                    "by a tree of Add-14 / Mul-14 (see _reduce); float sums of broadcast products: Einsum-12 "
                    "(contract.py)"),
    Ops.RESHAPE: Row(_reshape, "Reshape-19 (allowzero=1 for 0 sizes)"),
    Ops.EXPAND: Row(_expand, "Expand-13 (only size-1 axes grow: broadcasting is exact)"),
    Ops.PERMUTE: Row(_permute, "Transpose-13 (perm = the axis order)"),
    Ops.PAD: Row(_pad, "Pad-19 constant mode, pads [befores..., afters...], value 0"),
    Ops.SHRINK: Row(_shrink, "Slice-13 (starts, ends, axes)"),
    Ops.FLIP: Row(_flip, "Slice-13 with steps -1"),
    Ops.CONTIGUOUS: Row(STRUCTURAL, "the source's value (no node)"),
    Ops.CONTIGUOUS_BACKWARD: Row(STRUCTURAL, "the source's value (no node)"),
    Ops.DETACH: Row(STRUCTURAL, "the source's value (no node)"),
    Ops.COPY: Row(STRUCTURAL, "the source's value (no node: one device)"),
    Ops.TUPLE: Row(STRUCTURAL, "as a graph output: one ONNX output per element, named name[i]"),
    Ops.FUNCTION: Row(STRUCTURAL, "inlined per call site: its body's nodes with slot i bound to arg i"),
    Ops.CALL: Row(STRUCTURAL, "inlined as FUNCTION; its backward body is not part of the forward value"),
    Ops.GETTUPLE: Row(STRUCTURAL, "body element i, in its call's inlined context"),
    Ops.STORE: Row(STRUCTURAL, "the stored value (source 1)"),
    Ops.AFTER: Row(STRUCTURAL, "the value its STORE wrote (the evaluator's SAME_AS_SOURCE_1)"),
}

assert set(ROWS) == set(ALL_OPS), "every format v1 op has a row"
assert all(dtype in TO_ONNX for dtype in vars(dtypes).values() if isinstance(dtype, DType) and not dtype.is_void)
