"""Constant folding: an op whose sources are all CONSTs becomes the CONST it computes,
computed with the numpy expression the evaluator uses for that op, on numpy scalars of
the node's dtype (what the evaluator holds a CONST as), so the folded value is the value
the evaluator would have computed, bit for bit.

Only ops whose result IEEE 754 (or two's-complement wrapping) fixes exactly are folded:
+ - * / sqrt, 1/x, max, negation, comparisons, bitwise ops and casts that are exact or
correctly rounded. EXP2, LOG2, SIN and POW are left alone: libm and numpy's SIMD loops
differ by an ulp from one machine to another, and a folded constant would freeze one
machine's answer into the file. Integer division and float-to-integer casts of values
outside the target's range are left alone too (C leaves them undefined; the evaluator
decides them at run time).
"""

from __future__ import annotations

import math

from ..ops import MOVEMENT, Ops
from ..uop import UOp


def _float_only(fn):
    return lambda node, *values: fn(*values) if node.dtype.is_float else None


def _cast(node: UOp, x):
    import numpy as np
    target = node.dtype
    if target.is_int and x.dtype.kind == "f":
        if not math.isfinite(float(x)):
            return None
        info = np.iinfo(target.np)
        if not info.min <= math.trunc(float(x)) <= info.max:
            return None
    return np.asarray(x).astype(target.np)[()]


def _np():
    import numpy
    return numpy


# op -> fold(node, *scalar values) -> numpy scalar, or None to leave the node alone
FOLDS = {
    Ops.ADD: lambda node, a, b: a + b,
    Ops.SUB: lambda node, a, b: a - b,
    Ops.MUL: lambda node, a, b: a * b,
    Ops.FDIV: _float_only(lambda a, b: a / b),
    Ops.MAX: lambda node, a, b: _np().maximum(a, b),
    Ops.NEG: lambda node, x: -x,
    Ops.RECIPROCAL: lambda node, x: _np().reciprocal(x),
    Ops.SQRT: lambda node, x: _np().sqrt(x),
    Ops.CMPLT: lambda node, a, b: a < b,
    Ops.CMPNE: lambda node, a, b: a != b,
    Ops.CMPEQ: lambda node, a, b: a == b,
    Ops.AND: lambda node, a, b: a & b,
    Ops.OR: lambda node, a, b: a | b,
    Ops.XOR: lambda node, a, b: a ^ b,
    Ops.CAST: _cast,
}


def fold(node: UOp) -> UOp | None:
    """The CONST `node` computes from its CONST sources, or None."""
    fn = FOLDS.get(node.op)
    if fn is None:
        return None
    np = _np()
    with np.errstate(all="ignore"):
        value = fn(node, *(s.dtype.np.type(s.arg) for s in node.src))
    if value is None:
        return None
    value = np.asarray(value).astype(node.dtype.np)[()]
    return UOp.const(value.item(), node.dtype)


# ----------------------------------------------------------------------------- constant subgraphs
# A node computed from constants only (CONST, BUFFER, and movements of them) is a constant
# too: it becomes a BUFFER of its value, when that value is small. Only ops whose result
# is fixed bit for bit fold (FOLDS above, plus WHERE, integer and MAX reductions and the
# movements, which only move elements); movements that grow their source (EXPAND, PAD)
# stay views over the folded value rather than copies of it.
FOLD_LIMIT = 1024  # elements: a folded BUFFER is at most this big
# elements: the most a folded node's sources may hold, each step of their movement chains
# too (a RESHAPE of an EXPAND copies it): a small sum of a Tile of 10^9 constants is left to
# run time, not made here (`simplify` of such an ONNX model took 7.7 GB and 45 s)
SOURCE_LIMIT = 1 << 20

_GROWING = frozenset({Ops.EXPAND, Ops.PAD})
_MOVEMENTS = MOVEMENT


def _movement_value(node: UOp, x):
    np = _np()
    op, arg = node.op, node.arg
    if op == Ops.RESHAPE:
        return x.reshape(arg)
    if op == Ops.EXPAND:
        return np.broadcast_to(x, arg)
    if op == Ops.PERMUTE:
        return x.transpose(arg)
    if op == Ops.SHRINK:
        return x[tuple(slice(a, b) for a, b in arg)]
    if op == Ops.FLIP:
        return x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    out = np.zeros(node.shape, node.dtype.np)  # PAD
    out[tuple(slice(before, before + s) for (before, _), s in zip(arg, x.shape))] = x
    return out


def _reduce_value(node: UOp, x):
    op, axes = node.arg
    if node.dtype.is_float and op != "MAX":
        return None  # a float sum's order is the evaluator's (BLAS, pairwise): not fixed here
    np = _np()
    ufunc = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum}[op]
    if op == "MAX" and any(x.shape[a] == 0 for a in axes):
        return None
    return ufunc.reduce(x, axis=axes, keepdims=True, dtype=x.dtype)


def _value(node: UOp):
    """The numpy value of a constant node (CONST, BUFFER, movements of them), or None."""
    np = _np()
    chain = []
    while node.op in _MOVEMENTS:
        if math.prod(node.shape) > SOURCE_LIMIT:
            return None
        chain.append(node)
        node = node.src[0]
    if node.shape and math.prod(node.shape) > SOURCE_LIMIT:
        return None
    if node.op == Ops.CONST:
        value = np.asarray(node.dtype.np.type(node.arg))
    elif node.op == Ops.BUFFER:
        value = node.buffer_array()
    else:
        return None
    for step in reversed(chain):
        value = _movement_value(step, value)
    return value


def fold_constant_subgraph(node: UOp) -> UOp | None:
    """`node` as a BUFFER of its value when every source is constant-valued and the value
    is small; growing movements and broadcast scalars are left as they are."""
    if node.shape is None or not node.shape or node.op in _GROWING or math.prod(node.shape) > FOLD_LIMIT:
        return None
    if node.op in _MOVEMENTS and node.src[0].op == Ops.CONST:
        return None  # a broadcast scalar: its own form
    values = [_value(s) for s in node.src]
    if any(v is None for v in values):
        return None
    np = _np()
    with np.errstate(all="ignore"):
        if node.op in _MOVEMENTS:
            value = _movement_value(node, values[0])
        elif node.op == Ops.REDUCE:
            value = _reduce_value(node, values[0])
        elif node.op == Ops.WHERE:
            value = np.where(*values)
        elif node.op in FOLDS and not (node.op == Ops.CAST and values[0].dtype.kind == "f" and node.dtype.is_int):
            value = FOLDS[node.op](node, *values)
        else:
            return None
    if value is None:
        return None
    return UOp.buffer(np.ascontiguousarray(np.broadcast_to(np.asarray(value).astype(node.dtype.np), node.shape)))
