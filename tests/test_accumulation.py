""""float16 sums accumulate in float32", stated once (uopcli.core.ops.accumulation_dtype) and
followed by the builder, the gradient and both evaluators."""

import numpy as np

from uopcli import Ops, UOp, compute_gradient, dtypes
from uopcli.backends.numpy import evaluate
from uopcli.backends.reference import reference_evaluate
from uopcli.core.ops import DTYPES, accumulation_dtype, accumulation_np


def test_the_rule():
    assert accumulation_dtype(dtypes.float16) is dtypes.float32
    assert accumulation_np(np.dtype(np.float16)) == np.float32
    for dtype in DTYPES.values():
        if dtype is not dtypes.float16:
            assert accumulation_dtype(dtype) is dtype
            if not dtype.is_void:
                assert accumulation_np(dtype.np) == dtype.np


def _column_of_ones_under_2048() -> np.ndarray:
    """2048, then 4095 ones, in two columns: a float16 running total stays at 2048 (its ulp
    there is 2), a float32 one reaches 6143, which rounds to 6144 in float16."""
    x = np.ones((4096, 2), np.float16)
    x[0] = 2048
    return x


def test_both_evaluators_sum_float16_in_float32():
    x = UOp.param("acc_x", (4096, 2), dtypes.float16)
    total = UOp.make(Ops.REDUCE, dtypes.float16, (x,), ("ADD", (0,)))
    value = _column_of_ones_under_2048()
    for out in (evaluate([total], {"acc_x": value})[0], reference_evaluate([total], {"acc_x": value})[0]):
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out, np.full((1, 2), 6144, np.float16))


def test_builder_and_gradient_spell_the_float32_sum_in_the_graph():
    x = UOp.param("acc_y", (4096, 2), dtypes.float16)
    total = x.sum(0)
    assert total.op == Ops.CAST and total.dtype is dtypes.float16
    assert [n.dtype for n in total.toposort() if n.op == Ops.REDUCE] == [dtypes.float32]
    np.testing.assert_array_equal(evaluate([total], {"acc_y": _column_of_ones_under_2048()})[0],
                                  np.full(2, 6144, np.float16))
    # the gradient of a broadcast sums the incoming gradient back: in float32 too
    v = UOp.param("acc_v", (1, 2), dtypes.float16)
    seed = UOp.param("acc_seed", (4096, 2), dtypes.float16)
    (grad,) = compute_gradient(v.expand(4096, 2), seed, [v]).values()
    reduces = [n for n in grad.toposort() if n.op == Ops.REDUCE]
    assert [r.dtype for r in reduces] == [dtypes.float32]
    np.testing.assert_array_equal(evaluate([grad], {"acc_seed": _column_of_ones_under_2048()})[0],
                                  np.full((1, 2), 6144, np.float16))
