"""Pass 7, the last: elementwise steps reading an EXPAND may find every source broadcast
along the same axes, and then run once along them (see OnBroadcast).

Needs: every other pass done: it wraps whatever impl the step ended with. (The
contraction kernels use OnBroadcast too, for gather's one-hot compare.)"""

from __future__ import annotations

import math

import numpy as np

from ....core.ops import ELEMENTWISE, Ops
from ..program import Program


def shrink_broadcast_steps(program: Program) -> None:
    """Elementwise steps reading an EXPAND may find every source broadcast along the same
    axes (see OnBroadcast)."""
    for step in program.steps:
        node = step.node
        if node.op in ELEMENTWISE and node.shape and math.prod(node.shape) >= _BROADCAST_MIN_SIZE \
                and any(source.op == Ops.EXPAND for source in node.src):
            step.impl = OnBroadcast(step.impl)


_BROADCAST_MIN_SIZE = 1 << 12  # elements: below it the check costs more than it can save


class OnBroadcast:
    """An elementwise step whose sources are all broadcast along some axes (stride 0: an
    EXPAND) runs once along them and broadcasts its result, as the EXPAND did its source:
    gather's one-hot mask, index == arange over (N, C, H, W, n), is n·W distinct values."""

    __slots__ = ("impl",)

    def __init__(self, impl):
        self.impl = impl

    def __call__(self, node, *sources):
        common = None
        for source in sources:
            if isinstance(source, np.ndarray) and source.ndim:
                zero = {axis for axis, stride in enumerate(source.strides) if stride == 0 and source.shape[axis] > 1}
                common = zero if common is None else common & zero
                if not common:
                    return self.impl(node, *sources)
        if not common:
            return self.impl(node, *sources)
        cut = tuple(slice(0, 1) if axis in common else slice(None) for axis in range(len(node.shape)))
        small = [source[cut] if isinstance(source, np.ndarray) and source.ndim else source for source in sources]
        return np.broadcast_to(self.impl(node, *small), node.shape)
