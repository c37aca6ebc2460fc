"""Every in-place and view fast path of the numpy evaluator, against the op-by-op reference
evaluator bit for bit, and with the caller's input arrays unchanged afterwards.

Each case is built so that the fast path is taken and a mistake in it shows: a WHERE whose
branches overlap in memory (WHERE runs as several in-place passes over its target, so a
branch that is a view of the target reads what an earlier pass wrote; numpy's own overlap
handling protects a single ufunc, not a sequence), movement chains of two or more ops over
an input that the evaluator reads as one strided view (a view of the caller's array must
never be written into), and sums that start from -0.0 so that a sum of only -0.0 stays -0.0.
"""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import UOp, compute_gradient, dtypes, evaluate
from uopcli.backends.numpy import EvalStats
from uopcli.backends.reference import reference_evaluate

F32 = dtypes.float32


def _bits(array) -> bytes:
    array = np.asarray(array)
    return array.dtype.str.encode() + str(array.shape).encode() + np.ascontiguousarray(array).tobytes()


def assert_like_reference(outputs: list, inputs: dict) -> list:
    """The numpy evaluator's values equal the reference's bit for bit, and no input array
    was written to."""
    before = {name: np.array(value, copy=True) for name, value in inputs.items()}
    fast = evaluate(outputs, inputs)
    for name, value in inputs.items():
        assert _bits(value) == _bits(before[name]), f"the evaluator wrote into the caller's input {name!r}"
    reference = reference_evaluate(outputs, before)
    for i, (got, want) in enumerate(zip(fast, reference)):
        assert _bits(got) == _bits(want), (i, got, want)
    return fast


def _square(name: str, n: int = 6, dtype=F32) -> tuple[UOp, np.ndarray]:
    values = (np.arange(n * n).reshape(n, n) * 1.25 - 7).astype(dtype.np)
    return UOp.param(name, (n, n), dtype), values


# ----------------------------------------------------------------------------- WHERE over overlapping branches

# (condition pattern, a branch, b branch) from y, a fresh array that dies at the WHERE
OVERLAPPING_BRANCHES = {
    "b is y flipped": lambda y: (y, y.flip((1,))),
    "a is y flipped": lambda y: (y.flip((1,)), y),
    "b is y transposed": lambda y: (y, y.permute((1, 0))),
    "a is y flipped both ways": lambda y: (y.flip((0, 1)), y),
    "b is a shifted window of y": lambda y: (y, y.shrink(((0, 6), (1, 6))).pad(((0, 0), (0, 1)))),
    "b is y flipped then transposed": lambda y: (y, y.flip((0,)).permute((1, 0))),
}


@pytest.mark.parametrize("case", list(OVERLAPPING_BRANCHES))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8])
def test_where_with_a_branch_that_views_the_other(case, dtype):
    x, values = _square("wx", dtype=dtype)
    c = UOp.param("wc", (6, 6), dtypes.bool)
    y = x * UOp.const(2, dtype)  # a fresh array, read only by the WHERE
    a, b = OVERLAPPING_BRANCHES[case](y)
    mask = (np.arange(36).reshape(6, 6) % 3 == 1) | (np.arange(36).reshape(6, 6) % 5 == 0)
    assert_like_reference([c.where(a, b)], {"wx": values, "wc": mask})


@pytest.mark.parametrize("op", ["sub", "mul", "max", "div"])
def test_binary_steps_with_a_source_that_views_the_other(op):
    x, values = _square("bx")
    y = x + UOp.const(3.0, F32)
    flipped = y.flip((1,))
    result = {"sub": lambda: y - flipped, "mul": lambda: y * flipped, "max": lambda: y.maximum(flipped),
              "div": lambda: y / flipped}[op]()
    assert_like_reference([result], {"bx": values})


# ----------------------------------------------------------------------------- movement chains as views

MOVEMENT_CHAINS = {
    "permute, shrink": lambda x: x.permute((1, 0)).shrink(((1, 5), (0, 6))),
    "reshape, permute, flip": lambda x: x.reshape((3, 2, 6)).permute((2, 0, 1)).flip((0,)),
    "shrink, reshape, expand": lambda x: x.shrink(((0, 6), (2, 3))).reshape((6, 1)).expand((6, 4)),
    "flip, permute, shrink, reshape": lambda x: x.flip((0, 1)).permute((1, 0)).shrink(((0, 4), (2, 6))).reshape((16,)),
    "expand, permute, shrink": lambda x: x.reshape((1, 6, 6)).expand((3, 6, 6)).permute((2, 0, 1)).shrink(
        ((0, 6), (1, 3), (0, 6))),
    # the builder's pooling windows (pad, shrink, reshape, permute): the evaluator fuses
    # such a chain into one strided view of its start, which is the caller's input here
    "pool windows, stride 2": lambda x: x.reshape((1, 1, 6, 6))._pool((2, 2), stride=2),
    "pool windows, stride 1": lambda x: x.reshape((1, 1, 6, 6))._pool((3, 3), stride=1),
    "pool windows, dilated": lambda x: x.reshape((1, 1, 6, 6))._pool((2, 2), stride=2, dilation=2),
}
ELEMENTWISE = {
    "neg": lambda v: -v, "add": lambda v: v + UOp.const(1.5, F32), "mul": lambda v: v * v,
    "sqrt": lambda v: (v * v).sqrt(), "exp2": lambda v: (v * UOp.const(0.125, F32)).exp2(),
    "where": lambda v: (v < UOp.const(0.0, F32)).where(v, UOp.const(0.0, F32)),
}


@pytest.mark.parametrize("chain", list(MOVEMENT_CHAINS))
@pytest.mark.parametrize("step", list(ELEMENTWISE))
def test_movement_chains_of_an_input_feeding_an_elementwise_step(chain, step):
    x, values = _square("mx")
    assert_like_reference([ELEMENTWISE[step](MOVEMENT_CHAINS[chain](x))], {"mx": values})


@pytest.mark.parametrize("chain", list(MOVEMENT_CHAINS))
def test_movement_chains_of_a_fresh_array_feeding_two_readers(chain):
    """The view of a fresh array read twice: the first reader must not write into it."""
    x, values = _square("fx")
    view = MOVEMENT_CHAINS[chain](x * UOp.const(-1.5, F32))
    assert_like_reference([-view + view, view * view], {"fx": values})


def test_a_movement_chain_output_is_returned_without_touching_the_input():
    x, values = _square("ox")
    view = MOVEMENT_CHAINS["flip, permute, shrink, reshape"](x)
    out, = assert_like_reference([view], {"ox": values})
    out[...] = 0  # outputs are the caller's to write: that must not reach the input either
    assert values[0, 0] == -7


# ----------------------------------------------------------------------------- sums from -0.0

def test_gather_gradient_scatter_add_keeps_negative_zero():
    """gather's gradient is a scatter-add: a class hit by every pick of a row, all -0.0,
    stays -0.0 (its literal graph adds only -0.0s); a class some pick missed has a masked
    +0.0 in its sum, and is +0.0."""
    x = UOp.param("gx", (3, 4))
    index = UOp.param("gi", (3, 5), dtypes.int32)
    picked = x.gather(1, index)
    cotangent = UOp.param("gc", (3, 5))
    gradient = compute_gradient(picked, cotangent, [x])[x]
    rows = np.array([[1] * 5, [2] * 5, [0, 3, 0, 3, 0]], np.int32)
    feed = {"gx": np.ones((3, 4), np.float32), "gi": rows, "gc": np.full((3, 5), -0.0, np.float32)}
    got, = assert_like_reference([gradient], feed)
    assert np.signbit(got).tolist() == [[False, True, False, False], [False, False, True, False],
                                        [False, False, False, False]]


@pytest.mark.parametrize("pool", ["avg", "max"])
def test_pool_gradient_scatter_add_matches_the_literal_sum_of_negative_zeros(pool):
    x = UOp.param("px", (1, 2, 6, 6))
    pooled = x.avg_pool2d((3, 3), stride=1) if pool == "avg" else x.max_pool2d((2, 2), stride=1)
    cotangent = UOp.param("pc", pooled.shape)
    gradient = compute_gradient(pooled, cotangent, [x])[x]
    feed = {"px": np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6) % 7,
            "pc": np.full(pooled.shape, -0.0, np.float32)}
    assert_like_reference([gradient], feed)


@pytest.mark.parametrize("fill", [-0.0, 0.0])
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_a_one_hot_selection_keeps_each_value_as_its_fill_says(fill, dtype):
    """A selection summed along its class axis, and its scatter-add along another axis, run
    as take_along_axis and np.add.at (a contraction, no n-times mask): with a -0.0 fill the
    selected -0.0 stays -0.0 and an index outside the axis gives -0.0; with +0.0, both +0.0
    (the masked-out +0.0s added), as the graph as written says. nan and inf are picked as
    they are."""
    x = UOp.param("sx", (3, 4), dtype)
    index = UOp.param("si", (3, 6), dtypes.int32)
    picked = x._gather(1, index, fill)  # gather with `fill` where the one-hot mask is false
    # the same mask summed along the index's axis: how often each class was picked, as values
    scattered = index._one_hot_mask(4, 2).where(x.unsqueeze(1).expand(3, 6, 4), fill).sum(1, dtype=dtype)
    values = np.array([[-0.0, 1.5, -np.inf, np.nan], [0.0, -0.0, 2.0, -3.0], [-0.0, -0.0, -0.0, -0.0]], dtype.np)
    rows = np.array([[0, 1, 2, 3, 0, 7], [1, 0, 1, 3, -1, 2], [3, 3, 3, 3, 3, 3]], np.int32)
    stats = EvalStats()
    evaluate([picked, scattered], {"sx": values, "si": rows}, stats=stats)
    assert stats.contractions == 2
    got, summed = assert_like_reference([picked, scattered], {"sx": values, "si": rows})
    neg = bool(np.signbit(fill))  # a picked -0.0, and an index outside the axis (7, -1), give the fill's sign
    assert np.signbit(got[0]).tolist() == [neg, False, True, False, neg, neg]
    assert np.isnan(got[0][3]) and np.isneginf(got[0][2])
    assert np.signbit(got[1]).tolist() == [neg, False, neg, True, neg, False]
    assert np.signbit(got[2]).tolist() == [neg] * 6
    assert np.signbit(summed[2]).tolist() == [neg, neg, neg, True]  # class 3 picked by all six: no fill in its sum


# per row of x: what the mask selects, and so the sign of a zero sum as written
MASKED_ROWS = [
    ([-0.0, -0.0, 2.0, 3.0, 4.0], [1, 1, 0, 0, 0]),    # only -0.0s selected: -0.0 (+0.0 with a +0.0 fill)
    ([-0.0, 0.0, 2.0, 3.0, 4.0], [1, 1, 0, 0, 0]),     # -0.0 and +0.0: +0.0
    ([1.0, -1.0, -0.0, 3.0, 4.0], [1, 1, 1, 0, 0]),    # 1 + -1 + -0.0: +0.0
    ([5.0, 6.0, 7.0, 8.0, -0.0], [0, 0, 0, 0, 0]),     # nothing selected: the fill
    ([-0.0, -0.0, -0.0, -0.0, -0.0], [1, 1, 1, 1, 1]),  # everything selected, all -0.0: -0.0
    ([-2.5, 6.0, -0.0, 8.0, 9.0], [1, 0, 0, 0, 0]),    # a value: itself
]


@pytest.mark.parametrize("fill", [-0.0, 0.0])
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_a_masked_sum_signs_its_zeros_as_the_graph_does(fill, dtype):
    """A sum of WHERE(mask, x, fill) under a mask that is no one-hot comparison runs as a
    product with the mask (BLAS, whose zeros are unsigned); its zeros are signed afterwards
    as the graph as written signs them, whatever the fill."""
    x = UOp.param("mx", (6, 5), dtype)
    mask = UOp.param("mm", (6, 5), dtypes.bool)
    rows = mask.where(x, fill).sum(1, dtype=dtype)
    feed = {"mx": np.array([v for v, _ in MASKED_ROWS], dtype.np), "mm": np.array([m for _, m in MASKED_ROWS], bool)}
    stats = EvalStats()
    evaluate([rows], feed, stats=stats)
    assert stats.contractions == 1
    got, = assert_like_reference([rows], feed)
    neg = bool(np.signbit(fill))
    assert np.signbit(got).tolist() == [neg, False, False, neg, True, True]
    feed["mx"][2, 4] = np.inf  # a value that is not finite, masked out: the WHEREs run as written
    assert np.signbit(assert_like_reference([rows], feed)[0]).tolist() == [neg, False, False, neg, True, True]


def test_sum_of_negative_zeros_is_negative_zero():
    x = UOp.param("zx", (4, 5))
    feed = {"zx": np.full((4, 5), -0.0, np.float32)}
    # (a sum of products is a BLAS contraction, whose sums start from +0.0: not here)
    got = assert_like_reference([x.sum(1), x.sum(0), x.sum(), (x + UOp.const(-0.0, F32)).sum(1),
                                 x.permute((1, 0)).sum(0)], feed)
    assert all(np.signbit(g).all() for g in got)


def test_the_run_loop_frees_each_value_after_its_last_reader():
    """Measured by tracemalloc (numpy reports its allocations to it), not by the plan's own
    count: ten steps that cannot write in place (each reads its source twice, once flipped)
    hold at most a few 4 MB arrays at a time, not all ten."""
    import tracemalloc
    x = UOp.param("chain_x", (1_000_000,))
    y = x
    for _ in range(10):
        y = y + y.flip((0,))
    value = np.linspace(-1, 1, 1_000_000, dtype=np.float32)
    tracemalloc.start()
    try:
        out, = evaluate([y], {"chain_x": value})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (1_000_000,)
    assert peak < 5 * value.nbytes, peak / value.nbytes
