"""File format v1: round trips of every op and dtype, canonical bytes, the schema, the
refusals of the contract (each naming the node), limits, and the load/save API."""

from __future__ import annotations

import glob
import io
import json
import math
import os
import pathlib
import subprocess
import sys

import msgpack
import pytest

import uopcli
from uopcli import FormatError, Graph, Limits, Metadata, Ops, UOp, dtypes, load, save, toposort
from uopcli.formats.uop import dump_parts, dumps, loads, write_parts
from uopcli.core.ops import ALL_OPS, DTYPES

from fileformat_cases import CASES, all_graphs, ops_used

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "schemas" / "uop.schema.json"


@pytest.fixture(scope="module")
def graphs():
    return all_graphs()


def every_node(graph: Graph) -> list[UOp]:
    """The graph's nodes including CALL backward bodies."""
    return toposort([*graph.outputs.values(), *graph.inputs])


def assert_same_graph(a: Graph, b: Graph) -> None:
    # hash-consing: a structurally equal node is the very same object
    assert list(a.outputs) == list(b.outputs)
    assert all(a.outputs[k] is b.outputs[k] for k in a.outputs)
    assert [id(n) for n in a.inputs] == [id(n) for n in b.inputs]
    assert a.meta == b.meta
    assert [n.meta for n in every_node(a)] == [n.meta for n in every_node(b)]


# ============================================================================ round trips

def test_the_cases_use_every_op_and_every_dtype(graphs):
    assert ops_used(graphs.values()) == set(ALL_OPS)
    dtypes_used = {n.dtype.name for g in graphs.values() for n in every_node(g)}
    assert dtypes_used == set(DTYPES)


@pytest.mark.parametrize("form", ["msgpack", "json"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip(case, form):
    graph = CASES[case]()
    data = save(graph, form=form)
    assert (data[:1] == b"{") == (form == "json")
    again = load(data)
    assert_same_graph(graph, again)
    assert save(again, form=form) == data


def test_round_trip_keeps_values_exactly():
    """-0.0, infinities, NaN, integer extremes and BUFFER bytes come back bit for bit."""
    import numpy as np
    graph = CASES["every_dtype"]()
    for form in ("msgpack", "json"):
        again = load(save(graph, form=form))
        for name, node in graph.outputs.items():
            other = again.outputs[name]
            if node.op == Ops.CONST:
                assert type(other.arg) is type(node.arg)
                if isinstance(node.arg, float):
                    assert math.copysign(1, other.arg) == math.copysign(1, node.arg) or math.isnan(node.arg)
                    assert (math.isnan(other.arg) and math.isnan(node.arg)) or other.arg == node.arg
                else:
                    assert other.arg == node.arg
            if node.op == Ops.BUFFER:
                assert other.arg == node.arg
                np.testing.assert_array_equal(other.buffer_array(), node.buffer_array())
    neg_zero = load(save(Graph({"z": UOp.const(-0.0)}), form="json")).outputs["z"]
    assert math.copysign(1.0, neg_zero.arg) == -1.0


def test_json_form_spells_bin_and_non_finite_floats_as_the_contract_says():
    graph = Graph({"n": UOp.const(math.nan), "i": UOp.const(-math.inf, dtypes.float64), "z": UOp.const(-0.0),
                   "b": UOp.buffer(__import__("numpy").array([1, 2], dtype="<u2"))})
    text = save(graph, form="json").decode()
    assert '{"float":"nan"}' in text and '{"float":"-inf"}' in text and "-0.0" in text
    assert '{"data":{"b64":"AQACAA=="},"shape":[2]}' in text
    assert "NaN" not in text and "Infinity" not in text


def test_metadata_round_trips_and_the_file_is_the_truth():
    graph = CASES["with_metadata"]()
    doc = json.loads(save(graph, form="json"))
    metas = [n[4] for n in doc["nodes"] if len(n) == 5]
    assert {"backward": True, "loc": "model.py:12", "name": "grad_of_softmax"} in metas
    assert {"backward": True} in metas
    assert any(m.get("name") == "relu" for m in metas)
    again = load(save(graph))
    assert again.outputs["h"].meta == Metadata(None, None, True)
    # the file is the truth for its nodes, even those already alive with another tag
    x = UOp.param("meta_x", (2,))
    y = x.sin()
    doc = msgpack.unpackb(save(Graph({"y": y})))
    doc["nodes"][1].append({"loc": "f.py:1", "name": "sine"})  # sorted keys: canonical
    tagged = msgpack.packb(doc)
    assert load(tagged).outputs["y"].meta == Metadata("sine", "f.py:1", False)
    assert save(load(tagged)) == tagged
    untagged = save(Graph({"y": y.set_meta(None)}))
    y.set_meta(Metadata("other", None, True))
    assert load(untagged).outputs["y"].meta is None and save(load(untagged)) == untagged


def test_file_meta_round_trips(graphs):
    graph = graphs["calls"]
    assert load(save(graph)).meta == {"about": "calls"}
    assert load(save(graph, form="json")).meta == {"about": "calls"}
    assert "meta" not in msgpack.unpackb(save(graphs["movement"]))  # optional: empty is left out


def test_deep_chain_at_the_default_recursion_limit():
    assert sys.getrecursionlimit() <= 10_000
    x = UOp.param("deep_x", (2,))
    y = x
    for _ in range(20_000):
        y = (y + 1.0).sin()
    graph = Graph({"y": y})
    data = save(graph)
    assert load(data).outputs["y"] is y
    assert save(load(save(graph, form="json"))) == data


# ============================================================================ canonical bytes

@pytest.mark.parametrize("case", sorted(CASES))
def test_canonical_bytes(case):
    graph = CASES[case]()
    packed, text = save(graph), save(graph, form="json")
    assert save(graph) == packed and save(graph, form="json") == text            # write twice
    assert save(load(packed)) == packed and save(load(text), form="json") == text  # write-read-write
    assert save(load(text)) == packed                                               # json -> msgpack
    assert save(load(packed), form="json") == text                                  # msgpack -> json
    assert json.loads(text) == _json_view(msgpack.unpackb(packed))                  # same document


def _json_view(value):
    """A msgpack document as the JSON form spells it (bin -> b64, non-finite -> {"float"})."""
    import base64
    if isinstance(value, dict):
        return {k: _json_view(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_view(v) for v in value]
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    return value


def test_node_order_is_graph_nodes_order(graphs):
    """The writer's fused walk gives exactly Graph.nodes() (uop.toposort with CALL backward
    bodies, then unused inputs): the contract's canonical order."""
    for graph in graphs.values():
        doc = msgpack.unpackb(save(graph))
        order = graph.nodes()
        assert [n[0] for n in doc["nodes"]] == [n.op for n in order]
        assert len(doc["nodes"]) == len(order)


def test_canonical_order_by_hand():
    x, w = UOp.param("x", ()), UOp.param("w", ())
    unused = UOp.param("unused", ())
    graph = Graph([("b", x * w), ("a", (x * w).sin() + x)], inputs=[unused, w, x])
    doc = msgpack.unpackb(save(graph))
    assert [n[:3] for n in doc["nodes"]] == [
        ["PARAM", "float32", []], ["PARAM", "float32", []], ["MUL", "float32", [0, 1]],
        ["SIN", "float32", [2]], ["ADD", "float32", [3, 0]], ["PARAM", "float32", []]]
    assert doc["inputs"] == [5, 1, 0] and doc["outputs"] == [["b", 2], ["a", 4]]
    assert list(doc) == sorted(doc)


def test_bodies_sharing_a_chain_are_checked_in_linear_work(monkeypatch):
    """Checking that a body is closed visits each node once, though body k holds the
    chain of bodies 1..k-1 (walking each body anew was quadratic: 10 s for an 855 KB file)."""
    from uopcli.core import inference, uop as core
    x = UOp.param("x", ())
    nodes, chain = [], UOp.slot(0, ())
    for _ in range(400):
        chain = chain.sin()
        nodes.append(UOp.function("f", (chain,), (x,)).gettuple(0))
    total = nodes[0]
    for node in nodes[1:]:
        total = total + node
    data = save(Graph({"y": total}))
    visits = [0]
    children = inference.scope_sources  # what the check that bodies are closed walks with

    def counted(node):
        visits[0] += 1
        return children(node)
    del nodes, total, chain, node
    core.sweep_intern_table()  # forget the built graph, and what checking it learnt
    monkeypatch.setattr(inference, "scope_sources", counted)
    graph = load(data)
    assert visits[0] <= 3 * len(graph.nodes())  # quadratic was ~400 * 401 / 2 = 80,000


def test_call_backward_body_comes_after_sources_and_before_the_call():
    graph = CASES["calls"]()
    doc = msgpack.unpackb(save(graph))
    for i, (op, _, src, arg, *_) in enumerate(doc["nodes"]):
        assert all(s < i for s in src)
        if op == "CALL" and "grad" in arg:
            assert max(src) < arg["grad"] < i
            assert doc["nodes"][arg["grad"]][0] == "TUPLE"


def test_non_canonical_files_are_read_and_rewritten_canonically():
    """Duplicates, unreachable nodes and another valid order: read fine, written canonical."""
    x = UOp.param("x", (3,))
    graph = Graph({"y": (x * 2.0).sin()})
    doc = {"format": "uop", "version": 1, "inputs": [1], "outputs": [["y", 6]], "meta": {},
           "nodes": [["CONST", "float32", [], 2.0],
                     ["PARAM", "float32", [], {"shape": [3], "name": "x"}],
                     ["PARAM", "float32", [], {"name": "x", "shape": [3]}],   # duplicate of 1
                     ["MUL", "float32", [2, 0], None],
                     ["NEG", "float32", [3], None],                           # unreachable
                     ["MUL", "float32", [1, 0], None],                        # duplicate of 3
                     ["SIN", "float32", [5], None, {}]]}
    for data in (msgpack.packb(doc), json.dumps(doc).encode()):
        again = load(data)
        assert again.outputs["y"] is graph.outputs["y"]
        assert save(again) == save(graph)


def test_same_bytes_in_another_process():
    """Canonical bytes do not depend on hash seeds or creation order."""
    code = ("import sys; sys.path.insert(0, 'tests'); from fileformat_cases import CASES; from uopcli import save; "
            "sys.stdout.buffer.write(b''.join(save(CASES[c](), form=f) for c in sorted(CASES) "
            "for f in ('msgpack', 'json')))")
    # Both sides in fresh processes: nodes are shared by structure and keep the metadata of
    # whoever made them first, so bytes made here, after other tests, could carry their tags.
    def bytes_with_hash_seed(seed: str) -> bytes:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, check=True).stdout
    assert bytes_with_hash_seed("12345") == bytes_with_hash_seed("54321")


def test_floats_are_float64_and_ints_smallest():
    data = save(Graph({"y": UOp.param("x", (300,)) * 0.5}))
    assert b"\xcb" + __import__("struct").pack(">d", 0.5) in data   # float 64
    assert b"\xca" not in data                                       # never float 32
    assert b"\x91\xcd\x01\x2c" in data                               # [300]: uint16, the smallest


def test_json_layout_is_one_node_per_line():
    text = save(Graph({"y": UOp.param("x", (3,)).sin()}), form="json").decode()
    assert text == ('{"format":"uop",\n'
                    ' "inputs":[0],\n'
                    ' "nodes":[\n'
                    '  ["PARAM","float32",[],{"name":"x","shape":[3]}],\n'
                    '  ["SIN","float32",[0],null]\n'
                    ' ],\n'
                    ' "outputs":[["y",1]],\n'
                    ' "version":1}\n')
    assert save(Graph({}), form="json") == b'{"format":"uop",\n "inputs":[],\n "nodes":[],\n "outputs":[],\n "version":1}\n'


# ============================================================================ schema

def _schema_validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _sample_files():
    return sorted(glob.glob(str(ROOT / "samples" / "*.uop")))


def test_every_test_graph_and_sample_validates_against_the_schema(graphs):
    validator = _schema_validator()
    documents = {name: json.loads(save(g, form="json")) for name, g in graphs.items()}
    for path in _sample_files():
        documents[path] = json.loads(save(load(path), form="json"))
    for name, document in documents.items():
        errors = list(validator.iter_errors(document))
        assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(extra=1),
    lambda d: d.update(version=2),
    lambda d: d.pop("nodes"),
    lambda d: d["nodes"][0].__setitem__(0, "FOO"),
    lambda d: d["nodes"][0].__setitem__(1, "float128"),
    lambda d: d["nodes"][0].__setitem__(3, {"name": "x", "shape": [-1]}),
    lambda d: d["nodes"][1].__setitem__(3, [1]),
    lambda d: d["nodes"][1].__setitem__(2, [0, 0]),
    lambda d: d["nodes"][1].append({"name": 3}),
    lambda d: d["outputs"].append(["bad name", 0]),
    lambda d: d["nodes"].append(["BUFFER", "float32", [], {"shape": [1], "data": "AAAAAA=="}]),
], ids=["extra-key", "version", "no-nodes", "op", "dtype", "shape", "arg", "src-count", "meta", "name", "bin"])
def test_the_schema_refuses_what_the_contract_refuses(mutate):
    validator = _schema_validator()
    document = json.loads(save(Graph({"y": UOp.param("x", (3,)).sin()}), form="json"))
    assert not list(validator.iter_errors(document))
    mutate(document)
    assert list(validator.iter_errors(document))


def _buffer(b64: str) -> list:
    return ["BUFFER", "uint8", [], {"shape": [3], "data": {"b64": b64}}]


@pytest.mark.parametrize("node, accepted", [
    (["CONST", "int8", [], 127], True), (["CONST", "int8", [], 128], False), (["CONST", "uint8", [], -1], False),
    (["CONST", "int32", [], 2.5], False), (["CONST", "bool", [], 1], False), (["CONST", "bool", [], True], True),
    (["CONST", "float32", [], True], False), (["CONST", "int32", [], {"float": "nan"}], False),
    (["CONST", "float32", [], {"float": "-inf"}], True), (["CONST", "uint64", [], 2 ** 64 - 1], True),
    (_buffer("AAAA"), True), (_buffer("AAAA===="), False), (_buffer("A"), False), (_buffer("AAAA\n"), False),
    (["PARAM", "float32", [], {"name": "x\n", "shape": [3]}], False),
], ids=lambda v: json.dumps(v).replace("\\n", "<newline>") if isinstance(v, list) else str(v))
def test_the_schema_and_the_reader_agree(node, accepted):
    """Where the two used to differ: CONST values against their dtype, base64, a name
    ending in a newline. (Integral floats such as 2.0 in an int field remain: to JSON
    Schema 2.0 is an integer, to the reader, as the contract says, not an int.)"""
    document = file([node], [0] if node[0] == "PARAM" else [], [("y", 0)])
    schema_accepts = not list(_schema_validator().iter_errors(document))
    try:
        load(json.dumps(document).encode())
        reader_accepts = True
    except FormatError:
        reader_accepts = False
    assert (schema_accepts, reader_accepts) == (accepted, accepted)


# ============================================================================ refusals

def file(nodes, inputs=(), outputs=(), **top) -> dict:
    return {"format": "uop", "version": 1, "nodes": nodes, "inputs": list(inputs),
            "outputs": [list(o) for o in outputs], **top}


X = ["PARAM", "float32", [], {"name": "x", "shape": [3]}]
TWO = ["CONST", "float32", [], 2.0]


def refused(document, *words, node=None, op=None, form="msgpack", limits=None) -> str:
    if isinstance(document, (bytes, bytearray)):
        data = bytes(document)
    elif form == "json":
        data = json.dumps(document).encode()
    else:
        data = msgpack.packb(document)
    with pytest.raises(FormatError) as info:
        load(data, name="bad.uop", limits=limits)
    message = str(info.value)
    assert "\n" not in message and message.startswith("bad.uop: "), message
    if node is not None:
        assert info.value.node == node and f"node {node}" in message, message
    if op is not None:
        assert info.value.op == op and f"({op})" in message, message
    for word in words:
        assert word in message, message
    return message


def test_valid_base_file_loads():
    graph = load(msgpack.packb(file([X, TWO, ["MUL", "float32", [0, 1], None]], [0], [("y", 2)])))
    assert graph.outputs["y"].shape == (3,)


@pytest.mark.parametrize("document, words", [
    (file([]) | {"format": "UOP"}, ["not a .uop file", "'UOP'"]),
    ({"nodes": []}, ["not a .uop file"]),
    ([1, 2, 3], ["top level is an array"]),
    (file([]) | {"version": 2}, ["unsupported version 2"]),
    (file([]) | {"version": True}, ["unsupported version True"]),
    (file([]) | {"version": "1"}, ["unsupported version '1'"]),
    (file([]) | {"extra": 1}, ["unknown top-level key 'extra'"]),
    ({"format": "uop", "version": 1, "nodes": []}, ["missing top-level keys inputs, outputs"]),
    (file([]) | {"meta": {"k": 1}}, ["'meta' must map strings to strings"]),
    (file({}), ["'nodes' must be an array"]),
], ids=["magic", "no-magic", "not-a-map", "version", "version-bool", "version-str", "extra-key", "missing",
        "meta", "nodes"])
def test_refuses_bad_magic_version_and_top_level(document, words):
    for form in ("msgpack", "json"):
        refused(document, *words, form=form)


def test_a_file_is_refused_before_its_bytes_become_objects():
    """A few MB of one-byte arrays would be hundreds of MB as Python lists: an unknown key's
    value is skipped unparsed, and nodes are parsed one at a time, the bad one first."""
    import tracemalloc
    packer, count = msgpack.Packer(), 4_000_000
    head = b"".join(packer.pack(k) + packer.pack(v) for k, v in
                    [("format", "uop"), ("version", 1), ("inputs", []), ("outputs", [])])
    junk = packer.pack_map_header(6) + head + packer.pack("nodes") + packer.pack([]) + packer.pack("junk") \
        + packer.pack_array_header(count) + b"\x90" * count
    empty_nodes = packer.pack_map_header(5) + head + packer.pack("nodes") + packer.pack_array_header(count) \
        + b"\x90" * count
    for data, words, node in ((junk, "unknown top-level key 'junk'", None), (empty_nodes, "4 or 5 fields", 0)):
        tracemalloc.start()
        try:
            refused(data, words, node=node)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * len(data), peak  # parsed whole: ~64 bytes of lists per byte


def test_refuses_a_string_inside_a_node_that_is_not_utf8_naming_the_node():
    data = msgpack.packb(file([X, ["SIN", "float32", [0], None]], [0], [("y", 1)]))
    bad = data.replace(b"\xa3SIN", b"\xa3S\xffN")
    refused(bad, "not valid MessagePack", node=1)
    refused(msgpack.packb({"version": 1, "nodes": []}), "no 'format' key")
    refused(msgpack.packb({k: v for k, v in file([X], [0], [("x", 0)]).items() if k != "version"}),
            "missing top-level key version")


def test_bool_shifts_are_read_as_the_contract_allows():
    bools = [["PARAM", "bool", [], {"name": n, "shape": [3]}] for n in ("a", "b")]
    for op in ("SHL", "SHR"):
        graph = load(msgpack.packb(file([*bools, [op, "bool", [0, 1], None]], [0, 1], [("y", 2)])))
        assert graph.outputs["y"].op == op and graph.outputs["y"].dtype is dtypes.bool
    refused(file([*bools, ["CDIV", "bool", [0, 1], None]], [0, 1], [("y", 2)]), "needs an integer dtype", node=2)


def test_refuses_trailing_bytes_and_garbage():
    good = msgpack.packb(file([X], [0], [("x", 0)]))
    refused(good + b"\x00", "trailing bytes")
    refused(json.dumps(file([X], [0], [("x", 0)])).encode() + b" {}", "trailing bytes")
    refused(good[:-3], "truncated: the file ends inside the value of the key 'outputs'")
    refused(b"{not json", "not valid JSON")
    refused(b"", "empty file")
    refused(b"  \n", "empty file")
    refused(b'{"format": "uop", "version": 1, "nodes": [], "inputs": [], "outputs": [], "meta": {"a": NaN}}',
            "NaN is not JSON")
    refused(b'{"format": "uop", "version": 1, "nodes": [["CONST", "float32", [], 1e999]], "inputs": [], '
            b'"outputs": []}', "too large")
    refused(b'{"format": "uop", "version": 1, "nodes": [], "inputs": [], "outputs": [], "meta": {"a": "\\ud800"}}',
            "UTF-8")
    refused(b"{\xff}", "not valid UTF-8")


@pytest.mark.parametrize("src, words", [
    ([5], ["source 5", "earlier node"]),
    ([2], ["source 2", "earlier node"]),      # its own index
    ([-1], ["source -1"]),
    ([True], ["source True"]),
    ([0.0], ["source 0.0"]),
    ("0", ["src must be an array"]),
])
def test_refuses_bad_source_indices(src, words):
    for form in ("msgpack", "json"):
        refused(file([X, TWO, ["SIN", "float32", src, None]], [0], [("y", 2)]), *words, node=2, op="SIN", form=form)


def test_refuses_unknown_op_and_dtype():
    refused(file([X, ["EXEC", "float32", [0], "import os"]], [0]), "unknown op 'EXEC'", node=1, op="'EXEC'")
    refused(file([X, ["SIN", "bfloat16", [0], None]], [0]), "unknown dtype 'bfloat16'", node=1, op="SIN")
    refused(file([X, [["SIN"], "float32", [0], None]], [0]), "unknown op", node=1)
    refused(file([X, ["SIN", {}, [0], None]], [0]), "unknown dtype", node=1, op="SIN")
    refused(file([X, "SIN"], [0]), "a node must be an array", node=1)
    refused(file([X, ["SIN", "float32", [0]]], [0]), "4 or 5 fields", node=1)


@pytest.mark.parametrize("node, words", [
    (["SIN", "float32", [0], 1], ["SIN takes no arg"]),
    (["PARAM", "float32", [], {"name": "y"}], ["PARAM arg must be"]),
    (["PARAM", "float32", [], {"name": "y", "shape": [3], "slot": 0}], ["PARAM arg must be"]),
    (["PARAM", "float32", [], {"name": 5, "shape": [3]}], ["PARAM name 5"]),
    (["PARAM", "float32", [], {"name": "a b", "shape": [3]}], ["PARAM name 'a b'"]),
    (["PARAM", "float32", [], {"slot": -1, "shape": [3]}], ["slot must be an int >= 0"]),
    (["PARAM", "float32", [], {"slot": 0, "shape": [3.0]}], ["shape must be an array of non-negative ints"]),
    (["PARAM", "float32", [], {"slot": 0, "shape": [-1]}], ["shape must be an array of non-negative ints"]),
    (["PARAM", "float32", [0], {"slot": 0, "shape": [3]}], ["PARAM takes no sources"]),
    (["CONST", "float32", [], "1.0"], ["CONST float32 needs a float"]),
    (["CONST", "int32", [], 1.0], ["CONST int32 needs an int"]),
    (["CONST", "int32", [], True], ["CONST int32 needs an int"]),
    (["CONST", "bool", [], 1], ["CONST bool needs a bool"]),
    (["CONST", "uint8", [], 256], ["does not fit uint8"]),
    (["CONST", "void", [], None], ["CONST void"]),
    (["BUFFER", "float32", [], {"shape": [2], "data": [0, 0]}], ["BUFFER data must be bin"]),
    (["BUFFER", "float32", [], {"shape": [2]}], ["BUFFER arg must be a map with keys data, shape"]),
    (["REDUCE", "float32", [0], ["SUM", [0]]], ["REDUCE arg must be"]),
    (["REDUCE", "float32", [0], ["ADD", 0]], ["REDUCE arg must be an array"]),
    (["REDUCE", "float32", [0], ["ADD", [0.0]]], ["REDUCE"]),
    (["RESHAPE", "float32", [0], {"shape": [3]}], ["RESHAPE arg must be an array"]),
    (["RESHAPE", "float32", [0], ["3"]], ["arg must be a shape"]),
    (["PERMUTE", "float32", [0], [1]], ["is not an axis order"]),
    (["PAD", "float32", [0], [1, 1]], ["PAD arg must be [[int, int]] per axis"]),
    (["PAD", "float32", [0], [[-1, 0]]], ["non-negative"]),
    (["SHRINK", "float32", [0], [[2, 1]]], ["SHRINK"]),
    (["FLIP", "float32", [0], [1]], ["one bool per axis"]),
    (["COPY", "float32", [0], 3], ["COPY arg must be a device name"]),
    (["GETTUPLE", "float32", [0], "0"], ["GETTUPLE arg must be an int"]),
    (["NOOP", "float32", [], None], ["NOOP is void"]),
    (["TUPLE", "void", [0], {"b64": ""}], ["TUPLE takes no arg"]),
    (["SIN", "float32", [0], None, {"name": 1}], ["node meta 'name', 'loc' and 'scope' must be strings"]),
    (["SIN", "float32", [0], None, {"name": ["relu"]}], ["node meta 'name', 'loc' and 'scope' must be strings"]),
    (["SIN", "float32", [0], None, {"backward": 1}], ["'backward' must be a bool"]),
    (["SIN", "float32", [0], None, {"why": "x"}], ["node meta holds only"]),
    (["SIN", "float32", [0], None, "meta"], ["node meta must be a map"]),
    (["SIN", "float32", [0], None, None], ["node meta must be a map, got nil (no meta: leave the 5th field out)"]),
], ids=lambda v: v[0] if isinstance(v, list) and isinstance(v[0], str) else None)
def test_refuses_wrong_arg_types(node, words):
    document = file([X, node], [0])
    refused(document, *words, node=1, op=node[0])


def test_refuses_wrong_arg_types_in_the_json_form():
    def json_refused(node, *words):
        refused(file([X, node], [0]), *words, node=1, op=node[0], form="json")
    json_refused(["BUFFER", "float32", [], {"shape": [1], "data": "AAAAAA=="}], "{\"b64\": \"<base64>\"}")
    json_refused(["BUFFER", "float32", [], {"shape": [1], "data": {"b64": "AA!A"}}], "not valid base64")
    json_refused(["CONST", "float32", [], {"float": "NaN"}], "CONST arg map must be")
    json_refused(["CONST", "int32", [], {"float": "nan"}], "CONST int32 needs an int")
    refused(file([X, ["CONST", "float32", [], {"float": "nan"}]], [0]), "needs a float", node=1, op="CONST")


@pytest.mark.parametrize("node, words", [
    (["ADD", "float32", [0, 1], None], ["shapes differ"]),
    (["ADD", "float32", [0, 2], None], ["different dtypes"]),
    (["ADD", "int32", [0, 0], None], ["dtype must equal the sources'"]),
    (["SQRT", "int32", [2], None], ["needs a float dtype"]),
    (["CMPLT", "float32", [0, 0], None], ["comparisons give bool"]),
    (["WHERE", "float32", [0, 0, 0], None], ["condition must be bool"]),
    (["RESHAPE", "float32", [0], [4]], ["element counts differ"]),
    (["EXPAND", "float32", [0], [6]], ["only size-1 axes grow"]),
    (["REDUCE", "float32", [0], ["ADD", [1]]], ["within rank"]),
    (["SHRINK", "float32", [0], [[0, 4]]], ["within [3]"]),
    (["BITCAST", "float64", [0], None], ["item sizes"]),
    (["ADD", "float32", [0], None], ["takes 2 sources"]),
    (["GETTUPLE", "float32", [0], 0], ["FUNCTION or CALL"]),
    (["STORE", "void", [0, 1], None], ["one shape and dtype"]),
    (["TUPLE", "float32", [0], None], ["void"]),
    (["SIN", "void", [0], None], ["dtype must equal"]),
])
def test_refuses_shapes_and_dtypes_that_do_not_fit(node, words):
    base = [X, ["PARAM", "float32", [], {"name": "v", "shape": [4]}], ["PARAM", "int32", [], {"name": "i", "shape": [3]}]]
    refused(file([*base, node], [0, 1, 2]), *words, node=3, op=node[0])


def test_refuses_buffer_data_of_the_wrong_length():
    refused(file([["BUFFER", "float32", [], {"shape": [2], "data": b"\0" * 7}]]),
            "7 bytes", "float32[2] needs 8", node=0, op="BUFFER")
    refused(file([["BUFFER", "bool", [], {"shape": [2], "data": b"\x00\x02"}]]), "only bytes 0 and 1", node=0)
    refused(file([["BUFFER", "float32", [], {"shape": [2], "data": {"b64": "AAAA"}}]]), "3 bytes", node=0,
            op="BUFFER", form="json")


def test_refuses_duplicate_names():
    x4 = ["PARAM", "float32", [], {"name": "x", "shape": [4]}]
    refused(file([X, x4], [0, 1]), "duplicate input name 'x'", node=1, op="PARAM")
    refused(file([X, X], [0, 1]), "duplicate input name 'x'", node=1, op="PARAM")
    refused(file([X], [0, 0]), "duplicate input name 'x'", node=0)
    refused(file([X, ["SIN", "float32", [0], None]], [0], [("y", 1), ("y", 0)]), "duplicate output name 'y'",
            node=0, op="PARAM")


def test_refuses_bad_inputs_and_outputs():
    sin = ["SIN", "float32", [0], None]
    refused(file([X, sin], [0, 1]), "an input must be a PARAM with a name", node=1, op="SIN")
    refused(file([["PARAM", "float32", [], {"slot": 0, "shape": [3]}]], [0]), "PARAM with a name", node=0)
    refused(file([X, sin], [], [("y", 1)]), "graph input PARAM 'x' is not listed", node=0, op="PARAM")
    refused(file([X, sin], [0], [("y", 2)]), "output 'y': 2 is not a node index")
    refused(file([X, sin], [0], [("y", True)]), "not a node index")
    refused(file([X, sin], [5], []), "input 5 is not a node index")
    refused(file([X, sin], [0], [("a=b", 1)]), "output name 'a=b'")
    refused(file([X, sin], [0], [("y",)]), "an output must be [name, index]")
    refused(file([X, sin]) | {"inputs": {}}, "'inputs' must be an array")
    refused(file([X, sin], [0]) | {"outputs": {"y": 1}}, "'outputs' must be an array")
    refused(file([X, ["NOOP", "void", [], None]], [0], [("n", 1)]), "NOOP is only a TUPLE element", node=1, op="NOOP")


def _call_file(body_param, grad=None, extra=()):
    """A CALL of body sin(slot 0) on x; `body_param` is the body's PARAM node."""
    nodes = [X, body_param, ["SIN", "float32", [1], None], ["TUPLE", "void", [2], None], *extra]
    arg = {"name": "f"} if grad is None else {"name": "f", "grad": grad}
    nodes.append(["CALL", "void", [3, 0], arg])
    nodes.append(["GETTUPLE", "float32", [len(nodes) - 1], 0])
    return file(nodes, [0], [("y", len(nodes) - 1)])


def test_call_files_load():
    slot = ["PARAM", "float32", [], {"slot": 0, "shape": [3]}]
    assert load(msgpack.packb(_call_file(slot))).outputs["y"].shape == (3,)
    grad = [["PARAM", "float32", [], {"slot": 1, "shape": [3]}], ["TUPLE", "void", [4], None]]
    graph = load(msgpack.packb(_call_file(slot, grad=5, extra=grad)))
    assert graph.outputs["y"].src[0].arg.grad.op == Ops.TUPLE


def test_refuses_bodies_that_are_not_closed():
    named = ["PARAM", "float32", [], {"name": "z", "shape": [3]}]
    document = _call_file(named)
    document["inputs"] = [0, 1]
    refused(document, "not closed", "'z'", node=4, op="CALL")
    function = [X, named, ["SIN", "float32", [1], None], ["TUPLE", "void", [2], None],
                ["FUNCTION", "void", [3, 0], {"name": "f"}]]
    refused(file(function, [0, 1], [("f", 4)]), "not closed", node=4, op="FUNCTION")
    slot = ["PARAM", "float32", [], {"slot": 0, "shape": [3]}]
    refused(file([slot, ["SIN", "float32", [0], None]], [], [("y", 1)]), "slot PARAM 0 is used outside", node=0)
    wrong_shape = ["PARAM", "float32", [], {"slot": 0, "shape": [4]}]
    refused(_call_file(wrong_shape), "slot 0 is float32[4] but is bound to float32[3]", node=4, op="CALL")


def test_refuses_bad_call_backward_bodies():
    slot = ["PARAM", "float32", [], {"slot": 0, "shape": [3]}]
    grad = [["PARAM", "float32", [], {"slot": 1, "shape": [3]}], ["TUPLE", "void", [4], None]]
    refused(_call_file(slot, grad=4, extra=grad), "CALL grad must be a TUPLE", node=6, op="CALL")
    refused(_call_file(slot, grad=9, extra=grad), "earlier node", node=6, op="CALL")
    refused(_call_file(slot, grad=True, extra=grad), "earlier node", node=6, op="CALL")
    wrong = [["PARAM", "float32", [], {"slot": 1, "shape": [4]}], ["TUPLE", "void", [4], None]]
    refused(_call_file(slot, grad=5, extra=wrong), "backward body slot 1 is float32[4] but is bound to float32[3]",
            node=6, op="CALL")
    wrong = [["PARAM", "float32", [], {"slot": 1, "shape": [3]}], ["REDUCE", "float32", [4], ["ADD", [0]]],
             ["TUPLE", "void", [5], None]]
    refused(_call_file(slot, grad=6, extra=wrong), "backward element 0 is float32[1]", node=7, op="CALL")
    named = [["PARAM", "float32", [], {"name": "q", "shape": [3]}], ["TUPLE", "void", [4], None]]
    document = _call_file(slot, grad=5, extra=named)
    document["inputs"] = [0, 4]
    refused(document, "not closed", node=6, op="CALL")
    document = _call_file(slot)
    document["nodes"][4][3] = {"name": "f", "grad": 3, "other": 1}
    refused(document, "CALL arg must be a map with keys name, grad (optional)", node=4, op="CALL")
    document["nodes"][4][3] = {"name": ""}
    refused(document, "CALL name must be a non-empty string", node=4)


def test_refuses_what_is_over_the_limits():
    big = file([["PARAM", "float32", [], {"name": "x", "shape": [1 << 21, 1 << 20]}]], [0])
    refused(big, "2199023255552 elements", "Limits(max_tensor_elements=...)", "--limit max_tensor_elements=N", node=0, op="PARAM")
    deep = file([["PARAM", "float32", [], {"name": "x", "shape": [1] * 17}]], [0])
    refused(deep, "rank 17", "Limits(max_rank=...)", node=0, op="PARAM")
    expand = file([["PARAM", "float32", [], {"name": "x", "shape": [1, 1]}],
                   ["EXPAND", "float32", [0], [1 << 21, 1 << 20]]], [0])
    refused(expand, "EXPAND result", "elements", node=1, op="EXPAND")
    pad = file([X, ["PAD", "float32", [0], [[0, 1 << 40]]]], [0])
    refused(pad, "PAD result", node=1, op="PAD")
    empty = file([["PARAM", "float32", [], {"name": "x", "shape": [0, 1 << 21, 1 << 20]}],
                  ["REDUCE", "float32", [0], ["ADD", [0]]]], [0])  # [0, m, n] holds nothing; [1, m, n] 2^41
    refused(empty, "REDUCE result [1, 2097152, 1048576]", "elements", node=1, op="REDUCE")
    reshape = file([["PARAM", "float32", [], {"name": "x", "shape": [1]}], ["RESHAPE", "float32", [0], [1] * 17]], [0])
    refused(reshape, "rank limit of 16", node=1, op="RESHAPE")
    small = msgpack.packb(file([X, TWO, ["MUL", "float32", [0, 1], None]], [0], [("y", 2)]))
    refused(small, "larger than the limit of 10 bytes", limits=Limits(max_file_bytes=10))
    refused(small, "3 nodes exceed the limit of 2", limits=Limits(max_nodes=2))
    refused(small, "rank 1, over the limit of 0", limits=Limits(max_rank=0), node=0)
    refused(small, "3 elements, over the limit of 2", limits=Limits(max_tensor_elements=2), node=0)
    nested = file([X, ["RESHAPE", "float32", [0], [[[[[[[[[[[[[[[[[[[3]]]]]]]]]]]]]]]]]]]]], [0])
    refused(nested, "nests deeper than 16", "Limits(max_arg_depth=...)", node=1, op="RESHAPE")
    pad = file([X, ["PAD", "float32", [0], [[0, 1]]]], [0], [("y", 1)])  # valid: an array of arrays, 2 levels
    assert load(msgpack.packb(pad), limits=Limits(max_arg_depth=2)).outputs["y"].op == Ops.PAD
    refused(file([X, ["PAD", "float32", [0], [[0, 1]]]], [], [("y", 1)]), "arg nests deeper than 1 level (",
            limits=Limits(max_arg_depth=1), node=0, op="PARAM")  # PARAM's {"shape": [3]} is 2 levels too
    refused(file([X], [0], [("x", 0)]), "arg nests deeper than 0", limits=Limits(max_arg_depth=0), node=0, op="PARAM")
    # what the limit stands for, not what is stored: a wide matmul's EXPAND (8192, 512, 2048) reads by default
    a, b = UOp.param("a", (8192, 512)), UOp.param("b", (512, 2048))
    assert load(save(Graph({"y": a @ b}))).outputs["y"].shape == (8192, 2048)
    refused(b"\x91" * 5000 + b"\xc0", "nested too deeply")
    refused(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply")


def test_a_json_file_with_a_byte_order_mark_is_refused_saying_so():
    text = dumps(Graph({"y": UOp.param("x", (2,)).sin()}), "json")
    with pytest.raises(FormatError, match="^<bytes>: the file starts with a UTF-8 byte-order mark"):
        loads(b"\xef\xbb\xbf" + text)


def test_a_key_that_appears_twice_is_refused_not_read_last_wins():
    graph = Graph({"y": UOp.param("x", (2,)).sin()})
    doc = msgpack.unpackb(dumps(graph))
    packer = msgpack.Packer()
    twice = packer.pack_map_header(len(doc) + 1) + b"".join(packer.pack(k) + packer.pack(v) for k, v in doc.items())
    twice += packer.pack("outputs") + packer.pack([["z", 1]])
    with pytest.raises(FormatError, match="^<bytes>: the key 'outputs' appears twice in the top-level map$"):
        load(twice)
    text = dumps(graph, "json").decode()
    with pytest.raises(FormatError, match="the key 'outputs' appears twice in one object"):
        loads(text.rstrip()[:-1] + ',"outputs":[["z",1]]}')
    with pytest.raises(FormatError, match=r"^<bytes>: node 0 \(PARAM\): the key 'name' appears twice in one object$"):
        loads(text.replace('"name":"x"', '"name":"x","name":"w"'))  # inside a node: which one
    assert load(dumps(graph)).outputs["y"].op == Ops.SIN and loads(text).outputs["y"].op == Ops.SIN


def test_limits_can_be_raised():
    shape = [1] * 20
    document = file([["PARAM", "float32", [], {"name": "x", "shape": shape}]], [0], [("x", 0)])
    with pytest.raises(FormatError):
        load(msgpack.packb(document))
    assert load(msgpack.packb(document), limits=Limits(max_rank=32)).outputs["x"].shape == tuple(shape)
    data = save(Graph({"y": UOp.param("x", (3,)).sin()}))
    assert load(data, limits=Limits(max_file_bytes=len(data), max_nodes=2)).outputs["y"].op == Ops.SIN
    assert Limits() == Limits(1 << 30, 10_000_000, 16, 16, 1 << 40)


def test_reading_never_runs_code(tmp_path):
    """Nothing in a file is evaluated or imported: ext types, pickles and code strings are refused."""
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    documents = [
        file([X, ["COPY", "float32", [0], msgpack.ExtType(1, code.encode())]], [0]),
        file([X, ["CONST", "float32", [], msgpack.Timestamp(1)]], [0]),
        file([X, ["EXEC", "float32", [0], code]], [0]),
        file([X, ["PARAM", "float32", [], {"name": "__import__('os')", "shape": [3]}]], [0]),
    ]
    for document in documents:
        with pytest.raises(FormatError):
            load(msgpack.packb(document))
    import pickle
    with pytest.raises(FormatError):
        load(pickle.dumps({"format": "uop"}))
    assert not marker.exists()


# ============================================================================ API

def test_load_and_save_with_paths_and_file_objects(tmp_path):
    graph = CASES["calls"]()
    path = tmp_path / "g.uop"
    data = save(graph, path)
    assert path.read_bytes() == data == dumps(graph)
    assert_same_graph(load(path), graph)
    assert_same_graph(load(str(path)), graph)
    assert_same_graph(loads(data), graph)
    with open(path, "rb") as f:
        assert_same_graph(load(f), graph)
    buffer = io.BytesIO()
    assert save(graph, buffer, form="json") == buffer.getvalue()
    assert_same_graph(load(io.BytesIO(buffer.getvalue())), graph)
    assert uopcli.load is load and uopcli.save is save and uopcli.Limits is Limits
    assert sorted(os.listdir(tmp_path)) == ["g.uop"]  # no temporary file left behind


@pytest.mark.parametrize("form", ["msgpack", "json"])
@pytest.mark.parametrize("case", ["calls", "every_dtype", "with_metadata"])
def test_dump_parts_are_the_canonical_bytes_in_pieces(case, form, tmp_path):
    """dump_parts hands the file over in pieces (the nodes as a view of the packer's
    buffer, not copied); written in order, to a path or a file object, they are dumps."""
    graph = CASES[case]()
    parts = dump_parts(graph, form)
    assert len(parts) == (1 if form == "json" else 3)
    assert b"".join(parts) == dumps(graph, form) == save(graph, form=form)
    path = tmp_path / "g.uop"
    write_parts(path, parts)
    assert path.read_bytes() == dumps(graph, form)
    buffer = io.BytesIO()
    write_parts(buffer, parts)
    assert buffer.getvalue() == dumps(graph, form)
    assert sorted(os.listdir(tmp_path)) == ["g.uop"]

class _ShortWrites(io.BytesIO):
    """Takes at most 5 bytes a call and says so, as a buffered file does when a large
    write fills the disk part way (and then fails on the next call)."""

    def write(self, data):
        return super().write(bytes(memoryview(data).cast("B")[:5]))


def test_write_parts_goes_on_after_a_short_write():
    graph = Graph({"y": UOp.param("x", (2,)).sin()})
    short = _ShortWrites()
    write_parts(short, dump_parts(graph))
    assert short.getvalue() == dumps(graph)


def test_a_stream_over_the_size_limit_is_refused_after_reading_one_byte_past_it():
    data = dumps(Graph({"y": UOp.param("x", (2,)).sin()}))
    stream = io.BytesIO(data + b" " * 100)
    with pytest.raises(FormatError, match="larger than the limit"):
        load(stream, limits=Limits(max_file_bytes=len(data) + 10))
    assert stream.tell() == len(data) + 11
    assert load(io.BytesIO(data), limits=Limits(max_file_bytes=len(data))).outputs["y"].op == Ops.SIN


def test_save_replaces_atomically_and_leaves_the_old_file_on_failure(tmp_path):
    path = tmp_path / "g.uop"
    path.write_bytes(b"old")
    save(Graph({"y": UOp.param("x", (1,)).sin()}), path, form="json")
    assert path.read_bytes().startswith(b'{"format":"uop"')
    with pytest.raises(FormatError, match="cannot write"):
        save(Graph({}), tmp_path / "missing-dir" / "g.uop")
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(FormatError, match="cannot write"):
        save(Graph({}), tmp_path / "a-directory")
    (tmp_path / "a-directory").rmdir()
    with pytest.raises(FormatError, match="unknown form"):
        save(Graph({}), path, form="yaml")
    assert path.read_bytes().startswith(b'{"format":"uop"')
    assert sorted(os.listdir(tmp_path)) == ["g.uop"]


def test_error_messages_name_the_file(tmp_path):
    path = tmp_path / "broken.uop"
    path.write_bytes(b"\xc1")
    with pytest.raises(FormatError, match=f"^{path}: not valid MessagePack"):
        load(path)
    with pytest.raises(FormatError, match="^<bytes>: "):
        load(b"\xc1")
    with pytest.raises(FormatError, match="^in.uop: "):
        load(b"\xc1", name="in.uop")
    with pytest.raises(FormatError, match="^<stream>: "):
        load(io.BytesIO(b"\xc1"))
    with pytest.raises(FormatError, match="cannot read"):
        load(tmp_path / "nope.uop")
    with pytest.raises(FormatError, match=f"^{path}: file is larger than the limit of 0 bytes"):
        load(path, limits=Limits(max_file_bytes=0))
    with pytest.raises(FormatError, match="^<stream>: file is larger than the limit of 0 bytes"):
        load(io.BytesIO(b"\xc1"), limits=Limits(max_file_bytes=0))
    text = save(Graph({"y": UOp.param("x", (2,)).sin()}), form="json").decode()
    assert loads(text).outputs["y"].op == Ops.SIN  # loads also takes the JSON form as text
    with pytest.raises(FormatError, match="binary file object"):
        load(io.StringIO("{}"))


def test_writer_refuses_what_the_reader_would_refuse():
    with pytest.raises(uopcli.GraphError, match="graph meta"):
        save(Graph({}, meta={"n": 1}))
    node = UOp.param("meta_w", (1,)).exp2()
    node.set_meta(Metadata(name=7))
    try:
        with pytest.raises(uopcli.GraphError, match="cannot be written"):
            save(Graph({"y": node}))
    finally:
        object.__setattr__(node, "meta", None)


def test_the_worked_example_in_docs_is_what_save_writes(tmp_path):
    """docs/format.md shows a script and the JSON it writes: run the script, compare."""
    text = (ROOT / "docs" / "format.md").read_text()
    example = text.split("## A worked example", 1)[1]
    script = example.split("```python\n", 1)[1].split("```", 1)[0]
    shown = example.split("```json\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, check=True)
    assert (tmp_path / "example.json").read_text() == shown
    written = (tmp_path / "example.uop").read_bytes()
    assert f"MessagePack, {len(written)} bytes" in script
    assert save(load(shown.encode()), form="json").decode() == shown
    assert save(load(shown.encode())) == written


def test_unicode_names_and_strings_round_trip():
    x = UOp.param("x_é層", (2,))
    y = x.exp2().set_meta(Metadata("naïve😀", "modèle.py:3", True))
    graph = Graph({"ÿ": y}, meta={"clé": "välue\nwith a newline"})
    for form in ("msgpack", "json"):
        data = save(graph, form=form)
        again = load(data)
        assert_same_graph(graph, again)
        assert save(again, form=form) == data
    assert "x_é層".encode() in save(graph, form="json")  # UTF-8, not \u escapes


@pytest.mark.parametrize("op, src, good, bad", [
    ("REDUCE", [0], ["ADD", [0]], ["ADD", [0.0]]),
    ("RESHAPE", [0], [3, 1], [3.0, 1]),
    ("PERMUTE", [1], [1, 0], [True, 0]),
    ("FLIP", [0], [True], [1]),
    ("PAD", [0], [[1, 0]], [[1.0, 0]]),
])
def test_a_wrong_arg_type_is_refused_even_when_an_equal_node_exists(op, src, good, bad):
    """Interning compares args with ==, where 0 == 0.0 == False: the reader checks types itself."""
    import msgpack
    from uopcli.errors import FormatError as Refused

    def doc(arg):
        nodes = [["PARAM", "float32", [], {"name": "x", "shape": [3]}],
                 ["RESHAPE", "float32", [0], [3, 1]], [op, "float32", src, arg]]
        return msgpack.packb({"format": "uop", "version": 1, "nodes": nodes, "inputs": [0],
                              "outputs": [["y", 2]]})

    kept = load(doc(good))  # the equal, well-typed node is now interned
    with pytest.raises(Refused, match=f"node 2 \\({op}\\)"):
        load(doc(bad))
    assert kept.output("y").op == op


def test_text_that_is_not_a_graph_is_called_so():
    """'not a graph' parses as MessagePack int 110 plus bytes: the message says what the file is."""
    with pytest.raises(FormatError, match=r"^broken\.uop: not a \.uop file: the top level is an int, not a map"):
        load(b"not a graph", name="broken.uop")


def test_scope_metadata_round_trips_and_a_bad_scope_is_refused():
    x = UOp.param("scope_x", (3,))
    y = x.exp2().set_meta(Metadata("softmax", "m.py:3", False, "encoder/layer.0/attention"))
    data = save(Graph({"y": y}))
    doc = msgpack.unpackb(data)
    assert doc["nodes"][1][4] == {"loc": "m.py:3", "name": "softmax", "scope": "encoder/layer.0/attention"}
    again = load(data)
    assert again.outputs["y"].meta.scope == "encoder/layer.0/attention"
    assert save(again) == data
    doc["nodes"][1][4] = {"scope": 7}
    with pytest.raises(FormatError, match=r"node 1.*'scope' must be strings"):
        load(msgpack.packb(doc))
    doc["nodes"][1][4] = {"scope": "a/b", "where": "c"}
    with pytest.raises(FormatError, match=r"only 'name', 'loc', 'scope'.*'where'"):
        load(msgpack.packb(doc))


# ----------------------------------------------------------------------------- errors keep their cause

def test_a_refusal_keeps_msgpack_s_error_as_its_cause():
    with pytest.raises(FormatError, match="not valid MessagePack") as refused:
        load(b"\x81\xa6format\xc1")
    assert isinstance(refused.value.__cause__, ValueError)  # msgpack's FormatError, chained for --debug


def test_a_file_that_ends_after_a_key_is_refused_as_truncated():
    whole = save(Graph({"y": UOp.param("tx", (2,)).sin()}))
    doc = msgpack.unpackb(whole)
    head = msgpack.packb({"format": "uop", "version": 1, "inputs": doc["inputs"]})
    data = b"\x84" + head[1:] + msgpack.packb("nodes")  # the map promises 4 keys; the file ends after "nodes"
    with pytest.raises(FormatError, match="truncated: the file ends after the key 'nodes'"):
        load(data)


def test_every_cut_of_a_file_is_refused_as_truncated_saying_where():
    """A file cut anywhere (a copy stopped early, a pipe closed) reads as truncated, with
    the key whose value it ends in: not msgpack's "No more data to unpack"."""
    x = UOp.param("x", (2,))
    whole = save(Graph({"y": x.sin(), "z": (x * 2.0).exp()}))
    keys = [k for k in msgpack.unpackb(whole)]
    for end in range(1, len(whole)):
        with pytest.raises(FormatError, match="^<bytes>: truncated: the file ends ") as refused:
            load(whole[:end])
        where = str(refused.value).removeprefix("<bytes>: truncated: the file ends ")
        assert where == "inside the top-level map" or any(
            where in (f"after the key {k!r}", f"inside the value of the key {k!r}") for k in keys), where
    assert str(_refusal(whole[:-1])) == "<bytes>: truncated: the file ends after the key 'version'"
    inside_a_key = whole.index(b"inputs") + 3  # in the second key's name: the map, not 'format''s value
    assert str(_refusal(whole[:inside_a_key])) == "<bytes>: truncated: the file ends inside the top-level map"
    assert str(_refusal(whole[:len(whole) // 2])) == "<bytes>: truncated: the file ends inside the value of the key 'nodes'"
    assert str(_refusal(msgpack.packb([1, 2, 3])[:-1])) == "<bytes>: truncated: the file ends inside its first value"


def _refusal(data: bytes) -> FormatError:
    with pytest.raises(FormatError) as refused:
        load(data)
    return refused.value


class _OutOfMemoryUnpacker:
    def __init__(self, *args, **kwargs):
        raise MemoryError


def test_a_memory_error_while_reading_is_not_called_a_bad_file(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from uopcli.cli import main
    path = tmp_path / "g.uop"
    path.write_bytes(save(Graph({"y": UOp.param("mx", (2,)).sin()})))
    monkeypatch.setattr(msgpack, "Unpacker", _OutOfMemoryUnpacker)
    with pytest.raises(MemoryError):
        load(path)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert result.output.strip().endswith(f"{path}: out of memory")


def test_a_reader_bug_is_reported_as_one_and_debug_shows_where(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from uopcli.cli import main
    import uopcli.formats.uop.reader as reader
    path = tmp_path / "g.uop"
    path.write_bytes(save(Graph({"y": UOp.param("bx", (2,)).sin()})))
    monkeypatch.setattr(reader, "ALLOWED_KEYS", None)  # a planted bug inside the top-level map's loop
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert "internal error: TypeError" in result.output and "--debug" in result.output  # not "not valid MessagePack"
    debug = CliRunner().invoke(main, ["validate", str(path), "--debug"])
    assert "Traceback" in debug.output and "reader.py" in debug.output
