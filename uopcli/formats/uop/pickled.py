"""Graphs and nodes through pickle (process pools, joblib, Dask's process workers) as the
file format's canonical bytes, read back on arrival: reading interns every node, so a node
the receiving process already has comes back as that very node, and `is` stays equality.
The walk that writes the bytes is iterative, so a 10^6-node chain pickles as any other.
uopcli/__init__.py registers `reduce` with copyreg: the core itself never imports a format."""

from __future__ import annotations

from ...core.graph import Graph
from ...core.uop import UOp
from .reader import loads
from .tables import Limits
from .writer import dumps

# bytes this library wrote, not a file from elsewhere: no size to guard against
_PICKLED = Limits(max_file_bytes=1 << 62, max_nodes=1 << 62)
_NODE = "node"  # the output a pickled node is stored under, in a graph of its own


def reduce(obj: Graph | UOp) -> tuple:
    """What pickle stores for a Graph or a UOp: how to rebuild it, and the bytes."""
    if isinstance(obj, UOp):
        return node_from_bytes, (dumps(Graph({_NODE: obj})),)
    return graph_from_bytes, (dumps(obj),)


def graph_from_bytes(data: bytes) -> Graph:
    return loads(data, limits=_PICKLED, name="<pickled graph>")


def node_from_bytes(data: bytes) -> UOp:
    return graph_from_bytes(data).outputs[_NODE]
