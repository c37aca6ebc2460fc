"""Pass 3: a contraction read only by a strided scatter-add lays its result out for the
scatter's loop (conv2d's input gradient and its col2im).

Needs: passes 1 and 2 done: the Contraction steps and the StridedScatter steps exist."""

from __future__ import annotations

from .. import strided
from ..contraction import Contraction
from ..program import Program, read_counts


def lay_out_for_scatters(program: Program) -> None:
    """A contraction read only by a scatter-add lays its result out for the scatter's
    loop (see Contraction.outer, _outer_layout): conv2d's input gradient and its col2im."""
    reads = read_counts(program)
    impl_of = {step.out: step.impl for step in program.steps}
    for step in program.steps:
        scatter = step.impl
        if scatter.__class__ is strided.StridedScatter and scatter.looped:
            source = step.sources[0]
            contraction = impl_of.get(source)
            if contraction.__class__ is Contraction and reads[source] == 1:
                contraction.outer = scatter.looped
