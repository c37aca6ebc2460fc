"""TINYGRAD: the algebraic rewrites tinygrad's kernel compiler applies before it runs a
graph, which change rounding but not meaning. Each row names the rule of tinygrad 0.14 it
follows (tinygrad/uop/symbolic.py, tinygrad/codegen/simplify.py) and bounds how far its
result may move from the graph as written, in ulps of the result, for results and
intermediates in the normal range (no overflow to inf, no underflow to subnormals, where
any reassociation can lose everything).

The row that matters most is tinygrad's `x * (1+x).reciprocal() -> 1 - (1+x).reciprocal()`
(symbolic.py, `sym`): sigmoid is 1/(1+e) with e = 2^(-x/ln2), and its gradient as the
rules write it is e * sigmoid^2, which is 0 * inf = nan where e overflows (x < -88 in
float32); tinygrad's kernels compute sigmoid * (1 - sigmoid) instead, which is 0 there.
tanh, gelu, quick_gelu, silu and mish all differentiate through sigmoid.

`ROWS` holds each row with its bound, so the tests hold every row to its own.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..ops import SELECTING_MOVES, Ops
from ..pattern import PatternMatcher, UPat
from . import nodes as n
from ..walks import memoised_fold
from .walk import only_when

x_ = UPat.var("x")
_MAX_FACTORS = 16  # a product is taken apart at most this far: rewrites stay local


class Row(NamedTuple):
    pattern: UPat
    fn: Callable
    follows: str     # the tinygrad rule
    ulps: float | str  # how far the result may move, in ulps; "count": the number of values summed
    # ulps of: "result"; "one" (1.0: an absolute bound); "operands" (the largest value on the
    # way); "factors" (that, or the product's other factors, with 1 - 1/(1+x) taken as 1)
    scale: str = "result"


# ----------------------------------------------------------------------------- constants

def _constant_side(node) -> tuple:
    """(other, constant) of a binary node with one CONST source, else (None, None)."""
    a, b = node.src
    if b.op == Ops.CONST:
        return a, b
    if a.op == Ops.CONST and node.op == Ops.MUL:
        return b, a
    return None, None


def _has_constant_operand(node) -> bool:
    """What _constant_side(node) finds a constant in, without taking it apart."""
    a, b = node.src
    return b.op == Ops.CONST or (a.op == Ops.CONST and node.op == Ops.MUL)


def _normal_constant(value: float, node) -> bool:
    """Whether `value` rounds to a normal number of the node's dtype: a folded constant
    that overflows to inf or falls below the normal range (to 0 too: (x*c)*0 is nan where
    x*c overflows, x*0 is not) would break its row's ulp bound where every value the
    literal graph computes is normal: float16 (x*256)*512 as x*131072 is inf, float32
    (x*1e-30)*1e-30 as x*1e-60 is 0."""
    rounded = abs(float(node.dtype.np.type(value)))
    return _smallest_normal(node.dtype) <= rounded < float("inf")


def _smallest_normal(dtype) -> float:
    import numpy as np
    return float(np.finfo(dtype.np).smallest_normal)


def _scaled(x, node, value: float):
    """x * value, the constant rounded once to the node's dtype; x itself when it rounds to 1."""
    constant = n.const(value, node)
    if constant.arg == 1:
        same = n.full_shaped(x, node)
        return x * constant if same is None else same
    return n.make(Ops.MUL, node, (x, constant))


def _constant_beside(inner_ops: tuple, reversible: tuple):
    """A signature test: a binary node with a CONST operand and one of `inner_ops` as
    the other, the CONST on the right (or on either side, for the ops in `reversible`)."""
    def test(key) -> bool:
        if len(key) != 4:
            return False
        op, _, a, b = key
        return (b == Ops.CONST and a in inner_ops) or (op in reversible and a == Ops.CONST and b in inner_ops)
    return test


@only_when(_constant_beside((Ops.MUL, Ops.FDIV), reversible=(Ops.MUL,)))
def fold_constant_factors(node):
    """(x*c1)*c2 = x*(c1*c2), (x/c1)*c2 = x*(c2/c1), (x*c1)/c2 = x*(c1/c2): the two
    constants multiplied in float64 and rounded once (tinygrad folds them in Python
    floats too). Literal: c1, c2 and two products rounded (2 ulps from the exact value);
    here the folded constant and one product (1 ulp): at most 3 ulps apart."""
    inner, outer = _constant_side(node)
    if inner is None or inner.op not in (Ops.MUL, Ops.FDIV) or not _has_constant_operand(inner):
        return None  # the usual case in a gradient (g * c, g = y * cos x) is said early
    if not node.dtype.is_float:
        return None
    x, c1 = _constant_side(inner)
    k1, k2 = float(n.const_value(c1)), float(n.const_value(outer))
    if inner.op == Ops.FDIV:
        k1 = 1 / k1 if k1 else None
    if node.op == Ops.FDIV:
        k2 = 1 / k2 if k2 else None
    if k1 is None or k2 is None or not _normal_constant(k1 * k2, node):
        return None
    return _scaled(x, node, k1 * k2)


def reciprocal_of_scaled(x, y, c, node):
    """x/(y*c) = (x/y)*(1/c) (tinygrad: `(x*c).reciprocal() -> x.reciprocal()*c.reciprocal()`,
    tinygrad dividing by multiplying with the reciprocal). Literal: c, y*c and the
    quotient rounded (1.5 ulps from the exact value); here x/y, 1/c and the product (1.5):
    at most 3 ulps apart. The constant then meets the others around it."""
    if not node.dtype.is_float or float(n.const_value(c)) == 0 or not _normal_constant(1 / float(n.const_value(c)), node):
        return None
    return _scaled(n.make(Ops.FDIV, node, (x, y)), node, 1 / float(n.const_value(c)))


def _offset(node):
    """(x, k) with node = x + k for ADD or SUB of a CONST on the right (or a CONST added on
    the left), k a float; else (None, None)."""
    if node.op not in (Ops.ADD, Ops.SUB):
        return None, None
    a, b = node.src
    if b.op == Ops.CONST:
        k = float(n.const_value(b))
        return a, (k if node.op == Ops.ADD else -k)
    if a.op == Ops.CONST and node.op == Ops.ADD:
        return b, float(n.const_value(a))
    return None, None


@only_when(_constant_beside((Ops.ADD, Ops.SUB), reversible=(Ops.ADD,)))
def fold_constant_terms(node):
    """(x+c1)+c2 = x+(c1+c2), with SUB as adding -c (tinygrad's two stage ALU folding for
    ADD, and `x+0 -> x`): the constants added in float64 and rounded once. 1 + (2s - 1)
    becomes 2s. The literal rounds x+c1 and its sum, the rewrite c1+c2 and its sum: each
    within an ulp of the largest value held on the way (x, c1, c2, the sums), so at most
    2 ulps of it apart, and 2 is reached (tests/test_simplify_ulps.py). An absolute bound:
    where x+c1 cancels, the literal is the inaccurate one."""
    if not node.dtype.is_float:
        return None
    inner, k2 = _offset(node)
    if inner is None:
        return None
    x, k1 = _offset(inner)
    if x is None:
        return None
    total = n.const(k1 + k2, node)
    if total.arg == 0:
        return n.full_shaped(x, node)
    return n.make(Ops.ADD, node, (x, total))


# ----------------------------------------------------------------------------- sigmoid's ratio

_PRODUCT_PARTS = (Ops.MUL, Ops.NEG, Ops.FDIV, Ops.RECIPROCAL)
_SUMS = (Ops.ADD, Ops.SUB)
_RATIOS_SEEN = "a 1/(1+e) was seen"  # a flag in the walk's ctx: until it is raised, no product is taken apart


def _ratio_base(node) -> object:
    """e when node is e + 1 or 1 + e (the 1+x whose reciprocal tinygrad pairs with x)."""
    if node.op != Ops.ADD:
        return None
    a, b = node.src
    if n.is_const(b, 1):
        return a
    if n.is_const(a, 1):
        return b
    return None


def _wanted(node, ctx: dict) -> tuple:
    """The e's whose 1/(1+e) is a factor of the product `node` (memoised per walk, and
    found without recursion: a product can be a million MULs deep): only a product
    holding one can be rewritten by the ratio row, so every other MUL costs two
    dictionary lookups."""
    if node.op not in _PRODUCT_PARTS:
        return ()
    return memoised_fold(node, ctx, _product_operands, _wanted_here)


def _product_operands(node) -> tuple:
    """The operands of a product part that are factors of it (a quotient's numerator);
    none for anything else (a factor that is not a product part holds no ratio)."""
    op = node.op
    if op == Ops.MUL:
        return node.src
    if op == Ops.NEG or op == Ops.FDIV:
        return node.src[:1]
    return ()


def _wanted_here(node, operands: list) -> tuple:
    """_wanted of `node`, from its factor operands' (in _product_operands' order)."""
    op = node.op
    if op == Ops.RECIPROCAL:
        base = _ratio_base(node.src[0])
        return () if base is None else (base,)
    if op == Ops.MUL:
        return (operands[0] + operands[1])[:4]
    if op == Ops.NEG:
        return operands[0]
    if op == Ops.FDIV:
        base = _ratio_base(node.src[1])
        return (operands[0] + (() if base is None else (base,)))[:4]
    return ()


def _factors(node):
    """The product `node` taken apart: (numerator factors, denominator factors, constant)
    through MUL, NEG and FDIV, in order; None when it has too many factors."""
    numerator, denominator, constant = [], [], 1.0
    stack = [(node, True)]
    while stack:
        f, up = stack.pop()
        if f.op == Ops.MUL:
            stack += [(f.src[1], up), (f.src[0], up)]
        elif f.op == Ops.FDIV:
            stack += [(f.src[1], not up), (f.src[0], up)]
        elif f.op == Ops.NEG:
            constant = -constant
            stack.append((f.src[0], up))
        elif f.op == Ops.CONST:
            value = float(n.const_value(f))
            if not up and value == 0:
                return None
            constant = constant * value if up else constant / value
        else:
            (numerator if up else denominator).append(f)
        if len(numerator) + len(denominator) > _MAX_FACTORS:
            return None
    return numerator, denominator, constant


def _merged_base(node) -> object:
    """e when node is 1 - 1/(1+e), the form sigmoid_ratio writes e * 1/(1+e) in."""
    if node.op != Ops.SUB or not n.is_const(node.src[0], 1) or node.src[1].op != Ops.RECIPROCAL:
        return None
    return _ratio_base(node.src[1].src[0])


def _divides_by(base, denominator: list) -> bool:
    """Whether the product divides by e: its other factors then hold 1/e, which would scale
    the ulp of 1 that 1 - 1/(1+e) is off by up to the product's own size ((y * r / e) * e
    merged is y / e * (1 - r): 0 for 2 once e is below an ulp of 1). A divisor 1 - 1/(1+e)
    is cancelled before (_cancel_merged); a 1/e written as a RECIPROCAL factor becomes a
    division (the quotient row), where the merged factor over e is cancelled."""
    return base in denominator


def _cancel_merged(numerator: list, denominator: list) -> bool:
    """Cancel what a factor 1 - 1/(1+e) (e/(1+e) merged) meets across the fraction bar
    (tinygrad's `x/x -> 1`, `(x*x2)/x2 -> x`): as a divisor, with the same factor or with e
    and 1/(1+e) in the numerator (the quotient is 1); in the numerator, with a divisor e (the
    quotient is 1/(1+e)). Left as it was, the merged factor's error of an ulp of 1 would be
    divided by e: (y*e*r) / (e*r) is 0/0 once e is below an ulp of 1. True if any was."""
    cancelled = False
    for d in list(denominator):
        base = _merged_base(d)
        if base is None:
            continue
        if d in numerator:
            numerator.remove(d)
        elif base in numerator and d.src[1] in numerator:
            numerator.remove(base)
            numerator.remove(d.src[1])
        else:
            continue
        denominator.remove(d)
        cancelled = True
    for i, f in enumerate(numerator):
        base = _merged_base(f)
        if base is not None and base in denominator:
            numerator[i] = f.src[1]
            denominator.remove(base)
            cancelled = True
    return cancelled


def _merge_ratios(numerator: list, denominator: list) -> bool:
    """Replace each pair e * 1/(1+e) by 1 - 1/(1+e) where the product does not divide by e
    (_divides_by); True if any was."""
    for i, f in enumerate(numerator):
        base = _ratio_base(f.src[0]) if f.op == Ops.RECIPROCAL else None
        if base is not None and base in numerator and not _divides_by(base, denominator):
            numerator[i] = n.const(1, f) - f
            numerator.remove(base)
            return _merge_ratios(numerator, denominator) or True
    for j, d in enumerate(denominator):
        base = _ratio_base(d)
        if base is not None and base in numerator and not _divides_by(base, denominator):
            reciprocal = n.make(Ops.RECIPROCAL, d, (d,))
            numerator[numerator.index(base)] = n.const(1, d) - reciprocal
            del denominator[j]
            return _merge_ratios(numerator, denominator) or True
    return False


def _merged_meets_a_divisor(node) -> bool:
    """Whether node is a quotient where a factor 1 - 1/(1+e) divides, or is divided by e
    (_cancel_merged's cases: the walk is bottom-up, so e * 1/(1+e) below was merged first)."""
    if node.op != Ops.FDIV:
        return False
    taken = _factors(node)
    if taken is None:
        return False
    numerator, denominator, _ = taken
    return (any(_merged_base(d) is not None for d in denominator)
            or any(_merged_base(f) in denominator for f in numerator if _merged_base(f) is not None))


@only_when(lambda key: any(op in _PRODUCT_PARTS for op in key[2:]) or (key[0] == Ops.FDIV and (key[2] in _SUMS or key[3] in _SUMS)),
           after=_RATIOS_SEEN)
def sigmoid_ratio(node, ctx):
    """x * 1/(1+x) = 1 - 1/(1+x) inside a product (tinygrad: `x*(1+x).reciprocal() -> 1-d`,
    `x*(d*y) -> y*(1-d)`, with its constants moved to the end and folded as in
    `(x*c1)*y -> (x*y)*c1`), except where the product also divides by x (_divides_by); and
    what a merged 1 - 1/(1+x) meets across the fraction bar cancelled (tinygrad's `x/x -> 1`,
    `(x*x2)/x2 -> x`; _cancel_merged). The product is rebuilt left to right, numerator over
    denominator, times one constant.
    Bound (normal-range values and intermediates): the result moves from the literal's by at
    most 3 ulps of |P|, P the product with each 1 - 1/(1+x) taken as 1 (or of the largest
    value the literal computes on the way, where that is larger: the row's scale "factors");
    1 - 1/(1+x) is off by an ulp of 1, which P scales. As nothing merged is divided by x, P
    holds no 1/x: its size is the other factors'. So where x/(1+x) >= 1/2 (x >= 1) the
    result is within 6 ulps of its own value; below, within 3 ulps of |P|, not of its own:
    where x is under an ulp of 1, x * 1/(1+x) * y is 0, as in tinygrad's kernels (and torch's
    sigmoid backward, s * (1 - s)). tests/test_simplify_ulps.py checks both against float64.
    A divisor small by its value alone (y / (x + z), z near -x) is not seen."""
    if not node.dtype.is_float or not (_wanted(node, ctx) or _merged_meets_a_divisor(node)):
        return None
    return _ratio_product(node)


def _ratio_product(node):
    """The product `node` with its ratios merged and cancelled (sigmoid_ratio), or None."""
    taken = _factors(node)
    if taken is None:
        return None
    numerator, denominator, constant = taken
    cancelled = _cancel_merged(numerator, denominator)
    if not _merge_ratios(numerator, denominator) and not cancelled:
        return None
    out = _product(numerator, node)
    if denominator:
        below = _product(denominator, node)
        out = n.make(Ops.FDIV, node, (out, below)) if out is not None else n.make(Ops.RECIPROCAL, node, (below,))
    if out is None:
        out = n.const(constant, node)
    elif n.const(constant, node).arg == -1:
        out = -out
    elif n.const(constant, node).arg != 1:
        out = n.make(Ops.MUL, node, (out, n.const(constant, node)))
    return out if out.shape == node.shape else n.broadcast(out, node.shape)


@only_when(lambda key: key[-1] == Ops.ADD)
def note_ratio(node, ctx):
    """Not a rewrite: notes in the walk's ctx that a 1/(1+e) (or a division by 1+e) is in
    the graph, so sigmoid_ratio looks at products only in graphs that have one (the walk
    is bottom-up: the ratio is seen before the products that hold it)."""
    if _ratio_base(node.src[-1]) is not None:
        ctx[_RATIOS_SEEN] = True
    return None



@only_when(lambda key: key[0] == Ops.MUL and (key[2] in _SUMS or key[3] in _SUMS), after=_RATIOS_SEEN)
def ratio_through_sum(node, ctx):
    """x * (t + y) = x*t + x*y (and -) where the product t holds 1/(1+x) (tinygrad:
    `x*(d+y) -> (1-d)+x*y`); x*t then loses its ratio to sigmoid_ratio. This is how the
    gradient of x/(1+x) stays finite where x overflows: it ends in e * (g/(1+e) - y), which
    is inf * 0 at e = inf, and becomes g*(1 - 1/(1+e)) - e*y. Only where sigmoid_ratio will
    merge x*t (not where t divides by x), and never x * (1 - 1/(1+x)), the merged form: split,
    x - (1 - 1/(1+x)) cancels to an ulp of 1 where the product is x^2. Bound: 2 ulps of the
    largest value computed on the way (the distributed sum rounds its two products apart; the
    sigmoid_ratio that follows is bounded on its own)."""
    if not node.dtype.is_float:
        return None
    for x, total in (node.src, node.src[::-1]):
        if total.op not in _SUMS or _merged_base(total) is x:
            continue  # x * (1 - 1/(1+x)) is x * x/(1+x) merged: split, x - (1 - 1/(1+x)) would cancel
        t, y = total.src
        for held, other, first in ((t, y, True), (y, t, False)):
            if x not in _wanted(held, ctx):
                continue
            with_ratio = n.make(Ops.MUL, node, (x, held))
            if _ratio_product(with_ratio) is None:  # x * held divides by x: sigmoid_ratio leaves it, so no sum is split for it
                continue
            rest = n.make(Ops.MUL, node, (x, other))
            if total.op == Ops.ADD or first:
                return n.make(total.op, node, (with_ratio, rest))
            return n.make(Ops.SUB, node, (rest, with_ratio))
    return None


def _product(factors: list, like):
    out = None
    for f in factors:
        out = f if out is None else n.make(Ops.MUL, like, (out, f))
    return out


# ----------------------------------------------------------------------------- reductions

def sum_of_copies(x, e, node):
    """Summing the axes an EXPAND grew adds `count` copies of each value: x * count
    (tinygrad's `reduce_unparented`: a REDUCE ADD over a range its source does not use
    multiplies by the range's size). Literal: count - 1 roundings of a running sum;
    here one: at most count ulps apart."""
    axes = node.arg[1]
    grown = {i for i, (a, b) in enumerate(zip(x.shape, e.shape)) if a != b}
    if node.arg[0] != "ADD" or not set(axes) <= grown or not node.dtype.is_float:
        return None
    count = 1
    for a in axes:
        count *= e.shape[a]
    kept = x if x.shape == node.shape else n.make(Ops.EXPAND, node, (x,), node.shape)
    return n.make(Ops.MUL, node, (kept, n.const(count, node)))


def negated_sum(x, node):
    """sum(-x) = -sum(x) (tinygrad writes -x as x*-1 and moves a constant factor out of a
    REDUCE: `(x*c).reduce(ADD) -> x.reduce(ADD)*c`). Every partial sum is negated, and
    rounding is symmetric in sign: equal except the sign of a zero sum (0 ulps)."""
    if node.arg[0] != "ADD" or not node.dtype.is_float:
        return None
    return -n.make(Ops.REDUCE, node, (x,), node.arg)


# ----------------------------------------------------------------------------- division

def _reciprocal_under_moves(node, depth: int = 8):
    """(the RECIPROCAL, the movements above it, top first) when `node` is a RECIPROCAL seen
    through RESHAPE, EXPAND, PERMUTE, SHRINK or FLIP (each element is still the one 1/b
    at its place), else None."""
    moves = []
    while node.op in SELECTING_MOVES and len(moves) < depth:
        moves.append(node)
        node = node.src[0]
    return (node, moves) if node.op == Ops.RECIPROCAL else None


@only_when(lambda key: any(op == Ops.RECIPROCAL or op in SELECTING_MOVES for op in key[2:]))
def quotient(node):
    """a * (1/b) = a / b, one rounding (tinygrad: codegen/decomp/op.py
    get_late_rewrite_patterns, `a * (1/b) -> a/b`, for float dtypes where the device's
    renderer has FDIV: clang's and LLVM's CPU, CUDA, METAL, AMD, ...; its PYTHON
    interpreter has none and rounds twice). tinygrad writes every float division so
    (Tensor.div is a * b.reciprocal()), so its devices divide correctly rounded: 41/41 is 1,
    where 41 * fl(1/41) is 0.99999994. In a kernel a movement is only indexing, so 1/b
    broadcast (x / v of a row v) is divided too: here the movements go onto b. A
    reciprocal of a constant is folded first (tinygrad folds it too: x/3 is x * fl(1/3)
    there as here); with a reciprocal on each side, the right one is the divisor, as in
    tinygrad's match order. Literal: 1/b and the product rounded (1.5 ulps of the
    quotient from a/b, for normal values: 1/b's half ulp is at most an ulp of the
    product), here one rounding (0.5): at most 2 ulps apart."""
    if not node.dtype.is_float:
        return None
    for a, r in (node.src, node.src[::-1]):
        found = _reciprocal_under_moves(r)
        if found is not None:
            break
    else:
        return None
    reciprocal, moves = found
    b = reciprocal.src[0]
    for m in reversed(moves):
        b = n.make(m.op, m, (b,), m.arg)
    return n.make(Ops.FDIV, node, (a, b))


# ----------------------------------------------------------------------------- the table

ROWS = [
    Row(UPat((Ops.RECIPROCAL, Ops.FDIV), name="node"), note_ratio, "(bookkeeping for the next rows)", 0.0),
    Row(UPat((Ops.MUL, Ops.FDIV), name="node"), fold_constant_factors,
        "symbolic.py two stage ALU folding `(x*c1)*c2 -> x*(c1*c2)`", 3.0),
    Row(UPat(Ops.FDIV, src=(x_, UPat(Ops.MUL, src=(UPat.var("y"), UPat.cvar("c")))), name="node"), reciprocal_of_scaled,
        "symbolic.py sym `(x*c).reciprocal() -> x.reciprocal()*c.reciprocal()`", 3.0),
    Row(UPat((Ops.ADD, Ops.SUB), name="node"), fold_constant_terms,
        "symbolic.py two stage ALU folding `(x+c1)+c2 -> x+(c1+c2)` and `x+0 -> x`", 2.0, "operands"),
    Row(UPat((Ops.MUL, Ops.FDIV), name="node"), sigmoid_ratio,
        "symbolic.py sym `x*(1+x).reciprocal() -> 1-d`, `x*(d*y) -> y*(1-d)`, `(x*x2)/x2 -> x`", 3.0, "factors"),
    Row(UPat(Ops.MUL, name="node"), ratio_through_sum,
        "symbolic.py sym `x*((1+x).reciprocal()+y) -> (1-d)+x*y`", 2.0, "operands"),
    Row(UPat(Ops.REDUCE, src=(UPat(Ops.EXPAND, src=(x_,), name="e"),), name="node"), sum_of_copies,
        "codegen/simplify.py reduce_unparented", "count"),
    Row(UPat(Ops.REDUCE, src=(UPat(Ops.NEG, src=(x_,)),), name="node"), negated_sum,
        "symbolic.py sym `(x*c).reduce(ADD) -> x.reduce(ADD)*c` with -x as x*-1", 0.0),
    # last: the rows above see a product's reciprocals first, as tinygrad's symbolic rules
    # run before its late rewrites
    Row(UPat(Ops.MUL, name="node"), quotient,
        "codegen/decomp/op.py get_late_rewrite_patterns `a*(1/b) -> a/b` (renderers with FDIV)", 2.0),
]

TINYGRAD = PatternMatcher([(row.pattern, row.fn) for row in ROWS])
