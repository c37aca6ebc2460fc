"""Reading .uop files (uopcli/formats/uop/reader.py, decoders.py): every refusal's whole
line (the file, the node and its op, the reason), in both forms, and exact loads, written for
the survivors of their mutation run (docs/mutation.md)."""

from __future__ import annotations

import io
import json
import math
import struct

import msgpack
import numpy as np
import pytest

from uopcli import FormatError, Limits, Metadata, Ops, UOp, dtypes, load, save
from uopcli.formats.uop import loads, read_bytes

SAME = object()  # the JSON form's line is the MessagePack form's


def file(nodes, inputs=(), outputs=(), **top) -> dict:
    return {"format": "uop", "version": 1, "nodes": nodes, "inputs": list(inputs),
            "outputs": [list(o) for o in outputs], **top}


X = ["PARAM", "float32", [], {"name": "x", "shape": [3]}]
P = msgpack.Packer()


def line(data: bytes, limits=None, name="f.uop") -> str:
    with pytest.raises(FormatError) as info:
        load(data, name=name, limits=limits)
    return str(info.value)


# (id, document, its line in MessagePack, its line in JSON: SAME, or None where JSON cannot hold it)
ROWS = [
    ('noformat', {"version":1},
     "not a .uop file: its map has no 'format' key (a .uop file's is 'uop')", SAME),
    ('format', file([]) | {"format": "UOP"},
     "not a .uop file: 'format' is 'UOP', not 'uop'", SAME),
    ('noversion', {"format":"uop"},
     'missing top-level key version (this reader reads version 1)', SAME),
    ('version', file([]) | {"version": 2},
     'unsupported version 2: this reader reads version 1', SAME),
    ('missing1', {"format":"uop","version":1,"nodes":[],"inputs":[]},
     'missing top-level key outputs', SAME),
    ('missing2', {"format":"uop","version":1,"nodes":[]},
     'missing top-level keys inputs, outputs', SAME),
    ('extra', file([]) | {"zz":1, "meta2": 2},
     "unknown top-level key 'zz' (allowed: format, inputs, meta, nodes, outputs, version)", SAME),
    ('meta-not-map', file([]) | {"meta": [1]},
     "'meta' must be a map of strings, got an array", SAME),
    ('meta-val', file([]) | {"meta": {"a": 1}},
     "'meta' must map strings to strings, got 'a': 1", SAME),
    ('nodes-map', file({}),
     "'nodes' must be an array, got a map", SAME),
    ('maxnodes', file([X, X, X]),
     '3 nodes exceed the limit of 2 (raise it: Limits(max_nodes=...) in Python, uopgrad --limit max_nodes=N on the command line)', SAME),
    ('node-not-list', file([X, 5]),
     'node 1: a node must be an array [op, dtype, src, arg(, meta)], got an int', SAME),
    ('node-3', file([X, ["SIN", "float32", [0]]]),
     'node 1 (SIN): a node has 4 or 5 fields [op, dtype, src, arg(, meta)], got 3', SAME),
    ('node-6', file([X, ["SIN", "float32", [0], None, {}, 1]]),
     'node 1 (SIN): a node has 4 or 5 fields [op, dtype, src, arg(, meta)], got 6', SAME),
    ('meta-nil', file([X, ["SIN", "float32", [0], None, None]]),
     'node 1 (SIN): node meta must be a map, got nil (no meta: leave the 5th field out)', SAME),
    ('src-map', file([X, ["SIN", "float32", {}, None]]),
     'node 1 (SIN): src must be an array of node indices, got a map', SAME),
    ('src-bad1', file([X, ["SIN", "float32", [1], None]]),
     'node 1 (SIN): source 1 is not the index of an earlier node (this is node 1)', SAME),
    ('src-neg1', file([X, ["SIN", "float32", [-1], None]]),
     'node 1 (SIN): source -1 is not the index of an earlier node (this is node 1)', SAME),
    ('src-bad2', file([X, ["ADD", "float32", [0, 1], None]]),
     'node 1 (ADD): source 1 is not the index of an earlier node (this is node 1)', SAME),
    ('src-neg2', file([X, ["ADD", "float32", [0, -1], None]]),
     'node 1 (ADD): source -1 is not the index of an earlier node (this is node 1)', SAME),
    ('src-neg2a', file([X, ["ADD", "float32", [-1, 0], None]]),
     'node 1 (ADD): source -1 is not the index of an earlier node (this is node 1)', SAME),
    ('src-bool2', file([X, ["ADD", "float32", [True, 0], None]]),
     'node 1 (ADD): source True is not the index of an earlier node (this is node 1)', SAME),
    ('src-bad3', file([X, ["WHERE", "float32", [0, 0, 3], None]]),
     'node 1 (WHERE): source 3 is not the index of an earlier node (this is node 1)', SAME),
    ('src-neg3', file([X, ["WHERE", "float32", [0, 0, -2], None]]),
     'node 1 (WHERE): source -2 is not the index of an earlier node (this is node 1)', SAME),
    ('plain-arg', file([X, ["SIN", "float32", [0], 1]]),
     'node 1 (SIN): SIN takes no arg (nil), got 1', SAME),
    ('unknown-op', file([X, ["FOO", "float32", [0], None]]),
     "node 1 ('FOO'): unknown op 'FOO'", SAME),
    ('unknown-dtype', file([X, ["SIN", "bf16", [0], None]]),
     "node 1 (SIN): unknown dtype 'bf16' (one of bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, void)", SAME),
    ('meta-keys', file([X, ["SIN", "float32", [0], None, {"nam": "a"}]]),
     "node 1 (SIN): node meta holds only 'name', 'loc', 'scope' (strings) and 'backward' (bool); got 'nam'", SAME),
    ('meta-type', file([X, ["SIN", "float32", [0], None, {"name": 1}]]),
     "node 1 (SIN): node meta 'name', 'loc' and 'scope' must be strings", SAME),
    ('meta-bw', file([X, ["SIN", "float32", [0], None, {"backward": 1}]]),
     "node 1 (SIN): node meta 'backward' must be a bool, got 1", SAME),
    ('meta-list', file([X, ["SIN", "float32", [0], None, [1]]]),
     'node 1 (SIN): node meta must be a map, got an array', SAME),
    ('out-not-list', file([X], [0], ) | {"outputs": {}},
     "'outputs' must be an array of [name, index], got a map", SAME),
    ('out-pair', file([X], [0]) | {"outputs": [["y"]]},
     "an output must be [name, index], got ['y']", SAME),
    ('out-name', file([X], [0], [("a b", 0)]),
     "output name 'a b' must be a non-empty string without '=', ',' or whitespace", SAME),
    ('out-index', file([X], [0], [("y", 1)]),
     "output 'y': 1 is not a node index (the file has 1 nodes)", SAME),
    ('out-index-bool', file([X], [0], [("y", True)]),
     "output 'y': True is not a node index (the file has 1 nodes)", SAME),
    ('out-dup', file([X], [0], [("y", 0), ("y", 0)]),
     "node 0 (PARAM): duplicate output name 'y'", SAME),
    ('out-noop', file([["NOOP","void",[],None]], [], [("y", 0)]),
     "node 0 (NOOP): output 'y' is a NOOP (NOOP is only a TUPLE element)", SAME),
    ('in-not-list', file([X], [0]) | {"inputs": 0},
     "'inputs' must be an array of node indices, got an int", SAME),
    ('in-not-param', file([X, ["SIN", "float32", [0], None]], [0, 1]),
     'node 1 (SIN): an input must be a PARAM with a name', SAME),
    ('in-dup', file([X], [0, 0]),
     "node 0 (PARAM): duplicate input name 'x'", SAME),
    ('in-missing', file([X], []),
     "node 0 (PARAM): graph input PARAM 'x' is not listed in 'inputs'", SAME),
    ('in-slot', file([["PARAM", "float32", [], {"slot": 0, "shape": [3]}]], [0]),
     'node 0 (PARAM): an input must be a PARAM with a name', SAME),
    ('free-slot', file([["PARAM", "float32", [], {"slot": 0, "shape": [3]}], ["SIN", "float32", [0], None]], [], [("y", 1)]),
     'node 0 (PARAM): slot PARAM 0 is used outside any FUNCTION or CALL body', SAME),
    ('shape-not-list', file([["PARAM", "float32", [], {"name": "x", "shape": 3}]], [0]),
     'node 0 (PARAM): PARAM shape must be an array of non-negative ints, got 3', SAME),
    ('shape-neg', file([["PARAM", "float32", [], {"name": "x", "shape": [3, -1]}]], [0]),
     'node 0 (PARAM): PARAM shape must be an array of non-negative ints, got [3, -1]', SAME),
    ('shape-bool', file([["PARAM", "float32", [], {"name": "x", "shape": [True]}]], [0]),
     'node 0 (PARAM): PARAM shape must be an array of non-negative ints, got [True]', SAME),
    ('rank', file([["PARAM", "float32", [], {"name": "x", "shape": [1]*17}]], [0]),
     'node 0 (PARAM): PARAM shape has rank 17, over the limit of 16 (raise it: Limits(max_rank=...) in Python, uopgrad --limit max_rank=N on the command line)', SAME),
    ('elements', file([["PARAM", "float32", [], {"name": "x", "shape": [1<<20, 1<<21]}]], [0]),
     'node 0 (PARAM): PARAM shape [1048576, 2097152] has 2199023255552 elements, over the limit of 1099511627776 (raise it: Limits(max_tensor_elements=...) in Python, uopgrad --limit max_tensor_elements=N on the command line)', SAME),
    ('param-arg', file([["PARAM", "float32", [], {"name": "x"}]], [0]),
     'node 0 (PARAM): PARAM arg must be {"name": str, "shape": [int]} or {"slot": int, "shape": [int]}, got {\'name\': \'x\'}', SAME),
    ('param-arg3', file([["PARAM", "float32", [], {"name": "x", "shape": [], "slot": 0}]], [0]),
     'node 0 (PARAM): PARAM arg must be {"name": str, "shape": [int]} or {"slot": int, "shape": [int]}, got {\'name\': \'x\', \'shape\': [], \'slot\': 0}', SAME),
    ('param-src', file([X, ["PARAM", "float32", [0], {"name": "y", "shape": []}]], [0]),
     'node 1 (PARAM): PARAM takes no sources, got 1', SAME),
    ('param-void', file([["PARAM", "void", [], {"name": "x", "shape": []}]], [0]),
     'node 0 (PARAM): PARAM cannot be void', SAME),
    ('param-name', file([["PARAM", "float32", [], {"name": "a=b", "shape": []}]], [0]),
     "node 0 (PARAM): PARAM name 'a=b' must be a non-empty string without '=', ',' or whitespace", SAME),
    ('param-name-int', file([["PARAM", "float32", [], {"name": 3, "shape": []}]], [0]),
     "node 0 (PARAM): PARAM name 3 must be a non-empty string without '=', ',' or whitespace", SAME),
    ('param-dup', file([X, ["PARAM", "float32", [], {"name": "x", "shape": [4]}]], [0]),
     "node 1 (PARAM): duplicate input name 'x': node 0 is a PARAM of that name with another shape or dtype", SAME),
    ('param-slot', file([["PARAM", "float32", [], {"slot": -1, "shape": []}]]),
     'node 0 (PARAM): PARAM slot must be an int >= 0, got -1', SAME),
    ('param-slot-bool', file([["PARAM", "float32", [], {"slot": True, "shape": []}]]),
     'node 0 (PARAM): PARAM slot must be an int >= 0, got True', SAME),
    ('const-str', file([["CONST", "float32", [], "1"]]),
     "node 0 (CONST): CONST float32 needs a float, got '1'", SAME),
    ('const-intbool', file([["CONST", "int32", [], True]]),
     'node 0 (CONST): CONST int32 needs an int, got True', SAME),
    ('const-boolint', file([["CONST", "bool", [], 1]]),
     'node 0 (CONST): CONST bool needs a bool, got 1', SAME),
    ('const-intfloat', file([["CONST", "int32", [], 1.0]]),
     'node 0 (CONST): CONST int32 needs an int, got 1.0', SAME),
    ('const-void', file([["CONST", "void", [], 1.0]]),
     'node 0 (CONST): CONST void needs a value, got 1.0', SAME),
    ('const-src', file([X, ["CONST", "float32", [0], 1.0]], [0]),
     'node 1 (CONST): CONST takes no sources, got 1', SAME),
    ('const-range', file([["CONST", "int8", [], 128]]),
     'node 0 (CONST): CONST 128 does not fit int8', SAME),
    ('buffer-arg', file([["BUFFER", "float32", [], {"shape": [1]}]]),
     "node 0 (BUFFER): BUFFER arg must be a map with keys data, shape; got {'shape': [1]}", SAME),
    ('buffer-extra', file([["BUFFER", "float32", [], {"shape": [1], "data": b"\0\0\0\0", "x": 1}]]),
     "node 0 (BUFFER): BUFFER arg must be a map with keys data, shape; got {'shape': [1], 'data': b'\\x00\\x00\\x00\\x00', 'x': 1}", None),
    ('buffer-data', file([["BUFFER", "float32", [], {"shape": [1], "data": "abcd"}]]),
     'node 0 (BUFFER): BUFFER data must be bin (bytes), got a string', 'node 0 (BUFFER): BUFFER data must be {"b64": "<base64>"} in the JSON form, got \'abcd\''),
    ('buffer-len', file([["BUFFER", "float32", [], {"shape": [2], "data": b"\0\0\0\0"}]]),
     'node 0 (BUFFER): BUFFER data has 4 bytes, but float32[2] needs 8', None),
    ('buffer-bool', file([["BUFFER", "bool", [], {"shape": [2], "data": b"\0\2"}]]),
     'node 0 (BUFFER): BUFFER bool data must hold only bytes 0 and 1', None),
    ('buffer-void', file([["BUFFER", "void", [], {"shape": [0], "data": b""}]]),
     'node 0 (BUFFER): BUFFER cannot be void', None),
    ('buffer-src', file([X, ["BUFFER", "float32", [0], {"shape": [1], "data": b"\0\0\0\0"}]], [0]),
     'node 1 (BUFFER): BUFFER takes no sources, got 1', None),
    ('noop-dtype', file([["NOOP", "float32", [], None]]),
     'node 0 (NOOP): NOOP is void and takes no arg', SAME),
    ('noop-arg', file([["NOOP", "void", [], 1]]),
     'node 0 (NOOP): NOOP is void and takes no arg', SAME),
    ('noop-src', file([X, ["NOOP", "void", [0], None]], [0]),
     'node 1 (NOOP): NOOP takes no sources, got 1', SAME),
    ('reduce-arg', file([X, ["REDUCE", "float32", [0], ["SUM", [0]]]], [0]),
     'node 1 (REDUCE): REDUCE arg must be ["ADD" | "MUL" | "MAX", [axes]], got [\'SUM\', [0]]', SAME),
    ('reduce-arg1', file([X, ["REDUCE", "float32", [0], ["ADD"]]], [0]),
     'node 1 (REDUCE): REDUCE arg must be ["ADD" | "MUL" | "MAX", [axes]], got [\'ADD\']', SAME),
    ('reduce-axes', file([X, ["REDUCE", "float32", [0], ["ADD", [0.0]]]], [0]),
     'node 1 (REDUCE): REDUCE arg must be [op, [int axes]], got [0.0]', SAME),
    ('reduce-axes-bool', file([X, ["REDUCE", "float32", [0], ["ADD", [False]]]], [0]),
     'node 1 (REDUCE): REDUCE arg must be [op, [int axes]], got [False]', SAME),
    ('reduce-axes-map', file([X, ["REDUCE", "float32", [0], ["ADD", {}]]], [0]),
     'node 1 (REDUCE): REDUCE arg must be an array, got a map', SAME),
    ('reshape-arg', file([X, ["RESHAPE", "float32", [0], 3]], [0]),
     'node 1 (RESHAPE): RESHAPE arg must be an array, got an int', SAME),
    ('reshape-rank', file([X, ["RESHAPE", "float32", [0], [1]*17]], [0]),
     'node 1 (RESHAPE): RESHAPE arg has 17 entries, over the rank limit of 16 (raise it: Limits(max_rank=...) in Python, uopgrad --limit max_rank=N on the command line)', SAME),
    ('reshape-float', file([X, ["RESHAPE", "float32", [0], [3.0]]], [0]),
     'node 1 (RESHAPE): RESHAPE arg must be a shape (ints), got [3.0]', SAME),
    ('flip-int', file([X, ["FLIP", "float32", [0], [1]]], [0]),
     'node 1 (FLIP): FLIP arg must be one bool per axis, got [1]', SAME),
    ('permute-bool', file([X, ["PERMUTE", "float32", [0], [False]]], [0]),
     'node 1 (PERMUTE): PERMUTE arg must be an axis order (ints), got [False]', SAME),
    ('expand-big', file([["PARAM", "float32", [], {"name": "x", "shape": [1, 1]}], ["EXPAND", "float32", [0], [1<<20, 1<<21]]], [0]),
     'node 1 (EXPAND): EXPAND result [1048576, 2097152] has 2199023255552 elements, over the limit of 1099511627776 (raise it: Limits(max_tensor_elements=...) in Python, uopgrad --limit max_tensor_elements=N on the command line)', SAME),
    ('pad-big', file([["PARAM", "float32", [], {"name": "x", "shape": [1, 1]}], ["PAD", "float32", [0], [[0, 1<<20], [0, 1<<21]]]], [0]),
     'node 1 (PAD): PAD result [1048577, 2097153] has 2199026401281 elements, over the limit of 1099511627776 (raise it: Limits(max_tensor_elements=...) in Python, uopgrad --limit max_tensor_elements=N on the command line)', SAME),
    ('pad-pair', file([X, ["PAD", "float32", [0], [[0, 1, 2]]]], [0]),
     'node 1 (PAD): PAD arg must be [[int, int]] per axis, got [[0, 1, 2]]', SAME),
    ('pad-float', file([X, ["PAD", "float32", [0], [[0, 1.0]]]], [0]),
     'node 1 (PAD): PAD arg must be [[int, int]] per axis, got [[0, 1.0]]', SAME),
    ('pad-int', file([X, ["PAD", "float32", [0], [1]]], [0]),
     'node 1 (PAD): PAD arg must be [[int, int]] per axis, got [1]', SAME),
    ('shrink-bool', file([X, ["SHRINK", "float32", [0], [[False, 1]]]], [0]),
     'node 1 (SHRINK): SHRINK arg must be [[int, int]] per axis, got [[False, 1]]', SAME),
    ('copy-arg', file([X, ["COPY", "float32", [0], ""]], [0]),
     "node 1 (COPY): COPY arg must be a device name (string), got ''", SAME),
    ('copy-int', file([X, ["COPY", "float32", [0], 1]], [0]),
     'node 1 (COPY): COPY arg must be a device name (string), got 1', SAME),
    ('function-arg', file([X, ["FUNCTION", "void", [0], "f"]], [0]),
     "node 1 (FUNCTION): FUNCTION arg must be a map with keys name; got 'f'", SAME),
    ('function-name', file([X, ["FUNCTION", "void", [0], {"name": ""}]], [0]),
     "node 1 (FUNCTION): FUNCTION name must be a non-empty string, got ''", SAME),
    ('call-grad', file([X, ["CALL", "void", [0], {"name": "c", "grad": 5}]], [0]),
     'node 1 (CALL): CALL grad 5 must be the index of an earlier node', SAME),
    ('call-grad-bool', file([X, ["CALL", "void", [0], {"name": "c", "grad": True}]], [0]),
     'node 1 (CALL): CALL grad True must be the index of an earlier node', SAME),
    ('call-grad-nottuple', file([X, ["CALL", "void", [0], {"name": "c", "grad": 0}]], [0]),
     'node 1 (CALL): CALL grad must be a TUPLE (the backward body), node 0 is PARAM', SAME),
    ('call-keys', file([X, ["CALL", "void", [0], {"name": "c", "x": 0}]], [0]),
     "node 1 (CALL): CALL arg must be a map with keys name, grad (optional); got {'name': 'c', 'x': 0}", SAME),
    ('gettuple-arg', file([X, ["GETTUPLE", "float32", [0], "0"]], [0]),
     "node 1 (GETTUPLE): GETTUPLE arg must be an int, got '0'", SAME),
    ('gettuple-bool', file([X, ["GETTUPLE", "float32", [0], True]], [0]),
     'node 1 (GETTUPLE): GETTUPLE arg must be an int, got True', SAME),
    ('depth', file([X, ["RESHAPE", "float32", [0], [[[[[[[[[[[[[[[[[[3]]]]]]]]]]]]]]]]]]]], [0]),
     'node 1 (RESHAPE): arg nests deeper than 16 levels (raise it: Limits(max_arg_depth=...) in Python, uopgrad --limit max_arg_depth=N on the command line)', SAME),
    ('core-misfit', file([X, ["RESHAPE", "float32", [0], [4]]], [0]),
     'node 1 (RESHAPE): RESHAPE -> float32: cannot reshape [3] to [4] (element counts differ) (sources: PARAM float32[3])', SAME),
]


@pytest.mark.parametrize("document, message, json_message", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_each_refusal_is_one_whole_line(document, message, json_message):
    limits = Limits(max_nodes=2) if document.get("nodes") == [X, X, X] else None
    assert line(msgpack.packb(document), limits) == f"f.uop: {message}"
    if json_message is not None:
        expected = message if json_message is SAME else json_message
        assert line(json.dumps(document).encode(), limits) == f"f.uop: {expected}"


GOOD = file([X], [0], [("y", 0)])
GOOD_MP, GOOD_JSON = msgpack.packb(GOOD), json.dumps(GOOD).encode()
TOO_LARGE = "file is larger than the limit of {} bytes (raise it: Limits(max_file_bytes=...) in Python, " \
    "uopgrad --limit max_file_bytes=N on the command line)"


@pytest.mark.parametrize("data, message", [
    (b"\xef\xbb\xbf" + GOOD_JSON, "the file starts with a UTF-8 byte-order mark: save the JSON form without one"),
    (b" \n\xef\xbb\xbf" + GOOD_JSON, "the file starts with a UTF-8 byte-order mark: save the JSON form without one"),
    (b"", "empty file: a .uop file is one MessagePack or JSON map"),
    (b" \t\r\n", "empty file: a .uop file is one MessagePack or JSON map"),
    (b" [1]", "not a .uop file: the top level is an array, not a map"),
    (b"[", "not a .uop file: the top level is an array, not a map"),
    (P.pack_map_header(1) + P.pack(1) + P.pack(2), "top-level keys are strings, got an int 1"),
    (P.pack_map_header(2) + P.pack("format") + P.pack("uop") + P.pack("format") + P.pack("uop"),
     "the key 'format' appears twice in the top-level map"),
    (P.pack_map_header(2) + P.pack("format") + P.pack("uop") + P.pack("version"),
     "truncated: the file ends after the key 'version'"),
    (P.pack_map_header(2) + P.pack("format") + P.pack("uop"), "truncated: the file ends inside the top-level map"),
    (P.pack_map_header(1) + P.pack("nodes") + b"\x92\x90", "truncated: the file ends inside the value of the key 'nodes'"),
    (P.pack_map_header(1) + P.pack("inputs") + b"\x92\x01", "truncated: the file ends inside the value of the key 'inputs'"),
    (GOOD_MP + b"\xc0", "trailing bytes after the file's map"),
    (b"\x05\x06\x07", "not a .uop file: the top level is an int, not a map (followed by 2 more bytes)"),
    (b"\x05", "not a .uop file: the top level is an int, not a map"),
    (P.pack("abc"), "not a .uop file: the top level is a string, not a map"),
    (b"\x92\x01", "truncated: the file ends inside its first value"),
    (b"\xc1", "not valid MessagePack: FormatError"),
    (b"\xc1\x00", "not valid MessagePack: FormatError"),
    (P.pack_map_header(1) + b"\xa2\xff\xfe" + P.pack(1),
     "not valid MessagePack: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (P.pack_map_header(1) + P.pack("meta") + b"\x91" * 2000 + b"\x90", "values nested too deeply for the MessagePack reader"),
    (b"\x91" * 3000 + b"\x90", "values nested too deeply for the MessagePack reader"),
    (P.pack_map_header(1) + P.pack("zz") + b"\x92\x01\x02",
     "not a .uop file: its map has no 'format' key (a .uop file's is 'uop')"),
    (msgpack.packb(file([X, ["SIN", "float32", [0], None]], [0])).replace(b"\xa3SIN", b"\xa3S\xffN"),
     "node 1: not valid MessagePack: 'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"),
    (b'{"format": "uop", "format": "uop"}', "the key 'format' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [["PARAM", "float32", [], {"name": "x", "name": "y", "shape": []}]], '
     b'"inputs": [], "outputs": []}', "node 0 (PARAM): the key 'name' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [["PARAM", "float32", [], {"name": "x", "shape": []}], '
     b'["SIN", "float32", [0], null, {"name": "a", "name": "b"}]], "inputs": [0], "outputs": []}',
     "node 1 (SIN): the key 'name' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [["FOO", "float32", [], {"a": 1, "a": 2}]], "inputs": [], '
     b'"outputs": []}', "node 0: the key 'a' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [[1, "float32", [], {"a": 1, "a": 2}]], "inputs": [], '
     b'"outputs": []}', "node 0: the key 'a' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [{"a": 1, "a": 2}], "inputs": [], "outputs": []}',
     "node 0: the key 'a' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": [], "inputs": [], "outputs": [], "meta": {"a": "1", "a": "2"}}',
     "the key 'a' appears twice in one object"),
    (b'{"format": "uop", "version": 1, "nodes": {"a": 1, "a": 2}, "inputs": [], "outputs": []}',
     "the key 'a' appears twice in one object"),
    (b'{"nodes": [1, {"b": 1, "c": 2, "b": 3}]}', "node 1: the key 'b' appears twice in one object"),
    (GOOD_JSON + b" 1", "trailing bytes after the file's map (Extra data: line 1 column 137 (char 136))"),
    (b'{"a": }', "not valid JSON: Expecting value: line 1 column 7 (char 6)"),
    (b'{"a": NaN}', 'not valid JSON: NaN is not JSON; write a non-finite float as {"float": "nan" | "inf" | "-inf"}'),
    (b'{"a": -Infinity}', 'not valid JSON: -Infinity is not JSON; write a non-finite float as {"float": "nan" | '
     '"inf" | ...'),
    (b'{"a": -1e400}', 'not valid JSON: number -1e400 is too large for a float64; write infinity as {"float": "inf"}'),
    (b'{"a": 1e308}', "not a .uop file: its map has no 'format' key (a .uop file's is 'uop')"),
    (b'{"a": "\xff"}', "not valid UTF-8 text: 'utf-8' codec can't decode byte 0xff in position 7: invalid start byte"),
    (b'{"a": "\\udc00"}', "not valid UTF-8 text: 'utf-8' codec can't encode character '\\udc00' in position 7: "
     "surrogates not a..."),
    (b'{"a": "\\uD83D"}', "not valid UTF-8 text: 'utf-8' codec can't encode character '\\ud83d' in position 7: "
     "surrogates not a..."),
    (b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", "values nested too deeply for the JSON reader"),
])
def test_each_refusal_of_the_bytes_is_one_whole_line(data, message):
    assert line(data) == f"f.uop: {message}"


def test_a_surrogate_pair_is_one_character():
    data = b'{"format": "uop", "version": 1, "nodes": [], "inputs": [], "outputs": [], "meta": {"a": "\\ud83d\\ude00"}}'
    assert load(data).meta == {"a": "\U0001F600"}


def test_the_size_limit_at_its_edge_and_what_the_file_is_called(tmp_path):
    size = len(GOOD_MP)
    assert line(GOOD_MP, Limits(max_file_bytes=size - 1)) == "f.uop: " + TOO_LARGE.format(size - 1)
    assert load(GOOD_MP, limits=Limits(max_file_bytes=size)).outputs["y"].shape == (3,)
    assert line(GOOD_JSON, Limits(max_file_bytes=len(GOOD_JSON) - 1)) == "f.uop: " + TOO_LARGE.format(len(GOOD_JSON) - 1)
    assert loads(GOOD_JSON.decode(), limits=Limits(max_file_bytes=len(GOOD_JSON))).inputs[0].arg == "x"
    with pytest.raises(FormatError) as info:
        loads(GOOD_MP, limits=Limits(max_file_bytes=size - 1))
    assert str(info.value) == "<bytes>: " + TOO_LARGE.format(size - 1)
    for data in (b"", bytearray(), memoryview(b"")):
        with pytest.raises(FormatError) as info:
            load(data)
        assert str(info.value) == "<bytes>: empty file: a .uop file is one MessagePack or JSON map"
    assert load(bytearray(GOOD_MP)).outputs["y"].shape == (3,)
    assert load(memoryview(GOOD_JSON)).outputs["y"].shape == (3,)
    path = tmp_path / "g.uop"
    path.write_bytes(GOOD_MP)
    assert load(path).outputs["y"].shape == (3,) and load(str(path)).inputs[0].arg == "x"
    with pytest.raises(FormatError) as info:
        load(path, limits=Limits(max_file_bytes=size - 1))
    assert str(info.value) == f"{path}: " + TOO_LARGE.format(size - 1)
    assert read_bytes(path, limits=Limits(max_file_bytes=size)) == GOOD_MP
    with pytest.raises(FormatError) as info:
        read_bytes(path, limits=Limits(max_file_bytes=size - 1), name="named")
    assert str(info.value) == "named: " + TOO_LARGE.format(size - 1)
    path.write_bytes(b"")
    with pytest.raises(FormatError) as info:
        load(path, name="shown")
    assert str(info.value) == "shown: empty file: a .uop file is one MessagePack or JSON map"
    with pytest.raises(FormatError) as info:
        load(tmp_path / "none.uop")
    assert str(info.value) == f"{tmp_path / 'none.uop'}: cannot read: No such file or directory"
    with pytest.raises(FormatError) as info:
        load(tmp_path)
    assert str(info.value) == f"{tmp_path}: cannot read: Is a directory"


class _Named(io.BytesIO):
    name = "s.uop"


class _Failing(io.BytesIO):
    def read(self, size=-1):
        raise OSError(5, "Input/output error")


def test_streams():
    size = len(GOOD_MP)
    assert load(io.BytesIO(GOOD_MP), limits=Limits(max_file_bytes=size)).inputs[0].arg == "x"
    assert read_bytes(io.BytesIO(GOOD_MP), limits=Limits(max_file_bytes=size)) == GOOD_MP
    for stream, limits, message in [
        (io.BytesIO(GOOD_MP), Limits(max_file_bytes=size - 1), "<stream>: " + TOO_LARGE.format(size - 1)),
        (_Named(b""), None, "s.uop: empty file: a .uop file is one MessagePack or JSON map"),
        (io.StringIO("{}"), None, "<stream>: needs a binary file object (open the file with 'rb')"),
        (_Failing(), None, "<stream>: cannot read: Input/output error"),
    ]:
        with pytest.raises(FormatError) as info:
            load(stream, limits=limits)
        assert str(info.value) == message
    with pytest.raises(FormatError) as info:
        load(_Named(b""), name="given")
    assert str(info.value) == "given: empty file: a .uop file is one MessagePack or JSON map"
    with pytest.raises(FormatError) as info:
        read_bytes(io.StringIO("{}"), name="given")
    assert str(info.value) == "given: needs a binary file object (open the file with 'rb')"
    with pytest.raises(TypeError) as info:
        load(3)
    assert str(info.value) == "load() takes a path, bytes or a binary file object, not int"


def test_the_stream_is_read_one_byte_past_the_limit_only():
    reads = []

    class Counting(io.BytesIO):
        def read(self, size=-1):
            reads.append(size)
            return super().read(size)
    with pytest.raises(FormatError):
        load(Counting(b"\x00" * 100), limits=Limits(max_file_bytes=10))
    assert reads == [11]


def one(document, form="msgpack", limits=None, name="f.uop"):
    data = json.dumps(document).encode() if form == "json" else msgpack.packb(document)
    return load(data, limits=limits, name=name)


def refusal(document, form="msgpack", limits=None) -> str:
    data = json.dumps(document).encode() if form == "json" else msgpack.packb(document)
    return line(data, limits)


DTYPE_NAMES = "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, void"


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_what_the_slow_diagnosis_says(form):
    assert refusal(file([[None, "float32", [], None]]), form) == "f.uop: node 0: unknown op None"
    assert refusal(file([[["SIN"], "float32", [], None]]), form) == "f.uop: node 0 (['SIN']): unknown op ['SIN']"
    assert refusal(file([["SIN", 5, [], None]]), form) == f"f.uop: node 0 (SIN): unknown dtype 5 (one of {DTYPE_NAMES})"
    assert refusal(file([["SIN", [1], [], None]]), form) == \
        f"f.uop: node 0 (SIN): unknown dtype [1] (one of {DTYPE_NAMES})"
    assert refusal(file([X, ["SIN", "float32", [0.0], None]], [0]), form) == \
        "f.uop: node 1 (SIN): source 0.0 is not the index of an earlier node (this is node 1)"
    assert refusal(file([X, X, ["WHERE", "float32", [0, 1, 2], None]], [0]), form) == \
        "f.uop: node 2 (WHERE): source 2 is not the index of an earlier node (this is node 2)"
    long = int("1" * 400)  # JSON only: MessagePack's ints stop at 64 bits
    message = refusal(file([["CONST", "int64", [], long]]), "json")
    assert message == "f.uop: node 0 (CONST): " + f"CONST {long} does not fit int64"[:297] + "..."


def test_a_malformed_node_and_a_bad_meta_beside_it():
    bad = ["CONST", "float32", [], {"float": ["x"]}]
    assert refusal(file([bad]), "json") == "f.uop: node 0 (CONST): malformed CONST node: TypeError: unhashable type: " \
        "'list'"
    assert refusal(file([bad + [{"name": "a"}]]), "json") == "f.uop: node 0 (CONST): malformed CONST node: " \
        "TypeError: unhashable type: 'list'"
    assert refusal(file([bad + [{"name": 1}]]), "json") == "f.uop: node 0 (CONST): node meta 'name', 'loc' and " \
        "'scope' must be strings"
    assert refusal(file([bad + [{"backward": [1]}]]), "json") == "f.uop: node 0 (CONST): node meta 'backward' must " \
        "be a bool, got [1]"
    assert refusal(file([bad + [{"zz": "a"}]]), "json") == "f.uop: node 0 (CONST): node meta holds only 'name', " \
        "'loc', 'scope' (strings) and 'backward' (bool); got 'zz'"
    assert refusal(file([["CONST", "float32", [], 1.0, {"name": [1]}]])) == "f.uop: node 0 (CONST): node meta " \
        "'name', 'loc' and 'scope' must be strings"


DEPTH = "arg nests deeper than {} (raise it: Limits(max_arg_depth=...) in Python, uopgrad --limit " \
    "max_arg_depth=N on the command line)"


def test_a_lowered_arg_depth_limit():
    two = ["CONST", "float32", [], 1.0]
    for arg, limit, words in [({"a": {"b": 1}}, 1, "1 level"), ([[1]], 1, "1 level"), ([1], 0, "0 levels"),
                              ({"a": [[[1]]]}, 3, "3 levels")]:
        assert refusal(file([two, ["COPY", "float32", [0], arg]]), limits=Limits(max_arg_depth=limit)) == \
            f"f.uop: node 1 (COPY): {DEPTH.format(words)}"
    assert refusal(file([two, ["COPY", "float32", [0], {"a": 1}]]), limits=Limits(max_arg_depth=1)) == \
        "f.uop: node 1 (COPY): COPY arg must be a device name (string), got {'a': 1}"
    assert refusal(file([two, ["COPY", "float32", [0], [[1], 2]]]), limits=Limits(max_arg_depth=2)) == \
        "f.uop: node 1 (COPY): COPY arg must be a device name (string), got [[1], 2]"
    graph = one(file([X, ["PAD", "float32", [0], [[0, 1]]]], [0], [("y", 1)]), limits=Limits(max_arg_depth=2))
    assert graph.outputs["y"].shape == (4,)
    assert refusal(file([X], [0]), limits=Limits(max_arg_depth=1)) == f"f.uop: node 0 (PARAM): {DEPTH.format('1 level')}"
    deep = [[[[[[[[[[[[[[[[[3]]]]]]]]]]]]]]]]]
    assert refusal(file([X, ["RESHAPE", "float32", [0], deep]], [0]), "json") == \
        f"f.uop: node 1 (RESHAPE): {DEPTH.format('16 levels')}"
    assert refusal(file([X, ["RESHAPE", "float32", [0], deep]], [0]), limits=Limits(max_arg_depth=17)) == \
        "f.uop: node 1 (RESHAPE): RESHAPE arg must be a shape (ints), got " + repr(deep)


ELEMENTS = "(raise it: Limits(max_tensor_elements=...) in Python, uopgrad --limit max_tensor_elements=N on the " \
    "command line)"


def test_limits_at_their_edges():
    assert one(file([X, X], [0]), limits=Limits(max_nodes=2)).inputs[0].shape == (3,)
    assert refusal(file([X, X, X], [0]), limits=Limits(max_nodes=2)) == "f.uop: 3 nodes exceed the limit of 2 " \
        "(raise it: Limits(max_nodes=...) in Python, uopgrad --limit max_nodes=N on the command line)"
    square = ["PARAM", "float32", [], {"name": "x", "shape": [2, 2]}]
    assert one(file([square], [0]), limits=Limits(max_tensor_elements=4)).inputs[0].shape == (2, 2)
    assert refusal(file([square], [0]), limits=Limits(max_tensor_elements=3)) == "f.uop: node 0 (PARAM): PARAM " \
        f"shape [2, 2] has 4 elements, over the limit of 3 {ELEMENTS}"
    cube = ["PARAM", "float32", [], {"name": "x", "shape": [1, 1, 1]}]
    assert one(file([cube], [0]), limits=Limits(max_rank=3)).inputs[0].shape == (1, 1, 1)
    assert one(file([X, ["RESHAPE", "float32", [0], [3, 1, 1]]], [0]), limits=Limits(max_rank=3)).inputs
    assert refusal(file([X, ["RESHAPE", "float32", [0], [3, 1, 1, 1]]], [0]), limits=Limits(max_rank=3)) == \
        "f.uop: node 1 (RESHAPE): RESHAPE arg has 4 entries, over the rank limit of 3 (raise it: " \
        "Limits(max_rank=...) in Python, uopgrad --limit max_rank=N on the command line)"
    empty = ["PARAM", "float32", [], {"name": "x", "shape": [0, 5]}]
    reduce = ["REDUCE", "float32", [0], ["ADD", [0]]]
    assert refusal(file([empty, reduce], [0]), limits=Limits(max_tensor_elements=4)) == \
        f"f.uop: node 1 (REDUCE): REDUCE result [1, 5] has 5 elements, over the limit of 4 {ELEMENTS}"
    assert one(file([empty, reduce], [0], [("y", 1)]), limits=Limits(max_tensor_elements=5)).outputs["y"].shape == \
        (1, 5)
    row = ["PARAM", "float32", [], {"name": "x", "shape": [1, 3]}]
    for node, shape in [(["EXPAND", "float32", [0], [2, 3]], "EXPAND result [2, 3]"),
                        (["PAD", "float32", [0], [[0, 1], [0, 0]]], "PAD result [2, 3]")]:
        assert refusal(file([row, node], [0]), limits=Limits(max_tensor_elements=5)) == \
            f"f.uop: node 1 ({node[0]}): {shape} has 6 elements, over the limit of 5 {ELEMENTS}"
        assert one(file([row, node], [0], [("y", 1)]), limits=Limits(max_tensor_elements=6)).outputs["y"].shape == \
            (2, 3)
    # two EXPANDs to one shape: the second is as large as the first, both within the limit
    twice = [row, ["EXPAND", "float32", [0], [2, 3]], ["NEG", "float32", [0], None], ["EXPAND", "float32", [2], [2, 3]]]
    assert one(file(twice, [0], [("a", 1), ("b", 3)]), limits=Limits(max_tensor_elements=6)).outputs["b"].shape == \
        (2, 3)


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_constants_load_exactly(form):
    consts = [["CONST", "float64", [], -0.0], ["CONST", "float32", [], 2], ["CONST", "uint64", [], 2 ** 64 - 1],
              ["CONST", "int8", [], -128], ["CONST", "bool", [], False], ["CONST", "float16", [], 1e-300],
              ["CONST", "int64", [], -(2 ** 63)]]
    graph = one(file(consts, [], [(f"c{i}", i) for i in range(len(consts))]), form)
    values = [graph.outputs[f"c{i}"].arg for i in range(len(consts))]
    assert _bits(values[0]) == _bits(-0.0) and type(values[1]) is float and values[1] == 2.0
    assert values[2:5] == [2 ** 64 - 1, -128, False] and type(values[4]) is bool and type(values[2]) is int
    assert values[5] == 1e-300 and values[6] == -(2 ** 63)
    assert [graph.outputs[f"c{i}"].dtype for i in range(len(consts))] == \
        [dtypes.float64, dtypes.float32, dtypes.uint64, dtypes.int8, dtypes.bool, dtypes.float16, dtypes.int64]


def test_non_finite_constants():
    nan_bits = struct.pack("<d", float("nan"))
    odd_nan = struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\xff")[0]
    graph = one(file([["CONST", "float64", [], odd_nan]], [], [("n", 0)]))
    assert graph.outputs["n"].arg is math.nan and struct.pack("<d", graph.outputs["n"].arg) == nan_bits
    spelled = [["CONST", "float32", [], {"float": "nan"}], ["CONST", "float64", [], {"float": "inf"}],
               ["CONST", "float16", [], {"float": "-inf"}]]
    graph = one(file(spelled, [], [("a", 0), ("b", 1), ("c", 2)]), "json")
    assert graph.outputs["a"].arg is math.nan
    assert graph.outputs["b"].arg == math.inf and graph.outputs["c"].arg == -math.inf
    assert [graph.outputs[k].dtype for k in "abc"] == [dtypes.float32, dtypes.float64, dtypes.float16]
    for arg, message in [({"float": "Inf"}, "CONST arg map must be {\"float\": \"nan\" | \"inf\" | \"-inf\"}, got "
                          "{'float': 'Inf'}"),
                         ({"float": "inf", "x": 1}, "CONST arg map must be {\"float\": \"nan\" | \"inf\" | \"-inf\"}, "
                          "got {'float': 'inf', 'x': 1}"),
                         ({}, "CONST arg map must be {\"float\": \"nan\" | \"inf\" | \"-inf\"}, got {}")]:
        assert refusal(file([["CONST", "float32", [], arg]]), "json") == f"f.uop: node 0 (CONST): {message}"
    assert refusal(file([["CONST", "int32", [], {"float": "inf"}]]), "json") == \
        "f.uop: node 0 (CONST): CONST int32 needs an int, got {'float': 'inf'}"
    assert refusal(file([["CONST", "float32", [], {"float": "inf"}]])) == \
        "f.uop: node 0 (CONST): CONST float32 needs a float, got {'float': 'inf'}"
    assert refusal(file([X, ["CONST", "float32", [0], {"float": "inf"}]], [0]), "json") == \
        "f.uop: node 1 (CONST): CONST takes no sources, got 1"


def test_buffers_load_bit_exactly():
    values = np.array([[1.5, -0.0], [np.nan, -np.inf]], np.float32)
    raw = values.tobytes()
    flags = bytes([0, 1, 1])
    nodes = [["BUFFER", "float32", [], {"shape": [2, 2], "data": raw}],
             ["BUFFER", "bool", [], {"shape": [3], "data": flags}],
             ["BUFFER", "uint8", [], {"shape": [0], "data": b""}]]
    for form in ("msgpack", "json"):
        if form == "json":
            import base64
            data = json.dumps(file([[*n[:3], {"shape": n[3]["shape"], "data": {"b64": base64.b64encode(n[3]["data"])
                                                                               .decode()}}] for n in nodes], [],
                                   [("a", 0), ("b", 1), ("c", 2)])).encode()
        else:
            data = msgpack.packb(file(nodes, [], [("a", 0), ("b", 1), ("c", 2)]))
        graph = load(data)
        a, b, c = (graph.outputs[k] for k in "abc")
        assert (a.op, a.arg, a.shape, a.dtype) == (Ops.BUFFER, raw, (2, 2), dtypes.float32)
        assert (b.arg, b.shape, b.dtype) == (flags, (3,), dtypes.bool)
        assert (c.arg, c.shape, c.dtype) == (b"", (0,), dtypes.uint8)
        assert a.buffer_array().tobytes() == raw


def test_json_buffers_refused():
    node = ["BUFFER", "uint8", [], {"shape": [3], "data": None}]
    for data, message in [
        ("AAAA", "BUFFER data must be {\"b64\": \"<base64>\"} in the JSON form, got 'AAAA'"),
        ({"b64": 1}, "BUFFER data must be {\"b64\": \"<base64>\"} in the JSON form, got {'b64': 1}"),
        ({"b64": "AAAA", "x": 1}, "BUFFER data must be {\"b64\": \"<base64>\"} in the JSON form, got {'b64': "
         "'AAAA', 'x': 1}"),
        ({"B64": "AAAA"}, "BUFFER data must be {\"b64\": \"<base64>\"} in the JSON form, got {'B64': 'AAAA'}"),
        ({"b64": "AAAA===="}, "BUFFER data is not valid base64 (standard alphabet, padded to 4): 'AAAA===='"),
        ({"b64": "AA-A"}, "BUFFER data is not valid base64 (standard alphabet, padded to 4): 'AA-A'"),
        ({"b64": "AAA"}, "BUFFER data is not valid base64 (standard alphabet, padded to 4): 'AAA'"),
        ({"b64": "AAAAAA=="}, "BUFFER data has 4 bytes, but uint8[3] needs 3"),
    ]:
        node[3]["data"] = data
        assert refusal(file([node]), "json") == f"f.uop: node 0 (BUFFER): {message}"
    node[3] = {"shape": [3]}
    assert refusal(file([node]), "json") == "f.uop: node 0 (BUFFER): BUFFER arg must be a map with keys data, " \
        "shape; got {'shape': [3]}"
    node[3] = {"shape": [2], "data": {"b64": "AAE="}}
    assert one(file([node], [], [("b", 0)]), "json").outputs["b"].arg == b"\x00\x01"
    node[1] = "bool"
    assert one(file([node], [], [("b", 0)]), "json").outputs["b"].arg == b"\x00\x01"
    node[3] = {"shape": [2], "data": {"b64": "AAI="}}
    assert refusal(file([node]), "json") == "f.uop: node 0 (BUFFER): BUFFER bool data must hold only bytes 0 and 1"


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_node_meta(form):
    x = ["PARAM", "float32", [], {"name": "x", "shape": [3]}, {"name": "inp", "loc": "a.py:1", "scope": "s"}]
    nodes = [x, ["SIN", "float32", [0], None, {"backward": True}], ["NEG", "float32", [0], None, {}],
             ["SQRT", "float32", [0], None, {"backward": False}], ["EXP2", "float32", [0], None, {"backward": True}]]
    graph = one(file(nodes, [0], [("s", 1), ("n", 2), ("q", 3), ("e", 4)]), form)
    assert graph.inputs[0].meta == Metadata("inp", "a.py:1", False, "s")
    assert graph.outputs["s"].meta == Metadata(None, None, True, None)
    assert graph.outputs["e"].meta is graph.outputs["s"].meta  # an equal map: one tag
    assert graph.outputs["n"].meta is None and graph.outputs["q"].meta is None
    # the map remembered for {"backward": True} is not taken for {"backward": 1} (1 == True)
    nodes[4] = ["EXP2", "float32", [0], None, {"backward": 1}]
    assert refusal(file(nodes, [0]), form) == "f.uop: node 4 (EXP2): node meta 'backward' must be a bool, got 1"
    nodes[4] = ["EXP2", "float32", [0], None, {"backward": True, "name": None}]
    assert refusal(file(nodes, [0]), form) == "f.uop: node 4 (EXP2): node meta holds only 'name', 'loc', 'scope' " \
        "(strings) and 'backward' (bool); got nil"
    nodes[4] = ["EXP2", "float32", [0], None, {"name": "n", "loc": 1}]
    assert refusal(file(nodes, [0]), form) == "f.uop: node 4 (EXP2): node meta 'name', 'loc' and 'scope' must be " \
        "strings"
    nodes[4] = ["EXP2", "float32", [0], None, {"scope": 1}]
    assert refusal(file(nodes, [0]), form) == "f.uop: node 4 (EXP2): node meta 'name', 'loc' and 'scope' must be " \
        "strings"


def test_the_file_is_the_truth_for_a_node_alive_with_another_tag():
    x = UOp.param("x", (3,))
    tagged = x.sin().set_meta(Metadata("old"))
    nodes = [X, ["SIN", "float32", [0], None]]
    graph = one(file(nodes, [0], [("y", 1)]))
    assert graph.outputs["y"] is tagged and tagged.meta is None
    nodes[1] = ["SIN", "float32", [0], None, {"name": "new"}]
    assert one(file(nodes, [0], [("y", 1)])).outputs["y"].meta == Metadata("new")


def test_file_meta_is_sorted_and_inputs_and_outputs_keep_their_order():
    y = ["PARAM", "int32", [], {"name": "y", "shape": []}]
    nodes = [X, y, ["CAST", "float32", [1], None], ["MUL", "float32", [0, 2], None]]
    document = file(nodes, [1, 0], [("z", 3), ("a", 0)], meta={"b": "2", "a": "1"})
    for form in ("msgpack", "json"):
        graph = one(document, form)
        assert list(graph.meta.items()) == [("a", "1"), ("b", "2")]
        assert [i.arg for i in graph.inputs] == ["y", "x"] and list(graph.outputs) == ["z", "a"]
        assert graph.outputs["z"].src[1].src[0] is graph.inputs[0]
    assert one(file([X], [0])).meta == {}


def _body(slot_shape=(3,)):
    return [["PARAM", "float32", [], {"slot": 0, "shape": list(slot_shape)}], ["SIN", "float32", [0], None],
            ["TUPLE", "void", [1], None]]


def test_slots_inside_bodies_load_and_a_free_one_is_named():
    nodes = [X, *_body(), ["FUNCTION", "void", [3, 0], {"name": "f"}], ["GETTUPLE", "float32", [4], 0]]
    graph = one(file(nodes, [0], [("y", 5)]))
    out = graph.outputs["y"]
    assert (out.op, out.shape, out.src[0].arg, out.src[0].src[1] is graph.inputs[0]) == (Ops.GETTUPLE, (3,), "f", True)
    free = [X, ["PARAM", "float32", [], {"slot": 2, "shape": [3]}], ["ADD", "float32", [0, 1], None]]
    assert refusal(file(free, [0], [("y", 2)])) == "f.uop: node 1 (PARAM): slot PARAM 2 is used outside any " \
        "FUNCTION or CALL body"
    both = [*nodes, ["PARAM", "float32", [], {"slot": 0, "shape": [3]}], ["ADD", "float32", [5, 6], None]]
    assert refusal(file(both, [0], [("y", 5), ("z", 7)])) == "f.uop: node 1 (PARAM): slot PARAM 0 is used outside " \
        "any FUNCTION or CALL body"
    assert one(file([*_body()], [], [])).outputs == {}  # a slot no output reaches


def test_calls_load_with_their_backward_bodies():
    nodes = [X, *_body(), ["PARAM", "float32", [], {"slot": 1, "shape": [3]}], ["TUPLE", "void", [4], None],
             ["CALL", "void", [3, 0], {"name": "c", "grad": 5}], ["GETTUPLE", "float32", [6], 0]]
    graph = one(file(nodes, [0], [("y", 7)]))
    call = graph.outputs["y"].src[0]
    assert call.arg.name == "c" and call.arg.grad.op == Ops.TUPLE and call.arg.grad.src[0].arg == 1
    nodes[6] = ["CALL", "void", [3, 0], {"name": "c"}]
    assert one(file(nodes, [0], [("y", 7)])).outputs["y"].src[0].arg.grad is None
    nodes[6] = ["CALL", "void", [3, 0], {"name": "c", "grad": 7}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (CALL): CALL grad 7 must be the index of an earlier node"
    nodes[6] = ["CALL", "void", [3, 0], {"name": "c", "grad": 6}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (CALL): CALL grad 6 must be the index of an earlier node"
    nodes[6] = ["CALL", "void", [3, 0], {"name": "c", "grad": -1}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (CALL): CALL grad -1 must be the index of an earlier node"
    nodes[6] = ["CALL", "void", [3, 0], {"name": 5, "grad": 5}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (CALL): CALL name must be a non-empty string, got 5"
    nodes[6] = ["CALL", "void", [3, 0], {"grad": 5}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (CALL): CALL arg must be a map with keys name, grad " \
        "(optional); got {'grad': 5}"
    nodes[6] = ["FUNCTION", "void", [3, 0], {"name": "f", "grad": 5}]
    assert refusal(file(nodes, [0])) == "f.uop: node 6 (FUNCTION): FUNCTION arg must be a map with keys name; " \
        "got {'name': 'f', 'grad': 5}"


def test_named_inputs():
    y3 = ["PARAM", "float32", [], {"name": "x", "shape": [3]}]
    graph = one(file([X, y3, ["ADD", "float32", [0, 1], None]], [0], [("s", 2)]))  # the same PARAM twice
    assert graph.outputs["s"].src == (graph.inputs[0], graph.inputs[0])
    other = ["PARAM", "float64", [], {"name": "x", "shape": [3]}]
    assert refusal(file([X, other], [0])) == "f.uop: node 1 (PARAM): duplicate input name 'x': node 0 is a PARAM " \
        "of that name with another shape or dtype"
    two = file([X, ["PARAM", "float32", [], {"name": "w", "shape": []}]], [0])
    assert refusal(two) == "f.uop: node 1 (PARAM): graph input PARAM 'w' is not listed in 'inputs'"
    assert refusal(file([X], [-1])) == "f.uop: input -1 is not a node index (the file has 1 nodes)"
    assert refusal(file([X], [1])) == "f.uop: input 1 is not a node index (the file has 1 nodes)"
    assert refusal(file([X], [0.0])) == "f.uop: input 0.0 is not a node index (the file has 1 nodes)"
    assert refusal(file([X], [0], [("y", -1)])) == "f.uop: output 'y': -1 is not a node index (the file has 1 nodes)"
    assert refusal(file([X], [0], [("", 0)])) == "f.uop: output name '' must be a non-empty string without '=', ',' " \
        "or whitespace"
    assert refusal(file([X], [0], [(1, 0)])) == "f.uop: output name 1 must be a non-empty string without '=', ',' " \
        "or whitespace"
    assert refusal(file([X], [0]) | {"outputs": [["y", 0, 1]]}) == "f.uop: an output must be [name, index], got " \
        "['y', 0, 1]"
    assert refusal(file([X], [0]) | {"outputs": ["y0"]}) == "f.uop: an output must be [name, index], got 'y0'"


def test_save_and_load_keep_a_graph_built_here():
    x = UOp.param("x", (2, 3))
    y = (x.sum(1) * 0.5).reshape(2).pad(((1, 0),)).shrink(((0, 2),))
    for form in ("msgpack", "json"):
        graph = loads(save(__import__("uopcli").Graph({"y": y}, [x]), form=form))
        assert graph.outputs["y"] is y and graph.inputs == [x]


def test_read_bytes_names_a_stream_by_its_name():
    with pytest.raises(FormatError) as info:
        read_bytes(_Named(b"12345"), limits=Limits(max_file_bytes=2))
    assert str(info.value) == "s.uop: " + TOO_LARGE.format(2)
    with pytest.raises(FormatError) as info:
        read_bytes(_Failing())
    assert str(info.value) == "<stream>: cannot read: Input/output error"


def test_a_file_over_the_limit_is_refused_by_its_size_unread(tmp_path, monkeypatch):
    from uopcli.formats.uop import reader
    path = tmp_path / "big.uop"
    path.write_bytes(GOOD_MP)
    reads = []

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def fileno(self):
            return self.handle.fileno()

        def read(self, size=-1):
            reads.append(size)
            return self.handle.read(size)

    def counting_open(*args, **kwargs):
        return Counted(open(*args, **kwargs))
    monkeypatch.setattr(reader, "open", counting_open, raising=False)
    with pytest.raises(FormatError) as info:
        read_bytes(path, limits=Limits(max_file_bytes=10))
    assert str(info.value) == f"{path}: " + TOO_LARGE.format(10) and reads == []
    assert read_bytes(path, limits=Limits(max_file_bytes=len(GOOD_MP))) == GOOD_MP
    assert reads == [len(GOOD_MP) + 1]


def test_a_repeated_key_is_placed_past_nulls_and_maps_of_earlier_nodes():
    data = (b'{"format": "uop", "version": 1, "nodes": [["PARAM", "float32", [], {"name": "x", "shape": [3]}], '
            b'["SIN", "float32", [0], null], ["NEG", "float32", [0], null, {"name": "a", "name": "b"}]], '
            b'"inputs": [0], "outputs": []}')
    assert line(data) == "f.uop: node 2 (NEG): the key 'name' appears twice in one object"


def test_a_map_key_that_is_not_a_string_is_refused_wherever_it_is():
    top = msgpack.packb({"format": "uop", "version": 1, "nodes": [], "inputs": [], "outputs": [], "meta": {1: "a"}})
    assert line(top) == "f.uop: not valid MessagePack: int is not allowed for map key when strict_map_key=True"
    node = msgpack.packb(file([["PARAM", "float32", [], {1: 2, "shape": []}]]))
    assert line(node) == "f.uop: node 0: not valid MessagePack: int is not allowed for map key when strict_map_key=True"
    assert line(b"\x91\x81\x01\x02") == "f.uop: not valid MessagePack: int is not allowed for map key when " \
        "strict_map_key=True"


def test_more_decoder_lines():
    for arg, message in [({"shape": [-1], "data": b""}, "BUFFER shape must be an array of non-negative ints, got [-1]"),
                         ({"shape": 2, "data": b""}, "BUFFER shape must be an array of non-negative ints, got 2")]:
        assert refusal(file([["BUFFER", "uint8", [], arg]])) == f"f.uop: node 0 (BUFFER): {message}"
    json_buffer = ["BUFFER", "uint8", [0], {"shape": [1], "data": {"b64": "AA=="}}]
    assert refusal(file([X, json_buffer], [0]), "json") == "f.uop: node 1 (BUFFER): BUFFER takes no sources, got 1"
    json_buffer = ["BUFFER", "uint8", [], {"shape": [1], "data": {"b64": "AA=="}, "x": 1}]
    assert refusal(file([json_buffer]), "json") == "f.uop: node 0 (BUFFER): BUFFER arg must be a map with keys " \
        "data, shape; got {'shape': [1], 'data': {'b64': 'AA=='}, 'x': 1}"
    assert refusal(file(None)) == "f.uop: 'nodes' must be an array, got nil"
    assert refusal(file([]) | {"inputs": None}) == "f.uop: 'inputs' must be an array of node indices, got nil"


def test_a_backward_body_may_be_node_0():
    nodes = [["TUPLE", "void", [], None], ["CONST", "float32", [], 1.5], ["TUPLE", "void", [1], None],
             ["CALL", "void", [2], {"name": "c", "grad": 0}], ["GETTUPLE", "float32", [3], 0]]
    for form in ("msgpack", "json"):
        call = one(file(nodes, [], [("y", 4)]), form).outputs["y"].src[0]
        assert call.arg.grad.op == Ops.TUPLE and call.arg.grad.src == ()


def test_a_refusal_outside_the_nodes_names_no_node_and_no_op():
    with pytest.raises(FormatError) as info:
        load(msgpack.packb(file([X], [])), name="f.uop")
    assert (info.value.source, info.value.node, info.value.op) == ("f.uop", 0, Ops.PARAM)
    for data in (msgpack.packb(file([X], [0], [("y", 5)])), b"", msgpack.packb(file([X], [0]) | {"x": 1})):
        with pytest.raises(FormatError) as info:
            load(data, name="f.uop")
        assert (info.value.source, info.value.node, info.value.op) == ("f.uop", None, None)


def test_shorten_keeps_a_line_one_line():
    from uopcli.formats.uop.decoders import kind_of, shorten
    assert shorten("a\nb\rc") == "a\\nb\\rc"
    assert shorten("x" * 80) == "x" * 80 and shorten("x" * 81) == "x" * 77 + "..."
    assert shorten("ab\ncd", 4) == "a..."
    assert [kind_of(v) for v in ({}, [], "", b"", 1, 1.0, True, None, ())] == \
        ["a map", "an array", "a string", "bin", "an int", "a float", "a bool", "nil", "tuple"]


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_meta_maps_differing_in_one_value_give_their_own_tags(form):
    metas = [{"name": "a", "loc": "x"}, {"name": "a", "loc": "y"}, {"name": "b", "loc": "y"},
             {"name": "b", "loc": "y", "scope": "s"}, {"name": "b", "loc": "y", "scope": "t"},
             {"name": "b", "loc": "y", "scope": "t", "backward": True}, {"name": "b", "loc": "y", "scope": "t"}]
    ops = ["SIN", "NEG", "SQRT", "EXP2", "LOG2", "RECIPROCAL", "TRUNC"]
    nodes = [X] + [[op, "float32", [0], None, meta] for op, meta in zip(ops, metas)]
    graph = one(file(nodes, [0], [(op, i + 1) for i, op in enumerate(ops)]), form)
    assert [graph.outputs[op].meta for op in ops] == [
        Metadata("a", "x"), Metadata("a", "y"), Metadata("b", "y"), Metadata("b", "y", False, "s"),
        Metadata("b", "y", False, "t"), Metadata("b", "y", True, "t"), Metadata("b", "y", False, "t")]
