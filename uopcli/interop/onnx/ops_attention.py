"""ONNX's Attention (23, 24, 25) as a UOp graph, following the spec
(https://onnx.ai/onnx/operators/onnx__Attention.html) in the order onnx.reference's
op_attention.py computes it, which made ONNX's node cases:

  Q, K, V [batch, heads, seq, head_size] (3-D [batch, seq, heads·head_size] with
  q_num_heads / kv_num_heads); past_key/past_value are put before K and V (the outputs
  present_key/present_value); scores = (Q·√scale)(K·√scale)ᵀ, scale 1/√head_size by
  default; softcap: c·tanh(scores/c); the bias: attn_mask (additive, or bool: false is
  -inf; padded with -inf to the keys' length), the causal mask (a query i sees key
  j <= i + offset, offset = past length, or nonpad_kv_seqlen - q_len per batch), the
  sliding window (left/right_window_size, 25) and the padding of nonpad_kv_seqlen (24);
  softmax (in softmax_precision) with rows masked entirely giving 0; Y = softmax·V.
  With fewer key heads than query heads (GQA), each key head serves a group of queries.
The fourth output is the scores per qk_matmul_output_mode: 0 as the product gives them,
1 after the softcap, 2 with the bias added, 3 after the softmax (the spec's; the reference
gives the softcapped scores for 0 too).
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from .float64 import exp64
from .ops_tensor import FOLD_LIMIT, dtype_from_code, gather, tanh


def attention(ctx):
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    mask, past_key, past_value = ctx.x(3), ctx.x(4), ctx.x(5)
    nonpad = ctx.x(6) if ctx.since >= 24 else None
    rank = len(q.shape)
    if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
        ctx.refuse(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} must all be 3-D or all 4-D")
    if (past_key is None) != (past_value is None) or (nonpad is not None and past_key is not None):
        ctx.refuse("past_key and past_value come together, and not with nonpad_kv_seqlen")
    if rank == 3:
        q, k, v = _split_heads(ctx, q, k, v)
    elif ctx.since >= 25 and (ctx.attr("q_num_heads") is not None or ctx.attr("kv_num_heads") is not None):
        ctx.refuse("q_num_heads and kv_num_heads are for 3-D inputs only")
    if past_key is not None:
        k, v = past_key.cat(k, dim=2), past_value.cat(v, dim=2)
    present_key, present_value = k, v
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads:
        if heads % kv_heads or v.shape[1] != kv_heads:
            ctx.refuse(f"{heads} query heads are not a multiple of {kv_heads} key and value heads")
        k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    scale = ctx.attr("scale")
    root = math.sqrt(1 / math.sqrt(q.shape[3]) if scale is None else scale)
    raw = scores = (q * root).matmul((k * root).transpose(-2, -1))
    softcap = ctx.attr("softcap")
    if softcap > 0:
        scores = ctx.call(tanh, scores / softcap) * softcap
    bias = _bias(ctx, q, k, mask, past_key, nonpad)
    biased = scores if bias is None else scores + bias
    mode = ctx.attr("qk_matmul_output_mode")
    if mode not in (0, 1, 2, 3):
        ctx.refuse(f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3")
    weights = _masked_softmax(ctx, biased, bias)
    y = weights.matmul(v)
    if rank == 3:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    qk = {0: raw, 1: scores, 2: biased, 3: weights}[mode]
    return [y, present_key, present_value, qk][:ctx.output_count]


def _split_heads(ctx, q, k, v):
    """3-D [batch, seq, heads·size] inputs as 4-D [batch, heads, seq, size]."""
    heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if heads is None or kv_heads is None or heads < 1 or kv_heads < 1 \
            or q.shape[2] % heads or k.shape[2] % kv_heads or v.shape[2] % kv_heads:
        ctx.refuse(f"3-D inputs need q_num_heads and kv_num_heads dividing their last axes, got "
                   f"{heads} and {kv_heads} for Q {list(q.shape)}, K {list(k.shape)}, V {list(v.shape)}")

    def split(t, n):
        return t.reshape(t.shape[0], t.shape[1], n, t.shape[2] // n).permute(0, 2, 1, 3)
    return split(q, heads), split(k, kv_heads), split(v, kv_heads)


def _bias(ctx, q, k, mask, past_key, nonpad):
    """The additive bias [.., q_len, kv_len] of the mask, causality, window and padding
    (None when there is none). Positions a rule excludes get -inf."""
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = None
    if mask is not None:
        if mask.shape[-1] > kv_len:
            ctx.refuse(f"attn_mask {list(mask.shape)} is longer than the {kv_len} keys")
        if mask.shape[-1] < kv_len:  # the keys past the mask are masked
            pairs = ((0, 0),) * (len(mask.shape) - 1) + ((0, kv_len - mask.shape[-1]),)
            mask = mask.pad(pairs, value=False if mask.dtype.is_bool else -math.inf)
        bias = mask.where(q.const_like(0.0), -math.inf) if mask.dtype.is_bool else mask.cast(q.dtype)
    left, right = ctx.attr("left_window_size"), ctx.attr("right_window_size")
    if min(left, right) < -1:
        ctx.refuse(f"left_window_size {left} and right_window_size {right} must be -1 (unbounded) or >= 0")
    # offset: where query i stands among the keys (a past cache's length, or per batch
    # nonpad_kv_seqlen - q_len); diff[.., i, j] = i + offset - j
    if q_len * kv_len > FOLD_LIMIT:  # made when the graph runs (a 40,000² table was 12.8 GB when importing)
        rows = (UOp.arange(q_len, dtype=dtypes.int64).reshape(q_len, 1)
                - UOp.arange(kv_len, dtype=dtypes.int64).reshape(1, kv_len))
    else:
        rows = np.arange(q_len).reshape(q_len, 1) - np.arange(kv_len).reshape(1, kv_len)
    if nonpad is not None and past_key is None:
        table = rows.cast(nonpad.dtype) if isinstance(rows, UOp) else UOp.buffer(rows.astype(_int_numpy(nonpad)))
        diff = nonpad.reshape(-1, 1, 1, 1) - q_len + table
    else:
        diff = rows + (past_key.shape[2] if past_key is not None else 0)
    rules = []
    if ctx.attr("is_causal"):
        rules.append(_at_least(diff, 0))
    if left >= 0:
        rules.append(_at_most(diff, left))
    if right >= 0:
        rules.append(_at_least(diff, -right))
    if nonpad is not None:
        keys = UOp.buffer(np.arange(kv_len).reshape(1, 1, 1, kv_len).astype(_int_numpy(nonpad)))
        rules.append(keys < nonpad.reshape(-1, 1, 1, 1))
    for allowed in rules:
        term = _additive(q, allowed)
        bias = term if bias is None else bias + term
    return bias


def _int_numpy(t):
    return np.int32 if t.dtype.name == "int32" else np.int64


def _at_least(diff, bound):
    return diff >= bound if isinstance(diff, np.ndarray) else diff > bound - 1


def _at_most(diff, bound):
    return diff <= bound if isinstance(diff, np.ndarray) else diff < bound + 1


def _additive(q, allowed):
    """0 where allowed, -inf elsewhere, in Q's type (a constant when known at import)."""
    if isinstance(allowed, np.ndarray):
        return UOp.buffer(np.where(allowed, 0.0, -np.inf).astype(np.float16 if q.dtype.name == "float16"
                                                                  else np.float64 if q.dtype.name == "float64"
                                                                  else np.float32))
    return allowed.where(q.const_like(0.0), -math.inf)


def _masked_softmax(ctx, scores, bias):
    """softmax along the keys in softmax_precision, as the reference: the maximum of a row
    that is -inf everywhere counts as 0, a zero sum as 1, and a row that the bias masks
    entirely is 0."""
    precision = ctx.attr("softmax_precision")
    wide = scores
    if precision is not None:
        dtype = dtype_from_code(ctx, precision, "softmax_precision")
        if not dtype.is_float:
            ctx.refuse(f"softmax_precision {dtype.name} is not a float type")
        wide = scores.cast(dtype) if dtype is not scores.dtype else scores
    top = wide.max(-1, keepdim=True)
    top = top.eq(-math.inf).where(0.0, top)
    e = exp64(wide - top, overflows=False) if wide.dtype is dtypes.float64 else (wide - top).exp()  # builder's: |x| ulps in float64
    total = e.sum(-1, keepdim=True)
    weights = e / total.eq(0.0).where(1.0, total)
    if bias is not None:
        weights = bias.max(-1, keepdim=True).eq(-math.inf).where(0.0, weights)
    return weights.cast(scores.dtype) if weights.dtype is not scores.dtype else weights


def rotary_embedding(ctx):
    """RotaryEmbedding-23 (https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html): the
    first rotary_embedding_dim (R; 0: all) features of each head are R/2 pairs (x1, x2),
    the two halves or, interleaved, the even and odd features, each turned by its angle:
    (cos·x1 - sin·x2, sin·x1 + cos·x2); the rest pass. cos/sin [batch, seq, R/2], or
    [positions, R/2] picked by position_ids [batch, seq]. X is [batch, heads, seq, size],
    or 3-D [batch, seq, heads·size] with num_heads."""
    x, cos, sin, positions = ctx.x(0), ctx.x(1), ctx.x(2), ctx.x(3)
    shape = x.shape
    if len(shape) == 3:
        heads = ctx.attr("num_heads")
        if not heads or shape[2] % heads:
            ctx.refuse(f"a 3-D input {list(shape)} needs num_heads dividing its last axis, got {heads}")
        x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
    elif len(shape) != 4:
        ctx.refuse(f"input {list(shape)} is neither 3-D nor 4-D")
    size = x.shape[3]
    rotated = ctx.attr("rotary_embedding_dim") or size
    if rotated % 2 or rotated > size:
        ctx.refuse(f"rotary_embedding_dim {rotated} must be even and at most the head size {size}")
    if positions is not None:  # cache rows by position: [batch, seq, R/2]
        cos, sin = (ctx.call(gather, cache, positions, attrs={"axis": 0}) for cache in (cos, sin))
    batch, seq = (shape[0], shape[2]) if len(shape) == 4 else shape[:2]
    if cos.shape != (batch, seq, rotated // 2) or sin.shape != cos.shape:
        ctx.refuse(f"cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} (after position_ids) are not "
                   f"[{batch}, {seq}, {rotated // 2}]")
    # broadcast over the heads: axis 1 of [batch, heads, seq, R/2], axis 2 of [batch, seq, heads, R/2]
    heads_axis = 1 if len(shape) == 4 else 2
    cos, sin = cos.unsqueeze(heads_axis).cast(x.dtype), sin.unsqueeze(heads_axis).cast(x.dtype)
    part, rest = x.split([rotated, size - rotated], dim=3)
    if ctx.attr("interleaved"):
        pairs = part.reshape(*part.shape[:3], rotated // 2, 2)
        x1, x2 = (pairs.shrink((None,) * 4 + ((k, k + 1),)).squeeze(4) for k in (0, 1))
    else:
        x1, x2 = part.split(rotated // 2, dim=3)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if ctx.attr("interleaved"):
        part = real.unsqueeze(4).cat(imag.unsqueeze(4), dim=4).reshape(part.shape)
    else:
        part = real.cat(imag, dim=3)
    out = part if rotated == size else part.cat(rest, dim=3)
    return out.reshape(shape)
