"""Property: on random graphs of elementwise, reduce and movement ops, compute_gradient
agrees with central finite differences in float64 (hypothesis draws the graph and a seed
for the input values; continuous random inputs keep ties and kinks improbable)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _reference_eval import assert_shapes_as_inferred, numeric_gradient
from uopcli import UOp, dtypes, evaluate
from uopcli.core.gradient import compute_gradient

f64 = dtypes.float64
SHAPE = (2, 3)

# Steps that map nodes of SHAPE to a node of SHAPE; smooth where the inputs stay finite.
UNARY_STEPS = {
    "sin": lambda x: x.sin(),
    "neg": lambda x: -x,
    "sqrt": lambda x: (x * x + 1.0).sqrt(),
    "exp2": lambda x: (x.sin() * 1.5).exp2(),
    "log2": lambda x: (x * x + 0.5).log2(),
    "reciprocal": lambda x: (x * x + 1.0).reciprocal(),
    "trunc mix": lambda x: x.trunc() + x,
    "cast": lambda x: x.cast(dtypes.float64),
    "sum expand": lambda x: x.sum(0, keepdim=True).expand(SHAPE),
    "sum all scalar": lambda x: x * x.sum(),
    "max reduce": lambda x: x.max(1, keepdim=True).expand(SHAPE) * x,
    "prod reduce": lambda x: x.prod(0, keepdim=True).expand(SHAPE) + x,
    "mean": lambda x: x.mean(1, keepdim=True).expand(SHAPE) - x,
    "flip": lambda x: x.flip(1),
    "permute reshape": lambda x: x.permute(1, 0).reshape(SHAPE),
    "reshape": lambda x: x.reshape(3, 2).reshape(SHAPE),
    "pad shrink": lambda x: x.pad(((1, 0), (0, 2))).shrink(((0, 2), (1, 4))),
    "shrink pad": lambda x: x.shrink(((0, 2), (1, 3))).pad(((0, 0), (1, 0))),
    "expand row": lambda x: x.shrink(((0, 1), (0, 3))).expand(SHAPE) * x,
    "contiguous": lambda x: x.contiguous(),
    "relu": lambda x: x.relu() + x * 0.1,
    "softmax": lambda x: x.softmax(1),
}
BINARY_STEPS = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / (y * y + 1.0),
    "max": lambda x, y: x.maximum(y),
    "where": lambda x, y: (x < y).where(x * 2.0, y),
    "mulacc": lambda x, y: x.mulacc(y, x),
    "pow": lambda x, y: (x * x + 0.5).pow(y.sin()),
    "matmul": lambda x, y: (x @ y.T) @ x * 0.5,
}

# The same kinds of steps on rank 3 (batched matmul, permutes and pads of three axes):
# a gradient rule that handles only the last two axes, or the first, shows here
SHAPE3 = (2, 3, 2)
UNARY_STEPS3 = {
    "sin": lambda x: x.sin(),
    "neg": lambda x: -x,
    "exp2": lambda x: (x.sin() * 1.5).exp2(),
    "reciprocal": lambda x: (x * x + 1.0).reciprocal(),
    "sum expand": lambda x: x.sum((0, 2), keepdim=True).expand(SHAPE3),
    "max reduce": lambda x: x.max(2, keepdim=True).expand(SHAPE3) * x,
    "prod reduce": lambda x: x.prod(1, keepdim=True).expand(SHAPE3) + x,
    "flip": lambda x: x.flip((0, 2)),
    "permute reshape": lambda x: x.permute(2, 0, 1).reshape(SHAPE3),
    "permute back": lambda x: x.permute(1, 2, 0).permute(2, 0, 1),
    "pad shrink": lambda x: x.pad(((1, 0), (0, 2), (1, 1))).shrink(((0, 2), (1, 4), (0, 2))),
    "expand middle": lambda x: x.shrink(((0, 2), (1, 2), (0, 2))).expand(SHAPE3) * x,
    "softmax": lambda x: x.softmax(1),
}
BINARY_STEPS3 = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / (y * y + 1.0),
    "max": lambda x, y: x.maximum(y),
    "where": lambda x, y: (x < y).where(x * 2.0, y),
    "batched matmul": lambda x, y: (x @ y.permute(0, 2, 1)) @ x * 0.5,
}

step3 = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY_STEPS3)), st.integers(0, 100)),
    st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY_STEPS3)), st.integers(0, 100), st.integers(0, 100)),
)

step = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY_STEPS)), st.integers(0, 100)),
    st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY_STEPS)), st.integers(0, 100), st.integers(0, 100)),
)


def build(steps, a, b):
    pool = [a, b]
    rank3 = len(a.shape) == 3
    for kind, name, *picks in steps:
        args = [pool[p % len(pool)] for p in picks]
        unary, binary = (UNARY_STEPS3, BINARY_STEPS3) if rank3 else (UNARY_STEPS, BINARY_STEPS)
        pool.append((unary if kind == "unary" else binary)[name](*args))
    return pool[-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))
def test_random_graphs_agree_with_finite_differences(steps, seed):
    rng, inputs, _, out = random_case(steps, seed)
    weights = rng.uniform(0.5, 1.5, out.shape)
    assert_vjp_matches_finite_differences(out, weights, inputs, steps)


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_second_order_agrees_with_finite_differences_of_the_gradient(steps, seed):
    rng, inputs, a, out = random_case(steps, seed)
    first = compute_gradient(out.sum(), UOp.const(1.0, f64), [a])[a]
    weights = rng.uniform(0.5, 1.5, SHAPE)
    assert_vjp_matches_finite_differences(first, weights, inputs, steps)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step3, min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_random_rank3_graphs_agree_with_finite_differences(steps, seed):
    rng, inputs, _, out = random_case(steps, seed, SHAPE3)
    assert len(out.shape) >= 3
    weights = rng.uniform(0.5, 1.5, out.shape)
    assert_vjp_matches_finite_differences(out, weights, inputs, steps, SHAPE3)


def random_case(steps, seed, shape=SHAPE):
    """A seeded generator, input values for a and b, the input a, and the graph of `steps`."""
    rng = np.random.default_rng(seed)
    inputs = {"a": rng.uniform(-1.5, 1.5, shape), "b": rng.uniform(-1.5, 1.5, shape)}
    a, b = UOp.param("a", shape, f64), UOp.param("b", shape, f64)
    return rng, inputs, a, build(steps, a, b)


def assert_vjp_matches_finite_differences(out, weights, inputs, steps, shape=SHAPE):
    """d(sum(weights * out))/da and /db from compute_gradient equal central differences."""
    a, b = UOp.param("a", shape, f64), UOp.param("b", shape, f64)
    grads = compute_gradient(out, UOp.buffer(weights), [a, b])
    assert_shapes_as_inferred([grads[a], grads[b]])
    values = evaluate([grads[a], grads[b]], inputs)
    for name, value in zip("ab", values):
        expected = numeric_gradient(out, weights, inputs, name)
        scale = 1.0 + np.max(np.abs(expected))
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"d/d{name} {steps}")
