"""Where a nan or an inf comes from: `uopgrad eval --debug-nans`, and `check` when a value
is not finite.

    finding = hunt_nans(graph, inputs)      # None when every output is finite
    print("\\n".join(finding.lines()))

One evaluation of the graph as written, by the reference evaluator (every node a value of
its own, products included: fuse=False), watches each node of the main scope as it is made
and keeps a few numbers per node, never the values. Then, from the outputs that are not
finite, it follows the sources that carry the same kind of value down to the first node,
in evaluation order, that *makes* one:
- a nan from sources that hold none at that element (0·inf, inf - inf, √-1, log -1),
  when an output holds a nan;
- else an inf from finite sources (an overflow, 1/0, log 0).
A value made inside a call's body is reported at the call's output (GETTUPLE), naming
the call. The report gives the node as `uopgrad print` numbers it (%index), its op, dtype and
shape, its metadata (`∇ sigmoid` for a node made differentiating sigmoid, and the forward
node it differentiates: the latest forward node with the same function and scope that it
reads), the sources' min/max and non-finite counts, and the input elements its first
such element depends on, when there are few (a dependency walk on shapes: no values).
For a nan made from an inf, where that inf was made too.

A nan an op's own definition gives (the importer's Softmax of a row that is -inf
throughout: WHERE(row max == -inf, CONST nan, ...)) is made by that op's WHERE, not given
by the file: the CONST is a branch of a WHERE built for an op (not an ONNX Where).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..core.graph import Graph
from ..core.ops import CALLS, Ops
from ..core.uop import UOp
from ..core.walks import scope_sources, scope_toposort

FEW_ELEMENTS = 8  # input elements listed one by one, at most

# ops whose element i is computed from their sources' element i (a () source broadcasts)
_ELEMENTWISE = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.CAST,
                          Ops.BITCAST, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD,
                          Ops.WHERE, Ops.MULACC, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY})


@dataclass
class _Seen:
    """What the hunt keeps of one node's value."""
    order: int
    nans: int
    infs: int
    made_nan: object = None    # first element index of a nan made here, or None
    made_inf: object = None    # first element index of an inf made here
    summary: str = ""
    defined: bool = False      # a WHERE taking a nan its op's definition gives (_defined_nan_branch)


@dataclass
class Finding:
    """The node that first makes a nan (or an inf), described for a reader."""
    kind: str                      # "nan" or "inf"
    node: str                      # `%12 MUL float16[4]`
    meta: str                      # `∇ sigmoid (differentiates %7 RECIPROCAL), in scope act`
    made: str                      # `makes 4 nans (first at [0]) from sources that hold none there`
    sources: list[str] = field(default_factory=list)
    elements: list[str] = field(default_factory=list)
    origin: "Finding | None" = None   # where the inf a nan was made from was made
    cause: str = "computed"        # "given" (an input, a constant of the file), "computed" from
    #                                sources without one, or "defined": the op's definition gives it

    def lines(self, indent: str = "") -> list[str]:
        out = [f"{indent}first {self.kind}: {self.node}{', ' + self.meta if self.meta else ''}: {self.made}"]
        out += [f"{indent}  source {s}" for s in self.sources]
        out += [f"{indent}  {e}" for e in self.elements]
        if self.origin is not None:
            out += [f"{indent}  the inf it is made from:", *self.origin.lines(indent + "    ")]
        return out

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "meta": self.meta, "made": self.made,
                "cause": self.cause, "sources": self.sources, "elements": self.elements,
                "origin": None if self.origin is None else self.origin.to_dict()}


def hunt_nans(graph: Graph, inputs: Mapping, shown: tuple | None = None) -> Finding | None:
    """The node of `graph` that first makes the non-finite values of its outputs at
    `inputs`, or None when the outputs are finite. `shown` = (graph, {node: its node
    there}) describes the nodes as those of another graph (check's float64 copy of a
    gradient graph, shown as the gradient graph)."""
    shown_graph, rename = shown if shown is not None else (graph, {})
    number = {node: i for i, node in enumerate(shown_graph.nodes())}
    hunt = _Hunt(inputs, number, rename)
    hunt.run(list(graph.outputs.values()), inputs, ())
    return hunt.finding(list(graph.outputs.values()))


class _Hunt:
    def __init__(self, inputs: Mapping, number: dict, rename: Mapping):
        self.inputs, self.number, self.rename = inputs, number, rename
        self.seen: dict[UOp, _Seen] = {}

    def run(self, outputs: list, inputs: Mapping, slots) -> None:
        from ..backends.reference import reference_evaluate
        reference_evaluate(outputs, inputs, slots, observe=self.observe, fuse=False)

    def observe(self, node: UOp, value, sources: list) -> None:
        import numpy as np
        if node.op in CALLS or node.op == Ops.TUPLE or not isinstance(value, np.ndarray):
            return
        if node.op == Ops.GETTUPLE:
            return self._from_call(node, value)
        if value.dtype.kind != "f":
            return
        nan, inf = np.isnan(value), np.isinf(value)
        seen = _Seen(len(self.seen), int(nan.sum()), int(inf.sum()), summary=_summary(value))
        self.seen[node] = seen
        if not (seen.nans or seen.infs):
            return
        floats = [i for i, s in enumerate(sources) if isinstance(s, np.ndarray) and s.dtype.kind == "f"]
        float_sources = [sources[i] for i in floats]
        if node.op in _ELEMENTWISE:
            shape = value.shape
            source_nan = np.zeros(shape, bool)
            source_bad = np.zeros(shape, bool)
            own = _defined_nan_branch(node, sources)
            seen.defined = own is not None
            for s in (sources[i] for i in floats if i != own):  # (the op's own nan is made here, not passed on)
                source_nan |= np.broadcast_to(np.isnan(s), shape)
                source_bad |= np.broadcast_to(~np.isfinite(s), shape)
            seen.made_nan = _first(nan & ~source_nan)
            seen.made_inf = _first(inf & ~source_bad)
        else:  # movements and reductions: made here when no source holds one at all
            any_nan = any(bool(np.isnan(s).any()) for s in float_sources)
            any_bad = any(not bool(np.isfinite(s).all()) for s in float_sources)
            seen.made_nan = _first(nan) if seen.nans and not any_nan else None
            seen.made_inf = _first(inf) if seen.infs and not any_bad else None
        if node.op in (Ops.PARAM, Ops.BUFFER, Ops.CONST):
            seen.made_nan = seen.made_inf = None  # given, not made: the walk stops at it

    def _from_call(self, node: UOp, value) -> None:
        """A call's output: made inside when its float args hold no such value."""
        import numpy as np
        call = node.src[0]
        args = call.src[1:]
        nan, inf = np.isnan(value) if value.dtype.kind == "f" else None, None
        if nan is None:
            return
        inf = np.isinf(value)
        seen = _Seen(len(self.seen), int(nan.sum()), int(inf.sum()), summary=_summary(value))
        self.seen[node] = seen
        arg_nans = sum(self.seen[a].nans for a in args if a in self.seen)
        arg_bad = arg_nans + sum(self.seen[a].infs for a in args if a in self.seen)
        seen.made_nan = _first(nan) if seen.nans and not arg_nans else None
        seen.made_inf = _first(inf) if seen.infs and not arg_bad else None

    # -- after the evaluation

    def finding(self, outputs: list) -> Finding | None:
        seen = self.seen
        bad = [o for o in outputs if o in seen and (seen[o].nans or seen[o].infs)]
        if not bad:
            return None
        kind = "nan" if any(seen[o].nans for o in bad) else "inf"
        return self._culprit(bad, kind)

    def _culprit(self, roots: list, kind: str) -> Finding | None:
        carries = (lambda s: s.nans) if kind == "nan" else (lambda s: s.infs)
        made = (lambda s: s.made_nan) if kind == "nan" else (lambda s: s.made_inf)
        found, given, stack, visited = None, None, [r for r in roots if r in self.seen], set()
        while stack:
            node = stack.pop()
            if node in visited:
                continue
            visited.add(node)
            record = self.seen[node]
            if made(record) is not None and (found is None or record.order < self.seen[found].order):
                found = node
            if node.op in (Ops.PARAM, Ops.BUFFER, Ops.CONST) and (given is None or record.order < self.seen[given].order):
                given = node
            for s in _hunt_sources(node):
                if s in self.seen and carries(self.seen[s]):
                    stack.append(s)
        if found is None:
            return None if given is None else self._given(given, kind)
        return self._describe(found, kind)

    def _given(self, node: UOp, kind: str) -> Finding:
        """No node makes it: an input (or a constant of the file) holds it."""
        record = self.seen[node]
        count = record.nans if kind == "nan" else record.infs
        what = f"input {node.arg}" if node.op == Ops.PARAM else f"a {node.op} of the file"
        return Finding(kind, self._name(node), self._meta(self.rename.get(node, node), node),
                       f"{what} holds {_plural(count, kind)} among {_size(node)} elements: given, not made",
                       cause="given")

    def _describe(self, node: UOp, kind: str) -> Finding:
        record = self.seen[node]
        first = record.made_nan if kind == "nan" else record.made_inf
        count = record.nans if kind == "nan" else record.infs
        shown = self.rename.get(node, node)
        made = f"{_plural(count, kind)} among {_size(node)} elements (first made at {_index(first)})"
        defined = kind == "nan" and record.defined
        made += (f": {self._defined(node, first)}" if defined else ", from sources that hold no nan there"
                 if kind == "nan" else ", from finite sources")
        if node.op == Ops.GETTUPLE:
            call = node.src[0]
            made += f", inside the body of {call.op} {call.arg.name if call.op == Ops.CALL else call.arg}"
        sources = [f"{self._name(s)}: {self.seen[s].summary}" for s in _hunt_sources(node) if s in self.seen]
        finding = Finding(kind, self._name(node), self._meta(shown, node), made, sources,
                          self._elements(node, first), cause="defined" if defined else "computed")
        if kind == "nan" and not defined and any(self.seen[s].infs for s in _hunt_sources(node) if s in self.seen):
            finding.origin = self._culprit([s for s in _hunt_sources(node) if s in self.seen], "inf")
        return finding

    def _defined(self, node: UOp, first) -> str:
        """Why the op's definition gives a nan at `first` of its WHERE: a row of its input
        that is -inf throughout (Softmax, LogSoftmax: e^(x - max) is -inf - -inf), else
        where the WHERE's condition holds."""
        name = node.meta.name
        row = _minus_inf_row(node.src[0])
        if row is None:
            return f"made by {name}, whose definition gives nan where {self._name(node.src[0])} is true"
        top, values = row
        axes = top.arg[1]
        at = "[" + ",".join(":" if a in axes else str(i) for a, i in enumerate(first)) + "]"
        meta = self._meta(self.rename.get(values, values), values)
        return (f"made by {name}, whose definition gives nan for a row that is -inf throughout: its input "
                f"{self._name(values)}{f' ({meta})' if meta else ''} is -inf throughout {at}")

    def _name(self, node: UOp) -> str:
        shown = self.rename.get(node, node)
        index = self.number.get(shown)
        shape = ",".join(map(str, node.shape or ()))
        return f"{'' if index is None else f'%{index} '}{shown.op} {shown.dtype.name}[{shape}]"

    def _meta(self, shown: UOp, node: UOp) -> str:
        meta = shown.meta
        if meta is None:
            return ""
        parts = []
        if meta.name:
            parts.append(f"∇ {meta.name}" if meta.backward else meta.name)
            if meta.backward:
                twin = _forward_twin(shown, self.number)
                if twin is not None:
                    parts[-1] += f" (differentiates {self._name_shown(twin)})"
        elif meta.backward:
            parts.append("backward")
        if meta.scope:
            parts.append(f"in scope {meta.scope}")
        if meta.loc:
            parts.append(f"at {meta.loc}")
        return ", ".join(parts)

    def _name_shown(self, shown: UOp) -> str:
        index = self.number.get(shown)
        return f"{'' if index is None else f'%{index} '}{shown.op} {shown.dtype.name}"

    def _elements(self, node: UOp, first) -> list[str]:
        """The input elements the first made element depends on, when few."""
        import numpy as np
        if first is None or node.shape is None:
            return []
        mask = np.zeros(node.shape, bool)
        mask[first] = True
        reached = _leading_inputs(node, mask)
        total = sum(int(m.sum()) for m in reached.values())
        if not reached:
            return ["it depends on no input (constants only)"]
        if total > FEW_ELEMENTS:
            listed = ", ".join(f"{name} ({int(m.sum())})" for name, m in reached.items())
            return [f"its element {_index(first)} depends on {total} input elements: {listed}"]
        out = []
        for name, m in reached.items():
            value = self.inputs.get(name)
            for index in np.argwhere(m):
                index = tuple(int(i) for i in index)
                shown = "?" if value is None else repr(np.asarray(value)[index].item())
                out.append(f"input {name}{_index(index)} = {shown}")
        return [f"its element {_index(first)} depends on: " + "; ".join(out)]


def _hunt_sources(node: UOp) -> tuple:
    """The nodes whose values a node's value comes from, in the main scope (a call's
    output from the call's args)."""
    if node.op == Ops.GETTUPLE:
        return tuple(node.src[0].src[1:])
    return tuple(s for s in scope_sources(node) if s.op not in CALLS)


def _defined_nan_branch(node: UOp, sources: list) -> int | None:
    """The branch (src index) of a WHERE made for an op, not for an ONNX Where (the
    importer's Softmax), that takes a nan CONST: a nan that op's definition gives. The
    CONST's own metadata does not tell: equal constants are one node, a file's nan and
    the import's alike, tagged by the first op that made it. None otherwise."""
    import numpy as np
    meta = node.meta
    if node.op != Ops.WHERE or meta is None or meta.name in (None, "Where"):
        return None
    for i in (1, 2):
        value = sources[i]
        if (node.src[i].op == Ops.CONST and isinstance(value, np.ndarray) and value.dtype.kind == "f"
                and np.isnan(value).any()):
            return i
    return None


def _minus_inf_row(condition: UOp):
    """(the REDUCE MAX, its input) when `condition` is, through movements, max(v) == -inf:
    v's row along the reduced axes is -inf throughout. Else None."""
    while condition.op in (Ops.EXPAND, Ops.RESHAPE):
        condition = condition.src[0]
    if condition.op != Ops.CMPEQ:
        return None
    for top, other in (condition.src, condition.src[::-1]):
        if (top.op == Ops.REDUCE and top.arg[0] == "MAX" and other.op == Ops.CONST
                and other.arg == float("-inf")):
            return top, top.src[0]
    return None


def _forward_twin(node: UOp, everything) -> UOp | None:
    """The forward node a backward node differentiates, as far as metadata tells: the
    latest forward node it reads with the same function name, scope and loc (not a
    constant the function made: a node computed from others), else the latest such node
    of the graph."""
    meta = node.meta
    want = (meta.name, meta.scope, meta.loc)

    def latest(nodes):
        best = None
        for n in nodes:
            m = n.meta
            if n.src and m is not None and not m.backward and (m.name, m.scope, m.loc) == want:
                best = n
        return best
    # one it reads (rules reuse the forward result); else the function's last node anywhere
    read = latest(scope_toposort([node]))
    return latest(everything) if read is None else read


def _leading_inputs(node: UOp, mask) -> dict:
    """{input name: bool mask of its elements that `mask` of `node` depends on}: masks
    carried from each node to its sources by shape alone (the transpose of each op's
    index map, OR where a gradient would add)."""
    import numpy as np
    masks = {node: mask}
    reached: dict = {}
    for n in reversed(scope_toposort([node])):
        m = masks.pop(n, None)
        if m is None or not m.any():
            continue
        if n.op == Ops.PARAM:
            if isinstance(n.arg, str):
                reached[n.arg] = reached[n.arg] | m if n.arg in reached else m
            continue
        if n.op == Ops.GETTUPLE:  # a call's output: every element of every arg, as far as shapes tell
            pairs = [(s, np.ones(s.shape, bool)) for s in _hunt_sources(n) if s.shape is not None]
        else:
            pairs = zip(scope_sources(n), _back(n, m))
        for s, sm in pairs:
            if s.shape is None:
                continue
            sm = np.broadcast_to(sm, s.shape) if sm.shape != s.shape else sm
            masks[s] = masks[s] | sm if s in masks else sm
    return reached


def _back(n: UOp, m):
    """The source masks of node `n` given its mask `m`."""
    import numpy as np
    op, arg = n.op, n.arg
    sources = scope_sources(n)
    if op in _ELEMENTWISE:
        return [np.array(m.any()) if s.shape == () else m for s in sources]
    if op == Ops.REDUCE:
        return [np.broadcast_to(m, sources[0].shape)]
    if op == Ops.RESHAPE:
        return [m.reshape(sources[0].shape)]
    if op == Ops.EXPAND:
        src = sources[0].shape
        axes = tuple(i for i, (a, b) in enumerate(zip(src, n.shape)) if a == 1 and b != 1)
        return [m.any(axis=axes, keepdims=True) if axes else m]
    if op == Ops.PERMUTE:
        return [np.transpose(m, np.argsort(arg))]
    if op == Ops.PAD:
        return [m[tuple(slice(b, b + size) for (b, _), size in zip(arg, sources[0].shape))]]
    if op == Ops.SHRINK:
        out = np.zeros(sources[0].shape, bool)
        out[tuple(slice(s, e) for s, e in arg)] = m
        return [out]
    if op == Ops.FLIP:
        return [np.flip(m, [i for i, f in enumerate(arg) if f])]
    # calls, tuples, stores: every element of every source, as far as shapes tell
    return [np.ones(s.shape, bool) if s.shape is not None else None for s in sources]


def _first(mask):
    import numpy as np
    if not mask.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _summary(value) -> str:
    import numpy as np
    finite = value[np.isfinite(value)]
    bad = value.size - finite.size
    span = f"min {finite.min():.6g} max {finite.max():.6g}" if finite.size else "no finite element"
    return f"{span}, {bad} of {value.size} not finite"


def _index(index) -> str:
    return "[" + ",".join(map(str, index)) + "]"


def _size(node: UOp) -> int:
    n = 1
    for s in node.shape or ():
        n *= s
    return n


def _plural(count: int, kind: str) -> str:
    return f"{count} {kind}{'s' if count != 1 else ''}"


__all__ = ["hunt_nans", "Finding"]
