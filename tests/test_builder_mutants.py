"""The builder's composites (uopcli/builder/) against outside oracles, written for the survivors
of its first mutation run (docs/mutation.md): torch and numpy in float64 on values, with
order-sensitive inputs (distinct values everywhere, so a permuted, flipped, shifted or
misplaced element changes the result) and edge values (-0.0, nan, inf, ties, integer wrap).
Every case is built with UOp's methods on PARAMs and evaluated by the numpy backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopcli import UOp, evaluate
from uopcli.core.ops import dtype_of, dtypes
from uopcli.errors import GraphError

RNG = np.random.default_rng(20261207)


def distinct(*shape, scale=1.0, seed=None):
    """float64 values, all different and none 0, in a shuffled order."""
    rng = np.random.default_rng(seed) if seed is not None else RNG
    n = math.prod(shape)
    values = (np.arange(1, n + 1) * 0.731 + rng.uniform(0, 0.3, n)) * rng.choice([-1, 1], n)
    return rng.permutation(values).reshape(shape) * scale / max(n, 1)


def run(build, *arrays):
    """build(*params) evaluated on `arrays`: one array, or a tuple for a tuple of outputs."""
    params = [UOp.param(f"a{k}", a.shape, dtype_of(a.dtype)) for k, a in enumerate(arrays)]
    out = build(*params)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    values = evaluate(outs, {f"a{k}": a for k, a in enumerate(arrays)})
    return tuple(values) if isinstance(out, (tuple, list)) else values[0]


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def same(got, want, rtol=1e-12, atol=1e-12, dtype=None):
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), got.dtype
    if got.dtype.kind in "biu" or want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def bits(got, want):
    """Equal bit for bit (so -0.0 is not 0.0, and nan is nan)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    assert got.tobytes() == want.tobytes(), (got, want)


def test_arange_dtype_reads_the_last_value_made_not_stop_minus_step():
    """A real bug, fixed: the dtype and the refusal read stop - step as the last value, so a
    step not dividing the range wrapped its last value (1, 2^31 + 2 by 2^30 gave -2^31 + 1 in
    int32; 250, 257 by 3 in uint8 gave 0, where 250, 260 was refused), and an empty range
    was int64 (tinygrad's is int32)."""
    same(run(lambda: UOp.arange(1, 2 ** 31 + 2, 2 ** 30)), np.array([1, 2 ** 30 + 1, 2 ** 31 + 1], np.int64),
         dtype=np.int64)
    same(run(lambda: UOp.arange(10, -2 ** 31 - 5, -2 ** 30)), np.arange(10, -2 ** 31 - 5, -2 ** 30).astype(np.int32),
         dtype=np.int32)   # its last value, 10 - 2^31, fits
    same(run(lambda: UOp.arange(-5, -2 ** 31 - 6, -2 ** 30)), np.arange(-5, -2 ** 31 - 6, -2 ** 30), dtype=np.int64)
    with pytest.raises(GraphError, match=r"arange \[250, 257\) by 3 does not fit uint8"):
        UOp.arange(250, 257, 3, dtype="uint8")
    with pytest.raises(GraphError, match=r"arange \[1, 2147483650\) by 1073741824 does not fit int32"):
        UOp.arange(1, 2 ** 31 + 2, 2 ** 30, dtype="int32")
    same(run(lambda: UOp.arange(250, 256, 5, dtype="uint8")), np.array([250, 255], np.uint8), dtype=np.uint8)
    for args in ((0,), (5, 5), (3, 0), (0, 3, -1)):
        assert UOp.arange(*args).dtype is dtypes.int32 and UOp.arange(*args).shape == (0,)
