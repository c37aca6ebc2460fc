"""The walks over a graph (toposort: sources before users, iteratively), and the
conditions big walks and builds run in: a deep stack for the one recursive walk, the
cyclic garbage collector paused."""

from __future__ import annotations

import gc
import sys
import threading
from contextlib import contextmanager
from operator import attrgetter
from typing import TYPE_CHECKING, Iterable

from .ops import Ops

if TYPE_CHECKING:
    from .uop import UOp


def on_a_deep_stack(fn, *args, depth: int = 100_000, stack_bytes: int = 1 << 30):
    """fn(*args), run in a thread whose stack holds `stack_bytes` (reserved, touched only as
    it is used) with the recursion limit at `depth`. For the one walk that recurses, once
    per nesting level of function bodies (differentiating a FUNCTION differentiates its
    body): graphs of hundreds of nested functions would pass Python's default limit."""
    import threading
    outcome: list = []

    def run():
        try:
            outcome.append((True, fn(*args)))
        except BaseException as error:  # noqa: BLE001 - handed to the caller as it is
            outcome.append((False, error))

    limit, size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(limit, depth))
    threading.stack_size(stack_bytes)
    try:
        thread = threading.Thread(target=run, name="uopcli-deep-stack")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


@contextmanager
def no_gc():
    """Pause the cyclic garbage collector: UOp graphs are acyclic, and scanning millions of
    nodes while a graph grows costs far more than it could ever find.

    On the way out, what was made meanwhile is handed to the oldest generation (freeze then
    unfreeze: two list splices, no scan). Re-enabled as they were, the collector's first
    act would be to scan every node just made, only to promote it; as old objects they
    wait for the next full collection, which the program's own growth decides. Skipped
    when the program has frozen objects of its own (unfreeze would thaw them too).

    Threads share the collector: the first walk in pauses it, the last one out restores it
    (each thread on its own read "enabled?" while another had paused it, and could disable
    it after that one had enabled it again: off for good)."""
    with _pause_lock:
        if not _paused[0]:
            _paused[1] = gc.isenabled()
            gc.disable()
        _paused[0] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _paused[0] -= 1
            if not _paused[0] and _paused[1]:
                if not gc.get_freeze_count():
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


_paused = [0, False]  # walks inside no_gc in every thread; whether the collector ran before the first
_pause_lock = threading.Lock()


def node_list(nodes: UOp | Iterable[UOp]) -> list[UOp]:
    """`nodes` as a list, one UOp being one node: iterating a UOp gives its rows x[0],
    x[1], ... (as a tinygrad Tensor), new nodes nothing depends on."""
    from .uop import UOp
    return [nodes] if isinstance(nodes, UOp) else list(nodes)


def toposort(roots: UOp | Iterable[UOp], with_call_grads: bool = True) -> list[UOp]:
    """Post-order of a depth-first walk from `roots` in order (one UOp: that node), sources
    in order (iterative).

    With `with_call_grads`, a CALL's backward body is walked after its sources and before
    the CALL itself (the file format's canonical order)."""
    return _postorder(node_list(roots), _WITH_CALL_GRADS if with_call_grads else _SOURCES)


def scope_toposort(roots: Iterable[UOp], opaque: frozenset = frozenset()) -> list[UOp]:
    """Like toposort, but a FUNCTION or CALL contributes only its args: its body (and a
    CALL's backward body) is a scope of its own, with its own slot PARAMs. A node whose op
    is in `opaque` is placed without its sources (forward mode: an op whose tangent is zero
    whatever its sources' tangents are need not reach them)."""
    return _postorder(roots, _SCOPE, opaque)


# what _postorder walks under a node: its sources; plus a CALL's backward body; or, in a
# scope, a FUNCTION's or CALL's args only (scope_sources)
_SOURCES, _WITH_CALL_GRADS, _SCOPE = "sources", "with call grads", "scope"


def _postorder(roots: Iterable[UOp], children: str, opaque: frozenset = frozenset()) -> list[UOp]:
    """The post-order of a depth-first walk, walked as the file writer walks
    (formats/uop/writer.py's _canonical_nodes): a node is expanded when popped and placed
    at once if every child is placed; else it goes back on the stack under an _EMIT marker
    with its unplaced children on top (the first on top), and is placed when the marker
    comes up. A second copy of a node still on the stack is skipped. (Expanded means
    placed, or on the path being walked: a child of the node at hand can only be placed.)
    No iterator and no call per node: forward mode and every Graph.nodes() walk whole
    gradient graphs with it (an iterator per node was a third of the walk)."""
    order: list[UOp] = []
    expanded: set[UOp] = set()
    place, expand = order.append, expanded.add
    function, call, emit = Ops.FUNCTION, Ops.CALL, _EMIT
    plain, scoped = children == _SOURCES, children == _SCOPE
    for root in roots:
        if root in expanded:
            continue
        stack = [root]
        push, pop = stack.append, stack.pop
        while stack:
            node = pop()
            if node is emit:
                place(pop())
                continue
            if node in expanded:
                continue
            expand(node)
            src = node.src
            if opaque and node.op in opaque:
                src = ()
            elif not plain and (node.op == function or node.op == call):
                if scoped:
                    src = src[1:]
                elif node.op == call and node.arg.grad is not None:
                    src = (*src, node.arg.grad)
            count = len(src)  # unrolled for one and two children: most nodes
            if count == 1:
                child = src[0]
                if child not in expanded:
                    push(node)
                    push(emit)
                    push(child)
                    continue
            elif count == 2:
                first, second = src
                if second not in expanded:
                    push(node)
                    push(emit)
                    push(second)
                    if first not in expanded:
                        push(first)
                    continue
                if first not in expanded:
                    push(node)
                    push(emit)
                    push(first)
                    continue
            elif count:
                pending = [s for s in reversed(src) if s not in expanded]
                if pending:
                    push(node)
                    push(emit)
                    stack += pending
                    continue
            place(node)  # every child placed already: no marker round trip
    return order


_EMIT = None  # the stack marker "all children of the node below are placed": never a UOp


def creation_order(roots: Iterable[UOp]) -> list[UOp]:
    """Every node reachable from `roots` through sources, oldest first. A node is made
    after its sources, so this puts sources before users, like toposort; it costs one
    visit per node and a sort, where the post-order costs two visits (the rewrite walk's
    order: it needs no particular order among siblings)."""
    roots = list(roots)
    seen = set(roots)
    add = seen.add
    stack = list(seen)
    push, pop = stack.append, stack.pop
    while stack:
        for source in pop().src:
            if source not in seen:
                add(source)
                push(source)
    return sorted(seen, key=_serial)


_serial = attrgetter("serial")


def memoised_fold(root: UOp, memo: dict, children, combine):
    """memo[root], where memo[node] = combine(node, [memo[c] for c in children(node)]),
    computed sources first for root and every node under it not in memo yet (iterative:
    a chain of a million nodes is fine). memo keeps every value, across calls."""
    found = memo.get(root)
    if found is not None:
        return found
    stack = [root]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        below = children(node)
        pending = [child for child in below if child not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[node] = combine(node, [memo[child] for child in below])
    return memo[root]


def scope_sources(node: UOp) -> tuple[UOp, ...]:
    """The sources a node has in its own scope: a FUNCTION's or CALL's body is a scope of
    its own, so a call contributes only its args."""
    return node.src[1:] if node.op == Ops.FUNCTION or node.op == Ops.CALL else node.src


def free_slot(roots: Iterable[UOp]) -> UOp | None:
    """The first slot PARAM `roots` reach outside every FUNCTION/CALL body (slots belong to
    bodies), or None: a walk that does not enter bodies."""
    seen: set[UOp] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == Ops.PARAM and node.arg.__class__ is int:
            return node
        stack.extend(scope_sources(node))
    return None
