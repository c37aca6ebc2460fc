"""`uopgrad check MODEL --against GRAD` for a gradient file `uopgrad diff` wrote
(tools/file_check.py): it was refused ("a gradient file (diff): check its model with
`uopgrad check MODEL --wrt ...`"), and `check --wrt` re-derives the gradient and never
reads the file, so a file edited, converted or written by an older uopgrad was checked by
nothing. Now sum <grad_x, v_x> along a random v, then elements of each input one at a time
(named, grad_w1[7,3]), and the outputs kept with --keep-forward, against finite
differences of MODEL in float64; torch's float64 gradient of the mlp sample is the peer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _cli_in_process import uopgrad_in_process
from test_forward_check_file import _model  # y = x * x * w, loss = sum(sin(y)) + sum(w^3)

from uopcli import UOp, dtypes
from uopcli.backends.numpy import evaluate_graph
from uopcli.core.graph import Graph
from uopcli.errors import EvaluationError
from uopcli.formats.uop import load, save
from uopcli.tools import forward
from uopcli.tools.check_float64 import to_float64
from uopcli.tools.differentiate import differentiate
from uopcli.tools.file_check import check_file

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
f64 = dtypes.float64




def _diff(model, wrt, **options):
    return differentiate(model, wrt, **options)[0]


def _planted(graph: Graph, name: str, change) -> Graph:
    outputs = dict(graph.outputs)
    outputs[name] = change(outputs[name])
    return Graph(outputs, graph.inputs, graph.meta)


def _one_element_off(index: tuple, by: float):
    """block with its element `index` `by` off, through a WHERE on a mask (the rest as it was)."""
    def change(block: UOp) -> UOp:
        mask = np.zeros(block.shape, dtype=bool)
        mask[index] = True
        return UOp.buffer(mask).where(block + by, block)
    return change


def _failed(report) -> list[str]:
    return [label for label, t in report.rows + report.kept if not t.passed]


def _float_inputs(model: Graph) -> list[str]:
    return [n.arg for n in model.inputs if n.dtype.is_float]


# ----------------------------------------------------------------------------- every sample

STE_GIVEN_BACKWARD = {"ste": "w"}  # its gradient is the straight-through estimator's, not the derivative


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.uop")), ids=lambda p: p.stem)
def test_every_samples_diff_file_passes(path):
    model = load(path)
    wrt = [name for name in _float_inputs(model) if name != STE_GIVEN_BACKWARD.get(path.stem)]
    report = check_file(model, _diff(model, wrt), seed=0, file="g.uop")
    assert report.passed, report.lines()
    assert report.kind == "gradient" and report.wrt == wrt
    assert report.rows[0][0] == "grad_* . v" and report.rows[0][1].compared
    for x in wrt:  # every input has element rows of its own: all of a small one, else 4
        size = model.input(x).size if model.input(x).shape else 1
        assert sum(label.split("[")[0] == f"grad_{x}" for label, _ in report.rows) == min(size, 4), x
    assert report.lines()[-1] == (f"ok: g.uop (gradient of {', '.join(report.of)} along {', '.join(wrt)}) "
                                  f"matches finite differences of {', '.join(report.of)} (float64)")


def test_ste_gradient_fails_as_check_fails_it_with_the_note():
    """ste.uop's w gradient is a given backward body's (clipped straight-through): `check
    --wrt w` fails it with a note; --against the written file says the same."""
    model = load(SAMPLES / "ste.uop")
    report = check_file(model, _diff(model, ["x", "w"]), seed=0, file="ste-grad.uop")
    assert not report.passed
    assert all(label.startswith(("grad_w", "grad_*")) for label in _failed(report)), _failed(report)
    assert report.notes == ["w: its gradient passes through CALL quantise_ste, whose backward body is given, not "
                            "derived: finite differences of the forward need not match it"]
    assert report.lines()[-1] == "note: " + report.notes[0] and report.to_dict()["notes"] == report.notes


# ----------------------------------------------------------------------------- against torch

def _mlp_point(seed=5) -> dict:
    rng = np.random.default_rng(seed)
    model = load(SAMPLES / "mlp.uop")
    return {n.arg: rng.standard_normal(n.shape) for n in model.inputs}


def _torch_mlp_gradient(point: dict) -> dict:
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in point.items()}
    prediction = torch.relu(t["x"] @ t["w1"] + t["b1"]) @ t["w2"] + t["b2"]
    ((prediction - t["y"]) ** 2).mean().backward()
    return {k: v.grad.numpy() for k, v in t.items()}


def test_the_file_the_check_and_torch_agree_on_the_mlp():
    """At one point: the diff file's grad_<x> (float64) is torch's to 1e-12; the check
    passes it, and passes a file of torch's gradient as constants; a file 1.5 times too
    large is off by 1/3 relative in every row, as against torch."""
    model, point = load(SAMPLES / "mlp.uop"), _mlp_point()
    wrt = ["w1", "b1", "w2", "b2"]
    written = _diff(model, wrt)
    theirs = _torch_mlp_gradient(point)
    ours = evaluate_graph(to_float64(written), point, simplify=None)
    for x in wrt:
        np.testing.assert_allclose(ours[f"grad_{x}"], theirs[x], rtol=1e-12, atol=1e-14)
    assert check_file(model, written, inputs=point).passed
    torch_file = Graph({f"grad_{x}": UOp.buffer(theirs[x].astype(np.float32)) for x in wrt}, model.inputs,
                       written.meta)
    report = check_file(model, torch_file, inputs=point)
    assert report.passed and all(t.compared for _, t in report.rows), report.lines()
    wrong = check_file(model, _planted(written, "grad_w2", lambda o: o * 1.5), inputs=point)
    bad = [t for label, t in wrong.rows if label.startswith("grad_w2[")]
    scale = 1.5 * theirs["w2"]
    assert np.max(np.abs(scale - theirs["w2"]) / np.abs(scale)) == pytest.approx(1 / 3)
    assert len(bad) == 4 and all(not t.passed and t.max_rel_error == pytest.approx(1 / 3, abs=1e-6) for t in bad)


def test_a_second_order_file_is_torchs_double_backward_and_passes():
    """g2 = diff of g1's sum(grad_w1) along w1 is torch's d/dw1 sum(d loss/d w1) (double
    backward, float64) to 1e-12, and passes against g1."""
    torch = pytest.importorskip("torch")
    mlp, point = load(SAMPLES / "mlp.uop"), _mlp_point(seed=7)
    g1 = _diff(mlp, ["w1"])
    g2 = _diff(g1, ["w1"], of=["grad_w1"], cotangent="ones")
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in point.items()}
    prediction = torch.relu(t["x"] @ t["w1"] + t["b1"]) @ t["w2"] + t["b2"]
    (grad_w1,) = torch.autograd.grad(((prediction - t["y"]) ** 2).mean(), t["w1"], create_graph=True)
    (theirs,) = torch.autograd.grad(grad_w1.sum(), t["w1"])
    ours = evaluate_graph(to_float64(g2), point, simplify=None)["grad_w1"]
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-14)
    assert np.abs(ours).max() > 0.1  # the curvature is there (the MSE's, through the ReLU's active units)
    report = check_file(g1, g2, inputs=point)
    assert report.passed and all(t.compared for _, t in report.rows), report.lines()


# ----------------------------------------------------------------------------- planted wrong files

def test_planted_wrong_files_fail_naming_the_output(tmp_path):
    """Written by diff, then edited in Python and saved: each fails with exit 1 and names
    the output (and, for one element off, that element alone)."""
    mlp = SAMPLES / "mlp.uop"
    model = load(mlp)
    good = _diff(model, ["w1", "b1", "w2", "b2"])
    save(good, tmp_path / "good.uop")
    done = uopgrad_in_process("check", mlp, "--against", "good.uop", cwd=tmp_path)
    assert done.exit_code == 0, done.output
    named = [line.split()[0] for line in done.stdout.splitlines()[1:-1]]
    w1_element = next(label for label in named if label.startswith("grad_w1["))  # one the check compares alone
    index = tuple(int(i) for i in w1_element[len("grad_w1["):-1].split(","))
    plants = {
        "scaled.uop": (_planted(good, "grad_w1", lambda o: o * 1.5), "grad_w1["),
        "w1-element.uop": (_planted(good, "grad_w1", _one_element_off(index, 1e-3)), w1_element),
        "b2-element.uop": (_planted(good, "grad_b2", _one_element_off((2,), 1e-3)), "grad_b2[2]"),
    }
    for name, (graph, wrong) in plants.items():
        save(graph, tmp_path / name)
        done = uopgrad_in_process("check", mlp, "--against", name, cwd=tmp_path)
        assert done.exit_code == 1, (name, done.output)
        verdict = done.stdout.splitlines()[-1]
        assert verdict.startswith("FAILED: ") and wrong in verdict, (name, verdict)
        failed = verdict[len("FAILED: "):].split(", ")
        if name != "scaled.uop":  # one element off: that element alone of its input's rows
            assert [f for f in failed if f.startswith(wrong.split("[")[0] + "[")] == [wrong], failed
        else:
            assert {f for f in failed if f.startswith("grad_w1[")} == {n for n in named if n.startswith("grad_w1[")}
    done = uopgrad_in_process("check", mlp, "--against", "b2-element.uop", "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.exit_code == 1 and not report["passed"]
    # 1e-3 in one element of 4 hides in the random direction's tolerance; its own row names it
    assert [t["target"] for t in report["targets"] if not t["passed"]] == ["grad_b2[2]"]


def test_gradients_swapped_fail_and_of_another_shape_are_refused():
    """attention's wq and wk are both [16,16]: their gradients swapped load and fail, each
    named; w1's and b1's of the mlp cannot be the other's: refused, naming the output."""
    model = load(SAMPLES / "attention.uop")
    good = _diff(model, ["wq", "wk"])
    swapped = Graph({"grad_wq": good.outputs["grad_wk"], "grad_wk": good.outputs["grad_wq"]}, good.inputs, good.meta)
    report = check_file(model, swapped, seed=1)
    assert not report.passed and {label.split("[")[0] for label in _failed(report)} == {"grad_* . v", "grad_wq", "grad_wk"}
    assert len(_failed(report)) == len(report.rows) == 9  # each element compared is wrong
    mlp = load(SAMPLES / "mlp.uop")
    good = _diff(mlp, ["w1", "b1"])
    swapped = Graph({"grad_w1": good.outputs["grad_b1"], "grad_b1": good.outputs["grad_w1"]}, good.inputs, good.meta)
    with pytest.raises(EvaluationError, match=r"^f.uop: its output grad_w1 float32\[32\] is not shaped as the model's "
                                              r"input w1 float32\[8,32\]: not its gradient$"):
        check_file(mlp, swapped, file="f.uop")


def test_a_nan_in_the_file_fails_and_a_forward_nan_is_said_first():
    model = _model()
    written = _diff(model, ["x", "w"], of=["loss"])
    nan = check_file(model, _planted(written, "grad_w", lambda o: o * float("nan")), seed=0)
    assert not nan.passed and not any(t.noisy for _, t in nan.rows)
    assert nan.lines()[-1] == "FAILED: grad_* . v, grad_w[0], grad_w[1], grad_w[2]"
    x = UOp.param("x", (2,), f64)
    logs = Graph({"loss": x.log2().sum()}, inputs=[x])
    report = check_file(logs, _diff(logs, ["x"]), inputs={"x": np.array([-1.0, 2.0])})
    lines = report.lines()
    assert not report.passed and lines[-1] == "FAILED: the forward value is not finite"
    assert lines[0].startswith("the forward value is not finite at these inputs (loss = nan): no value of FILE")
    assert report.to_dict()["forward_finite"] is False


def test_every_row_at_a_kink_is_not_checked():
    """sum(relu(x)) at x = 0: every element at the kink, nothing compared: never ok."""
    x = UOp.param("x", (3,), f64)
    model = Graph({"loss": x.relu().sum()}, inputs=[x])
    report = check_file(model, _diff(model, ["x"]), inputs={"x": np.zeros(3)})
    assert not report.passed and all(t.kink for _, t in report.rows), report.lines()
    assert any(line.startswith("not checked: every target at a kink") for line in report.lines()), report.lines()
    assert sum(line.startswith("note: the derivative jumps") for line in report.lines()) == 4


# ----------------------------------------------------------------------------- diff's variants

def test_a_cotangent_input_file_weighs_the_output_by_it():
    """--cotangent input: L = <u, y>, u the file's cotangent_y, drawn as check draws inputs
    (or given); grad_x = u 2 x w, grad_w = u x^2 by hand. A file seeded with ones, its
    cotangent input left unused, fails; several outputs add up."""
    model = _model()
    written = _diff(model, ["x", "w"], of=["y"], cotangent="input")
    assert written.input_names == ["x", "w", "cotangent_y"]
    point = {"x": np.array([0.5, -1.25, 2.0]), "w": np.array([1.5, 0.75, -0.5]), "cotangent_y": np.array([2., -3., .5])}
    found = evaluate_graph(written, point, simplify=None)
    u, x, w = point["cotangent_y"], point["x"], point["w"]
    np.testing.assert_allclose(found["grad_x"], u * 2 * x * w, rtol=1e-15)
    np.testing.assert_allclose(found["grad_w"], u * x * x, rtol=1e-15)
    assert check_file(model, written, inputs=point).passed
    assert check_file(model, written, seed=4).passed
    ones = _diff(model, ["x", "w"], of=["y"], cotangent="ones")
    assert check_file(model, ones, seed=4).passed
    unweighted = Graph(ones.outputs, written.inputs, written.meta)  # says input, seeded with ones
    report = check_file(model, unweighted, seed=4)
    assert not report.passed and "grad_w[1]" in _failed(report)
    both = _diff(model, ["x", "w"], of=["y", "loss"], cotangent="input")
    assert check_file(model, both, seed=4).passed
    only_y = Graph({**both.outputs, "grad_w": written.outputs["grad_w"]}, both.inputs, both.meta)
    assert not check_file(model, only_y, seed=4).passed  # loss's part of grad_w left out


def test_the_output_differentiated_is_the_one_compared():
    """A file of loss against differences of loss, not of the model's first output y."""
    model = _model()
    assert check_file(model, _diff(model, ["x", "w"], of=["loss"]), seed=2).passed
    of_y = _diff(model, ["x", "w"], of=["y"], cotangent="ones")
    said_loss = Graph(of_y.outputs, of_y.inputs, {**of_y.meta, "gradient_of": "loss"})
    assert not check_file(model, said_loss, seed=2).passed


def test_a_keep_forward_file_checks_its_kept_outputs_too():
    model = _model()
    written = _diff(model, ["x", "w"], of=["loss"], keep_forward=True)
    assert list(written.outputs) == ["y", "loss", "grad_x", "grad_w"]
    report = check_file(model, written, seed=1)
    assert report.passed and [label for label, _ in report.kept] == ["y", "loss"]
    assert all(t.max_abs_error == 0 for _, t in report.kept)
    kept = [t for t in report.to_dict()["targets"] if t.get("kept_forward")]
    assert [t["target"] for t in kept] == ["y", "loss"]
    wrong = check_file(model, _planted(written, "loss", lambda o: o * 1.01), seed=1)
    assert not wrong.passed and wrong.lines()[-1] == "FAILED: loss"
    grad = check_file(model, _planted(written, "grad_x", lambda o: o * 1.01), seed=1)
    assert not grad.passed and "grad_x[1]" in _failed(grad) and not [label for label, _ in grad.kept
                                                                       if label in _failed(grad)]


def test_a_jvp_keep_forward_file_checks_its_kept_outputs_too():
    """jvp --keep-forward writes the model's outputs before jvp_<y>: compared with the
    model's, as a gradient file's are (a wrong one fails, named; right ones alone are no
    verdict)."""
    model = _model()
    written = forward.jvp(model, ["x", "w"], keep_forward=True)
    assert list(written.outputs) == ["y", "loss", "jvp_y", "jvp_loss"]
    report = check_file(model, written, seed=1)
    assert report.passed and [label for label, _ in report.kept] == ["y", "loss"]
    assert all(t.max_abs_error == 0 for _, t in report.kept)
    wrong = check_file(model, _planted(written, "y", lambda o: o * 1.01), seed=1)
    assert not wrong.passed and wrong.lines()[-1] == "FAILED: y"
    plain = check_file(model, forward.jvp(model, ["x", "w"]), seed=1)
    assert plain.passed and plain.kept == []


def test_a_kept_output_that_is_nan_in_the_model_too_agrees():
    """A kept output not differentiated may be nan at the point, in the model as in the file."""
    x = UOp.param("x", (2,), f64)
    model = Graph({"loss": (x * x).sum(), "logs": x.log2()}, inputs=[x])
    report = check_file(model, _diff(model, ["x"], of=["loss"], keep_forward=True), inputs={"x": np.array([-1.0, 2.0])})
    assert report.passed, report.lines()


# ----------------------------------------------------------------------------- second order

def test_a_gradient_of_a_gradient_is_checked_against_the_first_file(tmp_path):
    """g2 = diff of g1's sum(grad_w1): its model is g1 (whose output it differentiates, the
    first gradient as written), not mlp.uop, which has no grad_w1 and is refused with a
    hint. Numbered outputs (--keep-forward: grad2_w1) and a meta alike its model's (diff of
    the kept loss again) are the file's own."""
    mlp = load(SAMPLES / "mlp.uop")
    g1 = _diff(mlp, ["w1", "b1"])
    g2 = _diff(g1, ["w1"], of=["grad_w1"], cotangent="ones")
    assert g2.meta["gradient_of"] == "grad_w1"
    report = check_file(g1, g2, seed=0)
    assert report.passed and report.of == ["grad_w1"], report.lines()
    assert not check_file(g1, _planted(g2, "grad_w1", _one_element_off((7, 3), 1e-3)), seed=0).passed
    both = _diff(g1, ["w1", "b1"], of=["grad_w1"], cotangent="ones")  # named as g1's outputs: none kept
    assert list(both.outputs) == list(g1.outputs) and check_file(g1, both, seed=0).passed
    with pytest.raises(EvaluationError, match=r"^g2.uop: its meta says it is the gradient of 'grad_w1', and the model "
                                              r"has no such output \(its outputs: loss\): grad_w1 is an output uopgrad "
                                              r"writes: give the file that has it as MODEL$"):
        check_file(mlp, g2, file="g2.uop")
    kept = _diff(g1, ["w1"], of=["grad_w1"], cotangent="input", keep_forward=True)
    assert list(kept.outputs) == ["grad_w1", "grad_b1", "grad2_w1"] and kept.input_names[-1] == "cotangent_grad_w1"
    assert check_file(g1, kept, seed=0).passed
    with_loss = _diff(mlp, ["w1"], keep_forward=True)
    again = _diff(with_loss, ["w1"], of=["loss"])
    assert again.meta["gradient_of"] == with_loss.meta["gradient_of"] == "loss"
    report = check_file(with_loss, again, seed=0)
    assert report.passed and report.kind == "gradient"
    jvp = forward.jvp(g1, ["w1"])  # gradient_of alike is the model's: the file is the jvp
    assert check_file(g1, jvp, seed=0).kind == "jvp"


# ----------------------------------------------------------------------------- refusals, CLI

def test_files_not_of_this_model_are_refused_in_one_line(tmp_path):
    mlp, logreg = SAMPLES / "mlp.uop", SAMPLES / "logreg.uop"
    model = load(mlp)
    good = _diff(model, ["w1", "b1"])
    save(good, tmp_path / "g.uop")
    save(Graph({"grad_w1": good.outputs["grad_w1"]}, good.inputs, good.meta), tmp_path / "no-b1.uop")
    save(Graph(good.outputs, [good.inputs[1], good.inputs[0], *good.inputs[2:]], good.meta), tmp_path / "no-x.uop")
    refusals = {
        (logreg, "g.uop"): "uopgrad: error: g.uop: its meta says it is along 'w1', and the model has no such input",
        (mlp, "no-b1.uop"): "uopgrad: error: no-b1.uop: it has no output grad_b1, which its meta says it holds",
        (mlp, "no-x.uop"): "uopgrad: error: no-x.uop: its input 1 is w1 float32[8,32], where the model's input 1 is "
                           "x float32[16,8]: not written from this model",
    }
    for (model_path, name), head in refusals.items():
        done = uopgrad_in_process("check", model_path, "--against", name, cwd=tmp_path)
        assert done.exit_code == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.output
        assert done.stderr.startswith(head), done.stderr
    done = uopgrad_in_process("check", mlp, "--against", "g.uop", "--wrt", "w1", cwd=tmp_path)
    assert done.exit_code == 2 and "--wrt w1 is not what g.uop is of: its meta says gradient_wrt=w1,b1" in done.stderr
    model = _model()
    with_u = _diff(model, ["x"], of=["y"], cotangent="input")
    with pytest.raises(EvaluationError, match=r"^f.uop: it has 4 inputs, the model and its directions 3 \(more: z\): "
                                              r"not written from this model$"):
        check_file(model, Graph(with_u.outputs, [*with_u.inputs, UOp.param("z", (1,), f64)], with_u.meta), file="f.uop")


def test_cli_json_document(tmp_path):
    model = _model()
    save(model, tmp_path / "m.uop")
    save(_diff(model, ["x", "w"], of=["loss"], keep_forward=True), tmp_path / "g.uop")
    done = uopgrad_in_process("check", "m.uop", "--against", "g.uop", "--json", "--seed", "2", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.exit_code == 0
    assert set(report) == {"check", "file", "kind", "of", "wrt", "passed", "rtol", "atol", "dtype", "targets"}
    assert (report["check"], report["file"], report["kind"], report["of"], report["wrt"], report["dtype"]) == (
        "against", "g.uop", "gradient", ["loss"], ["x", "w"], "float64")
    assert [t["target"] for t in report["targets"]] == ["grad_* . v", "grad_x[0]", "grad_x[1]", "grad_x[2]",
                                                        "grad_w[0]", "grad_w[1]", "grad_w[2]", "y", "loss"]
    assert all({"target", "max_abs_error", "max_rel_error", "passed", "kink"} <= set(t) for t in report["targets"])
    assert [t.get("kept_forward", False) for t in report["targets"]] == [False] * 7 + [True] * 2


def test_a_file_with_no_kind_is_refused_naming_diff_too():
    model = _model()
    with pytest.raises(EvaluationError, match=r"^f.uop: its meta names none of jvp_of, hvp_of, jacobian_of, "
                                              r"hessian_of, gradient_of \(with their _wrt\): not a file uopgrad diff, "
                                              r"jvp, hvp, jacobian or hessian wrote$"):
        check_file(model, model, file="f.uop")
