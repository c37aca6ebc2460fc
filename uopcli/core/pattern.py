"""Pattern matching and rewriting over UOp graphs: `UPat`, `PatternMatcher`, `graph_rewrite`.

A rewrite is a table of `(UPat, fn)` rows. A pattern says what a node must look like (its
op, dtype, arg, and patterns for its sources) and names the parts it wants; `fn` gets
those parts as keyword arguments (plus `ctx` when it asks for it) and returns a
replacement node, or None to leave the node alone.

    pm = PatternMatcher([
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("one", 1))), lambda x, one: x),  # x*1 = x
    ])
    simpler = graph_rewrite(root, pm)

`graph_rewrite` is iterative (a one-million-node chain rewrites at the default recursion
limit) and runs bottom-up to a fixpoint: sources are rewritten before their users, and a
node a rule produced is itself rewritten until no rule applies. FUNCTION and CALL bodies
are sources and are rewritten like the rest; a CALL's backward body lives in its arg and
is left as it is.

The simplification tables built on it are in uopcli/core/simplify/ (EXACT and TINYGRAD).
"""

from __future__ import annotations

import inspect
from typing import Callable, Iterable, Sequence

from ..errors import UOpError
from .ops import DType, Ops
from .substitute import rebuilt
from .uop import UOp
from .walks import no_gc

_ANY = object()  # "match any arg"


class UPat:
    """What a node must look like. Every field left out matches anything.

    op:    an op name, or a tuple/set of op names
    dtype: a DType, or a tuple/set of DTypes
    src:   a tuple of UPats matched in order against the node's sources (lengths must agree),
           or a single UPat that every source must match
    arg:   the node's arg must equal this (for CONST: the value, compared with ==)
    name:  bind the matched node under this keyword for the rule's function
    """

    __slots__ = ("ops", "dtypes", "src", "arg", "name", "_src_each")

    def __init__(self, op: str | Iterable[str] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: "UPat | Sequence[UPat] | None" = None, arg=_ANY, name: str | None = None):
        self.ops = None if op is None else frozenset((op,) if isinstance(op, str) else op)
        self.dtypes = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        self._src_each = isinstance(src, UPat)
        self.src = src if src is None or self._src_each else tuple(src)
        self.arg = arg
        self.name = name

    # tinygrad's shorthands -----------------------------------------------------
    @staticmethod
    def var(name: str | None = None, dtype=None) -> "UPat":
        """Any node, bound as `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, value=_ANY, dtype=None) -> "UPat":
        """A CONST (with `value` when given), bound as `name`."""
        return UPat(Ops.CONST, dtype, arg=value, name=name)

    def match(self, node: UOp, bindings: dict) -> bool:
        """Whether `node` fits; fills `bindings` with the named parts (a name bound twice
        must be the same node)."""
        if self.ops is not None and node.op not in self.ops:
            return False
        if self.dtypes is not None and node.dtype not in self.dtypes:
            return False
        if self.arg is not _ANY and not _same_arg(node.arg, self.arg):
            return False
        if self.name is not None:
            bound = bindings.get(self.name)
            if bound is None:
                bindings[self.name] = node
            elif bound is not node:
                return False
        src = self.src
        if src is None:
            return True
        if self._src_each:
            for s in node.src:
                if not src.match(s, bindings):
                    return False
            return True
        if len(src) != len(node.src):
            return False
        for pattern, s in zip(src, node.src):
            if not pattern.match(s, bindings):
                return False
        return True

    def __repr__(self) -> str:
        parts = []
        if self.ops is not None:
            parts.append("|".join(sorted(self.ops)))
        if self.name:
            parts.append(f"name={self.name}")
        if self.arg is not _ANY:
            parts.append(f"arg={self.arg!r}")
        return f"UPat({', '.join(parts)})"


def _same_arg(arg, wanted) -> bool:
    """Equal args; a bool never equals a number (True is not 1 here), ints and floats may."""
    if arg.__class__ is not wanted.__class__:
        numbers = (int, float)
        if not (isinstance(arg, numbers) and isinstance(wanted, numbers)) or \
                isinstance(arg, bool) or isinstance(wanted, bool):
            return False
    return arg == wanted


class PatternMatcher:
    """A table of `(UPat, fn)` rows, tried in order; indexed by op so a node is only
    checked against rows that can match its op."""

    def __init__(self, rules: Sequence[tuple[UPat, Callable]]):
        self.rules = list(rules)
        rows = []
        for pattern, fn in self.rules:
            if not isinstance(pattern, UPat) or not callable(fn):
                raise TypeError(f"a rule is (UPat, function), got ({pattern!r}, {fn!r})")
            rows.append((pattern, fn, "ctx" in inspect.signature(fn).parameters))
        # rows for any op, and per op the rows that can match it, both in table order
        self._any_op = [r for r in rows if r[0].ops is None]
        ops = {op for r in rows if r[0].ops is not None for op in r[0].ops}
        self._by_op = {op: [r for r in rows if r[0].ops is None or op in r[0].ops] for op in ops}

    def __add__(self, other: "PatternMatcher") -> "PatternMatcher":
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, node: UOp, ctx=None) -> UOp | None:
        """The replacement the first matching rule returns (None if none applies)."""
        rows = self._by_op.get(node.op, self._any_op)
        for pattern, fn, wants_ctx in rows:
            bindings: dict = {}
            if not pattern.match(node, bindings):
                continue
            out = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
            if out is not None:
                return out
        return None


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx=None) -> UOp:
    """`root` with every node rewritten by `pm` bottom-up, to a fixpoint (iterative).

    A node's sources are rewritten first; the node is rebuilt on the new sources; then the
    rules are applied to it, and whatever a rule returns is rewritten the same way. A rule
    set whose result contains the node being rewritten (x -> sqrt(x) -> ...) never ends:
    that is reported as a UOpError instead."""
    with no_gc():  # a rewrite builds many acyclic nodes: cyclic GC scans would find nothing
        return _graph_rewrite(root, pm, ctx)


def _graph_rewrite(root: UOp, pm: PatternMatcher, ctx) -> UOp:
    done: dict[UOp, UOp] = {}        # node -> its final rewrite (final rewrites map to themselves)
    state: dict[UOp, int] = {}       # _SOURCES_PUSHED, or _AWAITING once a rule gave a replacement
    replacement: dict[UOp, UOp] = {}
    rewrite = pm.rewrite
    stack = [root]
    push, pop = stack.append, stack.pop
    while stack:
        node = stack[-1]
        if node in done:
            pop()
            continue
        st = state.get(node)
        if st is None:              # first visit: rewrite the sources first
            state[node] = _SOURCES_PUSHED
            for s in node.src:
                if s not in done:
                    if s in state:
                        raise _loop_error(s)
                    push(s)
        elif st == _SOURCES_PUSHED:  # sources done: rebuild on them, then apply the rules
            src = node.src
            new_src = tuple(map(done.__getitem__, src))
            current = node if new_src == src else rebuilt(node, new_src)  # metadata kept
            out = rewrite(current, ctx)
            if out is None or out is current:
                done[node] = current
                done[current] = current
                pop()
            elif out in done:
                done[node] = done[out]
                pop()
            elif out in state:
                raise _loop_error(out)
            else:
                state[node] = _AWAITING
                replacement[node] = out
                push(out)
        else:                        # the replacement is rewritten: it is this node's result
            done[node] = done[replacement.pop(node)]
            pop()
    return done[root]


_SOURCES_PUSHED, _AWAITING = 1, 2


def _loop_error(node: UOp) -> UOpError:
    return UOpError(f"graph_rewrite: the rules do not reach a fixpoint (a rule's result contains the "
                    f"{node.op} node it is rewriting)")
