"""Pass 1: REDUCE ADD over (sums of) products becomes one Contraction step; the products
(MUL/ADD nodes read only by that REDUCE) get no step at all.

Needs: the compiler's steps as emitted, each running its op's own IMPL row (a step is
recognised as fusable by `impl is IMPL[op]`), with its original sources. It must run
first: the strided pass turns the factors' movement chains into views afterwards."""

from __future__ import annotations

from ....core.ops import Ops, accumulation_dtype
from ..contraction import LETTERS, Contraction
from ..program import NEW, Program, read_counts
from ..table import IMPL


def fuse_contractions(program: Program) -> None:
    """Turn REDUCE ADD over (sums of) products into contraction steps; the products
    (MUL/ADD nodes read only by that REDUCE) get no step at all."""
    steps = program.steps
    candidates = [step for step in steps if step.node.op == Ops.REDUCE and step.node.arg[0] == "ADD"
                  and 0 not in step.node.src[0].shape and len(step.node.src[0].shape) <= len(LETTERS)]
    if not candidates:
        return
    reads = read_counts(program)
    producer = {step.out: step for step in steps}
    fused: set[int] = set()  # ids of the steps folded into a contraction
    for step in candidates:
        root, order = step.sources[0], None
        permute = producer.get(root)
        if permute is not None and permute.node.op == Ops.PERMUTE and reads[root] == 1:
            # REDUCE ADD over a PERMUTE of products (conv2d's input gradient): contract the
            # products' factors transposed as the PERMUTE orders them, without the product
            root, order = permute.sources[0], permute.node.arg
        terms, masked, select = _sum_of_products(root, producer, reads), None, None
        if terms is None:
            wheres = _zero_wheres(root, producer, reads) if order is None else None
            if wheres is None:
                continue
            absorbed, wheres = wheres
            terms = [(absorbed if i == 0 else [], list(where.sources[:2])) for i, where in enumerate(wheres)]
            masked = tuple(where.node for where in wheres)
            compare = _one_hot_compare(wheres, step.node, producer)
            if compare is not None:  # the CMPEQ's sources instead of the mask (the CMPEQ goes if unread)
                terms, select = [(absorbed, [*compare.sources, wheres[0].sources[1]])], compare.node
        if order is not None:
            fused.add(id(permute))
        sources, positions = [], []
        for absorbed, factors in terms:
            positions.append(tuple(range(len(sources), len(sources) + len(factors))))
            sources.extend(factors)
            fused.update(absorbed)
        step.impl, step.sources, step.memory = Contraction(tuple(positions), order, masked, select), tuple(sources), NEW
        program.contractions += 1
    if fused:
        program.steps = [step for step in steps if id(step) not in fused]
        reads = read_counts(program)  # a one-hot mask whose WHEREs all became selections
        program.steps = [step for step in program.steps if step.node.op != Ops.CMPEQ or reads[step.out]]


def _zero_wheres(root: int, producer: dict, reads: list):
    """(ids of the steps absorbed, the WHERE steps) for register `root` holding
    WHERE(mask, a, 0) or the sum of two (gather's selection; the gradient of lerp's two
    gathers), each value read only there; else None. A number (not bool) result, the
    else-branch a CONST zero: +0, or -0.0 (an exact selection, as ONNX's gathers copy -0.0;
    the Contraction reads the sign from the WHERE)."""
    step = producer.get(root)
    if step is None or reads[root] != 1:
        return None
    if step.node.op == Ops.ADD:
        wheres = [_zero_where(reg, producer, reads) for reg in step.sources]
        return None if None in wheres else ([id(step)] + [id(w) for w in wheres], wheres)
    where = _zero_where(root, producer, reads)
    return None if where is None else ([id(where)], [where])


def _one_hot_compare(wheres: list, reduce_node, producer: dict):
    """The CMPEQ step of integers making the one WHERE's mask, when the REDUCE sums one
    axis: maybe gather's index == arange (_select_sum checks the values)."""
    if len(wheres) != 1 or len(reduce_node.arg[1]) != 1:
        return None
    step = producer.get(wheres[0].sources[0])
    if step is None or step.node.op != Ops.CMPEQ or step.impl is not IMPL[Ops.CMPEQ] \
            or not step.node.src[0].dtype.is_int or any(s.shape != step.node.shape for s in step.node.src):
        return None
    return step


def _zero_where(reg: int, producer: dict, reads: list):
    step = producer.get(reg)
    if step is None or reads[reg] != 1 or step.node.op != Ops.WHERE or step.impl is not IMPL[Ops.WHERE]:
        return None
    node = step.node
    mask, values, zero = node.src
    if node.dtype.is_bool or zero.op != Ops.CONST or zero.arg != 0 \
            or mask.shape != node.shape or values.shape != node.shape:
        return None
    return step


def _sum_of_products(root: int, producer: dict, reads: list):
    """The value in register `root` seen as a sum of products: a list of terms, each
    (ids of the ADD/MUL steps it absorbs, factor registers); None when no term is a
    product. Only ADD/MUL steps whose value nothing else reads are absorbed."""

    def absorbable(reg: int, op: str):
        step = producer.get(reg)
        return step if step is not None and reads[reg] == 1 and step.node.op == op else None

    absorbed_adds, terms = [], []
    pending = [root]
    while pending:
        reg = pending.pop()
        add = absorbable(reg, Ops.ADD)
        if add is not None:  # a + b: two more terms
            absorbed_adds.append(id(add))
            pending.extend(reversed(add.sources))
            continue
        absorbed = []
        widen = absorbable(reg, Ops.CAST)
        if widen is not None and _widens_to_accumulate(widen.node) and absorbable(widen.sources[0], Ops.MUL) is not None:
            # float16 gradients sum float16 products in float32 (CAST, REDUCE, CAST back): the
            # contraction multiplies in float32 too, so products skip one float16 rounding
            absorbed.append(id(widen))
            reg = widen.sources[0]
        factors, muls = [], [reg]
        while muls:
            r = muls.pop()
            mul = absorbable(r, Ops.MUL)
            if mul is None:
                factors.append(r)
            else:
                absorbed.append(id(mul))
                muls.extend(reversed(mul.sources))
        terms.append((absorbed, factors))
    if not any(len(factors) > 1 for _, factors in terms):
        return None
    terms[0] = (terms[0][0] + absorbed_adds, terms[0][1])
    return terms


def _widens_to_accumulate(cast) -> bool:
    """Whether a CAST widens its source to the dtype that source's sums accumulate in
    (float16 to float32): the first step of a float16 sum as the graph spells it."""
    narrow = cast.src[0].dtype
    return cast.dtype is not narrow and cast.dtype is accumulation_dtype(narrow)
