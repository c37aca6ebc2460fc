"""The index algebra behind strided views and scatters (uopcli/backends/numpy/strided.py): every answer it
gives is checked against brute force over all values of the variables, since a wrong
stride would read the wrong elements without any error."""

import itertools

import numpy as np
import pytest

from uopcli.backends.numpy.strided import Affine, _floordiv, _mod, _no_overlap


def _value(form: Affine, point) -> int:
    return form.const + sum(c * v for c, v in zip(form.coeffs, point))


def _random_form(rng):
    """A form over 1-3 variables that is never negative (it stands for an index)."""
    rank = int(rng.integers(1, 4))
    extents = tuple(int(n) for n in rng.integers(1, 7, rank))
    coeffs = tuple(int(c) for c in rng.integers(-12, 13, rank))
    form = Affine(0, coeffs)
    low, _ = form.bounds(extents)
    return Affine(-low + int(rng.integers(0, 30)), coeffs), extents


@pytest.mark.parametrize("operation", [_floordiv, _mod])
def test_floordiv_and_mod_are_exact_whenever_they_answer(operation):
    rng = np.random.default_rng(11)
    answered = refused = 0
    for _ in range(4000):
        form, extents = _random_form(rng)
        by = int(rng.integers(1, 13))
        result = operation(form, by, extents)
        if result is None:
            refused += 1
            continue
        answered += 1
        for point in itertools.product(*(range(n) for n in extents)):
            true = _value(form, point) // by if operation is _floordiv else _value(form, point) % by
            assert _value(result, point) == true, (form, extents, by, result, point)
    assert answered > 1000 and refused > 300  # both outcomes are exercised


def test_the_block_boundary_is_exact():
    # v in [0, 4): v // 4 is 0 throughout; v in [0, 5) reaches the next block at v = 4
    assert _floordiv(Affine(0, (1,)), 4, (4,)) == Affine(0, (0,))
    assert _floordiv(Affine(0, (1,)), 4, (5,)) is None
    # 4a + b with b in [0, 4): (4a + b) // 4 = a and (4a + b) % 4 = b
    assert _floordiv(Affine(0, (4, 1)), 4, (3, 4)) == Affine(0, (1, 0))
    assert _mod(Affine(0, (4, 1)), 4, (3, 4)) == Affine(0, (0, 1))
    assert _mod(Affine(0, (4, 1)), 4, (3, 5)) is None  # b = 4 wraps


def test_overlap_is_detected_between_any_two_axes():
    rng = np.random.default_rng(5)
    for _ in range(3000):
        rank = int(rng.integers(1, 4))
        extents = [int(n) for n in rng.integers(2, 5, rank)]
        steps = [int(s) for s in rng.integers(-10, 11, rank)]
        if 0 in steps:
            continue
        offsets = [sum(s * p for s, p in zip(steps, point)) for point in itertools.product(*(range(n) for n in extents))]
        if _no_overlap(range(rank), steps, extents):
            assert len(set(offsets)) == len(offsets), (steps, extents)
