"""The viewer's grouping (views/html/groups.py) by structure, on small graphs built here:
a body shared by calls from two scopes sits in their common scope (not under the first
caller), a body called from inside another body sits in that body's group, scope paths
nest, a node without metadata joins the deepest group holding its users, and backward
nodes get ∇ twins beside their forward groups."""

from __future__ import annotations

from uopcli import Graph, Metadata, Ops, UOp
from uopcli.core.uop import next_serial
from uopcli.tools.differentiate import differentiate
from uopcli.views.html.groups import Grouping


def scoped(path: str, fn):
    """fn(), with every node it made outside function bodies given scope `path` (a body's
    nodes are the body's, as a front end that traces the function once tags them)."""
    since = next_serial()
    result = fn()
    stack = [result]
    while stack:
        node = stack.pop()
        if node.serial < since or (node.meta is not None and node.meta.scope is not None):
            continue
        node.set_meta((node.meta or Metadata())._replace(scope=path))
        stack.extend(node.src[1:] if node.op in (Ops.FUNCTION, Ops.CALL) else node.src)
    return result


def _groups(grouping: Grouping, label: str) -> list:
    return [g for g in grouping.groups if g.label == label]


def _one(grouping: Grouping, label: str):
    found = _groups(grouping, label)
    assert len(found) == 1, f"{label!r}: {len(found)} groups; all: {[g.label for g in grouping.groups]}"
    return found[0]


def _path(group) -> list[str]:
    labels = []
    while group is not None:
        labels.append(group.label)
        group = group.parent
    return labels[::-1]


def _home(grouping: Grouping, node: UOp):
    return grouping.home[grouping.index[node]]


def _shared_body_graph(scopes: list[str]) -> tuple[Graph, UOp]:
    """One FUNCTION body `affine` called once from each of `scopes`."""
    x, w = UOp.param("x", (3,)), UOp.param("w", (3,))
    total, body = None, None
    for i, path in enumerate(scopes):
        def call(i=i):
            node = UOp.trace_function("affine", lambda a, b: a * b + 1.0, x * float(i + 2), w)
            return node.gettuple(0).sum()
        out = scoped(path, call)
        body = out.src[0].src[0].src[0] if body is None else body
        total = out if total is None else total + out
    return Graph({"loss": total}, inputs=[x, w]), body


def test_a_body_shared_by_two_scopes_sits_in_their_common_scope():
    graph, _ = _shared_body_graph(["model/layer.0", "model/layer.1"])
    grouping = Grouping(graph)
    body = _one(grouping, "FUNCTION affine (2 calls)")
    assert body.kind == "body"
    assert _path(body) == ["graph", "model", "FUNCTION affine (2 calls)"], _path(body)
    model = _one(grouping, "model")
    assert {c.label for c in model.children} == {"layer.0", "layer.1", "FUNCTION affine (2 calls)"}


def test_a_body_shared_across_top_level_scopes_sits_at_the_top():
    graph, _ = _shared_body_graph(["encoder/layer.0", "decoder/layer.0"])
    grouping = Grouping(graph)
    body = _one(grouping, "FUNCTION affine (2 calls)")
    assert body.parent is grouping.root


def test_a_body_called_from_one_scope_sits_in_it():
    graph, _ = _shared_body_graph(["model/layer.0/attention"])
    grouping = Grouping(graph)
    body = _one(grouping, "FUNCTION affine")
    assert _path(body) == ["graph", "model", "layer.0", "attention", "FUNCTION affine"]


def test_a_body_called_inside_another_body_sits_in_that_body():
    x = UOp.param("x", (3,))

    def outer(a):
        inner = UOp.trace_function("square", lambda b: b * b, a + 1.0)
        return inner.gettuple(0) * 3.0

    call = scoped("net", lambda: UOp.trace_function("outer", outer, x).gettuple(0).sum())
    grouping = Grouping(Graph({"y": call}, inputs=[x]))
    outer_group, inner_group = _one(grouping, "FUNCTION outer"), _one(grouping, "FUNCTION square")
    assert inner_group.parent is outer_group and outer_group.parent is _one(grouping, "net")


def test_scope_paths_nest_and_unnamed_nodes_join_their_users_group():
    x, w = UOp.param("x", (4,)), UOp.param("w", (4,))
    a = scoped("net/block.0/mlp", lambda: (x * w).relu())
    b = scoped("net/block.0/norm", lambda: a - a.mean())
    c = scoped("net/block.1", lambda: b.exp())
    graph = Graph({"y": c.sum()}, inputs=[x, w])
    grouping = Grouping(graph)
    mlp, norm, block0, block1, net = (_one(grouping, label) for label in ("mlp", "norm", "block.0", "block.1", "net"))
    assert mlp.parent is block0 and norm.parent is block0 and block0.parent is net and block1.parent is net
    assert net.parent is grouping.root and all(g.kind == "scope" for g in (mlp, norm, block0, block1, net))
    # relu and exp each made several nodes: a call group inside the scope
    assert _home(grouping, a).parent is mlp and _home(grouping, c).parent is block1
    # w has no metadata and one user (x * w, in mlp): it sits in mlp; the final sum is the root's
    assert _home(grouping, w) is mlp
    assert _home(grouping, graph.outputs["y"]) is grouping.root
    assert net.size == sum(1 for i in range(len(grouping.order)) if net in _ancestors(grouping.home[i]))


def _ancestors(group) -> list:
    chain = []
    while group is not None:
        chain.append(group)
        group = group.parent
    return chain


def test_backward_nodes_get_twins_beside_their_forward_groups():
    x = UOp.param("x", (4,))
    w0, w1 = UOp.param("w0", (4,)), UOp.param("w1", (4,))
    h = scoped("model/layer.0", lambda: (x * w0).tanh())
    y = scoped("model/layer.1", lambda: (h * w1).sigmoid())
    forward = Graph({"loss": scoped("loss", lambda: (y * y).sum())}, inputs=[x, w0, w1])
    graph, _ = differentiate(forward, ["w0", "w1"], keep_forward=True)
    grouping = Grouping(graph)
    model = _one(grouping, "model")
    for i in range(2):
        layer, twin = _one(grouping, f"layer.{i}"), _one(grouping, f"∇ layer.{i}")
        assert layer.twin is twin and twin.twin is layer
        assert twin.backward and not layer.backward
        assert layer.parent is model and twin.parent is model, (_path(layer), _path(twin))
    backward = [i for i, n in enumerate(grouping.order) if n.meta is not None and n.meta.backward and n.meta.scope
                and n.meta.scope.startswith("model/layer.")]
    assert backward, "the gradient made no scoped backward node"
    for i in backward:
        assert grouping.home[i].backward and grouping.home[i].label.startswith("∇")
