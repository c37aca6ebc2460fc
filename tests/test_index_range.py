"""Random integer inputs are drawn below the number of classes they index
(uopcli/tools/index_range.py): `eval --random` and `check` without -i evaluate the model's
own loss, not one whose labels match no class."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.formats.uop import save
from uopcli.tools.index_range import index_ranges
from uopcli.tools.values import gather_inputs, random_value

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


def _classifier(classes: int = 5, batch: int = 6):
    """Cross-entropy of logits against integer labels, with a one-hot of the labels (as
    tinygrad's sparse_categorical_crossentropy builds it), labels != -1 as its mask."""
    logits = UOp.param("logits", (batch, classes))
    labels = UOp.param("labels", (batch,), dtypes.int32)
    picked = labels.one_hot(classes).cast(dtypes.float32) * logits.log_softmax(-1)
    mask = labels.ne(-1).cast(dtypes.float32)
    return Graph({"loss": -(picked.sum(-1) * mask).sum()}, inputs=[logits, labels])


def test_an_index_compared_with_an_arange_draws_below_its_size():
    assert index_ranges(_classifier(5).outputs.values()) == {"labels": 5}
    assert index_ranges(_classifier(3).outputs.values()) == {"labels": 3}
    assert index_ranges(_classifier(40).outputs.values()) == {"labels": 40}  # above 10: draws stay 0..9


def test_binary_labels_draw_0_or_1_and_a_view_of_the_index_as_an_output_sets_nothing():
    assert index_ranges(_classifier(2).outputs.values()) == {"labels": 2}
    labels = UOp.param("labels", (4,), dtypes.int32)
    assert index_ranges([labels.reshape((2, 2))]) == {}  # a view nothing reads further


def test_an_index_changed_before_the_comparison_sets_no_range():
    """labels + 1 == arange(5) picks classes 1..5 of labels 0..4: not the labels' own range,
    so nothing is assumed (only views pass an index on unchanged)."""
    labels = UOp.param("labels", (6,), dtypes.int32)
    shifted = (labels + 1).reshape((6, 1)).eq(UOp.arange(5).reshape((1, 5)))
    assert index_ranges([shifted.cast(dtypes.float32).sum()]) == {}


def test_a_gather_index_draws_below_the_gathered_axis_and_the_smallest_range_wins():
    x = UOp.param("x", (4, 7))
    index = UOp.param("index", (4, 2), dtypes.int32)
    both = x.gather(1, index).sum() + index.one_hot(3).sum().cast(dtypes.float32)
    assert index_ranges([x.gather(1, index).sum()]) == {"index": 7}
    assert index_ranges([both]) == {"index": 3}


def test_sentinels_arithmetic_and_negative_ranges_set_no_range():
    n = UOp.param("n", (3,), dtypes.int32)
    x = UOp.param("x", (3,))
    assert index_ranges([n.ne(-1).where(x, 0.0).sum()]) == {}                      # a scalar: a sentinel
    ignored = UOp.buffer(np.array([3], np.int32))                                  # one element: a sentinel too
    assert index_ranges([n.ne(ignored).where(x, 0.0).sum()]) == {}
    assert index_ranges([(x * n.cast(dtypes.float32)).sum()]) == {}                 # arithmetic, no comparison
    shifted = UOp.arange(4) - 2                                                     # -2..1: not classes
    assert index_ranges([n.reshape((3, 1)).eq(shifted.reshape((1, 4))).cast(dtypes.float32).sum()]) == {}
    other = UOp.param("m", (4,), dtypes.int32)                                      # compared with an input
    assert index_ranges([n.reshape((3, 1)).eq(other.reshape((1, 4))).cast(dtypes.float32).sum()]) == {}


def test_random_values_stay_below_the_range_and_are_unchanged_without_one():
    labels = UOp.param("labels", (1000,), dtypes.int32)
    drawn = random_value(labels, 3, {"labels": 5})
    assert drawn.min() == 0 and drawn.max() == 4 and drawn.dtype == np.int32
    plain = random_value(labels, 3)
    assert plain.max() == 9 and np.array_equal(plain, random_value(labels, 3, {"other": 2}))
    assert np.array_equal(random_value(labels, 3, {"labels": 40}), plain)   # never above 0..9
    graph = _classifier(5, batch=200)
    given = gather_inputs(graph.inputs, [], random_seed=0, roots=graph.outputs.values())
    assert given["labels"].max() == 4 and given["labels"].min() == 0
    assert gather_inputs(graph.inputs, [], random_seed=0)["labels"].max() == 9  # no graph given: as before


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_eval_random_draws_labels_that_name_a_class(tmp_path):
    save(_classifier(3, batch=50), tmp_path / "m.uop")
    done = subprocess.run([UOPGRAD, "eval", "m.uop", "--random", "--json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loss = json.loads(done.stdout)["outputs"]["loss"]["values"]
    graph = _classifier(3, batch=50)
    inputs = gather_inputs(graph.inputs, [], random_seed=0, roots=graph.outputs.values())
    logits, labels = inputs["logits"].astype(np.float64), inputs["labels"]
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert labels.max() == 2 and loss == pytest.approx(-log_p[np.arange(50), labels].sum(), rel=1e-5)


def test_tinygrads_sparse_cross_entropy_and_embedding_draw_below_their_classes():
    pytest.importorskip("tinygrad", reason="tinygrad is not installed: the bridge's tests skip")
    import tinygrad_zoo
    from uopcli.interop.tinygrad import to_graph
    for case, name, classes in ((tinygrad_zoo.conv_avgpool_sparse_xent(), "labels", 3),
                                (tinygrad_zoo.embedding_int_tokens(), "tokens", 10)):
        graph = to_graph(outputs=case.outputs, inputs=case.inputs, state_dict=case.state_dict)
        assert index_ranges(graph.outputs.values()) == {name: classes}
