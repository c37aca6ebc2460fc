"""The one place that names every op and dtype of format v1.

Ops are interned strings (`Ops.ADD == "ADD"`): they hash and compare in C, they are the
names the file format stores, and `Ops.ADD` reads like tinygrad's enum.
"""

from __future__ import annotations

class Ops:
    # leaves ------------------------------------------------------------- src: none
    PARAM = "PARAM"            # arg: input name (str) or body slot (int); shape on the node
    CONST = "CONST"            # arg: bool | int | float; shape ()
    BUFFER = "BUFFER"          # arg: little-endian C-order bytes; shape on the node
    NOOP = "NOOP"              # arg: None; "no gradient here", only inside a TUPLE
    # unary elementwise ---------------------------------------------------- src: x
    NEG = "NEG"
    RECIPROCAL = "RECIPROCAL"
    SQRT = "SQRT"
    EXP2 = "EXP2"
    LOG2 = "LOG2"
    SIN = "SIN"
    TRUNC = "TRUNC"
    CAST = "CAST"              # value converted to the node's dtype
    BITCAST = "BITCAST"        # bytes reinterpreted as the node's dtype
    # binary elementwise --------------------------------------------------- src: a, b
    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    FDIV = "FDIV"
    MAX = "MAX"
    POW = "POW"
    CDIV = "CDIV"              # integer division, truncating toward zero
    CMOD = "CMOD"              # remainder with the dividend's sign
    AND = "AND"
    OR = "OR"
    XOR = "XOR"
    SHL = "SHL"
    SHR = "SHR"
    CMPLT = "CMPLT"            # -> bool
    CMPNE = "CMPNE"            # -> bool
    CMPEQ = "CMPEQ"            # -> bool
    # ternary elementwise
    WHERE = "WHERE"            # src: cond (bool), a, b
    MULACC = "MULACC"          # src: a, b, c -> a*b+c
    # reduce
    REDUCE = "REDUCE"          # src: x; arg: (ADD|MUL|MAX, axes); reduced axes kept as 1
    # movement ----------------------------------------------------------- src: x
    RESHAPE = "RESHAPE"        # arg: new shape
    EXPAND = "EXPAND"          # arg: new shape, only size-1 axes grow
    PERMUTE = "PERMUTE"        # arg: axis order
    PAD = "PAD"                # arg: ((before, after), ...) zero padding
    SHRINK = "SHRINK"          # arg: ((start, end), ...)
    FLIP = "FLIP"              # arg: (bool, ...) per axis
    # identity-valued ---------------------------------------------------- src: x
    CONTIGUOUS = "CONTIGUOUS"
    CONTIGUOUS_BACKWARD = "CONTIGUOUS_BACKWARD"  # gradient becomes CONTIGUOUS(g)
    DETACH = "DETACH"          # stops gradients
    COPY = "COPY"              # arg: target device (str)
    # calls and tuples
    TUPLE = "TUPLE"            # src: elements (NOOP allowed); void
    FUNCTION = "FUNCTION"      # src: body TUPLE, args...; arg: name; void
    CALL = "CALL"              # src: body TUPLE, args...; arg: CallArg(name, grad body); void
    GETTUPLE = "GETTUPLE"      # src: FUNCTION | CALL; arg: output index
    # memory
    STORE = "STORE"            # src: dest, value; void
    AFTER = "AFTER"            # src: dest, store; dest's value after the store


ALL_OPS: tuple[str, ...] = tuple(v for k, v in vars(Ops).items() if k.isupper())

LEAF = frozenset({Ops.PARAM, Ops.CONST, Ops.BUFFER, Ops.NOOP})
UNARY = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC,
                   Ops.CAST, Ops.BITCAST})
FLOAT_UNARY = frozenset({Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC})
BINARY = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CDIV, Ops.CMOD,
                    Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
                    Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
ARITHMETIC = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW})
INTEGER_ONLY = frozenset({Ops.CDIV, Ops.CMOD})
BITWISE = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})  # bool or integer
COMPARISON = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
TERNARY = frozenset({Ops.WHERE, Ops.MULACC})
ELEMENTWISE = UNARY | BINARY | TERNARY
REDUCE_OPS = ("ADD", "MUL", "MAX")
MOVEMENT = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP})
SELECTING_MOVES = MOVEMENT - {Ops.PAD}  # every element of the result is one of the source's (a broadcast scalar stays one)
IDENTITY = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY})
CALLS = frozenset({Ops.FUNCTION, Ops.CALL})
VOID_OPS = frozenset({Ops.TUPLE, Ops.FUNCTION, Ops.CALL, Ops.STORE, Ops.NOOP})

# The family of every op, for colouring pictures and for reports.
FAMILY: dict[str, str] = {}
for _family, _ops in (("leaf", LEAF), ("unary", UNARY), ("binary", BINARY), ("ternary", TERNARY),
                      ("reduce", {Ops.REDUCE}), ("movement", MOVEMENT), ("identity", IDENTITY),
                      ("call", CALLS | {Ops.TUPLE, Ops.GETTUPLE}), ("memory", {Ops.STORE, Ops.AFTER})):
    for _op in _ops:
        FAMILY[_op] = _family
assert set(FAMILY) == set(ALL_OPS), "every op belongs to exactly one family"


class DType:
    """A scalar type. One object per dtype, so `is` compares and hashing is by identity."""

    __slots__ = ("name", "itemsize", "kind", "_np")

    def __init__(self, name: str, itemsize: int, kind: str):
        self.name, self.itemsize, self.kind = name, itemsize, kind  # kind: b i u f v
        self._np = None

    @property
    def np(self):
        """The numpy dtype (numpy is imported on first use: commands that need no arrays
        start faster)."""
        if self._np is None and self.kind != "v":
            import numpy
            self._np = numpy.dtype(self.name)
        return self._np

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_void(self) -> bool:
        return self.kind == "v"

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    def __reduce__(self):  # pickles and copies stay the singleton
        return (getattr, (dtypes, self.name))


class dtypes:  # noqa: N801 - tinygrad's spelling
    bool = DType("bool", 1, "b")
    int8 = DType("int8", 1, "i")
    int16 = DType("int16", 2, "i")
    int32 = DType("int32", 4, "i")
    int64 = DType("int64", 8, "i")
    uint8 = DType("uint8", 1, "u")
    uint16 = DType("uint16", 2, "u")
    uint32 = DType("uint32", 4, "u")
    uint64 = DType("uint64", 8, "u")
    float16 = DType("float16", 2, "f")
    float32 = DType("float32", 4, "f")
    float64 = DType("float64", 8, "f")
    void = DType("void", 0, "v")
    default_float = float32
    default_int = int32


DTYPES: dict[str, DType] = {d.name: d for d in vars(dtypes).values() if isinstance(d, DType)}

# tinygrad's promotion lattice (its 8-bit and brain floats left out: the format has no such
# dtypes): each dtype and the next wider ones. Nodes never mix dtypes; the builder casts the
# operands of a mixed operation to the least dtype above both, as tinygrad's Tensor does.
# WEAK_INT and WEAK_FLOAT are where a Python int and a Python float sit: below every dtype
# of their kind, so int8 + 3 stays int8 and float16 * 0.5 float16. They are never a node's
# dtype: where tinygrad's result stays weak (int8 + 2.5, int64 + uint64, bool + 1) the node
# takes the default of the kind (float32, int32), as tinygrad's tensor does when realized.
WEAK_INT = DType("weakint", 0, "i")
WEAK_FLOAT = DType("weakfloat", 0, "f")
_WIDER: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (WEAK_INT,), WEAK_INT: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
    dtypes.int64: (WEAK_FLOAT,),
    dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (WEAK_FLOAT,),
    WEAK_FLOAT: (dtypes.float16,), dtypes.float16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


def _at_or_above(dtype: DType) -> frozenset[DType]:
    found, stack = {dtype}, [dtype]
    while stack:
        for wider in _WIDER[stack.pop()]:
            if wider not in found:
                found.add(wider)
                stack.append(wider)
    return frozenset(found)


_UPPER = {d: _at_or_above(d) for d in _WIDER}


def lattice_join(*ds: DType) -> DType:
    """The narrowest dtype of the lattice all of `ds` promote to, weak ones included
    (int8 and WEAK_INT: int8; int64 and uint64: WEAK_FLOAT)."""
    common = frozenset.intersection(*(_UPPER[d] for d in ds))
    return next(d for d in common if common <= _UPPER[d])


def strong_dtype(dtype: DType) -> DType:
    """A weak dtype's default (WEAK_INT: int32, WEAK_FLOAT: float32); any other as it is."""
    return dtypes.default_int if dtype is WEAK_INT else dtypes.default_float if dtype is WEAK_FLOAT else dtype


def python_dtype(value) -> DType:
    """Where a Python number enters the lattice: bool, WEAK_INT or WEAK_FLOAT."""
    return dtypes.bool if isinstance(value, bool) else WEAK_INT if isinstance(value, int) else WEAK_FLOAT


def least_upper_dtype(*ds: DType) -> DType:
    """The dtype a mixed operation of `ds` computes in (int32 and float32: float32; int32 and
    uint32: int64; int64 and uint64: float32, as tinygrad's realized weak float)."""
    return strong_dtype(lattice_join(*ds))


def least_upper_float(dtype: DType) -> DType:
    """The float a float-only op (exp, sin, sqrt, ...) computes an operand of `dtype` in:
    a float as it is, anything else joined with float32 (tinygrad casts integers and bools)."""
    return dtype if dtype.is_float else least_upper_dtype(dtype, dtypes.default_float)


# Sums of float16 add up in float32 and round back once, as tinygrad's kernels do (its
# Tensor.sum casts up and back): a float16 running total would drop every addend below
# its ulp. The builder's sum and the gradient's sums spell it in the graph (CAST, REDUCE
# ADD, CAST back); the evaluators add up every float16 REDUCE ADD, contraction and
# scatter-add in it. The rule, stated once: the dtype each dtype's sums accumulate in.
_ACCUMULATES_IN: dict[DType, DType] = {dtypes.float16: dtypes.float32}
_ACCUMULATES_IN_NP: dict = {}  # the same for numpy dtypes, made on first use (numpy is lazy)


def accumulation_dtype(dtype: DType) -> DType:
    """The dtype a sum of `dtype` values accumulates in: float32 for float16, else `dtype`."""
    return _ACCUMULATES_IN.get(dtype, dtype)


def accumulation_np(np_dtype):
    """accumulation_dtype for a numpy dtype (an evaluator's array): float32 for float16."""
    if not _ACCUMULATES_IN_NP:
        _ACCUMULATES_IN_NP.update({narrow.np: wide.np for narrow, wide in _ACCUMULATES_IN.items()})
    return _ACCUMULATES_IN_NP.get(np_dtype, np_dtype)


def dtype_of(name_or_dtype) -> DType:
    """A DType from a DType, its name, or a numpy dtype."""
    if isinstance(name_or_dtype, DType):
        return name_or_dtype
    if isinstance(name_or_dtype, str):
        name = name_or_dtype
    else:
        import numpy
        name = numpy.dtype(name_or_dtype).name
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name_or_dtype!r}; one of {', '.join(DTYPES)}") from None
