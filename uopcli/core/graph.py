"""Graph: named inputs and outputs around UOps, plus the file's free-form meta.

A Graph is what a .uop file holds and what every command works on. It is immutable in
spirit: transforms build new graphs. Its `outputs` dict and `inputs` list can still be
changed in place (adding an output in a notebook); `save` and `evaluate_graph` check them
again (`Graph.check`), so a graph Graph() would refuse is never written or run.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..errors import GraphError
from .ops import Ops
from .uop import UOp, valid_name
from .walks import free_slot, node_list, toposort


class Graph:
    """Named roots (`outputs`, in order) over UOps, and the graph inputs (`inputs`, in order).

    `inputs` defaults to the named PARAMs the outputs reach, in walk order; pass it to fix
    the order or to keep inputs that no output uses (one UOp: that one input)."""

    __slots__ = ("outputs", "inputs", "meta")

    def __init__(self, outputs: Mapping[str, UOp] | Sequence[tuple[str, UOp]],
                 inputs: Sequence[UOp] | None = None, meta: Mapping[str, str] | None = None):
        pairs = list(outputs.items()) if isinstance(outputs, Mapping) else [tuple(p) for p in outputs]
        self.outputs: dict[str, UOp] = {}
        for name, node in pairs:
            _check_output(name, node)
            if name in self.outputs:
                raise GraphError(f"duplicate output name {name!r}")
            self.outputs[name] = node
        reached = [n for n in toposort(self.outputs.values()) if n.op == Ops.PARAM and isinstance(n.arg, str)]
        self.inputs: list[UOp] = list(reached) if inputs is None else node_list(inputs)  # one UOp: one input
        self.meta: dict[str, str] = dict(meta or {})
        self.check_interface()
        self.check_reached(reached)

    def check(self) -> None:
        """Graph()'s checks again, and no slot PARAM outside a body, for a graph whose
        `outputs` or `inputs` were changed in place (they are a plain dict and list):
        GraphError names the first output or input that a Graph, and so a .uop file,
        refuses. Its two halves, for a caller that walks the graph itself (save):
        check_interface() before the walk, check_reached(params) after it."""
        self.check_interface()
        self.check_reached([n for n in toposort(self.outputs.values()) if n.op == Ops.PARAM])

    def check_interface(self) -> None:
        """Output names and nodes, and inputs as named PARAMs with distinct names (no walk)."""
        for name, node in self.outputs.items():
            _check_output(name, node)
        names: set[str] = set()
        for node in self.inputs:
            if not isinstance(node, UOp) or node.op != Ops.PARAM or not isinstance(node.arg, str):
                raise GraphError(f"graph inputs must be named PARAMs, got {node!r}")
            if node.arg in names:
                raise GraphError(f"duplicate input name {node.arg!r}")
            names.add(node.arg)

    def check_reached(self, params: Iterable[UOp]) -> None:
        """`params`, the PARAMs the outputs reach: every named one is listed in `inputs`;
        a slot one, only inside a FUNCTION/CALL body (looked for only when there is one)."""
        listed = set(self.inputs)
        slots = False
        for node in params:
            if node.arg.__class__ is not str:
                slots = True
            elif node not in listed:
                raise unlisted_input(node, {n.arg for n in self.inputs})
        slot = free_slot(self.outputs.values()) if slots else None
        if slot is not None:
            raise GraphError(f"slot PARAM {slot.arg} {slot.dtype.name}{list(slot.shape)} is used outside any "
                             f"FUNCTION or CALL body")

    def __copy__(self) -> "Graph":
        """A Graph of the same nodes (immutable, so a deep copy is this too) with its own
        outputs dict, inputs list and meta dict. (Pickled: as the file format's bytes, see
        uopcli/__init__.py.)"""
        copied = Graph.__new__(Graph)
        copied.outputs, copied.inputs, copied.meta = dict(self.outputs), list(self.inputs), dict(self.meta)
        return copied

    def __deepcopy__(self, memo) -> "Graph":
        return self.__copy__()

    # ------------------------------------------------------------------ lookups
    @property
    def input_names(self) -> list[str]:
        return [n.arg for n in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self.outputs)

    def input(self, name: str) -> UOp:
        for node in self.inputs:
            if node.arg == name:
                return node
        raise GraphError(f"no input named {name!r}; inputs: {', '.join(self.input_names) or 'none'}")

    def output(self, name: str) -> UOp:
        try:
            return self.outputs[name]
        except KeyError:
            raise GraphError(f"no output named {name!r}; outputs: {', '.join(self.outputs) or 'none'}") from None

    # ------------------------------------------------------------------ walks
    def nodes(self) -> list[UOp]:
        """Every node in the file format's canonical order: the post-order of a walk from
        the outputs in order (a CALL's backward body after its sources), then unused inputs."""
        order = toposort(self.outputs.values())
        seen = set(order)
        order.extend(n for n in self.inputs if n not in seen)
        return order

    def __len__(self) -> int:
        return len(self.nodes())

    def __repr__(self) -> str:
        ins = ", ".join(f"{n.arg}:{n.dtype.name}{list(n.shape)}" for n in self.inputs)
        outs = ", ".join(self.outputs)
        return f"<Graph inputs=[{ins}] outputs=[{outs}]>"


def _check_output(name, node) -> None:
    if not valid_name(name):
        raise GraphError(f"output name {name!r} must be non-empty, without '=', ',' or whitespace")
    if not isinstance(node, UOp):
        raise GraphError(f"output {name!r} must be a UOp, got {type(node).__name__}")
    if node.op == Ops.NOOP:
        raise GraphError(f"output {name!r} is a NOOP (NOOP is only a TUPLE element)")


def unlisted_input(node: UOp, listed_names) -> GraphError:
    """The refusal of a named PARAM that outputs reach but `inputs` does not list."""
    if node.arg in listed_names:
        return GraphError(f"duplicate input name {node.arg!r} (two PARAMs of different shape or dtype)")
    return GraphError(f"input {node.arg!r} is used but not listed in inputs")
