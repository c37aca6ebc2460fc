"""The finite-difference side of the forward-mode checks (`check --hvp`, `check --against`):
a value given by a graph (H v, J v) against central differences of another graph's outputs
along the same direction v, with what can spoil a difference told apart from a wrong value.

    along = Along(evaluate, move)                 # t -> outputs at x + t v, each t evaluated once
    targets = against_differences(along, {"hvp_w": a}, {"hvp_w": "grad_w"}, h, sites)

A comparison that fails at the step h is tried, as `check` tries its own (check_numeric):
- with a step KINK_STEP_FACTOR times smaller: a kink within the first step only;
- as a kink at the point: the one-sided differences disagree and the value lies between
  them. Only where the graph has an op that can make one (`KinkSites`: MAX, a comparison,
  TRUNC, a cast to an integer) and one of them chooses differently on the two sides of the
  point: that node is named. A smooth graph has no kink, whatever its differences say;
- with steps WIDER_STEPS times h (less rounding noise, more truncation);
- as rounding noise: when the differences themselves do not settle (those at h and at
  h KINK_STEP_FACTOR disagree, as a smooth f's never do beyond rounding) and no kink site
  chooses differently within h of the point, the reference is noise and cannot judge the
  value: the target is "too noisy: not compared" (logistic regression at b = 25, where
  1 - sigmoid cancels in float64), neither a kink nor a pass, and the check is not ok.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..core.ops import COMPARISON, Ops
from ..core.uop import UOp
from .check import ATOL, RTOL
from .check_numeric import KINK_STEP_FACTOR, WIDER_STEPS


@dataclass
class Target:
    name: str
    max_abs_error: float
    max_rel_error: float
    passed: bool
    kink: bool = False      # the function has no derivative at the point along v: not compared
    kink_at: str = ""       # the node that chooses differently on the two sides of the point
    noisy: bool = False     # rounding noise hides any error the tolerance promises: not compared
    noise: float = 0.0      # where noisy: how far the differences at h and h/1000 are apart
    still: bool = False     # the direction v is 0: f(x + h v) = f(x - h v), nothing compared

    @property
    def compared(self) -> bool:
        return not (self.kink or self.noisy or self.still)

    def to_dict(self) -> dict:
        found = {"target": self.name, "max_abs_error": json_float(self.max_abs_error),
                 "max_rel_error": json_float(self.max_rel_error), "passed": self.passed, "kink": self.kink}
        if self.kink_at:
            found["kink_at"] = self.kink_at
        if self.noisy:
            found.update(noisy=True, noise=json_float(self.noise))
        if self.still:
            found["direction_zero"] = True
        return found


def standing_still(labels, directions) -> list[Target] | None:
    """Targets "not compared" when every direction is 0 (tangents given as 0): 0 against 0
    tells nothing; else None."""
    import numpy as np
    if any(np.any(np.asarray(v) != 0) for v in directions):
        return None
    return [Target(label, 0.0, 0.0, True, still=True) for label in labels]


def json_float(x: float):
    return x if math.isfinite(x) else repr(x)


class Along:
    """t -> {output: value} of a graph at the point moved by t along v, each t evaluated once."""

    def __init__(self, evaluate: Callable[[float], dict]):
        self._evaluate, self._seen = evaluate, {}

    def __call__(self, t: float) -> dict:
        if t not in self._seen:
            self._seen[t] = self._evaluate(t)
        return self._seen[t]


def against_differences(along: Along, analytic: Mapping, keys: Mapping, h: float,
                        sites: "KinkSites") -> list[Target]:
    """Each analytic[label] against (f(x + h v) - f(x - h v)) / 2h of output keys[label] of
    `along`, with the retries the module describes."""
    import numpy as np
    targets = []
    for label, a in analytic.items():
        a, key = np.asarray(a, dtype=np.float64), keys[label]
        first = compared(label, a, _central(along, key, h))
        targets.append(first if first.passed else _retried(along, label, a, key, h, first, sites))
    return targets


def _retried(along: Along, label: str, a, key: str, h: float, first: Target, sites: "KinkSites") -> Target:
    import numpy as np
    small = h * KINK_STEP_FACTOR
    closer = compared(label, a, _central(along, key, small))
    if closer.passed:  # a kink within the first step only
        return closer
    center = along(0.0)[key]
    with np.errstate(all="ignore"):  # inf - inf where f overflows beside the point: a nan, which fails
        down, up = (center - along(-small)[key]) / small, (along(small)[key] - center) / small
    if not compared(label, down, up).passed and _between(a, down, up):
        site = sites.flipped(-small, small)
        if site:
            return Target(label, math.nan, math.nan, True, kink=True, kink_at=site)
    for factor in WIDER_STEPS:  # less rounding noise, more truncation
        wider = compared(label, a, _central(along, key, h * factor))
        if wider.passed:
            return wider
    at_h, at_small = _central(along, key, h), _central(along, key, small)
    settled = compared(label, at_h, at_small)
    finite = math.isfinite(settled.max_abs_error) and bool(np.all(np.isfinite(a)))  # a nan H v is wrong, not noise
    if not settled.passed and finite and not sites.flipped(-h, h):
        # a smooth f's differences at h and h/1000 agree to rounding; rounding noise's
        # grow 1000 times: the reference itself is noise, and cannot judge the value
        return Target(label, first.max_abs_error, first.max_rel_error, False, noisy=True,
                      noise=settled.max_abs_error)
    return first


def _central(along: Along, key: str, h: float):
    import numpy as np
    with np.errstate(all="ignore"):
        return (along(h)[key] - along(-h)[key]) / (2 * h)


def _bound(a, numeric):
    import numpy as np
    return ATOL * max(1.0, float(np.max(np.abs(a), initial=0.0))) + RTOL * np.maximum(np.abs(a), np.abs(numeric))


def compared(name: str, a, numeric) -> Target:
    """`a` against `numeric` elementwise, with `check`'s tolerances (a nan fails)."""
    import numpy as np
    with np.errstate(all="ignore"):
        err = np.abs(a - numeric)
        passed = bool(np.all(err <= _bound(a, numeric)))  # False with a NaN anywhere
        rel = err / np.maximum(np.maximum(np.abs(a), np.abs(numeric)), 1e-300)
    return Target(name, float(np.max(err, initial=0.0)), float(np.max(rel, initial=0.0)), passed)


def _between(a, down, up) -> bool:
    """Whether every element of `a` lies between the one-sided differences (to check's
    absolute tolerance): the derivative a subgradient-like rule may give at a kink."""
    import numpy as np
    slack = ATOL * max(1.0, float(np.max(np.abs(a), initial=0.0)))
    return bool(np.all((np.minimum(down, up) - slack <= a) & (a <= np.maximum(down, up) + slack)))


# ----------------------------------------------------------------------------- kinks

class KinkSites:
    """The nodes of a graph that can make a kink (a jump of a derivative) on the way from
    the inputs `wrt` to `roots`, and which of them choose differently at two points.

    `feed(t)` gives the graph's inputs at x + t v. A node inside a function body is not
    evaluated: the call that runs it, on the path, stands for it."""

    def __init__(self, graph, roots: Sequence[UOp], wrt: Sequence[str], feed: Callable[[float], dict]):
        from .check_float64 import to_float64
        from ..core.graph import Graph
        self._number = {node: i for i, node in enumerate(graph.nodes())}
        self._main, self._in_bodies = _sites(roots, set(wrt))
        promoted: dict = {}
        to_float64(Graph({f"root{i}": r for i, r in enumerate(roots)}, inputs=graph.inputs), promoted)
        self._promoted, self._feed = promoted, feed

    def __bool__(self) -> bool:
        return bool(self._main or self._in_bodies)

    def along(self, feed: Callable[[float], dict]) -> "KinkSites":
        """The same sites, choosing at the points `feed(t)` gives (`check` moves one element,
        then another: the sites are found once)."""
        import copy
        moved = copy.copy(self)
        moved._feed = feed
        return moved

    def flipped(self, t0: float, t1: float) -> str:
        """The first site whose choice differs between x + t0 v and x + t1 v, described ("" none)."""
        import numpy as np
        from ..backends.reference import reference_evaluate
        if self._main:
            read = [[self._promoted[s] for s in _choice_nodes(node)] for node in self._main]
            flat = list(dict.fromkeys(n for nodes in read for n in nodes))
            with np.errstate(all="ignore"):
                before = dict(zip(flat, reference_evaluate(flat, self._feed(t0))))
                after = dict(zip(flat, reference_evaluate(flat, self._feed(t1))))
            for node, nodes in zip(self._main, read):
                if not np.array_equal(_choice(node, [before[n] for n in nodes]),
                                      _choice(node, [after[n] for n in nodes])):
                    return self.describe(node)
        if self._in_bodies:
            call, inner = self._in_bodies[0]
            return f"{inner.op} inside the body of {self.describe(call)}"
        return ""

    def describe(self, node: UOp) -> str:
        index = self._number.get(node)
        shape = ",".join(map(str, node.shape or ()))
        meta = node.meta
        about = [part for part in (meta and meta.name, meta and meta.loc and f"at {meta.loc}") if part]
        return (f"{'' if index is None else f'%{index} '}{node.op} {node.dtype.name}[{shape}]"
                f"{' (' + ', '.join(about) + ')' if about else ''}")


def _can_kink(node: UOp) -> bool:
    """Whether the op's value or derivative jumps somewhere along a float input."""
    if node.op in (Ops.MAX, Ops.TRUNC) or node.op in COMPARISON:
        return any(s.dtype.is_float for s in node.src)
    if node.op == Ops.REDUCE:
        return node.arg[0] == "MAX" and node.dtype.is_float
    if node.op in (Ops.CAST, Ops.BITCAST):
        return node.src[0].dtype.is_float and not node.dtype.is_float
    return False


def _choice_nodes(node: UOp) -> tuple:
    """What a site's choice is read from: MAX its two sides, REDUCE MAX its source and result."""
    if node.op == Ops.MAX:
        return node.src
    if node.op == Ops.REDUCE:
        return (node.src[0], node)
    return (node,)


def _choice(node: UOp, values: list):
    """Which way a site goes: MAX which side wins, REDUCE MAX where the maximum is, a
    comparison, TRUNC or integer cast its value."""
    import numpy as np
    if node.op == Ops.MAX:
        return np.sign(values[0] - values[1])
    if node.op == Ops.REDUCE:
        return values[0] == values[1]
    return np.asarray(values[0])


def _sites(roots: Sequence[UOp], wrt: set) -> tuple[list, list]:
    """(main-scope sites that depend on `wrt`, [(call, site in its body)] for the calls on
    the path whose bodies hold one)."""
    from ..core.walks import scope_sources, scope_toposort, toposort
    depends: dict = {}
    main, in_bodies = [], []
    for node in scope_toposort(list(roots)):
        moved = (node.op == Ops.PARAM and node.arg in wrt) or any(depends.get(s) for s in scope_sources(node))
        depends[node] = moved
        if not moved:
            continue
        if _can_kink(node):
            main.append(node)
        elif node.op in (Ops.CALL, Ops.FUNCTION):
            inner = next((n for n in toposort([node.src[0]], with_call_grads=False) if _can_kink(n)), None)
            if inner is not None:
                in_bodies.append((node, inner))
    return main, in_bodies
