"""The gradient checker's verdicts and numbers where its mutation run (docs/mutation.md,
tools/check.py, check_numeric.py, check_float64.py) found the tests blind: each threshold
(element and direction, relative and absolute, the absolute one scaled by |L|) on both sides
of it, with gradients planted wrong by a known amount through a CALL's own backward body; the
kink retries; the elements sampled and the one named worst; the limited budget; the report's
lines and JSON. The planted errors are chosen a factor of 2-5 from the bound they test, so
that a bound moved by a mutant, or a formula with a term dropped, changes a verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopcli import EvaluationError, Graph, UOp
from uopcli.tools import check as check_module
from uopcli.tools.check import check_gradients, planned_evaluations


def square(w: UOp, factor: float = 1.0, offset=0.0, plus: float = 0.0, scale: float = 1.0) -> Graph:
    """loss = Σ scale·w² (+ plus), its gradient given by a backward body as 2·scale·w·factor + offset
    (offset a number or an array, added elementwise): right for factor 1 and offset 0."""
    def backward(v, g):
        d = g * v * (2.0 * scale * factor)
        if isinstance(offset, np.ndarray):
            d = d + UOp.buffer(offset.astype(np.float32))
        elif offset:
            d = d + offset
        return (d,)
    out = UOp.trace_call("sq", lambda v: v * v * scale if scale != 1.0 else v * v, backward, w)[0].sum()
    return Graph({"loss": out + plus if plus else out})


W = UOp.param("w", (3,))
AT = {"w": np.array([0.5, 1.0, -2.0])}     # gradient 2w = [1, 2, -4], L = 5.25
ZERO = {"w": np.zeros(3)}                  # gradient 0, L = 0


# ----------------------------------------------------------------------------- element thresholds

def test_an_element_fails_past_the_relative_bound_and_passes_inside_it():
    """|a - n| <= 1e-6·max(1, |L|) + 1e-4·max(|a|, |n|): at w = -2 (gradient -4) a factor
    1 + 2e-4 is 8e-4 off (bound 4.0e-4 + 5e-6), 1 + 5e-5 is 2e-4 off."""
    bad = check_gradients(square(W, factor=1 + 2e-4), ["w"], inputs=AT, directions=0)
    t = bad.targets[0]
    assert not bad.passed and not t.passed and t.samples == 3
    assert t.max_abs_error == pytest.approx(8e-4, rel=1e-4)
    assert t.max_rel_error == pytest.approx(2e-4 / (1 + 2e-4), rel=1e-4)
    ok = check_gradients(square(W, factor=1 + 5e-5), ["w"], inputs=AT, directions=0)
    assert ok.passed and ok.targets[0].passed
    assert ok.targets[0].max_abs_error == pytest.approx(2e-4, rel=1e-4)


def test_an_element_near_zero_fails_past_the_absolute_bound_of_one_for_a_small_loss():
    """At w = 0 (L = 0, gradient 0) the bound is ATOL·max(1, 0) = 1e-6: 3e-6 off fails, 5e-7 passes."""
    bad = check_gradients(square(W, offset=3e-6), ["w"], inputs=ZERO, directions=0)
    t = bad.targets[0]
    assert not bad.passed and (t.samples, t.kinks) == (3, 0)
    assert t.max_abs_error == pytest.approx(3e-6, rel=1e-6) and t.max_rel_error == 1.0
    assert (t.analytic, t.numeric) == (pytest.approx(3e-6), 0.0)
    ok = check_gradients(square(W, offset=5e-7), ["w"], inputs=ZERO, directions=0)
    assert ok.passed and ok.targets[0].max_abs_error == pytest.approx(5e-7)


def test_the_absolute_bound_grows_with_the_loss():
    """L = 1000 (a constant added): the bound at a zero gradient is 1e-6·1000 = 1e-3, so 1e-3/2
    passes and 5e-3 fails; with a bound of 1e-6 both would fail, with 1e-6·L² neither."""
    ok = check_gradients(square(W, offset=5e-4, plus=1000.0), ["w"], inputs=ZERO, directions=0)
    assert ok.loss == 1000.0 and ok.passed
    bad = check_gradients(square(W, offset=5e-3, plus=1000.0), ["w"], inputs=ZERO, directions=0)
    assert not bad.passed and bad.targets[0].max_abs_error == pytest.approx(5e-3)
    # the same for a negative loss: |L|
    neg = check_gradients(square(W, offset=5e-4, plus=-1000.0), ["w"], inputs=ZERO, directions=0)
    assert neg.loss == -1000.0 and neg.passed


# ----------------------------------------------------------------------------- direction thresholds

def test_a_direction_fails_past_its_tighter_relative_bound():
    """A direction passes within 1e-9·max(1, |L|) + 1e-6·max(|a|, |n|): 3e-6 relative fails, 3e-7
    passes (elements, bound 1e-4, would pass both); each target is then tried alone."""
    bad = check_gradients(square(W, factor=1 + 3e-6), ["w"], inputs=AT, samples=0)
    assert not bad.passed and [d.passed for d in bad.directions] == [False, False]
    assert all(d.rel_error == pytest.approx(3e-6, rel=1e-3) for d in bad.directions)
    t = bad.targets[0]
    assert not t.passed and t.samples == 0 and t.direction is not None and not t.direction.passed
    assert t.direction.rel_error == pytest.approx(3e-6, rel=1e-3)
    # the point; each failing direction (two, then w alone): central, closer, one-sided, then
    # the wider steps 10h and 100h (noise is told from a wrong value: forward_differences)
    assert bad.evaluations == 1 + 3 * (2 + 2 + 2 + 2 + 2)
    ok = check_gradients(square(W, factor=1 + 3e-7), ["w"], inputs=AT, samples=0)
    assert ok.passed and all(d.passed and d.rel_error == pytest.approx(3e-7, rel=1e-3) for d in ok.directions)
    assert ok.evaluations == 5 and ok.targets[0].direction is None


def test_direction_analytic_and_numeric_are_the_inner_product_and_the_difference():
    """<grad, v> and the central difference along v, for the seeded v: the right gradient gives
    the same number twice (to 1e-9), a gradient planted 1 + 3e-6 off gives it 3e-6 larger."""
    ok = check_gradients(square(W), ["w"], inputs=AT, samples=0, directions=1)
    (d,) = ok.directions
    assert d.analytic == pytest.approx(d.numeric, rel=1e-9) and abs(d.analytic) > 0.1
    bad = check_gradients(square(W, factor=1 + 3e-6), ["w"], inputs=AT, samples=0, directions=1)
    assert bad.directions[0].analytic == pytest.approx(d.analytic * (1 + 3e-6), rel=1e-12)
    assert bad.directions[0].numeric == pytest.approx(d.numeric, rel=1e-12)


# ----------------------------------------------------------------------------- sampling, naming

def test_the_worst_element_is_named_with_its_values():
    """One element of ten planted 1e-2 off: every element compared (10 <= 16), the worst named."""
    w = UOp.param("w", (10,))
    x = {"w": np.linspace(-1.0, 1.0, 10)}
    off = np.zeros(10)
    off[7] = 2.0 ** -7                      # exact in float32, as the backward body's buffer
    report = check_gradients(square(w, offset=off), ["w"], inputs=x, directions=0)
    t = report.targets[0]
    assert not t.passed and t.samples == 10 and t.worst_index == (7,)
    assert t.analytic == pytest.approx(2 * x["w"][7] + 2.0 ** -7, rel=1e-12)
    assert t.numeric == pytest.approx(2 * x["w"][7], rel=1e-8)
    assert t.max_abs_error == pytest.approx(2.0 ** -7, rel=1e-5)


def test_samples_limit_the_elements_and_the_choice_is_seeded_and_sorted():
    w = UOp.param("w", (40,))
    x = {"w": np.linspace(-1.0, 1.0, 40)}
    report = check_gradients(square(w), ["w"], inputs=x, directions=0, samples=5, seed=3)
    assert report.targets[0].samples == 5 and report.evaluations == 1 + 2 * 5
    default = check_gradients(square(w), ["w"], inputs=x, directions=0)
    assert default.targets[0].samples == 16 and default.evaluations == 1 + 2 * 16
    # an element planted wrong is found only when drawn: by the seeded draw, sorted
    draws = np.sort(np.random.default_rng(3).choice(40, 5, replace=False))
    off = np.zeros(40)
    off[draws[-1]] = 1e-2
    found = check_gradients(square(w, offset=off), ["w"], inputs=x, directions=0, samples=5, seed=3)
    assert found.targets[0].worst_index == (int(draws[-1]),) and not found.passed
    missed = np.setdiff1d(np.arange(40), draws)[0]
    off = np.zeros(40)
    off[missed] = 1e-2
    assert check_gradients(square(w, offset=off), ["w"], inputs=x, directions=0, samples=5, seed=3).passed


def test_a_target_failing_a_direction_gets_elements_compared_when_the_budget_gives_none(monkeypatch):
    monkeypatch.setattr(check_module, "PAIR_BUDGET", 0)
    w = UOp.param("w", (10,))
    x = {"w": np.linspace(-1.0, 1.0, 10)}
    good = check_gradients(square(w), ["w"], inputs=x)
    assert good.passed and good.targets[0].samples == 0
    assert good.limited == ("0 elements compared one by one, not the default's 10 (up to 16 a target; the targets "
                            "hold 10), as one evaluation costs about "
                            f"{check_module.evaluation_work(_outputs(square(w))):.1e} element operations; the "
                            "directions cover every element (--samples N compares up to N a target)")
    assert good.lines()[1] == ("w                  0            -            -  (no element compared: the directions only)  ok")
    assert good.to_dict()["limited"] == good.limited and f"note: {good.limited}" in good.lines()
    bad = check_gradients(square(w, factor=1.5), ["w"], inputs=x)
    assert not bad.passed and bad.targets[0].samples == 4  # NAMING_SAMPLES
    assert bad.targets[0].max_rel_error == pytest.approx(1 / 3, rel=1e-6)


def _outputs(graph):
    from uopcli.tools.check_float64 import to_float64
    return list(to_float64(graph).outputs.values())


# ----------------------------------------------------------------------------- kinks

def test_a_kink_within_the_step_is_retried_closer_and_the_closer_difference_reported():
    """relu·3 at 1e-6 (h = 6.06e-6 straddles 0): the first difference is about 1.75, the closer
    one 3, which is reported; no kink counted."""
    x = UOp.param("x", (1,))
    report = check_gradients(Graph({"loss": (x.relu() * 3.0).sum()}), ["x"], inputs={"x": np.array([1e-6])},
                             directions=0)
    t = report.targets[0]
    assert report.passed and (t.samples, t.kinks) == (1, 0)
    assert t.numeric == pytest.approx(3.0, rel=1e-6) and t.analytic == 3.0
    assert report.evaluations == 1 + 2 + 2


def test_at_a_kink_a_subgradient_is_not_compared_and_a_gradient_outside_fails():
    """|x| at 0: central differences 0, one-sided -1 and 1. A gradient 0 agrees with the central
    difference; another in [-1, 1] is a kink (not compared: with nothing else compared, "not
    checked", never ok); 2, outside, is wrong and fails (after the wider steps 10h, 100h)."""
    x = UOp.param("x", (1,))
    at = {"x": np.zeros(1)}
    for given, kink in [(0.5, True), (0.999, True), (-0.999, True), (1.01, False), (-1.5, False)]:
        graph = Graph({"loss": UOp.trace_call("a", lambda v: v.abs(), lambda v, g: (g * 0.0 + given,), x)[0].sum()})
        report = check_gradients(graph, ["x"], inputs=at, directions=0)
        t = report.targets[0]
        assert (t.kinks, t.samples, report.verdict) == ((1, 0, "not checked") if kink else (0, 1, "FAILED")), given
        assert report.evaluations == 1 + 2 + 2 + 2 + (0 if kink else 2 + 2)
        assert not report.passed
        if not kink:
            assert t.analytic == given and t.numeric == pytest.approx(0.0, abs=1e-9)


def test_every_element_at_a_kink_reports_nothing_compared():
    """relu·3 at 0: central difference 1.5, one-sided 0 and 3, its gradient there 0: a kink each,
    at the relu's comparison. Nothing compared: "not checked", exit 1 (it said ok)."""
    x = UOp.param("x", (2,))
    report = check_gradients(Graph({"loss": (x.relu() * 3.0).sum()}), ["x"], inputs={"x": np.zeros(2)},
                             directions=0)
    t = report.targets[0]
    assert (t.samples, t.kinks, t.max_abs_error, t.max_rel_error, t.worst_index) == (0, 2, 0.0, 0.0, ())
    assert not report.passed and report.verdict == "not checked" and report.to_dict()["verdict"] == "not checked"
    assert math.isnan(t.analytic) and math.isnan(t.numeric)
    lines = report.lines()
    assert lines[1].endswith("(no element compared: at a kink)  not compared")
    assert (f"note: x: 2 sampled elements at a kink (the one-sided differences disagree; {t.kink_at} chooses "
            "differently on either side), not compared") in lines and "CMPLT" in t.kink_at
    assert lines[-1] == ("not checked: every element and direction at a kink, nothing compared there: choose "
                         "another point or direction (-i, or another --seed)")


# ----------------------------------------------------------------------------- report, errors

def test_the_report_lines_and_json_of_a_failure():
    bad = check_gradients(square(W, offset=np.array([0.0, 0.0, -2.0 ** -10])), ["w"], inputs=AT, directions=1)
    lines = bad.lines()
    (d,) = bad.directions
    alone = bad.targets[0].direction
    assert d.rel_error == abs(d.analytic - d.numeric) / max(abs(d.analytic), abs(d.numeric)) > 1e-4
    assert (alone.analytic, alone.numeric, alone.passed) == (d.analytic, d.numeric, False)
    assert lines[0] == "target       samples  max abs err  max rel err  worst at"
    assert lines[1] == ("w                  3    9.766e-04    2.441e-04  [2] analytic -4.00098 numeric -4  "
                        f"alone along the direction: rel err {d.rel_error:.2e}  FAILED")
    assert lines[2] == f"directions: 1 random direction through every target, rel err {d.rel_error:.2e}  FAILED"
    assert lines[3] == "step: h = 6.06e-06 · max(1, |x|) (float64: eps^(1/3))"
    assert lines[-1] == "FAILED: w"
    d = bad.to_dict()
    assert (d["passed"], d["rtol"], d["atol"], d["loss"], d["evaluations"]) == (False, 1e-4, 1e-6, 5.25, bad.evaluations)
    assert d["targets"][0]["worst_index"] == [2] and d["targets"][0]["direction"]["passed"] is False
    assert d["directions"][0]["targets"] == 1 and d["directions"][0]["kink"] is False
    note = ("its gradient passes through CALL sq, whose backward body is given, not derived: finite differences of "
            "the forward need not match it")
    assert d["targets"][0]["note"] == note and f"note: w: {note}" in lines


def test_a_direction_failing_alone_fails_the_check_with_its_own_last_line():
    """Elements all pass (the error is 3e-6 relative) but the direction fails: the targets are
    failed through their direction, and the last line names them."""
    bad = check_gradients(square(W, factor=1 + 3e-6), ["w"], inputs=AT, samples=3)
    assert not bad.passed and not bad.targets[0].passed and bad.targets[0].samples == 3
    assert bad.lines()[-1] == "FAILED: w"


def test_check_refuses_nothing_to_compare():
    with pytest.raises(EvaluationError, match=r"^samples must be at least 0, got -1$"):
        check_gradients(square(W), ["w"], samples=-1)
    with pytest.raises(EvaluationError, match=r"^directions must be at least 0, got -1$"):
        check_gradients(square(W), ["w"], directions=-1)
    with pytest.raises(EvaluationError, match=r"^nothing to compare: give at least one sample or one direction$"):
        check_gradients(square(W), ["w"], samples=0, directions=0)
    only_directions = check_gradients(square(W), ["w"], inputs=AT, samples=0, directions=1)
    only_samples = check_gradients(square(W), ["w"], inputs=AT, samples=1, directions=0)
    assert only_directions.passed and only_samples.passed


def test_planned_evaluations_match_what_a_passing_check_makes():
    w = UOp.param("w", (4, 10))
    graph = square(w)
    for samples, directions, planned in [(None, 2, 1 + 4 + 32), (5, 0, 11), (0, 3, 7), (50, 1, 1 + 2 + 80)]:
        report = check_gradients(graph, ["w"], samples=samples, directions=directions)
        assert report.passed and report.evaluations == planned_evaluations(graph, ["w"], samples, directions) == planned
    # an empty target: no direction moves anything, no element to compare
    empty = square(UOp.param("w", (0,)))
    report = check_gradients(empty, ["w"], directions=2)
    assert report.passed and report.directions == [] and report.evaluations == 1
    assert planned_evaluations(empty, ["w"], None, 2) == 1
    assert report.lines()[1] == "w                  0            -            -  (no element compared: the directions only)  ok"
    assert (report.targets[0].analytic, report.targets[0].numeric) == (0.0, 0.0)
    assert planned_evaluations(graph, ["not_an_input"], None, 2) == 1


@pytest.mark.timeout(30)
def test_allocate_samples_gives_the_budget_out_smallest_targets_first():
    from uopcli.tools.check_numeric import allocate_samples
    sizes = {"a": 100, "b": 2, "c": 7}
    assert allocate_samples(sizes, 16, 1000) == {"a": 16, "b": 2, "c": 7}   # all wanted
    assert allocate_samples(sizes, 16, 3) == {"a": 1, "b": 1, "c": 1}
    assert allocate_samples(sizes, 16, 5) == {"a": 1, "b": 2, "c": 2}       # b, c, a, then b, c: by size
    assert allocate_samples(sizes, 16, 8) == {"a": 3, "b": 2, "c": 3}
    assert allocate_samples(sizes, 4, 0) == {"a": 0, "b": 0, "c": 0}
    assert allocate_samples({"x": 3}, 16, 1) == {"x": 1}


def test_evaluation_work_counts_elements_and_a_contractions_product():
    """Σ (elements + 1000) over the nodes; a REDUCE of a MUL counts the product's elements (the
    reference contracts it without building it), anything else its own."""
    from uopcli.tools.check_numeric import evaluation_work
    a, b = UOp.param("a", (4, 5)), UOp.param("b", (4, 5))
    product = a * b
    # a, b, the MUL, its REDUCE to (1, 1) (as 20), the RESHAPE to ()
    assert evaluation_work([product.sum()]) == (20 + 1000) * 4 + (1 + 1000)
    # a SHRINK of the product to (1, 5), then a RESHAPE to (5,): their own 5 each
    assert evaluation_work([product[0]]) == (20 + 1000) * 3 + (5 + 1000) * 2
    # a, EXP2, its REDUCE (not of a MUL: its own 1), the RESHAPE
    assert evaluation_work([a.exp2().sum()]) == (20 + 1000) * 2 + (1 + 1000) * 2


def test_the_json_of_a_non_finite_gradient_spells_its_infinities():
    """√x at 0: the gradient there is inf (1/(2√0)), the central difference nan (√-h): JSON has
    no inf or nan, so each is its repr; every key of the document, the target's and the
    directions'."""
    x = UOp.param("x", (3,))
    graph = Graph({"loss": x.sqrt().sum()}, inputs=[x])
    report = check_gradients(graph, ["x"], inputs={"x": np.array([1.0, 0.0, 4.0], np.float32)}, samples=3)
    direction = {"targets": 1, "analytic": "-inf", "numeric": "nan", "rel_error": "inf", "passed": False,
                 "kink": False}
    assert report.to_dict() == {
        "of": ["loss"], "seed": 0, "passed": False, "verdict": "FAILED", "rtol": 1e-4, "atol": 1e-6, "dtype": "float64",
        "evaluators": {"analytic": "numpy", "numeric": "reference"}, "simplified": "tinygrad", "loss": 3.0,
        "step": "h = 6.06e-06 · max(1, |x|) (float64: eps^(1/3))", "forward_finite": True, "evaluations": 11,
        "directions": [direction, direction],
        "not_finite": [
            "note: the analytic gradient of x is not finite (numbered as in the gradient graph, "
            "`uopgrad diff ... | uopgrad print -`):",
            "first inf: %7 FDIV float32[3], backward: 1 inf among 3 elements (first made at [1]), from finite sources",
            "  source %2 EXPAND float32[3]: min 1 max 1, 0 of 3 not finite",
            "  source %6 MUL float32[3]: min 0 max 4, 0 of 3 not finite",
            "  its element [1] depends on: input x[1] = 0.0"],
        "targets": [{"target": "x", "samples": 3, "max_abs_error": "inf", "max_rel_error": "inf", "worst_index": [1],
                     "analytic": "inf", "numeric": "nan", "passed": False, "kinks": 0}]}
    assert report.lines()[1] == "x                  3          inf          inf  [1] analytic inf numeric nan  FAILED"
    assert report.lines()[2] == "directions: 2 random directions through every target, rel err inf / inf  FAILED"


def test_the_json_of_a_passing_check_with_a_limit_a_kink_and_a_note():
    """Every key of a passing report: `limited` and the targets' kinks and notes appear only when
    there is something to say; a direction is JSON with its numbers; `simplified` says how the
    gradient graph ran."""
    x = UOp.param("x", (2,))
    # |x| with 0.5 for its gradient at 0: inside the one-sided differences -1 and 1, a kink
    graph = Graph({"loss": UOp.trace_call("a", lambda v: v.abs() * 3.0, lambda v, g: (
        g * (v.sign() + (1.0 - v.sign().abs()) * 0.5) * 3.0,), x)[0].sum()}, inputs=[x])
    report = check_gradients(graph, ["x"], inputs={"x": np.array([0.0, 2.0])}, directions=1, simplify=None)
    d = report.to_dict()
    (direction,) = d["directions"]
    # the seeded direction is v = (0.1044, -1.9891): <grad, v> = 3 (0.5 v0 + v1), a kink along it
    v = np.random.default_rng([0, 1]).standard_normal(2)
    v = v / np.linalg.norm(v) * np.array([1.0, 2.0])
    assert direction == {"targets": 1, "analytic": pytest.approx(3 * (0.5 * v[0] + v[1]), rel=1e-12),
                         "numeric": "nan", "rel_error": 0.0, "passed": True, "kink": True,
                         "kink_at": "CMPNE inside the body of %26 CALL void[]"}
    assert "directions: 1 random direction through every target, rel err kink  not compared" in report.lines()
    assert ("note: x: 1 sampled element at a kink (the one-sided differences disagree; CMPNE inside the body of "
            "%26 CALL void[] chooses differently on either side), not compared") in report.lines()
    assert d["simplified"] == "no" and d["passed"] is True and "limited" not in d and "not_finite" not in d
    assert d["targets"] == [{"target": "x", "samples": 1, "max_abs_error": report.targets[0].max_abs_error,
                             "max_rel_error": report.targets[0].max_rel_error, "worst_index": [1], "analytic": 3.0,
                             "numeric": report.targets[0].numeric, "passed": True, "kinks": 1,
                             "kink_at": "CMPNE inside the body of %26 CALL void[]"}]
    assert report.targets[0].numeric == pytest.approx(3.0, rel=1e-9)
    assert report.lines()[-2] == ("evaluators: analytic by the numpy evaluator on the gradient graph as written, finite "
                                  "differences by the reference evaluator (op by op)")
    assert report.lines()[-1] == "ok: gradients of loss match finite differences (float64)"


# ----------------------------------------------------------------------------- notes and non-finite values

NOTE = ("its gradient passes through CALL {}, whose backward body is given, not derived: finite differences of "
        "the forward need not match it")


def test_the_custom_backward_note_names_only_the_calls_a_failing_target_flows_through():
    """w through `sq` (right), u through `cube` (planted wrong): only u fails, and its note names
    `cube`, not `sq`, which does not read u; a passing target has no note."""
    w, u = UOp.param("w", (2,)), UOp.param("u", (2,))
    sq = UOp.trace_call("sq", lambda v: v * v, lambda v, g: (g * v * 2.0,), w)[0]
    cube = UOp.trace_call("cube", lambda v: v * v * v, lambda v, g: (g * v * v * 2.0,), u * 2.0)[0]  # via u · 2
    report = check_gradients(Graph({"loss": (sq * 2.0).sum() + cube.sum()}), ["w", "u"],
                             inputs={"w": np.array([1.0, 2.0]), "u": np.array([1.0, -1.0])})
    by = {t.name: t for t in report.targets}
    assert by["w"].passed and by["w"].note == ""
    assert not by["u"].passed and by["u"].note == NOTE.format("cube")
    assert report.lines()[-1] == "FAILED: u"


def test_the_custom_backward_note_inside_a_function_names_the_calls_of_its_body():
    """Inside a FUNCTION the target is a slot: every CALL with a backward body of the bodies it
    reaches is named, once, in order; not a CALL inside a backward body (its own backward body
    is never run by a first derivative)."""
    x = UOp.param("x", (3,))

    def straight(t, g):
        return (UOp.trace_call("inner", lambda s: (s * 1.0,), lambda s, gg: (gg,), g)[0],)

    def body(a):
        first = UOp.trace_call("q", lambda t: (t.trunc(),), straight, a)[0]
        second = UOp.trace_call("r", lambda t: (t * 2.0,), lambda t, g: (g * 2.0,), a)[0]
        return ((first * a).sum() + second.sum(),)
    graph = Graph({"loss": UOp.trace_function("wrap", body, x)[0]}, inputs=[x])
    report = check_gradients(graph, ["x"], None, {"x": np.array([0.5, 1.5, -2.5])}, samples=3)
    assert not report.passed and report.targets[0].note == NOTE.format("q, r")


def test_a_forward_finite_in_its_own_dtypes_but_not_in_float64_says_so():
    """1/(x - float16(x)): x = 0.1 is not a float16, so in float32 the difference is finite; check
    computes in float64 with the casts gone, x - x = 0, and L = inf."""
    from uopcli import dtypes
    x = UOp.param("x", (1,))
    graph = Graph({"loss": (x - x.cast(dtypes.float16).cast(dtypes.float32)).reciprocal().sum()}, inputs=[x])
    report = check_gradients(graph, ["x"], inputs={"x": np.array([0.1], np.float32)})
    assert not report.passed and not report.forward_finite and report.loss == math.inf
    assert report.not_finite == ["note: in the file's own dtypes the forward value is finite; in float64 it is not"]
    assert report.lines() == [
        "the forward value is not finite at these inputs (L = inf): no gradient compared",
        "note: in the file's own dtypes the forward value is finite; in float64 it is not",
        "FAILED: the forward value is not finite"]
    assert report.evaluations == 1 and report.to_dict()["forward_finite"] is False


def test_two_targets_with_non_finite_gradients_are_named_together():
    x, y = UOp.param("x", (2,)), UOp.param("y", (2,))
    graph = Graph({"loss": (x.sqrt() + y.sqrt()).sum()}, inputs=[x, y])
    report = check_gradients(graph, ["x", "y"], inputs={"x": np.array([0.0, 1.0]), "y": np.array([4.0, 0.0])},
                             samples=2)
    assert not report.passed and report.forward_finite
    head = report.not_finite[0]
    assert head.startswith("note: the analytic gradient of x, y is not finite (numbered as in the gradient graph")
    assert report.not_finite[1].startswith("first inf: %") and "(first made at [0])" in report.not_finite[1]
    # a non-finite gradient fails already: no target is tried alone along a failed direction
    assert [t.direction for t in report.targets] == [None, None]
    assert [d.passed for d in report.directions] == [False, False]


def test_a_check_failing_only_through_a_direction_says_so_last():
    """Every target passes its elements and no target alone fails, yet a direction through all of
    them does: the last line names that direction."""
    from uopcli.tools.check import CheckReport, DirectionCheck, TargetCheck
    report = CheckReport(["loss"], 0, 1.0, [TargetCheck("w", 2, 1e-9, 1e-9, (1, 0), 2.0, 2.0, True)], "exact",
                         directions=[DirectionCheck(["w"], 1.0, 1.5, False), DirectionCheck(["w"], 1.0, 1.0, True)])
    assert not report.passed
    lines = report.lines()
    assert lines[1] == "w                  2    1.000e-09    1.000e-09  [1,0] analytic 2 numeric 2  ok"
    assert lines[2] == "directions: 2 random directions through every target, rel err 3.33e-01 / 0.00e+00  FAILED"
    assert lines[-2] == ("evaluators: analytic by the numpy evaluator on the gradient graph as written (--literal), "
                         "finite differences by the reference evaluator (op by op)")
    assert lines[-1] == "FAILED: a direction through every target"
    two = CheckReport(["a", "b"], 0, 1.0, [TargetCheck("a_long_target_name", 1, 0.0, 0.0, (0,), 1.0, 1.0, True)])
    assert two.lines()[0] == "target             samples  max abs err  max rel err  worst at"
    assert two.lines()[-1] == "ok: gradients of a, b match finite differences (float64)"


# ----------------------------------------------------------------------------- kinks told from curvature

def test_a_smooth_minimum_is_no_kink_and_a_wrong_gradient_there_fails():
    """1e4·w² at w = 0: the one-sided differences at the small step (6e-9) disagree by 1.2e-4,
    which the kink test took for a kink, passing any gradient within ±6e-5 as a subgradient: a
    gradient 5e-5 off (the bound is 1e-6) passed. A curvature's gap shrinks with the step (1.2e-1
    at the first step), a kink's does not: now it fails, elements and directions alike."""
    w = UOp.param("w", (1,))
    for seed in range(3):
        wrong = check_gradients(square(w, offset=5e-5, scale=1e4), ["w"], inputs={"w": np.zeros(1)}, seed=seed)
        t = wrong.targets[0]
        assert not wrong.passed and (t.samples, t.kinks) == (1, 0) and t.max_abs_error == pytest.approx(5e-5)
        assert not any(d.kink for d in wrong.directions) and not any(d.passed for d in wrong.directions)
    right = check_gradients(square(w, scale=1e4), ["w"], inputs={"w": np.zeros(1)})
    assert right.passed and right.targets[0].kinks == 0 and right.evaluations == 7


def test_a_relu_kink_along_a_direction_passes_its_right_gradient_whatever_the_seed():
    """relu at 0: the rule's gradient there (0) is one of the one-sided slopes, which the
    direction's bound (1e-9·|L|) placed inside or outside by their rounding (4e-7 here): 6 seeds
    of 10 failed a right gradient. Now the interval is widened by that rounding."""
    x = UOp.param("x", (2,))
    graph = Graph({"loss": (x.relu() * 3.0).sum()}, inputs=[x])
    for seed in range(10):
        report = check_gradients(graph, ["x"], inputs={"x": np.array([0.0, 2.0])}, seed=seed)
        assert report.passed and report.targets[0].kinks == 1, seed
        assert all(d.kink and d.passed for d in report.directions), seed
    wrong = Graph({"loss": UOp.trace_call("r", lambda v: v.relu() * 3.0, lambda v, g: (g * 0.0 + 4.0,), x)[0].sum()})
    assert not check_gradients(wrong, ["x"], inputs={"x": np.array([0.0, 2.0])}).passed   # 4: outside [0, 3]


def test_a_target_failing_only_along_its_direction_is_failed_as_false():
    bad = check_gradients(square(W, factor=1 + 3e-6), ["w"], inputs=AT, samples=3)
    t = bad.targets[0]
    assert t.max_rel_error < 1e-4 and t.passed is False and bad.to_dict()["targets"][0]["passed"] is False


def test_random_labels_of_a_check_are_drawn_below_their_classes():
    """Labels not given are drawn among the classes the one-hot picks (values.index_ranges_for):
    every row of the cross-entropy picks a class, so L is the sum of -log p over all 6 rows."""
    from uopcli import dtypes
    from uopcli.tools.values import random_value
    logits = UOp.param("logits", (6, 5))
    labels = UOp.param("labels", (6,), dtypes.int32)
    picked = labels.one_hot(5).cast(dtypes.float32) * logits.log_softmax(-1)
    graph = Graph({"loss": -picked.sum()}, inputs=[logits, labels])
    report = check_gradients(graph, ["logits"], seed=4, samples=2)
    z = random_value(logits, 4, {}).astype(np.float64)
    drawn = random_value(labels, 4, {"labels": 5})
    assert drawn.min() >= 0 and drawn.max() < 5
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    assert report.passed and report.loss == pytest.approx(-log_p[np.arange(6), drawn].sum(), rel=1e-12)


def test_a_bitcast_to_float_keeps_its_bits_in_float64():
    """to_float64: a BITCAST to float32 reads the int32 bits as float32, then widens."""
    from uopcli import dtypes
    from uopcli.backends.numpy import evaluate_graph
    from uopcli.tools.check_float64 import to_float64
    i = UOp.param("i", (2,), dtypes.int32)
    wide = to_float64(Graph({"f": i.bitcast(dtypes.float32) * 2.0}, inputs=[i]))
    assert wide.outputs["f"].dtype is dtypes.float64
    bits = np.array([0x3F800000, 0x40490FDB], np.int32)   # 1.0 and pi in float32
    out = evaluate_graph(wide, {"i": bits})["f"]
    assert out.dtype == np.float64 and out.tolist() == [2.0, 2 * float(np.float32(np.pi))]


def test_the_whole_report_of_two_failing_targets_and_of_a_pass():
    w, u = UOp.param("w", (1,)), UOp.param("u", (1,))   # one element each: no tie for the worst
    wrong_w = UOp.trace_call("sq", lambda v: v * v, lambda v, g: (g * v * 3.0,), w)[0].sum()
    wrong_u = UOp.trace_call("sq2", lambda v: v * v, lambda v, g: (g * v * 3.0,), u)[0].sum()
    report = check_gradients(Graph({"loss": wrong_w + wrong_u}), ["w", "u"],
                             inputs={"w": np.array([2.0]), "u": np.array([1.0])}, directions=0)
    assert report.lines() == [
        "target       samples  max abs err  max rel err  worst at",
        "w                  1    2.000e+00    3.333e-01  [0] analytic 6 numeric 4  FAILED",
        "u                  1    1.000e+00    3.333e-01  [0] analytic 3 numeric 2  FAILED",
        "step: h = 6.06e-06 · max(1, |x|) (float64: eps^(1/3))",
        "note: w: " + NOTE.format("sq"),
        "note: u: " + NOTE.format("sq2"),
        "evaluators: analytic by the numpy evaluator on the gradient graph simplified as tinygrad runs it (--literal: "
        "as written), finite differences by the reference evaluator (op by op)",
        "FAILED: w, u"]
    ok = check_gradients(square(W), ["w"], inputs=AT, directions=0, simplify="exact")
    assert ok.lines() == [
        "target       samples  max abs err  max rel err  worst at",
        ok.lines()[1],
        "step: h = 6.06e-06 · max(1, |x|) (float64: eps^(1/3))",
        "evaluators: analytic by the numpy evaluator on the gradient graph as written (--literal), finite differences "
        "by the reference evaluator (op by op)",
        "ok: gradients of loss match finite differences (float64)"]
    assert ok.lines()[1].startswith("w                  3  ") and ok.lines()[1].endswith("  ok")


# ----------------------------------------------------------------------------- errors small beside |L|

def decay_beside_data(factor: float, c: float = 1e-4) -> Graph:
    """L = Σ(x w - y)² over 256 rows (about 1e4 at random inputs) + c·Σ w2², w2's gradient
    given by a backward body as 2c·w2·factor: right for factor 1. A newcomer's weight decay
    with the 2 dropped (factor 0.5) passed `check`."""
    x, w, y, w2 = UOp.param("x", (256, 8)), UOp.param("w", (8, 4)), UOp.param("y", (256, 4)), UOp.param("w2", (4, 4))
    decay = UOp.trace_call("decay", lambda a: (a * a).sum() * c,
                           lambda a, g: (a * g.expand(a.shape) * (2 * c * factor),), w2)[0]
    return Graph({"loss": ((x @ w - y) ** 2).sum() + decay}, inputs=[x, w, y, w2])


def test_rounding_alone_at_the_small_step_is_no_kink():
    """w2 alone: its directional derivative (1e-5) is far below the rounding of L (1e4) at the
    kink test's small step (about 1e-3), so the one-sided differences there were two numbers of
    noise, and a gradient half the right one fell between them: 'kink', ok. A kink's gap must
    stand out of that rounding: the first step's failure stands, on every seed."""
    for seed in range(4):
        wrong = check_gradients(decay_beside_data(0.5), ["w2"], seed=seed)
        assert abs(wrong.loss) > 5e3 and not wrong.passed, seed
        assert not any(d.kink for d in wrong.directions) and not all(d.passed for d in wrong.directions), seed
        assert check_gradients(decay_beside_data(1.0), ["w2"], seed=seed).passed, seed


def test_a_target_too_small_for_its_elements_gets_a_direction_of_its_own():
    """w and w2 together: w's gradient (about 100) drowns w2's error (1e-5) in the directions
    through both, and w2's elements are within ATOL·|L| (1e-2) whatever their error; w2, whose
    largest gradient is under BLIND·ATOL·|L|, is also compared along a direction of its own."""
    wrong = check_gradients(decay_beside_data(0.5), ["w", "w2"], seed=0)
    w, w2 = wrong.targets
    assert all(d.passed for d in wrong.directions) and w.passed and w.direction is None
    assert not wrong.passed and not w2.passed and w2.max_rel_error == pytest.approx(0.5, abs=1e-3)
    assert w2.direction.own and w2.direction.targets == ["w2"] and w2.direction.rel_error == pytest.approx(0.5, rel=1e-3)
    assert "alone along a direction of its own: rel err 5.00e-01  FAILED" in wrong.lines()[2]
    assert wrong.to_dict()["targets"][1]["direction"]["own"] is True
    right = check_gradients(decay_beside_data(1.0), ["w", "w2"], seed=0)
    assert right.passed and right.targets[1].direction.own and right.targets[1].direction.passed
    assert right.targets[0].direction is None  # w's gradient is large: its elements tell
    assert "alone along a direction of its own: rel err" in right.lines()[2] and right.lines()[2].endswith("  ok")
    assert "own" not in right.to_dict()["directions"][0]


def test_a_target_within_blind_times_the_element_bound_is_compared_alone_too():
    """c = 1e-2: w2's gradient (up to 0.04) is above ATOL·|L| (1e-2) but under BLIND times it;
    0.4% off, its elements pass (4e-5 under their 1e-2 bound) and so do the directions through
    w too (w's gradient, 1000s of times larger, drowns it): its own direction fails it."""
    for seed in range(3):
        wrong = check_gradients(decay_beside_data(0.996, c=1e-2), ["w", "w2"], seed=seed)
        w2 = wrong.targets[1]
        assert all(d.passed for d in wrong.directions) and w2.max_rel_error < 5e-3, seed
        assert 1e-6 * abs(wrong.loss) < 0.04 < check_module.BLIND * 1e-6 * abs(wrong.loss), seed
        assert not wrong.passed and w2.direction.own and not w2.direction.passed, seed


def test_a_kink_along_a_targets_direction_reads_kink_not_a_zero_error():
    from uopcli.tools.check import DirectionCheck, TargetCheck, _target_line
    t = TargetCheck("x", 1, 0.0, 0.0, (0,), 1.0, 1.0, True,
                    direction=DirectionCheck(["x"], 0.5, math.nan, True, kink=True))
    assert _target_line(t, 12).endswith("alone along the direction: kink  ok")


def test_a_float16_models_own_overflow_is_noted_beside_a_passing_check():
    """log(Σ exp(100 x)) in float16 at x = 1: exp(100) overflows to inf in the model's own
    dtype, not in the float64 copy checked. The check passes (the rules are right) and says
    the model's own loss is not finite; at x = 0.01 there is nothing to say."""
    from uopcli import dtypes
    x = UOp.param("x", (2,), dtypes.float16)
    graph = Graph({"loss": (x * 100.0).exp().sum().log()}, inputs=[x])
    over = check_gradients(graph, ["x"], inputs={"x": np.array([1.0, 0.5], np.float16)})
    assert over.passed and over.loss == pytest.approx(100 + math.log1p(math.exp(-50)))
    assert over.not_finite == ["note: in the file's own dtypes loss is not finite at these inputs (the checked float64 "
                               "copy's is): the gradient rules were checked, not the model's overflow; `uopgrad eval "
                               "--debug-nans` names the node that makes it"]
    assert over.not_finite[0] in over.lines() and over.to_dict()["not_finite"] == over.not_finite
    fine = check_gradients(graph, ["x"], inputs={"x": np.array([0.01, 0.02], np.float16)})
    assert fine.passed and fine.not_finite == []
