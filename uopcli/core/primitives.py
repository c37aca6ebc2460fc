"""The builder's primitives, the methods UOp inherits from `Primitives`: the operators and
their promotion (tinygrad's pairing of operands, Python numbers weak), the unary ops and
casts, the reductions and the movement ops. Each makes the format's own nodes; the
composites built on them are uop.py's and the mixins' of uopcli/builder/.

The node class inherits this one, so this module is imported before UOp exists; UOp and
the inference helpers it needs (inference.py imports the node) are bound at uop.py's foot
by `bind_late`, once both exist: nothing here runs before that."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from ..builder.common import named_dtype as _named_dtype, reduce_axes, varargs
from ..builder.movement import cut_by_negative_padding, flat_padding_pairs, pad_from_inside
from ..errors import GraphError
from .ops import FLOAT_UNARY, DType, Ops, accumulation_dtype, dtypes, least_upper_dtype, least_upper_float, \
    python_dtype
from .promotion import (ON_BOOLS, PYTHON_NUMBERS, SHIFTS, describe_operand, floor_div_mod, one_axis,
                        reciprocal_division, true_division, wrapped)

if TYPE_CHECKING:
    from .uop import UOp

# bound by bind_late (uop.py): UOp itself, and these helpers of inference.py
promoted = broadcast_pair = broadcast_shape = shape_tuple = per_axis_pairs = None


def bind_late(**names) -> None:
    """Bind UOp and inference's helpers here (called once, by uop.py, when they exist)."""
    globals().update(names)


def _python_number(value):
    """The bool, int or float a numpy or torch scalar holds; anything else refused."""
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) and not isinstance(value, UOp):
        raise GraphError(f"an operand must be a UOp or a number, got a {type(value).__name__} of shape "
                         f"{list(shape)}: embed an array in the graph with UOp.buffer(array)")
    if hasattr(value, "item") and not isinstance(value, UOp):
        value = value.item()
    if value.__class__ not in PYTHON_NUMBERS:
        raise GraphError(f"an operand must be a UOp or a bool, int or float, got {type(value).__name__}"
                         f"{' (an array: UOp.buffer(np.asarray(value)))' if isinstance(value, (list, tuple)) else ''}")
    return value


def matmul_operand_refused(other) -> str:
    return (f"a matmul operand must be a UOp, got {type(other).__name__}: embed an array in the graph with "
            f"UOp.buffer(array)")


class Primitives:
    """The operators, unary ops, casts, reductions and movement ops of UOp."""

    __slots__ = ()

    # numpy defers to UOp's reflected operators (np.ones(3) * x is x.__rmul__, refused or
    # computed there) instead of building an object array of nodes, one per element
    __array_ufunc__ = None

    def __array_function__(self, func, types, args, kwargs):
        raise GraphError(f"numpy.{func.__name__} does not take graph nodes: use the node's methods "
                         f"(x.sum(), x.reshape(...), x.maximum(y), ...), or evaluate the graph first")

    def __rmatmul__(self, other):  # only a non-node comes here: a node @ node is __matmul__'s
        raise GraphError(matmul_operand_refused(other))

    # ------------------------------------------------------------------ elementwise
    def _binary(self, op: str, other, reverse: bool = False, out_dtype: DType | None = None) -> "UOp":
        """`op` of this tensor and `other` (a tensor or a Python number) as tinygrad pairs them:
        both cast to the least dtype of its lattice above both, a Python int or float
        counting as weak (int8 + 3 is int8, int8 + 2.5 float32, bool + 1 int32; an int out of
        the dtype's range wraps, as tinygrad's constant does). On bools, tinygrad's ADD and
        MAX are OR, MUL is AND, and a - b is a + (-b) with -b = not b."""
        a, b = self._pair(other, reverse)
        if op in SHIFTS and (not a.dtype.is_int or reverse and other.__class__ is int and self.dtype.is_int):
            left, right = (other, self) if reverse else (self, other)
            why = "a Python int shifted by a tensor stays weak in tinygrad 0.14, which cannot run it; shift " \
                  "t.const_like(n) instead" if a.dtype.is_int else "shift operands must be integers"
            raise GraphError(f"{op}: {why}, got {describe_operand(left)} and {describe_operand(right)}")
        if a.dtype.is_bool and op in ON_BOOLS:
            return ON_BOOLS[op](a, b)
        return UOp.make(op, out_dtype or a.dtype, (a, b))

    def _pair(self, other, reverse: bool = False) -> tuple["UOp", "UOp"]:
        """(self, other) promoted to one dtype and broadcast (tinygrad's _broadcasted);
        swapped when `reverse`."""
        if other.__class__ is UOp:
            node = self
            if other.dtype is not self.dtype:
                node, other = promoted(self, other)
        else:
            node, other = self._with_number(other)
        a, b = (other, node) if reverse else (node, other)
        if a.shape != b.shape and a.shape and b.shape:
            a, b = broadcast_pair(a, b)
        return a, b

    def _with_number(self, value) -> tuple["UOp", "UOp"]:
        """This tensor, cast where tinygrad's promotion lifts it, and `value` as a CONST of
        the dtype they meet in. A numpy or torch scalar (0-d) is the number it holds; an
        array is refused, even of one element (numpy would broadcast it: x * [[2]] is 2-D)."""
        if value.__class__ not in PYTHON_NUMBERS:
            value = _python_number(value)
        dtype, kind = self.dtype, value.__class__
        node = self
        if not (dtype.is_float or kind is bool or (kind is int and dtype.is_int)):
            node = self.cast(least_upper_dtype(dtype, python_dtype(value)))
        if kind is int and node.dtype.is_int:
            value = wrapped(value, node.dtype)
        return node, node.const_like(value)

    def __add__(self, other): return self._binary(Ops.ADD, other)
    def __radd__(self, other): return self._binary(Ops.ADD, other, True)
    def __sub__(self, other): return self._binary(Ops.SUB, other)
    def __rsub__(self, other): return self._binary(Ops.SUB, other, True)
    def __mul__(self, other): return self._binary(Ops.MUL, other)
    def __rmul__(self, other): return self._binary(Ops.MUL, other, True)
    # `/` is true division, as in Python and tinygrad: integers are divided as float32 (the
    # FDIV node itself, on integers, is C division). `//` and `%` floor, as in Python and
    # tinygrad; the C forms are the CDIV and CMOD nodes (`cdiv`, `cmod`).
    def __truediv__(self, other): return true_division(*self._pair(other))
    def __rtruediv__(self, other): return true_division(*self._pair(other, True))
    def __floordiv__(self, other): return floor_div_mod(*self._pair(other))[0]
    def __rfloordiv__(self, other): return floor_div_mod(*self._pair(other, True))[0]
    def __mod__(self, other): return floor_div_mod(*self._pair(other))[1]
    def __rmod__(self, other): return floor_div_mod(*self._pair(other, True))[1]
    def __rlshift__(self, other): return self._binary(Ops.SHL, other, True)
    def __rrshift__(self, other): return self._binary(Ops.SHR, other, True)
    def __rand__(self, other): return self._binary(Ops.AND, other, True)
    def __ror__(self, other): return self._binary(Ops.OR, other, True)
    def __rxor__(self, other): return self._binary(Ops.XOR, other, True)
    def __invert__(self): return self.logical_not() if self.dtype.is_bool else self._bits_flipped()
    def cdiv(self, other) -> "UOp": return self._binary(Ops.CDIV, other)
    def cmod(self, other) -> "UOp": return self._binary(Ops.CMOD, other)
    def __and__(self, other): return self._binary(Ops.AND, other)
    def __or__(self, other): return self._binary(Ops.OR, other)
    def __xor__(self, other): return self._binary(Ops.XOR, other)
    def __lshift__(self, other): return self._binary(Ops.SHL, other)
    def __rshift__(self, other): return self._binary(Ops.SHR, other)
    def __pow__(self, other): return self.pow(other)
    def __rpow__(self, other): return self.pow(other, True)
    def __lt__(self, other): return self._binary(Ops.CMPLT, other, out_dtype=dtypes.bool)
    def __gt__(self, other): return self._binary(Ops.CMPLT, other, True, out_dtype=dtypes.bool)
    def __le__(self, other): return (self > other).logical_not()  # as tinygrad: not (a > b)
    def __ge__(self, other): return (self < other).logical_not()
    def __neg__(self):  # tinygrad's neg: not x for bools
        return self.logical_not() if self.dtype.is_bool else UOp.make(Ops.NEG, self.dtype, (self,))

    def eq(self, other) -> "UOp": return self._binary(Ops.CMPEQ, other, out_dtype=dtypes.bool)
    def ne(self, other) -> "UOp": return self._binary(Ops.CMPNE, other, out_dtype=dtypes.bool)
    def maximum(self, other) -> "UOp": return self._binary(Ops.MAX, other)
    def pow(self, other, reverse: bool = False) -> "UOp":
        """self ** other. As tinygrad: an integer (or bool) power with a Python exponent that
        is not an int >= 0 is refused (the result would need a float: cast first). With
        `reverse` (other ** self) the Python number is the base, and any exponent is fine."""
        base, exponent = self._pair(other, reverse)
        python_exponent = not reverse and other.__class__ is not UOp
        if not base.dtype.is_float and python_exponent and not (isinstance(other, int) and other >= 0):
            raise GraphError(f"pow: the base {describe_operand(self)} needs a float dtype for the exponent "
                             f"{describe_operand(other)}")
        if base.dtype.is_bool:
            return base | exponent.logical_not()  # 0 ** 0 is 1, 0 ** 1 is 0, 1 ** y is 1
        return UOp.make(Ops.POW, base.dtype, (base, exponent))

    def _times_reciprocal(self, other: "UOp") -> "UOp":
        return reciprocal_division(self, other)

    def minimum(self, other) -> "UOp":
        """min(a, b) through MAX, as tinygrad spells it, in the dtype both promote to:
        -max(-a, -b) for floats (ties share the gradient), ~max(~a, ~b) for integers (~
        reverses the order without overflow, unsigned and INT_MIN too), a and b for bools."""
        a, b = self._pair(other)
        if a.dtype.is_float:  # a constant negated in place: no NEG node for it
            return -((-a).maximum(b.const_like(-b.arg) if b.op == Ops.CONST else -b))
        if a.dtype.is_bool:
            return a & b
        return a._bits_flipped().maximum(b._bits_flipped())._bits_flipped()

    def _bits_flipped(self) -> "UOp":
        """~x: x XOR all ones."""
        ones = -1 if self.dtype.kind == "i" else (1 << (8 * self.dtype.itemsize)) - 1
        return self ^ ones

    def logical_not(self) -> "UOp":
        """not x, elementwise: x == 0 for numbers (x != 1 is not it)."""
        return (self if self.dtype.is_bool else self.cast(dtypes.bool)).ne(True)

    def _as_float(self) -> "UOp":
        return self if self.dtype.is_float else self.cast(dtypes.float32)

    def where(self, a, b) -> "UOp":
        """`a` where this (bool) condition holds, else `b`, the two promoted as an operation's
        operands (a Python number weak: x.where(y, 0) of int8 is int8, of a bool int32, as
        tinygrad's); two Python numbers in the dtype they meet in (float32, int32 or bool)."""
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            a = UOp.const(a, least_upper_dtype(python_dtype(a), python_dtype(b)))
        a, b = a._pair(b) if isinstance(a, UOp) else b._pair(a, True)
        shape = broadcast_shape(broadcast_shape(self.shape, a.shape), b.shape)
        cond, a, b = (x.broadcast_to(shape) if x.shape else x for x in (self, a, b))
        return UOp.make(Ops.WHERE, a.dtype, (cond, a, b))

    def mulacc(self, b: "UOp", c: "UOp") -> "UOp":
        return UOp.make(Ops.MULACC, self.dtype, (self, b, c))

    def _unary(self, op: str) -> "UOp":
        """A unary node. SQRT, EXP2, LOG2, SIN and RECIPROCAL of an integer or bool compute
        in float32 (tinygrad's least_upper_float); TRUNC of one is the value itself."""
        node = self
        if op in FLOAT_UNARY and not self.dtype.is_float:
            if op == Ops.TRUNC:
                return self
            node = self.cast(least_upper_float(self.dtype))
        return UOp.make(op, node.dtype, (node,))
    def sqrt(self): return self._unary(Ops.SQRT)
    def exp2(self): return self._unary(Ops.EXP2)
    def log2(self): return self._unary(Ops.LOG2)
    def sin(self): return self._unary(Ops.SIN)
    def reciprocal(self): return self._unary(Ops.RECIPROCAL)
    def trunc(self): return self._unary(Ops.TRUNC)
    def contiguous(self): return self._unary(Ops.CONTIGUOUS)
    def contiguous_backward(self): return self._unary(Ops.CONTIGUOUS_BACKWARD)
    def detach(self): return self._unary(Ops.DETACH)
    def copy_to_device(self, device: str): return UOp.make(Ops.COPY, self.dtype, (self,), device)

    def cast(self, dtype) -> "UOp":
        dtype = _named_dtype(dtype)
        return self if dtype is self.dtype else UOp.make(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype) -> "UOp":
        return UOp.make(Ops.BITCAST, _named_dtype(dtype), (self,))

    # ------------------------------------------------------------------ reduce
    def _reduce(self, op: str, axis, keepdim: bool) -> "UOp":
        axes = reduce_axes(axis, len(self.shape))
        out = UOp.make(Ops.REDUCE, self.dtype, (self,), (op, axes)) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim: bool = False, dtype=None) -> "UOp":
        """REDUCE ADD over `axis` (an int, a tuple, or None for all), accumulated in `dtype`
        if given. Otherwise as tinygrad: bools and integers narrower than 32 bits are summed
        as int32 (unsigned: uint32), a count of a bool mask and not a sum that wraps at 128;
        float16 is summed in float32 and rounded back. A sum of bools in bool is any."""
        if dtype is not None:
            return self.cast(dtype)._reduce_in_kind("ADD", axis, keepdim)
        if self.dtype.is_bool or (self.dtype.is_int and self.dtype.itemsize < 4):
            wide = dtypes.uint32 if self.dtype.kind == "u" else dtypes.int32
            return self.cast(wide)._reduce("ADD", axis, keepdim)
        wide = accumulation_dtype(self.dtype)
        if wide is not self.dtype:
            return self.cast(wide)._reduce("ADD", axis, keepdim).cast(self.dtype)
        return self._reduce("ADD", axis, keepdim)

    def prod(self, axis=None, keepdim: bool = False, dtype=None) -> "UOp":
        """REDUCE MUL over `axis` in `dtype` (default: the tensor's; bools: all)."""
        return self.cast(self.dtype if dtype is None else dtype)._reduce_in_kind("MUL", axis, keepdim)

    def _reduce_in_kind(self, op: str, axis, keepdim: bool) -> "UOp":
        """REDUCE `op` in this dtype; of bools (the format's REDUCE takes none) over their 0/1
        bytes: a sum is any, a product all, as tinygrad's bool reductions."""
        if self.dtype.is_bool:
            return self.cast(dtypes.uint8)._reduce("MAX" if op == "ADD" else op, axis, keepdim).cast(dtypes.bool)
        return self._reduce(op, axis, keepdim)

    def max(self, axis=None, keepdim: bool = False) -> "UOp":
        if self.dtype.is_bool:  # REDUCE takes no bools: the largest of the 0/1 bytes (any)
            return self.cast(dtypes.uint8)._reduce("MAX", axis, keepdim).cast(dtypes.bool)
        return self._reduce("MAX", axis, keepdim)

    def r(self, op: str, axes: Sequence[int]) -> "UOp":
        """The raw REDUCE node (tinygrad's `UOp.r`): reduced axes kept with size 1."""
        return UOp.make(Ops.REDUCE, self.dtype, (self,), (op, tuple(sorted(axes))))

    # ------------------------------------------------------------------ movement
    def reshape(self, *shape) -> "UOp":
        """To `shape` (ints, or one sequence): -1 is inferred, None keeps that axis's size."""
        shape = varargs(shape)
        if any(s is None for s in shape):
            if any(s is None and i >= len(self.shape) for i, s in enumerate(shape)):
                raise GraphError(f"reshape {list(self.shape)} to {list(shape)}: a None past the last axis")
            shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
        shape = shape_tuple(shape, inferred=True)
        if shape.count(-1) > 1:
            raise GraphError(f"reshape to {list(shape)}: only one size can be -1 (inferred)")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 and known else s for s in shape)
        return self if shape == self.shape else UOp.make(Ops.RESHAPE, self.dtype, (self,), shape)

    def expand(self, *shape) -> "UOp":
        """Grow size-1 axes to `shape`, as tinygrad's expand: -1 keeps an axis's size, and
        a longer shape adds leading axes (a RESHAPE first; the EXPAND node itself keeps the rank)."""
        shape = shape_tuple(varargs(shape), inferred=True)
        node = self
        if len(shape) > len(self.shape):
            node = self.reshape((1,) * (len(shape) - len(self.shape)) + self.shape)
        shape = tuple(node.shape[i] if s == -1 and i < len(node.shape) else s for i, s in enumerate(shape))
        return node if shape == node.shape else UOp.make(Ops.EXPAND, node.dtype, (node,), shape)

    def permute(self, *order) -> "UOp":
        rank = len(self.shape)
        order = tuple(int(o) + rank if int(o) < 0 else int(o) for o in varargs(order))
        if sorted(order) != list(range(rank)):
            raise GraphError(f"permute order {list(order)} is not an order of the {rank} axes of shape "
                             f"{list(self.shape)}")
        if order == tuple(range(rank)):
            return self
        return UOp.make(Ops.PERMUTE, self.dtype, (self,), order)

    def pad(self, padding: Sequence, mode: str = "constant", value=0.0) -> "UOp":
        """Padding, as tinygrad's: one (before, after) pair per axis, None for (0, 0); or the
        flat form, ints for the last axes, last axis first ((left, right, top, bottom) pads W
        then H). A negative amount cuts that many elements off instead. `mode` "constant"
        fills with `value` (0: the PAD node itself); "reflect", "replicate" and "circular"
        fill with the tensor's own elements (builder.movement.pad_from_inside)."""
        if padding and all(isinstance(p, int) and not isinstance(p, bool) for p in padding):
            if len(padding) % 2 or len(padding) > 2 * len(self.shape):
                raise GraphError(f"pad: a flat padding has two ints per axis, at most {2 * len(self.shape)}, "
                                 f"got {list(padding)}")
            pairs = flat_padding_pairs(padding)
            padding = (None,) * (len(self.shape) - len(pairs)) + pairs
        padding = tuple((0, 0) if pair is None else pair for pair in per_axis_pairs(padding, "pad"))
        if mode != "constant":
            return pad_from_inside(self, padding, mode)
        if any(amount < 0 for pair in padding for amount in pair):
            return self.shrink(cut_by_negative_padding(padding, self.shape)).pad(
                tuple((max(before, 0), max(after, 0)) for before, after in padding), value=value)
        if value != 0:
            return self._pad_value(padding, value)
        if all(p == (0, 0) for p in padding):
            return self
        return UOp.make(Ops.PAD, self.dtype, (self,), padding)

    def shrink(self, bounds: Sequence[Sequence[int]]) -> "UOp":
        """Keep [start, end) of each axis: one pair per axis, None for the whole axis."""
        bounds = tuple((0, size) if pair is None else pair
                       for pair, size in zip(per_axis_pairs(bounds, "shrink"), self.shape + (0,) * len(bounds)))
        if bounds == tuple((0, s) for s in self.shape):
            return self
        return UOp.make(Ops.SHRINK, self.dtype, (self,), bounds)

    def flip(self, *axis) -> "UOp":
        """Reverse the given axes (ints, or one sequence of them); or pass one bool per axis."""
        axis = axis[0] if len(axis) == 1 else axis
        if isinstance(axis, (list, tuple)) and axis and all(isinstance(a, bool) for a in axis):
            flags = tuple(axis)
        else:  # each axis at most once, as tinygrad and torch; a scalar has none to flip
            if axis is None:
                raise GraphError(f"flip needs the axes to reverse (shape {list(self.shape)})")
            axes = [one_axis(a, len(self.shape)) for a in ((axis,) if isinstance(axis, int) else axis)]
            if len(set(axes)) != len(axes):
                raise GraphError(f"flip: an axis appears more than once in {tuple(axis)} (shape {list(self.shape)})")
            flags = tuple(i in axes for i in range(len(self.shape)))
        return self if not any(flags) else UOp.make(Ops.FLIP, self.dtype, (self,), flags)

    @property
    def T(self) -> "UOp":  # noqa: N802
        return self.transpose()

    def transpose(self, a: int = 1, b: int = 0) -> "UOp":
        """Swap axes a and b; by default the first two, as tinygrad's transpose and .T do."""
        a, b = one_axis(a, len(self.shape)), one_axis(b, len(self.shape))  # checked, made positive
        order = list(range(len(self.shape)))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    def broadcast_to(self, shape: Sequence[int]) -> "UOp":
        """numpy-style broadcast made explicit: RESHAPE to the rank, then EXPAND (-1 keeps
        an axis's size, as torch's)."""
        shape = shape_tuple(shape, inferred=True)
        if self.shape == shape:
            return self
        if len(self.shape) > len(shape):
            raise GraphError(f"cannot broadcast {list(self.shape)} to {list(shape)}")
        padded = (1,) * (len(shape) - len(self.shape)) + self.shape
        return self.reshape(padded).expand(shape)
