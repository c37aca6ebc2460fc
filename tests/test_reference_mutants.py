"""The reference evaluator's values where its mutation run (docs/mutation.md, backends/reference.py)
found the tests blind: integer POW, C division and sums that wrap in their dtype, bool
shifts and maxima, empty reductions, the contraction of a REDUCE ADD of a MUL, and the walk's
promises (each node once, values dropped after their last reader, `known`, `keep`, `observe`,
fresh C-ordered outputs). Each value is pinned bit for bit against numpy or Python integers
computed here, never against the evaluator itself."""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest

from uopcli import EvaluationError, Ops, UOp, dtypes
from uopcli.core.ops import dtype_of
from uopcli.backends.reference import reference_evaluate
from test_evaluate_mutants import bits as same_bytes


def bits(value, expected):
    """An array (a numpy scalar is not a 0-d array) of the same dtype, shape and bytes (so
    -0.0 is not 0.0)."""
    assert type(value) is np.ndarray, type(value)
    same_bytes(value, expected)


def one(output, **inputs):
    (value,) = reference_evaluate([output], inputs)
    return value


def binary(op, dtype, a, b):
    """`op` of two inputs holding a and b (numpy arrays of `dtype`), by the reference."""
    x, y = UOp.param("a", a.shape, dtype), UOp.param("b", b.shape, dtype)
    return one(UOp.make(op, dtype, (x, y)), a=a, b=b)


def wrapped(values, dtype):
    """Python integers wrapped into `dtype` (two's complement), as C's arithmetic leaves them."""
    bits_ = np.iinfo(dtype).bits
    low = np.iinfo(dtype).min
    return np.array([(v - low) % (1 << bits_) + low for v in values], dtype)


# ----------------------------------------------------------------------------- POW, C division, shifts

def test_integer_power_with_a_negative_exponent_is_one_over_the_power_truncated():
    a = np.array([1, 1, -1, -1, -1, -1, 2, -2, 0, 5], np.int32)
    b = np.array([-1, -4, -1, -2, -3, -4, -1, -1, -1, -2], np.int32)
    # 1/1^n = 1; 1/(-1)^n = ±1 by n's parity (-3 is odd, -4 even); |a| > 1 truncates to 0; 1/0 gives 0
    bits(binary(Ops.POW, dtypes.int32, a, b), np.array([1, 1, -1, 1, -1, 1, 0, 0, 0, 0], np.int32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint64])
def test_integer_power_wraps_in_its_dtype_as_repeated_multiplication(dtype):
    # 3^21 passes int32's range, 3^39 and 3^40 float64's 53 bits: the product is never a float
    # (uint64's was: its powers went through float64, 3^40 came out 33 low)
    a = np.array([3, 3, -2, 2, 0, 7], np.int64)
    b = np.array([21, 39, 63, 9, 0, 1], np.int64)
    if np.iinfo(dtype).min == 0:
        a, b = np.abs(a), np.where(b == 39, 40, b)
    want = wrapped([int(x) ** int(n) for x, n in zip(a, b)], dtype)
    bits(binary(Ops.POW, dtype_of(np.dtype(dtype)), a.astype(dtype), b.astype(dtype)), want)


@pytest.mark.parametrize("op", [Ops.CDIV, Ops.FDIV])
def test_int64_division_truncates_toward_zero_past_float64s_digits(op):
    big = 2 ** 62 + 1  # float64 has 2^62, not 2^62 + 1
    a = np.array([big, -big, big + 2, -7, 7, 0, big], np.int64)
    b = np.array([1, 1, -2, 2, -2, -3, 0], np.int64)
    want = [0 if y == 0 else abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a.tolist(), b.tolist())]
    bits(binary(op, dtypes.int64, a, b), np.array(want, np.int64))


@pytest.mark.parametrize("op, want", [(Ops.SHL, [True, True, False, False]),    # 1 << 1 is 2: true
                                      (Ops.SHR, [False, True, False, False])])  # 1 >> 1 is 0: false
def test_bool_shifts_shift_as_c_ints_and_convert_back(op, want):
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    bits(binary(op, dtypes.bool, a, b), np.array(want))


# ----------------------------------------------------------------------------- REDUCE, PAD

def test_an_int64_sum_wraps_past_float64s_digits():
    x = np.array([2 ** 62 + 1, 2 ** 62 + 1, 3, 2 ** 62], np.int64)
    got = one(UOp.param("x", (4,), dtypes.int64).r("ADD", (0,)), x=x)
    bits(got, wrapped([sum(x.tolist())], np.int64))


@pytest.mark.parametrize("fuse", [True, False])
def test_a_float_sum_over_an_empty_axis_is_plus_zero(fuse):
    x = UOp.param("x", (0, 3))
    plain, scaled = x.r("ADD", (0,)), (x * 2.0).r("ADD", (0,))  # scaled: a contraction with a scalar factor
    got = reference_evaluate([plain, scaled], {"x": np.zeros((0, 3), np.float32)}, fuse=fuse)
    for value in got:
        bits(value, np.zeros((1, 3), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8])
def test_a_max_over_no_elements_is_the_dtypes_lowest_value(dtype):
    lowest = -np.inf if dtype == np.float32 else np.iinfo(dtype).min
    x = UOp.param("x", (2, 0), dtype_of(np.dtype(dtype)))
    bits(one(x.r("MAX", (1,)), x=np.zeros((2, 0), dtype)), np.full((2, 1), lowest, dtype))


def test_pad_keeps_int64_values_past_float64s_digits():
    x = np.array([2 ** 62 + 1, -(2 ** 61) - 1], np.int64)
    got = one(UOp.param("x", (2,), dtypes.int64).pad(((1, 2),)), x=x)
    bits(got, np.array([0, 2 ** 62 + 1, -(2 ** 61) - 1, 0, 0], np.int64))


# ----------------------------------------------------------------------------- the contraction

# (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20: float16 rounds the product to 1 + 2^-9, float32 keeps it
_F16_A = np.array([1 + 2 ** -10, 1 + 2 ** -9], np.float16)
_F16_B = np.array([1 + 2 ** -10, -1], np.float16)


@pytest.mark.parametrize("fuse, want", [(True, 2 ** -20), (False, 0.0)])
def test_a_float16_sum_of_products_is_fused_by_default_products_unrounded(fuse, want):
    a, b = UOp.param("a", (2,), dtypes.float16), UOp.param("b", (2,), dtypes.float16)
    total = (a * b).r("ADD", (0,))
    (got,) = reference_evaluate([total], {"a": _F16_A, "b": _F16_B}, fuse=fuse)
    bits(got, np.array([want], np.float16))
    if fuse:  # the default fuses
        bits(one(total, a=_F16_A, b=_F16_B), np.array([want], np.float16))


def test_a_contracted_sum_of_only_negative_zero_products_is_plus_zero_op_by_op_minus_zero():
    # the contraction sums from +0.0 as the numpy backend's BLAS does (its documented one
    # difference in a zero's sign); REDUCE ADD op by op keeps IEEE's -0.0
    a, b = UOp.param("a", (2, 3)), UOp.param("b", (2, 3))
    av, bv = -np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    bv[1, 0] = 1
    total = (a * b).r("ADD", (1,))
    bits(one(total, a=av, b=bv), np.array([[0.0], [-1.0]], np.float32))
    (unfused,) = reference_evaluate([total], {"a": av, "b": bv}, fuse=False)
    bits(unfused, np.array([[-0.0], [-1.0]], np.float32))


def test_a_rank_52_product_is_still_contracted():
    # 52 axes: one letter each for einsum, the most it can name
    shape = (2,) + (1,) * 51
    a, b = UOp.param("a", shape, dtypes.float16), UOp.param("b", shape, dtypes.float16)
    got = one((a * b).r("ADD", (0,)), a=_F16_A.reshape(shape), b=_F16_B.reshape(shape))
    bits(got, np.full((1,) * 52, 2 ** -20, np.float16))


def test_a_max_of_a_product_is_not_contracted_as_a_sum():
    a, b = UOp.param("a", (2, 3)), UOp.param("b", (2, 3))
    av = np.array([[1, -2, 3], [4, 5, -6]], np.float32)
    bv = np.array([[2, 2, 2], [-1, 3, 1]], np.float32)
    bits(one((a * b).r("MAX", (1,)), a=av, b=bv), np.array([[6], [15]], np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_an_integer_contraction_wraps_as_the_mul_and_the_sum_would(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    av = rng.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    bv = rng.integers(info.min, info.max, (4, 2), dtype=dtype, endpoint=True)
    kind = dtype_of(np.dtype(dtype))
    a, b = UOp.param("a", (3, 4), kind), UOp.param("b", (4, 2), kind)
    product = a.reshape((3, 4, 1)).expand((3, 4, 2)) * b.reshape((1, 4, 2)).expand((3, 4, 2))
    want = [[sum(int(av[i, k]) * int(bv[k, j]) for k in range(4)) for j in range(2)] for i in range(3)]
    bits(one(product.r("ADD", (1,)), a=av, b=bv), wrapped(np.ravel(want).tolist(), dtype).reshape(3, 1, 2))


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_a_summed_axis_that_one_factor_broadcasts_is_summed_once(order):
    a, b = UOp.param("a", (2, 3), dtypes.int32), UOp.param("b", (1, 3), dtypes.int32)
    av, bv = np.array([[1, 2, 3], [40, 50, 60]], np.int32), np.array([[1, -1, 10]], np.int32)
    wide = b.expand((2, 3))
    product = a * wide if order == "ab" else wide * a
    bits(one(product.r("ADD", (0,)), a=av, b=bv), (av * bv).sum(0, keepdims=True, dtype=np.int32))


@pytest.mark.parametrize("axes, times", [((0, 1), 10), ((0,), 2), ((1,), 5)])
def test_axes_summed_that_neither_factor_has_multiply_by_their_lengths_and_wrap(axes, times):
    x, y = UOp.param("x", (3,), dtypes.int32), UOp.param("y", (3,), dtypes.int32)
    xv, yv = np.array([2 ** 30, 1, -5], np.int32), np.array([1, 3, 7], np.int32)
    product = x.reshape((1, 1, 3)).expand((2, 5, 3)) * y.reshape((1, 1, 3)).expand((2, 5, 3))
    got = one(product.r("ADD", axes), x=xv, y=yv)
    shape = tuple(1 if i in axes else n for i, n in enumerate((2, 5, 3)))
    # 2^30 added 10 times wraps to -2^31 + 2^30 ... as int32 additions do
    want = wrapped([times * int(p) for p in (xv.astype(np.int64) * yv)], np.int32)
    bits(got, np.broadcast_to(want, shape))


def test_a_float_contraction_that_overflows_gives_inf_without_a_warning():
    x, y = UOp.param("x", (2,)), UOp.param("y", (2,))
    product = x.reshape((1, 2)).expand((3, 2)) * y.reshape((1, 2)).expand((3, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the NaN hunt and check read inf and nan as values
        got = one(product.r("ADD", (0,)), x=np.array([3e38, 1], np.float32), y=np.array([1, 2], np.float32))
        recip = one(x.reciprocal(), x=np.array([0.0, -0.0], np.float32))
    bits(got, np.array([[np.inf, 6]], np.float32))
    bits(recip, np.array([np.inf, -np.inf], np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_factor_broadcast_along_the_summed_axis_stays_inside_the_sum(dtype):
    """sum(x * s), s broadcast along the summed axis, is the sum of the products, as op by
    op: einsum took s out of the sum (s * sum(x)), which overflowed where the products do
    not (float64 [1e308, 1e308] * 0.5 gave inf, not 1e308: `check` refused the model) and
    missed the nan of an inf * 0 (sum([0, 1, 2] * inf) gave inf)."""
    big = float(np.finfo(dtype).max) * 0.75
    kind = dtype_of(np.dtype(dtype))
    x, s = UOp.param("x", (2,), kind), UOp.param("s", (), kind)
    grid, row = UOp.param("grid", (2, 3), kind), UOp.param("row", (1, 3), kind)
    xv = np.array([big, big], dtype)
    cases = [((x * s).r("ADD", (0,)), {"x": xv, "s": np.array(0.5, dtype)}),
             ((s * x).r("ADD", (0,)), {"x": np.array([0, 1], dtype), "s": np.array(np.inf, dtype)}),
             ((grid * row.expand((2, 3))).r("ADD", (0,)),
              {"grid": np.array([[big, 0, 1], [big, 1, 2]], dtype), "row": np.array([[0.5, np.inf, -np.inf]], dtype)})]
    for total, inputs in cases:
        (unfused,) = reference_evaluate([total], inputs, fuse=False)
        bits(one(total, **inputs), unfused)
    bits(one(cases[0][0], **cases[0][1]), np.array([big], dtype))  # finite, as each product is


# ----------------------------------------------------------------------------- the walk

def _diamond():
    x = UOp.param("x", (3,))
    a = x.sqrt()
    b, c = a + 1.0, a * 2.0
    return x, a, b, c, b - c


def test_observe_sees_each_main_scope_node_once_with_its_value_and_its_sources_values():
    x, a, b, c, d = _diamond()
    f = UOp.function("f", (UOp.slot(0, (3,)) * 3.0,), (d,))
    out = f.gettuple(0)
    seen = []
    xv = np.array([1.0, 4.0, 9.0], np.float32)
    (got,) = reference_evaluate([out], {"x": xv}, observe=lambda node, value, sources: seen.append((node, value, sources)))
    nodes = [n for n, _, _ in seen]
    assert len(nodes) == len(set(nodes))  # a, read by b and c, is computed once
    by_node = {n: (v, s) for n, v, s in seen}
    av = np.sqrt(xv)
    bits(by_node[a][0], av)
    bits(by_node[d][0], (av + 1) - av * 2)
    assert len(by_node[d][1]) == 2
    bits(by_node[d][1][0], av + 1)
    bits(by_node[d][1][1], av * 2)
    value, sources = by_node[f]
    assert sources == () and len(value) == 1  # a call's sources are its body and args: not given
    bits(value[0], ((av + 1) - av * 2) * 3)
    bits(got, ((av + 1) - av * 2) * 3)


def test_a_value_is_dropped_once_its_last_reader_is_computed():
    x = UOp.param("x", (1000,))
    a = x + 1.0
    b = a * 2.0
    c = b + 3.0
    d = c * 4.0
    alive = {}

    def observe(node, value, sources):
        alive[node] = weakref.ref(value)
        if node is d:
            gc.collect()
            assert alive[a]() is None and alive[b]() is None  # read only by b and c, both done
            assert alive[c]() is not None  # d's source, still referenced by the walk

    (got,) = reference_evaluate([d], {"x": np.zeros(1000, np.float32)}, observe=observe)
    bits(got, np.full(1000, 20.0, np.float32))


def test_keep_fills_the_values_of_nodes_that_later_nodes_read():
    x = UOp.param("x", (2,))
    a = x * 3.0
    b = a + 1.0
    keep = {a: None}
    (got,) = reference_evaluate([b], {"x": np.array([1, 2], np.float32)}, keep=keep)
    bits(keep[a], np.array([3, 6], np.float32))
    bits(got, np.array([4, 7], np.float32))


def test_known_values_are_used_as_given_as_sources_and_as_outputs():
    x, y = UOp.param("x", (2,)), UOp.param("y", (2,))
    a, c = x * 3.0, x * 5.0
    b = a + y
    given = np.array([10, 20], np.float32)  # not x * 3: taken as it is, x is never read
    other = np.array([7, 8], np.float32)    # c: an output that nothing computed reads (check's outputs
    #                                         that do not depend on the input it changes)
    got = reference_evaluate([b, a, c], {"y": np.array([1, 2], np.float32)}, known={a: given, c: other},
                             keep={a: None})
    bits(got[0], np.array([11, 22], np.float32))
    bits(got[1], given)
    bits(got[2], other)
    keep = {c: None}
    (alone,) = reference_evaluate([c], {}, known={c: other}, keep=keep)
    bits(alone, other)
    bits(keep[c], other)


def test_a_tuple_output_is_the_tuple_of_its_elements_values():
    x = UOp.param("x", (2,))
    (got,) = reference_evaluate([UOp.tuple(x + 1.0, x * 2.0)], {"x": np.array([1, 2], np.float32)})
    assert isinstance(got, tuple) and len(got) == 2
    bits(got[0], np.array([2, 3], np.float32))
    bits(got[1], np.array([2, 4], np.float32))


def test_outputs_are_c_ordered_arrays_even_a_transposed_view_or_a_0d_value():
    x = UOp.param("x", (2, 3))
    s = UOp.param("s", ())
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    transposed, scalar = reference_evaluate([x.permute((1, 0)), s + s], {"x": xv, "s": np.array(1.5, np.float32)})
    assert transposed.flags.c_contiguous
    bits(transposed, np.ascontiguousarray(xv.T))
    bits(scalar, np.array(3.0, np.float32))  # a 0-d array, not numpy's scalar


@pytest.mark.parametrize("value, said", [(np.zeros(3, np.float32), "float32\\[3\\]"),
                                         (np.zeros(2, np.float64), "float64\\[2\\]")])
def test_an_input_of_the_wrong_shape_or_the_wrong_dtype_alone_is_refused(value, said):
    with pytest.raises(EvaluationError, match=f"input 'x': expected float32\\[2\\], got {said}"):
        one(UOp.param("x", (2,)).sin(), x=value)
