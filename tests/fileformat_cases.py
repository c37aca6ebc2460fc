"""Graphs that together use every op, every dtype and every arg form of format v1.

Shared by tests/test_fileformat.py and tests/test_fileformat_fuzz.py (a plain module, not a
test file: pytest does not collect it).
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import CallArg, Graph, Metadata, Ops, UOp, dtypes
from uopcli.core.ops import ALL_OPS, DTYPES

VALUE_DTYPES = [d for name, d in DTYPES.items() if name != "void"]


def elementwise() -> Graph:
    x = UOp.param("x", (2, 3))
    y = UOp.param("y", (2, 3))
    c = UOp.param("c", (2, 3), dtypes.bool)
    unary = [UOp.make(op, dtypes.float32, (x,)) for op in
             (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)]
    binary = [UOp.make(op, dtypes.float32, (x, y)) for op in
              (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW)]
    compare = [UOp.make(op, dtypes.bool, (x, y)) for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)]
    logical = [UOp.make(op, dtypes.bool, (c, compare[0])) for op in (Ops.AND, Ops.OR, Ops.XOR)]
    outputs = {f"u{i}": n for i, n in enumerate(unary)}
    outputs.update({f"b{i}": n for i, n in enumerate(binary)})
    outputs.update({f"cmp{i}": n for i, n in enumerate(compare)})
    outputs.update({f"l{i}": n for i, n in enumerate(logical)})
    outputs["where"] = c.where(x, y)
    outputs["mulacc"] = x.mulacc(y, UOp.const(0.5))
    outputs["scalar_broadcast"] = x * 2.0
    return Graph(outputs, meta={"producer": "tests", "note": "elementwise ops"})


def integers() -> Graph:
    i = UOp.param("i", (4,), dtypes.int32)
    j = UOp.param("j", (4,), dtypes.int32)
    u = UOp.param("u", (4,), dtypes.uint8)
    outputs = {op.lower(): UOp.make(op, dtypes.int32, (i, j)) for op in
               (Ops.CDIV, Ops.CMOD, Ops.SHL, Ops.SHR, Ops.AND, Ops.OR, Ops.XOR, Ops.ADD)}
    outputs["cast"] = u.cast(dtypes.float16)
    outputs["bitcast"] = i.bitcast(dtypes.float32)
    outputs["neg"] = -i
    return Graph(outputs)


def every_dtype() -> Graph:
    """A PARAM, a CONST, a BUFFER and a CAST of every value dtype, with edge values."""
    outputs = {}
    rng = np.random.default_rng(0)
    for dtype in VALUE_DTYPES:
        name = dtype.name
        p = UOp.param(f"p_{name}", (2,), dtype)
        if dtype.is_bool:
            values = [True, False]
            array = np.array([True, False, True])
        elif dtype.is_int:
            info = np.iinfo(dtype.np)
            values = [int(info.min), int(info.max), 0, 7]
            array = rng.integers(info.min, info.max, size=(3, 2), dtype=dtype.np, endpoint=True)
        else:
            values = [1.5, -0.0, 0.0, math.inf, -math.inf, math.nan, 1e-300 if name == "float64" else 0.1]
            array = rng.standard_normal((2, 2)).astype(dtype.np)
        for k, v in enumerate(values):
            outputs[f"c_{name}_{k}"] = UOp.const(v, dtype)
        outputs[f"buf_{name}"] = UOp.buffer(array)
        outputs[f"cast_{name}"] = p.cast(dtypes.float32 if dtype is not dtypes.float32 else dtypes.float64)
    outputs["empty_buffer"] = UOp.buffer(np.zeros((0, 3), np.float32))
    outputs["scalar_buffer"] = UOp.buffer(np.float64(2.5))
    return Graph(outputs)


def movement() -> Graph:
    x = UOp.param("x", (2, 3, 4))
    outputs = {
        "sum": x.r("ADD", (0, 2)),
        "prod": x.r("MUL", (1,)),
        "max": x.r("MAX", (0, 1, 2)),
        "reshape": x.reshape(6, 4),
        "scalar": x.sum(),
        "expand": x.reshape(2, 1, 3, 4).expand(2, 5, 3, 4),
        "permute": x.permute(2, 0, 1),
        "pad": x.pad(((1, 0), (0, 2), (0, 0))),
        "shrink": x.shrink(((0, 1), (1, 3), (0, 4))),
        "flip": x.flip((0, 2)),
        "contiguous": x.contiguous(),
        "contiguous_backward": x.contiguous_backward(),
        "detach": x.detach(),
        "copy": x.copy_to_device("CPU:1").copy_to_device("CPU"),
        "matmul": x @ UOp.param("w", (4, 5)),
    }
    return Graph(outputs)


def calls() -> Graph:
    """FUNCTION, CALL with and without a backward body (NOOP elements), nested calls, GETTUPLE."""
    a = UOp.param("a", (3,))
    b = UOp.param("b", (3,))
    square = UOp.trace_function("square", lambda s: (s * s, s + 1.0), a)
    inner = UOp.trace_call("inner", lambda s, t: s * t, None, a, b)
    outer = UOp.trace_call("outer",
                           lambda s, t: UOp.trace_function("nested", lambda u: u.sin(), s)[0] * t,
                           lambda s, t, g: (g * t * s.sin().exp2(), None), a, b)
    return Graph([("square", square[0]), ("plus_one", square[1]), ("inner", inner[0]), ("outer", outer[0])],
                 meta={"about": "calls"})


def memory() -> Graph:
    dest = UOp.param("dest", (4,))
    value = UOp.param("value", (4,))
    store = dest.store(value * 2.0)
    return Graph({"after": dest.after(store), "store": store})


def with_metadata() -> Graph:
    """Front-end tags (relu, softmax) and backward tags set as differentiation sets them."""
    x = UOp.param("x", (2, 4))
    y = x.relu().softmax()
    g = (y * 3.0 - 1.0).set_meta(Metadata("grad_of_softmax", "model.py:12", True))
    h = (g + 0.25).set_meta(Metadata(None, None, True))
    return Graph({"y": y, "h": h})


def unused_inputs() -> Graph:
    """Inputs in a declared order, two of them unused: they go last, in inputs order."""
    x = UOp.param("x", (3,))
    z = UOp.param("z", ())
    unused_a = UOp.param("unused_a", (5,), dtypes.int64)
    unused_b = UOp.param("unused_b", (1, 1))
    return Graph({"y": x * z}, inputs=[unused_b, x, unused_a, z])


def shared_subgraphs() -> Graph:
    """Outputs that share nodes and one output that is another's source."""
    x = UOp.param("x", (4,))
    s = (x * x).sin()
    t = s + x
    return Graph([("t", t), ("s", s), ("again", t), ("u", (t * s).exp2())])


def no_outputs() -> Graph:
    return Graph({}, inputs=[UOp.param("only", (2,))])


CASES = {f.__name__: f for f in (elementwise, integers, every_dtype, movement, calls, memory, with_metadata,
                                 unused_inputs, shared_subgraphs, no_outputs)}


def all_graphs() -> dict[str, Graph]:
    return {name: build() for name, build in CASES.items()}


def ops_used(graphs) -> set[str]:
    from uopcli import toposort
    ops = set()
    for graph in graphs:
        for node in graph.nodes():
            ops.add(node.op)
            if node.op == Ops.CALL and isinstance(node.arg, CallArg) and node.arg.grad is not None:
                ops.update(n.op for n in toposort([node.arg.grad]))
    return ops


assert len(ALL_OPS) == 48
