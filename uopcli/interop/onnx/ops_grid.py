"""ONNX's GridSample (16, 20, 22) as a UOp graph: X [N, C, *in] sampled at the points of
grid [N, *out, D] (normalised to [-1, 1], the last axis first: x, y, ...), giving
[N, C, *out]. The grid is data (it may depend on the model's inputs and is differentiated
like X), so the sampling is built from it: each point's per-axis taps (1 for nearest, 2
for linear, 4 for cubic, Keys' a = -0.75), their weights, and the flat index of each tap
combination, gathered from X flattened over its spatial axes. Following the spec
(https://onnx.ai/onnx/operators/onnx__GridSample.html) as onnx.reference's
op_grid_sample.py computes it:

  x = (n + 1)/2·(L - 1) with align_corners, else ((n + 1)·L - 1)/2; nearest rounds x half
  to even; a point outside [-0.5, L - 0.5] ([0, L - 1] with align_corners) is clamped to
  [0, L - 1] (border) or reflected at those bounds (reflection); a tap outside [0, L)
  reads 0 (zeros), the nearest edge (border) or is reflected again (reflection).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from uopcli import UOp, dtypes

from .ops_exact import round_
from .ops_tensor import FOLD_LIMIT, take

_MODES = {16: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
          20: {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}}
_A = -0.75  # the cubic convolution kernel's coefficient


def grid_sample(ctx):
    x, grid = ctx.x(0), ctx.x(1)
    spatial = len(x.shape) - 2
    names = _MODES[16 if ctx.since == 16 else 20]
    mode = names.get(ctx.attr("mode") or ("bilinear" if ctx.since == 16 else "linear"))
    padding, corners = ctx.attr("padding_mode"), bool(ctx.attr("align_corners"))
    if mode is None or padding not in ("zeros", "border", "reflection"):
        ctx.refuse(f"mode={ctx.attr('mode')!r} is not one of {', '.join(names)}, or padding_mode={padding!r} "
                   f"is not zeros, border or reflection")
    if spatial < 1 or (ctx.since == 16 and spatial != 2) or len(grid.shape) != spatial + 2 \
            or grid.shape[0] != x.shape[0] or grid.shape[-1] != spatial:
        ctx.refuse(f"input {list(x.shape)} and grid {list(grid.shape)} do not fit: grid [N, *out, {spatial}]")
    if not x.dtype.is_float or not grid.dtype.is_float:
        ctx.refuse("X and grid must be floats")
    batch, channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    outputs = grid.shape[1:-1]
    points = grid.reshape(batch, -1, spatial).cast(x.dtype)      # [N, O, D]
    per_axis = []
    for d, size in enumerate(sizes):  # axis d of X is the grid's coordinate D - 1 - d
        coordinate = points[:, :, spatial - 1 - d]
        # with align_corners an axis of one pixel maps every point to 0 ((n + 1)/2·0), where
        # the taps beside it weigh 0: reflecting in [0, 0] (no room, 0/0) and clamping to it
        # read the same pixel, as onnxruntime's values are
        axis_padding = "border" if padding == "reflection" and corners and size == 1 else padding
        per_axis.append(_axis_taps(ctx, coordinate, size, mode, axis_padding, corners))
    flat = x.reshape(batch, channels, -1)
    strides = [math.prod(sizes[d + 1:]) for d in range(spatial)]
    out = None
    for combination in itertools.product(*per_axis):
        index, weight, inside = None, None, None
        for (tap_index, tap_weight, tap_inside), stride in zip(combination, strides):
            term = tap_index * stride if stride != 1 else tap_index
            index = term if index is None else index + term
            weight = tap_weight if weight is None else (weight if tap_weight is None else weight * tap_weight)
            inside = tap_inside if inside is None else (inside if tap_inside is None else inside & tap_inside)
        count = index.shape[1]
        spread = index.reshape(batch, 1, count).expand(batch, channels, count)
        # nearest gives the pixel itself, -0.0 kept (linear and cubic add +0.0 below anyway)
        picked = take(flat, 2, spread) if mode == "nearest" else flat.gather(2, spread)
        if inside is not None:  # a tap outside reads 0, not 0 times the clamped pixel (nan for nan or inf)
            picked = inside.reshape(batch, 1, count).where(picked, 0.0)
        picked = picked if weight is None else picked * weight.reshape(batch, 1, count)
        out = picked if out is None else out + picked
    # linear and cubic: the spec's dot products start from +0.0, so an exact zero is +0.0
    out = out if mode == "nearest" else out + 0.0
    return out.reshape(batch, channels, *outputs)


def _axis_taps(ctx, n, size: int, mode: str, padding: str, corners: bool):
    """[(index, weight, inside)] of one axis's taps for normalised coordinates n [N, O]:
    indices int32 within [0, size), weights floats (None: 1), and for zeros padding whether
    the tap is inside (None otherwise)."""
    x = (n + 1) / 2 * (size - 1) if corners else ((n + 1) * size - 1) / 2
    low, high = (0.0, size - 1.0) if corners else (-0.5, size - 0.5)
    if mode == "nearest":
        x = ctx.call(round_, x)
    outside = (x < low) | (x > high)
    if padding == "border":
        x = outside.where(x.maximum(0.0).minimum(size - 1.0), x)
    elif padding == "reflection":
        x = outside.where(_reflect(x, low, high), x)
    if mode == "nearest":
        return [tap(x, size, padding, low, high, None)]
    base = x.floor()
    t = x - base
    if mode == "linear":
        return [tap(base, size, padding, low, high, 1 - t), tap(base + 1, size, padding, low, high, t)]
    weights = [_far(t + 1), _near(t), _near(1 - t), _far(2 - t)]
    return [tap(base + (k - 1), size, padding, low, high, w) for k, w in enumerate(weights)]


def _near(d):
    return ((_A + 2) * d - (_A + 3)) * d * d + 1


def _far(d):
    return ((_A * d - 5 * _A) * d + 8 * _A) * d - 4 * _A


def tap(i, size: int, padding: str, low: float, high: float, weight):
    """A tap at integer-valued float i: its index inside [0, size), its weight, and whether
    it is inside (zeros padding only: the caller reads 0 there). GridSample's, and
    RoiAlign's and DeformConv's bilinear taps (ops_roi.py)."""
    inside = None
    if padding == "zeros":
        inside = (i > -1) & (i < size)
        i = i.maximum(0.0).minimum(size - 1.0)
    elif padding == "border":
        i = i.maximum(0.0).minimum(size - 1.0)
    else:
        i = _reflect(i, low, high).trunc().maximum(0.0).minimum(size - 1.0)
    return i.cast(dtypes.int32), weight, inside


def _reflect(x, low: float, high: float):
    """x reflected at low and high until inside (the reference's _gs_reflect)."""
    span = high - low
    below, above = low - x, x - high
    distance = (x < low).where(below, above)
    folds = (distance / span).floor()
    rest = distance - folds * span
    odd = (folds - (folds * 0.5).floor() * 2).eq(1.0)
    from_low, from_high = low + rest, high - rest
    reflected = (x < low).where(odd.where(from_high, from_low), odd.where(from_low, from_high))
    return ((x < low) | (x > high)).where(reflected, x)


def affine_grid(ctx):
    """AffineGrid-20: the sampling grid of theta [N, 2, 3] (or [N, 3, 4]) over size
    [N, C, H, W] (or [N, C, D, H, W]): each output point is theta times its homogeneous
    base coordinates (x, y[, z], 1), x along the last axis. The base coordinates of an axis
    of n points run from -1 to 1: the points' centres with align_corners (0 where n = 1, as
    torch's), else the midpoints of n equal cells, (2i + 1)/n - 1. (The spec's function
    body squeezes theta's rows without axes, so a batch of 1 broke it: this is the op's
    maths, with the reference's values.)"""
    theta = ctx.x(0)
    size = [int(n) for n in ctx.static(1, "size").reshape(-1)]
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.shape != (size[0], len(spatial), len(spatial) + 1):
        ctx.refuse(f"theta {list(theta.shape)} and size {size} do not fit: theta [N, 2, 3] with size [N, C, H, W], "
                   f"or theta [N, 3, 4] with size [N, C, D, H, W]")
    if math.prod(spatial) * (len(spatial) + 1) > FOLD_LIMIT:  # made when the graph runs
        base = _base_nodes(spatial, ctx.attr("align_corners")).cast(theta.dtype)
        grid = theta @ base
        return grid.permute((0, 2, 1)).reshape((size[0], *spatial, len(spatial)))
    axes = [_base_coordinates(n, ctx.attr("align_corners")) for n in spatial]
    points = np.stack([*np.meshgrid(*axes, indexing="ij")[::-1], np.ones([len(a) for a in axes])], axis=-1)
    base = UOp.buffer(np.ascontiguousarray(points.reshape(-1, len(spatial) + 1).T.astype(theta.dtype.np)))
    grid = theta @ base  # [N, dims, points]
    return grid.permute((0, 2, 1)).reshape((size[0], *spatial, len(spatial)))


def _base_nodes(spatial: list[int], align_corners: int) -> UOp:
    """affine_grid's base [dims + 1, points] as nodes computed when the graph runs (a
    40,000² grid was 38 GB when importing): each axis's _base_coordinates, in float64 by
    the same operations (np.linspace's arange·step + start, its last point the stop),
    broadcast over the others; rows x, y[, z], then ones."""
    shape, rows = tuple(spatial), []
    for axis in reversed(range(len(spatial))):
        n = spatial[axis]
        place = UOp.arange(n, dtype=dtypes.int64)
        if n <= 1:
            line = UOp.full((n,), 0.0, dtypes.float64)
        elif align_corners:
            line = place.cast(dtypes.float64) * (2.0 / (n - 1)) + -1.0
            line = place.eq(n - 1).where(UOp.const(1.0, dtypes.float64), line)
        else:
            line = (place * 2 + 1).cast(dtypes.float64) / n - 1
        along = tuple(n if a == axis else 1 for a in range(len(spatial)))
        rows.append(line.reshape(along).expand(shape).reshape(1, math.prod(shape)))
    rows.append(UOp.full((1, math.prod(shape)), 1.0, dtypes.float64))
    return rows[0].cat(*rows[1:])


def _base_coordinates(n: int, align_corners: int) -> np.ndarray:
    if n <= 1:
        return np.zeros(n)
    if align_corners:
        return np.linspace(-1.0, 1.0, n)
    return (2 * np.arange(n) + 1) / n - 1
