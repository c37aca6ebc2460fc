"""Graph: named inputs and outputs around UOps, plus the file's free-form meta.

A Graph is what a .uop file holds and what every command works on. It is immutable in
spirit: transforms build new graphs.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..errors import GraphError
from .ops import Ops
from .uop import UOp, valid_name
from .walks import node_list, toposort


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
            if not valid_name(name):
                raise GraphError(f"output name {name!r} must be non-empty, without '=', ',' or whitespace")
            if name in self.outputs:
                raise GraphError(f"duplicate output name {name!r}")
            if not isinstance(node, UOp):
                raise GraphError(f"output {name!r} must be a UOp, got {type(node).__name__}")
            self.outputs[name] = node
        reached = [n for n in toposort(self.outputs.values()) if n.op == Ops.PARAM and isinstance(n.arg, str)]
        self.inputs: list[UOp] = list(reached) if inputs is None else node_list(inputs)  # one UOp: one input
        self.meta: dict[str, str] = dict(meta or {})
        self._check_inputs(reached)

    def _check_inputs(self, reached: Iterable[UOp]) -> None:
        names: set[str] = set()
        for node in self.inputs:
            if not isinstance(node, UOp) or node.op != Ops.PARAM or not isinstance(node.arg, str):
                raise GraphError(f"graph inputs must be named PARAMs, got {node!r}")
            if node.arg in names:
                raise GraphError(f"duplicate input name {node.arg!r}")
            names.add(node.arg)
        listed = set(self.inputs)
        for node in reached:
            if node not in listed:
                if node.arg in names:
                    raise GraphError(f"duplicate input name {node.arg!r} (two PARAMs of different shape or dtype)")
                raise GraphError(f"input {node.arg!r} is used but not listed in inputs")

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
