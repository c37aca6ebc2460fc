"""What `check` runs: the graph promoted to float64, with DETACH values frozen.

- `to_float64`: every float PARAM, CONST, BUFFER and node becomes float64, a
  float-to-float CAST disappears, a BITCAST keeps its bit-level meaning by casting to its
  original dtypes around it. So what is checked is the gradient graph's structure (the
  rules), not float32 rounding, and finite differences are accurate to ~1e-10.
- `freeze_detached`: DETACH means "a constant, as far as gradients go": the finite
  differences hold every DETACH value (outside function bodies) fixed at the point checked.
"""

from __future__ import annotations

from typing import Mapping

from ..core.graph import Graph
from ..core.ops import Ops, dtypes
from ..core.substitute import substitute
from ..core.uop import CallArg, UOp
from ..core.walks import scope_sources, toposort


# ----------------------------------------------------------------------------- DETACH

def freeze_detached(outputs: list[UOp], values: Mapping) -> list[UOp]:
    """`outputs` with every DETACH outside function bodies replaced by a BUFFER of its value
    for the inputs `values`: the function finite differences must match when gradients do
    not flow through DETACH. (A DETACH inside a body takes other values at every call, so
    it stays; that is rare.)"""
    from ..backends.reference import reference_evaluate
    detached = [n for n in _main_scope(outputs) if n.op == Ops.DETACH]
    if not detached:
        return outputs
    frozen = {node: UOp.buffer(value) for node, value in zip(detached, reference_evaluate(detached, values))}
    return substitute(outputs, frozen, into_bodies=True, into_backward=True)


def _main_scope(roots: list[UOp]) -> list[UOp]:
    """The nodes reachable from `roots` without entering a call's body or backward body."""
    seen, stack, order = set(roots), list(roots), []
    while stack:
        node = stack.pop()
        order.append(node)
        for s in scope_sources(node):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return order


# ----------------------------------------------------------------------------- float64

def to_float64(graph: Graph, promoted: dict | None = None) -> Graph:
    """The same graph computed in float64: every float node (inputs, constants, buffers,
    function slots, call bodies and backward bodies) becomes float64. Integer and bool
    nodes stay; a CAST between floats disappears; a BITCAST casts back to its original
    source dtype first (and its float result on to float64), so it means what it meant.
    `promoted`, when given, is filled with {original node: its float64 node}."""
    promoted = {} if promoted is None else promoted
    for node in toposort([*graph.outputs.values(), *graph.inputs]):
        promoted[node] = _promote(node, promoted)
    outputs = [(name, promoted[node]) for name, node in graph.outputs.items()]
    return Graph(outputs, inputs=[promoted[n] for n in graph.inputs], meta=graph.meta)


def _wide(dtype):
    return dtypes.float64 if dtype.is_float else dtype


def _promote(node: UOp, promoted: dict) -> UOp:
    op, dtype = node.op, node.dtype
    if op == Ops.PARAM:
        return UOp.param(node.arg, node.shape, _wide(dtype)) if dtype.is_float else node
    if op == Ops.CONST:
        return UOp.const(node.arg, dtypes.float64) if dtype.is_float else node
    if op == Ops.BUFFER:
        return UOp.buffer(node.buffer_array().astype("float64")) if dtype.is_float else node
    if op == Ops.NOOP:
        return node
    src = tuple(promoted[s] for s in node.src)
    if op == Ops.CAST:
        return src[0] if src[0].dtype is _wide(dtype) else UOp.make(Ops.CAST, _wide(dtype), src)
    if op == Ops.BITCAST:
        source_dtype = node.src[0].dtype
        bits = UOp.make(Ops.BITCAST, dtype, (src[0].cast(source_dtype),))
        return bits.cast(dtypes.float64) if dtype.is_float else bits
    arg = node.arg
    if op == Ops.CALL and arg.grad is not None:
        arg = CallArg(arg.name, promoted[arg.grad])
    return UOp.make(op, _wide(dtype), src, arg)
