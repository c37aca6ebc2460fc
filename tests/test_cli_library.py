"""The library behind the CLI, without click: differentiate, the gradient check, info/print
statistics and listings, and input values."""

from __future__ import annotations

import numpy as np
import pytest

from uopcli import Ops, UOp, dtypes
from uopcli.tools.check import check_gradients, to_float64
from uopcli.tools.differentiate import NO_GRADIENT, NOT_REACHED, ONLY_DETACH, differentiate, is_zero
from uopcli.errors import EvaluationError, GradientError
from uopcli.backends.numpy import evaluate_graph
from uopcli.core.graph import Graph
from uopcli.tools.inspect import FLOPS_PER_ELEMENT, depth, flop_estimate, graph_info, info_text, listing
from uopcli.tools.values import gather_inputs, random_value, read_value


def two_outputs() -> Graph:
    x, w, z = UOp.param("x", (2, 3)), UOp.param("w", (2, 3)), UOp.param("z", (2, 3))
    prod = x * w
    loss = prod.sum() + z.detach().sum()
    return Graph({"prod": prod, "loss": loss}, inputs=[x, w, z])


# ----------------------------------------------------------------------------- differentiate

def test_outputs_inputs_and_meta():
    graph = two_outputs()
    grad, report = differentiate(graph, ["w", "x"], of=["loss"], keep_forward=True)
    assert grad.output_names == ["prod", "loss", "grad_w", "grad_x"]
    assert grad.input_names == ["x", "w", "z"]
    assert grad.meta["gradient_of"] == "loss" and grad.meta["gradient_wrt"] == "w,x"
    assert report.zero == []


def test_errors_name_what_is_wrong():
    graph = two_outputs()
    with pytest.raises(GradientError, match=r"2 outputs \(prod, loss\).*with of=\[names\]$"):
        differentiate(graph, ["x"])
    with pytest.raises(GradientError, match="'prod' is float32\\[2,3\\], not a scalar.*cotangent"):
        differentiate(graph, ["x"], of=["prod"])
    with pytest.raises(GradientError, match="no input named 'q'"):
        differentiate(graph, ["q"], of=["loss"])
    with pytest.raises(GradientError, match="named twice"):
        differentiate(graph, ["x", "x"], of=["loss"])
    with pytest.raises(GradientError, match="no output named 'nope'"):
        differentiate(graph, ["x"], of=["nope"])
    with pytest.raises(GradientError, match="at least one"):
        differentiate(graph, [], of=["loss"])
    # names taken are numbered (they were refused): a kept output grad_x, an input cotangent_y
    x = UOp.param("x", (), dtypes.float64)
    clash, _ = differentiate(Graph({"grad_x": x * x * 3.0}), ["x"], keep_forward=True)
    assert list(clash.outputs) == ["grad_x", "grad2_x"]
    assert evaluate_graph(clash, {"x": np.float64(2.0)}) == {"grad_x": 12.0, "grad2_x": 12.0}  # 3x^2, d/dx = 6x
    x2, c = UOp.param("x", (2,), dtypes.float64), UOp.param("cotangent_y", (2,), dtypes.float64)
    taken, _ = differentiate(Graph({"y": x2 * x2 * c}), ["x"], cotangent="input")
    assert taken.input_names == ["x", "cotangent_y", "cotangent2_y"]
    feed = {"x": np.array([1.0, -2.0]), "cotangent_y": np.array([3.0, 5.0]), "cotangent2_y": np.array([7.0, 11.0])}
    # d/dx sum(u * (x^2 c)) = 2 x c u, u the new input, c the forward's own
    np.testing.assert_array_equal(evaluate_graph(taken, feed)["grad_x"], [2 * 1.0 * 3 * 7, 2 * -2.0 * 5 * 11])


def test_zero_gradient_reasons():
    x, u, d, c = (UOp.param(n, (3,)) for n in "xudc")
    loss = (x * 2).sum() + d.detach().sum() + (c < 0).where(x, 0.0).sum()
    graph = Graph({"loss": loss}, inputs=[x, u, d, c])
    _, report = differentiate(graph, ["x", "u", "d", "c"])
    assert [(z.target, z.reason) for z in report.zero] == [("u", NOT_REACHED), ("d", ONLY_DETACH),
                                                          ("c", NO_GRADIENT)]
    assert report.to_dict()["zero_gradients"][0] == {"target": "u", "reason": "not reached"}


def test_seeds_scalar_ones_and_input_cotangents():
    x = UOp.param("x", (3,))
    graph = Graph({"s": (x * x).sum(), "v": x * x})
    values = {"x": np.array([1, 2, 3], np.float32)}
    grad, _ = differentiate(graph, ["x"], of=["s", "v"], cotangent="input")
    assert grad.input_names == ["x", "cotangent_v"]         # a scalar output gets no cotangent input
    out = evaluate_graph(grad, {**values, "cotangent_v": np.array([1, 0, 2], np.float32)})
    np.testing.assert_allclose(out["grad_x"], 2 * values["x"] * np.array([2, 1, 3]))
    ones, _ = differentiate(graph, ["x"], of=["v"], cotangent="ones")
    np.testing.assert_allclose(evaluate_graph(ones, values)["grad_x"], 2 * values["x"])


def test_backward_nodes_are_tagged():
    x = UOp.param("x", (3,))
    grad, _ = differentiate(Graph({"v": x.exp()}), ["x"], cotangent="ones")
    new = [n for n in grad.nodes() if n.meta is not None and n.meta.backward]
    assert new and grad.outputs["grad_x"].meta.backward


def test_long_chain_is_iterative():
    x = UOp.param("x", ())
    y = x
    for _ in range(5000):           # deeper than the recursion limit
        y = y * 1.0001
    graph = Graph({"y": y, "u": UOp.param("u", ()) + 0.0})
    grad, report = differentiate(graph, ["x", "u"], of=["y"])
    assert report.zero[0].target == "u" and report.zero[0].reason == NOT_REACHED
    assert depth(grad.nodes()) >= 5000
    assert sum(1 for _ in listing(grad)) > 5000
    assert float(evaluate_graph(grad, {"x": np.float32(1), "u": np.float32(0)})["grad_x"]) == \
        pytest.approx(1.0001 ** 5000, rel=1e-3)


def test_is_zero():
    x = UOp.param("x", (2,))
    assert is_zero(UOp.full((2, 3), 0.0)) and not is_zero(UOp.full((2,), 1.0)) and not is_zero(x * 0)
    zero_out = UOp.function("f", (UOp.slot(0, (2,)) * 2.0, UOp.full((2,), 0.0)), (x,))
    assert is_zero(zero_out.gettuple(1)) and not is_zero(zero_out.gettuple(0))


def test_an_argument_its_function_body_does_not_use_has_an_identically_zero_gradient():
    x, v = UOp.param("x", (3,)), UOp.param("v", (3,))
    call = UOp.trace_function("f", lambda a, b: (a * 3.0,), x, v)
    _, report = differentiate(Graph({"loss": call[0].sum()}, inputs=[x, v]), ["v", "x"])
    assert [(z.target, z.reason) for z in report.zero] == [("v", NO_GRADIENT)]


# ----------------------------------------------------------------------------- check

def test_check_names_a_custom_backward_inside_a_function():
    from uopcli.tools.check import check_gradients
    x = UOp.param("x", (3,))

    def body(a):
        rounded = UOp.trace_call("q", lambda t: (t.trunc(),), lambda t, g: (g,), a)  # straight-through
        return ((rounded[0] * a).sum(),)
    graph = Graph({"loss": UOp.trace_function("wrap", body, x)[0]}, inputs=[x])
    report = check_gradients(graph, ["x"], None, {"x": np.array([0.5, 1.5, -2.5], np.float32)}, samples=3, seed=0)
    (target,) = report.targets
    assert not target.passed and "CALL q" in target.note

def test_to_float64_promotes_everything_float():
    x = UOp.param("x", (2,), dtypes.float16)
    i = UOp.param("i", (2,), dtypes.int32)
    buf = UOp.buffer(np.array([0.5, 0.25], np.float32))
    bits = x.cast(dtypes.float32).bitcast(dtypes.int32)
    call = UOp.trace_function("f", lambda a, b: a * b, x.cast(dtypes.float32), buf)
    y = call.gettuple(0) + i.cast(dtypes.float32) + (bits & 0).cast(dtypes.float32)
    wide = to_float64(Graph({"y": y}, inputs=[x, i]))
    bitcast = [n for n in wide.nodes() if n.op == "BITCAST"][0]
    assert bitcast.src[0].dtype is dtypes.float32             # keeps its bit-level meaning
    assert {n.dtype for n in wide.nodes() if n.dtype.is_float and n is not bitcast.src[0]} == {dtypes.float64}
    assert [n.dtype for n in wide.inputs] == [dtypes.float64, dtypes.int32]
    out = evaluate_graph(wide, {"x": np.array([2, 4], np.float64), "i": np.array([1, 1], np.int32)})
    np.testing.assert_allclose(out["y"], [2.0, 2.0])


def test_check_passes_fails_and_is_deterministic():
    x, w = UOp.param("x", (4, 3)), UOp.param("w", (3,))
    graph = Graph({"loss": ((x @ w).relu() ** 2).mean()}, inputs=[x, w])
    a = check_gradients(graph, ["x", "w"], seed=5, samples=5)
    assert a.passed and [t.samples for t in a.targets] == [5, 3]
    b = check_gradients(graph, ["x", "w"], seed=5, samples=5)
    assert a.to_dict() == b.to_dict()
    assert all(t.max_abs_error < 1e-6 for t in a.targets)
    wrong = UOp.trace_call("sq", lambda v: v * v, lambda v, g: g * 3, w)   # d(v^2) is 2v, not 3
    bad = check_gradients(Graph({"s": wrong.gettuple(0).sum()}), ["w"], seed=0)
    assert not bad.passed and bad.targets[0].max_rel_error > 0.01 and "FAILED: w" in bad.lines()[-1]


def test_check_sees_kinks_for_what_they_are_and_still_fails_wrong_gradients():
    """relu and abs near 0: a kink within the step (1e-6 from it) is compared with a step
    1000 times smaller; one at the point itself (no derivative there) is counted, not
    compared. A wrong backward body still fails."""
    x = UOp.param("x", (4,))
    graph = Graph({"loss": (x.relu() * 3.0).sum() + x.abs().sum() * 0.5})
    report = check_gradients(graph, ["x"], inputs={"x": np.array([1e-6, 0.0, -2e-6, 0.5])})
    target = report.targets[0]
    assert report.passed and (target.samples, target.kinks) == (3, 1) and report.to_dict()["targets"][0]["kinks"] == 1
    # the note names the node that chooses differently on either side (relu's comparison)
    assert any(line.startswith("note: x: 1 sampled element at a kink (the one-sided differences disagree; %2 CMPLT "
                               "bool[4] (relu") and line.endswith("chooses differently on either side), not compared")
               for line in report.lines())
    smooth = check_gradients(graph, ["x"], inputs={"x": np.array([1.0, -1.0, 2.0, 0.5])})
    assert smooth.passed and smooth.targets[0].kinks == 0
    w = UOp.param("w", (3,))
    wrong = UOp.trace_call("wrong", lambda s: s * s, lambda s, g: (g * 3.0,), w)[0].sum()
    failed = check_gradients(Graph({"loss": wrong}), ["w"], inputs={"w": np.array([0.0, 1.0, -2.0])})
    assert not failed.passed and failed.targets[0].kinks == 0  # 3 where 2w is wanted, w = 0 included


def test_check_given_inputs_and_nan():
    x = UOp.param("x", ())
    graph = Graph({"y": x.sqrt()})
    ok = check_gradients(graph, ["x"], inputs={"x": np.array(4.0, np.float32)})
    assert ok.passed and ok.targets[0].analytic == pytest.approx(0.25)
    nan = check_gradients(graph, ["x"], inputs={"x": np.array(-1.0, np.float32)})
    # the forward value itself is nan there: said first, with the node that made it
    assert not nan.passed and not nan.forward_finite and nan.targets == []
    lines = nan.lines()
    assert lines[0] == "the forward value is not finite at these inputs (L = nan): no gradient compared"
    assert lines[1].startswith("first nan: %1 SQRT float32[]") and "input x[] = -1.0" in lines[3]
    assert lines[-1] == "FAILED: the forward value is not finite"


# ----------------------------------------------------------------------------- inspect

def test_flops_and_depth():
    a, b = UOp.param("a", (4, 5)), UOp.param("b", (5, 6))
    graph = Graph({"c": a @ b})
    # matmul = MUL over (4,6,5) + REDUCE ADD over those 120 elements
    assert flop_estimate(graph) == 240
    call = UOp.trace_function("f", lambda v: v * v + v, a)
    twice = Graph({"p": call.gettuple(0) * UOp.trace_function("f", lambda v: v * v + v, a).gettuple(0)})
    assert flop_estimate(twice) == 2 * 20 + 20     # body counted per call (here the same call) + MUL
    assert depth(Graph({"x": a}).nodes()) == 0


def test_flops_of_functions_nested_thousands_deep():
    """Each body's cost is known before its caller's, without recursion."""
    x = UOp.param("x", (4,))
    result = UOp.slot(0, (4,)).sin()
    for i in range(3000):
        result = UOp.function(f"f{i}", (result * 2.0,), (UOp.slot(0, (4,)),)).gettuple(0)
    graph = Graph({"y": UOp.function("outer", (result,), (x,)).gettuple(0)})
    assert flop_estimate(graph) == 4 * (FLOPS_PER_ELEMENT[Ops.SIN] + 3000 * FLOPS_PER_ELEMENT[Ops.MUL])


def chained_bodies(count: int) -> Graph:
    """`count` functions whose bodies share one growing chain: body k is sin^k(slot 0)."""
    x = UOp.param("x", ())
    chain, total = UOp.slot(0, ()), None
    for _ in range(count):
        chain = chain.sin()
        out = UOp.function("f", (chain,), (x,)).gettuple(0)
        total = out if total is None else total + out
    return Graph({"y": total})


def test_flops_of_bodies_sharing_nodes_within_a_budget():
    """Each body is costed in full (body k: k SINs), so bodies built on each other cost
    bodies x nodes to walk: past the budget the estimate is unknown, not minutes away."""
    graph = chained_bodies(100)
    expected = FLOPS_PER_ELEMENT[Ops.SIN] * sum(range(1, 101)) + FLOPS_PER_ELEMENT[Ops.ADD] * 99
    assert flop_estimate(graph) == expected
    assert flop_estimate(graph, visits=2 * 5050) == expected
    assert flop_estimate(graph, visits=1000) is None
    info = graph_info(graph)
    assert info["flops"] == expected
    assert "unknown: function bodies share" in info_text({**info, "flops": None})


def test_listing_format():
    x = UOp.param("x", (2, 3))
    graph = Graph({"r": x.relu()})
    lines = list(listing(graph))
    assert lines[0] == "# 4 nodes; inputs: x float32[2,3]"
    assert "%1 = PARAM float32[2,3] x" in lines
    assert any(line.startswith("%") and " = WHERE float32[2,3] %" in line and line.endswith("  # relu")
               for line in lines)
    assert lines[-1] == "output r = %3"


# ----------------------------------------------------------------------------- values

def test_values(tmp_path):
    x = UOp.param("x", (2,), dtypes.int16)
    assert read_value("x", "7", x).tolist() == [7, 7]
    with pytest.raises(EvaluationError, match="does not fit int16"):
        read_value("x", "70000", x)
    with pytest.raises(EvaluationError, match="not a .npy or .npz file nor an integer"):
        read_value("x", "1.5", x)
    flag = UOp.param("f", (1,), dtypes.bool)
    assert read_value("f", "true", flag).tolist() == [True]
    a = random_value(UOp.param("y", (3,)), 0)
    assert a.dtype == np.float32 and np.array_equal(a, random_value(UOp.param("y", (3,)), 0))
    assert gather_inputs([x], ["x=1"])["x"].tolist() == [1, 1]
    with pytest.raises(EvaluationError, match="given twice"):
        gather_inputs([x], ["x=1", "x=2"])
    (tmp_path / "text.npy").write_text("not numpy\n")
    with pytest.raises(EvaluationError, match=r"cannot read .*text.npy: not a .npy file \(it does not start"):
        read_value("x", str(tmp_path / "text.npy"), x)
    np.save(tmp_path / "x.npy", np.array([3, 4], np.int16))
    assert read_value("x", str(tmp_path / "x.npy"), x).tolist() == [3, 4]


def test_gradient_graph_is_a_valid_graph():
    """differentiate skips Graph's own checks: rebuilding through Graph() must agree."""
    x, w = UOp.param("x", (2, 3)), UOp.param("w", (3,))
    call = UOp.trace_function("f", lambda a, b: (a * b).exp(), x, w.reshape(1, 3).expand(2, 3))
    forward = Graph({"v": call.gettuple(0), "s": call.gettuple(0).sum()}, inputs=[x, w])
    grad, _ = differentiate(forward, ["w", "x"], of=["v", "s"], cotangent="input", keep_forward=True)
    checked = Graph(grad.outputs, inputs=grad.inputs, meta=grad.meta)
    assert checked.nodes() == grad.nodes() and checked.input_names == ["x", "w", "cotangent_v"]
    assert grad.output_names == ["v", "s", "grad_w", "grad_x"]


def test_check_holds_detached_values_fixed():
    """d/dx sum(x * detach(x)) is detach(x) = x, not 2x: the finite differences must hold
    the DETACH value fixed to agree, and then they do."""
    x = UOp.param("x", (4,))
    report = check_gradients(Graph({"s": (x * x.detach()).sum()}), ["x"], seed=2)
    assert report.passed
    t = report.targets[0]
    assert t.numeric == pytest.approx(t.analytic, rel=1e-8)
