"""Checks of forward mode: `uopgrad check --transpose` and `uopgrad check --hvp`.

    report = check_transpose(graph, ["x", "w"])      # <u, J v> (jvp) == <J^T u, v> (diff)
    report = check_hvp(graph, ["w"])                 # H v (hvp) vs finite differences of the gradient

The transpose test: for random u (one per output) and v (one per input), the JVP graph gives
<u, J v> and the gradient graph <J^T u, v>; the two tables (core/forward.py, core/gradient.py)
are each other's transpose exactly when these agree, to rounding, for every u and v. No
finite differences: the tolerance is float64 rounding (REL_TOL of the terms' magnitudes),
so a wrong rule on either side shows at once. Both graphs are built in the graph's own
dtypes, as `uopgrad jvp` and `uopgrad diff` build them, then promoted to float64 (as
`uopgrad check` does: tools/check.to_float64) and evaluated by the numpy evaluator as written.

The HVP check: `hvp` against central differences of the gradient graph along v,
(g(x + h v) - g(x - h v)) / 2h (a non-scalar output weighted by seeded random cotangents,
as `uopgrad check` weighs it), the gradient by the reference evaluator (op by op) and the
HVP by the numpy evaluator, so neither evaluator can hide a bug of its own; tolerances as
`uopgrad check`'s (tools/check: ATOL, RTOL). DETACH values are held at the point checked,
as `uopgrad check` holds them (tools/check_float64.freeze_detached): a DETACH is a constant
for second derivatives as for first, and that is what is compared. Where holding them
changes the differences, they are taken once more with the DETACH values moving (the
function's own Hessian) and the report says how far H v is from that: a model that
detaches a value its second derivative needs (tinygrad's BatchNorm detaches the batch mean
in its variance: the gradient is exact there, the Hessian is not) is told so, not failed.

A check that compared nothing never says ok: a transpose trial whose terms are all 0 (J v
and J^T u vanish at the point, every ReLU off) compares nothing, and the trials are drawn
again (TRIALS more at most); an HVP target at a kink, or whose differences are rounding
noise (tools/forward_differences), is not compared. With nothing compared the verdict is
"not checked: ... choose another point", exit status 1. A forward value that is not finite
at the point is reported first, as `check` reports it (tools/check.forward_not_finite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..core.graph import Graph
from .check import ATOL, CHOOSE_ANOTHER_POINT, RTOL, forward_not_finite, not_checked_line, not_finite_lines
from .check_float64 import freeze_detached, to_float64
from .check_numeric import step_base
from .differentiate import differentiate
from .forward import hvp, jvp
from .forward_differences import (WIDER_STEPS, Along, KinkSites, Target, against_differences, json_float,
                                  standing_still)
from .names import cotangent_names, tangent_names, wrt_and_of

REL_TOL = 1e-10   # the transpose test's tolerance, relative to the sum of |terms|
TRIALS = 3        # random (u, v) pairs per transpose check (as many more drawn where one compares nothing)
HvpTarget = Target  # one hvp_<name> compared (tools/forward_differences)
_json = json_float


@dataclass
class TransposeTrial:
    seed: int
    jvp_side: float        # <u, J v>
    vjp_side: float        # <J^T u, v>
    scale: float           # sum of |u_i (J v)_i| and |(J^T u)_j v_j|: what rounding is relative to
    passed: bool

    @property
    def rel_error(self) -> float:
        return abs(self.jvp_side - self.vjp_side) / max(self.scale, 1e-300)

    @property
    def compared(self) -> bool:
        """False when every term is 0: 0 == 0 tells nothing of the rules."""
        return self.scale != 0


@dataclass
class TransposeReport:
    of: list[str]
    wrt: list[str]
    trials: list[TransposeTrial] = field(default_factory=list)
    not_finite: tuple[str, list[str]] | None = None  # (the forward value, where it is made) at a trial's point

    @property
    def compared(self) -> int:
        return sum(t.compared for t in self.trials)

    @property
    def passed(self) -> bool:
        return self.not_finite is None and self.compared > 0 and all(t.passed for t in self.trials)

    def to_dict(self) -> dict:
        found = {"check": "transpose", "of": self.of, "wrt": self.wrt, "passed": self.passed, "rel_tol": REL_TOL,
                 "dtype": "float64", "compared": self.compared,
                 "trials": [{"seed": t.seed, "jvp": _json(t.jvp_side), "vjp": _json(t.vjp_side),
                             "rel_error": _json(t.rel_error), "passed": t.passed, "compared": t.compared}
                            for t in self.trials]}
        if self.not_finite is not None:
            found.update(forward_finite=False, not_finite=self.not_finite[1])
        return found

    def lines(self) -> list[str]:
        if self.not_finite is not None:
            value, found = self.not_finite
            return not_finite_lines(f"{value}, seed {self.trials[-1].seed}", found, "inner product")
        out = [f"{'seed':>6} {'<u, J v> (jvp)':>24} {'<J^T u, v> (diff)':>24} {'rel err':>10}"]
        out += [f"{t.seed:>6} {t.jvp_side:>24.16g} {t.vjp_side:>24.16g} {t.rel_error:>10.2e}  "
                f"{('ok' if t.passed else 'FAILED') if t.compared else 'every term 0: nothing compared'}"
                for t in self.trials]
        if not all(t.passed for t in self.trials):
            out.append("FAILED: <u, J v> and <J^T u, v> differ: a forward or reverse rule is wrong")
        elif not self.compared:
            out.append(f"not checked: every term of <u, J v> and <J^T u, v> is 0 at this point (J is 0 there: "
                       f"every ReLU off, say), nothing compared: {CHOOSE_ANOTHER_POINT}")
        else:
            out.append(f"ok: jvp and diff of {', '.join(self.of)} are each other's transpose (float64, rel tol "
                       f"{REL_TOL:g})")
        return out


def check_transpose(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None,
                    inputs: Mapping | None = None, seed: int = 0, trials: int = TRIALS) -> TransposeReport:
    """<u, J v> from the JVP graph against <J^T u, v> from the gradient graph, for `trials`
    seeded random u and v (inputs not given: seeded random values too), in float64; a
    trial whose terms are all 0 is drawn again, `trials` more times at most. `inputs` are
    checked as evaluate_graph checks them (names, shapes, dtypes; any float dtype for a
    float input: the check computes in float64)."""
    import numpy as np
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import compile_graph
    from .values import index_ranges_for, random_value

    wrt, of = wrt_and_of(wrt, of)
    forward = jvp(graph, wrt, of)
    of = forward.meta["jvp_of"].split(",")
    backward, report = differentiate(graph, wrt, of, cotangent="input")
    # the directions' names: tangent_<x> and cotangent_<y>, numbered where the graph has those
    tangent, cotangent = tangent_names(graph, wrt), cotangent_names(graph, of)
    forward64, backward64 = to_float64(forward), to_float64(backward)
    given = checked_inputs(graph, inputs or {}, float_points=True)  # as evaluate_graph checks them
    # as written: <u, J v> = <J^T u, v> is an identity of the two graphs themselves; each
    # compiled once for all the trials
    tangents_at, grads_at = compile_graph(forward64, simplify=None), compile_graph(backward64, simplify=None)
    result = TransposeReport(of, list(wrt))
    ranges = index_ranges_for(graph.outputs.values(), [n for n in graph.inputs if n.arg not in given])
    s = seed
    while result.compared < trials and len(result.trials) < 2 * trials:
        values = {n.arg: np.asarray(given[n.arg]) if n.arg in given else random_value(n, s, ranges)
                  for n in graph.inputs}
        for node in (*forward64.inputs, *backward64.inputs):  # v: tangent_<x>; u: cotangent_<y>
            if node.arg not in values:
                values[node.arg] = random_value(node, s)
        values = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in values.items()}
        tangents = tangents_at(_for(forward64, values))
        grads = grads_at(_for(backward64, values))
        u = {name: values.get(cotangent[name], 1.0) for name in of}
        jvp_terms = [np.asarray(u[name] * tangents[f"jvp_{name}"]) for name in of]
        vjp_terms = [np.asarray(grads[f"grad_{name}"] * values[tangent[name]]) for name in wrt]
        left = float(sum(t.sum() for t in jvp_terms))
        right = float(sum(t.sum() for t in vjp_terms))
        scale = float(sum(np.abs(t).sum() for t in (*jvp_terms, *vjp_terms)))
        passed = math.isfinite(left) and math.isfinite(right) and abs(left - right) <= REL_TOL * scale
        result.trials.append(TransposeTrial(s, left, right, scale, passed))
        result.not_finite = forward_not_finite(graph, of, values)
        if result.not_finite is not None:
            break  # the forward value is what is wrong: said first, no more trials
        s += 1
    return result


def _for(graph: Graph, values: Mapping) -> dict:
    return {name: values[name] for name in graph.input_names}


# ----------------------------------------------------------------------------- hvp

@dataclass
class HvpReport:
    of: str
    seed: int
    targets: list[HvpTarget]
    # the same comparison with the DETACH values moving, where holding them changed it:
    # how far H v is from the function's own Hessian (None: no DETACH value moves with --wrt)
    moving: list[HvpTarget] | None = None
    not_finite: tuple[str, list[str]] | None = None  # (the forward value, where it is made)

    @property
    def passed(self) -> bool:
        return self.not_finite is None and verdict(self.targets) == "ok"

    def to_dict(self) -> dict:
        found = {"check": "hvp", "of": [self.of], "seed": self.seed, "passed": self.passed, "rtol": RTOL, "atol": ATOL,
                 "dtype": "float64", "targets": [t.to_dict() for t in self.targets]}
        if self.moving is not None:
            found["with_detach_moving"] = [t.to_dict() for t in self.moving]
        if self.not_finite is not None:
            found.update(forward_finite=False, not_finite=self.not_finite[1])
        return found

    def lines(self) -> list[str]:
        if self.not_finite is not None:
            return not_finite_lines(self.not_finite[0], self.not_finite[1], "Hessian-vector product")
        out = target_lines("hvp of", [("hvp_" + t.name, t) for t in self.targets])
        out += verdict_lines(self.targets, "hvp_", f"ok: Hessian-vector products of {self.of} match finite "
                             f"differences of its gradient (float64)", "the gradient jumps")
        differing = [t for t in self.moving or () if not t.passed]
        if differing:
            worst = max(differing, key=lambda t: t.max_rel_error)
            out.append(f"note: H v holds DETACH values constant, as the gradient does; with them moving (the "
                       f"function's own Hessian) hvp_{', hvp_'.join(t.name for t in differing)} "
                       f"{'differs' if len(differing) == 1 else 'differ'} "
                       f"(up to {worst.max_rel_error:.3g} relative): the graph detaches a value its second "
                       f"derivative needs (tinygrad's BatchNorm detaches its batch mean: its gradient is exact, "
                       f"its Hessian is not)")
        return out


def verdict(targets: list[Target]) -> str:
    """"FAILED" when a target failed, "not checked" when one was too noisy or none was
    compared (all at kinks), else "ok" (a kink beside compared targets is noted, as `check` does)."""
    if not all(t.passed or t.noisy for t in targets):
        return "FAILED"
    if any(t.noisy for t in targets) or not any(t.compared for t in targets):
        return "not checked"
    return "ok"


def target_lines(head: str, rows: list[tuple[str, Target]]) -> list[str]:
    """The table: each target's errors and ok/FAILED, or why it was not compared."""
    width = max([12] + [len(label) for label, _ in rows])
    out = [f"{head:<{width}} {'max abs err':>12} {'max rel err':>12}"]
    for label, t in rows:
        if t.kink:
            out.append(f"{label:<{width}} {'kink: not compared':>25}")
        elif t.still:
            out.append(f"{label:<{width}} {'v is 0: not compared':>25}")
        elif t.noisy:
            out.append(f"{label:<{width}} {t.max_abs_error:>12.3e} {t.max_rel_error:>12.3e}  too noisy: not compared")
        else:
            out.append(f"{label:<{width}} {t.max_abs_error:>12.3e} {t.max_rel_error:>12.3e}  "
                       f"{'ok' if t.passed else 'FAILED'}")
    return out


def verdict_lines(targets: list[Target], prefix: str, ok: str, jumps: str) -> list[str]:
    """The verdict line, then a note for each kind of target not compared."""
    found = verdict(targets)
    kinks, noisy = [t for t in targets if t.kink], [t for t in targets if t.noisy]
    if found == "FAILED":
        out = [f"FAILED: {', '.join(t.name for t in targets if not (t.passed or t.noisy))}"]
    elif found == "not checked":
        if noisy:
            why = f"{', '.join(prefix + t.name for t in noisy)}: differences too noisy"
        elif all(t.still for t in targets):
            why = "the direction v is 0 (every tangent given is 0)"
        else:
            why = "every target at a kink"
        out = [not_checked_line(why)]
    else:
        out = [ok]
    out += [f"note: {jumps} at the point along v for {prefix}{t.name}, where {t.kink_at} chooses differently on "
            f"either side (a kink: its one-sided differences disagree): no derivative to compare there; another "
            f"--seed draws another point and v" for t in kinks]
    out += [f"note: {prefix}{t.name}: the finite differences do not settle (those at steps h and h/1000 differ by "
            f"up to {t.noise:.3g}; steps up to {max(WIDER_STEPS):g}h tried): float64 rounding of the graph at "
            f"this point is larger than any error they could show" for t in noisy]
    return out


def check_hvp(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, inputs: Mapping | None = None,
              seed: int = 0) -> HvpReport:
    """H v from the HVP graph (numpy evaluator) against central differences of the
    gradient graph along v (reference evaluator), v (and a non-scalar output's cotangent)
    seeded random, in float64. `inputs` are checked as evaluate_graph checks them (names,
    shapes, dtypes; any float dtype for a float input: the check computes in float64); the
    ones not given are seeded random."""
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import evaluate_graph

    # a non-scalar output weighted as `uopgrad check` weighs it: H of sum(u * y), u the new
    # input cotangent_<y>, seeded random like the other inputs (a scalar is seeded with 1)
    wrt, of = wrt_and_of(wrt, of)
    products = hvp(graph, wrt, of, cotangent="input")
    loss = products.meta["hvp_of"]
    given = checked_inputs(products, inputs or {}, float_points=True)  # as evaluate_graph checks them
    values = point(graph, products, given, seed)
    found = forward_not_finite(graph, [loss], values)
    if found is not None:
        return HvpReport(loss, seed, [], not_finite=found)
    analytic = evaluate_graph(to_float64(products), values, simplify=None)
    return hvp_against(graph, wrt, loss, {name: analytic[f"hvp_{name}"] for name in wrt}, values, seed)


def point(graph: Graph, checked: Graph, given: Mapping, seed: int) -> dict:
    """{input of `checked`: float64 value}: `given`, else seeded random (the indices a
    graph's integer inputs take: within their ranges in `graph`)."""
    import numpy as np
    from .values import index_ranges_for, random_value
    ranges = index_ranges_for(graph.outputs.values(), [n for n in checked.inputs if n.arg not in given])
    values = {n.arg: np.asarray(given[n.arg]) if n.arg in given else random_value(n, seed, ranges)
              for n in checked.inputs}
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in values.items()}


def hvp_against(graph: Graph, wrt: Sequence[str], loss: str, analytic: Mapping, values: dict,
                seed: int) -> HvpReport:
    """{name: H v} `analytic` against central differences of the gradient of output `loss`
    of `graph` along v = values[tangent_<name>] (its cotangent, a non-scalar's weights:
    values[cotangent_<loss>]), DETACH values held (and moving, where that changes a verdict)."""
    import numpy as np
    grads, _ = differentiate(graph, wrt, [loss], cotangent="input")  # its cotangent input is named as hvp's
    tangent = tangent_names(graph, wrt)  # tangent_<x>, or tangent2_<x> where the graph has tangent_<x>
    grads64 = to_float64(grads)
    # one step for all directions: h scaled to the inputs moved, as check's per-element step
    h = step_base(np.float64) * max([1.0] + [float(np.max(np.abs(values[name]), initial=0.0)) for name in wrt])
    still = standing_still(list(analytic), [values[tangent[name]] for name in wrt])
    if still is not None:
        return HvpReport(loss, seed, still)
    move = mover(values, wrt, tangent)
    sites = KinkSites(graph, [graph.outputs[loss]], wrt, move)
    keys = {name: f"grad_{name}" for name in wrt}
    held = _detach_held(grads64, values)
    targets = against_differences(Along(_evaluator(held, move)), analytic, keys, h, sites)
    moving = None
    if held is not grads64:
        moving = against_differences(Along(_evaluator(grads64, move)), analytic, keys, h, sites)
        if [t.passed for t in moving] == [t.passed for t in targets]:
            moving = None  # holding the DETACH values changed no verdict: nothing to tell
    return HvpReport(loss, seed, targets, moving)


def _detach_held(grads: Graph, values: Mapping) -> Graph:
    """The gradient graph with every DETACH value held at `values` (the graph itself
    when it has no DETACH)."""
    names, roots = list(grads.outputs), list(grads.outputs.values())
    held = freeze_detached(roots, {n.arg: values[n.arg] for n in grads.inputs})
    return grads if held == roots else Graph(dict(zip(names, held)), grads.inputs, grads.meta)


def mover(values: dict, wrt: Sequence[str], tangent: Mapping):
    """t -> every value, the `wrt` inputs moved by t along their tangents."""
    def move(t: float) -> dict:
        moved = dict(values)
        for name in wrt:
            moved[name] = values[name] + t * values[tangent[name]]
        return moved
    return move


def _evaluator(graph: Graph, move):
    """t -> {output: value of `graph` at move(t)} (reference evaluator)."""
    import numpy as np
    from ..backends.reference import reference_evaluate_graph

    def at(t: float) -> dict:
        feed = move(t)
        with np.errstate(all="ignore"):
            found = reference_evaluate_graph(graph, {n.arg: feed[n.arg] for n in graph.inputs})
        return {k: np.asarray(v) for k, v in found.items()}
    return at
