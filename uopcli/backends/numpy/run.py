"""The run loop: each step's impl on its sources' values, values dropped after their last
reader; with an EvalStats, the same loop also counts the bytes of live arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import EvaluationError
from .contraction import Contraction
from .program import EXTERNAL, MAYBE_VIEW, VIEW, Program


@dataclass
class EvalStats:
    """Filled in by `evaluate` when passed: what the evaluation cost."""
    seconds: float = 0.0          # wall time: compile and run (evaluate), or one call of a CompiledGraph
    peak_bytes: int = 0           # peak bytes of live arrays the evaluator allocated (not the caller's inputs)
    nodes_evaluated: int = 0      # steps run (renaming nodes and fused products cost none)
    contractions: int = 0         # REDUCE ADD over products run as matmul/einsum


# Sources are passed by arity: unpacking a list built per step costs more than most
# scalar ops themselves.

_NUMPY_FAILURES = (ArithmeticError, ValueError, TypeError, IndexError, MemoryError)


def _failed(node, error: Exception) -> EvaluationError:
    return EvaluationError(f"evaluating {node!r}: {type(error).__name__}: {error}")


def run(program: Program, bound: dict, stats: EvalStats | None = None) -> list:
    """Every register's value after the program ran on `bound` ({input register: array})
    (None where a value was dropped after its last reader); with `stats`,
    stats.peak_bytes as well (see _Meter). The register list is this call's own: calls
    from several threads at once share only the program, which no step writes."""
    values = [None] * program.register_count
    for reg, value in bound.items():
        values[reg] = value
    meter = None if stats is None else _Meter(program, bound)
    step = None
    try:
        for step in program.steps:
            srcs = step.sources
            arity = len(srcs)
            if arity == 2:
                result = step.impl(step.node, values[srcs[0]], values[srcs[1]])
            elif arity == 1:
                result = step.impl(step.node, values[srcs[0]])
            else:
                result = step.impl(step.node, *[values[s] for s in srcs])
            values[step.out] = result
            if meter is not None:
                meter.count(step, result, values)
            for s in step.frees:
                values[s] = None
    except _NUMPY_FAILURES as error:  # e.g. out of memory: name the node that asked
        raise _failed(step.node, error) from error
    if meter is not None:
        stats.peak_bytes = meter.peak
    return values


def _owner(array):
    """The array that owns the memory `array` looks at (numpy collapses view chains,
    except for a few helper arrays such as broadcast_to's)."""
    base = array.base
    while isinstance(base, np.ndarray):
        array, base = base, base.base
    return array


class _Meter:
    """The bytes of live arrays the evaluator made, counted step by step: an array and the
    views of it count once, from its first to its last use; the caller's inputs count 0."""

    __slots__ = ("owner_of", "live", "live_bytes", "peak")

    def __init__(self, program: Program, bound: dict):
        self.owner_of = [0] * program.register_count  # register -> id of the array owning its memory
        self.live: dict[int, list] = {}               # owner id -> [registers using it, bytes, owner]
        self.live_bytes = self.peak = 0
        for reg, value in bound.items():
            key = self.owner_of[reg] = id(_owner(value))
            entry = self.live.get(key)
            if entry is None:
                self.live[key] = [1, 0, value]        # the caller's memory: not counted
            else:
                entry[0] += 1

    def count(self, step, result, values: list) -> None:
        """After `step` stored `result` (its sources still in `values`), before its frees."""
        live, owner_of, kind = self.live, self.owner_of, step.memory
        if kind == VIEW or kind == MAYBE_VIEW and result.base is not None \
                and np.may_share_memory(result, values[step.sources[0]]):
            key = owner_of[step.sources[0]]
            live[key][0] += 1
        else:
            owner = _owner(result)
            key = id(owner)
            entry = live.get(key)
            if entry is not None:
                entry[0] += 1
            else:
                size = 0 if kind == EXTERNAL else owner.nbytes
                live[key] = [1, size, owner]
                self.live_bytes += size
                if self.live_bytes > self.peak:
                    self.peak = self.live_bytes
            impl = step.impl
            if impl.__class__ is Contraction and self.live_bytes + impl.scratch_bytes > self.peak:
                self.peak = self.live_bytes + impl.scratch_bytes  # its temporaries lived beside the result
        owner_of[step.out] = key
        for s in step.frees:
            entry = live[owner_of[s]]
            entry[0] -= 1
            if not entry[0]:
                self.live_bytes -= entry[1]
                del live[owner_of[s]]
