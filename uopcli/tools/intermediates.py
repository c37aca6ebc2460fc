"""Every node's value, not just the outputs': what `uopgrad eval --keep-intermediates` stores
and `uopgrad render --values` shows on each node of the page.

The nodes are those of the main graph (a node inside a FUNCTION/CALL body has one value per
call, so none is kept for it) that have a shape (void nodes, TUPLE, CALL, ..., hold none).
They are keyed `%<i>`, i the node's number in the file's canonical order, as `uopgrad print`
numbers it. All are evaluated in one program, and all are held at once: the memory of the
whole forward and backward pass, fine for the graphs one inspects value by value. Keeping
every node also keeps the evaluator from fusing products into contractions, so float32
values can differ from a plain `eval` in the last bits; `with_intermediates` takes the
outputs from the same evaluation, so a file's `loss` and its node's `%<i>` agree.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import EvaluationError
from ..core.graph import Graph
from ..core.walks import scope_toposort


def intermediate_values(graph: Graph, inputs: Mapping) -> dict:
    """{"%<i>": array} for every shaped node of the main graph, given the inputs by name."""
    from ..backends.numpy import evaluate
    from ..views.html.values import NODE_KEY, node_key
    clash = [name for name in graph.outputs if NODE_KEY.fullmatch(name)]
    if clash:
        raise EvaluationError(f"--keep-intermediates stores node values as %<i>, and output {clash[0]!r} "
                              f"is named like one: rename it")
    order = graph.nodes()
    index = {node: i for i, node in enumerate(order)}
    main = set(scope_toposort([*graph.outputs.values(), *graph.inputs]))
    nodes = [node for node in order if node in main and node.shape is not None]
    values = evaluate(nodes, inputs)
    return {node_key(index[node]): value for node, value in zip(nodes, values)}


def with_intermediates(graph: Graph, inputs: Mapping, outputs: dict) -> dict:
    """`outputs` ({name: array}, what eval stores) with every node's value added, and each
    output that is a node's value taken from the same evaluation."""
    values = intermediate_values(graph, inputs)
    index = {node: i for i, node in enumerate(graph.nodes())}
    from ..views.html.values import node_key
    same = {name: values[node_key(index[node])] for name, node in graph.outputs.items()
            if node_key(index[node]) in values and name in outputs}
    return {**outputs, **same, **values}
