"""The first derivative of a large product (REDUCE MUL): compute_gradient plus evaluation,
against hand-written numpy in the same run.

    .venv/bin/python bench/bench_prod_grad.py            # 10^6 elements (about 20 s)
    .venv/bin/python bench/bench_prod_grad.py --quick    # 10^4 elements, a second

Rows: x of shape (n,) reduced over axis 0, and x of (m, m) reduced over axis 0 and over
axis 1, with g = ones. "ours" is compute_gradient of x.prod(axis) with respect to x, then
evaluate on x (values in [0.999, 1.001], a few exact zeros); "numpy" is the exclusive
product of the others written by hand (cumprod from both ends, shifted: O(n), exact at
zeros), and "numpy y/x" the quotient formula (what the rule computed before: wrong at
zeros, shown for scale). "before" is ours with the rule this one replaced (issue 25):
y / x_i where x_i != 0, else the product of the nonzeros where x_i is the only zero, else
a constant 0 (right in value, wrong in its own derivatives at repeated zeros). Times
are medians of runs in turns (see bench_eval.py), wall and CPU (the steadier on a busy
machine).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uopcli import UOp, dtypes  # noqa: E402
from uopcli.backends.numpy import evaluate  # noqa: E402
from uopcli.core.gradient import GRADIENT_RULES, compute_gradient  # noqa: E402
from uopcli.core.gradient import _cast, _const, _div, _eq, _expand, _mul, _reduce, _where, _zero  # noqa: E402

from bench_eval import times_in_turns  # noqa: E402


def ours(shape: tuple, axis: int, x: np.ndarray) -> np.ndarray:
    param = UOp.param("x", shape, dtypes.float64)
    out = param.prod(axis)
    grad = compute_gradient(out, UOp.full(out.shape, 1.0, dtypes.float64), [param])[param]
    return evaluate([grad], {"x": x})[0]


def quotient_rule(g, y, need):
    """The REDUCE MUL rule before issue 25, for the "before" column."""
    (x,) = y.src
    axes, shape = y.arg[1], x.shape
    zero = _zero(x)
    is_zero = _eq(x, zero)
    zero_count = _expand(_reduce(_cast(is_zero, x.dtype), "ADD", axes, y.shape), shape)
    nonzero_x = _where(is_zero, _const(x, 1.0), x)
    nonzero_prod = _expand(_reduce(nonzero_x, "MUL", axes, y.shape), shape)
    at_zero = _where(_eq(zero_count, _const(x, 1.0)), nonzero_prod, zero)
    others = _where(is_zero, at_zero, _div(_expand(y, shape), nonzero_x))
    return (_mul(_expand(g, shape), others),)


def before(shape: tuple, axis: int, x: np.ndarray) -> np.ndarray:
    key = ("REDUCE", "MUL")
    rule = GRADIENT_RULES[key]
    GRADIENT_RULES[key] = quotient_rule
    try:
        return ours(shape, axis, x)
    finally:
        GRADIENT_RULES[key] = rule


def numpy_exclusive(x: np.ndarray, axis: int) -> np.ndarray:
    """prod of the others along `axis`: exclusive prefix times exclusive suffix products."""
    moved = np.moveaxis(x, axis, -1)
    prefix = np.ones_like(moved)
    np.cumprod(moved[..., :-1], axis=-1, out=prefix[..., 1:])
    suffix = np.ones_like(moved)
    np.cumprod(moved[..., :0:-1], axis=-1, out=suffix[..., -2::-1])
    return np.moveaxis(np.multiply(prefix, suffix, out=prefix), -1, axis)


def numpy_quotient(x: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.prod(x, axis=axis, keepdims=True) / x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    n, m = (10_000, 100) if args.quick else (1_000_000, 1000)
    rng = np.random.default_rng(0)
    print("| case | ours (diff + eval) | before | numpy exclusive | numpy y/x | ours / before | ours / numpy |")
    print("|---|---|---|---|---|---|---|")
    for shape, axis in (((n,), 0), ((m, m), 0), ((m, m), 1)):
        x = rng.uniform(0.999, 1.001, shape)  # products stay finite
        x.reshape(-1)[rng.integers(0, x.size, 3)] = 0.0
        timed = times_in_turns([lambda: ours(shape, axis, x), lambda: before(shape, axis, x),
                                lambda: numpy_exclusive(x, axis), lambda: numpy_quotient(x, axis)], args.repeats)
        (ours_wall, ours_cpu, got), (old_wall, old_cpu, _), (np_wall, np_cpu, want), (q_wall, q_cpu, _) = timed
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
        cells = [f"{wall * 1e3:.1f} ms (CPU {cpu * 1e3:.1f})" for wall, cpu, _ in timed]
        print(f"| {shape} axis {axis} | " + " | ".join(cells) +
              f" | {ours_cpu / old_cpu:.2f}x | {ours_cpu / np_cpu:.2f}x |")


if __name__ == "__main__":
    main()
