"""Reading and writing .uop files (format v1): MessagePack and JSON forms, canonical bytes, limits.

The contract is docs/format.md (a copy of the shared uop-format-v1 page plus what this
reader decided where that page is silent). In short:

    {"format": "uop", "version": 1, "nodes": [[op, dtype, [src...], arg(, meta)], ...],
     "inputs": [index, ...], "outputs": [[name, index], ...], "meta": {str: str}}

Reading treats every file as untrusted. Each refusal is a FormatError with one line that
names the file, and the node index and op where there is one. Nothing in a file is ever
executed or imported; both parsers build only plain lists, maps, strings, numbers and
bytes; work is linear in the file's size, and limits (`Limits`) bound the rest. The
MessagePack form's nodes are parsed one at a time (`_NodeStream`), so memory follows the
graph, not the file's bytes.

Speed: the reader's per-node loop assumes a well-formed node and lets Python's own checks
fail fast on anything else; only then does `_diagnose` look again, slowly, to say exactly
what is wrong. Nodes are still built through UOp.make / UOp.param / UOp.const, so every
shape and dtype rule of the core applies to files too.

Writing is canonical: structurally equal nodes are one node (hash-consing already makes
them one object), nodes are numbered in the post-order of a depth-first walk from the
outputs (a CALL's backward body after the CALL's sources, before the CALL), unused inputs
come last, maps have sorted keys, floats are float64 and integers take their smallest
MessagePack encoding. The JSON form has one fixed layout (see `_json_text`).
"""

from __future__ import annotations

import io
import math
import os
import re
from typing import NamedTuple

from .atomic import write_all, write_atomically
from .errors import FormatError, GraphError
from .graph import Graph
from .ops import DTYPES, REDUCE_OPS, DType, Ops, dtypes
from .uop import CallArg, Metadata, UOp, _leaf, no_gc, scope_sources, valid_name

__all__ = ["Limits", "DEFAULT_LIMITS", "load", "loads", "save", "dumps", "dump_parts", "write_parts", "FORMAT",
           "VERSION"]

FORMAT = "uop"
VERSION = 1
FORMS = ("msgpack", "json")

_REQUIRED_KEYS = frozenset({"format", "version", "nodes", "inputs", "outputs"})
_ALLOWED_KEYS = _REQUIRED_KEYS | {"meta"}
_WHITESPACE = re.compile(rb"[ \t\r\n]*")
# A JSON \u escape in the surrogate range: only then can a decoded string hold a lone
# surrogate, which no UTF-8 (and so no MessagePack) file can carry.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class Limits(NamedTuple):
    """What the reader accepts at most. Raise a limit with e.g. `Limits(max_nodes=50_000_000)`
    (or `limits._replace(...)`).

    Every limit guards memory or time against a hostile or broken file; the defaults fit
    any graph this tool is meant for."""

    max_file_bytes: int = 1 << 30           # 1 GiB: the whole file (either form)
    max_nodes: int = 10_000_000             # entries of `nodes`
    max_arg_depth: int = 16                 # nesting of lists/maps inside one arg (v1 args need 2)
    max_rank: int = 16                      # axes of any shape (PARAM, BUFFER, RESHAPE, EXPAND, ...)
    max_tensor_elements: int = 1 << 40      # elements of any one tensor (stored or inferred)


DEFAULT_LIMITS = Limits()
V1_ARG_DEPTH = 2  # a valid v1 arg nests at most 2 levels: a map or array holding arrays (PARAM, PAD)


def raise_hint(limit: str) -> str:
    """How to read a file over `limit`, from Python or from the command line."""
    return f"(raise it: Limits({limit}=...) in Python, uopgrad --limit {limit}=N on the command line)"


# ============================================================================= reading

class _Bad(Exception):
    """A refusal inside the node loop: becomes a FormatError naming the node."""


def load(source, *, limits: Limits | None = None, name: str | None = None) -> Graph:
    """Read a .uop file (either form) from a path, bytes, or a binary file object.

    `name` is what error messages call the file (default: the path, "<bytes>", or the file
    object's name). Raises FormatError for anything that is not a valid v1 file."""
    limits = limits or DEFAULT_LIMITS
    if isinstance(source, (bytes, bytearray, memoryview)):
        return loads(bytes(source), limits=limits, name=name or "<bytes>")
    label = name or (os.fspath(source) if isinstance(source, (str, os.PathLike)) else _stream_name(source))
    return loads(read_bytes(source, limits=limits, name=label), limits=limits, name=label)


def read_bytes(source, *, limits: Limits | None = None, name: str | None = None) -> bytes:
    """The bytes of a path or a binary file object, refusing (FormatError) more than
    limits.max_file_bytes before holding them all: a file by its size, a pipe or device
    (stdin, /dev/zero) by reading one byte past the limit."""
    limits = limits or DEFAULT_LIMITS
    if isinstance(source, (str, os.PathLike)):
        label = name or os.fspath(source)
        try:
            with open(source, "rb") as file:
                too_large = os.fstat(file.fileno()).st_size > limits.max_file_bytes
                data = b"" if too_large else file.read(limits.max_file_bytes + 1)
        except OSError as error:
            raise FormatError(f"cannot read: {error.strerror or error}", source=label) from None
    elif hasattr(source, "read"):
        label = name or _stream_name(source)
        too_large = False
        try:
            data = source.read(limits.max_file_bytes + 1)
        except OSError as error:
            raise FormatError(f"cannot read: {error.strerror or error}", source=label) from None
        if not isinstance(data, (bytes, bytearray)):
            raise FormatError("needs a binary file object (open the file with 'rb')", source=label)
    else:
        raise TypeError(f"load() takes a path, bytes or a binary file object, not {type(source).__name__}")
    if too_large or len(data) > limits.max_file_bytes:
        raise _too_large(limits, label)
    return bytes(data)


def loads(data: bytes, *, limits: Limits | None = None, name: str = "<bytes>") -> Graph:
    """Read a .uop file from its bytes (either form); see `load`."""
    limits = limits or DEFAULT_LIMITS
    if isinstance(data, str):  # JSON text
        data = data.encode("utf-8", "surrogatepass")
    if len(data) > limits.max_file_bytes:
        raise _too_large(limits, name)
    start = _WHITESPACE.match(data).end()
    if data.startswith(b"\xef\xbb\xbf", start):  # as MessagePack it would read as the int -17
        raise FormatError("the file starts with a UTF-8 byte-order mark: save the JSON form without one",
                          source=name)
    if start == len(data):
        raise FormatError("empty file: a .uop file is one MessagePack or JSON map", source=name)
    json_form = data[start] == 0x7B  # "{"
    if data[start] == 0x5B:  # "[": JSON, but not a map (as MessagePack it would be the int 91)
        raise FormatError("not a .uop file: the top level is an array, not a map", source=name)
    with no_gc():  # the graph is acyclic; scanning it while it grows costs more than parsing
        doc = _parse_json(data, name) if json_form else _parse_msgpack(data, name)
        return _Reader(doc, json_form, limits, name).graph()


def _too_large(limits: Limits, name: str) -> FormatError:
    return FormatError(f"file is larger than the limit of {limits.max_file_bytes} bytes "
                       f"{raise_hint('max_file_bytes')}", source=name)


def _stream_name(stream) -> str:
    label = getattr(stream, "name", None)
    return label if isinstance(label, str) else "<stream>"


def _parse_msgpack(data: bytes, name: str):
    """The top-level map, with its "nodes" array as a _NodeStream: the nodes are parsed one
    at a time as the reader builds them, so memory follows the graph, not the bytes (a
    parsed array of 40 million empty arrays, 40 MB of file, would hold 2.9 GB), and a bad
    node is refused before the rest are parsed. Other values are parsed as they come; an
    unknown key's value is skipped unparsed (the reader refuses the key)."""
    import msgpack  # here, not at the top: `import uopcli` stays fast for commands that read no file
    if not _MSGPACK_MAP.get(data[0], False):
        return _parse_msgpack_whole(data, name)  # not a map: say what it is instead
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data))
    unpacker.feed(data)
    doc = {}
    try:
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key.__class__ is not str:
                raise FormatError(f"top-level keys are strings, got {_kind(key)} {_short(repr(key))}", source=name)
            if key in doc:
                raise FormatError(f"the key {_short(repr(key))} appears twice in the top-level map", source=name)
            if key == "nodes" and _MSGPACK_ARRAY.get(data[unpacker.tell()], False):
                begin = unpacker.tell()
                unpacker.skip()  # checks the structure in C, building nothing
                doc[key] = _NodeStream(data, begin, unpacker.tell())
            elif key in _ALLOWED_KEYS:
                doc[key] = unpacker.unpack()
            else:
                unpacker.skip()
                doc[key] = None
        if unpacker.tell() != len(data):
            raise FormatError("trailing bytes after the file's map", source=name)
    except FormatError:
        raise
    except Exception as error:  # noqa: BLE001 - msgpack raises many types for bad bytes; all mean one thing
        raise FormatError(_msgpack_refusal(error), source=name) from None
    return doc


def _parse_msgpack_whole(data: bytes, name: str):
    import msgpack
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except msgpack.ExtraData as extra:
        if extra.unpacked.__class__ is not dict:  # text or other bytes that happen to start with a value
            raise FormatError(f"not a .uop file: the top level is {_kind(extra.unpacked)}, not a map "
                              f"(followed by {len(extra.extra)} more bytes)", source=name) from None
        raise FormatError("trailing bytes after the file's map", source=name) from None
    except Exception as error:  # noqa: BLE001 - as above
        raise FormatError(_msgpack_refusal(error), source=name) from None


def _msgpack_refusal(error: Exception) -> str:
    import msgpack
    if isinstance(error, msgpack.StackError):
        return "values nested too deeply for the MessagePack reader"
    return f"not valid MessagePack: {_short(str(error) or type(error).__name__)}"


# first byte -> whether a MessagePack value starting with it is a map / an array
_MSGPACK_MAP = {**{b: True for b in range(0x80, 0x90)}, 0xDE: True, 0xDF: True}
_MSGPACK_ARRAY = {**{b: True for b in range(0x90, 0xA0)}, 0xDC: True, 0xDD: True}


class _NodeStream:
    """The file's "nodes" array, parsed entry by entry: len() is its declared count (known
    before any entry is parsed); entries() gives the function that parses the next one,
    which raises msgpack's errors for bytes that are not MessagePack (the skip over the
    array checked its structure, not its strings)."""

    __slots__ = ("count", "_unpack")

    def __init__(self, data: bytes, begin: int, end: int):
        import msgpack
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=end - begin)
        unpacker.feed(memoryview(data)[begin:end])
        self.count = unpacker.read_array_header()
        self._unpack = unpacker.unpack

    def __len__(self) -> int:
        return self.count

    def entries(self):
        """A function giving the next entry each call."""
        return self._unpack


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list) -> dict:
    """A JSON object as a dict, refusing a key that appears twice (the last would win)."""
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                break
            seen.add(key)
        raise _RepeatedKey(f"the key {_short(repr(key))} appears twice in one object")
    return mapping


def _parse_json(data: bytes, name: str):
    import json
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                         object_pairs_hook=_unique_keys)
        if _SURROGATE_ESCAPE.search(data):
            json.dumps(doc, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    except RecursionError:
        raise FormatError("values nested too deeply for the JSON reader", source=name) from None
    except UnicodeError as error:
        raise FormatError(f"not valid UTF-8 text: {_short(str(error))}", source=name) from None
    except _RepeatedKey as error:
        node, op = _node_with_repeated_key(text)
        raise FormatError(str(error), node=node, op=op, source=name) from None
    except ValueError as error:
        message = str(error)
        if message.startswith("Extra data"):
            raise FormatError(f"trailing bytes after the file's map ({message})", source=name) from None
        raise FormatError(f"not valid JSON: {_short(message)}", source=name) from None
    return doc


class _Repeated:
    """Where a JSON object with a repeated key stood (the second, naming parse)."""


def _node_with_repeated_key(text: str) -> tuple:
    """The index and op of the node holding the first object with a repeated key, found by
    parsing once more with such objects marked (only on failure); Nones outside `nodes`."""
    import json
    marked = _Repeated()
    doc = json.loads(text, object_pairs_hook=lambda pairs: marked if len(dict(pairs)) != len(pairs) else dict(pairs))
    nodes = doc.get("nodes") if doc.__class__ is dict else None
    if nodes.__class__ is not list:
        return None, None
    for index, entry in enumerate(nodes):
        stack = [entry]
        while stack:
            item = stack.pop()
            if item is marked:
                op = entry[0] if entry.__class__ is list and entry else None
                return index, op if op.__class__ is str and op in _DECODERS else None
            if item.__class__ is list:
                stack.extend(item)
            elif item.__class__ is dict:
                stack.extend(item.values())
    return None, None


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not JSON; write a non-finite float as {{\"float\": \"nan\" | \"inf\" | \"-inf\"}}")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {_short(text)} is too large for a float64; write infinity as {{\"float\": \"inf\"}}")
    return value


_NO_TAG = Metadata()  # an empty meta map: the node gets no tag
_META_KEYS = ("name", "loc", "scope", "backward")


def _meta_key(meta: dict) -> tuple:
    """What a node's meta map is remembered by. Equal keys mean equal maps: a map with
    the same four values and as many keys has exactly those keys (a value it lacks reads
    None, and a valid map holds no None); only `backward` can be equal and not the same
    (1 == True), which the reader checks on every hit."""
    return meta.get("name"), meta.get("loc"), meta.get("backward"), meta.get("scope"), len(meta)


class _Reader:
    """One file being read: the parsed document, the nodes built so far, and what the
    checks after the node loop need (named PARAMs, whether any slot PARAM was seen)."""

    def __init__(self, doc, json_form: bool, limits: Limits, name: str):
        self.doc, self.json_form, self.limits, self.name = doc, json_form, limits, name
        self.built: list[UOp] = []
        self.named_params: dict[str, tuple[int, UOp]] = {}
        self.has_slots = False
        self.checked_shapes: set[tuple] = set()  # results known to be within max_tensor_elements
        self.meta_cache: dict[tuple, Metadata] = {}  # meta map items -> checked tag

    def fail(self, message: str, index: int | None = None):
        op = None
        if index is not None and index < len(self.built):
            op = self.built[index].op
        return FormatError(message, node=index, op=op, source=self.name)

    # ------------------------------------------------------------------ top level
    def graph(self) -> Graph:
        doc = self.doc
        if doc.__class__ is not dict:
            raise self.fail(f"not a .uop file: the top level is {_kind(doc)}, not a map")
        if "format" not in doc:
            raise self.fail("not a .uop file: its map has no 'format' key (a .uop file's is 'uop')")
        if doc["format"] != FORMAT:
            raise self.fail(f"not a .uop file: 'format' is {_short(repr(doc['format']))}, not 'uop'")
        if "version" not in doc:
            raise self.fail(f"missing top-level key version (this reader reads version {VERSION})")
        version = doc["version"]
        if version.__class__ is not int or version != VERSION:
            raise self.fail(f"unsupported version {_short(repr(version))}: this reader reads version {VERSION}")
        missing = sorted(_REQUIRED_KEYS - doc.keys())
        if missing:
            raise self.fail(f"missing top-level key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        extra = [k for k in doc if k not in _ALLOWED_KEYS]
        if extra:
            raise self.fail(f"unknown top-level key {_short(repr(extra[0]))} "
                            f"(allowed: {', '.join(sorted(_ALLOWED_KEYS))})")
        meta = self._file_meta(doc.get("meta", {}))
        nodes = doc["nodes"]
        if nodes.__class__ is not list and nodes.__class__ is not _NodeStream:
            raise self.fail(f"'nodes' must be an array, got {_kind(nodes)}")
        if len(nodes) > self.limits.max_nodes:
            raise self.fail(f"{len(nodes)} nodes exceed the limit of {self.limits.max_nodes} "
                            f"{raise_hint('max_nodes')}")
        self._nodes(nodes)
        outputs = self._outputs(doc["outputs"])
        inputs = self._inputs(doc["inputs"])
        if self.has_slots:
            self._check_no_free_slots(outputs)
        # Every invariant Graph.__init__ checks holds by now (and more: every named PARAM of
        # the file is an input); skipping its walk over all nodes saves a second pass.
        graph = Graph.__new__(Graph)
        graph.outputs, graph.inputs, graph.meta = outputs, inputs, meta
        return graph

    def _file_meta(self, meta) -> dict[str, str]:
        if meta.__class__ is not dict:
            raise self.fail(f"'meta' must be a map of strings, got {_kind(meta)}")
        for key, value in meta.items():
            if key.__class__ is not str or value.__class__ is not str:
                raise self.fail(f"'meta' must map strings to strings, got {_short(repr(key))}: {_short(repr(value))}")
        return dict(sorted(meta.items()))

    # ------------------------------------------------------------------ nodes
    def _nodes(self, nodes: list) -> None:
        built = self.built
        append = built.append
        make = UOp.make
        plain = _PLAIN_CANONICAL
        canonical = _CANONICAL_OP
        decoders = _JSON_DECODERS if self.json_form else _DECODERS
        dtype_named = DTYPES
        meta_cache = self.meta_cache
        set_meta = object.__setattr__  # UOp.set_meta without its call
        depth_limit = self.limits.max_arg_depth
        # an arg that decodes nests at most V1_ARG_DEPTH levels, so only a limit lowered below
        # that needs each arg checked; a deeper arg fails to decode, and _why names the limit
        check_depth = depth_limit < V1_ARG_DEPTH
        entry = None
        # a list (JSON, or MessagePack read whole) or a _NodeStream, parsed as it is read
        next_entry = nodes.entries() if nodes.__class__ is _NodeStream else iter(nodes).__next__
        try:
            for _ in range(len(nodes)):
                try:
                    entry = next_entry()
                except Exception as error:  # noqa: BLE001 - only a stream fails here: not MessagePack
                    raise FormatError(_msgpack_refusal(error), node=len(built), source=self.name) from None
                if entry.__class__ is not list:
                    raise _Bad(f"a node must be an array [op, dtype, src, arg(, meta)], got {_kind(entry)}")
                if len(entry) == 4:
                    op, dtype_name, src, arg = entry
                    meta = None
                elif len(entry) == 5:
                    op, dtype_name, src, arg, meta = entry
                    if meta is None:  # an absent meta is a node of 4 fields, not a nil 5th
                        raise _Bad("node meta must be a map, got nil (no meta: leave the 5th field out)")
                else:
                    raise _Bad(f"a node has 4 or 5 fields [op, dtype, src, arg(, meta)], got {len(entry)}")
                dtype = dtype_named[dtype_name]
                if src.__class__ is not list:
                    raise _Bad(f"src must be an array of node indices, got {_kind(src)}")
                # Sources by count, without a loop for the usual one or two; `built` holds
                # only earlier nodes, so built[s] fails for s >= this node's index, and the
                # class check refuses bools and floats (True would index node 1).
                count = len(src)
                if count == 1:
                    s = src[0]
                    if s.__class__ is not int or s < 0:
                        raise ValueError("bad source")  # _diagnose says which and why
                    sources = (built[s],)
                elif count == 2:
                    s, t = src
                    if s.__class__ is not int or t.__class__ is not int or s < 0 or t < 0:
                        raise ValueError("bad source")
                    sources = (built[s], built[t])
                elif count == 0:
                    sources = ()
                else:
                    for s in src:
                        if s.__class__ is not int or s < 0:
                            raise ValueError("bad source")
                    sources = tuple([built[s] for s in src])
                if check_depth and _nests_deeper(arg, depth_limit):
                    raise _Bad(_too_deep(depth_limit))
                interned = plain.get(op)  # the op's own interned string: files' strings are copies
                if interned is not None:
                    if arg is not None:
                        raise _Bad(f"{op} takes no arg (nil), got {_short(repr(arg))}")
                    node = make(interned, dtype, sources, None)
                else:
                    op = canonical[op]
                    node = decoders[op](self, op, dtype, sources, arg)
                if meta is not None:
                    tag = meta_cache.get(_meta_key(meta)) if meta.__class__ is dict else None
                    if tag is None or ("backward" in meta and meta["backward"].__class__ is not bool):
                        tag = self._node_meta(meta)  # first sight of this meta map: check it fully
                    if node.meta is not tag:
                        set_meta(node, "meta", None if tag is _NO_TAG else tag)
                elif node.meta is not None:
                    # The file is the truth for the nodes it holds, so that reading a file and
                    # writing it again gives the same bytes even when a structurally equal
                    # node with another tag is alive in this process (nodes are shared).
                    set_meta(node, "meta", None)
                append(node)
        except (_Bad, GraphError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                OverflowError) as error:
            raise self._node_error(self._why(entry, error), entry) from None

    def _why(self, entry, error: Exception) -> str:
        """The message for a node the loop refused (the slow path: only runs once, on failure)."""
        limit = self.limits.max_arg_depth
        if entry.__class__ is list and len(entry) >= 4 and _nests_deeper(entry[3], limit):
            return _too_deep(limit)
        if isinstance(error, (_Bad, GraphError)):
            return str(error)
        message = _diagnose(entry, len(self.built), error)
        if message.startswith("malformed") and len(entry) == 5:
            try:
                self._node_meta(entry[4])
            except (_Bad, TypeError) as meta_error:  # TypeError: an unhashable value in the map
                return str(meta_error) if isinstance(meta_error, _Bad) else "node meta values must be strings or bool"
        return message

    def _node_error(self, message: str, entry) -> FormatError:
        op = entry[0] if entry.__class__ is list and entry else None
        label = op if op.__class__ is str and op in _DECODERS else (None if op is None else _short(repr(op)))
        # the core's messages quote args and shapes: keep a hostile one (4000-digit ints) short
        return FormatError(_short(message, 300), node=len(self.built), op=label, source=self.name)

    def _node_meta(self, meta) -> Metadata:
        """Check a node's meta map and return its Metadata (_NO_TAG for an empty map),
        remembered by _meta_key so the next equal map costs one lookup."""
        if meta.__class__ is not dict:
            raise _Bad(f"node meta must be a map, got {_kind(meta)}")
        name, loc, scope = meta.get("name"), meta.get("loc"), meta.get("scope")
        backward = meta.get("backward", False)
        if len(meta) != (name is not None) + (loc is not None) + (scope is not None) + ("backward" in meta):
            keys = ", ".join(_short(repr(k)) for k in meta if k not in _META_KEYS)
            raise _Bad(f"node meta holds only 'name', 'loc', 'scope' (strings) and 'backward' (bool); got {keys or 'nil'}")
        if any(text is not None and text.__class__ is not str for text in (name, loc, scope)):
            raise _Bad("node meta 'name', 'loc' and 'scope' must be strings")
        if backward.__class__ is not bool:
            raise _Bad(f"node meta 'backward' must be a bool, got {_short(repr(backward))}")
        tag = Metadata(name, loc, backward, scope)
        tag = _NO_TAG if tag == _NO_TAG else tag
        self.meta_cache[_meta_key(meta)] = tag
        return tag

    # ------------------------------------------------------------------ inputs and outputs
    def _index(self, value, what: str) -> int:
        if value.__class__ is not int or not 0 <= value < len(self.built):
            raise self.fail(f"{what} {_short(repr(value))} is not a node index (the file has {len(self.built)} nodes)")
        return value

    def _outputs(self, outputs) -> dict[str, UOp]:
        if outputs.__class__ is not list:
            raise self.fail(f"'outputs' must be an array of [name, index], got {_kind(outputs)}")
        named: dict[str, UOp] = {}
        for pair in outputs:
            if pair.__class__ is not list or len(pair) != 2:
                raise self.fail(f"an output must be [name, index], got {_short(repr(pair))}")
            name, index = pair
            if not valid_name(name):
                raise self.fail(f"output name {_short(repr(name))} must be a non-empty string without '=', ',' "
                                f"or whitespace")
            node = self.built[self._index(index, f"output {name!r}:")]
            if name in named:
                raise self.fail(f"duplicate output name {name!r}", index)
            if node.op == Ops.NOOP:
                raise self.fail(f"output {name!r} is a NOOP (NOOP is only a TUPLE element)", index)
            named[name] = node
        return named

    def _inputs(self, inputs) -> list[UOp]:
        if inputs.__class__ is not list:
            raise self.fail(f"'inputs' must be an array of node indices, got {_kind(inputs)}")
        listed: list[UOp] = []
        names: set[str] = set()
        for value in inputs:
            index = self._index(value, "input")
            node = self.built[index]
            if node.op != Ops.PARAM or node.arg.__class__ is not str:
                raise self.fail("an input must be a PARAM with a name", index)
            if node.arg in names:
                raise self.fail(f"duplicate input name {node.arg!r}", index)
            names.add(node.arg)
            listed.append(node)
        for name, (index, node) in self.named_params.items():
            if name not in names:
                raise self.fail(f"graph input PARAM {name!r} is not listed in 'inputs'", index)
        return listed

    def _check_no_free_slots(self, outputs: dict[str, UOp]) -> None:
        """Slot PARAMs live only inside FUNCTION/CALL bodies: walk from the outputs without
        entering bodies and refuse any slot reached (only run when the file has slots)."""
        seen: set[UOp] = set()
        stack = list(outputs.values())
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op == Ops.PARAM and node.arg.__class__ is int:
                index = self.built.index(node)
                raise self.fail(f"slot PARAM {node.arg} is used outside any FUNCTION or CALL body", index)
            stack.extend(scope_sources(node))

    # ------------------------------------------------------------------ arg checks used by decoders
    def shape(self, value, what: str = "shape") -> tuple[int, ...]:
        if value.__class__ is not list:
            raise _Bad(f"{what} must be an array of non-negative ints, got {_short(repr(value))}")
        for size in value:
            if size.__class__ is not int or size < 0:
                raise _Bad(f"{what} must be an array of non-negative ints, got {_short(repr(value))}")
        if len(value) > self.limits.max_rank:
            raise _Bad(f"{what} has rank {len(value)}, over the limit of {self.limits.max_rank} "
                       f"{raise_hint('max_rank')}")
        self.elements(value, what)
        return tuple(value)

    def elements(self, shape, what: str = "tensor") -> None:
        if math.prod(shape) > self.limits.max_tensor_elements:
            raise _Bad(f"{what} {list(shape)} has {math.prod(shape)} elements, over the limit of "
                       f"{self.limits.max_tensor_elements} {raise_hint('max_tensor_elements')}")

    def axis_list(self, arg, op: str, item=None) -> list:
        """A list of at most max_rank entries, each exactly of type `item` (checked here,
        not left to the core: an equal node already interned would let 0.0 pass for 0)."""
        if arg.__class__ is not list:
            raise _Bad(f"{op} arg must be an array, got {_kind(arg)}")
        if len(arg) > self.limits.max_rank:
            raise _Bad(f"{op} arg has {len(arg)} entries, over the rank limit of {self.limits.max_rank} "
                       f"{raise_hint('max_rank')}")
        if item is not None and not _ONLY[item].issuperset(map(type, arg)):
            raise _Bad(f"{op} arg must be {_ARG_FORM[op]}, got {_short(repr(arg))}")
        return arg


# ----------------------------------------------------------------------------- per-op decoders
# One row per op that is more than `make(op, dtype, sources)`: turn the file's arg into the
# core's internal arg (uop.py) and build the node. Each returns the UOp or raises _Bad or
# GraphError; the node loop adds the node index and op to the message.

def _no_sources(op: str, sources: tuple) -> None:
    if sources:
        raise _Bad(f"{op} takes no sources, got {len(sources)}")


def _map_arg(op: str, arg, keys: set, optional: frozenset = frozenset()) -> dict:
    if arg.__class__ is not dict or not keys <= arg.keys() or not arg.keys() <= keys | optional:
        wanted = ", ".join(sorted(keys)) + "".join(f", {k} (optional)" for k in sorted(optional))
        raise _Bad(f"{op} arg must be a map with keys {wanted}; got {_short(repr(arg))}")
    return arg


def _decode_param(reader: _Reader, op, dtype, sources, arg) -> UOp:
    # The checks of UOp.param, done here once (a regex for valid_name): the node is what
    # UOp.param(name_or_slot, shape, dtype) returns, built with the constructor it ends in.
    _no_sources(op, sources)
    if arg.__class__ is not dict or len(arg) != 2 or "shape" not in arg or not ("name" in arg or "slot" in arg):
        raise _Bad(f"PARAM arg must be {{\"name\": str, \"shape\": [int]}} or {{\"slot\": int, \"shape\": [int]}}, "
                   f"got {_short(repr(arg))}")
    shape = reader.shape(arg["shape"], "PARAM shape")
    if dtype is dtypes.void:
        raise _Bad("PARAM cannot be void")
    if "name" in arg:
        name = arg["name"]
        if name.__class__ is not str or not _VALID_NAME(name):
            raise _Bad(f"PARAM name {_short(repr(name))} must be a non-empty string without '=', ',' or whitespace")
        node = _leaf(Ops.PARAM, dtype, name, shape)
        index = len(reader.built)
        first = reader.named_params.setdefault(name, (index, node))
        if first[1] is not node:
            raise _Bad(f"duplicate input name {name!r}: node {first[0]} is a PARAM of that name with "
                       f"another shape or dtype")
        return node
    slot = arg["slot"]
    if slot.__class__ is not int or slot < 0:
        raise _Bad(f"PARAM slot must be an int >= 0, got {_short(repr(slot))}")
    reader.has_slots = True
    return _leaf(Ops.PARAM, dtype, slot, shape)


# uop.valid_name as one regex match (Python's \s is exactly str.isspace)
_VALID_NAME = re.compile(r"[^=,\s]+").fullmatch


def _const_number(dtype: DType, arg):
    """The CONST arg as the Python value of its dtype (no silent conversions across kinds)."""
    kind = dtype.kind
    cls = arg.__class__
    if kind == "f" and (cls is float or cls is int):
        value = float(arg)  # an int where a float is meant is fine (hand-written JSON: 2)
        return math.nan if value != value else value  # one NaN, so equal graphs give equal bytes
    if (kind in "iu" and cls is int) or (kind == "b" and cls is bool):
        return arg
    raise _Bad(f"CONST {dtype.name} needs {_KIND_WORD.get(kind, 'a value')}, got {_short(repr(arg))}")


_KIND_WORD = {"f": "a float", "i": "an int", "u": "an int", "b": "a bool"}


def _decode_const(reader, op, dtype, sources, arg) -> UOp:
    _no_sources(op, sources)
    return UOp.const(_const_number(dtype, arg), dtype)


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _decode_const_json(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is dict and dtype.kind == "f":
        if len(arg) != 1 or arg.get("float") not in _NON_FINITE:
            raise _Bad(f"CONST arg map must be {{\"float\": \"nan\" | \"inf\" | \"-inf\"}}, got {_short(repr(arg))}")
        _no_sources(op, sources)
        return UOp.const(_NON_FINITE[arg["float"]], dtype)
    return _decode_const(reader, op, dtype, sources, arg)


def _decode_buffer(reader, op, dtype, sources, arg, data=None) -> UOp:
    _no_sources(op, sources)
    _map_arg(op, arg, {"shape", "data"})
    shape = reader.shape(arg["shape"], "BUFFER shape")
    if data is None:
        data = arg["data"]
        if data.__class__ is not bytes:
            raise _Bad(f"BUFFER data must be bin (bytes), got {_kind(data)}")
    if dtype.is_void:
        raise _Bad("BUFFER cannot be void")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise _Bad(f"BUFFER data has {len(data)} bytes, but {dtype.name}{list(shape)} needs {expected}")
    if dtype.is_bool and data.translate(None, b"\x00\x01"):
        raise _Bad("BUFFER bool data must hold only bytes 0 and 1")
    return _leaf(Ops.BUFFER, dtype, data, shape)  # what UOp.buffer builds, without numpy


_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")  # as the schema's


def _decode_buffer_json(reader, op, dtype, sources, arg) -> UOp:
    import base64
    _map_arg(op, arg, {"shape", "data"})
    packed = arg["data"]
    if packed.__class__ is not dict or len(packed) != 1 or packed.get("b64").__class__ is not str:
        raise _Bad(f"BUFFER data must be {{\"b64\": \"<base64>\"}} in the JSON form, got {_short(repr(packed))}")
    text = packed["b64"]
    if not _BASE64.fullmatch(text):  # b64decode alone takes excess padding ("AAAA====")
        raise _Bad(f"BUFFER data is not valid base64 (standard alphabet, padded to 4): {_short(repr(text))}")
    return _decode_buffer(reader, op, dtype, sources, arg, base64.b64decode(text))


def _decode_noop(reader, op, dtype, sources, arg) -> UOp:
    _no_sources(op, sources)
    if dtype is not dtypes.void or arg is not None:
        raise _Bad("NOOP is void and takes no arg")
    return UOp.noop()


def _decode_reduce(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not list or len(arg) != 2 or arg[0].__class__ is not str or arg[0] not in _REDUCE_OP:
        raise _Bad(f"REDUCE arg must be [\"ADD\" | \"MUL\" | \"MAX\", [axes]], got {_short(repr(arg))}")
    axes = reader.axis_list(arg[1], op, int)
    node = UOp.make(op, dtype, sources, (_REDUCE_OP[arg[0]], tuple(axes)))
    if 0 in sources[0].shape:  # summing an axis of size 0 makes it 1: the result can be the larger
        reader.elements(node.shape, "REDUCE result")
    return node


_REDUCE_OP = {op: op for op in REDUCE_OPS}
_ONLY = {t: frozenset({t}) for t in (int, bool, list)}  # axis_list's entry types
_ARG_FORM = {Ops.REDUCE: "[op, [int axes]]", Ops.RESHAPE: "a shape (ints)", Ops.EXPAND: "a shape (ints)",
             Ops.PERMUTE: "an axis order (ints)", Ops.FLIP: "one bool per axis",
             Ops.PAD: "[[int, int]] per axis", Ops.SHRINK: "[[int, int]] per axis"}


def _decode_int_list(reader, op, dtype, sources, arg) -> UOp:  # RESHAPE EXPAND PERMUTE FLIP
    reader.axis_list(arg, op, bool if op == Ops.FLIP else int)
    node = UOp.make(op, dtype, sources, tuple(arg))
    if op == Ops.EXPAND and node.shape not in reader.checked_shapes:
        reader.elements(node.shape, "EXPAND result")
        reader.checked_shapes.add(node.shape)
    return node


def _decode_pairs(reader, op, dtype, sources, arg) -> UOp:  # PAD SHRINK
    pairs = reader.axis_list(arg, op, list)
    if any(len(p) != 2 or not {int}.issuperset(map(type, p)) for p in pairs):
        raise _Bad(f"{op} arg must be [[int, int]] per axis, got {_short(repr(arg))}")
    node = UOp.make(op, dtype, sources, tuple(tuple(p) for p in pairs))
    if op == Ops.PAD:
        reader.elements(node.shape, "PAD result")
    return node


def _decode_copy(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not str or not arg:
        raise _Bad(f"COPY arg must be a device name (string), got {_short(repr(arg))}")
    return UOp.make(op, dtype, sources, arg)


def _call_name(op: str, arg) -> str:
    name = arg["name"]
    if name.__class__ is not str or not name:
        raise _Bad(f"{op} name must be a non-empty string, got {_short(repr(name))}")
    return name


def _decode_function(reader, op, dtype, sources, arg) -> UOp:
    _map_arg(op, arg, {"name"})
    return UOp.make(op, dtype, sources, _call_name(op, arg))


def _decode_call(reader, op, dtype, sources, arg) -> UOp:
    _map_arg(op, arg, {"name"}, frozenset({"grad"}))
    name = _call_name(op, arg)
    grad = None
    if "grad" in arg:
        index = arg["grad"]
        if index.__class__ is not int or not 0 <= index < len(reader.built):
            raise _Bad(f"CALL grad {_short(repr(index))} must be the index of an earlier node")
        grad = reader.built[index]
        if grad.op != Ops.TUPLE:
            raise _Bad(f"CALL grad must be a TUPLE (the backward body), node {index} is {grad.op}")
    return UOp.make(op, dtype, sources, CallArg(name, grad))


def _decode_gettuple(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not int:
        raise _Bad(f"GETTUPLE arg must be an int, got {_short(repr(arg))}")
    return UOp.make(op, dtype, sources, arg)


# Ops whose arg is nil and whose node is exactly make(op, dtype, sources): the loop's fast path.
_PLAIN_OPS = frozenset({
    Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.CAST, Ops.BITCAST,
    Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD,
    Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
    Ops.WHERE, Ops.MULACC, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH,
    Ops.TUPLE, Ops.STORE, Ops.AFTER,
})

_DECODERS = {
    Ops.PARAM: _decode_param,
    Ops.CONST: _decode_const,
    Ops.BUFFER: _decode_buffer,
    Ops.NOOP: _decode_noop,
    Ops.REDUCE: _decode_reduce,
    Ops.RESHAPE: _decode_int_list,
    Ops.EXPAND: _decode_int_list,
    Ops.PERMUTE: _decode_int_list,
    Ops.FLIP: _decode_int_list,
    Ops.PAD: _decode_pairs,
    Ops.SHRINK: _decode_pairs,
    Ops.COPY: _decode_copy,
    Ops.FUNCTION: _decode_function,
    Ops.CALL: _decode_call,
    Ops.GETTUPLE: _decode_gettuple,
    # the plain ops are decoded by the loop itself; listed so every op has a row
    **{op: None for op in _PLAIN_OPS},
}
_PLAIN_CANONICAL = {op: op for op in _PLAIN_OPS}
_CANONICAL_OP = {op: op for op in _DECODERS}
# The JSON form differs only where MessagePack has a type JSON lacks: bin and non-finite floats.
_JSON_DECODERS = {**_DECODERS, Ops.CONST: _decode_const_json, Ops.BUFFER: _decode_buffer_json}


def _too_deep(limit: int) -> str:
    return f"arg nests deeper than {limit} level{'' if limit == 1 else 's'} {raise_hint('max_arg_depth')}"


def _nests_deeper(value, limit: int) -> bool:
    """Whether lists/maps nest more than `limit` levels inside `value` (iterative)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item.__class__ is list or item.__class__ is dict:
            if depth >= limit:
                return True
            children = item if item.__class__ is list else item.values()
            stack.extend((child, depth + 1) for child in children)
    return False


def _diagnose(entry, index: int, error: Exception) -> str:
    """Why the fast loop failed on `entry` (only called on failure: slow and precise)."""
    if entry.__class__ is not list or len(entry) not in (4, 5):
        return "a node must be an array [op, dtype, src, arg(, meta)]"
    op, dtype_name, src = entry[0], entry[1], entry[2]
    if op.__class__ is not str or op not in _DECODERS:
        return f"unknown op {_short(repr(op))}"
    if dtype_name.__class__ is not str or dtype_name not in DTYPES:
        return f"unknown dtype {_short(repr(dtype_name))} (one of {', '.join(DTYPES)})"
    if src.__class__ is not list:
        return f"src must be an array of node indices, got {_kind(src)}"
    for s in src:
        if s.__class__ is not int or not 0 <= s < index:
            return f"source {_short(repr(s))} is not the index of an earlier node (this is node {index})"
    return f"malformed {op} node: {_short(f'{type(error).__name__}: {error}')}"


# ============================================================================= writing

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
            raise FormatError("needs a binary file object (open the file with 'wb')", source=_stream_name(dest))
        try:
            write_all(dest, parts)
        except OSError as error:
            raise FormatError(f"cannot write: {error.strerror or error}", source=_stream_name(dest)) from None
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
    with no_gc():
        if form == "json":
            nodes: list = []
            index = _canonical_nodes(graph, _JSON_ENCODERS, nodes.append)
            return [_json_text(_document(graph, index, meta, nodes)).encode("utf-8")]
        # MessagePack: each node is packed as soon as it is numbered (no million-entry list
        # to build, walk again and free), then the map is put together around the nodes'
        # bytes exactly as msgpack.packb would write the whole document.
        import msgpack
        packer = msgpack.Packer(use_bin_type=True, use_single_float=False, autoreset=False)
        index = _canonical_nodes(graph, _ENCODERS, packer.pack)
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
    it goes back on the stack under an _EMIT marker, its sources on top (the first on top);
    when the marker comes up, every source is numbered and the node is written. A node
    can sit on the stack twice only while unexpanded (the graph is acyclic), and the second
    copy is skipped, so the order is exactly that of a recursive walk.
    """
    index: dict[UOp, int] = {}
    written = 0
    meta_maps: dict[Metadata, dict] = {}  # tag -> its meta map, built once per tag
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
                tag = meta_maps.get(meta)
                if tag is None:
                    tag = meta_maps[meta] = _meta_map(meta)
                append((op, node.dtype.name, src_indices, arg, tag) if tag else (op, node.dtype.name, src_indices, arg))
                continue
            if node in index:
                continue
            push(node)
            push(emit)
            children = node.src
            if node.op == call and node.arg.grad is not None:
                children = (*children, node.arg.grad)
            count = len(children)  # unrolled as in gradient._target_path: no call per node
            if count == 1:
                if children[0] not in index:
                    push(children[0])
            elif count == 2:
                first, second = children
                if second not in index:
                    push(second)
                if first not in index:
                    push(first)
            else:
                for child in reversed(children):
                    if child not in index:
                        push(child)
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


# ----------------------------------------------------------------------------- helpers

def _write_atomically(path: str, data) -> None:
    try:
        write_atomically(path, data)
    except OSError as error:
        raise FormatError(f"cannot write: {error.strerror or error}", source=path) from None


def _kind(value) -> str:
    return {dict: "a map", list: "an array", str: "a string", bytes: "bin", int: "an int", float: "a float",
            bool: "a bool", type(None): "nil"}.get(value.__class__, type(value).__name__)


def _short(text: str, limit: int = 80) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[:limit - 3] + "..."


# _Reader.graph fills a Graph's slots itself: if Graph gains a field, this must learn it.
assert Graph.__slots__ == ("outputs", "inputs", "meta"), "fileformat._Reader.graph needs updating"
