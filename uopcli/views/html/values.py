"""Node values for the page: an .npz of arrays (what `uopgrad eval -o` writes, with
`--keep-intermediates` every node's) turned into min/mean/max per node.

A member names its node by an output name, an input name, or `%<i>`: node i in the file's
canonical order (the numbers `uopgrad print` shows). Members naming nothing in the graph
(`t[0]`, an element of a tuple output) are skipped; none naming anything is an error.
"""

from __future__ import annotations

import re

from ...errors import UOpError
from ...core.graph import Graph
from ...tools.values import ZIP_MAGIC, _starts_with, type_text

NODE_KEY = re.compile(r"%(\d+)")


def node_key(index: int) -> str:
    """The .npz member name of node `index`'s value."""
    return f"%{index}"


def value_stats(graph: Graph, path: str, order: list | None = None) -> dict[int, list[str]]:
    """{canonical index: [min, mean, max, nan count]} as text, from the .npz at `path`."""
    import numpy as np
    order = graph.nodes() if order is None else order
    index = {node: i for i, node in enumerate(order)}
    by_name = {node.arg: index[node] for node in graph.inputs}
    by_name.update((name, index[node]) for name, node in graph.outputs.items())
    stats: dict[int, list[str]] = {}
    try:
        archive = np.load(_starts_with(path, ZIP_MAGIC, ".npz", "a zip archive's"), allow_pickle=False)
    except OSError as e:
        raise UOpError(f"{path}: cannot read the values: {e.strerror or e}") from None
    except ValueError as e:
        raise UOpError(f"{path}: cannot read the values: {e} (uopgrad eval -o OUT.npz writes them)") from None
    with archive:
        for name in archive.files:
            match = NODE_KEY.fullmatch(name)
            i = by_name.get(name, int(match.group(1)) if match else None)
            if i is None or i >= len(order):
                continue
            node = order[i]
            try:
                array = archive[name]
            except ValueError as e:
                raise UOpError(f"{path}: member {name!r} cannot be read: {e}") from None
            if node.shape is None or tuple(array.shape) != tuple(node.shape):
                raise UOpError(f"{path}: member {name!r} has shape {list(array.shape)}, but node %{i} "
                               f"({node.op}) is {type_text(node) if node.shape is not None else 'void'}")
            stats[i] = summary(array)
    if not stats and graph.nodes():
        raise UOpError(f"{path}: no member names an output, an input or a node (%<i>) of the graph")
    return stats


def summary(array) -> list[str]:
    """[min, mean, max, nans] of an array, as short text; nans '' when there are none."""
    import numpy as np
    if array.size == 0:
        return ["empty", "empty", "empty", ""]
    values = np.asarray(array, dtype=np.float64)
    nans = int(np.isnan(values).sum())
    if nans == values.size:
        return ["nan", "nan", "nan", str(nans)]
    with np.errstate(all="ignore"):
        low, mean, high = np.nanmin(values), np.nanmean(values), np.nanmax(values)
    return [_text(low), _text(mean), _text(high), str(nans) if nans else ""]


def _text(value: float) -> str:
    return f"{value:.6g}"
