"""Pass 6: elementwise steps reading a strided view whose axes overlap in memory (pooling
windows) run in the order _overlap_order gives (see _InViewOrder).

Needs: pass 2 done (the StridedView steps exist) and pass 5 done (it wraps the step's
final impl, in-place or not)."""

from __future__ import annotations

import numpy as np

from ....core.ops import ELEMENTWISE
from .. import strided
from ..program import Program
from ..table import COMPARE_UFUNCS, ufunc_of


def order_view_readers(program: Program) -> None:
    """Elementwise steps that read a strided view whose axes overlap run in the order
    _overlap_order gives (see _InViewOrder)."""
    viewed = {step.out for step in program.steps if step.impl.__class__ is strided.StridedView}
    if not viewed:
        return
    for step in program.steps:
        if step.node.op in ELEMENTWISE:
            for position, reg in enumerate(step.sources):
                if reg in viewed:
                    step.impl = _InViewOrder(step.impl, position, ufunc_of(step.node) or COMPARE_UFUNCS.get(step.node.op))
                    break


_ORDER_MIN_SIZE = 1 << 15  # elements: below it the transposes cost more than they save


class _InViewOrder:
    """An elementwise step over pooling windows. A pool's windows (N, C, H, W, 3, 3) step
    along W and along the window's last axis over the same memory (one element apart for
    both at stride 1, two and one at stride 2), and numpy walks them in stride order: its
    inner loop runs over the window's 3 elements, and it lays the result out the same way,
    so every step reading the result loops 3 at a time too (a max pool's gradient ran
    3-7x slower than on a copy). Here the sources are transposed so the longer axis of
    each such pair is inner, the step runs in that order (a ufunc told order="C", since
    its own order would undo the transposes; another impl on a copy of the view in that
    order, whose layout it keeps), and its result is transposed back: a view of an array
    laid out (N, C, 3, H, 3, W), which numpy then walks in its memory order."""

    __slots__ = ("impl", "position", "ufunc")

    def __init__(self, impl, position: int, ufunc):
        self.impl, self.position, self.ufunc = impl, position, ufunc

    def __call__(self, node, *sources):
        order = _overlap_order(sources[self.position])
        if order is None:
            return self.impl(node, *sources)
        rank = len(order)
        moved = [s.transpose(order) if np.ndim(s) == rank else s for s in sources]
        if self.ufunc is not None:
            result = self.ufunc(*moved, order="C")
        else:
            moved[self.position] = np.ascontiguousarray(moved[self.position])
            result = self.impl(node, *moved)
        return result.transpose(np.argsort(order))


def _overlap_order(view):
    """The axes of `view` outer to inner: by stride, largest first (axes of size 1 or
    stride 0 outermost), then each axis whose span reaches the stride of the axis just
    outside it (they overlap in memory) swapped with that axis when it is the shorter one.
    None when nothing was swapped: numpy walks the stride order by itself (or when
    `view` is small)."""
    if not isinstance(view, np.ndarray) or view.size < _ORDER_MIN_SIZE:
        return None
    shape, strides = view.shape, [abs(s) for s in view.strides]
    order = sorted(range(view.ndim), key=lambda a: (shape[a] > 1 and strides[a] > 0, -strides[a]))
    swapped = False
    for i in range(len(order) - 1, 0, -1):  # inner to outer
        outer, inner = order[i - 1], order[i]
        if shape[outer] > 1 and strides[outer] and strides[inner] * (shape[inner] - 1) >= strides[outer] \
                and shape[inner] < shape[outer]:
            order[i - 1], order[i] = inner, outer
            swapped = True
    return tuple(order) if swapped else None
