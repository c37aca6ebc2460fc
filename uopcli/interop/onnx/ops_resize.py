"""ONNX's Resize (10, 11, 13, 18, 19) and Upsample (7, 9) as UOp graphs.

Resizing is separable: each resized axis maps an output position o to a source
coordinate x (coordinate_transformation_mode), and the output is a weighted sum of a few
input elements around x (its taps): one for nearest (by nearest_mode), two for linear,
four for cubic (cubic_coeff_a, exclude_outside), more with antialias, which widens a
downscaling filter by 1/scale. The sizes and scales must be known at import, so every
axis's taps (indices and weights) are computed then, in float64 with numpy, and the graph
gathers the tap elements and sums them weighted: differentiable in X by construction.
Taps outside the axis take its edge element (the spec's edge padding). The spec:
https://onnx.ai/onnx/operators/onnx__Resize.html; onnx.reference's op_resize.py computes
the same taps.
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp

from .ops_tensor import FOLD_LIMIT, axes_of, take

_MODES = ("nearest", "linear", "cubic")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize", "tf_half_pixel_for_nn")


def resize(ctx):
    """Resize-11/13/18/19: X, roi, scales, sizes (one of the last two), the attributes as
    the module says; Resize-10 (X, scales) is Upsample's asymmetric resampling."""
    x = ctx.x(0)
    rank = len(x.shape)
    if ctx.since == 10:
        return _resampled(ctx, x, _static_floats(ctx, 1, "scales"), None, None, list(range(rank)), legacy=True)
    axes = list(axes_of(ctx, ctx.attr("axes"), rank)) if ctx.attr("axes") is not None else list(range(rank))
    scales = _static_floats(ctx, 2, "scales")
    sizes = ctx.static(3, "sizes") if ctx.present(3) else None
    sizes = None if sizes is None or sizes.size == 0 else [int(s) for s in sizes.reshape(-1)]
    if scales is not None and len(scales) == 0:
        scales = None
    if (scales is None) == (sizes is None):
        ctx.refuse("exactly one of scales and sizes must be given")
    if len(scales or sizes) != len(axes):
        ctx.refuse(f"{len(scales or sizes)} scales or sizes for {len(axes)} axes")
    roi = _static_floats(ctx, 1, "roi") if ctx.present(1) else None
    if ctx.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            ctx.refuse(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values (starts, then ends)")
    else:
        roi = None
    return _resampled(ctx, x, scales, sizes, roi, axes, legacy=False)


def upsample(ctx):
    """Upsample-7/9 (deprecated in 10, for Resize-10): nearest or linear with scales (an attribute
    in 7, an input in 9), the asymmetric coordinate x = o / scale."""
    x = ctx.x(0)
    scales = ctx.attr("scales") if ctx.since < 9 else _static_floats(ctx, 1, "scales")
    if scales is None:
        ctx.refuse("scales must be given")
    return _resampled(ctx, x, [float(s) for s in scales], None, None, list(range(len(x.shape))), legacy=True)


def _static_floats(ctx, i: int, what: str) -> list[float] | None:
    value = ctx.static(i, what)
    return None if value is None else [float(v) for v in np.asarray(value, np.float64).reshape(-1)]


def _resampled(ctx, x, scales, sizes, roi, axes: list[int], legacy: bool):
    """x resized along `axes` by scales (or to sizes), one axis after another."""
    rank = len(x.shape)
    mode = ctx.attr("mode")
    if mode not in _MODES or (legacy and mode == "cubic"):
        ctx.refuse(f"mode={mode!r} is not {', '.join(_MODES[:2] if legacy else _MODES)}")
    if len(scales or sizes) != rank and axes == list(range(rank)):
        ctx.refuse(f"{len(scales or sizes)} scales or sizes for input {list(x.shape)}")
    if mode != "nearest" and not x.dtype.is_float:
        ctx.refuse(f"mode {mode} of {x.dtype.name} values: only nearest keeps integers exact")
    scales, sizes = _scales_and_sizes(ctx, x.shape, scales, sizes, axes)
    if min(sizes) == 0:  # ⌊in·scale⌋ = 0 (scale 0.5 of 1 element): an empty output, as the spec's sizes say
        shape = list(x.shape)
        for axis, m in zip(axes, sizes):
            shape[axis] = m
        return UOp.full(shape, 0, x.dtype)
    for k, axis in enumerate(axes):
        n, m, scale = x.shape[axis], sizes[k], scales[k]
        window = (0.0, 1.0) if roi is None else (roi[k], roi[len(axes) + k])
        if m == n and math.isclose(scale, 1.0) and window == (0.0, 1.0):
            continue  # the reference skips an axis left as it is (every mode is the identity there)
        taps = _tap_count(ctx, scale, mode)
        if m * taps > FOLD_LIMIT:  # the tables are computed when importing: a 10^9 wide axis took 8 GB
            ctx.refuse(f"resizes axis {axis} to {m} positions of {taps} taps: its index and weight tables, "
                       f"{m * taps} elements computed when importing, are more than {FOLD_LIMIT}")
        coordinates, outside = _source_coordinates(ctx, n, m, scale, window, legacy)
        indices, weights = _taps(ctx, coordinates, n, scale, mode, legacy)
        x = _gathered(x, axis, indices, weights)
        if outside is not None and outside.any():
            along = tuple(m if a == axis else 1 for a in range(rank))
            x = UOp.buffer(outside.reshape(along)).where(x.const_like(ctx.attr("extrapolation_value")), x)
    return x


def _scales_and_sizes(ctx, shape, scales, sizes, axes):
    """Per resized axis: the scale the coordinates use, and the output size. Sizes give
    scales size/in; keep_aspect_ratio_policy not_larger/not_smaller takes their min/max for
    every axis and rounds the sizes half up. Scales give sizes ⌊in·scale⌋."""
    if sizes is not None:
        if min(sizes) < 1:
            ctx.refuse(f"sizes {sizes} must be >= 1")
        scales = [m / shape[a] for m, a in zip(sizes, axes)]
        policy = ctx.attr("keep_aspect_ratio_policy")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            ctx.refuse(f"keep_aspect_ratio_policy={policy!r} is not stretch, not_larger or not_smaller")
        if policy != "stretch":
            scale = min(scales) if policy == "not_larger" else max(scales)
            scales = [scale] * len(axes)
            sizes = [int(scale * shape[a] + 0.5) for a in axes]
        return scales, sizes
    if min(scales) <= 0:
        ctx.refuse(f"scales {scales} must be > 0")
    return scales, [int(s * shape[a]) for s, a in zip(scales, axes)]


def _source_coordinates(ctx, n: int, m: int, scale: float, window, legacy: bool):
    """x for each output position o (float64), and which fall outside the input
    (tf_crop_and_resize's extrapolated positions; None for the other modes)."""
    o = np.arange(m, dtype=np.float64)
    mode = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode")
    width = scale * n  # the output's length before rounding
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = n / 2 * (1 - m / width)
        return offset + (o + 0.5) / scale - 0.5, None
    if mode == "pytorch_half_pixel":  # the spec's "length_resized > 1 ? ... : 0" (the reference has -0.5:
        # the same pixel for nearest and linear, but cubic and antialias weigh its neighbours)
        return (np.zeros(m) if width == 1 else (o + 0.5) / scale - 0.5), None
    if mode == "align_corners":
        return (np.zeros(m) if width == 1 else o * (n - 1) / (width - 1)), None
    if mode == "asymmetric":
        return o / scale, None
    if mode == "tf_half_pixel_for_nn" and ctx.since == 11:
        return (o + 0.5) / scale, None
    if mode == "tf_crop_and_resize":
        start, end = window
        x = np.full(m, (end - start) * (n - 1) / 2) if width == 1 else o * (end - start) * (n - 1) / (width - 1)
        x = x + start * (n - 1)
        return x, (x < 0) | (x > n - 1)
    ctx.refuse(f"coordinate_transformation_mode={mode!r} is not one of {', '.join(_COORDINATES[:-1])}")


def _tap_count(ctx, scale: float, mode: str) -> int:
    """How many input positions each output position of an axis reads."""
    if mode == "nearest":
        return 1
    if ctx.attr("antialias") and scale < 1:
        support = 1.0 if mode == "linear" else 2.0  # the filter's half-width, widened by 1/scale
        return 2 - 2 * (math.floor(-support / scale) + 1)
    return 2 if mode == "linear" else 4


def _taps(ctx, x: np.ndarray, n: int, scale: float, mode: str, legacy: bool):
    """(indices [m, taps] clamped to [0, n), weights [m, taps]) of each output position."""
    if mode == "nearest":
        return _nearest(ctx, x, n, scale, legacy)[:, None], np.ones((len(x), 1))
    taps = _tap_count(ctx, scale, mode)
    # the taps' first index: the one left of x (x itself when x is an integer) is tap taps/2 - 1
    base = np.floor(x)
    ratio = x - base
    on_point = ratio == 0
    base, ratio = np.where(on_point, base - 1, base), np.where(on_point, 1.0, ratio)
    indices = base[:, None].astype(np.int64) + (np.arange(taps) - taps // 2 + 1)[None, :]
    distance = indices - x[:, None]  # each tap's offset from x
    if mode == "linear":
        filter_scale = min(scale, 1.0) if ctx.attr("antialias") else 1.0
        weights = np.clip(1 - np.abs(distance * filter_scale), 0, 1)
    else:
        filter_scale = min(scale, 1.0) if ctx.attr("antialias") else 1.0
        weights = _cubic(np.abs(distance * filter_scale), ctx.attr("cubic_coeff_a"))
    weights = weights / weights.sum(1, keepdims=True) if ctx.attr("antialias") else weights
    if ctx.attr("exclude_outside"):
        weights = np.where((indices < 0) | (indices >= n), 0.0, weights)
        total = weights.sum(1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(indices, 0, n - 1), weights


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient a at distances d >= 0."""
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _nearest(ctx, x: np.ndarray, n: int, scale: float, legacy: bool) -> np.ndarray:
    """The nearest input index of each source coordinate, by nearest_mode (legacy Resize-10
    and Upsample: the floor when enlarging, the ceiling when shrinking, as onnxruntime)."""
    if legacy:
        index = np.floor(x) if scale >= 1 else np.ceil(x)
    else:
        rule = ctx.attr("nearest_mode")
        if rule not in _NEAREST:
            ctx.refuse(f"nearest_mode={rule!r} is not one of {', '.join(_NEAREST)}")
        index = {"round_prefer_floor": lambda: np.ceil(x - 0.5), "round_prefer_ceil": lambda: np.floor(x + 0.5),
                 "floor": lambda: np.floor(x), "ceil": lambda: np.ceil(x)}[rule]()
    return np.clip(index, 0, n - 1).astype(np.int64)


def _gathered(x, axis: int, indices: np.ndarray, weights: np.ndarray):
    """Σ_k x[indices[:, k]]·weights[:, k] along `axis` (one gather per tap; a single tap of
    weight 1 is the gather alone, so nearest copies values exactly)."""
    m, taps = indices.shape
    grown = tuple(m if a == axis else s for a, s in enumerate(x.shape))
    along = tuple(m if a == axis else 1 for a in range(len(x.shape)))
    out = None
    for k in range(taps):
        index = UOp.buffer(indices[:, k].astype(np.int32).reshape(along)).expand(grown)
        picked = take(x, axis, index) if taps == 1 else x.gather(axis, index)  # -0.0 copied too
        if not (weights[:, k] == 1).all():
            picked = picked * UOp.buffer(weights[:, k].astype(_numpy_dtype(x)).reshape(along))
        out = picked if out is None else out + picked
    return out


def _numpy_dtype(x):
    return {"float16": np.float16, "float64": np.float64}.get(x.dtype.name, np.float32)
