"""tinygrad's movement Tensor functions beyond the primitives: tiling, splitting, rolling,
diagonals, windows (`unfold` and the pools' `_pool`), einops' rearrange, and pad's modes
that fill with the tensor's own elements, all from RESHAPE, PERMUTE, EXPAND, PAD, SHRINK
and FLIP."""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import GraphError
from .common import resolve_dim, axis_index, per_axis, varargs

_BARE = object()  # marks the group of a "..." outside parentheses: one axis per axis it covers
PAD_MODES = ("constant", "reflect", "replicate", "circular")


class MovementMixin:
    """Movement composites; every method returns a new UOp."""

    __slots__ = ()

    def shrink_to(self, *shape):
        """The first `shape[i]` elements of each axis (None: the whole axis)."""
        return self.shrink(tuple(None if size is None else (0, size) for size in varargs(shape)))

    def pad_to(self, *shape, value=0.0):
        """Padded after each axis up to `shape[i]` (None: as it is), with `value`."""
        shape = varargs(shape)
        if len(shape) != len(self.shape):
            raise GraphError(f"pad_to: {len(shape)} sizes for a tensor of rank {len(self.shape)}")
        return self.pad(tuple((0, 0 if new is None else new - size) for size, new in zip(self.shape, shape)),
                        value=value)

    def repeat(self, *repeats):
        """Tile `repeats[i]` copies along axis i (numpy's tile; leading repeats add axes)."""
        repeats = varargs(repeats)
        if len(repeats) < len(self.shape):
            raise GraphError(f"repeat: {len(repeats)} repeats for rank {len(self.shape)}")
        shape = (1,) * (len(repeats) - len(self.shape)) + self.shape
        spread = self.reshape(tuple(s for size in shape for s in (1, size)))
        tiled = spread.expand(tuple(s for r, size in zip(repeats, shape) for s in (r, size)))
        return tiled.reshape(tuple(r * size for r, size in zip(repeats, shape)))

    def unflatten(self, dim: int, sizes: Sequence[int]):
        dim = resolve_dim(dim, len(self.shape))
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

    def rearrange(self, formula: str, **sizes):
        """einops' rearrange, as tinygrad's: "b c (h w) -> b (c h) w" splits each group of
        the left side into its axes (`sizes` names those it cannot infer: at most one per
        group is unknown), orders the axes as the right side names them, and merges each
        group there. "..." stands for the axes no name covers, "()" or "1" for an axis of
        size 1. A RESHAPE, a PERMUTE and a RESHAPE (each left out when it changes nothing)."""
        left, right = _rearrange_sides(formula)
        left_names = [name for group in left for name in group]
        for name, size in sizes.items():
            if name not in left_names:
                raise GraphError(f"rearrange {formula!r}: size given for {name!r}, which the left side does not name")
            if size.__class__ is not int or size < 0:
                raise GraphError(f"rearrange {formula!r}: the size of {name} must be a whole number >= 0, got {size!r}")
        if any("..." in group and _BARE not in group for group in left):
            raise GraphError(f"rearrange {formula!r}: '...' cannot be inside a group on the left side")
        left, right = _rearrange_ellipsis(formula, left, right, len(self.shape))
        if len(left) != len(self.shape):
            raise GraphError(f"rearrange {formula!r}: the left side has {len(left)} axes, the tensor "
                             f"{list(self.shape)} has {len(self.shape)}")
        axis_size = {}
        for group, size in zip(left, self.shape):
            axis_size.update(_split_group(formula, group, size, sizes))
        order = [name for group in left for name in group]
        split = self.reshape(tuple(axis_size[name] for name in order))
        moved = split.permute([order.index(name) for group in right for name in group])
        return moved.reshape(tuple(math.prod(axis_size[name] for name in group) for group in right))

    def view(self, *shape):
        """reshape, by its torch name."""
        return self.reshape(*shape)

    def clone(self):
        """A copy: in a graph, the same value (a CONTIGUOUS node)."""
        return self.contiguous()

    def diag(self):
        """The square matrix with this vector on its diagonal, from movement ops: each row of
        (x, n zeros) read n at a time puts x[i] at column i."""
        if len(self.shape) != 1:
            raise GraphError(f"diag needs a vector, got shape {list(self.shape)}")
        n = self.shape[0]
        spread = self.reshape(n, 1).pad(((0, 0), (0, n))).flatten()  # x[0], 0 × n, x[1], ...
        return spread.shrink(((0, n * n),)).reshape(n, n)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The elements x[..., i, i + offset] of axes dim1 and dim2, as a new last axis (torch's)."""
        rank = len(self.shape)
        dim1, dim2 = axis_index(dim1, rank), axis_index(dim2, rank)
        if dim1 == dim2:
            raise GraphError(f"diagonal: dim1 and dim2 must differ, got {dim1} twice")
        x = self.permute(*(a for a in range(rank) if a not in (dim1, dim2)), dim1, dim2)
        rows, columns = x.shape[-2:]
        lead = (None,) * (rank - 2)
        first_row, first_column = max(0, -offset), max(0, offset)
        m = max(0, min(rows - first_row, columns - first_column))
        x = x.shrink(lead + ((min(first_row, rows), min(first_row, rows) + m),
                             (min(first_column, columns), min(first_column, columns) + m)))
        if m == 0:
            return x.reshape(*x.shape[:-2], 0)
        # the diagonal of an (m, m) block: every (m + 1)-th element of it, flattened
        x = x.flatten(-2).pad(lead + ((0, m),)).unflatten(-1, (m, m + 1))
        return x.shrink(lead + ((0, m), (0, 1))).reshape(*x.shape[:-2], m)

    def unfold(self, dim: int, size: int, step: int):
        """Windows of `size` elements every `step` along `dim`: that axis becomes the window
        count, and a new last axis of `size` holds each window (torch's unfold)."""
        dim = axis_index(dim, len(self.shape))
        if not isinstance(size, int) or not 0 <= size <= self.shape[dim]:
            raise GraphError(f"unfold: size must be in [0, {self.shape[dim]}], got {size!r}")
        if not isinstance(step, int) or step < 1:
            raise GraphError(f"unfold: step must be >= 1, got {step!r}")
        order = [a for a in range(len(self.shape)) if a != dim] + [dim]
        if size == 0:  # (n - 0) // step + 1 empty windows, as torch and tinygrad
            count = self.shape[dim] // step + 1
            empty = self.shrink(tuple((0, 0) if a == dim else None for a in range(len(self.shape))))
            empty = empty.permute(*order).unsqueeze(dim)  # the empty axis last, the count's axis 1
            return empty.expand(*self.shape[:dim], count, *self.shape[dim + 1:], 0)
        windows = self.permute(*order)._pool((size,), step)  # (..., count, size)
        back = [order.index(a) for a in range(len(self.shape))]
        return windows.permute(*back, len(self.shape))

    def roll(self, shifts, dims=None):
        """Elements moved `shifts` places along `dims` (those leaving one end enter at the
        other): two copies side by side, cut at the shifted start. dims None: the flat tensor."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if len(dims) != len(shifts):
            raise GraphError(f"roll: {len(shifts)} shifts for {len(dims)} axes")
        if 0 in self.shape:
            return self
        dims = tuple(axis_index(d, len(self.shape)) for d in dims)
        bounds = [None] * len(self.shape)
        for d, shift in zip(dims, shifts):
            start = self.shape[d] - shift % self.shape[d]
            bounds[d] = (start, start + self.shape[d])
        return self.repeat(tuple(2 if i in dims else 1 for i in range(len(self.shape)))).shrink(tuple(bounds))

    def split(self, sizes, dim: int = 0) -> tuple:
        """Pieces along `dim`: each of `sizes` (an int: that size, the last one smaller)."""
        dim = axis_index(dim, len(self.shape))
        length = self.shape[dim]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise GraphError(f"split: size must be > 0, got {sizes}")
            sizes = [min(sizes, length - start) for start in range(0, max(1, length), sizes)]  # empty: [0]
        if not all(isinstance(size, int) and size >= 0 for size in sizes) or sum(sizes) != length:
            raise GraphError(f"split: sizes {list(sizes)} are not whole numbers >= 0 adding up to {length}, "
                             f"the size of axis {dim}")
        pieces, start = [], 0
        for size in sizes:
            pieces.append(self.shrink(tuple((start, start + size) if i == dim else None
                                            for i in range(len(self.shape)))))
            start += size
        return tuple(pieces)

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        dim = axis_index(dim, len(self.shape))
        if chunks <= 0:
            raise GraphError(f"chunk: chunks must be > 0, got {chunks}")
        length = self.shape[dim]
        return self.split(math.ceil(length / chunks) if length else [0] * chunks, dim)

    def repeat_interleave(self, repeats: int, dim: int | None = None):
        """Each element `repeats` times in a row along `dim` (None: of the flat tensor)."""
        x, dim = (self.flatten(), 0) if dim is None else (self, axis_index(dim, len(self.shape)))
        shape = x.shape
        x = x.reshape(shape[:dim + 1] + (1,) + shape[dim + 1:]).expand(shape[:dim + 1] + (repeats,) + shape[dim + 1:])
        return x.reshape(shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1:])

    def _pool(self, kernel: tuple, stride=1, dilation=1):
        """Every window of the last len(kernel) axes: (..., *outputs, *kernel), where
        out[..., o, j] = x[..., o·stride + j·dilation], from movement ops alone. Tile each
        axis (size i) so it holds k rows of i·f + d elements: row j then starts j·d later
        in x, so its elements o·s are x[o·s + j·d]; keep every s-th (fold by s, column 0).
        f ≥ 1 makes a row long enough for o·s elements."""
        kernel = tuple(kernel)
        strides, dilations = per_axis(stride, len(kernel)), per_axis(dilation, len(kernel))
        lead = len(self.shape) - len(kernel)
        if lead < 0:
            raise GraphError(f"pool: a kernel of {len(kernel)} axes on a tensor of rank {len(self.shape)}")
        sizes, keep = self.shape[lead:], self.shape[:lead]
        outputs = tuple(math.ceil((i - d * (k - 1)) / s) for i, k, s, d in zip(sizes, kernel, strides, dilations))
        if any(o <= 0 for o in outputs):
            raise GraphError(f"pool: kernel {list(kernel)} (dilation {list(dilations)}) is larger than "
                             f"the input's {list(sizes)}")
        factors = [max(1, math.ceil((o * s - d) / i)) for o, s, i, d in zip(outputs, strides, sizes, dilations)]
        rows = [i * f + d for i, f, d in zip(sizes, factors, dilations)]  # one row per kernel position
        x = self.repeat((1,) * lead + tuple(math.ceil(k * r / i) for k, r, i in zip(kernel, rows, sizes)))
        x = x.shrink((None,) * lead + tuple((0, k * r) for k, r in zip(kernel, rows)))
        x = x.reshape(keep + _interleave(kernel, rows))
        x = x.shrink((None,) * lead + _interleave([(0, k) for k in kernel], [(0, o * s) for o, s in zip(outputs, strides)]))
        x = x.reshape(keep + tuple(n for k, o, s in zip(kernel, outputs, strides) for n in (k, o, s)))
        x = x.shrink((None,) * lead + tuple(b for k, o in zip(kernel, outputs) for b in ((0, k), (0, o), (0, 1))))
        x = x.reshape(keep + _interleave(kernel, outputs))
        window_axes = [lead + 2 * i for i in range(len(kernel))]
        return x.permute(*range(lead), *(a + 1 for a in window_axes), *window_axes)

    def _pad_value(self, pads: tuple, value):
        """PAD with `value` instead of 0: the zero padding, with `value` where the mask of
        the original (padded the same way) is false."""
        if all(p == (0, 0) for p in pads):
            return self
        lead = ((0, 0),) * (len(self.shape) - len(pads))
        padded = self.pad(lead + pads)
        if value == 0:
            return padded
        inside = type(self).full(self.shape, True).pad(lead + pads)
        return inside.where(padded, value)


def _rearrange_sides(formula: str) -> tuple[list[list[str]], list[list[str]]]:
    """The two sides of a rearrange formula, each a list of groups (an axis each) of axis
    names: "a (b c) 1" is [["a"], ["b", "c"], []]; a bare "..." stays a group ["..."] and
    "(... c)" a group holding it (they differ: _rearrange_ellipsis tells them apart by
    the _BARE marker a bare one carries). Names are Python identifiers that neither start nor end with "_",
    each once per side, the same names on both sides."""
    if not isinstance(formula, str) or formula.count("->") != 1:
        raise GraphError(f"rearrange {formula!r}: the formula needs exactly one '->'")
    sides = [_rearrange_side(formula, side) for side in formula.split("->")]
    names = [[name for group in side for name in group if name is not _BARE] for side in sides]
    for side_names in names:
        for name in side_names:
            if name != "..." and not (name.isidentifier() and name[0] != "_" and name[-1] != "_"):
                raise GraphError(f"rearrange {formula!r}: {name!r} is not an axis name")
        repeated = {name for name in side_names if side_names.count(name) > 1}
        if repeated:
            raise GraphError(f"rearrange {formula!r}: {sorted(repeated)[0]!r} is named twice on one side")
    if sorted(names[0]) != sorted(names[1]):
        raise GraphError(f"rearrange {formula!r}: the two sides name different axes")
    return sides[0], sides[1]


def _rearrange_side(formula: str, side: str) -> list[list]:
    tokens = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
    groups, open_group = [], None
    for token in tokens:
        if token == "(":
            if open_group is not None:
                raise GraphError(f"rearrange {formula!r}: groups cannot nest")
            open_group = []
        elif token == ")":
            if open_group is None:
                raise GraphError(f"rearrange {formula!r}: ')' without '('")
            groups.append(open_group)
            open_group = None
        elif token == "1":  # an axis of size 1: an empty group, or nothing inside a group
            if open_group is None:
                groups.append([])
        elif open_group is not None:
            open_group.append(token)
        else:
            groups.append([token, _BARE] if token == "..." else [token])
    if open_group is not None:
        raise GraphError(f"rearrange {formula!r}: '(' without ')'")
    return groups


def _rearrange_ellipsis(formula: str, left: list, right: list, rank: int) -> tuple[list, list]:
    """Both sides with "..." replaced by the names "...0", "...1", ... of the axes it covers:
    a bare "..." one group per axis, "(... c)" all of them merged with c."""
    if not any("..." in group for group in left + right):
        return left, right
    covered = rank - (len(left) - 1)
    if covered < 0:
        raise GraphError(f"rearrange {formula!r}: the left side names more axes than the tensor's {rank}")
    names = [f"...{i}" for i in range(covered)]

    def expand(side):
        out = []
        for group in side:
            if "..." not in group:
                out.append(group)
            elif _BARE in group:
                out.extend([name] for name in names)
            else:
                at = group.index("...")
                out.append(group[:at] + names + group[at + 1:])
        return out
    return expand(left), expand(right)


def _split_group(formula: str, group: list[str], size: int, sizes: dict) -> dict[str, int]:
    """The sizes of the axes `group` splits an axis of `size` into: given ones from `sizes`,
    one unknown inferred; an empty group is an axis of size 1."""
    if not group:
        if size != 1:
            raise GraphError(f"rearrange {formula!r}: '()' stands for an axis of size 1, the tensor's is {size}")
        return {}
    unknown = [name for name in group if name not in sizes]
    known = math.prod(sizes[name] for name in group if name in sizes)
    if len(unknown) > 1:
        raise GraphError(f"rearrange {formula!r}: give the size of all but one of {', '.join(group)} "
                         f"(e.g. {unknown[0]}=...)")
    if unknown:
        if known <= 0 or size % known:
            raise GraphError(f"rearrange {formula!r}: an axis of {size} does not split into "
                             f"{' x '.join(group)} with the sizes given")
        return {**{name: sizes[name] for name in group if name in sizes}, unknown[0]: size // known}
    if known != size:
        raise GraphError(f"rearrange {formula!r}: {' x '.join(f'{n}={sizes[n]}' for n in group)} is {known}, "
                         f"the axis has {size}")
    return {name: sizes[name] for name in group}


def _interleave(first, second) -> tuple:
    return tuple(v for pair in zip(first, second) for v in pair)


def flat_padding_pairs(flat) -> tuple:
    """tinygrad's flat padding, last axis first ((left, right, top, bottom) pads W, then H),
    as (before, after) pairs in axis order for the trailing len(flat) // 2 axes."""
    return tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))[::-1]


def cut_by_negative_padding(pairs: tuple, shape: tuple) -> tuple:
    """The SHRINK bounds that a padding's negative amounts stand for (the positive ones
    keep the whole axis): (-3, 1) on an axis of 5 keeps [3, 5)."""
    _check_pair_count(pairs, shape)
    return tuple((-min(before, 0), size + min(after, 0)) for (before, after), size in zip(pairs, shape))


def pad_from_inside(x, pairs: tuple, mode: str):
    """pad's modes that fill with x's own elements, one axis after another (so corners
    take the values padded along the earlier axes, as numpy.pad's and tinygrad's):
      reflect    x[p], ..., x[1] | x | x[-2], ..., x[-1-p]     (the edge not repeated; p < size)
      replicate  x[0] p times    | x | x[-1] p times
      circular   x[-p:]          | x | x[:p]                   (p <= size, after the cuts)
    Negative amounts cut: after reflect and replicate (they fill from the whole axis),
    before circular (it wraps what is left), as tinygrad's."""
    if mode not in PAD_MODES:
        raise GraphError(f"pad: mode is one of {', '.join(map(repr, PAD_MODES))}, got {mode!r}")
    _check_pair_count(pairs, x.shape)
    if mode == "circular":
        x = x.shrink(cut_by_negative_padding(pairs, x.shape))
    for axis, (before, after) in enumerate(pairs):
        before, after, size = max(before, 0), max(after, 0), x.shape[axis]
        if not before and not after:
            continue
        if (mode == "reflect" and max(before, after) >= size) or (mode == "circular" and max(before, after) > size) \
                or size == 0:
            limit = "less than" if mode == "reflect" else "at most"
            raise GraphError(f"pad: {mode} padding ({before}, {after}) of axis {axis} must be {limit} its size {size}")
        pieces = [p for p in (_edge(x, axis, before, mode, at_start=True), x,
                              _edge(x, axis, after, mode, at_start=False)) if p is not None]
        x = pieces[0].cat(*pieces[1:], dim=axis)
    return x if mode == "circular" else x.shrink(cut_by_negative_padding(pairs, x.shape))


def _edge(x, axis: int, amount: int, mode: str, at_start: bool):
    """The `amount` elements that pad_from_inside puts before (at_start) or after x on `axis`."""
    if not amount:
        return None
    size = x.shape[axis]

    def along(start, end):
        return x.shrink(tuple((start, end) if i == axis else None for i in range(len(x.shape))))
    if mode == "reflect":
        return (along(1, amount + 1) if at_start else along(size - 1 - amount, size - 1)).flip(axis)
    if mode == "replicate":
        edge = along(0, 1) if at_start else along(size - 1, size)
        return edge.expand(tuple(amount if i == axis else s for i, s in enumerate(x.shape)))
    return along(size - amount, size) if at_start else along(0, amount)  # circular


def _check_pair_count(pairs: tuple, shape: tuple) -> None:
    if len(pairs) != len(shape):
        raise GraphError(f"pad: {len(pairs)} (before, after) pairs for a tensor of rank {len(shape)}")
