"""Gradient check: the gradient graph `differentiate` makes, against central finite differences.

    report = check_gradients(graph, ["w1", "w2"], inputs={"x": x}, seed=0)
    report.passed, report.targets[0].max_abs_error, report.directions[0].passed

How, and why so:
- The graph is differentiated in its own dtypes, exactly as `uopgrad diff` would; then the
  gradient graph and the forward graph are both promoted to float64 (check_float64), so
  what is checked is the rules, not float32 rounding.
- The function differentiated is L = sum over the chosen outputs of sum(cotangent * output),
  cotangent 1 for a scalar output and seeded random values for a non-scalar one (fed to the
  gradient graph as its `cotangent_<output>` inputs). Inputs not given are seeded random
  values (values.random_value), in float64 where float.
- Two kinds of comparison (check_numeric), so that the cost grows with the evaluations,
  not with the number of weights:
  * directions: `directions` random directions v through every target at once, each one
    pair of evaluations: <grad, v> against (L(x + h v) - L(x - h v)) / 2h (PyTorch's
    gradcheck fast mode, JAX's check_grads). When one fails, each target is tried alone
    along its part of v, which names the targets at fault. A target whose largest
    gradient element is under BLIND times the elements' absolute bound gets a direction
    of its own as well (its elements could not show its error, nor the shared directions).
  * elements: up to `samples` elements per target (all of a smaller target; a seeded
    random choice), each its own central difference, which names the worst element.
    With samples=None, 16 a target while they cost little; on a large model the elements
    compared are limited by an estimate of an evaluation's cost (PAIR_BUDGET element
    operations in all), the smallest targets first, and the report says so. A target that
    fails a direction gets at least NAMING_SAMPLES elements compared, to name one.
- The step is h = eps^(1/3) · max(1, |x|) for float64 (6.06e-6), reported.
- Two evaluators, so that neither can hide a bug of its own: the analytic gradient is
  computed by the numpy evaluator (the fast one `uopgrad eval` uses), the finite
  differences by the reference evaluator (backends/reference: op by op, no fast paths). The
  numpy side runs the gradient graph simplified as `uopgrad eval` does (`simplify="exact"`,
  --literal, runs it as written).
- An element passes when |analytic - numeric| <= ATOL * max(1, |L|) + RTOL * max(|a|, |n|); a
  direction when within DIRECTION_ATOL and DIRECTION_RTOL, tighter (one difference of a
  sum of many terms: a small target's error must show); a NaN anywhere fails.
- A kink (relu's 0, max's tie) within h of the point spoils a difference, not the
  gradient: a failure is tried again with a step 1000 times smaller; when even then the
  one-sided differences disagree (by more than their rounding) and a node that can make a
  kink chooses differently on either side (forward_differences.KinkSites, as the forward
  checks find theirs), L has no derivative there: not compared, counted, the node named.
  Differences that do not settle (h against h/1000, wider steps tried) with no such node
  flipping are rounding noise: "too noisy", not compared. A check with anything too noisy,
  or that compared nothing, is "not checked" (exit 1), never ok (CheckReport.verdict).
- Non-finite values say where they come from: a forward value that is not finite at the
  point is reported first (no gradient is compared), with the node that made it; a
  gradient that is not finite names the node of the gradient graph that made it (tools/nans).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .check_float64 import freeze_detached, to_float64
from .check_numeric import (WIDER_STEPS, Loss, agree, allocate_samples, difference, direction_move, element_move,
                            evaluation_work, inner, random_direction, step_base, step_text)
from .differentiate import differentiate
from ..errors import EvaluationError
from ..core.graph import Graph
from ..core.ops import CALLS, Ops
from .inspect import counted
from .names import cotangent_names, wrt_and_of
from ..core.uop import UOp
from ..core.walks import toposort

__all__ = ["check_gradients", "CheckReport", "TargetCheck", "DirectionCheck", "to_float64", "freeze_detached"]

ANALYTIC_EVALUATOR = "numpy"       # computes the gradient graph (backends/numpy)
NUMERIC_EVALUATOR = "reference"    # computes the finite differences (backends/reference)
RTOL = 1e-4
ATOL = 1e-6
DIRECTION_RTOL = 1e-6
DIRECTION_ATOL = 1e-9
DIRECTIONS = 2
# a target whose largest gradient element is below this many times the element bound's
# absolute part (ATOL · max(1, |L|)) has elements that cannot show an error under 1/BLIND
# of the gradient: it is also compared along a direction of its own (DIRECTION_ATOL is
# 1000 times tighter), where a large target's gradient cannot drown its error
BLIND = 1e3
SAMPLES = 16                # elements a target, by default, while they cost little
NAMING_SAMPLES = 4          # elements compared at least in a target that fails a direction
PAIR_BUDGET = 2e9           # element operations the default element samples may cost in all
CHOOSE_ANOTHER_POINT = "choose another point or direction (-i, or another --seed)"


@dataclass
class DirectionCheck:
    targets: list[str]
    analytic: float          # <grad, v>
    numeric: float           # (L(x + hv) - L(x - hv)) / 2h
    passed: bool
    kink: bool = False
    own: bool = False  # a target's own direction (BLIND), not its part of one through every target
    kink_at: str = ""  # the node that chooses differently on either side (a kink)
    noisy: bool = False  # the differences do not settle: not compared

    @property
    def compared(self) -> bool:
        return not (self.kink or self.noisy)

    @property
    def rel_error(self) -> float:
        if self.kink:
            return 0.0
        err = abs(self.analytic - self.numeric)
        return math.inf if math.isnan(err) else err / max(abs(self.analytic), abs(self.numeric), 1e-300)

    def to_dict(self) -> dict:
        return {"targets": len(self.targets), "analytic": _json_float(self.analytic),
                "numeric": _json_float(self.numeric), "rel_error": _json_float(self.rel_error),
                "passed": self.passed, "kink": self.kink, **({"kink_at": self.kink_at} if self.kink_at else {}),
                **({"noisy": True} if self.noisy else {}), **({"own": True} if self.own else {})}


@dataclass
class TargetCheck:
    name: str
    samples: int                 # elements compared
    max_abs_error: float
    max_rel_error: float
    worst_index: tuple           # the element with the largest relative error
    analytic: float              # gradient at worst_index, from the gradient graph
    numeric: float               # ... and from finite differences
    passed: bool
    note: str = ""               # why a failure may be by design (a CALL's own backward body)
    kinks: int = 0               # sampled elements where L has no derivative (not compared)
    kink_at: str = ""            # the node the first of them chooses differently at
    noisy: int = 0               # sampled elements whose differences are rounding noise (not compared)
    noise: float = 0.0           # the largest gap of their differences at h and h/1000
    direction: DirectionCheck | None = None  # this target alone along a failed direction

    def to_dict(self) -> dict:
        out = {"target": self.name, "samples": self.samples, "max_abs_error": _json_float(self.max_abs_error),
               "max_rel_error": _json_float(self.max_rel_error), "worst_index": list(self.worst_index),
               "analytic": _json_float(self.analytic), "numeric": _json_float(self.numeric), "passed": self.passed,
               "kinks": self.kinks}
        if self.kink_at:
            out["kink_at"] = self.kink_at
        if self.noisy:
            out.update(noisy=self.noisy, noise=_json_float(self.noise))
        if self.direction is not None:
            out["direction"] = self.direction.to_dict()
        return {**out, **({"note": self.note} if self.note else {})}


@dataclass
class CheckReport:
    of: list[str]
    seed: int
    loss: float
    targets: list[TargetCheck]
    simplify: str | None = "tinygrad"  # how the gradient graph was evaluated (evaluate_graph's simplify)
    directions: list[DirectionCheck] = field(default_factory=list)
    step: str = ""
    limited: str = ""            # why fewer elements were compared than asked, if so
    evaluations: int = 0         # reference evaluations made
    not_finite: list[str] = field(default_factory=list)  # where non-finite values come from
    forward_finite: bool = True

    @property
    def passed(self) -> bool:
        return self.verdict == "ok"

    @property
    def verdict(self) -> str:
        """"FAILED" when anything compared failed (or the forward value is not finite), "not
        checked" when anything was too noisy or nothing was compared (every element and
        direction at a kink), else "ok", as the forward checks decide (forward_check.verdict)."""
        if not (self.forward_finite and all(t.passed for t in self.targets) and all(d.passed for d in self.directions)):
            return "FAILED"
        if self._noisy() or not self._compared_any():
            return "not checked"
        return "ok"

    def _noisy(self) -> list[str]:
        return ([t.name for t in self.targets if t.noisy or (t.direction is not None and t.direction.noisy)]
                + (["a direction through every target"] if any(d.noisy for d in self.directions) else []))

    def _compared_any(self) -> bool:
        """Whether any element or direction was compared (or there was none to compare: every
        target empty)."""
        moved = [t for t in self.targets if t.samples or t.kinks or t.noisy or t.direction is not None]
        return (not moved and not self.directions) or any(t.samples for t in self.targets) or any(
            d.compared for d in self.directions)

    def to_dict(self) -> dict:
        return {"of": self.of, "seed": self.seed, "passed": self.passed, "verdict": self.verdict, "rtol": RTOL,
                "atol": ATOL,
                "dtype": "float64", "evaluators": {"analytic": ANALYTIC_EVALUATOR, "numeric": NUMERIC_EVALUATOR},
                "simplified": self.simplify or "no", "loss": _json_float(self.loss), "step": self.step,
                "forward_finite": self.forward_finite, "evaluations": self.evaluations,
                "directions": [d.to_dict() for d in self.directions],
                **({"limited": self.limited} if self.limited else {}),
                **({"not_finite": self.not_finite} if self.not_finite else {}),
                "targets": [t.to_dict() for t in self.targets]}

    def lines(self) -> list[str]:
        if not self.forward_finite:
            return not_finite_lines(f"L = {self.loss}", self.not_finite, "gradient")
        width = max([12, *(len(t.name) for t in self.targets)])
        out = [f"{'target':<{width}} {'samples':>7} {'max abs err':>12} {'max rel err':>12}  worst at"]
        out += [_target_line(t, width) for t in self.targets]
        if self.directions:
            errors = " / ".join(_direction_error(d) for d in self.directions)
            out.append(f"directions: {counted(len(self.directions), 'random direction')} through every target, "
                       f"rel err {errors}  {_status(self.directions)}")
        out.append(f"step: {self.step}")
        out += [f"note: {t.name}: {t.note}" for t in self.targets if t.note]
        out += [f"note: {t.name}: {counted(t.kinks, 'sampled element')} at a kink (the one-sided differences "
                f"disagree; {t.kink_at} chooses differently on either side), not compared"
                for t in self.targets if t.kinks]
        out += [f"note: {t.name}: {counted(t.noisy, 'sampled element')} too noisy: not compared (the finite "
                f"differences do not settle: those at steps h and h/1000 differ by up to {t.noise:.3g}; steps up "
                f"to {max(WIDER_STEPS):g}h tried): float64 rounding of the graph at this point is larger than any "
                f"error they could show" for t in self.targets if t.noisy]
        sites = [d.kink_at for d in (*self.directions, *(t.direction for t in self.targets if t.direction))
                 if d.kink_at]
        out += [f"note: a direction at a kink, where {sites[0]} chooses differently on either side: not compared"
                ] if sites else []
        out += [f"note: {self.limited}"] if self.limited else []
        out += self.not_finite
        out.append(f"evaluators: analytic by the {ANALYTIC_EVALUATOR} evaluator on the gradient graph "
                   f"{_HOW_EVALUATED[self.simplify]}, finite differences by the {NUMERIC_EVALUATOR} evaluator (op by op)")
        verdict = self.verdict
        if verdict == "FAILED":
            failed = [t.name for t in self.targets if not t.passed] or ["a direction through every target"]
            out.append(f"FAILED: {', '.join(failed)}")
        elif verdict == "not checked":
            noisy = self._noisy()
            why = f"{', '.join(noisy)}: differences too noisy" if noisy else "every element and direction at a kink"
            out.append(not_checked_line(why))
        else:
            out.append(f"ok: gradients of {', '.join(self.of)} match finite differences (float64)")
        return out


def _status(compared: list) -> str:
    """FAILED, ok, or "not compared" (every one at a kink or too noisy)."""
    if not all(c.passed for c in compared):
        return "FAILED"
    return "ok" if any(c.compared for c in compared) else "not compared"


def _direction_error(d: DirectionCheck) -> str:
    return "kink" if d.kink else "too noisy" if d.noisy else f"{d.rel_error:.2e}"


def not_checked_line(why: str) -> str:
    """The verdict of every check (`check`, `--transpose`, `--hvp`, `--against`) that
    compared nothing, or too little to say ok: why, and what to do."""
    return f"not checked: {why}, nothing compared there: {CHOOSE_ANOTHER_POINT}"


def _target_line(t: TargetCheck, width: int) -> str:
    skipped = not t.samples and (t.kinks or t.noisy) and not (t.direction and t.direction.compared)
    verdict = "FAILED" if not t.passed else "not compared" if skipped else "ok"
    along = ""
    if t.direction is not None:
        error = _direction_error(t.direction) if not t.direction.compared else f"rel err {t.direction.rel_error:.2e}"
        along = f"  alone along {'a direction of its own' if t.direction.own else 'the direction'}: {error}"
    if not t.samples:
        why = ("the directions only" if not (t.kinks or t.noisy) else
               ", ".join(part for part in (t.kinks and "at a kink", t.noisy and "too noisy") if part))
        return f"{t.name:<{width}} {0:>7} {'-':>12} {'-':>12}  (no element compared: {why}){along}  {verdict}"
    where = "[" + ",".join(map(str, t.worst_index)) + "]"
    return (f"{t.name:<{width}} {t.samples:>7} {t.max_abs_error:>12.3e} {t.max_rel_error:>12.3e}  "
            f"{where} analytic {t.analytic:.6g} numeric {t.numeric:.6g}{along}  {verdict}")


_HOW_EVALUATED = {"tinygrad": "simplified as tinygrad runs it (--literal: as written)",
                  "exact": "as written (--literal)",
                  None: "as written"}


def _json_float(x: float):
    return x if math.isfinite(x) else repr(x)


def planned_evaluations(graph: Graph, wrt: Sequence[str], samples: int | None, directions: int,
                        of: Sequence[str] | None = None) -> int:
    """How many evaluations check_gradients makes when all goes well (a progress bar's
    length; failures add their retries)."""
    wrt, of = wrt_and_of(wrt, of)
    names = [n for n in wrt if n in graph.input_names]
    sizes = {n: _size(graph.input(n)) for n in names}
    outputs = [graph.outputs[n] for n in (of or graph.outputs) if n in graph.outputs]
    allocation, _ = _allocation(sizes, samples, outputs, {})
    return 1 + 2 * directions * (1 if any(sizes.values()) else 0) + 2 * sum(allocation.values())


def check_gradients(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None,
                    inputs: Mapping | None = None, seed: int = 0, samples: int | None = None,
                    progress: Callable[[int], None] | None = None, simplify: str | None = "tinygrad",
                    directions: int = DIRECTIONS) -> CheckReport:
    """Compare the gradients of `graph` with respect to `wrt` with finite differences.
    `inputs` maps input names to arrays, checked as evaluate_graph checks them (a name the
    graph lacks, a list, an array of another shape or dtype are refused), but for a float
    input any float array: the check computes in float64, at that point; missing ones are
    random (`cotangent_<output>` too, the weights of a non-scalar output).
    `samples`: elements compared one by one per target (None: 16 while they cost little).
    `progress(n)` is called after every n evaluations. `simplify` is how the gradient graph
    is evaluated (as evaluate_graph's: "tinygrad", "exact" or None)."""
    import numpy as np
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import evaluate_graph
    from .values import index_ranges_for, random_value

    wrt, of = wrt_and_of(wrt, of)
    if samples is not None and samples < 0:
        raise EvaluationError(f"samples must be at least 0, got {samples}")
    if directions < 0:
        raise EvaluationError(f"directions must be at least 0, got {directions}")
    if samples == 0 and directions == 0:
        raise EvaluationError("nothing to compare: give at least one sample or one direction")
    grad_graph, report = differentiate(graph, wrt, of, cotangent="input")
    of = report.of
    given = checked_inputs(grad_graph, inputs or {}, float_points=True)  # a misspelt name is no random value
    ranges = index_ranges_for(graph.outputs.values(), [n for n in grad_graph.inputs if n.arg not in given])
    values = {n.arg: np.asarray(given[n.arg]) if n.arg in given else random_value(n, seed, ranges)
              for n in grad_graph.inputs}
    values64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in values.items()}

    forward = to_float64(Graph({name: graph.outputs[name] for name in of}, inputs=graph.inputs))
    outputs = freeze_detached(list(forward.outputs.values()), values64)
    cotangent = cotangent_names(graph, of)  # cotangent_<y>, or cotangent2_<y> where the graph has that input
    cotangents = [values64.get(cotangent[name], 1.0) for name in of]
    targets = list(report.wrt)
    from .forward_differences import KinkSites  # (it reads this module's tolerances)
    sites = KinkSites(graph, [graph.outputs[name] for name in of], targets, feed=None)
    loss = Loss(outputs, cotangents, values64, targets, progress, sites)
    h = step_base(np.float64)
    result = CheckReport(of, seed, loss.base, [], simplify, step=step_text(np.float64))
    if not math.isfinite(loss.base):
        result.forward_finite = False
        result.not_finite = _forward_nans(graph, of, values)
        result.evaluations = loss.evaluations
        return result

    result.not_finite = _own_dtype_overflow(graph, of, values, simplify)
    promoted: dict = {}
    grad64 = to_float64(grad_graph, promoted)
    analytic = evaluate_graph(grad64, values64, simplify=simplify)
    gradients = {name: np.asarray(analytic[f"grad_{name}"], dtype=np.float64) for name in targets}
    bad = [name for name in targets if not np.all(np.isfinite(gradients[name]))]
    if bad:
        result.not_finite += _gradient_nans(grad_graph, grad64, promoted, values64, bad)

    scale = ATOL * max(1.0, abs(loss.base))
    direction_scale = DIRECTION_ATOL * max(1.0, abs(loss.base))
    result.directions, attributed = _directions(loss, gradients, values64, targets, h, seed, directions, bad,
                                                direction_scale)
    if directions:
        attributed.update(_alone_where_elements_are_blind(loss, gradients, values64, targets, h, seed, scale,
                                                          direction_scale, bad, attributed))
    sizes = {name: int(values64[name].size) for name in targets}
    allocation, result.limited = _allocation(sizes, samples, outputs, attributed)
    rng = np.random.default_rng(seed)
    for name in targets:
        check = _check_target(name, gradients[name], values64, loss, scale, rng, allocation[name], h)
        check.direction = attributed.get(name)
        if check.direction is not None and not check.direction.passed:
            check.passed = False
        result.targets.append(check)
    for target in result.targets:
        if not target.passed:
            target.note = custom_backward_note(graph, of, graph.input(target.name))
    result.evaluations = loss.evaluations
    return result


def _directions(loss: Loss, gradients: dict, feed: dict, targets: list[str], h: float, seed: int, count: int,
                bad: list[str], scale: float) -> tuple[list[DirectionCheck], dict]:
    """`count` random directions through every target; on the first that fails, each
    target alone along its part of it ({target: DirectionCheck})."""
    import numpy as np
    rng = np.random.default_rng([seed, 1])
    checks, attributed = [], {}
    moving = [name for name in targets if feed[name].size]
    if not moving:
        return checks, attributed
    for _ in range(count):
        v = random_direction(feed, moving, rng)
        check = _along(loss, gradients, feed, v, h, scale)
        checks.append(check)
        if not check.passed and not attributed:
            for name in moving:
                if name not in bad:  # a non-finite gradient has failed already
                    attributed[name] = _along(loss, gradients, feed, {name: v[name]}, h, scale)
    return checks, attributed


def _alone_where_elements_are_blind(loss: Loss, gradients: dict, feed: dict, targets: list[str], h: float,
                                    seed: int, scale: float, direction_scale: float, bad: list[str],
                                    attributed: dict) -> dict:
    """{target: DirectionCheck} along a direction of its own, for each target (not tried
    alone already) whose gradient is too small beside |L| for its elements to show an
    error (BLIND): a weight decay term beside a data term thousands of times larger, whose
    gradient is off by half, passed its elements' bound and was drowned in the directions
    through every target."""
    import numpy as np
    blind = [name for name in targets if name not in attributed and name not in bad and feed[name].size
             and float(np.max(np.abs(gradients[name]))) < BLIND * scale]
    if not blind or (len(blind) == 1 and len(targets) == 1):  # one target: the directions were its own
        return {}
    rng = np.random.default_rng([seed, 2])
    return {name: _along(loss, gradients, feed, random_direction(feed, [name], rng), h, direction_scale, own=True)
            for name in blind}


def _along(loss: Loss, gradients: dict, feed: dict, v: dict, h: float, scale: float,
           own: bool = False) -> DirectionCheck:
    analytic, _ = inner(gradients, v)
    move = direction_move(feed, v)
    settle = (ATOL * max(1.0, abs(loss.base)), RTOL)  # noise: not settled to an element's tolerance
    found = difference(loss, move, analytic, scale, DIRECTION_RTOL, h, settle)
    passed = not found.compared or agree(analytic, found.numeric, scale, DIRECTION_RTOL)
    return DirectionCheck(list(v), analytic, found.numeric, passed, found.kink, own, found.kink_at, found.noisy)


def _allocation(sizes: dict, samples: int | None, outputs: list, attributed: dict) -> tuple[dict, str]:
    """{target: elements to compare}, and a note when the default was limited by cost."""
    if samples is not None:
        return {name: min(size, samples) for name, size in sizes.items()}, ""
    work = evaluation_work(outputs)
    pairs = int(PAIR_BUDGET // max(work, 1))  # no outputs: a --of naming none, refused by check_gradients
    allocation = allocate_samples(sizes, SAMPLES, pairs)
    for name, check in attributed.items():  # name the worst element of a target at fault
        if not check.passed:
            allocation[name] = max(allocation[name], min(sizes[name], NAMING_SAMPLES))
    wanted = sum(min(size, SAMPLES) for size in sizes.values())
    given = sum(allocation.values())
    if given >= wanted:
        return allocation, ""
    return allocation, (f"{given} elements compared one by one, not the default's {wanted} (up to {SAMPLES} a target; "
                        f"the targets hold {sum(sizes.values()):,}), as one evaluation costs about {work:.1e} element "
                        f"operations; the directions cover every element (--samples N compares up to N a target)")


def custom_backward_note(graph: Graph, of: list[str], target: UOp) -> str:
    """A gradient that flows through a CALL's own backward body (a straight-through
    estimator, say) is whatever that body says, not the derivative of the forward: name
    such calls, so a failure there reads as what it may well be, a design choice."""
    depends: set[UOp] = {target}
    calls, bodies = [], []
    for node in toposort([graph.outputs[name] for name in of], with_call_grads=False):
        if node is not target and any(s in depends for s in node.src):
            depends.add(node)
            if node.op == Ops.CALL and node.arg.grad is not None:
                calls.append(node.arg.name)
            if node.op in CALLS:
                bodies.append(node.src[0])
    # inside a function the target is a slot: name every CALL of such a body (and of the
    # bodies it calls) that has a backward body of its own
    calls += [node.arg.name for node in toposort(bodies, with_call_grads=False)
              if node.op == Ops.CALL and node.arg.grad is not None]
    if not calls:
        return ""
    names = ", ".join(dict.fromkeys(calls))
    return (f"its gradient passes through CALL {names}, whose backward body is given, not derived: "
            f"finite differences of the forward need not match it")


def _check_target(name, analytic, feed, loss, scale, rng, count: int, h: float) -> TargetCheck:
    import numpy as np
    x = feed[name]
    if count == 0:  # an empty target, or one the directions alone cover
        return TargetCheck(name, 0, 0.0, 0.0, (), math.nan if x.size else 0.0, math.nan if x.size else 0.0, True)
    picks = np.arange(x.size) if x.size <= count else np.sort(rng.choice(x.size, count, replace=False))
    worst = (-1.0, (), math.nan, math.nan)  # relative error, index, analytic, numeric
    max_abs, passed, kinks, noisy, noise, kink_at = 0.0, True, 0, 0, 0.0, ""
    for flat in picks:
        index = tuple(int(i) for i in np.unravel_index(int(flat), x.shape))
        a = float(analytic[index])
        step = h * max(1.0, abs(float(x[index]))) if math.isfinite(float(x[index])) else h
        move = element_move(feed, name, index)
        found = difference(loss, move, a, scale, RTOL, step)
        if found.kink:
            kinks, kink_at = kinks + 1, kink_at or found.kink_at
            continue
        if found.noisy:
            noisy, noise = noisy + 1, max(noise, found.noise)
            continue
        numeric = found.numeric
        ok = agree(a, numeric, scale, RTOL)
        abs_err = abs(a - numeric)
        rel_err = abs_err / max(abs(a), abs(numeric), 1e-300)
        if math.isnan(abs_err):
            abs_err = rel_err = math.inf
        passed = passed and ok
        max_abs = max(max_abs, abs_err)
        if rel_err > worst[0]:
            worst = (rel_err, index, a, numeric)
    if worst[0] < 0:  # every sample at a kink or too noisy
        worst = (0.0, (), math.nan, math.nan)
    return TargetCheck(name, len(picks) - kinks - noisy, max_abs, worst[0], worst[1], worst[2], worst[3], passed,
                       kinks=kinks, kink_at=kink_at, noisy=noisy, noise=noise)


def _size(node: UOp) -> int:
    n = 1
    for s in node.shape:
        n *= s
    return n


# ----------------------------------------------------------------------------- non-finite values

def not_finite_lines(value: str, found: list[str], compared: str) -> list[str]:
    """The report of every check (`check`, `--transpose`, `--hvp`, `--against`) at a point
    where the forward value is not finite: that first, where it comes from, nothing compared."""
    return [f"the forward value is not finite at these inputs ({value}): no {compared} compared", *found,
            "FAILED: the forward value is not finite"]


def forward_not_finite(graph: Graph, of: Sequence[str], values: Mapping) -> tuple[str, list[str]] | None:
    """(the outputs' values in brief, where the non-finite value comes from) when outputs
    `of` of `graph` are not finite at `values` in float64, as `check` computes them; None
    when they are finite. What the forward-mode checks say before comparing anything."""
    import numpy as np
    from ..backends.reference import reference_evaluate
    forward = to_float64(Graph({name: graph.outputs[name] for name in of}, inputs=graph.inputs))
    feed = {n.arg: np.asarray(values[n.arg], dtype=np.float64) if n.dtype.is_float else values[n.arg]
            for n in forward.inputs}
    with np.errstate(all="ignore"):
        results = [np.asarray(r) for r in reference_evaluate(list(forward.outputs.values()), feed)]
    bad = [(name, r) for name, r in zip(of, results) if not np.all(np.isfinite(r))]
    if not bad:
        return None
    brief = ", ".join(f"{name} = {float(r)}" if r.ndim == 0 else
                      f"{name}: {int(np.sum(~np.isfinite(r)))} of {r.size} elements not finite" for name, r in bad)
    own = {n.arg: np.asarray(values[n.arg]).astype(n.dtype.np, copy=False) for n in graph.inputs}
    return brief, _forward_nans(graph, [name for name, _ in bad], own)


def _forward_nans(graph: Graph, of: list[str], values: Mapping) -> list[str]:
    """Where the forward's non-finite value comes from, in the file's own dtypes."""
    from .nans import hunt_nans
    forward = Graph({name: graph.outputs[name] for name in of}, inputs=graph.inputs)
    finding = hunt_nans(forward, values)
    if finding is None:  # finite in the file's dtypes: float64 made it (an overflow of float64 itself)
        return ["note: in the file's own dtypes the forward value is finite; in float64 it is not"]
    return finding.lines()


def _own_dtype_overflow(graph: Graph, of: list[str], values: Mapping, simplify) -> list[str]:
    """A note when the forward value is finite in float64 but not in the file's own dtypes
    (a float16 model's overflow): what is checked is the rules, in a float64 copy, and a
    passing check would otherwise say nothing of a loss the model itself computes as inf."""
    import numpy as np
    from ..backends.numpy import evaluate_graph
    if all(node.dtype.name == "float64" or not node.dtype.is_float for node in graph.inputs):
        return []
    forward = Graph({name: graph.outputs[name] for name in of}, inputs=graph.inputs)
    own = {node.arg: np.asarray(values[node.arg]).astype(node.dtype.np, copy=False) for node in graph.inputs}
    with np.errstate(all="ignore"):
        outputs = evaluate_graph(forward, own, simplify=simplify)
    bad = [name for name, value in outputs.items() if not np.all(np.isfinite(np.asarray(value, dtype=np.float64)))]
    if not bad:
        return []
    return [f"note: in the file's own dtypes {', '.join(bad)} is not finite at these inputs (the checked float64 "
            f"copy's is): the gradient rules were checked, not the model's overflow; `uopgrad eval --debug-nans` "
            f"names the node that makes it"]


def _gradient_nans(grad_graph: Graph, grad64: Graph, promoted: dict, values64: Mapping, bad: list[str]) -> list[str]:
    """Where a non-finite analytic gradient comes from: the node of the gradient graph (as
    `uopgrad diff` writes it) that first makes one, found in the float64 graph checked."""
    from .nans import hunt_nans
    original = {new: old for old, new in promoted.items()}
    outputs = Graph({f"grad_{n}": grad64.outputs[f"grad_{n}"] for n in bad}, inputs=grad64.inputs)
    finding = hunt_nans(outputs, values64, shown=(grad_graph, original))
    head = f"the analytic gradient of {', '.join(bad)} is not finite"
    if finding is None:
        return [f"note: {head}; the gradient graph as written is finite (the simplified graph is not: --literal)"]
    return [f"note: {head} (numbered as in the gradient graph, `uopgrad diff ... | uopgrad print -`):",
            *finding.lines()]
