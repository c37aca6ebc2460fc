"""The walk that applies a rule table to every node of a graph, to a fixpoint.

Nodes are visited once each, sources before users (in creation order: a node is made
after its sources; no recursion, so a one-million-node chain is fine). A node is rebuilt
on its sources' results, then the table is applied; a replacement is itself brought to
its fixpoint before its users see it (its few new nodes only: everything else is final
already). So a second pass over the result finds nothing to do: simplification is
idempotent.

Speed: most nodes match no row, and a walk should cost what a pass over the graph costs.
The table is indexed by signature: the node's op and dtype, and per source its op plus
what the walk knows about it (the facts below, and the value of a CONST some row looks
for, as in x*1). Each signature's rows are computed once, so a node no row can match
costs a dictionary lookup, and a row is tried only where its pattern and its signature
test fit.

Facts, kept for the final nodes that have any (few do) and passed on bottom-up:
- SCALAR: every element is one value (shape (), or a movement of such a node);
- CONSTANT: computed from CONSTs and BUFFERs by movements only (constant folding's input);
- MOVED_NEG: one movement of a NEG (a - move(b) hides there).
SCALAR is known of a shape-() source only where the user is a one-source op (the
movements that broadcast it are), so that no other node pays for the shape test.

Metadata: a rebuilt node keeps its own; the new nodes a rule makes take the metadata of
the node they replace (a backward node's replacement stays backward); a node that was
already in the graph keeps its own (the first tag wins).
"""

from __future__ import annotations

from typing import Sequence

from ...errors import UOpError
from ..ops import MOVEMENT, SELECTING_MOVES, Ops
from ..pattern import _ANY, PatternMatcher, _same_arg
from ..substitute import rebuilt
from ..uop import UOp, make_shaped, next_serial, tag_new_nodes
from ..walks import creation_order, no_gc

_MAX_CHAIN = 200  # successive rewrites of one node before the rules count as looping
set_attribute = object.__setattr__  # a node's metadata, given as it is made (nodes refuse setattr)

SCALAR, CONSTANT, MOVED_NEG = 1, 2, 4  # the facts (bits)
_CONSTANT_LEAVES = (Ops.CONST, Ops.BUFFER)
_MAY_HAVE_FACTS = frozenset(_CONSTANT_LEAVES) | MOVEMENT  # no other node gets any (see _inherited)


def only_when(signature_test, after: str | None = None):
    """Mark a row's function with a test on its signature: the row is tried only on nodes
    whose signature passes (tested once per signature). The test gets the tuple (op,
    dtype, *source ops), whose `facts` attribute holds each source's facts (SCALAR,
    CONSTANT, MOVED_NEG bits). With `after`, the row is tried only once the walk's ctx holds that
    flag (raised by an earlier row): until then it costs nothing."""
    def mark(fn):
        fn.signature_test = signature_test
        fn.after = after
        return fn
    return mark


class Signature(tuple):
    """(op, dtype, *source ops), with `facts`: each source's facts. What signature tests see."""


class _Dispatch:
    """Rows by signature, in table order, computed once per signature and per set of ctx
    flags raised, with the facts a node of that signature inherits from its sources. A
    row whose pattern says no more than its signature already does (ops, and names to
    bind) binds its names directly instead of matching. Ungated (the tests' reference),
    every row whose op fits is tried, by matching its whole pattern."""

    def __init__(self, matchers: Sequence[PatternMatcher], gated: bool = True):
        self.gated = gated
        self.rows = [(p, getattr(fn, "signature_test", None), getattr(fn, "after", None), _calling(p, fn, gated))
                     for m in matchers for p, fn in m.rules]
        self.flags = tuple(sorted({after for _, _, after, _ in self.rows if after is not None}))
        self.tables: dict[frozenset, dict[tuple, tuple]] = {}
        # the CONST values the rows' source patterns ask for: only these enter a signature
        self.wanted_args = frozenset(p.arg for pattern, *_ in self.rows if pattern.src and not pattern._src_each
                                     for p in pattern.src if p.arg is not _ANY)

    def table(self, ctx: dict) -> tuple[dict, frozenset]:
        """The signature -> (rows, facts) cache for the flags `ctx` has raised, and those flags."""
        raised = frozenset(flag for flag in self.flags if ctx.get(flag))
        table = self.tables.get(raised)
        if table is None:
            table = self.tables[raised] = {}
        return table, raised

    def lookup(self, key: tuple, raised: frozenset) -> tuple[list, int]:
        """(rows to try, facts inherited) for a node of signature `key`; cached."""
        ops_key = Signature(key[:2] + tuple(e if e.__class__ is str else e[0] for e in key[2:]))
        ops_key.facts = tuple(0 if e.__class__ is str else e[1] for e in key[2:])
        if self.gated:
            rows = [calling for p, test, after, calling in self.rows if (after is None or after in raised)
                    and _fits(p, key, ops_key) and (test is None or test(ops_key))]
        else:  # every row for the node's op (the tests' reference: gating must lose no rewrite)
            rows = [calling for p, _, _, calling in self.rows if p.ops is None or key[0] in p.ops]
        found = self.tables[raised][key] = (rows, _inherited(ops_key))
        return found

    def entry(self, node: UOp, facts: int):
        """What a user's signature holds for final node `node`: its op, or with facts (or
        a CONST value a row looks for) a tuple (op, facts[, class, value])."""
        op = node.op
        if node.shape == ():
            facts |= SCALAR
        if op == Ops.CONST and node.arg in self.wanted_args:
            return (op, facts, node.arg.__class__, node.arg)
        return (op, facts) if facts else op


def _inherited(key: Signature) -> int:
    """The facts a node of signature `key` has whatever its shape."""
    op = key[0]
    if op in _CONSTANT_LEAVES:
        return CONSTANT
    if len(key) != 3:
        return 0
    source = key.facts[0]
    if op in SELECTING_MOVES:
        return (source & SCALAR) | (source & CONSTANT) | (MOVED_NEG if key[2] == Ops.NEG else 0)
    return source & CONSTANT if op in MOVEMENT else 0


# How a row's function is called (_apply): with the node alone, the node and ctx, the
# names a direct binder gives (and ctx), or the names the pattern's match binds.
_NODE, _NODE_CTX, _BOUND, _BOUND_CTX, _MATCHED, _MATCHED_CTX = range(6)


def _calling(pattern, fn, direct: bool) -> tuple:
    """(how, fn, binder or pattern) for one row; with `direct`, binding without matching
    where the signature has checked what the pattern asks (its sources' ops)."""
    import inspect
    params = list(inspect.signature(fn).parameters)
    wants_ctx = "ctx" in params
    binder = _direct_binder(pattern) if direct else None
    if binder is None:
        return (_MATCHED_CTX if wants_ctx else _MATCHED, fn, pattern)
    if pattern.src is None and pattern.name is not None and params == [pattern.name] + ["ctx"] * wants_ctx:
        return (_NODE_CTX if wants_ctx else _NODE, fn, None)
    return (_BOUND_CTX if wants_ctx else _BOUND, fn, binder)


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


def _fits(pattern, key: tuple, ops_key: tuple) -> bool:
    """Whether `pattern` can match a node whose signature is `key` (`ops_key`: the same
    with every source given by its op only)."""
    op, dtype, src_ops = ops_key[0], ops_key[1], ops_key[2:]
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
    for p, s, entry in zip(src, src_ops, key[2:]):
        if p.ops is not None and s not in p.ops:
            return False
        if p.arg is not _ANY and (entry.__class__ is str or len(entry) < 4 or not _same_arg(entry[3], p.arg)):
            return False  # a CONST whose value is not in the signature is none a row asks for
    return True


class Rewriter:
    """Applies tables (tried in order, row by row) to graphs; `ctx` is per walk."""

    def __init__(self, *matchers: PatternMatcher, gated: bool = True):
        """gated=False tries every row whose op fits on every node: the same result
        (signatures, facts and flags only spare rows that would find nothing), slower."""
        self.dispatch = _Dispatch(matchers, gated)

    def rewrite_roots(self, roots: Sequence[UOp]) -> list[UOp]:
        """Each root at its fixpoint."""
        with no_gc():
            return _Walk(self.dispatch).run(roots)


class _Walk:
    """One rewrite of a graph: the final node of every node seen (`done`), the facts of
    the final nodes that have any (`notable`: their signature entries), and the rows'
    scratch space (`ctx`)."""

    def __init__(self, dispatch: _Dispatch):
        self.dispatch = dispatch
        self.done: dict[UOp, UOp] = {}
        self.notable: dict[UOp, tuple] = {}
        self.ctx: dict = {}
        self.rows_of, self.raised = dispatch.table(self.ctx)
        self.ctx_size = 0

    def _table(self) -> tuple[dict, frozenset]:
        """The rows cache for the flags raised so far (looked at again only when ctx grew)."""
        ctx = self.ctx
        if len(ctx) != self.ctx_size and len(self.raised) < len(self.dispatch.flags):
            self.rows_of, self.raised = self.dispatch.table(ctx)
            self.ctx_size = len(ctx)
        return self.rows_of, self.raised

    def run(self, roots: Sequence[UOp]) -> list[UOp]:
        """The main loop: most nodes match no row, and it handles them itself, at the cost
        of a signature and a dictionary lookup; a node a row rewrites goes to _final_from."""
        done, notable, ctx, dispatch = self.done, self.notable, self.ctx, self.dispatch
        rows_of, raised = self._table()
        n_flags = len(dispatch.flags)
        entry_of = notable.get
        for original in creation_order(roots):
            src = original.src
            n_src = len(src)
            if n_src == 2:
                s0, s1 = src
                a, b = done[s0], done[s1]
                if a is s0 and b is s1:
                    node = original
                elif a.dtype is s0.dtype and b.dtype is s1.dtype and (a.shape is s0.shape or a.shape == s0.shape) \
                        and (b.shape is s1.shape or b.shape == s1.shape):  # rebuilt's fast path, inline
                    node = make_shaped(original.op, original.dtype, (a, b), original.arg, original.shape)
                    if node.meta is None and original.meta is not None:
                        set_attribute(node, "meta", original.meta)
                else:
                    node = rebuilt(original, (a, b))
                ka, kb = a.op, b.op
                if ka in _MAY_HAVE_FACTS:
                    ka = entry_of(a) or ka
                if kb in _MAY_HAVE_FACTS:
                    kb = entry_of(b) or kb
                key = (node.op, node.dtype, ka, kb)
            elif n_src == 1:
                s0 = src[0]
                a = done[s0]
                if a is s0:
                    node = original
                elif a.dtype is s0.dtype and (a.shape is s0.shape or a.shape == s0.shape):  # as above
                    node = make_shaped(original.op, original.dtype, (a,), original.arg, original.shape)
                    if node.meta is None and original.meta is not None:
                        set_attribute(node, "meta", original.meta)
                else:
                    node = rebuilt(original, (a,))
                ka = entry_of(a)
                if ka is None:
                    ka = a.op if a.shape != () else (a.op, SCALAR)
                key = (node.op, node.dtype, ka)
            elif n_src:
                new_src = tuple([done[s] for s in src])
                node = original if new_src == src else rebuilt(original, new_src)
                key = self.signature(node)
            else:
                node = original
                key = (node.op, node.dtype)
            found = rows_of.get(key)
            if found is None:
                found = dispatch.lookup(key, raised)
            rows, facts = found
            if rows:
                since = next_serial() if node.meta is not None else 0
                out = _apply(rows, node, ctx)
                if out is None and len(ctx) != self.ctx_size and len(raised) < n_flags:  # a row raised a flag?
                    out, facts = self._try(node, key, raised)  # which may admit more rows for this node
                    rows_of, raised = self._table()
                if out is not None:
                    done[original] = self._final_from(node, out, since)
                    rows_of, raised = self._table()
                    continue
            # no row rewrites it: final as it is
            done[original] = node
            if node is not original:
                done[node] = node
            if facts:
                notable[node] = dispatch.entry(node, facts)
        return [done[r] for r in roots]

    def signature(self, node: UOp) -> tuple:
        notable = self.notable
        if len(node.src) == 1:
            s = node.src[0]
            return (node.op, node.dtype, notable.get(s) or (s.op if s.shape != () else (s.op, SCALAR)))
        return (node.op, node.dtype, *[notable.get(s) or s.op for s in node.src])

    def _final(self, node: UOp, depth: int = 0) -> UOp:
        """node (whose sources are final) brought to its fixpoint; recorded in `done`."""
        while True:
            known = self.done.get(node)
            if known is not None:
                return known
            since = next_serial() if node.meta is not None else 0
            out, facts = self._try(node)
            if out is None:
                return self._record(node, facts)
            depth += 1
            if depth > _MAX_CHAIN:
                raise UOpError(f"simplify: the rules do not reach a fixpoint at a {node.op} node")
            node = self._settled(node, out, since, depth)

    def _final_from(self, node: UOp, out: UOp, since: int) -> UOp:
        """The fixpoint of `out`, what a row made of `node` (the main loop's first rewrite)."""
        return self._final(self._settled(node, out, since, 1), 1)

    def _settled(self, node: UOp, out: UOp, since: int, depth: int) -> UOp:
        """`out`, what a row made of node, its new nodes (made from serial `since` on)
        given node's metadata, on the fixpoints of its sources."""
        if since:
            tag_new_nodes(out, since, node.meta)
        return self._settle_sources(out, depth)

    def _try(self, node: UOp, key: tuple | None = None, tried: frozenset | None = None) -> tuple[UOp | None, int]:
        """(what the first row that rewrites node makes of it or None, node's facts), for
        node of signature `key`. A row that raises a flag may admit more rows for the
        same node: they are looked up and tried in turn. `tried`: the flags under which
        the caller has already tried the rows."""
        key = self.signature(node) if key is None else key
        raised = tried
        while True:
            rows_of, now_raised = self._table()
            found = rows_of.get(key)
            rows, facts = self.dispatch.lookup(key, now_raised) if found is None else found
            if now_raised == raised:
                return None, facts
            raised = now_raised
            out = _apply(rows, node, self.ctx) if rows else None
            if out is not None:
                return out, facts

    def _record(self, node: UOp, facts: int) -> UOp:
        """node is final: recorded, with its facts when it has any."""
        self.done[node] = node
        if facts:
            self.notable[node] = self.dispatch.entry(node, facts)
        return node

    def _settle_sources(self, node: UOp, depth: int) -> UOp:
        """node rebuilt on the fixpoints of its sources (new nodes a rule made)."""
        src = node.src
        if not src:
            return node
        new_src = tuple([self._fixpoint(s, depth + 1) for s in src])
        return node if new_src == src else rebuilt(node, new_src)

    def _fixpoint(self, node: UOp, depth: int) -> UOp:
        """node's fixpoint: recorded already, or settled now."""
        found = self.done.get(node)
        if found is not None:
            return found
        return self._final(self._settle_sources(node, depth), depth)


def _apply(rows: list, node: UOp, ctx) -> UOp | None:
    """What the first row that rewrites `node` makes of it, or None."""
    for how, fn, extra in rows:
        if how is _NODE:
            out = fn(node)
        elif how is _NODE_CTX:
            out = fn(node, ctx)
        elif how is _BOUND or how is _BOUND_CTX:
            bindings = extra(node)
            if bindings is None:
                continue
            out = fn(**bindings) if how is _BOUND else fn(ctx=ctx, **bindings)
        else:
            bindings = {}
            if not extra.match(node, bindings):
                continue
            out = fn(**bindings) if how is _MATCHED else fn(ctx=ctx, **bindings)
        if out is not None and out is not node:
            return out
    return None
