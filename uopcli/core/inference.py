"""Shape and dtype inference: one row per op family checks a node's sources, dtype and arg
and gives its shape (INFER); the memo of one-source shapes; and the shape and dtype rules
of the builder's methods (broadcasting, promotion, axes)."""

from __future__ import annotations

import math
import operator
from typing import Sequence

from ..errors import GraphError
from .ops import ARITHMETIC, BITWISE, COMPARISON, FLOAT_UNARY, INTEGER_ONLY, REDUCE_OPS, DType, Ops, dtypes, least_upper_dtype
from .uop import CallArg, UOp
from .walks import memoised_fold, scope_sources


def infer_shape(op: str, dtype: DType, src: tuple, arg):
    plain_arg = MEMO_ARG_CHECK.get(op)
    if plain_arg is not None and len(src) == 1 and src[0].__class__ is UOp and plain_arg(arg):
        return memo_shape(op, dtype, src, arg)
    return INFER[op](op, dtype, src, arg)


# Shape inference of one-source ops depends only on (op, dtype, the source's dtype and
# shape, arg), and validating an arg costs more than the rest of building a node; graphs
# repeat the same few combinations. Only args of exactly the canonical types are memoised
# (checked by MEMO_ARG_CHECK), so an arg that merely compares equal to a valid one, such
# as (True, 2) for (1, 2), still goes through full validation. Errors are never stored.
_shape_memo: dict[tuple, tuple] = {}
_SHAPE_MEMO_MAX = 1 << 16
_INT_ONLY = frozenset({int})


def _plain_ints(arg) -> bool:
    return arg.__class__ is tuple and _INT_ONLY.issuperset(map(type, arg))


def _plain_reduce_arg(arg) -> bool:
    return arg.__class__ is tuple and len(arg) == 2 and arg[0].__class__ is str and _plain_ints(arg[1])


def memo_shape(op: str, dtype: DType, src: tuple, arg) -> tuple:
    x = src[0]
    memo_key = (op, dtype, x.dtype, x.shape, arg)
    shape = _shape_memo.get(memo_key)
    if shape is None:
        shape = INFER[op](op, dtype, src, arg)  # raises on a misfit: nothing stored
        if len(_shape_memo) >= _SHAPE_MEMO_MAX:
            _shape_memo.clear()
        _shape_memo[memo_key] = shape
    return shape


def shape_tuple(shape, inferred: bool = False) -> tuple[int, ...]:
    """`shape` as a tuple of Python ints >= 0 (numpy's and torch's integers count; a bool, a
    float or a str does not: int(2.7) would quietly be 2). With `inferred`, -1 too: the
    size reshape infers, or expand keeps."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise GraphError(f"a shape is a sequence of ints, got {shape!r}")
    out = tuple(shape)
    if not all(s.__class__ is int for s in out):  # the usual case costs one pass in C
        out = tuple(_size(s, shape) for s in out)
    if any(s < 0 for s in out) and (not inferred or any(s < -1 for s in out)):
        raise GraphError(f"a shape holds sizes >= 0{' (or -1, inferred)' if inferred else ''}, got {list(out)}")
    return out


def _size(size, shape) -> int:
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise GraphError(f"a shape holds ints, got {size!r} in {shape!r}")
    try:
        return operator.index(size)
    except TypeError:  # an array of more than one element
        raise GraphError(f"a shape holds ints, got {size!r} in {shape!r}") from None


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise GraphError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def promoted(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """Both cast to the least dtype above both (tinygrad's promotion: bool * float32 is float32)."""
    if a.dtype.is_void or b.dtype.is_void:
        return a, b  # not values: inference names the misfit
    wide = least_upper_dtype(a.dtype, b.dtype)
    return a.cast(wide), b.cast(wide)


def per_axis_pairs(pairs, what: str) -> tuple:
    """pad/shrink's argument: an (int, int) pair or None per axis (the node checks the count)."""
    try:
        return tuple(None if p is None else _int_pair(p) for p in pairs)
    except (TypeError, ValueError):
        raise GraphError(f"{what} takes one (int, int) pair (or None) per axis, got {pairs!r}") from None


def _int_pair(pair) -> tuple[int, int]:
    first, second = pair  # TypeError/ValueError unless exactly two
    return int(first), int(second)


def broadcast_pair(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """Make two operands fit: equal shapes and () pass as they are (the graph broadcasts
    scalars implicitly); any other numpy-style broadcast becomes RESHAPE + EXPAND."""
    if a.shape == b.shape or not a.shape or not b.shape:
        return a, b
    shape = broadcast_shape(a.shape, b.shape)
    return a.broadcast_to(shape), b.broadcast_to(shape)


def const_value(value, dtype: DType):
    if dtype.is_void:
        raise GraphError("CONST cannot be void")
    if isinstance(value, UOp) or not isinstance(value, (bool, int, float)) and not hasattr(value, "item"):
        raise GraphError(f"CONST value must be bool, int or float, got {type(value).__name__}")
    if hasattr(value, "item"):
        value = value.item()
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise GraphError(f"CONST {value!r} is not an integer but the dtype is {dtype.name}")
        value = int(value)
        bits = dtype.itemsize * 8
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.kind == "i" else (0, (1 << bits) - 1)
        if not low <= value <= high:
            raise GraphError(f"CONST {value} does not fit {dtype.name}")
        return value
    return float(value)


def gettuple_dtype(call: UOp, index: int) -> DType:  # noqa: N802
    if call.op not in (Ops.FUNCTION, Ops.CALL):
        raise GraphError(f"GETTUPLE needs a FUNCTION or CALL, got {call.op}")
    body = call.src[0].src
    if not 0 <= index < len(body):
        raise GraphError(f"GETTUPLE {index} out of range: {call.op} has {len(body)} outputs")
    return body[index].dtype


# ----------------------------------------------------------------------------- inference
# One row per op family: check the sources, dtype and arg; return the node's shape.

def _describe(src: tuple) -> str:
    return ", ".join(f"{s.op} {s.dtype.name}{list(s.shape) if s.shape is not None else ''}" for s in src)


def _misfit(op: str, dtype: DType, src: tuple, why: str) -> GraphError:
    return GraphError(f"{op} -> {dtype.name}: {why} (sources: {_describe(src) or 'none'})")


def _need_src(op, dtype, src, n: int):
    if len(src) != n:
        raise _misfit(op, dtype, src, f"takes {n} source{'s' if n != 1 else ''}, got {len(src)}")
    for s in src:
        if not isinstance(s, UOp):
            raise GraphError(f"{op}: sources must be UOps, got {type(s).__name__}")


def _need_shaped(op, dtype, src):
    for s in src:
        if s.shape is None:
            raise _misfit(op, dtype, src, "a source is void")


def _elementwise_shape(op, dtype, src) -> tuple:
    shape = ()
    for s in src:
        if s.shape is None:
            raise _misfit(op, dtype, src, "a source is void")
        if s.shape:
            if shape and s.shape != shape:
                raise _misfit(op, dtype, src, "shapes differ (only shape () broadcasts)")
            shape = s.shape
    return shape


def _infer_unary(op, dtype, src, arg):
    _need_src(op, dtype, src, 1)
    _need_shaped(op, dtype, src)
    (x,) = src
    if arg is not None:
        raise _misfit(op, dtype, src, "takes no arg")
    if op == Ops.CAST:
        if dtype.is_void:
            raise _misfit(op, dtype, src, "cannot cast to void")
    elif op == Ops.BITCAST:
        if dtype.is_void or dtype.itemsize != x.dtype.itemsize:
            raise _misfit(op, dtype, src, f"needs equal item sizes ({x.dtype.name} has {x.dtype.itemsize})")
    else:
        if dtype is not x.dtype:
            raise _misfit(op, dtype, src, "dtype must equal the source's")
        if op in FLOAT_UNARY and not dtype.is_float:
            raise _misfit(op, dtype, src, "needs a float dtype")
        if op == Ops.NEG and (dtype.is_bool or dtype.is_void):
            raise _misfit(op, dtype, src, "needs a numeric dtype")
    return x.shape


def _infer_binary(op, dtype, src, arg):
    if len(src) != 2 or arg is not None:
        _need_src(op, dtype, src, 2)
        raise _misfit(op, dtype, src, "takes no arg")
    a, b = src
    try:
        sa, sb = a.shape, b.shape
    except AttributeError:  # not UOps: say so (no check on the usual path)
        _need_src(op, dtype, src, 2)
        raise
    if sa is None or sb is None:
        raise _misfit(op, dtype, src, "a source is void")
    if a.dtype is not b.dtype:
        raise _misfit(op, dtype, src, "sources have different dtypes (no implicit promotion)")
    kind = a.dtype.kind
    if op in COMPARISON:
        if dtype is not dtypes.bool:
            raise _misfit(op, dtype, src, "comparisons give bool")
    elif dtype is not a.dtype:
        raise _misfit(op, dtype, src, "dtype must equal the sources'")
    elif op in ARITHMETIC:
        if kind not in "iuf":
            raise _misfit(op, dtype, src, "needs a numeric dtype (use AND/OR for bool)")
    elif op in INTEGER_ONLY:
        if kind not in "iu":
            raise _misfit(op, dtype, src, "needs an integer dtype")
    elif op in BITWISE and kind not in "biu":
        raise _misfit(op, dtype, src, "needs a bool or integer dtype")
    if sa == sb or not sb:
        return sa
    if not sa:
        return sb
    raise _misfit(op, dtype, src, "shapes differ (only shape () broadcasts)")


def _infer_where(op, dtype, src, arg):
    _need_src(op, dtype, src, 3)
    cond, a, b = src
    shape = _elementwise_shape(op, dtype, src)
    if cond.dtype is not dtypes.bool:
        raise _misfit(op, dtype, src, "the condition must be bool")
    if a.dtype is not b.dtype or dtype is not a.dtype:
        raise _misfit(op, dtype, src, "both branches and the result need one dtype")
    return shape


def _infer_mulacc(op, dtype, src, arg):
    _need_src(op, dtype, src, 3)
    shape = _elementwise_shape(op, dtype, src)
    if any(s.dtype is not dtype for s in src) or dtype.kind not in "iuf":
        raise _misfit(op, dtype, src, "needs three sources of the result's numeric dtype")
    return shape


def _unary_movement(op, dtype, src) -> tuple:
    _need_src(op, dtype, src, 1)
    _need_shaped(op, dtype, src)
    if dtype is not src[0].dtype:
        raise _misfit(op, dtype, src, "dtype must equal the source's")
    return src[0].shape


def _int_tuple(value, length: int | None = None) -> bool:
    return isinstance(value, tuple) and (length is None or len(value) == length) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value)


def _infer_reduce(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not (isinstance(arg, tuple) and len(arg) == 2 and arg[0] in REDUCE_OPS and _int_tuple(arg[1])):
        raise _misfit(op, dtype, src, f"arg must be (ADD|MUL|MAX, axes), got {arg!r}")
    axes = arg[1]
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < len(shape) for a in axes):
        raise _misfit(op, dtype, src, f"axes {list(axes)} must be sorted, unique and within rank {len(shape)}")
    if dtype.kind not in "iuf":
        raise _misfit(op, dtype, src, "needs a numeric dtype")
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _infer_reshape(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not _int_tuple(arg) or any(s < 0 for s in arg):
        raise _misfit(op, dtype, src, f"arg must be a shape, got {arg!r}")
    if math.prod(arg) != math.prod(shape):
        raise _misfit(op, dtype, src, f"cannot reshape {list(shape)} to {list(arg)} (element counts differ)")
    return arg


def _infer_expand(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not _int_tuple(arg, len(shape)) or any(s != n and s != 1 for s, n in zip(shape, arg)):
        raise _misfit(op, dtype, src, f"cannot expand {list(shape)} to {arg!r}: same rank, only size-1 axes grow")
    return arg


def _infer_permute(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not _int_tuple(arg) or sorted(arg) != list(range(len(shape))):
        raise _misfit(op, dtype, src, f"{arg!r} is not an axis order of rank {len(shape)}")
    return tuple(shape[i] for i in arg)


def _pairs(arg, rank: int) -> bool:
    return isinstance(arg, tuple) and len(arg) == rank and all(_int_tuple(p, 2) for p in arg)


def _infer_pad(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not _pairs(arg, len(shape)) or any(b < 0 or a < 0 for b, a in arg):
        raise _misfit(op, dtype, src, f"arg must be one non-negative (before, after) per axis, got {arg!r}")
    return tuple(s + b + a for s, (b, a) in zip(shape, arg))


def _infer_shrink(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not _pairs(arg, len(shape)) or any(not 0 <= s <= e <= n for (s, e), n in zip(arg, shape)):
        raise _misfit(op, dtype, src, f"arg must be one (start, end) per axis within {list(shape)}, got {arg!r}")
    return tuple(e - s for s, e in arg)


def _infer_flip(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if not (isinstance(arg, tuple) and len(arg) == len(shape) and all(isinstance(f, bool) for f in arg)):
        raise _misfit(op, dtype, src, f"arg must be one bool per axis, got {arg!r}")
    return shape


def _infer_identity(op, dtype, src, arg):
    shape = _unary_movement(op, dtype, src)
    if op == Ops.COPY:
        if not isinstance(arg, str):
            raise _misfit(op, dtype, src, f"arg must be a device name, got {arg!r}")
    elif arg is not None:
        raise _misfit(op, dtype, src, "takes no arg")
    return shape


def _infer_tuple(op, dtype, src, arg):
    if dtype is not dtypes.void or arg is not None:
        raise _misfit(op, dtype, src, "is void and takes no arg")
    for s in src:
        if not isinstance(s, UOp):
            raise GraphError(f"TUPLE elements must be UOps, got {type(s).__name__}")
        if s.shape is None and s.op != Ops.NOOP:
            raise _misfit(op, dtype, src, f"elements must be values or NOOP, got {s.op}")
    return None


# node -> (slot -> PARAM, a graph input's name or None): what the node reads in its scope.
# Kept per node, not per body, because bodies share nodes: K bodies on one growing chain
# (body k = f(chain up to k)) would otherwise cost K^2 walks. sweep_intern_table clears it.
body_slots_memo: dict[UOp, tuple[dict[int, UOp], str | None]] = {}
_READS_NOTHING: tuple[dict[int, UOp], None] = ({}, None)  # shared: never mutated


def _body_slots(body: UOp) -> dict[int, UOp]:
    """The slot PARAMs a body reads, not looking inside nested calls' own bodies.
    Raises on a graph-input PARAM (a body must be closed)."""
    slots, graph_input = _scope_reads(body)
    if graph_input is not None:
        raise GraphError(f"a function body is not closed: it reads graph input {graph_input!r}")
    return slots


def _scope_reads(root: UOp) -> tuple[dict[int, UOp], str | None]:
    """What `root` reads in its scope (see body_slots_memo), for it and every node under
    it not known yet, sources first (iterative)."""
    return memoised_fold(root, body_slots_memo, scope_sources, _reads_of)


def _reads_of(node: UOp, parts: list) -> tuple[dict[int, UOp], str | None]:
    """A node's reads from its sources' (a PARAM reads itself). A source's slot map is
    shared, not copied, where it already holds the others' (a chain keeps one map)."""
    if node.op == Ops.PARAM:
        return ({}, node.arg) if isinstance(node.arg, str) else ({node.arg: node}, None)
    slots, graph_input = None, None
    for part_slots, part_input in parts:
        graph_input = graph_input or part_input
        if not part_slots or part_slots is slots:
            continue
        if slots is None or _holds(part_slots, slots):
            slots = part_slots
        elif not _holds(slots, part_slots):
            slots = _merged(slots, part_slots)
    if slots is None and graph_input is None:
        return _READS_NOTHING
    return slots or {}, graph_input


def _holds(big: dict, small: dict) -> bool:
    return len(big) >= len(small) and all(big.get(index) is param for index, param in small.items())


def _merged(first: dict, second: dict) -> dict:
    merged = dict(first)
    for index, param in second.items():
        if merged.setdefault(index, param) is not param:
            raise GraphError(f"slot {index} appears with two shapes or dtypes in one body")
    return merged


def _check_slots(op, dtype, src, what: str, body: UOp, values: Sequence[UOp]):
    for index, param in _body_slots(body).items():
        if index >= len(values):
            raise _misfit(op, dtype, src, f"{what} reads slot {index} but only {len(values)} are bound")
        value = values[index]
        if param.shape != value.shape or param.dtype is not value.dtype:
            raise _misfit(op, dtype, src, f"{what} slot {index} is {param.dtype.name}{list(param.shape)} "
                                          f"but is bound to {value.dtype.name}{list(value.shape or ())}")


def _infer_call(op, dtype, src, arg):
    if dtype is not dtypes.void:
        raise _misfit(op, dtype, src, "is void")
    if not src or not isinstance(src[0], UOp) or src[0].op != Ops.TUPLE:
        raise _misfit(op, dtype, src, "its first source must be the body TUPLE")
    body, args = src[0], src[1:]
    for a in args:
        if not isinstance(a, UOp) or a.shape is None:
            raise _misfit(op, dtype, src, "call args must be values")
    if op == Ops.CALL and not isinstance(arg, CallArg):
        raise _misfit(op, dtype, src, f"arg must be CallArg(name, grad), got {arg!r}")
    name = arg.name if op == Ops.CALL else arg
    if not isinstance(name, str) or not name:
        raise _misfit(op, dtype, src, f"arg must name the {op.lower()}, got {arg!r}")
    if any(e.op == Ops.NOOP for e in body.src):
        raise _misfit(op, dtype, src, "a body output cannot be NOOP")
    _check_slots(op, dtype, src, "the body", body, args)
    if op == Ops.CALL and arg.grad is not None:
        grad = arg.grad
        if not isinstance(grad, UOp) or grad.op != Ops.TUPLE or len(grad.src) != len(args):
            raise _misfit(op, dtype, src, f"the backward body must be a TUPLE of {len(args)} elements")
        output_grads = [UOp.slot(0, o.shape, o.dtype) for o in body.src]  # stand-ins: shape and dtype
        _check_slots(op, dtype, src, "the backward body", grad, (*args, *output_grads))
        for i, (g, a) in enumerate(zip(grad.src, args)):
            if g.op != Ops.NOOP and (g.shape != a.shape or g.dtype is not a.dtype):
                raise _misfit(op, dtype, src, f"backward element {i} is {g.dtype.name}{list(g.shape)}, "
                                              f"arg {i} is {a.dtype.name}{list(a.shape)}")
    return None


def _infer_gettuple(op, dtype, src, arg):
    _need_src(op, dtype, src, 1)
    call = src[0]
    if call.op not in (Ops.FUNCTION, Ops.CALL):
        raise _misfit(op, dtype, src, "its source must be a FUNCTION or CALL")
    outputs = call.src[0].src
    if not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < len(outputs):
        raise _misfit(op, dtype, src, f"index {arg!r} out of range for {len(outputs)} outputs")
    if dtype is not outputs[arg].dtype:
        raise _misfit(op, dtype, src, f"output {arg} is {outputs[arg].dtype.name}")
    return outputs[arg].shape


def _infer_store(op, dtype, src, arg):
    _need_src(op, dtype, src, 2)
    dest, value = src
    _need_shaped(op, dtype, src)
    if dtype is not dtypes.void or arg is not None:
        raise _misfit(op, dtype, src, "is void and takes no arg")
    if dest.shape != value.shape or dest.dtype is not value.dtype:
        raise _misfit(op, dtype, src, "dest and value need one shape and dtype")
    return None


def _infer_after(op, dtype, src, arg):
    _need_src(op, dtype, src, 2)
    dest, store = src
    if store.op != Ops.STORE or store.src[0] is not dest:
        raise _misfit(op, dtype, src, "needs (dest, STORE to that dest)")
    if dtype is not dest.dtype or arg is not None:
        raise _misfit(op, dtype, src, "dtype must equal dest's and takes no arg")
    return dest.shape


def _infer_leaf(op, dtype, src, arg):
    raise GraphError(f"{op} nodes are built with UOp.{op.lower()}(...)")


INFER = {
    **{op: _infer_unary for op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC,
                                   Ops.CAST, Ops.BITCAST)},
    **{op: _infer_binary for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD,
                                    Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)},
    Ops.WHERE: _infer_where,
    Ops.MULACC: _infer_mulacc,
    Ops.REDUCE: _infer_reduce,
    Ops.RESHAPE: _infer_reshape,
    Ops.EXPAND: _infer_expand,
    Ops.PERMUTE: _infer_permute,
    Ops.PAD: _infer_pad,
    Ops.SHRINK: _infer_shrink,
    Ops.FLIP: _infer_flip,
    **{op: _infer_identity for op in (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY)},
    Ops.TUPLE: _infer_tuple,
    Ops.FUNCTION: _infer_call,
    Ops.CALL: _infer_call,
    Ops.GETTUPLE: _infer_gettuple,
    Ops.STORE: _infer_store,
    Ops.AFTER: _infer_after,
    **{op: _infer_leaf for op in (Ops.PARAM, Ops.CONST, Ops.BUFFER, Ops.NOOP)},
}


_no_arg = (lambda arg: arg is None)
MEMO_ARG_CHECK = {
    **{op: _no_arg for op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC,
                              Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH)},
    Ops.RESHAPE: _plain_ints,
    Ops.EXPAND: _plain_ints,
    Ops.PERMUTE: _plain_ints,
    Ops.REDUCE: _plain_reduce_arg,
}
