"""How large a random integer input may be drawn: the classes an index is compared with.

An integer input that the graph compares, element for element, with a range of known
values (the one-hot mask of tinygrad's sparse_categorical_crossentropy, its Embedding and
the builder's gather: `index == arange(n)`) picks one of those values. `eval --random` and
`check` draw such an input from 0 to below the smallest such range (never above the usual
0..9), so that every random label names a class and the loss evaluated is the model's: a
label 7 of a 5-class model would match no class and silently zero its term.

Values GIVEN for such an input (eval -i, eval --map's shards, check -i) are checked by
check_index_values: each must lie in 0..n-1, or equal a constant the graph also compares
the input with through views (an ignore_index: `labels != -100`); any other value is
refused, as torch refuses it ("Target 12 is out of bounds"; onnxruntime refuses one at or
above n, "Out of range value in index tensor", and reads -1 from the end), where the graph
would silently drop its term.

An imported ONNX Gather, GatherElements or ScatterElements counts a negative index from
the end: the importer wraps it, `(i < 0).where(i + n, i)`, before the comparison. Through
such a wrap (the WHERE's metadata names the op) the index may hold -n..n-1, and anything
else is refused, as onnxruntime and torch refuse it ("indices element out of data bounds"):
a token id past an Embedding's vocabulary would otherwise read a row of zeros. GatherND
wraps each column j of its index's last axis with its own axis' size, then combines the
columns arithmetically into one place (linear * size + column): no comparison follows a
column, so its wrap is its range (-size..size-1, over column j's elements alone), and
[0, 7] of data [3, 5], which would read data[1, 2], is refused as onnxruntime refuses it
(and ScatterND's, whose columns are combined alike: it would write there). OneHot's wrap is
the same arithmetic, but there an index outside the classes legitimately gives an all-off
row: it, and any other arithmetic on the way, leaves the index unchecked.

An input may meet several ranges (GatherND's columns, a label compared in two places):
each is a limit of its own, on the elements that reach it, and a limit another makes
redundant (a narrower range on at least its elements) is dropped.

The evaluator (backends.numpy.evaluate_graph) checks nothing: it is the raw evaluator; the
CLI, and map_graph for its shards, call the check. The walk is made once per graph (cached
on its outputs) and only for graphs with an integer input.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..errors import EvaluationError
from ..core.ops import Ops
from ..core.uop import UOp
from ..core.walks import toposort

# what passes an index on unchanged, element for element (a view or an integer widening)
_VIEWS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.CAST})
_COMPARISONS = frozenset({Ops.CMPEQ, Ops.CMPNE})
_SAME_VALUES = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE})  # the same set of values, rearranged


@dataclass(frozen=True)
class IndexLimit:
    """The values integer input `name` may hold: 0..n-1, the classes the comparison `node`
    (described as messages name it) makes with it, or one of `others`, the constants it is
    also compared with (an ignore_index); from `low` (-n where an ONNX gather counts
    negative indices from the end) instead of 0; on the elements `reached` alone. Plain
    data: it travels to map's workers."""
    name: str
    n: int
    node: str
    others: tuple[int, ...] = ()
    low: int = 0
    # the flat indices of the elements compared (None: all); a range where they step evenly
    # (a GatherND column: every k-th element, three numbers however long the index)
    reached: tuple[int, ...] | range | None = None

    def first_outside(self, array):
        """(value, index) of the first element of `array` that is compared and neither in
        0..n-1 nor one of `others`, else None: one vectorised test."""
        import numpy as np
        array = np.asarray(array)
        bad = (array < self.low) | (array >= self.n)
        if self.others:
            bad &= ~np.isin(array, np.asarray(self.others, dtype=array.dtype))
        if self.reached is not None:  # an element sliced or masked away never meets a class
            compared = np.zeros(array.size, dtype=bool)
            reached = self.reached
            compared[slice(reached.start, reached.stop, reached.step) if isinstance(reached, range) else
                     list(reached)] = True
            bad &= compared.reshape(array.shape)
        if not bad.any():
            return None
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), array.shape))
        return int(array[index]), index

    def refusal(self, value: int, index: tuple, holder: str) -> str:
        """`holder` (input 'labels', or a shard's member 'labels') holds `value` at `index`: why not."""
        at = f" (at [{','.join(map(str, index))}])" if index else ""
        others = ""
        if len(self.others) == 1:
            others = f", and not {self.others[0]}, the value it ignores"
        elif self.others:
            others = f", and none of {', '.join(map(str, self.others))}, the values it ignores"
        if self.low < 0:
            return (f"{holder} holds {value}{at}, outside {self.low}..{self.n - 1}, the indices node {self.node} "
                    f"takes along an axis of {self.n} (onnxruntime and torch refuse such indices too)")
        return (f"{holder} holds {value}{at}, outside 0..{self.n - 1}, the classes node {self.node} compares it "
                f"with{others} (torch refuses such labels too)")


class IndexOutOfRange(EvaluationError):
    """A given integer input holds a value outside the classes the graph compares it with."""


def index_limits(graph) -> dict[str, tuple[IndexLimit, ...]]:
    """{integer input name: its IndexLimits, the narrowest first} for each integer input of
    `graph` (a Graph) that it compares with a range of known values through views (or
    wraps as a GatherND column); {} at once when no input is an integer. The walk is
    cached on the graph's outputs."""
    if not any(node.dtype.is_int for node in graph.inputs):
        return {}
    imported = "onnx.opset" in graph.meta  # an imported model's locations are its node names
    return {name: tuple(IndexLimit(name, n, _describe(node, number, imported), others, low, reached)
                        for n, node, number, others, low, reached in found)
            for name, found in _walk(tuple(graph.outputs.values())).items()}


def check_index_values(graph, values: Mapping) -> None:
    """IndexOutOfRange, one line, for the first input of `values` ({name: array}) holding a
    value outside its IndexLimit (index_limits); inputs without one are not looked at.
    Values drawn by --random (values.random_value) lie in range: checking them costs a
    comparison and never refuses."""
    refusal = first_refusal(index_limits(graph), values, "input")
    if refusal is not None:
        raise IndexOutOfRange(refusal)


def first_refusal(limits: Mapping[str, tuple[IndexLimit, ...]], values: Mapping, holder: str) -> str | None:
    """Why the first of `values` ({name: array}) with limits holds a value outside one
    (`holder` names what holds it: "input", a shard's "member"), else None: its first such
    element in row-major order (two limits refusing it: the narrower, listed first)."""
    for name, kept in limits.items():
        if name not in values:
            continue
        found = []
        for limit in kept:
            outside = limit.first_outside(values[name])
            if outside is not None:
                found.append((outside[1], outside[0], limit))
        if found:
            index, value, limit = min(found, key=lambda f: f[0])
            return limit.refusal(value, index, f"{holder} {name!r}")
    return None


def _describe(node: UOp, number: int, imported: bool) -> str:
    """An imported model's node by its ONNX name (and op type, when the name does not say
    it); another node by its metadata name; else by its number (as `uopgrad print` numbers
    it, %12) and op."""
    meta = node.meta
    if meta is not None and imported and meta.loc:
        return f"{meta.loc!r}" + (f" ({meta.name})" if meta.name and meta.name not in meta.loc else "")
    if meta is not None and meta.name:
        return repr(meta.name)
    return f"%{number} {node.op}"


_CACHE: dict = {}  # the outputs of a few graphs walked last -> what _walk found
_CACHED = 4


def _walk(roots: tuple) -> dict:
    """{input name: [(n, the comparison node, its number, the constants, the lowest value,
    the elements compared)], the narrowest first}, cached."""
    found = _CACHE.get(roots)
    if found is None:
        found = _CACHE[roots] = _compute(roots)
        while len(_CACHE) > _CACHED:
            del _CACHE[next(iter(_CACHE))]
    return found


def index_ranges(roots: Iterable[UOp]) -> dict[str, int]:
    """{integer input name: n} for each integer PARAM the graph compares with a range of
    known values 0..n-1 (an input-free node of more than one element, none negative):
    the smallest n where it meets several (a GatherND's columns: the shortest axis), so
    that a value drawn below it suits every range."""
    return {name: found[0][0] for name, found in _walk(tuple(roots)).items()}


def _compute(roots: tuple) -> dict:
    order = toposort(roots)
    number = {node: i for i, node in enumerate(order)}
    users: dict[UOp, list[UOp]] = defaultdict(list)
    variable: set[UOp] = set()  # nodes whose value depends on an input
    for node in order:
        for source in node.src:
            users[source].append(node)
        if node.op == Ops.PARAM or any(s in variable for s in node.src):
            variable.add(node)
    found: dict = {}
    for node in order:
        if node.op == Ops.PARAM and isinstance(node.arg, str) and node.dtype.is_int:
            ranges, others = _compared_ranges(node, users, variable)  # each n >= 1: a range holds 0..n-1
            if any(c.meta is not None and c.meta.name == "sparse_categorical_crossentropy" for _, c, _, _ in ranges):
                others.add(-1)  # tinygrad's default ignore_index: it compares with nothing, and counts 0
            kept: list = []  # narrowest first: a range another makes redundant is dropped
            for r in sorted(ranges, key=lambda r: (r[0], -r[2], number[r[1]])):
                if not any(_narrower(k, r) for k in kept):
                    kept = [k for k in kept if not _narrower(r, k)] + [r]
            if kept:
                found[node.arg] = [(n, comparison, number[comparison],
                                    tuple(sorted(v for v in others if not low <= v < n)), low, reached)
                                   for n, comparison, low, reached in kept]
    return found


def _narrower(limit: tuple, other: tuple) -> bool:
    """`limit` (n, the comparison, low, reached) refuses every value `other` refuses, on
    every element `other` checks: `other` adds nothing (the constants accepted besides
    are the input's, the same for both)."""
    (n, _, low, reached), (other_n, _, other_low, other_reached) = limit, other
    if n > other_n or low < other_low or reached is not None and other_reached is None:
        return False
    if reached is None:
        return True
    held = reached if isinstance(reached, range) else frozenset(reached)
    return all(i in held for i in other_reached)  # (GatherND's columns are disjoint: False at once)


def _compared_ranges(index: UOp, users: dict, variable: set) -> tuple[list, set]:
    """[(n, the comparison, the lowest value, the elements compared)] for each range 0..n-1
    that `index`, seen through views, an ONNX gather's wrap of negative indices (then from
    -size), a padding and a selection by an input-free mask (HF's label shift: pad with
    -100, drop the first), is compared with; for each GatherND column's wrap, -size..size-1
    with the wrap as its node; and the constants it is compared with besides (a sentinel).
    Each path carries the id map of its node (_Ids): which of the index's elements each
    element is, so that an element sliced or masked away (a GatherND's other columns) is
    not checked."""
    views, stack, ranges, others = {index}, [(index, 0, _Ids.of(index))], [], set()
    while stack:
        node, low, ids = stack.pop()
        for user in users.get(node, ()):
            if user in views:
                continue
            if user.op in _VIEWS and user.dtype.is_int:
                views.add(user)
                stack.append((user, low, ids.moved(user)))
            elif user.op == Ops.PAD and user.dtype.is_int:  # the padding is 0s, always a class
                views.add(user)
                stack.append((user, low, ids.padded(user)))
            elif user.op == Ops.WHERE and low == 0 and (size := _wrap_size(user, node, variable)):
                views.add(user)
                if user.meta.name not in _COMBINED_GATHERS:
                    stack.append((user, -size, ids))
                elif ids.ids is not None:  # a GatherND column: its own range, on its elements alone
                    ranges.append((size, user, -size, ids.reached()))
                # (untracked, too large: which elements are the column's is unknown, and a limit on all
                # would hold the other columns to its size: the index is left unchecked, as before)
            elif user.op == Ops.WHERE and user.src[0] is not node and _selects(user, node, variable):
                views.add(user)
                stack.append((user, low, ids.selected(user, node)))
            elif user.op in _COMPARISONS:
                other = user.src[1] if user.src[0] is node else user.src[0]
                if other not in variable:
                    compared = _range_of(other, one=low == -1)  # a wrap of size 1: its one class 0
                    reached = ids.reached()
                    ranges += [(n, user, low, reached) for n in compared if n == -low or not low]  # a wrap's own
                    if not compared:  # a larger range's values are not legitimate for the smaller
                        others |= _constants_of(other)
    return ranges, others


def _selects(where: UOp, index: UOp, variable: set) -> bool:
    """`where` picks `index`'s elements or another branch's by a mask, both input-free (a
    label masked to an ignore value): the index passes where the mask lets it."""
    condition, kept, other = where.src
    if kept is not index:
        kept, other = other, kept
    return kept is index and condition not in variable and other not in variable


_MOST_TRACKED = 1 << 22  # elements an id map may hold: past it, every element counts as compared


class _Ids:
    """Which element of the index each element of a node on its path is (its flat index,
    or -1 for a value of no element: padding, a masked-off place); held broadcastable to
    the node's shape (an EXPAND costs nothing). None: not followed (too large), and then
    every element counts as compared."""

    def __init__(self, ids, size: int):
        self.ids, self.size = ids, size

    @classmethod
    def of(cls, index: UOp) -> "_Ids":
        import numpy as np
        size = int(np.prod(index.shape))
        return cls(np.arange(size).reshape(index.shape) if size <= _MOST_TRACKED else None, size)

    def _full(self, shape: tuple):
        import numpy as np
        if self.ids is None or int(np.prod(shape)) > _MOST_TRACKED:
            return None
        return np.broadcast_to(self.ids, shape)

    def moved(self, user: UOp) -> "_Ids":
        """Through a view: RESHAPE, EXPAND, PERMUTE, SHRINK, CAST."""
        ids, op, arg = self.ids, user.op, user.arg
        if ids is None or op in (Ops.CAST, Ops.EXPAND):  # an EXPAND's map stays broadcastable
            return self
        if op == Ops.PERMUTE:
            return _Ids(ids.transpose(arg), self.size)
        if op == Ops.SHRINK:  # a broadcast axis of one stays one
            return _Ids(ids[tuple(slice(None) if n == 1 else slice(b, e) for n, (b, e) in zip(ids.shape, arg))],
                        self.size)
        full = self._full(user.src[0].shape)
        return _Ids(None if full is None else full.reshape(arg), self.size)

    def padded(self, user: UOp) -> "_Ids":
        import numpy as np
        full = self._full(user.src[0].shape)
        return _Ids(None if full is None else np.pad(full, user.arg, constant_values=-1), self.size)

    def selected(self, where: UOp, index: UOp) -> "_Ids":
        """Through where(mask, index, other) (or where(mask, other, index)): -1 where the
        mask picks the other branch (a pick of both keeps every element)."""
        import numpy as np
        from ..backends.numpy import evaluate
        condition, first, second = where.src
        full = self._full(where.shape)
        if full is None or (first is index and second is index):
            return self if full is None else _Ids(full, self.size)
        mask = np.broadcast_to(np.asarray(evaluate([condition], {})[0], dtype=bool), where.shape)
        return _Ids(np.where(mask if first is index else ~mask, full, -1), self.size)

    def reached(self) -> tuple[int, ...] | range | None:
        """The flat indices of the index's elements this node holds (None: all of them), a
        range where they step evenly (a GatherND column's every k-th)."""
        import numpy as np
        if self.ids is None:
            return None
        held = np.unique(self.ids[self.ids >= 0])
        if held.size == self.size:
            return None
        steps = np.unique(np.diff(held))
        if held.size and steps.size <= 1:
            return range(int(held[0]), int(held[-1]) + 1, int(steps[0]) if steps.size else 1)
        return tuple(int(i) for i in held)


# the imported ONNX ops whose negative indices count from the end and whose indices outside
# -size..size-1 are an error (onnxruntime's "indices element out of data bounds"); OneHot's
# are not: an index outside its depth gives an all-off row
_STRICT_GATHERS = frozenset({"Gather", "GatherElements", "ScatterElements"})
# those that combine each column of the index's last axis, wrapped with its own axis' size,
# into one place by arithmetic: the wrap is the column's last sight of its range (onnxruntime:
# "invalid index found", "invalid indice found")
_COMBINED_GATHERS = frozenset({"GatherND", "ScatterND"})


def _wrap_size(where: UOp, index: UOp, variable: set) -> int | None:
    """size, when `where` is an imported gather's wrap of `index`: (index < 0).where(index +
    size, index), ops_tensor._nonnegative_index, with its op named in the metadata."""
    meta = where.meta
    if meta is None or meta.name not in _STRICT_GATHERS | _COMBINED_GATHERS:
        return None
    condition, wrapped, kept = where.src
    if kept is not index or condition.op != Ops.CMPLT or condition.src[0] is not index:
        return None
    if wrapped.op != Ops.ADD or wrapped.src[0] is not index:
        return None
    zero, size = condition.src[1], wrapped.src[1]
    if zero in variable or size in variable or _constants_of(zero) != {0}:
        return None
    sizes = _constants_of(size)
    return sizes.pop() if len(sizes) == 1 and min(sizes) > 0 else None


def _range_of(node: UOp, one: bool = False) -> list[int]:
    """[n] when `node` holds integers 0..n-1 among more than one element (an arange, or a
    view of one), else []: a scalar is a sentinel (ignore_index), not a set of classes;
    but with `one` (after the wrap of a gather along an axis of size 1, whose arange(1) is
    the scalar 0) one element is the range [1]."""
    import numpy as np
    from ..backends.numpy import evaluate
    while node.op in _SAME_VALUES:  # the arange itself, not a vocabulary-by-tokens broadcast of it
        node = node.src[0]
    if not node.dtype.is_int or int(np.prod(node.shape)) < (1 if one else 2):  # (a scalar's prod(()) is 1)
        return []
    values = np.asarray(evaluate([node], {})[0])
    if values.min() < 0:
        return []
    return [int(values.max()) + 1]


_FEW = 64  # a compared constant of more elements than this is a table, not a sentinel


def _constants_of(node: UOp) -> set[int]:
    """The values of an input-free integer node of few elements (a view of a scalar: the
    ignore_index of `labels != -100`) that `index` is compared with: legitimate values."""
    import numpy as np
    from ..backends.numpy import evaluate
    while node.op in _SAME_VALUES:
        node = node.src[0]
    if not node.dtype.is_int or int(np.prod(node.shape or ())) > _FEW:
        return set()
    return {int(v) for v in np.unique(np.asarray(evaluate([node], {})[0]))}
