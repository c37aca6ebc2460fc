"""tinygrad's reducing Tensor functions: any/all, log-sum-exp, argmax, cumulative sums,
products and maxima, sorting and top-k, and einsum (a product summed over letters)."""

from __future__ import annotations

import math
import string

from ..errors import GraphError
from ..core.ops import dtypes
from .common import resolve_dim, axis_index, highest, lowest

CUMSUM_BLOCK = 256  # tinygrad's split of long cumulative sums


class ReduceMixin:
    """Reductions, running reductions, sorting and einsum; every method returns a new UOp."""

    __slots__ = ()

    def any(self, axis=None, keepdim: bool = False):
        return self.cast(dtypes.bool).max(axis, keepdim)  # max of bools: of their 0/1 bytes

    def all(self, axis=None, keepdim: bool = False):
        # REDUCE takes no bools: the product of the 0/1 bytes
        return self.cast(dtypes.bool).cast(dtypes.uint8).prod(axis, keepdim).cast(dtypes.bool)

    def var_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple:
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple:
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def logsumexp(self, axis=None, keepdim: bool = False):
        """log Σ eˣ, less the (detached) max before exp and plus it after, as softmax does."""
        top = self.max(axis, keepdim=True).detach()
        total = (self - top).exp().sum(axis, keepdim).log()
        return total + top.reshape(total.shape)

    def argmax(self, axis=None, keepdim: bool = False):
        """The first index of the largest value along `axis` (int32; None: of the flat tensor).
        Each position where the max is reached scores n - index; the best score is the first.
        A NaN is the largest, as numpy's and torch's argmax take it (the max is NaN: tinygrad's
        x == max holds nowhere, and the index was n, outside the axis)."""
        if axis is None:
            return self.flatten().argmax(0)
        axis = axis_index(axis, len(self.shape))
        size = self.shape[axis]
        at_max = _same_value(self, self.max(axis, keepdim=True))
        scores = self.arange(size, 0, -1).reshape((size,) + (1,) * (len(self.shape) - axis - 1))
        return (size - at_max.where(scores, 0).max(axis, keepdim)).cast(dtypes.int32)

    def argmin(self, axis=None, keepdim: bool = False):
        return self._order_flipped().argmax(axis, keepdim)

    def cumsum(self, axis: int = 0):
        """Running sums along `axis`: out[i] = Σ_{j ≤ i} x[j]. Up to 2·CUMSUM_BLOCK long, one
        masked sum over an (n, n) expansion (tinygrad's pool of the padded axis is n × n as
        well); longer, in two stages as tinygrad: running sums within blocks of CUMSUM_BLOCK,
        plus the running total of the blocks before (n·CUMSUM_BLOCK elements, not n²)."""
        axis = resolve_dim(axis, len(self.shape))  # a scalar's axis 0 (or -1) is itself
        if not self.shape or 0 in self.shape:
            return self.cast(self.sum().dtype)  # nothing to add up
        last = self.transpose(axis, -1)
        size = last.shape[-1]
        if size <= 2 * CUMSUM_BLOCK:
            return _running(last, "ADD").transpose(axis, -1)
        blocks = -(-size // CUMSUM_BLOCK)
        padded = last.pad((None,) * (len(last.shape) - 1) + ((0, blocks * CUMSUM_BLOCK - size),))
        within = _running(padded.unflatten(-1, (blocks, CUMSUM_BLOCK)), "ADD")  # (..., blocks, block)
        before = _running(within[..., -1], "ADD") - within[..., -1]  # the totals of earlier blocks
        sums = (within + before.unsqueeze(-1)).flatten(-2)
        return sums.shrink((None,) * (len(sums.shape) - 1) + ((0, size),)).transpose(axis, -1)

    def cumprod(self, axis: int):
        """Running products along `axis`: out[i] = Π_{j ≤ i} x[j] (staged as cumsum is)."""
        return self._cumulative(axis, "MUL")

    def cummax(self, axis: int = 0):
        """(running maxima along `axis`, the index of the first element equal to each), as
        tinygrad's: indices are int32."""
        values = self._cumulative(axis, "MAX")
        return values, self._first_index_of(values, axis)

    def cummin(self, axis: int = 0):
        """(running minima along `axis`, the index of the first element equal to each)."""
        flipped = self._order_flipped()
        values = flipped._cumulative(axis, "MAX")
        return values._order_flipped(), flipped._first_index_of(values, axis)

    def logcumsumexp(self, axis: int = 0):
        """log Σ_{j ≤ i} e^x[j], each place shifted by the running maximum m_i, as tinygrad's:
        m_i + log Σ_{j ≤ i} e^(x[j] - m_i) over an (n, n) mask, so that neither an overflow
        nor a whole axis's maximum (which makes the early terms underflow to 0) gets in."""
        axis = resolve_dim(axis, len(self.shape))  # a scalar's axis 0 (or -1) is itself
        if not self.shape or 0 in self.shape:
            return self
        x = self.transpose(axis, -1)
        size = x.shape[-1]
        top = x._cumulative(-1, "MAX").detach()
        earlier = type(self).full((size, size), True).tril()  # [i, j]: j <= i
        shifted = earlier.where(x.unsqueeze(-2) - top.unsqueeze(-1), lowest(self.dtype))
        return (shifted.exp().sum(-1).log() + top).transpose(-1, axis)

    def sort(self, dim: int = -1, descending: bool = False):
        """(values, indices) along `dim`, by tinygrad's bitonic network: the axis is padded to
        2^s (with the dtype's largest value, or lowest when descending) and split into s axes
        of 2, one per bit of the position; stage t sorts blocks of 2^t by comparing the
        positions that differ in one bit, from bit t - 1 down (every other block reversed
        while it does, so each is sorted the other way and the next stage merges them).
        Equal values keep their order: index r is the original position of the same value's
        same occurrence (an O(n²) comparison, as tinygrad's). A NaN is the largest value, as
        torch sorts it (last ascending, first descending; tinygrad's network let a NaN
        spread through every maximum and minimum it met): the compare-exchange and the
        ascending padding say so for floats, the same values and gradient elsewhere."""
        dim = axis_index(dim, len(self.shape))
        size = self.shape[dim]
        if size <= 1:
            return self, type(self).full(self.shape, 0, dtypes.int32)
        stages = (size - 1).bit_length()
        lead = (None,) * dim
        fill = lowest(self.dtype) if descending else math.nan if self.dtype.is_float else highest(self.dtype)
        x = self.pad(lead + ((0, 2 ** stages - size),) + (None,) * (len(self.shape) - dim - 1), value=fill)
        x = x.unflatten(dim, (2,) * stages)  # axis dim + k holds bit stages - 1 - k of the position

        def bit_axis(bit: int) -> int:
            return dim + stages - 1 - bit

        for stage in range(1, stages + 1):
            within = tuple(bit_axis(b) for b in range(stage))  # the position inside a block of 2^stage
            if stage < stages:  # blocks with bit `stage` set run backwards during this stage
                x = _odd_blocks_flipped(x, bit_axis(stage), within)
            for bit in reversed(range(stage)):
                top, bottom = x.split(1, bit_axis(bit))
                smaller, larger = _ordered_pair(top, bottom)
                x = larger.cat(smaller, dim=bit_axis(bit)) if descending else smaller.cat(larger, dim=bit_axis(bit))
            if stage < stages:
                x = _odd_blocks_flipped(x, bit_axis(stage), within)
        values = x.flatten(dim, dim + stages - 1).shrink_to(self.shape)
        return values, self._sorted_positions(values, dim)

    def _sorted_positions(self, values, dim: int):
        """For each sorted place r: the position i of the element with the same value and the
        same occurrence number among equal values (so ties keep their order)."""
        size = self.shape[dim]
        trailing = (1,) * (len(self.shape) - dim - 1)
        earlier = type(self).full((size, size), True).tril().reshape(size, size, *trailing)  # [i, j]: j <= i

        def occurrence(t):  # how many of t[0..i] equal t[i]
            return (earlier & _same_value(t.unsqueeze(dim + 1), t.unsqueeze(dim))).sum(dim + 1)

        same = _same_value(self.unsqueeze(dim + 1), values.unsqueeze(dim)) \
            & occurrence(self).unsqueeze(dim + 1).eq(occurrence(values).unsqueeze(dim))  # [i, r]
        positions = self.arange(size).reshape(size, 1, *trailing)
        return same.where(positions, 0).sum(dim).cast(dtypes.int32)

    def argsort(self, dim: int = -1, descending: bool = False):
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
        """(values, indices) of the k largest (or smallest) along `dim`, in order."""
        dim = axis_index(dim, len(self.shape))
        if not sorted_:
            raise GraphError("topk: only sorted_=True, as tinygrad's")
        if not isinstance(k, int) or not 0 <= k <= self.shape[dim]:
            raise GraphError(f"topk: k must be in [0, {self.shape[dim]}], got {k!r}")
        values, indices = self.sort(dim, descending=largest)
        keep = tuple(k if axis == dim else None for axis in range(len(self.shape)))
        return values.shrink_to(keep), indices.shrink_to(keep)

    def _cumulative(self, axis: int, op: str):
        """Running `op` (MUL or MAX) along `axis`; long axes in two stages, as cumsum: within
        blocks of CUMSUM_BLOCK, then combined with the running result of the blocks before."""
        axis = resolve_dim(axis, len(self.shape))  # a scalar's axis 0 (or -1) is itself
        if not self.shape or 0 in self.shape:
            return self
        last = self.transpose(axis, -1)
        size = last.shape[-1]
        if size <= 2 * CUMSUM_BLOCK:
            return _running(last, op).transpose(axis, -1)
        identity = 1 if op == "MUL" else lowest(self.dtype)
        blocks = -(-size // CUMSUM_BLOCK)
        lead = (None,) * (len(last.shape) - 1)
        padded = last.pad(lead + ((0, blocks * CUMSUM_BLOCK - size),), value=identity)
        within = _running(padded.unflatten(-1, (blocks, CUMSUM_BLOCK)), op)       # (..., blocks, block)
        totals = _running(within[..., -1], op)                                    # running over block totals
        before = totals.pad(lead + ((1, -1),), value=identity).unsqueeze(-1)       # of the blocks before
        combined = within * before if op == "MUL" else within.maximum(before)
        return combined.flatten(-2).shrink(lead + ((0, size),)).transpose(axis, -1)

    def _first_index_of(self, values, axis: int):
        """For each i along `axis`, the smallest j ≤ i with x[j] == values[i] (int32), a NaN
        equal to a NaN (a running maximum is NaN from a NaN on: its first one)."""
        axis = resolve_dim(axis, len(self.shape))
        if not self.shape:
            return type(self).full((), 0, dtypes.int32)
        size = self.shape[axis]
        x, best = self.transpose(axis, -1), values.transpose(axis, -1)
        match = _same_value(x.unsqueeze(-1), best.unsqueeze(-2)) & type(self).full((size, size), True).triu()  # [..., j, i]
        positions = self.arange(size).reshape(size, 1)
        return match.where(positions, size).min(-2).cast(dtypes.int32).transpose(-1, axis)

    @staticmethod
    def einsum(formula: str, *operands):
        """Einstein summation ("ij,jk->ik", implicit output, `...`, a repeated letter in one
        operand for its diagonal): each operand permuted to the sorted letters and reshaped
        with 1 for the letters it lacks, all multiplied, summed over the letters not in the
        output, permuted to the output's order (the evaluator runs it as one contraction)."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        inputs, output = _einsum_letters(formula.replace(" ", ""), operands)
        operands, inputs = zip(*(_diagonals(x, letters) for x, letters in zip(operands, inputs)))
        sizes: dict[str, int] = {}
        for x, letters in zip(operands, inputs):
            for letter, size in zip(letters, x.shape):
                known = sizes.get(letter, size)
                if size != known and 1 not in (size, known):  # size 1 broadcasts, as in numpy
                    raise GraphError(f"einsum {formula!r}: letter {letter!r} is {known} and {size}")
                sizes[letter] = max(known, size)
        alphabet = sorted(sizes)
        product = None
        for x, letters in zip(operands, inputs):
            aligned = x.permute([letters.index(c) for c in sorted(letters)]) if letters else x
            # the operand's own sizes (a 1 where another's is n broadcasts in the product)
            own = dict(zip(letters, x.shape))
            aligned = aligned.reshape(tuple(own.get(c, 1) for c in alphabet))
            product = aligned if product is None else product * aligned
        summed_axes = tuple(i for i, c in enumerate(alphabet) if c not in output)
        kept = [c for c in alphabet if c in output]
        out = product.sum(summed_axes) if summed_axes else product.reshape(tuple(sizes[c] for c in kept))
        return out.permute([kept.index(c) for c in output]) if len(output) > 1 else out


def _same_value(a, b):
    """a == b, elementwise, where a NaN is the same value as a NaN (a float's only value
    unequal to itself): the places an index search finds, with NaN as the largest value."""
    equal = a.eq(b)
    return equal | (a.ne(a) & b.ne(b)) if a.dtype.is_float else equal


def _ordered_pair(a, b):
    """(min, max) of a and b, elementwise; of floats with a NaN as the largest value: a NaN
    beside a number is the max and the number the min (minimum and maximum would give NaN
    twice). Where neither is NaN, minimum and maximum themselves: their values, and their
    even split of the gradient at ties."""
    smaller, larger = a.minimum(b), a.maximum(b)
    if not a.dtype.is_float:
        return smaller, larger
    a_nan, b_nan = a.ne(a), b.ne(b)
    return a_nan.where(b, b_nan.where(a, smaller)), a_nan.where(a, b_nan.where(b, larger))


def _running(x, op: str):
    """Running `op` (ADD, MUL or MAX) along the last axis as one masked reduce over
    (..., n, n): x expanded, kept where column j ≤ row i, else the op's identity."""
    size = x.shape[-1]
    lower = x.arange(size).reshape(1, size) <= x.arange(size).reshape(size, 1)
    rows = x.unsqueeze(-2).expand(*x.shape[:-1], size, size)
    if op == "ADD":
        return lower.where(rows, 0).sum(-1)
    if op == "MUL":
        return lower.where(rows, 1).prod(-1)
    return lower.where(rows, lowest(x.dtype)).max(-1)


def _odd_blocks_flipped(x, halves: int, within: tuple):
    """x with the blocks whose `halves` bit is set reversed along the `within` axes."""
    first, second = x.split(1, halves)
    return first.cat(second.flip(within), dim=halves)


def _einsum_letters(formula: str, operands) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with `...` spelled out as spare letters
    (right-aligned, as numpy broadcasts) and an implicit output made explicit (the letters
    used once, sorted, after the ellipsis's)."""
    lhs, arrow, output = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise GraphError(f"einsum {formula!r}: {len(inputs)} operands in the formula, {len(operands)} given")
    ellipsis = ""
    if "..." in formula:
        spare = [c for c in string.ascii_letters if c not in formula]
        widths = [len(x.shape) - (len(s) - 3) if "..." in s else 0 for s, x in zip(inputs, operands)]
        ellipsis = "".join(spare[:max(widths)])
        inputs = [s.replace("...", ellipsis[len(ellipsis) - w:]) for s, w in zip(inputs, widths)]
        output = output.replace("...", ellipsis)
    if not arrow:
        used = "".join(inputs)
        output = ellipsis + "".join(sorted(c for c in set(used) if used.count(c) == 1 and c not in ellipsis))
    for letters, x in zip(inputs, operands):
        if len(letters) != len(x.shape) or not all(c.isalpha() for c in letters):
            raise GraphError(f"einsum {formula!r}: {letters!r} does not name the {len(x.shape)} axes of "
                             f"{list(x.shape)}")
    if len(set(output)) != len(output) or any(c not in "".join(inputs) for c in output):
        raise GraphError(f"einsum {formula!r}: output {output!r} repeats a letter or names one no operand has")
    return inputs, output


def _diagonals(x, letters: str) -> tuple:
    """x and its letters with each letter repeated in one operand reduced to its diagonal
    (the letter once, last): the two axes moved last and flattened (n·n), padded by n and
    folded to (n, n + 1), where column 0 is the diagonal."""
    while len(set(letters)) != len(letters):
        letter = next(c for c in letters if letters.count(c) > 1)
        first = letters.index(letter)
        second = letters.index(letter, first + 1)
        n = x.shape[first]
        rest = [d for d in range(len(x.shape)) if d not in (first, second)]
        flat = x.permute(rest + [first, second]).flatten(len(rest))
        folded = flat.pad((None,) * len(rest) + ((0, n),)).reshape(flat.shape[:-1] + (n, n + 1))
        x = folded.shrink((None,) * (len(rest) + 1) + ((0, 1),)).reshape(flat.shape[:-1] + (n,))
        letters = "".join(letters[d] for d in rest) + letter
    return x, letters
