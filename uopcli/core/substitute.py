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
from .uop import CallArg, UOp, make_shaped
from .walks import node_list

_make = UOp.make


def rebuilt(node: UOp, src: tuple) -> UOp:
    """`node` made again on sources `src`, keeping its metadata if the result has none
    yet (the first tag wins): it still comes from the same front-end call.

    Where every new source has the dtype and shape of the one it replaces (what the
    rewrite rows keep), the node is valid and has its shape as before: it is interned
    without inference, the cost of most new nodes."""
    if _same_interface(src, node.src):
        out = make_shaped(node.op, node.dtype, src, node.arg, node.shape)
    else:
        out = _make(node.op, node.dtype, src, node.arg)
    if out.meta is None and node.meta is not None:
        out.set_meta(node.meta)
    return out


def _same_interface(src: tuple, was: tuple) -> bool:
    if len(src) != len(was):
        return False
    for new, old in zip(src, was):
        if new.dtype is not old.dtype or (new.shape is not old.shape and new.shape != old.shape):
            return False
    return True


def _rebuilt_bare(node: UOp, src: tuple) -> UOp:
    return _make(node.op, node.dtype, src, node.arg)


def substitute(roots: UOp | Sequence[UOp], mapping: Mapping[UOp, UOp], *, into_bodies: bool = True,
               into_backward: bool = False, keep_meta: bool = False) -> list[UOp]:
    """`roots` with each key of `mapping` replaced by its value, and every node that
    reaches a key rebuilt (see the module docstring for the options). The values are
    taken as they are: they are not substituted in turn. One UOp is one root."""
    done: dict[UOp, UOp] = dict(mapping)
    rebuild = rebuilt if keep_meta else _rebuilt_bare
    roots = node_list(roots)
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
        if grad is not None and done[grad] is not grad:
            done[node] = _with_backward(node, new_src, done[grad], keep_meta)
        elif new_src == src:
            done[node] = node
        else:
            done[node] = rebuild(node, new_src)
    return [done[r] for r in roots]


def _with_backward(call: UOp, src: tuple, grad: UOp, keep_meta: bool) -> UOp:
    """A CALL rebuilt on `src` with backward body `grad`."""
    out = _make(call.op, call.dtype, src, CallArg(call.arg.name, grad))
    if keep_meta and out.meta is None and call.meta is not None:
        out.set_meta(call.meta)
    return out
