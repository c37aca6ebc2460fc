"""The finite-difference side of `check` (tools/check.py): the loss as a function of the
inputs, evaluated by the reference evaluator, and the differences taken of it.

- `Loss`: L(inputs) = Σ cotangent · output, in float64. The first evaluation keeps the
  values that later ones can reuse: changing only the targets S, every node that depends
  on none of S keeps its value, so an evaluation recomputes only the nodes downstream of S
  (a weight of the last block costs the last block, not the model).
- The step of a difference is h = eps^(1/3) · max(1, |x|), eps that of the dtype computed
  in (float64: 6.06e-6): the step that balances truncation (h²) and rounding (eps/h).
- `directional`: (L(x + h v) - L(x - h v)) / 2h for a direction v over any set of targets,
  compared with <grad, v>: one pair of evaluations checks every target at once.
  v = z · max(1, |x|) elementwise, z standard normal scaled to unit length over all the
  elements moved, so the pair moves the point as far as one element's difference does.
- `element`: the central difference of one element, as before.
A difference that fails is tried again as the forward checks try theirs
(tools/forward_differences): with a step KINK_STEP_FACTOR times smaller (a kink of relu or
max within the first step); as a kink at the point, when the two one-sided differences then
disagree and a node that can make one (`KinkSites`) chooses differently on either side, that
node named; with wider steps; and as rounding noise, "too noisy", when the differences at h
and h·KINK_STEP_FACTOR disagree with no kink site flipping within h. Kinks and noise are not
compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..core.ops import Ops
from ..core.walks import scope_toposort

KINK_STEP_FACTOR = 1e-3  # the second, smaller step after a failure
# a kink's one-sided differences disagree by the same at both steps, a smooth function's by
# KINK_STEP_FACTOR times less at the smaller: a kink keeps more than this share of the gap
KINK_GAP_KEPT = 0.1
WIDER_STEPS = (10.0, 100.0)  # steps tried, times h, where rounding noise spoils the first
ROUNDING = 4 * 2.0 ** -52  # float64 rounding of L, a few eps of |L|, for the one-sided differences' error


def step_base(dtype) -> float:
    """eps^(1/3) of the dtype the differences are computed in (float64: 6.06e-6)."""
    import numpy as np
    return float(np.finfo(dtype).eps) ** (1 / 3)


def step_text(dtype) -> str:
    import numpy as np
    return f"h = {step_base(dtype):.3g} · max(1, |x|) ({np.dtype(dtype).name}: eps^(1/3))"


class Loss:
    """L(feed) = Σ_i sum(cotangent_i · output_i) by the reference evaluator, reusing the
    first evaluation's values of the nodes that do not depend on what a later one changes."""

    def __init__(self, outputs: list, cotangents: list, feed: Mapping, targets: Sequence[str],
                 progress: Callable[[int], None] | None = None, sites=None):
        self.outputs, self.cotangents, self.feed = outputs, cotangents, dict(feed)
        self.progress, self.sites = progress, sites  # sites: forward_differences.KinkSites of the graph
        self.evaluations = 0
        self._outputs = set(outputs)
        self._order = scope_toposort(outputs)
        self._depends = _dependence(self._order, set(targets))
        self._readers = _readers(self._order)
        self._frontiers: dict[frozenset, list] = {}
        wanted = {frozenset([t]) for t in targets} | {frozenset(targets)}
        keep = {node: None for s in wanted for node in self._frontier(s)}
        self.base = self._evaluate(self.feed, known=None, keep=keep)
        self._kept = keep

    def _frontier(self, changed: frozenset) -> list:
        """The nodes that depend on none of `changed` but are read by one that does, and
        the outputs that depend on none: their values stand when only `changed` moves."""
        found = self._frontiers.get(changed)
        if found is None:
            moved = self._depends
            found = [node for node in self._order if not (moved[node] & changed)
                     and (node in self._outputs or any(moved[r] & changed for r in self._readers.get(node, ())))]
            self._frontiers[changed] = found
        return found

    def flipped_along(self, move: Callable[[float], dict]) -> Callable[[float, float], str]:
        """(t0, t1) -> the kink site choosing differently between the points move(t0) and
        move(t1), described ("" none, and always without sites)."""
        if not self.sites:
            return lambda t0, t1: ""
        return self.sites.along(lambda t: {**self.feed, **move(t)}).flipped

    def __call__(self, changes: Mapping) -> float:
        """L with the inputs in `changes` ({name: array}) replacing the base feed's."""
        kept = self._kept
        known = {node: kept[node] for node in self._frontier(frozenset(changes)) if node in kept}
        return self._evaluate({**self.feed, **changes}, known=known, keep=None)

    def _evaluate(self, feed, known, keep) -> float:
        import numpy as np
        from ..backends.reference import reference_evaluate
        results = reference_evaluate(self.outputs, feed, known=known, keep=keep)
        self.evaluations += 1
        if self.progress is not None:
            self.progress(1)
        with np.errstate(all="ignore"):
            return float(sum(np.sum(c * r) for c, r in zip(self.cotangents, results)))


def _dependence(order: list, targets: set) -> dict:
    """node -> frozenset of the target inputs its value depends on (main scope: a call
    depends on what its args depend on)."""
    from ..core.walks import scope_sources
    depends: dict = {}
    empty = frozenset()
    for node in order:
        if node.op == Ops.PARAM and node.arg in targets:
            depends[node] = frozenset([node.arg])
            continue
        found = empty
        for s in scope_sources(node):
            d = depends[s]
            if d and d is not found:
                found = found | d if found else d
        depends[node] = found
    return depends


def _readers(order: list) -> dict:
    from ..core.walks import scope_sources
    readers: dict = {}
    for node in order:
        for s in scope_sources(node):
            readers.setdefault(s, []).append(node)
    return readers


# ----------------------------------------------------------------------------- differences

@dataclass
class Difference:
    numeric: float          # the derivative by finite differences (nan when at a kink)
    kink: bool = False      # the one-sided differences disagree: no derivative there
    kink_at: str = ""       # the node that chooses differently on either side (a kink)
    noisy: bool = False     # the differences do not settle: rounding noise, not compared
    noise: float = 0.0      # where noisy: how far those at h and h·KINK_STEP_FACTOR are apart

    @property
    def compared(self) -> bool:
        return not (self.kink or self.noisy)


def agree(a: float, b: float, scale: float, rtol: float) -> bool:
    """|a - b| <= scale + rtol · max(|a|, |b|); False when either is NaN."""
    return bool(abs(a - b) <= scale + rtol * max(abs(a), abs(b)))


def difference(loss: Loss, move: Callable[[float], dict], analytic: float, scale: float, rtol: float,
               h: float, settle: tuple[float, float] | None = None) -> Difference:
    """The central difference of L along `move(t)` ({name: array} at parameter t, t = 0 the
    base point), compared with `analytic`; on a failure retried as the module says.
    `settle` (scale, rtol): how far the differences at h and h·KINK_STEP_FACTOR may differ
    and be settled (default: `analytic`'s own tolerance; a direction's is tighter than the
    rounding of the small step's difference, and would call every failure noise)."""
    ahead, behind = _pair(loss, move, h)
    numeric = _quotient(ahead - behind, 2 * h)
    if agree(analytic, numeric, scale, rtol) or not (math.isfinite(numeric) and math.isfinite(analytic)):
        return Difference(numeric)
    small = h * KINK_STEP_FACTOR
    closer = _central(loss, move, small)
    if agree(analytic, closer, scale, rtol):  # the kink was within the first step only
        return Difference(closer)
    if _bent(loss, move, analytic, scale, rtol, h, ahead, behind):
        site = loss.flipped_along(move)(-small, small)
        if site:  # no derivative here: a subgradient is all one can ask
            return Difference(math.nan, kink=True, kink_at=site)
    for factor in WIDER_STEPS:  # less rounding noise, more truncation
        wider = _central(loss, move, h * factor)
        if agree(analytic, wider, scale, rtol):
            return Difference(wider)
    # a smooth L's differences at h and h/1000 agree to rounding; rounding noise's do not:
    # the reference is noise and cannot judge the gradient (a nan difference is no noise)
    if math.isfinite(closer) and not agree(numeric, closer, *(settle or (scale, rtol))) and not (
            loss.flipped_along(move)(-h, h)):
        return Difference(numeric, noisy=True, noise=abs(numeric - closer))
    return Difference(numeric)


def _bent(loss: Loss, move, analytic: float, scale: float, rtol: float, h: float, ahead: float,
          behind: float) -> bool:
    """Whether L looks bent at the point along `move`: the one-sided differences at the small
    step disagree, by as much as at h (a curvature's disagreement shrinks with the step, a
    kink's does not), and `analytic` lies between them (to within their rounding: a rule's
    subgradient is often one of them)."""
    small = h * KINK_STEP_FACTOR
    down, up = _one_sided(loss, move, small)
    base = loss.base
    wide = _quotient((ahead - base) - (base - behind), h)  # the one-sided differences' gap at step h
    rounding = ROUNDING * max(1.0, abs(base)) / small      # of a one-sided difference at the small step
    # a kink's gap must stand out of the rounding of the two differences it is the gap of:
    # where |L| dwarfs the slope along the move, both are rounding alone, and a wrong gradient
    # between two such numbers is no subgradient (the first step's failure stands)
    gap = abs(up - down)
    bent = not agree(down, up, scale, rtol) and gap > KINK_GAP_KEPT * abs(wide) and gap > 2 * rounding
    return bent and min(down, up) - scale - rounding <= analytic <= max(down, up) + scale + rounding


def _pair(loss: Loss, move, h: float) -> tuple[float, float]:
    """(L(move(h)), L(move(-h)))."""
    return loss(move(h)), loss(move(-h))


def _quotient(a: float, b: float) -> float:
    import numpy as np
    with np.errstate(all="ignore"):  # inf or nan inputs give a nan difference, reported as such
        return float(np.float64(a) / b)


def _central(loss: Loss, move, h: float) -> float:
    import numpy as np
    with np.errstate(all="ignore"):  # inf or nan inputs give a nan difference, reported as such
        return float((loss(move(h)) - loss(move(-h))) / (2 * h))


def _one_sided(loss: Loss, move, h: float) -> tuple[float, float]:
    import numpy as np
    base = loss.base
    with np.errstate(all="ignore"):
        return float((base - loss(move(-h))) / h), float((loss(move(h)) - base) / h)


def element_move(feed: Mapping, name: str, index: tuple) -> Callable[[float], dict]:
    """t -> {name: x with x[index] moved by t} (its step: h · max(1, |x[index]|))."""
    import numpy as np
    x = feed[name]
    original = float(x[index])

    def move(t: float) -> dict:
        shifted = np.array(x, copy=True)
        shifted[index] = original + t
        return {name: shifted}
    return move


def direction_move(feed: Mapping, directions: Mapping) -> Callable[[float], dict]:
    """t -> {name: x + t · v} for every target in `directions` ({name: v})."""
    import numpy as np

    def move(t: float) -> dict:
        with np.errstate(all="ignore"):
            return {name: feed[name] + t * v for name, v in directions.items()}
    return move


def random_direction(feed: Mapping, names: Sequence[str], rng) -> dict:
    """{name: v}, v = z · max(1, |x|), z standard normal over every element of `names`,
    scaled to unit length altogether."""
    import numpy as np
    z = {name: rng.standard_normal(np.shape(feed[name])) for name in names}
    norm = math.sqrt(sum(float(np.sum(v * v)) for v in z.values())) or 1.0
    return {name: v / norm * np.maximum(1.0, np.abs(feed[name])) for name, v in z.items()}


def inner(gradients: Mapping, direction: Mapping) -> tuple[float, float]:
    """(<grad, v>, Σ|grad · v|) over the targets of `direction`."""
    import numpy as np
    with np.errstate(all="ignore"):
        dot = sum(float(np.sum(gradients[name] * v)) for name, v in direction.items())
        size = sum(float(np.sum(np.abs(gradients[name] * v))) for name, v in direction.items())
    return dot, size


# ----------------------------------------------------------------------------- budget

def evaluation_work(outputs: list) -> int:
    """A deterministic estimate of one reference evaluation's cost, in element operations:
    every node's element count (a contraction: its product's), plus a thousand a node for
    Python's own work. What decides how many elements are compared one by one."""
    work = 0
    for node in scope_toposort(outputs):
        shape = node.src[0].shape if node.op == Ops.REDUCE and node.src and node.src[0].op == Ops.MUL else node.shape
        size = 1
        for n in shape or ():
            size *= n
        work += size + 1000
    return work


def allocate_samples(sizes: Mapping[str, int], per_target: int, pairs: int) -> dict:
    """{target: elements compared one by one}: up to `per_target` each (all of a smaller
    target), at most `pairs` in all, given out one at a time, smallest targets first (a
    direction through many elements weighs a small target least)."""
    want = {name: min(size, per_target) for name, size in sizes.items()}
    got = dict.fromkeys(sizes, 0)
    left = pairs
    order = sorted(sizes, key=lambda name: sizes[name])
    while left > 0 and any(got[n] < want[n] for n in order):
        for name in order:
            if left > 0 and got[name] < want[name]:
                got[name] += 1
                left -= 1
    return got
