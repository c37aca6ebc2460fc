"""Every format v1 op exported to ONNX, run in onnxruntime, against uopcli's evaluator at
the edges: every dtype, negative operands, -0.0, inf, nan, subnormals, the extremes of
each integer type, division by 0 and -1, shifts by the width and more.

Exact ops are compared bit for bit (a nan's payload aside); the transcendental ones
(SIN, EXP2, LOG2, float POW), which onnxruntime and numpy each compute within an ulp,
are compared within a few ulps and exactly where the answer is exact (integers, powers
of two, zeros, infinities, nan)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from _onnx_helpers import assert_exact, evaluated, need_onnx_and_runtime, run_onnx, same_bits
from uopcli import Graph, Ops, UOp, dtypes

need_onnx_and_runtime()

FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
SIGNED = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]
UNSIGNED = [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
INTS = SIGNED + UNSIGNED
NUMERIC = INTS + FLOATS
ALL = [dtypes.bool] + NUMERIC


def edge_values(dtype) -> np.ndarray:
    """The values where exactness breaks first, for one dtype."""
    if dtype is dtypes.bool:
        return np.array([False, True])
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        wanted = [info.min, info.min + 1, -(info.max // 2) - 1, -7, -3, -2, -1, 0, 1, 2, 3, 5, 7, 8, 31, 63,
                  info.max // 2, info.max // 2 + 1, info.max - 1, info.max]
        return np.array(sorted({v for v in wanted if info.min <= v <= info.max}), dtype=dtype.np)
    info = np.finfo(dtype.np)
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, -7.75, 0.1,
              1024.0, 1e-3, float(info.tiny), -float(info.tiny), float(info.tiny) / 4, -float(info.tiny) / 8,
              float(info.smallest_subnormal), float(info.max), -float(info.max), 65504.0, 300.7, -300.7]
    with np.errstate(over="ignore"):
        return np.array(values, dtype=dtype.np)


def grid(dtype, values=None):
    """Every pair of edge values, as two flat arrays."""
    values = edge_values(dtype) if values is None else values
    a, b = (np.array(v) for v in zip(*itertools.product(values, repeat=2)))
    return a.astype(dtype.np), b.astype(dtype.np)


def check_op(make, arrays: dict, exact: bool = True, ulps: int = 4, opset: int | None = None, floor: float = 0.0):
    """Build `make(*params)`, export, run, compare with the evaluator."""
    params = [UOp.param(name, a.shape, a.dtype) for name, a in arrays.items()]
    graph = Graph({"out": make(*params)}, inputs=params)
    with np.errstate(all="ignore"):
        truth = evaluated(graph, arrays)["out"]
    ours = run_onnx(graph, arrays, opset)["out"]
    if exact:
        assert_exact(ours, truth, repr(graph.outputs["out"]))
    else:
        assert_within_ulps(ours, truth, ulps, floor)
    return ours, truth


def assert_within_ulps(ours, truth, ulps: int, floor: float = 0.0) -> None:
    """Within `ulps` units in the last place of the truth (of `floor`, where the truth is
    smaller: sin's error is an ulp of its range, not of a result near a zero of sin)."""
    same = same_bits(ours, truth)
    assert np.array_equal(np.isfinite(ours), np.isfinite(truth)), (ours, truth)
    spacing = np.spacing(np.maximum(np.abs(truth), floor).astype(truth.dtype))
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: compared by bits above
        close = np.abs(ours.astype(np.float64) - truth.astype(np.float64)) <= ulps * spacing.astype(np.float64)
    assert np.all(same | close), (ours[~(same | close)], truth[~(same | close)])


def unary(op):
    return lambda x: UOp.make(op, x.dtype, (x,))


def binary(op, out=None):
    return lambda a, b: UOp.make(op, out or a.dtype, (a, b))


# ----------------------------------------------------------------------------- unary

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC])
def test_exact_float_unary(op, dtype):
    check_op(unary(op), {"x": edge_values(dtype)})


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN])
def test_transcendental_unary(op, dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate([edge_values(dtype), rng.uniform(-20, 20, 200), rng.uniform(0, 3, 50)]).astype(dtype.np)
    check_op(unary(op), {"x": x}, exact=False, floor=1.0 if op == Ops.SIN else 0.0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_exp2_and_log2_exact_at_integers_and_powers_of_two(dtype):
    """2^k and log2(2^k) exactly, over the whole exponent range (subnormals too). numpy's
    own float32 exp2(127) is an ulp short of 2^127: the evaluator is compared within ulps,
    the exactness against np.ldexp."""
    info = np.finfo(dtype.np)
    exponents = np.arange(info.minexp - info.nmant, info.maxexp, dtype=np.float64)
    powers = np.ldexp(1.0, exponents.astype(int)).astype(dtype.np)
    ours, _ = check_op(unary(Ops.EXP2), {"x": exponents.astype(dtype.np)}, exact=False, ulps=1)
    assert_exact(ours, powers, "EXP2 of integers")
    ours, _ = check_op(unary(Ops.LOG2), {"x": powers})
    assert_exact(ours, exponents.astype(dtype.np), "LOG2 of powers of two")


def test_trunc_keeps_the_sign_of_zero():
    ours, _ = check_op(unary(Ops.TRUNC), {"x": np.array([-0.5, -0.0, 0.5, -0.999], np.float32)})
    assert np.all(np.signbit(ours) == [True, True, False, True])


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_neg_integers_wrap(dtype):
    check_op(unary(Ops.NEG), {"x": edge_values(dtype)})


# ----------------------------------------------------------------------------- binary

@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.SUB, Ops.MUL])
def test_arithmetic(op, dtype):
    check_op(binary(op), dict(zip("ab", grid(dtype))))


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_mulacc(dtype):
    a, b = grid(dtype)
    c = np.roll(a, 3)
    check_op(lambda x, y, z: UOp.make(Ops.MULACC, x.dtype, (x, y, z)), {"a": a, "b": b, "c": c})


_DIVISIONS = [(Ops.FDIV, d) for d in NUMERIC] + [(op, d) for op in (Ops.CDIV, Ops.CMOD) for d in INTS]


@pytest.mark.parametrize("op,dtype", _DIVISIONS, ids=lambda v: str(v))
def test_division(op, dtype):
    """Floats IEEE (0/0, 1/-0.0); integers C division and remainder, / 0 and INT_MIN / -1."""
    check_op(binary(op), dict(zip("ab", grid(dtype))))


def test_c_division_edges_by_hand():
    """Truncation toward zero and the dividend's sign, 0 for / 0, INT_MIN / -1 wraps."""
    a = np.array([7, -7, 7, -7, 5, -2 ** 31, -2 ** 31, 3], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 1, -1], np.int32)
    q, _ = check_op(binary(Ops.CDIV), {"a": a, "b": b})
    r, _ = check_op(binary(Ops.CMOD), {"a": a, "b": b})
    assert q.tolist() == [3, -3, -3, 3, 0, -2 ** 31, -2 ** 31, -3]
    assert r.tolist() == [1, -1, 1, -1, 0, 0, 0, 0]


def test_large_int64_remainder_is_exact():
    """Past 2^53 a remainder through double (ORT's Mod fmod=1) would be wrong."""
    a = np.array([2 ** 62 + 3, -(2 ** 62) - 5, 2 ** 63 - 1], np.int64)
    b = np.array([2 ** 40 + 7, 2 ** 33 - 1, 3], np.int64)
    check_op(binary(Ops.CMOD), {"a": a, "b": b})
    check_op(binary(Ops.CDIV), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_max(dtype):
    check_op(binary(Ops.MAX), dict(zip("ab", grid(dtype))))


def test_max_nan_and_signed_zeros():
    a = np.array([np.nan, 1.0, -0.0, 0.0, np.nan, -np.inf], np.float32)
    b = np.array([1.0, np.nan, 0.0, -0.0, np.nan, -np.inf], np.float32)
    ours, _ = check_op(binary(Ops.MAX), {"a": a, "b": b})
    assert np.isnan(ours[[0, 1, 4]]).all() and np.signbit(ours[2:4]).tolist() == [False, True]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_pow(dtype):
    a, b = grid(dtype, np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -8.0, np.inf, -np.inf, np.nan, 1e-3, 7.25]))
    check_op(binary(Ops.POW), {"a": a, "b": b}, exact=False)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_pow(dtype):
    """C-style: wrapping products, b < 0 gives 1, +-1 or 0; exponents past the width."""
    info = np.iinfo(dtype.np)
    bases = [v for v in [info.min, -3, -2, -1, 0, 1, 2, 3, 7, info.max] if info.min <= v <= info.max]
    exps = [v for v in [info.min, info.min + 1, -(2 ** 53) - 1, -3, -2, -1, 0, 1, 2, 3, 5, 8, 15, 31, 33, 63, 64,
                        info.max // 2 + 1, info.max]
            if info.min <= v <= info.max]  # odd negative exponents past 2^53: (-1)^b by b's exact parity;
    # the exponent's top bit alone (2^(n-1) for unsigned: an even base gives 0, not 1)
    a, b = (np.array(v, dtype=dtype.np) for v in zip(*itertools.product(bases, exps)))
    check_op(binary(Ops.POW), {"a": a, "b": b})


@pytest.mark.parametrize("exponent", [0, 1, 2, 5, 13, -1, -2])
def test_integer_pow_by_a_constant(exponent):
    a = np.array([-3, -2, -1, 0, 1, 2, 3, 1000, -(2 ** 31)], np.int32)
    check_op(lambda x: x.pow(UOp.const(exponent, dtypes.int32)), {"a": a})


@pytest.mark.parametrize("dtype", INTS + [dtypes.bool], ids=str)
@pytest.mark.parametrize("op", [Ops.AND, Ops.OR, Ops.XOR])
def test_bitwise(op, dtype):
    check_op(binary(op), dict(zip("ab", grid(dtype))))


@pytest.mark.parametrize("dtype", INTS + [dtypes.bool], ids=str)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR])
def test_shifts(op, dtype):
    values = edge_values(dtype)
    if dtype.is_int:
        width = dtype.itemsize * 8
        info = np.iinfo(dtype.np)
        amounts = [v for v in [info.min, -1, 0, 1, 2, width - 1, width, width + 1, 2 * width, info.max]
                   if info.min <= v <= info.max]
    else:
        amounts = [False, True]
    a, b = (np.array(v, dtype=dtype.np) for v in zip(*itertools.product(values, amounts)))
    check_op(binary(op), {"a": a, "b": b})


def _c_bit_shift():
    """onnx.reference's BitShift as C on x86-64 shifts: the count taken mod the width (C
    leaves a shift by the width or more undefined; the spec does not say)."""
    from onnx.reference.ops._op import OpRunBinaryNum

    class BitShift(OpRunBinaryNum):
        op_domain = ""

        def _run(self, a, b):
            width = np.iinfo(a.dtype).bits
            b = (b % width).astype(a.dtype)
            return (np.left_shift(a, b) if self.direction == "LEFT" else np.right_shift(a, b)).astype(a.dtype),

    return BitShift


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR])
def test_shifts_never_shift_by_the_width_or_more(op, dtype):
    """exact.shift_left/shift_right give BitShift counts below the width only: run where
    a wider count wraps, as in C on x86-64, the values are still the evaluator's."""
    from onnx.reference import ReferenceEvaluator
    from uopcli.interop.onnx.exporter import to_onnx
    width, info = dtype.itemsize * 8, np.iinfo(dtype.np)
    amounts = [v for v in [info.min, -width - 1, -1, 0, 1, width - 1, width, width + 1, 2 * width + 1, info.max]
               if info.min <= v <= info.max]
    a, b = (np.array(v, dtype=dtype.np) for v in zip(*itertools.product(edge_values(dtype), amounts)))
    params = [UOp.param("a", a.shape, dtype), UOp.param("b", b.shape, dtype)]
    graph = Graph({"out": binary(op)(*params)}, inputs=params)
    (ours,) = ReferenceEvaluator(to_onnx(graph), new_ops=[_c_bit_shift()]).run(None, {"a": a, "b": b})
    assert_exact(ours, evaluated(graph, {"a": a, "b": b})["out"], f"{op} {dtype.name}")


@pytest.mark.parametrize("dtype", [dtypes.int64, dtypes.uint64], ids=str)
def test_integer_pow_never_shifts_by_the_width_or_more(dtype):
    """Integer POW reads the exponent's bits by BitShift: counts below 64 only (see
    test_shifts_never_shift_by_the_width_or_more)."""
    from onnx.reference import ReferenceEvaluator
    from uopcli.interop.onnx.exporter import to_onnx
    info = np.iinfo(dtype.np)
    a, b = (np.array(v, dtype=dtype.np) for v in zip(*itertools.product([-3, 0, 1, 2, 3, 7] if dtype.kind == "i" else
                                                                         [0, 1, 2, 3, 7, info.max],
                                                                         [0, 1, 2, 5, 63, 64, info.max])))
    params = [UOp.param("a", a.shape, dtype), UOp.param("b", b.shape, dtype)]
    graph = Graph({"out": binary(Ops.POW)(*params)}, inputs=params)
    (ours,) = ReferenceEvaluator(to_onnx(graph), new_ops=[_c_bit_shift()]).run(None, {"a": a, "b": b})
    assert_exact(ours, evaluated(graph, {"a": a, "b": b})["out"], f"POW {dtype.name}")


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", [Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ])
def test_comparisons(op, dtype):
    check_op(binary(op, dtypes.bool), dict(zip("ab", grid(dtype))))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_where_keeps_bits(dtype):
    a, b = grid(dtype)
    cond = (np.arange(a.size) % 3 == 0)
    check_op(lambda c, x, y: UOp.make(Ops.WHERE, x.dtype, (c, x, y)), {"c": cond, "a": a, "b": b})


def test_scalar_operands_broadcast():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_op(lambda a: (a * 2.5 + UOp.const(-0.0)).maximum(UOp.const(1.0)), {"x": x})
    check_op(lambda c: c.where(UOp.const(1.5), UOp.const(-2.0)), {"c": x > 2})


# ----------------------------------------------------------------------------- CAST, BITCAST

@pytest.mark.parametrize("src", ALL, ids=str)
def test_cast_every_pair(src):
    """Every target from each source, the edges included; float -> int out of range as
    x86-64 converts (see exact.cast). Where numpy's own result depends on the element's
    position (float32/float64 -> uint32 outside (-2^31, 2^32): its vector loop and its
    scalar tail disagree), ours is checked against the scalar rule, the int64
    conversion's low bits."""
    x = edge_values(src)
    if src.is_float:
        with np.errstate(over="ignore"):
            extra = np.array([2.0 ** 31, 2.0 ** 32 - 256, 2.0 ** 32, -2.0 ** 31, 2.0 ** 63, 1e19, -1e19, 4e9, -3e9,
                              2.0 ** 64, 1e10,
                              # within int32 / int64 but past half their range (the conversion's own limits)
                              1.5e9, -1.5e9, 2.0 ** 31 - 128, 5e18, -5e18, 2.0 ** 63 - 2048], dtype=src.np)
        x = np.concatenate([x, extra])
    for dst in ALL:
        params = [UOp.param("x", x.shape, src)]
        graph = Graph({"out": params[0].cast(dst)}, inputs=params)
        ours = run_onnx(graph, {"x": x})["out"]
        with np.errstate(all="ignore"):
            truth = evaluated(graph, {"x": x})["out"]
            if src in (dtypes.float32, dtypes.float64) and dst is dtypes.uint32:
                wild = ~((x > -2.0 ** 31) & (x < 2.0 ** 32))
                truth = np.where(wild, x.astype(np.int64).astype(np.uint32), truth)
        assert_exact(ours, truth, f"CAST {src.name} -> {dst.name}")


_SAME_SIZE = [(a, b) for a in ALL for b in ALL if a.itemsize == b.itemsize and a is not b]


@pytest.mark.parametrize("pair", _SAME_SIZE, ids=lambda p: f"{p[0].name}->{p[1].name}")
def test_bitcast(pair):
    """Bits kept (between floats and integers computed from the IEEE fields; a nan stays a nan)."""
    src, dst = pair
    x = edge_values(src)
    if src.is_int or src.is_bool:  # every exponent and mantissa edge of the float it becomes
        rng = np.random.default_rng(3)
        x = np.concatenate([x, rng.integers(np.iinfo(src.np).min, np.iinfo(src.np).max, 300, dtype=src.np,
                                            endpoint=True)]) if src.is_int else x
        if dst.is_float:  # the bits of +-inf and of nans (quiet, signalling, sign set) of the float it becomes
            special = np.array([np.inf, -np.inf, np.nan, -np.nan], dst.np).view(src.np)
            signalling = (np.array([np.inf], dst.np).view(f"u{src.itemsize}") + 1).view(src.np)
            x = np.concatenate([x, special, signalling])
    if src is dtypes.bool or dst is dtypes.bool:
        x = x if src is not dtypes.uint8 and src is not dtypes.int8 else np.array([0, 1], src.np)
    check_op(lambda v: v.bitcast(dst), {"x": x})


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_bitcast_of_every_power_of_two_and_its_neighbours(dtype):
    """The exponent field of every binade (subnormals too): 2^k and the floats either side,
    where floor(log2 x) from Log is most easily one off."""
    info = np.finfo(dtype.np)
    powers = np.ldexp(1.0, np.arange(info.minexp - info.nmant, info.maxexp)).astype(dtype.np)
    with np.errstate(over="ignore"):
        x = np.concatenate([powers, np.nextafter(powers, np.inf), np.nextafter(powers, 0), -powers])
    ours, _ = check_op(lambda v: v.bitcast(_UNSIGNED_OF[dtype]), {"x": x})
    assert ours.tolist() == x.view(_UNSIGNED_OF[dtype].np).tolist()


_UNSIGNED_OF = {dtypes.float16: dtypes.uint16, dtypes.float32: dtypes.uint32, dtypes.float64: dtypes.uint64}


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_bitcast_to_its_own_dtype(dtype):
    check_op(lambda v: UOp.make(Ops.BITCAST, v.dtype, (v,)), {"x": edge_values(dtype)})


def test_bitcast_float_fields_by_hand():
    x = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 1e-45, -1e-40, 3.4e38], np.float32)
    ours, _ = check_op(lambda v: v.bitcast(dtypes.uint32), {"x": x})
    assert ours.tolist() == x.view(np.uint32).tolist()


# ----------------------------------------------------------------------------- REDUCE, movement

@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("reduce_op", ["ADD", "MUL", "MAX"])
def test_reduce(reduce_op, dtype):
    rng = np.random.default_rng(2)
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        x = rng.integers(info.min, info.max, (3, 4, 5), dtype=dtype.np, endpoint=True)
    else:
        x = rng.uniform(-2, 2, (3, 4, 5)).astype(dtype.np)
    for axes in [(0,), (1, 2), (0, 1, 2), ()]:
        check_op(lambda v: UOp.make(Ops.REDUCE, v.dtype, (v,), (reduce_op, axes)), {"x": x},
                               exact=dtype.is_int or reduce_op == "MAX", ulps=64)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_reduce_max_propagates_nan_and_empty_reductions(dtype):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -1.0, -0.0]], dtype.np)
    check_op(lambda v: v.r("MAX", (1,)), {"x": x})
    empty = np.zeros((2, 0, 3), dtype.np)
    for op in ("ADD", "MUL", "MAX"):
        check_op(lambda v: v.r(op, (1,)), {"x": empty})


def test_integer_reductions_over_an_empty_axis_give_the_identity():
    """0, 1 and the type's minimum (MAX over nothing, as the evaluator's `initial`), for
    every integer type: _reduce_identity's integer branch, which no float case reaches."""
    for dtype in INTS:
        for op in ("ADD", "MUL", "MAX"):
            ours, _ = check_op(lambda v: v.r(op, (1,)), {"x": np.zeros((2, 0, 3), dtype.np)})
            identity = {"ADD": 0, "MUL": 1, "MAX": np.iinfo(dtype.np).min}[op]
            assert ours.shape == (2, 1, 3) and (ours == identity).all(), (dtype, op, ours)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_movement(dtype):
    values = edge_values(dtype)
    x = np.resize(values, 24).reshape(2, 3, 4).astype(dtype.np)
    check_op(lambda v: v.reshape(4, 6).reshape(24), {"x": x})
    check_op(lambda v: v.reshape(2, 1, 3, 4).expand(2, 5, 3, 4), {"x": x})
    check_op(lambda v: v.permute(2, 0, 1), {"x": x})
    check_op(lambda v: UOp.make(Ops.PAD, v.dtype, (v,), ((1, 0), (0, 2), (3, 1))), {"x": x})
    check_op(lambda v: UOp.make(Ops.SHRINK, v.dtype, (v,), ((0, 2), (1, 3), (2, 2))), {"x": x})
    check_op(lambda v: UOp.make(Ops.FLIP, v.dtype, (v,), (True, False, True)), {"x": x})
    empty = lambda v: UOp.make(Ops.SHRINK, v.dtype, (v,), ((0, 2), (1, 1), (0, 4)))  # noqa: E731 - (2, 0, 4)
    check_op(lambda v: UOp.make(Ops.RESHAPE, v.dtype, (empty(v),), (0, 7)), {"x": x})  # 0 is a size, not "keep"


@pytest.mark.parametrize("op", [Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH])
def test_identity_ops(op):
    check_op(lambda v: UOp.make(op, v.dtype, (v,)) * 2.0, {"x": edge_values(dtypes.float32)})
    check_op(lambda v: v.copy_to_device("GPU") + 1.0, {"x": edge_values(dtypes.float32)})


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_const_and_buffer_keep_their_bits(dtype):
    data = edge_values(dtype)
    special = UOp.const(-0.0 if dtype.is_float else (True if dtype.is_bool else 5), dtype)
    check_op(lambda v: UOp.make(Ops.WHERE, dtype, (UOp.buffer(data > data[0]) if dtype is not dtypes.bool
                                                  else UOp.buffer(data), UOp.buffer(data), special)),
             {"x": data})
