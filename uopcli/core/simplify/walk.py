"""The walk that applies a rule table to every node of a graph, to a fixpoint.

Nodes are visited once each, sources before users (an iterative post-order: a
one-million-node chain is fine). A node is rebuilt on its sources' results, then the
table is applied; a replacement is itself brought to its fixpoint before its users see it
(its few new nodes only: everything else is final already). So a second pass over the
result finds nothing to do: simplification is idempotent.

Speed: most nodes match no row. The table is indexed by the node's op and its sources'
ops (cached per such signature), so such a node costs a dictionary lookup, and a rule's
pattern is only tried where its op-level shape fits.

Metadata: a rebuilt node keeps its own; the new nodes a rule makes take the metadata of
the node they replace (a backward node's replacement stays backward); a node that was
already in the graph keeps its own (the first tag wins).
"""

from __future__ import annotations

from typing import Sequence

from ...errors import UOpError
from ..pattern import _ANY, PatternMatcher
from ..substitute import rebuilt
from ..uop import UOp, next_serial, tag_new_nodes
from ..walks import no_gc, toposort

_MAX_CHAIN = 200  # successive rewrites of one node before the rules count as looping


def only_when(signature_test):
    """Mark a row's function with a test on its signature, (op, dtype, *source ops): the
    row is tried only on nodes whose signature passes (tested once per signature)."""
    def mark(fn):
        fn.signature_test = signature_test
        return fn
    return mark


class _Dispatch:
    """Rows by signature (the node's op and dtype, its sources' ops): each signature's rows, in
    table order, computed once. A row whose pattern says no more than its signature
    already does (ops, and names to bind) binds its names directly instead of matching."""

    def __init__(self, matchers: Sequence[PatternMatcher]):
        import inspect
        self.rows = [(p, fn, "ctx" in inspect.signature(fn).parameters, getattr(fn, "signature_test", None),
                      _direct_binder(p)) for m in matchers for p, fn in m.rules]
        self.by_signature: dict[tuple, list] = {}

    def candidates(self, key: tuple) -> list:
        rows = self.by_signature[key] = [(p, fn, wants_ctx, binder) for p, fn, wants_ctx, test, binder in self.rows
                                         if _fits(p, key) and (test is None or test(key))]
        return rows


def _plain(pattern) -> bool:
    """A source pattern that checks nothing but its ops (which the signature has checked)
    and perhaps its arg."""
    return pattern.dtypes is None and pattern.src is None


def _direct_binder(pattern):
    """A function node -> bindings for a pattern with plain sources, or None."""
    if pattern.arg is not _ANY or pattern._src_each:  # the node's own dtype is in the signature
        return None
    src = pattern.src or ()
    if not all(_plain(p) for p in src):
        return None
    names = [(i, p.name) for i, p in enumerate(src) if p.name]
    if len({name for _, name in names}) != len(names) or pattern.name in {name for _, name in names}:
        return None  # a name bound twice must be the same node: let match check it
    args = [(i, p.arg) for i, p in enumerate(src) if p.arg is not _ANY]
    if args:  # sources with a fixed arg (a CONST's value): checked first, then bound
        def bind(node):
            for i, wanted in args:
                arg = node.src[i].arg
                if arg != wanted or (arg.__class__ is bool) is not (wanted.__class__ is bool):
                    return None
            return plain(node)
        plain = _names_binder(pattern.name, names)
        return bind
    return _names_binder(pattern.name, names)


def _names_binder(top, names):
    if not names:
        return (lambda node: {top: node}) if top else (lambda node: {})
    if top:
        return lambda node: {top: node, **{name: node.src[i] for i, name in names}}
    return lambda node: {name: node.src[i] for i, name in names}


def _fits(pattern, key: tuple) -> bool:
    """Whether `pattern` can match a node whose op, dtype and source ops are `key`."""
    op, dtype, src_ops = key[0], key[1], key[2:]
    if pattern.ops is not None and op not in pattern.ops:
        return False
    if pattern.dtypes is not None and dtype not in pattern.dtypes:
        return False
    src = pattern.src
    if src is None:
        return True
    if pattern._src_each:
        return src.ops is None or all(s in src.ops for s in src_ops)
    if len(src) != len(src_ops):
        return False
    return all(p.ops is None or s in p.ops for p, s in zip(src, src_ops))


class Rewriter:
    """Applies tables (tried in order, row by row) to graphs; `ctx` is per walk."""

    def __init__(self, *matchers: PatternMatcher):
        self.dispatch = _Dispatch(matchers)

    def rewrite_roots(self, roots: Sequence[UOp]) -> list[UOp]:
        done: dict[UOp, UOp] = {}
        ctx: dict = {}
        final = self._final
        rows_of = self.dispatch.by_signature
        with no_gc():
            for original in toposort(roots, with_call_grads=False):
                node = original
                src = original.src
                n_src = len(src)
                if n_src == 2:
                    a, b = done[src[0]], done[src[1]]
                    if a is not src[0] or b is not src[1]:
                        node = rebuilt(original, (a, b))
                    key = (node.op, node.dtype, a.op, b.op)
                elif n_src == 1:
                    a = done[src[0]]
                    if a is not src[0]:
                        node = rebuilt(original, (a,))
                    key = (node.op, node.dtype, a.op)
                elif n_src:
                    new_src = tuple([done[s] for s in src])
                    if new_src != src:
                        node = rebuilt(original, new_src)
                    key = (node.op, node.dtype, *[s.op for s in new_src])
                else:
                    key = (node.op, node.dtype)
                if rows_of.get(key, True):  # rows to try (or a signature not seen yet)
                    done[original] = final(node, ctx, done, 0)
                else:                       # no row for this signature: final as it is
                    done[original] = done[node] = node
        return [done[r] for r in roots]

    def _final(self, node: UOp, ctx, done: dict, depth: int) -> UOp:
        """node (whose sources are final) brought to its fixpoint; recorded in `done`."""
        rows_of = self.dispatch.by_signature
        while True:
            known = done.get(node)
            if known is not None:
                return known
            src = node.src
            key = (node.op, node.dtype, *[s.op for s in src])
            rows = rows_of.get(key)
            if rows is None:
                rows = self.dispatch.candidates(key)
            if not rows:
                done[node] = node
                return node
            since = next_serial() if node.meta is not None else 0
            out = _apply(rows, node, ctx)
            if out is None:
                done[node] = node
                return node
            depth += 1
            if depth > _MAX_CHAIN:
                raise UOpError(f"simplify: the rules do not reach a fixpoint at a {node.op} node")
            if since:
                tag_new_nodes(out, since, node.meta)
            node = self._settle_sources(out, ctx, done, depth)

    def _settle_sources(self, node: UOp, ctx, done: dict, depth: int) -> UOp:
        """node rebuilt on the fixpoints of its sources (new nodes a rule made)."""
        src = node.src
        if not src:
            return node
        new_src = tuple([s if done.get(s) is s else done.get(s) or self._final(
            self._settle_sources(s, ctx, done, depth + 1), ctx, done, depth + 1) for s in src])
        return node if new_src == src else rebuilt(node, new_src)


def _apply(rows: list, node: UOp, ctx) -> UOp | None:
    for pattern, fn, wants_ctx, binder in rows:
        if binder is not None:
            bindings = binder(node)
            if bindings is None:
                continue
        else:
            bindings = {}
            if not pattern.match(node, bindings):
                continue
        out = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
        if out is not None and out is not node:
            return out
    return None
