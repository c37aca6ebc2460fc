"""ONNX's sequence ops, unrolled when importing: the format has tensors only, so a sequence
lives only while the model is read, as a Python list of its tensors (importer.Value's
`seq`, each element an importer.Value), and each op rewrites that list. Positions and split
sizes must be known at import (constants, initializers); a sequence reaching a graph input
or output is refused (importer.py). What is left in the graph is tensor ops (Split,
Concat, the elements themselves), so gradients flow through as through any other op.

Same contract as ops_tensor.py, plus `ctx.sequence(i)` (input i's elements, refused when
it is not a sequence) and `ctx.element(i)` (input i as an element); a function returns a
Sequence for a sequence output. Spec: https://onnx.ai/onnx/operators/onnx__<Op>.html
"""

from __future__ import annotations

import numpy as np

from .ops_tensor import axis_of, dtype_from_code

# the ops whose input 0 is a sequence (Identity passes one through: importer.py)
TAKE_A_SEQUENCE = frozenset({"SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
                             "ConcatFromSequence", "Identity"})


class Sequence:
    """A sequence output: its elements (importer.Value), in order."""

    __slots__ = ("items",)

    def __init__(self, items: list):
        self.items = list(items)


def _position(ctx, i: int, count: int, last: int, default: int) -> int:
    """Input i as a position in a sequence of `count`: -count..last, negative ones counted
    from the back (the spec's ranges: [-n, n] to insert, [-n, n-1] to read or erase)."""
    if not ctx.present(i):
        return default
    value = ctx.static_if_known(i)
    if value is None:
        ctx.refuse(f"position (input {i}) is computed from the model's inputs: a sequence is unrolled "
                   f"when importing, so its positions must be constants")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.size != 1:
        ctx.refuse(f"position (input {i}) must be one integer, not {value.dtype} {list(value.shape)}")
    position = int(value.reshape(-1)[0])
    if not -count <= position <= last:
        ctx.refuse(f"position {position} is out of range for a sequence of {count}")
    return position + count if position < 0 else position


def _out(element):
    """An element as a function's output: its array when known at import, else its node."""
    return element.const if element.const is not None and not element.weight else element.node


# ----------------------------------------------------------------------------- making sequences


def sequence_empty(ctx):
    """SequenceEmpty-11: no elements (dtype, default float, only checked)."""
    if ctx.attr("dtype") is not None:
        dtype_from_code(ctx, ctx.attr("dtype"), "dtype")
    return Sequence([])


def sequence_construct(ctx):
    """SequenceConstruct-11: the inputs, in order."""
    return Sequence([ctx.element(i) for i in range(ctx.input_count)])


def split_to_sequence(ctx):
    """SplitToSequence-11/24 (24: bfloat16 too): pieces along axis of the sizes `split`
    gives (1-D), or all of size `split` (a scalar; the last one smaller); without it, one
    per index, the axis dropped when keepdims is 0."""
    x = ctx.x(0)
    axis = axis_of(ctx, ctx.attr("axis"), len(x.shape))
    length = x.shape[axis]
    split = ctx.static(1, "split")
    if split is None or np.ndim(split) == 0:
        step = 1 if split is None else int(split)
        if step <= 0:
            ctx.refuse(f"split {step} must be positive")
        sizes = [min(step, length - start) for start in range(0, length, step)]
    else:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if sum(sizes) != length or any(s < 0 for s in sizes):
            ctx.refuse(f"split sizes {sizes} do not add up to the axis' {length}")
    pieces = list(x.split(sizes, axis)) if sizes else []
    if split is None and not ctx.attr("keepdims"):
        pieces = [p.reshape(*x.shape[:axis], *x.shape[axis + 1:]) for p in pieces]
    return Sequence([ctx.as_element(p) for p in pieces])


def sequence_insert(ctx):
    """SequenceInsert-11: the tensor inserted before `position` (default: at the end)."""
    items = ctx.sequence(0)
    where = _position(ctx, 2, len(items), len(items), len(items))
    return Sequence(items[:where] + [ctx.element(1)] + items[where:])


def sequence_erase(ctx):
    """SequenceErase-11: the element at `position` removed (default: the last)."""
    items = ctx.sequence(0)
    if not items:
        ctx.refuse("erases from an empty sequence")
    where = _position(ctx, 1, len(items), len(items) - 1, len(items) - 1)
    return Sequence(items[:where] + items[where + 1:])


# ----------------------------------------------------------------------------- reading them


def sequence_at(ctx):
    """SequenceAt-11: the element at `position`."""
    items = ctx.sequence(0)
    if not ctx.present(1) or not items:
        ctx.refuse("needs a position in a sequence that is not empty")
    return _out(items[_position(ctx, 1, len(items), len(items) - 1, 0)])


def sequence_length(ctx):
    """SequenceLength-11: the count, an int64 scalar known at import."""
    return np.array(len(ctx.sequence(0)), dtype=np.int64)


def concat_from_sequence(ctx):
    """ConcatFromSequence-11: the elements joined along axis, or stacked along a new one
    (new_axis 1; then axis may be -rank-1..rank)."""
    items = ctx.sequence(0)
    if ctx.attr("axis") is None or not items:
        ctx.refuse("needs the attribute axis and a sequence that is not empty")
    nodes = [ctx.node_of(item) for item in items]
    rank = len(nodes[0].shape)
    if ctx.attr("new_axis"):
        axis = axis_of(ctx, ctx.attr("axis"), rank + 1)
        nodes = [n.reshape(*n.shape[:axis], 1, *n.shape[axis:]) for n in nodes]
    else:
        axis = axis_of(ctx, ctx.attr("axis"), rank)
    nodes = [n for n in nodes if n.shape[axis] != 0] or nodes[:1]  # empty pieces add nothing
    return nodes[0].cat(*nodes[1:], dim=axis) if len(nodes) > 1 else nodes[0]
