"""The viewer's grouping (views/html/groups.py) by structure, on small graphs built here:
a body shared by calls from two scopes sits in their common scope (not under the first
caller), a body called from inside another body sits in that body's group, scope paths
nest, a node without metadata joins the deepest group holding its users, and backward
nodes get ∇ twins beside their forward groups. Where no source location tells calls apart
(tinygrad), a function's unconnected calls in one scope are numbered apart and each ∇ twin
holds what the gradient made for its call (checked against locs planted before
differentiating); what cannot be told apart stays one group whose panel says why."""

from __future__ import annotations

import pytest

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


# ---------------------------------------------------------------- calls told apart without a loc

def tagged(name: str, path: str, fn, loc: str | None = None):
    """fn(), with every node it made given metadata name `name` and scope `path` (and `loc`):
    what tinygrad's export records (a function's name and a module's scope, no location).
    Nodes are shared by structure: each test names its params apart, so no node it tags
    is another test's."""
    since = next_serial()
    result = fn()
    stack = [result]
    while stack:
        node = stack.pop()
        if node.serial < since or (node.meta is not None and node.meta.scope == path):
            continue
        node.set_meta(Metadata(name=name, loc=loc, scope=path))
        stack.extend(node.src)
    return result


def _made(fn) -> set:
    """The nodes fn() made (by serial), with its result."""
    since = next_serial()
    out = fn()
    found, stack = set(), [out]
    while stack:
        node = stack.pop()
        if node.serial >= since and node not in found:
            found.add(node)
            stack.extend(node.src)
    return out, found


def _differentiate_knowing_calls(forward: Graph, wrt: list[str], calls: dict[str, set]) -> tuple[Graph, dict]:
    """The gradient of `forward`, and which call each backward node was made for: each call's
    nodes get loc <call> while differentiating (backward nodes inherit it), then every loc is
    taken away again, as tinygrad records none."""
    for loc, nodes in calls.items():
        for node in nodes:
            node.set_meta(node.meta._replace(loc=loc))
    graph, _ = differentiate(forward, wrt, keep_forward=True)
    made_for: dict[str, set] = {loc: set() for loc in calls}
    for node in graph.nodes():
        if node.meta is not None and node.meta.loc in calls:
            if node.meta.backward:
                made_for[node.meta.loc].add(node)
            node.set_meta(node.meta._replace(loc=None))
    return graph, made_for


def _told_apart(name: str, number: int, calls: int) -> str:
    return (f"the nodes call #{number} of {name} here made: one of {calls} calls told apart as unconnected pieces "
            "of like ops, numbered in graph order (no source location tells them apart)")


def _group_nodes(grouping: Grouping, group) -> set:
    return {grouping.order[i] for i in group.nodes}


def _own(nodes: set) -> set:
    return {node for node in nodes if node.op not in (Ops.CONST, Ops.PARAM, Ops.BUFFER)}


def test_unconnected_calls_of_one_function_in_one_scope_are_numbered_apart_with_their_gradients():
    x1, x2 = UOp.param("nx1", (4,)), UOp.param("nx2", (4,))
    w1, w2 = UOp.param("nw1", (4,)), UOp.param("nw2", (4,))
    a, made_a = _made(lambda: tagged("linear", "net", lambda: (x1 * w1 + 1.0).sum()))
    b, made_b = _made(lambda: tagged("linear", "net", lambda: (x2 * w2 + 2.0).sum()))
    forward = Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x1, x2, w1, w2])
    # the gradient of call A reads A's input x1: that ties it to A (and B's to B)
    graph, made_for = _differentiate_knowing_calls(forward, ["nw1", "nw2"], {"A": made_a, "B": made_b})
    grouping = Grouping(graph)
    assert min(grouping.index[n] for n in made_a) < min(grouping.index[n] for n in made_b)  # graph order: A first
    net = _one(grouping, "net")
    assert {c.label for c in net.children} == {"linear #1", "linear #2"}  # __mul__ made one node: no group
    for number, call, backward in ((1, made_a, made_for["A"]), (2, made_b, made_for["B"])):
        group, twin = _one(grouping, f"linear #{number}"), _one(grouping, f"∇ linear #{number}")
        assert group.kind == "call" and group.twin is twin and twin.twin is group
        assert _own(_group_nodes(grouping, group)) == _own(call)
        assert backward and _group_nodes(grouping, twin) == backward  # what the gradient made for this call
        assert group.detail == _told_apart("linear", number, 2)
        assert twin.detail == "backward of " + _told_apart("linear", number, 2)
    assert _path(_one(grouping, "∇ linear #2")) == ["graph", "∇ net", "∇ linear #2"]


def test_calls_that_feed_each_other_stay_one_group_that_says_so():
    x, w1, w2 = UOp.param("fx", (4,)), UOp.param("fw1", (4,)), UOp.param("fw2", (4,))
    inner, made_inner = _made(lambda: tagged("linear", "net", lambda: x * w1 + 1.0))
    outer, made_outer = _made(lambda: tagged("linear", "net", lambda: (inner * w2 + 1.0).sum()))
    graph, _ = differentiate(Graph({"loss": outer}, inputs=[x, w1, w2]), ["fw1", "fw2"], keep_forward=True)
    grouping = Grouping(graph)
    group, twin = _one(grouping, "linear"), _one(grouping, "∇ linear")
    assert not _groups(grouping, "linear #1") and group.twin is twin
    assert _own(_group_nodes(grouping, group)) == _own(made_inner | made_outer)
    said = ("the nodes linear made here: one connected piece, so one call or several calls that feed each other "
            "(no source location tells calls apart)")
    assert group.detail == said and twin.detail == "backward of " + said


def test_a_gradient_two_calls_share_is_one_group_that_says_no_call_made_it_alone():
    x1, x2, w = UOp.param("x1", (4,)), UOp.param("x2", (4,)), UOp.param("w", (4,))
    a, made_a = _made(lambda: tagged("linear", "net", lambda: (x1 * w + 1.0).sum()))
    b, made_b = _made(lambda: tagged("linear", "net", lambda: (x2 * w + 1.0).sum()))
    forward = Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x1, x2, w])
    graph, made_for = _differentiate_knowing_calls(forward, ["w"], {"A": made_a, "B": made_b})
    grouping = Grouping(graph)
    # dw = dA/dw + dB/dw: the gradient of each call, summed into one piece
    shared = _one(grouping, "∇ linear")
    assert _group_nodes(grouping, shared) == made_for["A"] | made_for["B"] and shared.twin is None
    assert shared.detail == ("backward of the nodes of the 2 calls of linear here that no one call can be said to "
                             "have made (gradients of several calls summed in one piece, or nothing ties them to one "
                             "call)")
    assert _own(_group_nodes(grouping, _one(grouping, "linear #1"))) == _own(made_a)
    assert _own(_group_nodes(grouping, _one(grouping, "linear #2"))) == _own(made_b)


def test_gradients_nothing_ties_to_one_call_stay_unmatched():
    x, w1, w2 = UOp.param("mx", (4,)), UOp.param("mw1", (4,)), UOp.param("mw2", (4,))
    a = tagged("linear", "net", lambda: (x * w1 + 1.0).sum())
    b = tagged("linear", "net", lambda: (x * w2 + 1.0).sum())
    forward = Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x, w1, w2])
    graph, _ = differentiate(forward, ["mw1", "mw2"], keep_forward=True)
    grouping = Grouping(graph)
    # each call's gradient reads x (both calls' input) and a gradient of a * b (next to both)
    assert {g.label for g in _one(grouping, "∇ net").children} == {"∇ linear", "∇ __mul__"}
    assert _one(grouping, "∇ linear").detail.startswith("backward of the nodes of the 2 calls of linear here that no")
    assert _one(grouping, "linear #1").twin is None and _one(grouping, "linear #2").twin is None


def test_pieces_of_unlike_ops_stay_one_group_that_says_so():
    x, t = UOp.param("ux", (4,)), UOp.param("ut", (4,))
    logits = tagged("xent", "loss", lambda: (x * 2.0).exp())
    target = tagged("xent", "loss", lambda: t.relu() + 1.0)
    joined = tagged("__mul__", "loss", lambda: logits * target)
    graph = Graph({"y": tagged("xent", "loss", lambda: joined.sum())}, inputs=[x, t])
    grouping = Grouping(graph)
    group = _one(grouping, "xent")
    assert not _groups(grouping, "xent #1")
    assert group.detail == ("the nodes xent made here: 3 unconnected pieces of unlike ops, so one call in parts or "
                            "several calls (no source location tells calls apart)")


def test_calls_a_source_location_tells_apart_keep_their_builder_groups():
    x = UOp.param("sx", (4,))
    a = tagged("softmax", "net", lambda: (x * 2.0).exp() + 1.0, loc="model.py:3")
    b = tagged("softmax", "net", lambda: (a * 3.0).exp() + 1.0, loc="model.py:4")
    grouping = Grouping(Graph({"y": b.sum()}, inputs=[x]))
    first, second = _one(grouping, "softmax #1"), _one(grouping, "softmax #2")
    assert first.detail == "the nodes one call of softmax made at model.py:3"
    assert second.detail == "the nodes one call of softmax made at model.py:4"


def test_a_tinygrad_lstms_numbered_gradients_are_what_the_gradient_made_for_those_calls():
    """The LSTM cell of tests/tinygrad_zoo.py unrolled twice (like calls told apart: two
    `linear`s, six sigmoids, four tanhs, two slices; the GPT's blocks have none since each
    `linear` is in its own Linear; the tanhs share one node, tinygrad's `1.0 * -1.0`): each forward call the grouping numbers gets a loc before differentiating, so each backward node says which call it was made for; with
    the locs taken away again, every node of a numbered ∇ group was made for that call."""
    import sys

    import pytest
    limit = sys.getrecursionlimit()
    pytest.importorskip("tinygrad", reason="tinygrad is not installed for this Python (make test installs it)")
    sys.setrecursionlimit(limit)
    from tinygrad_zoo import lstm_unrolled
    from uopcli.interop.tinygrad import to_graph
    case = lstm_unrolled()
    forward = to_graph(case.outputs, case.inputs, case.state_dict)
    numbered = {}
    for group in Grouping(forward).groups:
        if group.kind == "call" and " #" in group.label:
            numbered[f"{group.label}@{group.parent.label}"] = {forward.nodes()[i] for i in group.nodes}
    assert sorted(numbered) == ["__getitem__ #1@other", "__getitem__ #2@other", "linear #1@graph", "linear #2@graph",
                                *(f"sigmoid #{i}@other" for i in range(1, 7)),
                                *(f"tanh #{i}@other" for i in range(1, 5))]
    wrt = [p.arg for p in forward.inputs if p.dtype.is_float]
    graph, made_for = _differentiate_knowing_calls(forward, wrt, {k: _own(v) for k, v in numbered.items()})
    grouping = Grouping(graph)
    twins = []
    for group in grouping.groups:
        if group.kind == "call" and group.backward and " #" in group.label:
            twin = group.twin
            assert twin is not None and twin.label == group.label[2:]
            if f"{twin.label}@{twin.parent.label}" in made_for:  # not: `__mul__ #3`, numbered only after
                assert _group_nodes(grouping, group) <= made_for[f"{twin.label}@{twin.parent.label}"], group.label
                twins.append(group.label)
    # (the gradients of tanh #2 and #4, of the cell state, are summed with others': unmatched)
    assert sorted(twins) == [*(f"∇ sigmoid #{i}" for i in range(1, 7)), "∇ tanh #1", "∇ tanh #3"]


_LSTM_AFTER_ANOTHER_EXPORT = """
import sys
sys.path.insert(0, sys.argv[1])
from tinygrad import Tensor
from uopcli.interop.tinygrad import to_graph
from uopcli.views.html.groups import Grouping
if sys.argv[2] == "after":  # names tinygrad's node for 1.0 * -1.0 `__sub__`, for the whole process
    to_graph({"o": Tensor([1.0, 2.0]) - 1.0}, {})
from tinygrad_zoo import lstm_unrolled
case = lstm_unrolled()
forward = to_graph(case.outputs, case.inputs, case.state_dict)
print(sorted(f"{g.label}@{g.parent.label}" for g in Grouping(forward).groups if g.kind == "call" and " #" in g.label))
"""


@pytest.mark.parametrize("history", ["alone", "after"])
def test_a_tinygrad_lstms_calls_do_not_depend_on_what_the_process_exported_before(history):
    """CI's failure, replayed in a fresh process: exporting `x - 1.0` first gave the LSTM's
    shared `1.0 * -1.0` the name `__sub__`, and its four tanhs were told apart only then."""
    import os
    import subprocess
    import sys
    pytest.importorskip("tinygrad", reason="tinygrad is not installed for this Python (make test installs it)")
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", _LSTM_AFTER_ANOTHER_EXPORT, here, history],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(["__getitem__ #1@other", "__getitem__ #2@other", "linear #1@graph",
                                       "linear #2@graph", *(f"sigmoid #{i}@other" for i in range(1, 7)),
                                       *(f"tanh #{i}@other" for i in range(1, 5))])


def _sigmoid_times_minus_two(v: UOp) -> UOp:
    """sigmoid(v * -2) summed, the -2 as tinygrad builds a Python number into a product:
    `1.0 * -2.0` reshaped and expanded, nodes of constants alone, one set for every call."""
    minus_two = UOp.make(Ops.MUL, v.dtype, (UOp.const(1.0), UOp.const(-2.0))).reshape((1,)).expand(v.shape)
    return (v * minus_two).sigmoid().sum()


@pytest.mark.parametrize("named", [Metadata(name="squash", scope="net"), Metadata(name="__sub__"), None],
                         ids=["by-the-first-call", "by-another-model-before", "by-none"])
def test_nodes_of_constants_calls_share_neither_join_them_nor_follow_their_names(named):
    """tinygrad names a shared node after whichever Tensor method made it first in the
    process: CI's LSTM export found tanh's `1.0 * -1.0` already named `__sub__` by an earlier
    test's `x - 1.0`, and its tanhs were four calls there, one (joined through it) alone.
    Whatever the shared nodes are named, the calls are told apart alike, the shared nodes sit
    with their users, and each call's gradient (which reads them) is matched to its call."""
    suffix = "none" if named is None else named.name  # each case's nodes its own (nodes are shared by structure)
    x1, x2 = UOp.param("cx1" + suffix, (4,)), UOp.param("cx2" + suffix, (4,))
    a, made_a = _made(lambda: tagged("squash", "net", lambda: _sigmoid_times_minus_two(x1 * 3.0)))
    b, made_b = _made(lambda: tagged("squash", "net", lambda: _sigmoid_times_minus_two(x2 * 3.0)))
    shared = [n for n in a.toposort() if n in b.toposort() and n.op != Ops.CONST]
    assert [n.op for n in shared] == [Ops.MUL, Ops.RESHAPE, Ops.EXPAND]
    before = [n.meta for n in shared]  # (another test's nodes too: put back)
    try:
        for node in shared:
            node.set_meta(named)
        forward = Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x1, x2])
        grouping = Grouping(forward)
        net = _one(grouping, "net")
        assert sorted(c.label for c in net.children) == ["squash #1", "squash #2"]
        assert _own(_group_nodes(grouping, _one(grouping, "squash #1"))) == _own(made_a) - set(shared)
        assert _own(_group_nodes(grouping, _one(grouping, "squash #2"))) == _own(made_b)
        assert all(_home(grouping, node) is net for node in shared)  # their users' deepest common group
        calls = {"A": made_a - set(shared), "B": made_b}
        graph, made_for = _differentiate_knowing_calls(forward, [x1.arg, x2.arg], calls)
        grouping = Grouping(graph)
        for number, call in ((1, "A"), (2, "B")):
            assert _own(_group_nodes(grouping, _one(grouping, f"∇ squash #{number}"))) == _own(made_for[call])
    finally:
        for node, meta in zip(shared, before):
            node.set_meta(meta)


def test_a_node_of_constants_one_call_uses_is_that_calls_own():
    """A constant expression only one call builds (the LSTM's first `linear` reshapes the zero
    state) is that call's: the calls stay alike, each with its own."""
    x1, x2 = UOp.param("ox1", (4,)), UOp.param("ox2", (4,))
    calls = []
    for x, value in ((x1, 2.375), (x2, 5.125)):
        def call(x=x, value=value):
            return (x * UOp.make(Ops.MUL, x.dtype, (UOp.const(value), UOp.const(-1.0))) + 1.0).sum()
        calls.append(_made(lambda call=call: tagged("scale", "net", call)))
    (a, made_a), (b, made_b) = calls
    grouping = Grouping(Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x1, x2]))
    assert sorted(c.label for c in _one(grouping, "net").children) == ["scale #1", "scale #2"]
    for number, made in ((1, made_a), (2, made_b)):
        group = _one(grouping, f"scale #{number}")
        assert _own(_group_nodes(grouping, group)) == _own(made)
        constant = [n for n in made if n.op == Ops.MUL and all(s.op == Ops.CONST for s in n.src)]
        assert len(constant) == 1 and _home(grouping, constant[0]) is group


def test_an_input_that_carries_a_calls_name_is_no_part_of_its_calls():
    """A file may give an input metadata (a hand-edited file, an exporter's tag): an input
    named like a function told apart into calls is none of them, and the page is drawn
    (it raised KeyError: the input has no piece)."""
    x1, x2 = UOp.param("px1", (4,)), UOp.param("px2", (4,))
    a = tagged("affine", "net", lambda: (x1 * 2.0 + 1.0).sum())
    b = tagged("affine", "net", lambda: (x2 * 2.0 + 1.0).sum())
    x1.set_meta(Metadata(name="affine", scope="net"))
    try:
        grouping = Grouping(Graph({"loss": tagged("__mul__", "net", lambda: a * b)}, inputs=[x1, x2]))
        assert sorted(c.label for c in _one(grouping, "net").children) == ["affine #1", "affine #2"]
    finally:
        x1.set_meta(None)
