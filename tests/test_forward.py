"""Forward mode (core/forward.py, tools/forward.py, tools/forward_check.py): every rule
against central finite differences in float64 and against the reverse rule (the transpose
test, in every float dtype), batched tangents against one at a time, zero tangents that
make no nodes, calls, deep graphs, JAX's linearize/transpose, Jacobians and Hessians."""

import math
import sys

import numpy as np
import pytest

from _reference_eval import assert_shapes_as_inferred, reference_evaluate
from uopcli.backends.numpy import evaluate
from test_gradient import ELEMENTWISE_CASES, MOVEMENT_CASES, REDUCE_CASES, a3, nested_functions
from uopcli import GradientError, Metadata, Ops, UOp, dtypes
from uopcli.core.forward import FORWARD_RULES, TANGENT_SCOPE, compute_jvp, is_tangent, jvp, linearize, transpose
from uopcli.core.gradient import GRADIENT_RULES, compute_gradient
from uopcli.core.graph import Graph
from uopcli.core.ops import ALL_OPS, LEAF
from uopcli.core.walks import no_gc, toposort
from uopcli.tools import forward as graph_forward
from uopcli.tools.forward_check import check_hvp, check_transpose

f64 = dtypes.float64
RNG = np.random.default_rng(11)

CASES = {**{k: v for k, v in ELEMENTWISE_CASES.items()},
         **{f"reduce {k}": (b, {"x": x}) for k, (b, x) in REDUCE_CASES.items()},
         **{f"movement {k}": (b, {"x": RNG.normal(size=(2, 3))}) for k, b in MOVEMENT_CASES.items()}}


def _params(inputs, dtype=f64):
    return {k: UOp.param(k, np.shape(v), dtype) for k, v in inputs.items()}


def _tangent_values(inputs, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-1, 1, np.shape(v)) for k, v in inputs.items()}


def _directional_difference(out, inputs, direction, eps=1e-6):
    """(f(x + eps v) - f(x - eps v)) / 2 eps by the reference evaluator."""
    up = {k: np.asarray(v, np.float64) + eps * direction[k] for k, v in inputs.items()}
    down = {k: np.asarray(v, np.float64) - eps * direction[k] for k, v in inputs.items()}
    return (reference_evaluate([out], up)[0] - reference_evaluate([out], down)[0]) / (2 * eps)


# ----------------------------------------------------------------------------- every rule

@pytest.mark.parametrize("case", list(CASES))
def test_every_rule_matches_finite_differences(case):
    build, inputs = CASES[case]
    inputs = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    params = _params(inputs)
    out = build(**params)
    v = _tangent_values(inputs)
    tangent_params = {params[k]: UOp.param(f"t_{k}", np.shape(x), f64) for k, x in inputs.items()}
    (tangent,) = compute_jvp([out], tangent_params).values()
    assert tangent is not None and tangent.shape == out.shape and tangent.dtype is f64
    assert_shapes_as_inferred([tangent])
    feed = {**inputs, **{f"t_{k}": v[k] for k in inputs}}
    (value,) = evaluate([tangent], feed)
    if case == "AFTER/STORE":   # d's value is overwritten: only v's direction matters
        v["d"] = np.zeros_like(v["d"])
        (value,) = evaluate([tangent], {**feed, "t_d": v["d"]})
    if case == "MAX ties":      # at a tie the central difference is the mean of both slopes: the split rule
        np.testing.assert_allclose(value, (v["a"] + v["b"]) / 2, rtol=1e-12)
        return
    np.testing.assert_allclose(value, _directional_difference(out, inputs, v), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_every_rule_is_the_transpose_of_its_reverse_rule(case):
    """<u, J v> from the forward rules equals <J^T u, v> from the reverse rules, to rounding."""
    build, inputs = CASES[case]
    inputs = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    params = _params(inputs)
    out = build(**params)
    names = ["v"] if case == "AFTER/STORE" else list(inputs)
    lin = linearize([out], [params[k] for k in names])
    u = RNG.uniform(-1, 1, out.shape)
    reverse = compute_gradient(out, UOp.buffer(u), [params[k] for k in names])   # the reverse table
    v = _tangent_values(inputs, 3)
    feed = {**inputs, **{f"tangent_{k}": v[k] for k in names}}
    (jv,) = evaluate(lin.tangent_outputs, feed)
    left = float(np.sum(u * jv))
    for back in (transpose(lin, [UOp.buffer(u)]), [reverse[params[k]] for k in names]):  # and the linear graph's
        jtu = evaluate(back, feed)
        right = float(sum(np.sum(g * v[k]) for g, k in zip(jtu, names)))
        assert abs(left - right) <= 1e-12 * max(1.0, float(np.sum(np.abs(u * jv)))), (left, right)


@pytest.mark.parametrize("case", list(CASES))
def test_batched_tangents_are_the_tangents_one_at_a_time(case):
    build, inputs = CASES[case]
    inputs = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    params = _params(inputs)
    out = build(**params)
    names = ["v"] if case == "AFTER/STORE" else list(inputs)
    for name in names:  # each source's row in turn: a rule may treat its sources differently
        x = params[name]
        directions = RNG.uniform(-1, 1, (3, *x.shape))
        (batched,) = compute_jvp([out], {x: UOp.buffer(directions)}, batch=3).values()
        if batched is None:  # no tangent through this source (a comparison's, a WHERE's condition)
            assert compute_jvp([out], {x: UOp.buffer(directions[0])})[out] is None, name
            continue
        assert batched.shape == (3, *out.shape)
        assert_shapes_as_inferred([batched])
        (values,) = evaluate([batched], inputs)
        for k in range(3):
            (one,) = compute_jvp([out], {x: UOp.buffer(directions[k])}).values()
            np.testing.assert_allclose(values[k], evaluate([one], inputs)[0], rtol=1e-13, atol=1e-14)


def test_every_op_of_the_format_has_a_forward_row_beside_its_reverse_row():
    ops = set(ALL_OPS) - LEAF
    assert ops <= set(FORWARD_RULES)
    assert {k for k in GRADIENT_RULES if isinstance(k, tuple)} == {k for k in FORWARD_RULES if isinstance(k, tuple)}


# the transpose check in every float dtype: the graph built in that dtype, as jvp and diff
# build it (float16's accumulating casts included), then promoted to float64
DTYPE_CASES = [c for c in CASES if c not in ("AFTER/STORE",)]


def _integer_paths(x):
    """Comparisons, integer ops and bitcasts on the way: no tangent, no gradient."""
    bits = {dtypes.float16: dtypes.int16, dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}[x.dtype]
    through_int = (x.cast(dtypes.int32) // 2).cast(x.dtype) + x.bitcast(bits).cast(x.dtype) * 0.0
    return through_int + (x < 1.0).where(x * x, x.sin()) + x.trunc()


def _two_site_function(a, b):
    """A FUNCTION called twice, its args swapped at the second call: tangent bodies both ways."""
    first = UOp.trace_function("f", lambda p, q: (p * q.sin(), (p - q).exp2()), a, b)
    second = UOp.trace_function("f", lambda p, q: (p * q.sin(), (p - q).exp2()), b, first[0])
    return second[0] + second[1] * first[1]


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_check_transpose_passes_for_every_op_in_every_float_dtype(dtype):
    cases = {**{c: CASES[c] for c in DTYPE_CASES}, "integer paths": (_integer_paths, {"x": a3(0.5, 2.5, -3.0)}),
             "FUNCTION": (_two_site_function, {"a": a3(0.5, -1.0, 2.0), "b": a3(1.5, 0.25, -0.75)})}
    failures = []
    for case, (build, inputs) in cases.items():
        params = _params(inputs, dtype)
        out = build(**params)
        graph = Graph({"y": out}, inputs=list(params.values()))
        given = {k: np.asarray(v).astype(dtype.np) for k, v in inputs.items()}
        report = check_transpose(graph, list(inputs), inputs=given, seed=1, trials=2)
        if case in ZERO_JACOBIAN:  # both tables give exactly 0: right, but no comparison, so not "ok"
            if report.compared or any(t.jvp_side != 0 or t.vjp_side != 0 for t in report.trials) \
                    or not report.lines()[-1].startswith("not checked: every term"):
                failures.append((case, report.lines()))
        elif not report.passed:
            failures.append((case, report.lines()))
    assert not failures, failures


# cases whose Jacobian is 0 at their point (a product with two zeros in every row)
ZERO_JACOBIAN = {"reduce prod two zeros"}


def test_check_transpose_fails_when_a_forward_rule_is_wrong(monkeypatch):
    """The check can fail: a SIN rule off by a factor shows at once (no finite differences)."""
    x = UOp.param("x", (3,), f64)
    graph = Graph({"y": (x.sin() * x).sum()})
    assert check_transpose(graph, ["x"]).passed
    monkeypatch.setitem(FORWARD_RULES, Ops.SIN, lambda y, t, w: t[0] * 1.001)
    report = check_transpose(graph, ["x"])
    assert not report.passed and report.lines()[-1].startswith("FAILED")


# ----------------------------------------------------------------------------- zeros, detach

def test_zero_tangents_make_no_nodes():
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    tx = UOp.param("tangent_x", (3,), f64)
    y = (w.sin() * 3.0).exp2() + x
    found = compute_jvp([y, w.sin()], {x: tx})
    assert found[y] is tx                  # d(f(w) + x) = dx: nothing made for w's side
    assert found[w.sin()] is None          # w has no tangent: a symbolic zero


def test_detach_gives_a_zero_tangent():
    x = UOp.param("x", (3,), f64)
    tx = UOp.param("tangent_x", (3,), f64)
    y = x.detach() * x
    (t,) = compute_jvp([y], {x: tx}).values()
    inputs = {"x": a3(1, 2, 3), "tangent_x": a3(1, 1, 1)}
    np.testing.assert_array_equal(evaluate([t], inputs)[0], [1, 2, 3])   # detach(x) * dx only
    assert compute_jvp([x.detach().sin()], {x: tx})[x.detach().sin()] is None


def test_nothing_is_made_below_an_op_whose_tangent_is_zero():
    """Softmax's detached max and a mask's comparison: their tangent is zero whatever their
    sources' are, so the walk does not go below them and makes no tangent for the max
    (the REDUCE MAX row alone would make a mask, a count and a division)."""
    from uopcli.core.uop import next_serial
    x = UOp.param("x_below_zero_ops", (2, 5), f64)
    tx = UOp.param("tangent_x_below_zero_ops", (2, 5), f64)
    peak = x.max(axis=1, keepdim=True)
    y = (x - peak.detach()).exp2() * (x < peak.detach()).cast(f64)
    since = next_serial()
    (t,) = compute_jvp([y], {x: tx}).values()
    made = [n for n in toposort([t]) if n.serial > since]
    assert len(made) == next_serial() - since - 1   # every node made is in the tangent: none wasted
    assert not any(n.op == Ops.REDUCE for n in made)
    x_value = RNG.normal(size=(2, 5))
    v = _tangent_values({"x": x_value})["x"]
    (value,) = evaluate([t], {"x_below_zero_ops": x_value, "tangent_x_below_zero_ops": v})
    y_value = np.exp2(x_value - x_value.max(axis=1, keepdims=True)) * (x_value < x_value.max(axis=1, keepdims=True))
    np.testing.assert_allclose(value, y_value * math.log(2) * v, rtol=1e-14)


def test_tangent_nodes_carry_their_forward_node_metadata_under_the_tangent_scope():
    x = UOp.param("x", (3,), f64)
    y = x.relu() * 2.0
    (t,) = compute_jvp([y], {x: UOp.param("tangent_x", (3,), f64)}).values()
    forward = set(toposort([y]))
    made = [n for n in toposort([t]) if n not in forward and n.op != Ops.PARAM and n.op != Ops.CONST]
    assert made and all(is_tangent(n.meta) for n in made)
    assert any(n.meta.name == "relu" and n.meta.scope == TANGENT_SCOPE for n in made)
    assert not is_tangent(y.meta)


def test_each_tangent_node_is_tagged_by_the_node_it_was_made_for_not_by_a_neighbour():
    x = UOp.param("x", (3,), f64)
    y = (x.relu() * 2.0).sin()  # relu's nodes, then two untagged ones: the walk's tag changes
    t = compute_jvp([y], {x: UOp.param("tangent_x", (3,), f64)})[y]
    untagged = Metadata(None, None, False, TANGENT_SCOPE)
    assert t.meta == untagged                                   # the SIN's tangent (slope * d(2 relu))
    assert t.src[0].meta == untagged                            # the MUL's: d(relu) * 2
    assert t.src[0].src[0].meta == Metadata("relu", y.src[0].src[0].meta.loc, False, TANGENT_SCOPE)


def test_a_tangent_that_does_not_fit_is_an_error():
    x = UOp.param("x", (3,), f64)
    with pytest.raises(GradientError, match="does not fit"):
        compute_jvp([x.sin()], {x: UOp.param("t", (2,), f64)})
    with pytest.raises(GradientError, match=r"tangent float32\[3\] does not fit float64\[3\]"):
        compute_jvp([x.sin()], {x: UOp.param("t", (3,), dtypes.float32)})
    # a tangent is for a value node, given as a node: a TUPLE has no value to move
    pair = UOp.tuple(x, x.sin())
    with pytest.raises(GradientError, match="a tangent must be given for a value node, as a UOp"):
        compute_jvp([pair.src[1]], {pair: UOp.param("t", (3,), f64)})
    with pytest.raises(GradientError, match="a tangent must be given for a value node, as a UOp"):
        compute_jvp([x.sin()], {x: np.ones(3)})


# ----------------------------------------------------------------------------- calls

def _function_of_three():
    a, b, c = (UOp.param(n, (3,), f64) for n in "abc")
    fn = UOp.trace_function("f", lambda p, q, r: (p * q, r.sin() * q), a, b, c)
    return a, b, c, fn


def test_a_function_gets_a_tangent_function_reading_only_what_it_needs():
    a, b, c, fn = _function_of_three()
    ta = UOp.param("tangent_a", (3,), f64)
    found = compute_jvp([fn[0], fn[1]], {a: ta})
    assert found[fn[1]] is None            # sin(c) * b does not depend on a: zero, no output for it
    tangent = found[fn[0]]
    call = tangent.src[0]
    assert tangent.op == Ops.GETTUPLE and call.op == Ops.FUNCTION and call.arg == "f_jvp"
    assert len(call.src[0].src) == 1 and call.src[1:] == (b, ta)   # d(a*b) = b da: reads b and da
    inputs = {"a": a3(1, 2, 3), "b": a3(0.5, -1, 2), "c": a3(0, 1, 2), "tangent_a": a3(1, -2, 0.5)}
    np.testing.assert_allclose(evaluate([tangent], inputs)[0], inputs["b"] * inputs["tangent_a"])


def test_a_function_called_at_many_sites_gets_one_tangent_body():
    h, w = UOp.param("h0", (2,), f64), UOp.param("w", (2,), f64)
    xs = UOp.param("xs", (4, 2), f64)
    for i in range(4):
        h = UOp.trace_function("cell", lambda p, q, r: ((p * q + r).sin(),), h, w, xs[i])[0]
    tangents = {w: UOp.param("tangent_w", (2,), f64), xs: UOp.param("tangent_xs", (4, 2), f64)}
    (t,) = compute_jvp([h.sum()], tangents).values()
    bodies = {n.src[0] for n in toposort([t]) if n.op == Ops.FUNCTION and n.arg == "cell_jvp"}
    calls = [n for n in toposort([t]) if n.op == Ops.FUNCTION and n.arg == "cell_jvp"]
    assert len(calls) == 4 and len(bodies) <= 2  # the first site has no tangent of h: one body more
    inputs = {"h0": a3(0.3, -0.5), "w": a3(1.5, 0.7), "xs": RNG.normal(size=(4, 2))}
    v = {"h0": np.zeros(2), "w": a3(0.2, -1.0), "xs": RNG.normal(size=(4, 2))}
    (value,) = evaluate([t], {**inputs, "tangent_w": v["w"], "tangent_xs": v["xs"]})
    np.testing.assert_allclose(value, _directional_difference(h.sum(), inputs, v), rtol=1e-7)


def test_a_call_without_its_own_backward_body_is_differentiated_through_its_body():
    x = UOp.param("x", (3,), f64)
    call = UOp.trace_call("kernel", lambda p: p.sin() * p, None, x)
    (t,) = compute_jvp([call[0]], {x: UOp.param("tangent_x", (3,), f64)}).values()
    assert any(n.op == Ops.FUNCTION and n.arg == "kernel_jvp" for n in toposort([t]))
    xs = a3(0.5, -1, 2)
    np.testing.assert_allclose(evaluate([t], {"x": xs, "tangent_x": a3(1, 1, 1)})[0], np.cos(xs) * xs + np.sin(xs))


def test_a_call_with_its_own_backward_body_is_refused_naming_it():
    x = UOp.param("x", (3,), f64)
    ste = UOp.trace_call("ste", lambda p: p.trunc(), lambda p, g: g, x)
    with pytest.raises(GradientError, match="CALL 'ste' has its own backward body.*custom_vjp"):
        compute_jvp([ste[0] * x], {x: UOp.param("tangent_x", (3,), f64)})
    # off the tangent's path it is fine
    w = UOp.param("w", (3,), f64)
    (t,) = compute_jvp([ste[0] * w], {w: UOp.param("tangent_w", (3,), f64)}).values()
    np.testing.assert_array_equal(evaluate([t], {"x": a3(1.5, -2.5, 0.2), "w": a3(0, 0, 0),
                                                 "tangent_w": a3(1, 1, 1)})[0], [1, -2, 0])


def test_functions_nested_thousands_deep():
    from uopcli.backends.numpy import evaluate as production_evaluate
    x = UOp.param("x", (2,), f64)
    xs = a3(0.25, 2.0)
    for levels, scale in ((30, 1.5), (3000, 1.0)):
        before = sys.getrecursionlimit()
        (t,) = compute_jvp([nested_functions(levels, x, scale)], {x: UOp.param("tangent_x", (2,), f64)}).values()
        assert sys.getrecursionlimit() == before
        np.testing.assert_allclose(production_evaluate([t], {"x": xs, "tangent_x": a3(1, 1)})[0],
                                   np.cos(xs) * scale ** levels, rtol=1e-12)


def test_a_million_node_chain():
    limit = sys.getrecursionlimit()
    x = UOp.param("deep", (2,), f64)
    y = x
    with no_gc():
        for _ in range(500_000):  # 1,000,000 forward nodes
            y = y * 1.000001 + 1e-7
    (t,) = compute_jvp([y], {x: UOp.param("tangent_deep", (2,), f64)}).values()
    assert sys.getrecursionlimit() == limit
    node, factors = t, 0   # d/dx (y * c + d) = c dy: one MUL a step, the adds pass the tangent on
    while node.op == Ops.MUL:
        assert node.src[1] is UOp.const(1.000001, f64)
        node, factors = node.src[0], factors + 1
    assert factors == 500_000 and node.arg == "tangent_deep"


def _chain(steps):
    """The bench's chain family in float64: y = sin(1.0001 y + 0.5), `steps` times."""
    x = UOp.param("x", (8,), f64)
    y = x
    for _ in range(steps):
        y = (y * 1.0001 + 0.5).sin()
    return Graph({"loss": y.sum()}, inputs=[x])


def _chain_second_derivative(xs, steps):
    """d2 y / dx2 of the chain per element, by a dual-of-dual recurrence in numpy."""
    y, dy, ddy = xs, np.ones_like(xs), np.zeros_like(xs)
    for _ in range(steps):
        a = y * 1.0001 + 0.5
        y, dy, ddy = np.sin(a), np.cos(a) * 1.0001 * dy, np.cos(a) * 1.0001 * ddy - np.sin(a) * (1.0001 * dy) ** 2
    return ddy


@pytest.mark.parametrize("steps", [3, 40])
def test_the_hvp_of_a_chain_has_twice_the_gradients_nodes(steps):
    # forward over reverse: per step the gradient has 7 nodes (mul, add, sin; the cosine
    # pi/2 - a and its sin, two muls) and the HVP 7 more: the forward tangent (2), the
    # cosine's tangent -da sin(a) reading the forward sin itself (1, its sign kept for
    # the sum), the product's tangent (3: a SUB), the last mul's (1). It had 17 a step:
    # sin(pi/2 - (pi/2 - a)) rebuilt (2) and a NEG node (1).
    graph = _chain(steps)
    x = graph.inputs[0]
    gradient = compute_gradient(graph.outputs["loss"], UOp.const(1.0, f64), [x])[x]
    hvp = graph_forward.hvp(graph, ["x"])
    assert len(Graph({"g": gradient})) == 7 * steps + 6
    assert len(hvp) == 14 * steps + 4
    ops = [n.op for n in hvp.nodes()]
    assert ops.count(Ops.NEG) == 1 and ops.count(Ops.SIN) == 2 * steps  # only the forward's and the cosines'
    xs, v = RNG.normal(size=8), RNG.normal(size=8)
    (out,) = evaluate(list(hvp.outputs.values()), {"x": xs, "tangent_x": v})
    np.testing.assert_allclose(out, _chain_second_derivative(xs, steps) * v, rtol=1e-11, atol=1e-14)


def test_a_negated_tangent_is_a_sign_until_a_row_needs_its_node():
    x, w = UOp.param("x", (3,), f64), UOp.param("w", (3,), f64)
    tx, tw = UOp.param("tangent_x", (3,), f64), UOp.param("tangent_w", (3,), f64)
    summed = (1.5 - x) * w + (-(w * 2.0))   # d = -dx w + (1.5 - x) dw - 2 dw: SUBs, no NEG
    needs_node = (0.5 - x * w).exp2()       # EXP2's row gets d(0.5 - x w) as a NEG node
    root = 2.0 - x * w                      # a negated root tangent: its NEG node
    found = compute_jvp([summed, needs_node, root], {x: tx, w: tw})
    assert Ops.NEG not in {n.op for n in toposort([found[summed]])}
    assert Ops.NEG in {n.op for n in toposort([found[needs_node]])} and found[root].op == Ops.NEG
    inputs = {"x": a3(0.3, -1.2, 2.0), "w": a3(1.1, 0.4, -0.7)}
    direction = {"x": a3(0.5, -0.25, 1.0), "w": a3(-1.0, 0.75, 0.2)}
    values = {**inputs, "tangent_x": direction["x"], "tangent_w": direction["w"]}
    for out in (summed, needs_node, root):
        np.testing.assert_allclose(evaluate([found[out]], values)[0],
                                   _directional_difference(out, inputs, direction), rtol=1e-8)


def test_the_tangent_of_a_cosine_reads_the_sin_itself():
    # cos x is sin(pi/2 - x): its slope cos(pi/2 - x) is sin x, not sin(pi/2 - (pi/2 - x))
    x = UOp.param("x", (4,), f64)
    y = x.cos()
    (t,) = compute_jvp([y], {x: UOp.param("tangent_x", (4,), f64)}).values()
    assert x.sin() in set(toposort([t]))
    xs, v = RNG.normal(size=4), RNG.normal(size=4)
    np.testing.assert_array_equal(evaluate([t], {"x": xs, "tangent_x": v})[0], -(v * np.sin(xs)))


# ----------------------------------------------------------------------------- JAX's three

def test_jvp_linearize_and_transpose_as_jax():
    x, w = UOp.param("x", (2, 3), f64), UOp.param("w", (3,), f64)
    y = ((x * w).sin().sum(1) * 2.0).exp2()
    primals, tangents = jvp([y], {x: UOp.param("tx", (2, 3), f64), w: UOp.param("tw", (3,), f64)})
    assert primals == [y] and tangents[0].shape == (2,)
    lin = linearize([y], [x, w])
    assert [p.arg for p in lin.tangent_inputs] == ["tangent_x", "tangent_w"]
    assert lin.residuals and not any(is_tangent(r.meta) for r in lin.residuals)
    assert all(r.op != Ops.PARAM or r.arg in ("x", "w") for r in lin.residuals)
    u = UOp.param("u", (2,), f64)
    back = transpose(lin, [u])
    grads = compute_gradient(y, u, [x, w])
    inputs = {"x": RNG.normal(size=(2, 3)), "w": RNG.normal(size=3), "u": a3(0.5, -2)}
    for mine, reverse in zip(evaluate(back, inputs), evaluate([grads[x], grads[w]], inputs)):
        np.testing.assert_allclose(mine, reverse, rtol=1e-13)
    # and the linear graph is linear: doubling the tangents doubles the outputs
    feed = {**inputs, "tangent_x": RNG.normal(size=(2, 3)), "tangent_w": RNG.normal(size=3)}
    (one,) = evaluate(lin.tangent_outputs, feed)
    (two,) = evaluate(lin.tangent_outputs, {**feed, "tangent_x": 2 * feed["tangent_x"],
                                            "tangent_w": 2 * feed["tangent_w"]})
    np.testing.assert_allclose(two, 2 * one, rtol=1e-14)


def test_jvp_gives_zeros_for_a_root_without_a_tangent():
    x, w = UOp.param("x", (3,), f64), UOp.param("w_no_tangent", (2,), f64)
    _, (tx_out, tw_out) = jvp([x.sin(), w * 2.0], {x: UOp.param("tx", (3,), f64)})
    assert tw_out.shape == (2,) and tw_out.dtype is f64            # a node of zeros, as jax.jvp gives
    np.testing.assert_array_equal(evaluate([tw_out], {"w_no_tangent": a3(1, 2, 3)[:2]})[0], [0.0, 0.0])


def test_linearize_names_shapes_and_keeps_what_the_tangent_graph_reads():
    x, w = UOp.param("x", (2, 3), f64), UOp.param("w", (3,), f64)
    y = (x * w).sin()
    lin = linearize([y], [x, w])
    assert lin.primals == [y]
    assert [(p.arg, p.shape, p.dtype) for p in lin.tangent_inputs] == [("tangent_x", (2, 3), f64),
                                                                       ("tangent_w", (3,), f64)]
    # d sin(x w) = cos(x w) (dx w + x dw): the forward nodes it reads are x w, x and w
    # (expanded to x's shape); the cosine is made for the tangent, and no constant is kept
    product = y.src[0]
    assert set(lin.residuals) == {product, *product.src} and len(lin.residuals) == 3
    # slot-numbered targets (inside a body) are named by their position, not their slot
    # (and in float32, each tangent input in its target's dtype)
    s1, s0 = UOp.slot(1, (3,), dtypes.float32), UOp.slot(0, (3,), dtypes.float32)
    unnamed = linearize([s1 * s0], [s1, s0], prefix="t")
    assert [(p.arg, p.dtype) for p in unnamed.tangent_inputs] == [("t0", dtypes.float32), ("t1", dtypes.float32)]


def test_transpose_of_two_outputs_adds_both_cotangents():
    x = UOp.param("x", (3,), f64)
    y1, y2 = x.sin(), (x * x).sum()
    lin = linearize([y1, y2], [x])
    u1, u2 = UOp.param("u1", (3,), f64), UOp.param("u2", (), f64)
    (back,) = transpose(lin, [u1, u2])
    inputs = {"x": a3(0.3, -1.2, 2.0), "u1": a3(1.0, -2.0, 0.5), "u2": np.float64(3.0)}
    expected = np.cos(inputs["x"]) * inputs["u1"] + 2 * inputs["x"] * inputs["u2"]
    np.testing.assert_allclose(evaluate([back], inputs)[0], expected, rtol=1e-14)
    with pytest.raises(GradientError, match="transpose: 1 cotangents for 2 outputs"):
        transpose(lin, [u1])


def test_is_tangent_reads_the_tangent_scope_and_what_is_under_it():
    assert is_tangent(Metadata(None, None, False, TANGENT_SCOPE))
    assert is_tangent(Metadata("relu", None, True, f"{TANGENT_SCOPE}/encoder/layer.0"))
    assert not is_tangent(Metadata(None, None, False, f"{TANGENT_SCOPE}encoder"))   # a scope named so
    assert not is_tangent(Metadata(None, None, False, f"encoder/{TANGENT_SCOPE}"))
    assert not is_tangent(Metadata(None, None, True, None)) and not is_tangent(None)


def test_a_tangent_node_keeps_name_loc_and_backward_and_nests_the_scope():
    x = UOp.param("x_scoped", (3,), f64)
    y = (x * 3.0).set_meta(Metadata("scale", "model.py:7", True, "encoder/layer.0"))
    t = compute_jvp([y], {x: UOp.param("tangent_x_scoped", (3,), f64)})[y]
    assert t.meta == Metadata("scale", "model.py:7", True, f"{TANGENT_SCOPE}/encoder/layer.0")
    z = (x * 5.0).set_meta(Metadata("plain", None, False, None))
    assert compute_jvp([z], {x: UOp.param("tangent_x_scoped", (3,), f64)})[z].meta == \
        Metadata("plain", None, False, TANGENT_SCOPE)


SCALAR_SOURCE_CASES = {  # a shape-() source under a larger node (implicit broadcast), its tangent a sign or not
    "x - s": (lambda x, s: x - s, lambda dx, ds: dx - ds),
    "s - x": (lambda x, s: s - x, lambda dx, ds: ds - dx),
    "(-s) - x": (lambda x, s: (-s) - x, lambda dx, ds: -ds - dx),
    "x + (-s)": (lambda x, s: x + (-s), lambda dx, ds: dx - ds),
    "(-s) + x": (lambda x, s: (-s) + x, lambda dx, ds: dx - ds),
    "x * (-s)": (lambda x, s: x * (-s), None),
    "(-s) * (-x)": (lambda x, s: (-s) * (-x), None),
}


@pytest.mark.parametrize("case", list(SCALAR_SOURCE_CASES))
def test_a_scalar_source_under_a_larger_node_one_direction_and_batched(case):
    build, expected = SCALAR_SOURCE_CASES[case]
    x, s = UOp.param("x_vec", (3,), f64), UOp.param("s_scalar", (), f64)
    y = build(x, s)
    assert any(src.shape == () for n in toposort([y]) for src in n.src if n.shape == (3,)), "no implicit broadcast"
    values = {"x_vec": a3(0.5, -1.25, 2.0), "s_scalar": np.float64(-0.75)}
    dx, ds = a3(1.0, -2.0, 0.25), np.float64(3.0)
    tangent = compute_jvp([y], {x: UOp.buffer(dx), s: UOp.buffer(np.asarray(ds))})[y]
    (got,) = evaluate([tangent], values)
    want = expected(dx, ds) if expected else _directional_difference(y, values, {"x_vec": dx, "s_scalar": ds})
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # batched: two directions at once, each the walk of one
    dxs, dss = np.stack([dx, -2 * dx]), np.array([ds, 0.5])
    batched = compute_jvp([y], {x: UOp.buffer(dxs), s: UOp.buffer(dss)}, batch=2)[y]
    assert batched.shape == (2, 3)
    (both,) = evaluate([batched], values)
    for k in range(2):
        one = compute_jvp([y], {x: UOp.buffer(dxs[k]), s: UOp.buffer(np.asarray(dss[k]))})[y]
        np.testing.assert_allclose(both[k], evaluate([one], values)[0], rtol=1e-14)


@pytest.mark.parametrize("batch", [None, 2])
def test_a_scalar_tangent_reaching_a_larger_node_is_broadcast_before_it_is_summed(batch):
    """s - x with a tangent on s only: the SUB row returns ds as it is (shape ()), and the
    walk broadcasts it to the node's shape before the sum reads it: d sum(s - x) = 3 ds."""
    x, s = UOp.param("x_vec", (3,), f64), UOp.param("s_scalar", (), f64)
    ds = np.float64(1.5) if batch is None else np.array([1.5, -4.0])
    for y, factor in (((s - x).sum(), 3.0), ((s - x).max(), 1.0), (((s - x) * x).sum(), None)):
        t = compute_jvp([y], {s: UOp.buffer(np.asarray(ds))}, batch=batch)[y]
        values = {"x_vec": a3(0.5, -1.25, 2.0), "s_scalar": np.float64(-0.75)}
        expected = np.asarray(ds) * (factor if factor is not None else values["x_vec"].sum())
        np.testing.assert_allclose(evaluate([t], values)[0], expected, rtol=1e-14)


def test_the_nodes_a_call_row_makes_after_walking_the_body_are_tangent_nodes():
    a, b, c, fn = _function_of_three()
    t = compute_jvp([fn[0]], {a: UOp.param("tangent_a", (3,), f64)})[fn[0]]
    call = t.src[0]
    assert call.op == Ops.FUNCTION and is_tangent(call.meta) and is_tangent(t.meta)


def test_a_negated_root_a_seeded_node_and_a_negated_branch():
    """The walk's corners its mutation run showed untested: a root whose tangent is a sign
    (-x) gets its NEG node tagged as a tangent of the root; a node given a tangent keeps it
    even where its sources have tangents too; a negated tangent reaching a three-source op
    (WHERE) becomes its node first."""
    x = UOp.param("x_corners", (3,), f64)
    tx = UOp.param("tangent_x_corners", (3,), f64)
    compute_jvp([x * 3.0], {x: tx})  # a node without metadata first: its tangents' tag is known then
    root = (-x).set_meta(Metadata("flip", "corners.py:1", False, "block"))
    t = compute_jvp([root], {x: tx})[root]
    assert t.op == Ops.NEG and t.src[0] is tx and t.meta == Metadata("flip", "corners.py:1", False, TANGENT_SCOPE + "/block")
    y = x.sin()
    ty = UOp.param("tangent_y_corners", (3,), f64)
    (t,) = compute_jvp([y * 2.0], {x: tx, y: ty}).values()
    xs, ts, tys = a3(0.5, -1.0, 2.0), a3(1.0, 2.0, 3.0), a3(-4.0, 5.0, 0.25)
    feed = {"x_corners": xs, "tangent_x_corners": ts, "tangent_y_corners": tys}
    np.testing.assert_array_equal(evaluate([t], feed)[0], 2.0 * tys)  # y's own tangent, not cos(x) tx
    branch = (x > 0).where(-x, x * 2.0)
    (t,) = compute_jvp([branch], {x: tx}).values()
    np.testing.assert_array_equal(evaluate([t], feed)[0], np.where(xs > 0, -ts, 2.0 * ts))


def test_a_tangent_for_an_integer_node_is_refused():
    k = UOp.param("k_int", (3,), dtypes.int32)
    with pytest.raises(GradientError, match="floating-point"):
        compute_jvp([k * 2], {k: UOp.param("tangent_k_int", (3,), dtypes.int32)})


# ----------------------------------------------------------------------------- graph level

def _mlp_graph():
    x, w, b = UOp.param("x", (4, 3), f64), UOp.param("w", (3, 2), f64), UOp.param("b", (2,), f64)
    y = (x @ w + b).tanh()
    return Graph({"y": y, "loss": (y * y).sum()}, inputs=[x, w, b])


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(4, 3)), "w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}


def test_jvp_graph_names_and_keeps_inputs_in_order():
    graph = _mlp_graph()
    out = graph_forward.jvp(graph, ["w", "x"], keep_forward=True)
    assert list(out.outputs) == ["y", "loss", "jvp_y", "jvp_loss"]
    assert out.input_names == ["x", "w", "b", "tangent_w", "tangent_x"]
    assert out.meta["jvp_wrt"] == "w,x"
    assert list(graph_forward.jvp(graph, ["w"], of=["y"]).outputs) == ["jvp_y"]
    with pytest.raises(GradientError, match="no input named 'nope'"):
        graph_forward.jvp(graph, ["nope"])


def test_jacobian_columns_and_chunks():
    graph = _mlp_graph()
    values = _values()
    results = []
    for chunk in (1, 4, 256):
        jac = graph_forward.jacobian(graph, ["w", "b"], of=["y"], chunk=chunk)
        assert list(jac.outputs) == ["jacobian_y_w", "jacobian_y_b"]
        assert jac.outputs["jacobian_y_w"].shape == (4, 2, 3, 2)
        results.append(evaluate(list(jac.outputs.values()), values))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-14)
    # column (i, j) of d y / d w is the jvp along the basis vector e_ij
    one = graph_forward.jvp(graph, ["w"], of=["y"])
    for index in [(0, 0), (2, 1)]:
        e = np.zeros((3, 2))
        e[index] = 1.0
        (column,) = evaluate(list(one.outputs.values()), {**values, "tangent_w": e})
        np.testing.assert_allclose(results[0][0][(..., *index)], column, rtol=1e-14)


def test_hessian_is_symmetric_and_matches_hvps():
    graph = _mlp_graph()
    values = _values(1)
    hess = graph_forward.hessian(graph, ["w", "b"], of=["loss"], chunk=5)
    assert list(hess.outputs) == ["hessian_w_w", "hessian_w_b", "hessian_b_w", "hessian_b_b"]
    ww, wb, bw, bb = evaluate(list(hess.outputs.values()), values)
    assert ww.shape == (3, 2, 3, 2) and wb.shape == (3, 2, 2)
    full = np.block([[ww.reshape(6, 6), wb.reshape(6, 2)], [bw.reshape(2, 6), bb.reshape(2, 2)]])
    np.testing.assert_allclose(full, full.T, rtol=1e-10, atol=1e-13)
    hvp = graph_forward.hvp(graph, ["w", "b"], of=["loss"])
    assert list(hvp.outputs) == ["hvp_w", "hvp_b"] and hvp.input_names[-2:] == ["tangent_w", "tangent_b"]
    v = RNG.normal(size=8)
    hw, hb = evaluate(list(hvp.outputs.values()), {**values, "tangent_w": v[:6].reshape(3, 2), "tangent_b": v[6:]})
    np.testing.assert_allclose(np.concatenate([hw.ravel(), hb]), full @ v, rtol=1e-10)


def test_matrices_above_the_limit_are_refused_with_their_size():
    graph = _mlp_graph()
    with pytest.raises(GradientError, match=r"jacobian_y_w would hold 48 elements .* above max_tensor_elements 47"):
        graph_forward.jacobian(graph, ["w"], of=["y"], limit=47)
    assert graph_forward.jacobian(graph, ["w"], of=["y"], limit=48)
    with pytest.raises(GradientError, match=r"hessian_w_w would hold 36 elements"):
        graph_forward.hessian(graph, ["w"], of=["loss"], limit=35)
    with pytest.raises(GradientError, match="needs a floating-point scalar"):
        graph_forward.hessian(graph, ["w"], of=["y"])


def test_check_hvp_passes_and_fails_when_the_hvp_is_wrong(monkeypatch):
    graph = _mlp_graph()
    assert check_hvp(graph, ["w", "b"], ["loss"]).passed
    monkeypatch.setitem(FORWARD_RULES, Ops.EXP2, lambda y, t, w: t[0] * w.lift(y, t[0]) * 0.69)  # ln2 to two digits
    report = check_hvp(graph, ["w", "b"], ["loss"])
    assert not report.passed and "FAILED" in report.lines()[-1]


def test_check_hvp_report_lines_and_values():
    """What `uopgrad check --hvp` prints: the table's words, each target's errors (the
    relative one is the absolute over the larger magnitude), ok or FAILED, the last line;
    the inputs given are the ones used."""
    graph = _mlp_graph()
    given = _values(3)
    report = check_hvp(graph, ["w", "b"], ["loss"], inputs=given)
    lines = report.lines()
    assert lines[0].split() == ["hvp", "of", "max", "abs", "err", "max", "rel", "err"]
    assert [line.split()[0] for line in lines[1:3]] == ["hvp_w", "hvp_b"] and all(x.endswith("  ok") for x in lines[1:3])
    assert lines[-1] == "ok: Hessian-vector products of loss match finite differences of its gradient (float64)"
    for t in report.targets:
        assert 0 < t.max_abs_error < 1e-6 and t.max_rel_error < 1e-5 and t.max_rel_error != t.max_abs_error
    assert check_hvp(graph, ["w", "b"], ["loss"], inputs=given).targets == report.targets       # seeded: the same
    other = check_hvp(graph, ["w", "b"], ["loss"], inputs=_values(4)).targets
    assert [t.max_abs_error for t in other] != [t.max_abs_error for t in report.targets]      # the inputs are read


def test_check_hvp_relative_error_is_over_the_magnitude():
    """loss = 1e6 sum(w^2): H v = 2e6 v, every element far above 1, so each relative error
    is below its absolute one (the error over the magnitude, not times it)."""
    w = UOp.param("w", (6,), f64)
    report = check_hvp(Graph({"loss": (w * w).sum() * 1e6}, inputs=[w]), ["w"], ["loss"])
    (t,) = report.targets
    assert report.passed and 0 < t.max_rel_error < t.max_abs_error


def _relu_step_loss():
    """loss = sum(c relu(w)) + sum(w^2): its gradient c [w > 0] + 2w jumps by c at w = 0,
    where H v = 2v on either side."""
    w = UOp.param("w", (3,), f64)
    return Graph({"loss": (w.relu() * 3.0).sum() + (w * w).sum()}, inputs=[w])


def test_check_hvp_retries_closer_where_the_step_crosses_a_kink():
    """w = 1e-7 is within the first step (6e-6) of relu's kink: the gradient's jump over 2h
    is no second derivative. Closer, as `check` retries, the difference is 2v."""
    given = {"w": np.array([1.0, 1e-7, 0.5]), "tangent_w": np.ones(3)}
    (target,) = check_hvp(_relu_step_loss(), ["w"], ["loss"], inputs=given).targets
    assert target.passed and not target.kink and target.max_abs_error < 1e-6


def test_check_hvp_calls_a_kink_at_the_point_not_compared_and_says_so():
    """At w = 0 itself the one-sided differences of the gradient disagree (2v and 3/s + 2v)
    with H v = 2v between them: no derivative there to compare, as `check` says of a kink,
    naming the node that chooses differently on either side (relu's comparison). With that
    the only target, nothing was compared: not ok (this test once asserted "passed": a check
    that compared nothing said ok), the verdict says to choose another point."""
    given = {"w": np.array([1.0, 0.0, 0.5]), "tangent_w": np.ones(3)}
    report = check_hvp(_relu_step_loss(), ["w"], ["loss"], inputs=given)
    (target,) = report.targets
    assert not report.passed and target.kink and math.isnan(target.max_abs_error)
    assert target.kink_at.startswith("%2 CMPLT bool[3] (relu, at test_forward.py:")
    lines = report.lines()
    assert lines[1].split() == ["hvp_w", "kink:", "not", "compared"]
    assert lines[-2] == ("not checked: every target at a kink, nothing compared there: choose another point or "
                         "direction (-i, or another --seed)")
    assert lines[-1].startswith(f"note: the gradient jumps at the point along v for hvp_w, where {target.kink_at} "
                                f"chooses differently on either side (a kink")
    assert report.to_dict()["targets"][0]["kink"] is True and report.to_dict()["passed"] is False


def test_check_hvp_table_fits_long_target_names():
    w = UOp.param("encoder.layers.0.linear1.weight", (3,), f64)
    lines = check_hvp(Graph({"loss": (w * w * w).sum()}, inputs=[w]), [w.arg], ["loss"]).lines()
    assert len(lines[0]) == len(lines[1].rsplit("  ", 1)[0])  # the columns line up under their heads


def test_check_hvp_failed_lines_name_the_targets(monkeypatch):
    monkeypatch.setitem(FORWARD_RULES, Ops.EXP2, lambda y, t, w: t[0] * w.lift(y, t[0]) * 0.69)
    lines = check_hvp(_mlp_graph(), ["w", "b"], ["loss"]).lines()
    assert lines[1].endswith("  FAILED") and lines[-1] == "FAILED: w, b"


def _batch_norm_loss(detach_mean: bool):
    """loss = sum(y^2 h) + sum(b^3), y = (h - mean) / sqrt(var + eps), h = x @ w, the
    variance taken around mean.detach() as tinygrad's BatchNorm takes it (exact for the
    gradient, as sum(h - mean) = 0; not for the Hessian), or around mean itself."""
    x, w, b = UOp.param("x", (6, 3), f64), UOp.param("w", (3, 4), f64), UOp.param("b", (4,), f64)
    h = x @ w
    mean = h.mean(0, keepdim=True)
    var = ((h - (mean.detach() if detach_mean else mean)) ** 2).mean(0, keepdim=True)
    y = (h - mean) * (var + 1e-5).rsqrt()
    return Graph({"loss": (y * y * h).sum() + (b * b * b).sum()}, inputs=[x, w, b])


def test_check_hvp_holds_detach_values_and_says_how_far_the_functions_own_hessian_is():
    """tinygrad's BatchNorm detaches its batch mean in the variance: H v (a DETACH is a
    constant, as for the gradient) passes against differences with the DETACH values held,
    and the note gives the distance to the function's own Hessian (that of the same model
    with nothing detached) for the targets it concerns: w, not b, which the BatchNorm
    does not see."""
    detached = check_hvp(_batch_norm_loss(True), ["w", "b"], ["loss"])
    assert detached.passed and max(t.max_rel_error for t in detached.targets) < 1e-6
    moving, bias = detached.moving
    assert not moving.passed and moving.max_rel_error > 0.1 and bias.passed
    lines = detached.lines()
    assert lines[-2] == "ok: Hessian-vector products of loss match finite differences of its gradient (float64)"
    assert lines[-1].startswith(f"note: H v holds DETACH values constant, as the gradient does; with them moving "
                                f"(the function's own Hessian) hvp_w differs (up to {moving.max_rel_error:.3g} relative)")
    assert detached.to_dict()["with_detach_moving"][0]["passed"] is False
    # the function's own Hessian: the model without the DETACH, whose H v is what moved
    rng = np.random.default_rng(5)
    values = {"x": rng.normal(size=(6, 3)), "w": rng.normal(size=(3, 4)), "b": rng.normal(size=4),
              "tangent_w": rng.normal(size=(3, 4)), "tangent_b": rng.normal(size=4)}
    own, held = (evaluate(list(graph_forward.hvp(_batch_norm_loss(d), ["w"], ["loss"]).outputs.values()), values)[0]
                 for d in (False, True))
    assert np.max(np.abs(own - held)) > 0.01 * np.max(np.abs(own))  # far above rounding (1e-12)


def test_check_hvp_tells_nothing_of_a_detach_that_changes_no_difference():
    """softmax's detached max: a softmax does not depend on its shift at any order, so
    holding it changes no verdict, and there is no note."""
    x, w = UOp.param("x", (5, 3), f64), UOp.param("w", (3, 4), f64)
    h = x @ w
    e = (h - h.max(1, keepdim=True).detach()).exp()
    p = e / e.sum(1, keepdim=True)
    report = check_hvp(Graph({"loss": (p * p * h).sum()}, inputs=[x, w]), ["x", "w"], ["loss"])
    assert report.passed and report.moving is None and not report.lines()[-1].startswith("note")
    assert "with_detach_moving" not in report.to_dict()


def test_check_transpose_report_lines():
    graph = _mlp_graph()
    lines = check_transpose(graph, ["w", "b"], ["y"], seed=1, trials=2).lines()
    assert lines[0].split() == ["seed", "<u,", "J", "v>", "(jvp)", "<J^T", "u,", "v>", "(diff)", "rel", "err"]
    assert len(lines) == 4 and lines[1].endswith("  ok") and lines[2].endswith("  ok")
    assert lines[-1] == "ok: jvp and diff of y are each other's transpose (float64, rel tol 1e-10)"


def test_check_transpose_failed_lines(monkeypatch):
    monkeypatch.setitem(FORWARD_RULES, Ops.EXP2, lambda y, t, w: t[0] * w.lift(y, t[0]) * 0.69)
    lines = check_transpose(_mlp_graph(), ["w", "b"], ["y"], seed=1, trials=2).lines()
    assert lines[1].endswith("  FAILED")
    assert lines[-1] == "FAILED: <u, J v> and <J^T u, v> differ: a forward or reverse rule is wrong"


@pytest.mark.parametrize("size, text", [(999, "999 bytes"), (1_500, "1.5 KB"), (2_500_000, "2.5 MB"),
                                        (3_000_000_000, "3.0 GB"), (4_000_000_000_000, "4.0 TB"),
                                        (5_000_000_000_000_000, "5000.0 TB")])
def test_a_refused_matrix_size_is_said_in_its_unit(size, text):
    from uopcli.tools.forward import _bytes
    assert _bytes(size) == text


def test_graph_level_names_taken_are_numbered_and_a_name_twice_is_refused():
    # a kept forward output jvp_y: the new JVP of y is jvp2_y (it was refused); --wrt x,x stays refused
    x = UOp.param("x", (3,), f64)
    graph = Graph({"y": x.sin(), "jvp_y": x * 2.0})
    kept = graph_forward.jvp(graph, ["x"], of=["y"], keep_forward=True)
    assert list(kept.outputs) == ["y", "jvp_y", "jvp2_y"] and kept.input_names == ["x", "tangent_x"]
    xs, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 3.0, -2.0])
    got = evaluate(list(kept.outputs.values()), {x: xs, kept.inputs[1]: v})
    np.testing.assert_allclose(got[1], 2 * xs, rtol=1e-15)              # the forward jvp_y, as it was
    np.testing.assert_allclose(got[2], np.cos(xs) * v, rtol=1e-15)      # the new one: d sin(x) along v
    with pytest.raises(GradientError, match="^wrt: 'x' is named twice$"):
        graph_forward.jvp(graph, ["x", "x"])


def test_transpose_check_reads_a_straight_through_cast_in_both_tables_alike():
    # float -> float16 -> float: each table passes the tangent / gradient through the casts
    x = UOp.param("x", (4,), f64)
    graph = Graph({"y": (x.cast(dtypes.float16).cast(f64) * x).sum()})
    assert check_transpose(graph, ["x"]).passed
    assert math.isfinite(check_transpose(graph, ["x"]).trials[0].jvp_side)
