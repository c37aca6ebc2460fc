"""The numpy evaluator: every op against plain numpy, dtype edge cases, calls, contractions
that never build the expanded product, memory freed after last use, errors, deep chains."""

import math
import tracemalloc
import warnings

import numpy as np
import pytest

from uopcli import EvaluationError, Ops, UOp, dtypes
from uopcli.backends.numpy import EvalStats, evaluate, evaluate_graph
from uopcli.backends.numpy.table import IMPL
from uopcli.core.graph import Graph
from uopcli.core.ops import ALL_OPS, dtype_of
from uopcli.core.walks import no_gc

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def run(output, **inputs):
    """Evaluate one output with warnings turned into errors (numpy must stay silent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (value,) = evaluate([output], inputs)
    return value


def assert_bits(value, expected):
    """The same bits (any nan equal to any nan), dtype and shape."""
    value, expected = np.asarray(value), np.asarray(expected)
    assert value.dtype == expected.dtype and value.shape == expected.shape
    unsigned = f"u{value.dtype.itemsize}"
    differ = (value.view(unsigned) != expected.view(unsigned)) & ~(np.isnan(value) & np.isnan(expected))
    assert not differ.any(), (value[differ][:6], expected[differ][:6])


def same(value, expected):
    """Equal values, dtype and shape (nan equal to nan)."""
    expected = np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    np.testing.assert_array_equal(value, expected)


def test_the_table_has_one_row_per_op():
    assert set(IMPL) == set(ALL_OPS)


# ----------------------------------------------------------------------------- elementwise

X = rand(3, 4)
Y = rand(3, 4)
POS = np.abs(X) + np.float32(0.5)

FLOAT_CASES = [
    ("neg", lambda x, y: -x, lambda x, y: -x),
    ("reciprocal", lambda x, y: x.reciprocal(), lambda x, y: np.float32(1) / x),
    ("sqrt", lambda x, y: x.sqrt(), lambda x, y: np.sqrt(x)),
    ("exp2", lambda x, y: x.exp2(), lambda x, y: np.exp2(x)),
    ("log2", lambda x, y: x.log2(), lambda x, y: np.log2(x)),
    ("sin", lambda x, y: x.sin(), lambda x, y: np.sin(x)),
    ("trunc", lambda x, y: (x * 3).trunc(), lambda x, y: np.trunc(x * np.float32(3))),
    ("add", lambda x, y: x + y, lambda x, y: x + y),
    ("sub", lambda x, y: x - y, lambda x, y: x - y),
    ("mul", lambda x, y: x * y, lambda x, y: x * y),
    ("fdiv", lambda x, y: x / y, lambda x, y: x / y),
    ("max", lambda x, y: x.maximum(y), lambda x, y: np.maximum(x, y)),
    ("pow", lambda x, y: x.pow(y), lambda x, y: np.power(x, y)),
    ("cmplt", lambda x, y: x < y, lambda x, y: x < y),
    ("cmpne", lambda x, y: x.ne(y), lambda x, y: x != y),
    ("cmpeq", lambda x, y: x.eq(x), lambda x, y: x == x),
    ("where", lambda x, y: (x < y).where(x, y), lambda x, y: np.where(x < y, x, y)),
    ("mulacc", lambda x, y: x.mulacc(y, x), lambda x, y: x * y + x),
    ("scalar right", lambda x, y: x * 2.5 + 1, lambda x, y: x * np.float32(2.5) + np.float32(1)),
    ("scalar left", lambda x, y: 2.5 - x, lambda x, y: np.float32(2.5) - x),
    ("scalar where", lambda x, y: UOp.const(True).where(x, y), lambda x, y: x),
    ("scalar mulacc", lambda x, y: x.mulacc(x.const_like(2.0), x.const_like(1.0)), lambda x, y: x * 2 + 1),
]


@pytest.mark.parametrize("name, build, reference", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_elementwise_matches_numpy(name, build, reference, dtype):
    x_value, y_value = POS.astype(dtype), Y.astype(dtype)
    x, y = UOp.param("x", (3, 4), dtype), UOp.param("y", (3, 4), dtype)
    out = build(x, y)
    value = run(out, x=x_value, y=y_value)
    expected = np.asarray(reference(x_value, y_value))
    if expected.dtype != np.bool_:
        expected = expected.astype(dtype)
    assert value.dtype == out.dtype.np and value.shape == out.shape
    np.testing.assert_allclose(value, expected, rtol=2e-3 if dtype == np.float16 else 1e-6)


def test_ieee_results_without_warnings():
    x = UOp.param("x", (4,))
    value = np.array([1.0, -1.0, 0.0, -4.0], np.float32)
    same(run(x / 0.0, x=value), np.array([np.inf, -np.inf, np.nan, -np.inf], np.float32))
    same(run(x.sqrt(), x=value), np.sqrt(np.abs(value)) * np.array([1, np.nan, 1, np.nan], np.float32))
    same(run(x.log2(), x=value), np.array([0, np.nan, -np.inf, np.nan], np.float32))
    same(run(x.reciprocal(), x=value), np.array([1, -1, np.inf, -0.25], np.float32))



@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: d.__name__)
def test_exp2_of_an_integer_is_its_power_of_two_exactly(dtype):
    """EXP2 of every integer of the type's exponent range (and beyond: inf, 0, up to ±max) is
    the power of two, bit for bit, as graphs build exact scales (the ONNX L2 norms' 2^-e):
    numpy 2.4.6's float32 exp2 gives 2^127 an ulp low on AVX-512 CPUs. Out of place (an
    input), in place (into a dying sum), on a 0-d value and in the reference evaluator; ±inf
    and nan as exp2."""
    from uopcli.backends.reference import reference_evaluate_graph
    info = np.finfo(dtype)
    k = np.arange(info.minexp - info.nmant - 3, info.maxexp + 3).astype(dtype)
    want = np.ldexp(np.ones_like(k), k.astype(np.int64))  # 2^k exactly, 0 below, inf above
    # the largest finite values are whole too, far past any exponent (an int cast would wrap)
    edges = np.array([np.inf, -np.inf, np.nan, -0.0, info.max, -info.max, 0.5], dtype)
    values = np.concatenate([k, edges])
    want = np.concatenate([want, np.array([np.inf, 0.0, np.nan, 1.0, np.inf, 0.0, np.sqrt(2.0)], dtype)])
    x = UOp.param("x", values.shape, dtype_of(np.dtype(dtype).name))
    graph = Graph({"out_of_place": x.exp2(), "in_place": (x + 0.0).exp2()})
    exact = values != 0.5  # √2 is no power of two: within an ulp
    for got in [*evaluate_graph(graph, {"x": values}).values(),
                *reference_evaluate_graph(graph, {"x": values}).values()]:
        assert got.dtype == dtype
        assert_bits(got[exact], want[exact])
        assert abs(float(got[~exact][0]) - math.sqrt(2)) <= float(np.spacing(want[~exact][0]))
    scalar = UOp.param("s", (), dtype_of(np.dtype(dtype).name))
    for power in (info.maxexp - 1, info.minexp - info.nmant):  # the largest and the smallest
        got = evaluate_graph(Graph({"y": scalar.exp2()}), {"s": np.array(power, dtype)})["y"]
        assert_bits(got, np.ldexp(np.ones((), dtype), power))

INTS = np.array([-7, 7, -7, 7, 0, -1, 5, -128], np.int64)
DIVS = np.array([2, 2, -2, -2, 3, 1, 0, -1], np.int64)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_division_truncates_and_remainder_has_the_dividends_sign(dtype):
    a, b = UOp.param("a", (8,), dtype), UOp.param("b", (8,), dtype)
    av, bv = INTS.astype(dtype), DIVS.astype(dtype)
    quotient = run(a.cdiv(b), a=av, b=bv)
    remainder = run(a.cmod(b), a=av, b=bv)
    assert quotient.dtype == dtype and remainder.dtype == dtype
    # C: -7/2 = -3, 7/-2 = -3, -7%2 = -1, 7%-2 = 1; x/0 gives 0 here (C leaves it undefined)
    assert quotient[:6].tolist() == [-3, 3, 3, -3, 0, -1]
    assert remainder[:6].tolist() == [-1, 1, -1, 1, 0, 0]
    assert quotient[6] == 0
    np.testing.assert_array_equal(quotient[:6] * bv[:6] + remainder[:6], av[:6])
    # FDIV on integers is C division too
    same(run(UOp.make(Ops.FDIV, a.dtype, (a, b)), a=av, b=bv), quotient)
    # the builder's // and % floor, as Python (and numpy, and tinygrad) do; / is true division
    nonzero = bv != 0
    with np.errstate(all="ignore"):  # numpy's own warnings at INT_MIN // -1
        same(run(a // b, a=av, b=bv)[nonzero], np.floor_divide(av[nonzero], bv[nonzero]))
        same(run(a % b, a=av, b=bv)[nonzero], np.mod(av[nonzero], bv[nonzero]))
        same(run(a / b, a=av, b=bv)[nonzero], av[nonzero].astype(np.float32) / bv[nonzero].astype(np.float32))
        same(run(7 // b, b=bv)[nonzero], np.floor_divide(dtype(7), bv[nonzero]))
        same(run(7 % b, b=bv)[nonzero], np.mod(dtype(7), bv[nonzero]))


def test_unsigned_division_and_wrapping():
    a, b = UOp.param("a", (3,), dtypes.uint8), UOp.param("b", (3,), dtypes.uint8)
    av, bv = np.array([200, 7, 255], np.uint8), np.array([100, 2, 1], np.uint8)
    same(run(a + b, a=av, b=bv), np.array([44, 9, 0], np.uint8))
    same(run(a // b, a=av, b=bv), np.array([2, 3, 255], np.uint8))
    same(run(a % b, a=av, b=bv), np.array([0, 1, 0], np.uint8))
    same(run(-a, a=av), np.array([56, 249, 1], np.uint8))
    i8 = UOp.param("i", (2,), dtypes.int8)
    same(run(i8 * 2, i=np.array([100, -100], np.int8)), np.array([-56, 56], np.int8))


def test_integer_power_shifts_and_logic():
    a, b = UOp.param("a", (5,), dtypes.int32), UOp.param("b", (5,), dtypes.int32)
    av, bv = np.array([2, -1, 1, 3, -2], np.int32), np.array([10, -3, -2, -1, 3], np.int32)
    same(run(a.pow(b), a=av, b=bv), np.array([1024, -1, 1, 0, -8], np.int32))
    sv = np.array([1, 2, 3, 0, 31], np.int32)
    same(run(a << b, a=av, b=sv), av << sv)
    same(run(a >> b, a=np.array([-16, 16, -1, 7, -(2 ** 31)], np.int32), b=sv),
         np.array([-8, 4, -1, 7, -1], np.int32))
    same(run(a & b, a=av, b=bv), av & bv)
    same(run(a | b, a=av, b=bv), av | bv)
    same(run(a ^ b, a=av, b=bv), av ^ bv)
    same(run(a < b, a=av, b=bv), av < bv)
    same(run(a.maximum(b), a=av, b=bv), np.maximum(av, bv))
    p, q = UOp.param("p", (4,), dtypes.bool), UOp.param("q", (4,), dtypes.bool)
    pv, qv = np.array([True, True, False, False]), np.array([True, False, True, False])
    same(run(p & q, p=pv, q=qv), pv & qv)
    same(run(p | q, p=pv, q=qv), pv | qv)
    same(run(p ^ q, p=pv, q=qv), pv ^ qv)
    same(run(p.ne(True), p=pv), ~pv)
    # bool shifts (the contract allows bool or integer), as C shifts the ints 0 and 1 and
    # converts back: p << q is p, p >> q is p and not q
    # (built as raw nodes: the builder's << refuses bools, as tinygrad's does)
    same(run(UOp.make(Ops.SHL, dtypes.bool, (p, q)), p=pv, q=qv), pv)
    same(run(UOp.make(Ops.SHR, dtypes.bool, (p, q)), p=pv, q=qv), pv & ~qv)
    same(run(UOp.make(Ops.SHL, dtypes.bool, (p ^ q, q)), p=pv, q=qv), pv ^ qv)  # into an array the evaluator made


def test_casts_truncate_and_bitcasts_reinterpret():
    x = UOp.param("x", (6,))
    xv = np.array([-1.7, 1.7, 2.5, -0.5, 0.0, 300.9], np.float32)
    same(run(x.cast(dtypes.int32), x=xv), np.array([-1, 1, 2, 0, 0, 300], np.int32))
    same(run(x.cast(dtypes.bool), x=xv), np.array([True, True, True, True, False, True]))
    same(run(x.cast(dtypes.float16), x=xv), xv.astype(np.float16))
    same(run(x.cast(dtypes.int32).cast(dtypes.float64), x=xv), np.array([-1, 1, 2, 0, 0, 300], np.float64))
    b = UOp.param("b", (2,), dtypes.bool)
    same(run(b.cast(dtypes.float32), b=np.array([True, False])), np.array([1, 0], np.float32))
    bits = run(x.bitcast(dtypes.int32), x=np.array([1.0, -0.0, 0, 0, 0, 0], np.float32))
    assert bits.dtype == np.int32 and bits[0] == 0x3F800000 and bits[1] == -(2 ** 31)
    same(run(x.bitcast(dtypes.uint32).bitcast(dtypes.float32), x=xv), xv)
    h = UOp.param("h", (2,), dtypes.float16)
    same(run(h.bitcast(dtypes.int16), h=np.array([1, -2], np.float16)), np.array([1, -2], np.float16).view(np.int16))
    # float -> int of nan is undefined in C; it must at least not warn
    run(x.cast(dtypes.int32), x=np.full(6, np.nan, np.float32))


def test_where_is_exact_for_every_value():
    x = UOp.param("x", (6,))
    c = UOp.param("c", (6,), dtypes.bool)
    xv = np.array([np.nan, np.inf, -np.inf, -0.0, 2.0, -3.0], np.float32)
    cv = np.array([False, False, True, True, False, True])
    for out, expected in [(c.where(x, 0.0), np.where(cv, xv, np.float32(0))),
                          (c.where(0.0, x), np.where(cv, np.float32(0), xv)),
                          (c.where(x, -x), np.where(cv, xv, -xv)),
                          (c.where(x, -0.0), np.where(cv, xv, np.float32(-0.0))),
                          (c.where(x, 1.0), np.where(cv, xv, np.float32(1)))]:
        value = run(out, x=xv, c=cv)
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value.view(np.uint32), expected.view(np.uint32))
    made, other = x * 1.0, x * -2.0  # arrays the evaluator made: written in place when they die
    made_v, other_v = xv * np.float32(1), xv * np.float32(-2)
    for out, expected in [(c.where(made, other), np.where(cv, made_v, other_v)),
                          (c.where(x, made), np.where(cv, xv, made_v)),
                          (c.where(made, 0.0), np.where(cv, made_v, np.float32(0))),
                          (c.where(0.0, made), np.where(cv, np.float32(0), made_v)),
                          (c.where(made, 3.0), np.where(cv, made_v, np.float32(3))),
                          (c.where(-1.0, made), np.where(cv, np.float32(-1), made_v)),
                          (c.where(UOp.const(2.0), UOp.const(-0.0)), np.where(cv, np.float32(2), np.float32(-0.0)))]:
        value = run(out, x=xv, c=cv)
        np.testing.assert_array_equal(value.view(np.uint32), expected.view(np.uint32))
    i = UOp.param("i", (3,), dtypes.int16)
    same(run(c.shrink(((0, 3),)).where(i, 0), c=cv, i=np.array([5, 6, 7], np.int16)), np.array([0, 0, 7], np.int16))
    same(run(UOp.const(False).where(x, 0.0), x=xv), np.zeros(6, np.float32))


# ----------------------------------------------------------------------------- reduce and movement

def test_reduces_keep_reduced_axes():
    x = UOp.param("x", (2, 3, 4))
    xv = rand(2, 3, 4)
    same(run(x.r("ADD", (1,)), x=xv), xv.sum(1, keepdims=True))
    np.testing.assert_allclose(run(x.r("MUL", (0, 2)), x=xv), xv.prod((0, 2), keepdims=True), rtol=1e-6)
    same(run(x.r("MAX", (2,)), x=xv), xv.max(2, keepdims=True))
    assert run(x.sum(), x=xv).shape == ()
    i = UOp.param("i", (4,), dtypes.int8)
    same(run(i.r("ADD", (0,)), i=np.array([100, 100, 100, 1], np.int8)), np.array([45], np.int8))  # wraps
    same(run(i.sum(), i=np.array([100, 100, 100, 1], np.int8)), np.int32(301))  # sum() widens, as tinygrad's
    same(run(i.max(), i=np.array([-5, 3, 3, -128], np.int8)), np.int8(3))
    empty = UOp.param("e", (0, 3))
    same(run(empty.r("MAX", (0,)), e=np.zeros((0, 3), np.float32)), np.full((1, 3), -np.inf, np.float32))
    same(run(empty.r("ADD", (0,)), e=np.zeros((0, 3), np.float32)), np.zeros((1, 3), np.float32))


def test_float16_sums_accumulate_in_float32():
    x = UOp.param("x", (20000,), dtypes.float16)
    xv = np.full(20000, 0.1, np.float16)
    value = run(x.sum(), x=xv)
    assert value.dtype == np.float16
    assert value == np.float16(xv.astype(np.float32).sum())
    naive = np.add.accumulate(xv)[-1]  # a float16 accumulator, added in order, stalls far below
    assert abs(float(value) - 2000) < 2 and abs(float(naive) - 2000) > 100


def test_movement_ops_match_numpy():
    x = UOp.param("x", (2, 3, 4))
    xv = rand(2, 3, 4)
    same(run(x.reshape(4, 6), x=xv), xv.reshape(4, 6))
    same(run(x.reshape(2, 1, 3, 4).expand(2, 5, 3, 4), x=xv), np.broadcast_to(xv[:, None], (2, 5, 3, 4)))
    same(run(x.permute(2, 0, 1), x=xv), xv.transpose(2, 0, 1))
    same(run(x.pad(((1, 0), (0, 2), (1, 1))), x=xv), np.pad(xv, ((1, 0), (0, 2), (1, 1))))
    same(run(x.shrink(((1, 2), (0, 2), (1, 4))), x=xv), xv[1:2, 0:2, 1:4])
    same(run(x.flip((0, 2)), x=xv), xv[::-1, :, ::-1])
    for identity in (x.contiguous(), x.detach(), x.contiguous_backward(), x.copy_to_device("CPU")):
        same(run(identity, x=xv), xv)
    same(run(UOp.const(2.0).reshape(1, 1).expand(2, 3), x=xv), np.full((2, 3), 2, np.float32))


def test_expand_is_a_zero_copy_view():
    x = UOp.param("x", (1, 1000))
    stats = EvalStats()
    (value,) = evaluate([x.expand(1000, 1000).shrink(((0, 1000), (0, 10)))], {"x": rand(1, 1000)}, stats=stats)
    assert value.shape == (1000, 10)
    assert stats.peak_bytes == 0  # views of the caller's array: nothing allocated


def test_leaves_consts_and_buffers():
    same(run(UOp.const(3, dtypes.int16)), np.int16(3))
    same(run(UOp.const(-0.0)), np.float32(-0.0))
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    value = run(UOp.buffer(data))
    same(value, data)
    value[0, 0] = 99  # outputs are the caller's own, writable arrays
    same(run(UOp.buffer(data) * 2), data * 2)


# ----------------------------------------------------------------------------- calls and memory ops

def test_function_bodies_run_with_slots_bound():
    a, b = UOp.param("a", (3, 4)), UOp.param("b", (4,))
    av, bv = rand(3, 4), rand(4)
    f = UOp.trace_function("affine", lambda x, y: (x * 2 + y.reshape(1, 4).expand(3, 4), x.sum()), a, b)
    first, second, both = evaluate([f[0], f[1], f], {"a": av, "b": bv})
    np.testing.assert_allclose(first, av * 2 + bv, rtol=1e-6)
    np.testing.assert_allclose(second, av.sum(), rtol=1e-5)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_array_equal(both[0], first)


def test_one_body_called_with_different_args_and_nested_calls():
    x, y = UOp.param("x", (5,)), UOp.param("y", (5,))
    xv, yv = rand(5), rand(5)
    square = lambda v: UOp.trace_function("square", lambda s: (s * s,), v)[0]  # noqa: E731
    outer = UOp.trace_function("outer", lambda p, q: (square(p) + square(q + 1),), x, y)
    twice = UOp.trace_function("outer", lambda p, q: (square(p) + square(q + 1),), y, x)
    first, second = evaluate([outer[0], twice[0]], {"x": xv, "y": yv})
    np.testing.assert_allclose(first, xv * xv + (yv + 1) ** 2, rtol=1e-6)
    np.testing.assert_allclose(second, yv * yv + (xv + 1) ** 2, rtol=1e-6)
    deep = x
    for _ in range(50):  # calls nested 50 deep
        deep = UOp.trace_function("inc", lambda s: (s + 1,), deep)[0]
    np.testing.assert_allclose(run(deep, x=xv), xv + 50, rtol=1e-6)


def test_each_call_runs_its_body_once_and_unread_outputs_never():
    x = UOp.param("x", (4,))
    f = UOp.trace_function("f", lambda s: ((s * 3).sin(), (s * 5).exp2()), x)
    stats = EvalStats()
    evaluate([f[0] + f[0].sin(), f[0] * 2], {"x": rand(4)}, stats=stats)
    # body output 0: CONST 3, MUL, SIN; then SIN, ADD, CONST 2, MUL. Output 1 (MUL, EXP2) never runs.
    assert stats.nodes_evaluated == 7


def test_call_tuple_store_after():
    x = UOp.param("x", (3,))
    xv = rand(3)
    c = UOp.trace_call("double", lambda s: (s * 2,), lambda s, g: (g * 2,), x)
    np.testing.assert_allclose(run(c[0], x=xv), xv * 2)
    (pair,) = evaluate([UOp.tuple(x + 1, UOp.noop())], {"x": xv})
    np.testing.assert_allclose(pair[0], xv + 1)
    assert pair[1] is None
    dest = UOp.param("dest", (3,))
    store = dest.store(x * 3)
    value, stored = evaluate([dest.after(store), store], {"x": xv})  # dest itself is not needed
    np.testing.assert_allclose(value, xv * 3)
    np.testing.assert_allclose(stored, xv * 3)


def test_evaluate_graph_and_nodes_as_input_keys():
    x = UOp.param("x", (2,))
    s = UOp.slot(0, (2,))
    graph = Graph({"double": x * 2, "plus": x + 1})
    out = evaluate_graph(graph, {"x": np.array([1, 2], np.float32)})
    assert list(out) == ["double", "plus"]
    same(out["double"], np.array([2, 4], np.float32))
    (body,) = evaluate([s * 3], {s: np.array([1, 2], np.float32)})  # a body evaluated on its own
    same(body, np.array([3, 6], np.float32))
    (over,) = evaluate([(x * 2) + 1], {x * 2: np.array([5, 5], np.float32)})  # a node's value supplied
    same(over, np.array([6, 6], np.float32))


# ----------------------------------------------------------------------------- errors

def test_input_errors_name_the_input_with_shape_and_dtype():
    x = UOp.param("x", (3, 4))
    with pytest.raises(EvaluationError, match=r"missing input 'x'.*float32\[3, 4\]"):
        evaluate([x * 2], {})
    with pytest.raises(EvaluationError, match=r"input 'x'.*float32\[3, 4\].*float32\[4, 3\]"):
        evaluate([x * 2], {"x": rand(4, 3)})
    with pytest.raises(EvaluationError, match=r"input 'x'.*float32\[3, 4\].*float64\[3, 4\]"):
        evaluate([x * 2], {"x": rand(3, 4, dtype=np.float64)})
    with pytest.raises(EvaluationError, match=r"input 'x'.*numpy array"):
        evaluate([x * 2], {"x": [[1.0] * 4] * 3})
    with pytest.raises(EvaluationError, match=r"unknown input 'y'.*x"):
        evaluate_graph(Graph({"out": x * 2}), {"x": rand(3, 4), "y": rand(3, 4)})
    with pytest.raises(EvaluationError, match=r"slot PARAM 0"):
        evaluate([UOp.slot(0, (2,)) + 1], {})


def test_numpy_failures_become_evaluation_errors_naming_the_node():
    x = UOp.param("x", (2,))
    huge = x.reshape(2, 1).expand(2, 1 << 42).pad(((0, 0), (0, 1)))  # 32 TiB of zeros
    for stats in (None, EvalStats()):
        with pytest.raises(EvaluationError, match=r"PAD.*MemoryError"):
            evaluate([huge], {"x": rand(2)}, stats=stats)


# ----------------------------------------------------------------------------- contractions

def expanded_product(a: UOp, b: UOp) -> UOp:
    """The MUL that tinygrad's matmul builds: a (n,k), b (k,m) -> (n,m,k) expanded product."""
    (n, k), m = a.shape, b.shape[1]
    return a.reshape(n, 1, k).expand(n, m, k) * b.T.reshape(1, m, k).expand(n, m, k)


def contract(outputs, **inputs):
    stats = EvalStats()
    values = evaluate(outputs, inputs, stats=stats)
    return values, stats


CONTRACTION_CASES = [
    ("matmul", lambda a, b, c: a @ b, lambda a, b, c: a @ b),
    ("transposed left", lambda a, b, c: a.T @ c, lambda a, b, c: a.T @ c),
    ("transposed right", lambda a, b, c: b.T @ a.T, lambda a, b, c: b.T @ a.T),
    ("both transposed", lambda a, b, c: a.T @ c.T, lambda a, b, c: a.T @ c.T),
    ("vector", lambda a, b, c: a.shrink(((0, 1), (0, 8))).reshape(8) @ b,
     lambda a, b, c: a[0] @ b),
    ("scalar factor", lambda a, b, c: (expanded_product(a, b) * 0.5).sum(2),
     lambda a, b, c: (a @ b) * np.float32(0.5)),
    ("scalar factor inside", lambda a, b, c: (expanded_product(a * 1.0, b) * UOp.const(2.0)).r("ADD", (2,)),
     lambda a, b, c: ((a @ b) * 2)[:, :, None]),
    ("keepdim", lambda a, b, c: expanded_product(a, b).r("ADD", (2,)), lambda a, b, c: (a @ b)[:, :, None]),
    ("dot", lambda a, b, c: (a * a).sum(), lambda a, b, c: (a * a).sum()),
    ("three factors", lambda a, b, c: (a * a * (a + 1)).sum(1), lambda a, b, c: (a * a * (a + 1)).sum(1)),
    ("row dots", lambda a, b, c: (a * a).sum(1), lambda a, b, c: (a * a).sum(1)),
    ("outer", lambda a, b, c: (a.reshape(6, 8, 1).expand(6, 8, 6) * c.reshape(6, 1, 6).expand(6, 8, 6)).sum(0),
     lambda a, b, c: np.einsum("ik,il->kl", a, c)),
    ("sum of products", lambda a, b, c: (expanded_product(a, b) + expanded_product(a * 2, b)).sum(2),
     lambda a, b, c: 3 * (a @ b)),
    ("broadcast sum", lambda a, b, c: (a.reshape(6, 8, 1).expand(6, 8, 5) * UOp.const(3.0)).sum((0, 2)),
     lambda a, b, c: a.sum(0) * 15),
]


@pytest.mark.parametrize("name, build, reference", CONTRACTION_CASES, ids=[c[0] for c in CONTRACTION_CASES])
def test_contractions_equal_the_naive_product(name, build, reference):
    av, bv, cv = rand(6, 8), rand(8, 5), rand(6, 6)
    a, b, c = UOp.param("a", (6, 8)), UOp.param("b", (8, 5)), UOp.param("c", (6, 6))
    out = build(a, b, c)
    (value,), stats = contract([out], a=av, b=bv, c=cv)
    assert stats.contractions >= 1
    expected = np.asarray(reference(av, bv, cv), np.float32)
    assert value.shape == out.shape == expected.shape and value.dtype == np.float32
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)


def test_batched_and_broadcast_batch_contractions():
    a, b, w = UOp.param("a", (3, 4, 5)), UOp.param("b", (3, 5, 6)), UOp.param("w", (5, 2))
    av, bv, wv = rand(3, 4, 5), rand(3, 5, 6), rand(5, 2)
    (ab, aw, ba), stats = contract([a @ b, a @ w, b.transpose(-1, -2) @ a.transpose(-1, -2)], a=av, b=bv, w=wv)
    assert stats.contractions == 3
    np.testing.assert_allclose(ab, av @ bv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(aw, av @ wv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ba, (av @ bv).transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    assert ba.flags.c_contiguous
    big_a, big_b = UOp.param("A", (16, 32, 24)), UOp.param("B", (16, 24, 20))  # matmul per batch item
    Av, Bv = rand(16, 32, 24), rand(16, 24, 20)
    (value,), stats = contract([big_a @ big_b], A=Av, B=Bv)
    np.testing.assert_allclose(value, Av @ Bv, rtol=1e-5, atol=1e-4)


def test_gradient_shaped_contractions():
    """What the gradient of a matmul produces: REDUCE ADD over the expanded axes of
    g_expanded * other_expanded."""
    n, k, m = 6, 8, 5
    a, b, g = UOp.param("a", (n, k)), UOp.param("b", (k, m)), UOp.param("g", (n, m))
    av, bv, gv = rand(n, k), rand(k, m), rand(n, m)
    g_exp = g.reshape(n, m, 1).expand(n, m, k)
    lhs = a.reshape(n, 1, k).expand(n, m, k)
    rhs = b.T.reshape(1, m, k).expand(n, m, k)
    grad_a = (g_exp * rhs).r("ADD", (1,)).reshape(n, k)
    grad_b = (g_exp * lhs).r("ADD", (0,)).reshape(m, k).permute(1, 0)
    (da, db), stats = contract([grad_a, grad_b], a=av, b=bv, g=gv)
    assert stats.contractions == 2
    np.testing.assert_allclose(da, gv @ bv.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, av.T @ gv, rtol=1e-5, atol=1e-5)


def test_a_permute_between_products_and_their_sum_is_contracted_too():
    """REDUCE ADD over PERMUTE(MUL(...)), as conv2d's input gradient has it: one matmul of
    the transposed factors, never the (n, k, m) product."""
    a, b, c = UOp.param("a", (32, 48)), UOp.param("b", (48, 40)), UOp.param("c", (6, 6))
    av, bv, cv = rand(32, 48), rand(48, 40), rand(6, 6)
    def product(scale: float):  # one per output: a product read by another node is not absorbed
        return (a * scale).reshape(32, 48, 1).expand(32, 48, 40) * b.reshape(1, 48, 40).expand(32, 48, 40)
    outs = [product(1.0).permute(1, 0, 2).r("ADD", (0,)), product(2.0).permute(2, 1, 0).sum(1),
            (product(3.0) + product(4.0) * 2.0).permute(0, 2, 1).sum(2)]
    stats = EvalStats()
    values = evaluate(outs, {"a": av, "b": bv}, stats=stats)
    assert stats.contractions == 3 and stats.peak_bytes < 32 * 48 * 40 * 4  # no product was built
    for value, want in zip(values, [(av @ bv)[None], 2 * (av @ bv).T, 11 * (av @ bv)]):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-3)
    read_twice = product(1.0).permute(1, 0, 2)  # the PERMUTE's value is wanted elsewhere: not absorbed
    shown, summed = evaluate([read_twice, read_twice.sum(0)], {"a": av, "b": bv})
    np.testing.assert_allclose(summed, av @ bv, rtol=1e-5, atol=1e-4)
    assert shown.shape == (48, 32, 40)
    x, w = UOp.param("x", (2, 3, 8, 8)), UOp.param("w", (4, 3, 3, 3))
    loss = (x.conv2d(w, padding=1) * c.reshape(1, 1, 6, 6).pad((None, None, (1, 1), (1, 1)))).sum()
    from uopcli.core import gradient
    grad_x = gradient.compute_gradient(loss, loss.const_like(1.0), [x])[x]
    stats = EvalStats()
    evaluate([grad_x], {"x": rand(2, 3, 8, 8), "w": rand(4, 3, 3, 3), "c": cv}, stats=stats)
    assert stats.contractions == 1


def test_mlp_gradient_from_compute_gradient_matches_numpy():
    from uopcli.core import gradient
    x, w0, b0, w1 = UOp.param("x", (4, 6)), UOp.param("w0", (6, 5)), UOp.param("b0", (5,)), UOp.param("w1", (5, 3))
    xv, w0v, b0v, w1v = rand(4, 6), rand(6, 5), rand(5), rand(5, 3)
    z = x @ w0 + b0
    loss = ((z.relu() @ w1) ** 2.0).sum()
    grads = gradient.compute_gradient(loss, loss.const_like(1.0), [w0, b0, w1])
    (dw0, db0, dw1), stats = contract([grads[w0], grads[b0], grads[w1]], x=xv, w0=w0v, b0=b0v, w1=w1v)
    assert stats.contractions >= 4
    zv = xv @ w0v + b0v
    h = np.maximum(zv, 0)
    gout = 2 * (h @ w1v)
    gz = (gout @ w1v.T) * (zv > 0)
    np.testing.assert_allclose(dw1, h.T @ gout, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw0, xv.T @ gz, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db0, gz.sum(0), rtol=1e-4, atol=1e-4)


def test_integer_and_float16_contractions():
    a, b = UOp.param("a", (4, 6), dtypes.int32), UOp.param("b", (6, 3), dtypes.int32)
    av, bv = RNG.integers(-50, 50, (4, 6)).astype(np.int32), RNG.integers(-50, 50, (6, 3)).astype(np.int32)
    (value,), stats = contract([a @ b], a=av, b=bv)
    same(value, av @ bv)
    h, k = UOp.param("h", (4, 64), dtypes.float16), UOp.param("k", (64, 3), dtypes.float16)
    hv, kv = rand(4, 64, dtype=np.float16), rand(64, 3, dtype=np.float16)
    (value,), stats = contract([h @ k], h=hv, k=kv)
    assert value.dtype == np.float16 and stats.contractions == 1
    assert stats.peak_bytes >= (4 * 64 + 64 * 3) * 4  # the float32 copies of the operands are counted
    np.testing.assert_allclose(value, (hv.astype(np.float32) @ kv.astype(np.float32)).astype(np.float16),
                               rtol=2e-3, atol=2e-3)


def test_a_scalar_factor_scales_the_products_not_their_sum():
    """sum(x * c) as the graph says: c * sum(x) overflows where the products do not, and
    loses the nan of 0 * inf."""
    x, y = UOp.param("x", (2,)), UOp.param("y", (2,))
    (half, infinite, pair), stats = contract([(x * 0.5).sum(), (x * float("inf")).sum(), (x * y * 0.5).sum()],
                                             x=np.array([3e38, 3e38], np.float32), y=np.array([1, 1], np.float32))
    assert stats.contractions == 3
    assert half == np.float32(3e38) and infinite == np.inf and pair == np.float32(3e38)
    (infinite,), _ = contract([(x * float("inf")).sum()], x=np.array([1, 0], np.float32))
    assert np.isnan(infinite)


def test_float16_gradient_contractions_sum_in_float32():
    from uopcli.core import gradient
    a, b = UOp.param("a", (8, 32), dtypes.float16), UOp.param("b", (32, 4), dtypes.float16)
    av, bv = rand(8, 32, dtype=np.float16), rand(32, 4, dtype=np.float16)
    loss = (a @ b).sum()
    grads = gradient.compute_gradient(loss, loss.const_like(1.0), [a, b])
    (da, db), stats = contract([grads[a], grads[b]], a=av, b=bv)
    assert stats.contractions == 2  # the float16 products (CAST to float32, REDUCE) are never built
    ones = np.ones((8, 4), np.float32)
    np.testing.assert_allclose(da, (ones @ bv.astype(np.float32).T).astype(np.float16), rtol=1e-3)
    np.testing.assert_allclose(db, (av.astype(np.float32).T @ ones).astype(np.float16), rtol=1e-3)


def factor_on(rng, name: str, full: tuple, axes: list, dtype=np.float64):
    """A PARAM holding `axes` of the full shape, stored in a random axis order, brought to
    the full shape with PERMUTE, RESHAPE and EXPAND (as builders do)."""
    stored = list(rng.permutation(axes)) if axes else []
    param = UOp.param(name, tuple(full[a] for a in stored), dtype)
    value = rng.standard_normal(param.shape).astype(dtype) if stored else np.asarray(rng.standard_normal(), dtype)
    node = param.permute([stored.index(a) for a in axes]) if stored else param
    node = node.reshape(tuple(full[a] if a in axes else 1 for a in range(len(full))))
    dense = np.broadcast_to(np.transpose(value, [stored.index(a) for a in axes]).reshape(node.shape), full)
    return node.expand(full), value, dense


def random_factor(rng, name: str, full: tuple, dtype):
    """factor_on a random subset of the full shape's axes."""
    return factor_on(rng, name, full, [a for a in range(len(full)) if rng.random() < 0.6], dtype)


@pytest.mark.parametrize("seed", range(40))
def test_random_contractions_equal_the_naive_product(seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if seed % 4 else np.float32
    full = tuple(int(rng.integers(1, 5 if seed % 2 else 20)) for _ in range(int(rng.integers(1, 5))))  # big: matmul
    terms, inputs, expected_terms = [], {}, []
    for t in range(1 + (seed % 5 == 0)):  # sometimes a sum of two products
        factors, dense = [], []
        for f in range(2 + (seed % 3 == 0)):  # sometimes three factors
            node, value, full_value = random_factor(rng, f"p{t}{f}", full, dtype)
            factors.append(node)
            dense.append(full_value)
            inputs[f"p{t}{f}"] = value
        product = factors[0]
        for factor in factors[1:]:
            product = product * factor
        if seed % 7 == 0:
            product = product * UOp.const(1.5, product.dtype)
            dense.append(np.asarray(1.5, dtype))
        terms.append(product)
        expected_terms.append(np.prod(np.broadcast_arrays(*dense), axis=0))
    total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    axes = tuple(a for a in range(len(full)) if rng.random() < 0.5) or (0,)
    out = total.r("ADD", axes)
    (value,), stats = contract([out], **inputs)
    assert stats.contractions == 1
    expected = sum(expected_terms).sum(axis=axes, keepdims=True)
    assert value.shape == out.shape and value.dtype == dtype
    np.testing.assert_allclose(value, expected, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5)


@pytest.mark.parametrize("full, a_axes, b_axes, reduced", [
    ((3, 20, 6, 40, 9), [0, 2, 3, 4], [1, 2, 4], (2, 4)),    # conv: windows (N, C, P, K) x weight (Cout, C, K) -> (N, Cout, P)
    ((3, 20, 6, 200, 9), [0, 1, 3], [1, 2, 4], (1,)),        # its input gradient: (N, Cout, P) x (Cout, C, K) -> (N, C, P, K)
    ((4, 5, 200, 200), [0, 1, 2], [1, 2, 3], (2,)),          # a kept axis both have, between free ones
    ((2, 3, 50, 40, 30), [0, 2, 4], [1, 3, 4], (4,)),        # free axes interleaved after a leading one
])
def test_products_batched_in_their_output_order_equal_the_naive_product(full, a_axes, b_axes, reduced, monkeypatch):
    # Large products whose output interleaves the factors' axes (a convolution's N, Cout, H,
    # W) run as np.matmul batched over leading axes, each factor broadcast along those it
    # lacks, where one product would need a transposed copy of its result.
    import importlib
    module = importlib.import_module("uopcli.backends.numpy.contraction")
    batched, real = [], module._matmul_in_output_order
    monkeypatch.setattr(module, "_matmul_in_output_order", lambda *args: batched.append(1) or real(*args))
    rng = np.random.default_rng(len(full) + sum(full))
    (a, av, a_dense), (b, bv, b_dense) = factor_on(rng, "a", full, a_axes), factor_on(rng, "b", full, b_axes)
    (value,), stats = contract([(a * b).r("ADD", reduced)], a=av, b=bv)
    assert stats.contractions == 1 and batched == [1]
    np.testing.assert_allclose(value, (a_dense * b_dense).sum(axis=reduced, keepdims=True), rtol=1e-10, atol=1e-10)
    assert value.flags.c_contiguous


def test_a_product_read_elsewhere_is_evaluated_normally():
    a, b = UOp.param("a", (6, 8)), UOp.param("b", (8, 5))
    av, bv = rand(6, 8), rand(8, 5)
    product = expanded_product(a, b)
    (total, first), stats = contract([product.sum(2), product.shrink(((0, 1), (0, 1), (0, 8)))], a=av, b=bv)
    assert stats.contractions == 0
    np.testing.assert_allclose(total, av @ bv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first.reshape(8), av[0] * bv[:, 0], rtol=1e-6)
    (value,), stats = contract([(a * b.shrink(((0, 6), (0, 5))).pad(((0, 0), (0, 3)))).r("MAX", (1,))], a=av, b=bv)
    assert stats.contractions == 0  # not a sum


def test_a_large_contraction_never_builds_the_expanded_product():
    n = 256  # the expanded product would be 256^3 float32 = 64 MiB
    a, b = UOp.param("a", (n, n)), UOp.param("b", (n, n))
    av, bv = rand(n, n), rand(n, n)
    g = UOp.param("g", (n, n))
    g_exp = g.reshape(n, n, 1).expand(n, n, n)
    outputs = [a @ b, (g_exp * b.T.reshape(1, n, n).expand(n, n, n)).r("ADD", (1,))]
    tracemalloc.start()
    try:
        (ab, ga), stats = contract(outputs, a=av, b=bv, g=av)
        traced_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.contractions == 2
    assert stats.peak_bytes <= 2 * n * n * 4  # the two results, nothing else
    assert traced_peak < 8 * n * n * 4        # numpy allocated nothing near 64 MiB either
    np.testing.assert_allclose(ab, av @ bv, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ga.reshape(n, n), av @ bv.T, rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- memory and scale

def test_intermediates_are_freed_after_their_last_use():
    x = UOp.param("x", (1 << 18,))  # 1 MiB per float32 array
    y = x
    for i in range(200):
        y = (y * 1.0001 + 0.5).sin() if i % 2 else y.maximum(x)  # x stays live: it is read throughout
    stats = EvalStats()
    (value,) = evaluate([y], {"x": rand(1 << 18)}, stats=stats)
    assert stats.nodes_evaluated > 300
    assert stats.peak_bytes <= 3 * (1 << 20)  # about two arrays live at a time


def test_writing_into_dying_sources_never_changes_a_value_still_needed():
    x = UOp.param("x", (3, 4))
    xv = rand(3, 4)
    keep = xv.copy()
    y = x * 2
    (later,) = evaluate([(y + 1).reshape(4, 3) + y.reshape(4, 3)], {"x": xv})  # y's view is read after y + 1
    np.testing.assert_allclose(later, (xv * 2 + 1).reshape(4, 3) + (xv * 2).reshape(4, 3))
    (same_step,) = evaluate([(x * 3) + (x * 3).flip(1)], {"x": xv})  # read twice, two layouts, one step
    np.testing.assert_allclose(same_step, xv * 3 + (xv * 3)[:, ::-1])
    (transposed,) = evaluate([y.permute(1, 0) + 0.5], {"x": xv})  # written through a transposed view
    np.testing.assert_allclose(transposed, (xv * 2).T + 0.5)
    plus, kept_output = evaluate([y + 1, y], {"x": xv})  # an output is never written
    np.testing.assert_allclose(kept_output, xv * 2)
    np.testing.assert_array_equal(xv, keep)  # nor is the caller's input
    c = UOp.param("c", (3, 4), dtypes.bool)
    cv = xv > 0
    (relu_grad,) = evaluate([c.where(UOp.const(1.0).reshape(1, 1).expand(3, 4), 0.0)], {"c": cv})
    np.testing.assert_array_equal(relu_grad, cv.astype(np.float32))  # a broadcast is never written
    stats = EvalStats()
    evaluate([((x * 2 + 1) * 3).sin()], {"x": rand(3, 4)}, stats=stats)
    assert stats.peak_bytes < 2 * 3 * 4 * 4  # one array (and scalar CONSTs), written in place four times


def test_a_million_node_chain_evaluates_at_the_default_recursion_limit(default_recursion_limit):
    with no_gc():
        y = UOp.param("x", ())
        for _ in range(500_000):
            y = y * 1.0000001 + 0.25
    stats = EvalStats()
    (value,) = evaluate([y], {"x": np.float32(1)}, stats=stats)
    assert stats.nodes_evaluated == 1_000_002  # 500,000 MULs and ADDs, and each CONST once
    assert value.dtype == np.float32 and value.shape == () and np.isfinite(value)


# ----------------------------------------------------------------------------- strided chains
# Movement chains that are one view of their start run as one strided view, and REDUCE ADD
# over padded chains as a strided scatter-add (uopcli/backends/numpy/strided.py). Integer values keep every
# comparison exact; the reference is the plain op-by-op evaluator of tests/_reference_eval.

def _random_chain(rng, x):
    """A few random movement ops (tiles, merges and splits, permutes, flips, shrinks,
    expands, pads) on `x`: the shapes conv windows and their gradients go through."""
    for _ in range(int(rng.integers(2, 7))):
        shape = x.shape
        kind = rng.choice(["tile", "merge", "split", "permute", "flip", "shrink", "expand", "pad"])
        if kind == "tile":
            x = x.repeat(tuple(int(r) for r in rng.integers(1, 4, len(shape))))
        elif kind == "merge" and len(shape) >= 2:
            axis = int(rng.integers(0, len(shape) - 1))
            x = x.reshape(shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:])
        elif kind == "split":
            axis = int(rng.integers(0, len(shape)))
            divisors = [d for d in range(1, shape[axis] + 1) if shape[axis] % d == 0]
            d = int(rng.choice(divisors))
            x = x.reshape(shape[:axis] + (d, shape[axis] // d) + shape[axis + 1:])
        elif kind == "permute":
            x = x.permute(*(int(a) for a in rng.permutation(len(shape))))
        elif kind == "flip":
            x = x.flip(tuple(bool(f) for f in rng.integers(0, 2, len(shape))))
        elif kind == "shrink":
            bounds = []
            for n in shape:
                start = int(rng.integers(0, n))
                bounds.append((start, int(rng.integers(start + 1, n + 1))))
            x = x.shrink(tuple(bounds))
        elif kind == "expand":
            axis = int(rng.integers(0, len(shape) + 1))
            x = x.reshape(shape[:axis] + (1,) + shape[axis:]).expand(shape[:axis] + (int(rng.integers(1, 4)),) + shape[axis:])
        elif kind == "pad":
            x = x.pad(tuple((int(a), int(b)) for a, b in rng.integers(0, 3, (len(shape), 2))))
    return x


@pytest.mark.parametrize("seed", range(300))
def test_random_movement_chains_and_their_sums_match_op_by_op_numpy(seed):
    from _reference_eval import reference_evaluate
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 6, int(rng.integers(1, 4))))
    x = UOp.param("x", shape, dtypes.int32)
    chain = _random_chain(rng, x)
    axes = tuple(sorted(set(int(a) for a in rng.integers(0, len(chain.shape), 2))))
    outputs = [chain * UOp.const(3, dtypes.int32), chain.sum(axes), chain]
    value = rng.integers(-100, 100, shape).astype(np.int32)
    for got, expected in zip(evaluate(outputs, {"x": value}), reference_evaluate(outputs, {"x": value})):
        same(got, expected)


def _windows(x, kernel, stride, dilation):
    """numpy's sliding windows, strided and dilated: (..., *outputs, *kernel)."""
    from numpy.lib.stride_tricks import sliding_window_view
    spatial = len(kernel)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    view = sliding_window_view(x, span, axis=tuple(range(x.ndim - spatial, x.ndim)))
    index = (Ellipsis,) + tuple(slice(None, None, s) for s in stride) + tuple(slice(None, None, d) for d in dilation)
    return view[index]


@pytest.mark.parametrize("kernel, stride, dilation, size", [
    ((3, 3), (1, 1), (1, 1), (9, 9)), ((3, 3), (2, 2), (1, 1), (9, 8)), ((2, 3), (1, 3), (2, 1), (10, 11)),
    ((5,), (2,), (3,), (20,)), ((3, 3, 3), (1, 2, 1), (1, 1, 2), (7, 6, 8)), ((1, 1), (1, 1), (1, 1), (4, 4)),
])
def test_conv_windows_are_one_view_of_the_input(kernel, stride, dilation, size):
    x = UOp.param("x", (2, 3) + size)
    value = rand(2, 3, *size)
    stats = EvalStats()
    (got,) = evaluate([x._pool(kernel, stride, dilation)], {"x": value}, stats=stats)
    same(got, _windows(value, kernel, stride, dilation))
    assert stats.peak_bytes == 0  # the tiles the graph spells are never built: a view of the caller's array
    assert stats.nodes_evaluated == 1


def test_conv_gradients_build_neither_tiles_nor_padded_copies():
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    x, w = UOp.param("x", (4, 8, 16, 16)), UOp.param("w", (8, 8, 3, 3))
    loss = x.conv2d(w, padding=1, stride=1).relu().sum()
    grads = compute_gradient(loss, UOp.const(1.0), [x, w])
    inputs = {"x": rand(4, 8, 16, 16), "w": rand(8, 8, 3, 3)}
    stats = EvalStats()
    got = evaluate([grads[x], grads[w]], inputs, stats=stats)
    for value, expected in zip(got, reference_evaluate([grads[x], grads[w]], inputs)):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-4)
    # the windows are 9 input-sized blocks (im2col inside the matmul); op by op the graph
    # also built 16 input-sized tiles and, for the input gradient, padded copies of them
    assert stats.peak_bytes < 30 * inputs["x"].nbytes, stats.peak_bytes


def test_a_view_that_overlaps_is_never_written_in_place():
    x = UOp.param("x", (6,))
    windows = x._pool((3,), 1, 1)           # (4, 3): rows overlap in memory
    doubled = (windows + windows.exp2()).sum()
    value = rand(6)
    (got,) = evaluate([doubled], {"x": value})
    w = _windows(value, (3,), (1,), (1,))
    np.testing.assert_allclose(got, np.sum(w + np.exp2(w)), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_reduces_of_overlapping_windows_run_one_position_at_a_time_and_equal_numpys(dtype, monkeypatch):
    # A stride-1 pool reduces a strided view over its tiny window axes; numpy's own reduce
    # loops per element there, so the evaluator runs one ufunc per window position instead.
    import importlib
    module = importlib.import_module("uopcli.backends.numpy.table")
    taken, real = [], module._reduce_by_positions
    monkeypatch.setattr(module, "_reduce_by_positions", lambda *args: taken.append(1) or real(*args))
    value = (RNG.standard_normal((2, 3, 40, 40)) * 50).astype(dtype)
    x = UOp.param("x", value.shape, dtypes.int32 if dtype == np.int32 else dtypes.float16 if dtype == np.float16 else dtypes.float32)
    windows = x._pool((3, 3), 1, 1)
    got_max, got_sum = evaluate([windows.max((-2, -1)), windows.sum((-2, -1))], {"x": value})
    reference = _windows(value, (3, 3), (1, 1), (1, 1))
    same(got_max, reference.max((-2, -1)))
    if dtype == np.int32:
        same(got_sum, reference.sum((-2, -1), dtype=np.int32))
    else:  # float16 sums accumulate in float32, as every REDUCE ADD of float16 does
        wide = reference.astype(np.float32).sum((-2, -1)).astype(dtype)
        np.testing.assert_allclose(got_sum.astype(np.float64), wide.astype(np.float64), rtol=1e-3 if dtype == np.float16 else 1e-5,
                                   atol=1e-2 if dtype == np.float16 else 1e-3)
    assert len(taken) == 2


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_elementwise_steps_over_overlapping_windows_run_with_the_long_axes_inner_and_equal_numpys(dtype, stride):
    # A 3x3 pool's windows step along W and along the window's last axis over the same
    # memory; numpy walks them in stride order, 3 elements at a time, and lays its result
    # out so, and so does every step reading that result. The evaluator runs these steps
    # with W inner instead (a max pool's gradient: 2-3x faster), ufuncs and other impls.
    from _reference_eval import reference_evaluate
    value = (RNG.standard_normal((2, 3, 64, 64)) * 50).astype(dtype)
    x = UOp.param("x", value.shape, dtypes.int32 if dtype == np.int32 else dtypes.float16 if dtype == np.float16 else dtypes.float32)
    windows = x._pool((3, 3), stride, 1)               # (2, 3, 62, 62, 3, 3) or (2, 3, 31, 31, 3, 3)
    peak = windows.max((-2, -1), keepdim=True).expand(windows.shape)
    mask = windows.eq(peak)                            # the max pool gradient's mask
    outputs = [mask, mask.cast(x.dtype) * windows, (peak < windows).where(windows, peak), -windows,
               windows - x.const_like(1), windows.cast(dtypes.float64)]
    inputs = {"x": value}
    got = evaluate(outputs, inputs)
    for result, expected in zip(got, reference_evaluate(outputs, inputs)):
        same(result, expected)
    reference = _windows(value, (3, 3), (stride, stride), (1, 1))
    same(got[0], reference == reference.max((-2, -1), keepdims=True))
    for result in got:
        inner = min(range(result.ndim), key=lambda axis: result.strides[axis])
        assert inner == 3 and result.strides[3] == result.itemsize, result.strides


@pytest.mark.parametrize("kernel", [2, 3, 5])
def test_stride_1_max_pool_gradient_equals_the_op_by_op_reference(kernel):
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    x = UOp.param("x", (2, 4, 24, 24))
    y = x.max_pool2d(kernel, stride=1)
    loss = (y * y).sum()
    grad = compute_gradient(loss, UOp.const(1.0), [x])[x]
    inputs = {"x": np.round(rand(2, 4, 24, 24) * 4) / 4}  # quarters: ties inside windows, shared credit
    (got,) = evaluate([grad], inputs)
    (expected,) = reference_evaluate([grad], inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (1, 1, 1, 2),
                                                               (2, 0, 1, 1)])
def test_conv_input_gradient_is_laid_out_for_its_col2im_and_equals_the_op_by_op_reference(
        stride, padding, dilation, groups, monkeypatch):
    # conv2d's input gradient is a contraction (the weight against the output gradient)
    # scatter-added back one window position (kh, kw) at a time: col2im. Laid out (N, C,
    # H, W, kh, kw), each add read elements kh*kw apart; the contraction now lays its
    # result out (N, C, kh, kw, H, W) for it, so each add reads rows of W neighbours.
    import importlib
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    strided = importlib.import_module("uopcli.backends.numpy.strided")
    seen, real = [], strided.StridedScatter.__call__
    monkeypatch.setattr(strided.StridedScatter, "__call__", lambda self, node, g: seen.append((self, g)) or real(self, node, g))
    x, w = UOp.param("x", (2, 8, 18, 18)), UOp.param("w", (8, 8 // groups, 3, 3))  # large enough for one product
    loss = (x.conv2d(w, groups=groups, stride=stride, dilation=dilation, padding=padding).relu() ** 2).sum()
    grad = compute_gradient(loss, UOp.const(1.0), [x])[x]
    inputs = {"x": rand(2, 8, 18, 18), "w": rand(8, 8 // groups, 3, 3)}
    (got,) = evaluate([grad], inputs)
    (expected,) = reference_evaluate([grad], inputs)  # float32 sums in another order: compare to the scale
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    scatter, g = seen[0]
    assert scatter.looped and len(seen) == 1
    moving = [axis for axis in range(g.ndim) if g.shape[axis] > 1]
    inner = min(moving, key=lambda axis: g.strides[axis])
    assert inner not in scatter.looped and g.strides[inner] == g.itemsize, (g.shape, g.strides, scatter.looped)
    assert all(g.strides[axis] > g.strides[inner] * g.shape[inner] for axis in scatter.looped), (g.strides, scatter.looped)


def test_conv_weight_gradient_copies_its_windows_in_rows_and_equals_the_op_by_op_reference(monkeypatch):
    # conv2d's weight gradient contracts N, H, W of the input's windows: as matmul's right
    # factor (N*H*W, C*kh*kw) numpy's copy of the windows gathers runs of kw = 3 elements,
    # as the left one (C*kh*kw, N*H*W) rows of W (4x faster); the result is then transposed.
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    products, real = [], np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b, *args, **kwargs: products.append((a.shape, b.shape)) or real(a, b, *args, **kwargs))
    x, w = UOp.param("x", (2, 8, 18, 18)), UOp.param("w", (8, 8, 3, 3))
    loss = (x.conv2d(w, padding=1).relu() ** 2).sum()
    grad = compute_gradient(loss, UOp.const(1.0), [w])[w]
    inputs = {"x": rand(2, 8, 18, 18), "w": rand(8, 8, 3, 3)}
    (got,) = evaluate([grad], inputs)
    monkeypatch.undo()
    (expected,) = reference_evaluate([grad], inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert got.flags.c_contiguous
    assert ((8 * 3 * 3, 2 * 18 * 18), (2 * 18 * 18, 8)) in products, products


def test_a_product_of_contiguous_factors_is_not_swapped():
    import importlib
    module = importlib.import_module("uopcli.backends.numpy.contraction")
    a, b = np.ones((64, 32), np.float32), np.ones((32, 48), np.float32)
    assert not module._swap_is_cheaper(a, [0, 1], b, [1, 2], [], [0], [2], [1], 64 * 48)
    assert module._copy_cost(a.T, [1, 1]) == 0 and module._copy_cost(a.T, [2]) == 64 * 32 * module._SHORT_RUNS


def _gather_model(n: int = 48, m: int = 40, rows: int = 64):
    x = UOp.param("x", (rows, n))
    index = UOp.param("i", (rows, m), dtypes.int32)
    picked = x.gather(1, index)
    loss = (picked * picked).sum()
    from uopcli.core.gradient import compute_gradient
    return x, picked, compute_gradient(loss, UOp.const(1.0), [x])[x]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_gather_selects_by_a_product_with_the_mask_and_equals_take_along_axis(dtype):
    # gather spells its selection as sum(where(index == arange, x, 0)) over a one-hot axis:
    # the sum runs as the contraction of the mask with x (one product), exactly.
    from _reference_eval import reference_evaluate
    n, m, rows = 48, 40, 64
    x = UOp.param("x", (rows, n), dtypes.int32 if dtype == np.int32 else dtypes.float16 if dtype == np.float16 else dtypes.float32)
    index = UOp.param("i", (rows, m), dtypes.int32)
    picked = x.gather(1, index)
    inputs = {"x": (RNG.standard_normal((rows, n)) * 100).astype(dtype), "i": RNG.integers(0, n, (rows, m)).astype(np.int32)}
    stats = EvalStats()
    (got,) = evaluate([picked], inputs, stats=stats)
    same(got, np.take_along_axis(inputs["x"], inputs["i"], axis=1))
    (expected,) = reference_evaluate([picked], inputs)
    same(got, expected)
    assert stats.contractions == 1


def test_gather_and_its_gradient_keep_the_wheres_values_where_x_is_not_finite_or_a_negative_zero():
    # inf * 0 is nan where the WHERE gives 0, and -x * 0 is -0.0 where it gives +0.0: the
    # products must not show through, so the results equal the op-by-op WHERE and sum.
    from _reference_eval import reference_evaluate
    x, picked, grad = _gather_model()
    values = rand(64, 48)
    values[3, 5], values[7, :] = np.inf, np.nan   # row 7 all nan, picked or not
    values[9, :] = -0.0
    index = RNG.integers(0, 48, (64, 40)).astype(np.int32)
    index[3] = 6  # row 3 never picks its inf
    inputs = {"x": values, "i": index}
    got = evaluate([picked, grad], inputs)
    expected = reference_evaluate([picked, grad], inputs)
    same(got[0], expected[0])  # a selection: exact
    # the gradient adds the values picked at one class in index order: rounding may differ
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
    for result, reference in zip(got, expected):
        assert np.array_equal(np.signbit(result), np.signbit(reference))
    assert np.isfinite(got[0][3]).all() and np.isnan(got[0][7]).all()
    finite = {"x": np.where(np.isfinite(values), values, 1.0).astype(np.float32), "i": index}
    got = evaluate([picked, grad], finite)  # the product path: -0.0 picked in row 9 reads +0.0, as the WHERE's sum
    expected = reference_evaluate([picked, grad], finite)
    for result, reference in zip(got, expected):
        np.testing.assert_allclose(result, reference, rtol=1e-6, atol=1e-6)
        assert np.array_equal(np.signbit(result), np.signbit(reference))


def test_interpolate_gradient_runs_as_products_and_equals_the_op_by_op_reference():
    # lerp's two gathers per axis: the gradient adds two masked scatter-adds, one product each
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    x = UOp.param("x", (2, 3, 12, 10))
    y = x.interpolate((20, 24))
    grad = compute_gradient((y * y).sum(), UOp.const(1.0), [x])[x]
    inputs = {"x": rand(2, 3, 12, 10)}
    stats = EvalStats()
    got = evaluate([y, grad], inputs, stats=stats)
    expected = reference_evaluate([y, grad], inputs)
    for result, reference in zip(got, expected):
        np.testing.assert_allclose(result, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
    assert stats.peak_bytes < 2 * 3 * 20 * 24 * 12 * 4, stats.peak_bytes  # under one one-hot tensor of the result


def test_elementwise_steps_on_sources_broadcast_alike_run_once_along_those_axes():
    a, b = UOp.param("a", (1, 64, 1)), UOp.param("b", (1, 1, 96))
    full = (128, 64, 96)
    outputs = [a.expand(full) < b.expand(full), a.expand(full) * b.expand(full) + 1.0]
    inputs = {"a": rand(1, 64, 1), "b": rand(1, 1, 96)}
    got = evaluate(outputs, inputs)
    same(got[0], np.broadcast_to(inputs["a"] < inputs["b"], full))
    same(got[1], np.broadcast_to(inputs["a"] * inputs["b"] + np.float32(1.0), full))
    import importlib
    module = importlib.import_module("uopcli.backends.numpy.compiler")
    program = module.compile_program(outputs)
    less = next(step for step in program.steps if step.node.op == Ops.CMPLT)
    value = less.impl(less.node, *[np.broadcast_to(inputs[n], full) for n in ("a", "b")])
    assert value.strides[0] == 0 and value.shape == full  # computed on (1, 64, 96), then broadcast


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_gather_reads_the_index_without_building_its_one_hot_mask(dtype):
    # index == arange along the summed axis is a selection: values[..., index, ...] read
    # directly (indices outside the axis select nothing, as the mask does), so no array
    # the size of the mask, n times the result, is made
    from _reference_eval import reference_evaluate
    rows, n, m = 64, 48, 40
    x = UOp.param("x", (rows, n), dtypes.int32 if dtype == np.int32 else dtypes.float32)
    index = UOp.param("i", (rows, m), dtypes.int32)
    picked = x.gather(1, index)
    indices = RNG.integers(-3, n + 3, (rows, m)).astype(np.int32)  # some outside [0, n)
    inputs = {"x": (RNG.standard_normal((rows, n)) * 100).astype(dtype), "i": indices}
    stats = EvalStats()
    (got,) = evaluate([picked], inputs, stats=stats)
    (expected,) = reference_evaluate([picked], inputs)
    same(got, expected)
    inside = (indices >= 0) & (indices < n)
    same(got, np.where(inside, np.take_along_axis(inputs["x"], np.clip(indices, 0, n - 1), axis=1), 0).astype(dtype))
    assert stats.peak_bytes < rows * m * n, stats.peak_bytes  # under the bool mask itself


def test_a_mask_against_something_other_than_arange_is_summed_as_written():
    from _reference_eval import reference_evaluate
    x, index = UOp.param("x", (16, 24)), UOp.param("i", (16, 10), dtypes.int32)
    classes = (UOp.arange(24) * 2).reshape((1, 1, 24))  # even numbers: no selection by position
    mask = index.unsqueeze(-1).eq(classes)
    total = mask.where(x.unsqueeze(1).expand((16, 10, 24)), 0).sum(-1)
    inputs = {"x": rand(16, 24), "i": RNG.integers(0, 48, (16, 10)).astype(np.int32)}
    (got,) = evaluate([total], inputs)
    (expected,) = reference_evaluate([total], inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_gradient_scatter_adds_without_building_the_one_hot_mask(dtype):
    # the gradient sums where(index == arange, g, 0) along the index's own axis: a
    # scatter-add of g at the indices (repeats add up; outside [0, n) adds nothing).
    # (float16 gradients sum through a CAST to float32, which this does not look through.)
    from _reference_eval import reference_evaluate
    from uopcli.core.gradient import compute_gradient
    rows, n, m = 64, 48, 40
    kind = dtypes.float64 if dtype == np.float64 else dtypes.float32
    x, index, seed = UOp.param("x", (rows, n), kind), UOp.param("i", (rows, m), dtypes.int32), UOp.param("g", (rows, m), kind)
    grad = compute_gradient(x.gather(1, index), seed, [x])[x]
    indices = RNG.integers(-3, n + 3, (rows, m)).astype(np.int32)
    inputs = {"x": (RNG.standard_normal((rows, n)) * 8).astype(dtype), "i": indices,
              "g": (RNG.standard_normal((rows, m)) * 8).astype(dtype)}
    stats = EvalStats()
    (got,) = evaluate([grad], inputs, stats=stats)
    (expected,) = reference_evaluate([grad], inputs)
    wide = np.zeros((rows, n), np.float64)
    inside = (indices >= 0) & (indices < n)
    np.add.at(wide, (np.nonzero(inside)[0], indices[inside]), inputs["g"][inside].astype(np.float64))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, wide, rtol=1e-5, atol=1e-4)
    assert got.dtype == dtype
    assert stats.peak_bytes < rows * m * n, stats.peak_bytes
