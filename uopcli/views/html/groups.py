"""Nodes grouped into levels: the tree of groups the page opens one level at a time.

Every node gets one home group. The tree, from the root (the whole graph) down:
- A FUNCTION/CALL body (and a CALL's backward body) is a group, placed in the group of the
  call that uses it (the common ancestor of its calls' groups when several share it); inside
  it, its own nodes group as below.
- The node metadata `scope` ("encoder/layer.0/attention") is split on `/` into nested groups.
- Inside its scope, the nodes one front-end call made (same metadata name, loc and scope:
  `softmax`, `layernorm`) are a group when there are two or more of them. Where no source
  location tells calls apart (tinygrad), the unconnected pieces of one function's nodes in
  one scope are its calls, numbered apart (`linear #1`, `linear #2`; calls.py), and each
  backward piece joins the call it is matched to (its ∇ group numbered alike) or, matched
  to none, one `∇ linear` group that says so.
- Backward nodes (metadata `backward`) get a parallel tree of `∇` groups: the nodes made for
  forward scope `layer.0` sit in group `∇ layer.0`, beside `layer.0` (its `twin`).
- A node with neither a name nor a scope (a graph input, an op written by hand, a gradient
  sum) joins the deepest group holding all its users of its own direction (forward users
  for a forward node), so a layer's weights sit in the layer.
- A forward node computed from constants alone (`-1.0` as `1.0 * -1.0`) joins its users'
  group the same way, whatever its metadata says (a front end shares it between every
  call that builds it, and names it after whichever built it first), unless it is one
  numbered call's own (calls.py); so does an input named like calls told apart.
- Constants, BUFFERs and slot PARAMs are drawn as a copy beside each user (as in
  `uopgrad render`); their home is their first user's group.
- A level never holds more than MAX_ITEMS items: more are split, in canonical order, into
  `part` groups (forward and backward apart), parts of parts if need be.
- A level (the graph, a scope) of more than FOLD_AT items folds its single nodes and small
  groups into `other` and `∇ other`.

Every walk is iterative and in canonical order (Graph.nodes()), so the same graph gives the
same tree.
"""

from __future__ import annotations

from collections import Counter

from ...core.graph import Graph
from ...core.ops import Ops
from ...core.uop import UOp
from ...core.walks import scope_sources
from ..graphviz import MAIN, _scope_walk
from .calls import UNMATCHED, Calls
from ..graphviz import _children as sources_with_bodies  # sources, and a CALL's backward body

MAX_ITEMS = 500  # items one level may hold: dot lays out 500 boxes in about a second
FOLD_AT = 30     # items a level shows as boxes before its small ones fold into `other`
FOLD_SIZE = 8    # a group of at most this many nodes is small: folded there


def is_copied(node: UOp) -> bool:
    """Drawn as a copy beside each user, never on its own (a constant, a BUFFER, a slot)."""
    return node.op == Ops.CONST or node.op == Ops.BUFFER or (node.op == Ops.PARAM and isinstance(node.arg, int))


class Group:
    __slots__ = ("id", "parent", "label", "kind", "backward", "twin", "children", "nodes", "depth", "first",
                 "size", "ops", "detail")

    def __init__(self, gid: int, parent: "Group | None", label: str, kind: str, backward: bool, detail: str = ""):
        self.id = gid
        self.parent = parent
        self.label = label
        self.kind = kind            # graph, body, scope, call, part, other
        self.backward = backward
        self.twin: Group | None = None   # a ∇ group's forward group, and back
        self.children: list[Group] = []
        self.nodes: list[int] = []       # direct nodes (canonical indices)
        self.depth = 0 if parent is None else parent.depth + 1
        self.first = 1 << 62             # the smallest canonical index inside (orders siblings)
        self.size = 0                    # nodes inside, all levels down
        self.ops: Counter = Counter()    # op -> count, all levels down
        self.detail = detail             # what the details panel says about the group


class Grouping:
    """The group tree of a graph: `groups` (root first), `home[i]` the group of node i."""

    def __init__(self, graph: Graph):
        self.order = graph.nodes()
        self.index = {node: i for i, node in enumerate(self.order)}
        self.groups: list[Group] = []
        self.root = self._new(None, "graph", "graph", False)
        self.home: list[Group | None] = [None] * len(self.order)
        self._keyed: dict = {}
        roots = [*graph.outputs.values(), *graph.inputs]
        self.members, self.callers = _scope_walk(roots)
        self._place_contexts()
        self._finish()

    # ------------------------------------------------------------------ building
    def _new(self, parent: Group | None, label: str, kind: str, backward: bool, detail: str = "") -> Group:
        group = Group(len(self.groups), parent, label, kind, backward, detail)
        self.groups.append(group)
        if parent is not None:
            parent.children.append(group)
        return group

    def _place_contexts(self) -> None:
        """The main graph, then each body once every context that calls it is placed (a
        body's group goes where its calls are)."""
        context_group: dict = {MAIN: self.root}
        placed = {MAIN}
        pending = [s for s in self.members if s is not MAIN]
        self._place_context(MAIN, self.root)
        while pending:
            waiting = []
            for body in pending:
                if any(scope not in placed for scope, _ in self.callers[body]):
                    waiting.append(body)
                    continue
                context_group[body] = self._body_group(body)
                self._place_context(body, context_group[body])
                placed.add(body)
            if len(waiting) == len(pending):  # cannot happen in a DAG; place the rest at the top
                for body in waiting:
                    self._place_context(body, self._body_group(body, self.root))
                break
            pending = waiting

    def _body_group(self, body: UOp, parent: Group | None = None) -> Group:
        calls = [call for _, call in self.callers[body]]
        if parent is None:
            homes = [self.home[self.index[call]] for call in calls if self.home[self.index[call]] is not None]
            parent = common_ancestor(homes) if homes else self.root
        uses = []
        for call in dict.fromkeys(calls):
            if call.op == Ops.CALL and call.arg.grad is body:
                uses.append(f"∇ backward body of CALL {call.arg.name}")
            else:
                uses.append(f"{call.op} {call.arg.name if call.op == Ops.CALL else call.arg}")
        label = uses[0] + (f" ({len(calls)} calls)" if len(calls) > 1 else "")
        backward = uses[0].startswith("∇") or (body.meta is not None and body.meta.backward)
        if backward and not label.startswith("∇"):
            label = "∇ " + label
        group = self._new(parent, label, "body", backward, "; ".join(dict.fromkeys(uses)))
        group.first = self.index[body]
        return group

    def _place_context(self, scope, top: Group) -> None:
        """Home groups for one context's own nodes: by metadata, then (for nodes without a
        name or scope) by their users, in reverse canonical order so users come first."""
        nodes = [n for n in self.members[scope] if not is_copied(n) and self.home[self.index[n]] is None]
        self._calls = Calls(nodes, _call_key)
        by_users = self._calls.loose  # a constant no one call owns: its metadata names whoever made it first
        calls = Counter(_call_key(n.meta) for n in nodes if n.meta is not None and n.meta.name and n not in by_users)
        made = Counter((_call_key(n.meta._replace(backward=False)), p, n.meta.backward)
                       for n, p in self._calls.piece.items())
        self._forward = Counter()  # scope path prefix -> forward nodes under it, () the context
        for node in nodes:
            if not _is_backward(node):
                parts = _scope_parts(node.meta)
                self._forward.update(tuple(parts[:d]) for d in range(len(parts) + 1))
        self._branch: dict[tuple, int] = {}
        users: dict[UOp, list[UOp]] = {}
        for node in nodes:
            for src in scope_sources(node):
                users.setdefault(src, []).append(node)
        for node in reversed(nodes):
            meta = node.meta
            if meta is not None and (meta.name or meta.scope) and node not in by_users:
                piece = self._calls.piece.get(node)
                if piece is None:
                    own = calls[_call_key(meta)] > 1
                else:  # one call of several told apart: a group when either side made two nodes
                    key = _call_key(meta._replace(backward=False))
                    own = max(made[key, piece, False], made[key, piece, True]) > 1
                group = self._meta_group(top, meta, own, piece)
            else:
                group = self._users_group(top, node, users.get(node, ()))
            self.home[self.index[node]] = group

    def _meta_group(self, top: Group, meta, own_group: bool, piece: int | None = None) -> Group:
        parts = _scope_parts(meta)
        backward = bool(meta.backward)
        branch = self._branch_depth(parts) if backward else len(parts)
        group, path = top, ()
        for depth, part in enumerate(parts):
            path += (part,)
            apart = backward and depth >= branch
            group = self._keyed_group(group, (top.id, apart, path), part, "scope", apart,
                                      "scope " + "/".join(path))
        if own_group and meta.name:
            key = (top.id, backward, path, meta.name, meta.loc, piece)
            forward_key = _call_key(meta._replace(backward=False))
            label, detail = _call_text(meta, piece, self._calls.count.get(forward_key),
                                       self._calls.parts.get(forward_key))
            group = self._keyed_group(group, key, label, "call", backward, detail)
        return group

    def _branch_depth(self, parts: list[str]) -> int:
        """Where a backward node's path leaves the forward tree for the ∇ tree: at the first
        scope that holds at most half of its parent's forward nodes. So the ∇ twin of each
        block of `model/block.<i>` sits beside it inside `model`, not one `∇ model` beside
        `model` (a wrapper that holds everything is no place to compare)."""
        key = tuple(parts)
        found = self._branch.get(key)
        if found is None:
            found = max(len(parts) - 1, 0)  # none holds half or less: the deepest scope gets the ∇ twin
            for depth in range(len(parts)):
                if self._forward[key[:depth + 1]] * 2 <= self._forward[key[:depth]]:
                    found = depth
                    break
            self._branch[key] = found
        return found

    def _keyed_group(self, parent: Group, key: tuple, label: str, kind: str, backward: bool, detail: str) -> Group:
        group = self._keyed.get(key)
        if group is None:
            group = self._keyed[key] = self._new(parent, ("∇ " if backward else "") + label, kind, backward,
                                                 ("backward of " if backward else "") + detail)
            twin = self._keyed.get((key[0], not backward, *key[2:]))
            if twin is not None:
                group.twin, twin.twin = twin, group
        return group

    def _users_group(self, top: Group, node: UOp, users) -> Group:
        backward = node.meta is not None and node.meta.backward
        homes = [self.home[self.index[u]] for u in users]
        same = [h for u, h in zip(users, homes) if h is not None and _is_backward(u) == backward]
        chosen = same or [h for h in homes if h is not None]
        group = common_ancestor(chosen, top) if chosen else top
        while group.kind == "call":  # a call's group holds only what that call made
            group = group.parent
        return group

    def _place_copies(self) -> None:
        """A copied node's home is its first user's group (an unused one stays at the top)."""
        for node in self.order:
            for src in sources_with_bodies(node):
                i = self.index[src]
                if self.home[i] is None and is_copied(src):
                    self.home[i] = self.home[self.index[node]]
                    self.home[i].nodes.append(i)
        for i, group in enumerate(self.home):
            if group is None:
                self.home[i] = self.root
                self.root.nodes.append(i)

    def _finish(self) -> None:
        for i, group in enumerate(self.home):
            if group is not None:
                group.nodes.append(i)
        self._totals()
        self._split_large()
        self._totals()
        self._fold_small()
        self._place_copies()
        self._totals()
        self._label_duplicates()
        for group in self.groups:
            group.children.sort(key=lambda g: g.first)
            group.nodes.sort()

    def _totals(self) -> None:
        """Depths top-down, then each group's first node, size and op mix bottom-up."""
        ordered = list(_descendants(self.root))
        for group in ordered:
            group.depth = 0 if group.parent is None else group.parent.depth + 1
            group.size, group.ops = len(group.nodes), Counter(self.order[i].op for i in group.nodes)
            group.first = min(group.nodes, default=1 << 62)
        for group in reversed(ordered):
            parent = group.parent
            if parent is not None:
                parent.first = min(parent.first, group.first)
                parent.size += group.size
                parent.ops.update(group.ops)

    def _label_duplicates(self) -> None:
        """Siblings with the same label (relu called twice in one scope) are numbered; a ∇
        group takes its forward twin's number."""
        for group in self.groups:
            for backward in (False, True):
                kin = sorted((c for c in group.children if c.backward == backward and c.kind not in ("part", "other")),
                             key=lambda g: g.first)
                seen = Counter(child.label for child in kin)
                count: Counter = Counter()
                for child in kin:
                    if backward and child.twin is not None and child.twin.parent is group:
                        child.label = "∇ " + child.twin.label
                    elif seen[child.label] > 1:
                        count[child.label] += 1
                        child.label = f"{child.label} #{count[child.label]}"

    def _split_large(self) -> None:
        """Levels of more than MAX_ITEMS items are split into parts, in canonical order: a
        group and its ∇ twin stay together (in a forward part), other backward items go to
        ∇ parts of their own; a level of more than MAX_ITEMS parts is split again."""
        work = list(self.groups)
        while work:
            group = work.pop()
            items = [(child.first, child) for child in group.children] + [(i, i) for i in group.nodes]
            if len(items) <= MAX_ITEMS:
                continue
            items.sort(key=lambda item: item[0])
            paired = {id(child.twin) for child in group.children
                      if not child.backward and child.twin is not None and child.twin.parent is group}
            forward: list[list] = []
            backward: list[list] = []
            for _, item in items:
                if isinstance(item, Group) and id(item) in paired:
                    continue  # goes with its forward twin
                if self._item_backward(item):
                    backward.append([item])
                elif isinstance(item, Group) and item.twin is not None and id(item.twin) in paired:
                    forward.append([item, item.twin])
                else:
                    forward.append([item])
            group.children, group.nodes = [], []
            for units, is_backward in ((forward, False), (backward, True)):
                chunk: list = []
                for unit in units:
                    if len(chunk) + len(unit) > MAX_ITEMS:
                        self._part(group, chunk, is_backward)
                        chunk = []
                    chunk.extend(unit)
                if chunk:
                    self._part(group, chunk, is_backward)
            if len(group.children) > MAX_ITEMS:
                work.append(group)

    def _fold_small(self) -> None:
        """A level (the graph or a scope) of more than FOLD_AT items folds its single nodes
        and its small groups (FOLD_SIZE nodes at most, with their ∇ twins) into an `other`
        group and a `∇ other` group: it stays readable at 1400x900 (ten-pixel labels)
        however many loose ops a front end left in it. A call's group and a body are left
        as they are: their nodes are what they show."""
        for group in list(self.groups):
            if group.kind not in ("graph", "scope"):
                continue
            nodes = [i for i in group.nodes if not is_copied(self.order[i])]
            if len(group.children) + len(nodes) <= FOLD_AT:
                continue
            folded = []
            for child in group.children:
                unit = [child] + ([child.twin] if child.twin is not None and child.twin.parent is group else [])
                if all(g.size <= FOLD_SIZE for g in unit):
                    folded.append(child)
            if len(folded) + len(nodes) < 2 or len(folded) == len(group.children):
                continue  # nothing would be left beside `other`: the level's nodes are what it shows
            gone = set(map(id, folded))
            group.children = [child for child in group.children if id(child) not in gone]
            moved = set(nodes)
            group.nodes = [i for i in group.nodes if i not in moved]
            for backward in (False, True):
                items = [g for g in folded if g.backward == backward] + \
                        [i for i in nodes if _is_backward(self.order[i]) == backward]
                if items:
                    self._other(group, items, backward)
        self._totals()

    def _other(self, parent: Group, items: list, backward: bool) -> Group:
        groups = sum(1 for item in items if isinstance(item, Group))
        what = ", ".join(filter(None, [f"{groups} small group{'s' if groups != 1 else ''}" if groups else "",
                                       f"{len(items) - groups} single node{'s' if len(items) - groups != 1 else ''}"
                                       if len(items) > groups else ""]))
        other = self._new(parent, ("∇ " if backward else "") + "other", "other", backward,
                          f"what {parent.label} holds besides its largest groups: {what}")
        for item in items:
            if isinstance(item, Group):
                item.parent = other
                other.children.append(item)
            else:
                other.nodes.append(item)
                self.home[item] = other
        return other

    def _item_backward(self, item) -> bool:
        return item.backward if isinstance(item, Group) else _is_backward(self.order[item])

    def _part(self, parent: Group, items: list, backward: bool) -> Group:
        number = sum(1 for c in parent.children if c.kind == "part") + 1
        part = self._new(parent, f"{'∇ ' if backward else ''}part {number}", "part", backward,
                         f"{len(items)} of the items of {parent.label}, in canonical order")
        for item in items:
            if isinstance(item, Group):
                item.parent = part
                part.children.append(item)
            else:
                part.nodes.append(item)
                self.home[item] = part
        part.first = min(item.first if isinstance(item, Group) else item for item in items)
        return part


def _descendants(group: Group):
    stack = [group]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def common_ancestor(groups, top: Group | None = None) -> Group:
    """The deepest group holding every one of `groups` (not above `top`'s level)."""
    found = groups[0]
    for group in groups[1:]:
        a, b = found, group
        while a.depth > b.depth:
            a = a.parent
        while b.depth > a.depth:
            b = b.parent
        while a is not b:
            a, b = a.parent, b.parent
        found = a
    if top is not None:
        holder = found
        while holder is not None and holder is not top:
            holder = holder.parent
        if holder is None:  # outside this context: stay at its top
            return top
    return found


def _scope_parts(meta) -> list[str]:
    return [] if meta is None or not meta.scope else [p for p in meta.scope.split("/") if p]


def _call_key(meta) -> tuple:
    return (meta.scope, meta.name, meta.loc, bool(meta.backward))


def _is_backward(node: UOp) -> bool:
    return node.meta is not None and bool(node.meta.backward)


def _call_text(meta, piece: int | None, calls: int | None, parts: int | None) -> tuple[str, str]:
    """The label and panel text of a call's group: `relu` (one call, calls that feed each
    other, or unlike pieces), `relu #2` (one of several calls told apart), and the panel
    says which."""
    name = meta.name
    if meta.loc:
        return name, f"the nodes one call of {name} made at {meta.loc}"
    if piece is None and parts:
        return name, (f"the nodes {name} made here: {parts} unconnected pieces of unlike ops, so one call in "
                      "parts or several calls (no source location tells calls apart)")
    if piece is None:
        return name, (f"the nodes {name} made here: one connected piece, so one call or several calls "
                      "that feed each other (no source location tells calls apart)")
    if piece == UNMATCHED:
        return name, (f"the nodes of the {calls} calls of {name} here that no one call can be said to have "
                      "made (gradients of several calls summed in one piece, or nothing ties them to one call)")
    return f"{name} #{piece + 1}", (f"the nodes call #{piece + 1} of {name} here made: one of {calls} calls told "
                                    "apart as unconnected pieces of like ops, numbered in graph order (no source "
                                    "location tells them apart)")
