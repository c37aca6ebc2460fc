"""The tests' finite-difference gradient, computed with the package's independent
reference evaluator (uopcli.backends.reference: plain numpy per op, no fast paths), so the
gradient tests do not depend on the production evaluator alone, and cross-check it. The
production evaluator is uopcli.evaluate, imported from there by the tests that use it.
"""

from __future__ import annotations

import numpy as np

from uopcli import UOp
from uopcli.backends.reference import reference_evaluate


def numeric_gradient(output: UOp, seed: np.ndarray, inputs: dict, name: str, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences in float64 of sum(output * seed) with respect to input `name`."""
    base = {k: np.array(v, dtype=np.float64) for k, v in inputs.items()}
    x = base[name]
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        original = x[index]
        x[index] = original + eps
        up = float(np.sum(reference_evaluate([output], base)[0] * seed))
        x[index] = original - eps
        down = float(np.sum(reference_evaluate([output], base)[0] * seed))
        x[index] = original
        grad[index] = (up - down) / (2 * eps)
    return grad


def assert_shapes_as_inferred(roots) -> None:
    """The gradient rules build nodes without inference (uop.make_shaped): every node under
    `roots` must still be one that inference accepts, with the shape it gives."""
    from uopcli.core.inference import infer_shape
    from uopcli.core.walks import toposort
    for node in toposort(roots):
        if node.src:
            assert infer_shape(node.op, node.dtype, node.src, node.arg) == node.shape, node
