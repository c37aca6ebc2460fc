"""Compile once, run many times: a CompiledGraph holds the program of a graph (simplified
once, when asked) and runs it on each call's inputs. evaluate and evaluate_graph are one
compile and one call of it, so there is one path.

What a program depends on is the graph and which nodes the caller supplies (a node given
by itself is not evaluated), never the inputs' values: each call binds its arrays into a
register list of its own (bind), runs, and hands the outputs back as arrays of their own
(_Finisher). Nothing of one call is kept for the next: no step writes into an input, and
an output never is an array a later call writes into (each call's arrays are new)."""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np

from ...errors import EvaluationError
from ...core.graph import Graph
from ...core.uop import UOp
from ...core.walks import no_gc
from ..inputs import checked_inputs, describe, input_array
from .compiler import compile_program
from .program import Program
from .run import EvalStats, run


class CompiledGraph:
    """A graph (or a list of UOps) compiled once; call it with inputs as often as needed:

        program = compile_graph(graph)                  # simplified and compiled here, once
        program({"x": x, "w": w})   -> {"loss": array, "grad_w": array}

    Each call gives exactly what evaluate_graph (for a Graph) or evaluate (for a list of
    UOps) gives for the same inputs, bit for bit, with the same checks and errors: outputs
    are writable arrays of their own (never an input, nor another output's array, nor one
    a later call writes into), and `stats` (an EvalStats) is filled in per call
    (`seconds` is the call's: binding, running, finishing).

    Threads: one CompiledGraph may be called from several threads at once. Each call binds
    its arrays into a register list of its own and no step writes the program (a
    contraction's scratch count, for EvalStats, is kept per thread). A list of UOps whose
    inputs are keyed by node compiles one program per set of such keys, on first use."""

    __slots__ = ("_outputs", "_names", "_graph", "_as_written", "_programs")

    def __init__(self, outputs: Sequence[UOp], names: list[str] | None, graph: Graph | None, as_written: bool,
                 supplied: frozenset = frozenset()):
        self._outputs = list(outputs)
        self._names = names            # a Graph's output names (results as a dict), or None (a list)
        self._graph = graph            # the Graph whose inputs check the names, or None (a list)
        self._as_written = as_written  # not simplified: inputs may be keyed by node
        self._programs: dict[frozenset, Program] = {}
        self._program(supplied)        # compile now: a graph that cannot run fails here

    def __call__(self, inputs: Mapping, *, stats: EvalStats | None = None):
        """The outputs for `inputs`: {output name: array} for a Graph, a list for a list
        of UOps (see evaluate_graph and evaluate)."""
        return self._call(inputs, stats, time.perf_counter())

    def __reduce__(self):
        # the program holds per-thread state and closures: a pickle carries the (already
        # simplified) graph or outputs, compiled again where it is loaded
        if self._graph is not None:
            return _of_graph, (self._graph,)
        return CompiledGraph, (self._outputs, None, None, self._as_written)

    def _program(self, supplied: frozenset) -> Program:
        program = self._programs.get(supplied)
        if program is None:  # two threads may both compile a new key set: the same program, kept once
            with no_gc():  # graphs are acyclic: scanning them while the program grows finds nothing
                program = compile_program(self._outputs, supplied)
            program = self._programs.setdefault(supplied, program)
        return program

    def _call(self, inputs: Mapping, stats: EvalStats | None, start: float):
        if self._graph is not None:
            inputs = checked_inputs(self._graph, inputs)
        by_name, by_node = _split_keys(inputs)
        if by_node and not self._as_written:
            raise EvaluationError("inputs keyed by node need simplify=None: simplifying rewrites the nodes")
        program = self._program(frozenset(by_node))
        bound = bind(program, by_name, by_node)
        with no_gc(), np.errstate(all="ignore"):
            values = run(program, bound, stats)
        results = _finished(program, values, bound.values())
        if stats is not None:
            stats.seconds = time.perf_counter() - start
            stats.nodes_evaluated = len(program.steps)
            stats.contractions = program.contractions
        return results if self._names is None else dict(zip(self._names, results))


def compile_graph(graph: Graph | Sequence[UOp] | UOp, *, simplify: str | None = "tinygrad") -> CompiledGraph:
    """`graph` compiled once, to call with inputs as often as needed (see CompiledGraph):
    `compile_graph(graph)(inputs)` is `evaluate_graph(graph, inputs)`, and
    `compile_graph(outputs, simplify=None)(inputs)` is `evaluate(outputs, inputs)`.
    `simplify` ("tinygrad", "exact" or None, as evaluate_graph's) is applied here, once.
    For a list of UOps, inputs keyed by node (not name) need simplify=None."""
    if isinstance(graph, Graph):
        graph.check_interface()  # outputs and inputs may have been changed in place
        if simplify is not None:
            graph = simplified(graph, simplify)
        return _of_graph(graph)
    outputs = [graph] if isinstance(graph, UOp) else list(graph)
    if simplify is not None:
        outputs = _simplified_nodes(outputs, simplify)
    return CompiledGraph(outputs, None, None, simplify is None)


def _of_graph(graph: Graph) -> CompiledGraph:
    names = list(graph.outputs)
    return CompiledGraph([graph.outputs[n] for n in names], names, graph, True)  # inputs by name only


def evaluate_once(outputs: Sequence[UOp], inputs: Mapping, stats: EvalStats | None) -> list:
    """evaluate's one call: compiled for the nodes `inputs` supplies, then run."""
    start = time.perf_counter()
    if isinstance(outputs, UOp):
        outputs = [outputs]
    by_node = frozenset(_split_keys(inputs)[1])
    return CompiledGraph(outputs, None, None, True, by_node)._call(inputs, stats, start)


def simplified(graph: Graph, mode: str) -> Graph:
    from ...core.simplify import simplify
    return simplify(graph, exact=_exact(mode))


def _simplified_nodes(outputs: list, mode: str) -> list:
    from ...core.simplify import simplify_nodes
    return simplify_nodes(outputs, exact=_exact(mode))


def _exact(mode: str) -> bool:
    from ...core.simplify import MODES
    if mode not in MODES:
        raise EvaluationError(f"simplify must be one of {', '.join(MODES)} or None, got {mode!r}")
    return mode == "exact"


# ----------------------------------------------------------------------------- one call


def _split_keys(inputs: Mapping) -> tuple[dict, dict]:
    """({name: value}, {node: value}) of the caller's inputs."""
    by_name: dict[str, object] = {}
    by_node: dict[UOp, object] = {}
    for key, value in inputs.items():
        if isinstance(key, UOp):
            by_node[key] = value
        elif isinstance(key, str):
            by_name[key] = value
        else:
            raise EvaluationError(f"input keys must be names or UOps, got {type(key).__name__}")
    return by_name, by_node


def bind(program: Program, by_name: Mapping, by_node: Mapping) -> dict:
    """{input register: the caller's array}, each checked against its node (input_array),
    in the order the compiler met them: the first missing or mismatched input is the one
    compiling with the values in hand would have refused."""
    bound = {}
    for register, key, node in program.inputs:
        if key.__class__ is str:
            if key not in by_name:
                raise EvaluationError(f"missing input {key!r}: expected {describe(node)}")
            bound[register] = input_array(f"input {key!r}", node, by_name[key])
        else:
            bound[register] = input_array(f"input {node!r}", node, by_node[key])
    return bound


def _finished(program: Program, values: list, inputs) -> list:
    """Per requested output, its array (or tuple of arrays, None for NOOP), as the caller gets it."""
    finish = _Finisher(inputs)
    results = []
    for out in program.outputs:
        if isinstance(out, tuple):
            results.append(tuple(None if r is None else finish(values[r]) for r in out))
        else:
            results.append(None if out is None else finish(values[out]))
    return results


class _Finisher:
    """Outputs as the caller gets them: writable ndarrays (numpy scalars become 0-d arrays;
    read-only views, such as a broadcast, are copied), none of them the caller's own input
    array or a view of it, nor an array another output already is (an in-place update of
    one result, `res["w"] -= lr * res["grad_w"]`, changes nothing else)."""

    def __init__(self, inputs):
        self.held = {id(a) for value in inputs for a in (value, value.base) if a is not None}
        self.given: set[int] = set()

    def __call__(self, value):
        if value is None:
            return None
        value = np.asarray(value)
        if not value.flags.writeable or id(value) in self.given or id(value) in self.held \
                or (value.base is not None and id(value.base) in self.held):
            value = value.copy()
        self.given.add(id(value))
        return value
