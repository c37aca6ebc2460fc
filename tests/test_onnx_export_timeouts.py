"""Export cases that the mutation sample's timed-out mutants showed untested
(docs/export-timeouts.md): graph outputs before a tuple output, output names that an
emitted node would take, REDUCE MAX over a product, identity SHRINK/FLIP, the export
errors' full wording."""

from __future__ import annotations

import numpy as np
import pytest

from _onnx_helpers import evaluated, need_onnx_and_runtime, run_onnx, same_bits
from uopcli import Graph, Ops, UOp

need_onnx_and_runtime()

from uopcli.interop.onnx.exporter import ExportError, to_onnx  # noqa: E402 - needs onnx

X = np.array([[1.5, -2.0, 0.25], [3.0, -0.5, 7.0]], dtype=np.float32)


def _bit_for_bit(graph: Graph, inputs: dict) -> None:
    ours, truth = run_onnx(graph, inputs), evaluated(graph, inputs)
    assert list(ours) == list(truth)
    for name in truth:
        assert ours[name].shape == truth[name].shape and same_bits(ours[name], truth[name]).all(), name


def test_outputs_before_and_after_a_tuple_output_are_all_exported():
    x = UOp.param("x", (2, 3))
    graph = Graph({"a": x + 1.0, "t": UOp.tuple(x * 2.0, x - 1.0), "b": x * x}, inputs=[x])
    _bit_for_bit(graph, {"x": X})


def test_output_names_an_emitted_node_would_take_stay_the_outputs():
    """The emitter must not name a node or initializer after a graph output (its first
    node is MUL_1, its shapes initializer `ints`): ONNX values have one producer."""
    x = UOp.param("x", (2, 3))
    graph = Graph({"MUL_1": (x * x).r("ADD", (1,)), "ints": (x + 2.0).r("ADD", (0,))}, inputs=[x])
    _bit_for_bit(graph, {"x": X})


def test_reduce_max_over_a_product_is_not_a_sum():
    """Only REDUCE ADD over a product is an Einsum; MAX over one is exported as written."""
    x, y = UOp.param("x", (2, 3)), UOp.param("y", (3, 4))
    product = x.reshape(2, 3, 1).expand(2, 3, 4) * y.reshape(1, 3, 4).expand(2, 3, 4)
    graph = Graph({"m": product.r("MAX", (1,))}, inputs=[x, y])
    assert not any(n.op_type == "Einsum" for n in to_onnx(graph).graph.node)
    _bit_for_bit(graph, {"x": X, "y": np.arange(12, dtype=np.float32).reshape(3, 4) - 5.0})


def test_identity_shrink_and_flip_from_a_file_export():
    """The builder folds them away, but a saved graph may hold them: an Identity each."""
    x = UOp.param("x", (2, 3))
    shrink = UOp.make(Ops.SHRINK, x.dtype, (x,), ((0, 2), (0, 3)))
    flip = UOp.make(Ops.FLIP, x.dtype, (x,), (False, False))
    _bit_for_bit(Graph({"s": shrink * 2.0, "f": flip + 1.0}, inputs=[x]), {"x": X})


def test_export_errors_say_it_in_full():
    x = UOp.param("x", (2,))
    with pytest.raises(ExportError, match=r"^nothing to export: the graph's outputs hold no value "
                                          r"\(tuples of NOOPs only\)$"):
        to_onnx(Graph({"n": UOp.tuple(UOp.noop(), UOp.noop())}, inputs=[x]))
    with pytest.raises(ExportError, match=r"is also the name of another input or output: rename one$"):
        to_onnx(Graph({"t": UOp.tuple(x, x), "t[0]": x}))
    with pytest.raises(ExportError, match=r"outside a function body "
                                          r"\(the format allows slots only inside FUNCTION/CALL bodies\)$"):
        to_onnx(Graph({"y": UOp.slot(0, (2,)) + 1.0}))
