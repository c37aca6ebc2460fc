"""ONNX ops on tensors as UOp graphs: elementwise maths, comparisons, reductions, shapes,
movement, indexing and constants. One function per op, named like it; the table in
import_table.py says which spec versions and attributes each follows.

Every function takes the node's context (importer.NodeContext): `ctx.x(i)` is input i as
a UOp (None when absent), `ctx.static(i)` its value when known at import time (a numpy
array: shapes, axes, pads), `ctx.attr(name)` an attribute (its default from the table),
`ctx.refuse(why)` stops the import. It returns the output (a UOp, or a numpy array for a
value known at import time), or a list of outputs.
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from .dtypes import FROM_ONNX, UNSUPPORTED_NAMES
from .float64 import exp64, log_softmax64, sigmoid64, softmax64
from .ops_math import _series, _taylor, _terms

# ----------------------------------------------------------------------------- helpers


def axis_of(ctx, axis: int, rank: int, what: str = "axis") -> int:
    """A non-negative axis from ONNX's possibly negative one, refused out of range."""
    if not -rank <= axis < max(rank, 1):
        ctx.refuse(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def axes_of(ctx, axes, rank: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(axis_of(ctx, int(a), rank, what) for a in axes)
    if len(set(out)) != len(out):
        ctx.refuse(f"{what} {list(map(int, axes))} repeat an axis")
    return out


def format_dtype(array: np.ndarray):
    """A numpy array's element type as the format's DType."""
    from uopcli.core.ops import dtype_of
    return dtype_of(array.dtype)


def dtype_from_code(ctx, code: int, what: str = "to"):
    dtype = FROM_ONNX.get(int(code))
    if dtype is None:
        ctx.refuse(f"{what}: element type {UNSUPPORTED_NAMES.get(int(code), code)} is not supported")
    return dtype


# The most elements a tensor computed when importing may have: a constant the model makes of
# a huge shape (ConstantOfShape of [100000, 100000, 10], a Range, an EyeLike, any op of
# constants alone) is a node of the graph instead, computed when the graph runs; a value
# that must be known when importing (a shape, an index) and would be made of one is refused
# (importer.NodeContext.static). A 179-byte model took 700 MB to validate, or ran out of memory.
FOLD_LIMIT = 1 << 20


def ints_of(ctx, i: int, what: str) -> list[int] | None:
    """Input i as a list of Python ints (a static int tensor), None when absent."""
    value = ctx.static(i, what)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


# ----------------------------------------------------------------------------- elementwise


def add(ctx): return ctx.x(0) + ctx.x(1)                   # noqa: E704 - Add-14: a + b, broadcast
def sub(ctx): return ctx.x(0) - ctx.x(1)                   # noqa: E704
def mul(ctx): return ctx.x(0) * ctx.x(1)                   # noqa: E704


def div(ctx):
    """Div-14: true division for floats; integers truncate toward zero (C, as onnxruntime)."""
    a, b = ctx.x(0), ctx.x(1)
    return a / b if a.dtype.is_float else a.cdiv(b)


def pow_(ctx):
    """Pow-15: the exponent (any numeric type) is cast to the base's type."""
    base, exponent = ctx.x(0), ctx.x(1)
    return base.pow(exponent.cast(base.dtype) if exponent.dtype is not base.dtype else exponent)


def sqrt(ctx): return ctx.x(0).sqrt()                      # noqa: E704
def exp(ctx):
    """eˣ; float64 by exp64 (the builder's 2^(x·log2 e) is |x| ulps off)."""
    x = ctx.x(0)
    return exp64(x) if x.dtype is dtypes.float64 else x.exp()


def log(ctx): return ctx.x(0).log()                        # noqa: E704
def neg(ctx): return -ctx.x(0)                             # noqa: E704
def sigmoid(ctx):
    """1/(1 + e⁻ˣ); float64 by sigmoid64 (the builder's lost the slope below -708, and was
    |x| ulps off)."""
    x = ctx.x(0)
    return sigmoid64(x) if x.dtype is dtypes.float64 else x.sigmoid()


def not_(ctx): return ctx.x(0).logical_not()               # noqa: E704
def isnan(ctx): return ctx.x(0).isnan()                    # noqa: E704


def relu(ctx):
    """max(x, 0), nan kept (the builder's relu gives 0 there); the gradient at 0 is 0, as PyTorch's."""
    x = ctx.x(0)
    return ((x > 0) | x.isnan()).where(x, 0) if x.dtype.is_float else x.relu()


def abs_(ctx):
    """|x|: max(x, -x) (for integers too; nan stays nan), plus +0.0 for floats: numpy's
    maximum of two equal values returns the second, so |+0.0| would be -0.0 without it."""
    x = ctx.x(0)
    return x.maximum(-x) + 0.0 if x.dtype.is_float else x.abs()


# erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)) for |x| < 0.5: nine terms are exact to
# float32, thirteen to float64 (the next term is below 1e-19)
_ERF_TAYLOR = _terms(lambda n: 2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)), 9, 13)

# float64 erfc for z >= 1/2: t exp(-z^2 + f(t)), t = 2 / (2 + z), f a Chebyshev series in
# u = 5t/2 - 1 (erf = 1 - erfc within 2 ulps over [1/2, 6]); tools/erfc_chebyshev.py makes
# this table and measures it against mpmath
_ERFC_CHEBYSHEV = (
    -0.78318707272406, 0.5058947933173407, 0.020165332295700413,
    -0.0041507842704837155, -0.000692939303313183, 8.06130444809017e-05,
    2.5850999510766177e-05, -2.453241361936656e-06, -1.066562894905652e-06,
    1.0956136201272656e-07, 4.618283721422927e-08, -6.305089137369673e-09,
    -1.9633309872353603e-09, 3.979371116364936e-10, 7.359712081538683e-11,
    -2.4619582503771378e-11, -1.7696477486872623e-12, 1.3810080809670336e-12,
    -4.6002066138412304e-14, -6.38048406942416e-14, 9.93771865388211e-15,
    1.856960616406593e-15, -7.708065806015495e-16, 3.1628011912637166e-17,
    3.461868759785784e-17, -9.185971747980259e-18,
)
_ERFC_LAST = 28.0  # erfc(28) is 0 in float64 (exp underflows): a larger z (inf) is taken as 28, gradient 0


def erf(ctx):
    """erf, accurate to its dtype in relative terms. For |x| < 0.5 the Taylor series (where
    the absolute error of a form for erf near 1 would be a large relative one); beyond it,
    in float32 and float16 the builder's Abramowitz-Stegun form (absolute error 1.5e-7,
    where erf >= 0.52), with erf's exact slopes (_with_erf_slopes: the form's were 4.6e-4
    off), in float64 1 - erfc(|x|) by a Chebyshev fit (within 2 ulps). Each
    branch sees a harmless value outside its range, so neither makes inf or nan for the
    other (nor for its gradient)."""
    x = ctx.x(0)
    small = x.abs() < 0.5
    series = _series(x, small, _taylor(_ERF_TAYLOR, x))
    if x.dtype is not dtypes.float64:
        return _with_erf_slopes(small.where(series, x.erf()), x)
    far = 1.0 - _erfc64(_erfc_argument(x, small))
    return small.where(series, (x < 0).where(-far, far))


def _erfc_argument(x: UOp, small: UOp) -> UOp:
    """|x|, but 1 where `small` (the series' range) and 28 past it (±inf: slope 0). nan
    stays nan, its slope too (a MAX with 28 gave nan the slope 0)."""
    magnitude = small.where(1.0, x.abs())
    return (magnitude > _ERFC_LAST).where(_ERFC_LAST, magnitude)


_TWO_OVER_ROOT_PI = 2 / math.sqrt(math.pi)


def _with_erf_slopes(value: UOp, x: UOp) -> UOp:
    """`value` (erf x by any form, detached) with erf's own slopes, exact to the third order:
    erf(x0 + d) = erf x0 + c1·d - c2·d² + c3·d³ + ..., c1 = 2/√π e^(-x0²) (erf'), c2 = c1·x0,
    c3 = c1·(2x0² - 1)/3, at d = x - x0 = 0 for x0 = x detached (as sin_cos64 turns sin x0).
    The c's are float64's, rounded once (the builder's float32 erf's own slope was 4.6e-4
    off, 1.2e-2 at x = 6, nan at ±inf). Written value - (c1·e + c2·e² + c3·e³) with e =
    x0 - x = +0.0: the value's bits, -0.0 kept. ±inf take x0 = 0 (inf - inf), with slope 0."""
    finite = x.isinf().where(0.0, x)
    x0 = finite.detach()
    wide = x0.cast(dtypes.float64)
    c1 = (wide * -wide).exp() * _TWO_OVER_ROOT_PI  # 0 from |x0| = 27 (e^-x² underflows; x0² never overflows)
    c2, c3 = c1 * wide, c1 * (wide * wide * 2.0 - 1.0) * (1 / 3)
    e = x0 - finite
    c1, c2, c3 = (c.cast(x.dtype) for c in (c1, c2, c3))
    return value.detach() - e * (c1 + e * (c2 + e * c3))


def _erfc64(z):
    t = 2.0 / (z + 2.0)
    return t * exp64(_chebyshev(t * 2.5 - 1.0, _ERFC_CHEBYSHEV) - z * z, overflows=False)  # below 0


def _chebyshev(u, coefficients):
    """c0 + c1 T1(u) + c2 T2(u) + ... for u in [-1, 1], by Clenshaw's recurrence (stable,
    where the monomial form of a degree-25 series would cancel)."""
    two_u = u * 2.0
    b2, b1 = None, coefficients[-1]  # b_{k+2}, b_{k+1}
    for coefficient in reversed(coefficients[1:-1]):
        b2, b1 = b1, (two_u * b1 + coefficient if b2 is None else two_u * b1 - b2 + coefficient)
    return u * b1 - b2 + coefficients[0]


def _tanh_taylor(terms: int) -> list[float]:
    """The coefficients of x, x^3, x^5, ... in tanh's Taylor series, from tanh' = 1 - tanh^2:
    (k+1) a_(k+1) = [k = 0] - sum over i + j = k of a_i a_j (exact fractions, rounded once)."""
    from fractions import Fraction
    a = [Fraction(0)] * (2 * terms)
    for k in range(2 * terms - 1):
        a[k + 1] = (int(k == 0) - sum(a[i] * a[k - i] for i in range(k + 1))) / (k + 1)
    return [float(c) for c in a[1::2]]


# tanh(x) = x - x³/3 + 2x⁵/15 - 17x⁷/315 + ...: six terms are exact to float32 for |x| < 0.25,
# twelve to float64 (each term is about 1/40 of the one before at 0.25)
_TANH_COEFFICIENTS = _tanh_taylor(12)
_TANH_TAYLOR = _terms(lambda n: _TANH_COEFFICIENTS[n], 6, 12)


def tanh(ctx):
    """tanh, accurate to its dtype in relative terms: sign(x)(1 - e)/(1 + e) with e = exp(-2|x|)
    (never overflows) for |x| >= 0.25, the Taylor series nearer 0, where 1 - e cancels (the
    builder's 2σ(2x) - 1 loses all digits of a tiny x)."""
    x = ctx.x(0)
    magnitude = x.abs()
    small = magnitude < 0.25
    e = (magnitude * -2.0).exp()
    far = (1.0 - e) / (1.0 + e)
    return small.where(_series(x, small, _taylor(_TANH_TAYLOR, x)), (x < 0).where(-far, far))


def gelu(ctx):
    """Gelu-20: x·Φ(x), Φ by erf ("none") or the tanh form ("tanh"). In float64 without the
    spec's 1 + erf and 1 + tanh, which cancel for x < 0 (all digits lost near x = -7):
    Φ(x) = erfc(-x/√2)/2 there, and 1 + tanh(u) = 2/(1 + exp(-2u))."""
    approximate = ctx.attr("approximate")
    x = ctx.x(0)
    wide = x.dtype is dtypes.float64
    if approximate == "none":
        return x * _normal_cdf64(ctx, x) if wide else x * 0.5 * (1.0 + ctx.call(erf, x * (1 / math.sqrt(2))))
    if approximate == "tanh":
        inner = (x + 0.044715 * x * x * x) * math.sqrt(2 / math.pi)
        return x / (1.0 + exp64(inner * -2.0)) if wide else 0.5 * x * (1.0 + ctx.call(tanh, inner))
    ctx.refuse(f"approximate={approximate!r} is not 'none' or 'tanh'")


def _normal_cdf64(ctx, x):
    """Φ(x) = erfc(-x/√2)/2: by erfc itself below x/√2 = -1/2, by 1 + erf above (>= 0.48)."""
    s = x * (1 / math.sqrt(2))
    lower = s < -0.5
    tail = _erfc64(lower.where(-s, 1.0).minimum(_ERFC_LAST)) * 0.5
    return lower.where(tail, (1.0 + ctx.call(erf, s)) * 0.5)


def equal(ctx): return ctx.x(0).eq(ctx.x(1))               # noqa: E704
def less(ctx): return ctx.x(0) < ctx.x(1)                  # noqa: E704
def greater(ctx): return ctx.x(0) > ctx.x(1)               # noqa: E704
def and_(ctx): return ctx.x(0) & ctx.x(1)                  # noqa: E704


def greater_or_equal(ctx):
    """a > b or a == b: false where either is nan (the builder's `>=` is not(a < b), true there)."""
    a, b = ctx.x(0), ctx.x(1)
    return (a > b) | a.eq(b)


def where(ctx): return ctx.x(0).where(ctx.x(1), ctx.x(2))  # noqa: E704


def cast(ctx):
    if ctx.attr("to") is None:
        ctx.refuse("needs the attribute to")
    return ctx.x(0).cast(dtype_from_code(ctx, ctx.attr("to")))


def cast_like(ctx):
    return ctx.x(0).cast(ctx.x(1).dtype)


def bitcast(ctx):
    """BitCast-26: the same bytes read as another element type of the same width (the
    format's BITCAST, numpy's view: little-endian as the spec asks, on every machine numpy
    runs on here). To bool only from bool: a byte other than 0 and 1 is no bool, and no
    two evaluators agree on what it means. No gradient passes it (bits are not values)."""
    if ctx.attr("to") is None:
        ctx.refuse("needs the attribute to")
    x = ctx.x(0)
    dtype = dtype_from_code(ctx, ctx.attr("to"))
    if dtype.itemsize != x.dtype.itemsize:
        ctx.refuse(f"to: {dtype.name} has {dtype.itemsize * 8} bits, the input {x.dtype.name} "
                   f"{x.dtype.itemsize * 8}: BitCast keeps the width")
    if dtype.is_bool and not x.dtype.is_bool:
        ctx.refuse(f"to: bool from {x.dtype.name}: a byte other than 0 and 1 is no bool")
    return x if dtype is x.dtype else x.bitcast(dtype)


def identity(ctx): return ctx.x(0)                         # noqa: E704


def softmax(ctx, log: bool = False):
    """Softmax-13 along `axis`; before 13 (versions 1 and 11) the input was seen as 2-D,
    [prod(shape[:axis]), prod(shape[axis:])], and normalised along its second axis."""
    x = ctx.x(0)
    rank = len(x.shape)
    if ctx.since >= 13:
        axis = axis_of(ctx, ctx.attr("axis", -1), rank)
        return log_softmax_of(x, axis) if log else softmax_of(x, axis)
    axis = axis_of(ctx, ctx.attr("axis", 1), rank)
    flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return (log_softmax_of(flat, 1) if log else softmax_of(flat, 1)).reshape(x.shape)


def softmax_of(x: UOp, axis: int) -> UOp:
    """The builder's e^(x - max) / Σe^(x - max); float64 by softmax64 (the builder's eˣ is
    float32-grade there). A row of -inf throughout is nan, see _masked_rows_nan."""
    return _masked_rows_nan(x, axis, lambda v: softmax64(v, axis) if v.dtype is dtypes.float64 else v.softmax(axis))


def log_softmax_of(x: UOp, axis: int) -> UOp:
    """The builder's x - max - log Σe^(x - max); float64 by log_softmax64 (the largest's
    output was 0, and its slope to itself 0, where the rest is below 1e-16 of it). A row
    of -inf throughout is nan, see _masked_rows_nan."""
    return _masked_rows_nan(x, axis, lambda v: log_softmax64(v, axis) if v.dtype is dtypes.float64
                            else v.log_softmax(axis))


def _masked_rows_nan(x: UOp, axis: int, build) -> UOp:
    """build(x) where a row along `axis` has an element above -inf; nan, as the spec's
    e^(x - max) gives (-inf - -inf), where the row is -inf throughout (an attention row that
    its mask hides entirely), computed from a row of zeros instead. The value is the same;
    the gradient is not: built from the row of -inf, the nan reached the gradient of every
    input upstream (the softmax's slope is nan there, and nan·0 is nan), where torch's
    exports put a Where(IsNaN(softmax), 0, softmax) after it to mean 0 for such a row (the
    TorchScript exporter's scaled_dot_product_attention with a padding mask)."""
    hidden = x.max(axis, keepdim=True).eq(-math.inf)
    return hidden.where(math.nan, build(hidden.where(0.0, x)))


def log_softmax(ctx): return softmax(ctx, log=True)        # noqa: E704


# ----------------------------------------------------------------------------- reductions


def _reduce_axes(ctx, rank: int, axes_from_input: bool) -> tuple[int, ...] | None:
    """The reduced axes (None: the node is the identity, noop_with_empty_axes)."""
    axes = ints_of(ctx, 1, "axes") if axes_from_input else ctx.attr("axes")
    if not axes:
        if axes_from_input and ctx.attr("noop_with_empty_axes"):
            return None
        return tuple(range(rank))
    return axes_of(ctx, axes, rank)


def _reduction(ctx, kind: str, axes_input_since: int):
    x = ctx.x(0)
    axes = _reduce_axes(ctx, len(x.shape), ctx.since >= axes_input_since)
    if axes is None:
        return x
    keep = bool(ctx.attr("keepdims"))
    if kind == "mean" and x.dtype.is_int:
        return integer_mean(ctx, x, axes, keep)
    if kind == "mean":
        return x.mean(axes, keepdim=keep)
    if kind == "sum":  # the builder counts narrow integers in int32; ONNX keeps the type
        total = x.sum(axes, keepdim=keep)
        return total if total.dtype is x.dtype else total.cast(x.dtype)
    return x.max(axes, keepdim=keep)


def integer_mean(ctx, x: UOp, axes, keep: bool) -> UOp:
    """The mean of integers in their own type, as onnx.reference computes it (np.mean with
    dtype=x's): the sum in the type (wrapping, as ReduceSum's), divided in float64 and
    truncated toward 0 (-1/3 is 0, -5/2 is -2). onnxruntime gives the same where the sum
    neither wraps nor passes 2^53 (it sums in float64: no wrap, but rounding beyond 2^53).
    The builder's mean was float32 (0.6666667 for [1, -1, 2]), not the declared type. A
    mean of no integers has no value (the reference's nan cast to the type is INT_MIN,
    onnxruntime's 0): refused."""
    count = math.prod(x.shape[a] for a in axes)
    if count == 0:
        ctx.refuse(f"the mean of an empty set of {x.dtype.name} (axes {list(axes)} of {list(x.shape)}) has no value in the type")
    total = x.sum(axes, keepdim=keep)
    total = total if total.dtype is x.dtype else total.cast(x.dtype)
    return (total.cast(dtypes.float64) / float(count)).cast(x.dtype)


def reduce_mean(ctx): return _reduction(ctx, "mean", 18)   # noqa: E704
def reduce_sum(ctx): return _reduction(ctx, "sum", 13)     # noqa: E704
def reduce_max(ctx): return _reduction(ctx, "max", 18)     # noqa: E704


# ----------------------------------------------------------------------------- shapes and movement


def shape(ctx):
    """Shape-15: the input's shape (a value known at import), sliced by start and end."""
    dims = ctx.shape_of(0)
    rank = len(dims)
    start, end = ctx.attr("start"), ctx.attr("end")
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(dims[start:end], dtype=np.int64)


def reshape(ctx):
    """Reshape-14: 0 copies the input's size there (unless allowzero), -1 is inferred."""
    x = ctx.x(0)
    target = ints_of(ctx, 1, "shape")
    allowzero = ctx.attr("allowzero")
    sizes = []
    for i, size in enumerate(target):
        if size == 0 and not allowzero:
            if i >= len(x.shape):
                ctx.refuse(f"shape {target}: a 0 at position {i} copies a size the input {list(x.shape)} does not have")
            size = x.shape[i]
        sizes.append(size)
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        ctx.refuse(f"shape {target} is not a shape (more than one -1, or a size below -1)")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or x.size % known:
            ctx.refuse(f"shape {target} does not fit the input's {x.size} elements")
        sizes[sizes.index(-1)] = x.size // known
    if math.prod(sizes) != x.size:
        ctx.refuse(f"shape {target} does not fit the input {list(x.shape)}")
    return x.reshape(*sizes)


def transpose(ctx):
    x = ctx.x(0)
    perm = ctx.attr("perm")
    rank = len(x.shape)
    order = tuple(reversed(range(rank))) if perm is None else axes_of(ctx, perm, rank, "perm")
    if len(order) != rank:
        ctx.refuse(f"perm {perm} does not list the {rank} axes")
    return x.permute(*order)


def flatten(ctx):
    x = ctx.x(0)
    rank = len(x.shape)
    axis = ctx.attr("axis")
    if not -rank <= axis <= rank:
        ctx.refuse(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _axes_argument(ctx, input_since: int):
    return ints_of(ctx, 1, "axes") if ctx.since >= input_since else ctx.attr("axes")


def squeeze(ctx):
    x = ctx.x(0)
    axes = _axes_argument(ctx, 13)
    rank = len(x.shape)
    dropped = [a for a in range(rank) if x.shape[a] == 1] if axes is None else axes_of(ctx, axes, rank)
    if any(x.shape[a] != 1 for a in dropped):
        ctx.refuse(f"axes {axes} name an axis whose size is not 1 (shape {list(x.shape)})")
    return x.reshape(*(s for a, s in enumerate(x.shape) if a not in dropped))


def unsqueeze(ctx):
    x = ctx.x(0)
    axes = _axes_argument(ctx, 13)
    rank = len(x.shape) + len(axes or ())
    new = axes_of(ctx, axes or (), rank)
    sizes, rest = [], iter(x.shape)
    for a in range(rank):
        sizes.append(1 if a in new else next(rest))
    return x.reshape(*sizes)


def concat(ctx):
    parts = [ctx.x(i) for i in range(ctx.input_count) if ctx.present(i)]
    if ctx.attr("axis") is None or not parts:
        ctx.refuse("needs the attribute axis and at least one input")
    rank = len(parts[0].shape)
    if rank == 0:  # onnxruntime and onnx.reference refuse scalars too (there is no axis)
        ctx.refuse("input 0 is a scalar (rank 0): Concat joins tensors of rank 1 or more along an axis")
    axis = axis_of(ctx, ctx.attr("axis"), rank)
    for i, part in enumerate(parts):  # every input of the first's rank, the same sizes off the axis (as the peers)
        if len(part.shape) != rank or any(a != b for d, (a, b) in enumerate(zip(part.shape, parts[0].shape)) if d != axis):
            ctx.refuse(f"input {i} {list(part.shape)} does not fit input 0 {list(parts[0].shape)} along axis {axis}: "
                       "inputs must share their rank and every size but the axis'")
    parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]  # empty pieces add nothing
    return parts[0].cat(*parts[1:], dim=axis) if len(parts) > 1 else parts[0]


def split(ctx):
    """Split-18: sizes from the `split` input (13+) or attribute (before 13), else equal
    parts for the outputs (the last one smaller, num_outputs in 18)."""
    x = ctx.x(0)
    axis = axis_of(ctx, ctx.attr("axis"), len(x.shape))
    length = x.shape[axis]
    sizes = ints_of(ctx, 1, "split") if ctx.since >= 13 else ctx.attr("split")
    if not sizes:
        count = ctx.attr("num_outputs") if ctx.since >= 18 and ctx.attr("num_outputs") else ctx.output_count
        step = math.ceil(length / count)
        # the last part is what the others leave, 0 included (4 in 3: [2, 2, 0], as
        # onnxruntime and onnx.reference split it); less than 0 leaves it no size
        sizes = [step] * (count - 1) + [length - step * (count - 1)]
        if sizes[-1] < 0:
            ctx.refuse(f"{count} outputs do not split an axis of {length}")
    if sum(sizes) != length or any(s < 0 for s in sizes):
        ctx.refuse(f"split sizes {list(sizes)} do not add up to the axis' {length}")
    if len(sizes) != ctx.output_count:  # the spec's outputs are the parts, one each (onnxruntime refuses too)
        ctx.refuse(f"{len(sizes)} parts {list(sizes)} for the node's {ctx.output_count} outputs")
    return list(x.split(list(sizes), axis))


def slice_(ctx):
    """Slice-13: starts/ends/axes/steps (values known at import), clamped as the spec says."""
    x = ctx.x(0)
    rank = len(x.shape)
    starts, ends = ints_of(ctx, 1, "starts"), ints_of(ctx, 2, "ends")
    axes = ints_of(ctx, 3, "axes") or list(range(len(starts)))
    steps = ints_of(ctx, 4, "steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.refuse("starts, ends, axes and steps differ in length")
    index = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes_of(ctx, axes, rank), steps):
        if step == 0:
            ctx.refuse("a step of 0")
        index[axis] = _python_slice(start, end, step, x.shape[axis])
    return x[tuple(index)]


def _python_slice(start: int, end: int, step: int, size: int) -> slice:
    """ONNX's clamping, as a Python slice of non-negative bounds (None: past the front)."""
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), size), min(max(end, 0), size), step)
    start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step)


def expand(ctx):
    """Expand-13: numpy broadcasting of the input against `shape` (either may be larger)."""
    x = ctx.x(0)
    target = ints_of(ctx, 1, "shape")
    rank = max(len(target), len(x.shape))
    have = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    want = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for a, b in zip(have, want):
        if a != b and 1 not in (a, b):
            ctx.refuse(f"shape {target} does not broadcast with the input {list(x.shape)}")
        out.append(a if b == 1 else b)
    return x.reshape(*have).expand(*out)


def _nonnegative_index(index: UOp, size: int) -> UOp:
    """Negative indices count from the end (ONNX's Gather family)."""
    return (index < 0).where(index + size, index)


def take(x: UOp, dim: int, index: UOp) -> UOp:
    """x.gather(dim, index) as ONNX's gathers mean it: the value copied, -0.0 included
    (onnxruntime and onnx.reference alike). The builder's gather sums a one-hot selection
    whose masked-out elements are +0.0, which makes a picked -0.0 +0.0; with -0.0 there
    the sum is the picked value exactly, and the numpy evaluator still runs it as a
    selection, at a gather's cost."""
    return x._gather(dim, index, _exact_fill(x))


def _exact_fill(x: UOp) -> float:
    """What a one-hot selection of x sums with where its mask is false: -0.0 for floats
    (x + -0.0 is x for every x), 0 for integers and bools."""
    return -0.0 if x.dtype.is_float else 0


def gather(ctx):
    """Gather-13: data[..., indices, ...] along `axis`: out.shape = data.shape[:axis] +
    indices.shape + data.shape[axis + 1:]. Indices known at import are cut out
    (SHRINK); others select through a one-hot comparison summed away."""
    data = ctx.x(0)
    axis = axis_of(ctx, ctx.attr("axis"), len(data.shape))
    size = data.shape[axis]
    known = ctx.static_if_known(1)
    if known is not None:
        given, known = known, np.where(known < 0, known + size, known)
        outside = (known < 0) | (known >= size)
        if outside.any():  # named as the model gives them (-4, not -4 + size)
            ctx.refuse(f"an index of {np.asarray(given)[outside].reshape(-1).tolist()} is outside the axis' {size}")
        if known.ndim == 0:
            return data.shrink(tuple((int(known), int(known) + 1) if a == axis else None
                                     for a in range(len(data.shape)))).squeeze(axis)
    index = _nonnegative_index(ctx.x(1), size).cast(dtypes.int32) if known is None else \
        UOp.buffer(known.astype(np.int32))
    return gather_index(data, axis, index)


def gather_index(data: UOp, axis: int, index: UOp) -> UOp:
    """data[..., index, ...] along `axis` for an int32 index node of places in range (Gather's
    shape): a one-hot comparison of the index with each place, summed away."""
    size = data.shape[axis]
    before, after = data.shape[:axis], data.shape[axis + 1:]
    spread = data.reshape(*before, *(1,) * len(index.shape), size, *after)
    mask = index._one_hot_mask(size, len(index.shape)).reshape(
        *(1,) * len(before), *index.shape, size, *(1,) * len(after))
    # -0.0 copied (see take); one value added to zeros, so in data's own dtype where sum() would
    # widen it (bools and narrow integers to int32, as a count): a bool mask gathers as bool
    picked = mask.where(spread, _exact_fill(data))
    return picked.sum(len(before) + len(index.shape), dtype=None if data.dtype.is_float else data.dtype)


def gather_elements(ctx):
    """GatherElements-13: out[i][j][k] = data[index[i][j][k]][j][k] along `axis` (same rank)."""
    data, index = ctx.x(0), ctx.x(1)
    axis = axis_of(ctx, ctx.attr("axis"), len(data.shape))
    return take(data, axis, _nonnegative_index(index, data.shape[axis]))


def gather_nd(ctx):
    """GatherND-13: the last axis of `indices` (k long) indexes data's first k axes after
    the batch_dims shared ones; out.shape = indices.shape[:-1] + data.shape[b + k:]. As a
    Gather of the flattened leading axes by the linear index."""
    data, index = ctx.x(0), ctx.x(1)
    batch = ctx.attr("batch_dims")
    k = index.shape[-1] if index.shape else 0
    if not index.shape or batch + k > len(data.shape) or index.shape[:batch] != data.shape[:batch]:
        ctx.refuse(f"indices {list(index.shape)} do not fit data {list(data.shape)} with batch_dims={batch}")
    indexed = data.shape[batch:batch + k]
    linear = index.const_like(0).broadcast_to(index.shape[:-1]) if index.shape[:-1] else index.const_like(0)
    for j, size in enumerate(indexed):
        part = index.shrink(tuple((j, j + 1) if a == len(index.shape) - 1 else None
                                  for a in range(len(index.shape)))).reshape(*index.shape[:-1])
        linear = linear * size + _nonnegative_index(part, size)
    batch_count = math.prod(data.shape[:batch])
    if batch:  # each batch element's rows come after the previous ones'
        offsets = UOp.arange(batch_count, dtype=linear.dtype).reshape(*data.shape[:batch]) * math.prod(indexed)
        linear = linear + offsets.reshape(*data.shape[:batch], *(1,) * (len(index.shape) - 1 - batch))
    flat = data.reshape(batch_count * math.prod(indexed), *data.shape[batch + k:])
    return ctx.call(gather, flat, linear, attrs={"axis": 0})


def trilu(ctx):
    """Trilu-14: keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes."""
    x = ctx.x(0)
    known = ctx.static_if_known(1) if ctx.present(1) else np.zeros(1, np.int64)
    if known is not None:
        k = [int(v) for v in np.asarray(known).reshape(-1)]
        k = k[0] if k else 0
    else:  # computed from the inputs: the mask compares with it (the shape does not depend on it)
        k = ctx.x(1).reshape(())
    return x.triu(k) if ctx.attr("upper") else x.tril(k)


# ----------------------------------------------------------------------------- values known at import


def constant(ctx):
    """Constant-13: exactly one of value, value_float(s), value_int(s)."""
    given = [name for name in ("value", "value_float", "value_floats", "value_int", "value_ints")
             if ctx.attr(name) is not None]
    if len(given) != 1:
        ctx.refuse(f"needs exactly one of value, value_float(s), value_int(s); has {given or 'none'}")
    value = ctx.attr(given[0])
    if given[0] == "value":
        return ctx.tensor_value(value)
    return np.array(value, dtype=np.float32 if "float" in given[0] else np.int64)


def constant_of_shape(ctx):
    """ConstantOfShape-20: `value` (one element, default float32 0) filled to the shape."""
    sizes = ints_of(ctx, 0, "shape")
    value = ctx.attr("value")
    fill = np.zeros(1, np.float32) if value is None else ctx.tensor_value(value)
    if fill.size != 1 or any(s < 0 for s in sizes):
        ctx.refuse("value must hold one element and the shape sizes be >= 0")
    if math.prod(sizes) > FOLD_LIMIT:  # a CONST expanded, made when the graph runs (FOLD_LIMIT)
        return UOp.full(sizes, fill.reshape(-1)[0].item(), format_dtype(fill))
    return np.full(sizes, fill.reshape(-1)[0], dtype=fill.dtype)


def range_(ctx):
    """Range-11: start, start + delta, ... below limit (above, for a negative delta)."""
    arrays = [ctx.static(i, name) for i, name in enumerate(("start", "limit", "delta"))]
    if any(a is None or a.size != 1 for a in arrays):
        ctx.refuse("start, limit and delta must be scalars")
    start, limit, delta = (a.reshape(-1)[0] for a in arrays)
    if delta == 0:
        ctx.refuse("delta is 0")
    count = max(int(math.ceil((limit - start) / delta)), 0)
    if count > FOLD_LIMIT:  # never materialised when importing; its values are exact only as integers
        if arrays[0].dtype.kind not in "iu":
            ctx.refuse(f"makes {count} elements when importing, more than {FOLD_LIMIT}: a float Range that long "
                       "is not imported")
        dtype = format_dtype(arrays[0])
        return UOp.arange(count, dtype=dtypes.int64).cast(dtype) * UOp.const(delta.item(), dtype) + \
            UOp.const(start.item(), dtype)
    return (start + np.arange(count, dtype=arrays[0].dtype) * delta).astype(arrays[0].dtype)


def dropout(ctx):
    """Dropout-13 at inference (training_mode absent or false): the identity; the mask is all
    true. In training with a ratio of 0 nothing is dropped and the scale 1 / (1 - 0) is 1:
    the same identity and mask (the ratio must then be known when importing)."""
    training = ctx.static(2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        ratio = ctx.static(1, "ratio") if ctx.present(1) else 0.5  # the spec's default ratio
        if float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            ctx.refuse("training_mode=true is random: only inference Dropout is imported (or a ratio of 0)")
    x = ctx.x(0)
    if ctx.output_count > 1:
        return [x, UOp.full(x.shape, True)]
    return x
