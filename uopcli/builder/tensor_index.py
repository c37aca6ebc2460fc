"""Indexing by tensors and lists (`x[idx]`, `x[idx0, :, idx1]`, `x[[0, -1, 0]]`), built as
tinygrad 0.14 builds it, from one-hot masks: for each indexed axis, the index compared with
arange(size) gives a mask with the index's (broadcast) shape in front of the tensor's axes;
the masks ANDed select, and a sum over the indexed axes takes the selected element. So the
result is a graph of the format's ops, differentiable like any other (repeated indices
add their gradients up), and an index outside the axis selects nothing: its element is 0,
as tinygrad's (numpy and torch would raise). Negative indices count from the end."""

from __future__ import annotations

import math

from ..errors import GraphError
from .common import resolve_dim


def is_tensor_index(item) -> bool:
    return isinstance(item, (list, tuple)) or hasattr(item, "shape") and hasattr(item, "dtype")


def split_index(index) -> list:
    """tinygrad's reading of `x[index]`: a list of ints (or any non-sequence) is one index,
    a tuple or another list is one index per axis (x[[0, 1], [2, 3]] picks two elements)."""
    if isinstance(index, list) and all(isinstance(i, int) for i in index) or not isinstance(index, (tuple, list)):
        return [index]
    return list(index)


def tensor_getitem(x, items: list):
    """x[items] where some items are tensors or lists: basic indexing first (tensor-indexed
    axes kept whole), then the tensor indices over the axes they land on."""
    view_items, tensors, dims, out_dim = [], [], [], 0
    for item in items:
        if item is None or item is Ellipsis or not is_tensor_index(item):
            view_items.append(item)
            out_dim += item is None or isinstance(item, slice)
            continue
        tensors.append(item)
        dims.append(out_dim)
        view_items.append(slice(None))
        out_dim += 1
    ellipsis = next((k for k, item in enumerate(items) if item is Ellipsis), None)
    if ellipsis is not None:  # the axes `...` stands for come before the tensor indices after it
        real = sum(1 for item in items if item is not None and item is not Ellipsis)
        skipped = len(x.shape) - real
        before = sum(1 for item in items[:ellipsis] if item is None or isinstance(item, slice) or is_tensor_index(item))
        dims = [d + skipped if d >= before else d for d in dims]
    viewed = x._view(tuple(view_items))
    sizes = [viewed.shape[d] for d in dims]
    indices = [_index_tensor(type(x), t, size, viewed) for t, size in zip(tensors, sizes)]
    return _take(viewed, dims, indices)


def _index_tensor(uop, item, size: int, x):
    """An index as an int tensor, negative entries counted from the end of an axis of `size`."""
    if isinstance(item, (list, tuple)):
        import numpy as np
        flat = np.asarray(item, dtype=object).reshape(-1)
        if flat.size and not all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
            raise GraphError(f"index {item!r} holds something other than ints (tensor {x.dtype.name}"
                             f"{list(x.shape)})")
        values = np.array([v + size if v < 0 else v for v in flat], np.int32).reshape(np.shape(item))
        return uop.buffer(values)
    if not item.dtype.is_int:
        raise GraphError(f"index of {item.dtype.name}{list(item.shape)} into {x.dtype.name}{list(x.shape)}: an "
                         f"index tensor holds integers (for a mask, use where or masked_fill)")
    return (item < 0).where(item + size, item)


def _broadcast_shapes(shapes, x) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise GraphError(f"index shapes {[list(s) for s in shapes]} do not broadcast (indexing "
                             f"{x.dtype.name}{list(x.shape)})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _take(x, dims: list, indices: list):
    """x indexed by `indices` on axes `dims`. Consecutive axes (two or more) are one flat axis
    indexed by the linear index, as tinygrad does; otherwise one mask per axis."""
    big = _broadcast_shapes([i.shape for i in indices], x)
    consecutive = dims == list(range(dims[0], dims[0] + len(dims)))
    if len(dims) > 1 and consecutive:
        sizes = [x.shape[d] for d in dims]
        strides = [math.prod(sizes[k + 1:]) for k in range(len(sizes))]
        linear, valid = None, None
        for index, size, stride in zip(indices, sizes, strides):
            term, inside = index * stride, (index >= 0) & (index < size)
            linear = term if linear is None else linear + term
            valid = inside if valid is None else valid & inside
        pre, post = x.shape[:dims[0]], x.shape[dims[-1] + 1:]
        flat = x.reshape(pre + (math.prod(sizes),) + post)
        taken = _take(flat, [len(pre)], [valid.where(linear, 0)])
        return valid.reshape((1,) * len(pre) + big + (1,) * len(post)).where(taken, 0)
    first = dims[0]
    spread = x.shape[:first] + big + x.shape[first:]
    mask = None
    for dim, index in zip(dims, indices):
        wide = index.reshape(index.shape + (1,) * (len(x.shape) - first)).expand(spread)
        one_hot = wide._one_hot_along_dim(x.shape[dim], dim - len(x.shape))
        mask = one_hot if mask is None else mask & one_hot
    values = x.reshape(x.shape[:first] + (1,) * len(big) + x.shape[first:])
    out = mask.where(values, 0).sum(tuple(d + len(big) for d in dims), dtype=x.dtype)
    if first != 0 and len(dims) > 1 and not consecutive:  # numpy's rule: the index axes go first
        out = out.permute(*range(first, first + len(big)), *range(first), *range(first + len(big), len(out.shape)))
    return out


def one_hot_along_dim(index, num_classes: int, dim: int):
    """Bool: index == arange(num_classes) along axis `dim` (tinygrad's _one_hot_along_dim)."""
    if not index.dtype.is_int:
        raise GraphError(f"a one-hot index holds integers, got {index.dtype.name}{list(index.shape)}")
    offset = len(index.shape) - resolve_dim(dim, len(index.shape)) - 1
    return index.eq(type(index).arange(num_classes).reshape((num_classes,) + (1,) * offset))
