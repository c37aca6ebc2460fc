"""The ONNX ops uopgrad's own exporter writes beyond the common exports' set (exact.py's
integer and IEEE arithmetic, export_table.py's rows, contract.py's Einsum), so that a
graph written as ONNX reads back: `.uop -> .onnx -> .uop` gives the same values. Each
follows the ONNX spec version its table row names; what the spec leaves open (a shift by
the width or more, Mod by zero) takes the evaluator's meaning, as the exporter guards it.
Calling conventions as in ops_tensor.py.
"""

from __future__ import annotations

from functools import reduce

from uopcli import UOp


def reciprocal(ctx): return ctx.x(0).reciprocal()          # noqa: E704 - Reciprocal-13: 1/x, IEEE
def floor(ctx): return ctx.x(0).floor()                    # noqa: E704 - Floor-13 (-0.0, nan, inf kept)
def ceil(ctx): return ctx.x(0).ceil()                      # noqa: E704 - Ceil-13


def round_(ctx):
    """Round-22: halves to even; a zero keeps x's sign (Round(-0.3) is -0.0, as C's
    nearbyint), which the builder's round, from floor and ceil of x ± 0.5, loses."""
    x = ctx.x(0)
    rounded = x.round()
    return rounded.eq(0).where(x * 0.0, rounded)


def isinf(ctx):
    """IsInf-20: +inf and/or -inf by detect_positive and detect_negative."""
    return ctx.x(0).isinf(bool(ctx.attr("detect_positive")), bool(ctx.attr("detect_negative")))


def max_(ctx):
    """Max-13: the elementwise largest of all inputs, broadcast (nan propagates, as np.maximum)."""
    return reduce(UOp.maximum, [ctx.x(i) for i in range(len(ctx.inputs))])


def mod(ctx):
    """Mod-13: fmod=0, integers only: the divisor's sign (Python's %); fmod=1, integers:
    the dividend's sign (C's %). Floats (fmod=1) are refused: the format's CMOD takes
    integers, and a - trunc(a/b)·b would round where C's fmod is exact."""
    a, b = ctx.x(0), ctx.x(1)
    fmod = ctx.attr("fmod")
    if fmod == 1:
        if not a.dtype.is_int:
            ctx.refuse("fmod=1 on floats is not supported (no exact float remainder in the format)")
        return a.cmod(b)
    if fmod != 0:
        ctx.refuse(f"fmod={fmod} is not 0 or 1")
    if not a.dtype.is_int:
        ctx.refuse("fmod=0 on floats (the spec requires fmod=1 there)")
    return a % b


def _logical(ctx, combine):
    a, b = ctx.x(0), ctx.x(1)
    if not (a.dtype.is_bool and b.dtype.is_bool):
        ctx.refuse(f"{ctx.op} takes bools (the Bitwise ops take integers)")
    return combine(a, b)


def or_(ctx): return _logical(ctx, lambda a, b: a | b)     # noqa: E704 - Or-7
def xor(ctx): return _logical(ctx, lambda a, b: a ^ b)     # noqa: E704 - Xor-7


def _bitwise(ctx, combine):
    a, b = ctx.x(0), ctx.x(1)
    if not (a.dtype.is_int and b.dtype.is_int):
        ctx.refuse(f"{ctx.op} takes integers")
    return combine(a, b)


def bitwise_and(ctx): return _bitwise(ctx, lambda a, b: a & b)  # noqa: E704 - BitwiseAnd-18
def bitwise_or(ctx): return _bitwise(ctx, lambda a, b: a | b)   # noqa: E704 - BitwiseOr-18
def bitwise_xor(ctx): return _bitwise(ctx, lambda a, b: a ^ b)  # noqa: E704 - BitwiseXor-18


def bitwise_not(ctx):
    """BitwiseNot-18: every bit flipped."""
    x = ctx.x(0)
    if not x.dtype.is_int:
        ctx.refuse("BitwiseNot takes integers")
    return ~x


def bit_shift(ctx):
    """BitShift-11: unsigned integers, direction LEFT or RIGHT (logical)."""
    x, amount = ctx.x(0), ctx.x(1)
    if not x.dtype.is_int or x.dtype.name.startswith("int"):
        ctx.refuse(f"BitShift takes unsigned integers, not {x.dtype.name}")
    direction = ctx.attr("direction")
    if direction == "LEFT":
        return x << amount
    if direction == "RIGHT":
        return x >> amount
    ctx.refuse(f"direction={direction!r} is not 'LEFT' or 'RIGHT'")


def einsum(ctx):
    """Einsum-12: the builder's einsum (explicit or implicit output, `...`, diagonals)."""
    equation = ctx.attr("equation")
    if not isinstance(equation, str):  # ("" is an equation: a scalar's, "->" implied)
        ctx.refuse("the equation attribute is missing")
    try:
        return UOp.einsum(equation.replace(" ", ""), *[ctx.x(i) for i in range(len(ctx.inputs))])
    except (ValueError, KeyError, IndexError) as e:
        ctx.refuse(f"equation {equation!r}: {e}")


# Pad's modes -> the builder's pad modes (numpy.pad's reflect, edge and wrap)
PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def pad(ctx):
    """Pad-11..25: pads [begin..., end...] (along `axes` when given, 18+); mode "constant"
    fills with a constant_value input (0 without it), "reflect", "edge" and "wrap" with
    the tensor's own elements (numpy.pad's modes; reflect needs pads below the axis' size,
    wrap at most its size). Negative pads cut elements off."""
    mode = ctx.attr("mode")
    if mode not in PAD_MODES:
        ctx.refuse(f"mode={mode!r} is not one of {', '.join(PAD_MODES)}")
    x = ctx.x(0)
    rank = len(x.shape)
    pads = [int(v) for v in ctx.static(1, "pads").reshape(-1)]
    axes = list(range(rank))
    if len(ctx.inputs) > 3 and ctx.x(3) is not None:
        from .ops_tensor import axes_of, ints_of
        axes = list(axes_of(ctx, ints_of(ctx, 3, "axes"), rank))
    if len(pads) != 2 * len(axes):
        ctx.refuse(f"pads has {len(pads)} values for {len(axes)} axes (2 per axis)")
    pairs: list = [None] * rank
    for k, axis in enumerate(axes):
        pairs[axis] = (pads[k], pads[k + len(axes)])
    shape = [n + (p[0] + p[1] if p else 0) for n, p in zip(x.shape, pairs)]
    if min(shape, default=0) < 0:
        ctx.refuse(f"pads {pads} leave the sizes {shape} of input {list(x.shape)}: below 0")
    if mode == "wrap" and any(p and max(p) > n + min(p[0], 0) + min(p[1], 0) for n, p in zip(x.shape, pairs)):
        return _wrapped(ctx, x, pairs)
    if mode != "constant":
        return x.pad(pairs, mode=PAD_MODES[mode])
    # an axis whose negative pads cut more than it has (begin -2, end 3 of 1 element) keeps
    # none of x: the output is the window [-begin, size + end) of x padded without end,
    # the fill alone (onnxruntime's values); the builder's pad cuts first and cannot
    filled = any(p and (-p[0] >= n or -p[1] >= n) for n, p in zip(x.shape, pairs))
    value = 0
    if ctx.present(2):
        fill = ctx.static_if_known(2)
        if fill is None:  # computed from the inputs (or a weight): 0s, then the node where the pads are
            node = ctx.x(2)
            if node.size != 1:
                ctx.refuse(f"constant_value has {node.size} elements, not one")
            fill_node = node.reshape(()).cast(x.dtype)
            if filled:
                return fill_node.expand(tuple(shape))
            inside = UOp.full(x.shape, True).pad(pairs)
            return inside.where(x.pad(pairs), fill_node)
        value = fill.reshape(-1)[0].item() if fill.size else 0
    return UOp.full(shape, value, x.dtype) if filled else x.pad(pairs, value=value)


def _wrapped(ctx, x, pairs):
    """wrap padding wider than the axis (after its cuts): numpy's wrap, as onnxruntime's,
    repeats the axis as often as the pads need, where the builder's circular pad wraps one
    copy. Per axis: the negative pads cut first (what is left wraps), that tiled, the
    pads' window of the tiling taken."""
    for axis, pair in enumerate(pairs):
        if not pair:
            continue
        keep = (max(0, -pair[0]), x.shape[axis] - max(0, -pair[1]))
        before, after, size = max(0, pair[0]), max(0, pair[1]), keep[1] - keep[0]
        if size < 1:
            ctx.refuse(f"wrap padding {list(pair)} of axis {axis} wraps an empty axis")
        lead, trail = -(-before // size), -(-after // size)  # copies before and after, ceil division
        x = x.shrink(tuple(keep if a == axis else None for a in range(len(x.shape))))
        x = x.repeat(*(lead + 1 + trail if a == axis else 1 for a in range(len(x.shape))))
        start = lead * size - before
        x = x.shrink(tuple((start, start + before + size + after) if a == axis else None for a in range(len(x.shape))))
    return x


def reduce_prod(ctx):
    """ReduceProd-18: the product over axes (an input since 18, an attribute before)."""
    from .ops_tensor import _reduce_axes
    x = ctx.x(0)
    axes = _reduce_axes(ctx, len(x.shape), ctx.since >= 18)
    if axes is None:
        return x
    product = x.prod(axes, keepdim=bool(ctx.attr("keepdims")))
    return product if product.dtype is x.dtype else product.cast(x.dtype)
