"""Contractions: a REDUCE ADD over the MUL of two broadcast tensors, exported as one Einsum.

tinygrad spells a matmul (and every matmul of a gradient) as EXPAND both factors to the
full (batch, n, k) product, MUL, REDUCE ADD over k. Exported node by node, onnxruntime
would build that product: n times larger than either factor (1 GiB for a 256x1024 by
1024x1024 product). Einsum-12 computes the same sums from the un-broadcast factors
(onnxruntime runs it as a matmul), as uopcli's evaluator does (its _Contraction).

A convolution as tinygrad spells it (and each of its gradients) puts movement ops
between the EXPANDs and the sum: a factor is a PERMUTE of an EXPAND (the im2col windows,
broadcast over the output channels, moved beside the weight's axes), and the gradient's
product is PERMUTEd before its REDUCE. A chain of PERMUTEs and EXPANDs over a factor, and
one PERMUTE between the MUL and the REDUCE, only relabel the product's axes: they become
the Einsum's letters (the factor's term follows its base's axis order), so no product is
built either (it was 0.9 GB per 3x3 convolution of DenseNet-121's gradient, which
onnxruntime ran out of memory building).

Values: the same sums of the same products, added in another order, as any two
float32 sums are (the evaluator's contractions run in BLAS too). float16 factors
multiply and add in float32 (also where the builder casts their product to float32 to
sum it), which is what the evaluator does for a float16 contraction. Integer sums stay
exact trees (export_table._integer_tree).
"""

from __future__ import annotations

from typing import NamedTuple

from uopcli.core.ops import Ops, dtypes

from .emit import Emitter

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Factor(NamedTuple):
    base: object               # the UOp whose value is the factor before its PERMUTEs and EXPANDs
    axes: tuple[int, ...]      # per axis of the base not broadcast, in the base's order: the product's axis it is


class Contraction(NamedTuple):
    factors: tuple[Factor, Factor]
    kept: tuple[int, ...]      # the product's axes the REDUCE keeps
    dtype: object              # the factors' dtype


def contraction(node) -> Contraction | None:
    """The Einsum plan of a REDUCE node, or None where it is not REDUCE ADD over a float
    MUL (or a PERMUTE of one) of two factors, each a chain of PERMUTEs and EXPANDs (or
    none), whose kept axes all appear in some factor and whose reduced axes all appear
    in some factor (else the export is node by node). An axis of size 1 is in every
    factor; any other axis missing from both would be a broadcast of the product itself."""
    if node.op != Ops.REDUCE or node.arg[0] != "ADD" or not node.dtype.is_float:
        return None
    product = node.src[0]
    if product.op == Ops.CAST and product.dtype is dtypes.float32 and product.src[0].dtype is dtypes.float16:
        product = product.src[0]  # a float16 matmul summed in float32, as uopcli's builder spells it
    full = product.shape
    where = list(range(len(full)))  # per axis of the MUL, the product's axis it is
    if product.op == Ops.PERMUTE and product.src[0].op == Ops.MUL:
        where = _permuted(where, product.arg)
        product = product.src[0]
    if product.op != Ops.MUL or len(full) > len(_LETTERS) or any(s.shape != product.shape for s in product.src):
        return None
    factors = tuple(_factor(source, where) for source in product.src)
    present = set(factors[0].axes) | set(factors[1].axes)
    if len(present) != len(full):
        return None
    return Contraction(factors, tuple(i for i in range(len(full)) if i not in node.arg[1]), product.dtype)


def _permuted(where: list, order) -> list:
    """`where` (per axis of a PERMUTE's result, the product's axis) per axis of its source."""
    before = [None] * len(order)
    for axis, source_axis in enumerate(order):
        before[source_axis] = where[axis]
    return before


def _factor(source, where: list) -> Factor:
    """Down the PERMUTEs and EXPANDs over `source` (`where`: per axis of `source`, the
    product's axis): the base they move and broadcast, and its axes' places in the product
    (an axis an EXPAND grows is the base's broadcast, not the factor's)."""
    while source.op in (Ops.PERMUTE, Ops.EXPAND):
        if source.op == Ops.PERMUTE:
            where = _permuted(where, source.arg)
        else:
            where = [w if before == after else None for w, before, after in zip(where, source.src[0].shape, source.shape)]
        source = source.src[0]
    return Factor(source, tuple(w for w in where if w is not None))


def emit_contraction(e: Emitter, node, plan: Contraction, bases: list[str]) -> str:
    """Einsum-12 over the factors (each reshaped to its own axes), reshaped to the REDUCE's
    shape (reduced axes kept as size 1)."""
    dtype = node.dtype
    compute = dtypes.float32 if dtype is dtypes.float16 else dtype
    full = node.src[0].shape
    source = plan.dtype
    operands, terms = [], []
    for factor, name in zip(plan.factors, bases):
        own = [full[i] for i in factor.axes]
        if list(factor.base.shape) != own:  # the broadcast axes (size 1 in the base) dropped
            name = e.op("Reshape", [name, e.ints(own)])
        operands.append(e.cast(name, source, compute))
        terms.append("".join(_LETTERS[i] for i in factor.axes))
    equation = f"{terms[0]},{terms[1]}->{''.join(_LETTERS[i] for i in plan.kept)}"
    summed = e.op("Einsum", operands, equation=equation)
    return e.cast(e.op("Reshape", [summed, e.ints(node.shape)]), compute, dtype)
