"""Chains of movement ops as one strided view, and sums over padded chains as strided
scatter-adds: the index algebra the evaluator uses to run them without copies.

A chain of RESHAPE, EXPAND, PERMUTE, SHRINK and FLIP picks, for each element of its
result, one element of the array it starts from (its *base*). When that pick is an affine
function of the result's index, base[c + A·i], the whole chain is one numpy strided view
of the base, even where numpy, op by op, would copy: a RESHAPE of a broadcast copies, and
that is how conv2d's windows are spelled (tile the input, then cut it into rows that each
start a little later). Likewise a REDUCE ADD over a chain of PAD, RESHAPE, PERMUTE and
FLIP starting from g adds each element of g into exactly one slot of the result,
r = c + A·j: a strided scatter-add, which is how the gradient of those windows (col2im)
runs without building the padded tiles.

An index is a list of affine forms, one per axis of the array it indexes, over the axes of
the array the chain is seen from. Each op's index map is one row of a table: BACKWARD maps
an op's result index to its source's (for views), FORWARD its source's to its result's
(for scatters). Only RESHAPE needs // and %; they are kept only where the variables'
ranges prove the result affine (the operand stays within one block), and otherwise the
chain is not one view and the evaluator runs it op by op.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...core.ops import Ops, accumulation_dtype

MAX_CHAIN = 16        # ops followed back from one node: chains in real graphs are a few ops long
MAX_SCATTER_LOOPS = 4096  # strided adds one scatter may take (a 3x3 conv's input gradient takes 9)


@dataclass(frozen=True)
class Affine:
    """const + Σ coeffs[k]·v_k over variables v_k ∈ [0, extents[k])."""
    const: int
    coeffs: tuple[int, ...]

    @staticmethod
    def variable(axis: int, rank: int) -> Affine:
        return Affine(0, tuple(int(k == axis) for k in range(rank)))

    @staticmethod
    def constant(value: int, rank: int) -> Affine:
        return Affine(value, (0,) * rank)

    def plus(self, value: int) -> Affine:
        return Affine(self.const + value, self.coeffs)

    def negated(self) -> Affine:
        return Affine(-self.const, tuple(-c for c in self.coeffs))

    def bounds(self, extents) -> tuple[int, int]:
        low = high = self.const
        for c, n in zip(self.coeffs, extents):
            low += min(0, c * (n - 1))
            high += max(0, c * (n - 1))
        return low, high


def identity(shape) -> list[Affine]:
    return [Affine.variable(axis, len(shape)) for axis in range(len(shape))]


def _combine(index: list[Affine], weights, rank: int) -> Affine:
    """Σ weights[j]·index[j]: the flat position of an index in a row-major array."""
    const, coeffs = 0, [0] * rank
    for form, weight in zip(index, weights):
        const += weight * form.const
        for k, c in enumerate(form.coeffs):
            coeffs[k] += weight * c
    return Affine(const, tuple(coeffs))


def _floordiv(form: Affine, divisor: int, extents) -> Affine | None:
    """form // divisor as an affine form, when the ranges prove it is one."""
    if divisor == 1:
        return form
    low, high = form.bounds(extents)
    if low // divisor == high // divisor:  # all within one block
        return Affine.constant(low // divisor, len(extents))
    # form = divisor·(Σ q_k v_k + q_0) + (Σ r_k v_k + r_0) with 0 <= r < divisor: exact
    # when the remainder part stays below the divisor
    remainder_high = form.const % divisor + sum(c % divisor * (n - 1) for c, n in zip(form.coeffs, extents))
    if remainder_high >= divisor:
        return None
    return Affine(form.const // divisor, tuple(c // divisor for c in form.coeffs))


def _mod(form: Affine, modulus: int, extents) -> Affine | None:
    """form % modulus as an affine form, when the ranges prove it is one."""
    if modulus == 1:
        return Affine.constant(0, len(extents))
    low, high = form.bounds(extents)
    if low // modulus == high // modulus:
        return form.plus(-(low // modulus) * modulus)
    reduced = Affine(form.const % modulus, tuple(c % modulus for c in form.coeffs))  # ≡ form (mod modulus)
    return reduced if reduced.bounds(extents)[1] < modulus else None


def _row_major(shape) -> list[int]:
    """Element strides of a C-ordered array of this shape."""
    weights, step = [], 1
    for size in reversed(shape):
        weights.append(step)
        step *= size
    return weights[::-1]


def _reshaped_index(index: list[Affine], from_shape, to_shape, extents) -> list[Affine] | None:
    """The same element's index in a reshaped array: unflatten the flat position."""
    flat = _combine(index, _row_major(from_shape), len(extents))
    out = []
    for block, size in zip(_row_major(to_shape), to_shape):
        quotient = _floordiv(flat, block, extents)
        axis = None if quotient is None else _mod(quotient, size, extents)
        if axis is None:
            return None
        out.append(axis)
    return out


# ----------------------------------------------------------------------------- the tables
# BACKWARD[op](node, index of node's result) -> index of its source (None: not affine).
# FORWARD[op](node, index of its source) -> index of node's result. `extents` are the
# variables' ranges.

def _reshape_back(node, index, extents):
    return _reshaped_index(index, node.shape, node.src[0].shape, extents)


def _expand_back(node, index, extents):      # a size-1 source axis is read at 0 however far it grew
    rank = len(extents)
    return [Affine.constant(0, rank) if n == 1 else form for form, n in zip(index, node.src[0].shape)]


def _permute_back(node, index, extents):     # result axis i is source axis order[i]
    source = [None] * len(index)
    for i, axis in enumerate(node.arg):
        source[axis] = index[i]
    return source


def _shrink_back(node, index, extents):      # result i is source start + i
    return [form.plus(start) for form, (start, _) in zip(index, node.arg)]


def _flip(node, index, extents):             # i <-> n - 1 - i, both ways
    return [form.negated().plus(n - 1) if flipped else form for form, flipped, n in zip(index, node.arg, node.shape)]


def _reshape_forward(node, index, extents):
    return _reshaped_index(index, node.src[0].shape, node.shape, extents)


def _permute_forward(node, index, extents):
    return [index[axis] for axis in node.arg]


def _pad_forward(node, index, extents):      # source i lands at before + i
    return [form.plus(before) for form, (before, _) in zip(index, node.arg)]


BACKWARD = {
    Ops.RESHAPE: _reshape_back,    # unflatten the flat position in the source's shape
    Ops.EXPAND: _expand_back,      # grown axes read index 0
    Ops.PERMUTE: _permute_back,    # axes reordered
    Ops.SHRINK: _shrink_back,      # shifted by the start
    Ops.FLIP: _flip,               # reversed
}
FORWARD = {
    Ops.RESHAPE: _reshape_forward,
    Ops.PERMUTE: _permute_forward,
    Ops.FLIP: _flip,
    Ops.PAD: _pad_forward,         # shifted by the padding before (the padding itself is zeros)
}
# SHRINK drops elements and EXPAND repeats them: a scatter through either is not one add per element


# ----------------------------------------------------------------------------- views

class StridedView:
    """The evaluator's step for a movement chain that is one view: base[starts + A·i].
    Writable where the base is and no two elements share memory; read-only where they do
    (a convolution's windows overlap, a broadcast repeats)."""

    __slots__ = ("starts", "coeffs")

    def __init__(self, index: list[Affine]):
        self.starts = tuple(form.const for form in index)     # per base axis
        self.coeffs = tuple(form.coeffs for form in index)    # per base axis, per result axis

    def __call__(self, node, base):
        base = np.asarray(base)
        first = base[tuple(slice(s, s + 1) for s in self.starts)]  # a view starting at the first element
        strides = tuple(sum(row[axis] * stride for row, stride in zip(self.coeffs, base.strides))
                        for axis in range(len(node.shape)))
        moving = [axis for axis, n in enumerate(node.shape) if n > 1]
        return as_strided(first, node.shape, strides, writeable=_no_overlap(moving, strides, node.shape))


def chain_view(node, source_register, producer_of) -> tuple[object, StridedView, int, bool] | None:
    """The longest chain of movement ops ending at `node` (whose source is in
    `source_register`) that is one view of where it starts: (the register of that base, the
    view, the number of ops it spans, whether one of them is a RESHAPE), or None when
    `node` is not a movement op or has no elements. `producer_of(register)` is the movement
    node computing a register and that node's source register, or None where the chain
    cannot go further back."""
    if node.op not in BACKWARD or 0 in node.shape:
        return None
    extents = node.shape
    index, best = identity(node.shape), None
    current, spanned, reshaped = (node, source_register), 0, False
    while current is not None and spanned < MAX_CHAIN:
        op_node, register = current
        index = BACKWARD[op_node.op](op_node, index, extents)
        if index is None:
            break
        spanned += 1
        reshaped = reshaped or op_node.op == Ops.RESHAPE
        best = (register, index, spanned, reshaped)
        current = producer_of(register)
    return None if best is None else (best[0], StridedView(best[1]), best[2], best[3])


# ----------------------------------------------------------------------------- scatters

class StridedScatter:
    """The evaluator's step for REDUCE ADD over a PAD/RESHAPE/PERMUTE/FLIP chain of g:
    zeros, then each element of g added at its slot starts + A·j. g's axes in `looped` are
    walked one position at a time, so that each numpy add writes a view whose elements do
    not overlap; axes in `summed` reach no slot of their own and are summed first."""

    __slots__ = ("starts", "coeffs", "looped", "summed")

    def __init__(self, index: list[Affine], looped: tuple[int, ...], summed: tuple[int, ...]):
        self.starts = tuple(form.const for form in index)     # per result axis
        self.coeffs = tuple(form.coeffs for form in index)    # per result axis, per axis of g
        self.looped, self.summed = looped, summed

    def __call__(self, node, g):
        compute = accumulation_dtype(node.dtype).np  # float16 sums in float32
        g = np.asarray(g).astype(compute, copy=False)
        out = np.zeros(node.shape, dtype=compute)
        if self.summed:
            g = np.sum(g, axis=self.summed, keepdims=True, dtype=compute)
        rest = [axis for axis in range(g.ndim) if axis not in self.looped]
        rest_shape = tuple(g.shape[axis] for axis in rest)
        strides = tuple(sum(row[axis] * stride for row, stride in zip(self.coeffs, out.strides)) for axis in rest)
        for position in itertools.product(*(range(g.shape[axis]) for axis in self.looped)):
            at = dict(zip(self.looped, position))
            first = tuple(slice(s, s + 1) for s in (
                start + sum(row[axis] * p for axis, p in at.items()) for start, row in zip(self.starts, self.coeffs)))
            target = as_strided(out[first], rest_shape, strides)
            part = g[tuple(at.get(axis, slice(None)) for axis in range(g.ndim))]
            np.add(target, part, out=target)
        return out if compute == node.dtype.np else out.astype(node.dtype.np)


def _no_overlap(axes, steps, extents) -> bool:
    """Distinct positions along `axes` reach distinct flat offsets (a sufficient test:
    sorted by step, each step exceeds the span of all the smaller ones)."""
    span = 0
    for axis in sorted(axes, key=lambda a: abs(steps[a])):
        if abs(steps[axis]) <= span:
            return False
        span += abs(steps[axis]) * (extents[axis] - 1)
    return True


def _loop_axes(steps, extents, candidates) -> tuple[int, ...] | None:
    """Few axes of g to walk one by one so the rest add without overlap: the smallest
    axes are taken until the rest do not overlap, then any that turn out not needed are
    given back."""
    looped = []
    rest = list(candidates)
    for axis in sorted(candidates, key=lambda a: extents[a]):
        if _no_overlap(rest, steps, extents):
            break
        looped.append(axis)
        rest.remove(axis)
    if not _no_overlap(rest, steps, extents):
        return None
    for axis in reversed(looped[:]):
        if _no_overlap(rest + [axis], steps, extents):
            looped.remove(axis)
            rest.append(axis)
    if math.prod(extents[a] for a in looped) > MAX_SCATTER_LOOPS:
        return None
    return tuple(sorted(looped))


def reduce_scatter(node, chain: list, extents) -> StridedScatter | None:
    """REDUCE ADD `node` over `chain` (its movement/PAD ops, the one nearest g first) as a
    scatter-add of g, whose shape is `extents`; None when some op of it is not affine."""
    index = identity(extents)
    for op_node in reversed(chain):
        index = FORWARD[op_node.op](op_node, index, extents)
        if index is None:
            return None
    reduced = set(node.arg[1])
    rank = len(extents)
    kept = [Affine.constant(0, rank) if axis in reduced else form for axis, form in enumerate(index)]
    steps = _combine(kept, _row_major(node.shape), rank).coeffs  # flat offset in the result per step of g
    moving = [axis for axis in range(rank) if extents[axis] > 1]
    summed = tuple(axis for axis in moving if steps[axis] == 0)
    looped = _loop_axes(steps, extents, [axis for axis in moving if steps[axis] != 0])
    if looped is None:
        return None
    return StridedScatter(kept, looped, summed)
