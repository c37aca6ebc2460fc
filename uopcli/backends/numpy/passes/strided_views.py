"""Pass 2: movement chains that are one view become one strided-view step, and REDUCE ADDs
over padded chains one strided scatter-add (see strided.py); the chain's own steps go
when nothing else reads them.

Needs: pass 1 done (its contractions read the chain steps' original sources, and their
factors are these views); steps still running their IMPL row are the ones it may fuse."""

from __future__ import annotations

from ....core.ops import Ops
from .. import strided
from ..program import VIEW, Program, output_registers, read_counts
from ..table import IMPL, reduce_values


_CHAIN_OPS = frozenset(strided.BACKWARD) | frozenset(strided.FORWARD)


def fuse_strided(program: Program) -> None:
    """Movement chains that are one view become one strided-view step, and REDUCE ADDs over
    padded chains one strided scatter-add (see strided.py); the chain's own steps go
    when nothing else reads them. Runs after fuse_contractions, whose factors are these
    views (and which reads the steps' original sources)."""
    steps = program.steps
    made_by = {step.out: (step.node, step.sources[0]) for step in steps
               if step.node.op in _CHAIN_OPS and step.impl is IMPL[step.node.op]}  # register -> (node, its source)
    backward = strided.BACKWARD
    forward = strided.FORWARD
    # only the last op of a chain, whose value something else reads, becomes a view: the
    # ops before it go, or stay op by op; so a long run of RESHAPEs is walked once, not per op
    heads = output_registers(program)
    for step in steps:
        if step.node.op not in backward:
            heads.update(step.sources)

    def view_source(register):
        made = made_by.get(register)
        return made if made is not None and made[0].op in backward else None

    changed = False
    for step in steps:
        node = step.node
        if node.op in backward and step.impl is IMPL[node.op] and step.out in heads:
            found = strided.chain_view(node, step.sources[0], view_source)
            if found is not None and found[2] >= 2 and found[3]:  # numpy alone may copy on a RESHAPE
                step.impl, step.sources, step.memory = found[1], (found[0],), VIEW
                changed = True
        elif node.op == Ops.REDUCE and node.arg[0] == "ADD" and step.impl is reduce_values:
            scatter = _scatter_step(node, step.sources[0], made_by, forward)
            if scatter is not None:
                step.impl, step.sources = scatter
                changed = True
    if changed:
        _drop_unread_chain_steps(program)


def _scatter_step(node, register, made_by, forward):
    """(impl, sources) for REDUCE ADD `node` over a chain of PAD/RESHAPE/PERMUTE/FLIP with a
    PAD in it, run as a scatter-add of the chain's start, or None."""
    chain = []
    while len(chain) < strided.MAX_CHAIN:
        made = made_by.get(register)
        if made is None or made[0].op not in forward:
            break
        chain.append(made[0])
        register = made[1]
    if not any(op_node.op == Ops.PAD for op_node in chain):
        return None
    start_shape = chain[-1].src[0].shape
    if 0 in start_shape or 0 in node.shape:
        return None
    scatter = strided.reduce_scatter(node, chain, start_shape)
    return None if scatter is None else (scatter, (register,))


def _drop_unread_chain_steps(program: Program) -> None:
    """Remove movement/PAD steps whose value nothing reads any more (their readers now
    read the chain's start), last first so a dropped step frees its own sources."""
    reads = read_counts(program)
    kept = []
    for step in reversed(program.steps):
        if step.node.op in _CHAIN_OPS and not reads[step.out]:
            for s in step.sources:
                reads[s] -= 1
            continue
        kept.append(step)
    program.steps = kept[::-1]
