"""Graph-level forward mode: what `uopgrad jvp`, `hvp`, `jacobian` and `hessian` write, as
library calls beside `differentiate`.

    jvp_graph = jvp(graph, ["x", "w"])               # outputs jvp_<output>; inputs + tangent_x, tangent_w
    hvp_graph = hvp(graph, ["w", "b"], of=["loss"])  # outputs hvp_w, hvp_b: H v, forward over reverse
    jac_graph = jacobian(graph, ["x"], of=["y"])     # jacobian_y_x, shape y.shape + x.shape
    hess_graph = hessian(graph, ["w"])               # hessian_w_w, shape w.shape + w.shape

The result keeps every input of the forward graph, in order, then the `tangent_<name>`
inputs (same shape and dtype as `<name>`), so the same -i values feed every file. A name
already taken gets the lowest free number after its kind (tools/names.py): a jvp of a jvp
file along x adds `tangent2_x`, x's second tangent (`tangent_names(graph, wrt)` says which).
Jacobians and Hessians push basis tangents through a batched walk (`chunk` directions at a
time, an identity slice built in the graph), and are refused above `limit` elements.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import GradientError
from ..core.graph import Graph
from ..core.uop import UOp
from .differentiate import (COTANGENTS, _chosen_outputs, _known_good_graph, _nothing_to_differentiate, _seeds, _target,
                            _type, _unique)
from .names import fresh, name_list, tangent_names

DEFAULT_CHUNK = 256
DEFAULT_LIMIT = 1 << 26  # elements of one Jacobian or Hessian block (512 MiB of float64)


# ----------------------------------------------------------------------------- jvp, hvp

def jvp(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, keep_forward: bool = False) -> Graph:
    """The Jacobian-vector products of outputs `of` (default: every float output) along
    new inputs `tangent_<name>` for each input of `wrt`: outputs `jvp_<output>`. A name
    taken (an input `tangent_x`, a kept output `jvp_y`) is numbered: `tangent2_x`, `jvp2_y`."""
    from ..core.forward import compute_jvp
    targets, params = _tangent_inputs(graph, wrt)
    of = _float_outputs(graph, of)
    taken = set(graph.outputs) if keep_forward else set()
    names = [fresh("jvp", name, taken) for name in of]
    roots = [graph.outputs[name] for name in of]
    found = compute_jvp(roots, dict(zip(targets, params)))
    outputs = list(graph.outputs.items()) if keep_forward else []
    outputs += [(n, _or_zeros(found[r], r)) for n, r in zip(names, roots)]
    return _known_good_graph(outputs, [*graph.inputs, *params],
                             _meta(graph, jvp_of=",".join(of), jvp_wrt=",".join(_names(wrt))))


def hvp(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, cotangent: str | None = None) -> Graph:
    """The Hessian-vector products of scalar output `of` along `tangent_<name>` inputs,
    forward over reverse: the JVP of its gradient. Outputs `hvp_<name>` per `wrt` name.
    A non-scalar output is weighted as `differentiate` weighs it (`cotangent` "ones", or
    "input": a new input `cotangent_<output>` before the tangents): H of sum(u * output)."""
    from ..core.forward import compute_jvp
    targets, params = _tangent_inputs(graph, wrt)
    loss = _one_output(graph, of, cotangent)
    grads, cotangent_inputs = _gradients(graph, loss, targets, cotangent)
    found = compute_jvp(grads, dict(zip(targets, params)))
    taken: set[str] = set()
    outputs = [(fresh("hvp", name, taken), _or_zeros(found[g], g)) for name, g in zip(_names(wrt), grads)]
    return _known_good_graph(outputs, [*graph.inputs, *cotangent_inputs, *params],
                             _meta(graph, hvp_of=loss, hvp_wrt=",".join(_names(wrt))))


# ----------------------------------------------------------------------------- jacobian, hessian

def jacobian(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, chunk: int = DEFAULT_CHUNK,
             limit: int | None = None) -> Graph:
    """The full Jacobians: `jacobian_<output>_<input>` of shape output.shape + input.shape
    for each output of `of` (default: every float output) and input of `wrt`."""
    targets = [_target(_inputs(graph), name, graph.meta, graph) for name in _unique(wrt, "wrt")]
    of = _float_outputs(graph, of)
    roots = [graph.outputs[name] for name in of]
    taken: set[str] = set()  # outputs a and a_q, inputs q_r and r: jacobian_a_q_r, then jacobian2_a_q_r
    names = [[fresh("jacobian", f"{o}_{i}", taken) for i in _names(wrt)] for o in of]
    _check_sizes([(n, r, t) for row, r in zip(names, roots) for n, t in zip(row, targets)], limit)
    chunk = chunk_within(roots, chunk, limit)
    columns = [_columns(roots, t, chunk) for t in targets]  # per target: per root, (n, *root.shape)
    outputs = [(names[o][k], _matrix(columns[k][o], roots[o], t)) for o in range(len(roots))
               for k, t in enumerate(targets)]
    return _known_good_graph(outputs, list(graph.inputs),
                             _meta(graph, jacobian_of=",".join(of), jacobian_wrt=",".join(_names(wrt))))


def hessian(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, chunk: int = DEFAULT_CHUNK,
            limit: int | None = None, cotangent: str | None = None) -> Graph:
    """The Hessian blocks of scalar output `of`: `hessian_<a>_<b>` = d2 of / da db, shape
    a.shape + b.shape, for each pair of `wrt` names (the Jacobian of the gradient); a
    non-scalar output weighted by `cotangent`, as in `hvp`."""
    targets = [_target(_inputs(graph), name, graph.meta, graph) for name in _unique(wrt, "wrt")]
    loss = _one_output(graph, of, cotangent)
    taken: set[str] = set()
    names = [[fresh("hessian", f"{a}_{b}", taken) for b in _names(wrt)] for a in _names(wrt)]
    _check_sizes([(n, a, b) for row, a in zip(names, targets) for n, b in zip(row, targets)], limit)
    grads, cotangent_inputs = _gradients(graph, loss, targets, cotangent)
    chunk = chunk_within(grads, chunk, limit)
    columns = [_columns(grads, b, chunk) for b in targets]
    outputs = [(names[i][k], _matrix(columns[k][i], grads[i], b)) for i in range(len(targets))
               for k, b in enumerate(targets)]
    return _known_good_graph(outputs, [*graph.inputs, *cotangent_inputs],
                             _meta(graph, hessian_of=loss, hessian_wrt=",".join(_names(wrt))))


def _columns(roots: list[UOp], target: UOp, chunk: int) -> list[UOp]:
    """Per root, its tangents along every basis direction of `target`, stacked on a leading
    axis (n = target.size directions), `chunk` directions per batched walk."""
    from ..core.forward import compute_jvp
    if chunk < 1:
        raise GradientError(f"chunk must be at least 1, got {chunk}")
    n = math.prod(target.shape)
    parts: list[list[UOp]] = [[] for _ in roots]
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        # rows start..start+size-1 of the n x n identity, made alone: the whole identity,
        # then cut, was a tensor of n^2 elements whatever the chunk
        rows = (UOp.arange(size) + start).unsqueeze(-1).eq(UOp.arange(n)).cast(target.dtype)
        basis = rows.reshape((size, *target.shape))
        found = compute_jvp(roots, {target: basis}, batch=size)
        for part, root in zip(parts, roots):
            t = found[root]
            part.append(t if t is not None else UOp.full((size, *root.shape), 0, root.dtype))
    return [_stacked(part, root, n) for part, root in zip(parts, roots)]


def chunk_within(roots: list[UOp], chunk: int, limit: int | None) -> int:
    """`chunk`, lowered where `limit` needs it (never below 1): a batched walk's tensors hold
    chunk times a node's elements (a tangent of every node the roots depend on; the basis,
    chunk times the target's, is one of them where a root depends on the target, and none
    of the file where no root does), so that no tensor of the file holds more than `limit`
    (the blocks themselves are checked apart). Without it --limit bounded the blocks alone,
    and eval --limit refused the file hessian --limit had written."""
    if limit is None:
        return chunk
    from ..core.walks import scope_toposort
    largest = max((math.prod(node.shape) for node in scope_toposort(roots) if node.shape is not None), default=1)
    return max(1, min(chunk, limit // max(largest, 1)))


def _stacked(parts: list[UOp], root: UOp, n: int) -> UOp:
    if not parts:  # an empty target: no directions
        return UOp.full((0, *root.shape), 0, root.dtype)
    return parts[0] if len(parts) == 1 else parts[0].cat(*parts[1:], dim=0)


def _matrix(columns: UOp, root: UOp, target: UOp) -> UOp:
    """(n, *root.shape) directional derivatives as the matrix root.shape + target.shape."""
    rank = len(root.shape)
    moved = columns.permute((*range(1, rank + 1), 0)) if rank else columns
    return moved.reshape((*root.shape, *target.shape))


def _check_sizes(blocks: list[tuple[str, UOp, UOp]], limit: int | None) -> None:
    """Refuse, before building anything, a block above `limit` elements (one line, with
    the size it would have)."""
    if limit is None:
        return
    for name, out, inp in blocks:
        elements = math.prod(out.shape) * math.prod(inp.shape)
        if elements > limit:
            size = elements * out.dtype.itemsize
            head = (f"{name} would hold {elements:,} elements ({_bytes(size)} of {out.dtype.name}), above "
                    f"max_tensor_elements {limit:,}: raise it")
            raise GradientError(f"{head} (limit=N), or use jvp/hvp for products with a few vectors",
                                cli=f"{head} with --limit max_tensor_elements=N, or use jvp/hvp for products with "
                                    f"a few vectors")


def _bytes(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


# ----------------------------------------------------------------------------- zero derivatives

def zero_derivatives(graph: Graph, wrt: Sequence[str], of: Sequence[str]) -> list[str]:
    """A line per `wrt` input that outputs `of` do not depend on (or only through DETACH):
    all its derivatives there are identically zero, as `differentiate` reports of a
    gradient (the files hold zeros for it, which a misspelt or unused weight name would
    otherwise give without a word). One walk, ended when every input is met; the walk
    through DETACH only for an input it did not meet. (hvp's caller asks only of the
    inputs whose hvp_<name> is a zero by construction: an input the output depends on has
    a gradient that is no constant zero, so no walk at all, mostly.)"""
    from .differentiate import NOT_REACHED, ONLY_DETACH, _reachable
    wrt, of = name_list(wrt, "wrt"), name_list(of, "of")
    if not wrt:
        return []
    inputs = _inputs(graph)
    targets = {inputs[name] for name in wrt if name in inputs}
    roots = [graph.outputs[name] for name in of]
    live = _reachable(roots, through_detach=False, until=targets)
    missed = [name for name in wrt if name in inputs and inputs[name] not in live]
    if not missed:
        return []
    reached = _reachable(roots, through_detach=True)
    return [f"derivatives of {', '.join(of)} with respect to {name} are identically zero: "
            f"{NOT_REACHED if inputs[name] not in reached else ONLY_DETACH}" for name in missed]


# ----------------------------------------------------------------------------- shared

def _names(wrt: Sequence[str]) -> list[str]:
    return name_list(wrt, "wrt")


def _inputs(graph: Graph) -> dict[str, UOp]:
    return {node.arg: node for node in graph.inputs}


def _tangent_inputs(graph: Graph, wrt: Sequence[str]) -> tuple[list[UOp], list[UOp]]:
    wrt = _unique(wrt, "wrt")
    if not wrt:
        raise _nothing_to_differentiate()
    inputs = _inputs(graph)
    targets = [_target(inputs, name, graph.meta, graph) for name in wrt]
    names = tangent_names(graph, wrt)
    return targets, [UOp.param(names[name], t.shape, t.dtype) for name, t in zip(wrt, targets)]


def _float_outputs(graph: Graph, of: Sequence[str] | None) -> list[str]:
    if of:
        of = _chosen_outputs(graph, of)
        for name in of:
            out = graph.outputs[name]
            if out.shape is None or not out.dtype.is_float:
                raise GradientError(f"output {name!r} is {_type(out)} ({out.op}): only floating-point outputs "
                                    f"have tangents")
        return of
    of = [name for name, out in graph.outputs.items() if out.shape is not None and out.dtype.is_float]
    if not of:
        raise GradientError("the graph has no floating-point outputs to differentiate")
    return of


def _one_output(graph: Graph, of: Sequence[str] | None, cotangent: str | None) -> str:
    if cotangent not in COTANGENTS:
        raise GradientError(f"cotangent must be 'ones', 'input' or None, got {cotangent!r}")
    chosen = _chosen_outputs(graph, of)
    if len(chosen) != 1:
        raise GradientError(f"a Hessian is of one output; of= names {len(chosen)}",
                            cli=f"a Hessian is of one output; --of names {len(chosen)}")
    out = graph.outputs[chosen[0]]
    if out.shape is None or not out.dtype.is_float or (out.shape != () and cotangent is None):
        head = f"output {chosen[0]!r} is {_type(out)}: a Hessian needs a floating-point scalar"
        raise GradientError(f"{head} (or a weighting of a float output: cotangent='ones', or 'input')",
                            cli=f"{head} (or a weighting of a float output: --cotangent ones, or input)")
    return chosen[0]


def _gradients(graph: Graph, loss: str, targets: list[UOp], cotangent: str | None) -> tuple[list[UOp], list[UOp]]:
    """The gradients of output `loss` (seeded as differentiate seeds it), and the new
    cotangent inputs."""
    from ..core.gradient import compute_gradient
    (seed,), new_inputs = _seeds(graph, [loss], cotangent)
    grads = compute_gradient(graph.outputs[loss], seed, targets)
    return [grads[t] for t in targets], new_inputs


def _or_zeros(t: UOp | None, like: UOp) -> UOp:
    return t if t is not None else like.zeros_like()


def _meta(graph: Graph, **extra: str) -> dict:
    meta = dict(graph.meta)
    meta.update(extra)
    return meta
