"""Fuzzing the reader: mutated valid files and random bytes.

Only FormatError may come out of `load`, and each case must finish within a second of CPU
time (a hang or a blow-up is a failure; pytest-timeout also stops the whole test). A case
that happens to stay valid must round-trip (save/load gives the same bytes back).

The normal run does FUZZ_CASES cases (UOPGRAD_FUZZ_CASES overrides it); `--runslow` adds
a run fifty times longer. A failing case prints its seed and bytes to reproduce it.
"""

from __future__ import annotations

import json
import os
import random
import time

import msgpack
import pytest

from uopcli import FormatError, load, save
from uopcli.core.ops import ALL_OPS, DTYPES

from fileformat_cases import all_graphs

FUZZ_CASES = int(os.environ.get("UOPGRAD_FUZZ_CASES", "3000"))
SECONDS_PER_CASE = 1.0


@pytest.fixture(scope="module")
def seeds() -> list[bytes]:
    files = []
    for graph in all_graphs().values():
        files.append(save(graph))
        files.append(save(graph, form="json"))
    return files


# ----------------------------------------------------------------------------- random values

def random_value(rng: random.Random, depth: int = 0):
    """Any MessagePack value, biased toward what a reader looks at (ops, dtypes, indices)."""
    kind = rng.randrange(14 if depth < 3 else 10)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, 1, 2, -1, 3, 255, 65536, 2 ** 31, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1])
    if kind == 3:
        return rng.randrange(-5, 50)
    if kind == 4:
        return rng.choice([0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 1e308])
    if kind == 5:
        return rng.choice(ALL_OPS)
    if kind == 6:
        return rng.choice(list(DTYPES))
    if kind == 7:
        return rng.choice(["", "x", "a b", "name", "shape", "slot", "data", "grad", "b64", "float", "nan", "ADD"])
    if kind == 8:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(9)))
    if kind == 9:
        return msgpack.ExtType(rng.randrange(128), b"\x00" * rng.randrange(4))
    if kind in (10, 11):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["name", "shape", "slot", "data", "grad", "b64", "float", "loc", "backward", "x"]
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


# ----------------------------------------------------------------------------- mutations

def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    choice = rng.randrange(5)
    if choice == 0 and data:                      # truncate
        return bytes(data[:rng.randrange(len(data))])
    if choice == 1 and data:                      # flip bytes
        for _ in range(rng.randrange(1, 5)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if choice == 2 and data:                      # overwrite with a random byte
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if choice == 3:                               # insert bytes
        at = rng.randrange(len(data) + 1)
        return bytes(data[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))) + data[at:])
    if data:                                      # delete a span
        at = rng.randrange(len(data))
        return bytes(data[:at] + data[at + rng.randrange(1, 8):])
    return bytes(data)


def mutate_document(rng: random.Random, doc: dict) -> dict:
    nodes = doc.get("nodes") or []
    choice = rng.randrange(9)
    if choice == 0 and nodes:                     # a random value in a random node field
        node = rng.choice(nodes)
        field = rng.randrange(len(node) + 1)
        value = random_value(rng)
        if field < len(node):
            node[field] = value
        else:
            node.append(value)
    elif choice == 1 and nodes:                   # a source index out of range, negative, or later
        node = rng.choice([n for n in nodes if n[2]] or nodes)
        if node[2]:
            node[2][rng.randrange(len(node[2]))] = rng.choice([len(nodes), len(nodes) + 7, -1, nodes.index(node),
                                                               rng.randrange(len(nodes))])
    elif choice == 2 and len(nodes) > 1:          # swap two nodes
        i, j = rng.randrange(len(nodes)), rng.randrange(len(nodes))
        nodes[i], nodes[j] = nodes[j], nodes[i]
    elif choice == 3 and nodes:                   # mutate inside an arg
        node = rng.choice(nodes)
        arg = node[3]
        if isinstance(arg, dict) and arg:
            arg[rng.choice(list(arg))] = random_value(rng)
        elif isinstance(arg, list) and arg:
            arg[rng.randrange(len(arg))] = random_value(rng)
        else:
            node[3] = random_value(rng)
    elif choice == 4:                             # a top-level field
        doc[rng.choice(["format", "version", "nodes", "inputs", "outputs", "meta", "extra"])] = random_value(rng)
    elif choice == 5 and doc.get("inputs"):       # inputs: out of range, duplicated, dropped
        inputs = doc["inputs"]
        inputs[rng.randrange(len(inputs))] = rng.choice([len(nodes), -1, 0, inputs[0], True])
    elif choice == 6 and doc.get("outputs"):      # outputs
        outputs = doc["outputs"]
        output = outputs[rng.randrange(len(outputs))]
        output[rng.randrange(2)] = random_value(rng)
    elif choice == 7 and nodes:                   # drop or duplicate a node
        at = rng.randrange(len(nodes))
        if rng.random() < 0.5:
            del nodes[at]
        else:
            nodes.insert(at, list(nodes[at]))
    elif nodes:                                   # shapes: huge, negative, deep
        node = rng.choice(nodes)
        if isinstance(node[3], dict) and "shape" in node[3]:
            node[3]["shape"] = rng.choice([[2 ** 40], [-1], [1] * 40, [3.0], [], [0], [[1]]])
    return doc


def make_case(rng: random.Random, seeds: list[bytes]) -> bytes:
    kind = rng.randrange(10)
    if kind == 0:                                 # random bytes, sometimes looking like JSON
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        return (b"{" + noise) if rng.random() < 0.3 else noise
    seed = rng.choice(seeds)
    if kind <= 4:
        data = seed
        for _ in range(rng.randrange(1, 3)):
            data = mutate_bytes(rng, data)
        return data
    is_json = seed[:1] == b"{"
    doc = json.loads(seed) if is_json else msgpack.unpackb(seed)
    for _ in range(rng.randrange(1, 3)):
        try:
            doc = mutate_document(rng, doc)
        except (TypeError, IndexError, KeyError, AttributeError, ValueError):
            pass  # an earlier mutation broke what this one reaches into: keep the document as is
    if is_json:
        try:
            return json.dumps(doc, default=lambda v: None).encode()
        except ValueError:
            return msgpack.packb(doc)
    return msgpack.packb(doc)


# ----------------------------------------------------------------------------- the runs

def run_cases(seeds: list[bytes], count: int, seed: int) -> dict:
    rng = random.Random(seed)
    counts = {"refused": 0, "valid": 0}
    for case in range(count):
        data = make_case(rng, seeds)
        start = time.process_time()
        try:
            graph = load(data)
        except FormatError as error:
            assert str(error) and "\n" not in str(error), (seed, case, data)
            counts["refused"] += 1
        except Exception as error:  # noqa: BLE001 - the point: nothing but FormatError may escape
            pytest.fail(f"case {case} of seed {seed}: {type(error).__name__}: {error}\nbytes: {data!r}")
        else:
            counts["valid"] += 1
            again = save(graph)
            assert save(load(again)) == again, (seed, case, data)
        elapsed = time.process_time() - start
        assert elapsed < SECONDS_PER_CASE, f"case {case} of seed {seed} took {elapsed:.2f} s: {data!r}"
    return counts


@pytest.mark.timeout(600)
def test_mutated_files_and_random_bytes_only_raise_format_error(seeds):
    counts = run_cases(seeds, FUZZ_CASES, seed=20261201)
    assert counts["refused"] > FUZZ_CASES // 2   # the mutations do reach the reader's checks
    assert counts["valid"] > 0                   # and some stay valid (round-trip checked)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fuzz_long(seeds):
    run_cases(seeds, FUZZ_CASES * 50, seed=int(os.environ.get("UOPGRAD_FUZZ_SEED", "7")))
