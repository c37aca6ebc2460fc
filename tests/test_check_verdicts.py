"""Plain `uopgrad check` never says ok having compared nothing, and calls a kink only where
the graph has one: a node that can make a kink (MAX, a comparison, TRUNC, a cast to an
integer: forward_differences.KinkSites, shared with the forward checks) chooses differently
on either side of the point. Differences that do not settle with no such node flipping are
rounding noise, "too noisy: not compared". Either way the verdict is "not checked ...
choose another point", exit 1, as the forward checks say it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _cli_in_process import uopgrad_in_process
from uopcli import UOp, dtypes
from uopcli.core import gradient as gradient_module
from uopcli.core.graph import Graph
from uopcli.core.ops import Ops
from uopcli.formats.uop import load, save
from uopcli.tools.check import check_gradients

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
NOT_CHECKED_TAIL = "nothing compared there: choose another point or direction (-i, or another --seed)"
f64 = dtypes.float64


def _relu_graph() -> Graph:
    x = UOp.param("x", (4,), f64)
    return Graph({"loss": (x.relu() * 3.0).sum()}, inputs=[x])


def _plant(monkeypatch, op, factor):
    """GRADIENT_RULES[op]'s gradients times `factor` (0: zeroed)."""
    original = gradient_module.GRADIENT_RULES[op]

    def scaled(g, y, need):
        return tuple(d if not isinstance(d, UOp) else gradient_module._mul(d, gradient_module._const(d, factor))
                     for d in original(g, y, need))
    monkeypatch.setitem(gradient_module.GRADIENT_RULES, op, scaled)


def test_every_element_and_direction_at_a_kink_is_not_checked():
    """relu·3 with every element exactly at 0: each element's one-sided differences are 0 and
    3, and so along every direction (relu(t v) bends at t = 0). Nothing compared: it said ok;
    now "not checked", naming the relu's comparison."""
    report = check_gradients(_relu_graph(), ["x"], inputs={"x": np.zeros(4)})
    (t,) = report.targets
    assert (t.samples, t.kinks, t.noisy) == (0, 4, 0) and "CMPLT" in t.kink_at
    assert all(d.kink and "CMPLT" in d.kink_at for d in report.directions) and len(report.directions) == 2
    assert report.verdict == "not checked" and not report.passed
    lines = report.lines()
    assert lines[-1] == f"not checked: every element and direction at a kink, {NOT_CHECKED_TAIL}"
    assert "directions: 2 random directions through every target, rel err kink / kink  not compared" in lines
    d = report.to_dict()
    assert (d["passed"], d["verdict"], d["targets"][0]["kinks"]) == (False, "not checked", 4)


def test_a_kink_beside_elements_compared_stays_ok_and_a_smooth_point_compares_all():
    """Half the elements at relu's 0, half away: the kinks are noted, the others compared: ok.
    The directions bend too (they move the elements at 0), so they are kinks, not failures."""
    at = {"x": np.array([0.0, 1.5, 0.0, -2.0])}
    report = check_gradients(_relu_graph(), ["x"], inputs=at)
    (t,) = report.targets
    assert report.verdict == "ok" and (t.samples, t.kinks) == (2, 2) and t.max_abs_error < 1e-9
    smooth = check_gradients(_relu_graph(), ["x"], inputs={"x": np.array([0.5, 1.5, -1.0, -2.0])})
    assert smooth.verdict == "ok" and smooth.targets[0].kinks == 0 and all(d.compared for d in smooth.directions)


def test_planted_wrong_rules_at_an_all_kink_point_are_not_ok(monkeypatch):
    """The relu's gradient flows through MUL (by 3) and WHERE; planted wrong, the check at
    the all-kink point says "not checked" or FAILED, never ok; away from 0 it fails."""
    for op, factor in ((Ops.MUL, 0.5), (Ops.WHERE, 2.0)):
        with monkeypatch.context() as planted_rule:
            _plant(planted_rule, op, factor)
            at_kink = check_gradients(_relu_graph(), ["x"], inputs={"x": np.zeros(4)})
            assert at_kink.verdict != "ok", (op, at_kink.lines())
            away = check_gradients(_relu_graph(), ["x"], inputs={"x": np.array([0.5, 1.5, -1.0, 2.0])})
            assert away.verdict == "FAILED", (op, away.lines())


def test_a_wrong_gradient_beside_a_kink_within_the_step_fails_not_noise(monkeypatch):
    """relu·3 at 1e-6, a kink within h (6.06e-6) but not at the point: the differences at h
    (1.75) and h/1000 (3) disagree, as noise's do, but relu's comparison flips within h, so
    it is no noise: a MUL rule planted 0.8 times (2.4 for 3) fails; the right one passes."""
    x = UOp.param("x", (1,), f64)
    graph = Graph({"loss": (x.relu() * 3.0).sum()}, inputs=[x])
    at = {"x": np.array([1e-6])}
    assert check_gradients(graph, ["x"], inputs=at).verdict == "ok"
    _plant(monkeypatch, Ops.MUL, 0.8)
    report = check_gradients(graph, ["x"], inputs=at, directions=0)
    (t,) = report.targets
    assert report.verdict == "FAILED" and (t.samples, t.kinks, t.noisy) == (1, 0, 0), report.lines()
    h = np.finfo(np.float64).eps ** (1 / 3)
    assert t.analytic == pytest.approx(2.4, rel=1e-15) and t.numeric == pytest.approx(3 * (1e-6 + h) / (2 * h), rel=1e-9)


def test_logreg_at_b_25_names_no_kink_and_is_too_noisy():
    """samples/logreg.uop has sigmoid and log only (no MAX, comparison or WHERE): at b = 25
    1 - sigmoid cancels in float64 and the differences are noise. It called 4 elements of w
    kinks and failed w and b; now no kink anywhere, the noise said, "not checked". At b = 0.5
    the same check is ok."""
    graph = load(SAMPLES / "logreg.uop")
    report = check_gradients(graph, ["w", "b"], inputs={"b": np.float32(25.0)})
    assert not any(t.kinks or t.kink_at for t in report.targets) and not any(d.kink for d in report.directions)
    assert report.verdict == "not checked" and report.targets[0].noisy > 0 and report.targets[0].noise > 1e-3
    lines = report.lines()
    assert "kink" not in "\n".join(lines)
    assert lines[-1].startswith("not checked: w, a direction through every target: differences too noisy, ")
    assert lines[-1].endswith(NOT_CHECKED_TAIL)
    assert any(line.startswith("note: w: ") and "too noisy: not compared" in line for line in lines)
    assert report.to_dict()["targets"][0]["noisy"] == report.targets[0].noisy
    assert check_gradients(graph, ["w", "b"], inputs={"b": np.float32(0.5)}).verdict == "ok"


def test_planted_wrong_rules_in_logreg_are_not_ok_at_a_noisy_point(monkeypatch):
    """The sigmoid's EXP2 and RECIPROCAL rules and MUL, planted wrong: at b = 25 (noise) the
    check is never ok; at b = 0.5 each fails."""
    graph = load(SAMPLES / "logreg.uop")
    for op, factor in ((Ops.EXP2, 0.0), (Ops.MUL, 0.0), (Ops.RECIPROCAL, 0.5)):
        with monkeypatch.context() as planted_rule:
            _plant(planted_rule, op, factor)
            noisy = check_gradients(graph, ["b"], inputs={"b": np.float32(25.0)}, samples=1)
            assert noisy.verdict != "ok" and not any(t.kinks for t in noisy.targets), (op, noisy.lines())
            clean = check_gradients(graph, ["b"], inputs={"b": np.float32(0.5)}, samples=1)
            assert clean.verdict == "FAILED", (op, clean.lines())


def _check(*args, cwd):
    return uopgrad_in_process("check", *args, cwd=cwd)


def test_cli_plain_check_that_compared_nothing_exits_1(tmp_path):
    """The issue's repro: logreg at b = 25 said 'FAILED: w, b' with 4 kinks in w; relu at 0
    said ok, exit 0. Both are 'not checked', exit 1, in text and JSON."""
    done = _check(SAMPLES / "logreg.uop", "--wrt", "w,b", "-i", "b=25", cwd=tmp_path)
    assert done.exit_code == 1 and "kink" not in done.output, done.output
    assert done.output.splitlines()[-1].startswith("not checked: w, a direction through every target: differences "
                                                   "too noisy")
    save(_relu_graph(), tmp_path / "relu.uop")
    np.save(tmp_path / "x.npy", np.zeros(4))
    done = _check("relu.uop", "--wrt", "x", "-i", "x=x.npy", cwd=tmp_path)
    assert done.exit_code == 1 and done.output.splitlines()[-1].startswith("not checked: every element and "
                                                                           "direction at a kink"), done.output
    done = _check("relu.uop", "--wrt", "x", "-i", "x=x.npy", "--json", cwd=tmp_path)
    assert done.exit_code == 1 and '"verdict": "not checked"' in done.output
