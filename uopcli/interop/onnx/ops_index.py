"""ONNX's tiling, one-hot, block rearranging and scattering ops, and Range's newer version:
Tile, OneHot, DepthToSpace/SpaceToDepth, ScatterElements/ScatterND (with their reduction
attribute), Range-27, and the ops whose output's size is a count of known values (Compress,
NonZero, Unique, NonMaxSuppression). Scatters are the builder's one-hot masked scatter (a
`where` over a mask of the index against each axis place), so they differentiate with
respect to both the data and the updates. Calling conventions as in ops_tensor.py."""

from __future__ import annotations

import math

import numpy as np

from uopcli import Ops, UOp, dtypes

from . import ops_tensor as t


def tile(ctx):
    """Tile-13: repeats[i] copies of the input along axis i (np.tile), repeats known at import."""
    x = ctx.x(0)
    repeats = t.ints_of(ctx, 1, "repeats")
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        ctx.refuse(f"repeats {repeats} must be {len(x.shape)} sizes >= 0 (one per axis)")
    return x.repeat(*repeats)


def one_hot(ctx):
    """OneHot-28: a new axis of `depth` places at `axis`, on_value where it equals the index
    (negative indices count from the end) and off_value elsewhere: an index outside
    [-depth, depth) gives a row of off_value. values = [off_value, on_value]; the
    output has their type; float indices are truncated to integers."""
    indices, values = ctx.x(0), ctx.x(2)
    depth = ctx.static(1, "depth")
    if depth is None or np.asarray(depth).size != 1 or values is None or values.shape not in ((2,),):
        ctx.refuse("depth must be a scalar and values two elements [off_value, on_value]")
    depth = int(np.asarray(depth).reshape(-1)[0])
    if depth <= 0:
        ctx.refuse(f"depth {depth} must be positive")
    rank = len(indices.shape)
    axis = ctx.attr("axis")
    if not -rank - 1 <= axis <= rank:
        ctx.refuse(f"axis {axis} is out of range for an output of rank {rank + 1}")
    axis = axis + rank + 1 if axis < 0 else axis
    if not indices.dtype.is_int:
        indices = indices.trunc().cast("int64")
    if ctx.since >= 11:  # OneHot-9 gives a row of off_value for a negative index
        indices = (indices < 0).where(indices + depth, indices)
    positions = UOp.arange(depth).cast(indices.dtype).reshape((depth,) + (1,) * (rank - axis))
    hit = indices.reshape(*indices.shape[:axis], 1, *indices.shape[axis:]).eq(positions)
    off, on = (values.shrink(((i, i + 1),)).reshape(()) for i in (0, 1))
    return hit.where(on, off)


def _block(ctx) -> int:
    x = ctx.x(0)
    size = ctx.attr("blocksize")
    if size is None or size <= 0 or len(x.shape) != 4:
        ctx.refuse(f"needs a positive blocksize and an input of rank 4, not {list(x.shape)}")
    mode = ctx.attr("mode")
    if mode not in ("DCR", "CRD"):
        ctx.refuse(f"mode={mode!r} is not 'DCR' or 'CRD'")
    return size


def depth_to_space(ctx):
    """DepthToSpace-13: [N, C, H, W] -> [N, C/b², H·b, W·b]; DCR takes the block's place
    from the channel's high part, CRD from its low part."""
    x = ctx.x(0)
    b = _block(ctx)
    n, c, h, w = x.shape
    if c % (b * b):
        ctx.refuse(f"channels {c} are not a multiple of blocksize² {b * b}")
    if ctx.attr("mode") == "DCR":
        moved = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        moved = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return moved.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(ctx):
    """SpaceToDepth-13 (28: CRD too): [N, C, H, W] -> [N, C·b², H/b, W/b], the inverse of
    DepthToSpace in the same mode."""
    x = ctx.x(0)
    b = _block(ctx)
    n, c, h, w = x.shape
    if h % b or w % b:
        ctx.refuse(f"height {h} and width {w} are not multiples of blocksize {b}")
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    order = (0, 3, 5, 1, 2, 4) if ctx.attr("mode") == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.permute(*order).reshape(n, c * b * b, h // b, w // b)


# ----------------------------------------------------------------------------- scatters

# ONNX's reduction attribute -> the builder's scatter_reduce (None: the later write wins)
_REDUCTIONS = {"none": None, "add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _reduction(ctx) -> str | None:
    reduction = ctx.attr("reduction", "none")  # (Scatter, ScatterElements' old name, has none)
    allowed = ("none",) if ctx.since < 16 else ("none", "add", "mul") if ctx.since < 18 else tuple(_REDUCTIONS)
    if reduction not in allowed:
        ctx.refuse(f"reduction={reduction!r} is not one of {', '.join(allowed)}")
    return _REDUCTIONS[reduction]


def _scattered(data: UOp, axis: int, index: UOp, updates: UOp, reduction: str | None) -> UOp:
    if reduction is None:
        return data.scatter(axis, index, updates)
    return data.scatter_reduce(axis, index, updates, reduction)


def scatter_elements(ctx):
    """ScatterElements-18: out = data with out[..., index[i], ...] = updates[i] along
    `axis` (index and updates of one shape, negative indices from the end), combined by
    `reduction` where the attribute asks (add, mul, max, min; none: written over)."""
    data, index, updates = ctx.x(0), ctx.x(1), ctx.x(2)
    axis = t.axis_of(ctx, ctx.attr("axis"), len(data.shape))
    if index.shape != updates.shape or len(index.shape) != len(data.shape):
        ctx.refuse(f"indices {list(index.shape)} and updates {list(updates.shape)} must have one shape, "
                   f"of the data's rank {len(data.shape)}")
    index = t._nonnegative_index(index, data.shape[axis])
    return _scattered(data, axis, index, updates.cast(data.dtype), _reduction(ctx))


def scatter_nd(ctx):
    """ScatterND-18: indices [..., k] name places in data's first k axes; updates
    (indices.shape[:-1] + data.shape[k:]) are written there (or combined by `reduction`).
    As a ScatterElements along the first axis of data seen as [places, rest]."""
    data, index, updates = ctx.x(0), ctx.x(1), ctx.x(2)
    k = index.shape[-1] if index.shape else 0
    if not index.shape or k > len(data.shape) or updates.shape != index.shape[:-1] + data.shape[k:]:
        ctx.refuse(f"indices {list(index.shape)} and updates {list(updates.shape)} do not fit data "
                   f"{list(data.shape)}")
    reduction = _reduction(ctx)
    count, rest = math.prod(index.shape[:-1]), math.prod(data.shape[k:])
    linear = index.const_like(0).broadcast_to(index.shape[:-1]) if index.shape[:-1] else index.const_like(0)
    for j, size in enumerate(data.shape[:k]):
        part = index.shrink(tuple((j, j + 1) if a == len(index.shape) - 1 else None
                                  for a in range(len(index.shape)))).reshape(*index.shape[:-1])
        linear = linear * size + t._nonnegative_index(part, size)
    flat = data.reshape(math.prod(data.shape[:k]), rest)
    spread = linear.reshape(count, 1).expand(count, rest)
    out = _scattered(flat, 0, spread, updates.cast(data.dtype).reshape(count, rest), reduction)
    return out.reshape(data.shape)


# ----------------------------------------------------------------------------- shapes set by values
# The output's shape is a count of the input's values: the format's shapes are static, so
# those values must be known when importing (a constant, or a model input fixed with
# --constant); the refusal says so otherwise, and what the values are computed from.


def differentiated(names: list[str]) -> str:
    """Why inputs --wrt names cannot be fixed with --constant, for a refusal."""
    plural = len(names) > 1
    return (f"--wrt names {_listed(names)}: a shape that follows {'their' if plural else 'its'} values cannot be "
            f"static, so the model cannot be differentiated with respect to {'them' if plural else 'it'} as "
            f"exported (--constant would make {'them constants' if plural else 'it a constant'}, with no gradient)")


def computed_from(node: UOp, input_names: dict, wrt: frozenset = frozenset()) -> str:
    """What a value that must be known when importing is computed from, and what the user
    can do, for its refusal: the model's inputs alone can be fixed (--constant); a value of
    the weights never is (they are inputs to differentiate), as an MoE router's choice of
    experts (torch's NonZero of the top-k mask) or any shape that follows the data."""
    inputs, weights, seen, stack = [], [], {node}, [node]
    while stack:
        for src in stack.pop().src:
            if src not in seen:
                seen.add(src)
                stack.append(src)
                if src.op == Ops.PARAM:
                    (inputs if src in input_names else weights).append(input_names.get(src, src.arg))
    listed, plural = _listed, "s" * (len(inputs) > 1)
    wanted = [name for name in inputs if name in wrt]
    if wanted and not weights:
        return f"the model's input{plural} {listed(inputs, 8)}; {differentiated(wanted)}"
    if not weights:
        return (f"the model's input{plural} {listed(inputs, 8)}: give {'their values' if plural else 'its value'} "
                f"with {' '.join(f'--constant {n}=...' for n in sorted(inputs))}")
    also = f" and the model's input{plural} {listed(inputs)}" if inputs else ""
    return (f"weights ({listed(weights)}){also}: weights are never known when importing (they are inputs, to "
            f"differentiate with respect to), so a shape that follows their values cannot be static; export the "
            f"model in a form whose shapes do not depend on values")


def _listed(names, most: int = 3) -> str:
    names = [repr(n) for n in sorted(names)]
    return ", ".join(names) if len(names) <= most else f"{', '.join(names[:most])} and {len(names) - most} more"


def compress(ctx):
    """Compress-11: the slices along `axis` (of the flattened input, without one) at the
    places where the condition is true, as numpy.compress: a condition shorter than the
    axis leaves the rest out. Its trues are the output's size, so it must be known; the
    data need not be (a gather of those places, differentiable)."""
    condition = np.asarray(ctx.static(1, "condition")).reshape(-1).astype(bool)
    data = ctx.x(0)
    if ctx.attr("axis") is None:
        data, axis = data.reshape(math.prod(data.shape)), 0
    else:
        axis = t.axis_of(ctx, ctx.attr("axis"), len(data.shape))
    if condition.size > data.shape[axis]:
        ctx.refuse(f"the condition has {condition.size} values for an axis of {data.shape[axis]}")
    places = np.flatnonzero(condition).astype(np.int32)
    return t.gather_index(data, axis, UOp.buffer(places))


def non_zero(ctx):
    """NonZero-13: the indices of the nonzero elements, [rank, count] int64, row-major. Of a
    scalar the spec says nothing, and the peers differ (onnxruntime [1, n], as a 1-D
    tensor; onnx.reference [0, n]): refused."""
    x = np.asarray(ctx.static(0, "X"))
    if x.ndim == 0:
        ctx.refuse("X is a scalar: its nonzero indices are undefined (onnxruntime gives [1, n], onnx.reference [0, n])")
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def unique(ctx):
    """Unique-11: the distinct values (or slices along `axis`), sorted or in the order they
    first occur, with the index of each one's first occurrence, each input element's index
    in the output, and the counts. Each output value is its first occurrence's (-0.0 where
    -0.0 came first)."""
    x = np.asarray(ctx.static(0, "X"))
    if x.dtype.kind == "f" and np.isnan(x).any():  # onnxruntime's order breaks: one class for everything
        ctx.refuse("X holds nan, which no order places: onnxruntime and onnx.reference disagree on its class")
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = t.axis_of(ctx, axis, x.ndim)
    _, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted"):  # by first occurrence: renumber the inverse to match
        order = np.argsort(first, kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], place[inverse]
    return [np.take(x, first, axis=axis)] + [a.astype(np.int64) for a in (first, inverse, counts)]


# ----------------------------------------------------------------------------- values known at import


def range_(ctx):
    """Range-27: Range-11's values; float16 computed in float32 when stash_type is 1."""
    stash = ctx.attr("stash_type")
    if stash not in (0, 1):
        ctx.refuse(f"stash_type={stash} is not 0 or 1")
    out = t.range_(ctx)
    if stash == 1 and isinstance(out, np.ndarray) and out.dtype == np.float16:
        start, limit, delta = (np.float32(ctx.static(i, "").reshape(-1)[0]) for i in range(3))
        count = max(int(math.ceil((limit - start) / delta)), 0)
        out = (start + np.arange(count, dtype=np.float32) * delta).astype(np.float16)
    return out


def eye_like(ctx):
    """EyeLike-22: ones on diagonal k of a 2-D tensor of the input's shape (its type, or
    `dtype`), zeros elsewhere; a value known at import."""
    rows_columns = ctx.shape_of(0)
    if len(rows_columns) != 2:
        ctx.refuse(f"needs a 2-D input, not of shape {list(rows_columns)}")
    code = ctx.attr("dtype")
    if code is None:
        dtype = ctx.x(0).dtype.np
    else:
        dtype = t.dtype_from_code(ctx, code, "dtype").np
    rows, columns = rows_columns
    if rows * columns > t.FOLD_LIMIT:  # made when the graph runs (t.FOLD_LIMIT): row + k == column
        row = UOp.arange(rows, dtype=dtypes.int64).reshape(rows, 1) + ctx.attr("k")
        diagonal = row.eq(UOp.arange(columns, dtype=dtypes.int64).reshape(1, columns))
        return diagonal.cast(t.format_dtype(np.empty(0, dtype)))
    return np.eye(*rows_columns, k=ctx.attr("k"), dtype=dtype)


def center_crop_pad(ctx):
    """CenterCropPad-18: each of `axes` (all by default) cut or padded with zeros to `shape`,
    centred: a cut of d elements starts at d // 2, a pad of d puts d // 2 before."""
    x = ctx.x(0)
    sizes = t.ints_of(ctx, 1, "shape")
    rank = len(x.shape)
    axes = t.axes_of(ctx, ctx.attr("axes") or range(rank), rank)
    if len(sizes) != len(axes) or any(s < 0 for s in sizes):
        ctx.refuse(f"shape {sizes} must give one size >= 0 for each of the axes {list(axes)}")
    pairs: list = [None] * rank
    for axis, size in zip(axes, sizes):
        difference = size - x.shape[axis]
        before = difference // 2 if difference >= 0 else -((-difference) // 2)
        pairs[axis] = (before, difference - before)
    return x.pad(pairs)


def reverse_sequence(ctx):
    """ReverseSequence-10: for each batch element b, the first sequence_lens[b] places of
    the time axis reversed, the rest as they are; as a GatherElements along time of
    index lens[b] - 1 - t where t < lens[b], else t."""
    x, lengths = ctx.x(0), ctx.x(1)
    rank = len(x.shape)
    time, batch = (t.axis_of(ctx, ctx.attr(name), rank, name) for name in ("time_axis", "batch_axis"))
    if time == batch or {time, batch} - {0, 1} or lengths.shape != (x.shape[batch],):
        ctx.refuse(f"time_axis and batch_axis must be 0 and 1, and sequence_lens [{x.shape[batch]}] long")
    steps = UOp.arange(x.shape[time]).cast(lengths.dtype)
    steps = steps.reshape(-1, 1) if time == 0 else steps.reshape(1, -1)
    lengths = lengths.reshape(1, -1) if time == 0 else lengths.reshape(-1, 1)
    index = (steps < lengths).where(lengths - 1 - steps, steps)
    index = index.reshape(*index.shape, *(1,) * (rank - 2)).expand(*x.shape)
    return t.take(x, time, index)


def tensor_scatter(ctx):
    """TensorScatter-24: the cache with `update` written along `axis` from each batch
    element's write index on (0 without write_indices; "circular" wraps modulo the cache's
    length): place j of batch b takes update[j - w_b] where 0 <= j - w_b < update's
    length, else the cache's own value. As a GatherElements of the update by j - w_b."""
    cache, update = ctx.x(0), ctx.x(1)
    rank = len(cache.shape)
    axis = t.axis_of(ctx, ctx.attr("axis"), rank)
    mode = ctx.attr("mode")
    if axis == 0 or mode not in ("linear", "circular") or len(update.shape) != rank or any(
            u != c for a, (u, c) in enumerate(zip(update.shape, cache.shape)) if a != axis) \
            or update.shape[axis] > cache.shape[axis]:
        ctx.refuse(f"update {list(update.shape)} does not fit the cache {list(cache.shape)} along axis {axis} "
                   f"(axis 0 is the batch; mode {mode!r} is 'linear' or 'circular')")
    batch, length, written = cache.shape[0], cache.shape[axis], update.shape[axis]
    starts = ctx.x(2).cast(dtypes.int64) if ctx.present(2) else UOp.full((batch,), 0, dtypes.int64)
    places = UOp.arange(length).cast(dtypes.int64)
    offset = places.reshape(1, length) - starts.reshape(batch, 1)  # [b, j] = j - w_b
    if mode == "circular":
        offset = offset % length
    inside = (offset >= 0) & (offset < written)
    layout = [1] * rank
    layout[0], layout[axis] = batch, length
    index = inside.where(offset, 0).reshape(*layout).expand(*cache.shape[:axis], length, *cache.shape[axis + 1:])
    gathered = t.take(update, axis, index)
    return inside.reshape(*layout).where(gathered, cache)


def non_max_suppression(ctx):
    """NonMaxSuppression-11: per batch and class, the boxes scoring above score_threshold
    (all, without one) in descending score, a tie by the lower index first, each kept unless
    its IoU with a box kept before exceeds iou_threshold, at most max_output_boxes_per_class
    (0 without one): [count, 3] int64 rows (batch, class, box). The count depends on the
    values, so boxes and scores must be known when importing; a detection model computes
    them, and is differentiated up to its boxes and scores, before its NMS. Arithmetic in
    the boxes' type, as onnx.reference's op_non_max_suppression.py."""
    what = "{}, whose values decide how many boxes are kept (differentiate the model up to its boxes and scores),"
    boxes, scores = (np.asarray(ctx.static(i, what.format(name))) for i, name in enumerate(("boxes", "scores")))
    limit, iou, floor = (ctx.static(i, name) for i, name in ((2, "max_output_boxes_per_class"), (3, "iou_threshold"),
                                                             (4, "score_threshold")))
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
        ctx.refuse(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must be [batches, boxes, 4] and "
                   f"[batches, classes, boxes]")
    center = ctx.attr("center_point_box")
    if center not in (0, 1):
        ctx.refuse(f"center_point_box={center} is not 0 or 1")
    limit, iou, floor = max(int(_first(limit, 0)), 0), _first(iou, 0.0), _first(floor, None)
    kept = []
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], center)
        for cls in range(scores.shape[1]):
            score = scores[batch, cls]
            ranked = sorted(range(score.size), key=lambda i: (-score[i], i))  # a tie: the lower index first
            order = [i for i in ranked if floor is None or score[i] > floor]
            chosen: list[int] = []
            for box in order:
                if len(chosen) >= limit:
                    break
                if not any(_overlap(corners[box], corners[other]) > iou for other in chosen):
                    chosen.append(box)
            kept += [(batch, cls, box) for box in chosen]
    return np.array(kept, dtype=np.int64).reshape(-1, 3)


def _first(value, default):
    """An optional scalar input's value: `default` where it is absent or empty (NMS reads
    an empty tensor as no value, as onnx.reference does)."""
    return np.asarray(value).reshape(-1)[0] if value is not None and np.size(value) else default


def _corners(boxes: np.ndarray, center: int) -> list[tuple]:
    """Each box as (x_min, x_max, y_min, y_max): from [y1, x1, y2, x2] (either diagonal), or
    from [x_center, y_center, width, height]."""
    if center:
        half_w, half_h = boxes[:, 2] / boxes.dtype.type(2), boxes[:, 3] / boxes.dtype.type(2)
        return list(zip(boxes[:, 0] - half_w, boxes[:, 0] + half_w, boxes[:, 1] - half_h, boxes[:, 1] + half_h))
    return list(zip(np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3]),
                    np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2])))


def _overlap(a: tuple, b: tuple):
    """IoU of two boxes (x_min, x_max, y_min, y_max); 0 where they do not overlap or one has
    no area (never suppressed)."""
    width = min(a[1], b[1]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[2], b[2])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    area_a, area_b = (a[1] - a[0]) * (a[3] - a[2]), (b[1] - b[0]) * (b[3] - b[2])
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return 0.0
    return inter / union
