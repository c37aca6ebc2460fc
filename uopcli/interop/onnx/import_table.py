"""The ONNX ops the importer takes: one row per op (ai.onnx domain).

A row gives the function that builds the op (ops_tensor.py, ops_nn.py), the versions of
the op's schema whose meaning it follows (the `since_version`s of the ONNX operator spec,
https://onnx.ai/onnx/operators/; a model's opset picks one, and a version not listed is
refused), and every attribute it reads with its default (an attribute a node carries that
is not listed is refused, by name). `folds` says whether a node whose inputs are all known
at import (constants, shapes; never weights) is computed then, to a constant: shape
subgraphs (Shape -> Gather -> Concat -> Reshape) become plain shapes that way.

Attributes whose spec default depends on the version (Softmax's axis: 1 before 13, -1
from 13) have default None here and the function decides.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from uopcli import UOp, dtypes

from . import ops_activation as act
from . import ops_exact as x
from . import ops_index as ix
from . import ops_math as m
from . import ops_nn as nn
from . import ops_reduce as red
from . import ops_attention as att
from . import ops_grid as grid
from . import ops_norm as norm
from . import ops_quant as q
from . import ops_recurrent as rec
from . import ops_resize as rs
from . import ops_roi as roi
from . import ops_sequence as sq
from . import ops_signal as sig
from . import ops_tensor as t


class OpRow(NamedTuple):
    build: Callable
    versions: tuple[int, ...]
    attributes: dict
    folds: bool = True


def _row(build, versions, folds=True, **attributes) -> OpRow:
    # an ONNX float attribute is a float32: its default too (LeakyRelu's 0.01 is 0.01f, as
    # onnxruntime takes it; the decimal was 2e-8 off it in a float64 model)
    defaults = {k: float(np.float32(v)) if type(v) is float else v for k, v in attributes.items()}
    return OpRow(build, tuple(versions), defaults, folds)


def _float32_inside(build, widened=None):
    """`build` computed in float32 where its float16 inputs are (by `widened` if given: a
    form float32 needs that float32's own graphs keep as they were), its float32 results
    rounded to float16 once at the end, as onnxruntime does for the ops it has no float16
    kernel for (float32 kernels between casts) and numpy for its float16 reductions (float32
    accumulators). For the ops whose float16 intermediates overflow or round where the
    result fits: sums of many values to a result of their size (a mean of 4,500s, a pool of
    20,000s was inf), squares (Asinh's x², LRN's Σx² from |x| ~ 300), and the chains of a
    few roundings each (Sigmoid, Gelu, Softplus, the normalisations: 200-20,000 ulps
    off; bench/RESULTS-float16.md)."""
    return _computed_in(dtypes.float32, (dtypes.float16,), build, widened)


def _float64_inside(build):
    """`build` computed in float64 where its inputs are float32 or float16, its results
    rounded back once: for the elementwise ops whose float64 forms (float64.py) are accurate
    to a few float64 ulps, so that the rounded result is the correctly rounded one but for
    near ties, where the builder's float32 forms were up to 17 ulps off (eˣ as 2^(x·log2 e):
    the product rounds) or lost every digit (log(1 + e^-|x|) is 0 below x = -17: Softplus,
    Mish). float16 goes straight to float64 (through float32 it would round twice)."""
    return _computed_in(dtypes.float64, (dtypes.float32, dtypes.float16), build)


def _computed_in(wide, narrow: tuple, build, widened=None):
    """The row `build` (or `widened`, a form of it for the wide dtype) run on its inputs of a
    `narrow` dtype cast to `wide`, its `wide` results cast back, once, to the first such
    input's dtype; a row with no such input runs as it is."""
    def row(ctx):
        chosen = [i for i, v in enumerate(ctx.inputs) if v is not None and v.dtype in narrow]
        if not chosen:
            return build(ctx)
        back = ctx.x(chosen[0]).dtype
        result = (widened or build)(ctx.with_inputs({i: ctx.x(i).cast(wide) for i in chosen}))
        rounded = [r.cast(back) if isinstance(r, UOp) and r.dtype is wide else r
                   for r in (result if isinstance(result, list) else [result])]
        return rounded if isinstance(result, list) else rounded[0]
    row.__name__, row.__doc__, row.__wrapped__ = build.__name__, build.__doc__, build
    return row


# the window attributes of Conv, MaxPool and AveragePool
_WINDOW = dict(auto_pad="NOTSET", kernel_shape=None, pads=None, strides=None, dilations=None)
_REDUCE = dict(keepdims=1, noop_with_empty_axes=0)
# the attributes RNN, GRU and LSTM share (ops_recurrent.py)
_RECURRENT = dict(activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
                  hidden_size=None, layout=0)
# Versions after 13 that only widen the element types (bfloat16, float8, int4, ...) keep
# the meaning; they are listed where the types we import are unchanged.
_LATER = (19, 21, 23, 24, 25)

TABLE: dict[str, OpRow] = {
    # -- elementwise: numpy broadcasting from version 7 (Add-7 .. Add-14 differ in types only)
    "Add": _row(t.add, (7, 13, 14)),                          # a + b
    "Sub": _row(t.sub, (7, 13, 14)),                          # a - b
    "Mul": _row(t.mul, (7, 13, 14)),                          # a * b
    "Div": _row(t.div, (7, 13, 14)),                          # a / b; integers truncate
    "Pow": _row(t.pow_, (7, 12, 13, 15)),                     # a ** b (12: mixed types)
    "Sqrt": _row(t.sqrt, (6, 13)),                            # √x
    "Exp": _row(_float64_inside(t.exp), (6, 13)),             # eˣ
    "Log": _row(_float32_inside(t.log), (6, 13)),             # ln x
    "Neg": _row(t.neg, (6, 13)),                              # -x
    "Abs": _row(t.abs_, (6, 13)),                             # |x|
    "Erf": _row(_float32_inside(t.erf), (9, 13)),  # erf x
    "Tanh": _row(_float32_inside(t.tanh), (6, 13)),           # tanh x
    "Sigmoid": _row(_float32_inside(t.sigmoid), (6, 13)),  # 1 / (1 + e⁻ˣ)
    "Relu": _row(t.relu, (6, 13, 14)),                        # max(x, 0)
    "Gelu": _row(_float32_inside(t.gelu), (20,), approximate="none"),  # x·Φ(x)
    "Softmax": _row(t.softmax, (1, 11, 13), axis=None),       # eˣ / Σ eˣ along axis
    "LogSoftmax": _row(_float32_inside(t.log_softmax), (1, 11, 13), axis=None),
    "Equal": _row(t.equal, (11, 13, 19)),                     # a == b
    "Less": _row(t.less, (9, 13)),                            # a < b
    "Greater": _row(t.greater, (9, 13)),                      # a > b
    "GreaterOrEqual": _row(t.greater_or_equal, (12, 16)),     # a >= b (false with nan)
    "And": _row(t.and_, (7,)),                                # a and b
    "Not": _row(t.not_, (1,)),                                # not a
    "IsNaN": _row(t.isnan, (9, 13, 20)),                      # x != x
    "Where": _row(t.where, (9, 16)),                          # cond ? a : b
    "Cast": _row(t.cast, (6, 9, 13) + _LATER + (28,), to=None, saturate=1),  # saturate: float8 only
    "CastLike": _row(t.cast_like, (15,) + _LATER, saturate=1),
    "BitCast": _row(t.bitcast, (26,), to=None),             # the same bytes, another type of the same width
    "Identity": _row(t.identity, (1, 13, 14, 16) + _LATER),
    "Dropout": _row(t.dropout, (12, 13, 22), seed=None),      # the identity: at inference, or a ratio of 0
    # -- products, windows, normalisation, recurrences, losses
    "MatMul": _row(nn.matmul, (9, 13)),
    "Gemm": _row(_float32_inside(nn.gemm), (11, 13), alpha=1.0, beta=1.0, transA=0, transB=0),
    "Conv": _row(nn.conv, (11, 22), group=1, **_WINDOW),
    "MaxPool": _row(nn.max_pool, (10, 11, 12, 22), ceil_mode=0, storage_order=0, **_WINDOW),
    "MaxUnpool": _row(nn.max_unpool, (9, 11, 22), kernel_shape=None, pads=None, strides=None),  # MaxPool's inverse
    "AveragePool": _row(_float32_inside(nn.average_pool), (11, 19, 22), ceil_mode=0, count_include_pad=0, **_WINDOW),
    "GlobalAveragePool": _row(_float32_inside(nn.global_average_pool), (1, 22)),
    "BatchNormalization": _row(_float32_inside(nn.batch_normalization), (9, 14, 15), epsilon=1e-5, momentum=0.9,
                               training_mode=0),
    "LayerNormalization": _row(_float32_inside(nn.layer_normalization), (17,), axis=-1, epsilon=1e-5, stash_type=1),
    "LSTM": _row(_float32_inside(rec.lstm), (7, 14, 22), folds=False, input_forget=0, **_RECURRENT),
    "SoftmaxCrossEntropyLoss": _row(nn.softmax_cross_entropy_loss, (12, 13), ignore_index=None, reduction="mean"),
    # -- reductions: axes an attribute before ReduceMean/Max-18 and ReduceSum-13, an input after
    "ReduceMean": _row(_float32_inside(t.reduce_mean), (11, 13, 18), axes=None, **_REDUCE),
    "ReduceSum": _row(t.reduce_sum, (11, 13), axes=None, **_REDUCE),
    "ReduceMax": _row(t.reduce_max, (11, 12, 13, 18, 20), axes=None, **_REDUCE),
    # -- shapes, movement, indexing
    "Shape": _row(t.shape, (13, 15) + _LATER, start=0, end=None),
    "Reshape": _row(t.reshape, (13, 14) + _LATER, allowzero=0),
    "Transpose": _row(t.transpose, (13,) + _LATER, perm=None),
    "Flatten": _row(t.flatten, (11, 13) + _LATER, axis=1),
    "Squeeze": _row(t.squeeze, (11, 13) + _LATER, axes=None),
    "Unsqueeze": _row(t.unsqueeze, (11, 13) + _LATER, axes=None),
    "Concat": _row(t.concat, (11, 13), axis=None),
    "Split": _row(t.split, (11, 13, 18), axis=0, split=None, num_outputs=None),
    "Slice": _row(t.slice_, (10, 11, 13)),
    "Gather": _row(t.gather, (11, 13), axis=0),
    "GatherElements": _row(t.gather_elements, (11, 13), axis=0),
    "GatherND": _row(t.gather_nd, (12, 13), batch_dims=0),
    "Expand": _row(t.expand, (8, 13)),
    "Trilu": _row(t.trilu, (14,), upper=1),
    # -- what uopgrad's exporter writes besides (ops_exact.py), so its files read back
    "Reciprocal": _row(x.reciprocal, (6, 13)),                # 1 / x, IEEE (1/-0.0 = -inf)
    "Floor": _row(x.floor, (6, 13)),                          # ⌊x⌋
    "Ceil": _row(x.ceil, (6, 13)),                            # ⌈x⌉
    "Round": _row(x.round_, (11, 22)),                        # nearest, halves to even, sign kept
    "IsInf": _row(x.isinf, (10, 20), detect_positive=1, detect_negative=1),
    "Max": _row(x.max_, (8, 12, 13)),                         # elementwise max of n inputs, broadcast
    "Mod": _row(m.mod, (10, 13, 28), fmod=0),                    # fmod 0: divisor's sign; 1: dividend's
    "Or": _row(x.or_, (7,)),                                  # a or b (bools)
    "Xor": _row(x.xor, (7,)),                                 # a xor b (bools)
    "BitwiseAnd": _row(x.bitwise_and, (18,)),                 # a & b (integers)
    "BitwiseOr": _row(x.bitwise_or, (18,)),                   # a | b
    "BitwiseXor": _row(x.bitwise_xor, (18,)),                 # a ^ b
    "BitwiseNot": _row(x.bitwise_not, (18,)),                 # ~a
    "BitShift": _row(m.bit_shift, (11, 28), direction=None),  # a << b, a >> b (28: signed too)
    "Det": _row(m.det, (11, 22)),                              # Π pivots of partial-pivoting elimination
    "Einsum": _row(x.einsum, (12, 28), equation=None),         # Σ over the letters not in the output
    "Pad": _row(x.pad, (11, 13, 18, 19, 21, 23, 24, 25), mode="constant"),  # pads [begins, ends]; 4 modes
    "ReduceProd": _row(_float32_inside(x.reduce_prod), (11, 13, 18), axes=None, **_REDUCE),  # Π over axes
    # -- values known at import
    "Constant": _row(t.constant, (12, 13) + _LATER, value=None, value_float=None, value_floats=None,
                     value_int=None, value_ints=None),
    "ConstantOfShape": _row(t.constant_of_shape, (9, 20) + _LATER[1:], value=None),
    "Range": _row(ix.range_, (11, 27), stash_type=1),
    # -- an output's shape counted from values: those must be known at import (ops_index.py)
    "Compress": _row(ix.compress, (9, 11, 28), axis=None),      # numpy.compress: slices where the condition holds
    "NonZero": _row(ix.non_zero, (9, 13)),                    # the indices of nonzero elements, [rank, count]
    "Unique": _row(ix.unique, (11, 28), axis=None, sorted=1),  # numpy.unique, first occurrences, inverse, counts
    "NonMaxSuppression": _row(ix.non_max_suppression, (10, 11), center_point_box=0),  # kept boxes, [count, 3]
    # -- layer ops of issue 29 (ops_norm.py, ops_nn.py, ops_recurrent.py, ops_resize.py, ops_grid.py, ops_roi.py,
    #    ops_attention.py); the spec of each: https://onnx.ai/onnx/operators/onnx__<Op>.html
    "InstanceNormalization": _row(_float32_inside(norm.instance_normalization), (6, 22), epsilon=1e-5),  # per instance and channel
    "GroupNormalization": _row(_float32_inside(norm.group_normalization), (18, 21), epsilon=1e-5, num_groups=None,
                               stash_type=1),                 # 18: scale per group; 21: per channel
    "RMSNormalization": _row(norm.rms_normalization, (23,), axis=-1, epsilon=1e-5, stash_type=1),  # x/√(mean x²+ε)·s
    "LRN": _row(_float32_inside(norm.lrn), (1, 13), alpha=1e-4, beta=0.75, bias=1.0,
                size=None),                                   # x/(bias + α/n·Σ x²)^β
    "ConvTranspose": _row(nn.conv_transpose, (11, 22), group=1, output_padding=None, output_shape=None,
                          **_WINDOW),                         # conv's gradient wrt its input, windowed
    "Col2Im": _row(nn.col2im, (18,), dilations=None, pads=None, strides=None),  # blocks summed back: fold
    "RNN": _row(_float32_inside(rec.rnn), (7, 14, 22), folds=False,
                **_RECURRENT),                                # h' = f(xWᵀ + hRᵀ + b); 14: layout
    "GRU": _row(_float32_inside(rec.gru), (7, 14, 22), folds=False, linear_before_reset=0,
                **_RECURRENT),                                # gates z, r, h
    "Resize": _row(_float32_inside(rs.resize), (10, 11, 13, 18, 19), antialias=0, axes=None,
                   coordinate_transformation_mode="half_pixel",
                   cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
                   mode="nearest", nearest_mode="round_prefer_floor"),  # scales/sizes known at import
    "Upsample": _row(rs.upsample, (7, 9), mode="nearest", scales=None),  # Resize-10's asymmetric resampling
    "Attention": _row(_float32_inside(att.attention), (23, 24, 25), is_causal=0, kv_num_heads=None, q_num_heads=None,
                      qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None,
                      left_window_size=-1, right_window_size=-1),  # 24: nonpad_kv_seqlen; 25: windows
    "RotaryEmbedding": _row(_float32_inside(att.rotary_embedding), (23,), interleaved=0, num_heads=None,
                            rotary_embedding_dim=0),    # RoPE: feature pairs turned by cos/sin
    "AffineGrid": _row(_float32_inside(grid.affine_grid), (20,),
                       align_corners=0),                      # theta · (x, y[, z], 1) over size's grid
    "GridSample": _row(_float32_inside(grid.grid_sample), (16, 20, 22), align_corners=0, mode=None,
                       padding_mode="zeros"),                 # 16: 2-D, bilinear/bicubic; 20: N-D, linear/cubic
    # signal: DFTs as products with twiddle tables, linear and differentiable (ops_signal.py)
    "DFT": _row(_float32_inside(sig.dft), (17, 20), axis=None, inverse=0, onesided=0),  # Σ x_j e^(∓2πi jk/n)
    "STFT": _row(_float32_inside(sig.stft), (17,), onesided=1),  # the DFTs of windowed frames
    "MelWeightMatrix": _row(sig.mel_weight_matrix, (17,), output_datatype=1),  # mel filter triangles: a constant
    "RoiAlign": _row(roi.roi_align, (10, 16, 22), coordinate_transformation_mode=None, mode="avg", output_height=1,
                     output_width=1, sampling_ratio=0, spatial_scale=1.0),  # bins of rois pooled; 16: half_pixel
    "DeformConv": _row(roi.deform_conv, (19, 22), dilations=None, group=1, kernel_shape=None, offset_group=1,
                       pads=None, strides=None),              # conv of X sampled at the taps moved by offset
    "NegativeLogLikelihoodLoss": _row(_float32_inside(nn.negative_log_likelihood_loss), (12, 13, 22), ignore_index=None,
                                      reduction="mean"),      # -w[t]·x[t] along axis 1
}

# -- i29b: elementwise maths, activations, reductions and indexing (ops_math.py,
#    ops_activation.py, ops_reduce.py, ops_index.py); versions after the first listed
#    differ from it in element types only, unless the function says otherwise
TABLE.update({
    "Min": _row(m.min_, (8, 12, 13)),                         # elementwise min of n inputs, broadcast
    "Sum": _row(_float32_inside(m.sum_), (8, 13)),  # Σ of n inputs, broadcast
    "Mean": _row(_float32_inside(m.mean), (8, 13)),  # Σ of n inputs / n, broadcast
    "LessOrEqual": _row(m.less_or_equal, (12, 16)),           # a <= b (false with nan)
    "Clip": _row(m.clip, (6, 11, 12, 13), min=None, max=None),  # min(max(x, lo), hi); 6: attributes
    "Sign": _row(m.sign, (9, 13)),                            # -1, 0, 1 (nan kept)
    "Sin": _row(m.sin, (7, 22)),                              # sin x (SIN's value)
    "Cos": _row(m.cos, (7, 22)),                              # cos x
    "Tan": _row(m.tan, (7, 22)),                              # tan x
    "Asin": _row(_float32_inside(m.asin), (7, 22)),  # arcsin x
    "Acos": _row(_float32_inside(m.acos), (7, 22)),  # arccos x
    "Atan": _row(_float32_inside(m.atan), (7, 22)),  # arctan x
    "Sinh": _row(_float64_inside(m.sinh), (9, 22)),           # sinh x
    "Cosh": _row(_float64_inside(m.cosh), (9, 22)),           # cosh x
    "Asinh": _row(_float32_inside(m.asinh), (9, 22)),  # arsinh x
    "Acosh": _row(m.acosh, (9, 22)),                          # arcosh x (float16 too in float64, rounded once)
    "Atanh": _row(_float32_inside(m.atanh), (9, 22)),  # artanh x
    "Size": _row(m.size, (1, 13) + _LATER),                   # element count (int64 scalar)
    # activations
    "LeakyRelu": _row(act.leaky_relu, (6, 16), alpha=0.01),   # x < 0 ? αx : x
    "PRelu": _row(act.prelu, (7, 9, 16)),                     # x < 0 ? slope·x : x (slope broadcast)
    "Elu": _row(_float32_inside(act.elu), (6, 22), alpha=1.0),  # x < 0 ? α(eˣ - 1) : x
    "Selu": _row(_float32_inside(act.selu), (6, 22), alpha=act.SELU_ALPHA,
                 gamma=act.SELU_GAMMA),                       # γ(x > 0 ? x : α(eˣ - 1))
    "Celu": _row(_float32_inside(act.celu), (12, 28), alpha=1.0),  # max(0, x) + min(0, α(e^(x/α) - 1))
    "HardSigmoid": _row(_float32_inside(act.hard_sigmoid), (6, 22), alpha=0.2, beta=0.5),  # clamp(αx + β, 0, 1)
    "HardSwish": _row(_float32_inside(act.hard_swish), (14, 22)),  # x·clamp(x/6 + 1/2, 0, 1)
    "Softplus": _row(_float64_inside(act.softplus), (1, 22)),  # log(eˣ + 1)
    "Softsign": _row(act.softsign, (1, 22)),                  # x / (1 + |x|)
    "Mish": _row(_float64_inside(act.mish), (18, 22)),        # x·tanh(softplus x)
    "ThresholdedRelu": _row(act.thresholded_relu, (10, 22), alpha=1.0),  # x > α ? x : 0
    "Swish": _row(_float32_inside(act.swish), (24,), alpha=1.0),  # x·σ(αx)
    "Shrink": _row(act.shrink, (9,), bias=0.0, lambd=0.5),    # soft/hard shrinkage
    "Hardmax": _row(act.hardmax, (1, 11, 13), axis=None),     # one-hot of the first argmax
    # reductions
    "ReduceMin": _row(red.reduce_min, (11, 12, 13, 18, 20), axes=None, **_REDUCE),          # min over axes
    "ReduceL1": _row(red.reduce_l1, (11, 13, 18), axes=None, **_REDUCE),                   # Σ|x|
    "ReduceL2": _row(red.reduce_l2, (11, 13, 18), axes=None, **_REDUCE),                   # √Σx²
    "ReduceSumSquare": _row(red.reduce_sum_square, (11, 13, 18), axes=None, **_REDUCE),    # Σx²
    "ReduceLogSum": _row(_float32_inside(red.reduce_log_sum), (11, 13, 18, 28), axes=None, **_REDUCE),      # log Σx
    "ReduceLogSumExp": _row(red.reduce_log_sum_exp, (11, 13, 18, 28), axes=None, **_REDUCE),  # log Σeˣ
    "ArgMax": _row(red.arg_max, (11, 12, 13), axis=0, keepdims=1, select_last_index=0),    # int64 index
    "ArgMin": _row(red.arg_min, (11, 12, 13), axis=0, keepdims=1, select_last_index=0),
    "CumSum": _row(red.cum_sum, (11, 14), exclusive=0, reverse=0),                          # running Σ
    "CumProd": _row(red.cum_prod, (26,), exclusive=0, reverse=0),                           # running Π
    # tiling, one-hot, blocks, scatters
    "Tile": _row(ix.tile, (6, 13)),                           # np.tile
    "OneHot": _row(ix.one_hot, (9, 11, 28), axis=-1),            # index == place ? on : off
    "DepthToSpace": _row(ix.depth_to_space, (11, 13, 28), blocksize=None, mode="DCR"),
    "SpaceToDepth": _row(ix.space_to_depth, (1, 13, 28), blocksize=None, mode="DCR"),
    "ScatterElements": _row(ix.scatter_elements, (11, 13, 16, 18), axis=0, reduction="none"),
    "ScatterND": _row(ix.scatter_nd, (11, 13, 16, 18), reduction="none"),
    "Scatter": _row(ix.scatter_elements, (9, 11), axis=0),   # ScatterElements-11 under its old name
    "EyeLike": _row(ix.eye_like, (9, 22), dtype=None, k=0),   # ones on diagonal k
    "CenterCropPad": _row(ix.center_crop_pad, (18,), axes=None),  # centred cut or zero pad
    "ReverseSequence": _row(ix.reverse_sequence, (10, 28), batch_axis=1, time_axis=0),
    "TopK": _row(red.top_k, (11, 24), axis=-1, largest=1, sorted=1),  # k largest/smallest, indices
    "GlobalMaxPool": _row(red.global_max_pool, (1, 22)),     # max over the spatial axes
    "LpNormalization": _row(_float32_inside(red.lp_normalization), (1, 22), axis=-1, p=2),  # x / ‖x‖_p
    "MeanVarianceNormalization": _row(_float32_inside(red.mean_variance_normalization), (9, 13), axes=None),
    "LpPool": _row(_float32_inside(red.lp_pool), (11, 18, 22), p=2, ceil_mode=0, **_WINDOW),  # (Σ|x|^p)^(1/p) per window
    "SwiGLU": _row(_float32_inside(act.swiglu), (28,), alpha=1.0),  # A·σ(αA)·B
    "TensorScatter": _row(ix.tensor_scatter, (24,), axis=-2, mode="linear"),  # KV-cache write
})

# -- quantized ops (ops_quant.py): int8/uint8/int16/uint16 values, float scales; version 28 of
#    QuantizeLinear and DequantizeLinear adds float6 types only. The outputs of all but
#    DequantizeLinear are integers: the gradient stops there (no straight-through estimator)
_Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)
TABLE.update({
    "DequantizeLinear": _row(q.dequantize_linear, _Q_VERSIONS, axis=1, block_size=0,
                             output_dtype=0),             # (x - zero_point)·scale
    "QuantizeLinear": _row(q.quantize_linear, _Q_VERSIONS, axis=1, block_size=0, output_dtype=0,
                           precision=0, saturate=1),      # saturate(round_even(x/scale) + zero_point)
    "MatMulInteger": _row(q.matmul_integer, (10,)),       # (A - a0) @ (B - b0) in int32
    "ConvInteger": _row(q.conv_integer, (10,), group=1, **_WINDOW),  # conv(x - x0, w - w0) in int32
    "QLinearMatMul": _row(q.qlinear_matmul, (10, 21)),    # the int32 product requantized
    "QLinearConv": _row(q.qlinear_conv, (10,), group=1, **_WINDOW),  # the int32 conv (+ B) requantized
})

# -- sequences, unrolled when importing (ops_sequence.py): a list of tensors while the model
#    is read; positions and split sizes known at import
TABLE.update({
    "SequenceEmpty": _row(sq.sequence_empty, (11,), folds=False, dtype=None),          # []
    "SequenceConstruct": _row(sq.sequence_construct, (11,), folds=False),               # [x0, x1, ...]
    "SplitToSequence": _row(sq.split_to_sequence, (11, 24), folds=False, axis=0, keepdims=1),  # pieces along axis
    "SequenceInsert": _row(sq.sequence_insert, (11,), folds=False),   # before position (default: at the end)
    "SequenceErase": _row(sq.sequence_erase, (11,), folds=False),     # at position (default: the last)
    "SequenceAt": _row(sq.sequence_at, (11,), folds=False),           # s[position], negative from the back
    "SequenceLength": _row(sq.sequence_length, (11,), folds=False),   # len(s), int64 scalar
    "ConcatFromSequence": _row(sq.concat_from_sequence, (11,), folds=False, axis=None,
                               new_axis=0),                           # concatenated, or stacked (new_axis)
})
