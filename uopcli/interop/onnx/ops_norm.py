"""ONNX's normalisation layers beyond Batch/LayerNormalization (ops_nn.py): Instance,
Group and RMS normalisation, and local response normalisation (LRN). Same contract as
ops_tensor.py; the table in import_table.py gives versions and attributes."""

from __future__ import annotations

from .ops_tensor import axis_of, dtype_from_code


def stash_type(ctx):
    """The stash_type attribute's dtype: a float type, or the node is refused."""
    stash = dtype_from_code(ctx, ctx.attr("stash_type"), "stash_type")
    if not stash.is_float:
        ctx.refuse(f"stash_type {stash.name} is not a float type")
    return stash


def _stashed(ctx, x):
    """x in the stash_type the statistics are computed in (a float16 input is cast up, a
    float64 one down: GroupNormalization, as onnxruntime and onnx.reference compute it)."""
    stash = stash_type(ctx)
    return x.cast(stash) if x.dtype is not stash else x


def at_least_stashed(ctx, x):
    """x in stash_type where that is wider (a float16 input cast up to float32), else as it
    is: LayerNormalization and RMSNormalization, which onnxruntime and onnx.reference compute
    in float64 for a float64 input whatever stash_type says (torch exports float64 models
    with its default, float32)."""
    stash = stash_type(ctx)
    return x.cast(stash) if x.dtype.itemsize < stash.itemsize else x


def _standardised(x, axes: tuple[int, ...], epsilon: float):
    """(x - mean) / √(var + ε) over `axes` (the variance divides by the count)."""
    centred = x - x.mean(axes, keepdim=True)
    return centred * ((centred * centred).mean(axes, keepdim=True) + epsilon).rsqrt()


def _per_channel(v, rank: int):
    """A [C] vector shaped to broadcast along axis 1 of a rank-`rank` tensor."""
    return v.reshape(1, -1, *(1,) * (rank - 2))


def instance_normalization(ctx):
    """InstanceNormalization-6/22: y = scale·(x - mean)/√(var + ε) + B, the mean and variance
    of each instance and channel over the spatial axes; scale and B are [C]."""
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    rank = len(x.shape)
    if rank < 3 or scale.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
        ctx.refuse(f"input {list(x.shape)} with scale {list(scale.shape)} and B {list(bias.shape)}: "
                   f"need [N, C, spatial...] with [C] each")
    y = _standardised(x, tuple(range(2, rank)), ctx.attr("epsilon"))
    return y * _per_channel(scale, rank) + _per_channel(bias, rank)


def group_normalization(ctx):
    """GroupNormalization-18/21: the C channels in num_groups groups of C/num_groups; each
    instance's group is standardised over its channels and spatial axes (in stash_type,
    21), then y = scale·x̂ + bias, with scale and bias one per group (18) or per channel (21)."""
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    groups, rank = ctx.attr("num_groups"), len(x.shape)
    if groups is None or rank < 2 or groups < 1 or x.shape[1] % groups:
        ctx.refuse(f"input {list(x.shape)}: num_groups={groups} must divide the channels (axis 1)")
    channels = x.shape[1]
    per_row = groups if ctx.since == 18 else channels
    if scale.shape != (per_row,) or bias.shape != (per_row,):
        ctx.refuse(f"scale {list(scale.shape)} and bias {list(bias.shape)} must be [{per_row}]")
    wide = _stashed(ctx, x) if ctx.since >= 21 else x
    grouped = wide.reshape(x.shape[0], groups, -1)
    y = _standardised(grouped, (2,), ctx.attr("epsilon")).reshape(x.shape).cast(x.dtype)
    if per_row != channels:  # one value per group, repeated over its channels
        scale, bias = (v.repeat_interleave(channels // groups, dim=0) for v in (scale, bias))
    return y * _per_channel(scale, rank) + _per_channel(bias, rank)


def rms_normalization(ctx):
    """RMSNormalization-23: over axes [axis, rank): y = x / √(mean(x²) + ε) · scale, computed
    in stash_type or wider (at_least_stashed), scale broadcast against the normalised axes."""
    x, scale = ctx.x(0), ctx.x(1)
    rank = len(x.shape)
    axes = tuple(range(axis_of(ctx, ctx.attr("axis"), rank), rank))
    wide = at_least_stashed(ctx, x)
    normalised = wide * ((wide * wide).mean(axes, keepdim=True) + ctx.attr("epsilon")).rsqrt()
    return normalised.cast(x.dtype) * scale


def lrn(ctx):
    """LRN-13: y = x / (bias + alpha/size · Σ x²)^beta, the sum over the channels
    [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉] that exist (zeros beyond the edges)."""
    x, size = ctx.x(0), ctx.attr("size")
    if size is None or size < 1 or len(x.shape) < 3:
        ctx.refuse(f"size={size} must be >= 1, and input {list(x.shape)} needs [N, C, spatial...]")
    before, after = (size - 1) // 2, size // 2
    square = (x * x).pad(((0, 0), (before, after)) + ((0, 0),) * (len(x.shape) - 2))
    channels = x.shape[1]
    window = square[:, 0:channels]
    for k in range(1, size):
        window = window + square[:, k:k + channels]
    return x / (window * (ctx.attr("alpha") / size) + ctx.attr("bias")).pow(ctx.attr("beta"))
