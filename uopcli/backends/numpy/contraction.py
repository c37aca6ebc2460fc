"""The contraction kernels: a REDUCE ADD over a (sum of) products of broadcast views run
as one BLAS matmul or einsum over the un-broadcast operands, never building the product
(`Contraction`), and gather's one-hot selections and their scatter-adds run as
selections (`_masked_sum`, `_select_sum`). passes/contractions.py decides where."""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from ...core.ops import Ops, accumulation_dtype
from .passes.broadcast import OnBroadcast
from .table import IMPL, const_value, reduce_values


LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MATMUL_MIN_WORK = 4096  # per batch item: below it, per-matrix BLAS calls cost more than einsum's loop


class Contraction:
    """REDUCE ADD over Σ_terms Π_factors, run without building any product.

    Each factor is the value of a MUL source as numpy holds it: usually a broadcast view
    (EXPAND of a RESHAPE/PERMUTE). An axis along which a factor's stride is 0 (or whose
    size is 1) is not an axis of that factor: it is indexed away, which leaves the
    un-broadcast data. Then per term:
        axes in both factors, reduced  -> contracted (matmul's K)
        axes in both factors, kept     -> batch
        axes in one factor only, kept  -> that factor's free axes (matmul's M or N)
        axes in one factor only, reduced -> summed in that factor first
        axes in no factor: reduced -> multiply by their size; kept -> broadcast
    and np.matmul runs with the operands ordered so its C-ordered result is already in the
    REDUCE's axis order where possible (np.einsum can return Fortran-ordered results that
    slow every later elementwise op). Shape-() factors multiply the operand with the fewest
    elements before the sum, as the graph does (c * sum(x) could overflow where sum(x * c) does not).

    A sum of WHERE(mask, a, 0) (gather's one-hot selection and its gradient's scatter-add),
    or of two such WHEREs added, has the terms mask * a (see _masked_sum): `masked` holds
    those WHERE nodes. Where the one mask is a CMPEQ of integers summed along one axis
    (gather's index == arange), `select` is that CMPEQ node, and its sources stand in for
    the mask (see _select_sum).
    """

    __slots__ = ("terms", "order", "outer", "masked", "select", "_scratch")

    def __init__(self, terms: tuple[tuple[int, ...], ...], order: tuple[int, ...] | None = None, masked=None,
                 select=None):
        self.terms = terms  # per term, the positions of its factors among the step's sources
        self.order = order  # a PERMUTE between the products and the REDUCE, absorbed: its axis order
        self.masked = masked
        self.select = select
        # axes the one reader of the result walks one position at a time (a scatter-add's
        # looped axes, set by lay_out_for_scatters): laid out outside a run of the others
        self.outer: tuple[int, ...] = ()
        # temporaries of the last call (converted operands, partial results), for EvalStats: per
        # thread, as one compiled program may run in several threads at once
        self._scratch = threading.local()

    @property
    def scratch_bytes(self) -> int:
        return getattr(self._scratch, "bytes", 0)

    @scratch_bytes.setter
    def scratch_bytes(self, size: int) -> None:
        self._scratch.bytes = size

    def __call__(self, node, *values):
        # a path that makes no temporaries (the WHEREs run as written) leaves it at 0: a compiled
        # program's earlier call must not count in this one's EvalStats
        self.scratch_bytes = 0
        full_shape = node.src[0].shape
        if self.select is not None:
            return _select_sum(self, node, *values)
        if self.masked is not None:
            return _masked_sum(self, node, *values)
        if self.order is not None:  # the factors as the PERMUTE would show them: views, no copy
            values = [np.transpose(v, self.order) if np.ndim(v) else v for v in values]
        reduced = frozenset(node.arg[1])
        total, scratch = None, []
        for term in self.terms:
            part = _contract_term([values[i] for i in term], full_shape, reduced, node, scratch, self.outer)
            if total is None:
                total = part
                continue
            scratch.append(part.nbytes)
            if total.flags.writeable:  # a fresh result (a read-only one is a broadcast)
                np.add(total, part, out=total)
            else:
                total = np.add(total, part)
        self.scratch_bytes = sum(scratch)
        return total


def _masked_sum(contraction: Contraction, node, *sources):
    """REDUCE ADD over WHERE(mask, values, 0) (or two such added) as the contraction of
    each mask (as 0 and 1) with its values: gather's one-hot selection becomes one matmul
    instead of a tensor n times the result's size, summed. Products of a selection differ
    from it only where some value is not finite (inf * 0 is nan, where the WHERE gives 0:
    then the WHEREs are run as written) or in the sign of a zero (a negative value times 0
    is -0.0, the WHERE's 0 is +0.0: adding +0.0 to each sum with a masked-out element
    restores it); sums of several selected values round as any contraction's. WHEREs whose
    masked-out elements are -0.0 (an exact selection): see _signed_zeros; one of each
    kind runs as written."""
    full_shape = node.src[0].shape
    reduced = node.arg[1]
    pairs = [sources[i:i + 2] for i in range(0, len(sources), 2)]  # (mask, values) per WHERE
    float_values = node.dtype.is_float
    negative = [_negative_fill(where) for where in contraction.masked] if float_values else [False]
    if float_values and (len(set(negative)) > 1
                         or not all(np.isfinite(_factor_view(values, full_shape)[0]).all() for _, values in pairs)):
        selected = [IMPL[Ops.WHERE](where, mask, values, const_value(where.src[2]))
                    for where, (mask, values) in zip(contraction.masked, pairs)]
        return reduce_values(node, selected[0] if len(selected) == 1 else np.add(*selected))
    scratch: list = []
    total = None
    for mask, values in pairs:
        part = _contract_term([mask, values], full_shape, frozenset(reduced), node, scratch)
        total = part if total is None else np.add(total, part)
    contraction.scratch_bytes = sum(scratch)
    if float_values:
        total = _signed_zeros(total, pairs, full_shape, frozenset(reduced), node, negative[0])
    return total


def _signed_zeros(total, pairs, full_shape, reduced, node, negative_fill: bool):
    """The products' sum with each zero signed as the WHEREs' sum has it. A sum is -0.0 only
    where every term is (IEEE, rounding to nearest): with -0.0 fills, where every selected
    value is -0.0 (or none is selected); with +0.0 fills, where moreover every element is
    selected (elsewhere a masked-out +0.0 makes it +0.0, added here). A product's zero and
    BLAS's +0.0 start cannot tell, so where such a zero sum may be -0.0, a count of the
    selected values that are not -0.0 decides, contracted as the values were (flags
    computed unbroadcast)."""
    if negative_fill:
        zero = total == 0
    else:
        total = _plus_zero(total)
        everything_selected = functools.reduce(
            np.logical_and, [np.all(_unbroadcast(mask), axis=tuple(reduced), keepdims=True) for mask, _ in pairs])
        if not everything_selected.any():  # gather's gradient and most masks: every zero is +0.0
            return total
        zero = (total == 0) & everything_selected
    if not zero.any():
        return total
    count = None
    for mask, values in pairs:
        plain = _unbroadcast(values)
        flags = ((plain != 0) | ~np.signbit(plain)).astype(plain.dtype)
        part = _contract_term([mask, np.broadcast_to(flags, values.shape)], full_shape, reduced, node, [])
        count = part if count is None else count + part
    return np.where(zero, np.where(count > 0, total.dtype.type(0), total.dtype.type(-0.0)), total)


def _plus_zero(total):
    """total + 0.0 (-0.0 becomes +0.0), in place where the array is a fresh one."""
    if total.flags.writeable:
        return np.add(total, total.dtype.type(0), out=total)
    return total + total.dtype.type(0)


def _select_sum(contraction: Contraction, node, left, right, values):
    """REDUCE ADD over WHERE(left == right, values, 0) along one axis, where one side of
    the CMPEQ is arange(n) along an axis k (broadcast elsewhere) and the other is constant
    along k: gather's one-hot mask, n times the size of the index. Summed along k, it is a
    selection (_selected); along another axis, a scatter-add (_scattered): either way
    without building the mask, exact for every value (see each). Otherwise, or where the
    mask has no more distinct elements than the result (interpolate's index is the same
    for every image: 64 x 32 of them), the mask is computed on those and the sum runs as
    _masked_sum, one product."""
    full_shape = node.src[0].shape
    found = _selection_axis(left, right, full_shape, math.prod(node.shape))
    if found is None:
        mask = OnBroadcast(IMPL[Ops.CMPEQ])(contraction.select, left, right)
        return _masked_sum(contraction, node, mask, values)
    index, axis = found
    n = full_shape[axis]
    index = index[tuple(slice(0, 1) if a == axis else slice(None) for a in range(index.ndim))]
    inside = (index >= 0) & (index < n)
    clipped = np.where(inside, index, 0).astype(np.intp)  # the class of each picked value
    picked = np.take_along_axis(values, clipped, axis=axis)
    contraction.scratch_bytes = picked.nbytes
    summed = node.arg[1][0]
    negative = node.dtype.is_float and _negative_fill(contraction.masked[0])
    if summed == axis:
        return _selected(node, picked, inside, n, negative)
    return _scattered(node, picked, clipped, inside, axis, summed, negative)


def _negative_fill(where) -> bool:
    """The WHERE gives -0.0 where its mask is false: a sum over it is the one selected value
    exactly (x + -0.0 is x for every x, -0.0 included), and -0.0 where none is."""
    return math.copysign(1.0, where.src[2].arg) < 0


def _selection_axis(left, right, full_shape, result_size: int):
    """(the index side, the arange's axis) of a CMPEQ whose one side is arange along an
    axis the other side is constant along, when the mask would have more distinct
    elements than the result; else None."""
    distinct = math.prod(size for a, size in enumerate(full_shape)
                         if any(isinstance(v, np.ndarray) and v.ndim and v.strides[a] for v in (left, right)))
    if distinct <= result_size:
        return None
    for index, classes in ((left, right), (right, left)):
        axis = _arange_axis(classes)
        if axis is not None and isinstance(index, np.ndarray) and index.strides[axis] == 0:
            return index, axis
    return None


def _selected(node, picked, inside, n: int, negative: bool = False):
    """The sum along the class axis: the value picked (or the fill where the index is
    outside the axis), turned from -0.0 to +0.0 when n > 1 and the fill is +0.0, as adding
    the masked-out +0.0s does; with a -0.0 fill the value picked as it is."""
    zero = picked.dtype.type(-0.0 if negative else 0)
    result = np.where(inside, picked, zero)
    if n > 1 and node.dtype.is_float and not negative:
        np.add(result, zero, out=result)
    return result if result.dtype == node.dtype.np else result.astype(node.dtype.np)


def _scattered(node, picked, classes, inside, axis: int, summed: int, negative: bool = False):
    """The sum along another axis o (gather's gradient): each picked value added at its
    class, np.add.at into a -0.0 start (so a sum of only -0.0 stays -0.0), then, for a +0.0
    fill, +0.0 added where some masked-out element was summed; float16 accumulates in float32, as REDUCE
    ADD does. Values summed at one class round in index order, as any contraction's."""
    compute = accumulation_dtype(node.dtype).np
    out = np.full(node.shape, -0.0 if node.dtype.is_float else 0, dtype=compute)
    place = np.zeros(picked.shape, dtype=np.intp)  # flat position in `out` of each picked value
    step = 1
    for a in reversed(range(len(node.shape))):
        if a == axis:
            place += classes * step
        elif a != summed and node.shape[a] > 1:
            place += np.arange(node.shape[a]).reshape([-1 if b == a else 1 for b in range(len(node.shape))]) * step
        step *= node.shape[a]
    flat, hits = np.broadcast_to(place, picked.shape)[inside], picked[inside]
    np.add.at(out.reshape(-1), flat, hits.astype(compute, copy=False))
    if node.dtype.is_float and not negative:
        counts = np.bincount(flat, minlength=out.size).reshape(node.shape)
        out = np.where(counts < picked.shape[summed], out + out.dtype.type(0), out)
    return out if out.dtype == node.dtype.np else out.astype(node.dtype.np)


def _arange_axis(value):
    """The axis along which integer `value` is 0, 1, ..., n-1, broadcast along every other
    (stride 0 or length 1), or None."""
    if not isinstance(value, np.ndarray) or not value.ndim or value.dtype.kind not in "iu":
        return None
    moving = [a for a, (size, stride) in enumerate(zip(value.shape, value.strides)) if size > 1 and stride != 0]
    if len(moving) != 1:
        return None
    axis = moving[0]
    line = value[tuple(slice(None) if a == axis else 0 for a in range(value.ndim))]
    return axis if np.array_equal(line, np.arange(value.shape[axis])) else None


def _unbroadcast(value):
    """`value` with each axis it is broadcast along (stride 0) cut to length 1: a view."""
    return value[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in value.strides)]


def _factor_view(value, full_shape) -> tuple[np.ndarray, list[int]]:
    """The factor without its broadcast axes, and the full-shape axes it keeps."""
    index, axes = [], []
    for axis, (size, stride) in enumerate(zip(full_shape, value.strides)):
        if size != 1 and stride != 0:
            index.append(slice(None))
            axes.append(axis)
        else:
            index.append(0)
    return value[tuple(index)], axes


def _contract_term(values, full_shape, reduced, node, scratch: list, outer: tuple = ()):
    dtype = node.dtype.np
    compute = accumulation_dtype(node.dtype).np  # float16 sums accumulate in float32
    scale = None
    operands = []
    for value in values:
        if np.ndim(value) == 0:
            scale = value if scale is None else np.multiply(scale, value)
            continue
        view, axes = _factor_view(value, full_shape)
        if not axes:  # broadcast from a single value: a scalar factor after all
            scale = view if scale is None else np.multiply(scale, view)
            continue
        converted = view.astype(compute, copy=False)
        if converted is not view:
            scratch.append(converted.nbytes)
        operands.append((converted, axes))
    if scale is not None and operands:
        # the scalar factor scales an operand, not the sum: sum(x * c), not c * sum(x), which
        # can overflow where the products do not, and loses the nan of a 0 * inf
        operands, scale = _scaled_smallest(operands, scale, compute, scratch), None
    present = set().union(*(axes for _, axes in operands)) if operands else set()
    kept = [a for a in range(len(full_shape)) if a not in reduced and full_shape[a] != 1]
    out_axes = [a for a in kept if a in present]
    if len(operands) == 2:
        result = _contract_pair(operands, reduced, out_axes, full_shape, scratch, outer)
    elif len(operands) == 1:
        view, axes = operands[0]
        result = np.sum(view, axis=tuple(i for i, a in enumerate(axes) if a in reduced), dtype=compute)
        result = np.asarray(result)
    elif operands:
        subscripts = [(view, [LETTERS[a] for a in axes]) for view, axes in operands]
        spec = ",".join("".join(letters) for _, letters in subscripts) + "->" + "".join(LETTERS[a] for a in out_axes)
        result = _contiguous(np.einsum(spec, *(v for v, _ in subscripts), optimize=True), scratch)
    else:
        result = np.ones((), dtype=compute)
    result = _apply_scale(result, scale, math.prod(full_shape[a] for a in reduced if a not in present), compute)
    if result.dtype != dtype:
        scratch.append(result.nbytes)
        result = result.astype(dtype)
    keep_shape = tuple(full_shape[a] if a in present and a not in reduced else 1 for a in range(len(full_shape)))
    result = result.reshape(keep_shape)
    return result if keep_shape == node.shape else np.broadcast_to(result, node.shape)


def _scaled_smallest(operands: list, scale, compute, scratch: list) -> list:
    """`operands` with the one of fewest elements multiplied by `scale` (the cheapest place)."""
    smallest = min(range(len(operands)), key=lambda i: operands[i][0].size)
    view, axes = operands[smallest]
    scaled = np.multiply(view, np.asarray(scale).astype(compute, copy=False), dtype=compute)
    scratch.append(scaled.nbytes)
    return [*operands[:smallest], (scaled, axes), *operands[smallest + 1:]]


def _apply_scale(result, scale, count: int, compute):
    """result * scale * count, in place (the result is always a fresh array here)."""
    if count != 1:
        factor = np.array(count).astype(compute)  # integers wrap, as count additions would
        result = np.multiply(result, factor, out=result) if result.ndim else np.multiply(result, factor)
    if scale is not None:
        scale = np.asarray(scale).astype(compute, copy=False)
        result = np.multiply(result, scale, out=result) if result.ndim else np.multiply(result, scale)
    return np.asarray(result)


def _contract_pair(operands, reduced, out_axes, full_shape, scratch: list, outer: tuple = ()):
    """Two factors: one np.matmul (or einsum for many tiny matrices), result in out_axes
    order: C-contiguous, or, given `outer`, a transposed view of a product laid out as
    _outer_layout says, where one product writes it so without a copy."""
    (a, a_axes), (b, b_axes) = operands
    # an axis only one factor has and the REDUCE sums over: sum it in that factor first
    a, a_axes = _sum_private(a, a_axes, set(b_axes), reduced, scratch)
    b, b_axes = _sum_private(b, b_axes, set(a_axes), reduced, scratch)
    size = {x: full_shape[x] for x in a_axes + b_axes}
    layout = _outer_layout(a_axes, b_axes, out_axes, outer) if outer else None
    if layout is not None:
        result = _pair_product(a, a_axes, b, b_axes, reduced, layout, size, scratch, copy=False)
        if result is not None:
            return np.transpose(result, [layout.index(x) for x in out_axes])
    return _pair_product(a, a_axes, b, b_axes, reduced, out_axes, size, scratch)


def _pair_product(a, a_axes, b, b_axes, reduced, out_axes, size, scratch: list, copy: bool = True):
    """The product of two factors as a C-contiguous array in out_axes order; with
    copy=False, None (before any arithmetic) where that takes a transposed copy."""
    common = set(a_axes) & set(b_axes)
    batch = [x for x in out_axes if x in common]
    contracted = [x for x in a_axes if x in common and x in reduced]
    a_free = [x for x in a_axes if x not in common]
    b_free = [x for x in b_axes if x not in common]
    if b_free and a_free and max(b_free) < min(a_free):  # the result reads B's axes first: swap
        a, a_axes, a_free, b, b_axes, b_free = b, b_axes, b_free, a, a_axes, a_free
    batch_n, m, n, k = (math.prod(size[x] for x in group) for group in (batch, a_free, b_free, contracted))
    order = batch + a_free + b_free
    if order == out_axes:
        if copy and _swap_is_cheaper(a, a_axes, b, b_axes, batch, a_free, b_free, contracted, batch_n * m * n):
            a, a_axes, a_free, b, b_axes, b_free = b, b_axes, b_free, a, a_axes, a_free
            m, n = n, m
            order = batch + a_free + b_free  # the result's transposed copy below is the cheap part
    else:  # the result would need a transposed copy: try batching the leading axes instead
        lead = _leading_batch(a_axes, b_axes, common, out_axes)
        work_per_product = batch_n * m * n * k // math.prod(size[x] for x in lead) if lead else 0
        if work_per_product >= _LEAD_MIN_WORK:
            return _matmul_in_output_order(a, a_axes, b, b_axes, lead, contracted, out_axes, size, scratch)
        if not copy:
            return None
    if batch and m * n * k < _MATMUL_MIN_WORK:
        spec = "".join(LETTERS[x] for x in a_axes) + "," + "".join(LETTERS[x] for x in b_axes) + "->" \
            + "".join(LETTERS[x] for x in order)
        result = np.einsum(spec, a, b)
    else:
        lhs = np.transpose(a, [a_axes.index(x) for x in batch + a_free + contracted])
        rhs = np.transpose(b, [b_axes.index(x) for x in batch + contracted + b_free])
        lead = (batch_n,) if batch else ()
        result = np.matmul(_reshaped(lhs, (*lead, m, k), scratch), _reshaped(rhs, (*lead, k, n), scratch))
        result = result.reshape([size[x] for x in order])
    if order != out_axes:
        result = np.transpose(result, [order.index(x) for x in out_axes])
    return _contiguous(result, scratch)


def _swap_is_cheaper(a, a_axes, b, b_axes, batch, a_free, b_free, contracted, result_size: int) -> bool:
    """Whether B^T A^T, then a transposed copy of the result, is much cheaper than A B:
    each factor that matmul's layout makes numpy copy costs by how short the copy's
    contiguous inner runs are. conv2d's weight gradient contracts N, H, W of the windows:
    as the right factor, (N·H·W, C·kh·kw), its copy gathers runs of kw = 3 elements (30 ms
    for (32, 32, 32, 32) windows of 3x3); as the left, (C·kh·kw, N·H·W), rows of W (8 ms)."""
    def cost(view, axes, first, second):  # the factor as matmul reads it: (batch, first, second)
        view = np.transpose(view, [axes.index(x) for x in batch + first + second])
        groups = ([len(batch)] if batch else []) + [len(first), len(second)]
        return _copy_cost(view, groups)

    now = cost(a, a_axes, a_free, contracted) + cost(b, b_axes, contracted, b_free)
    swapped = cost(b, b_axes, b_free, contracted) + cost(a, a_axes, contracted, a_free) + _SHORT_RUNS * result_size
    return 2 * swapped < now


_SHORT_RUNS, _LONG_RUNS = 8, 2  # relative cost per element of copying in runs shorter than 8 elements, or longer


def _copy_cost(view, groups: list[int]) -> int:
    """The relative cost of reshaping `view` to one axis per group of consecutive axes: 0
    where a view fits, else its size times the per-element cost of its contiguous runs."""
    shape, strides = view.shape, view.strides
    start = 0
    for count in groups:
        kept = [axis for axis in range(start, start + count) if shape[axis] != 1]
        if any(strides[x] != strides[y] * shape[y] for x, y in zip(kept, kept[1:])):
            break
        start += count
    else:
        return 0
    run = 1
    for axis in reversed(range(view.ndim)):
        if shape[axis] == 1:
            continue
        if strides[axis] != run * view.itemsize:
            break
        run *= shape[axis]
    return view.size * (_SHORT_RUNS if run < 8 else _LONG_RUNS)


def _outer_layout(a_axes, b_axes, out_axes, outer) -> list | None:
    """out_axes with the axes in `outer` moved to just outside the innermost run of axes
    that one factor alone has. conv2d's input gradient (N, C, H, W, kh, kw), scatter-added
    one window position (kh, kw) at a time, is then laid out (N, C, kh, kw, H, W), as
    im2col's columns are, and each add reads rows of W neighbours instead of elements
    kh*kw apart (col2im of a (32, 32, 32, 32) gradient: 21 -> 10 ms). None when that is
    out_axes itself, or the innermost axis is in both factors."""
    moved = [x for x in out_axes if x in outer]
    rest = [x for x in out_axes if x not in outer]
    if not moved or not rest:
        return None

    def owner(axis):
        return axis in a_axes, axis in b_axes

    if owner(rest[-1]) == (True, True):
        return None
    start = len(rest) - 1
    while start > 0 and owner(rest[start - 1]) == owner(rest[-1]):
        start -= 1
    layout = rest[:start] + moved + rest[start:]
    return None if layout == out_axes else layout


_LEAD_MIN_WORK = 1 << 15  # per matrix product: below it, one large product and a transposed copy are faster


def _leading_batch(a_axes, b_axes, common, out_axes) -> list | None:
    """The shortest prefix of out_axes after which the output is (free axes of one factor)
    then (free axes of the other): batching over that prefix, each factor broadcast along
    the prefix axes it lacks, np.matmul writes the result already in out_axes order. The
    prefix holds every kept axis both factors have. None when there is no such split."""
    owner = {x: 2 if x in common else 0 if x in a_axes else 1 for x in out_axes}
    for start in range(len(out_axes) + 1):
        rest = [owner[x] for x in out_axes[start:]]
        if 2 not in rest and sum(1 for i in range(len(rest)) if i == 0 or rest[i] != rest[i - 1]) <= 2:
            return out_axes[:start] if start else None
    return None


def _matmul_in_output_order(a, a_axes, b, b_axes, lead, contracted, out_axes, size, scratch: list):
    """np.matmul batched over `lead` (see _leading_batch): (..., m, k) @ (..., k, n), with
    m the free axes of the factor that comes first in the output."""
    rest = out_axes[len(lead):]
    if rest and rest[0] in b_axes:
        a, a_axes, b, b_axes = b, b_axes, a, a_axes
    a_free = [x for x in rest if x in a_axes]
    b_free = [x for x in rest if x in b_axes]

    def matrices(value, axes, inner):  # inner: the last two groups, in order
        present = [x for x in lead if x in axes]
        value = np.transpose(value, [axes.index(x) for x in present + inner[0] + inner[1]])
        shape = [size[x] if x in axes else 1 for x in lead] + [math.prod(size[x] for x in group) for group in inner]
        return _reshaped(value, tuple(shape), scratch)

    result = np.matmul(matrices(a, a_axes, (a_free, contracted)), matrices(b, b_axes, (contracted, b_free)))
    return _contiguous(result.reshape([size[x] for x in out_axes]), scratch)


def _sum_private(view, axes, other_axes, reduced, scratch: list):
    private = [i for i, a in enumerate(axes) if a in reduced and a not in other_axes]
    if not private:
        return view, axes
    summed = np.sum(view, axis=tuple(private))
    scratch.append(np.asarray(summed).nbytes)
    return summed, [a for i, a in enumerate(axes) if i not in private]


def _reshaped(view, shape, scratch: list):
    """view.reshape(shape), counting the copy numpy makes when no view fits."""
    out = view.reshape(shape)
    if not np.may_share_memory(out, view):
        scratch.append(out.nbytes)
    return out


def _contiguous(result, scratch: list):
    """C order (einsum and transposes can leave others, which slow later elementwise ops)."""
    if result.flags.c_contiguous:
        return result
    scratch.append(result.nbytes)
    return np.ascontiguousarray(result)
