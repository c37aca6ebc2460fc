"""What the simplification rows share: reading a node (is it a constant, a broadcast
scalar, a chain of unit-axis reshapes and permutes) and building the replacements.

Builders go through `UOp.make`, so every node a rule makes is checked as any other is.
"""

from __future__ import annotations

import math

from ..ops import SELECTING_MOVES, Ops
from ..uop import UOp



def make(op: str, like: UOp, src: tuple, arg=None, dtype=None) -> UOp:
    return UOp.make(op, like.dtype if dtype is None else dtype, src, arg)


def const(value, like: UOp) -> UOp:
    """A scalar CONST of like's dtype holding `value` as that dtype stores it (a float is
    rounded to the dtype here, so the file holds the value the evaluator computes with)."""
    dtype = like.dtype
    if dtype.is_float:
        value = float(dtype.np.type(value))
    return UOp.const(value, dtype)


def const_value(node: UOp):
    """A CONST's value as the evaluator holds it: a numpy scalar of the node's dtype."""
    return node.dtype.np.type(node.arg)


def is_const(node: UOp, value) -> bool:
    """A number CONST equal to `value` (a bool CONST never equals a number)."""
    arg = node.arg
    return node.op == Ops.CONST and arg.__class__ is not bool and arg == value


def is_negative_zero(node: UOp) -> bool:
    return node.op == Ops.CONST and node.dtype.is_float and node.arg == 0 and math.copysign(1.0, node.arg) < 0


def broadcast(scalar: UOp, shape: tuple) -> UOp:
    """`scalar` (shape ()) broadcast to `shape` in the builder's form: RESHAPE to ones, EXPAND."""
    return scalar.broadcast_to(shape)


def scalar_of(node: UOp, depth: int = 6) -> UOp | None:
    """The shape-() node whose every element `node` is (a CONST or any scalar, moved by
    RESHAPE, EXPAND, PERMUTE, SHRINK or FLIP: each element is still that scalar), or None."""
    while depth:
        if node.shape == ():
            return node
        if node.op not in SELECTING_MOVES:
            return None
        node = node.src[0]
        depth -= 1
    return None


def full_shaped(node: UOp, like: UOp) -> UOp | None:
    """`node` if it already has like's shape and dtype (dropping an operand must not
    change the result's shape), else None."""
    return node if node.shape == like.shape and node.dtype is like.dtype else None


# ----------------------------------------------------------------------------- unit-axis views
# A chain of RESHAPEs that only insert or remove size-1 axes, and PERMUTEs, only reorders
# the non-1 axes of where it starts: it is one PERMUTE (when both ends have as many size-1
# axes), or one PERMUTE and one RESHAPE, or one RESHAPE (when the order is kept).

def _non_unit(shape: tuple) -> tuple:
    return tuple(s for s in shape if s != 1)


def unit_axis_chain(node: UOp, limit: int = 8):
    """(base, order, length): `node` is a chain of `length` RESHAPE/PERMUTE nodes over
    `base` that reorders base's non-1 axes into `order` (indices of base's axes), or None
    when the chain has fewer than two nodes or a RESHAPE that merges or splits axes."""
    steps = []
    while node.op in (Ops.RESHAPE, Ops.PERMUTE) and len(steps) < limit:
        source = node.src[0]
        if node.op == Ops.RESHAPE and _non_unit(node.shape) != _non_unit(source.shape):
            break
        steps.append(node)
        node = source
    if len(steps) < 2:
        return None
    base = node
    order = [i for i, s in enumerate(base.shape) if s != 1]  # base's non-1 axes, as they stand
    for step in reversed(steps):
        if step.op == Ops.PERMUTE:
            # the non-1 axes of the permuted value, in the new order
            positions = [i for i, s in enumerate(step.src[0].shape) if s != 1]
            where = {axis: k for k, axis in enumerate(positions)}
            order = [order[where[a]] for a in step.arg if a in where]
    return base, order, len(steps)


def unit_axis_view_length(base: UOp, order: list, shape: tuple) -> int:
    """How many nodes unit_axis_view(base, order, shape) adds over base, without making
    them (a chain that is not shortened costs no new nodes)."""
    if order == sorted(order):
        return int(base.shape != shape)
    ones = [i for i, s in enumerate(base.shape) if s == 1]
    if len(ones) == sum(1 for s in shape if s == 1):
        return 1  # a permutation that is not in order is not the identity
    permutation = [*order, *ones]
    permuted = tuple(base.shape[i] for i in permutation)
    return int(permutation != sorted(permutation)) + int(permuted != shape)


def unit_axis_view(base: UOp, order: list, shape: tuple) -> UOp:
    """base's non-1 axes in `order`, shaped `shape` (only size-1 axes differ): one PERMUTE,
    or a PERMUTE and a RESHAPE, or a RESHAPE, whichever the ends allow."""
    ones = [i for i, s in enumerate(base.shape) if s == 1]
    if order == sorted(order):
        return base.reshape(shape)
    out_ones = [i for i, s in enumerate(shape) if s == 1]
    if len(ones) == len(out_ones):
        axes, spare = iter(order), iter(ones)
        permutation = [next(spare) if s == 1 else next(axes) for s in shape]
        return base.permute(permutation)
    return base.permute([*order, *ones]).reshape(shape)
