"""A small, independent numpy evaluator for tests, and a finite-difference gradient check.

It exists so the gradient tests do not depend on the production evaluator alone, and to
cross-check it: plain numpy per op, an iterative walk, call bodies evaluated with their
slots bound (recursion only as deep as calls are nested).
"""

from __future__ import annotations

import numpy as np

from uopcli import Ops, UOp

_UNARY = {
    Ops.NEG: np.negative, Ops.RECIPROCAL: lambda x: 1 / x, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.TRUNC: np.trunc,
    Ops.CONTIGUOUS: lambda x: x, Ops.CONTIGUOUS_BACKWARD: lambda x: x, Ops.DETACH: lambda x: x,
    Ops.COPY: lambda x: x,
}
_BINARY = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.MAX: np.maximum,
    Ops.POW: np.power, Ops.CMOD: np.fmod, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or,
    Ops.XOR: np.bitwise_xor, Ops.SHL: np.left_shift, Ops.SHR: np.right_shift,
    Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
    Ops.CDIV: lambda a, b: np.trunc(a / b),
}
_REDUCE = {"ADD": np.add.reduce, "MUL": np.multiply.reduce, "MAX": np.maximum.reduce}


def reference_evaluate(outputs, inputs, slots=()):
    """Values of `outputs` given {name: array} for the graph inputs (slot values for bodies)."""
    values: dict[UOp, object] = {}
    for node in _postorder(outputs):
        values[node] = _one(node, values, inputs, slots)
    return [values[o] for o in outputs]


def _postorder(roots):
    order, state, stack = [], {}, list(reversed(roots))
    while stack:
        node = stack[-1]
        if node not in state:
            state[node] = False
            src = node.src[1:] if node.op in (Ops.FUNCTION, Ops.CALL) else node.src
            stack.extend(s for s in reversed(src) if s not in state)
            continue
        stack.pop()
        if state[node] is False:
            state[node] = True
            order.append(node)
    return order


def _one(node, values, inputs, slots):
    op, src = node.op, [values.get(s) for s in node.src]
    np_dtype = node.dtype.np if not node.dtype.is_void else None
    if op == Ops.PARAM:
        return np.asarray(inputs[node.arg] if isinstance(node.arg, str) else slots[node.arg], np_dtype)
    if op == Ops.CONST:
        return np.asarray(node.arg, np_dtype)
    if op == Ops.BUFFER:
        return node.buffer_array()
    if op in (Ops.NOOP, Ops.STORE):
        return None
    if op == Ops.TUPLE:
        return tuple(src)
    if op in (Ops.FUNCTION, Ops.CALL):
        return tuple(reference_evaluate(list(node.src[0].src), {}, src[1:]))
    if op == Ops.GETTUPLE:
        return src[0][node.arg]
    if op == Ops.AFTER:
        return values[node.src[1].src[1]]
    with np.errstate(all="ignore"):
        if op in _UNARY:
            out = _UNARY[op](src[0])
        elif op == Ops.CAST:
            out = src[0].astype(np_dtype)
        elif op == Ops.BITCAST:
            out = np.ascontiguousarray(src[0]).view(np_dtype)
        elif op in _BINARY:
            out = _BINARY[op](src[0], src[1])
        elif op == Ops.WHERE:
            out = np.where(*src)
        elif op == Ops.MULACC:
            out = src[0] * src[1] + src[2]
        elif op == Ops.REDUCE:
            kind, axes = node.arg
            x = src[0].astype(np.float32) if kind == "ADD" and src[0].dtype == np.float16 else src[0]
            out = _REDUCE[kind](x, axis=axes, keepdims=True) if axes else x
        else:
            out = _movement(op, node.arg, src[0])
    return np.asarray(out).astype(np_dtype, copy=False)


def _movement(op, arg, x):
    if op == Ops.RESHAPE:
        return x.reshape(arg)
    if op == Ops.EXPAND:
        return np.broadcast_to(x, arg)
    if op == Ops.PERMUTE:
        return np.transpose(x, arg)
    if op == Ops.PAD:
        return np.pad(x, arg)
    if op == Ops.SHRINK:
        return x[tuple(slice(s, e) for s, e in arg)]
    if op == Ops.FLIP:
        return np.flip(x, tuple(i for i, f in enumerate(arg) if f)) if any(arg) else x
    raise NotImplementedError(op)


def evaluate(outputs, inputs):
    """The production evaluator when it exists, else the reference one."""
    try:
        from uopcli.backends.numpy import evaluate as production
    except ImportError:
        return reference_evaluate(outputs, inputs)
    return production(outputs, inputs)


def numeric_gradient(output: UOp, seed: np.ndarray, inputs: dict, name: str, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences in float64 of sum(output * seed) with respect to input `name`."""
    base = {k: np.array(v, dtype=np.float64) for k, v in inputs.items()}
    x = base[name]
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        original = x[index]
        x[index] = original + eps
        up = float(np.sum(reference_evaluate([output], base)[0] * seed))
        x[index] = original - eps
        down = float(np.sum(reference_evaluate([output], base)[0] * seed))
        x[index] = original
        grad[index] = (up - down) / (2 * eps)
    return grad


def assert_shapes_as_inferred(roots) -> None:
    """The gradient rules build nodes without inference (uop.make_shaped): every node under
    `roots` must still be one that inference accepts, with the shape it gives."""
    from uopcli.core.inference import infer_shape
    from uopcli.core.walks import toposort
    for node in toposort(roots):
        if node.src:
            assert infer_shape(node.op, node.dtype, node.src, node.arg) == node.shape, node
