"""A level with many items folds its single nodes and small groups into `other` and
`∇ other` (uopcli/views/html/groups.py, _fold_small); call groups and bodies never fold;
a level of few items is left as it is."""

from __future__ import annotations

from uopcli import Graph, UOp
from uopcli.core.uop import Metadata
from uopcli.tools.differentiate import differentiate
from uopcli.views.html.groups import FOLD_AT, FOLD_SIZE, Grouping, is_copied


def _scoped(node: UOp, scope: str, name: str | None = None) -> UOp:
    return node.set_meta(Metadata(name=name, scope=scope))


def _graph(loose: int):
    """x through a big scope, a tiny scope, then `loose` single ops at the top."""
    x = UOp.param("x", (4,))
    y = x
    for k in range(FOLD_SIZE + 4):
        square = _scoped(_scoped(y * y, "big") * 0.5, "big")
        y = _scoped(square + (0.25 + k), "big")
    y = _scoped(y.exp2(), "tiny")
    for k in range(loose):  # a front end's loose ops: a name, no scope (one node a call)
        y = (y * 0.5 if k % 2 else y + (0.25 + k)).set_meta(Metadata(name=f"op{k}"))
    loss = y.sum()
    grad = differentiate(Graph({"y": loss}, [x]), ["x"])[0]
    return Graph({"y": loss, **grad.outputs}, [x])  # forward and backward, as `diff --keep-forward`


def _by_label(grouping):
    return {g.label: g for g in grouping.groups if g.parent is grouping.root}


def test_a_crowded_level_folds_its_loose_nodes_and_small_groups():
    grouping = Grouping(_graph(40))
    top = _by_label(grouping)
    assert {"big", "other", "∇ other"} <= set(top), sorted(top)
    assert top["big"].size > FOLD_SIZE and not any(g.kind == "other" for g in top["big"].children)
    assert "tiny" not in top and "tiny" in {g.label for g in top["other"].children}
    assert "∇ tiny" in {g.label for g in top["∇ other"].children}
    shown = [i for i in grouping.root.nodes if not is_copied(grouping.order[i])]
    assert len(grouping.root.children) + len(shown) <= FOLD_AT
    assert "single nodes" in top["other"].detail and "small group" in top["other"].detail
    assert top["∇ other"].backward and not top["other"].backward
    assert all(home is not None for home in grouping.home)
    inside = sum(g.size for g in grouping.root.children) + len(grouping.root.nodes)
    assert inside == grouping.root.size == len(grouping.order)  # nothing lost, nothing counted twice


def test_a_level_of_few_items_is_left_as_it_is():
    grouping = Grouping(_graph(0))
    assert {"big", "tiny", "∇ tiny"} <= set(_by_label(grouping))
    assert not any(g.kind == "other" for g in grouping.groups)
