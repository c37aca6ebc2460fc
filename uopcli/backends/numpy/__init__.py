"""The numpy evaluator: one table maps each op to numpy, an iterative compiler turns a
graph into a flat list of steps, and a tight loop runs them.

    evaluate([loss, grad_w], {"x": x, "w": w})        -> [array, array]
    evaluate_graph(graph, {"x": x, "w": w})           -> {"loss": array, "grad_w": array}
    program = compile_graph(graph)                    # compile once (see compiled.py) ...
    program({"x": x, "w": w})                         # ... run many times: as evaluate_graph

How it works, and why:
- **Compile once, run flat.** The program depends on the graph, never on the inputs'
  values: `compile_graph` keeps it for any number of calls, each binding its own arrays
  (evaluate and evaluate_graph are one compile and one call). An explicit-stack walk (no recursion: a 1,000,000-node chain
  is fine) gives every value a register and emits one step per computing node. Nodes
  that only rename a value (CONTIGUOUS, DETACH, COPY, GETTUPLE, a body's slot PARAM,
  STORE/AFTER) get no step: they share their source's register.
- **Calls are inlined per call site.** A FUNCTION/CALL body is walked in a context of its
  own, where slot PARAM i is the register of arg i; a GETTUPLE asks for one body output
  in that context, so each call node runs its body once and unread outputs never run.
- **Free after last use.** The compiler knows each register's last reader, so the loop
  drops a value right after it: peak memory stays near what hand-written numpy holds.
- **Contractions never materialise.** A REDUCE ADD over a product (or a sum of products)
  of RESHAPE/EXPAND/PERMUTE views, which is how tinygrad spells matmul and what its
  gradients produce, runs as one BLAS matmul (or einsum) over the un-broadcast operands;
  the MUL node is never built (see contraction.py).
- **Movement chains are views.** A chain of RESHAPE/EXPAND/PERMUTE/SHRINK/FLIP whose
  index map is affine runs as one strided view of where it starts, even where numpy would
  copy op by op (conv2d's windows: tiles, then rows cut from them), and a REDUCE ADD over a
  chain with PADs (the windows' gradient) as a strided scatter-add (see strided.py).
- **Write into dying arrays.** An elementwise step whose source array (one the evaluator
  made) dies with it writes its result there, as hand-written numpy would (`z += b`).
- numpy's floating-point warnings are silenced: results are IEEE values (1/0 = inf).

Semantics where the format leaves room (decided here):
- a REDUCE ADD of only -0.0 is -0.0, as IEEE addition gives (numpy's contiguous sums
  start from +0.0; table._keep_negative_zero mends it). A contraction run by BLAS sums from
  +0.0 like numpy: where every product of a sum is -0.0 it gives +0.0, its one difference
  in the sign of a zero from the op-by-op graph.
- integer FDIV is C division (as CDIV); integer division or remainder by zero gives 0;
  integer POW with a negative exponent gives 1/a^|b| truncated (1, -1 or 0).
- a float16 contraction (a REDUCE ADD of float16 products, or the CAST, REDUCE ADD, CAST
  a float16 gradient spells) multiplies and adds in float32, as tinygrad's compiled kernels
  do: the products skip their float16 rounding, so one too large for float16 does not
  turn the sum into inf or nan. (A product that is also an output is not fused, and is
  rounded: it, and a sum of it, are then evaluated node by node.)
- inputs are keyed by name, by PARAM node, or by any node whose value you supply (its
  sources are then not evaluated); arrays must match shape and dtype exactly (an ndarray
  subclass counts as its plain array; a masked array is refused: see backends/inputs.py).
- outputs are writable arrays of their own: numpy scalars become 0-d arrays, read-only
  views (a broadcast, an embedded BUFFER) are copied, and so are an output that is an
  input array or a view of one, and an output that is the array of an output before it
  (two outputs of one node); other views of the evaluator's arrays are returned as they are.
- EvalStats.peak_bytes counts arrays held between steps and a contraction's temporaries
  (inputs and BUFFER bytes are not the evaluator's); scratch space inside one numpy call
  (BLAS packing, einsum's own intermediates) is not seen.

The package: table.py (the op table), contraction.py (the contraction kernels),
strided.py (movement chains as strided views and scatter-adds), program.py (Step and
Program), compiler.py (graph to steps, then the passes in passes/, in the order
compiler.PASSES gives), run.py (the run loop), compiled.py (CompiledGraph: binding a call's
inputs, running, the outputs as the caller gets them).
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np

from ...core.uop import UOp
from ...errors import EvaluationError
from .compiled import CompiledGraph, compile_graph, evaluate_once, simplified
from .run import EvalStats

__all__ = ["evaluate", "evaluate_graph", "compile_graph", "CompiledGraph", "EvalStats"]


def evaluate(outputs: Sequence[UOp], inputs: Mapping, *, stats: EvalStats | None = None) -> list:
    """The values of `outputs` (a list of UOps) given `inputs`: graph-input names (or PARAM
    nodes, or any node whose value you supply) mapped to numpy arrays of exactly the
    node's shape and dtype. A TUPLE, FUNCTION or CALL output gives a tuple of arrays (None
    for NOOP). Each output is an array of its own: never an input array (or a view of
    one), nor the array of another output. Raises EvaluationError for a missing or
    mismatched input. (One compile and one call: compile_graph(outputs, simplify=None)
    keeps the program for many calls.)"""
    return evaluate_once(outputs, inputs, stats)


def evaluate_graph(graph, inputs: Mapping[str, np.ndarray], *, stats: EvalStats | None = None,
                   simplify: str | None = "tinygrad") -> dict:
    """Evaluate every output of a Graph; returns {output name: array}, each an array of its
    own (see evaluate). Inputs are given by name; a name that is not one of the graph's
    inputs is an error (likely a typo).
    `simplify`: "tinygrad" (the default, as `uopgrad eval`) first applies tinygrad's
    algebraic rewrites, so the values are what tinygrad computes (finite activation
    gradients: sigmoid'(-100) is 0, not 0 * inf = nan; see uopcli.core.simplify); "exact"
    only the rewrites that change no bit of any result; None runs the graph as written
    (`eval --literal`, and what `evaluate` does). (One compile and one call:
    compile_graph(graph, simplify=...) keeps the program for many calls.)"""
    graph.check_interface()  # outputs and inputs may have been changed in place
    given = graph
    if simplify is not None:
        graph = simplified(graph, simplify)
    start = time.perf_counter()  # stats.seconds: compile and run, as evaluate's
    try:
        return compile_graph(graph, simplify=None)._call(inputs, stats, start)
    except EvaluationError:
        # A named PARAM the outputs reach but `inputs` does not list (added in place) is
        # "missing" without its value and "unknown" with it: say what is wrong instead.
        # Only on failure: the walk costs 7% of a 150k-node evaluation.
        given.check()
        raise
