"""The forward-mode checks never pass a graph they did not compare (issue 33's defects 02,
03, 04): `check --hvp` calls a kink only where an op that makes one chooses differently on
either side of the point, tells rounding noise from a wrong value, and says "not checked"
(exit 1) when nothing was compared; `check --transpose` does not call 0 == 0 ok; both say,
as plain `check` does, that the forward value is not finite, naming the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from _cli_in_process import uopgrad_in_process

from uopcli import UOp, dtypes
from uopcli.core.forward import FORWARD_RULES, _made
from uopcli.core.graph import Graph
from uopcli.core.ops import Ops
from uopcli.formats.uop import load
from uopcli.tools.check import check_gradients
from uopcli.tools.forward_check import check_hvp, check_transpose

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
f64 = dtypes.float64


def _scaled(tangent, factor):
    return None if tangent is None else _made(tangent) * factor


def _plant(monkeypatch, op, factor):
    """FORWARD_RULES[op]'s tangent times `factor` (0: zeroed)."""
    original = FORWARD_RULES[op]
    monkeypatch.setitem(FORWARD_RULES, op, lambda y, t, w: _scaled(original(y, t, w), factor))


def test_check_hvp_passes_with_a_kink_beside_a_target_compared():
    """A kink in one target beside another that is compared: ok, the kink noted (as `check`
    counts its kinks and passes)."""
    w, b = UOp.param("w", (3,), f64), UOp.param("b", (2,), f64)
    graph = Graph({"loss": (w.relu() * 3.0).sum() + (w * w).sum() + (b * b * b).sum()}, inputs=[w, b])
    given = {"w": np.array([1.0, 0.0, 0.5]), "tangent_w": np.ones(3)}
    report = check_hvp(graph, ["w", "b"], ["loss"], inputs=given)
    kinked, smooth = report.targets
    assert report.passed and kinked.kink and smooth.passed and smooth.compared and smooth.max_rel_error < 1e-8
    assert report.lines()[-2].startswith("ok: ") and "CMPLT" in report.lines()[-1]


def test_check_hvp_calls_no_kink_in_a_graph_without_one_and_fails_a_wrong_rule_at_a_noisy_point(monkeypatch):
    """logreg at b = 25 (1 - sigmoid cancels in float64): the differences of the gradient
    are noise (they do not settle between steps h and h/1000). No relu, max or comparison in
    the graph: no kink, as `check --hvp` once said, passing it (and planted wrong rules with
    it); "too noisy: not compared", and not ok. At b = 0.5 the same check passes, and the
    planted wrong rules fail there."""
    graph = load(SAMPLES / "logreg.uop")
    report = check_hvp(graph, ["w", "b"], inputs={"b": np.float32(25.0)})
    assert not report.passed and [t.noisy for t in report.targets] == [True, True]
    assert not any(t.kink for t in report.targets)
    assert report.lines()[-3].startswith("not checked: hvp_w, hvp_b: differences too noisy, nothing compared there: "
                                         "choose another point")
    assert check_hvp(graph, ["w", "b"], inputs={"b": np.float32(0.5)}).passed
    for op, factor in ((Ops.EXP2, 0.0), (Ops.MUL, 0.0), (Ops.RECIPROCAL, 0.5)):
        with monkeypatch.context() as planted_rule:
            _plant(planted_rule, op, factor)
            for b in (25.0, 0.5):
                planted = check_hvp(graph, ["b"], inputs={"b": np.float32(b)})
                assert not planted.passed and not any(t.kink for t in planted.targets), (op, b, planted.lines())
    correct = check_hvp(graph, ["b"], inputs={"b": np.float32(25.0)})  # the repro: it said ok, exit 0
    assert not correct.passed and correct.targets[0].noisy and not correct.to_dict()["passed"]


def _drop_one_half_of_mul(monkeypatch):
    """A wrong MUL rule: only b * da, the a * db half dropped."""
    original = FORWARD_RULES[Ops.MUL]
    monkeypatch.setitem(FORWARD_RULES, Ops.MUL, lambda y, t, w: original(y, [t[0], None], w) if t[0] is not None
                        else None)


DEAD = {"x": np.zeros((16, 8), np.float32), "b1": np.full(32, -1.0, np.float32)}  # mlp: every ReLU off


def test_check_transpose_with_every_term_zero_is_not_ok(monkeypatch):
    """mlp at a point where every ReLU is off: J v = 0 and J^T u = 0 for every u, v, so
    <u, J v> = <J^T u, v> = 0 compares nothing. It said "ok: ... each other's transpose", and
    so with a planted wrong MUL rule; now the trials are drawn again and the verdict is
    "not checked ... choose another point", with or without the planted rule, while the
    planted rule fails at a random point."""
    graph = load(SAMPLES / "mlp.uop")
    report = check_transpose(graph, ["w1"], inputs=DEAD)
    assert not report.passed and report.compared == 0 and len(report.trials) == 6
    assert all(t.jvp_side == 0.0 == t.vjp_side and t.scale == 0.0 for t in report.trials)
    lines = report.lines()
    assert all(line.endswith("every term 0: nothing compared") for line in lines[1:-1])
    assert lines[-1].startswith("not checked: every term of <u, J v> and <J^T u, v> is 0 at this point")
    assert lines[-1].endswith("choose another point or direction (-i, or another --seed)")
    assert report.to_dict()["compared"] == 0 and report.to_dict()["passed"] is False
    assert check_transpose(graph, ["w1"]).passed
    _drop_one_half_of_mul(monkeypatch)
    assert not check_transpose(graph, ["w1"], inputs=DEAD).passed
    assert not check_transpose(graph, ["w1"]).passed


def test_check_transpose_draws_again_where_a_trial_compares_nothing():
    """y = sum(relu(x) * w), x random: a point where every x is negative compares nothing and
    another is drawn; the trials compared are the ones asked for."""
    x, w = UOp.param("x", (2,), f64), UOp.param("w", (2,), f64)
    graph = Graph({"y": (x.relu() * w).sum()}, inputs=[x, w])
    report = check_transpose(graph, ["x"], trials=3)  # seed 0: its second point has both x < 0
    assert report.passed and [t.compared for t in report.trials] == [True, False, True, True]
    assert report.lines()[2].endswith("every term 0: nothing compared") and report.lines()[-1].startswith("ok: ")


def _huge_weights():
    return {"w": (np.random.default_rng(0).standard_normal(10) * 300).astype(np.float32)}


def test_a_forward_value_that_is_not_finite_is_said_first_as_check_says_it():
    """logreg with huge weights: log(1 - sigmoid) = log(0) = -inf. `check` says "the forward
    value is not finite" and names the LOG2 node; `check --transpose` said "a forward or
    reverse rule is wrong" and `check --hvp` "FAILED: w, b" with nan errors. Now all three
    give the same lines, from the same code."""
    graph = load(SAMPLES / "logreg.uop")
    plain = check_gradients(graph, ["w", "b"], inputs=_huge_weights()).lines()
    first_inf = next(line for line in plain if "first inf" in line)
    assert "LOG2 float32[32]" in first_inf and plain[-1] == "FAILED: the forward value is not finite"
    for report in (check_transpose(graph, ["w", "b"], inputs=_huge_weights()),
                   check_hvp(graph, ["w", "b"], inputs=_huge_weights())):
        lines = report.lines()
        assert not report.passed and lines[-1] == "FAILED: the forward value is not finite", lines
        assert lines[0].startswith("the forward value is not finite at these inputs (loss = nan")
        assert first_inf in lines and "rule is wrong" not in "\n".join(lines)
        assert report.to_dict()["forward_finite"] is False



def _check(*args, cwd):
    return uopgrad_in_process("check", *args, cwd=cwd)


def test_cli_forward_checks_that_compared_nothing_exit_1(tmp_path):
    """Repros 03 and 04 as the user ran them: exit 0 and "ok" before; now exit 1 and the
    one-line verdict saying to choose another point."""
    done = _check(SAMPLES / "logreg.uop", "--wrt", "b", "--hvp", "-i", "b=25", cwd=tmp_path)
    assert done.exit_code == 1 and "kink" not in done.output, done.output
    assert done.output.splitlines()[-2].startswith("not checked: hvp_b: differences too noisy")
    for name, value in DEAD.items():
        np.save(tmp_path / f"{name}.npy", value)
    done = _check(SAMPLES / "mlp.uop", "--wrt", "w1", "--transpose", "-i", "x=x.npy", "-i", "b1=b1.npy", cwd=tmp_path)
    assert done.exit_code == 1 and done.output.splitlines()[-1].startswith("not checked: every term"), done.output


def test_cli_forward_checks_say_the_forward_value_is_not_finite_as_check_does(tmp_path):
    """Repro 02: the three checks end alike, naming the LOG2 node that made the inf."""
    np.save(tmp_path / "w.npy", _huge_weights()["w"])
    ends = []
    for flags in ([], ["--transpose"], ["--hvp"]):
        done = _check(SAMPLES / "logreg.uop", "--wrt", "w,b", "-i", "w=w.npy", *flags, cwd=tmp_path)
        assert done.exit_code == 1, done.output
        lines = done.output.splitlines()
        ends.append((lines[-1], [line for line in lines if "first inf" in line]))
    assert ends[0] == ends[1] == ends[2] and ends[0][0] == "FAILED: the forward value is not finite"
    assert "LOG2 float32[32]" in ends[0][1][0]
