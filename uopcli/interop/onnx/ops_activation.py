"""ONNX's activation functions (Relu, Gelu, Sigmoid and Tanh are in ops_tensor.py): each
the formula of its spec version (https://onnx.ai/onnx/operators/) as a small graph of the
format's ops, nan kept where the formula keeps it. Calling conventions as in ops_tensor.py."""

from __future__ import annotations

import math

from uopcli import dtypes

from . import ops_tensor as t
from .float64 import expm1_64, softplus64, softsign64
from .ops_math import sinh_series

# Selu-6's defaults, the float32 values the spec writes out
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _expm1(x):
    """eˣ - 1 (the callers use it for x <= 0, where it cannot overflow); float64 by
    expm1_64 (eˣ - 1 lost every digit of a small x)."""
    if x.dtype is dtypes.float64:
        return expm1_64(x, sinh_series)
    return x.exp() - 1.0


def leaky_relu(ctx):
    """LeakyRelu-16: x for x > 0, alpha·x otherwise, as onnx.reference computes it (at ±0
    too: -0.5·(+0) is -0) and torch differentiates it (slope alpha at 0: the models exported
    to it; `x < 0 ? alpha·x : x` gave 1 there)."""
    x = ctx.x(0)
    return (x > 0).where(x, x * ctx.attr("alpha"))


def prelu(ctx):
    """PRelu-16: x for x >= 0, slope·x below (slope broadcast to x's shape)."""
    x, slope = ctx.x(0), ctx.x(1)
    return (x < 0).where(x * slope, x)


def elu(ctx): return elu_of(ctx.x(0), ctx.attr("alpha"))  # noqa: E704 - Elu-22


def elu_of(x, alpha: float):
    """Elu-22: x for x >= 0, alpha·(eˣ - 1) below (also an RNN's "Elu" in float64)."""
    negative = x < 0
    return negative.where(_expm1(negative.where(x, 0.0)) * alpha, x)


def selu(ctx):
    """Selu-22: gamma·x for x > 0, gamma·alpha·(eˣ - 1) at and below 0."""
    x = ctx.x(0)
    alpha, gamma = ctx.attr("alpha"), ctx.attr("gamma")
    positive = x > 0
    return positive.where(x * gamma, _expm1(positive.where(0.0, x)) * (alpha * gamma))


def celu(ctx):
    """Celu-12: max(0, x) + min(0, alpha·(e^(x/alpha) - 1)), as x for x > 0 and the
    exponential part below (nan kept)."""
    x = ctx.x(0)
    alpha = ctx.attr("alpha")
    positive = x > 0
    return positive.where(x, _expm1(positive.where(0.0, x) * (1 / alpha)) * alpha)


def hard_sigmoid(ctx):
    """HardSigmoid-22: max(0, min(1, alpha·x + beta))."""
    x = ctx.x(0)
    line = x * ctx.attr("alpha") + ctx.attr("beta")
    return (line > 1).where(1.0, (line < 0).where(0.0, line))


def hard_swish(ctx):
    """HardSwish-22: x·max(0, min(1, x/6 + 1/2))."""
    x = ctx.x(0)
    line = x * (1 / 6) + 0.5
    return x * (line > 1).where(1.0, (line < 0).where(0.0, line))


def _softplus(x):
    """log(1 + eˣ) as max(x, 0) + log(1 + e^-|x|): no overflow (nan kept by the max);
    float64 by softplus64 (log(1 + e^-|x|) was 0 below x = -37)."""
    if x.dtype is dtypes.float64:
        return softplus64(x)
    return x.maximum(0) + ((-x.abs()).exp() + 1.0).log()


def softplus(ctx): return _softplus(ctx.x(0))              # noqa: E704 - Softplus-22: log(eˣ + 1)


def softsign(ctx):
    """Softsign-22: x/(1 + |x|); float64 by softsign64 (the slope cancelled to 0 from |x| = 1e16)."""
    x = ctx.x(0)
    return softsign64(x) if x.dtype is dtypes.float64 else x / (ctx.call(t.abs_, x) + 1.0)


def mish(ctx):
    """Mish-22: x·tanh(softplus(x))."""
    x = ctx.x(0)
    return x * ctx.call(t.tanh, _softplus(x))


def thresholded_relu(ctx):
    """ThresholdedRelu-22: x for x > alpha, else 0."""
    x = ctx.x(0)
    return (x > ctx.attr("alpha")).where(x, 0.0)


def swish(ctx):
    """Swish-24: x·σ(alpha·x)."""
    x = ctx.x(0)
    return x * ctx.call(t.sigmoid, x * ctx.attr("alpha"))


def shrink(ctx):
    """Shrink-9: x + bias below -lambd, x - bias above lambd, 0 between."""
    x = ctx.x(0)
    lambd, bias = ctx.attr("lambd"), ctx.attr("bias")
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0))


def hardmax(ctx):
    """Hardmax-13: 1 at the first largest value along `axis`, 0 elsewhere; before 13 the
    input is seen as 2-D, [prod(shape[:axis]), prod(shape[axis:])], as Softmax's."""
    x = ctx.x(0)
    rank = len(x.shape)
    if ctx.since >= 13:
        axis = t.axis_of(ctx, ctx.attr("axis", -1), rank)
        return _hardmax(x, axis)
    axis = t.axis_of(ctx, ctx.attr("axis", 1), rank)
    flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return _hardmax(flat, 1).reshape(x.shape)


def _hardmax(x, axis: int):
    from .ops_reduce import first_largest
    size = x.shape[axis]
    index = first_largest(x, axis, keepdim=True)
    positions = x.arange(size).reshape((size,) + (1,) * (len(x.shape) - axis - 1)).cast(index.dtype)
    return index.eq(positions).where(x.const_like(1), x.const_like(0))


def swiglu(ctx):
    """SwiGLU-28: Swish_alpha(A)·B = A·σ(alpha·A)·B, A and B of one shape (no broadcasting)."""
    a, b = ctx.x(0), ctx.x(1)
    if a.shape != b.shape:
        ctx.refuse(f"A {list(a.shape)} and B {list(b.shape)} must have one shape")
    return a * ctx.call(t.sigmoid, a * ctx.attr("alpha")) * b
