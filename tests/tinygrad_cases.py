"""The cases the builder is compared with tinygrad 0.14 on: one table, two readers.

`tools/tinygrad_reference_values.py` runs every case on tinygrad (and torch where a case
names a torch form) and stores what came out in tests/data/tinygrad_reference.json; the
tests build the same cases with uopcli and compare with the stored results, so `make test`
needs neither tinygrad nor torch. A case is a name, its inputs (numpy arrays, given to
tinygrad as tensors and to uopcli as PARAMs of the same dtype and shape) and
`build(T, **tensors)`, written once against the API the two share (T is tinygrad's Tensor
class or uopcli's UOp). Only numpy is imported here.

Families:
- binary/METHOD/LEFT/RIGHT: every binary method over every pair of operand kinds (the
  twelve dtypes and Python's int, float and bool; a Python number on the left through the
  reflected operator);
- unary/METHOD/DTYPE: elementwise maths on every dtype kind (integers and bools included);
- axes/METHOD/RANK/ARG: every axis-taking method on a 0-d and a 2-d tensor, with in-range,
  negative, out-of-range, repeated and tuple axes;
- issue/NAME: the cases of issue 20 and the functions it adds.
"""

from __future__ import annotations

import operator
from typing import Callable, NamedTuple

import numpy as np

TENSOR_KINDS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64")
PYTHON_KINDS = {"py_int": 3, "py_float": 2.5, "py_bool": True}
KINDS = TENSOR_KINDS + tuple(PYTHON_KINDS)


class Case(NamedTuple):
    name: str
    inputs: dict            # name -> numpy array
    build: Callable         # build(T, **tensors) -> tensor or tuple of tensors
    torch: Callable | None = None  # torch_build(torch, **torch_tensors), where torch has the same meaning


def _left_values(kind: str) -> np.ndarray:
    """Six values of a kind for the left operand: negatives, zero and a large one where the
    dtype has them."""
    if kind == "bool":
        return np.array([True, False, True, False, True, False])
    if kind.startswith("uint"):
        return np.array([7, 3, 0, 5, 9, 200], kind)
    if kind.startswith("int"):
        return np.array([-7, -3, 0, 5, 9, 100], kind)
    return np.array([-2.5, -1.0, 0.0, 1.5, 3.25, 100.0], kind)


def _right_values(kind: str) -> np.ndarray:
    """Six values for the right operand: no zero among the numbers (division), small
    non-negative ones where unsigned (shift counts stay inside the width)."""
    if kind == "bool":
        return np.array([True, True, False, False, True, True])
    if kind.startswith("uint"):
        return np.array([2, 3, 4, 1, 5, 3], kind)
    if kind.startswith("int"):
        return np.array([2, -3, 4, 1, -5, 3], kind)
    return np.array([2.0, -1.5, 0.5, 4.0, -3.0, 0.25], kind)


# Binary methods: (a, b) -> result. OPERATORS also run with a Python number on the left
# (Python calls the tensor's reflected method); METHODS need a tensor on the left.
OPERATORS: dict[str, Callable] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
    "lt": operator.lt, "gt": operator.gt, "le": operator.le, "ge": operator.ge,
}
METHODS: dict[str, Callable] = {
    "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b),
    "eq": lambda a, b: a.eq(b), "ne": lambda a, b: a.ne(b), "fmod": lambda a, b: a.fmod(b),
    "copysign": lambda a, b: a.copysign(b), "logaddexp": lambda a, b: a.logaddexp(b),
    "div_trunc": lambda a, b: a.div(b, rounding_mode="trunc"), "div_floor": lambda a, b: a.div(b, rounding_mode="floor"),
    "isclose": lambda a, b: a.isclose(b),
}
BINARY = {**OPERATORS, **METHODS}
# elements whose value a definition leaves open: an integer divided by zero (C's quotient
# is undefined there), stored as null and not compared
SHIFTS = frozenset({"lshift", "rshift"})
DIVIDING = frozenset({"truediv", "floordiv", "mod", "fmod", "div_trunc", "div_floor"})


def binary_cases():
    for method, fn in BINARY.items():
        for left in KINDS:
            for right in KINDS:
                if left in PYTHON_KINDS and (right in PYTHON_KINDS or method not in OPERATORS):
                    continue
                yield _binary_case(method, fn, left, right)


def _binary_case(method: str, fn, left: str, right: str) -> Case:
    inputs = {}
    if left not in PYTHON_KINDS:
        inputs["a"] = _left_values(left)
    if right not in PYTHON_KINDS:
        inputs["b"] = _right_values(right)
        if method in SHIFTS and right != "bool":  # counts inside [0, 8): C leaves the others undefined
            inputs["b"] = np.abs(inputs["b"]) % 4
    a_const, b_const = PYTHON_KINDS.get(left), PYTHON_KINDS.get(right)

    def build(T, a=None, b=None):  # noqa: N803 - T is a class
        return fn(a_const if a is None else a, b_const if b is None else b)
    return Case(f"binary/{method}/{left}/{right}", inputs, build)


UNARY: dict[str, Callable] = {
    name: (lambda name: lambda x: getattr(x, name)())(name)
    for name in ("exp", "log", "log2", "exp2", "sin", "cos", "tan", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh",
                 "relu", "abs", "neg", "sign", "trunc", "floor", "ceil", "round", "square", "erf", "isnan", "isinf",
                 "isfinite", "logical_not", "bitwise_not", "gelu", "softplus", "float", "int", "bool", "half")
}
UNARY_KINDS = ("bool", "int8", "int32", "int64", "uint8", "uint32", "float16", "float32")


def unary_cases():
    for method, fn in UNARY.items():
        for kind in UNARY_KINDS:
            x = _left_values(kind)
            if kind.startswith("float"):
                x = np.array([-2.5, -0.5, 0.0, 0.5, 1.5, 3.0], kind)
            yield Case(f"unary/{method}/{kind}", {"x": x}, lambda T, x, fn=fn: fn(x))


# Axis-taking methods: (x, axis) -> result.
AXIS_METHODS: dict[str, Callable] = {
    "sum": lambda x, a: x.sum(a), "sum_keepdim": lambda x, a: x.sum(a, keepdim=True), "prod": lambda x, a: x.prod(a),
    "max": lambda x, a: x.max(a), "min": lambda x, a: x.min(a), "mean": lambda x, a: x.mean(a),
    "var": lambda x, a: x.var(a), "std": lambda x, a: x.std(a), "any": lambda x, a: x.any(a),
    "all": lambda x, a: x.all(a), "argmax": lambda x, a: x.argmax(a), "argmin": lambda x, a: x.argmin(a),
    "logsumexp": lambda x, a: x.logsumexp(a), "softmax": lambda x, a: x.softmax(a),
    "log_softmax": lambda x, a: x.log_softmax(a), "softmin": lambda x, a: x.softmin(a),
    "cumsum": lambda x, a: x.cumsum(a), "cumprod": lambda x, a: x.cumprod(a), "cummax": lambda x, a: x.cummax(a),
    "cummin": lambda x, a: x.cummin(a), "logcumsumexp": lambda x, a: x.logcumsumexp(a),
    "squeeze": lambda x, a: x.squeeze(a), "unsqueeze": lambda x, a: x.unsqueeze(a), "flip": lambda x, a: x.flip(a),
    "flatten": lambda x, a: x.flatten(a), "transpose": lambda x, a: x.transpose(a, 0),
    "sort": lambda x, a: x.sort(a), "argsort": lambda x, a: x.argsort(a), "topk": lambda x, a: x.topk(1, a),
    "split": lambda x, a: x.split(1, a), "chunk": lambda x, a: x.chunk(1, a), "roll": lambda x, a: x.roll(1, a),
    "repeat_interleave": lambda x, a: x.repeat_interleave(2, a), "normalize": lambda x, a: x.normalize(dim=a),
    "layernorm": lambda x, a: x.layernorm(a), "unflatten": lambda x, a: x.unflatten(a, (1, -1)),
    "var_mean": lambda x, a: x.var_mean(a), "std_mean": lambda x, a: x.std_mean(a),
}
AXIS_ARGS = {0: (None, 0, -1, 1, -2, 10, (0, 0), (0,), ()),
             2: (None, 0, 1, -1, -2, 2, -3, 10, (0, 0), (0, -2), (1, 0), (0, 1), ())}
AXIS_INPUTS = {0: np.array(1.5, np.float32),
               2: np.array([[0.5, -1.0, 2.0], [3.0, -0.25, 1.0]], np.float32)}


def axis_cases():
    for method, fn in AXIS_METHODS.items():
        for rank, args in AXIS_ARGS.items():
            for arg in args:
                yield Case(f"axes/{method}/{rank}d/{arg!r}".replace(" ", ""), {"x": AXIS_INPUTS[rank]},
                           lambda T, x, fn=fn, arg=arg: fn(x, arg))


def _f32(*shape, seed: int = 0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pool_then_unpool(T, x, **kwargs):
    pooled, indices = x.max_pool2d(return_indices=True, **{k: v for k, v in kwargs.items() if k != "output_size"})
    return x.max_pool2d(**{k: v for k, v in kwargs.items() if k != "output_size"}).max_unpool2d(
        indices, **kwargs), indices


X345 = np.arange(60, dtype=np.float32).reshape(3, 4, 5) * 0.5 - 7
IDX = np.array([2, -1, 0, 2, -3], np.int32)  # repeats and negatives
IDX2 = np.array([[1, -1], [0, 1]], np.int32)
IDX_COLUMN = np.array([[0], [2], [-1]], np.int32)  # broadcasts against a (k,) index
IDX_ROW = np.array([4, -5, 1], np.int32)


ISSUE_CASES = [
    # wrong values: uint8 lerp (a tensor weight takes tinygrad's fixed-point path; torch agrees)
    Case("issue/interpolate_uint8", {"x": np.array([[[[200, 100]]]], np.uint8)},
         lambda T, x: x.interpolate((1, 3), mode="linear"),
         lambda torch, x: torch.nn.functional.interpolate(x.float(), (1, 3), mode="bilinear").round().to(torch.uint8)),
    Case("issue/lerp_uint8_tensor_weight", {"a": np.array([200, 0, 255, 17, 90, 3, 128, 250], np.uint8),
                                            "b": np.array([100, 255, 0, 18, 91, 250, 1, 5], np.uint8),
                                            "w": np.array([0.5, 0.25, 0.75, 1.0, 0.3, 0.11, 0.66, 0.02], np.float32)},
         lambda T, a, b, w: a.lerp(b, w)),
    Case("issue/interpolate_uint8_image", {"x": np.random.default_rng(7).integers(0, 256, (1, 2, 3, 4)).astype(np.uint8)},
         lambda T, x: (x.interpolate((5, 7)), x.interpolate((5, 7), align_corners=True), x.interpolate((2, 9)))),
    Case("issue/lerp_uint8_number_weight", {"a": np.array([200], np.uint8), "b": np.array([100], np.uint8)},
         lambda T, a, b: a.lerp(b, 0.5)),
    Case("issue/lerp_float", {"a": _f32(5), "b": _f32(5, seed=1), "w": _f32(5, seed=2)},
         lambda T, a, b, w: (a.lerp(b, w), a.lerp(b, 0.25)),
         lambda torch, a, b, w: (torch.lerp(a, b, w), torch.lerp(a, b, 0.25))),
    # promotion
    Case("issue/maximum_bool_bool", {"a": np.array([True, False, True, False]), "b": np.array([True, True, False, False])},
         lambda T, a, b: (a.maximum(b), a.minimum(b)),
         lambda torch, a, b: (torch.maximum(a, b), torch.minimum(a, b))),
    Case("issue/minimum_int32_float32", {"i": np.array([-3, 4, 7], np.int32), "f": np.array([2.5, 4.5, -1.0], np.float32)},
         lambda T, i, f: (i.minimum(f), i.maximum(f), f.minimum(i)),
         lambda torch, i, f: (torch.minimum(i, f), torch.maximum(i, f), torch.minimum(f, i))),
    Case("issue/int_mod_floordiv_float", {"i": np.array([7, -7, 7, -7, 0], np.int32),
                                          "f": np.array([2.5, 2.5, -2.5, -2.5, 1.5], np.float32)},
         lambda T, i, f: (i % f, i // f, f % i.maximum(1), i % 3.5, i // 3.5, 3.5 % i.maximum(1)),
         lambda torch, i, f: (i % f, i // f, f % i.clamp(min=1), i % 3.5, i // 3.5, 3.5 % i.clamp(min=1))),
    # invalid input accepted
    Case("issue/scalar_cumulative_axis_10", {"s": np.array(2.5, np.float32)},
         lambda T, s: s.cumsum(10)),
    Case("issue/scalar_cumprod_axis_10", {"s": np.array(2.5, np.float32)}, lambda T, s: s.cumprod(10)),
    Case("issue/scalar_cummax_axis_10", {"s": np.array(2.5, np.float32)}, lambda T, s: s.cummax(10)),
    Case("issue/scalar_cummin_axis_10", {"s": np.array(2.5, np.float32)}, lambda T, s: s.cummin(10)),
    Case("issue/scalar_squeeze_10", {"s": np.array(2.5, np.float32)}, lambda T, s: s.squeeze(10)),
    Case("issue/flip_repeated_axis", {"x": _f32(2, 3)}, lambda T, x: x.flip((0, 0))),
    Case("issue/int_pow_negative_number", {"i": np.array([1, 2, 4], np.int32)}, lambda T, i: i ** -2),
    Case("issue/uint_shift_by_float", {"u": np.array([1, 2, 4], np.uint32)}, lambda T, u: u << 1.0),
    # valid input refused
    Case("issue/scalar_reductions_axis_0", {"s": np.array(2.5, np.float32)},
         lambda T, s: (s.sum(0), s.prod(0), s.softmax(-1), s.log_softmax(), s.logsumexp(), s.sum(-1), s.max(0)),
         lambda torch, s: (s.sum(0), s.prod(0), s.softmax(-1), s.log_softmax(0), s.logsumexp(0), s.sum(-1),
                           s.max(0).values)),
    Case("issue/exp_cos_of_integers", {"i": np.array([-1, 0, 2], np.int32), "b": np.array([True, False, True]),
                                       "u": np.array([0, 3, 200], np.uint8)},
         lambda T, i, b, u: (i.exp(), i.cos(), b.exp(), u.cos(), i.sin(), i.log(), i.sqrt()),
         lambda torch, i, b, u: (i.exp(), i.cos(), b.exp(), u.cos(), i.sin(), i.log(), i.sqrt())),
    Case("issue/arange_dtypes", {},
         lambda T: (T.arange(5), T.arange(2 ** 31 - 2, 2 ** 31 + 1), T.arange(0, 2 ** 33, 2 ** 31), T.arange(-(2 ** 31) - 1, -(2 ** 31) + 1),
                    T.arange(1.5), T.arange(0, 3, 0.5), T.arange(5, 0, -2), T.arange(3, dtype="uint8"),
                    T.arange(2, 5, dtype="float16"))),
    Case("issue/arange_overflow", {}, lambda T: T.arange(250, 260, dtype="uint8")),
    Case("issue/or_with_32_bits", {"i": np.array([1, -2, 0], np.int32), "u": np.array([1, 200, 0], np.uint8)},
         lambda T, i, u: (i | 0xFFFFFFFF, i + 2 ** 32 + 5, u + 300, u * -1, i & (2 ** 33 - 1), u ^ 0x1FF)),
    Case("issue/conv2d_negative_padding", {"x": _f32(1, 2, 5, 6), "w": _f32(3, 2, 2, 2, seed=1)},
         lambda T, x, w: (x.conv2d(w, padding=-1), x.conv2d(w, padding=(-1, 1, 0, -1)), x.conv2d(w, padding=(1, -1))),
         lambda torch, x, w: (torch.nn.functional.conv2d(x[:, :, 1:-1, 1:-1], w),
                              torch.nn.functional.conv2d(torch.nn.functional.pad(x, (-1, 1, 0, -1)), w),
                              torch.nn.functional.conv2d(torch.nn.functional.pad(x, (-1, -1, 1, 1)), w))),
    Case("issue/reshape_with_none", {"x": _f32(2, 3, 4)},
         lambda T, x: (x.reshape(None, -1), x.reshape(None, 12), x.reshape(None, None, 2, 2), x.reshape((None, 4, 3)))),
    Case("issue/unfold_size_0", {"x": np.arange(5, dtype=np.float32)},
         lambda T, x: (x.unfold(0, 0, 1), x.unfold(0, 0, 2), x.unfold(0, 5, 1), x.unfold(-1, 2, 2)),
         lambda torch, x: (x.unfold(0, 0, 1), x.unfold(0, 0, 2), x.unfold(0, 5, 1), x.unfold(-1, 2, 2))),
    # missing: tensor and list indexing (repeats, negatives, out of range, broadcast index shapes)
    Case("issue/index_by_tensor", {"x": X345, "i": IDX}, lambda T, x, i: (x[i], x[i, 1], x[:, i.minimum(3)], x[1:, None, i.minimum(3)]),
         lambda torch, x, i: (x[i], x[i, 1], x[:, i.minimum(torch.tensor(3, dtype=torch.int32))],
                              x[1:, None, i.minimum(torch.tensor(3, dtype=torch.int32))])),
    Case("issue/index_by_two_tensors_apart", {"x": X345, "i": IDX2, "j": np.array([[4, -5], [0, 3]], np.int32)},
         lambda T, x, i, j: x[i, :, j], lambda torch, x, i, j: x[i, :, j]),
    Case("issue/index_by_two_tensors_together", {"x": X345, "i": IDX_COLUMN, "j": IDX_ROW.clip(-4, 3)},
         lambda T, x, i, j: (x[i, j], x[:, i.minimum(3), j]),
         lambda torch, x, i, j: (x[i, j], x[:, i.clamp(max=3), j])),
    Case("issue/index_by_broadcast_tensors_apart", {"x": X345, "i": IDX_COLUMN, "j": IDX_ROW},
         lambda T, x, i, j: x[i, 1:3, j], lambda torch, x, i, j: x[i, 1:3, j]),
    Case("issue/index_by_list", {"x": X345},
         lambda T, x: (x[[0, -1, 0]], x[[[0, 1], [2, -3]]], x[:, [3, 3, -4]], x[[2, 0], ..., [1, -1]], x[[1], 2]),
         lambda torch, x: (x[[0, -1, 0]], x[torch.tensor([[0, 1], [2, -3]])], x[:, [3, 3, -4]], x[[2, 0], ..., [1, -1]],
                           x[[1], 2])),
    Case("issue/index_out_of_range_is_zero", {"x": np.array([1.0, 2.0, 3.0], np.float32), "i": np.array([4, 3, 2, -1], np.int32)},
         lambda T, x, i: x[i]),
    Case("issue/index_int_tensor_values", {"x": np.arange(12, dtype=np.int32).reshape(3, 4) - 5,
                                           "i": np.array([2, 0, 2], np.int32)},
         lambda T, x, i: (x[i], x[i, i]), lambda torch, x, i: (x[i], x[i, i])),
    Case("issue/isclose", {"a": np.array([1.0, 1.0, np.nan, np.inf, -np.inf, 1e-9, 100.0, np.inf], np.float32),
                           "b": np.array([1.0 + 1e-6, 1.1, np.nan, np.inf, np.inf, 0.0, 100.001, np.nan], np.float32),
                           "i": np.array([1, 2, 3, 4, 5, 6, 7, 8], np.int32)},
         lambda T, a, b, i: (a.isclose(b), a.isclose(b, equal_nan=True), a.isclose(b, rtol=0.01, atol=0.5), i.isclose(a),
                             a.isclose(1.0), i.isclose(i)),
         lambda torch, a, b, i: (a.isclose(b), a.isclose(b, equal_nan=True), a.isclose(b, rtol=0.01, atol=0.5),
                                 i.float().isclose(a), a.isclose(torch.ones_like(a)), i.isclose(i))),
    Case("issue/sum_prod_dtype", {"i": np.array([100, 100, 100, -7], np.int8), "h": np.array([60000, 60000, -1.5], np.float16),
                                  "f": _f32(2, 3), "b": np.array([True, True, False])},
         lambda T, i, h, f, b: (i.sum(dtype="int8"), i.sum(dtype="int64"), i.sum(), h.sum(), h.sum(dtype="float16"),
                                f.sum(1, dtype="float64"), i.prod(dtype="int32"), i.prod(), f.prod(0, dtype="float16"),
                                b.sum(dtype="bool"), b.prod(dtype="int32"), i.sum(0, keepdim=True, dtype="float32"))),
    Case("issue/stack_a_sequence", {"a": _f32(2, 3), "b": _f32(2, 3, seed=1)},
         lambda T, a, b: (T.stack([a, b]), T.stack((a, b, a), dim=1), T.stack([a], dim=-1), a.stack(b, dim=2)),
         lambda torch, a, b: (torch.stack([a, b]), torch.stack((a, b, a), dim=1), torch.stack([a], dim=-1),
                              torch.stack([a, b], dim=2))),
    Case("issue/sdpa_gqa", {"q": _f32(2, 4, 3, 2), "k": _f32(2, 2, 3, 2, seed=1), "v": _f32(2, 2, 3, 2, seed=2)},
         lambda T, q, k, v: (q.scaled_dot_product_attention(k, v, enable_gqa=True),
                             q.scaled_dot_product_attention(k, v, is_causal=True, enable_gqa=True)),
         lambda torch, q, k, v: (torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                 torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))),
    Case("issue/max_unpool2d", {"x": _f32(2, 3, 4, 6)}, lambda T, x: _pool_then_unpool(T, x)),
    Case("issue/max_unpool2d_stride_padding", {"x": _f32(1, 2, 5, 5)},
         lambda T, x: _pool_then_unpool(T, x, kernel_size=(3, 3), stride=2, padding=1)),
    Case("issue/max_unpool2d_output_size", {"x": _f32(1, 1, 5, 5)},
         lambda T, x: _pool_then_unpool(T, x, kernel_size=(2, 2), output_size=(5, 5))),
    Case("issue/masked_select_with_size", {"x": _f32(3, 3), "m": np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]], bool)},
         lambda T, x, m: (x.masked_select(m, size=6, fill_value=-1.0), x.masked_select(m, size=2)),
         ),
    Case("issue/nonzero_with_size", {"x": np.array([[0, 2, 0], [3, 0, 4]], np.int32)},
         lambda T, x: (x.nonzero(size=5, fill_value=-1), x.nonzero(size=2))),
    Case("issue/nonzero_value_dependent", {"x": np.array([[0, 2, 0], [3, 0, 4]], np.int32)}, lambda T, x: x.nonzero()),
    Case("issue/masked_select_value_dependent", {"x": _f32(3), "m": np.array([True, False, True])},
         lambda T, x, m: x.masked_select(m)),
]


def all_cases():
    yield from ISSUE_CASES
    yield from binary_cases()
    yield from unary_cases()
    yield from axis_cases()


def flat_outputs(built):
    """A case's results in order, tuples and lists flattened (split, chunk, var_mean)."""
    if isinstance(built, (tuple, list)):
        for item in built:
            yield from flat_outputs(item)
    else:
        yield built
