"""One row per tinygrad 0.14 tensor-graph op: how it becomes format v1's explicit ops.

A row is (sources, build):
- `sources(walk, node, want)` lists the value sources to translate first, each with the
  dtype a weak source commits to there (None for a concrete source). Shape sources
  (STACKs of CONSTs) are not values: rows read them through `walk.marg(node)`.
- `build(walk, node, want, srcs)` makes our node(s) from the translated sources; `want` is
  the dtype a weak node commits to (None for a concrete node).
A tinygrad op without a row has no counterpart and is refused (THREEFRY: realize the random
tensor first; MSELECT/MSTACK/ALLREDUCE/UNSHARD: multi-device; CALL: a custom kernel; ...).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ...builder.common import highest, lowest
from ...core.ops import Ops, dtypes
from ...core.promotion import wrapped
from ...core.uop import UOp


class Rule(NamedTuple):
    sources: Callable
    build: Callable


# ----------------------------------------------------------------------------- sources

def _value_of_same_dtype(walk, node, want):
    """Movement, reduce and identity ops: the source keeps the node's dtype (a weak node
    passes its commit target down unchanged)."""
    src = node.src[0]
    return [(src, want if walk.is_weak(node) else walk.want(src, walk.dtype(node)))]


def _operands(walk, node, want):
    """Elementwise ops: every operand in the dtype the node computes in (WHERE's condition
    stays bool)."""
    dtype = walk.value_dtype(node, want)
    condition = node.op is walk.T.WHERE
    return [(s, None if condition and i == 0 else walk.want(s, dtype)) for i, s in enumerate(node.src)]


def _compared(walk, node, want):
    """Comparisons: the operands in the dtype of the concrete one (tinygrad commits the weak
    operand to it); both weak: the default width of the wider kind."""
    strong = [s for s in node.src if not walk.is_weak(s)]
    if strong:
        dtype = walk.dtype(strong[0])
    else:
        weakest = max(node.src, key=lambda s: s.dtype is walk.tg.dtypes.weakfloat)
        dtype = walk._default(weakest.dtype)
    return [(s, walk.want(s, dtype)) for s in node.src]


def _cast_source(walk, node, want):
    src = node.src[0]
    return [(src, walk.want(src, want if walk.is_weak(node) else walk.dtype(node)))]


def _stored_value(walk, node, want):
    """AFTER(buffer, STORE(buffer, value)) that depends on a named input: the value."""
    if len(node.src) != 2 or node.src[1].op is not walk.T.STORE or node.src[1].src[0] is not node.src[0]:
        raise walk._refuse(node, "an assignment to part of a buffer (or to a view of it) has no counterpart")
    value = node.src[1].src[1]
    return [(value, walk.want(value, walk.dtype(node)))]


def _every_source(walk, node, want):
    return [(s, None) for s in node.src]


def _none(walk, node, want):
    return []


# ----------------------------------------------------------------------------- builds

def _broadcast(x: UOp, shape: tuple) -> UOp:
    """numpy broadcasting made explicit: leading 1s, then EXPAND (shape () stays implicit)."""
    if x.shape == shape or x.shape == ():
        return x
    lead = len(shape) - len(x.shape)
    if lead:
        x = UOp.make(Ops.RESHAPE, x.dtype, (x,), (1,) * lead + x.shape)
    return x if x.shape == shape else UOp.make(Ops.EXPAND, x.dtype, (x,), shape)


def _cast(x: UOp, dtype) -> UOp:
    return x if x.dtype is dtype else UOp.make(Ops.CAST, dtype, (x,))


def _committed(walk, node, want, result: UOp) -> UOp:
    """A weak computation, done at its compute width, cast to where it commits."""
    return _cast(result, want) if walk.is_weak(node) else result


# tinygrad computes on bools as C does (bool + bool is "or"); the format names them
_BOOL_OPS = {"ADD": Ops.OR, "MUL": Ops.AND, "MAX": Ops.OR}


def _elementwise(walk, node, want, srcs):
    dtype = walk.value_dtype(node, want)
    shape = walk.shape(node)
    condition = node.op is walk.T.WHERE
    srcs = [_broadcast(s if condition and i == 0 else _cast(s, dtype), shape) for i, s in enumerate(srcs)]
    op = _BOOL_OPS.get(node.op.name, node.op.name) if dtype.is_bool else node.op.name
    return _committed(walk, node, want, UOp.make(op, dtype, tuple(srcs)))


def _stack(walk, node, want, srcs):
    """STACK of n values of one shape: shape (n, *shape), element i at index i. Each is
    given a leading axis, padded to n at its place, and the parts summed (OR for bools):
    the format's way of joining. A float part is padded with -0.0, -(pad(-x)), as
    x + -0.0 = x for every x, where the +0.0 PAD writes would turn a -0.0 into +0.0
    (tinygrad's STACK, and so its cat, keeps it)."""
    if not srcs:
        raise walk._refuse(node, "stacks nothing")
    dtype = walk.value_dtype(node, want)
    parts = [_cast(s, dtype) for s in srcs]
    shape = parts[0].shape
    joined = None
    for i, part in enumerate(parts):
        lifted = UOp.make(Ops.RESHAPE, dtype, (part,), (1,) + shape)
        pads = ((i, len(parts) - 1 - i),) + ((0, 0),) * len(shape)
        if dtype.is_float:
            negated = UOp.make(Ops.PAD, dtype, (UOp.make(Ops.NEG, dtype, (lifted,)),), pads)
            padded = UOp.make(Ops.NEG, dtype, (negated,))
        else:
            padded = UOp.make(Ops.PAD, dtype, (lifted,), pads)
        joined = padded if joined is None else UOp.make(Ops.OR if dtype.is_bool else Ops.ADD, dtype, (joined, padded))
    return _committed(walk, node, want, joined)


def _comparison(walk, node, want, srcs):
    """a < b, a != b, a == b. A constant its dtype cannot hold (a uint8 -1) is compared as the
    number it is, not wrapped: tinygrad's range analysis (uop/symbolic.py folds a comparison
    whose operands' [vmin, vmax] decide it) makes `u8 < -1` False and `u8 != -1` True on
    every device, where the wrapped 255 would not."""
    shape = walk.shape(node)
    a, b = (_broadcast(s, shape) for s in srcs)
    if a.dtype is not b.dtype:
        raise walk._refuse(node, f"compares {a.dtype.name} with {b.dtype.name}")
    decided = _decided_comparison(walk, node, a.dtype)
    if decided is not None:
        return _filled(UOp.const(decided, dtypes.bool), shape)
    return UOp.make(node.op.name, walk.dtype(node), (a, b))


def _decided_comparison(walk, node, dtype):
    """The value of comparison `node` where an operand is a constant `dtype` cannot hold
    (every value of the dtype lies on one side of it), else None."""
    low, high = _int_range(dtype) if dtype.is_int else (0, 0)
    # each operand as an interval: a constant beyond the range is itself, any other the range
    (a_low, a_high), (b_low, b_high) = ((low, high) if (c := _beyond(walk, s, dtype)) is None else (c, c)
                                        for s in node.src)
    if (a_low, a_high) == (low, high) and (b_low, b_high) == (low, high):
        return None
    name = node.op.name
    if name == "CMPLT":
        return True if a_high < b_low else False if a_low >= b_high else None
    apart = a_high < b_low or b_high < a_low
    if not apart:
        return None
    return name == "CMPNE"


def _filled(x: UOp, shape: tuple) -> UOp:
    """Scalar `x` broadcast to `shape`."""
    if not shape:
        return x
    ones = UOp.make(Ops.RESHAPE, x.dtype, (x,), (1,) * len(shape))
    return UOp.make(Ops.EXPAND, x.dtype, (ones,), shape)


def _maximum(walk, node, want, srcs):
    """max(a, b). With a constant its dtype cannot hold, tinygrad's range analysis decides it
    (uop/symbolic.py: `x.maximum(y) -> x` where y's vmax <= x's vmin, and the other way):
    below the range (`u8.maximum(-1)`) the other operand, above it (`u8.maximum(300)`) the
    constant, wrapped to the dtype (44) as tinygrad stores it."""
    dtype = walk.value_dtype(node, want)
    if dtype.is_int:
        low, high = _int_range(dtype)
        for i, s in enumerate(node.src):
            c = _beyond(walk, s, dtype)
            if c is not None:
                other = srcs[1 - i]
                if c < low and _beyond(walk, node.src[1 - i], dtype) is None:
                    return _committed(walk, node, want, _broadcast(_cast(other, dtype), walk.shape(node)))
                if c > high:
                    return _committed(walk, node, want, _filled(UOp.const(wrapped(c, dtype), dtype),
                                                                walk.shape(node)))
    return _elementwise(walk, node, want, srcs)


def _floor_div_mod(walk, node, want, srcs):
    """Python's flooring // and %: C's quotient (CDIV) is one too large, and its remainder
    (CMOD) has the wrong sign, where the remainder is nonzero and the signs differ; floats:
    floor(a / b) and a - floor(a / b) * b."""
    dtype = walk.value_dtype(node, want)
    if any(_beyond(walk, s, dtype) is not None for s in node.src):
        # tinygrad lowers it for signed operands (codegen/decomp/op.py floordiv_to_idiv):
        # uint8 [1, 100] // -3 gives [255, 255], neither wrapped (x // 253) nor floored
        raise walk._refuse(node, f"divides {dtype.name} by a constant it cannot hold, which tinygrad computes "
                                 "neither wrapped nor as a floor")
    shape = walk.shape(node)
    a, b = (_broadcast(_cast(s, dtype), shape) for s in srcs)
    floor_div = node.op.name == "FLOORDIV"
    if dtype.is_float:
        ratio = UOp.make(Ops.FDIV, dtype, (a, b))
        whole = UOp.make(Ops.TRUNC, dtype, (ratio,))
        above = UOp.make(Ops.CMPLT, dtypes.bool, (ratio, whole))
        floor = UOp.make(Ops.WHERE, dtype, (above, UOp.make(Ops.SUB, dtype, (whole, UOp.const(1, dtype))), whole))
        result = floor if floor_div else UOp.make(Ops.SUB, dtype, (a, UOp.make(Ops.MUL, dtype, (floor, b))))
        return _committed(walk, node, want, result)
    quotient, remainder = UOp.make(Ops.CDIV, dtype, (a, b)), UOp.make(Ops.CMOD, dtype, (a, b))
    if dtype.kind == "u":
        return _committed(walk, node, want, quotient if floor_div else remainder)
    zero, bool_ = UOp.const(0, dtype), dtypes.bool
    nonzero = UOp.make(Ops.CMPNE, bool_, (remainder, zero))
    signs_differ = UOp.make(Ops.CMPNE, bool_, (UOp.make(Ops.CMPLT, bool_, (remainder, zero)),
                                              UOp.make(Ops.CMPLT, bool_, (b, zero))))
    off = UOp.make(Ops.AND, bool_, (nonzero, signs_differ))
    if floor_div:
        result = UOp.make(Ops.WHERE, dtype, (off, UOp.make(Ops.SUB, dtype, (quotient, UOp.const(1, dtype))), quotient))
    else:
        result = UOp.make(Ops.WHERE, dtype, (off, UOp.make(Ops.ADD, dtype, (remainder, b)), remainder))
    return _committed(walk, node, want, result)


def _const(walk, node, want, srcs):
    """A scalar; an integer outside its dtype's range (tinygrad's -x of a uint8 is x * -1,
    its abs and sign make a uint8 -1, `u8 + 300` a uint8 300) is wrapped to the dtype, as
    tinygrad computes with it: its ops' results are truncated to the dtype (PYTHON:
    dtype.py's `truncate`, ctypes' c_uint8(-1) = 255; CPU: C's conversion) and Tensor.full
    stores it so. A comparison or MAX with one is not modular in tinygrad: see _beyond."""
    dtype = want if walk.is_weak(node) else walk.dtype(node)
    value = node.arg
    if not isinstance(value, (bool, int, float)):
        raise walk._refuse(node, f"holds {value!r}, not a number")
    value = bool(value) if dtype.is_bool else wrapped(int(value), dtype) if dtype.is_int else float(value)
    return UOp.const(value, dtype)


def _int_range(dtype) -> tuple[int, int]:
    """The least and the greatest value of integer `dtype`."""
    return lowest(dtype), highest(dtype)


def _beyond(walk, node, dtype):
    """The value of tinygrad node `node` when it is an integer CONST (through the RESHAPE and
    EXPAND that broadcast one) that `dtype` cannot hold, else None."""
    while node.op in (walk.T.RESHAPE, walk.T.EXPAND):
        node = node.src[0]
    value = node.arg
    if node.op is not walk.T.CONST or not dtype.is_int or isinstance(value, bool) or not isinstance(value, int):
        return None
    low, high = _int_range(dtype)
    return None if low <= value <= high else value


def _cast_build(walk, node, want, srcs):
    return _cast(srcs[0], want if walk.is_weak(node) else walk.dtype(node))


def _bitcast(walk, node, want, srcs):
    dtype = walk.dtype(node)
    if dtype.itemsize != srcs[0].dtype.itemsize:
        raise walk._refuse(node, f"reinterprets {srcs[0].dtype.name} as {dtype.name}: only equal item sizes "
                                 "have a counterpart")
    return UOp.make(Ops.BITCAST, dtype, (srcs[0],))


def _reshape(walk, node, want, srcs):
    return UOp.make(Ops.RESHAPE, srcs[0].dtype, (srcs[0],), tuple(walk.marg(node)))


def _expand(walk, node, want, srcs):
    """tinygrad's EXPAND prepends the arg's axes: RESHAPE adds them as 1s, EXPAND grows them."""
    x, lead = srcs[0], tuple(walk.marg(node))
    if not lead:
        return x
    ones = UOp.make(Ops.RESHAPE, x.dtype, (x,), (1,) * len(lead) + x.shape)
    return UOp.make(Ops.EXPAND, x.dtype, (ones,), lead + x.shape)


def _pad(walk, node, want, srcs):
    """(offset, size) per axis: `offset` zeros before, the rest after."""
    x = srcs[0]
    pairs = tuple((o, size - o - s) for (o, size), s in zip(walk.marg(node), x.shape))
    return UOp.make(Ops.PAD, x.dtype, (x,), pairs)


def _shrink(walk, node, want, srcs):
    """(offset, size) per axis: the window [offset, offset + size)."""
    x = srcs[0]
    return UOp.make(Ops.SHRINK, x.dtype, (x,), tuple((o, o + size) for o, size in walk.marg(node)))


def _permute(walk, node, want, srcs):
    return UOp.make(Ops.PERMUTE, srcs[0].dtype, (srcs[0],), tuple(node.arg))


def _flip(walk, node, want, srcs):
    return UOp.make(Ops.FLIP, srcs[0].dtype, (srcs[0],), tuple(bool(f) for f in node.arg))


def _reduce(walk, node, want, srcs):
    """(op, n): reduce the n leading axes and drop them (the source was permuted so)."""
    x = srcs[0]
    op, count = node.arg[0].name, node.arg[1]
    if op not in ("ADD", "MUL", "MAX"):
        raise walk._refuse(node, f"reduces with {op}")
    if count == 0:
        return x
    reduced = UOp.make(Ops.REDUCE, x.dtype, (x,), (op, tuple(range(count))))
    return UOp.make(Ops.RESHAPE, x.dtype, (reduced,), x.shape[count:])


def _identity_op(walk, node, want, srcs):
    return UOp.make(node.op.name, srcs[0].dtype, (srcs[0],))


def _same_value(walk, node, want, srcs):
    return srcs[0]


def _stored(walk, node, want, srcs):
    value = _cast(srcs[0], walk.dtype(node))
    shape = walk.shape(node)
    return value if value.shape == shape else UOp.make(Ops.RESHAPE, value.dtype, (value,), shape)


def _slot(walk, node, want, srcs):
    return UOp.slot(node.arg.slot, walk.shape(node), walk.dtype(node))


def _function(walk, node, want, srcs):
    info = node.arg
    if getattr(info, "grad_fxn", None) is not None:
        raise walk._refuse(node, "a function with its own gradient (grad_fxn) is Python code, not a graph")
    return UOp.make(Ops.FUNCTION, dtypes.void, tuple(srcs), getattr(info, "name", None) or "function")


def _tuple(walk, node, want, srcs):
    return UOp.tuple(*srcs)


def _gettuple(walk, node, want, srcs):
    return srcs[0].gettuple(node.arg)


# ----------------------------------------------------------------------------- the table

_ELEMENTWISE = ("NEG", "RECIPROCAL", "SQRT", "EXP2", "LOG2", "SIN", "TRUNC",   # same names and maths as ours
                "ADD", "SUB", "MUL", "FDIV", "POW", "CDIV", "CMOD", "AND", "OR", "XOR", "SHL", "SHR",
                "WHERE", "MULACC")


def _rules(T) -> dict:
    """tinygrad Ops -> Rule."""
    rules = {getattr(T, name): Rule(_operands, _elementwise) for name in _ELEMENTWISE}
    rules.update({
        T.MAX: Rule(_operands, _maximum),                  # max(a, b); a constant beyond the dtype decides it
        T.CMPLT: Rule(_compared, _comparison),             # a < b (a constant beyond the dtype decides it)
        T.CMPNE: Rule(_compared, _comparison),             # a != b
        T.CMPEQ: Rule(_compared, _comparison),             # a == b
        T.FLOORDIV: Rule(_operands, _floor_div_mod),       # floor(a / b): CDIV corrected where signs differ
        T.FLOORMOD: Rule(_operands, _floor_div_mod),       # a - floor(a / b) * b: CMOD corrected likewise
        T.STACK: Rule(_operands, _stack),                  # values along a new leading axis
        T.CONST: Rule(_none, _const),                      # scalar; a weak one takes its user's dtype
        T.CAST: Rule(_cast_source, _cast_build),           # CAST to the node's dtype (none if equal)
        T.BITCAST: Rule(_cast_source, _bitcast),           # same item size only
        T.RESHAPE: Rule(_value_of_same_dtype, _reshape),   # shape from the STACK source
        T.EXPAND: Rule(_value_of_same_dtype, _expand),     # prepend axes: RESHAPE 1s + EXPAND
        T.PAD: Rule(_value_of_same_dtype, _pad),           # (offset, size) -> (before, after)
        T.SHRINK: Rule(_value_of_same_dtype, _shrink),     # (offset, size) -> (start, end)
        T.PERMUTE: Rule(_value_of_same_dtype, _permute),   # same arg
        T.FLIP: Rule(_value_of_same_dtype, _flip),         # one bool per axis, same arg
        T.REDUCE: Rule(_value_of_same_dtype, _reduce),     # n leading axes: REDUCE keeps them as 1, RESHAPE drops
        T.CONTIGUOUS: Rule(_value_of_same_dtype, _identity_op),
        T.CONTIGUOUS_BACKWARD: Rule(_value_of_same_dtype, _identity_op),
        T.DETACH: Rule(_value_of_same_dtype, _identity_op),  # stops gradients, as ours
        T.COPY: Rule(_value_of_same_dtype, _same_value),   # to another device: the same value
        T.AFTER: Rule(_stored_value, _stored),             # an assignment's result: the stored value
        T.PARAM: Rule(_none, _slot),                       # a function body's parameter slot
        T.FUNCTION: Rule(_every_source, _function),        # body TUPLE + args, named
        T.TUPLE: Rule(_every_source, _tuple),
        T.GETTUPLE: Rule(_every_source, _gettuple),
    })
    return rules
