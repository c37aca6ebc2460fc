"""compute_gradient: every rule against central finite differences in float64 (edges
included), the seed's behaviours one by one, metadata, higher orders, deep chains."""

import math
import sys

import numpy as np
import pytest

from _reference_eval import assert_shapes_as_inferred, numeric_gradient, reference_evaluate
from uopcli import GradientError, Metadata, Ops, UOp, dtypes, evaluate
from uopcli.core.gradient import GRADIENT_RULES, compute_gradient
from uopcli.core.uop import next_serial
from uopcli.core.walks import no_gc, toposort

f64 = dtypes.float64
RNG = np.random.default_rng(7)


def param(name, shape):
    return UOp.param(name, shape, f64)


def check_against_finite_differences(build, inputs, atol=1e-6, rtol=1e-5, only=None):
    """Gradients of sum(build(**params) * seed) for every input vs central differences."""
    inputs = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    params = {k: param(k, v.shape) for k, v in inputs.items()}
    out = build(**params)
    seed = RNG.uniform(0.5, 1.5, out.shape)
    names = only or list(inputs)
    grads = compute_gradient(out, UOp.buffer(seed), [params[k] for k in names])
    assert_shapes_as_inferred([grads[params[k]] for k in names])
    values = evaluate([grads[params[k]] for k in names], inputs)
    for name, value in zip(names, values):
        expected = numeric_gradient(out, seed, inputs, name)
        assert value.shape == inputs[name].shape and value.dtype == np.float64
        np.testing.assert_allclose(value, expected, atol=atol, rtol=rtol, err_msg=f"d/d{name}")


def a3(*values):
    return np.array(values, dtype=np.float64)


# ----------------------------------------------------------------------------- every rule
ELEMENTWISE_CASES = {
    "ADD": (lambda a, b: a + b, {"a": a3(0.3, -1.2, 2.0), "b": a3(1.5, 0.0, -0.7)}),
    "SUB": (lambda a, b: a - b, {"a": a3(0.3, -1.2, 2.0), "b": a3(1.5, 0.0, -0.7)}),
    "MUL": (lambda a, b: a * b, {"a": a3(0.3, -1.2, 0.0), "b": a3(1.5, 0.0, -0.7)}),
    "FDIV": (lambda a, b: a / b, {"a": a3(0.3, -1.2, 0.0), "b": a3(1.5, 0.5, -0.7)}),
    "NEG": (lambda a: -a, {"a": a3(0.3, -1.2, 0.0)}),
    "RECIPROCAL": (lambda a: a.reciprocal(), {"a": a3(0.3, -1.2, 4.0)}),
    "SQRT": (lambda a: a.sqrt(), {"a": a3(0.3, 1.2, 4.0)}),
    "EXP2": (lambda a: a.exp2(), {"a": a3(0.3, -1.2, 0.0)}),
    "LOG2": (lambda a: a.log2(), {"a": a3(0.3, 1.2, 4.0)}),
    "SIN": (lambda a: a.sin(), {"a": a3(0.3, -1.2, 0.0, math.pi / 2, 3.0)}),
    "TRUNC": (lambda a: a.trunc() * a, {"a": a3(0.3, -1.2, 2.5)}),
    "MAX": (lambda a, b: a.maximum(b), {"a": a3(0.3, -1.2, 2.0), "b": a3(1.5, -1.5, -0.7)}),
    "MAX ties": (lambda a, b: a.maximum(b), {"a": a3(0.5, -1.0, 0.0), "b": a3(0.5, -1.0, 0.0)}),
    "WHERE": (lambda a, b: (a < b).where(a * 2.0, b.sin()), {"a": a3(0.3, -1.2, 2.0), "b": a3(1.5, 0.0, -0.7)}),
    "MULACC": (lambda a, b, c: a.mulacc(b, c), {"a": a3(0.3, -1.2), "b": a3(1.5, 0.0), "c": a3(2.0, 3.0)}),
    "POW": (lambda b, e: b.pow(e), {"b": a3(0.5, 2.0, 1.5), "e": a3(1.5, -0.5, 3.0)}),
    "POW zero exponent": (lambda b, e: b.pow(e), {"b": a3(2.0, 0.5, 3.0), "e": a3(0.0, 0.0, 0.0)}),
    "CONTIGUOUS": (lambda a: a.contiguous() * a, {"a": a3(0.3, -1.2)}),
    "CONTIGUOUS_BACKWARD": (lambda a: a.contiguous_backward().sin(), {"a": a3(0.3, -1.2)}),
    "COPY": (lambda a: a.copy_to_device("GPU").copy_to_device("DISK") * a, {"a": a3(0.3, -1.2)}),
    "AFTER/STORE": (lambda d, v: d.after(d.store(v.sin())), {"d": a3(1.0, 2.0), "v": a3(0.3, -1.2)}),
    "scalar broadcast": (lambda s, a: s * a + s, {"s": np.float64(0.7), "a": a3(0.3, -1.2, 2.0)}),
    "scalar under WHERE": (lambda s, a: (a < 0.0).where(s, a), {"s": np.float64(0.7), "a": a3(0.3, -1.2, -2.0)}),
}


@pytest.mark.parametrize("case", list(ELEMENTWISE_CASES))
def test_elementwise_rule_matches_finite_differences(case):
    build, inputs = ELEMENTWISE_CASES[case]
    only = ["a"] if case == "AFTER/STORE" else None
    check_against_finite_differences(build, inputs, only=["v"] if case == "AFTER/STORE" else only)


def test_max_ties_split_the_gradient_evenly():
    a, b = param("a", (2,)), param("b", (2,))
    grads = compute_gradient(a.maximum(b), UOp.buffer(a3(1.0, 1.0)), [a, b])
    ga, gb = evaluate([grads[a], grads[b]], {"a": a3(1.0, 3.0), "b": a3(1.0, 2.0)})
    np.testing.assert_array_equal(ga, [0.5, 1.0])
    np.testing.assert_array_equal(gb, [0.5, 0.0])


def test_no_gradient_crosses_a_cast_to_an_integer_or_bool():
    """A float cast to an integer or bool is piecewise constant: its derivative is 0, as in
    torch and JAX and in the forward row (tinygrad casts g to the integer and back, which
    truncates it: it gave 3 for d sum(float(int(x)) * 3) and 2 for * 2.5). The float
    around such a value still has its own gradient: d (t - float(int(t))) / dt is 1."""
    a, b, cot = UOp.param("a", (4,)), UOp.param("b", (4,)), UOp.param("cot", (4,))
    values = {"a": np.array([1, 3, 2.5, 7], np.float32), "b": np.array([1, 2, 2.9, -1], np.float32),
              "cot": np.array([2.5, 3, -200, 7], np.float32)}
    through = {
        "int32 max": a.cast(dtypes.int32).maximum(b.cast(dtypes.int32)).cast(dtypes.float32),
        "int8": a.cast(dtypes.int8).cast(dtypes.float32),
        "bool": a.cast(dtypes.bool).cast(dtypes.float32),
        "uint8 via float16": a.cast(dtypes.float16).cast(dtypes.uint8).cast(dtypes.float32),
    }
    for name, value in through.items():
        loss = (value * cot).sum()
        grads = compute_gradient(loss, loss.const_like(1.0), [a, b])
        grad_a, grad_b = evaluate([grads[a], grads[b]], values)
        np.testing.assert_array_equal(grad_a, np.zeros(4, np.float32), err_msg=name)
        np.testing.assert_array_equal(grad_b, np.zeros(4, np.float32), err_msg=name)
    frac = a - a.cast(dtypes.int32).cast(dtypes.float32)
    loss = (frac * cot).sum()
    (grad_a,) = evaluate([compute_gradient(loss, loss.const_like(1.0), [a])[a]], values)
    np.testing.assert_array_equal(grad_a, values["cot"])
    half = a.cast(dtypes.float16).cast(dtypes.float32)  # between floats g still goes back
    loss = (half * cot).sum()
    (grad_a,) = evaluate([compute_gradient(loss, loss.const_like(1.0), [a])[a]], values)
    np.testing.assert_array_equal(grad_a, values["cot"])


def test_pow_at_zero_base_and_zero_exponent_follows_the_rules_table():
    b, e = param("b", (5,)), param("e", (5,))
    grads = compute_gradient(b.pow(e), UOp.buffer(np.ones(5)), [b, e])
    inputs = {"b": a3(0.0, 0.0, 0.0, 0.0, 2.0), "e": a3(2.0, 1.0, 0.0, -1.0, 0.0)}
    db, de = evaluate([grads[b], grads[e]], inputs)
    np.testing.assert_array_equal(db, [0.0, 1.0, 0.0, -np.inf, 0.0])  # e*b^(e-1); 0 where e == 0
    np.testing.assert_array_equal(de[:4], [0.0, 0.0, 0.0, -np.inf])   # b == 0: e<0 ? -inf : 0
    assert de[4] == pytest.approx(math.log(2.0))                       # y*ln(b)
    # and where the finite difference exists, it agrees
    check_against_finite_differences(lambda b, e: b.pow(e), {"b": a3(0.0, 0.0, 0.0), "e": a3(2.0, 1.0, 3.0)})


REDUCE_CASES = {
    "sum": (lambda x: x.sum(1), RNG.normal(size=(2, 3))),
    "sum keepdim all": (lambda x: x.sum(keepdim=True), RNG.normal(size=(2, 3))),
    "max": (lambda x: x.max(0), RNG.normal(size=(3, 2))),
    "max with 2-way ties": (lambda x: x.max(1), np.array([[1.0, 1.0, 0.0], [2.0, -1.0, 2.0]])),
    "prod": (lambda x: x.prod(1), RNG.uniform(0.5, 1.5, size=(2, 3))),
    "prod one zero": (lambda x: x.prod(1), np.array([[0.0, 2.0, 3.0], [1.5, 0.0, -2.0]])),
    "prod two zeros": (lambda x: x.prod(1), np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])),
    "prod mixed rows": (lambda x: x.prod(0), np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 0.0], [1.5, 4.0, 2.0]])),
}


@pytest.mark.parametrize("case", list(REDUCE_CASES))
def test_reduce_rule_matches_finite_differences(case):
    build, x = REDUCE_CASES[case]
    check_against_finite_differences(build, {"x": x})


def test_reduce_prod_with_zeros_is_exact():
    x = param("x", (3, 3))
    grads = compute_gradient(x.prod(1), UOp.buffer(np.ones(3)), [x])
    values = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [2.0, 3.0, 4.0]])
    (gx,) = evaluate([grads[x]], {"x": values})
    np.testing.assert_array_equal(gx, [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0], [12.0, 8.0, 6.0]])


def test_reduce_max_three_way_tie_shares_in_thirds():
    x = param("x", (4,))
    grads = compute_gradient(x.max(), UOp.const(1.0, f64), [x])
    (gx,) = evaluate([grads[x]], {"x": a3(2.0, 2.0, -1.0, 2.0)})
    np.testing.assert_allclose(gx, [1 / 3, 1 / 3, 0.0, 1 / 3])


MOVEMENT_CASES = {
    "RESHAPE": lambda x: x.reshape(3, 2).sin(),
    "EXPAND": lambda x: x.reshape(2, 1, 3).expand(2, 4, 3).sin(),
    # a cotangent that differs along the expanded axes: only a sum over exactly those axes
    # is right (the case above has equal copies, which taking one copy times 4 also passes)
    "EXPAND asymmetric": lambda x: (x.reshape(2, 1, 3).expand(2, 4, 3)
                                    * UOp.buffer(np.arange(24.0).reshape(2, 4, 3) ** 1.5 / 9)).sin(),
    "EXPAND two axes": lambda x: (x.reshape(1, 2, 1, 3).expand(5, 2, 4, 3)
                                  * UOp.buffer(np.cos(np.arange(120.0)).reshape(5, 2, 4, 3))).sum(3),
    "PERMUTE": lambda x: x.reshape(1, 2, 3).permute(2, 0, 1) * UOp.buffer(np.arange(6.0).reshape(3, 1, 2)),
    "PAD": lambda x: x.pad(((1, 2), (0, 1))).sin(),
    "SHRINK": lambda x: x.shrink(((0, 1), (1, 3))).sin(),
    "FLIP": lambda x: x.flip(1) * UOp.buffer(np.arange(6.0).reshape(2, 3)),
    "matmul": lambda x: x @ UOp.buffer(np.arange(12.0).reshape(3, 4) / 7),
    "softmax": lambda x: x.softmax(),
    "log_softmax+mean": lambda x: x.log_softmax(0).mean(),
    "tanh/sigmoid/relu/exp/log": lambda x: x.tanh() + x.sigmoid() * x.relu() + (x * 0.5).exp() + (x * x + 1.0).log(),
}


@pytest.mark.parametrize("case", list(MOVEMENT_CASES))
def test_movement_and_composite_rules_match_finite_differences(case):
    check_against_finite_differences(MOVEMENT_CASES[case], {"x": RNG.normal(size=(2, 3))})


def test_matmul_gradients_for_both_operands():
    check_against_finite_differences(lambda a, b: (a @ b).relu(), {"a": RNG.normal(size=(2, 3)),
                                                                  "b": RNG.normal(size=(3, 4))})


def test_expand_of_float16_accumulates_in_float32_and_casts_back():
    x = UOp.param("h", (1, 3), dtypes.float16)
    grads = compute_gradient(x.expand(4, 3), UOp.full((4, 3), 1.0, dtypes.float16), [x])
    grad = grads[x]
    assert grad.dtype is dtypes.float16 and grad.shape == (1, 3)
    assert_shapes_as_inferred([grad])
    assert any(n.op == Ops.REDUCE and n.dtype is dtypes.float32 for n in grad.toposort())
    (value,) = evaluate([grad], {"h": np.zeros((1, 3), np.float16)})
    np.testing.assert_array_equal(value, [[4.0, 4.0, 4.0]])


def test_cast_sends_the_gradient_back_in_the_source_dtype():
    x = param("x", (3,))
    grads = compute_gradient(x.cast(dtypes.float32).sum(), UOp.const(1.0), [x])
    assert grads[x].dtype is f64
    np.testing.assert_array_equal(evaluate([grads[x]], {"x": a3(1, 2, 3)})[0], [1.0, 1.0, 1.0])


def test_comparisons_bitcast_and_integer_ops_pass_no_gradient():
    x = param("x", (3,))
    through_int = (x.cast(dtypes.int32) // 2).cast(f64) + x.bitcast(dtypes.int64).cast(f64) * 0.0
    grads = compute_gradient((through_int + (x < 1.0).where(x, x)).sum(), UOp.const(1.0, f64), [x])
    np.testing.assert_array_equal(evaluate([grads[x]], {"x": a3(0.5, 2.5, -3.0)})[0], [1.0, 1.0, 1.0])


def test_every_op_of_the_format_has_a_row():
    from uopcli.core.ops import ALL_OPS, LEAF
    assert set(ALL_OPS) - LEAF <= set(GRADIENT_RULES)
    assert {(Ops.REDUCE, r) for r in ("ADD", "MUL", "MAX")} <= set(GRADIENT_RULES)


# ----------------------------------------------------------------------------- the seed's behaviours
def test_a_target_the_root_does_not_reach_gets_zeros_of_its_shape():
    x, unused = param("x", (3,)), param("unused", (2, 4))
    grads = compute_gradient((x * 2.0).sum(), UOp.const(1.0, f64), [x, unused])
    assert list(grads) == [x, unused]
    assert grads[unused].shape == (2, 4) and grads[unused].dtype is f64
    np.testing.assert_array_equal(evaluate([grads[unused]], {})[0], np.zeros((2, 4)))


def test_detach_blocks_the_gradient():
    x = param("x", (3,))
    grads = compute_gradient((x.detach() * x).sum(), UOp.const(1.0, f64), [x])
    np.testing.assert_array_equal(evaluate([grads[x]], {"x": a3(1, 2, 3)})[0], [1.0, 2.0, 3.0])
    only_detached = compute_gradient(x.detach().sin().sum(), UOp.const(1.0, f64), [x])
    np.testing.assert_array_equal(evaluate([only_detached[x]], {"x": a3(1, 2, 3)})[0], [0.0, 0.0, 0.0])


def test_gradients_add_up_in_tinygrads_walk_order_not_in_creation_order():
    """tinygrad walks the post-order of a depth-first walk from the root (sources in
    order) backwards; a node's gradient is the sum of its users' contributions in that
    order. Here `late` is built before `early` but comes first under the root, so it is
    walked after it, and its contribution is added second."""
    x = param("x", (3,))
    late = x * 3.0
    early = x.sin()
    g = UOp.const(1.0, f64)
    grads = compute_gradient(early + late, g.broadcast_to((3,)), [x])
    from_early = compute_gradient(early, g.broadcast_to((3,)), [x])[x]
    from_late = compute_gradient(late, g.broadcast_to((3,)), [x])[x]
    assert grads[x].op == Ops.ADD and grads[x].src == (from_late, from_early)


def test_the_walk_order_under_a_detach_is_tinygrads_too():
    """tinygrad's walk goes through a DETACH (no gradient passes it), so a node first met
    under it takes its place in the order there: `shared` is placed before `other` (built
    earlier), so it is walked after it and its contribution to x's gradient comes second."""
    x = param("x", (3,))
    other = x.exp2()
    shared = x * 2.0
    root = (shared.detach() + other) + shared.sin()
    grads = compute_gradient(root.sum(), UOp.const(1.0, f64), [x])
    assert grads[x].op == Ops.ADD
    first, second = grads[x].src
    assert Ops.EXP2 in {n.op for n in toposort([first])}
    assert Ops.EXP2 not in {n.op for n in toposort([second])} and Ops.SIN in {n.op for n in toposort([second])}
    xs = a3(0.5, 1.0, 2.0)
    np.testing.assert_allclose(evaluate([grads[x]], {"x": xs})[0],
                               2.0 ** xs * math.log(2.0) + 2.0 * np.cos(2.0 * xs), rtol=1e-12)


def test_a_non_float_target_is_an_error():
    i = UOp.param("i", (3,), dtypes.int32)
    with pytest.raises(GradientError, match="int32"):
        compute_gradient(i.cast(f64).sum(), UOp.const(1.0, f64), [i])


def test_an_op_with_no_rule_is_an_error_naming_it(monkeypatch):
    monkeypatch.delitem(GRADIENT_RULES, Ops.SIN)
    x = param("x", (3,))
    with pytest.raises(GradientError, match=r"no gradient rule for SIN: <UOp SIN float64\[3\]"):
        compute_gradient(x.sin().sum(), UOp.const(1.0, f64), [x])


def test_root_grad_must_fit_the_root():
    x = param("x", (3,))
    with pytest.raises(GradientError, match="does not fit"):
        compute_gradient(x.sin(), UOp.const(1.0, f64), [x])


def _function_of_three():
    """f(a, b, c) = (a*b, sin(c)*b) over the args (a, b, c) = graph inputs."""
    a, b, c = param("a", (3,)), param("b", (3,)), param("c", (3,))
    fn = UOp.trace_function("f", lambda p, q, r: (p * q, r.sin() * q), a, b, c)
    return a, b, c, fn


def test_function_gradient_is_a_backward_function_computing_only_what_is_needed():
    a, b, c, fn = _function_of_three()
    loss = (fn[0] * 2.0).sum()   # output 1 unused: its gradient is NOOP
    grads = compute_gradient(loss, UOp.const(1.0, f64), [a])
    backward = grads[a].src[0]
    assert grads[a].op == Ops.GETTUPLE and backward.op == Ops.FUNCTION
    assert backward.arg == "f_backward"
    outputs, args = backward.src[0].src, backward.src[1:]
    assert len(outputs) == 1                      # only d/da
    assert args[0] is b                           # d(a*b)/da reads b: slot 1 renumbered to 0
    assert len(args) == 2 and args[1].shape == (3,)  # and the gradient of output 0 as slot 1
    slots = sorted(n.arg for n in toposort([backward.src[0]]) if n.op == Ops.PARAM)
    assert slots == [0, 1]
    inputs = {"a": a3(1, 2, 3), "b": a3(0.5, -1, 2), "c": a3(0, 1, 2)}
    np.testing.assert_allclose(evaluate([grads[a]], inputs)[0], 2 * inputs["b"])


def test_function_gradients_match_finite_differences_for_all_args_and_outputs():
    def build(a, b, c):
        fn = UOp.trace_function("f", lambda p, q, r: (p * q, r.sin() * q), a, b, c)
        return fn[0] * fn[1] + fn[1].exp2() + fn[0]
    check_against_finite_differences(build, {"a": a3(1, 2, 3), "b": a3(0.5, -1, 2), "c": a3(0, 1, 2)})


def test_gettuple_gradients_accumulate_into_a_tuple_with_noop_for_missing_outputs():
    x = param("x", (2,))
    fn = UOp.trace_function("three", lambda p: (p * 2.0, p.sin(), p * p), x)
    loss = (fn[2] + fn[2] * 3.0).sum()  # output 2 twice, outputs 0 and 1 never
    grads = compute_gradient(loss, UOp.const(1.0, f64), [x])
    backward = grads[x].src[0]
    # only the gradient of output 2 is passed in: outputs 0 and 1 were NOOP
    assert len(backward.src) == 1 + 2  # body, x, g2
    g2 = backward.src[2]
    assert g2.op == Ops.ADD  # the two GETTUPLE contributions were added
    np.testing.assert_allclose(evaluate([grads[x]], {"x": a3(1.5, -2)})[0], 4 * 2 * a3(1.5, -2))


def test_function_args_not_leading_to_a_target_get_no_gradient_work():
    a, b, c, fn = _function_of_three()
    loss = (fn[0] + fn[1]).sum()
    grads = compute_gradient(loss, UOp.const(1.0, f64), [c])
    backward = grads[c].src[0]
    assert len(backward.src[0].src) == 1  # only d/dc, not d/da or d/db
    inputs = {"a": a3(1, 2, 3), "b": a3(0.5, -1, 2), "c": a3(0, 1, 2)}
    np.testing.assert_allclose(evaluate([grads[c]], inputs)[0], np.cos(inputs["c"]) * inputs["b"])


def test_a_function_called_at_several_sites_like_an_rnn_cell():
    def build(h0, w, xs):
        h, total = h0, None
        for t in range(3):
            x_t = xs.shrink(((t, t + 1), (0, 2))).reshape(2)
            cell = UOp.trace_function("cell", lambda x, h, w: ((x + h * w).sin(), h * h), x_t, h, w)
            h = cell[0]
            total = cell[1] if total is None else total + cell[1]
        return total + h
    check_against_finite_differences(build, {"h0": a3(0.3, -0.5), "w": a3(1.5, 0.7),
                                             "xs": RNG.normal(size=(3, 2))})


def test_nested_functions_differentiate():
    def build(a):
        inner = lambda p: UOp.trace_function("inner", lambda q: (q.sin() * q,), p)[0]
        outer = UOp.trace_function("outer", lambda p: (inner(p) * 2.0 + p,), a)
        return outer[0]
    check_against_finite_differences(build, {"a": a3(0.5, -1, 2)})


def nested_functions(levels: int, x: UOp, scale: float) -> UOp:
    """sin(x) * scale ** levels, computed `levels` functions deep: each body scales the
    result of the function nested in it (built inside out, without recursion)."""
    result = UOp.slot(0, x.shape, x.dtype).sin()
    for i in range(levels):
        result = UOp.function(f"f{i}", (result * scale,), (UOp.slot(0, x.shape, x.dtype),)).gettuple(0)
    return UOp.function("outer", (result,), (x,)).gettuple(0)


def test_functions_nested_thousands_deep_differentiate():
    """Differentiating a FUNCTION differentiates its body, one recursion a nesting level:
    past Python's limit it runs again on a deep stack (uop.on_a_deep_stack)."""
    from uopcli.backends.numpy import evaluate as production_evaluate  # the reference one recurses
    x, xs = param("x", (2,)), a3(0.25, 2.0)[:2]
    for levels, scale in ((30, 1.5), (3000, 1.0)):
        before = sys.getrecursionlimit()
        grad = compute_gradient(nested_functions(levels, x, scale).sum(), UOp.const(1.0, f64), [x])[x]
        assert sys.getrecursionlimit() == before
        assert sum(n.op == Ops.FUNCTION for n in toposort([grad])) > levels  # a backward function a level
        np.testing.assert_allclose(production_evaluate([grad], {"x": xs})[0], np.cos(xs) * scale ** levels,
                                   rtol=1e-12)


def test_call_with_a_backward_body():
    x = param("x", (3,))
    ste = UOp.trace_call("ste", lambda p: p.trunc(), lambda p, g: g * 2.0, x)  # a straight-through estimator
    grads = compute_gradient((ste[0] * x).sum(), UOp.const(1.0, f64), [x])
    inputs = {"x": a3(1.5, -2.5, 0.2)}
    backward = next(n for n in toposort([grads[x]]) if n.op == Ops.FUNCTION)
    assert backward.arg == "ste_backward"
    # d/dx (ste(x) * x) = 2 * x (from the backward body) + trunc(x)
    np.testing.assert_allclose(evaluate([grads[x]], inputs)[0], 2 * inputs["x"] + np.trunc(inputs["x"]))


def test_call_backward_body_reading_args_and_only_needed_args():
    a, b = param("a", (2,)), param("b", (2,))
    mul = UOp.trace_call("mul", lambda p, q: p * q, lambda p, q, g: (g * q, g * p), a, b)
    grads = compute_gradient(mul[0].sum(), UOp.const(1.0, f64), [b])
    backward = grads[b].src[0]
    assert len(backward.src[0].src) == 1 and backward.src[1] is a  # only d/db = g*a: reads a and g
    np.testing.assert_allclose(evaluate([grads[b]], {"a": a3(3, 4), "b": a3(5, 6)})[0], [3, 4])


def test_call_backward_noop_element_gives_no_gradient():
    a, b = param("a", (2,)), param("b", (2,))
    call = UOp.trace_call("half", lambda p, q: p * q, lambda p, q, g: (g * q, None), a, b)
    grads = compute_gradient(call[0].sum(), UOp.const(1.0, f64), [a, b])
    va, vb = evaluate([grads[a], grads[b]], {"a": a3(3, 4), "b": a3(5, 6)})
    np.testing.assert_array_equal(va, [5, 6])
    np.testing.assert_array_equal(vb, [0, 0])


def test_call_without_backward_body_is_an_error_naming_it():
    x = param("x", (3,))
    opaque = UOp.trace_call("opaque_kernel", lambda p: p.sin(), None, x)
    with pytest.raises(GradientError, match="opaque_kernel"):
        compute_gradient(opaque[0].sum(), UOp.const(1.0, f64), [x])


def test_call_without_backward_body_off_the_target_path_is_fine():
    x, w = param("x", (3,)), param("w", (3,))
    opaque = UOp.trace_call("opaque_kernel", lambda p: p.sin(), None, x)
    grads = compute_gradient((opaque[0] * w).sum(), UOp.const(1.0, f64), [w])
    np.testing.assert_allclose(evaluate([grads[w]], {"x": a3(1, 2, 3), "w": a3(0, 0, 0)})[0], np.sin(a3(1, 2, 3)))


def test_call_output_gradient_that_never_arrives_is_bound_to_zeros():
    x = param("x", (2,))
    two = UOp.trace_call("two", lambda p: (p * 2.0, p * 3.0), lambda p, g0, g1: (g0 * 2.0 + g1 * 3.0,), x)
    grads = compute_gradient(two[1].sum(), UOp.const(1.0, f64), [x])  # output 0 unused
    np.testing.assert_array_equal(evaluate([grads[x]], {"x": a3(1, 2)})[0], [3.0, 3.0])


def test_a_tuple_root_takes_a_tuple_seed_and_noop_means_no_gradient_from_that_output():
    x = param("x", (3,))
    seed = UOp.tuple(UOp.full((3,), 1.0, f64), UOp.noop())
    grads = compute_gradient(UOp.tuple(x.sin(), x * 3.0), seed, [x])
    p = a3(0.0, 1.0, 2.0)
    np.testing.assert_allclose(evaluate([grads[x]], {"x": p})[0], np.cos(p))


def test_a_function_applied_to_its_own_output():
    x = param("x", (3,))
    square = lambda v: UOp.trace_function("sq", lambda p: (p * p,), v)[0]  # noqa: E731
    grads = compute_gradient((square(square(x)) + square(x)).sum(), UOp.const(1.0, f64), [x])
    p = a3(1.0, 2.0, -3.0)
    np.testing.assert_allclose(evaluate([grads[x]], {"x": p})[0], 4 * p ** 3 + 2 * p)


def test_float16_targets_get_float16_gradients():
    h = UOp.param("h16", (3,), dtypes.float16)
    grads = compute_gradient((h * h).sum(), UOp.const(1.0, dtypes.float16), [h])
    assert grads[h].dtype is dtypes.float16
    np.testing.assert_array_equal(evaluate([grads[h]], {"h16": np.array([1, 2, 3], np.float16)})[0], [2, 4, 6])


# ----------------------------------------------------------------------------- metadata
def test_every_new_node_is_tagged_backward_and_old_nodes_are_untouched():
    x, w = param("mx", (2, 3)), param("mw", (3, 4))
    hidden = (x @ w).relu()
    loss = hidden.sum().set_meta(Metadata("loss", "model.py:9"))
    before = {n: n.meta for n in toposort([loss])}
    one = UOp.const(1.0, f64)
    since = next_serial()
    grads = compute_gradient(loss, one, [w, x])
    for node, meta in before.items():
        assert node.meta == meta  # the forward graph is unchanged
    reachable = toposort(grads.values())
    new_nodes = [n for n in reachable if n.serial >= since]
    assert new_nodes
    assert all(n.meta is not None and n.meta.backward for n in new_nodes)
    names = {n.meta.name for n in new_nodes}
    assert {"relu", "matmul", "loss"} <= names
    relu_backward = [n for n in new_nodes if n.meta.name == "relu"]
    assert all(n.meta.loc == hidden.meta.loc for n in relu_backward)


def test_nodes_made_for_a_function_carry_metadata_too():
    a, b, c, fn = _function_of_three()
    loss = (fn[0] * fn[1]).sum()
    one = UOp.const(1.0, f64)
    since = next_serial()
    grads = compute_gradient(loss, one, [a, b, c])
    new_nodes = [n for n in toposort(grads.values()) if n.serial >= since]
    assert any(n.op == Ops.FUNCTION and n.arg == "f_backward" for n in new_nodes)
    assert all(n.meta is not None and n.meta.backward for n in new_nodes)


def test_unreached_target_zeros_are_tagged_too():
    x, y = param("tx", (3,)), param("ty", (5,))
    y.set_meta(Metadata("input_y", "data.py:1"))
    one = UOp.const(1.0, f64)
    since = next_serial()
    grads = compute_gradient(x.sum(), one, [y])
    fresh = [n for n in toposort([grads[y]]) if n.serial >= since]
    assert fresh and all(n.meta == Metadata("input_y", "data.py:1", True) for n in fresh)


# ----------------------------------------------------------------------------- higher order
def _derivatives(build, points, order):
    x = param("x", (len(points),))
    current = build(x)
    results = []
    for _ in range(order):
        current = compute_gradient(current.sum(), UOp.const(1.0, f64), [x])[x]
        results.append(current)
    return evaluate(results, {"x": np.asarray(points, np.float64)})


POINTS = [-1.5, -0.3, 0.0, 0.7, 2.0]


def test_second_and_third_derivatives_of_a_polynomial():
    d1, d2, d3 = _derivatives(lambda x: x * x * x * 2.0 - x * x * 5.0 + x * 3.0, POINTS, 3)
    p = np.asarray(POINTS)
    np.testing.assert_allclose(d1, 6 * p ** 2 - 10 * p + 3)
    np.testing.assert_allclose(d2, 12 * p - 10)
    np.testing.assert_allclose(d3, 12 * np.ones_like(p))


def test_higher_derivatives_of_pow_with_a_constant_exponent():
    d1, d2, d3 = _derivatives(lambda x: x.pow(UOp.const(4.0, f64)), [-1.5, -0.3, 0.7, 2.0], 3)
    p = np.asarray([-1.5, -0.3, 0.7, 2.0])
    np.testing.assert_allclose(d1, 4 * p ** 3)
    np.testing.assert_allclose(d2, 12 * p ** 2)
    np.testing.assert_allclose(d3, 24 * p)


def test_second_and_third_derivatives_of_sin():
    d1, d2, d3 = _derivatives(lambda x: x.sin(), POINTS, 3)
    p = np.asarray(POINTS)
    np.testing.assert_allclose(d1, np.cos(p), atol=1e-12)
    np.testing.assert_allclose(d2, -np.sin(p), atol=1e-12)
    np.testing.assert_allclose(d3, -np.cos(p), atol=1e-12)


def test_higher_order_through_a_function():
    def build(x):
        return UOp.trace_function("cube", lambda p: (p * p * p,), x)[0]
    d1, d2, d3 = _derivatives(build, POINTS, 3)
    p = np.asarray(POINTS)
    np.testing.assert_allclose(d1, 3 * p ** 2)
    np.testing.assert_allclose(d2, 6 * p)
    np.testing.assert_allclose(d3, 6 * np.ones_like(p))


def test_higher_order_through_a_call_backward_body():
    def build(x):  # sin with a hand-written backward: cos(p) * g
        return UOp.trace_call("mysin", lambda p: p.sin(), lambda p, g: g * (p * -1.0 + math.pi / 2).sin(), x)[0]
    d1, d2 = _derivatives(build, POINTS, 2)
    p = np.asarray(POINTS)
    np.testing.assert_allclose(d1, np.cos(p), atol=1e-12)
    np.testing.assert_allclose(d2, -np.sin(p), atol=1e-12)


# ----------------------------------------------------------------------------- scale
def test_a_million_node_chain_differentiates_at_the_default_recursion_limit():
    limit = sys.getrecursionlimit()
    x = UOp.param("deep", (2,), f64)
    y = x
    with no_gc():
        for i in range(500_000):  # 1,000,000 forward nodes
            y = y * 1.000001 + 1e-7
    grads = compute_gradient(y.sum(), UOp.const(1.0, f64), [x])
    assert sys.getrecursionlimit() == limit
    # d/dx = 1.000001 ** 500000: the gradient is the seed times 1.000001, 500,000 times
    # (walked iteratively; the values of this rule are checked on small graphs above)
    node, factors = grads[x], 0
    while node.op == Ops.MUL:
        assert node.src[1] is UOp.const(1.000001, f64)
        node, factors = node.src[0], factors + 1
    assert factors == 500_000 and node.op == Ops.EXPAND


# ----------------------------------------------------------------------------- evaluators agree
@pytest.mark.parametrize("sample", ["mlp", "conv2d", "attention", "rnn", "ste", "layernorm", "softmax_xent"])
def test_gradient_nodes_of_every_sample_are_as_inference_builds_them(sample):
    from pathlib import Path

    from uopcli.formats.uop import load
    graph = load(Path(__file__).resolve().parent.parent / "samples" / f"{sample}.uop")
    (loss,) = graph.outputs.values()
    targets = [t for t in graph.inputs if t.dtype.is_float]
    first = compute_gradient(loss, loss.const_like(1.0), targets)
    assert_shapes_as_inferred(list(first.values()))
    second = compute_gradient(first[targets[0]].sum(), UOp.const(1.0), targets)  # through the gradient again
    assert_shapes_as_inferred(list(second.values()))


def test_reference_and_production_evaluators_agree_on_gradient_graphs():
    from uopcli.backends import numpy as production
    a, b = param("ea", (2, 3)), param("eb", (3, 4))
    fn = UOp.trace_function("block", lambda p, q: ((p @ q).relu(), p.prod(1)), a, b)
    ste = UOp.trace_call("ste", lambda p: p.trunc(), lambda p, g: g, fn[0])
    loss = (ste[0] * fn[0]).max(1).sum() + fn[1].softmax().sum() + (a.pad(((1, 0), (0, 1))).flip(0) ** 2.0).mean()
    first = compute_gradient(loss, UOp.const(1.0, f64), [a, b])
    second = compute_gradient(first[a].sum(), UOp.const(1.0, f64), [a, b])
    outputs = [first[a], first[b], second[a], second[b]]
    inputs = {"ea": RNG.normal(size=(2, 3)), "eb": RNG.normal(size=(3, 4))}
    for ours, theirs in zip(reference_evaluate(outputs, inputs), production.evaluate(outputs, inputs)):
        np.testing.assert_allclose(theirs, ours, rtol=1e-12, atol=1e-12)


def test_backward_nodes_carry_the_scope_of_their_forward_node():
    x = param("sx", (4,))
    hidden = x.relu()
    hidden.set_meta(Metadata("relu", "m.py:2", False, "block.0/mlp"))
    since = next_serial()
    grads = compute_gradient(hidden.sum(), UOp.const(1.0, f64), [x])
    fresh = [n for n in toposort([grads[x]]) if n.serial >= since]
    assert any(n.meta == Metadata("relu", "m.py:2", True, "block.0/mlp") for n in fresh)
