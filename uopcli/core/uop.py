"""UOp: the immutable, hash-consed graph node, its interning, its constructors and the
composites tinygrad tags (the operators, reductions and movement ops it inherits are
primitives.py's; more composites are the mixins of uopcli/builder/; shape and dtype
inference is inference.py).

Hash-consing: building a node that is structurally equal to a live one returns that same
object, so `is` is equality and dicts keyed by nodes hash by identity (fast, in C).
The intern table is a plain dict swept from time to time of entries nothing else holds,
so dead graphs do not stay alive (a WeakValueDictionary costs far more per node).

Metadata (`name`, `loc`, `backward`) lives in the node's `meta` slot, beside it and not
part of its identity: two nodes that differ only in metadata are one node, and the
first tag wins.
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
from typing import NamedTuple, Sequence

from ..builder import COMPOSITES, CreationMixin, ElementwiseMixin, IndexingMixin, MovementMixin, NNMixin, ReduceMixin
from ..builder.common import in_float32, named_dtype, reduce_axes, resolve_dim
from ..errors import GraphError
from .ops import CALLS, DType, Ops, dtype_of, dtypes, least_upper_dtype, least_upper_float
from .promotion import one_axis, wrapped
from .primitives import Primitives, bind_late, matmul_operand_refused
from .walks import node_list, toposort

LN2 = math.log(2.0)


class Metadata(NamedTuple):
    name: str | None = None      # the front-end function that made the node, e.g. "relu"
    loc: str | None = None       # source location
    backward: bool = False       # made by differentiation
    scope: str | None = None     # the module path that made the node, "encoder/layer.0/attention"


class CallArg(NamedTuple):
    """The arg of a CALL: its name and, optionally, the TUPLE of its backward body."""
    name: str
    grad: "UOp | None" = None


# ----------------------------------------------------------------------------- the node

# `==` of two nodes is identity; with a number or an array it would be False, and (x == 2) * x
# zero where torch and numpy compare elementwise: refused
_COMPARED = ("a graph node {op} {other}: `==` and `!=` compare nodes (identity); for the elementwise "
             "comparison use x.{method}(value)")


def _has_values(other) -> bool:
    """A Python number, or a numpy or torch scalar or array (what has a dtype)."""
    return isinstance(other, (int, float, complex)) or hasattr(other, "dtype")


class _Slots:
    __slots__ = ("op", "dtype", "src", "arg", "shape", "meta", "serial")


class UOp(_Slots, Primitives, ElementwiseMixin, MovementMixin, ReduceMixin, CreationMixin, NNMixin, IndexingMixin):
    """One operation of a graph. Build nodes with the class methods and operators, never
    by hand: `UOp.param("x", (3,))`, `UOp.const(2.0)`, `x * 2 + 1`, `x.sum(0)`."""

    __slots__ = ()

    op: str
    dtype: DType
    src: tuple["UOp", ...]
    arg: object
    shape: tuple[int, ...] | None   # None for void nodes (TUPLE, FUNCTION, CALL, STORE, NOOP)
    meta: Metadata | None
    serial: int                     # creation order; nodes made after a point are "new"

    def __setattr__(self, key, value):
        raise AttributeError(f"UOp is immutable (tried to set {key!r}); use set_meta for metadata")

    # immutable and hash-consed: a copy would be this node (pickle: uopcli/__init__.py)
    def __copy__(self) -> "UOp":
        return self

    def __deepcopy__(self, memo) -> "UOp":
        return self

    def set_meta(self, meta: Metadata | None) -> "UOp":
        object.__setattr__(self, "meta", meta)
        return self

    def __repr__(self) -> str:
        shape = "" if self.shape is None else list(self.shape)
        arg = "" if self.arg is None else f" {_short(self.arg)}"
        return f"<UOp {self.op} {self.dtype.name}{shape}{arg} src={len(self.src)}>"

    def __bool__(self):
        """Refused, as tinygrad's Tensor refuses it: a node has no value until evaluated, so
        `max(x, 0)`, `x if x < 0 else -x` or `sorted(nodes)` would pick a branch blindly."""
        raise TypeError(f"the truth value of a graph node is not defined ({self!r}): use .where or .maximum "
                        f"(x.maximum(0) for max(x, 0)), or `is None` to test for a node")

    # `==` stays identity (hash-consing makes it structural); use .eq() for CMPEQ.
    __hash__ = object.__hash__

    def __eq__(self, other):
        if other.__class__ is UOp:
            return self is other
        if _has_values(other):
            raise TypeError(_COMPARED.format(op="==", method="eq", other=type(other).__name__))
        return NotImplemented  # None, a str: not equal (`None in nodes`, `.count(None)` stay Python's)

    def __ne__(self, other):
        if other.__class__ is UOp:
            return self is not other
        if _has_values(other):
            raise TypeError(_COMPARED.format(op="!=", method="ne", other=type(other).__name__))
        return NotImplemented

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def make(op: str, dtype: DType, src: tuple["UOp", ...] = (), arg=None) -> "UOp":
        """The one constructor of non-leaf nodes: intern, or infer the shape and create."""
        table = _by_src.get(op)
        if table is None:
            raise GraphError(f"unknown op {op!r}")
        node = table.get(src)
        if node is None:  # the usual case for a new node: its sources' slot is free (and so
            # no sibling exists: the sweep moves a sibling into a slot it empties)
            plain_arg = MEMO_ARG_CHECK.get(op)
            if plain_arg is not None and len(src) == 1 and src[0].__class__ is UOp and plain_arg(arg):
                return _new(table, src, op, dtype, src, arg, memo_shape(op, dtype, src, arg))
            return _new(table, src, op, dtype, src, arg, INFER[op](op, dtype, src, arg))
        if node.dtype is dtype and (node.arg is arg or node.arg == arg):
            return node
        key = (op, dtype, src, arg)  # a sibling on the same sources holds that slot
        node = _intern.get(key)
        if node is not None:
            return node
        return _new(_intern, key, op, dtype, src, arg, infer_shape(op, dtype, src, arg))

    @staticmethod
    def param(name: str | int, shape: Sequence[int] = (), dtype=dtypes.float32) -> "UOp":
        """A graph input named `name`, or (with an int) slot `name` of a function body."""
        shape = shape_tuple(shape)
        dtype = named_dtype(dtype)
        if isinstance(name, bool) or not isinstance(name, (str, int)) or (isinstance(name, int) and name < 0):
            raise GraphError(f"PARAM name must be a str or a slot number >= 0, got {name!r}")
        if isinstance(name, str) and not valid_name(name):
            raise GraphError(f"PARAM name {name!r} must be non-empty, without '=', ',' or whitespace")
        if dtype.is_void:
            raise GraphError("PARAM cannot be void")
        return _leaf(Ops.PARAM, dtype, name, shape)

    @staticmethod
    def slot(index: int, shape: Sequence[int] = (), dtype=dtypes.float32) -> "UOp":
        """Parameter `index` of a FUNCTION/CALL body."""
        return UOp.param(int(index), shape, dtype)

    @staticmethod
    def const(value, dtype=None) -> "UOp":
        """A scalar constant (shape ()); dtype defaults from the Python type."""
        if dtype is None:
            dtype = dtypes.bool if isinstance(value, bool) else dtypes.int32 if isinstance(value, int) \
                else dtypes.float32
        dtype = named_dtype(dtype)
        value = const_value(value, dtype)
        key = (Ops.CONST, dtype, (), _const_key(value, dtype))
        node = _intern.get(key)
        if node is not None:
            return node
        return _new(_intern, key, Ops.CONST, dtype, (), value, ())

    @staticmethod
    def buffer(array) -> "UOp":
        """A tensor embedded in the graph (a numpy array or anything np.asarray takes)."""
        import numpy as np
        array = np.asarray(array)
        dtype = dtype_of(array.dtype)
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        return _leaf(Ops.BUFFER, dtype, data, tuple(int(d) for d in array.shape))

    @staticmethod
    def noop() -> "UOp":
        return _leaf(Ops.NOOP, dtypes.void, None, None)

    @staticmethod
    def tuple(*elements: "UOp") -> "UOp":
        return UOp.make(Ops.TUPLE, dtypes.void, tuple(elements))

    @staticmethod
    def full(shape: Sequence[int], value, dtype=None) -> "UOp":
        """`value` broadcast to `shape` (a CONST reshaped and expanded)."""
        return UOp.const(value, dtype).broadcast_to(shape_tuple(shape))

    def const_like(self, value) -> "UOp":
        """A scalar CONST of this node's dtype (implicit scalar broadcast does the rest)."""
        fast_key = (value.__class__, value, self.dtype)
        node = _const_fast.get(fast_key) if value else None  # zeros: 0.0 == -0.0, keep apart
        if node is None:  # an int out of an integer dtype's range wraps, as tinygrad's constant
            node = UOp.const(wrapped(value, self.dtype) if value.__class__ is int and self.dtype.is_int else value,
                             self.dtype)
            if value:
                _const_fast[fast_key] = node
        return node

    def zeros_like(self) -> "UOp":
        return UOp.full(self.shape, 0, self.dtype)

    def ones_like(self) -> "UOp":
        return UOp.full(self.shape, 1, self.dtype)

    @property
    def param_name(self) -> str | None:
        return self.arg if self.op == Ops.PARAM and isinstance(self.arg, str) else None

    def buffer_array(self):
        """The numpy array of a BUFFER node (read-only view of its bytes)."""
        import numpy as np
        return np.frombuffer(self.arg, dtype=self.dtype.np.newbyteorder("<")).reshape(self.shape)

    # ------------------------------------------------------------------ composites
    # Built from the primitives above and tagged with their name (metadata), as tinygrad
    # tags the Tensor function that made a node.
    def exp(self) -> "UOp":
        """e^x as 2^(x/ln 2), as tinygrad: integers in float32, float16 computed in float32
        and rounded back."""
        x = self.cast(least_upper_float(self.dtype))
        return (x.cast(least_upper_dtype(x.dtype, dtypes.float32)) * (1 / LN2)).exp2().cast(x.dtype)

    def log(self) -> "UOp":
        return self.log2() * LN2

    def relu(self) -> "UOp":
        return (self > 0).where(self, 0)

    def sigmoid(self) -> "UOp":
        return ((self * (-1 / LN2)).exp2() + 1).reciprocal()

    def tanh(self) -> "UOp":
        return 2.0 * (2.0 * self).sigmoid() - 1.0  # floats, as tinygrad: 2 * int8 would wrap

    def square(self) -> "UOp":
        return self * self

    # tinygrad's spellings, so that a model ported from it builds the same graph
    def cos(self) -> "UOp":
        """sin(π/2 - x), as tinygrad: integers in float32, float16 computed in float32 and
        rounded back."""
        x = self.cast(least_upper_float(self.dtype))
        return ((math.pi / 2) - x.cast(least_upper_dtype(x.dtype, dtypes.float32))).sin().cast(x.dtype)

    def rsqrt(self) -> "UOp":
        return self.sqrt().reciprocal()

    def sign(self) -> "UOp":
        return self.ne(0).where((self < 0).where(self.const_like(-1), self.const_like(1)), self.const_like(0))

    def abs(self) -> "UOp":
        return self * self.sign()

    def clamp(self, min_=None, max_=None) -> "UOp":
        """Values below min_ become min_, above max_ max_ (the gradient passes where inside,
        and at the bounds)."""
        if min_ is None and max_ is None:
            raise GraphError("clamp needs min_ or max_")
        out = (self < min_).where(min_, self) if min_ is not None else self
        return (out > max_).where(max_, out) if max_ is not None else out

    def min(self, axis=None, keepdim: bool = False) -> "UOp":
        return self._order_flipped().max(axis, keepdim)._order_flipped()

    def _order_flipped(self) -> "UOp":
        """-x for floats, ~x for integers: what turns a max into a min."""
        return -self if self.dtype.is_float else ~self

    def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> "UOp":
        """The mean square deviation over `axis`, divided by count - correction (at least 0);
        float16 computed in float32 and rounded once (builder.common.in_float32)."""
        return in_float32(self._as_float(), lambda x: x._var(axis, keepdim, correction))

    def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> "UOp":
        """√var; float16 computed in float32 and rounded once (the root too)."""
        return in_float32(self._as_float(), lambda x: x._var(axis, keepdim, correction).sqrt())

    def _var(self, axis, keepdim: bool, correction: int) -> "UOp":
        squares = (self - self.mean(axis, keepdim=True)).square()
        count = math.prod(self.shape[a] for a in reduce_axes(axis, len(self.shape)))
        return squares.sum(axis, keepdim) / max(count - correction, 0)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "UOp":
        start, end = resolve_dim(start_dim, len(self.shape)), resolve_dim(end_dim, len(self.shape))
        if not self.shape:
            return self.reshape(1)
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def cat(self, *others: "UOp", dim: int = 0) -> "UOp":
        """self and others joined along `dim` (every other axis equal): each padded with
        zeros to the joined size at its own place, then added up (as tinygrad does where
        the sizes differ; the format has no STACK op)."""
        parts = (self, *others)
        dim = one_axis(dim, len(self.shape))
        for part in others:
            if len(part.shape) != len(self.shape) or any(a != b for i, (a, b) in enumerate(zip(part.shape, self.shape))
                                                         if i != dim):
                raise GraphError(f"cat along axis {dim}: shapes {[list(p.shape) for p in parts]} differ elsewhere")
        total, start, out = sum(p.shape[dim] for p in parts), 0, None
        for part in parts:
            size = part.shape[dim]
            padded = part.pad(tuple((start, total - start - size) if i == dim else None for i in range(len(self.shape))))
            out = padded if out is None else out + padded
            start += size
        return out

    def stack(self, *others: "UOp", dim: int = 0) -> "UOp":
        """self and others (equal shapes) along a new axis `dim`; or, as tinygrad's
        Tensor.stack(seq), the tensors of one sequence (UOp.stack([a, b], dim=1))."""
        if isinstance(self, (list, tuple)):
            if not self or others:
                raise GraphError("stack takes tensors, or one non-empty sequence of them")
            self, others = self[0], tuple(self[1:])
        for other in others:
            if other.shape != self.shape:
                raise GraphError(f"stack: shapes {[list(t.shape) for t in (self, *others)]} differ")
        dim = resolve_dim(dim, len(self.shape), extra=True)
        return self.unsqueeze(dim).cat(*(o.unsqueeze(dim) for o in others), dim=dim)

    def unsqueeze(self, dim: int) -> "UOp":
        dim = resolve_dim(dim, len(self.shape), extra=True)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: int | None = None) -> "UOp":
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = resolve_dim(dim, len(self.shape))  # a 0-d tensor has axis 0 (and -1): itself
        if not self.shape:
            return self
        return self if self.shape[dim] != 1 else self.reshape(self.shape[:dim] + self.shape[dim + 1:])

    def mean(self, axis=None, keepdim: bool = False) -> "UOp":
        """The sum over `axis` divided by the count (integers and bools: in float32)."""
        axes = reduce_axes(axis, len(self.shape))
        count = math.prod(self.shape[a] for a in axes)
        return self.sum(axes, keepdim)._as_float() * (1 / count if count else math.nan)

    def matmul(self, other: "UOp") -> "UOp":
        """(..., n, k) @ (..., k, m) from primitives, as tinygrad spells it: RESHAPE/EXPAND,
        MUL, REDUCE ADD. The product is laid out (..., n, k, m) and summed over k, so
        neither operand needs a PERMUTE, and each is reshaped once, straight to the
        product's rank (a vector operand too): 7 nodes for a 2-D product."""
        a, b = self, other
        if not isinstance(b, UOp):
            raise GraphError(matmul_operand_refused(b))
        if len(a.shape) < 1 or len(b.shape) < 1:
            raise GraphError("matmul needs operands of rank >= 1")
        a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
        a_batch, (n, k) = ((), (1, *a.shape)) if a_vec else (a.shape[:-2], a.shape[-2:])
        b_batch, (k2, m) = ((), (*b.shape, 1)) if b_vec else (b.shape[:-2], b.shape[-2:])
        if k != k2:
            raise GraphError(f"matmul: inner sizes differ: {list(self.shape)} @ {list(other.shape)}")
        batch = broadcast_shape(a_batch, b_batch)
        prod_shape = (*batch, n, k, m)
        lhs = a.reshape(*(1,) * (len(batch) - len(a_batch)), *a_batch, n, k, 1).expand(prod_shape)
        rhs = b.reshape(*(1,) * (len(batch) - len(b_batch)), *b_batch, 1, k, m).expand(prod_shape)
        summed = (lhs * rhs).r(Ops.ADD, (len(batch) + 1,))  # (..., n, 1, m)
        return summed.reshape(*batch, *(() if a_vec else (n,)), *(() if b_vec else (m,)))

    __matmul__ = matmul

    def softmax(self, axis: int = -1) -> "UOp":
        shifted = self - self.max(axis, keepdim=True).detach().broadcast_to(self.shape)
        e = shifted.exp()
        return e / e.sum(axis, keepdim=True).broadcast_to(self.shape)

    def log_softmax(self, axis: int = -1) -> "UOp":
        shifted = self - self.max(axis, keepdim=True).detach().broadcast_to(self.shape)
        return shifted - shifted.exp().sum(axis, keepdim=True).log().broadcast_to(self.shape)

    # ------------------------------------------------------------------ calls, memory
    @staticmethod
    def function(name: str, outputs: Sequence["UOp"], args: Sequence["UOp"]) -> "UOp":
        """A FUNCTION whose body computes `outputs` from slot PARAMs bound to `args` (one
        UOp is one output, one arg)."""
        return UOp.make(Ops.FUNCTION, dtypes.void, (UOp.tuple(*node_list(outputs)), *node_list(args)), name)

    @staticmethod
    def call(name: str, outputs: Sequence["UOp"], args: Sequence["UOp"],
             grad: Sequence["UOp | None"] | None = None) -> "UOp":
        """A CALL; `grad` is its backward body: one element per arg (None for no gradient),
        computed from slots 0..n-1 (the args) and n..n+m-1 (the outputs' gradients)."""
        grad_body = None
        if grad is not None:
            grad_body = UOp.tuple(*(UOp.noop() if g is None else g for g in node_list(grad)))
        return UOp.make(Ops.CALL, dtypes.void, (UOp.tuple(*node_list(outputs)), *node_list(args)),
                        CallArg(name, grad_body))

    @staticmethod
    def trace_function(name: str, fn, *args: "UOp") -> "UOp":
        """Build a FUNCTION by calling `fn` on slot PARAMs shaped like `args`."""
        slots = [UOp.slot(i, a.shape, a.dtype) for i, a in enumerate(args)]
        outputs = fn(*slots)
        return UOp.function(name, outputs if isinstance(outputs, (tuple, list)) else (outputs,), args)

    @staticmethod
    def trace_call(name: str, fn, backward, *args: "UOp") -> "UOp":
        """Build a CALL from `fn(*arg_slots)` and `backward(*arg_slots, *grad_slots)`."""
        slots = [UOp.slot(i, a.shape, a.dtype) for i, a in enumerate(args)]
        outputs = fn(*slots)
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        grad = None
        if backward is not None:
            grad_slots = [UOp.slot(len(args) + j, o.shape, o.dtype) for j, o in enumerate(outputs)]
            grad = backward(*slots, *grad_slots)
            grad = tuple(grad) if isinstance(grad, (tuple, list)) else (grad,)
        return UOp.call(name, outputs, args, grad)

    def gettuple(self, index: int) -> "UOp":
        """Output `index` of a FUNCTION or CALL."""
        return UOp.make(Ops.GETTUPLE, gettuple_dtype(self, index), (self,), int(index))

    def __getitem__(self, index) -> "UOp":
        """A FUNCTION's or CALL's output `index`; of a tensor, numpy's basic indexing."""
        return self.gettuple(index) if self.op in CALLS else self._view(index)

    def __iter__(self):
        """The tensor's rows along axis 0, one x[i] each, as iterating a tinygrad Tensor
        (without this, Python would index until an IndexError, and get a GraphError)."""
        if self.shape is None:
            raise TypeError(f"a {self.op} node is not iterable; take its outputs with gettuple(i)")
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def store(self, value: "UOp") -> "UOp":
        return UOp.make(Ops.STORE, dtypes.void, (self, value))

    def after(self, store: "UOp") -> "UOp":
        return UOp.make(Ops.AFTER, self.dtype, (self, store))

    # ------------------------------------------------------------------ walks
    def toposort(self) -> list["UOp"]:
        """Every node this one depends on, sources before users (iterative)."""
        return toposort([self])


# ----------------------------------------------------------------------------- interning

# Two tables. Most non-leaf nodes live in _by_src[op] under their own `src` tuple, so the
# table keeps no key of its own (a 4-tuple key per node was a quarter of a node's memory).
# _intern holds full (op, dtype, src or shape, arg) keys: leaves, CONSTs, and a node whose
# sources' slot in _by_src is already taken by a sibling (same op and sources, another
# dtype or arg: x.reshape(a) beside x.reshape(b)).
_intern: dict[tuple, UOp] = {}
_by_src: dict[str, dict[tuple, UOp]] = {}  # filled from INFER below: one table per op
_node_count = 0                            # nodes in both tables (exact after a sweep)
_const_fast: dict[tuple, UOp] = {}  # (type, value, dtype) -> CONST: skips validation for repeats
_serials = itertools.count()
_new_node = object.__new__
_SWEEP_MIN = 1 << 16
_sweep_at = _SWEEP_MIN


# made_for[0]: the metadata every node gets as it is made (None, but while a walk that
# tags what it makes by the node it was made for holds it: forward mode sets it to the
# tangent metadata of each forward node while that node's rule runs, so its new nodes
# carry it with no tagging walk afterwards). Whoever sets it puts the old value back.
made_for: list = [None]


# Threads may build graphs at once (a notebook's pool, Dask's threaded workers). A new node
# is entered with setdefault, one atomic step under the GIL: if another thread made the same
# node since the caller's look-up, that one is returned and this one dropped, so one
# structure stays one node. (A lock here cost 3-4x the entry itself.) One sweep runs at a
# time (two would both move a sibling into a freed slot and delete its key twice); see
# sweep_intern_table for a look-up that meets a sweep.
_sweep_lock = threading.Lock()


def _new(table: dict, key, op: str, dtype: DType, src: tuple, arg, shape) -> UOp:
    global _node_count
    node = _new_node(_Slots)
    node.op = op
    node.dtype = dtype
    node.src = src
    node.arg = arg
    node.shape = shape
    node.meta = made_for[0]
    node.serial = next(_serials)
    node.__class__ = UOp  # from here on the node is immutable
    found = table.setdefault(key, node)
    if found is not node:  # made meanwhile by another thread: the node, or a sibling in its slot
        if table is _intern or (found.dtype is dtype and (found.arg is arg or found.arg == arg)):
            return found
        found = _intern.setdefault((op, dtype, src, arg), node)
        if found is not node:
            return found
    _node_count += 1
    if _node_count > _sweep_at:
        sweep_intern_table()
    return node


def make_shaped(op: str, dtype: DType, src: tuple, arg, shape) -> UOp:
    """UOp.make for a caller that knows the node fits and what its shape is: interned
    exactly as make does, with no inference. For the gradient rules, whose sources come
    from a checked graph and whose result shapes follow from the forward node's (the
    rules are tested against finite differences, and reading a file checks every node
    anew). Inference is most of the cost of a new node; a gradient makes one per node."""
    table = _by_src[op]
    node = table.get(src)
    if node is None:
        return _new(table, src, op, dtype, src, arg, shape)
    if node.dtype is dtype and (node.arg is arg or node.arg == arg):
        return node
    key = (op, dtype, src, arg)
    node = _intern.get(key)
    if node is not None:
        return node
    return _new(_intern, key, op, dtype, src, arg, shape)


def _leaf(op: str, dtype: DType, arg, shape) -> UOp:
    key = (op, dtype, shape, arg)  # PARAM and BUFFER carry their shape: it is part of identity
    node = _intern.get(key)
    if node is not None:
        return node
    return _new(_intern, key, op, dtype, (), arg, shape)


def _forget(node: UOp) -> None:
    """Remove `node` from the table it was stored in (see make, const and _leaf)."""
    op = node.op
    if op == Ops.PARAM or op == Ops.BUFFER or op == Ops.NOOP:
        del _intern[(op, node.dtype, node.shape, node.arg)]
    elif op == Ops.CONST:
        del _intern[(op, node.dtype, (), _const_key(node.arg, node.dtype))]
    else:
        table = _by_src[op]
        if table.get(node.src) is node:
            del table[node.src]
        else:
            del _intern[(op, node.dtype, node.src, node.arg)]


def _remember(node: UOp) -> None:
    """Put a node `_forget` removed back where it was (its slot, or its full key)."""
    op = node.op
    if op == Ops.PARAM or op == Ops.BUFFER or op == Ops.NOOP:
        _intern[(op, node.dtype, node.shape, node.arg)] = node
    elif op == Ops.CONST:
        _intern[(op, node.dtype, (), _const_key(node.arg, node.dtype))] = node
    elif _by_src[op].setdefault(node.src, node) is not node:  # its slot, or beside a sibling
        _intern[(op, node.dtype, node.src, node.arg)] = node


def _all_nodes() -> list[UOp]:
    nodes = _listed(_intern.values)
    for table in _by_src.values():
        nodes.extend(_listed(table.values))
    return nodes


def _listed(view) -> list:
    """list(view()) of a table another thread may enter a node into meanwhile (RuntimeError:
    dictionary changed size during iteration): taken again until it holds still."""
    while True:
        try:
            return list(view())
        except RuntimeError:
            continue


def _const_key(value, dtype: DType):
    if dtype.kind == "f" and (value == 0 or value != value):
        return repr(value)  # keep 0.0, -0.0 and nan apart (and nan equal to itself)
    return value


def _unreferenced_count() -> int:
    """What sys.getrefcount reports, in the sweep below, for a node only the table holds."""
    table = {0: _new_node(_Slots)}
    node = table[0]
    return sys.getrefcount(node)


_DEAD_REFS = _unreferenced_count()


def sweep_intern_table() -> int:
    """Drop interned nodes nothing but the table holds; returns how many were dropped.

    A first pass counts references in C speed and finds the dead roots; dropping a dead
    node releases its sources, which are then checked in turn, so whole graphs go at once.
    Another thread's look-up may find a node between its count and its removal: a node
    found held after its removal goes back (a thread that makes that very node in the
    same instant, between the two, is the one race left: it would make a twin).
    """
    if not _sweep_lock.acquire(blocking=False):
        return 0  # another thread is sweeping
    try:
        return _sweep()
    finally:
        _sweep_lock.release()


def _sweep() -> int:
    global _sweep_at, _node_count
    _const_fast.clear()
    body_slots_memo.clear()
    getrefcount = sys.getrefcount
    values = _all_nodes()
    before = len(values)
    # a dead node is referenced by the table, `values` and getrefcount's own argument;
    # map/compress keep the scan over every node in C (a comprehension costs twice as much)
    stack = list(itertools.compress(values, map((_DEAD_REFS + 1).__ge__, map(getrefcount, values))))
    del values
    node = None
    dropped = 0
    while stack:
        node = stack.pop()
        if getrefcount(node) > _DEAD_REFS:
            continue  # still used, or still on the stack twice
        _forget(node)
        if getrefcount(node) >= _DEAD_REFS:  # another thread found it just before: it stays
            _remember(node)
            continue
        dropped += 1
        stack.extend(node.src)
        if node.op == Ops.CALL and node.arg.grad is not None:
            stack.append(node.arg.grad)
    node = None
    _promote_siblings()
    _node_count = before - dropped
    # The next sweep when the table has grown by this factor: 2 while sweeps find garbage;
    # 4 after one that found almost none (a graph being built: loading a file, a gradient),
    # where sweeping again at 2x would touch every node only to find them all alive.
    growth = 2 if dropped * _FRUITFUL_SHARE >= before else 4
    _sweep_at = max(_SWEEP_MIN, growth * _node_count)
    return dropped


_FRUITFUL_SHARE = 8  # a sweep that frees at least 1/8 of the table keeps the 2x schedule


def _promote_siblings() -> None:
    """Move a node kept under a full key into its sources' slot when the sweep emptied it,
    so that an empty slot always means "no node on these sources" (make relies on it)."""
    for key, node in _listed(_intern.items):
        src = node.src
        if src:  # leaves and CONSTs have none and stay
            if _by_src[node.op].setdefault(src, node) is node:  # (setdefault: a thread may fill it too)
                del _intern[key]


def live_node_count() -> int:
    """How many nodes the intern tables hold (after a sweep: how many are alive)."""
    return len(_intern) + sum(map(len, _by_src.values()))


# next_serial(): a serial no node has or will have; nodes with serial >= it are made after
# now. The counter's own bound method (it uses up one number): no Python frame, for the
# rewrite walk, which asks before every row it tries.
next_serial = _serials.__next__


def tag_new_nodes(root: UOp, since: int, meta: Metadata) -> None:
    """Give `meta` to every node reachable from `root` made at or after serial `since`
    that has no metadata yet (the first tag wins). Older nodes stop the walk: a node can
    only have sources older than itself."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.serial < since or node.meta is not None:
            continue
        object.__setattr__(node, "meta", meta)
        stack.extend(node.src)
        if node.op == Ops.CALL and node.arg.grad is not None:
            stack.append(node.arg.grad)


_composite_depth = [0]


def _tagging_composite(method, name: str | None = None, caller_depth: int = 1):
    """Wrap a composite method so the nodes it makes carry metadata name=<method name>
    and loc=<the caller's file:line> (`caller_depth` frames up from the wrapper)."""
    name = name or method.__name__

    def wrapper(self, *args, **kwargs):
        if _composite_depth[0]:  # nested composite (tanh uses sigmoid): the outermost names it
            return method(self, *args, **kwargs)
        since = next_serial()
        _composite_depth[0] += 1
        try:
            result = method(self, *args, **kwargs)
        finally:
            _composite_depth[0] -= 1
        frame = sys._getframe(caller_depth)
        loc = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        meta = Metadata(name, loc, False)
        for part in result if isinstance(result, tuple) else (result,):  # split and chunk make several
            if isinstance(part, UOp):  # (numel makes none)
                tag_new_nodes(part, since, meta)
        return result

    wrapper.__name__ = name
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    return wrapper



# ----------------------------------------------------------------------------- helpers

def valid_name(name) -> bool:
    """Input and output names: non-empty, no '=', ',' or whitespace (so CLIs can name them)."""
    return isinstance(name, str) and bool(name) and not any(c in "=," or c.isspace() for c in name)


def numbered_name(prefix: str, name: str, taken: set[str]) -> str:
    """`<prefix><name>` when not in `taken`, else `<stem><k>_<name>` for the lowest k >= 2
    that is not (stem: the prefix without its trailing `_`: `tangent3_x`); added to
    `taken`, so names given one after another never meet. The one rule for every name a
    derivative adds (tools/names.fresh, core/forward.linearize)."""
    new, stem, k = f"{prefix}{name}", prefix[:-1] if prefix.endswith("_") else prefix, 2
    while new in taken:
        new, k = f"{stem}{k}_{name}", k + 1
    taken.add(new)
    return new


def printable(text: str) -> str:
    """`text` with every non-printable character (newline, escape, NUL, ...) written as its
    Python escape (`\\n`, `\\x1b`): names and tags come from files, and shown raw they
    could forge a line of a listing or drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(arg) -> str:
    text = repr(arg) if not isinstance(arg, bytes) else f"<{len(arg)} bytes>"
    return text if len(text) <= 60 else text[:57] + "..."



# inference checks that sources are UOps and builds stand-ins with UOp.slot: it is
# imported once the class exists (nothing imports it before this module)
from .inference import (INFER, MEMO_ARG_CHECK, body_slots_memo, broadcast_pair, broadcast_shape,  # noqa: E402
                        const_value, gettuple_dtype, infer_shape, memo_shape, per_axis_pairs, promoted, shape_tuple)

_by_src.update({op: {} for op in INFER})
bind_late(UOp=UOp, promoted=promoted, broadcast_pair=broadcast_pair, broadcast_shape=broadcast_shape,
          shape_tuple=shape_tuple, per_axis_pairs=per_axis_pairs)


# Composites tag what they build with their name, as tinygrad's Tensor functions do.
for _name in ("exp", "log", "relu", "sigmoid", "tanh", "mean", "matmul", "softmax", "log_softmax",
              "cos", "rsqrt", "sign", "abs", "clamp", "min", "var", "std", "cat", "stack", *COMPOSITES):
    setattr(UOp, _name, _tagging_composite(getattr(UOp, _name)))
# named as tinygrad names the Tensor function; called by __getitem__, so the caller is 2 up
UOp._view = _tagging_composite(UOp._view, "__getitem__", caller_depth=2)
UOp.__matmul__ = UOp.matmul
UOp.clip, UOp.__abs__ = UOp.clamp, UOp.abs  # the aliases follow the wrapped methods
