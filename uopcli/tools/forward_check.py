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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..core.graph import Graph
from .check import ATOL, RTOL
from .check_float64 import freeze_detached, to_float64
from .check_numeric import KINK_STEP_FACTOR, step_base
from .differentiate import differentiate
from .forward import hvp, jvp
from .names import cotangent_names, tangent_names, wrt_and_of

REL_TOL = 1e-10   # the transpose test's tolerance, relative to the sum of |terms|
TRIALS = 3        # random (u, v) pairs per transpose check


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


@dataclass
class TransposeReport:
    of: list[str]
    wrt: list[str]
    trials: list[TransposeTrial] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.trials)

    def to_dict(self) -> dict:
        return {"check": "transpose", "of": self.of, "wrt": self.wrt, "passed": self.passed, "rel_tol": REL_TOL,
                "dtype": "float64", "trials": [{"seed": t.seed, "jvp": _json(t.jvp_side), "vjp": _json(t.vjp_side),
                                                "rel_error": _json(t.rel_error), "passed": t.passed}
                                               for t in self.trials]}

    def lines(self) -> list[str]:
        out = [f"{'seed':>6} {'<u, J v> (jvp)':>24} {'<J^T u, v> (diff)':>24} {'rel err':>10}"]
        out += [f"{t.seed:>6} {t.jvp_side:>24.16g} {t.vjp_side:>24.16g} {t.rel_error:>10.2e}  "
                f"{'ok' if t.passed else 'FAILED'}" for t in self.trials]
        out.append(f"ok: jvp and diff of {', '.join(self.of)} are each other's transpose (float64, rel tol "
                   f"{REL_TOL:g})" if self.passed else
                   "FAILED: <u, J v> and <J^T u, v> differ: a forward or reverse rule is wrong")
        return out


def check_transpose(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None,
                    inputs: Mapping | None = None, seed: int = 0, trials: int = TRIALS) -> TransposeReport:
    """<u, J v> from the JVP graph against <J^T u, v> from the gradient graph, for `trials`
    seeded random u and v (inputs not given: seeded random values too), in float64. `inputs`
    are checked as evaluate_graph checks them (names, shapes, dtypes; any float dtype for a
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
    for trial in range(trials):
        s = seed + trial
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
    return result


def _for(graph: Graph, values: Mapping) -> dict:
    return {name: values[name] for name in graph.input_names}


def _json(x: float):
    return x if math.isfinite(x) else repr(x)


# ----------------------------------------------------------------------------- hvp

@dataclass
class HvpTarget:
    name: str
    max_abs_error: float
    max_rel_error: float
    passed: bool
    kink: bool = False  # the gradient has no derivative at the point along v: not compared


@dataclass
class HvpReport:
    of: str
    seed: int
    targets: list[HvpTarget]
    # the same comparison with the DETACH values moving, where holding them changed it:
    # how far H v is from the function's own Hessian (None: no DETACH value moves with --wrt)
    moving: list[HvpTarget] | None = None

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.targets)

    def to_dict(self) -> dict:
        found = {"check": "hvp", "of": [self.of], "seed": self.seed, "passed": self.passed, "rtol": RTOL, "atol": ATOL,
                 "dtype": "float64", "targets": _targets_json(self.targets)}
        if self.moving is not None:
            found["with_detach_moving"] = _targets_json(self.moving)
        return found

    def lines(self) -> list[str]:
        width = max([12] + [len(t.name) + 4 for t in self.targets])
        out = [f"{'hvp of':<{width}} {'max abs err':>12} {'max rel err':>12}"]
        out += [f"{'hvp_' + t.name:<{width}} {'kink: not compared':>25}" if t.kink else
                f"{'hvp_' + t.name:<{width}} {t.max_abs_error:>12.3e} {t.max_rel_error:>12.3e}  "
                f"{'ok' if t.passed else 'FAILED'}" for t in self.targets]
        failed = [t.name for t in self.targets if not t.passed]
        out.append(f"FAILED: {', '.join(failed)}" if failed else
                   f"ok: Hessian-vector products of {self.of} match finite differences of its gradient (float64)")
        kinks = [t.name for t in self.targets if t.kink]
        if kinks:
            out.append(f"note: the gradient jumps at the point along v for hvp_{', hvp_'.join(kinks)} (a relu's or "
                       f"max's kink: its one-sided differences disagree): no derivative to compare there; another "
                       f"--seed draws another point and v")
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


def _targets_json(targets: list[HvpTarget]) -> list[dict]:
    return [{"target": t.name, "max_abs_error": _json(t.max_abs_error), "max_rel_error": _json(t.max_rel_error),
             "passed": t.passed, "kink": t.kink} for t in targets]


def check_hvp(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None, inputs: Mapping | None = None,
              seed: int = 0) -> HvpReport:
    """H v from the HVP graph (numpy evaluator) against central differences of the
    gradient graph along v (reference evaluator), v (and a non-scalar output's cotangent)
    seeded random, in float64. `inputs` are checked as evaluate_graph checks them (names,
    shapes, dtypes; any float dtype for a float input: the check computes in float64); the
    ones not given are seeded random."""
    import numpy as np
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import evaluate_graph
    from .values import index_ranges_for, random_value

    # a non-scalar output weighted as `uopgrad check` weighs it: H of sum(u * y), u the new
    # input cotangent_<y>, seeded random like the other inputs (a scalar is seeded with 1)
    wrt, of = wrt_and_of(wrt, of)
    products = hvp(graph, wrt, of, cotangent="input")
    loss = products.meta["hvp_of"]
    grads, _ = differentiate(graph, wrt, [loss], cotangent="input")  # its cotangent input is named as hvp's
    tangent = tangent_names(graph, wrt)  # tangent_<x>, or tangent2_<x> where the graph has tangent_<x>
    products64, grads64 = to_float64(products), to_float64(grads)
    given = checked_inputs(products, inputs or {}, float_points=True)  # as evaluate_graph checks them
    ranges = index_ranges_for(graph.outputs.values(), [n for n in products.inputs if n.arg not in given])
    values = {n.arg: np.asarray(given[n.arg]) if n.arg in given else random_value(n, seed, ranges)
              for n in products.inputs}
    values = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in values.items()}
    analytic = evaluate_graph(products64, values, simplify=None)
    # one step for all directions: h scaled to the inputs moved, as check's per-element step
    h = step_base(np.float64) * max([1.0] + [float(np.max(np.abs(values[name]), initial=0.0)) for name in wrt])
    held = _detach_held(grads64, values)
    targets = _against_differences(held, analytic, values, wrt, tangent, h)
    moving = None if held is grads64 else _against_differences(grads64, analytic, values, wrt, tangent, h)
    if moving is not None and [t.passed for t in moving] == [t.passed for t in targets]:
        moving = None  # holding the DETACH values changed no verdict: nothing to tell
    return HvpReport(loss, seed, targets, moving)


def _detach_held(grads: Graph, values: Mapping) -> Graph:
    """The gradient graph with every DETACH value held at `values` (the graph itself
    when it has no DETACH)."""
    names, roots = list(grads.outputs), list(grads.outputs.values())
    held = freeze_detached(roots, {n.arg: values[n.arg] for n in grads.inputs})
    return grads if held == roots else Graph(dict(zip(names, held)), grads.inputs, grads.meta)


def _against_differences(grads: Graph, analytic: dict, values: dict, wrt: Sequence[str], tangent: dict,
                         h: float) -> list[HvpTarget]:
    """Each hvp_<name> of `analytic` against (g(x + h v) - g(x - h v)) / 2h of `grads`. Where
    that fails, as `check` does: against the same with a step KINK_STEP_FACTOR times smaller
    (a relu's or max's kink within the first step, where the gradient jumps); and where that
    fails too, while the one-sided differences disagree with each other and H v lies
    between them, the gradient has no derivative at x along v: a kink, not compared."""
    import numpy as np
    at = _gradients_along(grads, values, wrt, tangent)
    plus, minus = at(h), at(-h)
    small = h * KINK_STEP_FACTOR
    closer = center = None
    targets = []
    for name in wrt:
        a, g = np.asarray(analytic[f"hvp_{name}"]), f"grad_{name}"
        target = _compared(name, a, (plus[g] - minus[g]) / (2 * h))
        if not target.passed:
            closer = closer or (at(small), at(-small))
            retried = _compared(name, a, (closer[0][g] - closer[1][g]) / (2 * small))
            if retried.passed:
                target = retried
            else:
                center = center or at(0.0)
                down, up = (center[g] - closer[1][g]) / small, (closer[0][g] - center[g]) / small
                if not _compared(name, down, up).passed and _between(a, down, up):
                    target = HvpTarget(name, math.nan, math.nan, True, kink=True)
        targets.append(target)
    return targets


def _gradients_along(grads: Graph, values: dict, wrt: Sequence[str], tangent: dict):
    """t -> {output: the gradient graph's value at x + t v} (reference evaluator)."""
    import numpy as np
    from ..backends.reference import reference_evaluate_graph

    def at(t: float) -> dict:
        feed = {n.arg: values[n.arg] for n in grads.inputs}
        for name in wrt:
            feed[name] = values[name] + t * values[tangent[name]]
        with np.errstate(all="ignore"):
            return {k: np.asarray(v) for k, v in reference_evaluate_graph(grads, feed).items()}
    return at


def _compared(name: str, a, numeric) -> HvpTarget:
    """`a` against `numeric` elementwise, with `check`'s tolerances (a nan fails)."""
    import numpy as np
    err = np.abs(a - numeric)
    bound = ATOL * max(1.0, float(np.max(np.abs(a), initial=0.0))) + RTOL * np.maximum(np.abs(a), np.abs(numeric))
    passed = bool(np.all(err <= bound))  # False with a NaN anywhere
    rel = err / np.maximum(np.maximum(np.abs(a), np.abs(numeric)), 1e-300)
    return HvpTarget(name, float(np.max(err, initial=0.0)), float(np.max(rel, initial=0.0)), passed)


def _between(a, down, up) -> bool:
    """Whether every element of `a` lies between the one-sided differences (to check's
    absolute tolerance): the derivative a subgradient-like rule may give at a kink."""
    import numpy as np
    slack = ATOL * max(1.0, float(np.max(np.abs(a), initial=0.0)))
    return bool(np.all((np.minimum(down, up) - slack <= a) & (a <= np.maximum(down, up) + slack)))
