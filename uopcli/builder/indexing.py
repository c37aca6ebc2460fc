"""numpy-style indexing (`x[1:, ::2, None, ...]`, the `_view` that UOp.__getitem__ calls;
by tensors and lists in tensor_index.py),
gather, scatter and scatter_reduce, as one-hot masks multiplied in and summed."""

from __future__ import annotations

from ..errors import GraphError
from ..core.ops import dtypes
from .common import axis_index, highest, lowest
from .tensor_index import is_tensor_index, one_hot_along_dim, split_index, tensor_getitem

# scatter_reduce's reduces and the value each starts from (where nothing is written)
_SCATTER_IDENTITY = {"sum": lambda dtype: 0, "prod": lambda dtype: 1, "mean": lambda dtype: 0,
                     "amax": lambda dtype: lowest(dtype), "amin": lambda dtype: highest(dtype)}


class IndexingMixin:
    """Indexing, gathering and scattering; every method returns a new UOp."""

    __slots__ = ()

    def _view(self, index):
        """numpy basic indexing: ints, slices (any step), None (a new axis) and one `...`.
        Ints SHRINK to one element and drop the axis; a step > 1 pads the kept run to a
        multiple of the step, folds it into (count, step) and keeps column 0; a negative
        step FLIPs the axis first."""
        if self.shape is None:
            raise GraphError(f"{self.op} has no shape to index (of a FUNCTION or CALL, [i] is output i)")
        index = tuple(map(plain_index, index)) if isinstance(index, tuple) else plain_index(index)
        parts = split_index(index)
        if any(is_tensor_index(part) for part in parts):
            return tensor_getitem(self, parts)
        items = _expand_ellipsis(index if isinstance(index, tuple) else (index,), len(self.shape))
        node, axis, out_shape = self, 0, []
        for item in items:
            if item is None:
                out_shape.append(1)
                continue
            size = node.shape[axis]
            if isinstance(item, slice):
                if item.step == 0:
                    raise GraphError(f"index on axis {axis}: a slice step cannot be 0")
                start, stop, step = item.indices(size)
                count = len(range(start, stop, step))
                node = _strided(node, axis, start, step, count)
                out_shape.append(count)
            else:
                position = _int_index(item, size, axis)
                node = node.shrink(tuple((position, position + 1) if i == axis else None
                                         for i in range(len(node.shape))))
            axis += 1
        return node.reshape(tuple(out_shape))

    def _one_hot_along_dim(self, num_classes: int, dim: int = -1):
        return one_hot_along_dim(self, num_classes, dim)

    def masked_select(self, mask, size: int | None = None, fill_value=0):
        """The elements where the bool `mask` (broadcast to the tensor) is true, flat, in
        order: `size` of them, the rest `fill_value` (tinygrad's jittable form: the n-th
        true place found by a running count of the mask, then taken by index). Without
        `size` the length would be the count of true places, a value, and a saved graph's
        shapes are fixed: refused, with what to use instead."""
        if not mask.dtype.is_bool:
            raise GraphError(f"masked_select: the mask must be bool, got {mask.dtype.name}{list(mask.shape)}")
        if size is None:
            raise GraphError(f"masked_select of {self.dtype.name}{list(self.shape)}: the result's length is the "
                             f"number of true places, known only from the values, and a saved graph's shapes are "
                             f"fixed; pass size=N (N elements, padded with fill_value), or keep the shape with "
                             f"mask.where(x, fill)")
        x, flat_mask = self.flatten(), mask.broadcast_to(self.shape).flatten()
        running = flat_mask.cumsum()
        counts = type(self).full((size,), 0, dtypes.int32).scatter(0, running, 1, reduce="add")
        picked = x[counts.cumsum()]
        return (type(self).arange(size) < flat_mask.sum()).where(picked, fill_value).cast(self.dtype)

    def nonzero(self, size: int | None = None, fill_value=0):
        """The (row per element) indices of the nonzero elements, int32 of shape (size, rank),
        rows past the count fill_value. Without `size` the row count is a value: refused."""
        if size is None:
            raise GraphError(f"nonzero of {self.dtype.name}{list(self.shape)}: the number of rows is the number "
                             f"of nonzero elements, known only from the values, and a saved graph's shapes are "
                             f"fixed; pass size=N (N rows, padded with fill_value), or use x.ne(0) as a mask")
        rank = len(self.shape)
        if rank == 0:
            return type(self).full((size, 0), 0, dtypes.int32)
        mask = self.ne(0).flatten()
        positions = [type(self).arange(s).reshape(*(1,) * a, s, *(1,) * (rank - a - 1)).expand(self.shape).flatten()
                     for a, s in enumerate(self.shape)]
        table = type(self).stack(positions, dim=-1)
        return table.masked_select(mask.unsqueeze(-1).expand(mask.shape[0], rank), size=size * rank,
                                   fill_value=fill_value).reshape(-1, rank)

    def gather(self, dim: int, index):
        """out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim` (index: same rank),
        as a one-hot mask of the index against the axis, multiplied in and summed."""
        return self._gather(dim, index, 0)

    def _gather(self, dim: int, index, fill: float):
        """gather with `fill` where the mask is false: tinygrad's 0, whose sum makes a picked
        -0.0 +0.0; or -0.0, whose sum is the picked value exactly (x + -0.0 is x for every x),
        as ONNX's gathers copy it (the numpy evaluator runs both as a selection)."""
        if not index.dtype.is_int:
            raise GraphError(f"gather: the index must be integers, got {index.dtype.name}")
        if len(index.shape) != len(self.shape):
            raise GraphError(f"gather: index rank {len(index.shape)} differs from the tensor's {len(self.shape)}")
        dim = axis_index(dim, len(self.shape))
        if any(i > s for d, (s, i) in enumerate(zip(self.shape, index.shape)) if d != dim):
            raise GraphError(f"gather: index shape {list(index.shape)} is larger than {list(self.shape)} "
                             f"off axis {dim}")
        kept = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        kept = kept.unsqueeze(-1).transpose(-1, dim)  # the gathered axis last, beside the index's
        return index._one_hot_mask(self.shape[dim], len(index.shape)).where(kept, fill).sum(-1, dtype=self.dtype)  # no widening: a uint8 stays uint8, as tinygrad

    def scatter(self, dim: int, index, src, reduce: str | None = None):
        """A copy with src[..., i, ...] written at index[..., i, ...] along `dim` (index of the
        same rank; where an index repeats, the last write wins), as tinygrad's. A number as
        src is written at every index; with it, reduce "add" or "multiply" combines with
        what is there (scatter_reduce does that for a tensor src)."""
        if reduce not in (None, "add", "multiply"):
            raise GraphError(f"scatter: reduce is None, 'add' or 'multiply', got {reduce!r}")
        if not hasattr(src, "shape"):
            src = type(self).full(index.shape, src, self.dtype)
        elif reduce is not None:
            raise GraphError("scatter: reduce takes a number as src; for a tensor src use scatter_reduce")
        if reduce is not None:
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        values, mask = self._scatter_operands("scatter", dim, index, src)
        if not mask.shape[-1]:
            return self  # an empty index writes nothing
        written, value = mask[..., 0], values[..., 0]
        for k in range(1, mask.shape[-1]):  # later writes over earlier ones
            written, value = written | mask[..., k], mask[..., k].where(values[..., k], value)
        return written.where(value, self)

    def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
        """Each element of src combined, by `reduce` ("sum", "prod", "mean", "amax" or
        "amin"), into the place index names along `dim`, with this tensor's own value
        there too unless include_self is False (a place nothing is written to keeps it)."""
        if reduce not in _SCATTER_IDENTITY:
            raise GraphError(f"scatter_reduce: reduce is one of {', '.join(_SCATTER_IDENTITY)}, got {reduce!r}")
        values, mask = self._scatter_operands("scatter_reduce", dim, index, src)
        untouched = mask.any(-1).logical_not()

        def own(identity):  # this tensor's values where they take part, else the reduce's identity
            return self if include_self else untouched.where(self, identity)
        identity = _SCATTER_IDENTITY[reduce](self.dtype)
        written = mask.where(values, identity)
        if reduce == "mean":
            count = mask.where(1, 0).sum(-1) + (1 if include_self else untouched.where(1, 0))
            return (written.sum(-1) + own(identity)) / count
        if reduce == "sum":
            return written.sum(-1) + own(identity)
        if reduce == "prod":
            return written.prod(-1) * own(identity)
        # amax, amin: one REDUCE over the k written values and this tensor's own value, a
        # last slot (k + 1 in all), so that a tie's gradient is split evenly among every
        # tied value, data and updates alike, as torch's and the REDUCE MAX rule's
        # (d max / d v_i = [v_i = max] / #tied). tinygrad's form, the written values' max
        # and then MAXIMUM with the own value, gave the own value half at any tie (the
        # MAX rule's half) and the tied updates the other half between them: with two
        # tied updates 1/2, 1/4, 1/4 instead of 1/3 each. The values are the same: the
        # slots are selected, not computed, and reduced in the same order.
        slots = written._pad_value(((0, 1),), identity)
        last = type(self).full((*self.shape, 1), True).pad(((0, 0),) * len(self.shape) + ((mask.shape[-1], 0),))
        pool = last.where(own(identity).unsqueeze(-1).expand(*slots.shape), slots)
        return pool.max(-1) if reduce == "amax" else pool.min(-1)

    def _scatter_operands(self, name: str, dim: int, index, src) -> tuple:
        """(values, mask), each of shape (*self.shape, k) for the k places of index along
        `dim`: at place p and k, src and whether index writes there, each from position p
        with p[dim] replaced by k (padded with zeros and False beyond index's shape)."""
        if not index.dtype.is_int:
            raise GraphError(f"{name}: the index must be integers, got {index.dtype.name}")
        if not len(index.shape) == len(src.shape) == len(self.shape):
            raise GraphError(f"{name}: the tensor, index and src have ranks {len(self.shape)}, {len(index.shape)} "
                             f"and {len(src.shape)}: they must be equal")
        dim = axis_index(dim, len(self.shape))
        if any((d != dim and i > s) or i > t for d, (s, i, t) in enumerate(zip(self.shape, index.shape, src.shape))):
            raise GraphError(f"{name}: index shape {list(index.shape)} must fit in src's {list(src.shape)} and, "
                             f"off axis {dim}, in the tensor's {list(self.shape)}")
        if src.dtype is not self.dtype:
            raise GraphError(f"{name}: src is {src.dtype.name}, the tensor {self.dtype.name}: they must be equal")
        size = self.shape[dim]
        values = src.shrink_to(index.shape).unsqueeze(-1).expand(*index.shape, size).transpose(-1, dim)
        mask = index._one_hot_mask(size, len(index.shape)).transpose(-1, dim)
        return values.pad_to(*self.shape, None), mask.pad_to(*self.shape, None)


def _expand_ellipsis(items: tuple, rank: int) -> tuple:
    """The index with `...` (or nothing, at the end) replaced by whole-axis slices."""
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise GraphError("an index can have only one ellipsis (...)")
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    if used > rank:
        raise GraphError(f"too many indices: {used} for a tensor of rank {rank}")
    fill = (slice(None),) * (rank - used)
    if not ellipses:
        return items + fill
    at = next(i for i, item in enumerate(items) if item is Ellipsis)
    return items[:at] + fill + items[at + 1:]


def plain_index(item):
    """An index from numpy or torch as Python's: an integer scalar (np.argmax's np.int64, a
    0-d tensor) is the int, an integer array the nested list of its ints (as x[[0, 1]]); a
    node, a slice and Python's own as they are. (A float or bool array then fails the
    checks a list of them fails.)"""
    if item.__class__ is int or item.__class__ is slice or item is None or item is Ellipsis:
        return item
    if hasattr(item, "tolist") and hasattr(item, "dtype") and not hasattr(item, "src"):  # not a UOp
        return item.tolist()
    return item


def _int_index(item, size: int, axis: int) -> int:
    if isinstance(item, bool) or not isinstance(item, int):
        hint = " (for a tensor of indices, use gather)" if hasattr(item, "shape") else ""
        raise GraphError(f"index on axis {axis}: an index is an int, a slice, None or ..., "
                         f"not {type(item).__name__}{hint}")
    if not -size <= item < size:
        raise GraphError(f"index {item} out of range for axis {axis} of size {size}")
    return item % size


def _strided(node, axis: int, start: int, step: int, count: int):
    """Elements start, start + step, ... (count of them) of `axis`."""
    rank = len(node.shape)

    def along(pair):
        return tuple(pair if i == axis else None for i in range(rank))

    if count == 0:
        return node.shrink(along((0, 0)))
    if step < 0:  # walk the flipped axis forwards
        node, start, step = node.flip(axis), node.shape[axis] - 1 - start, -step
    end = start + (count - 1) * step + 1
    node = node.shrink(along((start, end)))
    if step == 1:
        return node
    node = node.pad(along((0, count * step - (end - start))))
    shape = node.shape
    folded = node.reshape(shape[:axis] + (count, step) + shape[axis + 1:])
    first = folded.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(rank + 1)))
    return first.reshape(shape[:axis] + (count,) + shape[axis + 1:])
