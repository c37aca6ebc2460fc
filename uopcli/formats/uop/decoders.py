"""The reader's per-op decoders: one row per op whose file arg differs from the core's
(or that needs more than the shared checks), and the slow diagnosis of a node the fast
loop refused."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from ...core.ops import DTYPES, REDUCE_OPS, DType, Ops, dtypes
from ...core.uop import CallArg, UOp, _leaf

if TYPE_CHECKING:
    from .reader import _Reader


class Bad(Exception):
    """A refusal inside the node loop: becomes a FormatError naming the node."""


# ----------------------------------------------------------------------------- per-op decoders
# One row per op that is more than `make(op, dtype, sources)`: turn the file's arg into the
# core's internal arg (uop.py) and build the node. Each returns the UOp or raises Bad or
# GraphError; the node loop adds the node index and op to the message.

def _no_sources(op: str, sources: tuple) -> None:
    if sources:
        raise Bad(f"{op} takes no sources, got {len(sources)}")


def _map_arg(op: str, arg, keys: set, optional: frozenset = frozenset()) -> dict:
    if arg.__class__ is not dict or not keys <= arg.keys() or not arg.keys() <= keys | optional:
        wanted = ", ".join(sorted(keys)) + "".join(f", {k} (optional)" for k in sorted(optional))
        raise Bad(f"{op} arg must be a map with keys {wanted}; got {shorten(repr(arg))}")
    return arg


def _decode_param(reader: _Reader, op, dtype, sources, arg) -> UOp:
    # The checks of UOp.param, done here once (a regex for valid_name): the node is what
    # UOp.param(name_or_slot, shape, dtype) returns, built with the constructor it ends in.
    _no_sources(op, sources)
    if arg.__class__ is not dict or len(arg) != 2 or "shape" not in arg or not ("name" in arg or "slot" in arg):
        raise Bad(f"PARAM arg must be {{\"name\": str, \"shape\": [int]}} or {{\"slot\": int, \"shape\": [int]}}, "
                   f"got {shorten(repr(arg))}")
    shape = reader.shape(arg["shape"], "PARAM shape")
    if dtype is dtypes.void:
        raise Bad("PARAM cannot be void")
    if "name" in arg:
        name = arg["name"]
        if name.__class__ is not str or not _VALID_NAME(name):
            raise Bad(f"PARAM name {shorten(repr(name))} must be a non-empty string without '=', ',' or whitespace")
        node = _leaf(Ops.PARAM, dtype, name, shape)
        index = len(reader.built)
        first = reader.named_params.setdefault(name, (index, node))
        if first[1] is not node:
            raise Bad(f"duplicate input name {name!r}: node {first[0]} is a PARAM of that name with "
                       f"another shape or dtype")
        return node
    slot = arg["slot"]
    if slot.__class__ is not int or slot < 0:
        raise Bad(f"PARAM slot must be an int >= 0, got {shorten(repr(slot))}")
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
    raise Bad(f"CONST {dtype.name} needs {_KIND_WORD.get(kind, 'a value')}, got {shorten(repr(arg))}")


_KIND_WORD = {"f": "a float", "i": "an int", "u": "an int", "b": "a bool"}


def _decode_const(reader, op, dtype, sources, arg) -> UOp:
    _no_sources(op, sources)
    return UOp.const(_const_number(dtype, arg), dtype)


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _decode_const_json(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is dict and dtype.kind == "f":
        if len(arg) != 1 or arg.get("float") not in _NON_FINITE:
            raise Bad(f"CONST arg map must be {{\"float\": \"nan\" | \"inf\" | \"-inf\"}}, got {shorten(repr(arg))}")
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
            raise Bad(f"BUFFER data must be bin (bytes), got {kind_of(data)}")
    if dtype.is_void:
        raise Bad("BUFFER cannot be void")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise Bad(f"BUFFER data has {len(data)} bytes, but {dtype.name}{list(shape)} needs {expected}")
    if dtype.is_bool and data.translate(None, b"\x00\x01"):
        raise Bad("BUFFER bool data must hold only bytes 0 and 1")
    return _leaf(Ops.BUFFER, dtype, data, shape)  # what UOp.buffer builds, without numpy


_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")  # as the schema's


def _decode_buffer_json(reader, op, dtype, sources, arg) -> UOp:
    import base64
    _map_arg(op, arg, {"shape", "data"})
    packed = arg["data"]
    if packed.__class__ is not dict or len(packed) != 1 or packed.get("b64").__class__ is not str:
        raise Bad(f"BUFFER data must be {{\"b64\": \"<base64>\"}} in the JSON form, got {shorten(repr(packed))}")
    text = packed["b64"]
    if not _BASE64.fullmatch(text):  # b64decode alone takes excess padding ("AAAA====")
        raise Bad(f"BUFFER data is not valid base64 (standard alphabet, padded to 4): {shorten(repr(text))}")
    return _decode_buffer(reader, op, dtype, sources, arg, base64.b64decode(text))


def _decode_noop(reader, op, dtype, sources, arg) -> UOp:
    _no_sources(op, sources)
    if dtype is not dtypes.void or arg is not None:
        raise Bad("NOOP is void and takes no arg")
    return UOp.noop()


def _decode_reduce(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not list or len(arg) != 2 or arg[0].__class__ is not str or arg[0] not in _REDUCE_OP:
        raise Bad(f"REDUCE arg must be [\"ADD\" | \"MUL\" | \"MAX\", [axes]], got {shorten(repr(arg))}")
    axes = reader.axis_list(arg[1], op, int)
    node = UOp.make(op, dtype, sources, (_REDUCE_OP[arg[0]], tuple(axes)))
    if 0 in sources[0].shape:  # summing an axis of size 0 makes it 1: the result can be the larger
        reader.elements(node.shape, "REDUCE result")
    return node


_REDUCE_OP = {op: op for op in REDUCE_OPS}
ONLY_TYPE = {t: frozenset({t}) for t in (int, bool, list)}  # axis_list's entry types
ARG_FORM = {Ops.REDUCE: "[op, [int axes]]", Ops.RESHAPE: "a shape (ints)", Ops.EXPAND: "a shape (ints)",
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
        raise Bad(f"{op} arg must be [[int, int]] per axis, got {shorten(repr(arg))}")
    node = UOp.make(op, dtype, sources, tuple(tuple(p) for p in pairs))
    if op == Ops.PAD:
        reader.elements(node.shape, "PAD result")
    return node


def _decode_copy(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not str or not arg:
        raise Bad(f"COPY arg must be a device name (string), got {shorten(repr(arg))}")
    return UOp.make(op, dtype, sources, arg)


def _call_name(op: str, arg) -> str:
    name = arg["name"]
    if name.__class__ is not str or not name:
        raise Bad(f"{op} name must be a non-empty string, got {shorten(repr(name))}")
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
            raise Bad(f"CALL grad {shorten(repr(index))} must be the index of an earlier node")
        grad = reader.built[index]
        if grad.op != Ops.TUPLE:
            raise Bad(f"CALL grad must be a TUPLE (the backward body), node {index} is {grad.op}")
    return UOp.make(op, dtype, sources, CallArg(name, grad))


def _decode_gettuple(reader, op, dtype, sources, arg) -> UOp:
    if arg.__class__ is not int:
        raise Bad(f"GETTUPLE arg must be an int, got {shorten(repr(arg))}")
    return UOp.make(op, dtype, sources, arg)


# Ops whose arg is nil and whose node is exactly make(op, dtype, sources): the loop's fast path.
_PLAIN_OPS = frozenset({
    Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.CAST, Ops.BITCAST,
    Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD,
    Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
    Ops.WHERE, Ops.MULACC, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH,
    Ops.TUPLE, Ops.STORE, Ops.AFTER,
})

DECODERS = {
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
PLAIN_CANONICAL = {op: op for op in _PLAIN_OPS}
CANONICAL_OP = {op: op for op in DECODERS}
# The JSON form differs only where MessagePack has a type JSON lacks: bin and non-finite floats.
JSON_DECODERS = {**DECODERS, Ops.CONST: _decode_const_json, Ops.BUFFER: _decode_buffer_json}


def diagnose(entry, index: int, error: Exception) -> str:
    """Why the fast loop failed on `entry` (only called on failure: slow and precise)."""
    if entry.__class__ is not list or len(entry) not in (4, 5):
        return "a node must be an array [op, dtype, src, arg(, meta)]"
    op, dtype_name, src = entry[0], entry[1], entry[2]
    if op.__class__ is not str or op not in DECODERS:
        return f"unknown op {shorten(repr(op))}"
    if dtype_name.__class__ is not str or dtype_name not in DTYPES:
        return f"unknown dtype {shorten(repr(dtype_name))} (one of {', '.join(DTYPES)})"
    if src.__class__ is not list:
        return f"src must be an array of node indices, got {kind_of(src)}"
    for s in src:
        if s.__class__ is not int or not 0 <= s < index:
            return f"source {shorten(repr(s))} is not the index of an earlier node (this is node {index})"
    return f"malformed {op} node: {shorten(f'{type(error).__name__}: {error}')}"


def kind_of(value) -> str:
    return {dict: "a map", list: "an array", str: "a string", bytes: "bin", int: "an int", float: "a float",
            bool: "a bool", type(None): "nil"}.get(value.__class__, type(value).__name__)


def shorten(text: str, limit: int = 80) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[:limit - 3] + "..."
