"""Writing ONNX nodes and initializers straight into a GraphProto, fast (the exporter's pen).

onnx.helper's make_node and make_tensor check and copy in Python, ~10 µs a node; filling
the protobuf messages in place costs a fraction of that, which is what a 10^5-node
gradient graph needs. Every name is made here, unique in the whole graph and never one
of the graph's own input or output names.

ORT_KERNELS lists, per ONNX operator, the element types onnxruntime's CPU provider has a
kernel for: the types both onnxruntime 1.20 and 1.32 accept (probed: a one-node model per
operator and type; tests/test_onnx_export.py checks every row on the installed version).
An operator outside its row is computed in a carrier type (`Emitter.carried`): a wider
type that holds every value exactly, or, for wrapping integer arithmetic, int64 (sums,
products and differences modulo 2^64 are the same bits modulo 2^n after the cast back).
"""

from __future__ import annotations

import struct

from onnx import AttributeProto, GraphProto, TensorProto

from uopcli.core.ops import DType, dtypes

from .dtypes import CONSTANT_DOC, TO_ONNX

_SIGNED = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64})
_UNSIGNED = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
INTS = _SIGNED | _UNSIGNED
FLOATS = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})
_WIDE = frozenset({dtypes.int32, dtypes.int64}) | FLOATS

# operator -> element types with a CPU kernel in onnxruntime 1.20 .. 1.32 (see above)
ORT_KERNELS: dict[str, frozenset[DType]] = {
    "Add": _WIDE, "Sub": _WIDE, "Mul": _WIDE, "Div": _WIDE,
    "Neg": _WIDE | {dtypes.int8},
    "Max": _WIDE | {dtypes.uint32, dtypes.uint64},
    "Pow": _WIDE,
    "Mod": INTS | FLOATS,
    "Less": _WIDE, "Greater": _WIDE, "Equal": _WIDE | {dtypes.bool},
    "BitwiseAnd": INTS, "BitwiseOr": INTS, "BitwiseXor": INTS, "BitwiseNot": INTS,
    "BitShift": frozenset({dtypes.uint8, dtypes.uint32, dtypes.uint64}),
    "Where": FLOATS | {dtypes.int32, dtypes.int64, dtypes.uint8},
    "ReduceSum": _WIDE, "ReduceProd": _WIDE,
    "ReduceMax": FLOATS | {dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8},
    "Pad": FLOATS | INTS - {dtypes.int16, dtypes.uint16} | {dtypes.bool},
    "Sqrt": FLOATS, "Reciprocal": FLOATS, "Sin": FLOATS, "Floor": FLOATS, "Ceil": FLOATS,
    "Round": FLOATS, "IsNaN": FLOATS, "IsInf": FLOATS, "Log": FLOATS, "Abs": FLOATS | INTS,
    "And": frozenset({dtypes.bool}), "Or": frozenset({dtypes.bool}), "Xor": frozenset({dtypes.bool}),
    "Not": frozenset({dtypes.bool}),
}

# A type that holds every value of the key exactly (order kept): for ops that compare,
# select or move values. uint64 has none; `ordered_int64` maps it to int64 keeping order.
VALUE_CARRIER: dict[DType, DType] = {
    dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
    dtypes.uint8: dtypes.int32, dtypes.uint16: dtypes.int32, dtypes.uint32: dtypes.int64,
    dtypes.float16: dtypes.float32,
}

_ATTR_TYPES = {int: AttributeProto.INT, float: AttributeProto.FLOAT, str: AttributeProto.STRING}


class Emitter:
    """Appends nodes and initializers to `graph`. Each node is named after the UOp being
    exported (`label`, set by the exporter) and carries its `doc` string."""

    def __init__(self, graph: GraphProto, reserved: set[str]):
        self.graph = graph
        self.taken = set(reserved)     # every value, initializer and node name so far
        self.label, self.doc, self.emitted = "node", "", 0
        self._scalars: dict[tuple, str] = {}
        self._tensors: dict[tuple, str] = {}

    # ------------------------------------------------------------------ names
    def fresh(self, base: str) -> str:
        """A name not used yet: `base`, else `base.1`, `base.2`, ..."""
        taken = self.taken
        if base not in taken:
            taken.add(base)
            return base
        n = 1
        while f"{base}.{n}" in taken:
            n += 1
        name = f"{base}.{n}"
        taken.add(name)
        return name

    def start(self, label: str, doc: str) -> None:
        """The UOp whose nodes come next: their names start with `label`."""
        self.label, self.doc, self.emitted = label, doc, 0

    # ------------------------------------------------------------------ nodes
    def op(self, op_type: str, inputs, outputs: int = 1, **attrs):
        """One ONNX node of `op_type`; returns its output name (or names, for outputs > 1)."""
        node = self.graph.node.add()
        node.op_type = op_type
        # the node's name is also its (first) output's: names of nodes and of values are
        # separate namespaces in ONNX, and one fresh name is half the work of two
        name = self.fresh(self.label if not self.emitted else f"{self.label}/{op_type}")
        node.name = name
        self.emitted += 1
        if self.doc:
            node.doc_string = self.doc
        node.input.extend(inputs)
        if outputs == 1:
            node.output.append(name)
        else:
            node.output.extend([name, *(self.fresh(f"{name}:{k}") for k in range(1, outputs))])
        for key, value in attrs.items():
            _set_attribute(node.attribute.add(), key, value)
        return name if outputs == 1 else list(node.output)

    def alias(self, value: str, name: str) -> str:
        """`name` as an Identity of `value` (graph outputs need their own names)."""
        node = self.graph.node.add()
        node.op_type = "Identity"
        node.name = self.fresh(f"output/{name}")
        node.input.append(value)
        node.output.append(name)
        return name

    # ------------------------------------------------------------------ initializers
    def scalar(self, value, dtype: DType) -> str:
        """A shape-() initializer holding `value` in `dtype` (one per distinct value and
        type; keyed by bytes, so -0.0 and 0.0, and nans, stay apart)."""
        data = dtype.np.type(value).tobytes()
        key = (dtype, data)
        name = self._scalars.get(key)
        if name is None:
            name = self._scalars[key] = self.initializer(f"const_{dtype.name}", dtype, (), data)
        return name

    def ints(self, values) -> str:
        """A 1-D int64 initializer (shapes, axes, pads, slice bounds)."""
        values = tuple(int(v) for v in values)
        key = ("ints", values)
        name = self._tensors.get(key)
        if name is None:
            data = struct.pack(f"<{len(values)}q", *values)
            name = self._tensors[key] = self.initializer("ints", dtypes.int64, (len(values),), data)
        return name

    def initializer(self, base: str, dtype: DType, shape, data: bytes) -> str:
        """A tensor initializer from little-endian C-order bytes (a BUFFER's own bytes)."""
        tensor = self.graph.initializer.add()
        tensor.name = self.fresh(base)
        tensor.data_type = TO_ONNX[dtype]
        tensor.dims.extend(shape)
        tensor.raw_data = data
        tensor.doc_string = CONSTANT_DOC
        return tensor.name

    def filled(self, shape, value, dtype: DType) -> str:
        """A tensor of `shape` with every element `value` (an Expand of a scalar)."""
        return self.op("Expand", [self.scalar(value, dtype), self.ints(shape)])

    # ------------------------------------------------------------------ typed helpers
    def cast(self, x: str, src: DType, dst: DType) -> str:
        return x if src is dst else self.op("Cast", [x], to=TO_ONNX[dst])

    def native(self, op_type: str, dtype: DType) -> bool:
        return dtype in ORT_KERNELS[op_type]

    def carried(self, op_type: str, inputs, dtype: DType, carrier: DType | None, out_dtype: DType | None = None,
                extra=(), **attrs):
        """`op_type` on inputs of `dtype` (then the `extra` inputs: axes, pads), run in
        `carrier` when ORT has no kernel for `dtype`: the inputs cast to it, the result
        cast back to `out_dtype` (by default `dtype`)."""
        out_dtype = dtype if out_dtype is None else out_dtype
        if self.native(op_type, dtype):
            return self.op(op_type, [*inputs, *extra], **attrs)
        result = self.op(op_type, [*(self.cast(x, dtype, carrier) for x in inputs), *extra], **attrs)
        return result if out_dtype is dtypes.bool else self.cast(result, carrier, out_dtype)

    def compare(self, op_type: str, a: str, b: str, dtype: DType) -> str:
        """Less, Greater or Equal of two values of `dtype`: a bool tensor, exact for every type."""
        if self.native(op_type, dtype):
            return self.op(op_type, [a, b])
        if dtype is dtypes.uint64:
            return self.op(op_type, [self.ordered_int64(a), self.ordered_int64(b)])
        return self.carried(op_type, [a, b], dtype, VALUE_CARRIER[dtype], dtypes.bool)

    def ordered_int64(self, x: str) -> str:
        """uint64 mapped onto int64 keeping its order: the top bit flipped, then the bits
        reinterpreted (Cast between integer types of one size keeps the bits)."""
        flipped = self.op("BitwiseXor", [x, self.scalar(1 << 63, dtypes.uint64)])
        return self.op("Cast", [flipped], to=TensorProto.INT64)

    def where(self, cond: str, a: str, b: str, dtype: DType, a_may_be_minus_zero: bool = True,
              b_may_be_minus_zero: bool = True) -> str:
        """`a` where `cond` else `b`, bit for bit, in any dtype (uint64 moves as its int64
        bits). onnxruntime's Where (1.20 to 1.32) returns +0.0 for a -0.0 taken from its
        *first* branch (its second keeps every bit): a branch known never to be -0.0 goes
        first (Not(cond) swaps them), else a -0.0 lost there is restored by a multiply by
        -1 (exact for every value) where the picked value is +0.0, so a runtime whose Where
        keeps the sign, as the spec says (onnx.reference, our importer), gives it too."""
        if dtype in FLOATS:
            if not b_may_be_minus_zero:
                return self.op("Where", [self.op("Not", [cond]), b, a])
            picked = self.op("Where", [cond, a, b])
            if not a_may_be_minus_zero:
                return picked
            kept = self.minus_zero(picked, dtype)
            lost = self.op("And", [self.op("And", [cond, self.minus_zero(a, dtype)]), self.op("Not", [kept])])
            return self.op("Mul", [picked, self.sign_factor(lost, dtype)])
        if self.native("Where", dtype):
            return self.op("Where", [cond, a, b])
        carrier = dtypes.int64 if dtype is dtypes.uint64 else VALUE_CARRIER[dtype]
        picked = self.op("Where", [cond, self.cast(a, dtype, carrier), self.cast(b, dtype, carrier)])
        return self.cast(picked, carrier, dtype)

    def minus_zero(self, x: str, dtype: DType) -> str:
        """x is -0.0 (x == 0 and 1/x < 0)."""
        zero = self.scalar(0, dtype)
        return self.op("And", [self.op("Equal", [x, zero]), self.op("Less", [self.op("Reciprocal", [x]), zero])])

    def sign_factor(self, negative: str, dtype: DType) -> str:
        """-1 where `negative`, else 1: multiplying by it sets a sign exactly (a Where of
        ±1 has no zero to lose)."""
        return self.op("Where", [negative, self.scalar(-1, dtype), self.scalar(1, dtype)])


def _set_attribute(attribute, key: str, value) -> None:
    attribute.name = key
    if isinstance(value, (list, tuple)):
        attribute.type = AttributeProto.INTS
        attribute.ints.extend(int(v) for v in value)
        return
    kind = _ATTR_TYPES[type(value)]
    attribute.type = kind
    if kind == AttributeProto.INT:
        attribute.i = value
    elif kind == AttributeProto.FLOAT:
        attribute.f = value
    else:
        attribute.s = value.encode()
