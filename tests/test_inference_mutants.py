"""Shape and dtype inference (uopcli/core/inference.py), row by row: each refusal's whole
message and each accepted node's exact shape and dtype, written for the survivors of its
mutation run (docs/mutation.md). Nodes are built with UOp.make, so every row runs as a file's
node would (the builder's methods would cast, broadcast or skip first)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from uopcli import GraphError, Ops, UOp, dtypes
from uopcli.core import inference
from uopcli.core.inference import (broadcast_pair, broadcast_shape, const_value, gettuple_dtype, infer_shape,
                                   per_axis_pairs, promoted, shape_tuple)
from uopcli.core.uop import CallArg

_names = itertools.count()


@pytest.fixture(autouse=True)
def _empty_shape_memo():
    """The one-source shape memo answers before a row runs: start each test without it."""
    inference._shape_memo.clear()
    yield


def p(shape=(), dtype=dtypes.float32):
    """A graph input never made before (hash-consing would hand back an old node unchecked)."""
    return UOp.param(f"inf{next(_names)}", shape, dtype)


def refused(build, message: str):
    with pytest.raises(GraphError) as info:
        build()
    assert str(info.value) == message


def make(op, dtype, src, arg=None):
    return UOp.make(op, dtype, tuple(src), arg)


F32, I32 = dtypes.float32, dtypes.int32


# ----------------------------------------------------------------------------- helpers

def test_shape_tuple_takes_ints_and_minus_one_and_refuses_the_rest():
    assert shape_tuple([2, 3]) == (2, 3) and shape_tuple(()) == ()
    assert shape_tuple((np.int64(4), 1)) == (4, 1)
    refused(lambda: shape_tuple((4, True)), "a shape holds ints, got True in (4, True)")  # a bool is no size
    assert shape_tuple((2, -1), inferred=True) == (2, -1)  # reshape's inferred size
    refused(lambda: shape_tuple((2, -1)), "a shape holds sizes >= 0, got [2, -1]")  # a leaf's: no -1
    assert p((3, 0)).shape == (3, 0)
    refused(lambda: shape_tuple(None), "a shape is a sequence of ints, got None")
    refused(lambda: shape_tuple((2, -2), inferred=True), "a shape holds sizes >= 0 (or -1, inferred), got [2, -2]")
    refused(lambda: UOp.param("neg", (-3,)), "a shape holds sizes >= 0, got [-3]")
    assert p((2, 3)).reshape(-1, 2).shape == (3, 2)


@pytest.mark.parametrize("a, b, out", [
    ((2, 1, 3), (4, 1), (2, 4, 3)), ((1,), (5,), (5,)), ((5,), (1,), (5,)), ((), (2, 3), (2, 3)),
    ((2, 3), (), (2, 3)), ((0,), (1,), (0,)), ((1,), (0,), (0,)), ((3, 1), (1, 4), (3, 4)), ((), (), ()),
])
def test_broadcast_shape(a, b, out):
    assert broadcast_shape(a, b) == out


def test_broadcast_shape_refusals_name_both_shapes_at_one_rank():
    refused(lambda: broadcast_shape((2, 3), (4, 3)), "shapes [2, 3] and [4, 3] do not broadcast")
    refused(lambda: broadcast_shape((3,), (2, 1, 4)), "shapes [1, 1, 3] and [2, 1, 4] do not broadcast")
    refused(lambda: broadcast_shape((0,), (3,)), "shapes [0] and [3] do not broadcast")


def test_promoted_casts_both_to_the_least_dtype_above_both():
    i, f = p((2,), I32), p((2,), F32)
    a, b = promoted(i, f)
    assert (a.op, a.dtype, a.src, b) == (Ops.CAST, F32, (i,), f)
    a, b = promoted(f, i)
    assert (a, b.op, b.dtype, b.src) == (f, Ops.CAST, F32, (i,))
    u8, i8 = p((2,), dtypes.uint8), p((2,), dtypes.int8)
    a, b = promoted(u8, i8)
    assert a.dtype is dtypes.int16 and b.dtype is dtypes.int16
    void = UOp.tuple(f)
    assert promoted(void, i) == (void, i) and promoted(i, void) == (i, void)


def test_per_axis_pairs():
    assert per_axis_pairs([(1, 2), None, [3, 4]], "pad") == ((1, 2), None, (3, 4))
    assert per_axis_pairs([(np.int64(1), 2.0)], "pad") == ((1, 2),)
    for bad in ([(1, 2, 3)], [(1,)], [5], [("a", 1)]):
        refused(lambda: per_axis_pairs(bad, "shrink"),
                f"shrink takes one (int, int) pair (or None) per axis, got {bad!r}")
    refused(lambda: p((3,)).pad([(1,)]), "pad takes one (int, int) pair (or None) per axis, got [(1,)]")


def test_broadcast_pair_keeps_equal_shapes_and_scalars_and_expands_the_rest():
    a, s, b = p((2, 3)), p(), p((2, 3))
    assert broadcast_pair(a, b) == (a, b)
    assert broadcast_pair(a, s) == (a, s) and broadcast_pair(s, a) == (s, a)
    col, row = p((2, 1)), p((3,))
    x, y = broadcast_pair(col, row)
    assert (x.op, x.shape, y.op, y.shape) == (Ops.EXPAND, (2, 3), Ops.EXPAND, (2, 3))
    assert y.src[0].op == Ops.RESHAPE and y.src[0].shape == (1, 3)
    refused(lambda: broadcast_pair(p((2,)), p((3,))), "shapes [2] and [3] do not broadcast")


@pytest.mark.parametrize("value, dtype, out", [
    (2, dtypes.bool, True), (0.0, dtypes.bool, False), (np.float32(1.5), F32, 1.5), (True, F32, 1.0),
    (3.0, I32, 3), (np.int64(-5), dtypes.int8, -5), (-128, dtypes.int8, -128), (127, dtypes.int8, 127),
    (0, dtypes.uint8, 0), (255, dtypes.uint8, 255), ((1 << 63) - 1, dtypes.int64, (1 << 63) - 1),
    (-(1 << 63), dtypes.int64, -(1 << 63)), ((1 << 64) - 1, dtypes.uint64, (1 << 64) - 1),
    (-32768, dtypes.int16, -32768), (65535, dtypes.uint16, 65535), (7, dtypes.float64, 7.0),
])
def test_const_value(value, dtype, out):
    got = const_value(value, dtype)
    assert got == out and type(got) is type(out)


@pytest.mark.parametrize("value, dtype, message", [
    (1, dtypes.void, "CONST cannot be void"),
    ("1", F32, "CONST value must be bool, int or float, got str"),
    (None, I32, "CONST value must be bool, int or float, got NoneType"),
    (2.5, I32, "CONST 2.5 is not an integer but the dtype is int32"),
    (128, dtypes.int8, "CONST 128 does not fit int8"), (-129, dtypes.int8, "CONST -129 does not fit int8"),
    (256, dtypes.uint8, "CONST 256 does not fit uint8"), (-1, dtypes.uint8, "CONST -1 does not fit uint8"),
    (1 << 63, dtypes.int64, f"CONST {1 << 63} does not fit int64"),
    (1 << 64, dtypes.uint64, f"CONST {1 << 64} does not fit uint64"),
    (-1, dtypes.uint64, "CONST -1 does not fit uint64"),
])
def test_const_value_refusals(value, dtype, message):
    refused(lambda: const_value(value, dtype), message)


def test_const_value_refuses_a_node():
    refused(lambda: const_value(p(), F32), "CONST value must be bool, int or float, got UOp")
    refused(lambda: UOp.const(p()), "CONST value must be bool, int or float, got UOp")


def _two_outputs():
    s0, s1 = UOp.slot(0, (2,)), UOp.slot(1, (3,), I32)
    return UOp.function(f"two{next(_names)}", (s0 * 2.0, s1 + 1), (p((2,)), p((3,), I32)))


def test_gettuple_dtype_and_its_refusals():
    fn = _two_outputs()
    assert gettuple_dtype(fn, 0) is F32 and gettuple_dtype(fn, 1) is I32
    out = fn.gettuple(1)
    assert (out.dtype, out.shape, out.arg) == (I32, (3,), 1)
    refused(lambda: gettuple_dtype(fn, 2), "GETTUPLE 2 out of range: FUNCTION has 2 outputs")
    refused(lambda: gettuple_dtype(fn, -1), "GETTUPLE -1 out of range: FUNCTION has 2 outputs")
    refused(lambda: p().gettuple(0), "GETTUPLE needs a FUNCTION or CALL, got PARAM")
    call = UOp.call(f"c{next(_names)}", (UOp.slot(0, (2,)) + 1.0,), (p((2,)),))
    assert gettuple_dtype(call, 0) is F32
    refused(lambda: gettuple_dtype(call, 1), "GETTUPLE 1 out of range: CALL has 1 outputs")


# ----------------------------------------------------------------------------- the memo

def test_infer_shape_goes_around_the_memo_for_a_source_that_is_no_node():
    refused(lambda: infer_shape(Ops.NEG, F32, ("a",), None), "NEG: sources must be UOps, got str")
    x = p((2,))
    assert infer_shape(Ops.NEG, F32, (x,), None) == (2,)
    refused(lambda: infer_shape(Ops.NEG, F32, (x, x), None),
            "NEG -> float32: takes 1 source, got 2 (sources: PARAM float32[2], PARAM float32[2])")
    assert infer_shape(Ops.ADD, F32, (x, x), None) == (2,)


def test_an_arg_equal_to_a_remembered_one_is_still_checked():
    """(True, 2) == (1, 2): the memo would answer for it; only args of exactly the canonical
    types are looked up. (Each on a source of its own: UOp.make hands back an equal node
    already made on the same source.)"""
    assert make(Ops.RESHAPE, F32, (p((2, 1)),), (1, 2)).shape == (1, 2)
    assert infer_shape(Ops.RESHAPE, F32, (p((2, 1)),), (1, 2)) == (1, 2)
    refused(lambda: make(Ops.RESHAPE, F32, (p((2, 1)),), (True, 2)), "RESHAPE -> float32: arg must be a shape, got "
            "(True, 2) (sources: PARAM float32[2, 1])")
    refused(lambda: infer_shape(Ops.RESHAPE, F32, (p((2, 1)),), (True, 2)), "RESHAPE -> float32: arg must be a shape, "
            "got (True, 2) (sources: PARAM float32[2, 1])")
    refused(lambda: infer_shape(Ops.RESHAPE, F32, (p((2, 1)),), [1, 2]), "RESHAPE -> float32: arg must be a shape, "
            "got [1, 2] (sources: PARAM float32[2, 1])")
    assert make(Ops.REDUCE, F32, (p((3, 2)),), (Ops.ADD, (0,))).shape == (1, 2)
    refused(lambda: make(Ops.REDUCE, F32, (p((3, 2)),), (Ops.ADD, (False,))), "REDUCE -> float32: arg must be "
            "(ADD|MUL|MAX, axes), got ('ADD', (False,)) (sources: PARAM float32[3, 2])")
    refused(lambda: infer_shape(Ops.REDUCE, F32, (p((3, 2)),), (Ops.ADD, [0])), "REDUCE -> float32: arg must be "
            "(ADD|MUL|MAX, axes), got ('ADD', [0]) (sources: PARAM float32[3, 2])")
    refused(lambda: infer_shape(Ops.REDUCE, F32, (p((3, 2)),), (Ops.ADD, (0,), 1)), "REDUCE -> float32: arg must "
            "be (ADD|MUL|MAX, axes), got ('ADD', (0,), 1) (sources: PARAM float32[3, 2])")
    refused(lambda: infer_shape(Ops.REDUCE, F32, (p((3, 2)),), [Ops.ADD, (0,)]), "REDUCE -> float32: arg must be "
            "(ADD|MUL|MAX, axes), got ['ADD', (0,)] (sources: PARAM float32[3, 2])")
    assert make(Ops.NEG, F32, (p((3, 2)),)).shape == (3, 2)
    refused(lambda: infer_shape(Ops.NEG, F32, (p((3, 2)),), 0), "NEG -> float32: takes no arg "
            "(sources: PARAM float32[3, 2])")
    refused(lambda: infer_shape(Ops.NEG, F32, (p((3, 2)),), False), "NEG -> float32: takes no arg "
            "(sources: PARAM float32[3, 2])")


def test_the_memo_tells_sources_and_dtypes_apart():
    """What a one-source node's shape is remembered by: op, dtype, the source's dtype and
    shape, arg; a node differing in any one of them is checked on its own."""
    a, b = p((7, 3)), p((5, 3))
    assert make(Ops.RESHAPE, F32, (a,), (21,)).shape == (21,)
    refused(lambda: make(Ops.RESHAPE, F32, (b,), (21,)), "RESHAPE -> float32: cannot reshape [5, 3] to [21] "
            "(element counts differ) (sources: PARAM float32[5, 3])")
    x = p((7,))
    assert make(Ops.BITCAST, I32, (x,)).shape == (7,)
    refused(lambda: make(Ops.BITCAST, dtypes.int64, (x,)), "BITCAST -> int64: needs equal item sizes (float32 "
            "has 4) (sources: PARAM float32[7])")
    h = p((7,), dtypes.int16)
    refused(lambda: make(Ops.BITCAST, I32, (h,)), "BITCAST -> int32: needs equal item sizes (int16 has 2) "
            "(sources: PARAM int16[7])")
    c = make(Ops.EXPAND, F32, (p((7, 1)),), (7, 4))
    assert c.shape == (7, 4)
    refused(lambda: make(Ops.PERMUTE, F32, (p((7, 4, 2)),), (1, 0)), "PERMUTE -> float32: (1, 0) is not an axis "
            "order of rank 3 (sources: PARAM float32[7, 4, 2])")
    assert make(Ops.PERMUTE, F32, (p((7, 4)),), (1, 0)).shape == (4, 7)
    assert make(Ops.PERMUTE, F32, (p((4, 7)),), (1, 0)).shape == (7, 4)


def test_the_memo_is_emptied_when_full(monkeypatch):
    monkeypatch.setattr(inference, "_SHAPE_MEMO_MAX", 2)
    for n in (3, 4, 5):
        assert make(Ops.NEG, F32, (p((n,)),)).shape == (n,)
    assert len(inference._shape_memo) == 1
    assert make(Ops.NEG, F32, (p((6,)),)).shape == (6,)
    assert len(inference._shape_memo) == 2


# ----------------------------------------------------------------------------- the rows

def test_source_counts_and_kinds():
    x = p((2,))
    refused(lambda: make(Ops.NEG, F32, ()), "NEG -> float32: takes 1 source, got 0 (sources: none)")
    refused(lambda: make(Ops.WHERE, F32, (x,)), "WHERE -> float32: takes 3 sources, got 1 "
            "(sources: PARAM float32[2])")
    refused(lambda: make(Ops.ADD, F32, (x,)), "ADD -> float32: takes 2 sources, got 1 (sources: PARAM float32[2])")
    refused(lambda: make(Ops.ADD, F32, (x, x, x)), "ADD -> float32: takes 2 sources, got 3 "
            "(sources: PARAM float32[2], PARAM float32[2], PARAM float32[2])")
    refused(lambda: make(Ops.STORE, dtypes.void, (x, 3)), "STORE: sources must be UOps, got int")
    refused(lambda: make(Ops.NEG, F32, (3,)), "NEG: sources must be UOps, got int")
    refused(lambda: make(Ops.ADD, F32, (x, 3)), "ADD: sources must be UOps, got int")
    refused(lambda: make(Ops.ADD, F32, (1.5, x)), "ADD: sources must be UOps, got float")


def test_a_void_source_is_refused_by_every_value_row():
    t = UOp.tuple(p((2,)))
    for op, src in [(Ops.NEG, (t,)), (Ops.ADD, (t, p((2,)))), (Ops.ADD, (p((2,)), t)),
                    (Ops.WHERE, (p((2,), dtypes.bool), t, p((2,)))), (Ops.MULACC, (p((2,)), p((2,)), t)),
                    (Ops.RESHAPE, (t,)), (Ops.STORE, (p((2,)), t))]:
        dtype = dtypes.void if op == Ops.STORE else F32
        arg = (2,) if op == Ops.RESHAPE else None
        with pytest.raises(GraphError) as info:
            make(op, dtype, src, arg)
        assert str(info.value).startswith(f"{op} -> {dtype.name}: a source is void (sources: ")
        assert "TUPLE void" in str(info.value)


@pytest.mark.parametrize("op", [Ops.SQRT, Ops.RECIPROCAL, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.NEG])
def test_unary_rows(op):
    x = p((2, 5))
    node = make(op, F32, (x,))
    assert (node.shape, node.dtype) == ((2, 5), F32)
    refused(lambda: make(op, dtypes.float64, (x,)), f"{op} -> float64: dtype must equal the source's "
            "(sources: PARAM float32[2, 5])")
    refused(lambda: make(op, F32, (x,), 1), f"{op} -> float32: takes no arg (sources: PARAM float32[2, 5])")
    i = p((3,), I32)
    if op == Ops.NEG:
        assert make(op, I32, (i,)).shape == (3,)
        assert make(op, dtypes.uint8, (p((3,), dtypes.uint8),)).dtype is dtypes.uint8
        refused(lambda: make(op, dtypes.bool, (p((3,), dtypes.bool),)), "NEG -> bool: needs a numeric dtype "
                "(sources: PARAM bool[3])")
    else:
        refused(lambda: make(op, I32, (i,)), f"{op} -> int32: needs a float dtype (sources: PARAM int32[3])")
        assert make(op, dtypes.float16, (p((3,), dtypes.float16),)).dtype is dtypes.float16


def test_cast_and_bitcast():
    x = p((2, 3))
    cast = make(Ops.CAST, dtypes.bool, (x,))
    assert (cast.shape, cast.dtype) == ((2, 3), dtypes.bool)
    assert make(Ops.CAST, dtypes.int8, (x,)).shape == (2, 3)
    refused(lambda: make(Ops.CAST, dtypes.void, (x,)), "CAST -> void: cannot cast to void "
            "(sources: PARAM float32[2, 3])")
    refused(lambda: make(Ops.CAST, I32, (x,), "f"), "CAST -> int32: takes no arg (sources: PARAM float32[2, 3])")
    bits = make(Ops.BITCAST, dtypes.uint32, (x,))
    assert (bits.shape, bits.dtype) == ((2, 3), dtypes.uint32)
    assert make(Ops.BITCAST, dtypes.int16, (p((4,), dtypes.float16),)).shape == (4,)
    refused(lambda: make(Ops.BITCAST, dtypes.void, (x,)), "BITCAST -> void: needs equal item sizes (float32 has "
            "4) (sources: PARAM float32[2, 3])")
    refused(lambda: make(Ops.BITCAST, dtypes.float64, (x,)), "BITCAST -> float64: needs equal item sizes (float32 "
            "has 4) (sources: PARAM float32[2, 3])")


@pytest.mark.parametrize("op", [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW])
def test_arithmetic_rows(op):
    for dtype in (dtypes.int8, dtypes.uint16, dtypes.float16, F32):
        a, b = p((2, 3), dtype), p((2, 3), dtype)
        node = make(op, dtype, (a, b))
        assert (node.shape, node.dtype) == ((2, 3), dtype)
    a, b = p((2,), dtypes.bool), p((2,), dtypes.bool)
    refused(lambda: make(op, dtypes.bool, (a, b)), f"{op} -> bool: needs a numeric dtype (use AND/OR for bool) "
            "(sources: PARAM bool[2], PARAM bool[2])")
    a, b = p((2,)), p((2,))
    refused(lambda: make(op, dtypes.float64, (a, b)), f"{op} -> float64: dtype must equal the sources' "
            "(sources: PARAM float32[2], PARAM float32[2])")
    refused(lambda: make(op, F32, (a, b), 0), f"{op} -> float32: takes no arg "
            "(sources: PARAM float32[2], PARAM float32[2])")
    refused(lambda: make(op, F32, (a, p((2,), I32))), f"{op} -> float32: sources have different dtypes (no "
            "implicit promotion) (sources: PARAM float32[2], PARAM int32[2])")


@pytest.mark.parametrize("op", [Ops.CDIV, Ops.CMOD])
def test_integer_only_rows(op):
    for dtype in (dtypes.int16, dtypes.uint8, dtypes.int64):
        assert make(op, dtype, (p((3,), dtype), p((3,), dtype))).dtype is dtype
    for dtype in (F32, dtypes.bool):
        name = dtype.name
        refused(lambda: make(op, dtype, (p((3,), dtype), p((3,), dtype))), f"{op} -> {name}: needs an integer "
                f"dtype (sources: PARAM {name}[3], PARAM {name}[3])")


@pytest.mark.parametrize("op", [Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR])
def test_bitwise_rows(op):
    for dtype in (dtypes.bool, dtypes.int8, dtypes.uint32):
        node = make(op, dtype, (p((4,), dtype), p((4,), dtype)))
        assert (node.shape, node.dtype) == ((4,), dtype)
    for dtype in (F32, dtypes.float16):
        name = dtype.name
        refused(lambda: make(op, dtype, (p((4,), dtype), p((4,), dtype))), f"{op} -> {name}: needs a bool or "
                f"integer dtype (sources: PARAM {name}[4], PARAM {name}[4])")


@pytest.mark.parametrize("op", [Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ])
def test_comparison_rows(op):
    for dtype in (dtypes.bool, dtypes.int8, dtypes.uint8, F32):
        node = make(op, dtypes.bool, (p((2, 2), dtype), p((2, 2), dtype)))
        assert (node.shape, node.dtype) == ((2, 2), dtypes.bool)
    a, b = p((2,)), p((2,))
    refused(lambda: make(op, F32, (a, b)), f"{op} -> float32: comparisons give bool "
            "(sources: PARAM float32[2], PARAM float32[2])")
    refused(lambda: make(op, dtypes.bool, (a, b), "x"), f"{op} -> bool: takes no arg "
            "(sources: PARAM float32[2], PARAM float32[2])")


def test_binary_shapes_broadcast_only_shape_scalars():
    m, s = p((2, 3)), p()
    assert make(Ops.ADD, F32, (m, s)).shape == (2, 3)
    assert make(Ops.ADD, F32, (s, m)).shape == (2, 3)
    assert make(Ops.ADD, F32, (s, p())).shape == ()
    assert make(Ops.MUL, F32, (m, p((2, 3)))).shape == (2, 3)
    assert make(Ops.CMPLT, dtypes.bool, (s, m)).shape == (2, 3)
    refused(lambda: make(Ops.ADD, F32, (m, p((3, 2)))), "ADD -> float32: shapes differ (only shape () broadcasts) "
            "(sources: PARAM float32[2, 3], PARAM float32[3, 2])")
    refused(lambda: make(Ops.ADD, F32, (p((2, 1)), p((2, 3)))), "ADD -> float32: shapes differ (only shape () "
            "broadcasts) (sources: PARAM float32[2, 1], PARAM float32[2, 3])")


def test_where():
    c, a, b = p((2, 3), dtypes.bool), p((2, 3)), p((2, 3))
    node = make(Ops.WHERE, F32, (c, a, b))
    assert (node.shape, node.dtype) == ((2, 3), F32)
    assert make(Ops.WHERE, F32, (p((), dtypes.bool), p(), p((4,)))).shape == (4,)
    assert make(Ops.WHERE, F32, (p((4,), dtypes.bool), p(), p())).shape == (4,)
    assert make(Ops.WHERE, I32, (p((), dtypes.bool), p((), I32), p((), I32))).shape == ()
    refused(lambda: make(Ops.WHERE, F32, (p((2, 3)), a, b)), "WHERE -> float32: the condition must be bool "
            "(sources: PARAM float32[2, 3], PARAM float32[2, 3], PARAM float32[2, 3])")
    refused(lambda: make(Ops.WHERE, F32, (c, a, p((2, 3), I32))), "WHERE -> float32: both branches and the result "
            "need one dtype (sources: PARAM bool[2, 3], PARAM float32[2, 3], PARAM int32[2, 3])")
    refused(lambda: make(Ops.WHERE, I32, (c, a, b)), "WHERE -> int32: both branches and the result need one dtype "
            "(sources: PARAM bool[2, 3], PARAM float32[2, 3], PARAM float32[2, 3])")
    refused(lambda: make(Ops.WHERE, F32, (c, a, p((3, 2)))), "WHERE -> float32: shapes differ (only shape () "
            "broadcasts) (sources: PARAM bool[2, 3], PARAM float32[2, 3], PARAM float32[3, 2])")
    refused(lambda: make(Ops.WHERE, F32, (p((3,), dtypes.bool), p(), p((2,)))), "WHERE -> float32: shapes differ "
            "(only shape () broadcasts) (sources: PARAM bool[3], PARAM float32[], PARAM float32[2])")


def test_mulacc():
    for dtype in (F32, dtypes.int8, dtypes.uint64):
        node = make(Ops.MULACC, dtype, (p((2, 2), dtype), p((), dtype), p((2, 2), dtype)))
        assert (node.shape, node.dtype) == ((2, 2), dtype)
    assert make(Ops.MULACC, F32, (p(), p(), p())).shape == ()
    for src, dtype in [((p((2,)), p((2,)), p((2,), I32)), F32), ((p((2,), I32), p((2,)), p((2,))), F32),
                       ((p((2,)), p((2,)), p((2,))), dtypes.float64)]:
        with pytest.raises(GraphError) as info:
            make(Ops.MULACC, dtype, src)
        assert str(info.value).startswith(f"MULACC -> {dtype.name}: needs three sources of the result's numeric "
                                          "dtype (sources: PARAM ")
    bools = tuple(p((2,), dtypes.bool) for _ in range(3))
    refused(lambda: make(Ops.MULACC, dtypes.bool, bools), "MULACC -> bool: needs three sources of the result's "
            "numeric dtype (sources: PARAM bool[2], PARAM bool[2], PARAM bool[2])")
    refused(lambda: make(Ops.MULACC, F32, (p((2,)), p((2,)))), "MULACC -> float32: takes 3 sources, got 2 "
            "(sources: PARAM float32[2], PARAM float32[2])")


def test_movement_rows_keep_the_sources_dtype():
    x = p((2, 3))
    for op, arg in [(Ops.RESHAPE, (6,)), (Ops.EXPAND, (2, 3)), (Ops.PERMUTE, (1, 0)), (Ops.PAD, ((0, 0), (0, 0))),
                    (Ops.SHRINK, ((0, 2), (0, 3))), (Ops.FLIP, (True, False)), (Ops.REDUCE, (Ops.ADD, (0,))),
                    (Ops.CONTIGUOUS, None), (Ops.DETACH, None), (Ops.COPY, "CPU")]:
        refused(lambda: make(op, I32, (x,), arg), f"{op} -> int32: dtype must equal the source's "
                "(sources: PARAM float32[2, 3])")


def test_reduce():
    x = p((2, 3, 4))
    for arg, shape in [((Ops.ADD, (0, 2)), (1, 3, 1)), ((Ops.MAX, ()), (2, 3, 4)), ((Ops.MUL, (1,)), (2, 1, 4)),
                       ((Ops.ADD, (0, 1, 2)), (1, 1, 1))]:
        assert make(Ops.REDUCE, F32, (x,), arg).shape == shape
    assert make(Ops.REDUCE, dtypes.uint8, (p((5,), dtypes.uint8),), (Ops.ADD, (0,))).shape == (1,)
    assert make(Ops.REDUCE, dtypes.int8, (p((5,), dtypes.int8),), (Ops.MAX, (0,))).shape == (1,)
    src = "(sources: PARAM float32[2, 3, 4])"
    for axes in [(1, 0), (0, 0), (3,), (-1,)]:
        refused(lambda: make(Ops.REDUCE, F32, (p((2, 3, 4)),), (Ops.ADD, axes)),
                f"REDUCE -> float32: axes {list(axes)} must be sorted, unique and within rank 3 {src}")
    for arg in [("SUM", (0,)), (Ops.ADD,), ((0,), Ops.ADD), None, (Ops.ADD, (0.0,))]:
        refused(lambda: make(Ops.REDUCE, F32, (p((2, 3, 4)),), arg),
                f"REDUCE -> float32: arg must be (ADD|MUL|MAX, axes), got {arg!r} {src}")
    refused(lambda: make(Ops.REDUCE, dtypes.bool, (p((2,), dtypes.bool),), (Ops.MAX, (0,))),
            "REDUCE -> bool: needs a numeric dtype (sources: PARAM bool[2])")


def test_reshape():
    x = p((2, 3))
    assert make(Ops.RESHAPE, F32, (x,), (3, 1, 2)).shape == (3, 1, 2)
    assert make(Ops.RESHAPE, F32, (p((0, 3)),), (3, 0, 5)).shape == (3, 0, 5)
    assert make(Ops.RESHAPE, F32, (p(),), (1, 1)).shape == (1, 1)
    assert make(Ops.RESHAPE, F32, (p((1,)),), ()).shape == ()
    src = "(sources: PARAM float32[2, 3])"
    for arg in [(-1, -6), (-2, -3), (6.0,), [6], (True, 6), None]:
        refused(lambda: make(Ops.RESHAPE, F32, (p((2, 3)),), arg),
                f"RESHAPE -> float32: arg must be a shape, got {arg!r} {src}")
    refused(lambda: make(Ops.RESHAPE, F32, (p((2, 3)),), (4, 2)),
            f"RESHAPE -> float32: cannot reshape [2, 3] to [4, 2] "
            f"(element counts differ) {src}")
    refused(lambda: make(Ops.RESHAPE, F32, (p((2, 3)),), (0, 6)),
            f"RESHAPE -> float32: cannot reshape [2, 3] to [0, 6] "
            f"(element counts differ) {src}")


def test_expand():
    x = p((2, 1))
    assert make(Ops.EXPAND, F32, (x,), (2, 5)).shape == (2, 5)
    assert make(Ops.EXPAND, F32, (x,), (2, 0)).shape == (2, 0)
    assert make(Ops.EXPAND, F32, (p((1, 1)),), (3, 4)).shape == (3, 4)
    src = "(sources: PARAM float32[2, 1])"
    for arg in [(3, 5), (2, 1, 3), (2,), (4, 1), [2, 5], (2.0, 5), (True, 5)]:
        refused(lambda: make(Ops.EXPAND, F32, (p((2, 1)),), arg),
                f"EXPAND -> float32: cannot expand [2, 1] to {arg!r}: "
                f"same rank, only size-1 axes grow {src}")


def test_permute():
    x = p((2, 3, 4))
    assert make(Ops.PERMUTE, F32, (x,), (2, 0, 1)).shape == (4, 2, 3)
    assert make(Ops.PERMUTE, F32, (x,), (1, 2, 0)).shape == (3, 4, 2)
    assert make(Ops.PERMUTE, F32, (x,), (0, 1, 2)).shape == (2, 3, 4)
    src = "(sources: PARAM float32[2, 3, 4])"
    for arg in [(0, 0, 1), (0, 1), (0, 1, 2, 3), (1, 2, 3), [2, 0, 1], (True, False, 2), None]:
        refused(lambda: make(Ops.PERMUTE, F32, (p((2, 3, 4)),), arg),
                f"PERMUTE -> float32: {arg!r} is not an axis order of rank 3 {src}")


def test_pad():
    x = p((2, 3))
    assert make(Ops.PAD, F32, (x,), ((1, 2), (0, 3))).shape == (5, 6)
    assert make(Ops.PAD, F32, (x,), ((0, 0), (4, 0))).shape == (2, 7)
    src = "(sources: PARAM float32[2, 3])"
    for arg in [((-1, 0), (0, 0)), ((0, -1), (0, 0)), ((0, 0), (-1, 2)), ((0, 0),), ((0, 0), (0, 0), (0, 0)),
                ((0, 0), (0, 0, 0)), ((0, 0), [0, 0]), ((0, 0), (True, 0)), [(0, 0), (0, 0)], None]:
        refused(lambda: make(Ops.PAD, F32, (p((2, 3)),), arg), f"PAD -> float32: arg must be one non-negative (before, "
                f"after) per axis, got {arg!r} {src}")


def test_shrink():
    x = p((4, 3))
    assert make(Ops.SHRINK, F32, (x,), ((1, 3), (0, 3))).shape == (2, 3)
    assert make(Ops.SHRINK, F32, (x,), ((4, 4), (2, 2))).shape == (0, 0)
    assert make(Ops.SHRINK, F32, (x,), ((0, 0), (1, 3))).shape == (0, 2)
    src = "(sources: PARAM float32[4, 3])"
    for arg in [((2, 1), (0, 3)), ((0, 5), (0, 3)), ((-1, 2), (0, 3)), ((0, 4), (0, 4)), ((0, 4),),
                ((0, 4), (0, 3), (0, 1)), ((0, 4), (0, 3, 1)), ((0, 4), [0, 3])]:
        refused(lambda: make(Ops.SHRINK, F32, (p((4, 3)),), arg),
                f"SHRINK -> float32: arg must be one (start, end) per "
                f"axis within [4, 3], got {arg!r} {src}")


def test_flip():
    x = p((2, 3))
    assert make(Ops.FLIP, F32, (x,), (True, False)).shape == (2, 3)
    assert make(Ops.FLIP, F32, (p(),), ()).shape == ()
    src = "(sources: PARAM float32[2, 3])"
    for arg in [(1, 0), (True,), (True, False, True), [True, False], None]:
        refused(lambda: make(Ops.FLIP, F32, (p((2, 3)),), arg), f"FLIP -> float32: arg must be one bool per axis, got "
                f"{arg!r} {src}")


@pytest.mark.parametrize("op", [Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH])
def test_identity_rows(op):
    x = p((2, 3), dtypes.int8)
    node = make(op, dtypes.int8, (x,))
    assert (node.shape, node.dtype, node.arg) == ((2, 3), dtypes.int8, None)
    refused(lambda: make(op, dtypes.int8, (x,), "CPU"), f"{op} -> int8: takes no arg (sources: PARAM int8[2, 3])")


def test_copy():
    x = p((2, 3))
    node = make(Ops.COPY, F32, (x,), "CPU")
    assert (node.shape, node.arg) == ((2, 3), "CPU")
    for arg in [None, 1, b"CPU"]:
        refused(lambda: make(Ops.COPY, F32, (x,), arg), f"COPY -> float32: arg must be a device name, got {arg!r} "
                "(sources: PARAM float32[2, 3])")


def test_tuple():
    x = p((2,))
    node = UOp.tuple(x, UOp.noop(), p((), I32))
    assert node.shape is None and node.dtype is dtypes.void
    assert UOp.tuple().shape is None
    refused(lambda: make(Ops.TUPLE, F32, (x,)), "TUPLE -> float32: is void and takes no arg "
            "(sources: PARAM float32[2])")
    refused(lambda: make(Ops.TUPLE, dtypes.void, (x,), 0), "TUPLE -> void: is void and takes no arg "
            "(sources: PARAM float32[2])")
    refused(lambda: UOp.tuple(x, 3), "TUPLE elements must be UOps, got int")
    inner = UOp.tuple(x)
    refused(lambda: UOp.tuple(x, inner), "TUPLE -> void: elements must be values or NOOP, got TUPLE "
            "(sources: PARAM float32[2], TUPLE void)")


def test_store_and_after():
    dest, value = p((2, 3)), p((2, 3))
    store = dest.store(value)
    assert (store.shape, store.dtype) == (None, dtypes.void)
    after = dest.after(store)
    assert (after.shape, after.dtype) == ((2, 3), F32)
    src = "(sources: PARAM float32[2, 3], PARAM float32[2, 3])"
    refused(lambda: make(Ops.STORE, F32, (dest, value)), f"STORE -> float32: is void and takes no arg {src}")
    refused(lambda: make(Ops.STORE, dtypes.void, (dest, value), 0), f"STORE -> void: is void and takes no arg {src}")
    refused(lambda: dest.store(p((3, 2))), "STORE -> void: dest and value need one shape and dtype "
            "(sources: PARAM float32[2, 3], PARAM float32[3, 2])")
    refused(lambda: dest.store(p((2, 3), I32)), "STORE -> void: dest and value need one shape and dtype "
            "(sources: PARAM float32[2, 3], PARAM int32[2, 3])")
    refused(lambda: make(Ops.STORE, dtypes.void, (dest,)), "STORE -> void: takes 2 sources, got 1 "
            "(sources: PARAM float32[2, 3])")
    other = p((2, 3))
    refused(lambda: other.after(store), "AFTER -> float32: needs (dest, STORE to that dest) (sources: PARAM "
            "float32[2, 3], STORE void)")
    refused(lambda: make(Ops.AFTER, F32, (dest, value)), f"AFTER -> float32: needs (dest, STORE to that dest) {src}")
    refused(lambda: make(Ops.AFTER, I32, (dest, store)), "AFTER -> int32: dtype must equal dest's and takes no arg "
            "(sources: PARAM float32[2, 3], STORE void)")
    refused(lambda: make(Ops.AFTER, F32, (dest, store), 1), "AFTER -> float32: dtype must equal dest's and takes "
            "no arg (sources: PARAM float32[2, 3], STORE void)")
    refused(lambda: make(Ops.AFTER, F32, (dest,)), "AFTER -> float32: takes 2 sources, got 1 "
            "(sources: PARAM float32[2, 3])")


@pytest.mark.parametrize("op", [Ops.PARAM, Ops.CONST, Ops.BUFFER, Ops.NOOP])
def test_leaves_are_not_made(op):
    refused(lambda: make(op, F32, ()), f"{op} nodes are built with UOp.{op.lower()}(...)")


# ----------------------------------------------------------------------------- calls and their slots

def _fresh(shape=(2,), dtype=F32, slot=0):
    """A slot read through a node never made before (a body's reads are remembered per node)."""
    return UOp.slot(slot, shape, dtype) * UOp.const(float(next(_names)) + 0.5, dtype) if dtype.is_float else \
        UOp.slot(slot, shape, dtype) + UOp.const(next(_names), dtype)


def test_function_and_its_outputs():
    body = (_fresh((2,)), _fresh((3,), I32, 1))
    fn = UOp.function("f", body, (p((2,)), p((3,), I32)))
    assert (fn.shape, fn.dtype, fn.arg) == (None, dtypes.void, "f")
    out = make(Ops.GETTUPLE, I32, (fn,), 1)
    assert (out.shape, out.dtype) == ((3,), I32)
    src = "(sources: FUNCTION void)"
    refused(lambda: make(Ops.GETTUPLE, F32, (fn,), 1), f"GETTUPLE -> float32: output 1 is int32 {src}")
    for index in (2, -1, True, "0", None):
        refused(lambda: make(Ops.GETTUPLE, F32, (fn,), index),
                f"GETTUPLE -> float32: index {index!r} out of range for 2 outputs {src}")
    refused(lambda: make(Ops.GETTUPLE, F32, (p((2,)),), 0), "GETTUPLE -> float32: its source must be a FUNCTION or "
            "CALL (sources: PARAM float32[2])")
    refused(lambda: make(Ops.GETTUPLE, F32, (fn, fn), 0), "GETTUPLE -> float32: takes 1 source, got 2 (sources: "
            "FUNCTION void, FUNCTION void)")


def test_call_refusals():
    x = p((2,))
    body = UOp.tuple(_fresh((2,)))
    src = "(sources: TUPLE void, PARAM float32[2])"
    refused(lambda: make(Ops.FUNCTION, F32, (body, x), "f"), f"FUNCTION -> float32: is void {src}")
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (x, x), "f"), "FUNCTION -> void: its first source must be the "
            "body TUPLE (sources: PARAM float32[2], PARAM float32[2])")
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (), "f"), "FUNCTION -> void: its first source must be the body "
            "TUPLE (sources: none)")
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (body, UOp.tuple(x)), "f"), "FUNCTION -> void: call args must "
            "be values (sources: TUPLE void, TUPLE void)")
    for arg in ("", None, 3):
        refused(lambda: make(Ops.FUNCTION, dtypes.void, (body, x), arg),
                f"FUNCTION -> void: arg must name the function, got {arg!r} {src}")
    refused(lambda: make(Ops.CALL, dtypes.void, (body, x), CallArg("", None)),
            f"CALL -> void: arg must name the call, got CallArg(name='', grad=None) {src}")
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (UOp.tuple(_fresh(), UOp.noop()), x), "f"),
            f"FUNCTION -> void: a body output cannot be NOOP {src}")


def test_a_call_arg_must_be_a_callarg():
    """A CALL's arg given as a plain name was an AttributeError (`arg.grad` of a str)."""
    x = p((2,))
    body = UOp.tuple(_fresh((2,)))
    refused(lambda: make(Ops.CALL, dtypes.void, (body, x), "g"), "CALL -> void: arg must be CallArg(name, grad), "
            "got 'g' (sources: TUPLE void, PARAM float32[2])")
    refused(lambda: make(Ops.CALL, dtypes.void, (body, x), None), "CALL -> void: arg must be CallArg(name, grad), "
            "got None (sources: TUPLE void, PARAM float32[2])")


def test_a_body_is_closed():
    x = p((2,))
    name = x.arg
    body = UOp.tuple(UOp.slot(0, (2,)) + x)
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (body, x), "f"),
            f"a function body is not closed: it reads graph input {name!r}")
    body = UOp.tuple(x * 2.0 + _fresh())
    refused(lambda: make(Ops.FUNCTION, dtypes.void, (body, x), "f"),
            f"a function body is not closed: it reads graph input {name!r}")


@pytest.mark.parametrize("order", range(4))
def test_every_slot_a_body_reads_is_checked(order):
    """The slots of a body are gathered from every branch (maps shared along a chain,
    merged where branches meet): a misfit in any one slot is found."""
    s0, s1, s2 = _fresh((2,)), _fresh((3,), slot=1), _fresh((4,), slot=2)
    first = s0.sum() + s1.sum()
    outputs = [(first, s2), (s2, first), (s2.sum() + first,), (s0.sum() + (s1.sum() + s2.sum()), first)][order]
    good = (p((2,)), p((3,)), p((4,)))
    fn = UOp.function("f", outputs, good)
    assert fn.src[1:] == good
    for wrong in range(3):
        args = list(good)
        shape = good[wrong].shape
        args[wrong] = p((shape[0] + 1,))
        with pytest.raises(GraphError) as info:
            UOp.function("f", outputs, args)
        assert f"the body slot {wrong} is float32[{shape[0]}] but is bound to float32[{shape[0] + 1}]" \
            in str(info.value)
    refused(lambda: UOp.function("f", outputs, good[:2]),
            "FUNCTION -> void: the body reads slot 2 but only 2 are bound "
            "(sources: TUPLE void, PARAM float32[2], PARAM float32[3])")


def test_a_slot_bound_to_another_dtype():
    outputs = (_fresh((2,)),)
    refused(lambda: UOp.function("f", outputs, (p((2,), dtypes.float64),)), "FUNCTION -> void: the body slot 0 is "
            "float32[2] but is bound to float64[2] (sources: TUPLE void, PARAM float64[2])")
    refused(lambda: UOp.function("f", outputs, (p(),)), "FUNCTION -> void: the body slot 0 is float32[2] but is "
            "bound to float32[] (sources: TUPLE void, PARAM float32[])")
    assert UOp.function("f", outputs, (p((2,)), p((5,)))).src[0].src == outputs  # an unread arg is fine


def test_one_slot_with_two_shapes_or_dtypes():
    a, b = _fresh((2,)).sum(), _fresh((3,)).sum()
    refused(lambda: UOp.function("f", (a + b,), (p((2,)),)), "slot 0 appears with two shapes or dtypes in one body")
    c = _fresh((2,), I32).cast(F32).sum()
    refused(lambda: UOp.function("f", (a, c), (p((2,)),)), "slot 0 appears with two shapes or dtypes in one body")


def test_nested_calls_bodies_are_their_own_scopes():
    inner = UOp.function("inner", (_fresh((5,)),), (_fresh((2,), slot=1).sum().reshape(()).expand(()) * 0.0 +
                                                     UOp.const(1.0).reshape((1,)).expand((5,)),))
    out = make(Ops.GETTUPLE, F32, (inner,), 0)
    fn = UOp.function("outer", (out,), (p((7,)), p((2,))))
    assert fn.src[0].src == (out,)
    refused(lambda: UOp.function("outer", (out,), (p((7,)), p((3,)))), "FUNCTION -> void: the body slot 1 is "
            "float32[2] but is bound to float32[3] (sources: TUPLE void, PARAM float32[7], PARAM float32[3])")


def test_call_with_a_backward_body():
    n = next(_names)
    x = p((2,))
    outputs = (UOp.slot(0, (2,)) * float(n),)
    grad = (UOp.slot(1, (2,)) * float(n),)  # slot 1: the output's gradient
    call = UOp.call("c", outputs, (x,), grad)
    assert (call.arg.name, call.arg.grad.src) == ("c", grad)
    assert UOp.call("c", outputs, (x,), (None,)).arg.grad.src == (UOp.noop(),)
    src = "(sources: TUPLE void, PARAM float32[2])"
    refused(lambda: UOp.call("c", outputs, (x,), (grad[0], grad[0])),
            f"CALL -> void: the backward body must be a TUPLE of 1 elements {src}")
    refused(lambda: make(Ops.CALL, dtypes.void, (UOp.tuple(*outputs), x), CallArg("c", x)),
            f"CALL -> void: the backward body must be a TUPLE of 1 elements {src}")
    refused(lambda: UOp.call("c", outputs, (x,), (UOp.slot(1, (2,)).sum(),)),
            f"CALL -> void: backward element 0 is float32[], arg 0 is float32[2] {src}")
    refused(lambda: UOp.call("c", outputs, (x,), (UOp.slot(1, (2,)).cast(I32),)),
            f"CALL -> void: backward element 0 is int32[2], arg 0 is float32[2] {src}")
    refused(lambda: UOp.call("c", outputs, (x,), (UOp.slot(1, (3,)).sum().expand((2,)) * float(n),)),
            f"CALL -> void: the backward body slot 1 is float32[3] but is bound to float32[2] {src}")
    refused(lambda: UOp.call("c", outputs, (x,), (UOp.slot(2, (2,)) * float(n),)),
            f"CALL -> void: the backward body reads slot 2 but only 2 are bound {src}")
    refused(lambda: UOp.call("c", outputs, (x,), (UOp.slot(0, (2,), I32).cast(F32) * float(n),)),
            f"CALL -> void: the backward body slot 0 is int32[2] but is bound to float32[2] {src}")


def test_a_source_reading_nothing_does_not_end_the_gathering():
    """A body node whose first source reads no slot (a constant) still reads its second's."""
    n = float(next(_names)) + 0.25
    body = (UOp.const(n) * UOp.slot(0, (2,)),)
    assert body[0].src[0].op == Ops.CONST
    refused(lambda: UOp.function("f", body, (p((3,)),)), "FUNCTION -> void: the body slot 0 is float32[2] but is "
            "bound to float32[3] (sources: TUPLE void, PARAM float32[3])")
    x = p((2,))
    closed = (UOp.const(n) * x,)
    refused(lambda: UOp.function("f", closed, (p((2,)),)), f"a function body is not closed: it reads graph input "
            f"{x.arg!r}")
    three = (make(Ops.WHERE, F32, (UOp.const(True), UOp.const(n), UOp.slot(0, (2,)))),)
    refused(lambda: UOp.function("f", three, (p((3,)),)), "FUNCTION -> void: the body slot 0 is float32[2] but is "
            "bound to float32[3] (sources: TUPLE void, PARAM float32[3])")


def test_a_backward_body_must_be_a_tuple_even_of_the_right_length():
    n = float(next(_names))
    x = p((2,))
    outputs = UOp.tuple(UOp.slot(0, (2,)) * n)
    not_tuple = UOp.slot(1, (2,)).sin()  # one source, as many as the args
    refused(lambda: make(Ops.CALL, dtypes.void, (outputs, x), CallArg("c", not_tuple)), "CALL -> void: the backward "
            "body must be a TUPLE of 1 elements (sources: TUPLE void, PARAM float32[2])")


def test_a_backward_body_reads_the_output_gradients_in_their_dtypes():
    n = float(next(_names))
    x = p((2,), dtypes.float64)
    outputs = (UOp.slot(0, (2,), dtypes.float64) * n, UOp.slot(0, (2,), dtypes.float64).cast(dtypes.float16))
    grad = (UOp.slot(1, (2,), dtypes.float64) * n + UOp.slot(2, (2,), dtypes.float16).cast(dtypes.float64),)
    call = UOp.call("c", outputs, (x,), grad)
    assert call.arg.grad.src == grad
    wrong = (UOp.slot(1, (2,), dtypes.float64) * n + UOp.slot(2, (2,), dtypes.float32).cast(dtypes.float64),)
    refused(lambda: UOp.call("c", outputs, (x,), wrong), "CALL -> void: the backward body slot 2 is float32[2] but "
            "is bound to float16[2] (sources: TUPLE void, PARAM float64[2])")


@pytest.mark.parametrize("op, arg", [(Ops.RESHAPE, (6,)), (Ops.EXPAND, (2, 3)), (Ops.PERMUTE, (1, 0)),
                                     (Ops.REDUCE, (Ops.ADD, (0,))), (Ops.FLIP, (True, False)), (Ops.DETACH, None)])
def test_movement_rows_take_one_node(op, arg):
    a, b = p((2, 3)), p((2, 3))
    refused(lambda: make(op, F32, (a, b), arg), f"{op} -> float32: takes 1 source, got 2 "
            "(sources: PARAM float32[2, 3], PARAM float32[2, 3])")
    refused(lambda: make(op, F32, (), arg), f"{op} -> float32: takes 1 source, got 0 (sources: none)")
    refused(lambda: make(op, F32, (3,), arg), f"{op}: sources must be UOps, got int")


def test_infer_shape_of_no_source():
    for op, arg in [(Ops.NEG, None), (Ops.RESHAPE, (1,)), (Ops.REDUCE, (Ops.ADD, ()))]:
        refused(lambda: infer_shape(op, F32, (), arg), f"{op} -> float32: takes 1 source, got 0 (sources: none)")
