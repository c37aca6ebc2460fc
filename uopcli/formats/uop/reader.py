"""Reading .uop files (format v1), either form: every file is untrusted (see the package's
docstring). The per-node loop assumes a well-formed node and lets Python's own checks fail
fast on anything else; only then does decoders.diagnose look again, slowly, to say exactly
what is wrong."""

from __future__ import annotations

import math
import os
import re

from ...errors import FormatError, GraphError
from ...core.graph import Graph
from ...core.ops import DTYPES, Ops
from ...core.uop import Metadata, UOp, valid_name
from ...core.walks import free_slot, no_gc
from ..sniff import MSGPACK_ARRAY, MSGPACK_MAP, looks_like_onnx
from .decoders import (ARG_FORM, CANONICAL_OP, DECODERS, JSON_DECODERS, ONLY_TYPE, PLAIN_CANONICAL, Bad, diagnose,
                       kind_of, shorten)
from .tables import (ALLOWED_KEYS, DEFAULT_LIMITS, FORMAT, META_KEYS, REQUIRED_KEYS, V1_ARG_DEPTH, VERSION, Limits,
                     raise_hint, stream_name)


_WHITESPACE = re.compile(rb"[ \t\r\n]*")
# A JSON \u escape in the surrogate range: only then can a decoded string hold a lone
# surrogate, which no UTF-8 (and so no MessagePack) file can carry.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def load(source, *, limits: Limits | None = None, name: str | None = None) -> Graph:
    """Read a .uop file (either form) from a path, bytes, or a binary file object.

    `name` is what error messages call the file (default: the path, "<bytes>", or the file
    object's name). Raises FormatError for anything that is not a valid v1 file."""
    limits = limits or DEFAULT_LIMITS
    if isinstance(source, (bytes, bytearray, memoryview)):
        return loads(bytes(source), limits=limits, name=name or "<bytes>")
    label = name or (os.fspath(source) if isinstance(source, (str, os.PathLike)) else stream_name(source))
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
            raise FormatError(f"cannot read: {error.strerror or error}", source=label) from error
    elif hasattr(source, "read"):
        label = name or stream_name(source)
        too_large = False
        try:
            data = source.read(limits.max_file_bytes + 1)
        except OSError as error:
            raise FormatError(f"cannot read: {error.strerror or error}", source=label) from error
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
    if looks_like_onnx(data[start:start + 1]):
        raise FormatError("an ONNX model, not a .uop file: read it with uopcli.interop.onnx.importer.load_onnx "
                          "(`uopgrad convert model.onnx -o model.uop` writes a .uop)", source=name)
    json_form = data[start] == 0x7B  # "{"
    if data[start] == 0x5B:  # "[": JSON, but not a map (as MessagePack it would be the int 91)
        raise FormatError("not a .uop file: the top level is an array, not a map", source=name)
    with no_gc():  # the graph is acyclic; scanning it while it grows costs more than parsing
        doc = _parse_json(data, name) if json_form else _parse_msgpack(data, name)
        return _Reader(doc, json_form, limits, name).graph()


def _too_large(limits: Limits, name: str) -> FormatError:
    return FormatError(f"file is larger than the limit of {limits.max_file_bytes} bytes "
                       f"{raise_hint('max_file_bytes')}", source=name)


def _parse_msgpack(data: bytes, name: str):
    """The top-level map, with its "nodes" array as a _NodeStream: the nodes are parsed one
    at a time as the reader builds them, so memory follows the graph, not the bytes (a
    parsed array of 40 million empty arrays, 40 MB of file, would hold 2.9 GB), and a bad
    node is refused before the rest are parsed. Other values are parsed as they come; an
    unknown key's value is skipped unparsed (the reader refuses the key)."""
    import msgpack  # here, not at the top: `import uopcli` stays fast for commands that read no file
    if data[0] not in MSGPACK_MAP:
        return _parse_msgpack_whole(data, name)  # not a map: say what it is instead
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data))
    unpacker.feed(data)
    doc = {}
    key = None  # the key whose value is being read: where a truncated file ends
    try:
        for _ in range(unpacker.read_map_header()):
            key = None
            key = unpacker.unpack()
            if key.__class__ is not str:
                raise FormatError(f"top-level keys are strings, got {kind_of(key)} {shorten(repr(key))}", source=name)
            if key in doc:
                raise FormatError(f"the key {shorten(repr(key))} appears twice in the top-level map", source=name)
            if unpacker.tell() == len(data):
                raise FormatError(f"truncated: the file ends after the key {shorten(repr(key))}", source=name)
            if key == "nodes" and data[unpacker.tell()] in MSGPACK_ARRAY:
                begin = unpacker.tell()
                unpacker.skip()  # checks the structure in C, building nothing
                doc[key] = _NodeStream(data, begin, unpacker.tell())
            elif key in ALLOWED_KEYS:
                doc[key] = unpacker.unpack()
            else:
                unpacker.skip()
                doc[key] = None
        if unpacker.tell() != len(data):
            raise FormatError("trailing bytes after the file's map", source=name)
    except FormatError:
        raise
    except msgpack.OutOfData as error:
        where = "the top-level map" if key is None else f"the value of the key {shorten(repr(key))}"
        raise FormatError(f"truncated: the file ends inside {where}", source=name) from error
    except _unpack_errors() as error:  # msgpack's refusals of bad bytes, all meaning one thing
        raise FormatError(_msgpack_refusal(error), source=name) from error
    return doc


def _parse_msgpack_whole(data: bytes, name: str):
    import msgpack
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except msgpack.ExtraData as extra:
        if extra.unpacked.__class__ is not dict:  # text or other bytes that happen to start with a value
            raise FormatError(f"not a .uop file: the top level is {kind_of(extra.unpacked)}, not a map "
                              f"(followed by {len(extra.extra)} more bytes)", source=name) from extra
        raise FormatError("trailing bytes after the file's map", source=name) from extra
    except _unpack_errors() as error:
        if _cut_short(data):  # unpackb says "incomplete input", a ValueError like any other
            raise FormatError("truncated: the file ends inside its first value", source=name) from error
        raise FormatError(_msgpack_refusal(error), source=name) from error


def _cut_short(data: bytes) -> bool:
    """Whether `data` starts a MessagePack value that it ends inside."""
    import msgpack
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data))
    unpacker.feed(data)
    try:
        unpacker.skip()
    except msgpack.OutOfData:
        return True
    except _unpack_errors():
        return False
    return False


def _unpack_errors() -> tuple:
    """What msgpack raises for bytes that are not MessagePack: its own exception types and
    ValueError (bad UTF-8, a map key of the wrong type). Anything else (MemoryError, a bug
    in this reader) is not a refusal of the file and propagates as itself."""
    import msgpack
    return msgpack.UnpackException, ValueError


def _msgpack_refusal(error: Exception) -> str:
    import msgpack
    if isinstance(error, msgpack.StackError):
        return "values nested too deeply for the MessagePack reader"
    return f"not valid MessagePack: {shorten(str(error) or type(error).__name__)}"


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
        raise _RepeatedKey(f"the key {shorten(repr(key))} appears twice in one object")
    return mapping


def _parse_json(data: bytes, name: str):
    import json
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                         object_pairs_hook=_unique_keys)
        if _SURROGATE_ESCAPE.search(data):
            json.dumps(doc, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    except RecursionError as error:
        raise FormatError("values nested too deeply for the JSON reader", source=name) from error
    except UnicodeError as error:
        raise FormatError(f"not valid UTF-8 text: {shorten(str(error))}", source=name) from error
    except _RepeatedKey as error:
        node, op = _node_with_repeated_key(text)
        raise FormatError(str(error), node=node, op=op, source=name) from error
    except ValueError as error:
        message = str(error)
        if message.startswith("Extra data"):
            raise FormatError(f"trailing bytes after the file's map ({message})", source=name) from error
        raise FormatError(f"not valid JSON: {shorten(message)}", source=name) from error
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
                return index, op if op.__class__ is str and op in DECODERS else None
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
        raise ValueError(f"number {shorten(text)} is too large for a float64; write infinity as {{\"float\": \"inf\"}}")
    return value


_NO_TAG = Metadata()  # an empty meta map: the node gets no tag


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
            raise self.fail(f"not a .uop file: the top level is {kind_of(doc)}, not a map")
        if "format" not in doc:
            raise self.fail("not a .uop file: its map has no 'format' key (a .uop file's is 'uop')")
        if doc["format"] != FORMAT:
            raise self.fail(f"not a .uop file: 'format' is {shorten(repr(doc['format']))}, not 'uop'")
        if "version" not in doc:
            raise self.fail(f"missing top-level key version (this reader reads version {VERSION})")
        version = doc["version"]
        if version.__class__ is not int or version != VERSION:
            raise self.fail(f"unsupported version {shorten(repr(version))}: this reader reads version {VERSION}")
        missing = sorted(REQUIRED_KEYS - doc.keys())
        if missing:
            raise self.fail(f"missing top-level key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        extra = [k for k in doc if k not in ALLOWED_KEYS]
        if extra:
            raise self.fail(f"unknown top-level key {shorten(repr(extra[0]))} "
                            f"(allowed: {', '.join(sorted(ALLOWED_KEYS))})")
        meta = self._file_meta(doc.get("meta", {}))
        nodes = doc["nodes"]
        if nodes.__class__ is not list and nodes.__class__ is not _NodeStream:
            raise self.fail(f"'nodes' must be an array, got {kind_of(nodes)}")
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
            raise self.fail(f"'meta' must be a map of strings, got {kind_of(meta)}")
        for key, value in meta.items():
            if key.__class__ is not str or value.__class__ is not str:
                raise self.fail(f"'meta' must map strings to strings, got {shorten(repr(key))}: {shorten(repr(value))}")
        return dict(sorted(meta.items()))

    # ------------------------------------------------------------------ nodes
    def _nodes(self, nodes: list) -> None:
        built = self.built
        append = built.append
        make = UOp.make
        plain = PLAIN_CANONICAL
        canonical = CANONICAL_OP
        decoders = JSON_DECODERS if self.json_form else DECODERS
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
                except _unpack_errors() as error:  # only a stream fails here: not MessagePack
                    raise FormatError(_msgpack_refusal(error), node=len(built), source=self.name) from error
                if entry.__class__ is not list:
                    raise Bad(f"a node must be an array [op, dtype, src, arg(, meta)], got {kind_of(entry)}")
                if len(entry) == 4:
                    op, dtype_name, src, arg = entry
                    meta = None
                elif len(entry) == 5:
                    op, dtype_name, src, arg, meta = entry
                    if meta is None:  # an absent meta is a node of 4 fields, not a nil 5th
                        raise Bad("node meta must be a map, got nil (no meta: leave the 5th field out)")
                else:
                    raise Bad(f"a node has 4 or 5 fields [op, dtype, src, arg(, meta)], got {len(entry)}")
                dtype = dtype_named[dtype_name]
                if src.__class__ is not list:
                    raise Bad(f"src must be an array of node indices, got {kind_of(src)}")
                # Sources by count, without a loop for the usual one or two; `built` holds
                # only earlier nodes, so built[s] fails for s >= this node's index, and the
                # class check refuses bools and floats (True would index node 1).
                count = len(src)
                if count == 1:
                    s = src[0]
                    if s.__class__ is not int or s < 0:
                        raise ValueError("bad source")  # diagnose says which and why
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
                    raise Bad(_too_deep(depth_limit))
                interned = plain.get(op)  # the op's own interned string: files' strings are copies
                if interned is not None:
                    if arg is not None:
                        raise Bad(f"{op} takes no arg (nil), got {shorten(repr(arg))}")
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
        except (Bad, GraphError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                OverflowError) as error:
            raise self._node_error(self._why(entry, error), entry) from error

    def _why(self, entry, error: Exception) -> str:
        """The message for a node the loop refused (the slow path: only runs once, on failure)."""
        limit = self.limits.max_arg_depth
        if entry.__class__ is list and len(entry) >= 4 and _nests_deeper(entry[3], limit):
            return _too_deep(limit)
        if isinstance(error, (Bad, GraphError)):
            return str(error)
        message = diagnose(entry, len(self.built), error)
        if message.startswith("malformed") and len(entry) == 5:
            try:
                self._node_meta(entry[4])
            except (Bad, TypeError) as meta_error:  # TypeError: an unhashable value in the map
                return str(meta_error) if isinstance(meta_error, Bad) else "node meta values must be strings or bool"
        return message

    def _node_error(self, message: str, entry) -> FormatError:
        op = entry[0] if entry.__class__ is list and entry else None
        label = op if op.__class__ is str and op in DECODERS else (None if op is None else shorten(repr(op)))
        # the core's messages quote args and shapes: keep a hostile one (4000-digit ints) short
        return FormatError(shorten(message, 300), node=len(self.built), op=label, source=self.name)

    def _node_meta(self, meta) -> Metadata:
        """Check a node's meta map and return its Metadata (_NO_TAG for an empty map),
        remembered by _meta_key so the next equal map costs one lookup."""
        if meta.__class__ is not dict:
            raise Bad(f"node meta must be a map, got {kind_of(meta)}")
        name, loc, scope = meta.get("name"), meta.get("loc"), meta.get("scope")
        backward = meta.get("backward", False)
        if len(meta) != (name is not None) + (loc is not None) + (scope is not None) + ("backward" in meta):
            keys = ", ".join(shorten(repr(k)) for k in meta if k not in META_KEYS)
            raise Bad(f"node meta holds only 'name', 'loc', 'scope' (strings) and 'backward' (bool); got {keys or 'nil'}")
        if any(text is not None and text.__class__ is not str for text in (name, loc, scope)):
            raise Bad("node meta 'name', 'loc' and 'scope' must be strings")
        if backward.__class__ is not bool:
            raise Bad(f"node meta 'backward' must be a bool, got {shorten(repr(backward))}")
        tag = Metadata(name, loc, backward, scope)
        tag = _NO_TAG if tag == _NO_TAG else tag
        self.meta_cache[_meta_key(meta)] = tag
        return tag

    # ------------------------------------------------------------------ inputs and outputs
    def _index(self, value, what: str) -> int:
        if value.__class__ is not int or not 0 <= value < len(self.built):
            raise self.fail(f"{what} {shorten(repr(value))} is not a node index (the file has {len(self.built)} nodes)")
        return value

    def _outputs(self, outputs) -> dict[str, UOp]:
        if outputs.__class__ is not list:
            raise self.fail(f"'outputs' must be an array of [name, index], got {kind_of(outputs)}")
        named: dict[str, UOp] = {}
        for pair in outputs:
            if pair.__class__ is not list or len(pair) != 2:
                raise self.fail(f"an output must be [name, index], got {shorten(repr(pair))}")
            name, index = pair
            if not valid_name(name):
                raise self.fail(f"output name {shorten(repr(name))} must be a non-empty string without '=', ',' "
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
            raise self.fail(f"'inputs' must be an array of node indices, got {kind_of(inputs)}")
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
        """Slot PARAMs live only inside FUNCTION/CALL bodies (only run when the file has slots)."""
        node = free_slot(outputs.values())
        if node is not None:
            raise self.fail(f"slot PARAM {node.arg} is used outside any FUNCTION or CALL body", self.built.index(node))

    # ------------------------------------------------------------------ arg checks used by decoders
    def shape(self, value, what: str = "shape") -> tuple[int, ...]:
        if value.__class__ is not list:
            raise Bad(f"{what} must be an array of non-negative ints, got {shorten(repr(value))}")
        for size in value:
            if size.__class__ is not int or size < 0:
                raise Bad(f"{what} must be an array of non-negative ints, got {shorten(repr(value))}")
        if len(value) > self.limits.max_rank:
            raise Bad(f"{what} has rank {len(value)}, over the limit of {self.limits.max_rank} "
                       f"{raise_hint('max_rank')}")
        self.elements(value, what)
        return tuple(value)

    def elements(self, shape, what: str = "tensor") -> None:
        if math.prod(shape) > self.limits.max_tensor_elements:
            raise Bad(f"{what} {list(shape)} has {math.prod(shape)} elements, over the limit of "
                       f"{self.limits.max_tensor_elements} {raise_hint('max_tensor_elements')}")

    def axis_list(self, arg, op: str, item=None) -> list:
        """A list of at most max_rank entries, each exactly of type `item` (checked here,
        not left to the core: an equal node already interned would let 0.0 pass for 0)."""
        if arg.__class__ is not list:
            raise Bad(f"{op} arg must be an array, got {kind_of(arg)}")
        if len(arg) > self.limits.max_rank:
            raise Bad(f"{op} arg has {len(arg)} entries, over the rank limit of {self.limits.max_rank} "
                       f"{raise_hint('max_rank')}")
        if item is not None and not ONLY_TYPE[item].issuperset(map(type, arg)):
            raise Bad(f"{op} arg must be {ARG_FORM[op]}, got {shorten(repr(arg))}")
        return arg


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


# _Reader.graph fills a Graph's slots itself: if Graph gains a field, this must learn it.
assert Graph.__slots__ == ("outputs", "inputs", "meta"), "formats/uop/reader.py: _Reader.graph needs updating"
