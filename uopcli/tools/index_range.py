"""How large a random integer input may be drawn: the classes an index is compared with.

An integer input that the graph compares, element for element, with a range of known
values (the one-hot mask of tinygrad's sparse_categorical_crossentropy, its Embedding and
the builder's gather: `index == arange(n)`) picks one of those values. `eval --random` and
`check` draw such an input from 0 to below the smallest such range (never above the usual
0..9), so that every random label names a class and the loss evaluated is the model's: a
label 7 of a 5-class model would match no class and silently zero its term.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from ..core.ops import Ops
from ..core.uop import UOp
from ..core.walks import toposort

# what passes an index on unchanged, element for element (a view or an integer widening)
_VIEWS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.CAST})
_COMPARISONS = frozenset({Ops.CMPEQ, Ops.CMPNE})
_SAME_VALUES = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE})  # the same set of values, rearranged


def index_ranges(roots: Iterable[UOp]) -> dict[str, int]:
    """{integer input name: n} for each integer PARAM the graph compares with a range of
    known values 0..n-1 (an input-free node of more than one element, none negative):
    the smallest n where it meets several."""
    order = toposort(roots)
    users: dict[UOp, list[UOp]] = defaultdict(list)
    variable: set[UOp] = set()  # nodes whose value depends on an input
    for node in order:
        for source in node.src:
            users[source].append(node)
        if node.op == Ops.PARAM or any(s in variable for s in node.src):
            variable.add(node)
    found: dict[str, int] = {}
    for node in order:
        if node.op == Ops.PARAM and isinstance(node.arg, str) and node.dtype.is_int:
            ranges = _compared_ranges(node, users, variable)  # each n >= 1: a range holds 0..n-1
            if ranges:
                found[node.arg] = min(ranges)
    return found


def _compared_ranges(index: UOp, users: dict, variable: set) -> list[int]:
    """n for each range 0..n-1 that `index`, seen through views, is compared with."""
    views, stack, ranges = {index}, [index], []
    while stack:
        node = stack.pop()
        for user in users.get(node, ()):
            if user.op in _VIEWS and user.dtype.is_int and user not in views:
                views.add(user)
                stack.append(user)
            elif user.op in _COMPARISONS:
                other = user.src[1] if user.src[0] is node else user.src[0]
                if other not in variable:
                    ranges += _range_of(other)
    return ranges


def _range_of(node: UOp) -> list[int]:
    """[n] when `node` holds integers 0..n-1 among more than one element (an arange, or a
    view of one), else []: a scalar is a sentinel (ignore_index), not a set of classes."""
    import numpy as np
    from ..backends.numpy import evaluate
    while node.op in _SAME_VALUES:  # the arange itself, not a vocabulary-by-tokens broadcast of it
        node = node.src[0]
    if not node.dtype.is_int or not node.shape or int(np.prod(node.shape)) < 2:
        return []
    values = np.asarray(evaluate([node], {})[0])
    if values.min() < 0:
        return []
    return [int(values.max()) + 1]
