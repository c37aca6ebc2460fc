"""What an algebraic row's ulp bound is counted in (algebraic.Row.scale), shared by the row
tests: the result, 1.0, the largest value the expression holds on the way, or that and the
product of the factors a merged ratio multiplies."""

from __future__ import annotations

import numpy as np

from uopcli import Ops
from uopcli.backends.reference import reference_evaluate
from uopcli.core.simplify import nodes
from uopcli.core.substitute import substitute


def _largest_on_the_way(expr, feed) -> np.ndarray:
    """The largest magnitude among the expression's values of its shape (or scalar constants),
    elementwise: its intermediates, its constants and its result."""
    held = [m for m in expr.toposort() if m.shape in (expr.shape, ()) and m.dtype is expr.dtype]
    values = reference_evaluate(held, feed)
    return np.max(np.abs(np.stack([np.broadcast_to(v, expr.shape) for v in values])), axis=0)


def _is_one_minus_ratio(m) -> bool:
    """1 - 1/(1+x), as sigmoid_ratio writes a merged x * 1/(1+x)."""
    return (m.op == Ops.SUB and m.src[0].op == Ops.CONST and float(nodes.const_value(m.src[0])) == 1.0
            and m.src[1].op == Ops.RECIPROCAL)


def _other_factors(after, shape, feed) -> np.ndarray | None:
    """|the rewritten product with each 1 - 1/(1+x) taken as 1|: what the ulp of 1 that the
    subtraction can be off by is multiplied by."""
    merged = {m: nodes.const(1, m) for m in after.toposort() if _is_one_minus_ratio(m)}
    if not merged:
        return None
    (others,) = substitute([after], merged)
    return np.abs(np.broadcast_to(np.asarray(reference_evaluate([others], feed)[0]), shape))


def row_scale(row, expr, literal, after, feed) -> np.ndarray:
    """The magnitude row's ulps are measured at, elementwise, for `expr` rewritten to `after`."""
    if row.scale == "one":
        return np.ones_like(literal)
    if row.scale == "operands":
        return _largest_on_the_way(expr, feed)
    if row.scale == "factors":
        scale = _largest_on_the_way(expr, feed)
        others = _other_factors(after, expr.shape, feed)
        return scale if others is None else np.maximum(scale, others.astype(scale.dtype))
    return literal
