"""The simplifier, value by value: random graphs over every dtype and a pool of edge values
(-0.0, +-inf, nan, subnormals, each dtype's extremes, integers that wrap, float16 round
trips, casts between every pair), simplified with the EXACT table and run by the numpy
evaluator, must give the graph as written under the reference evaluator bit for bit
(every NaN one value, as exact.py says). The examples the issue's plants broke are pinned
with @example, so a bounded run reaches them; `--runslow` runs many more random graphs.

The algebraic (TINYGRAD) rows are measured in test_simplify_ulps.py."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from uopcli import Ops, UOp, dtypes, evaluate
from uopcli.backends.reference import reference_evaluate
from uopcli.core.simplify import simplify_nodes
from uopcli.errors import GraphError

DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
          dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64]
FLOATS = [d for d in DTYPES if d.is_float]
N = 4  # elements of every PARAM (rank 1); movements make ranks 2 and 3 from it


def _float_pool(dtype) -> list:
    info = np.finfo(dtype.np)
    return [-0.0, 0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 2.0, 3.0, -2.25, 0.1, 1 / 3, 3001.0,
            2049.0, 65504.0, 70000.0, float(info.max), -float(info.max), float(info.tiny),
            float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.eps), 1e-3, -7.5]


def _int_pool(dtype) -> list:
    info = np.iinfo(dtype.np)
    values = [0, 1, -1, 2, 3, -3, 7, 127, -128, 255, 3001, 2049, 65535, 2 ** 24 + 1, 2 ** 31 - 1, -2 ** 31,
              2 ** 53 + 1, info.min, info.max, info.max - 1, info.min + 1]
    # every value of the pool in the dtype, wrapped as a C cast wraps (two's complement)
    bits = info.bits
    return sorted({((v - info.min) % (1 << bits)) + info.min for v in values})


def pool(dtype) -> list:
    if dtype.is_bool:
        return [False, True]
    return _float_pool(dtype) if dtype.is_float else _int_pool(dtype)


def array_of(dtype, values) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.array(values, dtype=np.float64 if dtype.is_float else object).astype(dtype.np)


def const_of(dtype, value) -> UOp:
    return UOp.const(array_of(dtype, [value])[0].item(), dtype)


# ----------------------------------------------------------------------------- random graphs

UNARY = [Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC]
BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CDIV, Ops.CMOD, Ops.AND, Ops.OR, Ops.XOR]
COMPARE = [Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
STEPS = ["unary", "binary", "binary", "binary", "compare", "cast", "cast", "where", "move", "reduce", "neg"]


class Builder:
    """A graph grown step by step from hypothesis' draws; inputs as PARAMs named p0, p1, ..."""

    def __init__(self, draw):
        self.draw = draw
        self.inputs: dict[str, np.ndarray] = {}
        self.nodes: list[UOp] = []

    def param(self, dtype, shape=(N,)) -> UOp:
        name = f"p{len(self.inputs)}"
        values = self.draw(st.lists(st.sampled_from(pool(dtype)), min_size=math.prod(shape),
                                    max_size=math.prod(shape)))
        self.inputs[name] = array_of(dtype, values).reshape(shape)
        return UOp.param(name, shape, dtype)

    def const(self, dtype) -> UOp:
        return const_of(dtype, self.draw(st.sampled_from(pool(dtype))))

    def operand(self, like: UOp) -> UOp:
        """A second operand for `like`: a node of its shape and dtype, a CONST, or a new input."""
        same = [n for n in self.nodes if n.shape == like.shape and n.dtype is like.dtype]
        kind = self.draw(st.sampled_from(["node", "const", "const", "param"]))
        if kind == "node" and same:
            return self.draw(st.sampled_from(same))
        if kind == "param" and like.shape:
            return self.param(like.dtype, like.shape)
        return self.const(like.dtype)

    def step(self) -> None:
        x = self.draw(st.sampled_from(self.nodes))
        kind = self.draw(st.sampled_from(STEPS))
        d = self.draw
        try:
            if kind == "unary":
                node = UOp.make(d(st.sampled_from(UNARY)), x.dtype, (x,))
            elif kind == "neg":
                node = UOp.make(Ops.NEG, x.dtype, (x,))
            elif kind == "binary":
                y = self.operand(x)
                a, b = (x, y) if d(st.booleans()) else (y, x)
                node = UOp.make(d(st.sampled_from(BINARY)), x.dtype, (a, b))
            elif kind == "compare":
                node = UOp.make(d(st.sampled_from(COMPARE)), dtypes.bool, (x, self.operand(x)))
            elif kind == "cast":
                node = UOp.make(Ops.CAST, d(st.sampled_from(DTYPES)), (x,))
            elif kind == "where":
                cond = x if x.dtype.is_bool else self.param(dtypes.bool, x.shape) if x.shape else self.const(dtypes.bool)
                y = self.draw(st.sampled_from([n for n in self.nodes if n.shape == x.shape] or [x]))
                other = self.operand(y)
                node = UOp.make(Ops.WHERE, y.dtype, (cond, y, other))
            elif kind == "move":
                node = self.move(x)
            else:
                if not x.shape:
                    return
                axes = tuple(sorted(d(st.sets(st.sampled_from(range(len(x.shape))), min_size=1))))
                node = UOp.make(Ops.REDUCE, x.dtype, (x,), (d(st.sampled_from(["ADD", "MAX", "MUL"])), axes))
        except GraphError:
            return  # an op this dtype or shape does not have: the step adds nothing
        if node is not None:
            self.nodes.append(node)

    def move(self, x: UOp) -> UOp | None:
        d = self.draw
        shape = x.shape
        if not shape:
            return UOp.make(Ops.RESHAPE, x.dtype, (x,), (1,))
        move = d(st.sampled_from(["reshape", "expand", "permute", "flip", "pad", "shrink"]))
        if move == "reshape":
            size = math.prod(shape)
            options = [(size,), (size, 1), (1, size)] + ([(2, size // 2), (2, 1, size // 2)] if size % 2 == 0 else [])
            return UOp.make(Ops.RESHAPE, x.dtype, (x,), d(st.sampled_from(options)))
        if move == "expand":
            if 1 not in shape:
                x = UOp.make(Ops.RESHAPE, x.dtype, (x,), shape[:1] + (1,) + shape[1:])
                shape = x.shape
            grown = tuple(d(st.sampled_from([1, 2, 3])) if s == 1 else s for s in shape)
            return UOp.make(Ops.EXPAND, x.dtype, (x,), grown)
        if move == "permute":
            return UOp.make(Ops.PERMUTE, x.dtype, (x,), tuple(d(st.permutations(range(len(shape))))))
        if move == "flip":
            return UOp.make(Ops.FLIP, x.dtype, (x,), tuple(d(st.booleans()) for _ in shape))
        if move == "pad":
            return UOp.make(Ops.PAD, x.dtype, (x,), tuple((d(st.integers(0, 1)), d(st.integers(0, 1))) for _ in shape))
        return UOp.make(Ops.SHRINK, x.dtype, (x,), tuple((d(st.integers(0, s // 2)), s) for s in shape))


@st.composite
def graphs(draw, steps=st.integers(1, 6)):
    """(outputs, inputs): a random graph's last few nodes and its input arrays."""
    b = Builder(draw)
    for dtype in draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2)):
        b.nodes.append(b.param(dtype))
    b.nodes.append(b.const(draw(st.sampled_from(DTYPES))))
    for _ in range(draw(steps)):
        b.step()
    built = [n for n in b.nodes if n.op not in (Ops.PARAM, Ops.CONST)] or b.nodes
    return built[-3:], b.inputs


# ----------------------------------------------------------------------------- comparing bits

def bits(value) -> tuple:
    """An array's dtype, shape and bytes, with every NaN the same NaN."""
    a = np.ascontiguousarray(np.asarray(value))
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
    return a.dtype.str, a.shape, a.tobytes()


def assert_simplified_keeps_every_bit(roots, inputs, exact=True) -> None:
    simplified = simplify_nodes(roots, exact=exact)
    used = {n.arg for r in roots for n in r.toposort() if n.op == Ops.PARAM}
    feed = {k: v for k, v in inputs.items() if k in used}
    with np.errstate(all="ignore"):
        written = reference_evaluate(roots, feed)
        ours = evaluate(simplified, feed)
    for root, new, a, b in zip(roots, simplified, written, ours):
        assert new.dtype is root.dtype and new.shape == root.shape
        assert bits(a) == bits(b), f"simplifying changed a value:\n{root}\n-> {new}\nas written {a!r}\nsimplified {b!r}"


# ----------------------------------------------------------------------------- the cases, pinned

def _f16_zero_cast_plus_zero():
    h = UOp.param("p0", (N,), dtypes.float16)
    return [UOp.make(Ops.ADD, dtypes.float32, (UOp.make(Ops.CAST, dtypes.float32, (h,)), UOp.const(0.0)))], \
        {"p0": array_of(dtypes.float16, [-0.0, 0.0, 1.0, -1.0])}


def _int16_through_float16():
    i = UOp.param("p0", (N,), dtypes.int16)
    trip = UOp.make(Ops.CAST, dtypes.int16, (UOp.make(Ops.CAST, dtypes.float16, (i,)),))
    return [trip], {"p0": array_of(dtypes.int16, [3001, 2049, -3001, 7])}


def _const_max(a, b):
    def case():
        node = UOp.make(Ops.MAX, dtypes.float32, (UOp.const(a), UOp.const(b)))
        x = UOp.param("p0", (N,))
        return [UOp.make(Ops.ADD, dtypes.float32, (x, node)), node], {"p0": array_of(dtypes.float32, [1, 2, 3, 4])}
    return case


def _max_of_expanded_over_kept_axes():
    x = UOp.param("p0", (N,))
    e = UOp.make(Ops.EXPAND, dtypes.float32, (UOp.make(Ops.RESHAPE, dtypes.float32, (x,), (N, 1)),), (N, 3))
    return [UOp.make(Ops.REDUCE, dtypes.float32, (e,), ("MAX", (0, 1)))], \
        {"p0": array_of(dtypes.float32, [-0.0, math.nan, 2.0, -math.inf])}


def _max_of_copies_on_a_grown_axis_kept():
    """max over one grown axis of an EXPAND that grew two: the copied value, expanded along
    the other grown axis (not the copied value itself, which lacks that axis)."""
    x = UOp.param("p0", (N, 1, 1))
    e = UOp.make(Ops.EXPAND, dtypes.float32, (x,), (N, 3, 2))
    return [UOp.make(Ops.REDUCE, dtypes.float32, (e,), ("MAX", (1,))),
            UOp.make(Ops.REDUCE, dtypes.float32, (e,), ("MAX", (2,)))], \
        {"p0": array_of(dtypes.float32, [-0.0, math.nan, 2.0, -math.inf]).reshape(N, 1, 1)}


def _sums_that_can_be_negative_zero_plus_zero():
    """(a + b) + 0.0 and (a * 0.0) + 0.0: a + b is -0.0 where both are, a * 0.0 where a < 0,
    so adding +0.0 (which makes them +0.0) is not nothing."""
    a, b = UOp.param("p0", (N,)), UOp.param("p1", (N,))
    zero = UOp.const(0.0)
    add = lambda u, v: UOp.make(Ops.ADD, dtypes.float32, (u, v))  # noqa: E731
    return [add(add(a, b), zero), add(UOp.make(Ops.MUL, dtypes.float32, (a, zero)), zero)], \
        {"p0": array_of(dtypes.float32, [-0.0, -1.0, 2.0, math.nan]), "p1": array_of(dtypes.float32, [-0.0, -0.0, 0.0, 1.0])}


def _algebraic_rows_left_alone():
    """Where the algebraic rows must not go (each case is left as written by every row, so
    it keeps every bit with exact=False too): max(-x) is -min(x), not -max(x); x/(y*0.0)
    has no 1/c to move out; integer x/(y*3) is C division, not x/y times a rounded 1/3."""
    x, y = UOp.param("p0", (N,)), UOp.param("p1", (N,))
    i, j = UOp.param("i0", (N,), dtypes.int32), UOp.param("i1", (N,), dtypes.int32)
    negated = UOp.make(Ops.NEG, dtypes.float32, (x.reshape(2, 2),))
    roots = [UOp.make(Ops.REDUCE, dtypes.float32, (negated,), ("MAX", (1,))),
             UOp.make(Ops.FDIV, dtypes.float32, (x, UOp.make(Ops.MUL, dtypes.float32, (y, UOp.const(0.0))))),
             UOp.make(Ops.FDIV, dtypes.int32, (i, UOp.make(Ops.MUL, dtypes.int32, (j, UOp.const(3, dtypes.int32)))))]
    return roots, {"p0": array_of(dtypes.float32, [1.0, 2.0, -3.0, 4.0]), "p1": array_of(dtypes.float32, [1.0, -2.0, 0.5, 3.0]),
                   "i0": array_of(dtypes.int32, [7, -7, 100, 2 ** 31 - 1]), "i1": array_of(dtypes.int32, [1, 2, -3, 5])}


def _ratio_over_a_zero_constant():
    """(x/0.0)/(1+x): a product with a ratio that sigmoid_ratio leaves alone, since it divides
    by a zero constant (taking it apart would divide its constant by zero)."""
    x = UOp.param("p0", (N,))
    over_zero = UOp.make(Ops.FDIV, dtypes.float32, (x, UOp.const(0.0)))
    return [UOp.make(Ops.FDIV, dtypes.float32, (over_zero, UOp.make(Ops.ADD, dtypes.float32, (UOp.const(1.0), x))))], \
        {"p0": array_of(dtypes.float32, [1.0, -0.0, -1.0, 2.5])}


def _constant_condition_picks_a_scalar():
    """A constant condition picking a shape-() operand of a WHERE whose other operand is
    (N,): the pick keeps the node's shape (the scalar broadcast), not the scalar's ()."""
    s, x = UOp.param("p0", ()), UOp.param("p1", (N,))
    return [UOp.make(Ops.WHERE, dtypes.float32, (UOp.const(True), s, x)),
            UOp.make(Ops.WHERE, dtypes.float32, (UOp.const(False), x, s))], \
        {"p0": np.array(-0.0, np.float32), "p1": array_of(dtypes.float32, [1.0, math.nan, -2.0, 0.0])}


def _minus_minus_zero():
    """x - (-0.0) is x + 0.0: +0.0 for x = -0.0, so it is not x (x - (+0.0) is)."""
    x = UOp.param("p0", (N,))
    return [UOp.make(Ops.SUB, dtypes.float32, (x, UOp.const(-0.0))), UOp.make(Ops.SUB, dtypes.float32, (x, UOp.const(0.0)))], \
        {"p0": array_of(dtypes.float32, [-0.0, 0.0, math.nan, -2.5])}


def _flips_composed():
    """flip(flip(x, a), b) is flip(x, a xor b): axes flipped twice are not flipped."""
    m = UOp.param("p0", (2, 3))
    roots = []
    for a, b in (((True, False), (False, True)), ((True, True), (True, False)), ((False, True), (False, True))):
        roots.append(UOp.make(Ops.FLIP, dtypes.float32, (UOp.make(Ops.FLIP, dtypes.float32, (m,), a),), b))
    return roots, {"p0": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _scalar_condition_mask():
    """c ? 1 : 0 with a shape-() c broadcast to (N,): CAST(c) would have c's shape, not N."""
    c = UOp.param("p0", (), dtypes.bool)
    one, zero = UOp.full((N,), 1.0), UOp.full((N,), 0.0)
    return [UOp.make(Ops.WHERE, dtypes.float32, (c, one, zero))], {"p0": np.array(True)}


def _integer_quotients_of_negations():
    """(-x)/c and (-x)/y over every integer dtype's pool: FDIV of integers is C division, and
    -x wraps (-INT_MIN is INT_MIN; an unsigned -1 is the largest value), so x/(-c) and
    -(x/y), right for floats, are wrong here (a fuzzer found INT_MIN/2 turned into 2^30)."""
    roots, inputs = [], {}
    for dtype in DTYPES:
        if not dtype.is_int:
            continue
        values = pool(dtype)
        divisors = [v for v in values if v != 0]
        pairs = [(v, d) for v in values for d in divisors]
        x_name, y_name = f"x_{dtype.name}", f"y_{dtype.name}"
        inputs[x_name] = array_of(dtype, [v for v, _ in pairs])
        inputs[y_name] = array_of(dtype, [d for _, d in pairs])
        x, y = UOp.param(x_name, (len(pairs),), dtype), UOp.param(y_name, (len(pairs),), dtype)
        negated = UOp.make(Ops.NEG, dtype, (x,))
        roots.append(UOp.make(Ops.FDIV, dtype, (negated, y)))
        roots += [UOp.make(Ops.FDIV, dtype, (negated, const_of(dtype, c))) for c in (2, 3, 7)]
    return roots, inputs


PINNED = {
    "c ? 1 : 0 with a scalar c": _scalar_condition_mask,
    "x - (-0.0) and x - (+0.0)": _minus_minus_zero,
    "flips composed": _flips_composed,
    "float16 -0.0 cast to float32, plus +0.0": _f16_zero_cast_plus_zero,
    "int16 3001 through float16 and back": _int16_through_float16,
    "max(1, nan) folded": _const_max(1.0, math.nan),
    "max(nan, 1) folded": _const_max(math.nan, 1.0),
    "max(-0.0, 0.0) folded": _const_max(-0.0, 0.0),
    "max(0.0, -0.0) folded": _const_max(0.0, -0.0),
    "max over grown and kept axes": _max_of_expanded_over_kept_axes,
    "max over one of two grown axes": _max_of_copies_on_a_grown_axis_kept,
    "sums that can be -0.0, plus +0.0": _sums_that_can_be_negative_zero_plus_zero,
    "max(-x), x/(y*0.0), integer x/(y*3) left alone": _algebraic_rows_left_alone,
    "(x/0.0)/(1+x) left alone": _ratio_over_a_zero_constant,
    "a constant condition picks a scalar": _constant_condition_picks_a_scalar,
    "integer (-x)/c and (-x)/y left alone": _integer_quotients_of_negations,
}


@pytest.mark.parametrize("case", list(PINNED), ids=list(PINNED))
def test_pinned_edge_cases_keep_every_bit(case):
    roots, inputs = PINNED[case]()
    assert_simplified_keeps_every_bit(roots, inputs)
    assert_simplified_keeps_every_bit(roots, inputs, exact=False)


def test_casts_between_every_pair_of_dtypes_keep_every_bit():
    """CAST(CAST(x, a), b) and CAST(x, a) + 0 for every pair (dtype of x, a) and every b, on
    each dtype's whole pool: the round-trip and -0.0 rows decide by dtype, so each pair."""
    roots, inputs = [], {}
    for source in DTYPES:
        name = f"x_{source.name}"
        values = pool(source)
        inputs[name] = array_of(source, values)
        x = UOp.param(name, (len(values),), source)
        for middle in DTYPES:
            once = UOp.make(Ops.CAST, middle, (x,))
            if middle.is_float or middle.is_int:
                roots.append(UOp.make(Ops.ADD, middle, (once, const_of(middle, 0))))
            roots += [UOp.make(Ops.CAST, target, (once,)) for target in DTYPES]
    assert len(roots) > 1500
    assert_simplified_keeps_every_bit(roots, inputs)


# ----------------------------------------------------------------------------- random graphs

# under `make mutation` (mutmut sets MUTANT_UNDER_TEST) each mutant runs fewer examples
EXAMPLES = 60 if os.environ.get("MUTANT_UNDER_TEST") else 250
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                        HealthCheck.filter_too_much], derandomize=True)


@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(graphs())
@example(_f16_zero_cast_plus_zero())
@example(_int16_through_float16())
def test_random_graphs_simplified_keep_every_bit(graph):
    roots, inputs = graph
    assert_simplified_keeps_every_bit(roots, inputs)


@pytest.mark.slow
@settings(max_examples=5000, **{**_SETTINGS, "derandomize": False})
@given(graphs(steps=st.integers(1, 12)))
def test_random_graphs_simplified_keep_every_bit_long(graph):
    roots, inputs = graph
    assert_simplified_keeps_every_bit(roots, inputs)


# ----------------------------------------------------------------------------- constant folding (fold.py), pinned
# Each case is a graph of constants only, so the whole of it goes through fold.py; the
# simplified graph is run by the numpy evaluator and compared with the graph as written
# under the reference evaluator, bit for bit (assert_simplified_keeps_every_bit).

def _make(op, dtype, src, arg=None):
    return UOp.make(op, dtype, tuple(src), arg)


def _int64_past_float64():
    """Integers above 2^53 folded through a float64 would lose their last bit: the sum of two
    int64 CONSTs and a cast of one to uint64 must stay 2^53 + 1."""
    big, one = UOp.const(2 ** 53, dtypes.int64), UOp.const(1, dtypes.int64)
    x = UOp.param("p0", (N,), dtypes.int64)
    total = _make(Ops.ADD, dtypes.int64, (big, one))
    as_unsigned = _make(Ops.CAST, dtypes.uint64, (UOp.const(2 ** 53 + 1, dtypes.int64),))
    return [_make(Ops.ADD, dtypes.int64, (x, total)), _make(Ops.ADD, dtypes.uint64, (x.cast(dtypes.uint64), as_unsigned))], \
        {"p0": array_of(dtypes.int64, [0, 1, -1, 7])}


def _float_to_int_casts_of_constants():
    """CAST of a nan, inf, huge or boundary float CONST (or BUFFER) to an integer: left to the
    evaluator where C leaves it undefined, folded where it is not; never an exception."""
    x = UOp.param("p0", (N,), dtypes.int32)
    roots = []
    for value, dtype in ((math.nan, dtypes.float32), (math.inf, dtypes.float32), (-math.inf, dtypes.float64),
                         (1e10, dtypes.float64), (-2147483648.0, dtypes.float64), (2147483647.0, dtypes.float64),
                         (-2.75, dtypes.float32)):
        roots.append(_make(Ops.ADD, dtypes.int32, (x, _make(Ops.CAST, dtypes.int32, (UOp.const(value, dtype),)))))
    floats = UOp.buffer(np.array([1.5, -2.5, 7.0], np.float32))
    roots.append(_make(Ops.CAST, dtypes.int32, (floats,)))
    return roots, {"p0": array_of(dtypes.int32, [0, 1, -1, 7])}


def _constant_movements():
    """Movements of BUFFERs, folded: a PERMUTE that is not a reversal, a FLIP of one axis of
    two, a PAD of int64 values above 2^53 (zeros of the buffer's dtype, not float64)."""
    cube = UOp.buffer(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    grid = UOp.buffer(np.arange(6, dtype=np.float32).reshape(2, 3))
    big = UOp.buffer(np.array([2 ** 53 + 1, -(2 ** 62) - 1], np.int64))
    permuted = _make(Ops.PERMUTE, dtypes.int32, (cube,), (1, 0, 2))
    flipped = _make(Ops.FLIP, dtypes.float32, (grid,), (True, False))
    flipped_other = _make(Ops.FLIP, dtypes.float32, (grid,), (False, True))
    padded = _make(Ops.PAD, dtypes.int64, (big,), ((1, 1),))
    ones = UOp.buffer(np.ones(4, np.int64))
    return [permuted * 3, flipped + 1.0, flipped_other * 2.0, _make(Ops.MUL, dtypes.int64, (padded, ones))], {}


def _constant_reductions():
    """REDUCEs of BUFFERs, folded: over one axis of two (kept as size 1), integer products and
    sums that wrap, MAX of floats, and MAX over an axis of size 0 (left to the evaluator)."""
    grid = UOp.buffer(np.array([[3, -2, 100], [7, 127, 5]], np.int8))
    floats = UOp.buffer(np.array([[1.5, -0.0, math.nan], [2.0, -7.0, 0.0]], np.float32))
    empty = UOp.buffer(np.zeros((0, 3), np.float32))
    roots = [_make(Ops.REDUCE, dtypes.int8, (grid,), (op, axes)) for op in ("ADD", "MUL", "MAX") for axes in ((0,), (1,))]
    roots += [_make(Ops.REDUCE, dtypes.float32, (floats,), ("MAX", axes)) for axes in ((0,), (1,))]
    roots.append(_make(Ops.REDUCE, dtypes.float32, (empty,), ("MAX", (0,))))
    roots.append(_make(Ops.REDUCE, dtypes.float32, (empty,), ("ADD", (0,))))
    return roots, {}


FOLDED = {
    "int64 above 2^53 folded": _int64_past_float64,
    "float-to-int casts of constants": _float_to_int_casts_of_constants,
    "movements of buffers folded": _constant_movements,
    "reductions of buffers folded": _constant_reductions,
}


@pytest.mark.parametrize("case", list(FOLDED), ids=list(FOLDED))
def test_folded_constants_keep_every_bit(case):
    roots, inputs = FOLDED[case]()
    assert_simplified_keeps_every_bit(roots, inputs)


def _ops_of(roots) -> set:
    return {n.op for r in roots for n in r.toposort()}


def test_what_fold_leaves_and_what_it_folds():
    """fold.py's contract beside the values: a float-to-int cast of nan, inf or a value out of
    the target's range stays a CAST (C leaves it undefined: the evaluator decides at run
    time); in-range ones, the range's ends included, fold; a float-to-int cast of a BUFFER
    stays; integer sums and products, and float MAX, of BUFFERs fold; a float sum does not;
    a result of FOLD_LIMIT elements folds, one more does not."""
    from uopcli.core.simplify.fold import FOLD_LIMIT
    def simplified(node):
        return simplify_nodes([node], exact=True)[0]

    for value, dtype, target in ((math.nan, dtypes.float32, dtypes.int32), (math.inf, dtypes.float32, dtypes.int32),
                                 (1e10, dtypes.float64, dtypes.int32), (128.0, dtypes.float32, dtypes.int8),
                                 (-129.0, dtypes.float32, dtypes.int8)):
        out = simplified(_make(Ops.CAST, target, (UOp.const(value, dtype),)))
        assert out.op == Ops.CAST, f"CAST({value}) to {target.name} was folded"
    for value, dtype, target in ((-2147483648.0, dtypes.float64, dtypes.int32), (2147483647.0, dtypes.float64, dtypes.int32),
                                 (127.9, dtypes.float32, dtypes.int8), (-128.5, dtypes.float32, dtypes.int8)):
        out = simplified(_make(Ops.CAST, target, (UOp.const(value, dtype),)))
        assert out.op == Ops.CONST and out.arg == math.trunc(value), f"CAST({value}) to {target.name}: {out}"
    floats = UOp.buffer(np.array([1.5, -2.5], np.float32))
    assert simplified(_make(Ops.CAST, dtypes.int32, (floats,))).op == Ops.CAST
    ints = UOp.buffer(np.arange(6, dtype=np.int32).reshape(2, 3))
    for op in ("ADD", "MUL", "MAX"):
        assert simplified(_make(Ops.REDUCE, dtypes.int32, (ints,), (op, (1,)))).op == Ops.BUFFER, op
    grid = UOp.buffer(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert simplified(_make(Ops.REDUCE, dtypes.float32, (grid,), ("MAX", (1,)))).op == Ops.BUFFER
    assert simplified(_make(Ops.REDUCE, dtypes.float32, (grid,), ("ADD", (1,)))).op == Ops.REDUCE
    for size, folds in ((FOLD_LIMIT, True), (FOLD_LIMIT + 1, False)):
        a = UOp.buffer(np.arange(size, dtype=np.int32))
        out = simplified(_make(Ops.MUL, dtypes.int32, (a, a)))
        assert (out.op == Ops.BUFFER) is folds, f"{size} elements"


def test_folding_raises_no_numpy_warning():
    """Folding computes under np.errstate(all="ignore"): 1/0, inf - inf, overflow and
    invalid casts fold (or are left) without a RuntimeWarning (uopgrad eval prints none)."""
    import warnings
    zero, one, big = UOp.const(0.0), UOp.const(1.0), UOp.const(3e38)
    pair = UOp.buffer(np.array([0.0, 3e38], np.float32))
    roots = [_make(Ops.FDIV, dtypes.float32, (one, zero)), _make(Ops.MUL, dtypes.float32, (big, big)),
             _make(Ops.FDIV, dtypes.float32, (pair, pair)), _make(Ops.MUL, dtypes.float32, (pair, pair))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = simplify_nodes(roots, exact=True)
    assert all(o.op in (Ops.CONST, Ops.BUFFER) for o in out), [o.op for o in out]


def test_round_trips_through_a_dtype_that_holds_every_value_are_removed():
    """CAST(CAST(x, a), x's dtype) is x where `a` holds every value of x's dtype (exact.py,
    _holds): bool through anything, integers through a wider integer that keeps the sign
    (a signed one, or unsigned to unsigned) or a float whose mantissa holds them, a float
    through a wider float. Their values are checked in the every-pair test above."""
    for narrow, wide in ((dtypes.bool, dtypes.float32), (dtypes.bool, dtypes.int8), (dtypes.int8, dtypes.int16),
                         (dtypes.uint8, dtypes.int16), (dtypes.uint8, dtypes.uint16), (dtypes.uint32, dtypes.uint64),
                         (dtypes.int16, dtypes.float32), (dtypes.uint16, dtypes.float32), (dtypes.int32, dtypes.float64),
                         (dtypes.int8, dtypes.float16), (dtypes.uint8, dtypes.float16), (dtypes.float16, dtypes.float32)):
        x = UOp.param("p0", (N,), narrow)
        trip = UOp.make(Ops.CAST, narrow, (UOp.make(Ops.CAST, wide, (x,)),))
        assert simplify_nodes([trip], exact=True)[0] is x, f"{narrow.name} through {wide.name} was kept"


def test_what_exact_rows_remove():
    """Rewrites whose values are equal either way, pinned as rewrites: x + (+0.0) is x where x
    is never -0.0 (a cast of a bool, 2^y, a sum with +0.0); movements composed to the
    identity are nothing."""
    x, c = UOp.param("p0", (N,)), UOp.param("p1", (N,), dtypes.bool)
    zero = UOp.const(0.0)
    add = lambda u, v: UOp.make(Ops.ADD, dtypes.float32, (u, v))  # noqa: E731
    for kept in (c.cast(dtypes.float32), x.exp2(), add(x, zero)):
        assert simplify_nodes([add(kept, zero)], exact=True)[0] is kept, f"{kept.op} + 0.0 was kept"
    m = UOp.param("p2", (2, 3))
    for twice in (UOp.make(Ops.PERMUTE, dtypes.float32, (UOp.make(Ops.PERMUTE, dtypes.float32, (m,), (1, 0)),), (1, 0)),
                  UOp.make(Ops.RESHAPE, dtypes.float32, (UOp.make(Ops.RESHAPE, dtypes.float32, (m,), (6,)),), (2, 3)),
                  UOp.make(Ops.FLIP, dtypes.float32, (UOp.make(Ops.FLIP, dtypes.float32, (m,), (True, False)),),
                           (True, False))):
        assert simplify_nodes([twice], exact=True)[0] is m, f"{twice.op} twice was kept"
