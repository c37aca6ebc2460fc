"""Scopes of exported tinygrad graphs (uopcli/interop/tinygrad/scopes.py): each node is in
the deepest module whose parameters it uses and whose inputs it takes. Graphs are made with
`to_graph` (nothing is realized: no device needed)."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

_RECURSION_LIMIT = sys.getrecursionlimit()
pytest.importorskip("tinygrad", reason="tinygrad is not installed for this Python (make test installs it)")
sys.setrecursionlimit(_RECURSION_LIMIT)

from tinygrad_zoo import gpt_four_blocks, mlp_mse, transformer_block  # noqa: E402
from uopcli import Ops  # noqa: E402
from uopcli.interop.tinygrad import to_graph  # noqa: E402
from uopcli.interop.tinygrad.scopes import module_of  # noqa: E402


def _graph(case):
    return to_graph(case.outputs, case.inputs, case.state_dict)


def _scopes_by_name(graph) -> dict:
    """metadata name -> Counter of the scopes of the nodes it made. Constants are left out:
    a constant is one shared node, whose metadata is whoever tagged it first in this process
    (a builder graph of an earlier test may have made the same 0.0 as `relu` at its loc)."""
    found: dict = {}
    for node in graph.nodes():
        if node.meta is not None and node.meta.name and node.op != Ops.CONST:
            found.setdefault(node.meta.name, Counter())[node.meta.scope] += 1
    return found


def test_module_paths_keep_list_indices_with_their_list():
    assert module_of("blocks.0.attn.qkv.weight") == ("blocks.0", "attn", "qkv")
    assert module_of("layers.1.2.bias") == ("layers.1.2",)
    assert module_of("weight") == ()
    assert module_of("embedding.weight") == ("embedding",)


def test_a_linear_is_in_its_module_its_activation_with_it_and_the_loss_at_the_top():
    graph = _graph(mlp_mse())
    scopes = _scopes_by_name(graph)
    assert set(scopes["linear"]) == {"l1", "l2"}
    assert set(scopes["relu"]) == {"l1"}  # between two top-level modules: where its input is
    assert set(scopes["mean"]) == {None}
    assert all(n.meta is None or n.meta.scope is None for n in graph.inputs)


def test_a_blocks_parts_go_to_its_sub_modules():
    """One block (keys ln1.weight, attn.q.weight, ...): a LayerNorm's normalisation is in
    its module though it reads no weight; attention's softmax is between q, k, v and o: in
    attn; the residual adds take the graph's input: at the top."""
    graph = _graph(transformer_block())
    scopes = _scopes_by_name(graph)
    assert set(scopes["layernorm"]) - {None} == {"ln1", "ln2"}  # None: 1/8, a constant both share
    assert set(scopes["scaled_dot_product_attention"]) - {None} == {"attn"}  # None: its causal mask's constants
    assert {"attn/q", "attn/k", "attn/v", "attn/o", "up", "down"} <= set(scopes["linear"])
    assert set(scopes["__add__"]) - {"ln1", "ln2"} == {None}  # LayerNorm's bias add, and the residuals


def test_each_block_of_a_stack_holds_its_own_residual_stream():
    """Four blocks: the residual adds of block i are in blocks.i (they take the block's
    input and its sub-modules' outputs), the embedding and head in their own."""
    graph = _graph(gpt_four_blocks())
    order = graph.nodes()
    residuals = [n for n in order if n.meta is not None and n.meta.name == "__add__" and n.shape == (2, 3, 8)
                 and n.meta.scope is not None and "/" not in n.meta.scope]
    assert Counter(n.meta.scope for n in residuals) == Counter({f"blocks.{i}": 2 for i in range(4)})
    scopes = {n.meta.scope for n in order if n.meta is not None and n.meta.scope}
    assert {"embedding", "head/norm", "head/proj", "blocks.0/attn", "blocks.3/ln2"} <= scopes
    assert not any(s.startswith("blocks.0/attn/") and s.split("/")[-1] not in "qkvo" for s in scopes)
    loss = {n.meta.scope for n in order if n.meta is not None and n.meta.name == "sparse_categorical_crossentropy"}
    assert None in loss and loss <= {None, "head/proj"}  # what takes the targets too stays at the top
