"""ONNX's RoiAlign (10, 16, 22) and DeformConv (19, 22) as UOp graphs: both sample X at
positions computed from data (the rois, the offsets), so they are built like GridSample
(ops_grid.py): per-axis taps, their weights, and a flat-index gather from X. The rois,
batch indices, offsets and mask may depend on the model's inputs, and the float ones are
differentiated like X. Following the specs (https://onnx.ai/onnx/operators/onnx__RoiAlign.html,
https://onnx.ai/onnx/operators/onnx__DeformConv.html) as onnx.reference's op_roi_align.py and
op_deform_conv.py, and onnxruntime's CPU kernels, compute them:

RoiAlign: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] -> [R, C, oh, ow].
  A roi's corners are rois·spatial_scale, less 0.5 with half_pixel (16's default; 10 has
  output_half_pixel only, which also makes a roi at least 1x1). Each output bin averages
  (avg) or takes the largest (max) of g_h x g_w samples at the centres of a g_h x g_w grid
  over the bin; g is sampling_ratio, or with 0 ceil(roi size / output size), per roi. A
  sample outside [-1, H] x [-1, W] is 0; inside, it is clamped to [0, H - 1] and
  interpolated bilinearly. max takes the largest of the four weighted taps (w·x, not the
  interpolated value), as onnxruntime and the reference do and ONNX's node case expects.

DeformConv: X [N, C, H, W], W [M, C/group, kh, kw], offset [N, og·kh·kw·2, oh, ow] (per
  offset group and tap: dy, dx), optional B [M] and mask [N, og·kh·kw, oh, ow]. Tap (i, j)
  of output (y, x) reads X at (y·sh - pad_top + i·dh + dy, x·sw - pad_left + j·dw + dx),
  bilinearly, a tap of the interpolation outside X reading 0; times the mask; then the
  grouped convolution with W, plus B. Channels c·og/C .. share offset group og's offsets.
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from .ops_grid import tap

_TRANSFORMS = ("half_pixel", "output_half_pixel")


# ----------------------------------------------------------------------------- RoiAlign


def roi_align(ctx):
    x, rois, batch = ctx.x(0), ctx.x(1), ctx.x(2)
    mode, transform = ctx.attr("mode"), ctx.attr("coordinate_transformation_mode")
    if ctx.since == 10 and transform is not None:
        ctx.refuse("coordinate_transformation_mode is an attribute from RoiAlign-16 on")
    transform = transform or ("output_half_pixel" if ctx.since == 10 else "half_pixel")
    out_h, out_w, ratio = ctx.attr("output_height"), ctx.attr("output_width"), ctx.attr("sampling_ratio")
    if mode not in ("avg", "max") or transform not in _TRANSFORMS:
        ctx.refuse(f"mode={mode!r} is not avg or max, or coordinate_transformation_mode={transform!r} is not "
                   f"half_pixel or output_half_pixel")
    if min(out_h, out_w) < 1 or ratio < 0:
        ctx.refuse(f"output_height {out_h} and output_width {out_w} must be >= 1, sampling_ratio {ratio} >= 0")
    if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4 or batch.shape != rois.shape[:1]:
        ctx.refuse(f"X {list(x.shape)}, rois {list(rois.shape)} and batch_indices {list(batch.shape)} do not fit: "
                   f"X [N, C, H, W], rois [R, 4], batch_indices [R]")
    if not x.dtype.is_float or not rois.dtype.is_float or not batch.dtype.is_int:
        ctx.refuse("X and rois must be floats, batch_indices integers")
    known = ctx.static_if_known(2)
    if known is not None and ((known < 0) | (known >= x.shape[0])).any():
        ctx.refuse(f"a batch index of {np.asarray(known).reshape(-1).tolist()} is outside X's batch of {x.shape[0]}")
    half = transform == "half_pixel"
    scale = ctx.attr("spatial_scale")
    grids = None
    if ratio == 0:  # adaptive: each roi's sample count is its size over the output's, so its values are needed
        fixed = ctx.static_if_known(1)
        if fixed is None:
            ctx.refuse("sampling_ratio=0 samples each roi by its size, so the rois must be known when importing "
                       "(the graph's tap count would depend on their values); give a sampling_ratio > 0")
        grids = _adaptive_grids(np.asarray(fixed, x.dtype.np), scale, half, out_h, out_w)
    rois = rois.cast(x.dtype)
    corners = [rois[:, k] * scale - (0.5 if half else 0.0) for k in range(4)]  # x1, y1, x2, y2: [R]
    height, width = corners[3] - corners[1], corners[2] - corners[0]
    if not half:  # output_half_pixel: a malformed roi is taken as 1x1
        height, width = height.maximum(1.0), width.maximum(1.0)
    rows = _roi_axis(corners[1], height, out_h, ratio if grids is None else grids[0], x.shape[2])
    cols = _roi_axis(corners[0], width, out_w, ratio if grids is None else grids[1], x.shape[3])
    return _roi_pool(x, batch, rows, cols, mode, grids)


def _adaptive_grids(rois: np.ndarray, scale: float, half: bool, out_h: int, out_w: int):
    """Each roi's sample counts (g_h [R], g_w [R]) for sampling_ratio 0, worked out in X's
    dtype as onnxruntime does (ceil(size / output size); none where the size is <= 0)."""
    dtype = rois.dtype.type
    corners = rois * dtype(scale) - dtype(0.5 if half else 0.0)
    height, width = corners[:, 3] - corners[:, 1], corners[:, 2] - corners[:, 0]
    if not half:
        height, width = np.maximum(height, dtype(1.0)), np.maximum(width, dtype(1.0))
    return (np.maximum(np.ceil(height / dtype(out_h)), 0).astype(np.int64),
            np.maximum(np.ceil(width / dtype(out_w)), 0).astype(np.int64))


def _roi_axis(start, length, outputs: int, grid, size: int):
    """One axis's samples [R, outputs, G] as (low, high, weight low, weight high, used):
    indices int32 within [0, size), weights 0 outside [-1, size]; `grid` is the
    sampling_ratio, or each roi's count [R] (then G is the largest and `used` says which
    samples a roi has; else None)."""
    rois = start.shape[0]
    count = int(grid) if np.ndim(grid) == 0 else max(int(grid.max(initial=0)), 1)
    bins = length / outputs
    step = np.arange(outputs, dtype=start.dtype.np).reshape(1, outputs, 1)
    centre = np.arange(count, dtype=start.dtype.np).reshape(1, 1, count) + 0.5
    used, per_roi = None, float(count)
    if np.ndim(grid):  # per-roi counts, constants (the rois are known)
        per_roi = UOp.buffer(np.maximum(grid, 1).astype(start.dtype.np).reshape(rois, 1, 1))
        used = UOp.buffer(np.broadcast_to(np.arange(count) < grid.reshape(rois, 1, 1), (rois, outputs, count)).copy())
    # the reference's order: start + p·bin + (i + 0.5)·bin / g
    at = (start.reshape(rois, 1, 1) + UOp.buffer(step) * bins.reshape(rois, 1, 1)
          + UOp.buffer(centre) * bins.reshape(rois, 1, 1) / per_roi)
    inside = (at >= -1.0) & (at <= float(size))
    at = at.maximum(0.0)
    low = at.floor().minimum(size - 1.0)
    last = low >= size - 1.0  # at the last row: both taps there, the weight all on it
    t = last.where(0.0, at - low)
    high = last.where(low, low + 1.0)
    w_low, w_high = inside.where(1.0 - t, 0.0), inside.where(t, 0.0)
    return low.cast(dtypes.int32), high.cast(dtypes.int32), w_low, w_high, used


def _roi_pool(x, batch, rows, cols, mode: str, grids):
    """The four bilinear taps of every sample gathered from X [N, C, H, W] flattened to
    [C, N·H·W] (a roi's batch index picks its image), weighted, then pooled per bin."""
    n, c, h, w = x.shape
    rois, oh, gh = rows[0].shape
    ow, gw = cols[0].shape[1:]
    flat = x.permute((1, 0, 2, 3)).reshape(c, n * h * w)
    image = (batch.cast(dtypes.int32) * (h * w)).reshape(rois, 1, 1, 1, 1)
    shape = (rois, oh, gh, ow, gw)
    taps = []
    for y, wy in ((rows[0], rows[2]), (rows[1], rows[3])):
        for xx, wx in ((cols[0], cols[2]), (cols[1], cols[3])):
            index = (image + y.reshape(rois, oh, gh, 1, 1) * w + xx.reshape(rois, 1, 1, ow, gw)).reshape(1, -1)
            picked = flat.gather(1, index.expand(c, index.shape[1])).reshape(c, *shape).permute((1, 0, 2, 3, 4, 5))
            weight = (wy.reshape(rois, oh, gh, 1, 1) * wx.reshape(rois, 1, 1, ow, gw)).reshape(rois, 1, *shape[1:])
            taps.append(weight * picked)  # [R, C, oh, gh, ow, gw]
    used = None if grids is None else (rows[4].reshape(rois, 1, oh, gh, 1, 1) & cols[4].reshape(rois, 1, 1, 1, ow, gw))
    if mode == "avg":
        total = taps[0] + taps[1] + taps[2] + taps[3]
        if used is None:
            return total.sum((3, 5)) / float(gh * gw)
        counts = np.maximum(grids[0] * grids[1], 1).astype(x.dtype.np).reshape(rois, 1, 1, 1)
        return used.where(total, 0.0).sum((3, 5)) / UOp.buffer(counts)
    largest = taps[0].maximum(taps[1]).maximum(taps[2]).maximum(taps[3])
    if used is None:
        return largest.max((3, 5))
    # a roi without samples (its size <= 0 with half_pixel) gives 0, as the reference
    some = UOp.buffer((grids[0] * grids[1] > 0).reshape(rois, 1, 1, 1))
    return some.where(used.where(largest, -math.inf).max((3, 5)), 0.0)


# ----------------------------------------------------------------------------- DeformConv


def deform_conv(ctx):
    x, w, offset, bias, mask = ctx.x(0), ctx.x(1), ctx.x(2), ctx.x(3), ctx.x(4)
    group, offset_group = ctx.attr("group"), ctx.attr("offset_group")
    if len(x.shape) != 4 or len(w.shape) != 4 or len(offset.shape) != 4:
        ctx.refuse(f"X {list(x.shape)}, W {list(w.shape)} and offset {list(offset.shape)} must be 4-D "
                   f"(2-D DeformConv, as onnxruntime and onnx.reference build it)")
    if not all(v.dtype.is_float for v in (x, w, offset) + tuple(v for v in (bias, mask) if v is not None)):
        ctx.refuse("X, W, offset, B and mask must be floats")
    kernel = list(ctx.attr("kernel_shape") or w.shape[2:])
    strides, dilations = list(ctx.attr("strides") or (1, 1)), list(ctx.attr("dilations") or (1, 1))
    pads = list(ctx.attr("pads") or (0, 0, 0, 0))
    if kernel != list(w.shape[2:]) or len(strides) != 2 or len(dilations) != 2 or len(pads) != 4 \
            or min(strides + dilations) < 1 or min(pads) < 0:
        ctx.refuse(f"kernel_shape {kernel} (W's {list(w.shape[2:])}), strides {strides}, dilations {dilations} "
                   f"and pads {pads} do not fit a 2-D kernel")
    n, c = x.shape[:2]
    m, taps = w.shape[0], kernel[0] * kernel[1]
    if group < 1 or offset_group < 1 or c != w.shape[1] * group or m % group or c % offset_group:
        ctx.refuse(f"X's {c} channels and W {list(w.shape)} do not fit group={group} and offset_group={offset_group}")
    out = [(size + pads[a] + pads[a + 2] - (k - 1) * d - 1) // s + 1
           for a, (size, k, s, d) in enumerate(zip(x.shape[2:], kernel, strides, dilations))]
    if min(out) < 1 or offset.shape != (n, offset_group * taps * 2, *out):
        ctx.refuse(f"offset {list(offset.shape)} must be [{n}, {offset_group * taps * 2}, {out[0]}, {out[1]}] "
                   f"(offset_group·kh·kw·2 over the output)")
    if mask is not None and mask.shape != (n, offset_group * taps, *out):
        ctx.refuse(f"mask {list(mask.shape)} must be [{n}, {offset_group * taps}, {out[0]}, {out[1]}]")
    if bias is not None and bias.shape != (m,):
        ctx.refuse(f"B {list(bias.shape)} must be [{m}]")
    columns = _deform_columns(x, offset.cast(x.dtype), None if mask is None else mask.cast(x.dtype), kernel,
                              strides, dilations, pads, offset_group, out)  # [N, C, kh·kw, P]
    per_group = (c // group) * taps
    points = out[0] * out[1]
    y = w.cast(x.dtype).reshape(1, group, m // group, per_group) @ columns.reshape(n, group, per_group, points)
    y = y.reshape(n, m, *out)
    return y if bias is None else y + bias.cast(x.dtype).reshape(1, m, 1, 1)


def _deform_columns(x, offset, mask, kernel, strides, dilations, pads, groups: int, out):
    """X sampled at every tap of every output point, [N, C, kh·kw, oh·ow] (im2col with
    the offsets), times the mask: the bilinear taps of GridSample's zeros padding."""
    n, c, h, w = x.shape
    kh, kw = kernel
    points, taps = out[0] * out[1], kh * kw
    moved = offset.reshape(n, groups, kh, kw, 2, out[0], out[1])
    axes = []
    for a, (size, k, s, d, pad) in enumerate(zip((h, w), kernel, strides, dilations, pads[:2])):
        # the regular grid: output position·stride - pad + tap·dilation, along axis a
        base = (np.arange(out[a]) * s - pad).reshape(1, -1) + (np.arange(k) * d).reshape(-1, 1)
        shape = (1, 1, k, 1, out[0], 1) if a == 0 else (1, 1, 1, k, 1, out[1])
        grid = UOp.buffer(base.astype(x.dtype.np).reshape(shape))
        at = (moved[:, :, :, :, a] + grid).reshape(n, groups, taps * points)
        low = at.floor()
        t = at - low
        axes.append([tap(low, size, "zeros", 0.0, 0.0, 1 - t), tap(low + 1, size, "zeros", 0.0, 0.0, t)])
    per_group = c // groups
    flat = x.reshape(n, groups, per_group, h * w)
    scale = None if mask is None else mask.reshape(n, groups, taps * points)
    sampled = None
    for y, wy, in_y in axes[0]:
        for xx, wx, in_x in axes[1]:
            index = (y * w + xx).reshape(n, groups, 1, taps * points)
            picked = flat.gather(3, index.expand(n, groups, per_group, taps * points))
            weight = (wy * wx if scale is None else wy * wx * scale).reshape(n, groups, 1, taps * points)
            # a tap outside X reads 0, not 0 times the clamped pixel (nan for nan or inf)
            picked = (in_y & in_x).reshape(n, groups, 1, taps * points).where(picked, 0.0) * weight
            sampled = picked if sampled is None else sampled + picked
    return sampled.reshape(n, c, taps, points)
