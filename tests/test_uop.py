"""The UOp core: hash-consing, inference, errors, metadata, and deep graphs."""

import gc
import sys

import numpy as np
import pytest

from uopcli import GraphError, Metadata, Ops, UOp, dtypes
from uopcli.ops import ALL_OPS, DTYPES, FAMILY
from uopcli.uop import live_node_count, sweep_intern_table, toposort


def test_every_op_has_a_family_and_inference():
    from uopcli.uop import _INFER
    assert set(FAMILY) == set(ALL_OPS) == set(_INFER)
    assert len(ALL_OPS) == 48  # the op table of format v1
    assert set(DTYPES) == {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "float32", "float64", "void"}


def test_structurally_equal_nodes_are_one_object():
    x = UOp.param("x", (3, 4))
    assert UOp.param("x", (3, 4)) is x
    assert UOp.param("x", (3, 5)) is not x
    assert (x * 2 + 1) is (x * 2 + 1)
    assert UOp.const(1.0) is not UOp.const(1)  # dtype is part of identity
    assert UOp.const(0.0) is not UOp.const(-0.0)
    assert UOp.const(float("nan")) is UOp.const(float("nan"))


def test_shapes_and_dtypes_are_inferred():
    x = UOp.param("x", (2, 3, 4))
    assert x.sum(1, keepdim=True).shape == (2, 1, 4)
    assert x.sum(1).shape == (2, 4)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.pad(((1, 0), (0, 2), (0, 0))).shape == (3, 5, 4)
    assert x.shrink(((0, 1), (1, 3), (0, 4))).shape == (1, 2, 4)
    assert (x < 1).dtype is dtypes.bool
    assert x.cast(dtypes.int32).dtype is dtypes.int32
    assert (x @ UOp.param("w", (4, 5))).shape == (2, 3, 5)


@pytest.mark.parametrize("build, words", [
    (lambda x: x + UOp.param("y", (4,)), ["[3]", "[4]"]),
    (lambda x: UOp.make(Ops.ADD, dtypes.float32, (x, UOp.param("i", (3,), dtypes.int32))), ["ADD", "int32"]),
    (lambda x: x.reshape(4), ["RESHAPE", "[3]"]),
    (lambda x: x.expand(6), ["EXPAND"]),
    (lambda x: x.cast(dtypes.int32).sqrt(), ["SQRT", "float"]),
    (lambda x: x.bitcast(dtypes.int16), ["BITCAST", "item size"]),
    (lambda x: x.shrink(((1, 5),)), ["SHRINK"]),
])
def test_misfits_raise_the_library_error_naming_op_shapes_dtypes(build, words):
    with pytest.raises(GraphError) as info:
        build(UOp.param("x", (3,)))
    for word in words:
        assert word in str(info.value)


def test_nodes_are_immutable_but_metadata_is_beside_them():
    x = UOp.param("x", (3,))
    with pytest.raises(AttributeError):
        x.op = Ops.MUL
    y = x.relu()
    assert y.meta.name == "relu" and y.meta.backward is False
    assert x.meta is None  # the input was not made by relu


def test_dead_graphs_leave_the_intern_table():
    sweep_intern_table()
    before = live_node_count()
    x = UOp.param("dead_x", (5,))
    y = x
    for _ in range(1000):
        y = (y * 1.25 + 0.5).sin()
    assert live_node_count() > before + 2000
    del x, y
    gc.collect()
    sweep_intern_table()
    assert live_node_count() <= before + 2  # the shared constants may stay, the graph goes


def test_a_live_graph_survives_a_sweep():
    x = UOp.param("live_x", (2,))
    y = (x * 3).sum()
    sweep_intern_table()
    assert (x * 3).sum() is y


def test_no_gc_hands_new_nodes_to_the_oldest_generation_without_a_scan():
    from uopcli.uop import no_gc
    gc.collect()
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
    try:
        with no_gc():
            y = UOp.param("gen_x", (2,))
            for _ in range(5000):  # ~10,000 new objects: far past the young generation's threshold
                y = y * 1.5 + 0.25
            assert not gc.isenabled()
        assert gc.isenabled() and gc.get_count()[0] < gc.get_threshold()[0]
        tail = UOp.param("gen_z", (2,)) * 2.0  # the next allocation finds no young backlog to scan
        assert collections == []
    finally:
        gc.callbacks.pop()
    del y, tail
    gc.collect()
    sweep_intern_table()
    assert live_node_count() < 100


def test_no_gc_leaves_a_programs_own_frozen_objects_frozen():
    from uopcli.uop import no_gc
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with no_gc():
            UOp.param("freeze_x", (2,)) * 3.0
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_sweep_drops_dead_nodes_and_keeps_every_live_one():
    sweep_intern_table()
    keep = [UOp.param(f"keep{i}", (3,)) * float(i) for i in range(300)]
    for i in range(300):
        UOp.param(f"drop{i}", (3,)) * float(i) + 1.0  # dead as soon as made
    dropped = sweep_intern_table()
    assert dropped >= 300 * 2  # each dead ADD and its dead PARAM (the MULs on drop* too)
    assert all((UOp.param(f"keep{i}", (3,)) * float(i)) is keep[i] for i in range(300))


def test_sweeps_run_by_themselves_and_keep_the_table_bounded():
    import uopcli.uop as core
    sweep_intern_table()
    floor = max(core._SWEEP_MIN, live_node_count())
    peak = 0
    for round_ in range(100):  # ~3,000 nodes a round (300,000 in all), each round's graph dropped at once
        y = UOp.param(f"round{round_}", (2,))
        for _ in range(1000):
            y = y * 1.5 + 0.25
        peak = max(peak, live_node_count())
        del y
    assert peak <= 2 * floor + 4000  # garbage found: the 2x schedule holds
    assert live_node_count() < 2 * floor + 4000


def test_sweeps_back_off_while_a_graph_only_grows():
    import uopcli.uop as core
    sweep_intern_table()
    sweeps = []
    original = core.sweep_intern_table
    core.sweep_intern_table = lambda: sweeps.append(live_node_count()) or original()
    try:
        y = UOp.param("growing", (2,))
        for _ in range(120_000):  # 240,000 live nodes, nothing to free
            y = y * 1.5 + 0.25
    finally:
        core.sweep_intern_table = original
    # each fruitless sweep quadruples the next threshold: 65,536 then 262,144 (not 131,072)
    assert len(sweeps) == 1 and core._sweep_at >= 4 * sweeps[0]
    del y


def test_million_node_chain_builds_and_walks_with_default_recursion_limit():
    limit = sys.getrecursionlimit()
    x = UOp.param("chain_x", (2,))
    y = x
    for i in range(1_000_000):
        y = y + 1.0 if i % 2 else y * 0.999
    assert sys.getrecursionlimit() == limit
    order = toposort([y])
    assert len(order) == 1_000_003 and order[-1] is y
    del order, y  # tearing down a million-deep chain must not overflow the C stack
    sweep_intern_table()


def test_function_and_call_build():
    x = UOp.param("x", (3,))
    fn = UOp.trace_function("square", lambda a: (a * a, a + 1), x)
    assert fn.op == Ops.FUNCTION and fn[0].shape == (3,) and fn[1].shape == (3,)
    ste = UOp.trace_call("ste", lambda a: a.trunc(), lambda a, g: g, x)
    assert ste.op == Ops.CALL and ste.arg.grad.op == Ops.TUPLE
    with pytest.raises(GraphError, match="not closed"):
        UOp.function("leaky", [x * 2], [x])


def test_buffer_round_trips_values():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = UOp.buffer(data)
    assert node.shape == (2, 3) and node.dtype is dtypes.float32
    np.testing.assert_array_equal(node.buffer_array(), data)


def test_metadata_is_not_identity():
    a = UOp.param("m", (2,)) * 5
    a.set_meta(Metadata("thing"))
    assert UOp.param("m", (2,)) * 5 is a and a.meta.name == "thing"


# ----------------------------------------------------------------------------- tinygrad's meanings
# Builder methods named like tinygrad's Tensor methods mean what tinygrad's do (values from
# tinygrad 0.14.0, DEV=PYTHON, on the same inputs).

def values(outputs, **inputs):
    from uopcli.evaluate import evaluate
    return [v.tolist() for v in evaluate(outputs, inputs)]


def test_division_and_remainder_floor_and_slash_is_true_division():
    a, b = UOp.param("a", (4,), dtypes.int32), UOp.param("b", (4,), dtypes.int32)
    av, bv = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    assert values([a // b, a % b, a / b], a=av, b=bv) == [[3, -4, -4, 3], [1, 1, -1, -1], [3.5, -3.5, -3.5, 3.5]]
    assert values([a.cdiv(b), a.cmod(b)], a=av, b=bv) == [[3, -3, -3, 3], [1, -1, 1, -1]]  # the C nodes
    assert values([2 // a, 2 % a, ~a], a=av) == [[0, -1, 0, -1], [2, -5, 2, -5], [-8, 6, -8, 6]]
    x = UOp.param("x", (4,))
    assert values([x // 2.0, x % 2.0], x=np.array([0, 1, 2, -3], np.float32)) == [[0, 0, 1, -2], [0, 1, 0, 1]]


def test_minimum_of_unsigned_extreme_and_bool_values_and_logical_not_of_numbers():
    u, w = UOp.param("u", (4,), dtypes.uint8), UOp.param("w", (4,), dtypes.uint8)
    uv, wv = np.array([0, 5, 200, 3], np.uint8), np.array([5, 0, 100, 3], np.uint8)
    assert values([u.minimum(w), u.minimum(4)], u=uv, w=wv) == [[0, 0, 100, 3], [0, 4, 4, 3]]
    i, j = UOp.param("i", (3,), dtypes.int32), UOp.param("j", (3,), dtypes.int32)
    assert values([i.minimum(j)], i=np.array([-2 ** 31, 0, -5], np.int32), j=np.array([0, -2 ** 31, 3], np.int32)) \
        == [[-2 ** 31, -2 ** 31, -5]]
    p, q = UOp.param("p", (2,), dtypes.bool), UOp.param("q", (2,), dtypes.bool)
    assert values([p.minimum(q)], p=np.array([1, 1], bool), q=np.array([0, 1], bool)) == [[False, True]]
    x = UOp.param("x", (4,))
    assert values([x.logical_not(), x <= 1.0, x >= 1.0], x=np.array([0, 1, 2, -3], np.float32)) == \
        [[True, False, False, False], [True, True, False, True], [False, True, True, False]]


def test_sum_widens_narrow_integers_and_bools_and_mean_of_integers_is_float():
    i, m = UOp.param("i", (3,), dtypes.int8), UOp.param("m", (3,), dtypes.bool)
    u = UOp.param("u", (2,), dtypes.uint8)
    assert (i.sum().dtype, m.sum().dtype, u.sum().dtype) == (dtypes.int32, dtypes.int32, dtypes.uint32)
    assert values([i.sum(), m.sum(), u.sum(), i.mean()], i=np.array([100, 100, 100], np.int8),
                  m=np.array([1, 1, 0], bool), u=np.array([200, 100], np.uint8)) == [300, 2, 300, 100.0]
    assert i.mean().dtype is dtypes.float32


def test_permute_takes_every_axis_once_and_negative_axes_and_transpose_swaps_the_first_two():
    x = UOp.param("x", (2, 3, 4))
    for order in ((0, 1), (0, 1, 2, 3), (), (0, 0, 1)):
        with pytest.raises(GraphError, match="is not an order of the 3 axes"):
            x.permute(*order)
    assert x.permute(-1, 0, 1).shape == (4, 2, 3)
    assert x.transpose().shape == x.T.shape == (3, 2, 4) and x.transpose(-2, -1).shape == (2, 4, 3)


def test_builder_arguments_as_tinygrad_takes_them_and_one_line_errors_otherwise():
    x = UOp.param("x", (3, 4))
    assert x.pad((None, (1, 2))).shape == (3, 7) and x.shrink((None, (1, 3))).shape == (3, 2)
    assert x.flip(0, 1).shape == (3, 4) and x.flip(0, 1).arg == (True, True)
    assert x.expand(2, 3, 4).shape == (2, 3, 4) and x.reshape(3, 1, 4).expand(-1, 5, -1).shape == (3, 5, 4)
    for bad, words in ((lambda: x.pad((1, 2)), "pad takes one (int, int) pair"),
                       (lambda: x.shrink((None, 3)), "shrink takes one (int, int) pair"),
                       (lambda: x.transpose(0, 5), "axis 5 out of range for rank 2"),
                       (lambda: UOp.param("v", (3,)).T, "axis 1 out of range for rank 1"),
                       (lambda: x.reshape(-1, -1), "only one size can be -1"),
                       (lambda: UOp.param("i", (2,), dtypes.int32).exp(), "exp needs a float dtype")):
        with pytest.raises(GraphError, match=words.replace("(", r"\(").replace(")", r"\)")):
            bad()


def test_tinygrad_composites_match_numpy_and_their_gradients_finite_differences():
    from uopcli import Graph
    from uopcli.check import check_gradients
    x = UOp.param("x", (3, 4))
    xv = np.array([[-2.0, -0.5, 0.0, 0.25], [1.0, 3.0, -1.5, 0.75], [2.5, -3.0, 0.5, 1.25]], np.float32)
    got = values([x.cos(), x.abs(), x.sign(), x.clip(-1.0, 1.0), x.min(1), x.min(), x.var(1), x.std(),
                  x.var(0, correction=0), x.flatten(), x.unsqueeze(1), x.unsqueeze(1).squeeze(1), abs(x)], x=xv)
    expected = [np.cos(xv), np.abs(xv), np.sign(xv), np.clip(xv, -1, 1), xv.min(1), xv.min(), xv.var(1, ddof=1),
                xv.std(ddof=1), xv.var(0), xv.reshape(-1), xv[:, None, :], xv, np.abs(xv)]
    for value, want in zip(got, expected):
        np.testing.assert_allclose(np.asarray(value, np.float32), want, rtol=1e-6, atol=1e-6)
    assert x.rsqrt().op == Ops.RECIPROCAL and x.unsqueeze(-1).shape == (3, 4, 1) and x.squeeze().shape == (3, 4)
    i = UOp.param("i", (3,), dtypes.int32)
    assert values([i.min(), i.abs()], i=np.array([-2 ** 31 + 1, 5, -7], np.int32)) == [-2 ** 31 + 1, [2 ** 31 - 1, 5, 7]]
    loss = (x.cos() * x.clip(-1.0, 1.0) + x.std(1, keepdim=True).broadcast_to((3, 4)) * x.min(0, keepdim=True)
            .broadcast_to((3, 4))).sum()
    assert check_gradients(Graph({"loss": loss}), ["x"], inputs={"x": xv.astype(np.float64) * 1.1}).passed


def test_a_python_float_makes_an_integer_operand_float32():
    i = UOp.param("i", (3,), dtypes.int32)
    assert (i * 0.5).dtype is (0.5 * i).dtype is (i < 2.5).src[0].dtype is dtypes.float32
    assert values([i * 0.5, i + 1], i=np.array([1, 2, 3], np.int32)) == [[0.5, 1.0, 1.5], [2, 3, 4]]
    assert (i + 1).dtype is dtypes.int32


def test_cat_and_stack_join_as_numpy_does_and_refuse_shapes_that_do_not_fit():
    from uopcli import Graph
    from uopcli.check import check_gradients
    a, b = UOp.param("a", (2, 3)), UOp.param("b", (2, 1))
    av, bv = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([[7], [8]], np.float32)
    assert values([a.cat(b, dim=1), a.cat(a, dim=0), a.stack(a, dim=1), a.stack(a, a)], a=av, b=bv) == [
        np.concatenate([av, bv], 1).tolist(), np.concatenate([av, av]).tolist(), np.stack([av, av], 1).tolist(),
        np.stack([av, av, av]).tolist()]
    with pytest.raises(GraphError, match="cat along axis 0"):
        a.cat(b)
    loss = (a.cat(b, dim=-1) * a.cat(b * 2.0, dim=1).sin()).sum()
    assert check_gradients(Graph({"loss": loss}), ["a", "b"]).passed
