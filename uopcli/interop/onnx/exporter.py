"""Export a Graph as a standard ONNX model that onnxruntime's CPU provider runs as written.

    model = to_onnx(graph)                 # onnx.ModelProto, default opset 20
    save_onnx(graph, "grad.onnx", opset=21)
    to_onnx(graph, weights={"fc.weight": w})   # fc.weight an initializer, not an input

- **Inputs and outputs keep their names** (`x`, `loss`, `grad_w`); each graph output is
  an Identity of its value. A TUPLE, FUNCTION or CALL output becomes one output per
  element, `name[i]`, as `uopgrad eval` lists it; NOOP elements have none.
- **Weights are initializers**: inputs named in `weights` (an imported model's own
  weights) are written as initializers holding those arrays, not as inputs, as PyTorch's
  exporter writes a model's parameters: the file runs given only the model's own inputs
  (and cotangents). A weight no output reads (a gradient's unused bias) is left out.
- **Every op by the table** in export_table.py (exact equivalents in exact.py); BUFFER data
  and constants become initializers (their own bytes). A REDUCE ADD over a MUL of
  broadcast factors (a matmul, as tinygrad spells it) is one Einsum (contract.py).
- **Calls are inlined per call site**, as the evaluator runs them: a body's nodes are
  emitted once for each FUNCTION/CALL node that a GETTUPLE reads, with slot i bound to
  arg i, named under the call's name. (ONNX local functions would keep one copy per body,
  but onnxruntime inlines them when it loads the model anyway, and inlined nodes keep
  each call's own shapes visible to onnx's shape inference.)
- **Metadata travels**: node names are `scope/call/name/OP_n` (the UOp's scope, the
  calls it sits in, the front-end function that made it), and each ONNX node's
  doc_string says which UOp it computes: `MUL float32[4, 8] | name=relu | loc=... |
  scope=... | backward`.
- **Iterative walk**: explicit stacks only, so a 10^6-node chain exports.
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np
import onnx
from onnx import helper

from uopcli import __version__
from uopcli.errors import FormatError, GraphError
from uopcli.core.graph import Graph
from uopcli.core.ops import CALLS, Ops

from .contract import contraction, emit_contraction
from .dtypes import TO_ONNX
from .emit import Emitter
from .export_table import ROWS

DEFAULT_OPSET = 20
MIN_OPSET = 18          # BitwiseAnd/Or/Xor and ReduceMax/ReduceProd with axes as an input
_PROTOBUF_LIMIT = 2 ** 31 - 2 ** 24  # a ModelProto serializes to at most 2 GiB; room for the graph


class ExportError(GraphError):
    """A graph that cannot be written as ONNX (the message names the node and why)."""


def newest_opset() -> int:
    return onnx.defs.onnx_opset_version()


def default_opset() -> int:
    """Opset 20, or the newest the installed onnx knows if that is older."""
    return min(DEFAULT_OPSET, newest_opset())


def to_onnx(graph: Graph, opset: int | None = None, weights: Mapping | None = None) -> onnx.ModelProto:
    """The ONNX model computing `graph`'s outputs from its inputs (see the module doc);
    inputs named in `weights` become initializers holding those arrays; a name that is no
    input of the graph is refused (likely a typo), as evaluate_graph refuses it."""
    opset = default_opset() if opset is None else _checked_opset(opset)
    weights = _checked_weights(graph, weights or {})
    model = helper.make_model(onnx.GraphProto(), opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="uopgrad", producer_version=__version__)
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    for key, value in sorted(graph.meta.items()):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    _Exporter(graph, model.graph, weights).run()
    return model


def onnx_bytes(graph: Graph, opset: int | None = None, weights: Mapping | None = None) -> bytes:
    """The serialized ONNX model (what a .onnx file holds)."""
    model = to_onnx(graph, opset, weights)
    size = model.ByteSize()
    if size > _PROTOBUF_LIMIT:
        raise ExportError(f"the ONNX model would be {size / 2 ** 30:.2f} GiB: protobuf cannot write more than 2 GiB "
                          "in one file (the embedded BUFFER data and weights are too large)")
    return model.SerializeToString()


def save_onnx(graph: Graph, path: str, opset: int | None = None, weights: Mapping | None = None) -> None:
    """Write the ONNX model to `path`, all at once or not at all; a path that cannot be
    written (a directory, a missing folder) is a FormatError, as save()'s."""
    from uopcli.formats.atomic import write_atomically
    data = onnx_bytes(graph, opset, weights)
    try:
        write_atomically(path, data)
    except OSError as error:
        raise FormatError(f"cannot write: {error.strerror or error}", source=os.fspath(path)) from None


def _checked_weights(graph: Graph, weights: Mapping) -> Mapping:
    names = set(graph.input_names)
    for name in weights:
        if name not in names:
            raise ExportError(f"unknown weight {name!r}: weights are graph inputs; the graph's inputs: "
                              f"{', '.join(graph.input_names) or 'none'}")
    return weights


def _checked_opset(opset: int) -> int:
    newest = newest_opset()
    if not MIN_OPSET <= opset <= newest:
        raise ExportError(f"opset {opset} is not supported: the exporter writes opsets {MIN_OPSET} to {newest} "
                          f"(the newest the installed onnx {onnx.__version__} knows)")
    return opset


# ----------------------------------------------------------------------------- the walk

class _Scope:
    """Where values live: the top level, or one call site's inlined body (slot i = arg i)."""

    __slots__ = ("values", "calls", "slots", "path")

    def __init__(self, slots: list[str] | None, path: str):
        self.values: dict = {}      # UOp -> ONNX value name
        self.calls: dict = {}       # FUNCTION/CALL UOp -> its _Scope
        self.slots, self.path = slots, path


_IDENTITY = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY})


class _Exporter:
    def __init__(self, graph: Graph, proto: onnx.GraphProto, weights: Mapping):
        self.graph, self.proto, self.weights = graph, proto, weights
        self.outputs = self._output_plan()
        reserved = set(graph.input_names) | {name for name, _, _ in self.outputs}
        self.e = Emitter(proto, reserved)
        self.top = _Scope(None, "")
        self.serial = 0
        self.contractions: dict = {}  # REDUCE UOp -> its Einsum plan, or None

    def run(self) -> None:
        self.proto.name = self.graph.meta.get("name", "uopgrad")
        for node in self.graph.inputs:
            if node.arg not in self.weights:  # a weight's initializer is written when a node reads it
                self.proto.input.append(_value_info(node.arg, node))
                self.top.values[node] = node.arg
        for name, root, scope in self.outputs:
            value = self._resolve(root, scope)
            if value != name:  # an input (or weight) output under its own name is listed as it is: an
                self.e.alias(value, name)  # Identity into its name would define it twice (not SSA)
            self.proto.output.append(_value_info(name, root))

    # ------------------------------------------------------------------ outputs
    def _output_plan(self) -> list[tuple[str, object, object]]:
        """(ONNX output name, value UOp, call UOp or None) per ONNX output, in order."""
        plan: list = []
        for name, node in self.graph.outputs.items():
            if node.op == Ops.TUPLE:
                plan += [(f"{name}[{i}]", element, None) for i, element in enumerate(node.src)
                         if element.op != Ops.NOOP]
            elif node.op in CALLS:  # a body's outputs are never NOOP
                plan += [(f"{name}[{i}]", element, node) for i, element in enumerate(node.src[0].src)]
            elif node.op == Ops.STORE:
                plan.append((name, node.src[1], None))
            elif node.op != Ops.NOOP:
                plan.append((name, node, None))
        if not plan:
            raise ExportError("nothing to export: the graph's outputs hold no value (tuples of NOOPs only)")
        seen, inputs = set(), {node.arg: node for node in self.graph.inputs}
        for name, root, call in plan:
            if name in seen or (name not in self.graph.outputs and name in inputs):
                raise ExportError(f"output name {name!r} (a tuple element) is also the name of another input "
                                  "or output: rename one")
            if name in inputs and (root is not inputs[name] or call is not None):
                raise ExportError(f"output {name!r} is named like input {name!r} but is another value: ONNX names "
                                  "each value once; rename the output")
            seen.add(name)
        return plan

    # ------------------------------------------------------------------ values
    def _resolve(self, root, call) -> str:
        """The ONNX value name of `root` at the top level, or of element `root` of the
        body of `call` (a FUNCTION/CALL output of the graph)."""
        if call is None:
            return self._value(root, self.top)
        self._value_of_call(call, self.top)
        return self._value(root, self.top.calls[call])

    def _value_of_call(self, call, scope: _Scope) -> None:
        stack = [(arg, scope) for arg in reversed(call.src[1:])]
        self._walk(stack)
        self._enter(call, scope)

    def _value(self, node, scope: _Scope) -> str:
        if node not in scope.values:
            self._walk([(node, scope)])
        return scope.values[node]

    def _walk(self, stack: list) -> None:
        """Post-order over (node, scope) pairs with an explicit stack: a node's ONNX nodes
        are emitted once every value it needs has a name."""
        while stack:
            node, scope = stack[-1]
            if node in scope.values:
                stack.pop()
                continue
            pending = self._pending(node, scope)
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            scope.values[node] = self._emit(node, scope)

    def _pending(self, node, scope: _Scope) -> list:
        """The (node, scope) pairs still without a value that `node` needs first."""
        op = node.op
        if op == Ops.GETTUPLE:
            call = node.src[0]
            inner = scope.calls.get(call)
            if inner is None:
                missing = [(a, scope) for a in reversed(call.src[1:]) if a not in scope.values]
                if missing:
                    return missing
                inner = self._enter(call, scope)
            element = call.src[0].src[node.arg]
            return [] if element in inner.values else [(element, inner)]
        if op == Ops.PARAM:
            return []
        if op in (Ops.STORE, Ops.AFTER):
            needed = node.src[1]
            return [] if needed in scope.values else [(needed, scope)]
        if op in _IDENTITY:
            return [] if node.src[0] in scope.values else [(node.src[0], scope)]
        if op == Ops.REDUCE:
            plan = self._contraction(node)
            if plan is not None:  # the factors before their EXPANDs; the product is never built
                return [(f.base, scope) for f in reversed(plan.factors) if f.base not in scope.values]
        return [(s, scope) for s in reversed(node.src) if s not in scope.values]

    def _contraction(self, node):
        try:
            return self.contractions[node]
        except KeyError:
            plan = self.contractions[node] = contraction(node)
            return plan

    def _enter(self, call, scope: _Scope) -> _Scope:
        inner = scope.calls.get(call)
        if inner is None:
            path = f"{scope.path}/{call.arg if call.op == Ops.FUNCTION else call.arg.name}".lstrip("/")
            inner = scope.calls[call] = _Scope([scope.values[a] for a in call.src[1:]], path)
        return inner

    def _emit(self, node, scope: _Scope) -> str:
        op = node.op
        if op == Ops.PARAM:  # graph inputs have their values from the start, weights once read
            if scope.slots is None and node.arg in self.weights:
                self.proto.initializer.append(_weight(node, self.weights[node.arg]))
                return node.arg
            if scope.slots is None:
                raise ExportError(f"{_describe(self.graph, node)}: slot PARAM {node.arg} outside a function body "
                                  "(the format allows slots only inside FUNCTION/CALL bodies)")
            return scope.slots[node.arg]
        if op == Ops.GETTUPLE:
            return scope.calls[node.src[0]].values[node.src[0].src[0].src[node.arg]]
        if op in (Ops.STORE, Ops.AFTER):
            return scope.values[node.src[1]]
        if op in _IDENTITY:
            return scope.values[node.src[0]]
        self.serial += 1
        self.e.start(self._label(node, scope), _doc(node))
        if op == Ops.REDUCE:
            plan = self._contraction(node)
            if plan is not None:
                return emit_contraction(self.e, node, plan, [scope.values[f.base] for f in plan.factors])
        return ROWS[op].emit(self.e, node, *(scope.values[s] for s in node.src))

    def _label(self, node, scope: _Scope) -> str:
        """`scope/call path/name/OP_n`, the parts the node has."""
        label = f"{node.op}_{self.serial}"
        meta = node.meta
        if meta is not None:
            name, _, backward, where = meta
            if name:
                label = f"{name}.backward/{label}" if backward else f"{name}/{label}"
            elif backward:
                label = f"backward/{label}"
            if scope.path:
                label = f"{scope.path}/{label}"
            if where:
                label = f"{where}/{label}"
        elif scope.path:
            label = f"{scope.path}/{label}"
        return label


def _doc(node) -> str:
    text = f"{node.op} {node.dtype.name}{list(node.shape)}"
    meta = node.meta
    if meta is None:
        return text
    name, loc, backward, scope = meta
    if name:
        text += f" | name={name}"
    if loc:
        text += f" | loc={loc}"
    if scope:
        text += f" | scope={scope}"
    return text + " | backward" if backward else text


def _value_info(name: str, node) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TO_ONNX[node.dtype], list(node.shape))


def _weight(node, value) -> onnx.TensorProto:
    """Input `node`'s initializer holding `value` (its own dtype and shape, no cast)."""
    array = np.asarray(value)
    if array.dtype != node.dtype.np or array.shape != tuple(node.shape):
        raise ExportError(f"weight {node.arg!r} is {array.dtype}{list(array.shape)} but the input is "
                          f"{node.dtype.name}{list(node.shape)}")
    tensor = onnx.TensorProto(name=node.arg, data_type=TO_ONNX[node.dtype], dims=array.shape)
    tensor.raw_data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return tensor


def _describe(graph: Graph, node) -> str:
    """`node %12 (GETTUPLE)`: its index in the file's canonical order (an error path only)."""
    try:
        index = graph.nodes().index(node)
    except ValueError:
        return f"a {node.op} node"
    return f"node %{index} ({node.op})"


__all__ = ["to_onnx", "onnx_bytes", "save_onnx", "default_opset", "newest_opset", "ExportError",
           "DEFAULT_OPSET", "MIN_OPSET"]
