"""Graph substitution: a graph with some of its nodes swapped for others, every node
above a swapped one rebuilt on the new sources (`substitute`), and the rebuild of one
node on new sources that it and the rewrite walks share (`rebuilt`).

The callers differ in three ways, each an option of `substitute`:

- into_bodies: whether a FUNCTION's or CALL's body (src[0]) is substituted too. The
  gradient's closed bodies say no: a nested body is a scope of its own, with its own slot
  PARAMs, and renumbering the outer slots must not reach into it. `check` says yes: a
  frozen DETACH is the same node wherever it appears.
- into_backward: whether a CALL's backward body (its arg's `grad`) is substituted too, the
  CALL's arg rebuilt around the new body. `check` says yes (the file format walks backward
  bodies as part of the graph); `graph_rewrite` leaves them as they are.
- keep_meta: whether a rebuilt node that has no metadata of its own takes that of the node
  it rebuilds (it still comes from the same front-end call). The rewrite walks say yes;
  the gradient says no, as its caller tags the new nodes with the call's metadata.

The walk is iterative (a one-million-node chain is fine) and does not descend below a
swapped node: what is under it is not part of the result.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .ops import CALLS, Ops
from .uop import CallArg, UOp

_make = UOp.make
_SAME = object()  # "the node's own arg"


def rebuilt(node: UOp, src: tuple, keep_meta: bool = True, arg=_SAME) -> UOp:
    """`node` made again on sources `src` (and `arg`, when given); with `keep_meta`, the
    result takes `node`'s metadata if it has none yet (the first tag wins)."""
    out = _make(node.op, node.dtype, src, node.arg if arg is _SAME else arg)
    if keep_meta and out.meta is None and node.meta is not None:
        out.set_meta(node.meta)
    return out


def substitute(roots: Sequence[UOp], mapping: Mapping[UOp, UOp], *, into_bodies: bool = True,
               into_backward: bool = False, keep_meta: bool = False) -> list[UOp]:
    """`roots` with each key of `mapping` replaced by its value, and every node that
    reaches a key rebuilt (see the module docstring for the options). The values are
    taken as they are: they are not substituted in turn."""
    done: dict[UOp, UOp] = dict(mapping)
    stack = list(roots)
    push, pop = stack.append, stack.pop
    while stack:
        node = stack[-1]
        if node in done:
            pop()
            continue
        src = node.src
        keep_body = not into_bodies and node.op in CALLS
        grad = node.arg.grad if into_backward and node.op == Ops.CALL else None
        waiting = False
        for s in (src[1:] if keep_body else src):
            if s not in done:
                push(s)
                waiting = True
        if grad is not None and grad not in done:
            push(grad)
            waiting = True
        if waiting:
            continue
        pop()
        if keep_body:
            new_src = (src[0], *[done[s] for s in src[1:]])
        else:
            new_src = tuple([done[s] for s in src])
        new_grad = None if grad is None else done[grad]
        if new_grad is not grad:
            done[node] = rebuilt(node, new_src, keep_meta, CallArg(node.arg.name, new_grad))
        elif new_src == src:
            done[node] = node
        else:
            done[node] = rebuilt(node, new_src, keep_meta)
    return [done[r] for r in roots]
