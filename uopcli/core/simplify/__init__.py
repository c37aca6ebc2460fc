"""Simplification: graphs rewritten by two rule tables, to a fixpoint.

    from uopcli import simplify
    smaller = simplify(graph)               # exact rows, then tinygrad's algebraic rows
    same_bits = simplify(graph, exact=True)  # only the rows that change no bit

- `EXACT` (exact.py): rewrites that never change a value, bit for bit (x*1, -(-x),
  movements that undo each other, constant folding, ...). `uopgrad eval` always applies them.
- `TINYGRAD` (algebraic.py): the algebraic rewrites tinygrad's compiler applies before a
  kernel runs, which change rounding but not meaning, each bounded in ulps. With them the
  gradients of sigmoid, tanh, gelu, ... are finite where tinygrad's are, and a * (1/b),
  tinygrad's float division, is a / b rounded once, as its devices with FDIV compute it.

Inputs and outputs keep their names and order, the file's meta is kept, and a node's
metadata passes to the node that replaces it. The walk is in walk.py.
"""

from __future__ import annotations

from typing import Sequence

from ..graph import Graph
from ..uop import UOp
from ..walks import node_list
from .algebraic import ROWS as TINYGRAD_ROWS
from .algebraic import TINYGRAD
from .exact import EXACT
from .walk import Rewriter

__all__ = ["simplify", "simplify_nodes", "EXACT", "TINYGRAD", "TINYGRAD_ROWS", "MODES"]

# what a simplification applies, by name: the evaluator's and the CLI's choices
MODES = ("tinygrad", "exact")
_REWRITERS: dict[str, Rewriter] = {}


def _rewriter(exact: bool) -> Rewriter:
    mode = "exact" if exact else "tinygrad"
    rewriter = _REWRITERS.get(mode)
    if rewriter is None:
        rewriter = _REWRITERS[mode] = Rewriter(EXACT) if exact else Rewriter(EXACT, TINYGRAD)
    return rewriter


def simplify_nodes(roots: UOp | Sequence[UOp], exact: bool = False) -> list[UOp]:
    """Each root (one UOp: that node), simplified (the exact rows; with exact=False,
    tinygrad's too)."""
    return _rewriter(exact).rewrite_roots(node_list(roots))


def simplify(graph: Graph, exact: bool = False) -> Graph:
    """`graph` with every output simplified; inputs (unused ones too), output names and
    order, and the file's meta as they were."""
    names = list(graph.outputs)
    roots = simplify_nodes([graph.outputs[name] for name in names], exact)
    return _same_interface(graph, dict(zip(names, roots)))


def _same_interface(graph: Graph, outputs: dict) -> Graph:
    """A Graph like `graph` with new outputs, without Graph.__init__'s walk over every
    node: what it checks holds by construction (rules make no PARAM, so the outputs reach
    only the graph's own inputs; the names are the graph's)."""
    out = Graph.__new__(Graph)
    out.outputs, out.inputs, out.meta = outputs, list(graph.inputs), dict(graph.meta)
    return out
