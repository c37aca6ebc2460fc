"""tinygrad's layers and losses: linear, normalisation, attention, convolution (and its
transpose), pooling, interpolation, and the cross-entropy family."""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import GraphError
from ..core.ops import dtypes
from .common import in_float32, lowest, per_axis
from .movement import flat_padding_pairs

REDUCTIONS = ("mean", "sum", "none")


class NNMixin:
    """Layers and losses; every method returns a new UOp."""

    __slots__ = ()

    def dot(self, w):
        return self.matmul(w)  # tinygrad's dot: the last axis against w's second-to-last (or only)

    def linear(self, weight, bias=None):
        """x·w (+ b); a 1-D weight scales elementwise, as in tinygrad."""
        out = self * weight if len(weight.shape) == 1 else self.matmul(weight)
        return out if bias is None else out + bias

    def layernorm(self, axis=-1, eps: float = 1e-5):
        """(x - mean) / √(mean square deviation + eps) over `axis` (no scale or shift); float16
        computed in float32 and rounded once (common.in_float32), as torch's layer_norm."""
        def normalised(x):
            centred = x - x.mean(axis, keepdim=True)
            return centred * ((centred * centred).mean(axis, keepdim=True) + eps).rsqrt()
        return in_float32(self, normalised) if self.dtype.is_float else normalised(self)

    def batchnorm(self, weight, bias, mean, invstd, axis=1):
        """(x - mean)·weight·invstd + bias, the four shaped along `axis` (an int or a tuple)."""
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        shape = tuple(s if a in axes else 1 for a, s in enumerate(self.shape))
        out = self - mean.reshape(shape)
        if weight is not None:
            out = out * weight.reshape(shape)
        out = out * (invstd.reshape(shape) if len(invstd.shape) == len(axes) else invstd)
        return out if bias is None else out + bias.reshape(shape)

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
        """x / max(‖x‖_p, eps) along `dim` (p = 0: the count of non-zeros), as torch's."""
        norm = self.ne(0).sum(dim, keepdim=True) if p == 0 else self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return self / norm.maximum(eps)

    def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0,
                                     is_causal: bool = False, enable_gqa: bool = False):
        """softmax(q·kᵀ/√d + mask)·v; a bool mask keeps where true, is_causal keeps j ≤ i.
        enable_gqa (grouped-query attention): each key and value head serves a group of
        query heads along axis -3, repeated to their count (torch's and tinygrad's)."""
        if dropout_p:
            raise GraphError("scaled_dot_product_attention: dropout is random, and a graph here is not")
        if enable_gqa:
            heads = self.shape[-3]
            for name, t in (("key", key), ("value", value)):
                if len(t.shape) < 3 or heads % t.shape[-3]:
                    raise GraphError(f"scaled_dot_product_attention: {heads} query heads (axis -3 of "
                                     f"{list(self.shape)}) are not a multiple of the {name}'s {list(t.shape)}")
            key = key.repeat_interleave(heads // key.shape[-3], dim=-3)
            value = value.repeat_interleave(heads // value.shape[-3], dim=-3)
        scores = self.matmul(key.transpose(-2, -1)) / math.sqrt(self.shape[-1])
        if is_causal:
            if attn_mask is not None:
                raise GraphError("scaled_dot_product_attention: attn_mask and is_causal=True exclude each other")
            attn_mask = type(self).full(scores.shape, True).tril()
        if attn_mask is not None:
            if attn_mask.dtype.is_bool:
                attn_mask = attn_mask.where(0.0, -math.inf)
            scores = scores + attn_mask
        return scores.softmax(-1).matmul(value)

    def softmin(self, axis: int = -1):
        return (-self).softmax(axis)

    def conv2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0):
        """Cross-correlation of x[N, C·groups... ] with weight[F, C, *k] over the last len(k)
        axes (any number, not only 2), as tinygrad's conv2d: the windows of the padded input
        (`_pool`), expanded against the weight, multiplied and summed over C and the window.
        `padding` is an int, one per spatial axis, or (left, right, top, bottom, ...)."""
        (batch, channels), (filters, per_group), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if len(self.shape) != len(weight.shape) or groups * per_group != channels:
            raise GraphError(f"conv2d: input {list(self.shape)} does not fit weight {list(weight.shape)} "
                             f"with groups={groups}")
        windows = self._pad_value(_pool_padding(padding, len(kernel)), 0.0)._pool(kernel, stride, dilation)
        outputs = windows.shape[2:2 + len(kernel)]
        spatial = len(outputs)
        per_filter_group = filters // groups
        x = windows.reshape(batch, groups, per_group, 1, *outputs, *kernel)
        x = x.expand(batch, groups, per_group, per_filter_group, *outputs, *kernel)
        x = x.permute(0, 1, 3, *range(4, 4 + spatial), 2, *range(4 + spatial, 4 + 2 * spatial))
        # (batch, groups, filters per group, *outputs, channels per group, *kernel)
        w = weight.reshape(1, groups, per_filter_group, *(1,) * spatial, per_group, *kernel)
        out = (x * w).sum(tuple(range(-1 - len(kernel), 0))).reshape(batch, filters, *outputs)
        return out if bias is None else out + bias.reshape(1, filters, *(1,) * spatial)

    def conv_transpose2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0,
                         output_padding=0):
        """The transpose of conv2d (its gradient with respect to the input), as torch's and
        tinygrad's: x[N, C_in, *i] with weight[C_in, C_out / groups, *k] gives
        [N, C_out, *((i - 1)·s - p_before - p_after + d·(k - 1) + output_padding + 1)]. It is
        the conv2d of x with s - 1 zeros between its elements, padded by d·(k - 1) - p on
        each side (plus output_padding after), with the kernel flipped and each group's
        in and out channels swapped."""
        kernel = weight.shape[2:]
        spatial = len(kernel)
        in_channels, out_per_group = weight.shape[:2]
        if len(self.shape) != 2 + spatial or self.shape[1] != in_channels or in_channels % groups:
            raise GraphError(f"conv_transpose2d: input {list(self.shape)} does not fit weight {list(weight.shape)} "
                             f"with groups={groups}")
        strides, dilations = per_axis(stride, spatial), per_axis(dilation, spatial)
        extra = (output_padding,) * spatial if isinstance(output_padding, int) else tuple(output_padding)
        if len(extra) != spatial or not all(isinstance(e, int) and 0 <= e < max(s, d)
                                            for e, s, d in zip(extra, strides, dilations)):
            raise GraphError(f"conv_transpose2d: output_padding must be >= 0 and below the stride or dilation, "
                             f"got {output_padding!r}")
        pads = _pool_padding(padding, spatial)
        sizes = [(i - 1) * s - before - after + d * (k - 1) + e + 1
                 for i, s, d, k, (before, after), e in zip(self.shape[2:], strides, dilations, kernel, pads, extra)]
        if any(n <= 0 for n in sizes):
            raise GraphError(f"conv_transpose2d: padding {padding!r} leaves an output of size {sizes} "
                             f"for input {list(self.shape)} and weight {list(weight.shape)}")
        in_per_group = in_channels // groups
        w = weight.reshape(groups, in_per_group, out_per_group, *kernel).transpose(1, 2)
        w = w.flip(tuple(range(3, 3 + spatial))).reshape(groups * out_per_group, in_per_group, *kernel)
        x = self._spread(strides)
        around = tuple((d * (k - 1) - before, d * (k - 1) - after + e)
                       for k, d, (before, after), e in zip(kernel, dilations, pads, extra))
        return x.pad(((0, 0), (0, 0)) + around).conv2d(w, bias, groups=groups, dilation=dilations)

    def _spread(self, strides: tuple):
        """s - 1 zeros between neighbours along each trailing axis (as many as `strides`)."""
        if all(s == 1 for s in strides):
            return self
        lead, sizes = self.shape[:-len(strides)], self.shape[-len(strides):]
        x = self.reshape(*lead, *(n for size in sizes for n in (size, 1)))
        x = x.pad(((0, 0),) * len(lead) + tuple(p for s in strides for p in ((0, 0), (0, s - 1))))
        x = x.reshape(*lead, *(size * s for size, s in zip(sizes, strides)))
        return x.shrink((None,) * len(lead) + tuple((0, size * s - (s - 1)) for size, s in zip(sizes, strides)))

    def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                   count_include_pad: bool = True):
        """Means of the windows over the last len(kernel_size) axes (stride: the kernel).
        ceil_mode's last, partial windows divide by what they cover of the padded input."""
        kernel, strides, dilations = _pool_geometry(kernel_size, stride, dilation)
        regular = _pool_padding(padding, len(kernel))
        pads = self._ceil_mode_padding(regular, kernel, strides, dilations) if ceil_mode else regular
        axes = tuple(range(-len(kernel), 0))
        windows = self._pad_value(pads, 0.0)._pool(kernel, strides, dilations)
        if count_include_pad and not ceil_mode:
            return windows.mean(axes)
        if count_include_pad:  # the padding counts, the room ceil_mode adds does not
            lead = len(self.shape) - len(kernel)
            padded = self.shape[:lead] + tuple(i + b + a for i, (b, a) in zip(self.shape[lead:], regular))
            ones = type(self).full(padded, 1.0, self.dtype)
            extra = tuple((b - rb, a - ra) for (b, a), (rb, ra) in zip(pads, regular))
            counted = ones._pad_value(extra, 0.0)
        else:
            counted = type(self).full(self.shape, 1.0, self.dtype)._pad_value(pads, 0.0)
        return windows.sum(axes) / counted._pool(kernel, strides, dilations).sum(axes)

    def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                   return_indices: bool = False):
        """Maxima of the windows (padding counts as -inf); with return_indices also where
        each maximum is, as a flat index into the unpadded spatial axes (the first one)."""
        kernel, strides, dilations = _pool_geometry(kernel_size, stride, dilation)
        pads = _pool_padding(padding, len(kernel))
        if ceil_mode:
            pads = self._ceil_mode_padding(pads, kernel, strides, dilations)
        axes = tuple(range(-len(kernel), 0))
        windows = self._pad_value(pads, lowest(self.dtype))._pool(kernel, strides, dilations)
        pooled = windows.max(axes)
        if not return_indices:
            return pooled
        spatial = self.shape[-len(kernel):]
        count = math.prod(spatial)
        scores = self.arange(count, 0, -1).reshape(spatial)  # the first maximum scores highest
        scores = scores._pad_value(pads, lowest(dtypes.int32))._pool(kernel, strides, dilations)
        at_max = windows.eq(windows.max(axes, keepdim=True))
        return pooled, count - at_max.where(scores, 0).max(axes)

    def max_unpool2d(self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None):
        """max_pool2d's partial inverse: each value of x[N, C, *spatial] put at its flat index
        (max_pool2d(return_indices=True)'s) of the output, zeros elsewhere; the output's size
        from the pool's geometry, (i - 1)·s - padding + d·(k - 1) + 1, unless output_size
        names it. As tinygrad: a one-hot mask of the indices against the output's flat
        positions, multiplied in and summed (two values at one place add up)."""
        if len(self.shape) < 3 or indices.shape != self.shape:
            raise GraphError(f"max_unpool2d: values {list(self.shape)} and indices {list(indices.shape)} must be one "
                             f"shape (N, C, *spatial)")
        (batch, channels), spatial = self.shape[:2], self.shape[2:]
        if output_size is None:
            kernel, strides, dilations = _pool_geometry(kernel_size if not isinstance(kernel_size, int) else
                                                        (kernel_size,) * len(spatial), stride, dilation)
            pads = _pool_padding(padding, len(spatial))
            output_size = tuple((i - 1) * s - (before + after) + d * (k - 1) + 1 for i, k, d, s, (before, after)
                                in zip(spatial, kernel, dilations, strides, pads))
        else:
            output_size = tuple(output_size)[-len(spatial):]
        places = indices.reshape(batch, channels, 1, -1)._one_hot_along_dim(math.prod(output_size), 2)
        return places.where(self.reshape(batch, channels, 1, -1), 0).sum(3).reshape(batch, channels, *output_size)

    def _ceil_mode_padding(self, pads: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
        """ceil_mode's padding: room after each spatial axis for a last, partial window
        (ceil((i + pads - span) / s) + 1 windows, span = d·(k - 1) + 1), less where a window
        would start inside the after-padding (arXiv:1603.07285, relationship 15, as tinygrad)."""
        if len(self.shape) < len(kernel):
            raise GraphError(f"pool: a kernel of {len(kernel)} axes on a tensor of rank {len(self.shape)}")
        sizes = self.shape[len(self.shape) - len(kernel):]
        out = []
        for (before, after), i, k, s, d in zip(pads, sizes, kernel, strides, dilations):
            span, padded = d * (k - 1) + 1, i + before + after
            last_start = s * (-(-(padded - span) // s))  # the last window's start, ceil division
            out.append((before, after + last_start + span - padded - max(last_start - (before + i - 1), 0)))
        return tuple(out)

    def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False):
        """Resampled to `size` along the last len(size) axes, one axis after another (last
        first), as tinygrad's: gathers at integer positions made from arange. For an output
        position o of an axis from n to m elements:
          linear         x[lo]·(1 - t) + x[hi]·t at the source point p = (o + ½)·n/m - ½
                         (align_corners: o·(n - 1)/(m - 1)), clipped to [0, n - 1];
                         lo, hi = floor, ceil(p), t = p - lo (exact: integer numerator / den)
          nearest        x[floor(o·n/m)]
          nearest-exact  x[floor((o + ½)·n/m)]"""
        size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        if not size or len(size) > len(self.shape) or not all(isinstance(m, int) and m > 0 for m in size):
            raise GraphError(f"interpolate: size is 1 to {len(self.shape)} sizes > 0, got {size!r}")
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise GraphError(f"interpolate: mode is 'linear', 'nearest' or 'nearest-exact', got {mode!r}")
        if align_corners and mode != "linear":
            raise GraphError("interpolate: align_corners is for mode 'linear' only")
        x, grown = self, list(self.shape)
        for axis in range(len(self.shape) - 1, len(self.shape) - 1 - len(size), -1):
            n, m = self.shape[axis], size[axis - len(self.shape)]
            grown[axis] = m
            along = tuple(m if a == axis else 1 for a in range(len(self.shape)))

            def spread(positions):
                return positions.reshape(along).expand(tuple(grown))
            if mode == "linear":
                o = type(self).arange(m)
                num, den = (o * (n - 1), max(m - 1, 1)) if align_corners else ((o * 2 + 1) * n - m, m * 2)
                num = num.clamp(0, (n - 1) * den)
                low, high = spread(num // den), spread((num + den - 1) // den)
                weight = spread((num % den).cast(dtypes.float32) / den)
                x = x.gather(axis, low).lerp(x.gather(axis, high), weight)
            else:
                o = type(self).arange(m, dtype=dtypes.float32)
                x = x.gather(axis, spread(((o + 0.5 if mode == "nearest-exact" else o) * (n / m)).cast(dtypes.int32)))
        return x.cast(self.dtype)

    def sequential(self, layers):
        """Each of `layers` (callables) applied in turn."""
        out = self
        for layer in layers:
            out = layer(out)
        return out

    def dropout(self, p: float = 0.5):
        """The identity, as tinygrad's dropout outside training: a saved graph has no random
        source, so there is no training form to build."""
        if not 0 <= p <= 1:
            raise GraphError(f"dropout: p must be in [0, 1], got {p}")
        return self


    # ------------------------------------------------------------------ losses

    def cross_entropy(self, target, reduction: str = "mean", label_smoothing: float = 0.0):
        """-Σ_c y_c·log softmax(x)_c over the class axis (1, or 0 for a vector); `target` is
        class probabilities shaped like the logits, or class indices (one axis fewer)."""
        _check_smoothing(label_smoothing)
        if not self.shape or 0 in self.shape:
            raise GraphError(f"cross_entropy needs logits with classes, got shape {list(self.shape)}")
        classes_axis = 0 if len(self.shape) == 1 else 1
        classes = self.shape[classes_axis]
        if target.shape != self.shape:
            if target.shape != self.shape[:classes_axis] + self.shape[classes_axis + 1:]:
                raise GraphError(f"cross_entropy: target shape {list(target.shape)} fits neither the logits "
                                 f"{list(self.shape)} nor their class indices")
            target = target._one_hot_mask(classes, classes_axis).cast(self.dtype)
        target = (1 - label_smoothing) * target + label_smoothing / classes
        return _reduced(-(self.log_softmax(classes_axis) * target).sum(classes_axis), reduction)

    def sparse_categorical_crossentropy(self, target, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean"):
        """Cross entropy with class indices along the last axis; entries equal to
        `ignore_index` (unless -1) count for nothing, and "mean" divides by the others."""
        _check_smoothing(label_smoothing)
        log_probs = self.log_softmax()
        counted = target.ne(ignore_index) if ignore_index != -1 else type(self).full(target.shape, True)
        picked = target._one_hot_mask(self.shape[-1], len(target.shape)) & counted.unsqueeze(-1)
        smoothing = label_smoothing * counted.where(log_probs.mean(-1), 0.0)
        per_item = (1 - label_smoothing) * picked.where(log_probs, 0.0).sum(-1) + smoothing
        if reduction == "mean":
            return -per_item.sum() / counted.sum()
        return -_reduced(per_item, reduction)

    def nll_loss(self, target, weight=None, ignore_index: int | None = None, reduction: str = "mean"):
        """-x[n, target[n]]·w[target[n]] for log-probabilities x[N, C, ...]; "mean" divides
        by the weights counted (those not at ignore_index)."""
        weight = (type(self).full(target.shape, 1, target.dtype) if weight is None
                  else weight.gather(0, target.flatten()).reshape(target.shape))
        counted = weight if ignore_index is None else weight * target.ne(ignore_index)
        picked = -self.gather(1, target.unsqueeze(1)).squeeze(1) * counted
        return picked.sum() / counted.sum() if reduction == "mean" else _reduced(picked, reduction)

    def binary_crossentropy(self, target, reduction: str = "mean"):
        return _reduced(-target * self.log() - (1 - target) * (1 - self).log(), reduction)

    def binary_crossentropy_logits(self, target, reduction: str = "mean", pos_weight=None):
        """Binary cross entropy of σ(x), through log σ(x) and log σ(-x) (no log of a 0)."""
        positive = target if pos_weight is None else pos_weight * target
        return _reduced(-(positive * self.logsigmoid() + (1 - target) * (-self).logsigmoid()), reduction)


def _pool_padding(padding, spatial: int) -> tuple:
    """tinygrad's padding forms as (before, after) per spatial axis: an int for all sides,
    one int per axis, or 2·axes ints listing the last axis first (left, right, top, bottom)."""
    flat = [padding] * 2 * spatial if isinstance(padding, int) else list(padding)
    if len(flat) == spatial:
        flat = [p for p in reversed(flat) for _ in range(2)]
    if len(flat) != 2 * spatial or not all(isinstance(p, int) for p in flat):  # negative: cut, as tinygrad
        raise GraphError(f"padding is an int, {spatial} of them or {2 * spatial}, got {padding!r}")
    return flat_padding_pairs(flat)


def _pool_geometry(kernel_size, stride, dilation) -> tuple:
    """A pool's kernel (an int: 2 axes; a tuple: as many axes as it has), strides (None: the
    kernel's) and dilations, one int per axis."""
    kernel = per_axis(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size))
    return kernel, per_axis(kernel if stride is None else stride, len(kernel)), per_axis(dilation, len(kernel))


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise GraphError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def _reduced(loss, reduction: str):
    if reduction not in REDUCTIONS:
        raise GraphError(f"reduction is one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss
