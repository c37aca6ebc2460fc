"""Writing .uop files canonically (see the package's docstring): numbering, maps with
sorted keys, the JSON form's one layout, atomic writes."""

from __future__ import annotations

import io
import math
import os

from ..atomic import write_all, write_atomically
from ...errors import FormatError, GraphError
from ...core.graph import Graph
from ...core.ops import Ops
from ...core.uop import Metadata, UOp
from ...core.walks import no_gc
from .tables import FORMAT, FORMS, VERSION, stream_name


def save(graph: Graph, dest=None, form: str = "msgpack") -> bytes:
    """Write `graph` canonically; returns the bytes, and writes them to `dest` when given
    (a path: atomically, through a temporary file in the same directory; or a binary file
    object). `form` is "msgpack" (the default) or "json"."""
    parts = dump_parts(graph, form)
    if dest is not None:
        write_parts(dest, parts)
    return b"".join(parts)  # one piece (the JSON form) comes back as it is, not copied


def write_parts(dest, parts: list) -> None:
    """Write the pieces from dump_parts to `dest`, as save does (a path: atomically)."""
    if isinstance(dest, (str, os.PathLike)):
        _write_atomically(os.fspath(dest), parts)
    elif hasattr(dest, "write"):
        if isinstance(dest, io.TextIOBase):
            raise FormatError("needs a binary file object (open the file with 'wb')", source=stream_name(dest))
        try:
            write_all(dest, parts)
        except OSError as error:
            raise FormatError(f"cannot write: {error.strerror or error}", source=stream_name(dest)) from None
    else:
        raise TypeError(f"save() writes to a path or a binary file object, not {type(dest).__name__}")


def dumps(graph: Graph, form: str = "msgpack") -> bytes:
    """The canonical bytes of `graph` in `form` ("msgpack" or "json")."""
    parts = dump_parts(graph, form)
    return b"".join(parts)  # one piece (the JSON form) comes back as it is, not copied


def dump_parts(graph: Graph, form: str = "msgpack") -> list:
    """The canonical bytes of `graph` as pieces to write in order (bytes and a memoryview;
    b"".join(parts) == dumps(graph, form)): writing them one after another spares a copy
    of the whole file in memory (64 MB for the gradient of a 10^6-node chain)."""
    if form not in FORMS:
        raise FormatError(f"unknown form {form!r}: one of {', '.join(FORMS)}")
    if not isinstance(graph, Graph):
        raise TypeError(f"save() needs a Graph, got {type(graph).__name__}")
    meta = _file_meta_out(graph.meta)
    # Graph's checks again (its outputs and inputs may have been changed in place): a file
    # save writes is one load reads. The PARAMs are collected as they are encoded, no walk more.
    graph.check_interface()
    params: list[UOp] = []
    encoders = _JSON_ENCODERS if form == "json" else _ENCODERS
    encoders = {**encoders, Ops.PARAM: lambda node, index: params.append(node) or _encode_param(node, index)}
    with no_gc():
        if form == "json":
            nodes: list = []
            index = _canonical_nodes(graph, encoders, nodes.append)
            graph.check_reached(params)
            return [_json_text(_document(graph, index, meta, nodes)).encode("utf-8")]
        # MessagePack: each node is packed as soon as it is numbered (no million-entry list
        # to build, walk again and free), then the map is put together around the nodes'
        # bytes exactly as msgpack.packb would write the whole document.
        import msgpack
        packer = msgpack.Packer(use_bin_type=True, use_single_float=False, autoreset=False)
        index = _canonical_nodes(graph, encoders, packer.pack)
        graph.check_reached(params)
        nodes_bytes = packer.getbuffer()  # a view of the packer's buffer: no copy
        doc = _document(graph, index, meta, _NODES_HERE)
        packer = msgpack.Packer(use_bin_type=True, use_single_float=False)
        head, tail = [packer.pack_map_header(len(doc))], []
        part = head
        for key, value in doc.items():
            if value is _NODES_HERE:
                head += (packer.pack(key), packer.pack_array_header(len(index)))
                part = tail
            else:
                part += (packer.pack(key), packer.pack(value))
        return [b"".join(head), nodes_bytes, b"".join(tail)]


_NODES_HERE = object()  # where the packed nodes go in the document


def _document(graph: Graph, index: dict, meta: dict, nodes) -> dict:
    """The top-level map, keys sorted; an empty `meta` is left out (it is optional)."""
    doc = {"format": FORMAT, "inputs": [index[n] for n in graph.inputs], "meta": meta, "nodes": nodes,
           "outputs": [[name, index[node]] for name, node in graph.outputs.items()], "version": VERSION}
    if not meta:
        del doc["meta"]
    return doc


def _file_meta_out(meta) -> dict:
    for key, value in meta.items():
        if key.__class__ is not str or value.__class__ is not str:
            raise GraphError(f"graph meta must map strings to strings, got {key!r}: {value!r}")
    return dict(sorted(meta.items()))


def _canonical_nodes(graph: Graph, encoders: dict, append) -> dict[UOp, int]:
    """Give every node of the file, in canonical order, to `append` as its entry tuple;
    returns the node -> index map.

    Depth-first post-order from the outputs in order, sources in order, a CALL's backward
    body after its sources, then unused inputs: the order of uop.toposort and Graph.nodes(),
    fused here with the encoding (one pass instead of two). A node is expanded when popped:
    if every source is numbered already, it is written at once; else it goes back on the
    stack under an _EMIT marker, its unnumbered sources on top (the first on top), and is
    written when the marker comes up. A node can sit on the stack twice only while
    unexpanded (the graph is acyclic), and the second copy is skipped, so the order is
    exactly that of a recursive walk. (Writing at once spares half the nodes of a
    forward-over-reverse graph the marker's round trip: 6% of its encoding.)
    """
    index: dict[UOp, int] = {}
    written = 0
    meta_maps: dict[Metadata, dict] = {}  # tag -> its meta map, built once per tag
    last_meta, tag = None, None  # the last metadata looked up and its map (a None meta never gets there)
    call = Ops.CALL
    emit = _EMIT
    for root in (*graph.outputs.values(), *graph.inputs):
        if root in index:
            continue
        stack = [root]
        push, pop = stack.append, stack.pop
        while stack:
            node = pop()
            if node is emit:
                node = pop()
            elif node in index:
                continue
            else:  # expand: a node whose children are all written is written at once
                children = node.src
                if node.op == call and node.arg.grad is not None:
                    children = (*children, node.arg.grad)
                count = len(children)  # unrolled as in gradient._target_path: no call per node
                if count == 1:
                    child = children[0]
                    if child not in index:
                        push(node)
                        push(emit)
                        push(child)
                        continue
                elif count == 2:
                    first, second = children
                    if second not in index:
                        push(node)
                        push(emit)
                        push(second)
                        if first not in index:
                            push(first)
                        continue
                    if first not in index:
                        push(node)
                        push(emit)
                        push(first)
                        continue
                elif count:
                    pending = [child for child in reversed(children) if child not in index]
                    if pending:
                        push(node)
                        push(emit)
                        stack += pending
                        continue
            index[node] = written
            written += 1
            op = node.op
            arg = node.arg
            if arg is not None:
                encode = encoders.get(op)
                if encode is not None:
                    arg = encode(node, index)
            src = node.src
            count = len(src)
            # tuples: one allocation each (a list takes two); both forms write arrays
            if count == 1:
                src_indices = (index[src[0]],)
            elif count == 2:
                src_indices = (index[src[0]], index[src[1]])
            else:
                src_indices = tuple([index[s] for s in src])
            meta = node.meta
            if meta is None:
                append((op, node.dtype.name, src_indices, arg))
                continue
            if meta is not last_meta:  # neighbours share metadata objects: one look-up (a tuple hash) per run
                last_meta = meta
                tag = meta_maps.get(meta)
                if tag is None:
                    tag = meta_maps[meta] = _meta_map(meta)
            append((op, node.dtype.name, src_indices, arg, tag) if tag else (op, node.dtype.name, src_indices, arg))
    return index


_EMIT = None  # the stack marker "all sources of the node below are written": never a UOp


def _meta_map(meta: Metadata) -> dict:
    """A node's meta map: sorted keys, empty fields left out (so maybe empty: not written)."""
    name, loc, backward, scope = meta
    if any(text is not None and text.__class__ is not str for text in (name, loc, scope)) \
            or backward.__class__ is not bool:
        raise GraphError(f"node metadata {meta!r} cannot be written: name, loc and scope are strings, backward a bool")
    out = {}
    if backward:
        out["backward"] = True
    if loc is not None:
        out["loc"] = loc
    if name is not None:
        out["name"] = name
    if scope is not None:
        out["scope"] = scope
    return out


# ----------------------------------------------------------------------------- per-op encoders
# One row per op whose file arg differs from the core's internal arg. Ops not listed here
# write their arg as it is (tuples become arrays; ints, bools, strings stay).

def _encode_param(node: UOp, index) -> dict:
    if node.arg.__class__ is str:
        return {"name": node.arg, "shape": list(node.shape)}
    return {"shape": list(node.shape), "slot": node.arg}


def _encode_const(node: UOp, index):
    value = node.arg
    return math.nan if value != value else value  # one NaN bit pattern: equal graphs, equal bytes


def _encode_const_json(node: UOp, index):
    value = node.arg
    if value.__class__ is float and not math.isfinite(value):
        return {"float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    return value


def _encode_buffer(node: UOp, index) -> dict:
    return {"data": node.arg, "shape": list(node.shape)}


def _encode_buffer_json(node: UOp, index) -> dict:
    import base64
    return {"data": {"b64": base64.b64encode(node.arg).decode("ascii")}, "shape": list(node.shape)}


def _encode_function(node: UOp, index) -> dict:
    return {"name": node.arg}


def _encode_call(node: UOp, index) -> dict:
    name, grad = node.arg
    return {"name": name} if grad is None else {"grad": index[grad], "name": name}


_ENCODERS = {
    Ops.PARAM: _encode_param,
    Ops.CONST: _encode_const,
    Ops.BUFFER: _encode_buffer,
    Ops.FUNCTION: _encode_function,
    Ops.CALL: _encode_call,
}
_JSON_ENCODERS = {**_ENCODERS, Ops.CONST: _encode_const_json, Ops.BUFFER: _encode_buffer_json}


def _json_text(doc: dict) -> str:
    """The JSON form's one layout: compact JSON (sorted keys, "," and ":" without spaces,
    UTF-8 rather than \\u escapes), one top-level key per line and one node per line:

        {"format":"uop",
         "inputs":[0],
         "nodes":[
          ["PARAM","float32",[],{"name":"x","shape":[3]}],
          ["SIN","float32",[0],null]
         ],
         "outputs":[["y",1]],
         "version":1}
    """
    import json
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, check_circular=False,
                              separators=(",", ":")).encode
    lines = []
    for key, value in doc.items():
        if key == "nodes":
            if value:
                body = ",\n  ".join(map(encode, value))
                lines.append(f'"nodes":[\n  {body}\n ]')
            else:
                lines.append('"nodes":[]')
        else:
            lines.append(f"{encode(key)}:{encode(value)}")
    return "{" + ",\n ".join(lines) + "}\n"


def _write_atomically(path: str, data) -> None:
    try:
        write_atomically(path, data)
    except OSError as error:
        raise FormatError(f"cannot write: {error.strerror or error}", source=path) from None
