"""Tests written for the survivors of the first mutation runs of tools/file_check.py
(`check MODEL --against FILE`) and tools/forward_differences.py (the finite-difference
comparison check --hvp, check --against and plain check share), 2026-12-07: what the
report says (its lines, its JSON), which columns and elements it draws, the refusals'
words, and the comparison's tolerances, kinks, noise and `not checked` at their edges."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float32])
def test_a_matrix_files_direction_is_drawn_as_a_jvp_files_tangents_are(monkeypatch, dtype):
    """A jacobian file has no tangent inputs: its random direction is drawn as check draws
    the jvp file's tangent_x, in x's dtype (a float64 draw for float64 x, a float32 one for
    float32 x), so both compare J v along the same v, bit for bit."""
    from uopcli.tools import file_check
    seen = []
    compare = file_check._jvp_against
    monkeypatch.setattr(file_check, "_jvp_against",
                        lambda model, of, wrt, analytic, values, tangent: seen.append(values["tangent_x"]) or
                        compare(model, of, wrt, analytic, values, tangent))
    x, w = UOp.param("x", (3,), dtype), UOp.param("w", (3,), dtype)
    model = Graph({"y": (x * x * w).sin()}, inputs=[x, w])
    assert check_file(model, forward.jvp(model, ["x"], ["y"]), seed=5).passed
    assert check_file(model, forward.jacobian(model, ["x"], ["y"]), seed=5).passed
    assert seen[0].dtype == seen[1].dtype == np.float64
    assert seen[0].tobytes() == seen[1].tobytes()
    narrowed = seen[1].astype(np.float32).astype(np.float64).tobytes() == seen[1].tobytes()
    assert narrowed == (dtype == dtypes.float32)


def test_inputs_more_or_missing_are_all_named():
    model = _model()
    written = forward.jvp(model, ["x", "w"])
    z, q = UOp.param("z", (1,), f64), UOp.param("q", (2,), f64)
    with pytest.raises(EvaluationError) as refused:
        check_file(model, Graph(written.outputs, [*written.inputs, z, q], written.meta), file="f.uop")
    assert str(refused.value) == ("f.uop: it has 6 inputs, the model and its directions 4 (more: z, q): "
                                  "not written from this model")
    x = UOp.param("x", (3,), f64)
    with pytest.raises(EvaluationError) as refused:
        check_file(model, Graph({"jvp_y": x * 2.0, "jvp_loss": x.sum()}, [x], written.meta), file="f.uop")
    assert str(refused.value) == ("f.uop: it has 1 inputs, the model and its directions 4 (missing: w, tangent_x, "
                                  "tangent_w): not written from this model")


# ----------------------------------------------------------------------------- the forward value first

@pytest.mark.parametrize("kind", ["jvp", "jacobian", "gradient"])
def test_a_second_output_not_finite_is_said_first(kind):
    """A file of y and z (z = sum(log2(x)), -inf... nan at x < 0): every output the file
    differentiates is looked at, not only the first: the forward value is not finite."""
    x, w = UOp.param("x", (2,), f64), UOp.param("w", (2,), f64)
    model = Graph({"y": x * w, "z": x.log2().sum()}, inputs=[x, w])
    written = {"jvp": lambda: forward.jvp(model, ["x"]), "jacobian": lambda: forward.jacobian(model, ["x"]),
               "gradient": lambda: differentiate(model, ["x"], of=["y", "z"], cotangent="ones")[0]}[kind]()
    report = check_file(model, written, inputs={"x": np.array([-1.0, 2.0]), "w": np.array([0.5, 3.0])})
    assert not report.passed and report.lines()[-1] == "FAILED: the forward value is not finite", report.lines()
    assert report.lines()[0].startswith("the forward value is not finite at these inputs (z = nan)"), report.lines()


HESSIAN_ROWS = ["hessian_x_* . v", "hessian_w_* . v"] + [
    f"hessian_{a}_{b}[..., {k}]" for b in ("x", "w") for k in range(3) for a in ("x", "w")]


@pytest.mark.parametrize("of, cotangent", [("loss", None), ("y", "ones"), ("y", "input")])
def test_a_hessian_files_rows_are_named_by_its_inputs(of, cotangent):
    """A row per input a of H v (hessian_<a>_* . v), then each column b[k] of each block:
    also for a non-scalar output weighted by ones (its weights made by the check) or by
    its cotangent input; a block planted wrong in one column is named there alone."""
    model = _model()
    written = forward.hessian(model, ["x", "w"], [of], cotangent=cotangent)
    report = check_file(model, written, seed=1)
    assert report.passed and [label for label, _ in report.rows] == HESSIAN_ROWS, report.lines()
    mask = np.zeros((3, 3), dtype=bool)
    mask[:, 2] = True
    wrong = _planted(written, "hessian_w_x", lambda b: UOp.buffer(mask).where(b + 1e-3, b))
    failed = [label for label, t in check_file(model, wrong, seed=1).rows if not t.passed]
    assert failed == ["hessian_w_* . v", "hessian_w_x[..., 2]"], failed


# ----------------------------------------------------------------------------- forward_differences: the targets' JSON

def test_a_targets_json_says_why_it_was_not_compared():
    from uopcli.tools.forward_differences import Target
    nan, inf = float("nan"), float("inf")
    base = {"target": "hvp_w", "max_abs_error": 1.5, "max_rel_error": 0.25, "passed": True, "kink": False}
    assert Target("hvp_w", 1.5, 0.25, True).to_dict() == base
    assert Target("hvp_w", nan, nan, True, kink=True, kink_at="%2 MAX float64[3]").to_dict() == {
        **base, "max_abs_error": "nan", "max_rel_error": "nan", "kink": True, "kink_at": "%2 MAX float64[3]"}
    assert Target("hvp_w", 1.5, inf, False, noisy=True, noise=2e-4).to_dict() == {
        **base, "max_rel_error": "inf", "passed": False, "noisy": True, "noise": 2e-4}
    assert Target("hvp_w", 0.0, 0.0, True, noisy=True, noise=-inf).to_dict()["noise"] == "-inf"
    assert Target("hvp_w", 0.0, 0.0, True, still=True).to_dict() == {
        **base, "max_abs_error": 0.0, "max_rel_error": 0.0, "direction_zero": True}


# ----------------------------------------------------------------------------- forward_differences: between, at its edges

def test_a_value_between_the_one_sided_differences_to_the_absolute_tolerance():
    """[min - slack, max + slack], slack = ATOL * max(1, max |a|): inclusive at both ends,
    both ends required, the slack growing with the largest |a| (not shrinking)."""
    from uopcli.tools.check import ATOL
    from uopcli.tools.forward_differences import _between
    down, up = np.array([0.0, 1.0]), np.array([1.0, 0.0])
    assert _between(np.array([-0.5 - ATOL]), np.array([-0.5]), np.array([0.5]))  # each end, exactly (slack ATOL)
    assert _between(np.array([0.5 + ATOL]), np.array([0.5]), np.array([-0.5]))
    assert not _between(np.array([-2 * ATOL, 0.5]), down, up)
    assert not _between(np.array([0.5, 1.0 + 2 * ATOL]), down, up)
    assert not _between(np.array([5.0, 0.5]), down, up) and not _between(np.array([0.5, -5.0]), down, up)
    big = np.array([1000.0, 1000.0 + 500 * ATOL])  # slack 1000 ATOL: within it
    assert _between(big, np.array([999.0, 999.0]), np.array([1000.0, 1000.0]))
    assert not _between(big + 2000 * ATOL, np.array([999.0, 999.0]), np.array([1000.0, 1000.0]))
    assert _between(np.zeros(0), np.zeros(0), np.zeros(0))  # nothing to lie outside


# ----------------------------------------------------------------------------- forward_differences: kink sites

def _sites_graph():
    """Inputs `x`, `w` named apart from other tests' (a node is shared by structure in a
    process, with one metadata: test_gradient's softmax tagged an x.max(1) of its own), and
    untagged, as the descriptions below expect."""
    x, w = UOp.param("sites_x", (2, 3), f64), UOp.param("sites_w", (2, 3), f64)
    maximum, reduced = x.maximum(w), x.max(1)
    graph = Graph({"m": maximum, "r": reduced}, inputs=[x, w])
    for node in graph.nodes():
        node.set_meta(None)
    return graph, maximum, reduced


def test_a_max_site_flips_where_its_sides_cross_and_only_there():
    """x.maximum(w) with x[0,2] = w[0,2] = 3 moving along v = 1: which side wins changes
    between -h and h, not between h and 2h; named by its number in the graph."""
    from uopcli.tools.forward_differences import KinkSites
    graph, maximum, _ = _sites_graph()
    x0, w0 = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.array([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    sites = KinkSites(graph, [maximum], ["sites_x"], lambda t: {"sites_x": x0 + t, "sites_w": w0})
    assert sites.flipped(-1e-6, 1e-6) == "%2 MAX float64[2,3]"
    assert sites.flipped(1e-6, 2e-6) == "" and sites.flipped(-2e-6, -1e-6) == ""
    away = sites.along(lambda t: {"sites_x": x0 + 10 + t, "sites_w": w0})
    assert away.flipped(-1e-6, 1e-6) == "" and sites.flipped(-1e-6, 1e-6) == "%2 MAX float64[2,3]"


def test_a_reduce_max_site_flips_where_the_maximum_moves():
    """max over axis 1 with x[0,1] = x[0,2] = 3 moving apart (v = +1, -1): where the
    maximum is changes between -h and h; not between h and 2h, nor along v = 0 there."""
    from uopcli.tools.forward_differences import KinkSites
    graph, _, reduced = _sites_graph()
    x0, v = np.array([[1.0, 3.0, 3.0], [4.0, 5.0, 6.0]]), np.array([[0.0, 1.0, -1.0], [0.0, 0.0, 0.0]])
    sites = KinkSites(graph, [reduced], ["sites_x"], lambda t: {"sites_x": x0 + t * v, "sites_w": x0})
    assert sites.flipped(-1e-6, 1e-6) == "%3 REDUCE float64[2,1]"
    assert sites.flipped(1e-6, 2e-6) == ""
    x1 = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert sites.along(lambda t: {"sites_x": x1 + t * v, "sites_w": x1}).flipped(-1e-6, 1e-6) == ""


def test_a_site_is_described_by_number_op_dtype_shape_name_and_place():
    from uopcli.core.uop import Metadata
    from uopcli.tools.forward_differences import KinkSites
    graph, maximum, _ = _sites_graph()
    sites = KinkSites(graph, [maximum], ["sites_x"], lambda t: {})
    assert sites.describe(maximum) == "%2 MAX float64[2,3]"
    outside = (graph.input("sites_x") * 7.125).set_meta(Metadata("relu", "model.py:12"))  # not a node of the graph
    assert sites.describe(outside) == "MUL float64[2,3] (relu, at model.py:12)"
    scalar = (graph.input("sites_x").sum() * 3.5).set_meta(Metadata("loss"))
    assert sites.describe(scalar) == "MUL float64[] (loss)"


# ----------------------------------------------------------------------------- forward_differences: a kink, or a wrong value

def _kinked(a: float, x0: float, h: float = 1e-4):
    """d/dt of f = max(x0 + t, 0) + 5 against a, through against_differences: the offset
    5 makes f(0) no zero, so a one-sided difference that adds where it subtracts is off."""
    from uopcli.tools.forward_differences import Along, KinkSites, against_differences
    x, w = UOp.param("kinked_x", (), f64), UOp.param("kinked_w", (), f64)  # (see _sites_graph)
    graph = Graph({"y": x.maximum(w) + 5.0}, inputs=[x, w])
    for node in graph.nodes():
        node.set_meta(None)
    feed = lambda t: {"kinked_x": np.float64(x0 + t), "kinked_w": np.float64(0.0)}  # noqa: E731
    sites = KinkSites(graph, [graph.outputs["y"]], ["kinked_x"], feed)
    along = Along(lambda t: {"y": np.float64(max(x0 + t, 0.0) + 5.0)})
    (target,) = against_differences(along, {"y": a}, {"y": "y"}, h, sites)
    return target


def test_at_a_kink_a_value_between_the_sides_is_not_compared_and_one_outside_fails():
    """At x = 0 the one-sided derivatives are 0 and 1, the central 0.5: 0.25, 0 and 1 lie between
    them (a kink, named); 2 and -1 do not: FAILED, no kink. At x = 1 (smooth) 1 passes, 2 fails."""
    for a in (0.25, 0.0, 1.0):
        t = _kinked(a, 0.0)
        assert t.kink and t.passed and not t.compared and t.kink_at == "%2 MAX float64[]", (a, t)
    for a in (2.0, -1.0):
        t = _kinked(a, 0.0)
        assert not (t.kink or t.passed or t.noisy) and t.kink_at == "", (a, t)
        assert t.max_abs_error == pytest.approx(abs(a - 0.5), rel=1e-6)  # against the central difference at h
    assert _kinked(1.0, 1.0).passed and _kinked(1.0, 1.0).compared
    wrong = _kinked(2.0, 1.0)
    assert not (wrong.passed or wrong.kink or wrong.noisy) and wrong.max_abs_error == pytest.approx(1.0, rel=1e-9)


class _Sites:
    """Kink sites stand-in: the site `flips` names, for every pair of points."""

    def __init__(self, flips: str = ""):
        self.flips, self.asked = flips, []

    def flipped(self, t0: float, t1: float) -> str:
        self.asked.append((t0, t1))
        return self.flips


def _wobbly(a: float, amplitude: float, reach: float, sites=None, h: float = 1e-4):
    """d/dt of f = 2t + amplitude * sign(t) for |t| < reach (0 beyond) against a: a step
    in f at 0 that differences at h and h/1000 see (more at h/1000), wider ones may not."""
    from uopcli.tools.forward_differences import Along, against_differences
    along = Along(lambda t: {"f": np.float64(2 * t + (amplitude * np.sign(t) if abs(t) < reach else 0.0))})
    (target,) = against_differences(along, {"f": a}, {"f": "f"}, h, sites or _Sites())
    return target


def test_a_wider_step_beyond_the_noise_passes_named():
    """The wobble reaches 5h: at h the difference is 2.01, at 10h exactly 2: passed there."""
    t = _wobbly(2.0, 1e-6, 5e-4)
    assert (t.name, t.passed, t.compared) == ("f", True, True) and t.max_abs_error < 1e-9, t
    assert t.to_dict()["target"] == "f"
    wrong = _wobbly(2.5, 1e-6, 5e-4)  # no step agrees; at h 2.01, at h/1000 12: the noise hides it
    assert (wrong.passed, wrong.noisy, wrong.kink) == (False, True, False)
    assert wrong.max_abs_error == pytest.approx(0.49, rel=1e-9) and wrong.noise == pytest.approx(9.99, rel=1e-9)


def test_differences_that_do_not_settle_are_noise_unless_a_site_flips():
    """A wobble everywhere: at h 2.1, at h/1000 102, at 10h 2.01, at 100h 2.001: no step
    agrees with 2, and the differences at h and h/1000 are 99.9 apart: too noisy, not
    compared, its errors those at h. A kink site flipping within h makes it FAILED; so
    does a nan value (wrong, not noise)."""
    sites = _Sites()
    t = _wobbly(2.0, 1e-5, math.inf, sites)
    assert (t.name, t.passed, t.noisy, t.kink, t.compared) == ("f", False, True, False, False), t
    assert t.max_abs_error == pytest.approx(0.1, rel=1e-9) and t.max_rel_error == pytest.approx(0.1 / 2.1, rel=1e-9)
    assert t.noise == pytest.approx(99.9, rel=1e-9)
    assert sites.asked[-1] == (-1e-4, 1e-4)
    flipped = _wobbly(2.0, 1e-5, math.inf, _Sites("%3 MAX float64[]"))
    assert not (flipped.passed or flipped.noisy or flipped.kink) and flipped.max_abs_error == pytest.approx(0.1)
    nan = _wobbly(math.nan, 1e-5, math.inf)
    assert not (nan.passed or nan.noisy) and math.isnan(nan.max_abs_error)


# ----------------------------------------------------------------------------- forward_differences: compared, standing still

def test_compared_is_inclusive_at_the_tolerance_and_quiet_on_inf():
    """err <= ATOL * max(1, max |a|) + RTOL * max(|a|, |numeric|) elementwise; 0 against
    1.0001000100010001e-06 is exactly at it (passes), the next float up fails. inf - inf
    is nan: fails, without numpy's warning. Nothing to compare passes with errors 0."""
    import warnings
    from uopcli.tools.forward_differences import compared
    edge = 1.0001000100010001e-06
    at = compared("t", np.array([0.0]), np.array([edge]))
    assert at.passed and at.max_abs_error == edge and at.max_rel_error == 1.0
    assert not compared("t", np.array([0.0]), np.array([np.nextafter(edge, 1.0)])).passed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inf = compared("t", np.array([np.inf, 1.0]), np.array([np.inf, 1.0]))
    assert not inf.passed and math.isnan(inf.max_abs_error)
    empty = compared("t", np.zeros(0), np.zeros(0))
    assert (empty.passed, empty.max_abs_error, empty.max_rel_error) == (True, 0.0, 0.0)
    tiny = compared("t", np.array([0.0]), np.array([1e-310]))  # relative to 1e-300 at least: no division by 0
    assert tiny.passed and tiny.max_rel_error == pytest.approx(1e-10, rel=1e-9)
    assert compared("t", np.array([0.0]), np.array([0.0])).max_rel_error == 0.0


def test_standing_still_only_when_every_direction_is_zero():
    from uopcli.tools.forward_differences import Target, standing_still
    assert standing_still(["a", "b"], [np.zeros(3), np.array([-0.0])]) == [
        Target("a", 0.0, 0.0, True, still=True), Target("b", 0.0, 0.0, True, still=True)]
    assert standing_still(["a"], [np.zeros(3), np.array([0.0, 1e-300])]) is None


def test_the_ops_that_can_kink_along_a_float_input():
    """MAX, a comparison, TRUNC of floats, REDUCE MAX of floats, a cast or bitcast of a float
    to an integer: a site. The same of integers, a float-to-float cast, a sum, a sine: none."""
    from uopcli.core.ops import Ops
    from uopcli.tools.forward_differences import _can_kink
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    i, j = UOp.param("i", (3,), dtypes.int32), UOp.param("j", (3,), dtypes.int32)
    sites = {"MAX": x.maximum(w), "CMPLT": x < w, "TRUNC": x.trunc(), "REDUCE MAX": x.max(),
             "CAST to int": x.cast(dtypes.int32), "BITCAST to int": x.bitcast(dtypes.int64)}
    smooth = {"MAX of ints": i.maximum(j), "CMPLT of ints": i < j, "REDUCE MAX of ints": i.max(),
              "REDUCE ADD": x.sum(), "CAST to float32": x.cast(dtypes.float32), "SIN": x.sin(),
              "CAST int to float": i.cast(f64)}
    for name, node in {**sites, **smooth}.items():
        node = next(n for n in [node, *node.src] if n.op not in (Ops.RESHAPE, Ops.PARAM))  # max() reshapes
        assert _can_kink(node) == (name in sites), (name, node.op)


def test_a_calls_sites_are_its_forward_bodys_not_its_backward_bodys():
    """A CALL whose forward is sin and whose given backward compares (w < 0): no site (a
    kink of the backward body is no kink of the function); one whose forward takes a
    maximum: that MAX, named inside the call."""
    from uopcli.tools.forward_differences import KinkSites
    w = UOp.param("w", (3,), f64)

    def along(fn, backward):
        graph = Graph({"loss": UOp.trace_call("f", fn, backward, w).gettuple(0).sum()}, inputs=[w])
        return graph, KinkSites(graph, [graph.outputs["loss"]], ["w"], lambda t: {"w": np.full(3, 1.0 + t)})

    graph, sites = along(lambda s: s.sin(), lambda s, g: (s < 0.0).where(g * s.cos(), g * s.cos()))
    assert not sites and sites.flipped(-1e-6, 1e-6) == ""
    inner = lambda s: UOp.trace_call("g", lambda r: r.sin(), lambda r, g: (r < 0.0).where(g, g * 2.0), s)  # noqa: E731
    graph, sites = along(lambda s: inner(s).gettuple(0) * 3.0, None)  # a call inside: its backward is no site
    assert not sites and sites.flipped(-1e-6, 1e-6) == ""
    graph, sites = along(lambda s: s.maximum(s * 0.5), lambda s, g: g)
    call = next(n for n in graph.nodes() if n.op == "CALL")
    assert sites and sites.flipped(-1e-6, 1e-6) == f"MAX inside the body of {sites.describe(call)}"
    assert sites.describe(call).endswith(" CALL void[]")


def test_the_file_is_evaluated_as_eval_runs_it_or_as_written_if_asked():
    """diff's gradient of sum(sigmoid(x)) at x = -1000 is, as written, 0 * inf = nan in
    float64; tinygrad's rewrites, eval's default, make it 0. --against checks the values
    `eval` gives (0: passes, as plain `check --wrt x` does); with simplify="exact"
    (`--literal`) the file as written: that element is nan and fails, the other passes."""
    from uopcli.backends.numpy import evaluate_graph
    x = UOp.param("x", (2,), f64)
    model = Graph({"loss": x.sigmoid().sum()}, inputs=[x])
    written = differentiate(model, ["x"])[0]
    point = {"x": np.array([-1000.0, 0.5])}
    literal = evaluate_graph(written, point, simplify=None)["grad_x"]
    assert math.isnan(literal[0]) and evaluate_graph(written, point)["grad_x"][0] == 0.0
    assert check_file(model, written, inputs=point).passed
    report = check_file(model, written, inputs=point, simplify="exact")
    assert report.lines()[-1] == "FAILED: grad_* . v, grad_x[0]", report.lines()
    assert math.isnan(report.rows[1][1].max_abs_error) and report.rows[2][1].passed
