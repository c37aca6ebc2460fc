"""EXACT: rewrites that never change a value, bit for bit, in IEEE 754 arithmetic.

Every row keeps -0.0, inf and nan as they were. "Bit for bit" counts every NaN as one
value: IEEE 754 leaves the sign and payload of a NaN that arithmetic produces to the
machine (x86 and ARM differ), so no program can rely on them. A row whose kept operand
lacks the node's shape (a scalar operand broadcast by the op) leaves the node alone:
dropping the op would change the shape.

Each row: the identity, then why it is exact.
"""

from __future__ import annotations

from ..ops import MOVEMENT, SELECTING_MOVES, Ops, dtypes
from ..pattern import PatternMatcher, UPat
from . import nodes as n
from .fold import fold, fold_constant_subgraph
from .walk import CONSTANT, MOVED_NEG, SCALAR, only_when

_BINARY_ELEMENTWISE = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD, Ops.AND, Ops.OR,
                       Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
_UNARY_ELEMENTWISE = (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.CAST,
                      Ops.BITCAST)

_INTS = tuple(d for d in vars(dtypes).values() if isinstance(d, type(dtypes.int8)) and d.is_int)
_FLOATS = tuple(d for d in vars(dtypes).values() if isinstance(d, type(dtypes.int8)) and d.is_float)
x_, y_, c_ = UPat.var("x"), UPat.var("y"), UPat.cvar("c")


# ----------------------------------------------------------------------------- row functions

def _plus_zero(x, c, node):
    """x + 0 = x: for integers always; for floats with c = -0.0 always (x + -0.0 = x, and
    +0.0 + -0.0 = +0.0), with c = +0.0 only where x cannot be -0.0 (-0.0 + +0.0 = +0.0)."""
    if c.dtype.is_int or n.is_negative_zero(c) or (c.arg == 0 and _never_negative_zero(x)):
        return n.full_shaped(x, node)
    return None


def _never_negative_zero(x) -> bool:
    """x is never -0.0: a cast of a bool or integer, 2^y (> 0 or +0.0), or a sum with +0.0."""
    if x.op == Ops.CAST:
        return not x.src[0].dtype.is_float
    if x.op == Ops.EXP2:
        return True
    if x.op == Ops.ADD:
        return any(n.is_const(s, 0) and not n.is_negative_zero(s) for s in x.src)
    return False


def _minus_zero(x, c, node):
    """x - 0 = x: integers always; floats with c = +0.0 (x - +0.0 = x + -0.0 = x)."""
    if c.dtype.is_int or (c.dtype.is_float and not n.is_negative_zero(c)):
        return n.full_shaped(x, node)
    return None


def _undo_cast(x, a, b):
    """CAST(CAST(x, a), x's dtype) = x when `a` holds every value of x's dtype exactly."""
    return x if b.dtype is x.dtype and _holds(a.dtype, x.dtype) else None


_MANTISSA = {dtypes.float16: 11, dtypes.float32: 24, dtypes.float64: 53}


def _holds(wide, narrow) -> bool:
    if narrow.is_bool:
        return True                                   # 0/1 survive every dtype and come back
    if narrow.is_float:
        return wide.is_float and wide.itemsize >= narrow.itemsize
    if wide.is_float:                                 # an integer fits a float's mantissa
        return narrow.itemsize * 8 - (narrow.kind == "i") <= _MANTISSA[wide]
    if wide.is_int:
        signed_ok = wide.kind == "i" or narrow.kind == "u"
        return (wide.itemsize > narrow.itemsize and (wide.kind == "i" or narrow.kind == "u")) or \
            (wide.itemsize == narrow.itemsize and wide.kind == narrow.kind and signed_ok)
    return False


def _merged_reshape(x, node):
    return x if node.arg == x.shape else n.make(Ops.RESHAPE, node, (x,), node.arg)


def _composed_permute(x, inner, node):
    order = tuple(inner.arg[i] for i in node.arg)
    return x if order == tuple(range(len(order))) else n.make(Ops.PERMUTE, node, (x,), order)


def _composed_flip(x, inner, node):
    flags = tuple(a != b for a, b in zip(inner.arg, node.arg))
    return x if not any(flags) else n.make(Ops.FLIP, node, (x,), flags)


@only_when(lambda key: key[2] in (Ops.RESHAPE, Ops.PERMUTE))
def _shorter_unit_axis_chain(node):
    chain = n.unit_axis_chain(node)
    if chain is None:
        return None
    base, order, length = chain
    if n.unit_axis_view_length(base, order, node.shape) >= length:
        return None
    view = n.unit_axis_view(base, order, node.shape)
    steps, walk = 0, view
    while walk is not base:
        steps, walk = steps + 1, walk.src[0]
    return view if steps < length else None


@only_when(lambda key: key.facts[0] & SCALAR)
def _canonical_broadcast(node):
    """A movement of a broadcast scalar is the scalar broadcast to the new shape."""
    scalar = n.scalar_of(node)
    if scalar is None:
        return None
    out = n.broadcast(scalar, node.shape)
    return None if out is node else out


@only_when(lambda key: any(op in SELECTING_MOVES and facts & SCALAR for op, facts in zip(key[2:], key.facts)))
def _scalar_operands(node):
    """op(broadcast(s), y) = op(s, y): the op broadcasts a shape-() operand itself, with
    the same value in every element; when every operand is a broadcast scalar, the op is
    computed once on the scalars and its result broadcast."""
    if node.shape == ():
        return None
    scalars = [n.scalar_of(s) if s.shape else s for s in node.src]
    if all(s is not None for s in scalars):
        return n.broadcast(n.make(node.op, node, tuple(scalars), node.arg), node.shape)
    src = tuple(s if (scalar is None or not s.shape or s.op not in SELECTING_MOVES) else scalar
                for s, scalar in zip(node.src, scalars))
    if src == node.src:
        return None
    return n.make(node.op, node, src, node.arg)


def _to_own_shape(node):
    """A RESHAPE or EXPAND to the shape its source has is nothing."""
    x = node.src[0]
    return x if x.shape == node.arg else None


def _unit_reduce(node):
    """Reducing axes of size 1 only: each result element is the one element reduced. MUL
    and MAX start from that element; a float ADD starts from +0.0 (numpy's sum), which
    turns -0.0 into +0.0, so it goes only where x is never -0.0."""
    x = node.src[0]
    if not all(x.shape[a] == 1 for a in node.arg[1]):
        return None
    if node.arg[0] == "ADD" and x.dtype.is_float and not _never_negative_zero(x):
        return None
    return x


def _max_of_copies(x, e, node):
    """max over axes an EXPAND grew = the copied value (max(v, v, ...) = v, nan too)."""
    if node.arg[0] != "MAX":
        return None
    grown = {i for i, (a, b) in enumerate(zip(x.shape, e.shape)) if a != b}
    if not set(node.arg[1]) <= grown:
        return None
    return x if x.shape == node.shape else n.make(Ops.EXPAND, node, (x,), node.shape)


def _where_mask(cond, node):
    """cond ? 1 : 0 = CAST(cond): a bool converts to exactly 1 or 0 (+0.0)."""
    return n.make(Ops.CAST, node, (cond,)) if cond.shape == node.shape else None


def _const_where(c, a, b, node):
    return n.full_shaped(a if c.arg else b, node)


def _negated_const(x, c, node, op=Ops.MUL):
    """(-x)*c = x*(-c): rounding is symmetric in sign, so negating an operand negates the
    correctly rounded result."""
    return n.make(op, node, (x, n.make(Ops.NEG, c, (c,))))


def _same_sources(i: int, j: int):
    """Rows whose pattern binds one name to two sources: tried only where the signature
    gives those sources the same op (matching then checks they are one node)."""
    return only_when(lambda key: key[i] == key[j])


# ----------------------------------------------------------------------------- the table

EXACT = PatternMatcher([
    # x*1 = 1*x = x: multiplying by one is exact for every x (-0.0, inf, nan included)
    (UPat(Ops.MUL, src=(x_, UPat.cvar(value=1)), name="node"), lambda x, node: n.full_shaped(x, node)),
    (UPat(Ops.MUL, src=(UPat.cvar(value=1), x_), name="node"), lambda x, node: n.full_shaped(x, node)),
    # x/1 = x: exact for floats; integer FDIV is C division, x/1 = x too
    (UPat(Ops.FDIV, src=(x_, UPat.cvar(value=1)), name="node"), lambda x, node: n.full_shaped(x, node)),
    # x+0 = 0+x = x: see _plus_zero for which zeros keep the sign of a zero
    (UPat(Ops.ADD, src=(x_, UPat.cvar("c", 0)), name="node"), _plus_zero),
    (UPat(Ops.ADD, src=(UPat.cvar("c", 0), x_), name="node"), _plus_zero),
    # x-0 = x: x - (+0.0) is x + (-0.0)
    (UPat(Ops.SUB, src=(x_, UPat.cvar("c", 0)), name="node"), _minus_zero),
    # integers: x*0 = 0 (no inf or nan to keep); only where the result is a scalar
    (UPat(Ops.MUL, _INTS, src=(x_, UPat.cvar("c", 0)), name="node"), lambda x, c, node: c if node.shape == () else None),
    # x+x = x*2 (tinygrad's `x+x -> x*2`): doubling is exact, and x+x rounds nothing either
    (UPat(Ops.ADD, src=(x_, x_)), _same_sources(2, 3)(lambda x: x * n.const(2, x))),
    # -(-x) = x
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x_,)),)), lambda x: x),
    # (-x)*c = x*(-c), (-x)/c = x/(-c): rounding is symmetric in sign. -(x*c) stays as it
    # is: in a gradient x*c is shared (a SUB's two operands get g and -g), and x*(-c)
    # beside it would be two nodes (the product, its constant) where the NEG is one.
    # Integers: the product is a ring's (wrapping), the same either way; the quotient is
    # not: -INT_MIN wraps to INT_MIN (INT_MIN/2 is -2^30, not 2^30), and an unsigned -1 is
    # the largest value (uint8: 255/2 = 127, 1/254 = 0). FDIV's rows are for floats only
    (UPat(Ops.MUL, src=(UPat(Ops.NEG, src=(x_,)), c_), name="node"), _negated_const),
    (UPat(Ops.FDIV, _FLOATS, src=(UPat(Ops.NEG, src=(x_,)), c_), name="node"),
     lambda x, c, node: _negated_const(x, c, node, Ops.FDIV)),
    # (-a)*(-b) = a*b: the two sign flips cancel in the correctly rounded product
    (UPat(Ops.MUL, src=(UPat(Ops.NEG, src=(x_,)), UPat(Ops.NEG, src=(y_,))), name="node"),
     lambda x, y, node: n.make(Ops.MUL, node, (x, y))),
    # a + (-b) = a - b, (-a) + b = b - a, a - (-b) = a + b: IEEE defines a - b as a + (-b),
    # and addition is commutative bit for bit
    (UPat(Ops.ADD, src=(x_, UPat(Ops.NEG, src=(y_,))), name="node"), lambda x, y, node: n.make(Ops.SUB, node, (x, y))),
    (UPat(Ops.ADD, src=(UPat(Ops.NEG, src=(x_,)), y_), name="node"), lambda x, y, node: n.make(Ops.SUB, node, (y, x))),
    (UPat(Ops.SUB, src=(x_, UPat(Ops.NEG, src=(y_,))), name="node"), lambda x, y, node: n.make(Ops.ADD, node, (x, y))),
    # a + move(-b) = a - move(b): a movement only places elements, the sign goes with them
    (UPat(Ops.ADD, src=(x_, UPat(SELECTING_MOVES, src=(UPat(Ops.NEG, src=(y_,)),), name="m")), name="node"),
     only_when(lambda key: key.facts[1] & MOVED_NEG)(
         lambda x, y, m, node: n.make(Ops.SUB, node, (x, n.make(m.op, m, (y,), m.arg))))),
    (UPat(Ops.ADD, src=(UPat(SELECTING_MOVES, src=(UPat(Ops.NEG, src=(y_,)),), name="m"), x_), name="node"),
     only_when(lambda key: key.facts[0] & MOVED_NEG)(
         lambda x, y, m, node: n.make(Ops.SUB, node, (x, n.make(m.op, m, (y,), m.arg))))),
    # (-a)/b = -(a/b), (-a)*b = -(a*b): the sign of a correctly rounded result follows the
    # operands' (moved up, it meets a constant or another NEG it cancels with)
    (UPat(Ops.FDIV, _FLOATS, src=(UPat(Ops.NEG, src=(x_,)), y_), name="node"),
     lambda x, y, node: -n.make(Ops.FDIV, node, (x, y))),
    (UPat(Ops.MUL, src=(UPat(Ops.NEG, src=(x_,)), y_), name="node"), lambda x, y, node: -n.make(Ops.MUL, node, (x, y))),
    (UPat(Ops.MUL, src=(x_, UPat(Ops.NEG, src=(y_,))), name="node"), lambda x, y, node: -n.make(Ops.MUL, node, (x, y))),
    # integers: (x*c1)*c2 = x*(c1*c2): wrapping arithmetic is a ring, the order is free
    (UPat(Ops.MUL, _INTS, src=(UPat(Ops.MUL, src=(x_, UPat.cvar("c1"))), UPat.cvar("c2")), name="node"),
     lambda x, c1, c2, node: n.make(Ops.MUL, node, (x, fold(c1 * c2)))),
    # a CAST to the dtype it has is nothing; a round trip through a dtype that holds
    # every value (float16 -> float32 -> float16, int8 -> int32 -> int8) is nothing
    (UPat(Ops.CAST, src=(x_,), name="node"), lambda x, node: x if x.dtype is node.dtype else None),
    (UPat(Ops.CAST, src=(UPat(Ops.CAST, src=(x_,), name="a"),), name="b"), _undo_cast),
    # c ? x : x = x; a constant condition picks its branch
    (UPat(Ops.WHERE, src=(UPat.var(), x_, x_), name="node"), _same_sources(3, 4)(lambda x, node: n.full_shaped(x, node))),
    (UPat(Ops.WHERE, src=(UPat.cvar("c", dtype=dtypes.bool), UPat.var("a"), UPat.var("b")), name="node"),
     _const_where),
    # c ? 1 : 0 = CAST(c) (relu's mask): a bool casts to exactly 1 or +0.0
    (UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.cvar(value=1), UPat.cvar("zero", 0)), name="node"),
     lambda cond, zero, node: _where_mask(cond, node) if not n.is_negative_zero(zero) else None),
    # an op on CONSTs only is the CONST it computes (see fold.py for which ops fold)
    (UPat(tuple(_BINARY_ELEMENTWISE) + _UNARY_ELEMENTWISE, src=UPat(Ops.CONST), name="node"), fold),
    # broadcast scalars: an elementwise op takes a shape-() operand as it is (every element
    # of a broadcast is that one value); movements of a broadcast scalar are one broadcast
    (UPat(_BINARY_ELEMENTWISE + _UNARY_ELEMENTWISE + (Ops.WHERE, Ops.MULACC), name="node"), _scalar_operands),
    (UPat(SELECTING_MOVES, name="node"), _canonical_broadcast),
    # a node computed from constants only (CONST, BUFFER and their movements) is the
    # BUFFER of its value, computed as the evaluator computes it (see fold.py)
    (UPat(src=UPat((Ops.CONST, Ops.BUFFER, *MOVEMENT)), name="node"), only_when(
        lambda key: len(key) > 2 and all(facts & CONSTANT for facts in key.facts))(fold_constant_subgraph)),
    # movements that undo or repeat each other: same-shape RESHAPE/EXPAND, identity
    # PERMUTE/PAD/SHRINK/FLIP are nothing; two RESHAPEs, PERMUTEs or FLIPs are one
    (UPat((Ops.RESHAPE, Ops.EXPAND), name="node"), _to_own_shape),
    (UPat(Ops.RESHAPE, src=(UPat(Ops.RESHAPE, src=(x_,)),), name="node"), _merged_reshape),
    (UPat(Ops.PERMUTE, src=(x_,), name="node"), lambda x, node: x if node.arg == tuple(range(len(node.arg))) else None),
    (UPat(Ops.PERMUTE, src=(UPat(Ops.PERMUTE, src=(x_,), name="inner"),), name="node"), _composed_permute),
    (UPat(Ops.PAD, src=(x_,), name="node"), lambda x, node: x if all(p == (0, 0) for p in node.arg) else None),
    (UPat(Ops.SHRINK, src=(x_,), name="node"), lambda x, node: x if node.shape == x.shape else None),
    (UPat(Ops.FLIP, src=(x_,), name="node"), lambda x, node: x if not any(node.arg) else None),
    (UPat(Ops.FLIP, src=(UPat(Ops.FLIP, src=(x_,), name="inner"),), name="node"), _composed_flip),
    # RESHAPEs that only add or drop size-1 axes, and PERMUTEs, only reorder the other
    # axes: a chain of them is one PERMUTE (and a RESHAPE when the size-1 axes differ)
    (UPat((Ops.RESHAPE, Ops.PERMUTE), name="node"), _shorter_unit_axis_chain),
    # a reduction over size-1 axes only reduces one element each: it is that element
    (UPat(Ops.REDUCE, name="node"), _unit_reduce),
    # max over the axes an EXPAND grew is the value that was copied
    (UPat(Ops.REDUCE, src=(UPat(Ops.EXPAND, src=(x_,), name="e"),), name="node"), _max_of_copies),
])

