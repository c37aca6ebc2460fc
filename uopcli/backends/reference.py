"""The reference evaluator: every node computed on its own, op by op, with plain numpy.

    reference_evaluate([loss, grad_w], {"x": x, "w": w})   -> [array, array]

It exists to be the independent second opinion. The numpy backend (backends/numpy) is a
compiler with fast paths: contractions found through movement chains and run as BLAS
products in a chosen order, results written into dying arrays, and so on. Each of those is
a place where a bug gives a wrong number that looks right. Here a node's value is made from
its sources' values by the one numpy call its row names, nothing is written in place, and
the walk is plain. `uopgrad check` computes its finite differences with it, so a fast-path
bug in the evaluator that computes the analytic side shows up as a failed check instead of
cancelling out, and the tests compare the two evaluators.

Memory stays that of the graph, not of its spelling (check runs it on whole models):
- movement ops (RESHAPE, EXPAND, PERMUTE, SHRINK, FLIP) give numpy's views where numpy can
  (an EXPAND is a stride-0 view, never a copy); since nothing is written in place, a view
  is as good as a copy. The outputs are returned as fresh C-ordered arrays.
- a REDUCE ADD of a MUL that nothing else reads (a matmul or convolution spelled
  EXPAND, MUL, REDUCE) is one contraction: the axes along which each factor is only
  broadcast are dropped, and np.einsum sums the product of what is left (`_contraction`),
  so the rank-4 product is never built. Integers wrap as the MUL and the sum would; float16
  factors are multiplied and summed in float32 (the REDUCE's own accumulation), so the
  products are not rounded to float16 first: within float16 rounding of the unfused value.
  Its sums start from +0.0, as the numpy backend's BLAS ones: where every product is -0.0
  it gives +0.0 (op by op, and with fuse=False, -0.0).
- a value is dropped once its last user is computed.

`known` and `keep` let a caller reuse values across evaluations (check's finite
differences recompute only what depends on the input they change); `observe` sees every
main-scope value as it is made (the NaN hunt, tools/nans.py), with `fuse=False` so that
each product is a value of its own.

The semantics are the format's, with the evaluator's decisions where the format leaves
room (see backends/numpy): integer division and remainder by zero give 0, integer FDIV is
C division, an integer power with a negative exponent is 1/a^|b| truncated, float16 sums
accumulate in float32, a sum of only -0.0 is -0.0 (IEEE addition), a max over no elements
is the dtype's lowest value.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ..errors import EvaluationError
from ..core.ops import Ops, accumulation_np
from .inputs import input_array

__all__ = ["reference_evaluate", "reference_evaluate_graph"]


def _c_divide(a, b):
    """a / b truncated toward zero (C); integer division by zero gives 0."""
    if a.dtype.kind == "f":
        return np.true_divide(a, b)
    quotient = np.floor_divide(a, b)          # by zero: 0 (numpy's integer rule)
    inexact = np.remainder(a, b) != 0
    opposite_signs = (a < 0) != (b < 0)
    return np.where(inexact & opposite_signs, quotient + 1, quotient).astype(a.dtype)


def _exp2(x):
    """2^x, exact where x is an integer (a power of two: numpy's float32 exp2 gives 2^127 an
    ulp low on AVX-512 CPUs), np.exp2 elsewhere."""
    x = np.asarray(x)
    whole = np.isfinite(x) & (np.trunc(x) == x)
    if x.dtype.kind != "f" or not whole.any():
        return np.exp2(x)
    powers = np.ldexp(np.ones_like(x), np.where(whole, np.clip(x, -1100, 1100), 0).astype(np.int64))
    return np.where(whole, powers, np.exp2(x))


def _c_power(a, b):
    """a^b; integers as C code computes it: b < 0 gives 1/a^|b| truncated (1, -1 or 0)."""
    if a.dtype.kind == "f":
        return np.power(a, b)
    negative = b < 0 if b.dtype.kind == "i" else np.zeros(b.shape, bool)
    magnitude = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    one_over = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(a.dtype)
    # in a's dtype: int64 beside uint64 promotes to float64, which rounds powers past 2^53
    return np.where(negative, one_over, magnitude)


def _shift(ufunc):
    """a << b or a >> b; bools shift as C's ints do and convert back (nonzero is true)."""
    def shift(a, b):
        if a.dtype == np.bool_:
            return ufunc(a.astype(np.uint8), b.astype(np.uint8)).astype(np.bool_)
        return ufunc(a, b)
    return shift


def _reduce(kind: str, x, axes: tuple):
    if not axes:
        return x.copy()
    if kind == "ADD":
        wide = accumulation_np(x.dtype)  # float16 sums accumulate in float32
        total = np.sum(x, axis=axes, keepdims=True, dtype=wide).astype(x.dtype)
        if x.dtype.kind == "f" and all(x.shape[a] for a in axes):
            # IEEE: a sum of only -0.0 is -0.0 (numpy's contiguous sums start from +0.0)
            only_negative_zeros = np.all(np.signbit(x) & (x == 0), axis=axes, keepdims=True)
            total = np.where(only_negative_zeros, x.dtype.type(-0.0), total)
        return total
    if kind == "MUL":
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)
    lowest = -np.inf if x.dtype.kind == "f" else (np.iinfo(x.dtype).min if x.dtype.kind in "iu" else False)
    return np.max(x, axis=axes, keepdims=True, initial=lowest)


def _pad(x, pairs):
    out = np.zeros(tuple(before + n + after for n, (before, after) in zip(x.shape, pairs)), x.dtype)
    out[tuple(slice(before, before + n) for n, (before, _) in zip(x.shape, pairs))] = x
    return out


# One row per computing op: the numpy that makes the node's value from its sources'
# values, called as rule(node, *values); the maths beside it. Structural ops (inputs,
# tuples, calls) are handled by the walk below.
RULES = {
    Ops.CONST: lambda n: np.array(n.arg, n.dtype.np),                    # the scalar
    Ops.BUFFER: lambda n: np.array(n.buffer_array()),                    # the embedded bytes
    Ops.NEG: lambda n, x: np.negative(x),                                # -x (unsigned wraps)
    Ops.RECIPROCAL: lambda n, x: np.reciprocal(x),                       # 1/x
    Ops.SQRT: lambda n, x: np.sqrt(x),                                   # √x
    Ops.EXP2: lambda n, x: _exp2(x),                                     # 2^x, exact at integers
    Ops.LOG2: lambda n, x: np.log2(x),                                   # log₂ x
    Ops.SIN: lambda n, x: np.sin(x),                                     # sin x
    Ops.TRUNC: lambda n, x: np.trunc(x),                                 # toward 0
    Ops.CAST: lambda n, x: x.astype(n.dtype.np),                         # converted; float -> int truncates
    Ops.BITCAST: lambda n, x: np.ascontiguousarray(x).view(n.dtype.np),  # same bytes
    Ops.ADD: lambda n, a, b: np.add(a, b),                               # a + b (ints wrap)
    Ops.SUB: lambda n, a, b: np.subtract(a, b),                          # a - b
    Ops.MUL: lambda n, a, b: np.multiply(a, b),                          # a * b
    Ops.FDIV: lambda n, a, b: _c_divide(a, b),                           # a / b (integers: C division)
    Ops.MAX: lambda n, a, b: np.maximum(a, b),                           # max(a, b), nan wins
    Ops.POW: lambda n, a, b: _c_power(a, b),                             # a^b
    Ops.CDIV: lambda n, a, b: _c_divide(a, b),                           # trunc(a / b)
    Ops.CMOD: lambda n, a, b: np.fmod(a, b),                             # a - b·trunc(a/b); by zero: 0
    Ops.AND: lambda n, a, b: np.bitwise_and(a, b),                       # a & b
    Ops.OR: lambda n, a, b: np.bitwise_or(a, b),                         # a | b
    Ops.XOR: lambda n, a, b: np.bitwise_xor(a, b),                       # a ^ b
    Ops.SHL: lambda n, a, b: _shift(np.left_shift)(a, b),                # a << b
    Ops.SHR: lambda n, a, b: _shift(np.right_shift)(a, b),               # a >> b (signed: arithmetic)
    Ops.CMPLT: lambda n, a, b: np.less(a, b),                            # a < b
    Ops.CMPNE: lambda n, a, b: np.not_equal(a, b),                       # a != b
    Ops.CMPEQ: lambda n, a, b: np.equal(a, b),                           # a == b
    Ops.WHERE: lambda n, c, a, b: np.where(c, a, b),                     # c ? a : b
    Ops.MULACC: lambda n, a, b, c: np.add(np.multiply(a, b), c),         # a·b + c
    Ops.REDUCE: lambda n, x: _reduce(n.arg[0], x, tuple(n.arg[1])),      # Σ / Π / max, axes kept as 1
    Ops.RESHAPE: lambda n, x: x.reshape(n.arg),                          # same elements, new shape
    Ops.EXPAND: lambda n, x: np.broadcast_to(x, n.arg),                  # size-1 axes repeated
    Ops.PERMUTE: lambda n, x: np.transpose(x, n.arg),                    # axes reordered
    Ops.PAD: lambda n, x: _pad(x, n.arg),                                # zeros around
    Ops.SHRINK: lambda n, x: x[tuple(slice(s, e) for s, e in n.arg)],    # x[s:e, ...]
    Ops.FLIP: lambda n, x: np.flip(x, [i for i, f in enumerate(n.arg) if f]),  # reversed axes
}
_SAME_VALUE = {Ops.CONTIGUOUS: 0, Ops.CONTIGUOUS_BACKWARD: 0, Ops.DETACH: 0, Ops.COPY: 0,
               Ops.STORE: 1, Ops.AFTER: 1}  # the value of source i


_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP})  # numpy's views kept


def reference_evaluate(outputs: Sequence, inputs: Mapping[str, object], slots: Sequence = (), *,
                       known: Mapping | None = None, keep: dict | None = None,
                       observe: Callable | None = None, fuse: bool = True) -> list:
    """The values of `outputs`, given {name: array} for the graph inputs (and, inside a
    call body, the values of its slots). Tuple-valued nodes give tuples.

    known: {node: value} taken as they are (their sources are not visited);
    keep: a dict whose keys are nodes whose values are wanted too: filled in;
    observe(node, value, source_values): called for every node computed in this scope;
    fuse: contract a REDUCE ADD of a MUL without building the product (see the module)."""
    outputs = list(outputs)
    known = known or {}
    order = _postorder(outputs, known)
    reads = _read_counts(order, outputs, keep)
    fused = _fused_products(order, reads) if fuse else frozenset()
    values = {node: known[node] for node in known}
    for node in order:
        if node in fused:
            continue  # computed inside the REDUCE that reads it
        if node.op == Ops.REDUCE and node.src[0] in fused:
            product = node.src[0]
            value = _contraction(node, values[product.src[0]], values[product.src[1]])
            read = (*product.src, product)
        else:
            read = _read(node)
            if node.op == Ops.PARAM:
                value = _input(node, inputs, slots)
            else:
                value = _value(node, values)
            if observe is not None:
                observe(node, value, [values[s] for s in node.src] if node.op not in _CALL_OPS else ())
        values[node] = value
        for s in set(read):
            reads[s] -= 1
            if reads[s] == 0:
                values.pop(s, None)  # its last reader is done
    if keep is not None:
        for node in keep:
            keep[node] = values[node]
    return [_fresh(values[node]) for node in outputs]


def reference_evaluate_graph(graph, inputs: Mapping[str, object]) -> dict:
    """{output name: value} of a Graph."""
    names = list(graph.outputs)
    return dict(zip(names, reference_evaluate([graph.outputs[n] for n in names], inputs)))


_CALL_OPS = (Ops.FUNCTION, Ops.CALL)


def _read(node) -> tuple:
    """The sources whose values computing `node` reads (a call's body is its own scope)."""
    return node.src[1:] if node.op in _CALL_OPS else node.src


def _postorder(roots, known: Mapping) -> list:
    """Nodes under `roots` sources first, by an explicit stack; a call's body is not
    entered (it is evaluated per call, with its slots bound), nor a known node."""
    order, seen, stack = [], set(known), [(root, False) for root in reversed(list(roots))]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(_read(node)) if s not in seen)
    return order


def _read_counts(order: list, outputs: list, keep) -> dict:
    """How many times each value is still to be read: once per distinct reader, plus once
    for being an output or kept (those are never dropped)."""
    reads = dict.fromkeys(order, 0)
    for node in order:
        for s in set(_read(node)):
            reads[s] = reads.get(s, 0) + 1
    for node in (*outputs, *(keep or ())):
        reads[node] = reads.get(node, 0) + 1
    return reads


def _fused_products(order: list, reads: dict) -> frozenset:
    """The MULs read only by a REDUCE ADD: computed as that REDUCE's contraction (not a
    known one: its sources are not evaluated)."""
    walked = set(order)
    return frozenset(node.src[0] for node in order
                     if node.op == Ops.REDUCE and node.arg[0] == "ADD" and node.src[0].op == Ops.MUL
                     and node.src[0] in walked and reads[node.src[0]] == 1 and len(node.src[0].shape) <= len(_LETTERS))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _contraction(node, a, b):
    """REDUCE ADD over `node.arg` axes of a * b, a and b of the product's shape (or scalars),
    without the product: each factor keeps only the axes it is not broadcast along (a
    stride-0 axis of an EXPAND's view holds one value), np.einsum sums over the rest, and an
    axis summed that neither factor has multiplies by its length."""
    shape = node.src[0].shape
    summed = set(node.arg[1])
    compute = np.dtype(accumulation_np(node.dtype.np))  # float16 products and sums in float32

    def spread(x):
        # the axes x is not broadcast along; an empty axis is kept whatever its stride (numpy
        # gives a broadcast one stride 0): element 0 of it does not exist
        return {i for i, n in enumerate(shape) if n != 1 and (n == 0 or x.strides[i] != 0)}

    def factor(x, present):
        part = x[tuple(slice(None) if i in present else 0 for i in range(len(shape)))]
        return part.astype(compute, copy=False), sorted(present)

    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    own_a, own_b = spread(a), spread(b)
    # a factor broadcast along a summed axis the other spreads over keeps that axis (a
    # stride-0 view): einsum would take it out of the sum, s * sum(x) for sum(x * s), inf
    # where the products are finite and their sum is not, and not nan where one is inf * 0
    (fa, pa), (fb, pb) = factor(a, own_a | (own_b & summed)), factor(b, own_b | (own_a & summed))
    kept = [i for i in range(len(shape)) if i not in summed and (i in pa or i in pb)]
    spec = f"{''.join(_LETTERS[i] for i in pa)},{''.join(_LETTERS[i] for i in pb)}->{''.join(_LETTERS[i] for i in kept)}"
    with np.errstate(all="ignore"):
        total = np.einsum(spec, fa, fb, optimize=len(pa) > 0 and len(pb) > 0)
        repeats = 1
        for i in summed:
            if i not in pa and i not in pb:
                repeats *= shape[i]
        if repeats != 1:  # a sum of n equal terms (integers wrap as n additions would)
            total = np.multiply(total, np.array(repeats).astype(compute))
    total = np.reshape(total, [n if i in kept else 1 for i, n in enumerate(shape)])
    return np.broadcast_to(total.astype(node.dtype.np), node.shape)


def _fresh(value):
    """An output as its own C-ordered array (a view of an input or of another node's
    value would let the caller change one through the other)."""
    if isinstance(value, np.ndarray):
        return np.array(value, order="C")
    return value


def _value(node, values: dict):
    op = node.op
    if op in _SAME_VALUE:
        return values[node.src[_SAME_VALUE[op]]]
    if op == Ops.NOOP:
        return None
    if op == Ops.TUPLE:
        return tuple(values[s] for s in node.src)
    if op in _CALL_OPS:
        body = node.src[0]
        return tuple(reference_evaluate(list(body.src), {}, [values[s] for s in node.src[1:]]))
    if op == Ops.GETTUPLE:
        return values[node.src[0]][node.arg]
    with np.errstate(all="ignore"):
        result = RULES[op](node, *(values[s] for s in node.src))
    if op in _VIEW_OPS:
        return result  # a view, read only by later nodes: nothing is written in place
    return np.asarray(result, dtype=node.dtype.np)


def _input(node, inputs: Mapping, slots: Sequence):
    if isinstance(node.arg, int):
        return slots[node.arg]
    if node.arg not in inputs:
        raise EvaluationError(f"reference evaluator: no value for input {node.arg!r}")
    value = inputs[node.arg]  # lists and numbers taken as numpy takes them (the checks' own feeds)
    return input_array(f"reference evaluator: input {node.arg!r}", node,
                       value if isinstance(value, np.ndarray) else np.asarray(value))
