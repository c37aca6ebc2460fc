"""ONNX's layer ops as UOp graphs: products, convolution (and its transpose), pooling,
normalisation and the losses (the recurrent layers are in ops_recurrent.py). Same contract as
ops_tensor.py; the table in import_table.py gives versions and attributes."""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from .ops_norm import at_least_stashed, stash_type
from .ops_tensor import FOLD_LIMIT, axis_of, ints_of, log_softmax_of

# ----------------------------------------------------------------------------- products


def matmul(ctx):
    """MatMul-13: numpy's matmul (1-D operands included, batch axes broadcast)."""
    a, b = ctx.x(0), ctx.x(1)
    if not a.shape or not b.shape:
        ctx.refuse("an operand of rank 0")
    if a.shape[-1] != (b.shape[0] if len(b.shape) == 1 else b.shape[-2]):
        ctx.refuse(f"inner sizes differ: {list(a.shape)} @ {list(b.shape)}")
    return a.matmul(b)


def gemm(ctx):
    """Gemm-13: alpha·A'·B' + beta·C, A' = Aᵀ with transA, B' = Bᵀ with transB, C broadcast."""
    a, b, c = ctx.x(0), ctx.x(1), ctx.x(2)
    if len(a.shape) != 2 or len(b.shape) != 2:
        ctx.refuse(f"A and B must be matrices, got {list(a.shape)} and {list(b.shape)}")
    a = a.permute(1, 0) if ctx.attr("transA") else a
    b = b.permute(1, 0) if ctx.attr("transB") else b
    if a.shape[1] != b.shape[0]:
        ctx.refuse(f"inner sizes differ: {list(a.shape)} @ {list(b.shape)} after transA/transB")
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    y = a.matmul(b)
    y = y if alpha == 1 else y * alpha
    if c is None or beta == 0:
        return y
    return y + (c if beta == 1 else c * beta)


# ----------------------------------------------------------------------------- windows


def _window_geometry(ctx, x: UOp, kernel: list[int], cut: bool = False) -> tuple[tuple, tuple, tuple[tuple[int, int], ...]]:
    """(strides, dilations, (before, after) per spatial axis) from the attributes, auto_pad
    included: SAME_UPPER/LOWER pad so that the output is ceil(in / stride), the odd one
    after (UPPER) or before (LOWER); VALID pads nothing. Where a window is shorter than
    the stride the spec's pad_shape, (out - 1)·s + d·(k - 1) + 1 - in, is negative: the
    pools (`cut`) take it as it is, cutting the input's ends as onnxruntime and
    onnx.reference do (halved toward 0, as onnxruntime's C++); Conv pads 0 there (the
    reference's max(0, ·))."""
    spatial = len(kernel)
    if len(x.shape) != spatial + 2:
        ctx.refuse(f"input {list(x.shape)} does not have N, C and {spatial} spatial axes")
    strides = tuple(ctx.attr("strides") or (1,) * spatial)
    dilations = tuple(ctx.attr("dilations") or (1,) * spatial)
    if len(strides) != spatial or len(dilations) != spatial or min(strides + dilations) < 1:
        ctx.refuse(f"strides {list(strides)} and dilations {list(dilations)} need {spatial} values >= 1")
    auto_pad = ctx.attr("auto_pad")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
            total = (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size
            total = total if cut else max(0, total)
            head = int((total if auto_pad == "SAME_UPPER" else total + 1) / 2)  # C's division, toward 0
            pairs.append((head, total - head))
        return strides, dilations, tuple(pairs)
    if auto_pad == "VALID":
        return strides, dilations, ((0, 0),) * spatial
    if auto_pad != "NOTSET":
        ctx.refuse(f"auto_pad={auto_pad!r} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    pads = list(ctx.attr("pads") or (0,) * (2 * spatial))
    if len(pads) != 2 * spatial or min(pads) < 0:
        ctx.refuse(f"pads {pads} needs {2 * spatial} values >= 0")
    return strides, dilations, tuple(zip(pads[:spatial], pads[spatial:]))


def _kernel(ctx, given: list[int] | None, fallback=None) -> list[int]:
    kernel = list(given or fallback or ())
    if not kernel or min(kernel) < 1:
        ctx.refuse(f"kernel_shape {kernel} needs sizes >= 1")
    return kernel


def _flat_padding(pairs) -> list[int]:
    """The builder's flat padding: (before, after) per axis, the last axis first."""
    return [p for before_after in reversed(pairs) for p in before_after]


def _one_padding(ctx) -> None:
    """Conv's and ConvTranspose's pads and a SAME/VALID auto_pad exclude each other (the
    spec; onnxruntime refuses the node, onnx.reference applies the pads): refused rather
    than one of them chosen."""
    auto_pad = ctx.attr("auto_pad")
    if auto_pad != "NOTSET" and ctx.attr("pads") is not None:
        ctx.refuse(f"pads and auto_pad={auto_pad!r} are both given: the spec allows one")


def conv(ctx):
    """Conv-11: cross-correlation of X[N, C, *in] with W[M, C/group, *k] (+ B[M]), any
    number of spatial axes; the padding is applied first, then the builder's conv2d."""
    _one_padding(ctx)
    x, w, b = ctx.x(0), ctx.x(1), ctx.x(2)
    kernel = _kernel(ctx, ctx.attr("kernel_shape"), w.shape[2:])
    if tuple(kernel) != tuple(w.shape[2:]):
        ctx.refuse(f"kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    strides, dilations, pairs = _window_geometry(ctx, x, kernel)
    group = ctx.attr("group")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        ctx.refuse(f"input {list(x.shape)} does not fit weight {list(w.shape)} with group={group}")
    padded = x.pad(((0, 0), (0, 0)) + pairs) if any(p != (0, 0) for p in pairs) else x
    for size, k, d in zip(padded.shape[2:], kernel, dilations):
        if size < (k - 1) * d + 1:
            ctx.refuse(f"the kernel {kernel} (dilations {list(dilations)}) is larger than the padded input")
    return padded.conv2d(w, b, groups=group, stride=strides, dilation=dilations)


def conv_transpose(ctx):
    """ConvTranspose-11/22: X[N, C, *in] with W[C, M/group, *k] (+ B[M]). The full output
    (every input element's kernel, stride apart, dilated) has s·(in - 1) + d·(k - 1) + 1
    elements per axis; the result is its window from pads_begin of size
    full + output_padding - pads_begin - pads_end (zeros beyond the full output). With
    output_shape (or auto_pad SAME_*: in·s) the pads are total = full + output_padding -
    output_shape, split with the odd one at the end for SAME_UPPER, at the start otherwise."""
    _one_padding(ctx)
    x, w, b = ctx.x(0), ctx.x(1), ctx.x(2)
    spatial = len(w.shape) - 2
    kernel = _kernel(ctx, ctx.attr("kernel_shape"), w.shape[2:])
    group = ctx.attr("group")
    if spatial < 1 or tuple(kernel) != tuple(w.shape[2:]) or len(x.shape) != spatial + 2 \
            or x.shape[1] != w.shape[0] or w.shape[0] % group:
        ctx.refuse(f"input {list(x.shape)} does not fit weight {list(w.shape)} with group={group} "
                   f"and kernel_shape {kernel}")
    strides = tuple(ctx.attr("strides") or (1,) * spatial)
    dilations = tuple(ctx.attr("dilations") or (1,) * spatial)
    extra = tuple(ctx.attr("output_padding") or (0,) * spatial)
    if len(strides) != spatial or len(dilations) != spatial or len(extra) != spatial \
            or min(strides + dilations) < 1 or min(extra) < 0:
        ctx.refuse(f"strides {list(strides)}, dilations {list(dilations)} and output_padding {list(extra)} "
                   f"need {spatial} values (>= 1, >= 1, >= 0)")
    full = [s * (i - 1) + d * (k - 1) + 1 for i, s, d, k in zip(x.shape[2:], strides, dilations, kernel)]
    starts, sizes = _conv_transpose_window(ctx, x, full, extra, strides)
    y = x.conv_transpose2d(w, None, groups=group, stride=strides, dilation=dilations)
    for axis, (start, size, n) in enumerate(zip(starts, sizes, full), start=2):
        y = _window(y, axis, start, size, n)
    return y if b is None else y + b.reshape(1, -1, *(1,) * spatial)


def _conv_transpose_window(ctx, x, full, extra, strides):
    """(start, size) of ConvTranspose's output window per spatial axis (see conv_transpose)."""
    spatial, auto_pad, shape = len(full), ctx.attr("auto_pad"), ctx.attr("output_shape")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        ctx.refuse(f"auto_pad={auto_pad!r} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    if shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = list(shape) if shape is not None else [i * s for i, s in zip(x.shape[2:], strides)]
        # the spec: output_shape holds the spatial sizes only (onnxruntime refuses [N, C, *spatial],
        # onnx.reference fails on it), so a model that gives N and C is not a valid model
        if len(shape) == spatial + 2:
            ctx.refuse(f"output_shape {shape} has N and C: it gives the {spatial} spatial sizes only")
        if len(shape) != spatial or min(shape) < 1:
            ctx.refuse(f"output_shape {shape} needs {spatial} sizes >= 1")
        totals = [n + e - o for n, e, o in zip(full, extra, shape)]
        if auto_pad == "SAME_UPPER":
            return [t // 2 for t in totals], shape
        return [t - t // 2 for t in totals], shape
    pads = [0] * (2 * spatial) if auto_pad == "VALID" else list(ctx.attr("pads") or (0,) * (2 * spatial))
    if len(pads) != 2 * spatial or min(pads) < 0:
        ctx.refuse(f"pads {pads} needs {2 * spatial} values >= 0")
    sizes = [n + e - before - after for n, e, before, after in zip(full, extra, pads[:spatial], pads[spatial:])]
    if min(sizes) < 1:
        ctx.refuse(f"pads {pads} leave an empty output")
    return pads[:spatial], sizes


def _window(y, axis: int, start: int, size: int, available: int):
    """y's elements [start, start + size) along `axis`, zeros where outside [0, available)."""
    before, after = max(0, -start), max(0, start + size - available)
    if before or after:
        y = y.pad(tuple((before, after) if a == axis else (0, 0) for a in range(len(y.shape))))
        start += before
    if start or size != y.shape[axis]:
        y = y.shrink(tuple((start, start + size) if a == axis else None for a in range(len(y.shape))))
    return y


def col2im(ctx):
    """Col2Im-18 (https://onnx.ai/onnx/operators/onnx__Col2Im.html): input [N, C·Πblock, L]
    holds the L blocks of an image [N, C, *image_shape] (L in row-major order of the block
    positions), each block's elements summed back at their places (torch's fold). That is a
    transposed convolution of [N, C·Πblock, *counts] with a one-hot weight (one block
    element per channel, groups C) whose padded output is cut to the image."""
    x = ctx.x(0)
    image = ints_of(ctx, 1, "image_shape")
    block = ints_of(ctx, 2, "block_shape")
    spatial = len(image)
    strides = list(ctx.attr("strides") or [1] * spatial)
    dilations = list(ctx.attr("dilations") or [1] * spatial)
    pads = list(ctx.attr("pads") or [0] * (2 * spatial))
    if len(x.shape) != 3 or len(block) != spatial or len(strides) != spatial or len(dilations) != spatial \
            or len(pads) != 2 * spatial or min(block + strides + dilations) < 1 or min(pads) < 0:
        ctx.refuse(f"input {list(x.shape)} [N, C·Πblock, L], image_shape {image}, block_shape {block}, strides "
                   f"{strides}, dilations {dilations} and pads {pads} do not fit")
    size = math.prod(block)
    counts = [(i + before + after - d * (b - 1) - 1) // s + 1
              for i, b, s, d, before, after in zip(image, block, strides, dilations, pads[:spatial], pads[spatial:])]
    if x.shape[1] % size or min(counts) < 1 or math.prod(counts) != x.shape[2]:
        ctx.refuse(f"input {list(x.shape)} does not hold {size}-element blocks at {counts} positions")
    channels = x.shape[1] // size
    if channels * size * size > FOLD_LIMIT:  # made when the graph runs: element e of the block is 1 at place e
        places = UOp.arange(size, dtype=dtypes.int64)
        eye = places.reshape(size, 1, *(1,) * spatial).eq(places.reshape(1, 1, *block)).cast(x.dtype)
        one_hot = eye.reshape(1, size, 1, *block).expand(channels, size, 1, *block).reshape(channels * size, 1, *block)
    else:
        one_hot = UOp.buffer(np.tile(np.eye(size, dtype=x.dtype.np).reshape(size, 1, *block),
                                     (channels,) + (1,) * (spatial + 1)))
    y = x.reshape(x.shape[0], x.shape[1], *counts).conv_transpose2d(
        one_hot, None, groups=channels, stride=tuple(strides), dilation=tuple(dilations))
    for axis, (start, length, n) in enumerate(zip(pads[:spatial], image, y.shape[2:]), start=2):
        y = _window(y, axis, start, length, n)  # zeros where the blocks leave the padded image uncovered
    return y


def _pool_arguments(ctx, x: UOp) -> tuple:
    kernel = _kernel(ctx, ctx.attr("kernel_shape"))
    strides, dilations, pairs = _window_geometry(ctx, x, kernel, cut=True)
    ceil_mode = bool(ctx.attr("ceil_mode"))
    for size, (before, after), k, d in zip(x.shape[2:], pairs, kernel, dilations):
        if size + before + after < (k - 1) * d + 1:
            ctx.refuse(f"the kernel {kernel} (dilations {list(dilations)}) is larger than the padded input")
        if max(before, after) >= (k - 1) * d + 1:
            ctx.refuse(f"a padding of {max(before, after)} is as large as the window: a window in the padding alone")
    return tuple(kernel), strides, dilations, _flat_padding(pairs), ceil_mode


def max_pool(ctx):
    """MaxPool-12: the padding never wins; ceil_mode adds a last, partial window (none that
    would start in the padding after the input). Indices (int64, not differentiable): where
    each window's first maximum is, flat in X [N, C, *spatial] without the padding; the
    spatial axes row-major (storage_order 0) or column-major (1: the first axis fastest)."""
    x = ctx.x(0)
    kernel, strides, dilations, padding, ceil_mode = _pool_arguments(ctx, x)
    if ctx.output_count == 1:
        return x.max_pool2d(kernel, strides, dilations, padding, ceil_mode)
    order = ctx.attr("storage_order")
    if order not in (0, 1):
        ctx.refuse(f"storage_order={order} is not 0 (row-major) or 1 (column-major)")
    y, where = x.max_pool2d(kernel, strides, dilations, padding, ceil_mode, return_indices=True)
    sizes = x.shape[2:]
    if order == 1:  # the row-major position's coordinates, weighed column-major
        column = None
        for axis, size in enumerate(sizes):
            coordinate = where.cdiv(math.prod(sizes[axis + 1:])).cmod(size)
            term = coordinate * math.prod(sizes[:axis]) if axis else coordinate
            column = term if column is None else column + term
        where = column
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * len(sizes))
    return [y, where.cast(dtypes.int64) + UOp.buffer(planes * math.prod(sizes))]


def max_unpool(ctx):
    """MaxUnpool-9/11/22 (https://onnx.ai/onnx/operators/onnx__MaxUnpool.html): X[N, C, *in]
    put at its Indices (MaxPool's: flat in [N, C, *out]) of a zero tensor of the pool's input
    shape, out = (in - 1)·stride - pads + kernel; with output_shape that tensor is then
    padded at the end to it (onnx.reference's reading, which made the node cases;
    onnxruntime's and PyTorch's read the indices in output_shape). An index is taken within
    its own (n, c) plane, as MaxPool's always are."""
    x, indices = ctx.x(0), ctx.x(1)
    kernel = _kernel(ctx, ctx.attr("kernel_shape"))
    spatial = len(kernel)
    strides = list(ctx.attr("strides") or [1] * spatial)
    pads = list(ctx.attr("pads") or [0] * (2 * spatial))
    if len(x.shape) != spatial + 2 or indices.shape != x.shape or len(strides) != spatial \
            or len(pads) != 2 * spatial or min(strides) < 1 or min(pads) < 0:
        ctx.refuse(f"X {list(x.shape)} and I {list(indices.shape)} [N, C, *{spatial} axes], strides {strides} "
                   f"and pads {pads} do not fit kernel_shape {kernel}")
    sizes = [(i - 1) * s - before - after + k for i, s, k, before, after
             in zip(x.shape[2:], strides, kernel, pads[:spatial], pads[spatial:])]
    shape = ints_of(ctx, 2, "output_shape")
    shape = sizes if shape is None else shape[-spatial:]
    if min(sizes) < 1 or len(shape) != spatial or any(n < m for n, m in zip(shape, sizes)):
        ctx.refuse(f"the unpooled sizes {sizes} are empty, or larger than output_shape {shape}")
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * spatial)
    within = indices.cast(dtypes.int64) - UOp.buffer(planes * math.prod(sizes))
    y = x.max_unpool2d(within, kernel, strides, output_size=sizes)
    grow = [m - n for n, m in zip(sizes, shape)]
    return y.pad(((0, 0), (0, 0)) + tuple((0, g) for g in grow)) if any(grow) else y


def average_pool(ctx):
    """AveragePool-19: means of the windows; the padding counts with count_include_pad."""
    x = ctx.x(0)
    kernel, strides, dilations, padding, ceil_mode = _pool_arguments(ctx, x)
    return x.avg_pool2d(kernel, strides, dilations, padding, ceil_mode, bool(ctx.attr("count_include_pad")))


def global_average_pool(ctx):
    x = ctx.x(0)
    if len(x.shape) < 3:
        ctx.refuse(f"input {list(x.shape)} has no spatial axes")
    return x.mean(tuple(range(2, len(x.shape))), keepdim=True)


# ----------------------------------------------------------------------------- normalisation


def batch_normalization(ctx):
    """BatchNormalization-15: (x - mean)/√(var + ε)·scale + B over axis 1. Inference uses
    the given mean and var; training_mode uses the batch's (the variance divides by the
    count) and also outputs the running statistics, input·momentum + batch·(1 - momentum)."""
    x, scale, bias, mean, var = (ctx.x(i) for i in range(5))
    if len(x.shape) < 2:
        ctx.refuse(f"input {list(x.shape)} has no channel axis")
    epsilon = ctx.attr("epsilon")
    if not ctx.attr("training_mode"):
        if ctx.output_count > 1:
            ctx.refuse("running_mean and running_var are outputs only in training_mode")
        return x.batchnorm(scale, bias, mean, (var + epsilon).rsqrt())
    axes = (0,) + tuple(range(2, len(x.shape)))
    batch_mean = x.mean(axes)
    centred = x - batch_mean.reshape(1, -1, *(1,) * (len(x.shape) - 2))
    batch_var = (centred * centred).mean(axes)
    y = x.batchnorm(scale, bias, batch_mean, (batch_var + epsilon).rsqrt())
    momentum = ctx.attr("momentum")
    running = [mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)]
    return [y, *running][:ctx.output_count]


def layer_normalization(ctx):
    """LayerNormalization-17: over axes [axis, rank): (x - mean)·invstd·Scale + B, invstd =
    1/√(mean((x - mean)²) + ε), computed in stash_type or wider (float32: a float16 input is
    cast up and the result back; a float64 one stays float64, see at_least_stashed). Mean and
    InvStdDev are of stash_type, the normalised axes kept as 1."""
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    rank = len(x.shape)
    axes = tuple(range(axis_of(ctx, ctx.attr("axis"), rank), rank))
    wide = at_least_stashed(ctx, x)
    mean = wide.mean(axes, keepdim=True)
    centred = wide - mean
    invstd = ((centred * centred).mean(axes, keepdim=True) + ctx.attr("epsilon")).rsqrt()
    y = (centred * invstd).cast(x.dtype) if wide.dtype is not x.dtype else centred * invstd
    y = y * scale
    y = y if bias is None else y + bias
    stash = stash_type(ctx)  # Mean's and InvStdDev's type (their casts go unread when only Y is asked for)
    return [y, *(v.cast(stash) if v.dtype is not stash else v for v in (mean, invstd))][:ctx.output_count]


# ----------------------------------------------------------------------------- loss


def softmax_cross_entropy_loss(ctx):
    """SoftmaxCrossEntropyLoss-13: scores [N, C, d...], labels [N, d...]: the negative log
    likelihood (below) of log_softmax(scores) along axis 1. The second output is
    log_softmax(scores)."""
    scores = ctx.x(0)
    log_prob = log_softmax_of(scores, 1) if len(scores.shape) >= 2 else scores  # float64: log_softmax64
    return [_negative_log_likelihood(ctx, log_prob), log_prob][:ctx.output_count]


def negative_log_likelihood_loss(ctx):
    """NegativeLogLikelihoodLoss-13/22: input [N, C, d...] (log-probabilities), target
    [N, d...]: loss = -weight[target]·input[target] along axis 1 (below)."""
    return _negative_log_likelihood(ctx, ctx.x(0))


def _negative_log_likelihood(ctx, log_prob):
    """-w[label]·log_prob[label] along axis 1 for labels ctx.x(1) and weights ctx.x(2), zero
    (and weightless) where the label equals ignore_index; reduced by "mean" (over the
    weights taken part, or the count), "sum" or "none"."""
    labels, weights = ctx.x(1), ctx.x(2)
    if labels.dtype not in (dtypes.int32, dtypes.int64):  # the spec's Tind; torch exports soft labels as floats
        name = "labels" if ctx.op == "SoftmaxCrossEntropyLoss" else "target"
        ctx.refuse(f"{name} are {labels.dtype.name}{list(labels.shape)}: {ctx.op} takes class indices, int32 or "
                   f"int64 (the spec's); float labels (class probabilities, as torch exports F.cross_entropy with "
                   f"soft labels) are no valid ONNX, and onnxruntime refuses them too")
    if len(log_prob.shape) < 2 or labels.shape != log_prob.shape[:1] + log_prob.shape[2:]:
        ctx.refuse(f"labels {list(labels.shape)} do not fit scores {list(log_prob.shape)}")
    classes = log_prob.shape[1]
    mask = labels._one_hot_mask(classes, 1)  # [N, C, d...]: true at the label
    ignore = ctx.attr("ignore_index")
    if ignore is not None:
        mask = mask & labels.ne(ignore).unsqueeze(1)
    picked = mask.where(log_prob, 0).sum(1)
    if weights is None:
        taken = mask.where(log_prob.const_like(1.0), 0.0).sum(1)
    else:
        taken = mask.where(weights.reshape(1, classes, *(1,) * (len(log_prob.shape) - 2)), 0.0).sum(1)
    loss = -(picked * taken) if weights is not None else -picked
    reduction = ctx.attr("reduction")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / taken.sum()
    ctx.refuse(f"reduction={reduction!r} is not none, sum or mean")
