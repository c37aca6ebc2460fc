"""Tests written for the survivors of the first mutation runs of tools/file_check.py
(`check MODEL --against FILE`) and tools/forward_differences.py (the finite-difference
comparison check --hvp, check --against and plain check share), 2026-12-07: what the
report says (its lines, its JSON), which columns and elements it draws, the refusals'
words, and the comparison's tolerances, kinks, noise and `not checked` at their edges."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import UOp, dtypes
from uopcli.core.graph import Graph
from uopcli.errors import EvaluationError
from uopcli.tools import forward
from uopcli.tools.differentiate import differentiate
from uopcli.tools.file_check import COLUMNS, check_file

f64 = dtypes.float64


def _model():
    """y = x * x * w (vector), loss = sum(sin(y)) + sum(w^3)."""
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    y = x * x * w
    return Graph({"y": y, "loss": y.sin().sum() + (w * w * w).sum()}, inputs=[x, w])


def _wide_model():
    """y = sin(x) * w with x [2,3] (6 elements, more than COLUMNS) and w [3]."""
    x, w = UOp.param("x", (2, 3), f64), UOp.param("w", (3,), f64)
    return Graph({"y": (x.sin() * w).sum(1), "loss": (x.sin() * w).sum()}, inputs=[x, w])


def _planted(graph: Graph, name: str, change) -> Graph:
    outputs = dict(graph.outputs)
    outputs[name] = change(outputs[name])
    return Graph(outputs, graph.inputs, graph.meta)


def _seeded_picks(shape: tuple, rng) -> list[tuple]:
    """The indices the module docstring promises: COLUMNS of them drawn without replacement
    from np.random.default_rng([seed, 3]), in order (all of an input with at most COLUMNS)."""
    size = int(np.prod(shape))
    flat = range(size) if size <= COLUMNS else sorted(rng.choice(size, COLUMNS, replace=False).tolist())
    return [tuple(int(i) for i in np.unravel_index(k, shape)) for k in flat]


# ----------------------------------------------------------------------------- the report's words

def test_the_ok_line_names_what_was_differenced_for_each_kind():
    """jvp and jacobian: "its outputs"; hvp and hessian: "its gradient"; a gradient file:
    the outputs differentiated, comma-separated."""
    model = _model()
    files = {
        "jvp": (forward.jvp(model, ["x"]), "jvp of y, loss along x", "its outputs"),
        "jacobian": (forward.jacobian(model, ["x", "w"], ["y"]), "jacobian of y along x, w", "its outputs"),
        "hvp": (forward.hvp(model, ["x", "w"], ["loss"]), "hvp of loss along x, w", "its gradient"),
        "gradient": (differentiate(model, ["x", "w"], of=["y", "loss"], cotangent="ones")[0],
                     "gradient of y, loss along x, w", "y, loss"),
    }
    for kind, (written, what, differenced) in files.items():
        report = check_file(model, written, seed=3, file="f.uop")
        assert report.passed, (kind, report.lines())
        assert report.lines()[-1] == f"ok: f.uop ({what}) matches finite differences of {differenced} (float64)", kind


def test_a_kept_forward_target_in_json_has_exactly_its_keys():
    model = _model()
    written = differentiate(model, ["x"], of=["loss"], keep_forward=True)[0]
    targets = check_file(model, written, seed=1).to_dict()["targets"]
    kept = [t for t in targets if t.get("kept_forward")]
    assert [t["target"] for t in kept] == ["y", "loss"]
    assert all(set(t) == {"target", "max_abs_error", "max_rel_error", "passed", "kink", "kept_forward"} for t in kept)
    assert all(set(t) == {"target", "max_abs_error", "max_rel_error", "passed", "kink"}
               for t in targets if not t.get("kept_forward"))


def test_a_wrong_direction_input_is_named_as_a_direction():
    """Refusals count the model's inputs, then the directions the command added, from 1."""
    model = _model()
    meta = forward.jvp(model, ["x", "w"]).meta
    x, w, v = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64), UOp.param("tangent_x", (3,), f64)
    outputs = {"jvp_y": x * 2.0, "jvp_loss": x.sum()}  # the inputs after x need not be reached

    def refused(inputs, match):
        with pytest.raises(EvaluationError, match=match):
            check_file(model, Graph(outputs, inputs, meta), file="f.uop")
    refused([x, w, v, UOp.param("tangent_w", (4,), f64)], r"^f.uop: its input 4 is tangent_w float64\[4\], where "
            r"the model's direction 2 is tangent_w float64\[3\]: not written from this model$")
    refused([x, w, UOp.param("tangent_x", (2,), f64)], r"^f.uop: its input 3 is tangent_x float64\[2\], where "
            r"the model's direction 1 is tangent_x float64\[3\]: not written from this model$")
    refused([x, UOp.param("v", (3,), f64), v], r"^f.uop: its input 2 is v float64\[3\], where "
            r"the model's input 2 is w float64\[3\]: not written from this model$")


# ----------------------------------------------------------------------------- columns and elements drawn

@pytest.mark.parametrize("seed", [0, 3])
def test_a_wide_inputs_columns_are_the_seeded_draw(seed):
    """x has 6 elements: COLUMNS of its columns, drawn by default_rng([seed, 3]) (then w's 3,
    all of them); the same seed draws the same columns; a column wrong in the file is
    named when drawn."""
    model = _wide_model()
    written = forward.jacobian(model, ["x", "w"], ["y"])
    report = check_file(model, written, seed=seed, file="f.uop")
    assert report.passed, report.lines()
    rng = np.random.default_rng([seed, 3])
    x_columns = _seeded_picks((2, 3), rng)
    assert len(x_columns) == COLUMNS
    labels = [label for label, _ in report.rows]
    assert labels == (["jacobian_y_* . v"] + [f"jacobian_y_x[..., {i},{j}]" for i, j in x_columns]
                      + [f"jacobian_y_w[..., {k}]" for k in range(3)])
    assert [label for label, _ in check_file(model, written, seed=seed).rows] == labels
    column = x_columns[1]
    mask = np.zeros((2, 2, 3), dtype=bool)
    mask[(Ellipsis, *column)] = True
    wrong = _planted(written, "jacobian_y_x", lambda b: UOp.buffer(mask).where(b * 1.01, b))
    failed = [label for label, t in check_file(model, wrong, seed=seed).rows if not t.passed]
    assert f"jacobian_y_x[..., {column[0]},{column[1]}]" in failed
    assert [f for f in failed if f.startswith("jacobian_y_x[")] == [f"jacobian_y_x[..., {column[0]},{column[1]}]"]


# ----------------------------------------------------------------------------- a given backward body's note

SAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples"
STE_NOTE = ("w: its gradient passes through CALL quantise_ste, whose backward body is given, not derived: "
            "finite differences of the forward need not match it")


def _ste_at(w):
    from uopcli.formats.uop import load
    model = load(SAMPLES / "ste.uop")
    rng = np.random.default_rng(2)
    point = {"x": rng.standard_normal((8, 4)), "w": w, "y": rng.standard_normal((8, 3))}
    return check_file(model, differentiate(model, ["w"])[0], inputs=point, seed=0)


def test_the_given_backward_note_only_where_its_gradient_failed():
    """ste.uop's w passes through CALL quantise_ste (clip to [-1, 1], round toward zero to
    1/8; backward: straight through where |w| < 1). With every |w| > 1 the estimator's 0
    is the derivative: ok, no note. With the elements the check draws alone (seed 0) at
    1.5 and the others at 0.3 (the estimator's 1 against a step function's 0), only the
    random direction fails, and the note is there for it."""
    report = _ste_at(np.full((4, 3), 1.5))
    assert report.passed and report.notes == [], report.lines()
    picked = _seeded_picks((4, 3), np.random.default_rng([0, 3]))
    w = np.full((4, 3), 0.3)
    for index in picked:
        w[index] = -1.5
    report = _ste_at(w)
    assert [label for label, t in report.rows if not t.passed] == ["grad_* . v"], report.lines()
    assert [label for label, _ in report.rows[1:]] == [f"grad_w[{i},{j}]" for i, j in picked]
    assert report.notes == [STE_NOTE] and report.lines()[-1] == "note: " + STE_NOTE


# ----------------------------------------------------------------------------- an input with no elements

def test_a_gradient_along_an_empty_input_compares_nothing_and_is_not_ok():
    """x of shape (0,): its direction is 0 (it has no element), grad_x has no element to
    draw: nothing was compared, "not checked", never ok."""
    x, w = UOp.param("x", (0,), f64), UOp.param("w", (3,), f64)
    model = Graph({"loss": (w * w).sum() + x.sum()}, inputs=[x, w])
    report = check_file(model, differentiate(model, ["x"])[0], seed=0)
    assert [label for label, _ in report.rows] == ["grad_* . v"]
    assert report.rows[0][1].still and not report.passed
    assert report.lines()[-1] == ("not checked: the direction v is 0 (every tangent given is 0), nothing compared "
                                  "there: choose another point or direction (-i, or another --seed)")


def test_a_jvp_along_an_empty_input_and_another_compares_the_other():
    """The step h is scaled by the largest element of the inputs moved; an empty one has
    none (counted 0) and the comparison along w goes on."""
    x, w = UOp.param("x", (0,), f64), UOp.param("w", (3,), f64)
    model = Graph({"y": (w * w).sum() + x.sum()}, inputs=[x, w])
    written = forward.jvp(model, ["x", "w"])
    report = check_file(model, written, seed=0)
    assert report.passed and report.rows[0][1].compared, report.lines()
    assert not check_file(model, _planted(written, "jvp_y", lambda o: o * 1.001), seed=0).passed


def test_a_loss_that_overflows_along_the_direction_warns_nothing():
    """L = sum(exp(x)) at x near 709.78 overflows float64 within the step; the check
    evaluates it silently (numpy's warnings held, as everywhere in the check)."""
    import warnings
    x = UOp.param("x", (2,), f64)
    model = Graph({"y": x.exp()}, inputs=[x])
    written = differentiate(model, ["x"], cotangent="ones")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_file(model, written, inputs={"x": np.array([709.7, 709.7])}, seed=0)
    # L is inf at the point (y is not: the forward check passes it): every difference is nan and fails
    assert report.lines()[-1] == "FAILED: grad_* . v, grad_x[0], grad_x[1]"
    assert all(np.isnan(t.max_abs_error) and not (t.kink or t.noisy) for _, t in report.rows)


# ----------------------------------------------------------------------------- names: refusals, numbering, directions

def test_a_meta_naming_what_the_model_lacks_is_refused_word_for_word():
    model = _model()
    written = forward.jvp(model, ["x"])
    for meta, message in [
        ({"jvp_of": "z", "jvp_wrt": "x"}, "f.uop: its meta says it is the jvp of 'z', and the model has no such "
                                          "output (its outputs: y, loss)"),
        ({"jvp_of": "y", "jvp_wrt": "z"}, "f.uop: its meta says it is along 'z', and the model has no such input "
                                          "(its inputs: x, w)"),
    ]:
        with pytest.raises(EvaluationError) as refused:
            check_file(model, Graph(written.outputs, written.inputs, meta), file="f.uop")
        assert str(refused.value) == message


def test_a_jvp_file_of_a_model_with_an_output_named_jvp_y():
    """The model has outputs y and jvp_y. jvp writes jvp_y and jvp_jvp_y; with
    --keep-forward it keeps y and jvp_y and numbers its own jvp2_y and jvp_jvp_y: the
    check expects each file's names, and compares them."""
    x = UOp.param("x", (3,), f64)
    model = Graph({"y": x.sin(), "jvp_y": x * x}, inputs=[x])
    plain, kept = forward.jvp(model, ["x"]), forward.jvp(model, ["x"], keep_forward=True)
    assert list(plain.outputs) == ["jvp_y", "jvp_jvp_y"]
    assert list(kept.outputs) == ["y", "jvp_y", "jvp2_y", "jvp_jvp_y"]
    for written, labels in [(plain, ["jvp_y", "jvp_jvp_y"]), (kept, ["jvp2_y", "jvp_jvp_y"])]:
        report = check_file(model, written, seed=0)
        assert report.passed and [label for label, _ in report.rows] == labels, report.lines()
    wrong = check_file(model, _planted(kept, "jvp2_y", lambda o: o * 1.01), seed=0)
    assert wrong.lines()[-1] == "FAILED: jvp2_y"


def test_a_matrix_files_direction_is_drawn_as_a_jvp_files_tangents_are(monkeypatch):
    """A jacobian file has no tangent inputs: its random direction is drawn as check draws
    the jvp file's tangent_x (float64 x: a float64 draw, not a float32 one widened), so both
    compare J v along the same v, bit for bit."""
    from uopcli.tools import file_check
    seen = []
    compare = file_check._jvp_against
    monkeypatch.setattr(file_check, "_jvp_against",
                        lambda model, of, wrt, analytic, values, tangent: seen.append(values["tangent_x"]) or
                        compare(model, of, wrt, analytic, values, tangent))
    model = _model()
    assert check_file(model, forward.jvp(model, ["x"], ["y"]), seed=5).passed
    assert check_file(model, forward.jacobian(model, ["x"], ["y"]), seed=5).passed
    assert seen[0].dtype == seen[1].dtype == np.float64
    assert seen[0].tobytes() == seen[1].tobytes()
    assert seen[1].astype(np.float32).astype(np.float64).tobytes() != seen[1].tobytes()  # a float64 draw
