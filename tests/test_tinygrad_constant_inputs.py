"""Named tensors that tinygrad 0.14 holds as constants, against the real tinygrad (CPU and
its PYTHON interpreter) and torch.

tinygrad makes a 0-d tensor of a number or of a 0-d numpy array a CONST node, hash-consed
with every equal constant of the program (the -1 and 1 that abs and sign make, relu's 0):
the export mapped that node to the input, so the file computed |x| as x * x (the loss of
`(x.abs() * w).sum()` exported at x = -1 was 18 at x = -3, not 6; its gradient at the export
point -5, not -2.5). Such an input is now refused with one line saying why and what to
write instead; the workarounds it names (Tensor.full, a 1-element tensor reshaped) are
checked here to give tinygrad's and torch's values and gradients at points other than the
export point. Tensors with storage (Tensor.full, ones, zeros) are never merged."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from _tinygrad_usable import import_tinygrad, unusable_reason
tinygrad = import_tinygrad()

import torch  # noqa: E402
from tinygrad import Tensor, dtypes  # noqa: E402
from tinygrad.nn.state import get_state_dict  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.tinygrad import ExportError, export  # noqa: E402

_UNUSABLE = unusable_reason()
DEVICES = ["PYTHON"] + (["CPU"] if _UNUSABLE is None else [])

# name -> f(x), written once for tinygrad and torch (where: the module's own where);
# the loss is sum(f(x) * w) with w = [0.5, 2]: the repro is "abs"
PROGRAMS = {
    "abs": lambda x, where: x.abs(),
    "sign": lambda x, where: x.sign() + x,
    "relu": lambda x, where: x.relu(),
    "leaky where": lambda x, where: where(x > 0, x, x * 0.5),
    "where 2": lambda x, where: where(x < 2, x * 2, x - 1),
}
EXPORTED_AT = [-1.0, 1.0, 0.0, 0.5, 2.0]           # equal to the programs' constants
POINTS = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0]  # where the files are checked
W = [0.5, 2.0]
DTYPES = {"float32": (np.float32, dtypes.float32, torch.float32), "float64": (np.float64, dtypes.float64, torch.float64)}


def _tinygrad_where(c, a, b):
    return c.where(a, b)


def _loss(program, x, w, where):
    return (PROGRAMS[program](x, where) * w).sum()


@functools.cache
def _tinygrad_truth(program: str, dtype: str, device: str) -> tuple:
    """tinygrad's loss and d loss/dx at each of POINTS (one x per point, one run)."""
    np_dtype, tg_dtype, _ = DTYPES[dtype]
    x = Tensor(np.array(POINTS, np_dtype), device=device)
    w = Tensor(np.array(W, np_dtype), device=device)
    losses = (PROGRAMS[program](x, _tinygrad_where).reshape(-1, 1) * w).sum(1)
    (grad,) = losses.sum().gradient(x)
    return losses.numpy(), grad.numpy()


@functools.cache
def _torch_truth(program: str, dtype: str) -> tuple:
    _, _, torch_dtype = DTYPES[dtype]
    x = torch.tensor(POINTS, dtype=torch_dtype, requires_grad=True)
    losses = (PROGRAMS[program](x, torch.where).reshape(-1, 1) * torch.tensor(W, dtype=torch_dtype)).sum(1)
    losses.sum().backward()
    return losses.detach().numpy(), x.grad.numpy()


def _file_values(exported, dtype: str) -> tuple:
    """The exported graph's loss and gradient with respect to x at each of POINTS."""
    np_dtype = DTYPES[dtype][0]
    grad_graph, _ = differentiate(exported.graph, ["x"])
    losses, grads = [], []
    for point in POINTS:
        values = dict(exported.values, x=np.array(point, np_dtype))
        losses.append(evaluate_graph(exported.graph, values)["loss"])
        grads.append(evaluate_graph(grad_graph, values)["grad_x"])
    return np.array(losses, np_dtype), np.array(grads, np_dtype)


def _export(program: str, x, dtype: str, device: str):
    w = Tensor(np.array(W, DTYPES[dtype][0]), device=device)
    return export({"loss": _loss(program, x, w, _tinygrad_where)}, {"x": x, "w": w})


def _expected_refusal(name: str, value: str, dtype: str, shared: str = "every") -> str:
    keyword = f", dtype=dtypes.{dtype}" if dtype != "weakfloat" else ""
    return (f"input {name!r}: tinygrad holds this 0-d tensor as the {dtype} constant {value}, the one node of {shared} "
            f"equal constant of the program (the -1 and 1 of abs and sign, the 0 of relu), so its uses cannot be told "
            f"from theirs; give it storage: Tensor.full((), {value}{keyword}) or Tensor([{value}]{keyword}).reshape(())")


def _refused(match: str):
    return pytest.raises(ExportError, match="^" + re.escape(match) + "$")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", EXPORTED_AT)
@pytest.mark.parametrize("program", PROGRAMS)
def test_a_0d_input_of_a_number_is_refused_saying_why_and_what_to_write(program, value, dtype):
    np_dtype, tg_dtype, _ = DTYPES[dtype]
    expected = _expected_refusal("x", repr(value), dtype)
    for x in (Tensor(np.array(value, np_dtype)), Tensor(value, dtype=tg_dtype),
              Tensor(np.array(value, np_dtype)).contiguous().realize()):  # realize keeps it the CONST
        assert x.uop.op.name == "CONST"
        with _refused(expected):
            _export(program, x, dtype, "CPU")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", EXPORTED_AT)
@pytest.mark.parametrize("program", PROGRAMS)
def test_the_workarounds_named_give_tinygrads_and_torchs_values_and_gradients(program, value, dtype):
    """Each workaround the refusal writes, evaluated as written, on each device: the file's
    loss and gradient at every point equal tinygrad's there and torch's, bit for bit."""
    np_dtype = DTYPES[dtype][0]
    message = _expected_refusal("x", repr(value), dtype)
    workarounds = message.split("give it storage: ")[1].split(" or ")
    assert len(workarounds) == 2
    torch_truth = _torch_truth(program, dtype)
    for device in DEVICES:
        for written in workarounds:
            x = eval(written, {"Tensor": Tensor, "dtypes": dtypes}).to(device)  # noqa: S307 - the message's own code
            exported = _export(program, x, dtype, device)
            assert exported.values["x"].dtype == np_dtype and exported.values["x"].tolist() == value
            got = _file_values(exported, dtype)
            for truth, whose in ((_tinygrad_truth(program, dtype, device), f"tinygrad {device}"), (torch_truth, "torch")):
                for what, ours, theirs in zip(("loss", "grad_x"), got, truth):
                    np.testing.assert_array_equal(ours, theirs, err_msg=f"{written} on {device}: {what} vs {whose}")


def test_the_repro_at_minus_one_gives_6_at_minus_3_and_the_gradient_minus_2_5():
    """The tester's numbers, with Tensor.full: before the fix (Tensor(np.array(-1.0)))
    the file gave 18 and -5.0."""
    x = Tensor.full((), -1.0, dtype=dtypes.float32)
    exported = _export("abs", x, "float32", "CPU")
    at_minus_3 = dict(exported.values, x=np.array(-3.0, np.float32), w=np.ones(2, np.float32))
    assert evaluate_graph(exported.graph, at_minus_3)["loss"] == 6.0
    grad_graph, _ = differentiate(exported.graph, ["x"])
    assert evaluate_graph(grad_graph, exported.values)["grad_x"] == -2.5


def test_a_value_no_constant_equals_is_refused_too_as_tinygrad_gives_no_way_to_tell():
    """x = 0.75 with abs: no constant of abs is 0.75, and yet the node cannot be kept: a
    program's float32 constant 0.75 (`Tensor(0.75, dtype=dtypes.float32)`, or one made by
    const_like as abs makes its ±1) is the node x is, and `x * c` the very node `x * x` is,
    so no graph tells the two apart. (A Python 0.75 is a weak constant, another node.)"""
    x = Tensor(np.array(0.75, np.float32))
    assert (x * Tensor(0.75, dtype=dtypes.float32)).uop is (x * x).uop
    assert (x * 0.75).uop is not (x * x).uop
    with _refused(_expected_refusal("x", "0.75", "float32")):
        _export("abs", x, "float32", "CPU")


def test_special_values_are_written_as_python_the_workaround_runs():
    for value, text in ((-0.0, "-0.0"), (float("nan"), "float('nan')"), (float("-inf"), "float('-inf')")):
        x = Tensor(np.array(value, np.float64))
        with _refused(_expected_refusal("x", text, "float64")):
            export({"y": x * 3}, {"x": x})
        x = eval(f"Tensor.full((), {text}, dtype=dtypes.float64)", {"Tensor": Tensor, "dtypes": dtypes})  # noqa: S307
        exported = export({"y": x * 3}, {"x": x})
        assert exported.graph.input_names == ["x"]
        assert exported.values["x"].tobytes() == np.array(value, np.float64).tobytes()
        assert evaluate_graph(exported.graph, {"x": np.array(-2.0)})["y"] == -6.0


def test_a_python_number_input_names_its_weak_dtype_and_the_default_dtype_workaround():
    x = Tensor(-1.0)
    with _refused(_expected_refusal("x", "-1.0", "weakfloat")):
        export({"y": x.abs()}, {"x": x})
    exported = export({"y": (x := Tensor.full((), -1.0)).abs()}, {"x": x})
    assert exported.values["x"].dtype == np.float32
    assert evaluate_graph(exported.graph, {"x": np.array(-3.0, np.float32)})["y"] == 3.0


def test_an_int_and_a_bool_0d_input_are_refused_as_their_constants():
    i = Tensor(np.array(1, np.int32))
    with _refused(_expected_refusal("i", "1", "int32")):
        export({"y": i.abs() + i}, {"i": i})
    b = Tensor(np.array(True))
    with _refused(_expected_refusal("b", "True", "bool")):
        export({"y": b.where(Tensor([1.0, 2.0]), 0.0)}, {"b": b})


def test_two_0d_inputs_of_one_value_are_one_node_and_refused_naming_both():
    a, b = Tensor(np.array(1.0, np.float32)), Tensor(np.array(1.0, np.float32))
    assert a.uop is b.uop
    with _refused(_expected_refusal("b", "1.0", "float32", shared="input 'a' and every")):
        export({"y": a * 2 + b}, {"a": a, "b": b})
    # with storage they are two inputs, each with its own gradient
    a, b = Tensor.full((), 1.0), Tensor.full((), 1.0)
    exported = export({"y": a * 2 + b * 3}, {"a": a, "b": b})
    grads, _ = differentiate(exported.graph, ["a", "b"])
    got = evaluate_graph(grads, {"a": np.array(5.0, np.float32), "b": np.array(7.0, np.float32)})
    assert (got["grad_a"], got["grad_b"]) == (2.0, 3.0)


def test_a_state_dict_scalar_on_a_named_inputs_constant_is_refused_not_called_tied():
    """Two tensors tinygrad merged are not tied weights: `diff --wrt scale` must not say
    "the same tensor as x", even where no output reaches them."""
    x, scale = Tensor(np.array(2.0, np.float32)), Tensor(np.array(2.0, np.float32))
    w = Tensor(np.array(W, np.float32))
    with _refused(_expected_refusal("scale", "2.0", "float32", shared="input 'x' and every")):
        export({"y": w.sum()}, {"x": x, "w": w}, {"scale": scale})


def test_an_input_no_output_reaches_is_kept_unless_the_program_reaches_its_constant():
    """Unreached, the node is no constant of the program either: the input is kept, unused,
    exactly. Reached by the program's own equal constant (abs's -1 of w), the input may not
    be in the file at all, and yet is refused: the node cannot say whose it is."""
    w = Tensor(np.array(W, np.float32))
    x = Tensor(np.array(0.25, np.float32))
    exported = export({"y": (w.abs() * 3).sum()}, {"x": x, "w": w})
    assert exported.graph.input_names == ["x", "w"] and exported.values["x"] == np.float32(0.25)
    got = evaluate_graph(exported.graph, {"x": np.array(9.0, np.float32), "w": np.array([-1.0, 2.0], np.float32)})
    assert got["y"] == 9.0
    x = Tensor(np.array(-1.0, np.float32))
    with _refused(_expected_refusal("x", "-1.0", "float32")):
        export({"y": (w.abs() * 3).sum()}, {"x": x, "w": w})


class _Scaled:
    def __init__(self, scale):
        self.weight = Tensor(np.array(W, np.float32))
        self.scale = scale

    def __call__(self, x):
        return (x * self.weight).sum() * self.scale


def test_a_state_dict_scalar_held_as_a_constant_is_refused_where_reached_and_dropped_where_not():
    model = _Scaled(Tensor(np.array(2.0, np.float32)))
    x = Tensor(np.array([1.0, -1.0], np.float32))
    with _refused(_expected_refusal("scale", "2.0", "float32")):
        export({"y": model(x)}, {"x": x}, get_state_dict(model))
    exported = export({"y": (x * model.weight).sum()}, {"x": x}, get_state_dict(model))
    assert exported.graph.input_names == ["x", "weight"]
    model = _Scaled(Tensor.full((), 2.0))
    exported = export({"y": model(x)}, {"x": x}, get_state_dict(model))
    grads, _ = differentiate(exported.graph, ["scale"])
    got = evaluate_graph(grads, dict(exported.values, scale=np.array(5.0, np.float32)))
    assert got["grad_scale"] == np.float32(0.5 - 2.0)


def test_a_computation_on_constants_alone_is_refused_and_a_numpy_copy_is_its_own():
    """Tensor.arange is built from constants only, the node of the program's own arange
    (a position index, a mask)."""
    pos = Tensor.arange(4).float()
    program = lambda p: (p * 2 + Tensor.arange(4).float()).sum()  # noqa: E731
    assert Tensor.arange(4).float().uop is pos.uop
    with _refused("input 'pos': tinygrad holds this tensor as a computation on constants alone (as Tensor.arange "
                  "and Tensor.eye make one: no storage below it), the one node of every equal computation of the "
                  "program, so its uses cannot be told from theirs; give it storage (realize() keeps it a "
                  "computation): Tensor(pos.numpy())"):
        export({"y": program(pos)}, {"pos": pos})
    with _refused("input 's': tinygrad holds this tensor as a computation on constants alone (as Tensor.arange "
                  "and Tensor.eye make one: no storage below it), the one node of every equal computation of the "
                  "program, so its uses cannot be told from theirs; give it storage (realize() keeps it a "
                  "computation): Tensor(s.numpy().reshape(1)).reshape(())"):
        s = Tensor(np.array(2.0, np.float32)).cast(dtypes.float64)
        export({"y": s * 3}, {"s": s})
    pos = Tensor(pos.numpy())
    exported = export({"y": program(pos)}, {"pos": pos})
    grads, _ = differentiate(exported.graph, ["pos"])
    ones = np.ones(4, np.float32)
    assert evaluate_graph(exported.graph, {"pos": ones})["y"] == 2 * 4 + 6
    np.testing.assert_array_equal(evaluate_graph(grads, {"pos": ones})["grad_pos"], 2 * ones)


# storage-backed tensors whose value equals the program's constants: never merged
FILLED = {
    "full((3,), 2.0)": (lambda: Tensor.full((3,), 2.0), lambda x: x * 2 + (x - 2).abs()),
    "ones(3)": (lambda: Tensor.ones(3), lambda x: x.abs() * x.sign() + 1),
    "zeros(3)": (lambda: Tensor.zeros(3), lambda x: x.relu() + x * 0),
    "full((), 0.0)": (lambda: Tensor.full((), 0.0), lambda x: x.relu() + x * 0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("filled", FILLED)
def test_a_filled_tensor_has_storage_and_is_its_own_input(filled, device):
    make, program = FILLED[filled]
    x = make().to(device)
    assert x.uop.op.name != "CONST"
    exported = export({"y": program(x).sum()}, {"x": x})
    grads, _ = differentiate(exported.graph, ["x"])
    for point in (-3.0, -1.0, 0.5, 2.0):
        at = np.full(x.shape, point, np.float32)
        theirs = Tensor(at, device=device)
        if not x.shape:
            theirs = Tensor(at.reshape(1), device=device).reshape(())
        y = program(theirs).sum()
        (their_grad,) = y.gradient(theirs)
        xt = torch.tensor(at, requires_grad=True)
        program(xt).sum().backward()
        ours = evaluate_graph(exported.graph, {"x": at})["y"]
        assert ours == y.numpy() == program(torch.tensor(at)).sum().item(), (point, ours)
        np.testing.assert_array_equal(evaluate_graph(grads, {"x": at})["grad_x"], their_grad.numpy())
        np.testing.assert_array_equal(evaluate_graph(grads, {"x": at})["grad_x"], xt.grad.numpy())
