"""Reverse-mode differentiation of UOp graphs: the rule table and `compute_gradient`.

    grads = compute_gradient(loss, UOp.const(1.0), [w, b])   # {w: dloss/dw, b: dloss/db}

The algorithm is tinygrad's (see shared/seed): walk, from the root down, only the nodes on
a path from the root to a target; give each its incoming gradient; let its row of
GRADIENT_RULES turn that into one gradient per source; add up what arrives at a node from
several users. The gradients are themselves UOps, so they can be differentiated again.

Calls: a GETTUPLE sends its gradient to element i of a TUPLE on its FUNCTION/CALL (NOOP
elsewhere), and tuple gradients add element by element. A FUNCTION is differentiated
through a new FUNCTION `<name>_backward` whose body is the gradient of its body with
respect to only the slots that lead to a target; a CALL through its own backward body.

Every node differentiation creates carries Metadata(name, loc, backward=True) of the
forward node it was made for (the first tag wins).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Iterable

from ..errors import GradientError
from .ops import Ops, accumulation_dtype, dtypes
from .uop import Metadata, UOp, make_shaped, next_serial, tag_new_nodes
from .substitute import substitute
from .walks import no_gc, node_list, on_a_deep_stack, scope_toposort

_make = UOp.make
_shaped = make_shaped
_NOOP_OP = Ops.NOOP
_CALL_OPS = frozenset({Ops.FUNCTION, Ops.CALL})
LN2 = math.log(2.0)


# ----------------------------------------------------------------------------- builders
# Thin node builders for the rules: sources already fit (same dtype; equal shapes or ()),
# so each result's shape is known (the larger source's, or the one asked for) and the
# node is made without inference (make_shaped).

def _add(a: UOp, b: UOp) -> UOp: return _shaped(Ops.ADD, a.dtype, (a, b), None, a.shape or b.shape)
def _sub(a: UOp, b: UOp) -> UOp: return _shaped(Ops.SUB, a.dtype, (a, b), None, a.shape or b.shape)
def _mul(a: UOp, b: UOp) -> UOp: return _shaped(Ops.MUL, a.dtype, (a, b), None, a.shape or b.shape)
def _div(a: UOp, b: UOp) -> UOp: return _shaped(Ops.FDIV, a.dtype, (a, b), None, a.shape or b.shape)
def _neg(a: UOp) -> UOp: return _shaped(Ops.NEG, a.dtype, (a,), None, a.shape)
def _where(c: UOp, a: UOp, b: UOp) -> UOp: return _shaped(Ops.WHERE, a.dtype, (c, a, b), None, c.shape or a.shape or b.shape)
def _eq(a: UOp, b: UOp) -> UOp: return _shaped(Ops.CMPEQ, dtypes.bool, (a, b), None, a.shape or b.shape)
def _lt(a: UOp, b: UOp) -> UOp: return _shaped(Ops.CMPLT, dtypes.bool, (a, b), None, a.shape or b.shape)
def _const(like: UOp, value) -> UOp: return like.const_like(value)
def _expand(x: UOp, shape: tuple) -> UOp: return x if x.shape == shape else _shaped(Ops.EXPAND, x.dtype, (x,), shape, shape)
def _reshape(x: UOp, shape: tuple) -> UOp: return _shaped(Ops.RESHAPE, x.dtype, (x,), shape, shape)
def _sin(x: UOp) -> UOp: return _shaped(Ops.SIN, x.dtype, (x,), None, x.shape)
def _cast(x: UOp, dtype) -> UOp: return x if x.dtype is dtype else _shaped(Ops.CAST, dtype, (x,), None, x.shape)


_zeros_by_dtype: dict = {}


def _zero(like: UOp) -> UOp:
    """The scalar 0 of like's dtype (const_like does not cache zeros: 0.0 and -0.0 differ)."""
    zero = _zeros_by_dtype.get(like.dtype)
    if zero is None:
        zero = _zeros_by_dtype[like.dtype] = UOp.const(0, like.dtype)
    return zero


def _reduce(x: UOp, op: str, axes: tuple, shape: tuple) -> UOp:
    """REDUCE `op` over `axes`, whose result has `shape` (x's, with those axes 1)."""
    return _shaped(Ops.REDUCE, x.dtype, (x,), (op, axes), shape) if axes else x


def _sum_axes(g: UOp, axes: tuple, shape: tuple) -> UOp:
    """REDUCE ADD over `axes` (to `shape`); float16 adds up in float32 and is cast back
    (as tinygrad does)."""
    if not axes:
        return g
    wide = accumulation_dtype(g.dtype)
    if wide is not g.dtype:
        return _cast(_reduce(_cast(g, wide), "ADD", axes, shape), g.dtype)
    return _reduce(g, "ADD", axes, shape)


def _sum_to_scalar(g: UOp) -> UOp:
    """`g` summed to shape (): the gradient of a source reached by implicit scalar broadcast."""
    rank = len(g.shape)
    return _reshape(_sum_axes(g, tuple(range(rank)), (1,) * rank), ())


def _zeros(like: UOp) -> UOp:
    return like.zeros_like()


# ----------------------------------------------------------------------------- rules
# A rule gets the node's incoming gradient `g` (the node's shape and dtype), the node `y`,
# and `need`, one bool per source: whether that source leads to a target. It returns one
# gradient per source, None (or False) for "no gradient"; rules whose gradients cost new
# nodes skip the sources not needed. A gradient has its source's shape, or the node's
# shape for a shape-() source (compute_gradient sums it down). The forward result is the
# node itself (`y`): rules reuse it instead of recomputing it.

def _fdiv_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    a, b = y.src
    g_over_b = _div(g, b)
    return g_over_b, need[1] and _neg(_mul(g_over_b, y))   # -g*y/b = -g*a/b^2


def _cast_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    """g cast back to x's dtype, between floating-point dtypes. A cast to an integer or bool
    is piecewise constant (derivative 0, as torch and JAX have it, and as the forward row
    says), so no gradient crosses one, nor comes back out of an integer value: tinygrad
    casts g to the integer and back, which truncates it (frac = t - float(int(t)) got
    w - trunc(w) for w, where d frac/dt is 1)."""
    x = y.src[0]
    return (_cast(g, x.dtype),) if x.dtype.is_float and y.dtype.is_float else (None,)


def _max_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    a, b = y.src
    # half of g at a tie: g * 0.5 as tinygrad writes it; an integer g (a MAX of ints under an
    # integer root: no gradient crosses a cast into a float target) has no 0.5, and halves
    # by dividing, truncating as the integer REDUCE MAX rule does
    half = _mul(g, _const(g, 0.5)) if g.dtype.is_float else _div(g, _const(g, 2))
    tie_share = _where(_eq(a, b), half, _zero(g))
    return need[0] and _where(_lt(b, a), g, tie_share), need[1] and _where(_lt(a, b), g, tie_share)


def _pow_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    b, e = y.src
    zero = _zero(b)
    d_base = d_exp = None
    if need[0]:   # d/db b^e = e b^(e-1), and 0 at e == 0 (b^0 is constant even at b == 0)
        d_base = _mul(g, _where(_eq(e, zero), zero, _mul(e, _make(Ops.POW, b.dtype, (b, _sub(e, _const(e, 1.0)))))))
    if need[1]:   # d/de b^e = b^e ln(b); at b == 0: -inf for e < 0, else 0
        at_zero = _where(_lt(e, zero), _const(b, -math.inf), zero)
        d_exp = _mul(g, _where(_eq(b, zero), at_zero, _mul(_mul(y, b.log2()), _const(b, LN2))))
    return d_base, d_exp


def _reduce_max_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    (x,) = y.src
    axes = y.arg[1]
    mask = _cast(_eq(x, _expand(y, x.shape)), x.dtype)  # 1 where x holds the maximum
    count = _reduce(mask, "ADD", axes, y.shape)          # ties share the gradient evenly
    return (_mul(_expand(_div(g, count), x.shape), mask),)


def _reduce_mul_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    # d prod(x) / d x_i = the product of the other elements, made of MULs and movement ops
    # only (no division, no test for zero), so that its own derivatives are exact at every
    # order, at zeros too: d²/dx_i dx_j = the product of all but i and j, nonzero at
    # x_i = x_j = 0 (see _others_product). The reduced axes are merged into one first.
    (x,) = y.src
    axes, shape = y.arg[1], x.shape
    count = math.prod(shape[a] for a in axes)
    if count == 0 or 0 in shape:
        return (_zeros(x),)
    if count == 1:
        return (_expand(g, shape),)  # prod of one element: the identity
    kept = tuple(a for a in range(len(shape)) if a not in axes)
    order = None if axes == tuple(range(axes[0], axes[0] + len(axes))) else kept + axes
    if order is None:  # adjacent axes: merged where they are
        axis, moved, g_moved = axes[0], x, g
    else:              # moved last, then merged
        axis = len(kept)
        moved = _shaped(Ops.PERMUTE, x.dtype, (x,), order, tuple(shape[a] for a in order))
        g_moved = _shaped(Ops.PERMUTE, g.dtype, (g,), order, tuple(g.shape[a] for a in order))
    outer, inner = moved.shape[:axis], moved.shape[axis + len(axes):]
    merged = moved if len(axes) == 1 else _reshape(moved, outer + (count,) + inner)
    scale = g_moved if len(axes) == 1 else _reshape(g_moved, outer + (1,) + inner)
    grad = _reshaped(_others_product(merged, axis, scale), moved.shape)
    if order is not None:
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        grad = _shaped(Ops.PERMUTE, x.dtype, (grad,), inverse, shape)
    return (grad,)


def _others_product(v: UOp, axis: int, scale: UOp) -> UOp:
    """For each element of `v` (length >= 2 along `axis`), `scale` (v's shape with 1 on
    `axis`) times the product of the others along that axis, by halves: with v cut into a
    first half a and a second half b, and p = a*b (element by element), the others of a_i
    are b_i times the others of p_i in p, the others of b_i are a_i times the same; p is
    the same problem at half the length, and at length 1 the others are the empty product,
    there `scale` (so g costs one multiply per kept element, not per element). An odd
    length is padded with a 1. About 3 multiplies per element over contiguous runs (pairs
    of neighbours would put a 2-long axis innermost, 2-3x slower in numpy), no division:
    exact at zeros, and so is every derivative of the graph, being made of MULs."""
    down = []  # (halves, length before padding) per level, longest first
    while v.shape[axis] > 1:
        length = v.shape[axis]
        if length % 2:
            v = _pad_with_one(v, axis)
        before, after = v.shape[:axis], v.shape[axis + 1:]
        half = v.shape[axis] // 2
        halves = _reshape(v, before + (2, half) + after)
        down.append((halves, length))
        if half == 1:
            break  # the others of one pair product are the empty product: nothing to build
        first, second = (_half(halves, axis, k) for k in (0, 1))
        v = _reshape(_mul(first, second), before + (half,) + after)
    others = scale
    for halves, length in reversed(down):
        flags = tuple(a == axis for a in range(len(halves.shape)))
        swapped = _shaped(Ops.FLIP, halves.dtype, (halves,), flags, halves.shape)  # (b, a) for halves (a, b)
        row = _reshaped(others, halves.shape[:axis] + (1,) + halves.shape[axis + 1:], others is not scale)
        shape = halves.shape[:axis] + (halves.shape[axis + 1] * 2,) + halves.shape[axis + 2:]
        others = _reshape(_mul(_expand(row, halves.shape), swapped), shape)
        if shape[axis] != length:
            others = _cut(others, axis, length)
    return others


def _reshaped(x: UOp, shape: tuple, made_here: bool = True) -> UOp:
    """`x` reshaped to `shape`: itself when it has it; a reshape `made_here` (by this rule,
    never a node a caller may hold as a target) is reshaped from its source instead."""
    if made_here and x.op == Ops.RESHAPE:
        x = x.src[0]
    return x if x.shape == shape else _reshape(x, shape)


def _half(halves: UOp, axis: int, k: int) -> UOp:
    """Half k of `halves` (cut along `axis`, the halves' axis), keeping that axis."""
    bounds = tuple((k, k + 1) if a == axis else (0, n) for a, n in enumerate(halves.shape))
    return _shaped(Ops.SHRINK, halves.dtype, (halves,), bounds, tuple(e - s for s, e in bounds))


def _cut(x: UOp, axis: int, length: int) -> UOp:
    """The first `length` elements of `axis`."""
    bounds = tuple((0, length) if a == axis else (0, n) for a, n in enumerate(x.shape))
    return _shaped(Ops.SHRINK, x.dtype, (x,), bounds, tuple(e - s for s, e in bounds))


def _pad_with_one(x: UOp, axis: int) -> UOp:
    """`x` with a 1 appended along `axis`: a PAD, its zero replaced by 1 through a WHERE on
    a constant mask (the data's bits stay as they are, -0.0 included)."""
    padding = tuple((0, int(a == axis)) for a in range(len(x.shape)))
    shape = tuple(n + p for n, (_, p) in zip(x.shape, padding))
    inside = _shaped(Ops.PAD, dtypes.bool, (UOp.full(x.shape, True, dtypes.bool),), padding, shape)
    return _where(inside, _shaped(Ops.PAD, x.dtype, (x,), padding, shape), _const(x, 1))


def _expand_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    shapes = (y.src[0].shape, y.shape)
    axes = _grown_axes.get(shapes)
    if axes is None:  # graphs repeat a few shapes: remember which axes an expand grows
        if len(_grown_axes) > 4096:
            _grown_axes.clear()
        axes = _grown_axes[shapes] = tuple(i for i, (a, b) in enumerate(zip(*shapes)) if a != b)
    return (_sum_axes(g, axes, shapes[0]),)


_grown_axes: dict[tuple, tuple] = {}


def _permute_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    order = y.arg
    inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
    return (_shaped(Ops.PERMUTE, g.dtype, (g,), inverse, y.src[0].shape),)


def _pad_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    x = y.src[0]
    window = tuple((before, before + size) for (before, _), size in zip(y.arg, x.shape))
    return (_make(Ops.SHRINK, g.dtype, (g,), window),)


def _shrink_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    x = y.src[0]
    padding = tuple((start, size - end) for (start, end), size in zip(y.arg, x.shape))
    return (_make(Ops.PAD, g.dtype, (g,), padding),)


def _copy_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    x = y.src[0]
    device = x.arg if x.op == Ops.COPY else "CPU"
    return (_make(Ops.COPY, g.dtype, (g,), device),)


def _gettuple_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    outputs = len(y.src[0].src[0].src)
    elements = [UOp.noop()] * outputs
    elements[y.arg] = g
    return (UOp.tuple(*elements),)


def _tuple_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    return tuple(None if e.op == _NOOP_OP else e for e in g.src)


def _function_rule(g: UOp, y: UOp, need: tuple[bool, ...], bodies: dict | None = None):
    """Through `<name>_backward`: a FUNCTION whose body is the gradient of this body with
    respect to the needed slots only, reading the output gradients as extra slots.
    `bodies` remembers backward bodies within one compute_gradient: a function called at
    many sites (an RNN cell) is differentiated once, each site only binds its values."""
    body, args = y.src[0], y.src[1:]
    needed = tuple(i for i, wanted in enumerate(need[1:]) if wanted)
    arrived = tuple(e.op != _NOOP_OP for e in g.src)
    key = (body, needed, arrived)
    closed = None if bodies is None else bodies.get(key)
    if closed is None:
        n = len(args)
        since = next_serial()  # the output-gradient slots made here are new nodes of the inner walk
        grad_slots = tuple(UOp.slot(n + j, out.shape, out.dtype) if present else UOp.noop()
                           for j, (present, out) in enumerate(zip(arrived, body.src)))
        slot_targets = [UOp.slot(i, args[i].shape, args[i].dtype) for i in needed]
        inner = _gradients(body, UOp.tuple(*grad_slots), slot_targets, since, bodies)
        closed = _closed_body([inner[t] for t in slot_targets])
        if bodies is not None:
            bodies[key] = closed
    backward = _bind(f"{y.arg}_backward", closed, (*args, *g.src))
    return _gradients_per_arg(backward, needed, len(args))


def _call_rule(g: UOp, y: UOp, need: tuple[bool, ...], bodies: dict | None = None):
    """Through the CALL's own backward body (slots 0..n-1 the args, n..n+m-1 the output
    gradients), bound to the args and output gradients as a FUNCTION `<name>_backward`."""
    name, grad_body = y.arg
    if grad_body is None:
        raise GradientError(f"CALL {name!r} has no backward body (grad): cannot differentiate through it")
    args = y.src[1:]
    wanted = tuple(i for i, needed in enumerate(need[1:]) if needed and grad_body.src[i].op != _NOOP_OP)
    if not wanted:
        return (None,) * len(y.src)
    key = (grad_body, wanted)
    closed = None if bodies is None else bodies.get(key)
    if closed is None:
        closed = _closed_body([grad_body.src[i] for i in wanted])
        if bodies is not None:
            bodies[key] = closed
    backward = _bind(f"{name}_backward", closed, (*args, *g.src))
    return _gradients_per_arg(backward, wanted, len(args))


def _gradients_per_arg(backward: UOp, indices, n_args: int):
    grads: list[UOp | None] = [None] * (n_args + 1)  # src[0] is the body: no gradient
    for k, i in enumerate(indices):
        grads[1 + i] = backward.gettuple(k)
    return tuple(grads)


def _reduce_rule(g: UOp, y: UOp, need: tuple[bool, ...]):
    return GRADIENT_RULES[(Ops.REDUCE, y.arg[0])](g, y, need)


def _none(n: int):
    return lambda g, y, need: (None,) * n


# op -> rule(g, y, need) -> one gradient per source. REDUCE dispatches on its reduce op
# to the (REDUCE, op) rows. DETACH is never walked; its row says so for completeness.
GRADIENT_RULES = {
    # elementwise arithmetic
    Ops.ADD: lambda g, y, need: (g, g),                                    # d(a+b) = da + db
    Ops.SUB: lambda g, y, need: (g, _neg(g)),                              # d(a-b) = da - db
    Ops.MUL: lambda g, y, need: (need[0] and _mul(g, y.src[1]),            # d(ab) = b da + a db
                                 need[1] and _mul(g, y.src[0])),
    Ops.FDIV: _fdiv_rule,                                                  # d(a/b) = da/b - (y/b) db
    Ops.MAX: _max_rule,                                                    # the larger gets g; ties g/2 each
    Ops.POW: _pow_rule,                                                    # e b^(e-1) db + y ln(b) de (edges: see rule)
    Ops.MULACC: lambda g, y, need: (need[0] and _mul(g, y.src[1]),         # d(ab+c) = b da + a db + dc
                                    need[1] and _mul(g, y.src[0]), g),
    Ops.WHERE: lambda g, y, need: (None,                                   # c ? a : b: g where chosen, else 0
                                   need[1] and _where(y.src[0], g, _zero(g)),
                                   need[2] and _where(y.src[0], _zero(g), g)),
    # elementwise unary (EXP2, SQRT, RECIPROCAL reuse y itself)
    Ops.NEG: lambda g, y, need: (_neg(g),),                                # d(-x) = -dx
    Ops.RECIPROCAL: lambda g, y, need: (_mul(_mul(_neg(g), y), y),),       # d(1/x) = -y^2 dx, as (-g y) y (tinygrad's
    # `-ctx * ret * ret`): its devices make that (-g/x)/x (a*(1/b) -> a/b), and so does eval
    Ops.SQRT: lambda g, y, need: (_div(g, _mul(y, _const(y, 2.0))),),      # d sqrt(x) = dx / (2y)
    Ops.EXP2: lambda g, y, need: (_mul(_mul(g, y), _const(y, LN2)),),      # d 2^x = y ln2 dx
    Ops.LOG2: lambda g, y, need: (_div(g, _mul(y.src[0], _const(y, LN2))),),  # d log2(x) = dx / (x ln2)
    Ops.SIN: lambda g, y, need: (_mul(_sin(_sub(_const(y, math.pi / 2), y.src[0])), g),),  # d sin x = sin(pi/2-x) dx
    Ops.TRUNC: lambda g, y, need: (_zeros(y.src[0]),),                     # piecewise constant: 0
    Ops.CAST: _cast_rule,                                                  # g, back in x's dtype; none across ints
    Ops.BITCAST: _none(1),                                                 # bits, not values: none
    # comparisons and integer ops: no gradient
    Ops.CMPLT: _none(2), Ops.CMPNE: _none(2), Ops.CMPEQ: _none(2),
    Ops.CDIV: _none(2), Ops.CMOD: _none(2), Ops.AND: _none(2), Ops.OR: _none(2),
    Ops.XOR: _none(2), Ops.SHL: _none(2), Ops.SHR: _none(2),
    # reduce
    Ops.REDUCE: _reduce_rule,
    (Ops.REDUCE, "ADD"): lambda g, y, need: (_expand(g, y.src[0].shape),),  # each element adds once: g expanded
    (Ops.REDUCE, "MAX"): _reduce_max_rule,                                 # g * (x==y) / count(x==y)
    (Ops.REDUCE, "MUL"): _reduce_mul_rule,                                 # g * product of the others, MULs only: exact at every order
    # movement: the inverse movement of g
    Ops.RESHAPE: lambda g, y, need: (_reshape(g, y.src[0].shape),),           # g reshaped back
    Ops.EXPAND: _expand_rule,                                              # g summed over the grown axes
    Ops.PAD: _pad_rule,                                                    # g shrunk to the unpadded window
    Ops.SHRINK: _shrink_rule,                                              # g padded back with zeros
    Ops.PERMUTE: _permute_rule,                                            # g permuted by the inverse order
    Ops.FLIP: lambda g, y, need: (_make(Ops.FLIP, g.dtype, (g,), y.arg),),  # a flip is its own inverse
    # identity-valued
    Ops.CONTIGUOUS: lambda g, y, need: (g,),                               # identity
    Ops.CONTIGUOUS_BACKWARD: lambda g, y, need: (g.contiguous(),),         # identity; g made contiguous
    Ops.DETACH: _none(1),                                                  # stops gradients
    Ops.COPY: _copy_rule,                                                  # g copied back to x's device
    # memory
    Ops.STORE: lambda g, y, need: (None, g),                               # the stored value gets g
    Ops.AFTER: lambda g, y, need: (None, g),                               # after the store: the stored value
    # tuples and calls
    Ops.TUPLE: _tuple_rule,                                                # element i of the TUPLE gradient
    Ops.GETTUPLE: _gettuple_rule,                                          # TUPLE(NOOP.., g at i, ..NOOP) to the call
    Ops.FUNCTION: _function_rule,                                          # via `<name>_backward`, needed slots only
    Ops.CALL: _call_rule,                                                  # via the CALL's backward body
}


# ----------------------------------------------------------------------------- the walk

def compute_gradient(root: UOp, root_grad: UOp, targets: UOp | Iterable[UOp]) -> dict[UOp, UOp]:
    """The gradient of `root` (seeded with `root_grad`, of root's shape and dtype) with
    respect to each target: {target: gradient}, every target present (zeros of its shape
    when the root does not depend on it). Targets must be floating point; one UOp is one
    target (as torch.autograd.grad takes one tensor), never its rows."""
    targets = list(dict.fromkeys(node_list(targets)))
    for t in targets:
        if not isinstance(t, UOp) or t.shape is None:
            raise GradientError(f"a target must be a value node, got {t!r}")
        if not t.dtype.is_float:
            raise GradientError(f"target {t!r} is {t.dtype.name}: only floating-point targets have gradients")
    _check_root_grad(root, root_grad)
    since = next_serial()
    with no_gc():
        try:
            return _gradients(root, root_grad, targets, since)
        except RecursionError:  # functions nested hundreds deep: once more, on a deep stack
            return on_a_deep_stack(_gradients, root, root_grad, targets, since)


def _check_root_grad(root: UOp, root_grad: UOp) -> None:
    if not isinstance(root, UOp) or not isinstance(root_grad, UOp):
        raise GradientError("root and root_grad must be UOps")
    if root.op == Ops.TUPLE:
        if root_grad.op != Ops.TUPLE or len(root_grad.src) != len(root.src):
            raise GradientError(f"the gradient of a TUPLE of {len(root.src)} must be a TUPLE of as many")
        for element, grad in zip(root.src, root_grad.src):  # each fits its element, or is NOOP (none)
            if grad.op != _NOOP_OP:
                _check_root_grad(element, grad)
    elif root_grad.shape != root.shape or root_grad.dtype is not root.dtype:
        raise GradientError(f"root_grad {root_grad.dtype.name}{list(root_grad.shape or ())} does not fit "
                            f"root {root.dtype.name}{list(root.shape or ())}")


def _gradients(root: UOp, root_grad: UOp, targets: list[UOp], since: int | None = None,
               bodies: dict | None = None) -> dict[UOp, UOp]:
    """The walk, the rules, and the metadata sweep; nodes with serial >= `since` are new.
    `bodies`: the backward bodies of calls made so far in this compute_gradient."""
    if since is None:
        since = next_serial()
    walk, reaches = _target_path(root, targets)
    grads = _backpropagate(walk, reaches, root, root_grad, since, {} if bodies is None else bodies)
    result = {}
    for t in targets:
        grad = grads.get(t)
        if grad is None:
            grad = _zeros(t)
        tag_new_nodes(grad, since, _backward_meta(t))  # the sweep: nothing new left untagged
        result[t] = grad
    return result


def _target_path(root: UOp, targets: list[UOp]) -> tuple[list[UOp], set[UOp]]:
    """The nodes that depend on a target, in the order of tinygrad's walk, and that set
    plus the targets.

    The order is the post-order of a depth-first walk from the root, sources in order:
    tinygrad's toposort, so that gradients arriving at a node from several users add up
    in the same order, and the result is the same graph in every process (an order by
    creation would follow whatever the process built first). A DETACH depends on nothing
    but is walked through, as tinygrad does, since what lies under it takes its place in
    the order there. A call body is closed (it reaches no graph input), so the walk skips
    it (src[0] of FUNCTION/CALL). A node is expanded when popped: it goes back on the
    stack under an _EMIT marker with its sources on top, the first on top; when the marker
    comes up, all its sources are placed."""
    reaches = set(targets)
    walk: list[UOp] = []
    expanded: set[UOp] = set()
    stack = [root]
    pop, push, expand = stack.pop, stack.append, expanded.add
    depends_on_none, on_path, step = reaches.isdisjoint, reaches.add, walk.append
    calls, detach, emit = _CALL_OPS, Ops.DETACH, _EMIT
    while stack:
        node = pop()
        if node is emit:
            node = pop()
            if not depends_on_none(node.src) and node.op != detach:
                on_path(node)
                step(node)
            continue
        if node in expanded:
            continue
        expand(node)
        src = node.src
        if not src:  # a leaf depends on no target (a target is on the path by itself)
            continue
        push(node)
        push(emit)
        if node.op in calls:
            src = src[1:]
        # sources on the stack, the first on top, unrolled for one and two as in
        # formats/uop/writer.py's _canonical_nodes (a shared helper would cost a call per node here)
        count = len(src)
        if count == 1:
            if src[0] not in expanded:
                push(src[0])
        elif count == 2:
            first, second = src
            if second not in expanded:
                push(second)
            if first not in expanded:
                push(first)
        else:
            for s in reversed(src):
                if s not in expanded:
                    push(s)
    return walk, reaches


_EMIT = None  # the stack marker "all sources of the node below are placed": never a UOp


def _rules_for_one_call(bodies: dict) -> dict:
    """GRADIENT_RULES with the call rows bound to this compute_gradient's backward bodies."""
    rules = dict(GRADIENT_RULES)
    for op in _CALL_OPS & rules.keys():
        rules[op] = partial(rules[op], bodies=bodies)
    return rules


def _backpropagate(walk: list[UOp], reaches: set[UOp], root: UOp, root_grad: UOp, since: int,
                   bodies: dict) -> dict[UOp, UOp]:
    grads: dict[UOp, UOp] = {root: root_grad}
    rules = _rules_for_one_call(bodies)
    grads_get = grads.get
    in_path = reaches.__contains__
    metas_get = _backward_metas.get
    set_meta = object.__setattr__
    for node in reversed(walk):  # users before their sources
        g = grads_get(node)
        if g is None or g.op == _NOOP_OP:
            continue
        rule = rules.get(node.op)
        if rule is None:
            raise GradientError(f"no gradient rule for {node.op}: {node!r}")
        src = node.src
        # only sources that lead to a target get a gradient (a walked node's only source does)
        need = _ONLY_SOURCE if len(src) == 1 else tuple(map(in_path, src))
        meta = None
        for s, grad, wanted in zip(src, rule(g, node, need), need):
            if not wanted or grad is None:
                continue
            if grad.shape != s.shape:
                grad = _fit_to_source(grad, s, node)
            prev = grads_get(s)
            if prev is not None and prev.op != _NOOP_OP:
                grad = _accumulate(prev, grad)
            grads[s] = grad
            if grad.meta is None and grad.serial >= since:  # new: tag it and what is new under it
                if meta is None:
                    meta = metas_get(node.meta) or _backward_meta(node)
                set_meta(grad, "meta", meta)
                for made in grad.src:  # usually old or tagged already: skip the walk's set-up
                    if made.meta is None and made.serial >= since:
                        tag_new_nodes(made, since, meta)
                if grad.op == Ops.CALL and grad.arg.grad is not None:
                    tag_new_nodes(grad.arg.grad, since, meta)
    return grads


_ONLY_SOURCE = (True,)


def _fit_to_source(grad: UOp, src: UOp, node: UOp) -> UOp:
    if src.shape == ():
        return _sum_to_scalar(grad)  # implicit scalar broadcast: the scalar's gradient adds up
    if src.shape is None:
        return grad                  # a void source (STORE under AFTER) takes g as it is
    raise GradientError(f"gradient rule of {node.op} gave shape {list(grad.shape or ())} "
                        f"for a source of shape {list(src.shape)}: {node!r}")


def _accumulate(prev: UOp, grad: UOp) -> UOp:
    """prev + grad; TUPLE gradients add element by element, a NOOP element adding nothing."""
    if prev.op == Ops.TUPLE and grad.op == Ops.TUPLE:
        return UOp.tuple(*(p if n.op == _NOOP_OP else n if p.op == _NOOP_OP else _add(p, n)
                           for p, n in zip(prev.src, grad.src)))
    return _add(prev, grad)


_backward_metas: dict[Metadata | None, Metadata] = {None: Metadata(None, None, True)}


def _backward_meta(node: UOp) -> Metadata:
    """The metadata of nodes made for forward node `node`: its name and loc, backward."""
    meta = node.meta
    found = _backward_metas.get(meta)
    if found is None:
        found = _backward_metas[meta] = Metadata(meta.name, meta.loc, True, meta.scope)
    return found


# ----------------------------------------------------------------------------- closed bodies

def _closed_body(outputs: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """`outputs` reading only slots 0..k-1: the slots they read, renumbered in order, and
    the original slot PARAM each new slot stands for (unread slots are dropped)."""
    used = _slots_read(outputs)
    order = sorted(used)
    if order != list(range(len(order))):
        renumbered = {used[old]: UOp.slot(new, used[old].shape, used[old].dtype) for new, old in enumerate(order)}
        # nested bodies are closed: their own slots stay; the caller tags the new nodes
        outputs = substitute(outputs, renumbered, into_bodies=False)
    return outputs, [used[i] for i in order]


def _bind(name: str, closed: tuple[list[UOp], list[UOp]], values: tuple[UOp, ...]) -> UOp:
    """The FUNCTION of a closed body, its slots bound to `values[original slot]` (a NOOP
    value, an output gradient that never arrived, is bound to zeros)."""
    outputs, slots = closed
    args = [values[p.arg] if values[p.arg].op != _NOOP_OP else _zeros(p) for p in slots]
    return UOp.function(name, outputs, args)


def _slots_read(roots: list[UOp]) -> dict[int, UOp]:
    """slot -> PARAM for the slot PARAMs `roots` read (not inside nested call bodies)."""
    return {node.arg: node for node in scope_toposort(roots) if node.op == Ops.PARAM and isinstance(node.arg, int)}
