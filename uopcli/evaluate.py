"""The numpy evaluator: one table maps each op to numpy, an iterative compiler turns a
graph into a flat list of steps, and a tight loop runs them.

    evaluate([loss, grad_w], {"x": x, "w": w})        -> [array, array]
    evaluate_graph(graph, {"x": x, "w": w})           -> {"loss": array, "grad_w": array}

How it works, and why:
- **Compile once, run flat.** An explicit-stack walk (no recursion: a 1,000,000-node chain
  is fine) gives every value a register and emits one step per computing node. Nodes
  that only rename a value (CONTIGUOUS, DETACH, COPY, GETTUPLE, a body's slot PARAM,
  STORE/AFTER) get no step: they share their source's register.
- **Calls are inlined per call site.** A FUNCTION/CALL body is walked in a context of its
  own, where slot PARAM i is the register of arg i; a GETTUPLE asks for one body output
  in that context, so each call node runs its body once and unread outputs never run.
- **Free after last use.** The compiler knows each register's last reader, so the loop
  drops a value right after it: peak memory stays near what hand-written numpy holds.
- **Contractions never materialise.** A REDUCE ADD over a product (or a sum of products)
  of RESHAPE/EXPAND/PERMUTE views, which is how tinygrad spells matmul and what its
  gradients produce, runs as one BLAS matmul (or einsum) over the un-broadcast operands;
  the MUL node is never built (see `_Contraction`).
- **Movement chains are views.** A chain of RESHAPE/EXPAND/PERMUTE/SHRINK/FLIP whose
  index map is affine runs as one strided view of where it starts, even where numpy would
  copy op by op (conv2d's windows: tiles, then rows cut from them), and a REDUCE ADD over a
  chain with PADs (the windows' gradient) as a strided scatter-add (see uopcli.strided).
- **Write into dying arrays.** An elementwise step whose source array (one the evaluator
  made) dies with it writes its result there, as hand-written numpy would (`z += b`).
- numpy's floating-point warnings are silenced: results are IEEE values (1/0 = inf).

Semantics where the format leaves room (decided here):
- integer FDIV is C division (as CDIV); integer division or remainder by zero gives 0;
  integer POW with a negative exponent gives 1/a^|b| truncated (1, -1 or 0).
- a float16 contraction (a REDUCE ADD of float16 products, or the CAST, REDUCE ADD, CAST
  a float16 gradient spells) multiplies and adds in float32, as tinygrad's compiled kernels
  do: the products skip their float16 rounding, so one too large for float16 does not
  turn the sum into inf or nan. (A product that is also an output is not fused, and is
  rounded: it, and a sum of it, are then evaluated node by node.)
- inputs are keyed by name, by PARAM node, or by any node whose value you supply (its
  sources are then not evaluated); arrays must match shape and dtype exactly.
- outputs are writable arrays: numpy scalars become 0-d arrays, read-only views (a
  broadcast, an embedded BUFFER) are copied; other views are returned as they are.
- EvalStats.peak_bytes counts arrays held between steps and a contraction's temporaries
  (inputs and BUFFER bytes are not the evaluator's); scratch space inside one numpy call
  (BLAS packing, einsum's own intermediates) is not seen.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .errors import EvaluationError
from . import strided
from .ops import ELEMENTWISE, Ops, dtypes
from .uop import UOp, no_gc

__all__ = ["evaluate", "evaluate_graph", "EvalStats"]


@dataclass
class EvalStats:
    """Filled in by `evaluate` when passed: what the evaluation cost."""
    seconds: float = 0.0          # wall time, compile and run
    peak_bytes: int = 0           # peak bytes of live arrays the evaluator allocated (not the caller's inputs)
    nodes_evaluated: int = 0      # steps run (renaming nodes and fused products cost none)
    contractions: int = 0         # REDUCE ADD over products run as matmul/einsum


# ----------------------------------------------------------------------------- op helpers
# Exact dtype semantics: every result is in the node's dtype. Sources of a binary op share
# one dtype, and numpy keeps it (a source of shape () broadcasts as numpy broadcasts).

def _uint_of(dtype) -> np.dtype:
    """The unsigned integer type of the same item size: WHERE moves bits through it."""
    return np.dtype(f"u{dtype.itemsize}")


def _const(node):
    return node.dtype.np.type(node.arg)  # a numpy scalar: cheapest operand for ufuncs


def _cdiv(node, a, b):
    if node.dtype.is_float:
        return a / b
    if node.dtype.kind == "u":
        return np.floor_divide(a, b)
    # C division truncates toward zero: a - fmod(a, b) is an exact multiple of b
    # (and cannot overflow, |fmod| < |b| with a's sign), so floor division is exact.
    return np.floor_divide(np.subtract(a, np.fmod(a, b)), b)


def _int_pow(a, b):
    """Integer power as C code would write it: negative exponents give 1/a^|b| truncated
    (so 1, -1 or 0); numpy refuses them."""
    if b.dtype.kind == "u" or not np.any(b < 0):
        return np.power(a, b)
    negative = b < 0
    out = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    one, zero = a.dtype.type(1), a.dtype.type(0)
    small = np.where(a == 1, one, np.where(a == -1, np.where(b % 2 == 0, one, -one), zero))
    return np.where(negative, small, out).astype(a.dtype)


def _pow(node, a, b):
    return a ** b if node.dtype.is_float else _int_pow(np.asarray(a), np.asarray(b))


def _shl(node, a, b):
    """a << b; bools shift as C's ints do and convert back (nonzero is true): a << b is a."""
    return (a.astype(np.uint8) << b).astype(np.bool_) if node.dtype.is_bool else a << b


def _shr(node, a, b):
    """a >> b; bools as in C: true >> true is 0, so the result is a and not b."""
    return (a.astype(np.uint8) >> b).astype(np.bool_) if node.dtype.is_bool else a >> b


def _is_zero_bits(x) -> bool:
    return x.ndim == 0 and not x.view(_uint_of(x.dtype))  # +0.0, 0, False (not -0.0)


def _where(node, cond, a, b):
    """`a` where cond else `b`, bit for bit. np.where is 5-10x slower than a few passes of
    integer arithmetic on a random mask, so the bits are selected arithmetically:
    b ^ ((a ^ b) * cond), exact for every value (-0.0, inf, nan); a zero branch (relu and
    its gradient) needs only the multiply."""
    if not node.shape:
        return np.where(cond, a, b)
    uint = _uint_of(node.dtype)
    if _is_zero_bits(b):
        return np.multiply(a.view(uint), cond, dtype=uint).view(node.dtype.np)
    if _is_zero_bits(a):
        return np.multiply(b.view(uint), np.logical_not(cond), dtype=uint).view(node.dtype.np)
    b_bits = b.view(uint)
    bits = np.bitwise_xor(a.view(uint), b_bits)
    if bits.shape == node.shape:
        np.multiply(bits, cond, out=bits)
    else:  # both branches are scalars
        bits = np.multiply(bits, cond, dtype=uint)
    return np.bitwise_xor(bits, b_bits, out=bits).view(node.dtype.np)


def _where_into(node, cond, a, b):
    """WHERE written into a dying `a` (see _where)."""
    return _select_into(node, a, b, cond) if a.flags.writeable else _where(node, cond, a, b)


def _where_into_b(node, cond, a, b):
    """WHERE written into a dying `b`."""
    return _select_into(node, b, a, np.logical_not(cond)) if b.flags.writeable else _where(node, cond, a, b)


def _select_into(node, target, other, keep):
    """`target` where `keep`, else `other`, in place: target ^= other; target *= keep;
    target ^= other (on the bits, so exact for every value; a zero `other` needs only the multiply)."""
    bits = target.view(_uint_of(node.dtype))
    if _is_zero_bits(other):
        np.multiply(bits, keep, out=bits)
        return target
    other_bits = other.view(bits.dtype)
    np.bitwise_xor(bits, other_bits, out=bits)
    np.multiply(bits, keep, out=bits)
    np.bitwise_xor(bits, other_bits, out=bits)
    return target


def _mulacc(node, a, b, c):
    product = np.multiply(a, b)
    if isinstance(product, np.ndarray) and product.shape == node.shape:
        return np.add(product, c, out=product)
    return np.add(product, c)


def _reduce(node, x):
    op, axes = node.arg
    if _reduce_by_positions_pays(x, axes):
        return _reduce_by_positions(node, x, op, axes)
    if op == "ADD":
        if node.dtype.itemsize == 2 and node.dtype.is_float:  # float16 sums accumulate in float32
            return np.sum(x, axis=axes, keepdims=True, dtype=np.float32).astype(np.float16)
        return np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)  # ints wrap in their own dtype
    if op == "MUL":
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)
    if any(node.src[0].shape[a] == 0 for a in axes):  # max over nothing: the identity
        low = -np.inf if node.dtype.is_float else np.iinfo(x.dtype).min
        return np.max(x, axis=axes, keepdims=True, initial=low)
    return np.max(x, axis=axes, keepdims=True)


_POSITIONS_MAX = 64        # reduced elements per result, at most, to reduce one position at a time
_POSITIONS_MIN_OUT = 4096  # result elements, at least: below it the Python loop costs more than it saves


def _reduce_by_positions_pays(x, axes) -> bool:
    """A REDUCE of a strided view over a few small axes (a stride-1 pool's overlapping
    windows): numpy's reduce loops over the tiny axes per element, 3-10x slower than a
    ufunc over one slice per reduced position."""
    if not isinstance(x, np.ndarray) or x.flags.c_contiguous or not axes:
        return False
    count = math.prod(x.shape[a] for a in axes)
    return 2 <= count <= _POSITIONS_MAX and x.size // count >= _POSITIONS_MIN_OUT


def _reduce_by_positions(node, x, op, axes):
    """The REDUCE as a running np.add/multiply/maximum over its reduced positions, one
    slice each (float16 sums accumulate in float32, as _reduce's)."""
    ufunc = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum}[op]
    compute = np.float32 if op == "ADD" and x.dtype == np.float16 else x.dtype
    index = [slice(None)] * x.ndim
    out = None
    for position in itertools.product(*(range(x.shape[a]) for a in axes)):
        for axis, p in zip(axes, position):
            index[axis] = slice(p, p + 1)
        part = x[tuple(index)]
        if out is None:
            out = part.astype(compute, copy=True)
        else:
            ufunc(out, part, out=out)
    return out if out.dtype == node.dtype.np else out.astype(node.dtype.np)


def _pad(node, x):
    out = np.zeros(node.shape, dtype=node.dtype.np)
    out[tuple(slice(before, before + n) for (before, _), n in zip(node.arg, np.shape(x)))] = x
    return out


def _shrink(node, x):
    return x[tuple(slice(start, end) for start, end in node.arg)]


def _flip(node, x):
    return x[tuple(slice(None, None, -1) if f else slice(None) for f in node.arg)]


# Markers for ops the compiler handles without a step.
SAME_AS_SOURCE_0 = "same value as source 0"   # the register of src[0] is reused
SAME_AS_SOURCE_1 = "same value as source 1"   # the register of src[1] is reused
STRUCTURAL = "handled by the compiler"        # inputs, call plumbing, tuples

# ----------------------------------------------------------------------------- the op table
# One row per op of format v1: the numpy that computes the node from its sources' values,
# called as impl(node, *source_values); the maths beside it. Python operators are used
# where they mean the same ufunc: on numpy scalars they are ~20x faster than np.add(...).
IMPL = {
    Ops.PARAM: STRUCTURAL,                                               # the input's array, or call arg i for slot i
    Ops.CONST: _const,                                                   # the scalar, in the node's dtype
    Ops.BUFFER: lambda n: n.buffer_array(),                              # the embedded bytes, zero-copy
    Ops.NOOP: STRUCTURAL,                                                # None (only inside a TUPLE)
    Ops.NEG: lambda n, x: -x,                                            # -x (unsigned wraps)
    Ops.RECIPROCAL: lambda n, x: np.reciprocal(x),                       # 1/x
    Ops.SQRT: lambda n, x: np.sqrt(x),                                   # √x
    Ops.EXP2: lambda n, x: np.exp2(x),                                   # 2^x
    Ops.LOG2: lambda n, x: np.log2(x),                                   # log₂ x
    Ops.SIN: lambda n, x: np.sin(x),                                     # sin x
    Ops.TRUNC: lambda n, x: np.trunc(x),                                 # x rounded toward 0
    Ops.CAST: lambda n, x: np.asarray(x).astype(n.dtype.np),             # value converted; float -> int truncates
    Ops.BITCAST: lambda n, x: x.view(n.dtype.np),                        # same bytes, new dtype
    Ops.ADD: lambda n, a, b: a + b,                                      # a + b
    Ops.SUB: lambda n, a, b: a - b,                                      # a - b
    Ops.MUL: lambda n, a, b: a * b,                                      # a * b
    Ops.FDIV: _cdiv,                                                     # a / b (integers: as CDIV)
    Ops.MAX: lambda n, a, b: np.maximum(a, b),                           # max(a, b)
    Ops.POW: _pow,                                                       # a^b (integers: C-style, b<0 -> 1/a^|b|)
    Ops.CDIV: _cdiv,                                                     # a / b truncated toward 0
    Ops.CMOD: lambda n, a, b: np.fmod(a, b),                             # a - b*trunc(a/b): the dividend's sign
    Ops.AND: lambda n, a, b: a & b,                                      # a & b (bool: and)
    Ops.OR: lambda n, a, b: a | b,                                       # a | b (bool: or)
    Ops.XOR: lambda n, a, b: a ^ b,                                      # a ^ b (bool: xor)
    Ops.SHL: _shl,                                                       # a << b (bool: as C, via int)
    Ops.SHR: _shr,                                                       # a >> b (signed: arithmetic)
    Ops.CMPLT: lambda n, a, b: a < b,                                    # a < b
    Ops.CMPNE: lambda n, a, b: a != b,                                   # a != b
    Ops.CMPEQ: lambda n, a, b: a == b,                                   # a == b
    Ops.WHERE: _where,                                                   # cond ? a : b
    Ops.MULACC: _mulacc,                                                 # a*b + c
    Ops.REDUCE: _reduce,                                                 # Σ / Π / max over axes, kept as size 1
    Ops.RESHAPE: lambda n, x: np.reshape(x, n.arg),                      # same elements, new shape (a view when it can)
    Ops.EXPAND: lambda n, x: np.broadcast_to(x, n.arg),                  # size-1 axes repeated: a zero-copy view
    Ops.PERMUTE: lambda n, x: np.transpose(x, n.arg),                    # axes reordered: a view
    Ops.PAD: _pad,                                                       # zeros around x
    Ops.SHRINK: _shrink,                                                 # x[start:end, ...]: a view
    Ops.FLIP: _flip,                                                     # x[::-1] on marked axes: a view
    Ops.CONTIGUOUS: SAME_AS_SOURCE_0,                                    # x (layout is numpy's business)
    Ops.CONTIGUOUS_BACKWARD: SAME_AS_SOURCE_0,                           # x
    Ops.DETACH: SAME_AS_SOURCE_0,                                        # x (only gradients stop)
    Ops.COPY: SAME_AS_SOURCE_0,                                          # x (everything runs on the CPU)
    Ops.TUPLE: STRUCTURAL,                                               # (elements...), as an output only
    Ops.FUNCTION: STRUCTURAL,                                            # body run once with slot i = arg i
    Ops.CALL: STRUCTURAL,                                                # the same (its backward body is not run)
    Ops.GETTUPLE: STRUCTURAL,                                            # body output i of that call
    Ops.STORE: SAME_AS_SOURCE_1,                                         # the stored value
    Ops.AFTER: SAME_AS_SOURCE_1,                                         # the value its STORE wrote
}

# How a step's result relates to memory, for the peak-bytes count.
_VIEW_OPS = frozenset({Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.BITCAST})  # always views of src 0
_MAYBE_VIEW_OPS = frozenset({Ops.RESHAPE})                                          # a view when numpy can
_NEW, _VIEW, _MAYBE_VIEW, _EXTERNAL = 0, 1, 2, 3


def _memory_kind(op: str) -> int:
    if op in _VIEW_OPS:
        return _VIEW
    if op in _MAYBE_VIEW_OPS:
        return _MAYBE_VIEW
    return _EXTERNAL if op == Ops.BUFFER else _NEW


# ----------------------------------------------------------------------------- contractions

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MATMUL_MIN_WORK = 4096  # per batch item: below it, per-matrix BLAS calls cost more than einsum's loop


class _Contraction:
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

    __slots__ = ("terms", "order", "outer", "masked", "select", "scratch_bytes")

    def __init__(self, terms: tuple[tuple[int, ...], ...], order: tuple[int, ...] | None = None, masked=None,
                 select=None):
        self.terms = terms  # per term, the positions of its factors among the step's sources
        self.order = order  # a PERMUTE between the products and the REDUCE, absorbed: its axis order
        self.masked = masked
        self.select = select
        # axes the one reader of the result walks one position at a time (a scatter-add's
        # looped axes, set by _lay_out_for_scatters): laid out outside a run of the others
        self.outer: tuple[int, ...] = ()
        self.scratch_bytes = 0  # temporaries of the last call (converted operands, partial results), for EvalStats

    def __call__(self, node, *values):
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


def _masked_sum(contraction: _Contraction, node, *sources):
    """REDUCE ADD over WHERE(mask, values, 0) (or two such added) as the contraction of
    each mask (as 0 and 1) with its values: gather's one-hot selection becomes one matmul
    instead of a tensor n times the result's size, summed. Products of a selection differ
    from it only where some value is not finite (inf * 0 is nan, where the WHERE gives 0:
    then the WHEREs are run as written) or in the sign of a zero (a negative value times 0
    is -0.0, the WHERE's 0 is +0.0: adding +0.0 to each sum with a masked-out element
    restores it); sums of several selected values round as any contraction's."""
    full_shape = node.src[0].shape
    reduced = node.arg[1]
    pairs = [sources[i:i + 2] for i in range(0, len(sources), 2)]  # (mask, values) per WHERE
    float_values = node.dtype.is_float
    if float_values and not all(np.isfinite(_factor_view(values, full_shape)[0]).all() for _, values in pairs):
        selected = [IMPL[Ops.WHERE](where, mask, values, _const(where.src[2]))
                    for where, (mask, values) in zip(contraction.masked, pairs)]
        return _reduce(node, selected[0] if len(selected) == 1 else np.add(*selected))
    scratch: list = []
    total = None
    for mask, values in pairs:
        part = _contract_term([mask, values], full_shape, frozenset(reduced), node, scratch)
        total = part if total is None else np.add(total, part)
    contraction.scratch_bytes = sum(scratch)
    if float_values:
        everything_selected = functools.reduce(
            np.logical_and, [np.all(_unbroadcast(mask), axis=reduced, keepdims=True) for mask, _ in pairs])
        if everything_selected.any():
            total = np.where(everything_selected, total, total + total.dtype.type(0))
        elif total.flags.writeable:
            np.add(total, total.dtype.type(0), out=total)
        else:
            total = total + total.dtype.type(0)
    return total


def _select_sum(contraction: _Contraction, node, left, right, values):
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
        mask = _OnBroadcast(IMPL[Ops.CMPEQ])(contraction.select, left, right)
        return _masked_sum(contraction, node, mask, values)
    index, axis = found
    n = full_shape[axis]
    index = index[tuple(slice(0, 1) if a == axis else slice(None) for a in range(index.ndim))]
    inside = (index >= 0) & (index < n)
    clipped = np.where(inside, index, 0).astype(np.intp)  # the class of each picked value
    picked = np.take_along_axis(values, clipped, axis=axis)
    contraction.scratch_bytes = picked.nbytes
    summed = node.arg[1][0]
    if summed == axis:
        return _selected(node, picked, inside, n)
    return _scattered(node, picked, clipped, inside, axis, summed)


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


def _selected(node, picked, inside, n: int):
    """The sum along the class axis: the value picked (or +0.0 where the index is outside
    the axis), turned from -0.0 to +0.0 when n > 1, as adding the masked-out +0.0s does."""
    zero = picked.dtype.type(0)
    result = np.where(inside, picked, zero)
    if n > 1 and node.dtype.is_float:
        np.add(result, zero, out=result)
    return result if result.dtype == node.dtype.np else result.astype(node.dtype.np)


def _scattered(node, picked, classes, inside, axis: int, summed: int):
    """The sum along another axis o (gather's gradient): each picked value added at its
    class, np.add.at into a -0.0 start (so a sum of only -0.0 stays -0.0), then +0.0 added
    where some masked-out element was summed; float16 accumulates in float32, as REDUCE
    ADD does. Values summed at one class round in index order, as any contraction's."""
    compute = np.float32 if node.dtype.np == np.float16 else node.dtype.np
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
    if node.dtype.is_float:
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
    compute = np.dtype(np.float32) if dtype == np.float16 else dtype  # float16 sums accumulate in float32
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
        subscripts = [(view, [_LETTERS[a] for a in axes]) for view, axes in operands]
        spec = ",".join("".join(letters) for _, letters in subscripts) + "->" + "".join(_LETTERS[a] for a in out_axes)
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
        spec = "".join(_LETTERS[x] for x in a_axes) + "," + "".join(_LETTERS[x] for x in b_axes) + "->" \
            + "".join(_LETTERS[x] for x in order)
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


# ----------------------------------------------------------------------------- the compiler

class _Program:
    __slots__ = ("steps", "register_count", "initial", "outputs", "contractions")

    def __init__(self):
        # a step: [impl, node, source registers, output register, memory kind, registers to free after]
        self.steps: list[list] = []
        self.register_count = 0
        self.initial: dict = {}      # register -> the caller's array (inputs)
        self.outputs: list = []      # per requested output: a register, None, or a tuple of those
        self.contractions = 0


# What the walk does per op: emit a step, reuse a source's register, or call plumbing.
_STEP, _RENAME0, _RENAME1, _PARAM, _GETTUPLE, _CALL, _VOID = range(7)


def _walk_kind(op: str, impl) -> int:
    if impl is SAME_AS_SOURCE_0:
        return _RENAME0
    if impl is SAME_AS_SOURCE_1:
        return _RENAME1
    return {Ops.PARAM: _PARAM, Ops.GETTUPLE: _GETTUPLE, Ops.FUNCTION: _CALL, Ops.CALL: _CALL,
            Ops.TUPLE: _VOID, Ops.NOOP: _VOID}.get(op, _STEP)


_OP_INFO = {op: (_walk_kind(op, impl), impl, _memory_kind(op)) for op, impl in IMPL.items()}


_VISITED = object()  # stack marker: the node below it has all its sources done


def _describe(node: UOp) -> str:
    return f"{node.dtype.name}{list(node.shape)}"


def _check_value(what: str, node: UOp, value):
    if node.shape is None:
        raise EvaluationError(f"{what}: a {node.op} node has no value to supply")
    if not isinstance(value, np.ndarray):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        else:
            raise EvaluationError(f"{what}: expected a numpy array {_describe(node)}, got {type(value).__name__}")
    if value.shape != node.shape or value.dtype != node.dtype.np:
        raise EvaluationError(f"{what}: expected {_describe(node)}, got {value.dtype}{list(value.shape)}")
    return value


class _Compiler:
    """Walks the graph from the outputs (explicit stack, post-order) and emits the program.

    A value is keyed by its node at the top level and by (context, node) inside a call
    body: context ids are given per call site, so one body called twice runs twice, with
    its own slot bindings, and one call node read by several GETTUPLEs runs once."""

    def __init__(self, inputs: Mapping):
        self.by_name: dict[str, object] = {}
        self.by_node: dict[UOp, object] = {}
        for key, value in inputs.items():
            if isinstance(key, UOp):
                self.by_node[key] = value
            elif isinstance(key, str):
                self.by_name[key] = value
            else:
                raise EvaluationError(f"input keys must be names or UOps, got {type(key).__name__}")
        self.program = _Program()
        self.register: dict = {}         # key -> register
        self.call_context: dict = {}     # key of a call node -> its body's context id
        self.context_args: dict = {}     # context id -> registers of the call's args

    def context_of(self, call_key) -> int:
        context = self.call_context.get(call_key)
        if context is None:
            context = self.call_context[call_key] = len(self.call_context) + 1
        return context

    def walk(self, roots: Sequence[UOp]) -> None:
        """The top level: an explicit stack of bare nodes (no tuple per visit: this loop
        is most of the cost of evaluating a long chain). A node is pushed, then _VISITED
        on top of it, then its sources; popping _VISITED means its sources are done."""
        register, by_node, info, program = self.register, self.by_node, _OP_INFO, self.program
        steps, count = program.steps, program.register_count
        stack = list(reversed(roots))
        push, pop = stack.append, stack.pop
        while stack:
            node = pop()
            if node is _VISITED:
                node = pop()
                how, impl, memory = info[node.op]
                if how == _STEP:
                    register[node] = count
                    steps.append([impl, node, tuple(map(register.__getitem__, node.src)), count, memory, ()])
                    count += 1
                elif how == _RENAME0:
                    register[node] = register[node.src[0]]
                elif how == _RENAME1:
                    register[node] = register[node.src[1]]
                elif how == _PARAM:
                    register[node] = count
                    program.initial[count] = self.input_value(node)
                    count += 1
                elif how == _CALL:
                    self.context_args[self.context_of(node)] = tuple(map(register.__getitem__, node.src[1:]))
                    register[node] = -1
                else:  # _GETTUPLE: its call's args are done; compile the body output it reads
                    call = node.src[0]
                    program.register_count = count
                    register[node] = self.walk_body(call.src[0].src[node.arg], self.call_context[call])
                    count = program.register_count
                continue
            if node in register:
                continue
            if by_node and node in by_node:
                register[node] = count
                program.initial[count] = _check_value(f"input {node!r}", node, by_node[node])
                count += 1
                continue
            how = info[node.op][0]
            push(node)
            push(_VISITED)
            if how == _STEP:
                sources = node.src
            elif how == _RENAME0 or how == _GETTUPLE:
                sources = node.src[:1]
            elif how == _RENAME1:
                sources = node.src[1:2]
            elif how == _CALL:
                sources = node.src[1:]
            elif how == _VOID:
                raise EvaluationError(f"{node.op} cannot be used as a value: {node!r}")
            else:
                continue
            for s in reversed(sources):
                if s not in register:
                    push(s)
        program.register_count = count

    def walk_body(self, root: UOp, root_context: int) -> int:
        """A node inside a call body (context >= 1), and what it needs, possibly in nested
        calls: the same walk over (node, context) pairs. Returns the root's register."""
        register, info, program = self.register, _OP_INFO, self.program
        steps, count = program.steps, program.register_count
        stack = [(root, root_context, False)]
        push, pop = stack.append, stack.pop
        while stack:
            node, context, ready = pop()
            key = (context, node)
            if key in register:
                continue
            how, impl, memory = info[node.op]
            if not ready:  # first visit: sources first
                push((node, context, True))
                if how == _STEP:
                    for s in reversed(node.src):
                        push((s, context, False))
                elif how == _RENAME0:
                    push((node.src[0], context, False))
                elif how == _RENAME1:
                    push((node.src[1], context, False))
                elif how == _GETTUPLE:
                    call = node.src[0]
                    push((call.src[0].src[node.arg], self.context_of((context, call)), False))
                    push((call, context, False))  # the call's args first: the body's slots read them
                elif how == _CALL:
                    for s in reversed(node.src[1:]):
                        push((s, context, False))
                elif how == _VOID:
                    raise EvaluationError(f"{node.op} cannot be used as a value: {node!r}")
                continue
            if how == _STEP:  # second visit: sources have registers
                register[key] = count
                steps.append([impl, node, tuple([register[(context, s)] for s in node.src]), count, memory, ()])
                count += 1
            elif how == _RENAME0:
                register[key] = register[(context, node.src[0])]
            elif how == _RENAME1:
                register[key] = register[(context, node.src[1])]
            elif how == _PARAM:
                if not isinstance(node.arg, int):
                    raise EvaluationError(f"a function body reads graph input {node.arg!r}: bodies must be closed")
                register[key] = self.context_args[context][node.arg]
            elif how == _GETTUPLE:
                call = node.src[0]
                register[key] = register[(self.call_context[(context, call)], call.src[0].src[node.arg])]
            else:  # _CALL: its args have registers now; its body runs when a GETTUPLE asks
                self.context_args[self.context_of(key)] = tuple(register[(context, s)] for s in node.src[1:])
                register[key] = -1
        program.register_count = count
        return register[(root_context, root)]

    def input_value(self, node: UOp):
        name = node.arg
        if not isinstance(name, str):
            raise EvaluationError(f"slot PARAM {name} {_describe(node)} is outside any function body: "
                                  "bind it by passing the node itself as an input key")
        if name not in self.by_name:
            raise EvaluationError(f"missing input {name!r}: expected {_describe(node)}")
        return _check_value(f"input {name!r}", node, self.by_name[name])


def _output_roots(output: UOp) -> tuple[list[UOp], object]:
    """The value nodes an output needs, and how to assemble it from them: a node, None
    (NOOP), or a tuple of those (TUPLE, FUNCTION, CALL outputs)."""
    if not isinstance(output, UOp):
        raise EvaluationError(f"outputs must be UOps, got {type(output).__name__}")
    if output.op == Ops.TUPLE:
        layout = tuple(None if e.op == Ops.NOOP else e for e in output.src)
    elif output.op in (Ops.FUNCTION, Ops.CALL):
        layout = tuple(output.gettuple(i) for i in range(len(output.src[0].src)))
    elif output.op == Ops.STORE:
        return [output.src[1]], output.src[1]
    elif output.op == Ops.NOOP:
        return [], None
    else:
        return [output], output
    return [e for e in layout if e is not None], layout


def _compile(outputs: Sequence[UOp], inputs: Mapping) -> _Program:
    compiler = _Compiler(inputs)
    layouts, roots = [], []
    for output in outputs:
        needed, layout = _output_roots(output)
        roots.extend(needed)
        layouts.append(layout)
    compiler.walk(roots)
    register, program = compiler.register, compiler.program
    for layout in layouts:
        if isinstance(layout, tuple):
            program.outputs.append(tuple(None if e is None else register[e] for e in layout))
        else:
            program.outputs.append(None if layout is None else register[layout])
    _fuse_contractions(program)
    _fuse_strided(program)
    _lay_out_for_scatters(program)
    _plan_frees(program)
    _plan_in_place(program)
    _order_view_readers(program)
    _shrink_broadcast_steps(program)
    return program


def _output_registers(program: _Program) -> set[int]:
    regs = set()
    for out in program.outputs:
        regs.update(r for r in (out if isinstance(out, tuple) else (out,)) if r is not None)
    return regs


def _read_counts(program: _Program) -> list[int]:
    """Per register, how many step sources and outputs read it."""
    reads = [0] * program.register_count
    for step in program.steps:
        for s in step[2]:
            reads[s] += 1
    for reg in _output_registers(program):
        reads[reg] += 1
    return reads


def _fuse_contractions(program: _Program) -> None:
    """Turn REDUCE ADD over (sums of) products into contraction steps; the products
    (MUL/ADD nodes read only by that REDUCE) get no step at all."""
    steps = program.steps
    candidates = [step for step in steps if step[1].op == Ops.REDUCE and step[1].arg[0] == "ADD"
                  and 0 not in step[1].src[0].shape and len(step[1].src[0].shape) <= len(_LETTERS)]
    if not candidates:
        return
    reads = _read_counts(program)
    producer = {step[3]: step for step in steps}
    fused: set[int] = set()  # ids of the steps folded into a contraction
    for step in candidates:
        root, order = step[2][0], None
        permute = producer.get(root)
        if permute is not None and permute[1].op == Ops.PERMUTE and reads[root] == 1:
            # REDUCE ADD over a PERMUTE of products (conv2d's input gradient): contract the
            # products' factors transposed as the PERMUTE orders them, without the product
            root, order = permute[2][0], permute[1].arg
        terms, masked, select = _sum_of_products(root, producer, reads), None, None
        if terms is None:
            wheres = _zero_wheres(root, producer, reads) if order is None else None
            if wheres is None:
                continue
            absorbed, wheres = wheres
            terms = [(absorbed if i == 0 else [], list(where[2][:2])) for i, where in enumerate(wheres)]
            masked = tuple(where[1] for where in wheres)
            compare = _one_hot_compare(wheres, step[1], producer)
            if compare is not None:  # the CMPEQ's sources instead of the mask (the CMPEQ goes if unread)
                terms, select = [(absorbed, [*compare[2], wheres[0][2][1]])], compare[1]
        if order is not None:
            fused.add(id(permute))
        sources, positions = [], []
        for absorbed, factors in terms:
            positions.append(tuple(range(len(sources), len(sources) + len(factors))))
            sources.extend(factors)
            fused.update(absorbed)
        step[0], step[2], step[4] = _Contraction(tuple(positions), order, masked, select), tuple(sources), _NEW
        program.contractions += 1
    if fused:
        program.steps = [step for step in steps if id(step) not in fused]
        reads = _read_counts(program)  # a one-hot mask whose WHEREs all became selections
        program.steps = [step for step in program.steps if step[1].op != Ops.CMPEQ or reads[step[3]]]


def _zero_wheres(root: int, producer: dict, reads: list):
    """(ids of the steps absorbed, the WHERE steps) for register `root` holding
    WHERE(mask, a, 0) or the sum of two (gather's selection; the gradient of lerp's two
    gathers), each value read only there; else None. A number (not bool) result, the
    else-branch the CONST +0."""
    step = producer.get(root)
    if step is None or reads[root] != 1:
        return None
    if step[1].op == Ops.ADD:
        wheres = [_zero_where(reg, producer, reads) for reg in step[2]]
        return None if None in wheres else ([id(step)] + [id(w) for w in wheres], wheres)
    where = _zero_where(root, producer, reads)
    return None if where is None else ([id(where)], [where])


def _one_hot_compare(wheres: list, reduce_node, producer: dict):
    """The CMPEQ step of integers making the one WHERE's mask, when the REDUCE sums one
    axis: maybe gather's index == arange (_select_sum checks the values)."""
    if len(wheres) != 1 or len(reduce_node.arg[1]) != 1:
        return None
    step = producer.get(wheres[0][2][0])
    if step is None or step[1].op != Ops.CMPEQ or step[0] is not IMPL[Ops.CMPEQ] \
            or not step[1].src[0].dtype.is_int or any(s.shape != step[1].shape for s in step[1].src):
        return None
    return step


def _zero_where(reg: int, producer: dict, reads: list):
    step = producer.get(reg)
    if step is None or reads[reg] != 1 or step[1].op != Ops.WHERE or step[0] is not IMPL[Ops.WHERE]:
        return None
    node = step[1]
    mask, values, zero = node.src
    if node.dtype.is_bool or zero.op != Ops.CONST or zero.arg != 0 or math.copysign(1.0, zero.arg) < 0 \
            or mask.shape != node.shape or values.shape != node.shape:
        return None
    return step


def _sum_of_products(root: int, producer: dict, reads: list):
    """The value in register `root` seen as a sum of products: a list of terms, each
    (ids of the ADD/MUL steps it absorbs, factor registers); None when no term is a
    product. Only ADD/MUL steps whose value nothing else reads are absorbed."""

    def absorbable(reg: int, op: str):
        step = producer.get(reg)
        return step if step is not None and reads[reg] == 1 and step[1].op == op else None

    absorbed_adds, terms = [], []
    pending = [root]
    while pending:
        reg = pending.pop()
        add = absorbable(reg, Ops.ADD)
        if add is not None:  # a + b: two more terms
            absorbed_adds.append(id(add))
            pending.extend(reversed(add[2]))
            continue
        absorbed = []
        widen = absorbable(reg, Ops.CAST)
        if widen is not None and widen[1].dtype is dtypes.float32 and widen[1].src[0].dtype is dtypes.float16 \
                and absorbable(widen[2][0], Ops.MUL) is not None:
            # float16 gradients sum float16 products in float32 (CAST, REDUCE, CAST back): the
            # contraction multiplies in float32 too, so products skip one float16 rounding
            absorbed.append(id(widen))
            reg = widen[2][0]
        factors, muls = [], [reg]
        while muls:
            r = muls.pop()
            mul = absorbable(r, Ops.MUL)
            if mul is None:
                factors.append(r)
            else:
                absorbed.append(id(mul))
                muls.extend(reversed(mul[2]))
        terms.append((absorbed, factors))
    if not any(len(factors) > 1 for _, factors in terms):
        return None
    terms[0] = (terms[0][0] + absorbed_adds, terms[0][1])
    return terms


_CHAIN_OPS = frozenset(strided.BACKWARD) | frozenset(strided.FORWARD)


def _fuse_strided(program: _Program) -> None:
    """Movement chains that are one view become one strided-view step, and REDUCE ADDs over
    padded chains one strided scatter-add (see uopcli.strided); the chain's own steps go
    when nothing else reads them. Runs after _fuse_contractions, whose factors are these
    views (and which reads the steps' original sources)."""
    steps = program.steps
    made_by = {step[3]: (step[1], step[2][0]) for step in steps
               if step[1].op in _CHAIN_OPS and step[0] is IMPL[step[1].op]}  # register -> (node, its source)
    backward = strided.BACKWARD
    forward = strided.FORWARD
    # only the last op of a chain, whose value something else reads, becomes a view: the
    # ops before it go, or stay op by op; so a long run of RESHAPEs is walked once, not per op
    heads = _output_registers(program)
    for step in steps:
        if step[1].op not in backward:
            heads.update(step[2])

    def view_source(register):
        made = made_by.get(register)
        return made if made is not None and made[0].op in backward else None

    changed = False
    for step in steps:
        node = step[1]
        if node.op in backward and step[0] is IMPL[node.op] and step[3] in heads:
            found = strided.chain_view(node, step[2][0], view_source)
            if found is not None and found[2] >= 2 and found[3]:  # numpy alone may copy on a RESHAPE
                step[0], step[2], step[4] = found[1], (found[0],), _VIEW
                changed = True
        elif node.op == Ops.REDUCE and node.arg[0] == "ADD" and step[0] is _reduce:
            scatter = _scatter_step(node, step[2][0], made_by, forward)
            if scatter is not None:
                step[0], step[2] = scatter
                changed = True
    if changed:
        _drop_unread_chain_steps(program)


def _scatter_step(node, register, made_by, forward):
    """(impl, sources) for REDUCE ADD `node` over a chain of PAD/RESHAPE/PERMUTE/FLIP with a
    PAD in it, run as a scatter-add of the chain's start, or None."""
    chain = []
    while len(chain) < strided.MAX_CHAIN:
        made = made_by.get(register)
        if made is None or made[0].op not in forward:
            break
        chain.append(made[0])
        register = made[1]
    if not any(op_node.op == Ops.PAD for op_node in chain):
        return None
    start_shape = chain[-1].src[0].shape
    if 0 in start_shape or 0 in node.shape:
        return None
    scatter = strided.reduce_scatter(node, chain, start_shape)
    return None if scatter is None else (scatter, (register,))


def _lay_out_for_scatters(program: _Program) -> None:
    """A contraction read only by a scatter-add lays its result out for the scatter's
    loop (see _Contraction.outer, _outer_layout): conv2d's input gradient and its col2im."""
    reads = _read_counts(program)
    impl_of = {step[3]: step[0] for step in program.steps}
    for step in program.steps:
        scatter = step[0]
        if scatter.__class__ is strided.StridedScatter and scatter.looped:
            source = step[2][0]
            contraction = impl_of.get(source)
            if contraction.__class__ is _Contraction and reads[source] == 1:
                contraction.outer = scatter.looped


def _drop_unread_chain_steps(program: _Program) -> None:
    """Remove movement/PAD steps whose value nothing reads any more (their readers now
    read the chain's start), last first so a dropped step frees its own sources."""
    reads = _read_counts(program)
    kept = []
    for step in reversed(program.steps):
        if step[1].op in _CHAIN_OPS and not reads[step[3]]:
            for s in step[2]:
                reads[s] -= 1
            continue
        kept.append(step)
    program.steps = kept[::-1]


def _plan_frees(program: _Program) -> None:
    """Each step gets the registers it reads for the last time, to drop right after it."""
    last_reader: list = [None] * program.register_count
    for step in program.steps:
        for s in step[2]:
            last_reader[s] = step
    for reg in _output_registers(program):
        last_reader[reg] = None
    for reg, step in enumerate(last_reader):
        if step is not None:
            step[5] += (reg,)


# Ops that can write their result into a source dying at that step (same shape and dtype):
# no allocation and no fresh pages to fault in, and a lower peak. Hand-written numpy does
# the same (`z += b`).
UFUNC_INTO = {
    Ops.NEG: np.negative, Ops.RECIPROCAL: np.reciprocal, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.TRUNC: np.trunc,
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
    Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.CMOD: np.fmod,
}
_SHIFTS = frozenset({Ops.SHL, Ops.SHR})
FLOAT_UFUNC_INTO = {Ops.FDIV: np.divide, Ops.POW: np.power}  # integer FDIV/POW are C-style, not ufuncs


@functools.lru_cache(maxsize=None)
def _into_source(ufunc, position: int, arity: int):
    """impl computing ufunc into source `position` (when numpy lets it be written)."""
    if arity == 1:
        return lambda node, x: ufunc(x, out=x) if x.flags.writeable else ufunc(x)
    if position == 0:
        return lambda node, a, b: ufunc(a, b, out=a) if a.flags.writeable else ufunc(a, b)
    return lambda node, a, b: ufunc(a, b, out=b) if b.flags.writeable else ufunc(a, b)


def _ufunc_of(node):
    """The ufunc that computes `node` as it stands, or None (integer FDIV/POW are C-style)."""
    if node.op in _SHIFTS and node.dtype.is_bool:
        return None  # numpy shifts no bools: _shl and _shr go through uint8
    return UFUNC_INTO.get(node.op) or (FLOAT_UFUNC_INTO.get(node.op) if node.dtype.is_float else None)


_COMPARE = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}


def _in_place_impl(step, position: int):
    node = step[1]
    ufunc = _ufunc_of(node)
    if ufunc is not None:
        return _into_source(ufunc, position, len(step[2]))
    if node.op == Ops.WHERE and position:
        return _where_into if position == 1 else _where_into_b
    return None


def _plan_in_place(program: _Program) -> None:
    """Let elementwise steps write into a source array that dies with them. Safe when the
    array is one the evaluator made (not an input, not an output), the source (maybe a
    view of it) has the result's shape and dtype, and nothing reads the array, or any view
    of it, later or elsewhere in this step. Read-only views (broadcasts) are caught when
    the step runs."""
    steps = program.steps
    candidates = [index for index, step in enumerate(steps) if step[1].shape and (
        step[1].op in UFUNC_INTO or step[1].op in FLOAT_UFUNC_INTO or step[1].op == Ops.WHERE)]
    if not candidates:  # scalar graphs: nothing to gain
        return
    producer: list = [None] * program.register_count
    memory = list(range(program.register_count))  # register -> register whose array it looks at
    for step in steps:
        producer[step[3]] = step
        if step[4] == _VIEW or step[4] == _MAYBE_VIEW:
            memory[step[3]] = memory[step[2][0]]
    last_reader = [-1] * program.register_count   # by memory owner: the last step reading it or a view
    for index, step in enumerate(steps):
        for s in step[2]:
            last_reader[memory[s]] = index
    for reg in _output_registers(program):
        last_reader[memory[reg]] = -1
    for index in candidates:
        step = steps[index]
        node, srcs = step[1], step[2]
        for position, reg in enumerate(srcs):
            root = memory[reg]
            made = producer[root]
            if made is None or made[4] != _NEW or last_reader[root] != index:
                continue
            source = producer[reg][1]
            if source.shape != node.shape or source.dtype is not node.dtype:
                continue
            if any(memory[s] == root for p, s in enumerate(srcs) if p != position):
                continue  # the step also reads this array under another name or layout
            impl = _in_place_impl(step, position)
            if impl is not None:
                step[0] = impl
                break


def _order_view_readers(program: _Program) -> None:
    """Elementwise steps that read a strided view whose axes overlap run in the order
    _overlap_order gives (see _InViewOrder)."""
    viewed = {step[3] for step in program.steps if step[0].__class__ is strided.StridedView}
    if not viewed:
        return
    for step in program.steps:
        if step[1].op in ELEMENTWISE:
            for position, reg in enumerate(step[2]):
                if reg in viewed:
                    step[0] = _InViewOrder(step[0], position, _ufunc_of(step[1]) or _COMPARE.get(step[1].op))
                    break


_ORDER_MIN_SIZE = 1 << 15  # elements: below it the transposes cost more than they save


def _shrink_broadcast_steps(program: _Program) -> None:
    """Elementwise steps reading an EXPAND may find every source broadcast along the same
    axes (see _OnBroadcast)."""
    for step in program.steps:
        node = step[1]
        if node.op in ELEMENTWISE and node.shape and math.prod(node.shape) >= _BROADCAST_MIN_SIZE \
                and any(source.op == Ops.EXPAND for source in node.src):
            step[0] = _OnBroadcast(step[0])


_BROADCAST_MIN_SIZE = 1 << 12  # elements: below it the check costs more than it can save


class _OnBroadcast:
    """An elementwise step whose sources are all broadcast along some axes (stride 0: an
    EXPAND) runs once along them and broadcasts its result, as the EXPAND did its source:
    gather's one-hot mask, index == arange over (N, C, H, W, n), is n·W distinct values."""

    __slots__ = ("impl",)

    def __init__(self, impl):
        self.impl = impl

    def __call__(self, node, *sources):
        common = None
        for source in sources:
            if isinstance(source, np.ndarray) and source.ndim:
                zero = {axis for axis, stride in enumerate(source.strides) if stride == 0 and source.shape[axis] > 1}
                common = zero if common is None else common & zero
                if not common:
                    return self.impl(node, *sources)
        if not common:
            return self.impl(node, *sources)
        cut = tuple(slice(0, 1) if axis in common else slice(None) for axis in range(len(node.shape)))
        small = [source[cut] if isinstance(source, np.ndarray) and source.ndim else source for source in sources]
        return np.broadcast_to(self.impl(node, *small), node.shape)


class _InViewOrder:
    """An elementwise step over pooling windows. A pool's windows (N, C, H, W, 3, 3) step
    along W and along the window's last axis over the same memory (one element apart for
    both at stride 1, two and one at stride 2), and numpy walks them in stride order: its
    inner loop runs over the window's 3 elements, and it lays the result out the same way,
    so every step reading the result loops 3 at a time too (a max pool's gradient ran
    3-7x slower than on a copy). Here the sources are transposed so the longer axis of
    each such pair is inner, the step runs in that order (a ufunc told order="C", since
    its own order would undo the transposes; another impl on a copy of the view in that
    order, whose layout it keeps), and its result is transposed back: a view of an array
    laid out (N, C, 3, H, 3, W), which numpy then walks in its memory order."""

    __slots__ = ("impl", "position", "ufunc")

    def __init__(self, impl, position: int, ufunc):
        self.impl, self.position, self.ufunc = impl, position, ufunc

    def __call__(self, node, *sources):
        order = _overlap_order(sources[self.position])
        if order is None:
            return self.impl(node, *sources)
        rank = len(order)
        moved = [s.transpose(order) if np.ndim(s) == rank else s for s in sources]
        if self.ufunc is not None:
            result = self.ufunc(*moved, order="C")
        else:
            moved[self.position] = np.ascontiguousarray(moved[self.position])
            result = self.impl(node, *moved)
        return result.transpose(np.argsort(order))


def _overlap_order(view):
    """The axes of `view` outer to inner: by stride, largest first (axes of size 1 or
    stride 0 outermost), then each axis whose span reaches the stride of the axis just
    outside it (they overlap in memory) swapped with that axis when it is the shorter one.
    None when nothing was swapped: numpy walks the stride order by itself (or when
    `view` is small)."""
    if not isinstance(view, np.ndarray) or view.size < _ORDER_MIN_SIZE:
        return None
    shape, strides = view.shape, [abs(s) for s in view.strides]
    order = sorted(range(view.ndim), key=lambda a: (shape[a] > 1 and strides[a] > 0, -strides[a]))
    swapped = False
    for i in range(len(order) - 1, 0, -1):  # inner to outer
        outer, inner = order[i - 1], order[i]
        if shape[outer] > 1 and strides[outer] and strides[inner] * (shape[inner] - 1) >= strides[outer] \
                and shape[inner] < shape[outer]:
            order[i - 1], order[i] = inner, outer
            swapped = True
    return tuple(order) if swapped else None


# ----------------------------------------------------------------------------- the loops
# Sources are passed by arity: unpacking a list built per step costs more than most
# scalar ops themselves.

_NUMPY_FAILURES = (ArithmeticError, ValueError, TypeError, IndexError, MemoryError)


def _failed(node, error: Exception) -> EvaluationError:
    return EvaluationError(f"evaluating {node!r}: {type(error).__name__}: {error}")


def _run(program: _Program) -> list:
    values = [None] * program.register_count
    for reg, value in program.initial.items():
        values[reg] = value
    node = None
    try:
        for impl, node, srcs, out, _, frees in program.steps:
            arity = len(srcs)
            if arity == 2:
                values[out] = impl(node, values[srcs[0]], values[srcs[1]])
            elif arity == 1:
                values[out] = impl(node, values[srcs[0]])
            else:
                values[out] = impl(node, *[values[s] for s in srcs])
            for s in frees:
                values[s] = None
    except _NUMPY_FAILURES as error:  # e.g. out of memory: name the node that asked
        raise _failed(node, error) from error
    return values


def _owner(array):
    """The array that owns the memory `array` looks at (numpy collapses view chains,
    except for a few helper arrays such as broadcast_to's)."""
    base = array.base
    while isinstance(base, np.ndarray):
        array, base = base, base.base
    return array


def _run_counting(program: _Program, stats: EvalStats) -> list:
    """The same loop, also counting the bytes of live arrays the evaluator made: an array
    and the views of it count once, from its first to its last use."""
    values = [None] * program.register_count
    owner_of = [0] * program.register_count  # register -> id of the array owning its memory
    live: dict[int, list] = {}               # owner id -> [registers using it, bytes, owner]
    live_bytes = peak = 0
    for reg, value in program.initial.items():
        values[reg] = value
        key = owner_of[reg] = id(_owner(value))
        entry = live.get(key)
        if entry is None:
            live[key] = [1, 0, value]        # the caller's memory: not counted
        else:
            entry[0] += 1
    for impl, node, srcs, out, kind, frees in program.steps:
        try:
            arity = len(srcs)
            if arity == 2:
                result = impl(node, values[srcs[0]], values[srcs[1]])
            elif arity == 1:
                result = impl(node, values[srcs[0]])
            else:
                result = impl(node, *[values[s] for s in srcs])
        except _NUMPY_FAILURES as error:
            raise _failed(node, error) from error
        values[out] = result
        if kind == _VIEW or kind == _MAYBE_VIEW and result.base is not None \
                and np.may_share_memory(result, values[srcs[0]]):
            key = owner_of[srcs[0]]
            live[key][0] += 1
        else:
            owner = _owner(result)
            key = id(owner)
            entry = live.get(key)
            if entry is not None:
                entry[0] += 1
            else:
                size = 0 if kind == _EXTERNAL else owner.nbytes
                live[key] = [1, size, owner]
                live_bytes += size
                if live_bytes > peak:
                    peak = live_bytes
            if impl.__class__ is _Contraction and live_bytes + impl.scratch_bytes > peak:
                peak = live_bytes + impl.scratch_bytes  # its temporaries lived beside the result
        owner_of[out] = key
        for s in frees:
            values[s] = None
            entry = live[owner_of[s]]
            entry[0] -= 1
            if not entry[0]:
                live_bytes -= entry[1]
                del live[owner_of[s]]
    stats.peak_bytes = peak
    return values


# ----------------------------------------------------------------------------- the API

def _finish(value):
    """An output as the caller gets it: a writable ndarray (numpy scalars become 0-d
    arrays; read-only views, such as a broadcast, are copied)."""
    if value is None:
        return None
    value = np.asarray(value)
    return value if value.flags.writeable else value.copy()


def evaluate(outputs: Sequence[UOp], inputs: Mapping, *, stats: EvalStats | None = None) -> list:
    """The values of `outputs` (a list of UOps) given `inputs`: graph-input names (or PARAM
    nodes, or any node whose value you supply) mapped to numpy arrays of exactly the
    node's shape and dtype. A TUPLE, FUNCTION or CALL output gives a tuple of arrays (None
    for NOOP). Raises EvaluationError for a missing or mismatched input."""
    start = time.perf_counter()
    if isinstance(outputs, UOp):
        outputs = [outputs]
    with no_gc():  # graphs are acyclic: scanning them while the program grows finds nothing
        program = _compile(list(outputs), inputs)
        with np.errstate(all="ignore"):
            values = _run(program) if stats is None else _run_counting(program, stats)
    results = []
    for out in program.outputs:
        if isinstance(out, tuple):
            results.append(tuple(None if r is None else _finish(values[r]) for r in out))
        else:
            results.append(None if out is None else _finish(values[out]))
    if stats is not None:
        stats.seconds = time.perf_counter() - start
        stats.nodes_evaluated = len(program.steps)
        stats.contractions = program.contractions
    return results


def evaluate_graph(graph, inputs: Mapping[str, np.ndarray], *, stats: EvalStats | None = None,
                   simplify: str | None = None) -> dict:
    """Evaluate every output of a Graph; returns {output name: array}. Inputs are given by
    name; a name that is not one of the graph's inputs is an error (likely a typo).
    `simplify`: None runs the graph as written; "exact" first applies the rewrites that
    change no bit of any result; "tinygrad" also tinygrad's algebraic rewrites, so the
    values are what tinygrad computes (finite activation gradients; see uopcli.simplify)."""
    if simplify is not None:
        graph = _simplified(graph, simplify)
    known = set(graph.input_names)
    for name in inputs:
        if name not in known:
            raise EvaluationError(f"unknown input {name!r}; the graph's inputs: {', '.join(graph.input_names) or 'none'}")
    names = list(graph.outputs)
    values = evaluate([graph.outputs[n] for n in names], inputs, stats=stats)
    return dict(zip(names, values))


def _simplified(graph, mode: str):
    from .simplify import MODES
    from .simplify import simplify as simplified
    if mode not in MODES:
        raise EvaluationError(f"simplify must be one of {', '.join(MODES)} or None, got {mode!r}")
    return simplified(graph, exact=mode == "exact")
