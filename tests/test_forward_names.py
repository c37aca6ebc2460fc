"""Differentiating a derivative file again with the same names (tools/names.py): a name
already taken gets the lowest free number after its kind, `tangent2_x`, `cotangent2_y`,
`jvp2_y`, `grad2_x`, `jacobian2_a_q_r`, the same in the library and the CLI, and every
value is the derivative it names. The model is f(x) = sum(g(x)), g = sin(x) x^3, whose
derivatives are known in closed form:
    g''  = -x^3 sin x + 6x^2 cos x + 6x sin x
    g''' = -x^3 cos x - 9x^2 sin x + 18x cos x + 6 sin x
so a jvp of a jvp along u then v is sum(g'' u v), a jvp of an hvp along v then w is
g''' v w (elementwise; with w = v, v . that is v^T d3f [v, v]), and three jvps along u, v,
w give sum(g''' u v w)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from uopcli import GradientError, UOp, dtypes
from uopcli.backends.numpy import evaluate_graph
from uopcli.core.graph import Graph
from uopcli.formats.uop import load, save
from uopcli.tools.check import check_gradients
from uopcli.tools.differentiate import _known_good_graph, differentiate
from uopcli.tools.forward import hessian, hvp, jacobian, jvp
from uopcli.tools.forward_check import check_hvp, check_transpose
from uopcli.tools.model_inputs import state_kind
from uopcli.tools.names import cotangent_names, fresh, is_direction, numbered, renamed_note, tangent_names
from uopcli.tools.values import random_value

from test_forward_cli import UOPGRAD, ok, uopgrad  # noqa: E402 - the CLI helpers of the forward-mode CLI tests
from test_forward_cli import values as outputs  # noqa: E402

f64 = dtypes.float64
X = np.array([0.3, -1.2, 2.5])
U = np.array([1.0, -0.5, 2.0])
V = np.array([-0.7, 1.5, 0.25])
W = np.array([2.0, 0.5, -1.25])


def g2(x):
    return -x ** 3 * np.sin(x) + 6 * x ** 2 * np.cos(x) + 6 * x * np.sin(x)


def g3(x):
    return -x ** 3 * np.cos(x) - 9 * x ** 2 * np.sin(x) + 18 * x * np.cos(x) + 6 * np.sin(x)


def model() -> Graph:
    x = UOp.param("x", (3,), f64)
    return Graph({"f": (x.sin() * x * x * x).sum()}, inputs=[x])


# ----------------------------------------------------------------------------- the rule

def test_the_rule_lowest_free_number_after_the_kind():
    taken = {"tangent_x", "tangent2_x", "tangent4_x"}
    assert fresh("tangent", "w", taken) == "tangent_w"       # free: the plain name
    assert fresh("tangent", "x", taken) == "tangent3_x"      # the lowest free, a gap first
    assert fresh("tangent", "x", taken) == "tangent5_x"      # each name given is taken at once
    assert fresh("tangent", "x_2", taken) == "tangent_x_2"   # never read as x's second tangent
    assert taken >= {"tangent_w", "tangent3_x", "tangent5_x", "tangent_x_2"}
    ten = {"grad_y"} | {f"grad{k}_y" for k in range(2, 11)}
    assert fresh("grad", "y", ten) == "grad11_y"
    for name in ("tangent_x", "tangent2_x", "cotangent_y", "cotangent12_y", "tangent3_bn1.running_var"):
        assert is_direction(name), name
    for name in ("tangent", "tangent_", "tangential_x", "tangent2x", "tangents_x", "xtangent_x", "tangent0_x",
                 "tangent1_x", "tangent02_x", "jvp2_x"):
        assert not is_direction(name), name
    assert numbered(["x", "tangent_x", "tangent2_x", "cotangent10_y.z", "jacobian2_a_q_r", "grad_2_x", "hvp1_x"]) == [
        ("tangent_x", "tangent2_x"), ("cotangent_y.z", "cotangent10_y.z"), ("jacobian_a_q_r", "jacobian2_a_q_r")]
    assert renamed_note(["tangent_w"], ["jvp_f"]) is None
    assert renamed_note(["tangent2_x"], ["jvp2_y"]) == ("names already taken, so numbered: tangent_x -> tangent2_x "
                                                        "(input), jvp_y -> jvp2_y (output)")
    many = renamed_note([f"tangent2_x{k}" for k in range(6)], [])
    assert many.endswith("tangent_x3 -> tangent2_x3 (input), ... (6 in all)")


def test_names_are_what_the_graphs_get():
    x, t, c = (UOp.param(n, (3,), f64) for n in ("x", "tangent_x", "cotangent_y"))
    graph = Graph({"y": x * t * c, "s": (x * t).sum()}, inputs=[x, t, c])
    assert tangent_names(graph, ["x", "tangent_x"]) == {"x": "tangent2_x", "tangent_x": "tangent_tangent_x"}
    assert cotangent_names(graph, ["y", "s"]) == {"y": "cotangent2_y", "s": "cotangent_s"}
    assert jvp(graph, ["x", "tangent_x"]).input_names == ["x", "tangent_x", "cotangent_y", "tangent2_x",
                                                          "tangent_tangent_x"]
    assert differentiate(graph, ["x"], ["y"], cotangent="input")[0].input_names == ["x", "tangent_x", "cotangent_y",
                                                                                   "cotangent2_y"]
    assert hvp(graph, ["x"], ["y"], cotangent="input").input_names == ["x", "tangent_x", "cotangent_y",
                                                                       "cotangent2_y", "tangent2_x"]


# ----------------------------------------------------------------------------- values, in the library

def test_jvp_of_jvp_along_two_tangents_is_the_mixed_second_derivative():
    once = jvp(model(), ["x"])
    twice = jvp(once, ["x"])
    assert twice.input_names == ["x", "tangent_x", "tangent2_x"] and list(twice.outputs) == ["jvp_jvp_f"]
    got = evaluate_graph(twice, {"x": X, "tangent_x": U, "tangent2_x": V})["jvp_jvp_f"]
    np.testing.assert_allclose(got, np.sum(g2(X) * U * V), rtol=1e-13)
    swapped = evaluate_graph(twice, {"x": X, "tangent_x": V, "tangent2_x": U})["jvp_jvp_f"]
    np.testing.assert_allclose(swapped, got, rtol=1e-13)   # u^T H v = v^T H u
    # the first tangent alone, and the second: each feeds what it names
    assert evaluate_graph(twice, {"x": X, "tangent_x": U, "tangent2_x": 0 * V})["jvp_jvp_f"] == 0
    assert evaluate_graph(twice, {"x": X, "tangent_x": 0 * U, "tangent2_x": V})["jvp_jvp_f"] == 0


def test_jvp_of_hvp_is_the_third_derivative_along_v_and_w():
    products = hvp(model(), ["x"])
    third = jvp(products, ["x"])
    assert third.input_names == ["x", "tangent_x", "tangent2_x"] and list(third.outputs) == ["jvp_hvp_x"]
    got = evaluate_graph(third, {"x": X, "tangent_x": V, "tangent2_x": W})["jvp_hvp_x"]
    np.testing.assert_allclose(got, g3(X) * V * W, rtol=1e-13)
    same = evaluate_graph(third, {"x": X, "tangent_x": V, "tangent2_x": V})["jvp_hvp_x"]
    np.testing.assert_allclose(V @ same, np.sum(g3(X) * V ** 3), rtol=1e-13)   # v^T d3f [v, v]


def test_hvp_of_jvp_is_the_third_derivative_along_u_and_v():
    # jvp_f = sum(g'(x) u); its gradient g''(x) u; along v: g'''(x) u v
    third = hvp(jvp(model(), ["x"]), ["x"])
    assert third.input_names == ["x", "tangent_x", "tangent2_x"] and list(third.outputs) == ["hvp_x"]
    got = evaluate_graph(third, {"x": X, "tangent_x": U, "tangent2_x": V})["hvp_x"]
    np.testing.assert_allclose(got, g3(X) * U * V, rtol=1e-13)


def test_three_jvps_number_the_third_tangent_3():
    third = jvp(jvp(jvp(model(), ["x"]), ["x"]), ["x"])
    assert third.input_names == ["x", "tangent_x", "tangent2_x", "tangent3_x"]
    got = evaluate_graph(third, {"x": X, "tangent_x": U, "tangent2_x": V, "tangent3_x": W})["jvp_jvp_jvp_f"]
    np.testing.assert_allclose(got, np.sum(g3(X) * U * V * W), rtol=1e-13)


def test_a_second_jvp_numbers_only_the_tangents_taken():
    # f = sum(sin(x w)); along u in x first, then v in x and p in w:
    # d/ds [cos(z) w . u] = sum(-sin(z) w^2 u v + (cos z - x w sin z) u p), z = x w
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    once = jvp(Graph({"f": (x * w).sin().sum()}, inputs=[x, w]), ["x"])
    twice = jvp(once, ["x", "w"])
    assert twice.input_names == ["x", "w", "tangent_x", "tangent2_x", "tangent_w"]
    p = np.array([0.5, 1.0, -3.0])
    got = evaluate_graph(twice, {"x": X, "w": W, "tangent_x": U, "tangent2_x": V, "tangent_w": p})["jvp_jvp_f"]
    z = X * W
    np.testing.assert_allclose(got, np.sum(-np.sin(z) * W ** 2 * U * V + (np.cos(z) - z * np.sin(z)) * U * p),
                               rtol=1e-13)


def test_kept_forward_outputs_number_the_new_ones():
    kept = jvp(jvp(model(), ["x"], keep_forward=True), ["x"], keep_forward=True)
    assert list(kept.outputs) == ["f", "jvp_f", "jvp2_f", "jvp_jvp_f"]
    got = evaluate_graph(kept, {"x": X, "tangent_x": U, "tangent2_x": V})
    g1 = np.cos(X) * X ** 3 + 3 * X ** 2 * np.sin(X)
    np.testing.assert_allclose(got["jvp_f"], np.sum(g1 * U), rtol=1e-13)    # the first, along u
    np.testing.assert_allclose(got["jvp2_f"], np.sum(g1 * V), rtol=1e-13)   # the new, along v
    np.testing.assert_allclose(got["jvp_jvp_f"], np.sum(g2(X) * U * V), rtol=1e-13)


def test_diff_with_input_cotangents_twice_and_kept_gradients():
    x = UOp.param("x", (3,), f64)
    once, _ = differentiate(Graph({"y": x.sin() * x}, inputs=[x]), ["x"], cotangent="input", keep_forward=True)
    twice, report = differentiate(once, ["x"], ["y"], cotangent="input", keep_forward=True)
    assert twice.input_names == ["x", "cotangent_y", "cotangent2_y"]
    assert list(twice.outputs) == ["y", "grad_x", "grad2_x"] and report.wrt == ["x"]
    got = evaluate_graph(twice, {"x": X, "cotangent_y": U, "cotangent2_y": V})
    dy = np.sin(X) + X * np.cos(X)
    np.testing.assert_allclose(got["grad_x"], dy * U, rtol=1e-14)
    np.testing.assert_allclose(got["grad2_x"], dy * V, rtol=1e-14)
    # hvp and hessian weight y by the new cotangent2_y too: H of sum(v * y), diagonal 2cos x - x sin x
    d2y = 2 * np.cos(X) - X * np.sin(X)
    products = hvp(once, ["x"], ["y"], cotangent="input")
    assert products.input_names == ["x", "cotangent_y", "cotangent2_y", "tangent_x"]
    got = evaluate_graph(products, {"x": X, "cotangent_y": U, "cotangent2_y": V, "tangent_x": W})["hvp_x"]
    np.testing.assert_allclose(got, d2y * V * W, rtol=1e-14)
    blocks = hessian(once, ["x"], ["y"], cotangent="input")
    assert blocks.input_names == ["x", "cotangent_y", "cotangent2_y"]
    got = evaluate_graph(blocks, {"x": X, "cotangent_y": U, "cotangent2_y": V})["hessian_x_x"]
    np.testing.assert_allclose(got, np.diag(d2y * V), rtol=1e-14)


def test_jacobian_and_hessian_blocks_whose_names_meet_are_all_kept():
    # outputs a and a_q, inputs q_r and r: both blocks are "jacobian_a_q_r"; the second was
    # silently dropped (the first slot held the second's values), now it is jacobian2_a_q_r
    p, qr, r = (UOp.param(n, (2,), f64) for n in ("p", "q_r", "r"))
    graph = Graph({"a": (p * qr * 3.0).sum(), "a_q": (r * r).sum()}, inputs=[p, qr, r])
    blocks = jacobian(graph, ["q_r", "r"])
    assert list(blocks.outputs) == ["jacobian_a_q_r", "jacobian_a_r", "jacobian_a_q_q_r", "jacobian2_a_q_r"]
    pv, qv, rv = np.array([1.0, -2.0]), np.array([0.5, 4.0]), np.array([3.0, -1.5])
    got = evaluate_graph(blocks, {"p": pv, "q_r": qv, "r": rv})
    np.testing.assert_array_equal(got["jacobian_a_q_r"], 3 * pv)     # d a / d q_r
    np.testing.assert_array_equal(got["jacobian2_a_q_r"], 2 * rv)    # d a_q / d r
    np.testing.assert_array_equal(got["jacobian_a_r"], [0.0, 0.0])
    pq = UOp.param("p_q", (2,), f64)
    square = Graph({"s": (p * qr * 2.0).sum() + (pq * r * 5.0).sum() + (p * p * r).sum()}, inputs=[p, pq, qr, r])
    hess = hessian(square, ["p", "q_r", "p_q", "r"])   # row-major: (p_q, r) is block 11
    assert len(hess.outputs) == 16 and list(hess.outputs)[11] == "hessian2_p_q_r"
    got = evaluate_graph(hess, {"p": pv, "p_q": qv, "q_r": rv, "r": rv})
    np.testing.assert_array_equal(got["hessian_p_q_r"], np.diag([2.0, 2.0]))       # d2 s / dp dq_r
    np.testing.assert_array_equal(got["hessian2_p_q_r"], np.diag([5.0, 5.0]))      # d2 s / dp_q dr
    np.testing.assert_array_equal(got["hessian_p_r"], np.diag(2 * pv))             # d2 s / dp dr


def test_a_result_never_silently_drops_an_output_named_twice():
    x = UOp.param("x", (), f64)
    with pytest.raises(GradientError, match="^internal error: the result would have two outputs named 'g'$"):
        _known_good_graph([("g", x), ("h", x), ("g", x * 2.0)], [x], {})
    with pytest.raises(GradientError, match="^internal error: the result would have two inputs named 'x'$"):
        _known_good_graph([("g", x)], [x, UOp.param("x", (2,), f64)], {})


# ----------------------------------------------------------------------------- the checks feed the new names

def test_checks_of_a_derivative_file_feed_its_numbered_directions():
    once = jvp(model(), ["x"])               # has tangent_x; the checks' own jvp/hvp add tangent2_x
    given = {"x": X, "tangent_x": U}
    assert check_hvp(once, ["x"], inputs=given).passed
    assert check_transpose(once, ["x"], inputs=given).passed
    products = hvp(model(), ["x"])           # has tangent_x; a non-scalar output: cotangent_hvp_x
    report = check_hvp(products, ["x"], ["hvp_x"], inputs={"x": X, "tangent_x": V})
    assert report.passed and report.targets[0].max_rel_error < 1e-6


def test_check_gradients_weights_by_its_own_cotangent_not_a_forward_input_of_that_name():
    # y scalar, and the forward graph has an input named cotangent_y: check seeds y with 1
    # (it read that input's array as the cotangent, and failed); a non-scalar z gets cotangent2_z
    x, c = UOp.param("x", (3,), f64), UOp.param("cotangent_y", (3,), f64)
    scalar = Graph({"y": (x * x * c).sum()}, inputs=[x, c])
    report = check_gradients(scalar, ["x"], inputs={"x": X, "cotangent_y": U})
    assert report.passed and abs(report.loss - np.sum(X * X * U)) < 1e-12
    cz = UOp.param("cotangent_z", (3,), f64)
    vector = Graph({"z": x.sin() * cz}, inputs=[x, cz])
    report = check_gradients(vector, ["x"], inputs={"x": X, "cotangent_z": U, "cotangent2_z": V})
    assert report.passed and abs(report.loss - np.sum(np.sin(X) * U * V)) < 1e-12


def test_numbered_tangents_are_directions_never_state():
    stat = UOp.param("bn.running_var", (3,), f64)
    assert state_kind(stat) == "running statistic"
    for name in ("tangent_bn.running_var", "tangent2_bn.running_var", "cotangent3_bn.running_var"):
        assert state_kind(UOp.param(name, (3,), f64)) is None, name


# ----------------------------------------------------------------------------- through the CLI

needs_cli = pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")


@pytest.fixture
def work(tmp_path):
    save(model(), tmp_path / "f.uop")
    for name, value in (("x", X), ("u", U), ("v", V), ("w", W)):
        np.save(tmp_path / f"{name}.npy", value)
    return tmp_path


@needs_cli
def test_cli_jvp_of_hvp_and_of_jvp_give_third_and_mixed_derivatives(work):
    ok("hvp", "f.uop", "--wrt", "x", "-o", "h.uop", cwd=work)
    done = ok("jvp", "h.uop", "--wrt", "x", "-o", "h3.uop", cwd=work)
    assert done.stderr == "uopgrad: names already taken, so numbered: tangent_x -> tangent2_x (input)\n"
    assert load(work / "h3.uop").input_names == ["x", "tangent_x", "tangent2_x"]
    got = outputs("h3.uop", "-i", "x=x.npy", "-i", "tangent_x=v.npy", "-i", "tangent2_x=w.npy", cwd=work)
    np.testing.assert_allclose(got["jvp_hvp_x"], g3(X) * V * W, rtol=1e-13)
    got = outputs("h3.uop", "-i", "x=x.npy", "-i", "tangent_x=v.npy", "-i", "tangent2_x=v.npy", cwd=work)
    np.testing.assert_allclose(V @ got["jvp_hvp_x"], np.sum(g3(X) * V ** 3), rtol=1e-13)
    ok("jvp", "f.uop", "--wrt", "x", "-o", "j.uop", cwd=work)
    ok("jvp", "j.uop", "--wrt", "x", "-q", "-o", "jj.uop", cwd=work)
    got = outputs("jj.uop", "-i", "x=x.npy", "-i", "tangent_x=u.npy", "-i", "tangent2_x=v.npy", cwd=work)
    np.testing.assert_allclose(got["jvp_jvp_f"], np.sum(g2(X) * U * V), rtol=1e-13)
    # --quiet silences the note; the names are the library's
    assert uopgrad("jvp", "j.uop", "--wrt", "x", "-q", "-o", "q.uop", cwd=work).stderr == ""
    assert load(work / "jj.uop").input_names == jvp(jvp(model(), ["x"]), ["x"]).input_names


@needs_cli
def test_cli_eval_random_fills_the_numbered_tangents(work):
    ok("hvp", "f.uop", "--wrt", "x", "-o", "h.uop", cwd=work)
    ok("jvp", "h.uop", "--wrt", "x", "-o", "h3.uop", cwd=work)
    got = outputs("h3.uop", "--random", "--seed", "4", cwd=work)["jvp_hvp_x"]
    x, v, w = (random_value(UOp.param(n, (3,), f64), 4) for n in ("x", "tangent_x", "tangent2_x"))
    assert not np.allclose(v, w)   # two directions, not one
    np.testing.assert_allclose(got, g3(x) * v * w, rtol=1e-13)


@needs_cli
def test_cli_a_statistics_second_tangent_is_filled_the_statistic_is_not(tmp_path):
    s = UOp.param("bn.running_var", (3,), f64)
    save(Graph({"y": (s.sqrt() * s).sum()}, inputs=[s]), tmp_path / "bn.uop")   # s^1.5
    ok("jvp", "bn.uop", "--wrt", "bn.running_var", "-o", "j.uop", cwd=tmp_path)
    ok("jvp", "j.uop", "--wrt", "bn.running_var", "-o", "jj.uop", cwd=tmp_path)
    refused = uopgrad("eval", "jj.uop", "--random", cwd=tmp_path)
    assert refused.returncode == 1 and refused.stderr == (
        "uopgrad: error: jj.uop: not filling bn.running_var (a running statistic) with random values: the file says "
        "it is not a weight or data; give their values with -i NAME=VALUE\n")
    got = outputs("jj.uop", "--random", "-i", "bn.running_var=4", cwd=tmp_path)["jvp_jvp_y"]
    t1, t2 = (random_value(UOp.param(n, (3,), f64), 0) for n in ("tangent_bn.running_var", "tangent2_bn.running_var"))
    np.testing.assert_allclose(got, np.sum(0.75 / np.sqrt(4.0) * t1 * t2), rtol=1e-13)   # (s^1.5)'' = 0.75 s^-0.5


@needs_cli
def test_cli_diff_with_input_cotangents_twice_and_check_of_it(tmp_path):
    x = UOp.param("x", (3,), f64)
    save(Graph({"y": x.sin() * x}, inputs=[x]), tmp_path / "y.uop")
    np.save(tmp_path / "x.npy", X)
    ok("diff", "y.uop", "--wrt", "x", "--cotangent", "input", "--keep-forward", "-o", "d.uop", cwd=tmp_path)
    done = ok("diff", "d.uop", "--of", "y", "--wrt", "x", "--cotangent", "input", "--keep-forward", "-o", "dd.uop",
              cwd=tmp_path)
    assert done.stderr == ("uopgrad: names already taken, so numbered: cotangent_y -> cotangent2_y (input), "
                           "grad_x -> grad2_x (output)\n")
    got = outputs("dd.uop", "-i", "x=x.npy", "-i", "cotangent_y=1", "-i", "cotangent2_y=-2", cwd=tmp_path)
    dy = np.sin(X) + X * np.cos(X)
    np.testing.assert_allclose(got["grad_x"], dy, rtol=1e-14)
    np.testing.assert_allclose(got["grad2_x"], -2 * dy, rtol=1e-14)
    for flag in ([], ["--hvp"]):
        report = json.loads(ok("check", "d.uop", "--of", "y", "--wrt", "x", *flag, "--json", cwd=tmp_path).stdout)
        assert report["passed"], report


@needs_cli
def test_cli_help_says_how_taken_names_are_numbered():
    for command, words in (("jvp", "tangent2_x"), ("hvp", "tangent2_w"), ("diff", "cotangent2_<output>"),
                           ("jacobian", "jacobian2_"), ("hessian", "hessian2_")):
        text = " ".join(ok(command, "--help").stdout.split())
        assert words in text and "taken" in text, (command, text)


@needs_cli
def test_cli_an_unknown_or_repeated_name_is_still_one_line(work):
    ok("jvp", "f.uop", "--wrt", "x", "-o", "j.uop", cwd=work)
    for args, message in ((["--wrt", "x,x"], "wrt: 'x' is named twice"),
                          (["--wrt", "tangent2_x"], "no input named 'tangent2_x'")):
        done = uopgrad("jvp", "j.uop", *args, "-o", "out.uop", cwd=work)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and not (work / "out.uop").exists()
        assert done.stderr.startswith("uopgrad: error: j.uop: ") and message in done.stderr, done.stderr


@needs_cli
def test_cli_jacobian_blocks_whose_names_meet_and_checks_of_a_jvp_file(work):
    p, qr, r = (UOp.param(n, (2,), f64) for n in ("p", "q_r", "r"))
    save(Graph({"a": (p * qr * 3.0).sum(), "a_q": (r * r).sum()}, inputs=[p, qr, r]), work / "m.uop")
    done = ok("jacobian", "m.uop", "--wrt", "q_r,r", "-o", "jac.uop", cwd=work)
    assert done.stderr == "uopgrad: names already taken, so numbered: jacobian_a_q_r -> jacobian2_a_q_r (output)\n"
    got = outputs("jac.uop", "-i", "p=2", "-i", "q_r=1", "-i", "r=-1.5", cwd=work)
    assert list(got) == ["jacobian_a_q_r", "jacobian_a_r", "jacobian_a_q_q_r", "jacobian2_a_q_r"]
    np.testing.assert_array_equal(got["jacobian_a_q_r"], [6.0, 6.0])
    np.testing.assert_array_equal(got["jacobian2_a_q_r"], [-3.0, -3.0])
    ok("jvp", "f.uop", "--wrt", "x", "-o", "j.uop", cwd=work)
    for flag, last in (("--hvp", "ok: Hessian-vector products of jvp_f"), ("--transpose", "ok: jvp and diff of jvp_f")):
        done = ok("check", "j.uop", "--wrt", "x", flag, "-i", "x=x.npy", "-i", "tangent_x=u.npy", cwd=work)
        assert done.stdout.splitlines()[-1].startswith(last), done.stdout


@needs_cli
def test_cli_notes_name_only_what_this_command_numbered(work):
    """The file already has jvp_f and jvp2_f (and grad_x, grad2_x): a --keep-forward pass
    makes jvp3_f (grad3_x), and the note names that alone, not the numbered outputs kept."""
    x = UOp.param("x", (3,), f64)
    f = (x.sin() * x * x * x).sum()
    save(Graph({"f": f, "jvp_f": f * 2.0, "jvp2_f": f * 3.0}, inputs=[x]), work / "k.uop")
    done = ok("jvp", "k.uop", "--wrt", "x", "--of", "f", "--keep-forward", "-o", "k2.uop", cwd=work)
    assert done.stderr == "uopgrad: names already taken, so numbered: jvp_f -> jvp3_f (output)\n"
    got = outputs("k2.uop", "-i", "x=x.npy", "-i", "tangent_x=u.npy", cwd=work)
    assert list(got) == ["f", "jvp_f", "jvp2_f", "jvp3_f"]
    np.testing.assert_allclose(got["jvp3_f"], np.sum((np.cos(X) * X ** 3 + 3 * X ** 2 * np.sin(X)) * U), rtol=1e-13)
    save(Graph({"y": x * x, "grad_x": x * 2.0, "grad2_x": x * 3.0}, inputs=[x]), work / "g.uop")
    done = ok("diff", "g.uop", "--of", "y", "--wrt", "x", "--cotangent", "ones", "--keep-forward", "-o", "g2.uop",
              cwd=work)
    assert done.stderr == "uopgrad: names already taken, so numbered: grad_x -> grad3_x (output)\n"
    np.testing.assert_array_equal(outputs("g2.uop", "-i", "x=x.npy", cwd=work)["grad3_x"], 2 * X)
