"""Pass 5: elementwise steps write into a source array that dies with them (`z += b`).

Needs: passes 1-3 done, so that each step's `memory` kind is final (a contraction's
result is NEW, a strided view a VIEW of its start): that is how it tells which registers
share an array. It replaces a step's table impl, so it runs before the passes that wrap
impls (6, 7)."""

from __future__ import annotations

import functools

from ....core.ops import Ops
from ..program import MAYBE_VIEW, NEW, VIEW, Program, output_registers
from ..table import FLOAT_UFUNC_INTO, NOT_INTO_STRIDED, UFUNC_INTO, ufunc_of, where_into_a, where_into_b


@functools.lru_cache(maxsize=None)
def _into_source(ufunc, position: int, arity: int):
    """impl computing ufunc into source `position` (when numpy lets it be written, and
    for a NOT_INTO_STRIDED ufunc only when it is contiguous)."""
    if arity == 1 and ufunc in NOT_INTO_STRIDED:
        return lambda node, x: ufunc(x, out=x) if x.flags.writeable and x.flags.forc else ufunc(x)
    if arity == 1:
        return lambda node, x: ufunc(x, out=x) if x.flags.writeable else ufunc(x)
    if position == 0:
        return lambda node, a, b: ufunc(a, b, out=a) if a.flags.writeable else ufunc(a, b)
    return lambda node, a, b: ufunc(a, b, out=b) if b.flags.writeable else ufunc(a, b)


def _in_place_impl(step, position: int):
    node = step.node
    ufunc = ufunc_of(node)
    if ufunc is not None:
        return _into_source(ufunc, position, len(step.sources))
    if node.op == Ops.WHERE and position:
        return where_into_a if position == 1 else where_into_b
    return None


def plan_in_place(program: Program) -> None:
    """Let elementwise steps write into a source array that dies with them. Safe when the
    array is one the evaluator made (not an input, not an output), the source (maybe a
    view of it) has the result's shape and dtype, and nothing reads the array, or any view
    of it, later or elsewhere in this step. Read-only views (broadcasts) are caught when
    the step runs."""
    steps = program.steps
    candidates = [index for index, step in enumerate(steps) if step.node.shape and (
        step.node.op in UFUNC_INTO or step.node.op in FLOAT_UFUNC_INTO or step.node.op == Ops.WHERE)]
    if not candidates:  # scalar graphs: nothing to gain
        return
    producer: list = [None] * program.register_count
    memory = list(range(program.register_count))  # register -> register whose array it looks at
    for step in steps:
        producer[step.out] = step
        if step.memory == VIEW or step.memory == MAYBE_VIEW:
            memory[step.out] = memory[step.sources[0]]
    last_reader = [-1] * program.register_count   # by memory owner: the last step reading it or a view
    for index, step in enumerate(steps):
        for s in step.sources:
            last_reader[memory[s]] = index
    for reg in output_registers(program):
        last_reader[memory[reg]] = -1
    for index in candidates:
        step = steps[index]
        node, srcs = step.node, step.sources
        for position, reg in enumerate(srcs):
            root = memory[reg]
            made = producer[root]
            if made is None or made.memory != NEW or last_reader[root] != index:
                continue
            source = producer[reg].node
            if source.shape != node.shape or source.dtype is not node.dtype:
                continue
            if any(memory[s] == root for p, s in enumerate(srcs) if p != position):
                continue  # the step also reads this array under another name or layout
            impl = _in_place_impl(step, position)
            if impl is not None:
                step.impl = impl
                break
