"""The builder's primitives (uopcli/core/primitives.py and the pairing in core/promotion.py)
against outside oracles, written for the survivors of their first mutation run
(docs/mutation.md): every operator both ways round on Python numbers and tensors of mixed
dtypes (tinygrad's promotion, Python numbers weak, integer wrap), the unary ops, casts,
reductions and movement ops against numpy in the dtype they promise, on order-sensitive data
(distinct values, so a swapped operand, a permuted, flipped or misplaced element changes the
result) and edge values (-0.0, nan, inf, integer bounds, float16 rounding), bit for bit where
the value is exact. Every case is built with UOp's methods on PARAMs and evaluated by the
numpy backend."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch

from uopcli import UOp, evaluate
from uopcli.core.ops import Ops, dtype_of, dtypes
from uopcli.errors import GraphError


def run(build, *arrays):
    """build(*params) evaluated on `arrays`, and the node built: (value, node)."""
    params = [UOp.param(f"a{k}", a.shape, dtype_of(a.dtype)) for k, a in enumerate(arrays)]
    out = build(*params)
    return evaluate([out], {f"a{k}": a for k, a in enumerate(arrays)})[0], out


def bits(got, want):
    """Equal in shape, dtype and bit for bit (so -0.0 is not 0.0, and nan is nan)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (got.shape, got.dtype, want.shape, want.dtype)
    assert got.tobytes() == want.tobytes(), (got, want)


def wrap(values, dtype):
    """Python ints as `dtype` holds them (modulo 2^bits, two's complement)."""
    info = np.iinfo(dtype)
    span = 1 << info.bits
    return np.array([(v - info.min) % span + info.min for v in values], dtype)


# distinct, order-sensitive operands with no zero divisor and no INT_MIN // -1
I8A = np.array([-128, -100, -7, -5, -1, 2, 1, 3, 7, 100, 127], np.int8)
I8B = np.array([3, -3, 2, -2, 5, -7, 7, 5, -3, 3, 2], np.int8)
U8A = np.array([6, 1, 7, 100, 128, 200, 255], np.uint8)
U8B = np.array([3, 5, 2, 7, 3, 9, 2], np.uint8)
F32A = np.array([-7.25, -3.0, -2.5, -0.0, 0.0, 0.3, 1.7, 6.5, 9.0, np.inf, -np.inf, np.nan], np.float32)
F32B = np.array([2.0, -0.5, 1.25, 3.0, -3.0, -0.7, 0.4, -2.5, 4.0, 2.0, 5.0, 1.0], np.float32)


def floored(a, b):
    """Python's // of int arrays, wrapped to their dtype."""
    return wrap([int(x) // int(y) for x, y in zip(a, b)], a.dtype)


def remainder(a, b):
    return wrap([int(x) % int(y) for x, y in zip(a, b)], a.dtype)


def c_quotient(a, b):
    return wrap([abs(int(x)) // abs(int(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b)], a.dtype)


def c_remainder(a, b):
    return wrap([int(x) - abs(int(x)) // abs(int(y)) * (1 if (x < 0) == (y < 0) else -1) * int(y) for x, y in zip(a, b)],
                a.dtype)


def int_power(a, b):
    return wrap([int(x) ** int(y) for x, y in zip(a, b)], a.dtype)


def float_floor(a, b):
    """tinygrad's float //: floor(a · (1/b)), each step rounded in the dtype."""
    return np.floor(a * (np.ones_like(b) / b))


INT_OPS = [
    ("add", operator.add, lambda a, b: wrap([int(x) + int(y) for x, y in zip(a, b)], a.dtype)),
    ("sub", operator.sub, lambda a, b: wrap([int(x) - int(y) for x, y in zip(a, b)], a.dtype)),
    ("mul", operator.mul, lambda a, b: wrap([int(x) * int(y) for x, y in zip(a, b)], a.dtype)),
    ("floordiv", operator.floordiv, floored),
    ("mod", operator.mod, remainder),
    ("cdiv", lambda a, b: a.cdiv(b), c_quotient),
    ("cmod", lambda a, b: a.cmod(b), c_remainder),
    ("and", operator.and_, np.bitwise_and),
    ("or", operator.or_, np.bitwise_or),
    ("xor", operator.xor, np.bitwise_xor),
    ("shl", lambda a, b: a << b.maximum(0), lambda a, b: wrap([int(x) << max(int(y), 0) for x, y in zip(a, b)], a.dtype)),
    ("shr", lambda a, b: a >> b.maximum(0), lambda a, b: np.right_shift(a, np.maximum(b, 0))),
    ("pow", lambda a, b: a ** b.maximum(0), lambda a, b: int_power(a, np.maximum(b, 0))),
    ("maximum", lambda a, b: a.maximum(b), np.maximum),
    ("minimum", lambda a, b: a.minimum(b), np.minimum),
    ("truediv", operator.truediv, lambda a, b: a.astype(np.float32) / b.astype(np.float32)),
    ("lt", operator.lt, np.less), ("gt", operator.gt, np.greater),
    ("le", operator.le, np.less_equal), ("ge", operator.ge, np.greater_equal),
    ("eq", lambda a, b: a.eq(b), np.equal), ("ne", lambda a, b: a.ne(b), np.not_equal),
]


@pytest.mark.parametrize("name, build, oracle", INT_OPS, ids=[c[0] for c in INT_OPS])
@pytest.mark.parametrize("a, b", [(I8A, I8B), (U8A, U8B)], ids=["int8", "uint8"])
@pytest.mark.parametrize("swapped", [False, True], ids=["ab", "ba"])
def test_integer_operators_of_two_tensors_against_python(name, build, oracle, a, b, swapped):
    if swapped:
        a, b = b, a
    got, _ = run(build, a, b)
    bits(got, oracle(a, b))


F32_OPS = [
    ("add", operator.add, np.add), ("sub", operator.sub, np.subtract), ("mul", operator.mul, np.multiply),
    ("truediv", operator.truediv, np.divide),
    ("floordiv", operator.floordiv, float_floor),
    ("mod", operator.mod, lambda a, b: a - float_floor(a, b) * b),
    ("pow", operator.pow, np.power),
    ("maximum", lambda a, b: a.maximum(b), np.maximum),
    ("minimum", lambda a, b: a.minimum(b), lambda a, b: -np.maximum(-a, -b)),
    ("lt", operator.lt, np.less), ("gt", operator.gt, np.greater),
    ("le", operator.le, lambda a, b: ~np.greater(a, b)), ("ge", operator.ge, lambda a, b: ~np.less(a, b)),
    ("eq", lambda a, b: a.eq(b), np.equal), ("ne", lambda a, b: a.ne(b), np.not_equal),
]


@pytest.mark.parametrize("name, build, oracle", F32_OPS, ids=[c[0] for c in F32_OPS])
@pytest.mark.parametrize("swapped", [False, True], ids=["ab", "ba"])
def test_float_operators_of_two_tensors_bit_for_bit(name, build, oracle, swapped):
    """nan <= x and nan >= x are True, as tinygrad's not (a > b); min is -max(-a, -b)."""
    a, b = (F32B, F32A) if swapped else (F32A, F32B)
    with np.errstate(all="ignore"):
        want = oracle(a, b)
    got, _ = run(build, a, b)
    bits(got, want)


NUMBER_OPS = [
    ("add", operator.add), ("sub", operator.sub), ("mul", operator.mul), ("truediv", operator.truediv),
    ("floordiv", operator.floordiv), ("mod", operator.mod), ("and", operator.and_), ("or", operator.or_),
    ("xor", operator.xor), ("lt", operator.lt), ("gt", operator.gt), ("le", operator.le), ("ge", operator.ge),
]


@pytest.mark.parametrize("name, op", NUMBER_OPS, ids=[c[0] for c in NUMBER_OPS])
@pytest.mark.parametrize("number", [3, -3, 300])
def test_int8_with_a_python_int_both_ways_is_the_same_as_with_its_wrapped_tensor(name, op, number):
    """A Python int is weak (int8 stays int8) and wraps into int8 (300 is 44), each side."""
    a = np.array([-128, -100, -7, -5, -1, 1, 3, 7, 100, 127], np.int8)
    held = np.full(a.shape, wrap([number], np.int8)[0], np.int8)
    for left in (True, False):
        got, node = run(lambda x: op(x, number) if left else op(number, x), a)
        want, _ = run(lambda x, y: op(x, y) if left else op(y, x), a, held)
        assert node.dtype is (dtypes.float32 if name == "truediv" else dtypes.bool if name in ("lt", "gt", "le", "ge")
                              else dtypes.int8)
        bits(got, want)


@pytest.mark.parametrize("name, op", NUMBER_OPS[:6] + [("pow", operator.pow), ("max", lambda a, b: a.maximum(b)),
                                                       ("min", lambda a, b: a.minimum(b))],
                         ids=[c[0] for c in NUMBER_OPS[:6]] + ["pow", "max", "min"])
@pytest.mark.parametrize("number", [2.5, -0.5, -0.0])
def test_float32_with_a_python_float_both_ways_bit_for_bit(name, op, number):
    a = F32A
    held = np.full(a.shape, number, np.float32)
    for left in (True, False):
        if not left and name in ("max", "min"):
            continue
        got, node = run(lambda x: op(x, number) if left else op(number, x), a)
        want, _ = run(lambda x, y: op(x, y) if left else op(y, x), a, held)
        assert node.dtype is dtypes.float32
        bits(got, want)


@pytest.mark.parametrize("build, dtype, want", [
    (lambda x: x + 300, "int8", [44, 45, -85]),                   # weak int, wrapped
    (lambda x: x - 257, "int8", [-1, 0, 126]),
    (lambda x: x + 2.5, "float32", [2.5, 3.5, 129.5]),            # int8 and a float: float32
    (lambda x: 2.5 - x, "float32", [2.5, 1.5, -124.5]),
    (lambda x: x * True, "int8", [0, 1, 127]),                     # a bool is below int8
    (lambda x: x + np.int64(300), "int8", [44, 45, -85]),         # numpy scalars as the Python numbers they hold
    (lambda x: x + np.float32(0.5), "float32", [0.5, 1.5, 127.5]),
    (lambda x: x + np.float64(0.5), "float32", [0.5, 1.5, 127.5]),
    (lambda x: x + np.bool_(True), "int8", [1, 2, -128]),
    (lambda x: x + torch.tensor(0.25), "float32", [0.25, 1.25, 127.25]),
    (lambda x: x.cast("uint8") + -1, "uint8", [255, 0, 126]),
    (lambda x: x.cast("bool") + 1, "int32", [1, 2, 2]),            # bool and an int: int32
    (lambda x: x.cast("bool") + 2.5, "float32", [2.5, 3.5, 3.5]),
    (lambda x: x.cast("bool") + True, "bool", [True, True, True]),  # bool ADD is OR
    (lambda x: x.cast("bool") + np.bool_(False), "bool", [False, True, True]),
    (lambda x: x.cast("float16") + 70000, "float16", [np.inf, np.inf, np.inf]),
    (lambda x: x.cast("float16") * 0.1, "float16", np.float16([0, 1, 127]) * np.float16(0.1)),
    (lambda x: x.cast("int64") + 2**40, "int64", [2**40, 2**40 + 1, 2**40 + 127]),
    (lambda x: x.cast("uint64") + -1, "uint64", [2**64 - 1, 0, 126]),
    (lambda x: x.cast("int32") + x.cast("uint32"), "int64", [0, 2, 254]),
    (lambda x: x.cast("int64") + x.cast("uint64"), "float32", [0, 2, 254]),
    (lambda x: x + x.cast("uint8"), "int16", [0, 2, 254]),
    (lambda x: x.cast("float16") + x.cast("int32"), "float16", [0, 2, 254]),
    (lambda x: x.cast("bool") - x.cast("bool"), "bool", [True, True, True]),  # a - b is a | not b
    (lambda x: x.cast("bool") * x.cast("bool").logical_not(), "bool", [False, False, False]),
    (lambda x: x.cast("bool").maximum(False), "bool", [False, True, True]),
    (lambda x: x.cast("bool").minimum(True), "bool", [False, True, True]),
    (lambda x: x.cast("bool") ** False, "bool", [True, True, True]),
    (lambda x: x.cast("bool") ** x.cast("bool"), "bool", [True, True, True]),
    (lambda x: x.cast("bool").logical_not() ** x.cast("bool"), "bool", [True, False, False]),
    (lambda x: x ** 0, "int8", [1, 1, 1]),
    (lambda x: x ** 2.0, "float32", [0, 1, 16129]),
    (lambda x: 2 ** x.minimum(7), "int8", [1, 2, -128]),
    (lambda x: x.cast("bool") ** 0.5, "float32", [0, 1, 1]),
])
def test_promotion_of_mixed_operands_and_python_numbers(build, dtype, want):
    got, node = run(build, np.array([0, 1, 127], np.int8))
    assert node.dtype is dtype_of(dtype)
    bits(got, np.array(want, dtype_of(dtype).np))


@pytest.mark.parametrize("build, message", [
    (lambda i, f: f << 1, "SHL: shift operands must be integers, got float32[3] and int 1"),
    (lambda i, f: i >> f, "SHR: shift operands must be integers, got int8[3] and float32[3]"),
    (lambda i, f: i << 1.5, "SHL: shift operands must be integers, got int8[3] and float 1.5"),
    (lambda i, f: 2.0 >> i, "SHR: shift operands must be integers, got float 2.0 and int8[3]"),
    (lambda i, f: 1 << i, "SHL: a Python int shifted by a tensor stays weak in tinygrad 0.14, which cannot run it; "
                          "shift t.const_like(n) instead, got int 1 and int8[3]"),
    (lambda i, f: 1 >> i, "SHR: a Python int shifted by a tensor stays weak in tinygrad 0.14, which cannot run it; "
                          "shift t.const_like(n) instead, got int 1 and int8[3]"),
    (lambda i, f: i ** -1, "pow: the base int8[3] needs a float dtype for the exponent int -1"),
    (lambda i, f: i.cast("bool") ** -2, "pow: the base bool[3] needs a float dtype for the exponent int -2"),
    (lambda i, f: i + "a", "an operand must be a UOp or a bool, int or float, got str"),
    (lambda i, f: i + np.array([1.0, 2.0]), "an operand must be a UOp or a number, got a ndarray of shape [2]: "
                                           "embed an array in the graph with UOp.buffer(array)"),
    (lambda i, f: f * torch.tensor([1.0, 2.0]), "an operand must be a UOp or a number, got a Tensor of shape [2]: "
                                                "embed an array in the graph with UOp.buffer(array)"),
    (lambda i, f: f * None, "an operand must be a UOp or a bool, int or float, got NoneType"),
])
def test_operator_refusals_word_for_word(build, message):
    i, f = UOp.param("i", (3,), dtypes.int8), UOp.param("f", (3,), dtypes.float32)
    with pytest.raises(GraphError) as info:
        build(i, f)
    assert str(info.value) == message


def test_shifts_a_python_bool_and_a_uop_by_a_tensor():
    a = np.array([0, 1, 2, 5], np.int8)
    bits(run(lambda x: True << x, a)[0], np.array([1, 2, 4, 32], np.int8))
    bits(run(lambda x: x.const_like(64) >> x, a)[0], np.array([64, 32, 16, 2], np.int8))
    bits(run(lambda x: x << True, a)[0], np.array([0, 2, 4, 10], np.int8))


@pytest.mark.parametrize("a_shape, b_shape", [((3, 1), (4,)), ((4,), (3, 1)), ((), (2, 3)), ((2, 3), ()), ((2, 1, 3), (4, 1))])
@pytest.mark.parametrize("name, op", [("sub", operator.sub), ("truediv", operator.truediv), ("lt", operator.lt),
                                      ("floordiv", operator.floordiv), ("pow", operator.pow)])
def test_operands_broadcast_in_their_order(a_shape, b_shape, name, op):
    a = (np.arange(1, 1 + int(np.prod(a_shape))) * 1.5).reshape(a_shape)
    b = (np.arange(1, 1 + int(np.prod(b_shape))) * 0.75 + 0.5).reshape(b_shape)
    got, _ = run(op, a, b)
    want = float_floor(a, b) if name == "floordiv" else op(a, b)
    bits(got, np.asarray(want))


def test_reverse_number_operators_broadcast_on_a_scalar_tensor():
    a = np.array(4.0)
    for op, want in [(operator.sub, -1.0), (operator.truediv, 0.75), (operator.pow, 81.0), (operator.mod, 3.0)]:
        bits(run(lambda x: op(3.0, x), a)[0], np.array(want))


# ----------------------------------------------------------------------------- unary and bitwise
@pytest.mark.parametrize("dtype, values", [
    ("int8", [-128, -1, 0, 1, 127]), ("uint8", [0, 1, 127, 128, 255]), ("int16", [-32768, -1, 0, 5, 32767]),
    ("uint16", [0, 1, 65535]), ("int32", [-2**31, -1, 0, 2**31 - 1]), ("uint32", [0, 7, 2**32 - 1]),
    ("int64", [-2**63, -1, 0, 2**63 - 1]), ("uint64", [0, 3, 2**64 - 1]), ("bool", [False, True]),
])
def test_invert_flips_every_bit_and_negation_wraps(dtype, values):
    a = np.array(values, dtype)
    bits(run(lambda x: ~x, a)[0], np.invert(a))
    if dtype == "bool":
        bits(run(lambda x: -x, a)[0], np.logical_not(a))
    else:
        bits(run(lambda x: -x, a)[0], wrap([-int(v) for v in values], a.dtype))
        bits(run(lambda x: x.minimum(x.flip(0)), a)[0], np.minimum(a, a[::-1]))
        bits(run(lambda x: x.maximum(x.flip(0)), a)[0], np.maximum(a, a[::-1]))


@pytest.mark.parametrize("values", [
    np.array([-2, 0, 2, 1, -1], np.int8), np.array([0, 1, 255], np.uint8),
    np.array([-0.0, 0.0, 0.5, -1e-30, np.nan, np.inf], np.float32), np.array([False, True]),
])
def test_logical_not_is_x_equal_to_zero(values):
    got, node = run(lambda x: x.logical_not(), values)
    assert node.dtype is dtypes.bool
    bits(got, values == 0)


@pytest.mark.parametrize("method, oracle", [("sqrt", np.sqrt), ("exp2", np.exp2), ("log2", np.log2), ("sin", np.sin),
                                            ("reciprocal", lambda v: 1 / v)])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_float_unary_ops_of_integers_and_bools_compute_in_float32(method, oracle, dtype):
    a = np.array([0, 1, 2, 7, 100], dtype) if dtype != "bool" else np.array([False, True])
    got, node = run(lambda x: getattr(x, method)(), a)
    assert node.dtype is dtypes.float32 and node.src[0].op == Ops.CAST
    with np.errstate(all="ignore"):
        want = oracle(a.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-7)
    assert got.dtype == np.float32


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_unary_ops_keep_a_float_dtype(dtype):
    a = np.array([0.25, 1.0, 2.0, 3.5], dtype)
    for method, oracle in [("sqrt", np.sqrt), ("exp2", np.exp2), ("log2", np.log2), ("reciprocal", lambda v: 1 / v)]:
        got, node = run(lambda x: getattr(x, method)(), a)
        assert node.dtype is dtype_of(dtype) and node.src[0].op == Ops.PARAM
        np.testing.assert_allclose(got, oracle(a), rtol=1e-3 if dtype == "float16" else 1e-7)
        assert got.dtype == a.dtype


def test_trunc_of_integers_is_the_value_and_of_floats_rounds_toward_zero():
    i = UOp.param("i", (3,), dtypes.int16)
    assert i.trunc() is i
    a = np.array([-2.5, -0.5, -0.0, 0.7, 3.99, np.inf, np.nan], np.float32)
    bits(run(lambda x: x.trunc(), a)[0], np.trunc(a))


@pytest.mark.parametrize("method, op", [("contiguous", Ops.CONTIGUOUS), ("detach", Ops.DETACH),
                                        ("contiguous_backward", Ops.CONTIGUOUS_BACKWARD)])
def test_pass_through_unary_ops_keep_an_integer_dtype_and_the_values(method, op):
    a = np.array([-128, 5, 127], np.int8)
    got, node = run(lambda x: getattr(x, method)(), a)
    assert node.op == op and node.dtype is dtypes.int8 and node.src[0].op == Ops.PARAM
    bits(got, a)


def test_casts_bitcasts_copy_and_mulacc():
    x = UOp.param("x", (4,), dtypes.float32)
    assert x.cast("float32") is x and x.cast(dtypes.float32) is x
    assert x.cast("float16").op == Ops.CAST and x.cast("float16").dtype is dtypes.float16
    a = np.array([-1.5, -0.0, 1e-8, 70000.0], np.float32)
    with np.errstate(over="ignore"):
        bits(run(lambda v: v.cast("float16"), a)[0], a.astype(np.float16))
    bits(run(lambda v: v.bitcast("int32"), a)[0], a.view(np.int32))
    bits(run(lambda v: v.bitcast(dtypes.uint32), a)[0], a.view(np.uint32))
    copied = x.copy_to_device("CPU:1")
    assert (copied.op, copied.arg, copied.dtype, copied.src) == (Ops.COPY, "CPU:1", dtypes.float32, (x,))
    b, c = np.array([2.0, 3.0, -1.0, 0.5], np.float32), np.array([0.25, -4.0, 8.0, 1.0], np.float32)
    got, node = run(lambda u, v, w: u.mulacc(v, w), a, b, c)
    assert node.op == Ops.MULACC and node.dtype is dtypes.float32
    bits(got, a * b + c)


# ----------------------------------------------------------------------------- where
@pytest.mark.parametrize("build, dtype, want", [
    (lambda c, x: c.where(x, 0), "int8", [[-7, 0, 5], [0, 9, 0]]),
    (lambda c, x: c.where(0, x), "int8", [[0, 3, 0], [-2, 0, 127]]),
    (lambda c, x: c.where(x, 2.5), "float32", [[-7, 2.5, 5], [2.5, 9, 2.5]]),
    (lambda c, x: c.where(1, 2.5), "float32", [[1, 2.5, 1], [2.5, 1, 2.5]]),
    (lambda c, x: c.where(1, 2), "int32", [[1, 2, 1], [2, 1, 2]]),
    (lambda c, x: c.where(True, False), "bool", [[True, False, True], [False, True, False]]),
    (lambda c, x: c.where(x.cast("int32"), x.cast("uint8")), "int32", [[-7, 3, 5], [254, 9, 127]]),
    (lambda c, x: c.where(x.cast("bool"), 7), "int32", [[1, 7, 1], [7, 1, 7]]),
])
def test_where_promotes_its_branches_and_keeps_their_order(build, dtype, want):
    cond = np.array([[True, False, True], [False, True, False]])
    x = np.array([[-7, 3, 5], [-2, 9, 127]], np.int8)
    got, node = run(build, cond, x)
    assert node.dtype is dtype_of(dtype)
    # a scalar branch is a CONST of the result's dtype, not broadcast (RESHAPE, EXPAND) nor cast: WHERE takes it
    assert all(s.op in (Ops.PARAM, Ops.CONST, Ops.CAST) for s in node.src)
    assert all(s.src[0].op != Ops.CONST for s in node.src if s.op == Ops.CAST)
    bits(got, np.array(want, dtype_of(dtype).np))


@pytest.mark.parametrize("c_shape, a_shape, b_shape", [((2, 1), (3,), ()), ((3,), (2, 1), (1, 3)), ((), (2, 3), (2, 1)),
                                                       ((2, 3), (), ()), ((1, 3), (2, 1), (3,))])
def test_where_broadcasts_condition_and_both_branches(c_shape, a_shape, b_shape):
    rng = np.random.default_rng(3)
    cond = rng.random(c_shape) < 0.5 if c_shape else np.array(True)
    a = np.arange(1.0, 1 + np.prod(a_shape)).reshape(a_shape)
    b = -np.arange(1.0, 1 + np.prod(b_shape)).reshape(b_shape) / 4
    got, _ = run(lambda c, x, y: c.where(x, y), cond, a, b)
    bits(got, np.where(cond, a, b))
    bits(run(lambda c, y: c.where(2.5, y), cond, b)[0], np.where(cond, 2.5, b))


# ----------------------------------------------------------------------------- reductions
R = np.array([[[3, -1, 4, 1], [-5, 9, -2, 6]], [[5, -3, 5, 8], [9, -7, 9, 3]], [[-2, 3, 8, -4], [6, -2, 6, 4]]])


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, (0, 2), (2, 0), (-1, -3), (0, 1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("method", ["sum", "prod", "max"])
def test_reductions_over_axes_against_numpy(axis, keepdim, method):
    a = (R * 1.25).astype(np.float64)
    got, _ = run(lambda x: getattr(x, method)(axis, keepdim), a)
    bits(got, np.asarray(getattr(np, method if method != "max" else "amax")(a, axis=axis, keepdims=keepdim)))


@pytest.mark.parametrize("dtype, values, want_dtype", [
    ("int8", [100, 100, 100, -128], "int32"), ("int16", [30000, 30000, -1], "int32"),
    ("uint8", [255, 255, 255], "uint32"), ("uint16", [65535, 65535], "uint32"),
    ("bool", [True, True, False, True], "int32"), ("int32", [2**31 - 1, 1], "int32"),
    ("uint32", [2**32 - 1, 2], "uint32"), ("int64", [2**62, 2**62], "int64"),
])
def test_sum_widens_narrow_integers_and_counts_bools(dtype, values, want_dtype):
    a = np.array(values, dtype)
    got, node = run(lambda x: x.sum(), a)
    assert node.dtype is dtype_of(want_dtype)
    bits(got, wrap([sum(int(v) for v in values)], np.dtype(want_dtype))[0])


def test_float16_sum_accumulates_in_float32_and_rounds_once():
    a = np.array([2048, 1, 1, 1, 1, 0.5, 0.25], np.float16)  # a float16 running total stays 2048
    got, node = run(lambda x: x.sum(), a)
    assert node.dtype is dtypes.float16 and node.src[0].src[0].dtype is dtypes.float32
    bits(got, np.float16(a.astype(np.float32).sum()))
    got, _ = run(lambda x: x.reshape(1, 7).sum(1, keepdim=True), a)
    bits(got, np.float16([[a.astype(np.float32).sum()]]))
    bits(run(lambda x: x.cast("float32").sum(), a)[0], a.astype(np.float32).sum())
    # 1024 + 0.5 + 2^-24: float32 drops the 2^-24 and the tie rounds to even, 1024 (float64 would keep it: 1025)
    tie = np.array([1024, 0.5, 2.0**-24], np.float16)
    bits(run(lambda x: x.sum(), tie)[0], np.float16(1024))
    bits(run(lambda x: x.sum(0, keepdim=True), tie)[0], np.float16([1024]))


@pytest.mark.parametrize("build, want", [
    (lambda x: x.sum(dtype="int8"), np.int8(-84)),          # 100+100+100-128 wraps in the dtype asked for
    (lambda x: x.sum(0, dtype="int16"), np.int16(172)),
    (lambda x: x.sum(dtype="float32"), np.float32(172)),
    (lambda x: x.sum(dtype="bool"), np.bool_(True)),        # a sum of bools in bool is any
    (lambda x: (x * 0).sum(dtype="bool"), np.bool_(False)),
    (lambda x: x.prod(), np.int8(0)),                       # 100*100*100*-128 wraps to 0 in int8
    (lambda x: (x[:2] + 0).prod(), np.int8(16)),            # 10000 mod 256
    (lambda x: x.prod(dtype="int32"), np.int32(-128000000)),
    (lambda x: x.prod(dtype="float64"), np.float64(-128000000)),
    (lambda x: x.cast("bool").prod(), np.bool_(True)),      # bools: all
    (lambda x: (x > 0).prod(), np.bool_(False)),
    (lambda x: (x > 0).prod(dtype="int32"), np.int32(0)),
    (lambda x: (x > 0).max(), np.bool_(True)),              # bools: any
    (lambda x: (x > 100).max(), np.bool_(False)),
    (lambda x: x.max(), np.int8(100)),
    (lambda x: x.minimum(0).max(0, keepdim=True), np.array([0], np.int8)),
])
def test_reductions_in_a_dtype_and_of_bools(build, want):
    got, _ = run(build, np.array([100, 100, 100, -128], np.int8))
    bits(got, want)


def test_bool_reductions_along_an_axis():
    a = np.array([[True, False, False], [True, True, False]])
    for build, want in [(lambda x: x.max(1), a.any(1)), (lambda x: x.max(0, keepdim=True), a.any(0, keepdims=True)),
                        (lambda x: x.prod(1), a.all(1)), (lambda x: x.prod(0, keepdim=True), a.all(0, keepdims=True)),
                        (lambda x: x.sum(1, dtype="bool"), a.any(1)), (lambda x: x.sum(0), a.sum(0, dtype=np.int32))]:
        bits(run(build, a)[0], want)


def test_raw_reduce_keeps_its_axes_sorted_with_size_one():
    a = (R * 1.5).astype(np.float32)
    got, node = run(lambda x: x.r(Ops.ADD, (2, 0)), a)
    assert node.arg == (Ops.ADD, (0, 2)) and node.shape == (1, 2, 1)
    bits(got, a.sum((0, 2), keepdims=True))
    bits(run(lambda x: x.r(Ops.MAX, [1]), a)[0], a.max(1, keepdims=True))


def test_a_reduction_over_no_axis_is_the_tensor():
    x = UOp.param("x", (), dtypes.float32)
    assert x.sum() is x and x.max() is x and x.prod() is x


# ----------------------------------------------------------------------------- movement
M = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 1.5 - 7


@pytest.mark.parametrize("shape, want", [
    ((4, 6), (4, 6)), ((-1, 8), (3, 8)), ((6, -1), (6, 4)), ((2, None, -1), (2, 3, 4)), ((None, 12), (2, 12)),
    ((None, None, 2, 2), (2, 3, 2, 2)), ((24,), (24,)), (((2, 12),), (2, 12)), ((-1,), (24,)), ((1, -1, 1), (1, 24, 1)),
])
def test_reshape_infers_and_keeps_sizes(shape, want):
    got, node = run(lambda x: x.reshape(*shape), M)
    assert node.shape == want
    bits(got, M.reshape(want))


def test_reshape_refusals_and_identity():
    x = UOp.param("x", (2, 3), dtypes.float32)
    assert x.reshape(2, 3) is x and x.reshape(None, -1) is x and x.reshape((2, None)) is x and x.reshape(None, None) is x
    for shape, message in [((None, None, None), "reshape [2, 3] to [None, None, None]: a None past the last axis"),
                           ((3, None, None), "reshape [2, 3] to [3, None, None]: a None past the last axis"),
                           ((-1, -1), "reshape to [-1, -1]: only one size can be -1 (inferred)"),
                           ((-1, 1, -1), "reshape to [-1, 1, -1]: only one size can be -1 (inferred)")]:
        with pytest.raises(GraphError) as info:
            x.reshape(*shape)
        assert str(info.value) == message


def test_reshape_of_an_empty_tensor_with_minus_one_is_refused():
    x = UOp.param("x", (0, 3), dtypes.float32)
    assert x.reshape(3, 0).shape == (3, 0)
    with pytest.raises(GraphError):
        x.reshape(0, -1)


@pytest.mark.parametrize("source, shape", [((3, 1), (3, 4)), ((3, 1), (-1, 4)), ((1, 4), (2, 3, 4)), ((1, 4), (2, -1, 4)),
                                           ((4,), (2, 3, 4)), ((), (2, 3)), ((2, 1, 1), (2, 5, 3)), ((3, 1), (2, 3, 5))])
def test_expand_against_numpys_broadcast(source, shape):
    a = np.arange(1.0, 1 + np.prod(source), dtype=np.float32).reshape(source)
    want = np.broadcast_to(a, tuple(s if s != -1 else a.shape[i - (len(shape) - a.ndim)] for i, s in enumerate(shape)))
    got, node = run(lambda x: x.expand(*shape), a)
    assert node.shape == want.shape
    bits(got, np.ascontiguousarray(want))
    bits(run(lambda x: x.broadcast_to(want.shape), a)[0], np.ascontiguousarray(want))


def test_expand_and_broadcast_to_the_same_shape_are_the_tensor():
    x = UOp.param("x", (3, 1), dtypes.float32)
    assert x.expand(3, 1) is x and x.expand(-1, -1) is x and x.expand((3, 1)) is x and x.broadcast_to((3, 1)) is x
    assert x.expand(1, 3, 1).op == Ops.RESHAPE and x.expand(2, 3, 1).op == Ops.EXPAND
    with pytest.raises(GraphError) as info:
        x.broadcast_to((3,))
    assert str(info.value) == "cannot broadcast [3, 1] to [3]"


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (-1, 0, 1), (0, -1, -2), ((2, 1, 0),), ([1, 0, 2],)])
def test_permute_against_numpy(order):
    flat = order[0] if len(order) == 1 else order
    got, node = run(lambda x: x.permute(*order), M)
    bits(got, np.ascontiguousarray(np.transpose(M, flat)))
    if tuple(o % 3 for o in flat) == (0, 1, 2):
        assert node.op == Ops.PARAM


@pytest.mark.parametrize("order, message", [
    ((0, 0, 1), "permute order [0, 0, 1] is not an order of the 3 axes of shape [2, 3, 4]"),
    ((0, 1), "permute order [0, 1] is not an order of the 3 axes of shape [2, 3, 4]"),
    ((0, 1, 3), "permute order [0, 1, 3] is not an order of the 3 axes of shape [2, 3, 4]"),
    ((-4, 1, 2), "permute order [-1, 1, 2] is not an order of the 3 axes of shape [2, 3, 4]"),
])
def test_permute_refusals(order, message):
    with pytest.raises(GraphError) as info:
        UOp.param("x", (2, 3, 4), dtypes.float32).permute(*order)
    assert str(info.value) == message


@pytest.mark.parametrize("a, b", [(1, 0), (0, 1), (0, 2), (2, 0), (-1, 0), (1, -1), (-3, -2), (1, 1)])
def test_transpose_swaps_two_axes(a, b):
    bits(run(lambda x: x.transpose(a, b), M)[0], np.ascontiguousarray(np.swapaxes(M, a, b)))


def test_transpose_and_T_default_to_the_first_two_axes():
    bits(run(lambda x: x.transpose(), M)[0], np.ascontiguousarray(np.swapaxes(M, 0, 1)))
    bits(run(lambda x: x.T, M)[0], np.ascontiguousarray(np.swapaxes(M, 0, 1)))
    bits(run(lambda x: x.reshape(6, 4).T, M)[0], np.ascontiguousarray(M.reshape(6, 4).T))
    with pytest.raises(GraphError) as info:
        UOp.param("x", (2, 3), dtypes.float32).transpose(2)
    assert str(info.value) == "axis 2 out of range for rank 2"


@pytest.mark.parametrize("padding, numpy_padding", [
    (((1, 2), (0, 1), (3, 0)), ((1, 2), (0, 1), (3, 0))),
    ((None, (2, 1), None), ((0, 0), (2, 1), (0, 0))),
    ((1, 2), ((0, 0), (0, 0), (1, 2))),                       # flat: the last axis first
    ((1, 2, 3, 0), ((0, 0), (3, 0), (1, 2))),
    ((0, 1, 2, 0, 1, 1), ((1, 1), (2, 0), (0, 1))),
    (((0, 0), (0, 0), (0, 2)), ((0, 0), (0, 0), (0, 2))),
])
@pytest.mark.parametrize("value", [0.0, -2.5])
def test_pad_against_numpy(padding, numpy_padding, value):
    got, _ = run(lambda x: x.pad(padding, value=value), M)
    bits(got, np.pad(M, numpy_padding, constant_values=np.float32(value)))


@pytest.mark.parametrize("padding, cut", [
    (((-1, 2), (0, 0), (1, -2)), ((1, 2), (0, 3), (0, 2))),
    ((-1, -1), ((0, 2), (0, 3), (1, 3))),
    ((0, 0, -2, 1), ((0, 2), (2, 3), (0, 4))),
])
def test_negative_padding_cuts_then_pads(padding, cut):
    trimmed = M[tuple(slice(a, b) for a, b in cut)]
    grown = [(max(p, 0), max(q, 0)) for p, q in
             (padding if isinstance(padding[0], tuple) else ((0, 0),) * (3 - len(padding) // 2) +
              tuple(zip(padding[-2::-2], padding[::-2])))]
    for value in (0.0, 9.5):
        got, _ = run(lambda x: x.pad(padding, value=value), M)
        bits(got, np.pad(trimmed, grown, constant_values=np.float32(value)))


def test_pad_of_nothing_is_the_tensor_and_flat_refusals():
    x = UOp.param("x", (2, 3), dtypes.float32)
    assert x.pad((0, 0)) is x and x.pad(((0, 0), None)) is x and x.pad((None, None)) is x
    assert x.pad((1, 0)).op == Ops.PAD
    for padding in [(1, 2, 3), (1, 1, 1, 1, 1, 1)]:
        with pytest.raises(GraphError) as info:
            x.pad(padding)
        assert str(info.value) == f"pad: a flat padding has two ints per axis, at most 4, got {list(padding)}"


def test_pad_modes_fill_with_the_tensors_own_elements():
    a = M[0]
    for mode, numpy_mode in [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")]:
        bits(run(lambda x: x.pad((1, 2, 2, 1), mode=mode), a)[0], np.pad(a, ((2, 1), (1, 2)), mode=numpy_mode))


@pytest.mark.parametrize("bounds", [((0, 1), (1, 3), (2, 4)), (None, (0, 2), None), ((1, 2), None, (0, 1)),
                                    ((0, 2), (0, 3), (3, 4)), (None, None, (1, 3))])
def test_shrink_against_numpy(bounds):
    got, _ = run(lambda x: x.shrink(bounds), M)
    bits(got, np.ascontiguousarray(M[tuple(slice(None) if b is None else slice(*b) for b in bounds)]))


def test_shrink_to_the_whole_tensor_is_the_tensor():
    x = UOp.param("x", (2, 3), dtypes.float32)
    assert x.shrink(((0, 2), (0, 3))) is x and x.shrink((None, None)) is x and x.shrink(((0, 2), None)) is x
    assert x.shrink(((0, 2), (0, 2))).op == Ops.SHRINK


@pytest.mark.parametrize("axis", [(0,), (1,), (2,), (-1,), ((0, 2),), (0, 2), ([1, -1],), ((True, False, True),),
                                  ([False, True, False],), (-3, -2, -1)])
def test_flip_against_numpy(axis):
    flat = axis[0] if len(axis) == 1 else axis
    if isinstance(flat, (list, tuple)) and all(isinstance(a, bool) for a in flat):
        numpy_axes = tuple(i for i, f in enumerate(flat) if f)
    else:
        numpy_axes = flat
    got, _ = run(lambda x: x.flip(*axis), M)
    bits(got, np.ascontiguousarray(np.flip(M, numpy_axes)))


def test_flip_of_no_axis_is_the_tensor_and_refusals():
    x = UOp.param("x", (2, 3), dtypes.float32)
    assert x.flip(()) is x and x.flip((False, False)) is x and x.flip([]) is x
    assert x.flip((True, False)).arg == (True, False) and x.flip(-1).arg == (False, True)
    for axis, message in [((None,), "flip needs the axes to reverse (shape [2, 3])"),
                          (((0, -2),), "flip: an axis appears more than once in (0, -2) (shape [2, 3])"),
                          ((1, 1), "flip: an axis appears more than once in (1, 1) (shape [2, 3])"),
                          ((2,), "axis 2 out of range for rank 2"), ((True,), "axis True out of range for rank 2")]:
        with pytest.raises(GraphError) as info:
            x.flip(*axis)
        assert str(info.value) == message


@pytest.mark.parametrize("build, op", [
    (lambda x: 5 + x, Ops.ADD), (lambda x: 5 * x, Ops.MUL), (lambda x: 5 & x, Ops.AND), (lambda x: 5 | x, Ops.OR),
    (lambda x: 5 ^ x, Ops.XOR), (lambda x: 5 - x, Ops.SUB), (lambda x: x.const_like(5) ** x, Ops.POW),
    (lambda x: x.const_like(5) < x, Ops.CMPLT),
])
def test_a_python_number_on_the_left_is_the_first_source_as_in_tinygrad(build, op):
    """5 & x is AND(5, x) as tinygrad builds it (the order a saved graph and an export show)."""
    x = UOp.param("x", (3,), dtypes.int32)
    node = build(x)
    assert node.op == op and node.src[0].op == Ops.CONST and node.src[1] is x
    flipped = {Ops.CMPLT: lambda: x > 5}.get(op, lambda: None)()
    if flipped is not None:
        assert flipped.src[0].op == Ops.CONST and flipped.src[1] is x


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_a_python_int_wraps_into_each_integer_dtype(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 1, info.max], dtype)
    for number in (2**info.bits + 3, -(2**info.bits) - 3, 2**(info.bits - 1), 2**(info.bits - 1) - 1, -1, info.max, info.min):
        got, node = run(lambda x: x + number, a)
        assert node.dtype is dtype_of(dtype)
        bits(got, wrap([int(v) + number for v in a], a.dtype))
        assert node.src[1].arg == wrap([number], a.dtype)[0]


@pytest.mark.parametrize("a, b", [(100.0, 2.5), (-100.0, 2.5), (7.0, -2.0), (-7.5, -2.0), (1.0, 0.1), (-3.0, 0.3), (60000.0, 0.5)])
def test_float16_floor_division_is_the_reciprocal_product_rounded_in_float16(a, b):
    """a // b is floor(a · (1/b)), each step rounded to float16 (100 // 2.5: 1/2.5 rounds down, the
    product back up to 40); a % b is a - (a // b) · b."""
    x, y = np.array([a], np.float16), np.array([b], np.float16)
    with np.errstate(over="ignore"):
        quotient = np.floor(x * (np.float16(1) / y))
        rest = x - quotient * y
    bits(run(operator.floordiv, x, y)[0], quotient)
    bits(run(operator.mod, x, y)[0], rest)
    bits(run(lambda u: u // b, x)[0], quotient)
    bits(run(lambda v: a // v, y)[0], quotient)
    bits(run(lambda u: u % b, x)[0], rest)


@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "uint16", "uint32", "uint64"])
def test_integer_floor_division_and_remainder_of_each_sign_pair(dtype):
    signed = np.dtype(dtype).kind == "i"
    pairs = [(7, 2), (7, -2), (-7, 2), (-7, -2), (6, 3), (-6, 3), (6, -3), (0, -5), (1, 7), (-1, 7)] if signed else \
        [(7, 2), (6, 3), (0, 5), (1, 7), (np.iinfo(dtype).max, 10)]
    a = np.array([p for p, _ in pairs], dtype)
    b = np.array([q for _, q in pairs], dtype)
    got, node = run(operator.floordiv, a, b)
    assert node.dtype is dtype_of(dtype)
    bits(got, floored(a, b))
    bits(run(operator.mod, a, b)[0], remainder(a, b))
    bits(run(lambda u: u.cdiv(b[1].item()), a)[0], c_quotient(a, np.full(a.shape, b[1], dtype)))


@pytest.mark.parametrize("axis, message", [(2, "axis 2 out of range for rank 2"), (-3, "axis -3 out of range for rank 2"),
                                           (1.0, "axis 1.0 out of range for rank 2"),
                                           (False, "axis False out of range for rank 2")])
def test_one_axis_refuses_what_is_not_an_axis(axis, message):
    x = UOp.param("x", (2, 3), dtypes.float32)
    with pytest.raises(GraphError) as info:
        x.transpose(axis, 0)
    assert str(info.value) == message
    assert x.transpose(-2, -1).shape == (3, 2) and x.transpose(-1, 1) is x


def test_a_python_base_takes_any_exponent_and_a_constant_minimum_is_negated_in_place():
    a = np.array([0, 1, 2, 3, 7], np.int8)
    bits(run(lambda x: (-2) ** x, a)[0], wrap([(-2) ** int(v) for v in a], np.int8))
    bits(run(lambda x: 2.5 ** x, a)[0], np.float32(2.5) ** a.astype(np.float32))
    bits(run(lambda x: True ** x, a)[0], np.ones(5, np.int8))
    bits(run(lambda x: x ** True, a)[0], a)
    x = UOp.param("x", (3,), dtypes.float32)
    made = x.minimum(3.0)
    assert made.op == Ops.NEG and made.src[0].op == Ops.MAX
    assert made.src[0].src[1].op == Ops.CONST and made.src[0].src[1].arg == -3.0


@pytest.mark.parametrize("build, message", [
    (lambda x: x.pad((True, False)), "pad takes one (int, int) pair (or None) per axis, got (True, False)"),
    (lambda x: x.pad(((1, 0),)), "PAD -> float32: arg must be one non-negative (before, after) per axis, got ((1, 0),) "
                                 "(sources: PARAM float32[2, 3])"),
    (lambda x: x.shrink(((0, 1),)), "SHRINK -> float32: arg must be one (start, end) per axis within [2, 3], got "
                                    "((0, 1),) (sources: PARAM float32[2, 3])"),
    (lambda x: x.shrink(((0, 1), (0, 1), (0, 1))), "SHRINK -> float32: arg must be one (start, end) per axis within "
                                                   "[2, 3], got ((0, 1), (0, 1), (0, 1)) (sources: PARAM float32[2, 3])"),
    (lambda x: x.expand(-1), "EXPAND -> float32: cannot expand [2, 3] to (2,): same rank, only size-1 axes grow "
                             "(sources: PARAM float32[2, 3])"),
    (lambda x: x.reshape(2, 3, None), "reshape [2, 3] to [2, 3, None]: a None past the last axis"),
])
def test_movement_refusals_word_for_word(build, message):
    with pytest.raises(GraphError) as info:
        build(UOp.param("x", (2, 3), dtypes.float32))
    assert str(info.value) == message
