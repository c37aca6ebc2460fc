"""`uopgrad check MODEL --against FILE` (tools/file_check.py): a written jvp, hvp, jacobian
or hessian file against finite differences of its model (issue 33 item 4, repro 07: an hvp
file with hvp_b 1.5 times too large passed `check`, `check --transpose` and `check --hvp`,
none of which reads it). Planted wrong files fail; files of another model, or with no
meta saying what they are, are refused in one line naming them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _cli_in_process import uopgrad_in_process

from uopcli import UOp, dtypes
from uopcli.core.graph import Graph
from uopcli.errors import EvaluationError
from uopcli.formats.uop import load, save
from uopcli.tools import forward
from uopcli.tools.file_check import check_file

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
f64 = dtypes.float64


def _model():
    """y = x * x * w (vector), loss = sum(sin(y)) + sum(w^3)."""
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    y = x * x * w
    return Graph({"y": y, "loss": y.sin().sum() + (w * w * w).sum()}, inputs=[x, w])


def _planted(graph: Graph, name: str, change) -> Graph:
    outputs = dict(graph.outputs)
    outputs[name] = change(outputs[name])
    return Graph(outputs, graph.inputs, graph.meta)


def _element_changed(block: UOp) -> UOp:
    """block with its element [0, ..., 0, 1] (one column) 1e-3 off."""
    bump = np.zeros(block.shape)
    bump[(0,) * (len(block.shape) - 1) + (1,)] = 1e-3
    return block + UOp.buffer(bump.astype(block.dtype.np))


FILES = {
    "hvp": lambda m: forward.hvp(m, ["x", "w"], ["loss"]),
    "hvp of y weighted by an input": lambda m: forward.hvp(m, ["x", "w"], ["y"], cotangent="input"),
    "hvp of y weighted by ones": lambda m: forward.hvp(m, ["x", "w"], ["y"], cotangent="ones"),
    "jvp": lambda m: forward.jvp(m, ["x"]),
    "jvp keeping the forward": lambda m: forward.jvp(m, ["w", "x"], keep_forward=True),
    "jacobian": lambda m: forward.jacobian(m, ["x", "w"], ["y"]),
    "hessian": lambda m: forward.hessian(m, ["x", "w"], ["loss"]),
}
PLANTS = {  # (output, change): a wrong file of each kind
    "hvp": ("hvp_w", lambda o: o * 1.5),
    "hvp of y weighted by an input": ("hvp_x", lambda o: o * 1.001),
    "hvp of y weighted by ones": ("hvp_x", lambda o: o + 1e-3),
    "jvp": ("jvp_y", lambda o: o * 0.999),
    "jvp keeping the forward": ("jvp_loss", lambda o: o * 1.01),
    "jacobian": ("jacobian_y_w", _element_changed),
    "hessian": ("hessian_w_x", _element_changed),
}


@pytest.mark.parametrize("kind", list(FILES))
def test_a_written_file_passes_and_a_planted_wrong_one_fails(kind):
    model = _model()
    written = FILES[kind](model)
    report = check_file(model, written, seed=3, file="f.uop")
    assert report.passed, report.lines()
    assert all(t.compared and t.max_rel_error < 1e-7 for _, t in report.rows), report.lines()
    assert report.lines()[-1].startswith(f"ok: f.uop ({report.kind} of ")
    name, change = PLANTS[kind]
    wrong = check_file(model, _planted(written, name, change), seed=3, file="f.uop")
    assert not wrong.passed and wrong.lines()[-1].startswith("FAILED: "), wrong.lines()
    assert not any(t.kink or t.noisy for _, t in wrong.rows)
    if kind in ("jacobian", "hessian"):  # every column of a 3-element input alone: the planted one is named
        failed = [label for label, t in wrong.rows if not t.passed]
        assert f"{name}[..., 1]" in failed and not any(label.startswith(name + "[") and label != f"{name}[..., 1]"
                                                       for label in failed), failed


def test_a_jvp_file_of_a_float32_model_with_a_detach():
    """softmax with its max detached, in float32 (as samples/attention.uop): the model is
    checked in float64 with the DETACH value held (a jvp gives it a zero tangent); the
    held value was once computed from float64 values on the float32 graph, refused."""
    x = UOp.param("x", (2, 3), dtypes.float32)
    e = (x - x.max(1, keepdim=True).detach()).exp()
    model = Graph({"p": e / e.sum(1, keepdim=True)}, inputs=[x])
    written = forward.jvp(model, ["x"])
    assert check_file(model, written, seed=1).passed
    assert not check_file(model, _planted(written, "jvp_p", lambda o: o * 1.001), seed=1).passed


def test_the_file_is_evaluated_at_the_point_and_direction_given():
    """-i values of the file's tangents are the direction used: a file wrong by 1e-3 times
    tangent_x passes along tangent_x = 0 (given) and fails along a random one."""
    model = _model()
    written = forward.hvp(model, ["x", "w"], ["loss"])
    wrong = _planted(written, "hvp_w", lambda o: o + written.input("tangent_x") * 1e-3)
    given = {"x": np.array([1.0, 2.0, -0.5]), "w": np.array([0.5, -0.25, 2.0]), "tangent_x": np.zeros(3)}
    assert check_file(model, wrong, inputs=given).passed
    del given["tangent_x"]
    assert not check_file(model, wrong, inputs=given).passed


def _refusal(model, written, match):
    with pytest.raises(EvaluationError, match=match):
        check_file(model, written, file="f.uop")


def test_files_that_do_not_say_what_they_are_or_are_of_another_model_are_refused():
    model = _model()
    _refusal(model, model, r"^f.uop: its meta names none of jvp_of, hvp_of, jacobian_of, hessian_of")
    grads = Graph({"grad_w": model.outputs["loss"]}, model.inputs, {"gradient_of": "loss", "gradient_wrt": "w"})
    # a diff file is checked now (tests/test_check_against_gradient.py); this one's grad_w is not w's shape
    _refusal(model, grads, r"^f.uop: its output grad_w float64\[\] is not shaped as the model's input w float64\[3\]")
    x, w = UOp.param("x", (4,), f64), UOp.param("w", (4,), f64)
    other = Graph({"loss": (x * w).sin().sum()}, inputs=[x, w])
    _refusal(model, forward.hvp(other, ["w"]), r"^f.uop: its input 1 is x float64\[4\], where the model's input 1 is "
                                               r"x float64\[3\]: not written from this model")
    _refusal(model, forward.jvp(model, ["x"], ["y"]).__class__(
        {"jvp_y": model.outputs["y"]}, model.inputs, {"jvp_of": "y", "jvp_wrt": "x"}),
        r"^f.uop: it has 2 inputs, the model and its directions 3 \(missing: tangent_x\)")
    hvp = forward.hvp(model, ["w"], ["loss"])
    _refusal(model, Graph({"hvp_v": hvp.outputs["hvp_w"]}, hvp.inputs, hvp.meta), r"^f.uop: it has no output hvp_w")
    _refusal(model, Graph(hvp.outputs, hvp.inputs, {**hvp.meta, "hvp_of": "nope"}), r"has no such output")
    _refusal(model, Graph(hvp.outputs, hvp.inputs, {**hvp.meta, "jvp_of": "y", "jvp_wrt": "w"}),
             r"^f.uop: its meta says it is jvp and hvp at once \(jvp_of, hvp_of\)")


def test_a_forward_value_that_is_not_finite_is_said_first():
    x = UOp.param("x", (2,), f64)
    model = Graph({"loss": x.log2().sum()}, inputs=[x])
    report = check_file(model, forward.hvp(model, ["x"]), inputs={"x": np.array([-1.0, 2.0])})
    lines = report.lines()
    assert not report.passed and lines[-1] == "FAILED: the forward value is not finite"
    assert lines[0].startswith("the forward value is not finite at these inputs (loss = nan): no value of FILE")
    assert any("first nan" in line and "LOG2" in line for line in lines)


def test_a_file_at_a_noisy_point_is_not_checked():
    model = load(SAMPLES / "logreg.uop")
    report = check_file(model, forward.hvp(model, ["b"]), inputs={"b": np.float32(25.0)})
    assert not report.passed and report.rows[0][1].noisy
    assert report.lines()[-2].startswith("not checked: hvp_b: differences too noisy")
    nan = check_file(model, _planted(forward.hvp(model, ["b"]), "hvp_b", lambda o: o * float("nan")),
                     inputs={"b": np.float32(25.0)})  # a nan is wrong wherever it is, noise or not
    assert nan.lines()[-1] == "FAILED: hvp_b" and not nan.rows[0][1].noisy


def test_cli_check_against_a_planted_hvp_file(tmp_path):
    """Repro 07 through the CLI: good.uop passes, bad.uop (hvp_b 1.5 times) fails naming
    hvp_b, exit 1; --wrt/--of disagreeing with the file's meta and a file of another model
    are refused in one line (usage: exit 2; the file: exit 1)."""
    logreg = SAMPLES / "logreg.uop"
    good = forward.hvp(load(logreg), ["w", "b"])
    save(good, tmp_path / "good.uop")
    save(_planted(good, "hvp_b", lambda o: o * 1.5), tmp_path / "bad.uop")
    done = uopgrad_in_process("check", logreg, "--against", "good.uop", cwd=tmp_path)
    assert done.exit_code == 0 and done.stdout.splitlines()[-1] == (
        "ok: good.uop (hvp of loss along w, b) matches finite differences of its gradient (float64)"), done.stderr
    done = uopgrad_in_process("check", logreg, "--against", "bad.uop", "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.exit_code == 1 and not report["passed"] and report["kind"] == "hvp"
    assert [t["passed"] for t in report["targets"]] == [True, False]
    assert abs(report["targets"][1]["max_rel_error"] - 1 / 3) < 1e-6
    done = uopgrad_in_process("check", logreg, "--against", "good.uop", "--wrt", "w", cwd=tmp_path)
    assert done.exit_code == 2 and "--wrt w is not what good.uop is of: its meta says hvp_wrt=w,b" in done.stderr
    done = uopgrad_in_process("check", SAMPLES / "mlp.uop", "--against", "good.uop", cwd=tmp_path)
    assert done.exit_code == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("uopgrad: error: good.uop: its meta says it is along 'w', and the model has no such")
    done = uopgrad_in_process("check", logreg, "--against", "good.uop", "--hvp", cwd=tmp_path)
    assert done.exit_code == 2 and "give one of --hvp and --against: each is a check of its own" in done.stderr


def test_a_direction_of_zeros_compares_nothing():
    """Tangents given as 0: H 0 = 0 against differences of 0 is no comparison, whatever the
    file holds (a file wrong by a multiple of v passed): not checked, for check --hvp too."""
    model = _model()
    zeros = {"tangent_x": np.zeros(3), "tangent_w": np.zeros(3)}
    written = forward.hvp(model, ["x", "w"], ["loss"])
    report = check_file(model, _planted(written, "hvp_w", lambda o: o * 2.0), inputs=zeros)
    assert not report.passed and all(t.still for _, t in report.rows)
    assert report.lines()[1].split()[1:] == ["v", "is", "0:", "not", "compared"]
    assert report.lines()[-1].startswith("not checked: the direction v is 0 (every tangent given is 0)")
    from uopcli.tools.forward_check import check_hvp
    assert not check_hvp(model, ["x", "w"], ["loss"], inputs=zeros).passed
    assert not check_file(model, forward.jvp(model, ["x"]), inputs={"tangent_x": np.zeros(3)}).passed
    assert check_file(model, written, inputs={"tangent_x": np.zeros(3)}).passed  # w still moves


def test_a_jvp_of_an_hvp_file_is_checked_as_the_jvp_it_is():
    """d3.uop = jvp of hvp.uop keeps hvp.uop's meta (hvp_of) beside its own jvp_of: the kind
    the model's meta says alike is the model's, so FILE is the jvp (it was refused as two
    kinds at once)."""
    model = forward.hvp(_model(), ["x"], ["loss"])
    third = forward.jvp(model, ["x"])
    assert set(third.meta) >= {"hvp_of", "jvp_of"}
    report = check_file(model, third, seed=2)
    assert report.passed and report.kind == "jvp" and report.rows[0][0] == "jvp_hvp_x"
    assert not check_file(model, _planted(third, "jvp_hvp_x", lambda o: o * 1.001), seed=2).passed
