"""core/uop.py's interning (make, make_shaped, _new, _leaf, _forget, _const_key,
sweep_intern_table, _promote_siblings), written for the survivors of its mutation run
(docs/mutation.md): two nodes that differ in anything but metadata are two nodes, with
their own values (-0.0 and 0.0, nan, two reshapes or casts of one source, leaves of one
name and another shape or dtype), equal ones are one object, before and after sweeps
that drop what nothing holds and move a sibling into the slot a dropped node left."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from uopcli import UOp, dtypes, evaluate
from uopcli.core import uop as core
from uopcli.core.ops import Ops
from uopcli.core.uop import live_node_count, make_shaped, sweep_intern_table
from uopcli.errors import GraphError


def value(node, **inputs):
    return evaluate([node], inputs)[0]


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_signed_zeros_and_nans_are_constants_of_their_own(dtype):
    plus, minus = UOp.const(0.0, dtype), UOp.const(-0.0, dtype)
    assert plus is not minus
    assert math.copysign(1, plus.arg) == 1 and math.copysign(1, minus.arg) == -1
    assert np.signbit(value(minus)) and not np.signbit(value(plus))
    assert UOp.const(-0.0, dtype) is minus and UOp.const(0.0, dtype) is plus and UOp.const(0, dtype) is plus
    nan = UOp.const(math.nan, dtype)
    assert nan is UOp.const(float("nan"), dtype) and nan is not plus and np.isnan(value(nan))
    one = UOp.const(1.0, dtype)
    assert one is UOp.const(1, dtype) and one is not plus and one is not UOp.const(2.0, dtype)
    assert UOp.const(math.inf, dtype) is not UOp.const(-math.inf, dtype)
    # as sources: -x + 0.0 and -x + -0.0 are two graphs with two values at x = 0
    x = UOp.param("x", (2,), dtype)
    a, b = x + UOp.const(0.0, dtype), x + UOp.const(-0.0, dtype)
    assert a is not b
    zeros = np.array([-0.0, -0.0], dtype.np)
    assert not np.signbit(value(a, x=zeros)).any() and np.signbit(value(b, x=zeros)).all()
    assert x.const_like(-0.0) is minus and x.const_like(0.0) is plus and x.const_like(0) is plus


def test_integer_and_bool_constants_keep_their_dtypes_apart():
    assert UOp.const(0, dtypes.int32) is not UOp.const(0, dtypes.int64)
    assert UOp.const(False) is not UOp.const(0) and UOp.const(True) is not UOp.const(1)
    assert UOp.const(0, dtypes.int32) is UOp.const(0, dtypes.int32)
    assert UOp.const(0, dtypes.uint8) is UOp.const(0, dtypes.uint8)
    assert UOp.const(0.0, dtypes.float32) is not UOp.const(0.0, dtypes.float64)
    assert UOp.const(1, dtypes.float32) is not UOp.const(1, dtypes.int32)


def test_const_key_keeps_zeros_and_nans_apart_and_leaves_other_values():
    assert core._const_key(0.0, dtypes.float32) != core._const_key(-0.0, dtypes.float32)
    assert core._const_key(math.nan, dtypes.float64) == core._const_key(math.nan, dtypes.float64)
    assert core._const_key(1.5, dtypes.float32) == 1.5
    assert core._const_key(0, dtypes.int32) == 0 and core._const_key(7, dtypes.int8) == 7


def test_two_reshapes_and_casts_of_one_source_are_two_nodes_with_their_values():
    x = UOp.param("x_two_reshapes", (2, 3), dtypes.float64)
    a, b = x.reshape(6), x.reshape(3, 2)
    assert a is not b and a.shape == (6,) and b.shape == (3, 2)
    assert x.reshape(6) is a and x.reshape(3, 2) is b and x.reshape((3, 2)) is b
    data = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(value(b, x_two_reshapes=data), data.reshape(3, 2))
    c, d = x.cast(dtypes.float32), x.cast(dtypes.float16)
    assert c is not d and c.dtype is dtypes.float32 and d.dtype is dtypes.float16
    assert x.cast(dtypes.float16) is d and x.cast(dtypes.float32) is c
    p, q = x.permute(1, 0), x.sum(0)
    assert x.permute(1, 0) is p and x.sum(0) is q and x.sum(1) is not q


def test_make_shaped_interns_as_make_does():
    x = UOp.param("x_shaped", (4,), dtypes.float32)
    a = UOp.make(Ops.RESHAPE, dtypes.float32, (x,), (2, 2))
    assert make_shaped(Ops.RESHAPE, dtypes.float32, (x,), (2, 2), (2, 2)) is a
    b = make_shaped(Ops.RESHAPE, dtypes.float32, (x,), (4, 1), (4, 1))
    assert b is not a and b.shape == (4, 1) and b.arg == (4, 1)
    assert make_shaped(Ops.RESHAPE, dtypes.float32, (x,), (4, 1), (4, 1)) is b
    assert UOp.make(Ops.RESHAPE, dtypes.float32, (x,), (4, 1)) is b
    c = make_shaped(Ops.CAST, dtypes.float64, (x,), None, (4,))
    assert c is not a and c.dtype is dtypes.float64 and UOp.make(Ops.CAST, dtypes.float64, (x,)) is c
    fresh = UOp.param("x_shaped_fresh", (3,), dtypes.float32)
    e = make_shaped(Ops.NEG, dtypes.float32, (fresh,), None, (3,))
    assert e.shape == (3,) and e.op == Ops.NEG and e.src == (fresh,) and -fresh is e


def test_new_nodes_hold_what_they_were_made_with_and_count():
    before = live_node_count()
    x = UOp.param("x_new_node_fields", (5,), dtypes.int16)
    y = x.reshape(1, 5)
    assert (y.op, y.dtype, y.src, y.arg, y.shape, y.meta) == (Ops.RESHAPE, dtypes.int16, (x,), (1, 5), (1, 5), None)
    assert y.serial > x.serial
    assert live_node_count() == before + 2
    with pytest.raises(AttributeError):
        y.shape = (5,)


def test_leaves_of_one_name_differ_by_shape_and_dtype():
    a = UOp.param("leaf", (2,), dtypes.float32)
    assert UOp.param("leaf", (2,), dtypes.float32) is a
    assert UOp.param("leaf", (3,), dtypes.float32) is not a
    assert UOp.param("leaf", (2,), dtypes.float64) is not a
    assert UOp.param("leaf2", (2,), dtypes.float32) is not a
    raw = np.array([1, 2, 3, 4], np.int32)
    buf = UOp.buffer(raw)
    assert UOp.buffer(raw.copy()) is buf
    assert UOp.buffer(raw.reshape(2, 2)) is not buf
    assert UOp.buffer(raw.view(np.float32)) is not buf
    np.testing.assert_array_equal(value(UOp.buffer(raw.reshape(2, 2))), raw.reshape(2, 2))
    assert UOp.noop() is UOp.noop()


def _collect():
    gc.collect()
    return sweep_intern_table()


def test_a_sweep_drops_only_dead_nodes_and_a_sibling_moves_into_the_slot():
    _collect()
    x = UOp.param("x_sibling", (2, 3), dtypes.float64)
    first = x.reshape(6)
    second = x.reshape(3, 2)  # a sibling: kept under its full key
    assert core._by_src[Ops.RESHAPE].get((x,)) is first
    assert core._intern.get((Ops.RESHAPE, dtypes.float64, (x,), (3, 2))) is second
    serial = second.serial
    del first
    dropped = _collect()
    assert dropped >= 1
    assert core._by_src[Ops.RESHAPE].get((x,)) is second  # promoted
    assert (Ops.RESHAPE, dtypes.float64, (x,), (3, 2)) not in core._intern
    assert x.reshape(3, 2) is second and second.serial == serial
    again = x.reshape(6)  # made anew beside it, with its own shape
    assert again is not second and again.shape == (6,)
    data = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(value(again, x_sibling=data), data.reshape(6))
    np.testing.assert_array_equal(value(second, x_sibling=data), data.reshape(3, 2))
    assert x.reshape(6) is again and x.reshape(3, 2) is second


def test_a_sweep_forgets_each_kind_of_node_and_remakes_them_apart():
    _collect()
    count = live_node_count()
    x = UOp.param("x_forgotten", (3,), dtypes.float32)
    parts = [UOp.const(-0.0, dtypes.float32) + x, UOp.const(0.0, dtypes.float32) * x, UOp.buffer(np.arange(3.0, dtype=np.float32)) - x,
             x.cast(dtypes.float64), x.cast(dtypes.float16), UOp.const(math.nan, dtypes.float32) + x]
    assert live_node_count() > count
    made = {x.serial} | {node.serial for part in parts for node in part.toposort() if node.src}
    del parts, x
    dropped = _collect()
    # every node made on x is gone (a constant another test's graph still holds may stay)
    assert dropped >= len(made) == 7 and live_node_count() <= count
    assert not any(node.serial in made for node in core._all_nodes())
    assert not any(key[0] == Ops.PARAM and key[3] == "x_forgotten" for key in core._intern)
    # made again: the two zeros still two constants with their own signs
    minus, plus = UOp.const(-0.0, dtypes.float32), UOp.const(0.0, dtypes.float32)
    assert minus is not plus and np.signbit(value(minus)) and not np.signbit(value(plus))
    y = UOp.param("x_forgotten", (3,), dtypes.float32)
    np.testing.assert_array_equal(value(y.cast(dtypes.float16), x_forgotten=np.array([1, 2, 3], np.float32)),
                                  np.array([1, 2, 3], np.float16))


def test_a_live_graph_keeps_every_node_through_a_sweep_and_the_count_is_exact():
    _collect()
    x = UOp.param("x_kept", (4,), dtypes.float64)
    minus = UOp.const(-0.0, dtypes.float64)
    y = (x * minus).reshape(2, 2).sum(0)
    nodes = y.toposort()
    _collect()
    after = live_node_count()
    assert all(n is m for n, m in zip(nodes, y.toposort()))
    assert ((x * UOp.const(-0.0, dtypes.float64)).reshape(2, 2).sum(0)) is y
    assert live_node_count() == after
    assert _collect() == 0 or live_node_count() >= len(nodes)
    assert core._node_count == live_node_count()


def test_sweep_clears_the_constant_cache_and_sets_its_next_threshold():
    x = UOp.param("x_cache", (2,), dtypes.float32)
    x.const_like(3.5)
    assert core._const_fast
    _collect()
    assert not core._const_fast
    assert core._sweep_at >= core._SWEEP_MIN
    assert core._sweep_at >= 2 * core._node_count


def test_make_refuses_an_unknown_op():
    with pytest.raises(GraphError, match="unknown op 'NOT_AN_OP'"):
        UOp.make("NOT_AN_OP", dtypes.float32, ())
