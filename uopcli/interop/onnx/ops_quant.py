"""ONNX's quantized ops as UOp graphs: QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul and QLinearConv (DynamicQuantizeLinear is imported through its
function body, which uses QuantizeLinear: functions.py). Same contract as ops_tensor.py;
import_table.py gives versions and attributes. The spec of each:
https://onnx.ai/onnx/operators/onnx__<Op>.html.

Element types: int8, uint8, int16 and uint16 quantized values, float16/float32 scales
(float64 too, outside the spec, as onnx.reference computes them); float8, int4/uint4,
float4 and int2/uint2 are types the format has not, refused by the importer's
element-type refusal (or here, for an output_dtype naming one).

Values follow onnxruntime's CPU kernels bit for bit:
- QuantizeLinear: x / scale in float32 (a float16 scale too) before version 23, in the
  scale's type (or `precision`'s) from 23; rounded half to even, the zero point added,
  saturated to the output type's range; nan becomes the range's minimum (onnxruntime's
  conversion gives INT_MIN, saturated).
- DequantizeLinear: (x - zero_point) exact in int32, times the scale in float32 (float64
  for a float64 scale), rounded once to the output type (the scale's, or output_dtype's).
- The integer products accumulate exactly in int32 (wrapping, as the spec allows);
  QLinear* requantize float32(accumulator) · float32(scale_a · scale_b / scale_y) as
  QuantizeLinear rounds and saturates.

Gradients: DequantizeLinear is differentiable with respect to its scale (its x and zero
point are integers). Every other op here outputs integers: the gradient stops there, as
at any CAST to an integer type; there is no straight-through estimator, so a loss after a
QuantizeLinear -> DequantizeLinear pair has a gradient with respect to the
DequantizeLinear's scale only, none through the quantized x.
"""

from __future__ import annotations

import math

from uopcli import UOp, dtypes

from .dtypes import FROM_ONNX, UNSUPPORTED_NAMES
from .ops_nn import conv
from .ops_tensor import axis_of

# the quantized types the format has, and their saturation ranges (QuantizeLinear-21)
RANGES = {dtypes.int8: (-128, 127), dtypes.uint8: (0, 255), dtypes.int16: (-32768, 32767),
          dtypes.uint16: (0, 65535)}
# beyond every range plus every zero point: a quotient is clamped to it before it is
# rounded and converted to int32, so the conversion never overflows
_FAR = float(2 ** 17)


# ----------------------------------------------------------------------------- shared


def saturate(q: UOp, zero_point: UOp | None, target) -> UOp:
    """round_half_to_even(q) + zero_point, saturated to `target`'s range (QuantizeLinear's
    `saturate((x / y_scale) + y_zero_point)`); nan gives the range's minimum, as
    onnxruntime. q is float32 or float64, zero_point any integer type broadcast to q."""
    lo, hi = RANGES[target]
    q = q.ne(q).where(-_FAR, q).maximum(-_FAR).minimum(_FAR)
    r = q.round().cast(dtypes.int32)
    if zero_point is not None:
        r = r + zero_point.cast(dtypes.int32)
    return r.maximum(lo).minimum(hi).cast(target)


def _float(ctx, node: UOp, what: str) -> UOp:
    """A scale: float16, float32 or float64 (an integer scale is refused)."""
    if not node.dtype.is_float:
        ctx.refuse(f"{what} of {node.dtype.name} is not supported (a float scale is)")
    return node


def _quantized(ctx, node: UOp, what: str) -> UOp:
    if node.dtype not in RANGES and not (what == "x" and node.dtype is dtypes.int32):
        ctx.refuse(f"{what} of {node.dtype.name} is not a quantized type (int8, uint8, int16, uint16)")
    return node


def _spread(ctx, param: UOp, shape: tuple, axis: int, block: int, what: str) -> UOp:
    """A scale or zero point broadcastable to x's `shape` (QuantizeLinear-21's three
    granularities): a scalar (or one element) per tensor; 1-D of shape[axis] per axis;
    blocked (block > 0): x's shape with ceil(shape[axis] / block) along axis, each value
    repeated `block` times, the last block cut at the axis' end."""
    if block:
        if block < 0:
            ctx.refuse(f"block_size={block} is not positive")
        size = shape[axis]
        want = tuple(math.ceil(size / block) if a == axis else s for a, s in enumerate(shape))
        if tuple(param.shape) != want:
            ctx.refuse(f"block_size={block} does not fit: {what} {list(param.shape)} must be {list(want)} "
                       f"for x {list(shape)} along axis {axis}")
        wide = param.reshape(*want[:axis + 1], 1, *want[axis + 1:])
        wide = wide.expand(*want[:axis + 1], block, *want[axis + 1:]).reshape(
            *want[:axis], want[axis] * block, *want[axis + 1:])
        if want[axis] * block != size:
            wide = wide.shrink(tuple((0, size) if a == axis else None for a in range(len(shape))))
        return wide
    if param.size == 1 and len(param.shape) <= 1:
        return param.reshape(())
    if len(param.shape) != 1 or param.shape[0] != shape[axis]:
        ctx.refuse(f"{what} {list(param.shape)} is neither a scalar nor 1-D of x's axis {axis} "
                   f"({shape[axis]} for x {list(shape)})")
    return param.reshape(tuple(shape[axis] if a == axis else 1 for a in range(len(shape))))


def _granularity(ctx, x: UOp) -> tuple[int, int]:
    """(axis, block_size) of a Q/DQ node; the axis only where a scale is not a scalar."""
    rank = len(x.shape)
    block = int(ctx.attr("block_size", 0) or 0)
    scale = ctx.x(1)
    if scale.size == 1 and len(scale.shape) <= 1 and not block:
        return 0, 0
    return axis_of(ctx, int(ctx.attr("axis")), rank), block


def _dtype_code(ctx, code: int, what: str):
    """A TensorProto element-type code of an attribute as a dtype, refused in one line."""
    if code in FROM_ONNX:
        return FROM_ONNX[code]
    name = UNSUPPORTED_NAMES.get(code, code)
    ctx.refuse(f"{what}={code}: element type {name} is not supported")


# ----------------------------------------------------------------------------- Q and DQ


def dequantize_linear(ctx):
    """DequantizeLinear-10..25 (and 28, which adds float6 types only): y = (x - x_zero_point)
    · x_scale per tensor, per axis (13+) or blocked (21+); y of output_dtype (23+) or the
    scale's type."""
    x = _quantized(ctx, ctx.x(0), "x")
    scale = _float(ctx, ctx.x(1), "x_scale")
    out = _dtype_code(ctx, ctx.attr("output_dtype"), "output_dtype") if ctx.attr("output_dtype") else scale.dtype
    if not out.is_float:
        ctx.refuse(f"output_dtype {out.name} is not a float type")
    axis, block = _granularity(ctx, x) if len(x.shape) else (0, 0)
    shifted = x.cast(dtypes.int32)
    if ctx.present(2):
        zero_point = ctx.x(2)
        if zero_point.dtype is not x.dtype:
            ctx.refuse(f"x_zero_point of {zero_point.dtype.name} differs from x's {x.dtype.name}")
        shifted = shifted - _spread(ctx, zero_point, x.shape, axis, block, "x_zero_point").cast(dtypes.int32)
    wide = dtypes.float64 if dtypes.float64 in (scale.dtype, out) else dtypes.float32
    y = shifted.cast(wide) * _spread(ctx, scale, x.shape, axis, block, "x_scale").cast(wide)
    return y.cast(out)


def quantize_linear(ctx):
    """QuantizeLinear-10..25 (and 28, float6 types only): y = saturate(round_half_even(x /
    y_scale) + y_zero_point) in y_zero_point's type, else output_dtype's (21+), else uint8;
    per tensor, per axis (13+) or blocked (21+). The division runs in float32 before 23
    (onnxruntime's float16 kernels), in `precision`'s type or the scale's from 23."""
    x, scale = ctx.x(0), _float(ctx, ctx.x(1), "y_scale")
    if not (x.dtype.is_float or x.dtype is dtypes.int32):
        ctx.refuse(f"x of {x.dtype.name} is not float or int32")
    target = _quantize_target(ctx)
    axis, block = _granularity(ctx, x) if len(x.shape) else (0, 0)
    wide = _division_type(ctx, scale)
    q = x.cast(wide) / _spread(ctx, scale, x.shape, axis, block, "y_scale").cast(wide)
    if wide is dtypes.float16:
        q = q.cast(dtypes.float32)  # exact: the rounding and clamping below in float32
    zero_point = _spread(ctx, ctx.x(2), x.shape, axis, block, "y_zero_point") if ctx.present(2) else None
    return saturate(q, zero_point, target)


def _quantize_target(ctx):
    """QuantizeLinear's output type: the zero point's, or output_dtype's (21+), or uint8."""
    code = ctx.attr("output_dtype")
    given = _dtype_code(ctx, code, "output_dtype") if code else None
    if ctx.present(2):
        zero = ctx.x(2).dtype
        if given is not None and given is not zero:
            ctx.refuse(f"output_dtype {given.name} differs from y_zero_point's {zero.name}")
        given = zero
    target = given or dtypes.uint8
    if target not in RANGES:
        ctx.refuse(f"the output type {target.name} is not a quantized type (int8, uint8, int16, uint16)")
    return target


def _division_type(ctx, scale: UOp):
    """The float type x / y_scale is computed in: `precision` (23+) or the scale's type from
    23; float32 (or float64) before, as onnxruntime computes a float16 QuantizeLinear-21."""
    if ctx.since < 23:
        return dtypes.float64 if scale.dtype is dtypes.float64 else dtypes.float32
    code = ctx.attr("precision")
    wide = _dtype_code(ctx, code, "precision") if code else scale.dtype
    if not wide.is_float:
        ctx.refuse(f"precision {wide.name} is not a float type")
    return wide


# ----------------------------------------------------------------------------- integer products


def _centred(ctx, i: int, zero_i: int, what: str, per_row: bool = False, per_channel: bool = False) -> UOp:
    """Input i in int32 less its zero point (input zero_i, absent: 0). A 1-D zero point of
    a matrix operand is per row (A: [M] as [M, 1]) or per column (B: [N], broadcast); of a
    conv's weight (`per_channel`), per output channel."""
    value = ctx.x(i)
    if value.dtype not in (dtypes.int8, dtypes.uint8):
        ctx.refuse(f"{what} of {value.dtype.name} is not int8 or uint8")
    wide = value.cast(dtypes.int32)
    if not ctx.present(zero_i):
        return wide
    zero = ctx.x(zero_i)
    if zero.dtype is not value.dtype:
        ctx.refuse(f"{what}'s zero point of {zero.dtype.name} differs from {what}'s {value.dtype.name}")
    name = f"{what}'s zero point"
    fitted = _per_channel(ctx, zero, value, name) if per_channel else _matrix_param(ctx, zero, value, per_row, name)
    return wide - fitted.cast(dtypes.int32)


def _matrix_param(ctx, param: UOp, value: UOp, per_row: bool, what: str) -> UOp:
    """A matmul operand's scale or zero point broadcastable to it: a scalar, per row of A
    ([M] or [..., M, 1]), per column of B ([N] or [..., 1, N])."""
    if param.size == 1:
        return param.reshape(())
    if per_row and len(param.shape) == 1 and len(value.shape) >= 2 and param.shape[0] == value.shape[-2]:
        return param.reshape(param.shape[0], 1)
    if not per_row and len(param.shape) == 1 and param.shape[0] == value.shape[-1]:
        return param
    if len(param.shape) == len(value.shape) and all(p in (1, v) for p, v in zip(param.shape, value.shape)):
        return param
    ctx.refuse(f"{what} {list(param.shape)} does not fit {list(value.shape)}")


def _product(ctx, a: UOp, b: UOp) -> UOp:
    if not a.shape or not b.shape or a.shape[-1] != (b.shape[0] if len(b.shape) == 1 else b.shape[-2]):
        ctx.refuse(f"inner sizes differ: {list(a.shape)} @ {list(b.shape)}")
    return a.matmul(b)


def matmul_integer(ctx):
    """MatMulInteger-10: (A - a_zero_point) @ (B - b_zero_point), exact in int32."""
    return _product(ctx, _centred(ctx, 0, 2, "A", per_row=True), _centred(ctx, 1, 3, "B"))


def _conv_centred(ctx, x_i: int, x_zero: int, w_i: int, w_zero: int) -> UOp:
    """Conv of (x - x_zero_point) with (w - w_zero_point) in int32 (ops_nn.conv's windows;
    the padding is the zero point, 0 once subtracted); w's zero point per output channel."""
    x = _centred(ctx, x_i, x_zero, "x")
    if ctx.present(x_zero) and ctx.x(x_zero).size != 1:
        ctx.refuse(f"x's zero point {list(ctx.x(x_zero).shape)} is not a scalar")
    return ctx.call(conv, x, _centred(ctx, w_i, w_zero, "w", per_channel=True))


def _per_channel(ctx, param: UOp, w: UOp, what: str) -> UOp:
    """A scalar, or 1-D of w's output channels M, shaped to broadcast over w [M, C, *k]."""
    if param.size == 1:
        return param.reshape(())
    if len(param.shape) != 1 or param.shape[0] != w.shape[0]:
        ctx.refuse(f"{what} {list(param.shape)} is neither a scalar nor 1-D of the {w.shape[0]} output channels")
    return param.reshape(w.shape[0], *(1,) * (len(w.shape) - 1))


def conv_integer(ctx):
    """ConvInteger-10: Conv of (x - x_zero_point) with (w - w_zero_point), exact in int32."""
    return _conv_centred(ctx, 0, 2, 1, 3)


def _requantized(ctx, acc: UOp, multiplier: UOp, y_zero: int) -> UOp:
    """float32(acc) · multiplier, rounded and saturated to y_zero_point's type."""
    zero = ctx.x(y_zero)
    if zero.dtype not in (dtypes.int8, dtypes.uint8):
        ctx.refuse(f"y_zero_point of {zero.dtype.name} is not int8 or uint8")
    if zero.size != 1:
        ctx.refuse(f"y_zero_point {list(zero.shape)} is not a scalar")
    return saturate(acc.cast(multiplier.dtype) * multiplier, zero.reshape(()), zero.dtype)


def _scales(ctx, *indices: int) -> list[UOp]:
    """The scales in float32 (float64 where one is float64), their float16 cast up."""
    scales = [_float(ctx, ctx.x(i), "a scale") for i in indices]
    wide = dtypes.float64 if any(s.dtype is dtypes.float64 for s in scales) else dtypes.float32
    return [s.cast(wide) for s in scales]


def qlinear_matmul(ctx):
    """QLinearMatMul-10/21: (a - a_zero_point) @ (b - b_zero_point) exact in int32, then
    requantized: saturate(round_half_even(acc · (a_scale · b_scale / y_scale)) + y_zero_point).
    a's scale and zero point per tensor or per row, b's per tensor or per column."""
    acc = _product(ctx, _centred(ctx, 0, 2, "a", per_row=True), _centred(ctx, 3, 5, "b"))
    a_scale, b_scale, y_scale = _scales(ctx, 1, 4, 6)
    if y_scale.size != 1:
        ctx.refuse(f"y_scale {list(y_scale.shape)} is not a scalar")
    multiplier = _matrix_param(ctx, a_scale, ctx.x(0), True, "a_scale") * \
        _matrix_param(ctx, b_scale, ctx.x(3), False, "b_scale") / y_scale.reshape(())
    return _requantized(ctx, acc, multiplier, 7)


def qlinear_conv(ctx):
    """QLinearConv-10: Conv of (x - x_zero_point) with (w - w_zero_point) exact in int32,
    plus the int32 bias B, requantized as QLinearMatMul with x_scale · w_scale / y_scale
    (w's scale and zero point per tensor or per output channel)."""
    acc = _conv_centred(ctx, 0, 2, 3, 5)
    channels = acc.shape[1]
    if ctx.present(8):
        bias = ctx.x(8)
        if bias.dtype is not dtypes.int32 or bias.shape != (channels,):
            ctx.refuse(f"B of {bias.dtype.name} {list(bias.shape)} is not int32 [{channels}]")
        acc = acc + bias.reshape(1, channels, *(1,) * (len(acc.shape) - 2))
    x_scale, w_scale, y_scale = _scales(ctx, 1, 4, 6)
    if x_scale.size != 1 or y_scale.size != 1:
        ctx.refuse(f"x_scale {list(x_scale.shape)} and y_scale {list(y_scale.shape)} must be scalars")
    w_scale = _per_channel(ctx, w_scale, ctx.x(3), "w_scale")
    multiplier = x_scale.reshape(()) * w_scale / y_scale.reshape(())
    multiplier = multiplier.reshape(1, channels, *(1,) * (len(acc.shape) - 2)) if multiplier.shape else multiplier
    return _requantized(ctx, acc, multiplier, 7)
