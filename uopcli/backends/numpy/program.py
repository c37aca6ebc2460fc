"""What the compiler emits and the passes rewrite: a Program of Steps, and the register
bookkeeping the passes share (who reads a register, which registers are outputs)."""

from __future__ import annotations

from ...core.ops import Ops


# How a step's result relates to memory, for the peak-bytes count.
_VIEW_OPS = frozenset({Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.BITCAST})  # always views of src 0
_MAYBE_VIEW_OPS = frozenset({Ops.RESHAPE})                                          # a view when numpy can
NEW, VIEW, MAYBE_VIEW, EXTERNAL = 0, 1, 2, 3


def memory_kind(op: str) -> int:
    if op in _VIEW_OPS:
        return VIEW
    if op in _MAYBE_VIEW_OPS:
        return MAYBE_VIEW
    return EXTERNAL if op == Ops.BUFFER else NEW


class Step:
    """One step: `out = impl(node, *values of sources)`, then the registers in `frees` are
    dropped. `memory` says how the result relates to memory (NEW, VIEW, ...); the passes
    replace `impl` (a contraction, a strided view, an in-place ufunc) and `sources`."""

    __slots__ = ("impl", "node", "sources", "out", "memory", "frees")

    def __init__(self, impl, node, sources: tuple, out: int, memory: int, frees: tuple = ()):
        self.impl = impl
        self.node = node
        self.sources = sources  # registers, one per value impl takes after the node
        self.out = out          # the register the result goes to
        self.memory = memory
        self.frees = frees      # registers read here for the last time (set by plan_frees)

    def __repr__(self) -> str:
        return f"Step({self.node.op} {self.sources} -> {self.out}, frees {self.frees})"


class Program:
    """The steps in the order they run, and the registers around them."""

    __slots__ = ("steps", "register_count", "inputs", "outputs", "contractions")

    def __init__(self):
        self.steps: list[Step] = []
        self.register_count = 0
        # per input, in the order the walk met it: (register, its name or supplied node, the node);
        # the arrays are bound per call (compiled.bind), never kept here
        self.inputs: list[tuple[int, object, object]] = []
        self.outputs: list = []      # per requested output: a register, None, or a tuple of those
        self.contractions = 0


def output_registers(program: Program) -> set[int]:
    """The registers the caller gets back (never freed, never written into)."""
    regs = set()
    for out in program.outputs:
        regs.update(r for r in (out if isinstance(out, tuple) else (out,)) if r is not None)
    return regs


def read_counts(program: Program) -> list[int]:
    """Per register, how many step sources and outputs read it."""
    reads = [0] * program.register_count
    for step in program.steps:
        for s in step.sources:
            reads[s] += 1
    for reg in output_registers(program):
        reads[reg] += 1
    return reads
