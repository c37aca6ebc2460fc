"""ONNX ops that the spec defines by a function body (AffineGrid, CausalConvWithState,
LinearAttention, ...; of the preview domain, FlexAttention): where the import table has no
row for the op's version, the node is imported as its body, node by node, as onnx.reference
runs such an op.

A schema's body is fixed (`function_body`) or made for the node at hand (a context-dependent
function: its attributes and its inputs' element types and shapes choose the body). The body's
nodes are renamed into the node's own namespace: the function's formal inputs and outputs
become the node's actual ones (an input the node leaves out stays empty), every other value
`<node's first output>::<name>` (`::` is in no name an exporter writes). An attribute that
refers to the node's (`ref_attr_name`) takes the node's value, else the schema's default,
else it is left out. The body's ops are read at the body's own opset version, and carry the
node's metadata (its module path, for the viewer)."""

from __future__ import annotations

from typing import Sequence

SEPARATOR = "::"


def function_of(op: str, opset: int, node, input_types: Sequence, domain: str = ""):
    """The FunctionProto that defines `op` of `domain` (ai.onnx: "") at `opset` for `node` (its
    inputs' TypeProtos, in order, for a context-dependent body), or None where the spec has none."""
    import onnx
    import onnx.defs
    try:
        schema = onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None
    if schema.has_function:
        return schema.function_body
    if schema.has_context_dependent_function:
        body = schema.get_context_dependent_function(node.SerializeToString(),
                                                     [t.SerializeToString() for t in input_types])
        function = onnx.FunctionProto()
        function.ParseFromString(body)
        return function
    return None


def has_function(op: str, opset: int | None, domain: str = "") -> bool:
    """Whether the spec defines `op` of `domain` at `opset` by a body (fixed or context-dependent)."""
    import onnx.defs
    if opset is None:
        return False
    try:
        schema = onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return False
    return schema.has_function or schema.has_context_dependent_function


def body_opset(function, default: int) -> int:
    """The ai.onnx version the body's nodes are written for."""
    return next((entry.version for entry in function.opset_import if entry.domain in ("", "ai.onnx")), default)


def expanded_nodes(function, node, op: str, opset: int, domain: str = "") -> list:
    """The body's nodes, renamed into `node`'s namespace, their attribute references bound."""
    import onnx
    import onnx.defs
    defaults = onnx.defs.get_schema(op, opset, domain).attributes
    given = {a.name: a for a in node.attribute}
    names = {formal: actual for formal, actual in zip(function.input, node.input)}
    names.update({formal: "" for formal in function.input[len(node.input):]})  # left out: empty
    prefix = f"{node.output[0]}{SEPARATOR}"
    # an output the node leaves out is still made (another body node may read it): a name of its own
    names.update({formal: actual or prefix + formal for formal, actual in zip(function.output, node.output)})

    def renamed(name: str) -> str:
        if not name:
            return ""
        if name not in names:
            names[name] = prefix + name
        return names[name]

    nodes = []
    for inner in function.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{node.name or node.output[0]}/{inner.name or inner.op_type}"
        if not copy.metadata_props:  # the exporter's module path (its scope) is the node's
            copy.metadata_props.extend(node.metadata_props)
        copy.input[:] = [renamed(name) for name in inner.input]
        copy.output[:] = [renamed(name) for name in inner.output]
        del copy.attribute[:]
        for attribute in inner.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:  # an If's branch: it reads the body's names
                branch = onnx.AttributeProto()
                branch.CopyFrom(attribute)
                _rename_graph(branch.g, renamed)
                copy.attribute.append(branch)
                continue
            if not attribute.ref_attr_name:
                copy.attribute.append(attribute)
                continue
            value = given.get(attribute.ref_attr_name)
            if value is None and attribute.ref_attr_name in defaults:
                default = defaults[attribute.ref_attr_name].default_value
                value = default if default.name else None
            if value is not None:
                bound = onnx.AttributeProto()
                bound.CopyFrom(value)
                bound.name = attribute.name
                copy.attribute.append(bound)
        nodes.append(copy)
    return nodes


def _rename_graph(graph, renamed) -> None:
    """A subgraph's values renamed as the body's (in place): it reads the body's values by
    name, and its own names move into the node's namespace with the rest."""
    for inner in graph.node:
        inner.input[:] = [renamed(name) for name in inner.input]
        inner.output[:] = [renamed(name) for name in inner.output]
        for attribute in inner.attribute:
            if attribute.HasField("g"):
                _rename_graph(attribute.g, renamed)
    for value in (*graph.input, *graph.output):
        value.name = renamed(value.name)
    for tensor in graph.initializer:
        tensor.name = renamed(tensor.name)
