"""Pass 4: each step gets the registers it reads for the last time, to drop right after it.

Needs: every pass that adds, removes or rewires steps done (1-3): only then is the last
reader of each register final. The passes after it change impls only."""

from __future__ import annotations

from ..program import Program, output_registers


def plan_frees(program: Program) -> None:
    """Each step gets the registers it reads for the last time, to drop right after it."""
    last_reader: list = [None] * program.register_count
    for step in program.steps:
        for s in step.sources:
            last_reader[s] = step
    for reg in output_registers(program):
        last_reader[reg] = None
    for reg, step in enumerate(last_reader):
        if step is not None:
            step.frees += (reg,)
