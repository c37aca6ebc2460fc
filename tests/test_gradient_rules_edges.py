"""compute_gradient at the edges the other gradient tests do not reach (issue 30: mutants of
core/gradient.py that survived them): division by a scalar, COPY between devices, the
call rows called directly, several CALLs in one gradient, nested bodies whose slots must
stay their own, integer constants in a differentiated body, the prod rule seeded with a
RESHAPE that is then a target, metadata (first tag wins, old nodes untouched, the retry on
a deep stack) and the messages of GradientError."""

import math

import numpy as np
import pytest

from _reference_eval import assert_shapes_as_inferred, numeric_gradient
from uopcli import GradientError, Metadata, Ops, UOp, dtypes, evaluate
from uopcli.core.gradient import GRADIENT_RULES, compute_gradient
from uopcli.core.uop import next_serial
from uopcli.core.walks import toposort

f64 = dtypes.float64


def param(name, shape):
    return UOp.param(name, shape, f64)


def a3(*values):
    return np.array(values, dtype=np.float64)


def assert_matches_finite_differences(out, inputs: dict, names, rtol=1e-6, atol=1e-8):
    """The gradients of sum(out * w) (w fixed) for `names` equal central differences."""
    params = {n: param(n, np.shape(v)) for n, v in inputs.items()}
    w = np.linspace(0.5, 1.5, math.prod(out.shape)).reshape(out.shape)
    grads = compute_gradient(out, UOp.buffer(w), [params[n] for n in names])
    assert_shapes_as_inferred([grads[params[n]] for n in names])
    values = evaluate([grads[params[n]] for n in names], inputs)
    for name, value in zip(names, values):
        np.testing.assert_allclose(value, numeric_gradient(out, w, inputs, name), rtol=rtol, atol=atol,
                                   err_msg=f"d/d{name}")


# ----------------------------------------------------------------------------- rules
def test_division_by_a_scalar_and_of_a_scalar():
    """x / s and s / x with s of shape (): the quotient g / s has x's shape, not s's."""
    x, s = param("dx", (3,)), param("ds", ())
    inputs = {"dx": a3(1.0, 2.0, 5.0), "ds": np.array(2.5)}
    assert_matches_finite_differences(x / s + s / x + x / 2.0, inputs, ["dx", "ds"])
    grads = compute_gradient((x / s).sum(), UOp.const(1.0, f64), [x, s])
    gx, gs = evaluate([grads[x], grads[s]], inputs)
    np.testing.assert_allclose(gx, [0.4, 0.4, 0.4], rtol=1e-15)
    np.testing.assert_allclose(gs, -8.0 / 2.5 ** 2, rtol=1e-15)


def test_copy_sends_the_gradient_back_to_each_sources_device():
    """x on the CPU, copied to GPU, then to DISK: the gradient goes DISK -> GPU -> CPU."""
    x = param("cx", (2,))
    y = x.copy_to_device("GPU").copy_to_device("DISK")
    grad = compute_gradient((y * y).sum(), UOp.const(1.0, f64), [x])[x]
    assert grad.op == Ops.COPY and grad.arg == "CPU"
    assert grad.src[0].op == Ops.COPY and grad.src[0].arg == "GPU"
    assert [n.arg for n in toposort([grad]) if n.op == Ops.COPY and n.serial > x.serial and n not in
            toposort([y])] == ["GPU", "CPU"]
    np.testing.assert_array_equal(evaluate([grad], {"cx": a3(0.5, -3.0)})[0], [1.0, -6.0])


# ----------------------------------------------------------------------------- calls
def test_the_call_rows_called_directly_give_one_gradient_per_source():
    """GRADIENT_RULES[op](g, y, need), as the table promises, for FUNCTION and CALL (no
    body cache is passed then): None for the body, a gradient per needed arg."""
    a, b = param("ra", (3,)), param("rb", (3,))
    g0 = param("rg", (3,))
    inputs = {"ra": a3(1.0, -2.0, 0.5), "rb": a3(3.0, 0.25, -1.0), "rg": a3(1.0, 2.0, 3.0)}
    fn = UOp.trace_function("f", lambda p, q: (p * q, q.sin()), a, b)
    grads = GRADIENT_RULES[Ops.FUNCTION](UOp.tuple(g0, UOp.noop()), fn, (False, True, True))
    assert len(grads) == len(fn.src) and grads[0] is None
    ga, gb = evaluate(list(grads[1:]), inputs)
    np.testing.assert_array_equal(ga, inputs["rg"] * inputs["rb"])
    np.testing.assert_array_equal(gb, inputs["rg"] * inputs["ra"])
    call = UOp.trace_call("m", lambda p, q: p * q, lambda p, q, g: (g * q, g * p), a, b)
    grads = GRADIENT_RULES[Ops.CALL](UOp.tuple(g0), call, (False, False, True))
    assert len(grads) == len(call.src) and grads[0] is None and grads[1] is None
    np.testing.assert_array_equal(evaluate([grads[2]], inputs)[0], inputs["rg"] * inputs["ra"])


def test_two_calls_in_one_gradient_each_use_their_own_backward_body():
    x = param("tx", (3,))
    doubled = UOp.trace_call("double", lambda p: p * 2.0, lambda p, g: g * 2.0, x)
    cubed = UOp.trace_call("cube", lambda p: p * p * p, lambda p, g: g * p * p * 3.0, x)
    grads = compute_gradient((doubled[0] + cubed[0]).sum(), UOp.const(1.0, f64), [x])
    p = a3(1.0, -2.0, 0.5)
    np.testing.assert_allclose(evaluate([grads[x]], {"tx": p})[0], 2.0 + 3.0 * p * p, rtol=1e-15)


def test_a_call_whose_backward_body_gives_the_target_nothing():
    """The only target reaches the CALL through an arg whose backward element is NOOP."""
    a, b = param("na", (2,)), param("nb", (2,))
    call = UOp.trace_call("half", lambda p, q: p * q, lambda p, q, g: (g * q, None), a, b)
    grads = compute_gradient(call[0].sum() + b.sum(), UOp.const(1.0, f64), [b])
    np.testing.assert_array_equal(evaluate([grads[b]], {"na": a3(3, 4), "nb": a3(5, 6)})[0], [1.0, 1.0])


def test_a_nested_body_keeps_its_own_slots_when_the_backward_body_is_renumbered():
    """outer(a, b) = a + sin(inner(b, 2b)[0]), inner(s, t) = s * sin(t), differentiated for
    b only: outer's backward body reads b (slot 1) and the output gradient (slot 2), which
    become slots 0 and 1. inner's body is closed: its slots 0 and 1 (slot 1 the very node
    outer's slot 1 is, same shape and dtype) must stay as they are."""
    def outer_body(p, q):
        inner = UOp.trace_function("inner", lambda s, t: (s * t.sin(),), q, q * 2.0)
        return (p + inner[0].sin(),)
    a, b = param("oa", (3,)), param("ob", (3,))
    out = UOp.trace_function("outer", outer_body, a, b)[0]
    assert_matches_finite_differences(out, {"oa": a3(0.3, -1.0, 2.0), "ob": a3(0.7, -0.4, 1.3)}, ["ob"])


def test_a_body_with_integer_constants_and_a_late_output_differentiates_as_inlined():
    """Integer CONSTs (args 7 and -3) and output 3 of a nested function (GETTUPLE arg 3)
    in a body are not slots: the FUNCTION's gradient is bit for bit its body's, inlined."""
    def body(p):
        steps = (p.cast(dtypes.int32) * 7 - 3).cast(f64)
        many = UOp.trace_function("many", lambda q: (q, q * 2.0, q.sin(), q * q), p)
        return (p * steps + many[3] * p,)
    x = param("ix", (4,))
    through_function = UOp.trace_function("f", body, x)[0]
    inline = body(x)[0]
    inputs = {"ix": np.array([0.5, 1.75, -2.25, 3.0])}
    seed = UOp.buffer(np.array([1.0, 0.5, 2.0, -1.0]))
    got = compute_gradient(through_function, seed, [x])[x]
    expected = compute_gradient(inline, seed, [x])[x]
    got_value, expected_value = evaluate([got, expected], inputs)
    np.testing.assert_array_equal(got_value, expected_value)
    assert np.any(expected_value != 0.0)


# ----------------------------------------------------------------------------- prod, second order
def test_prod_gradient_seeded_with_a_reshape_depends_on_that_reshape():
    """The prod rule reshapes its seed; a seed that is itself a RESHAPE (of w) is a node the
    caller holds, and may take as a target next: the gradient must read it, not w. Then
    d/dt sum(u * t * (product of the others)) is the row sums of u * others."""
    x, w = param("px", (2, 5)), param("pw", (2,))
    t = w.reshape(2, 1)
    first = compute_gradient(x.prod(1, keepdim=True), t, [x])[x]
    u = param("pu", (2, 5))
    second = compute_gradient(first, u, [t, w])
    assert_shapes_as_inferred([second[t], second[w]])
    xs = np.array([[0.5, 2.0, -1.0, 1.5, 3.0], [1.0, 0.0, 2.0, -0.5, 4.0]])
    us = np.arange(10.0).reshape(2, 5) / 4
    got_t, got_w = evaluate([second[t], second[w]], {"px": xs, "pw": a3(1.5, -2.0), "pu": us})
    others = np.array([[math.prod(np.delete(row, i)) for i in range(5)] for row in xs])
    np.testing.assert_allclose(got_t, (us * others).sum(1, keepdims=True), rtol=1e-15)
    np.testing.assert_allclose(got_w, (us * others).sum(1), rtol=1e-15)


# ----------------------------------------------------------------------------- metadata
def test_the_first_tag_wins_and_old_nodes_are_never_tagged():
    """A gradient node made for `scale` (a MUL) and handed on unchanged by `join` (an ADD)
    keeps scale's name; the seed, an old node passed on as it is, stays untagged."""
    x, y = param("mx1", (3,)), param("my1", (3,))
    joined = (x + y).set_meta(Metadata("join", "m.py:1"))
    scaled = (joined * 3.0).set_meta(Metadata("scale", "m.py:2"))
    seed = param("mseed", (3,))
    grads = compute_gradient(scaled, seed, [x, y])
    made_for_scale = grads[x]
    assert grads[y] is made_for_scale and made_for_scale.op == Ops.MUL and made_for_scale.src[0] is seed
    assert made_for_scale.meta == Metadata("scale", "m.py:2", True)
    plain = compute_gradient(joined, seed, [x, y])
    assert plain[x] is seed and plain[y] is seed and seed.meta is None


def test_nodes_made_before_a_retry_on_a_deep_stack_are_tagged(monkeypatch):
    """compute_gradient runs once more on a deep stack after a RecursionError; nodes the
    first attempt made (and the retry finds interned) are new all the same, and tagged."""
    real = GRADIENT_RULES[Ops.SIN]
    first_call = [True]

    def stack_runs_out_once(g, y, need):
        made = real(g, y, need)
        if first_call.pop() if first_call else False:
            raise RecursionError("as if the stack ran out right after the rule made its nodes")
        return made

    monkeypatch.setitem(GRADIENT_RULES, Ops.SIN, stack_runs_out_once)
    x = param("deep_retry_x", (3, 2))
    loss = x.sin().set_meta(Metadata("wave", "w.py:3")).sum()
    one = UOp.const(1.0, f64)
    since = next_serial()
    grad = compute_gradient(loss, one, [x])[x]
    assert not first_call  # the rule did run out once
    fresh = [n for n in toposort([grad]) if n.serial >= since]
    assert any(n.op == Ops.SIN for n in fresh)
    assert all(n.meta is not None and n.meta.backward for n in fresh), [n for n in fresh if n.meta is None]
    assert {n.meta for n in fresh if n.op == Ops.SIN} == {Metadata("wave", "w.py:3", True)}


# ----------------------------------------------------------------------------- errors users see
def test_a_rule_giving_the_wrong_shape_is_an_error_naming_the_op_and_both_shapes(monkeypatch):
    monkeypatch.setitem(GRADIENT_RULES, Ops.SIN, lambda g, y, need: (g.shrink(((0, 2),)),))
    x = param("wx", (3,))
    with pytest.raises(GradientError) as raised:
        compute_gradient(x.sin().sum(), UOp.const(1.0, f64), [x])
    assert str(raised.value) == ("gradient rule of SIN gave shape [2] for a source of shape [3]: "
                                 "<UOp SIN float64[3] src=1>")


def test_root_and_root_grad_errors():
    x = param("ex", (3,))
    for root, root_grad in ((x.sin(), 1.0), ("x", UOp.const(1.0, f64)), (None, None)):
        with pytest.raises(GradientError) as raised:
            compute_gradient(root, root_grad, [x])
        assert str(raised.value) == "root and root_grad must be UOps"
    with pytest.raises(GradientError) as raised:
        compute_gradient(x.sin(), UOp.full((2,), 1.0, f64), [x])
    assert str(raised.value) == "root_grad float64[2] does not fit root float64[3]"
    pair = UOp.tuple(x.sin(), x * 2.0)
    for seed in (UOp.tuple(UOp.full((3,), 1.0, f64)), UOp.tuple(*[UOp.full((3,), 1.0, f64)] * 3),
                 UOp.full((2,), 1.0, f64)):
        with pytest.raises(GradientError) as raised:
            compute_gradient(pair, seed, [x])
        assert str(raised.value) == "the gradient of a TUPLE of 2 must be a TUPLE of as many"
    # each element's seed fits its element (a scalar seed was broadcast, with no error), or is NOOP
    ones = UOp.full((3,), 1.0, f64)
    for seed, message in ((UOp.tuple(UOp.const(1.0, f64), ones), "root_grad float64[] does not fit root float64[3]"),
                          (UOp.tuple(ones, UOp.full((3,), 1.0, dtypes.float32)),
                           "root_grad float32[3] does not fit root float64[3]")):
        with pytest.raises(GradientError) as raised:
            compute_gradient(pair, seed, [x])
        assert str(raised.value) == message
    (grad,) = compute_gradient(pair, UOp.tuple(ones, UOp.noop()), [x]).values()
    np.testing.assert_allclose(evaluate([grad], {"ex": np.array([0.5, -1.0, 2.0])})[0], np.cos([0.5, -1.0, 2.0]))


def test_a_target_that_is_not_a_value_is_an_error():
    x = param("vx", (3,))
    fn = UOp.trace_function("f", lambda p: (p * 2.0,), x)
    for target in (fn, UOp.tuple(x), UOp.noop(), "vx"):
        with pytest.raises(GradientError) as raised:
            compute_gradient(x.sum(), UOp.const(1.0, f64), [target])
        assert str(raised.value) == f"a target must be a value node, got {target!r}"
