"""Module scopes for an exported tinygrad graph, from the state_dict's key paths.

The state_dict says which module owns each weight: `blocks.0.attn.q.weight` is a parameter
of module `blocks.0/attn/q` (a list index stays with its list's name). Where the export saw
the modules that made the nodes (module_calls.py, recorded as the model ran), each node is
in the module whose forward made it: a LayerNorm's normalisation in it, a Linear's or a
Conv's input reshapes and windows in it, what the parent's forward does between two of its
modules (an activation, a residual add) in the parent. Here only constants lose theirs.

Where nothing was recorded (the model ran before `uopcli.interop.tinygrad` was imported),
the scopes are guessed from the graph: tinygrad records which Tensor function made a node
(metadata `name`) but not which module called it. A node gets the `scope` of the deepest
module whose parameters it uses and whose inputs it takes, found in four passes over the
graph (each iterative, in canonical order); a node between two modules is ambiguous there
(`ln(enc(x))` and `enc(x).layernorm()` make the same nodes) and lands in the one before:

1. weights: a state_dict input, and a movement or cast of weights of one module, belong to
   that module (the transposes and reshapes of a Linear's weight);
2. seeds: a node reading weights directly belongs to their module (the deepest, where they
   are nested; where they are not, their common ancestor);
3. users, last node first: a node whose every user is placed belongs to the common
   ancestor of its users' modules (the normalisation of a LayerNorm before its weight,
   the input reshapes of a Linear, the one-hot of an Embedding);
4. sources, first node first: a node not yet placed belongs to the deepest module M such
   that each of its sources is inside M or an input of M (read by a node inside M): the
   residual `x + attn(ln1(x))` of a block takes the block's input and its attention's
   output, so it is in the block.
What none of these place (a loss, an op on the graph's own inputs only) has no scope and
stays at the top. A node without a name whose users all share one name (a permute that
tinygrad's `sum` made inside `linear`) takes that name, so it groups with its call.
"""

from __future__ import annotations

from ...core.graph import Graph
from ...core.ops import MOVEMENT, Ops
from ...core.uop import Metadata, UOp

_WEIGHT_VIEWS = MOVEMENT | {Ops.CAST, Ops.CONTIGUOUS, Ops.DETACH}
_LEAVES = (Ops.CONST, Ops.BUFFER, Ops.PARAM)


def module_of(key: str) -> tuple[str, ...]:
    """The module path of a state_dict key: `blocks.0.attn.q.weight` -> ("blocks.0", "attn",
    "q"); a numeric part stays with the part before it (a list and its index)."""
    parts: list[str] = []
    for part in key.split(".")[:-1]:
        if part.isdigit() and parts:
            parts[-1] += "." + part
        else:
            parts.append(part)
    return tuple(parts)


def assign_scopes(graph: Graph, weights: set[str], recorded: bool = False) -> None:
    """Set each node's metadata `scope` (see the module docstring); `weights` are the names
    of the inputs that came from the state_dict; `recorded`: the export gave the nodes the
    scopes of the modules that made them."""
    order = graph.nodes()
    users: dict[UOp, list[UOp]] = {}
    for node in order:
        for src in node.src:
            users.setdefault(src, []).append(node)
    free = _free(order)
    if recorded:
        _unscope_free(order, free)
        _inherit_names(order, users)
        return
    scope = _seeded(order, weights, free)
    _from_users(order, users, scope, free)
    _from_sources(order, scope, free)
    _inherit_names(order, users)
    for node in order:
        path = scope.get(node)
        if path and node not in free:
            meta = node.meta or Metadata()
            node.set_meta(meta._replace(scope="/".join(path)))


def _unscope_free(order: list, free: set) -> None:
    """Constants and what is made of them alone are shared among modules (tinygrad and the
    format keep one node for equal ones): drawn where their users are, not in a module."""
    for node in order:
        if node in free and node.meta is not None and node.meta.scope:
            node.set_meta(node.meta._replace(scope=None))


def _common(paths) -> tuple:
    paths = list(paths)
    first = paths[0]
    depth = len(first)
    for path in paths[1:]:
        depth = min(depth, len(path))
        for i in range(depth):
            if path[i] != first[i]:
                depth = i
                break
    return first[:depth]


def _deepest_or_common(paths: set) -> tuple:
    """The deepest of `paths` if they are nested (one chain), else their common ancestor."""
    deepest = max(paths, key=len)
    if all(deepest[:len(p)] == p for p in paths):
        return deepest
    return _common(paths)


def _free(order: list) -> set:
    """Leaves, and nodes computed from CONSTs and BUFFERs alone (a causal mask, 1/8): no
    scope of their own, they are drawn where their users are."""
    free: set = set()
    for node in order:
        if node.op in _LEAVES or all(s in free and s.op != Ops.PARAM for s in node.src):
            free.add(node)
    return free


def _seeded(order: list, weights: set[str], free: set) -> dict:
    """Passes 1 and 2: weights, their views, and the nodes that read them."""
    view: dict[UOp, tuple] = {}
    for node in order:
        if node.op == Ops.PARAM and node.arg in weights:
            view[node] = module_of(node.arg)
        elif node.op in _WEIGHT_VIEWS:
            found = {view.get(s) for s in node.src if s.op != Ops.CONST}
            if len(found) == 1 and None not in found:
                view[node] = found.pop()
    scope = {node: path for node, path in view.items() if node.op != Ops.PARAM}
    for node in order:
        if node in view or node in free:
            continue
        read = {view[s] for s in node.src if s in view}
        if read:
            scope[node] = _deepest_or_common(read)
    return scope


def _from_users(order: list, users: dict, scope: dict, free: set) -> None:
    """Pass 3: last node first, a node all of whose users are placed goes to their common
    module; then, first node first, no deeper than the common module of it and its placed
    sources: a node between two sibling modules (attention's softmax, after q and k and
    before o) is in their parent. One that ends at the top (between two top-level modules,
    a residual stream used by the next block and the one after) is left to pass 4."""
    placed = []
    for node in reversed(order):
        if node in scope or node in free:
            continue
        mine = users.get(node)
        if mine and all(u in scope for u in mine):
            common = _common(scope[u] for u in mine)
            if common:
                scope[node] = common
                placed.append(node)
    for node in reversed(placed):
        scope[node] = _common([scope[node], *(scope[s] for s in node.src if s in scope and s not in free)])
    for node in placed:  # and what only such a node uses follows it up (a causal mask's constants)
        scope[node] = _common([scope[node], *(scope.get(u, ()) for u in users[node])])
    for node in placed:
        if not scope[node]:  # between two top-level modules: pass 4 decides
            del scope[node]


def _from_sources(order: list, scope: dict, free: set) -> None:
    """Pass 4: first node first, the deepest module whose inputs and insides it takes."""
    read_in: dict[UOp, set] = {}  # node -> the modules of the placed nodes that read it
    for node in order:
        path = scope.get(node)
        if path:
            for src in node.src:
                read_in.setdefault(src, set()).add(path)
    for node in order:
        if node in scope or node in free:
            continue
        sources = [s for s in node.src if s not in free or s.op == Ops.PARAM]
        candidates = set()
        for src in sources:
            for path in (scope.get(src, ()), *read_in.get(src, ())):
                candidates.update(path[:d] for d in range(1, len(path) + 1))
        for module in sorted(candidates, key=len, reverse=True):
            if all(_inside(scope.get(s, ()), module) or any(_inside(p, module) for p in read_in.get(s, ()))
                   for s in sources):
                scope[node] = module
                for src in node.src:
                    read_in.setdefault(src, set()).add(module)
                break


def _inside(path: tuple, module: tuple) -> bool:
    return len(path) >= len(module) and path[:len(module)] == module


def _inherit_names(order: list, users: dict) -> None:
    """A node without a name whose users all have one same name takes it (last first, so
    a chain of unnamed nodes takes its users' name)."""
    for node in reversed(order):
        if node.op in _LEAVES or (node.meta is not None and node.meta.name):
            continue
        names = {u.meta.name if u.meta is not None else None for u in users.get(node, ())}
        if len(names) == 1 and None not in names:
            meta = node.meta or Metadata()
            node.set_meta(meta._replace(name=names.pop()))
