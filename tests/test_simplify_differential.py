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
