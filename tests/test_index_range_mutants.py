"""The pieces of tools/index_range.py that decide which given index values are refused, each
pinned on its own (written for the mutation run of 2026-12-07, docs/mutation.md): an
IndexLimit's test of an array (its bounds, the constants it accepts, the elements it looks
at, the first element in row-major order), first_refusal's choice between two limits, which
limit makes another redundant (_narrower), and which of the index's elements a node holds
(_Ids.reached)."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli.tools.index_range import IndexLimit, _Ids, _narrower, first_refusal


def limit(n=3, others=(), low=0, reached=None, node="#4 (CMPEQ)"):
    return IndexLimit("labels", n, node, others, low, reached)


@pytest.mark.parametrize("values, outside", [
    ([0, 1, 2], None),
    ([0, 3, 1], (3, (1,))),            # n itself is outside 0..n-1
    ([0, 2, -1], (-1, (2,))),          # below low = 0
    ([[0, 1], [7, 0]], (7, (1, 0))),   # a 2-d index names both coordinates
    ([[0, 7], [8, 0]], (7, (0, 1))),   # the first in row-major order, not the largest
    (np.array(4, np.int64), (4, ())),  # a 0-d array: no coordinates
])
def test_first_outside_bounds(values, outside):
    assert limit().first_outside(values) == outside


def test_first_outside_from_a_negative_low_and_the_constants_accepted():
    wrapped = limit(n=3, low=-3)
    assert wrapped.first_outside(np.array([-3, -1, 0, 2], np.int32)) is None
    assert wrapped.first_outside(np.array([-3, -4], np.int32)) == (-4, (1,))
    assert wrapped.first_outside(np.array([2, 3], np.int32)) == (3, (1,))
    ignoring = limit(n=3, others=(-100, 7))
    assert ignoring.first_outside(np.array([-100, 7, 2, 0], np.int32)) is None
    assert ignoring.first_outside(np.array([-100, 8, 7], np.int32)) == (8, (1,))
    assert ignoring.first_outside(np.array([-1, -100], np.int64)) == (-1, (0,))
    assert limit(n=3).first_outside(np.array([-100, 0], np.int32)) == (-100, (0,))  # no others: refused


def test_first_outside_looks_only_at_the_elements_reached():
    values = np.array([[9, 0], [9, 0], [0, 9]], np.int32)        # flat: 9 0 9 0 0 9
    assert limit(reached=range(1, 6, 2)).first_outside(values) == (9, (2, 1))   # flat 1, 3, 5
    assert limit(reached=range(1, 4, 2)).first_outside(values) is None          # flat 1, 3
    assert limit(reached=range(0, 6, 2)).first_outside(values) == (9, (0, 0))
    assert limit(reached=(1, 3, 4)).first_outside(values) is None
    assert limit(reached=(1, 2)).first_outside(values) == (9, (1, 0))
    assert limit(reached=()).first_outside(values) is None
    assert limit(reached=None).first_outside(values) == (9, (0, 0))


def test_first_refusal_names_the_first_element_and_the_narrower_limit():
    narrow, wide = limit(n=3, node="#4 (CMPEQ)"), limit(n=5, node="#9 (CMPEQ)")
    values = {"labels": np.array([0, 4, 3], np.int32), "other": np.array([99], np.int32)}
    assert first_refusal({"labels": (narrow, wide)}, values, "input") == (
        "input 'labels' holds 4 (at [1]), outside 0..2, the classes node #4 (CMPEQ) compares it with "
        "(torch refuses such labels too)")
    # the wide limit's first refusal comes later than the narrow one's: the earlier element wins
    values = {"labels": np.array([0, 3, 5], np.int32)}
    assert first_refusal({"labels": (wide, narrow)}, values, "member") == (
        "member 'labels' holds 3 (at [1]), outside 0..2, the classes node #4 (CMPEQ) compares it with "
        "(torch refuses such labels too)")
    values = {"labels": np.array([0, 0, 5], np.int32)}
    assert first_refusal({"labels": (narrow, wide)}, values, "input").startswith("input 'labels' holds 5 (at [2]), "
                                                                                 "outside 0..2, the classes node #4")
    # the earlier element, not the smaller value: 9 at [1] (all elements) before 4 at [2] (element 2 alone)
    values = {"labels": np.array([0, 9, 4], np.int32)}
    assert first_refusal({"labels": (limit(n=3, reached=(2,)), wide)}, values, "input") == (
        "input 'labels' holds 9 (at [1]), outside 0..4, the classes node #9 (CMPEQ) compares it with "
        "(torch refuses such labels too)")
    # an input without values given is skipped, the next one looked at; all in range: None
    limits = {"missing": (narrow,), "labels": (narrow,)}
    assert first_refusal(limits, {"labels": np.array([0, 9], np.int32)}, "input").startswith("input 'labels' holds 9")
    assert first_refusal(limits, {"labels": np.array([0, 2], np.int32)}, "input") is None
    assert first_refusal({}, {"labels": np.array([9], np.int32)}, "input") is None


def test_the_refusals_words():
    assert limit(n=3, others=(-100,)).refusal(5, (0, 2), "input 'labels'") == (
        "input 'labels' holds 5 (at [0,2]), outside 0..2, the classes node #4 (CMPEQ) compares it with, and not "
        "-100, the value it ignores (torch refuses such labels too)")
    assert limit(n=3, others=(-100, -1)).refusal(5, (), "input 'labels'") == (
        "input 'labels' holds 5, outside 0..2, the classes node #4 (CMPEQ) compares it with, and none of -100, -1, "
        "the values it ignores (torch refuses such labels too)")
    assert limit(n=4, low=-4, node="'gather' (Gather)").refusal(-5, (1,), "input 'idx'") == (
        "input 'idx' holds -5 (at [1]), outside -4..3, the indices node 'gather' (Gather) takes along an axis of 4 "
        "(onnxruntime and torch refuse such indices too)")


# (n, the comparison, low, reached): the comparison is not looked at
@pytest.mark.parametrize("first, second, narrower", [
    ((5, None, 0, None), (7, None, 0, None), True),
    ((7, None, 0, None), (5, None, 0, None), False),
    ((5, None, 0, None), (5, None, 0, None), True),             # the same range: either makes the other redundant
    ((5, None, -5, None), (5, None, 0, None), False),            # it accepts -5..-1, which the other refuses
    ((5, None, 0, None), (5, None, -5, None), True),
    ((5, None, -1, None), (5, None, -5, None), True),
    ((5, None, 0, (0, 1)), (5, None, 0, None), False),           # it checks fewer elements
    ((5, None, 0, None), (5, None, 0, (0, 1)), True),
    ((5, None, 0, range(0, 10, 2)), (5, None, 0, (0, 2, 4)), True),
    ((5, None, 0, range(0, 10, 2)), (5, None, 0, (0, 1)), False),
    ((5, None, 0, (0, 1, 2)), (5, None, 0, (1, 2)), True),
    ((5, None, 0, (0, 1, 2)), (5, None, 0, range(0, 3)), True),
    ((5, None, 0, (0, 1, 2)), (5, None, 0, (2, 3)), False),
    ((5, None, 0, range(0, 9, 3)), (5, None, 0, range(1, 9, 3)), False),   # GatherND's disjoint columns
    ((7, None, 0, (0, 1)), (5, None, 0, (0, 1)), False),
])
def test_narrower(first, second, narrower):
    assert _narrower(first, second) is narrower


@pytest.mark.parametrize("ids, size, reached", [
    (None, 6, None),                                       # not followed: every element
    (np.arange(6), 6, None),                               # every element: None, not range(0, 6)
    (np.array([3, 1, 0, 2, 5, 4]), 6, None),
    (np.array([0, 2, 4]), 6, range(0, 5, 2)),
    (np.array([[1, 4], [7, -1]]), 9, range(1, 8, 3)),
    (np.array([2]), 3, range(2, 3, 1)),
    (np.array([-1, 2, -1, 2]), 3, range(2, 3, 1)),          # -1: a place of no element
    (np.array([0, 1, 3]), 5, (0, 1, 3)),
    (np.array([3, 0, 1, 0]), 5, (0, 1, 3)),                 # sorted, each once
    (np.array([-1, -1]), 3, ()),                            # none reached
])
def test_ids_reached(ids, size, reached):
    got = _Ids(ids, size).reached()
    assert got == reached and type(got) is type(reached)


# ----------------------------------------------------------------------------- an index's ids through its users

def test_ids_through_views():
    from uopcli import UOp, dtypes
    from uopcli.tools.index_range import _MOST_TRACKED
    index = UOp.param("i", (2, 3), dtypes.int32)
    ids = _Ids.of(index)
    assert ids.size == 6 and np.array_equal(ids.ids, np.arange(6).reshape(2, 3))
    permuted = ids.moved(index.permute((1, 0)))
    assert permuted.size == 6 and np.array_equal(permuted.ids, np.arange(6).reshape(2, 3).T)
    assert permuted.moved(index.permute((1, 0)).shrink(((0, 3), (1, 2)))).reached() == range(3, 6, 1)
    shrunk = ids.moved(index.shrink(((0, 2), (1, 3))))
    assert shrunk.size == 6 and shrunk.reached() == (1, 2, 4, 5)
    flat = ids.moved(index.reshape((6,)))
    assert np.array_equal(flat.ids, np.arange(6)) and flat.reached() is None
    assert flat.moved(index.reshape((6,)).shrink(((2, 4),))).reached() == range(2, 4, 1)
    # past _MOST_TRACKED elements a view is not followed: every element counts as compared
    wide = index.reshape((6, 1)).expand((6, _MOST_TRACKED))
    followed = ids.moved(index.reshape((6, 1))).moved(wide)
    assert followed.moved(wide.reshape((6 * _MOST_TRACKED,))).ids is None
    assert ids.moved(index.reshape((6, 1))).padded(wide.pad(((0, 0), (0, 1)))).ids is None
    at_most = UOp.param("n", (_MOST_TRACKED,), dtypes.int32)
    assert _Ids.of(at_most).ids is not None and _Ids.of(UOp.param("m", (_MOST_TRACKED + 1,), dtypes.int32)).ids is None


def test_ids_through_a_padding_and_a_selection():
    from uopcli import UOp, dtypes
    index = UOp.param("i", (4,), dtypes.int32)
    ids = _Ids.of(index)
    padded = ids.padded(index.pad(((1, 1),)))
    assert padded.size == 4 and np.array_equal(padded.ids, [-1, 0, 1, 2, 3, -1]) and padded.reached() is None
    mask = UOp.buffer(np.array([True, False, True, False]))
    kept = ids.selected(mask.where(index, 0), index)
    assert kept.size == 4 and np.array_equal(kept.ids, [0, -1, 2, -1]) and kept.reached() == range(0, 3, 2)
    other = ids.selected(mask.where(0, index), index)
    assert np.array_equal(other.ids, [-1, 1, -1, 3]) and other.reached() == range(1, 4, 2)
    both = mask.where(index, index)
    kept = ids.selected(both, index)
    assert kept.size == 4 and np.array_equal(kept.ids, np.arange(4)) and kept.reached() is None
    assert kept.moved(both.shrink(((1, 3),))).reached() == range(1, 3, 1)


# ----------------------------------------------------------------------------- the walk

def _labels_loss(labels, classes=5):
    from uopcli import dtypes
    return labels.one_hot(classes).cast(dtypes.float32).sum()


def test_a_large_table_compared_adds_no_accepted_value():
    """A compared constant of more than 64 elements is a table, not a sentinel: -50..49 are not
    accepted besides the classes 0..4."""
    from uopcli import Graph, UOp, dtypes
    from uopcli.tools.index_range import index_limits
    labels = UOp.param("labels", (6,), dtypes.int32)
    table = UOp.arange(100) - 50
    hits = labels.reshape((6, 1)).eq(table.cast(dtypes.int32).reshape((1, 100))).cast(dtypes.float32).sum()
    graph = Graph({"y": _labels_loss(labels) + hits}, inputs=[labels])
    (found,) = index_limits(graph)["labels"]
    assert (found.n, found.others, found.low, found.reached) == (5, (), 0, None)
    table = UOp.buffer(np.array([-100] * 64, np.int32)).reshape((1, 64))  # 64 elements: still few
    sentinel = labels.reshape((6, 1)).ne(table).cast(dtypes.float32).sum()
    (found,) = index_limits(Graph({"y": _labels_loss(labels) + sentinel}, inputs=[labels]))["labels"]
    assert found.others == (-100,)


def test_a_selection_by_a_mask_that_depends_on_an_input_is_not_followed():
    from uopcli import UOp, dtypes
    from uopcli.tools.index_range import index_ranges
    labels = UOp.param("labels", (6,), dtypes.int32)
    mask = UOp.param("keep", (6,), dtypes.bool)
    assert index_ranges([_labels_loss(mask.where(labels, -100))]) == {}
    fixed = UOp.buffer(np.array([True, False] * 3))
    assert index_ranges([_labels_loss(fixed.where(labels, -100))]) == {"labels": 5}


def test_an_index_compared_twice_with_one_range_names_the_first_comparison():
    """Two comparisons with the same classes make one limit, named by the comparison that comes
    first in the graph's order, whichever output term holds it."""
    from uopcli import Graph, UOp, dtypes
    from uopcli.core.ops import Ops
    from uopcli.core.walks import toposort
    from uopcli.tools.index_range import index_limits
    labels = UOp.param("twice", (6,), dtypes.int32)  # a name no other test builds: no node shared
    first = labels.reshape((6, 1)).eq(UOp.arange(5).cast(dtypes.int32).reshape((1, 5)))
    second = labels.reshape((1, 6)).eq(UOp.arange(7).cast(dtypes.int32).shrink(((0, 5),)).reshape((5, 1)))
    for a, b in ((first, second), (second, first)):
        y = a.cast(dtypes.float32).sum() * 2.0 + b.cast(dtypes.float32).sum()
        (found,) = index_limits(Graph({"y": y}, inputs=[labels]))["twice"]
        numbers = [i for i, node in enumerate(toposort((y,))) if node.op == Ops.CMPEQ]
        assert len(numbers) == 2 and (found.n, found.node) == (5, f"%{numbers[0]} CMPEQ")


def test_a_gather_along_an_axis_of_one_is_checked(tmp_path):
    """A Gather from a one-row table: index 3 read a row of zeros (-0.0, exit 0) where onnxruntime
    refuses it; its arange(1) is the scalar 0, which was taken for a sentinel, so nothing was
    checked. Through a wrap of size 1 it is the range -1..0."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T, helper, numpy_helper
    from uopcli.interop.onnx.importer import load_onnx
    from uopcli.tools.index_range import index_limits
    table = numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(1, 3), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["rows"], name="/g", axis=0)], "one",
                              [helper.make_tensor_value_info("idx", T.INT64, [2])],
                              [helper.make_tensor_value_info("rows", T.FLOAT, [2, 3])], initializer=[table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "g.onnx")
    graph = load_onnx(str(tmp_path / "g.onnx"))[0]
    assert index_limits(graph) == {"idx": (IndexLimit("idx", 1, "'/g' (Gather)", (), -1),)}
    from uopcli.tools.index_range import IndexOutOfRange, check_index_values
    check_index_values(graph, {"idx": np.array([0, -1])})
    with pytest.raises(IndexOutOfRange) as caught:
        check_index_values(graph, {"idx": np.array([0, 3])})
    assert str(caught.value) == ("input 'idx' holds 3 (at [1]), outside -1..0, the indices node '/g' (Gather) takes "
                                 "along an axis of 1 (onnxruntime and torch refuse such indices too)")
