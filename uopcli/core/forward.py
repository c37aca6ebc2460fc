"""Forward-mode differentiation of UOp graphs: the rule table FORWARD_RULES, the walk
`compute_jvp`, and JAX's `jvp`, `linearize` and `transpose` on nodes.

    tangents = compute_jvp([y], {x: tx, w: tw})   # {y: dy = J_x tx + J_w tw}, or None for a zero tangent

Each node gets the tangent of its value (the directional derivative along the input
tangents) from its sources' tangents, sources before users: one rule per op, the row beside
its reverse row in gradient.py, so that each is the other's transpose (`uopgrad check
--transpose` tests exactly that). Linear ops apply themselves to the tangent; elementwise
ops multiply by their derivative, reusing the forward result `y` as the reverse rules do;
MUL is bilinear; MAX and REDUCE MAX split ties evenly, as the reverse rules do. A zero
tangent is None, never a node: only nodes that depend on an input with a tangent get one.
A negated tangent is a sign, `_Neg(t)`, until something needs the NEG node: the rows of
SIGNED_OPS take it (a sum folds it into a SUB, a product or a slope keeps it outside),
every other row gets the node. So d(c - x) = -dx, met by the tangent of the reverse SIN
row's cosine on every SIN, costs no node of its own (IEEE negation is exact: the values
are those of the NEG node, the same bits).

Batched tangents (`batch=B`): every tangent has a leading axis of B directions, so that one
walk computes B Jacobian-vector products (the columns of a Jacobian, `jacobian`/`hessian`):
primal values are broadcast along it, movement and reduce args shift by one axis.

Calls: a FUNCTION (or a CALL without its own backward body) gets a FUNCTION `<name>_jvp`
whose body is the tangent of its body, reading the args and the args' tangents as slots; a
CALL with its own backward body is refused, as JAX refuses `jvp` of a `custom_vjp`.

Every node forward mode creates carries the metadata of the node it was made for (name,
loc, backward) with its scope under TANGENT_SCOPE, so pictures draw it as a tangent.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, NamedTuple

from ..errors import GradientError
from .gradient import (LN2, GRADIENT_RULES, _add, _bind, _cast, _closed_body, _const, _div, _eq, _expand, _lt,
                       _mul, _neg, _reduce, _reshape, _sin, _sub, _sum_axes, _where, _zero)
from .graph import Graph
from .ops import Ops
from .uop import Metadata, UOp, made_for, make_shaped, numbered_name
from .walks import no_gc, on_a_deep_stack, scope_sources, scope_toposort, toposort

TANGENT_SCOPE = "∂"  # the scope every tangent node sits under (its forward node's scope below it)
_CALL_OPS = frozenset({Ops.FUNCTION, Ops.CALL})


# ----------------------------------------------------------------------------- shapes
# A tangent has its node's shape, with a leading batch axis when batched. Primal values
# combined with a tangent are broadcast to its shape (`_lift`); a shape-() source's tangent
# reaching a larger node is broadcast to the node's tangent shape (`_fit`).

class _Walk(NamedTuple):
    batch: int | None   # directions per tangent (None: one, no batch axis)
    bodies: dict        # (body, active slots, batch) -> closed tangent body, per compute_jvp

    def shape(self, node: UOp) -> tuple:
        return node.shape if self.batch is None else (self.batch, *node.shape)

    def axes(self, axes: tuple) -> tuple:
        return axes if self.batch is None else tuple(a + 1 for a in axes)

    def lift(self, p: UOp, t: UOp) -> UOp:
        """Primal `p` broadcast to tangent `t`'s shape (a scalar broadcasts implicitly)."""
        if p.shape == t.shape or p.shape == ():
            return p
        lead = (1,) * (len(t.shape) - len(p.shape))
        return _expand(_reshape(p, lead + p.shape), t.shape)

    def fit(self, t: UOp | None, node: UOp) -> UOp | None:
        """Tangent `t` broadcast to `node`'s tangent shape (from a shape-() source)."""
        if t is None or (self.batch is None and t.shape == node.shape):
            return t
        shape = self.shape(node)
        if t.shape == shape:
            return t
        if t.__class__ is _Neg:
            return _Neg(self.fit(t.t, node))
        lead = len(t.shape)  # () or (B,): the scalar source's tangent
        return _expand(_reshape(t, t.shape + (1,) * (len(shape) - lead)), shape)


class _Neg:
    """The tangent -t, not made yet (see the module's docstring): its shape is t's."""
    __slots__ = ("t", "shape")

    def __init__(self, t: UOp):
        self.t, self.shape = t, t.shape


def _negated(t: UOp | _Neg) -> UOp | _Neg:
    """-t, as a sign: -(-t) is t."""
    return t.t if t.__class__ is _Neg else _Neg(t)


def _made(t: UOp | _Neg | None) -> UOp | None:
    """t as a node: a negated tangent becomes its NEG node."""
    return _neg(t.t) if t.__class__ is _Neg else t


def _sum(a: UOp | _Neg, b: UOp | _Neg) -> UOp:
    """a + b of two nonzero tangents, with their signs: a + (-b) = a - b and (-a) + b = b - a
    (IEEE defines x - y as x + (-y), and addition commutes: the same values); (-a) + (-b)
    makes -a's node (as (-a) - b: -(a + b) would turn a +0 sum into -0)."""
    if b.__class__ is _Neg:
        return _sub(_made(a), b.t)
    if a.__class__ is _Neg:
        return _sub(b, a.t)
    return _add(a, b)


def _plus(a: UOp | None, b: UOp | None) -> UOp | None:
    """a + b, a zero (None) adding nothing."""
    return b if a is None else a if b is None else _add(a, b)


def _scaled(t: UOp | None, factor: UOp, w: _Walk) -> UOp | None:
    """t * factor (factor a primal value, broadcast to t); None stays None."""
    if t is None:
        return None
    if factor.shape != t.shape and factor.shape != ():  # lift's own test, without its call
        factor = w.lift(factor, t)
    if t.__class__ is _Neg:  # (-t) f = -(t f), exactly: the sign stays outside
        t = t.t
        return _Neg(make_shaped(_MUL, t.dtype, (t, factor), None, t.shape))
    return make_shaped(_MUL, t.dtype, (t, factor), None, t.shape)  # _mul without its call: t has the shape


def _zeros_as(t: UOp | None, like: UOp | None) -> UOp:
    return t if t is not None else _zero(like)


def _move(op: str, t: UOp, arg, shape: tuple) -> UOp:
    return make_shaped(op, t.dtype, (t,), arg, shape)


# ----------------------------------------------------------------------------- rules
# A rule gets the node `y`, one tangent per source (None: zero; src[0] of a call, its body,
# is always None) with at least one not None, and the walk; it returns y's tangent (None:
# zero). Unbatched, a shape-() source's tangent may reach an elementwise op as it is
# (implicit scalar broadcast); the walk fits the result to y's shape.

# (w.fit(None, y) is None: the hot rows skip the call for a zero tangent, and for a source
# of y's own shape, whose tangent has y's tangent shape already, batched or not)

def _add_rule(y, t, w):                     # d(a+b) = da + db
    a, b = t
    if a is None:
        return w.fit(b, y)
    return a if b is None else _sum(w.fit(a, y), w.fit(b, y))


def _sub_rule(y, t, w):                     # d(a-b) = da - db
    a, b = t
    if b is None:
        return a
    b = _negated(b if y.src[1].shape == y.shape else w.fit(b, y))
    return b if a is None else _sum(a if y.src[0].shape == y.shape else w.fit(a, y), b)


def _mul_rule(y, t, w):                     # d(ab) = b da + a db
    a, b = y.src
    da, db = t
    if da is None:
        return _scaled(w.fit(db, y), a, w)
    da = _scaled(da if a.shape == y.shape else w.fit(da, y), b, w)
    return da if db is None else _sum(da, _scaled(db if b.shape == y.shape else w.fit(db, y), a, w))


def _fdiv_rule(y, t, w):                    # d(a/b) = (da - y db) / b
    a, b = y.src
    da, db = w.fit(t[0], y), w.fit(t[1], y)
    if db is not None:
        y_db = _mul(db, w.lift(y, db))
        da = _neg(y_db) if da is None else _sub(da, y_db)
    return _div(da, w.lift(b, da))


def _max_rule(y, t, w):                     # the larger's tangent; at a tie, the mean of both
    a, b = y.src
    da, db = w.fit(t[0], y), w.fit(t[1], y)
    like = da if da is not None else db
    both = _add(da, db) if da is not None and db is not None else like
    half = _mul(both, _const(both, 0.5))  # tangents are floating point (compute_jvp refuses others)
    # a tie is a == b, as the reverse rule tests it: with a NaN operand neither is larger
    # nor is it a tie, and the tangent is 0 (the reverse rule gives neither a share)
    out = _where(w.lift(_eq(a, b), like), half, _zero(like))
    if db is not None:      # a zero tangent's own branch is the 0 already there
        out = _where(w.lift(_lt(a, b), like), db, out)
    return out if da is None else _where(w.lift(_lt(b, a), like), da, out)


def _pow_rule(y, t, w):                     # e b^(e-1) db + y ln(b) de, edges as the reverse rule
    b, e = y.src
    zero = _zero(b)
    out = None
    if t[0] is not None:   # 0 at e == 0: b^0 is constant, even at b == 0
        slope = _where(_eq(e, zero), zero, _mul(e, UOp.make(Ops.POW, b.dtype, (b, _sub(e, _const(e, 1.0))))))
        out = _scaled(w.fit(t[0], y), slope, w)
    if t[1] is not None:   # at b == 0: -inf for e < 0, else 0
        at_zero = _where(_lt(e, zero), _const(b, -math.inf), zero)
        slope = _where(_eq(b, zero), at_zero, _mul(_mul(y, b.log2()), _const(b, LN2)))
        out = _plus(out, _scaled(w.fit(t[1], y), slope, w))
    return out


def _mulacc_rule(y, t, w):                  # d(ab+c) = b da + a db + dc
    a, b, _ = y.src
    return _plus(_plus(_scaled(w.fit(t[0], y), b, w), _scaled(w.fit(t[1], y), a, w)), w.fit(t[2], y))


def _where_rule(y, t, w):                   # c ? da : db
    da, db = w.fit(t[1], y), w.fit(t[2], y)
    like = da if da is not None else db
    return _where(w.lift(y.src[0], like), _zeros_as(da, like), _zeros_as(db, like))


def _cos(x: UOp) -> UOp:
    """cos x, written sin(pi/2 - x) as the reverse SIN row writes it. Of x = pi/2 - z (a
    cosine: the reverse row's slope, or the builder's cos) it is sin z, cos(pi/2 - z) =
    sin z: in a forward-over-reverse graph the forward node sin z itself (hash-consing
    finds it), where sin(pi/2 - (pi/2 - z)) would make two nodes per SIN and round twice."""
    half_pi = _half_pis.get(x.dtype)
    if half_pi is None:
        half_pi = _half_pi(x)
    if x.op == _SUB and x.src[0] is half_pi and x.src[1].shape == x.shape:
        return _sin(x.src[1])
    return _sin(_sub(half_pi, x))


def _sin_rule(y, t, w):                     # cos(x) dx, as _unary would write it without its two calls
    return _scaled(t[0], _cos(y.src[0]), w)


_half_pis: dict = {}  # dtype -> CONST pi/2 (const_like builds a key per call)
_SUB, _MUL = Ops.SUB, Ops.MUL


def _half_pi(x: UOp) -> UOp:
    found = _half_pis[x.dtype] = _const(x, math.pi / 2)
    return found


def _unary(slope):
    """The rule of an elementwise op whose derivative is `slope(y)`: tangent * slope."""
    return lambda y, t, w: _scaled(t[0], slope(y), w)


def _cast_rule(y, t, w):                    # the tangent cast as the value is (the reverse casts back)
    # to an integer or bool: piecewise constant, 0. Casting the tangent too (trunc(dx)) is
    # not linear in dx: no derivative, and the transpose of no reverse rule
    return _cast(t[0], y.dtype) if y.dtype.is_float else None


def _reduce_rule(y, t, w):
    return FORWARD_RULES[(Ops.REDUCE, y.arg[0])](y, t, w)


def _reduce_add_rule(y, t, w):              # the tangents add up as the values do
    return _sum_axes(t[0], w.axes(y.arg[1]), w.shape(y))


def _reduce_max_rule(y, t, w):              # sum(x == y ? dx : 0) / count(x == y): ties share evenly
    (x,) = y.src
    if 0 in (x.shape[a] for a in y.arg[1]):  # the max of no elements, the constant -inf: 0 (not 0/0)
        return None
    hit = _eq(x, _expand(y, x.shape))
    count = _reduce(_cast(hit, x.dtype), "ADD", y.arg[1], y.shape)
    # dx chosen where x holds the maximum, not multiplied by a 0/1 mask: an element below the
    # maximum adds nothing even where its tangent is inf or NaN (log2 of a 0 beside the max)
    total = _sum_axes(_where(w.lift(hit, t[0]), t[0], _zero(t[0])), w.axes(y.arg[1]), w.shape(y))
    return _div(total, w.lift(count, total))


def _reduce_mul_rule(y, t, w):              # sum(dx * product of the others), the reverse rule's product
    others = GRADIENT_RULES[(Ops.REDUCE, "MUL")](UOp.full(y.shape, 1, y.dtype), y, (True,))[0]
    return _sum_axes(_mul(t[0], w.lift(others, t[0])), w.axes(y.arg[1]), w.shape(y))


def _reshape_rule(y, t, w):
    return _move(Ops.RESHAPE, t[0], w.shape(y), w.shape(y))


def _expand_rule(y, t, w):
    return _move(Ops.EXPAND, t[0], w.shape(y), w.shape(y))


def _permute_rule(y, t, w):
    order = y.arg if w.batch is None else (0, *(a + 1 for a in y.arg))
    return _move(Ops.PERMUTE, t[0], order, w.shape(y))


def _pad_rule(y, t, w):                     # padding is zeros: the tangent pads with zeros too
    return _move(Ops.PAD, t[0], y.arg if w.batch is None else ((0, 0), *y.arg), w.shape(y))


def _shrink_rule(y, t, w):
    return _move(Ops.SHRINK, t[0], y.arg if w.batch is None else ((0, w.batch), *y.arg), w.shape(y))


def _flip_rule(y, t, w):
    return _move(Ops.FLIP, t[0], y.arg if w.batch is None else (False, *y.arg), w.shape(y))


def _same_op(y, t, w):                      # a linear identity-valued op: applied to the tangent
    return make_shaped(y.op, t[0].dtype, (t[0],), y.arg, t[0].shape)


def _tuple_rule(y, t, w):                   # (the walk calls a rule only when some tangent is not zero)
    return UOp.tuple(*(UOp.noop() if e is None else e for e in t))


def _gettuple_rule(y, t, w):
    element = t[0].src[y.arg]
    return None if element.op == Ops.NOOP else element


def _after_rule(y, t, w):                   # dest's value after the store: the stored value's tangent
    return t[1]


def _call_rule(y, t, w):
    name, grad_body = y.arg
    if grad_body is not None:
        raise GradientError(f"CALL {name!r} has its own backward body: forward mode cannot go through it "
                            f"(as JAX refuses jvp of a custom_vjp); differentiate it in reverse mode (uopgrad diff)")
    return _function_rule(y, t, w, name)


def _function_rule(y, t, w, name=None):
    """Through `<name>_jvp`: a FUNCTION whose body is the tangent of this body, reading the
    args (slots 0..n-1) and the tangents of the args that have one (slots n..); its outputs
    are the body outputs' nonzero tangents. One tangent body per body and set of args with
    tangents, within one compute_jvp (an RNN cell is differentiated once)."""
    body, args = y.src[0], y.src[1:]
    active = tuple(i for i, ti in enumerate(t[1:]) if ti is not None)
    key = (body, active, w.batch)
    found = w.bodies.get(key)
    if found is None:
        n = len(args)
        slots = {UOp.slot(i, args[i].shape, args[i].dtype): UOp.slot(n + k, w.shape(args[i]), args[i].dtype)
                 for k, i in enumerate(active)}
        inner = _tangents(list(body.src), slots, w)
        present = tuple(j for j, out in enumerate(body.src) if inner.get(out) is not None)
        found = w.bodies[key] = (present, _closed_body([w.fit(inner[body.src[j]], body.src[j]) for j in present])
                                 if present else None)
    present, closed = found
    if not present:
        return None
    call = _bind(f"{name or y.arg}_jvp", closed, (*args, *(t[1 + i] for i in active)))
    elements = [UOp.noop()] * len(body.src)
    for k, j in enumerate(present):
        elements[j] = call.gettuple(k)
    return UOp.tuple(*elements)


def _none(y, t, w):
    return None


# op -> rule(y, tangents, walk) -> y's tangent. REDUCE dispatches to the (REDUCE, op) rows.
FORWARD_RULES = {
    # elementwise arithmetic
    Ops.ADD: _add_rule,                                                   # da + db
    Ops.SUB: _sub_rule,                                                   # da - db
    Ops.MUL: _mul_rule,                                                   # b da + a db (bilinear)
    Ops.FDIV: _fdiv_rule,                                                 # (da - y db) / b
    Ops.MAX: _max_rule,                                                   # a>b ? da : a<b ? db : a==b ? (da+db)/2 : 0
    Ops.POW: _pow_rule,                                                   # e b^(e-1) db + y ln(b) de
    Ops.MULACC: _mulacc_rule,                                             # b da + a db + dc
    Ops.WHERE: _where_rule,                                               # c ? da : db (c has none)
    # elementwise unary: tangent * derivative (EXP2, SQRT, RECIPROCAL reuse y itself)
    Ops.NEG: lambda y, t, w: _negated(t[0]),                              # -dx (a sign: no node)
    Ops.RECIPROCAL: _unary(lambda y: _neg(_mul(y, y))),                   # -y^2 dx
    Ops.SQRT: lambda y, t, w: _div(t[0], w.lift(_mul(y, _const(y, 2.0)), t[0])),  # dx / (2y)
    Ops.EXP2: lambda y, t, w: _mul(_mul(t[0], _const(y, LN2)), w.lift(y, t[0])),  # (dx ln2) y: ln2 beside dx,
    # where simplify folds it with dx's own constant factor (exp(x) = 2^(x/ln2): the two cancel)
    Ops.LOG2: lambda y, t, w: _div(t[0], w.lift(_mul(y.src[0], _const(y, LN2)), t[0])),  # dx / (x ln2)
    Ops.SIN: _sin_rule,                                                   # cos(x) dx = sin(pi/2 - x) dx
    Ops.TRUNC: _none,                                                     # piecewise constant: 0
    Ops.CAST: _cast_rule,                                                 # dx cast to y's dtype; 0 to an int
    Ops.BITCAST: _none,                                                   # bits, not values: 0
    # comparisons and integer ops: zero
    Ops.CMPLT: _none, Ops.CMPNE: _none, Ops.CMPEQ: _none,
    Ops.CDIV: _none, Ops.CMOD: _none, Ops.AND: _none, Ops.OR: _none,
    Ops.XOR: _none, Ops.SHL: _none, Ops.SHR: _none,
    # reduce
    Ops.REDUCE: _reduce_rule,
    (Ops.REDUCE, "ADD"): _reduce_add_rule,                                # sum dx
    (Ops.REDUCE, "MAX"): _reduce_max_rule,                                # sum(x==y ? dx : 0) / count(x==y)
    (Ops.REDUCE, "MUL"): _reduce_mul_rule,                                # sum(dx * product of the others)
    # movement: linear, applied to the tangent (a batch axis in front)
    Ops.RESHAPE: _reshape_rule, Ops.EXPAND: _expand_rule, Ops.PERMUTE: _permute_rule,
    Ops.PAD: _pad_rule, Ops.SHRINK: _shrink_rule, Ops.FLIP: _flip_rule,
    # identity-valued: applied to the tangent; DETACH stops it
    Ops.CONTIGUOUS: _same_op, Ops.CONTIGUOUS_BACKWARD: _same_op, Ops.COPY: _same_op,
    Ops.DETACH: _none,                                                    # a constant: zero tangent
    # memory
    Ops.STORE: lambda y, t, w: t[1],                                      # (void) the stored value's tangent
    Ops.AFTER: _after_rule,                                               # the stored value's tangent
    # tuples and calls
    Ops.TUPLE: _tuple_rule,                                               # TUPLE of tangents (NOOP: zero)
    Ops.GETTUPLE: _gettuple_rule,                                         # element i of the call's tangent
    Ops.FUNCTION: _function_rule,                                         # via `<name>_jvp`
    Ops.CALL: _call_rule,                                                 # as FUNCTION; refused with a backward body
}
# the rows that take a negated tangent (_Neg) as it is; every other row gets its NEG node
SIGNED_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SIN, Ops.RECIPROCAL})
# the rows whose tangent is zero whatever their sources': the walk does not go below them, so
# a node reached only through them (softmax's detached max, a mask's comparison) gets no tangent
ZERO_TANGENT_OPS = frozenset(op for op, rule in FORWARD_RULES.items() if rule is _none)


# ----------------------------------------------------------------------------- the walk

def compute_jvp(roots: UOp | Iterable[UOp], tangents: Mapping[UOp, UOp],
                batch: int | None = None) -> dict[UOp, UOp | None]:
    """The tangent of each root, {root: tangent or None (zero)}, given tangents of some
    nodes (usually inputs), each of its node's shape and dtype (with a leading axis of
    `batch` directions when batched). One UOp is one root (here and in jvp, linearize
    and transpose: a list of nodes may always be one node), never its rows."""
    roots = _roots(roots, "compute_jvp")
    w = _Walk(batch, {})
    if not isinstance(tangents, Mapping):
        raise GradientError(f"tangents are a mapping {{node: its tangent}}, got {_kind(tangents)}")
    for node, t in tangents.items():
        if not isinstance(node, UOp) or node.shape is None or not isinstance(t, UOp):
            raise GradientError(f"a tangent must be given for a value node, as a UOp; got {node!r}: {t!r}")
        if t.shape != w.shape(node) or t.dtype is not node.dtype:
            raise GradientError(f"tangent {t.dtype.name}{list(t.shape or ())} does not fit "
                                f"{node.dtype.name}{list(w.shape(node))} of {node!r}"
                                + ("" if batch is None else f" (batch={batch}: a leading axis of {batch} directions)"))
        if not node.dtype.is_float:  # as reverse mode's targets (JAX gives an integer a float0 tangent)
            raise GradientError(f"a tangent is for a floating-point node; {node!r} is {node.dtype.name}")
    with no_gc():
        try:
            found = _tangents(roots, dict(tangents), w)
        except RecursionError:  # functions nested hundreds deep: once more, on a deep stack
            found = on_a_deep_stack(_tangents, roots, dict(tangents), w)
    return {r: found.get(r) for r in roots}  # each fitted to its root's shape by the walk


def _roots(roots, what: str) -> list[UOp]:
    """The roots as a list of nodes; a Graph is refused naming the graph-level function."""
    if isinstance(roots, Graph):
        raise GradientError(f"uopcli.{what} takes nodes (roots, {{node: tangent}}), as jax.{what}; for a Graph "
                            f"use uopcli.tools.forward.jvp(graph, wrt) (uopgrad jvp), or pass graph.outputs.values()")
    return _node_list(roots, f"{what}: roots")


def _tangents(roots: list[UOp], seeds: dict[UOp, UOp], w: _Walk) -> dict[UOp, UOp]:
    """Every node's nonzero tangent, sources first, over the roots' scope (call bodies are
    walked by the call rows). Nodes made here carry their forward node's metadata, under
    TANGENT_SCOPE: made_for holds it while the node's rule runs, so each new node is
    tagged as it is made (a walk over each result to tag it afterwards was a sixth of
    forward mode's time)."""
    outer = made_for[0]  # a call row's walk of its body runs inside the call's own rule
    try:
        return _tangents_tagged(roots, seeds, w)
    finally:
        made_for[0] = outer


def _tangents_tagged(roots: list[UOp], seeds: dict[UOp, UOp], w: _Walk) -> dict[UOp, UOp]:
    tangents = dict(seeds)
    get = tangents.get
    rules = FORWARD_RULES
    calls = _CALL_OPS
    metas_get, cell = _tangent_metas.get, made_for
    batch = w.batch
    neg, signed = _Neg, SIGNED_OPS
    last_meta = cell  # never a node's metadata
    for node in scope_toposort(roots, ZERO_TANGENT_OPS):
        src = node.src
        if not src or node in seeds:
            continue
        if len(src) == 1:    # unrolled for one and two sources: most nodes, a million in a chain
            t = get(src[0])
            if t is None:
                continue
            negated = t.__class__ is neg
            t = (t,)
        elif len(src) == 2 and node.op not in calls:
            t = (get(src[0]), get(src[1]))
            if t[0] is None and t[1] is None:
                continue
            negated = t[0].__class__ is neg or t[1].__class__ is neg
        else:
            t = tuple(map(get, src))  # a call's body (src[0]) is no node of this scope: None
            if t.count(None) == len(t):
                continue
            negated = any(e.__class__ is neg for e in t)
        rule = rules.get(node.op)
        if rule is None:
            raise GradientError(f"no forward rule for {node.op}: {node!r}")
        if node.meta is not last_meta:  # neighbours share metadata objects: one look-up per run
            last_meta = node.meta
            cell[0] = metas_get(last_meta) or _tangent_meta(node)
        if negated and node.op not in signed:
            t = tuple(map(_made, t))
        out = rule(node, t, w)
        if out is None:
            continue
        shape = node.shape
        if shape is not None and out.shape != (shape if batch is None else (batch, *shape)):  # w.shape(node)
            out = w.fit(out, node)
        tangents[node] = out
    for root in roots:  # what the caller reads: nodes
        out = tangents.get(root)
        if out.__class__ is neg:
            cell[0] = metas_get(root.meta) or _tangent_meta(root)
            tangents[root] = _neg(out.t)
    return tangents


_tangent_metas: dict = {}


def _tangent_meta(node: UOp) -> Metadata:
    """The metadata of nodes made for node `node`: its name, loc and backward flag, its
    scope under TANGENT_SCOPE."""
    meta = node.meta
    found = _tangent_metas.get(meta)
    if found is None:
        name, loc, backward, scope = meta if meta is not None else (None, None, False, None)
        found = _tangent_metas[meta] = Metadata(name, loc, backward,
                                                TANGENT_SCOPE if scope is None else f"{TANGENT_SCOPE}/{scope}")
    return found


def is_tangent(meta: Metadata | None) -> bool:
    """Whether a node with metadata `meta` was made by forward mode."""
    scope = meta.scope if meta is not None else None
    return scope is not None and (scope == TANGENT_SCOPE or scope.startswith(TANGENT_SCOPE + "/"))


# ----------------------------------------------------------------------------- JAX's three

def jvp(roots: UOp | Iterable[UOp], tangents: Mapping[UOp, UOp]) -> tuple[list[UOp], list[UOp]]:
    """(roots, their tangents), as jax.jvp: zero tangents as zeros of the root's shape.
    Both are lists, also for one root given as a UOp."""
    roots = _roots(roots, "jvp")
    found = compute_jvp(roots, tangents)
    return roots, [found[r] if found[r] is not None else r.zeros_like() for r in roots]


class Linearized(NamedTuple):
    """What `linearize` returns: the forward roots (`primals`), the tangent inputs (one
    PARAM per target), the tangent outputs (linear in the tangent inputs), and the
    residuals: the forward nodes the tangent outputs read (what jax.linearize keeps)."""
    primals: list[UOp]
    tangent_inputs: list[UOp]
    tangent_outputs: list[UOp]
    residuals: list[UOp]


def linearize(roots: UOp | Iterable[UOp], targets: UOp | Iterable[UOp], prefix: str = "tangent_") -> Linearized:
    """As jax.linearize: the forward graph and a linear graph of new PARAMs `tangent_<name>`
    (`<prefix><i>` for an unnamed target, i its position). A PARAM is its name, shape and
    dtype (hash-consed), so a name the graph already has would make the "new" input that
    very node, and one name for two targets one input for both (transpose would count
    them twice): such a name is numbered by uop.numbered_name, as every command numbers
    the names it adds: `tangent2_x`."""
    roots, targets = _roots(roots, "linearize"), _targets(targets)
    taken = {n.arg for n in toposort([*roots, *targets]) if n.op == Ops.PARAM and isinstance(n.arg, str)}
    inputs = [UOp.param(numbered_name(prefix, t.arg if isinstance(t.arg, str) else str(i), taken), t.shape, t.dtype)
              for i, t in enumerate(targets)]
    _, outs = jvp(roots, dict(zip(targets, inputs)))
    return Linearized(roots, inputs, outs, _residuals(outs, set(inputs)))


def _targets(targets) -> list[UOp]:
    """linearize's targets as a list of distinct value nodes (a target given twice would
    have two tangent inputs and the walk read only the last)."""
    found = _node_list(targets, "linearize: targets")
    first: dict[UOp, int] = {}
    for i, t in enumerate(found):
        if t.shape is None:
            raise GradientError(f"linearize: target {i} is {t!r}, not a value")
        if first.setdefault(t, i) != i:
            raise GradientError(f"linearize: target {i} is target {first[t]} again: {t!r}")
    return found


def _node_list(nodes, what: str) -> list[UOp]:
    """node_list, refusing in one line what is not a node (a name or an array would fail
    deep inside a walk, as an AttributeError)."""
    if isinstance(nodes, UOp):
        return [nodes]
    try:
        found = None if isinstance(nodes, (str, Graph)) else list(nodes)
    except TypeError:  # a float, a 0-d array
        found = None
    if found is None:
        raise GradientError(f"{what} are nodes (UOp), one or a list; got {_kind(nodes)}")
    for i, node in enumerate(found):
        if not isinstance(node, UOp):
            raise GradientError(f"{what} are nodes (UOp), one or a list; item {i} is {_kind(node)}")
    return found


def _kind(value) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def _residuals(outputs: list[UOp], tangent_inputs: set[UOp]) -> list[UOp]:
    """The forward nodes (not tangent nodes) the tangent outputs read directly."""
    made = {n for n in scope_toposort(outputs) if n in tangent_inputs or is_tangent(n.meta)}
    found = {}
    for node in made:
        for s in scope_sources(node):
            if s not in made and s.op != Ops.CONST:
                found[s] = None
    return list(found)


def transpose(lin: Linearized, cotangents: UOp | Iterable[UOp]) -> list[UOp]:
    """As jax.linear_transpose: J^T u for cotangents u (one per tangent output, of its shape
    and dtype), one per tangent input: the reverse of the linear graph (its residuals held
    as they are). A cotangent that does not fit is refused naming it and its output (not
    the names of the reverse walk that does the work)."""
    from .gradient import compute_gradient
    if not isinstance(lin, Linearized):
        raise GradientError(f"transpose takes what linearize returns (a Linearized), got {_kind(lin)}")
    cotangents = _node_list(cotangents, "transpose: cotangents")
    outputs = lin.tangent_outputs
    if len(cotangents) != len(outputs):
        raise GradientError(f"transpose: {len(cotangents)} cotangents for {len(outputs)} outputs "
                            f"(one per tangent output, in the order of linearize's roots)")
    for i, (u, out) in enumerate(zip(cotangents, outputs)):
        if u.op == Ops.NOOP and len(outputs) > 1:  # no cotangent (zero), as compute_gradient takes it in a TUPLE
            continue
        if u.shape != out.shape or u.dtype is not out.dtype:
            raise GradientError(f"transpose: cotangent {i} is {_typed(u)}, but tangent output {i} (of root {i}, "
                                f"{lin.primals[i]!r}) is {_typed(out)}: a cotangent has its tangent output's "
                                f"shape and dtype")
    if len(cotangents) == 1:
        root, seed = outputs[0], cotangents[0]
    else:
        root, seed = UOp.tuple(*outputs), UOp.tuple(*cotangents)
    grads = compute_gradient(root, seed, lin.tangent_inputs)
    return [grads[t] for t in lin.tangent_inputs]


def _typed(node: UOp) -> str:
    return f"{node.dtype.name}{list(node.shape)}" if node.shape is not None else f"{node.op} (no value)"


__all__ = ["FORWARD_RULES", "TANGENT_SCOPE", "Linearized", "compute_jvp", "is_tangent", "jvp", "linearize",
           "transpose"]
