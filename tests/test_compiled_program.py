"""compile_graph: a graph compiled once and called many times gives, call by call, what
evaluate_graph (or evaluate, for a list of UOps) gives for the same inputs, bit for bit,
with the same checks, errors and stats, and nothing of one call leaks into the next."""

from __future__ import annotations

import pickle
import sys
import time
import threading
from pathlib import Path

import numpy as np
import pytest

from uopcli import (EvalStats, EvaluationError, Graph, UOp, compile_graph, differentiate, dtypes, evaluate,
                    evaluate_graph, load)
from uopcli.backends.reference import reference_evaluate_graph
from uopcli.core.walks import no_gc
from uopcli.tools.check import to_float64
from uopcli.tools.values import index_ranges_for, random_value

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_FILES = sorted((ROOT / "samples").rglob("*.uop"))
EDGES = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1.1754942e-38, 3.4e38, -3.4e38, 1.0],
                 dtype=np.float32)


def identical(got, expected):
    """The same dtype, shape and bytes (nan payloads and signed zeros included)."""
    if isinstance(expected, tuple) or expected is None:
        assert type(got) is type(expected), (got, expected)
        for g, e in zip(got or (), expected or ()):
            identical(g, e)
        return
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes(), (got, expected)


def identical_results(got: dict, expected: dict):
    assert list(got) == list(expected)
    for name in expected:
        identical(got[name], expected[name])


def inputs_for(graph: Graph, seed: int) -> dict:
    ranges = index_ranges_for(graph.outputs.values(), graph.inputs)
    return {node.arg: random_value(node, seed, ranges) for node in graph.inputs}


def gradient_of(graph: Graph) -> Graph:
    wrt = [node.arg for node in graph.inputs if node.dtype.is_float]
    return differentiate(graph, wrt, keep_forward=True)[0]


def copies(inputs: dict) -> dict:
    return {name: np.array(value, copy=True) for name, value in inputs.items()}


# ----------------------------------------------------------------------------- the same bits as evaluate_graph


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: str(p.relative_to(ROOT / "samples")))
@pytest.mark.parametrize("simplify", ["tinygrad", "exact", None])
def test_sample_and_its_gradient_give_evaluate_graphs_bits_call_after_call(path, simplify):
    graph = load(path)
    for target in (graph, gradient_of(graph)):
        program = compile_graph(target, simplify=simplify)
        for seed in range(3):
            inputs = inputs_for(target, seed)
            kept = copies(inputs)
            expected_stats, stats = EvalStats(), EvalStats()
            expected = evaluate_graph(target, inputs, simplify=simplify, stats=expected_stats)
            identical_results(program(inputs, stats=stats), expected)
            assert (stats.nodes_evaluated, stats.contractions, stats.peak_bytes) == \
                (expected_stats.nodes_evaluated, expected_stats.contractions, expected_stats.peak_bytes)
            identical_results(inputs, kept)  # the caller's arrays were not written


def test_builder_models_match_the_reference_evaluator():
    # a peer that shares no code with the compiled path: the plain op-by-op evaluator, in float64
    sys.path.insert(0, str(ROOT / "samples"))
    try:
        import build
    finally:
        sys.path.remove(str(ROOT / "samples"))
    for name, sample in build.SAMPLES.items():
        grad = gradient_of(sample.build())
        grad64 = to_float64(grad)
        program = compile_graph(grad, simplify=None)
        for seed in range(2):
            inputs = inputs_for(grad, seed)
            got = program(inputs)
            wide = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()}
            for output, value in reference_evaluate_graph(grad64, wide).items():
                if isinstance(value, tuple):
                    continue
                np.testing.assert_allclose(got[output], value, rtol=2e-3, atol=2e-4 * max(1.0, np.abs(value).max()),
                                           err_msg=f"{name} {output}")


def test_simplify_is_applied_at_compile_time():
    # sigmoid's gradient at -100: tinygrad's rewrites give 0, the graph as written 0 * inf = nan
    x = UOp.param("x", (3,), dtypes.float32)
    graph = gradient_of(Graph({"s": x.sigmoid().sum()}))
    inputs = {"x": np.float32([-100, 0, 100])}
    simplified, literal = compile_graph(graph), compile_graph(graph, simplify=None)
    identical_results(simplified(inputs), evaluate_graph(graph, inputs))
    identical_results(literal(inputs), evaluate_graph(graph, inputs, simplify=None))
    assert np.isfinite(simplified(inputs)["grad_x"]).all() and np.isnan(literal(inputs)["grad_x"][0])


def test_a_list_of_uops_is_simplified_in_the_mode_asked_for():
    # the same sigmoid gradient as nodes: "exact" keeps the written 0 * inf = nan at -100,
    # "tinygrad" rewrites it to 0, each as evaluate_graph's same mode gives
    x = UOp.param("x", (3,), dtypes.float32)
    graph = gradient_of(Graph({"s": x.sigmoid().sum()}))
    inputs = {"x": np.float32([-100, 0, 100])}
    for mode in ("exact", "tinygrad"):
        (got,) = compile_graph([graph.outputs["grad_x"]], simplify=mode)(inputs)
        identical(got, evaluate_graph(graph, inputs, simplify=mode)["grad_x"])
        assert np.isnan(got[0]) == (mode == "exact"), (mode, got)


def test_stats_seconds_are_the_calls_own():
    graph = gradient_of(load(ROOT / "samples" / "mlp.uop"))
    program = compile_graph(graph)
    inputs = inputs_for(graph, 3)
    stats = EvalStats()
    start = time.perf_counter()
    program(inputs, stats=stats)
    elapsed = time.perf_counter() - start
    assert 0 < stats.seconds <= elapsed


# ----------------------------------------------------------------------------- many calls, edge values


def test_many_calls_with_edge_values_equal_numpy_bit_for_bit():
    x = UOp.param("x", (len(EDGES),), dtypes.float32)
    y = UOp.param("y", (len(EDGES),), dtypes.float32)
    graph = Graph({"prod": x * y, "quot": x / y, "shifted": (x * 2.0 + y) * 0.5, "neg": -x, "sum": (x * y).sum(0)})
    program = compile_graph(graph)
    rng = np.random.default_rng(1)
    earlier = []
    for call in range(40):
        xv, yv = rng.permutation(EDGES), rng.permutation(EDGES)
        if call % 5 == 0:
            xv = rng.standard_normal(len(EDGES)).astype(np.float32)
        got = program({"x": xv, "y": yv})
        identical_results(got, evaluate_graph(graph, {"x": xv, "y": yv}))
        with np.errstate(all="ignore"):
            identical(got["prod"], xv * yv)
            identical(got["quot"], xv / yv)
            identical(got["shifted"], (xv * np.float32(2.0) + yv) * np.float32(0.5))
            identical(got["neg"], -xv)
        earlier.append((got, {k: v.copy() for k, v in got.items()}))
    for got, snapshot in earlier:  # no later call wrote into an array an earlier one returned
        identical_results(got, snapshot)


def test_an_in_place_update_of_a_result_does_not_reach_the_next_call():
    # elementwise steps write into arrays the evaluator made (the in-place pass); the next
    # call's arrays are new, so a caller's update of a result changes nothing that follows
    x = UOp.param("x", (64,), dtypes.float32)
    w = UOp.param("w", (64,), dtypes.float32)
    graph = Graph({"h": ((x * w + 1.0) * 3.0).exp2(), "g": (x * w + 1.0).sin()})
    program = compile_graph(graph)
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal(64).astype(np.float32), "w": rng.standard_normal(64).astype(np.float32)}
    expected = evaluate_graph(graph, inputs)
    first = program(inputs)
    first["h"] += 100.0
    first["g"][:] = np.nan
    identical_results(program(inputs), expected)


def test_results_fed_back_as_inputs_are_never_written():
    # a power iteration: each call's input is the previous call's output; in-place steps
    # may write only into arrays the evaluator made in that call
    v = UOp.param("v", (32,), dtypes.float32)
    m = UOp.param("m", (32, 32), dtypes.float32)
    mv = (m * v.reshape(1, 32).expand(32, 32)).sum(1)
    graph = Graph({"v": (mv * 0.5 + v * 0.5).tanh(), "same": v})
    program = compile_graph(graph)
    rng = np.random.default_rng(3)
    point = {"m": rng.standard_normal((32, 32)).astype(np.float32), "v": rng.standard_normal(32).astype(np.float32)}
    reference = dict(point)
    for _ in range(20):
        given = point["v"].copy()
        out = program(point)
        identical(point["v"], given)                      # the input array is as it was
        assert not np.shares_memory(out["same"], point["v"])  # an output that is an input is a copy
        identical(out["same"], given)
        identical_results(out, evaluate_graph(graph, reference))
        point = {"m": point["m"], "v": out["v"]}
        reference = {"m": point["m"], "v": out["v"].copy()}


def test_an_output_that_is_an_input_and_two_outputs_of_one_node_are_arrays_of_their_own():
    x = UOp.param("x", (5,), dtypes.float32)
    node = x * 2.0
    graph = Graph({"x": x, "a": node, "b": node, "c": node.reshape(1, 5)})
    program = compile_graph(graph)
    for call in range(3):
        xv = np.arange(5, dtype=np.float32) + call
        out = program({"x": xv})
        assert not np.shares_memory(out["x"], xv)
        assert not np.shares_memory(out["a"], out["b"])
        assert all(value.flags.writeable for value in out.values())
        out["a"][0] = -1.0
        out["x"][0] = -1.0
        identical(out["b"], xv * np.float32(2.0))
        identical(xv, np.arange(5, dtype=np.float32) + call)


# ----------------------------------------------------------------------------- the same refusals


def _message(call) -> str:
    with pytest.raises(EvaluationError) as caught:
        call()
    return str(caught.value)


# (inputs, the one line evaluate_graph gave before it became compile + call: pinned, as the
# two now share one path and comparing them alone would prove nothing)
_REFUSALS = [
    ({"x": np.zeros(3, np.float32)}, "input 'x': expected float32[4], got float32[3]"),
    ({"x": np.zeros(4, np.float64), "w": np.zeros((4, 2), np.float32)}, "input 'x': expected float32[4], got float64[4]"),
    ({"w": np.zeros((4, 2), np.float32)}, "missing input 'x': expected float32[4]"),
    ({"x": np.zeros(4, np.float32)}, "missing input 'w': expected float32[4, 2]"),
    ({}, "missing input 'x': expected float32[4]"),  # both missing: the first the walk meets
    ({"x": np.zeros(4, np.float32), "w": np.zeros((4, 2), np.float32), "typo": np.zeros(1)},
     "unknown input 'typo'; the graph's inputs: x, w"),
    ({"x": [0.0, 0.0, 0.0, 0.0], "w": np.zeros((4, 2), np.float32)},
     "input 'x': expected a numpy array float32[4], got list"),
    ({"x": np.ma.masked_array(np.zeros(4, np.float32)), "w": np.zeros((4, 2), np.float32)},
     "input 'x': a masked array's mask would be ignored; pass value.filled(v) (the value masked elements take) "
     "or np.asarray(value)"),
    ({0: np.zeros(4, np.float32)}, "unknown input 0; the graph's inputs: x, w"),
]


@pytest.mark.parametrize("inputs, message", _REFUSALS,
                         ids=["shape", "dtype", "missing-x", "missing-w", "missing-both", "unknown", "list", "masked",
                              "key"])
def test_refusals_are_evaluate_graphs_word_for_word(inputs, message):
    x = UOp.param("x", (4,), dtypes.float32)
    w = UOp.param("w", (4, 2), dtypes.float32)
    graph = Graph({"y": (x.reshape(4, 1).expand(4, 2) * w).sum(0).relu()}, inputs=[x, w])
    program = compile_graph(graph)
    assert _message(lambda: program(inputs)) == message
    assert _message(lambda: evaluate_graph(graph, inputs)) == message
    ok = {"x": np.ones(4, np.float32), "w": np.ones((4, 2), np.float32)}
    identical_results(program(ok), evaluate_graph(graph, ok))  # a refused call leaves nothing behind


@pytest.mark.parametrize("inputs, message", [
    ({}, "missing input 'x': expected float32[4]"),
    ({"x": np.zeros(4, np.float32)}, "missing input 'w': expected float32[4, 2]"),
    ({"x": np.zeros(4, np.float32), "w": np.zeros((2, 4), np.float32)}, "input 'w': expected float32[4, 2], got float32[2, 4]"),
    ({"w": np.zeros((4, 2), np.float32), "x": np.zeros(4, np.int32)}, "input 'x': expected float32[4], got int32[4]"),
    ({"w": np.zeros((4, 2), np.float32), "x": None}, "input 'x': expected a numpy array float32[4], got NoneType"),
    ({1.5: np.zeros(4, np.float32)}, "input keys must be names or UOps, got float"),
], ids=["missing-both", "missing-w", "shape", "dtype", "none", "key"])
def test_a_list_of_uops_refuses_as_evaluate_did(inputs, message):
    # a list is not checked against a Graph's inputs first: these are the bind's own checks
    x = UOp.param("x", (4,), dtypes.float32)
    w = UOp.param("w", (4, 2), dtypes.float32)
    outputs = [(x.reshape(4, 1).expand(4, 2) * w).sum(0), x * 2.0]
    assert _message(lambda: compile_graph(outputs, simplify=None)(inputs)) == message
    assert _message(lambda: evaluate(outputs, inputs)) == message


def test_a_list_of_uops_is_evaluate_including_nodes_given_by_value():
    x = UOp.param("x", (3,), dtypes.float32)
    hidden = (x * 3.0).exp2()
    outputs = [hidden.sum(), (hidden + 1.0).log2(), x]
    program = compile_graph(outputs, simplify=None)
    for seed in range(3):
        xv = np.random.default_rng(seed).standard_normal(3).astype(np.float32)
        got = program({"x": xv})
        assert isinstance(got, list)
        for g, e in zip(got, evaluate(outputs, {"x": xv})):
            identical(g, e)
        given = {hidden: np.float32([1, 2, 4]), "x": xv}  # hidden's sources are not evaluated
        for g, e in zip(program(given), evaluate(outputs, given)):
            identical(g, e)
    bad = {hidden: np.zeros(2, np.float32), "x": np.zeros(3, np.float32)}
    assert _message(lambda: program(bad)) == _message(lambda: evaluate(outputs, bad)) == \
        f"input {hidden!r}: expected float32[3], got float32[2]"
    assert "need simplify=None" in _message(lambda: compile_graph(outputs)({hidden: np.zeros(3, np.float32)}))


def test_a_single_uop_gives_a_list_of_one_as_evaluate():
    x = UOp.param("x", (), dtypes.float32)
    got = compile_graph(x * 2.0, simplify=None)({"x": np.float32(1.5)})
    assert isinstance(got, list) and len(got) == 1
    identical(got[0], np.asarray(np.float32(3.0)))


def test_a_pickled_program_is_compiled_again_and_gives_the_same_bits():
    graph = gradient_of(load(ROOT / "samples" / "mlp.uop"))
    program = compile_graph(graph)
    inputs = inputs_for(graph, 0)
    identical_results(pickle.loads(pickle.dumps(program))(inputs), program(inputs))


def test_stats_of_a_call_count_nothing_of_the_call_before():
    # a masked contraction with an inf among its values runs its WHEREs as written, with no
    # temporaries: the scratch bytes of the finite call before it must not count again
    m = UOp.param("m", (8, 16, 12), dtypes.bool)
    v = UOp.param("v", (8, 1, 12), dtypes.float32)
    w = UOp.param("w", (1, 16, 12), dtypes.float32)
    graph = Graph({"o": m.where(v.expand(8, 16, 12) * w.expand(8, 16, 12), 0.0).sum(1)})
    program = compile_graph(graph, simplify=None)
    rng = np.random.default_rng(4)
    finite = {"m": rng.random((8, 16, 12)) < 0.5, "v": rng.standard_normal((8, 1, 12)).astype(np.float32),
              "w": rng.standard_normal((1, 16, 12)).astype(np.float32)}
    infinite = {**finite, "v": np.full((8, 1, 12), np.inf, np.float32)}
    peaks = []
    for inputs in (finite, infinite, finite):
        stats, expected = EvalStats(), EvalStats()
        identical_results(program(inputs, stats=stats), evaluate_graph(graph, inputs, simplify=None, stats=expected))
        assert stats.contractions == 1
        assert stats.peak_bytes == expected.peak_bytes
        peaks.append(stats.peak_bytes)
    assert peaks[1] < peaks[0] == peaks[2]  # the finite calls' temporaries are seen, and only in them


# ----------------------------------------------------------------------------- threads


def test_one_program_called_from_threads_at_once_gives_each_calls_own_results():
    graph = gradient_of(load(ROOT / "samples" / "conv2d.uop"))
    program = compile_graph(graph)
    calls = [inputs_for(graph, seed) for seed in range(8)]
    serial_stats = [EvalStats() for _ in calls]
    expected = [evaluate_graph(graph, inputs, stats=s) for inputs, s in zip(calls, serial_stats)]
    failures: list = []
    barrier = threading.Barrier(4)

    def worker(offset: int):
        barrier.wait()
        try:
            for turn in range(12):
                index = (offset + turn) % len(calls)
                stats = EvalStats()
                identical_results(program(calls[index], stats=stats), expected[index])
                assert stats.peak_bytes == serial_stats[index].peak_bytes
        except BaseException as error:  # noqa: BLE001 - reported in the main thread
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


# ----------------------------------------------------------------------------- a deep graph


def test_a_deep_chain_compiles_at_the_default_recursion_limit_and_runs_twice(default_recursion_limit):
    # 200,000 nodes: deep enough for any recursion to fail; the walk is evaluate's, whose
    # million-node test (test_evaluate.py) covers the length (a million here took 20 s)
    with no_gc():
        y = UOp.param("x", (), dtypes.float32)
        for _ in range(100_000):
            y = y * 1.0000001 + 0.25
        program = compile_graph([y], simplify=None)
    for start in (np.float32(1), np.float32(-3)):
        expected = start
        for _ in range(100_000):
            expected = expected * np.float32(1.0000001) + np.float32(0.25)
        stats = EvalStats()
        identical(program({"x": np.asarray(start)}, stats=stats)[0], np.asarray(expected))
        assert stats.nodes_evaluated == 200_002
