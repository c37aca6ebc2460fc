"""ONNX's reductions beyond ops_tensor.py's ReduceSum/Mean/Max (and ops_exact.py's
ReduceProd): ReduceMin, the norms and log-sums, ArgMax/ArgMin, and the running sums and
products CumSum/CumProd. Axes are an attribute before version 18 (ReduceSum: 13) and an
input after, as ops_tensor._reduce_axes reads them; an empty reduction gives the
operation's identity (ReduceMin: +inf or the type's largest, ReduceLogSum: -inf).
Calling conventions as in ops_tensor.py."""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from . import ops_tensor as t
from .float64 import log1p64, sum_exp_less_one64


def _reduced(ctx, fold):
    """`fold(x, axes, keepdim)` over the node's axes, in the input's type. With
    noop_with_empty_axes and no axes, `axes` is (): nothing is reduced, but the
    elementwise part still applies (ReduceSumSquare gives x², as onnxruntime and the
    reference do)."""
    x = ctx.x(0)
    axes = t._reduce_axes(ctx, len(x.shape), ctx.since >= 18)
    out = fold(x, () if axes is None else axes, bool(ctx.attr("keepdims")))
    return out if out.dtype is x.dtype else out.cast(x.dtype)


def _sum(x: UOp, axes, keep: bool) -> UOp:
    return x.sum(axes, keepdim=keep) if axes else x


def _max(x: UOp, axes, keep: bool) -> UOp:
    return x.max(axes, keepdim=keep) if axes else x


def reduce_min(ctx): return _reduced(ctx, lambda x, axes, keep: x.min(axes, keepdim=keep) if axes else x)  # noqa: E704 - ReduceMin-20
def reduce_l1(ctx): return _reduced(ctx, lambda x, axes, keep: _sum(ctx.call(t.abs_, x), axes, keep))  # noqa: E704 - Σ|x|
def reduce_sum_square(ctx): return _reduced(ctx, lambda x, axes, keep: _sum(x * x, axes, keep))  # noqa: E704 - Σx²


def unit_scale(x: UOp, axes) -> UOp:
    """2^-e, e = ⌊log2 max|x|⌋ over `axes` (kept), a constant to the gradient: the largest
    x·2^-e is in [1, 2), so Σ(x·2^-e)² neither overflows (Σx² did from |x| = 1.3e154 in
    float64, 1.8e19 in float32, 256 in float16) nor underflows (x² lost digits below 1.5e-154,
    1.1e-19, 0.008). Scaling by a power of two is exact, so where Σx² did neither, the norm
    comes out bit for bit as before. e is kept within the type's exponents (a largest of 0,
    a subnormal, inf), where 2^±e is finite and not 0; a nan among x stays in the sum."""
    top = _max(x.maximum(-x), axes, True).detach()
    limit = float(np.finfo(x.dtype.np).maxexp - 1)
    e = top.log2().floor()  # nan for an empty set (its max is -inf): -limit, as for 0
    e = (e > limit).where(limit, (e > -limit).where(e, -limit))
    return (-e).exp2()


def norm_root(squares: UOp) -> UOp:
    """√ of a sum of squares with torch's norm gradient at 0: 0 (its norm backward masks a
    zero norm). √'s slope at 0 is inf, and the cotangent times x = 0 made it nan (0·inf),
    also under F.normalize's clamp, whose zero cotangent is 0·inf too. The values are √'s,
    bit for bit: a sum of squares is never -0.0, so 0 is √0; nan and inf are not 0."""
    zero = squares.eq(0)
    return zero.where(squares.const_like(0), zero.where(1.0, squares).sqrt())


def reduce_l2(ctx):
    """ReduceL2-18: √Σx² (integers: the root truncated, as the reference's astype); floats
    as √Σ(x·s)²/s with s = unit_scale (no overflow, and no underflow, of Σx²), the root by
    norm_root (gradient 0 at a zero norm, as torch's; an explicit Sqrt keeps its inf slope)."""
    def fold(x: UOp, axes, keep: bool) -> UOp:
        if not x.dtype.is_float:  # √ in float64, as the reference's np.sqrt (float32's was 3037000448 for 3037000499)
            return _sum(x * x, axes, keep).cast(dtypes.float64).sqrt()
        scale = unit_scale(x, axes)
        scaled = x * scale
        total = norm_root(_sum(scaled * scaled, axes, keep))
        return total / scale.reshape(total.shape)
    return _reduced(ctx, fold)


def reduce_log_sum(ctx):
    """ReduceLogSum-18: log Σx (-inf for an empty set); integers: the sum in the type, its
    log in float64, truncated (onnxruntime's; float32's log of 1318815734 was 21, not 20)."""
    def fold(x: UOp, axes, keep: bool) -> UOp:
        total = _sum(x, axes, keep)
        return (total.cast(dtypes.float64) if x.dtype.is_int else total).log()
    return _reduced(ctx, fold)


def reduce_log_sum_exp(ctx):
    """ReduceLogSumExp-18: log Σeˣ, computed as m + log Σe^(x - m) with m the (detached)
    largest value, so neither overflows; m is 0 where it is infinite (an empty set, or an
    inf among the values), where the shift would make inf - inf. float64 takes
    m + log1p(Σe^(x - m) - 1) (sum_exp_less_one64): log Σ was 0, and the result m, where the
    rest is below 1e-16 of the largest; -inf where every x is -inf (log1p(-1)). Integers are
    computed as float64 and truncated to their type, as onnxruntime."""
    def fold(x: UOp, axes, keep: bool) -> UOp:
        if x.dtype.is_int:  # in float64, truncated to the type (float32's lost 3037000499's last digits)
            x = x.cast(dtypes.float64)
        top = _max(x, axes, True).detach()
        top = top.isinf().where(0.0, top)
        if x.dtype is dtypes.float64:
            rest = sum_exp_less_one64(x, top, axes, keep)
            top = top.reshape(rest.shape)
            return rest.eq(-1).where(-math.inf, top + log1p64(rest))
        total = (x - top).exp().sum(axes, keepdim=keep).log()
        return total + top.reshape(total.shape)
    return _reduced(ctx, fold)


# ----------------------------------------------------------------------------- ArgMax, ArgMin


def first_largest(x: UOp, axis: int, keepdim: bool) -> UOp:
    """The first index (int64) of the largest value along `axis`; a nan counts as the
    largest (np.argmax). Each place holding the maximum scores size - index; the best
    score is the first place."""
    size = x.shape[axis]
    top = x.max(axis, keepdim=True)
    at_top = top.isnan().where(x.isnan(), x.eq(top)) if x.dtype.is_float else x.eq(top)
    scores = UOp.arange(size, 0, -1).reshape((size,) + (1,) * (len(x.shape) - axis - 1))
    return (size - at_top.where(scores, 0).max(axis, keepdim)).cast(dtypes.int64)


def _arg_extreme(ctx, smallest: bool):
    x = ctx.x(0)
    rank = len(x.shape)
    axis = t.axis_of(ctx, ctx.attr("axis"), rank)
    if x.shape[axis] == 0:
        ctx.refuse(f"axis {axis} is empty: there is no index to return")
    if smallest:
        x = -x if x.dtype.is_float else ~x  # the order reversed (nan stays nan; ~ has no overflow)
    keep = bool(ctx.attr("keepdims"))
    if not ctx.attr("select_last_index"):
        return first_largest(x, axis, keep)
    last = x.shape[axis] - 1
    return last - first_largest(x.flip(axis), axis, keep)


def arg_max(ctx): return _arg_extreme(ctx, smallest=False)  # noqa: E704 - ArgMax-13
def arg_min(ctx): return _arg_extreme(ctx, smallest=True)   # noqa: E704 - ArgMin-13


# ----------------------------------------------------------------------------- running sums


def _running(ctx, product: bool):
    """CumSum-14 / CumProd-26 along the `axis` input; `exclusive` leaves the element itself
    out (the first place gets the identity), `reverse` runs from the end."""
    x = ctx.x(0)
    axis = t.ints_of(ctx, 1, "axis")
    if axis is None or len(axis) != 1:
        ctx.refuse("axis must be one integer")
    rank = len(x.shape)
    axis = t.axis_of(ctx, axis[0], rank)
    if ctx.attr("reverse"):
        x = x.flip(axis)
    out = x.cumprod(axis) if product else x.cumsum(axis)
    out = out if out.dtype is x.dtype else out.cast(x.dtype)
    if ctx.attr("exclusive") and x.shape[axis]:
        size = x.shape[axis]
        moved = out.shrink(tuple((0, size - 1) if a == axis else None for a in range(rank)))
        out = moved.pad(tuple((1, 0) if a == axis else None for a in range(rank)), value=1 if product else 0)
    return out.flip(axis) if ctx.attr("reverse") else out


def cum_sum(ctx): return _running(ctx, product=False)      # noqa: E704
def cum_prod(ctx): return _running(ctx, product=True)      # noqa: E704


# ----------------------------------------------------------------------------- sorting, pooling, norms


def top_k(ctx):
    """TopK-11: the k largest (or smallest) values along `axis` and their int64 indices,
    in order; equal values keep the lower index first (the builder's stable sort). An
    unsorted request gets them sorted, which is one of the orders the spec allows."""
    x = ctx.x(0)
    k = t.ints_of(ctx, 1, "k")
    axis = t.axis_of(ctx, ctx.attr("axis"), len(x.shape))
    if k is None or len(k) != 1 or not 0 <= k[0] <= x.shape[axis]:
        ctx.refuse(f"k {k} must be one integer in [0, {x.shape[axis]}]")
    if x.dtype.is_float:
        return _float_top_k(x, k[0], axis, bool(ctx.attr("largest")))
    values, indices = x.topk(k[0], axis, largest=bool(ctx.attr("largest")))
    return [values, indices.cast(dtypes.int64)]


def _float_top_k(x: UOp, k: int, axis: int, largest: bool) -> list:
    """TopK of floats with nan the largest value (onnxruntime's, onnx.reference's lexsort's,
    torch's): first in a largest TopK, last in a smallest one; equal values (nans among
    themselves, -0.0 and +0.0) by index. Not the builder's topk, which ranks a nan as this
    does but is tinygrad's bitonic network of min and max: a -0.0 comes out as whichever
    zero the network keeps (topk of [-0.0, 0.0, 1] gives 0.0 at index 0), and at a tie the
    gradient is split between the tied elements. Here each element's rank is the count of
    those before it (an [n, n] comparison); the r-th is the one whose rank is r, so its
    value is x's own and its gradient reaches x at its index alone."""
    moved = x.transpose(axis, -1) if axis != len(x.shape) - 1 else x
    n = moved.shape[-1]
    mine, other = moved.unsqueeze(-1), moved.unsqueeze(-2)  # [..., i, 1] and [..., 1, j]
    mine_nan, other_nan = mine.isnan(), other.isnan()
    if largest:
        ahead = (other > mine) | (other_nan & ~mine_nan)
    else:
        ahead = (other < mine) | (mine_nan & ~other_nan)
    tie = other.eq(mine) | (other_nan & mine_nan)
    positions = UOp.arange(n)
    earlier = UOp.buffer(np.tril(np.ones((n, n), np.bool_), -1))  # [i, j]: j < i
    rank = (ahead | (tie & earlier)).cast(dtypes.int32).sum(-1)  # [..., i]
    chosen = rank.unsqueeze(-1).eq(UOp.arange(k).cast(dtypes.int32))  # [..., i, r]
    indices = chosen.where(positions.reshape((n, 1)).cast(dtypes.int64), 0).sum(-2)
    # the value: the chosen x summed with zeros (x exactly, and its slope 1 at its index; a
    # nan too), but +0.0 for -0.0, so a zero is taken as the largest of the chosen non-nan x
    # and -inf fills (whose slope is finite: a nan among them made 0/0 there)
    total = chosen.where(mine, 0.0).sum(-2)
    largest_of = (chosen & ~mine_nan).where(mine, -math.inf).max(-2)
    values = total.eq(0).where(largest_of, total)
    if axis != len(x.shape) - 1:
        values, indices = values.transpose(axis, -1), indices.transpose(axis, -1)
    return [values, indices.cast(dtypes.int64)]


def global_max_pool(ctx):
    """GlobalMaxPool-22: the largest value over every spatial axis (all after N and C), kept."""
    x = ctx.x(0)
    if len(x.shape) < 3:
        ctx.refuse(f"needs an input [N, C, spatial...], not {list(x.shape)}")
    return x.max(tuple(range(2, len(x.shape))), keepdim=True)


def lp_normalization(ctx):
    """LpNormalization-22: x / ‖x‖_p along `axis`, p 1 or 2; 0 where the norm is 0. p = 2
    divides x·s by √Σ(x·s)², s = unit_scale: the same quotient, bit for bit, but Σx² neither
    overflows (x/inf was 0 from |x| = 1.3e154 in float64) nor underflows (x/0 was the zero
    row's 0 below 1e-154)."""
    x = ctx.x(0)
    axis = t.axis_of(ctx, ctx.attr("axis"), len(x.shape))
    p = ctx.attr("p")
    if p == 1:
        total = ctx.call(t.abs_, x).sum(axis, keepdim=True)
    elif p == 2:
        x = x * unit_scale(x, (axis,)) if x.dtype.is_float else x  # (the spec's types are floats)
        total = (x * x).sum(axis, keepdim=True)  # the norm squared
    else:
        ctx.refuse(f"p={p} is not 1 or 2")
    zero = total.eq(0)  # all zeros along the axis: the output is 0 (the spec), never 0/0
    total = zero.where(1.0, total)  # before the root: its slope at 0 was inf, and 0·inf nan
    return zero.where(x.const_like(0), x / (total.sqrt() if p == 2 else total))


def mean_variance_normalization(ctx):
    """MeanVarianceNormalization-13 (its function body): (x - E[x]) / (√(E[x²] - E[x]²) + 1e-9) over `axes`."""
    x = ctx.x(0)
    axes = t.axes_of(ctx, ctx.attr("axes") or (0, 2, 3), len(x.shape))
    mean = x.mean(axes, keepdim=True)
    spread = ((x * x).mean(axes, keepdim=True) - mean * mean).sqrt()
    return (x - mean) / (spread + 1e-9)


def lp_pool(ctx):
    """LpPool-22: (Σ|x|^p)^(1/p) over each window (the padding adds zeros); auto_pad,
    strides, dilations as Conv's. ceil_mode's last, partial window (as MaxPool's: none that
    would start in the after-padding) sums what it covers: zeros pad it to a whole one."""
    from .ops_nn import _kernel, _window_geometry
    x = ctx.x(0)
    kernel = _kernel(ctx, ctx.attr("kernel_shape"))
    strides, dilations, pairs = _window_geometry(ctx, x, kernel, cut=True)
    for size, (before, after), k, s, d in zip(x.shape[2:], pairs, kernel, strides, dilations):
        if size + before + after - (k - 1) * d - 1 < 0:
            ctx.refuse(f"the kernel {kernel} (dilations {list(dilations)}) is larger than the padded input")
    p = ctx.attr("p")
    if p < 1:
        ctx.refuse(f"p={p} must be at least 1")
    powered = ctx.call(t.abs_, x) if p == 1 else x * x if p == 2 else ctx.call(t.abs_, x).pow(float(p))
    if ctx.attr("ceil_mode"):
        pairs = powered._ceil_mode_padding(tuple(pairs), tuple(kernel), strides, dilations)
    windows = powered.pad(((0, 0), (0, 0)) + tuple(pairs))._pool(tuple(kernel), strides, dilations)
    total = windows.sum(tuple(range(-len(kernel), 0)))
    return total if p == 1 else total.sqrt() if p == 2 else total.pow(1 / p)
