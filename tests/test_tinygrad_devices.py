"""`uopgrad eval --backend tinygrad` on every device tinygrad has here: PYTHON (tinygrad's
own interpreter, whose renderer has no FDIV) and CPU. Zoo models are joined into one
graph (inputs renamed `<model>.<input>`, the losses summed: no model shares an input, so
each gradient is its own model's), differentiated by the installed `uopgrad diff`, and
evaluated once per device; every gradient must be tinygrad's own `Tensor.gradient`.

Cost (measured on this project's two-core machine, other jobs running): tinygrad lowers
each kernel of the gradient graph on both devices, about 10-20 s per model and device.
`make test` runs the models of DEFAULT (the ones whose gradients divide, FDIV); the whole
zoo (19 models, about 7 min on PYTHON and 11 min on CPU as one graph) runs with --runslow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _tinygrad_usable import import_tinygrad
tinygrad = import_tinygrad()

from tinygrad import Device, Tensor  # noqa: E402

from tinygrad_zoo import ZOO  # noqa: E402
from uopcli import Graph, Ops, UOp, load  # noqa: E402
from uopcli.backends.numpy import evaluate_graph  # noqa: E402
from uopcli import save as save_uop  # noqa: E402
from uopcli.core.substitute import substitute  # noqa: E402
from uopcli.interop.tinygrad import evaluate_on_tinygrad, export  # noqa: E402

BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=BIN) or shutil.which("uopgrad")
TOLERANCE = 1e-5   # of each gradient's largest magnitude
ZERO_SHARE = 1e-4  # a gradient under this share of its model's largest is zero up to rounding
DEFAULT = ("layernorm_gelu", "cross_entropy_smoothing")


def _cpu_unusable() -> str | None:
    try:
        Tensor([1.0, 2.0], device="CPU").add(1).numpy()
    except Exception as e:  # noqa: BLE001 - any reason tinygrad gives is the skip's reason
        return f"tinygrad's CPU device cannot run here ({type(e).__name__}: {e}); it needs clang"
    return None


def _joined(names, folder):
    """The models' losses as one graph `total`, its inputs' values, and tinygrad's gradients
    by output name (`grad_<model>.<input>`)."""
    total, inputs, values, wrt, pending = None, [], {}, [], []
    for name in names:
        case = ZOO[name]()
        exported = export({"loss": case.outputs["loss"]}, case.inputs, case.state_dict)
        named = {**case.inputs, **case.state_dict}
        floats = [p.arg for p in exported.graph.inputs if p.dtype.is_float and p.arg in named]
        pending.append((name, floats, case.outputs["loss"].gradient(*(named[n] for n in floats))))
        renamed = {p: UOp.param(f"{name}.{p.arg}", p.shape, p.dtype) for p in exported.graph.inputs}
        loss = substitute([exported.graph.outputs["loss"]], renamed, keep_meta=True)[0]
        total = loss if total is None else total + loss
        inputs += renamed.values()
        values.update((f"{name}.{k}", v) for k, v in exported.values.items())
        wrt += [f"{name}.{n}" for n in floats]
    Tensor.realize(*(g for _, _, grads in pending for g in grads))
    expected = {name: {f"grad_{name}.{n}": g.numpy() for n, g in zip(floats, grads)} for name, floats, grads in pending}
    save_uop(Graph({"total": total}, inputs), folder / "zoo.uop")
    np.savez(folder / "zoo.npz", **values)
    done = subprocess.run([UOPGRAD, "diff", "zoo.uop", "--wrt", ",".join(wrt), "--of", "total", "-o", "zoo-grad.uop"],
                          cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return expected


def _eval_on(folder, device: str) -> dict:
    """`uopgrad eval --backend tinygrad` on `device`: CPU by --device, PYTHON by tinygrad's
    own DEV (the default a user without clang sets)."""
    args, env = (["--device", device], {}) if device == "CPU" else ([], {"DEV": device})
    done = subprocess.run([UOPGRAD, "eval", "zoo-grad.uop", "-i", "zoo.npz", "--backend", "tinygrad", *args,
                           "-o", f"zoo-{device}.npz"], cwd=folder, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **env})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    with np.load(folder / f"zoo-{device}.npz") as results:
        return {k: results[k] for k in results.files}


def _assert_gradients(results: dict, expected: dict, device: str) -> None:
    for name, gradients in expected.items():
        largest = max(float(np.max(np.abs(g))) for g in gradients.values())
        for key, theirs in gradients.items():
            ours = results[key]
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, key
            scale = float(np.max(np.abs(theirs)))
            floor = largest if scale < ZERO_SHARE * largest else scale
            error = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
            assert error <= TOLERANCE * floor, f"{device}: {key}: max error {error:.3g} > {TOLERANCE} * {floor:.3g}"


def _run_zoo(names, folder):
    assert UOPGRAD is not None, "the uopgrad console script is not installed"
    expected = _joined(names, folder)
    assert load(folder / "zoo-grad.uop").outputs  # the gradient graph is there
    devices = ["PYTHON"] + ([] if _cpu_unusable() else ["CPU"])
    for device in devices:
        _assert_gradients(_eval_on(folder, device), expected, device)
    return devices


def test_models_that_divide_run_on_python_and_cpu(tmp_path):
    """The models whose gradient graphs hold FDIV (KeyError: Ops.FDIV on PYTHON before)."""
    devices = _run_zoo(DEFAULT, tmp_path)
    graph_ops = {node.op for node in load(tmp_path / "zoo-grad.uop").nodes()}
    assert "FDIV" in graph_ops and "PYTHON" in devices


@pytest.mark.slow
def test_the_whole_zoo_runs_on_python_and_cpu(tmp_path):
    assert len(ZOO) >= 19
    _run_zoo(list(ZOO), tmp_path)


def test_division_without_fdiv_is_correctly_rounded():
    """On PYTHON (no FDIV in its renderer) float32 a / b is the correctly rounded quotient,
    bit for bit as numpy's, edge values included; float64 within one ulp."""
    assert tinygrad.uop.ops.Ops.FDIV not in Device["PYTHON"].renderer.code_for_op
    rng = np.random.default_rng(0)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38, 1.0, -7.0], np.float32)
    a = np.concatenate([edges.repeat(len(edges)), (rng.standard_normal(400) * 10 ** rng.uniform(-30, 30, 400))])
    b = np.concatenate([np.tile(edges, len(edges)), (rng.standard_normal(400) * 10 ** rng.uniform(-30, 30, 400))])
    a, b = a.astype(np.float32), b.astype(np.float32)
    x, y = UOp.param("a", (a.size,)), UOp.param("b", (a.size,))
    graph = Graph({"q32": x / y, "q64": x.cast("float64") / y.cast("float64")}, [x, y])
    with np.errstate(all="ignore"):
        want32 = a / b
        want64 = a.astype(np.float64) / b.astype(np.float64)
    got = evaluate_on_tinygrad(graph, {"a": a, "b": b}, "PYTHON")
    np.testing.assert_array_equal(got["q32"].view(np.uint32)[~np.isnan(want32)],
                                  want32.view(np.uint32)[~np.isnan(want32)])
    assert np.array_equal(np.isnan(got["q32"]), np.isnan(want32))
    finite = np.isfinite(want64)
    ulps = np.abs(got["q64"][finite] - want64[finite]) / np.spacing(np.abs(want64[finite]))
    assert ulps.max() <= 1 and np.array_equal(got["q64"][~finite], want64[~finite], equal_nan=True)


def test_float64_sine_keeps_its_digits():
    """tinygrad computes SIN itself where the renderer has none (CPU): in float64 its
    reduction past |x| = 30 lost digits (sin(72.3) off by 3e-8, sin(1e5) by 1e-5). Float64
    SIN is reduced by 2 pi first: within a few float64 eps of np.sin up to |x| = 1e8, on
    both devices; -0.0, inf and nan as np.sin gives them."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1, 1, 300) * 10.0 ** rng.integers(0, 9, 300),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -5e-324, np.pi, 2 * np.pi, 1e8]])
    node = UOp.param("x", (x.size,), "float64")
    graph = Graph({"s": node.sin()}, [node])
    with np.errstate(invalid="ignore"):
        want = np.sin(x)
    devices = ["PYTHON"] + ([] if _cpu_unusable() else ["CPU"])
    for device in devices:
        got = evaluate_on_tinygrad(graph, {"x": x}, device)["s"]
        assert np.array_equal(np.isnan(got), np.isnan(want)), device
        finite = ~np.isnan(want)
        assert np.abs(got[finite] - want[finite]).max() <= 4 * np.finfo(np.float64).eps, device
        assert np.array_equal(np.signbit(got[:-5][x[:-5] == 0]), np.signbit(want[:-5][x[:-5] == 0])), device


def test_integer_power_of_a_tensor_exponent_is_exact():
    """An integer POW whose exponent is a tensor: tinygrad 0.14 computes it through floats,
    which fails to compile on CPU and to run on PYTHON. It is square and multiply here, bit
    for bit as the numpy evaluator's C-style power: products wrap (3^5 in int8 is -13), a
    negative exponent gives 1/a^|b| truncated (-1 to an odd negative power is -1), 0^0 is 1,
    and an exponent's every bit counts (2 to the highest bit alone is 0, not 1)."""
    outputs, inputs, values = {}, [], {}
    for name in ("int8", "int32", "int64", "uint8", "uint64"):
        info = np.iinfo(name)
        bases = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min] + ([-1, -2, -3] if info.min else [])
        top = (info.max >> 1) + 1  # the highest bit an exponent can have (2^b is 0 from b = bits on)
        exponents = [0, 1, 2, 3, 5, 31, 63, top, info.max] + ([-1, -2, -3, info.min] if info.min else [])
        a = np.array([x for x in bases for _ in exponents], name)
        b = np.array([e for _ in bases for e in exponents], name)
        x, y = UOp.param(f"a_{name}", a.shape, name), UOp.param(f"b_{name}", b.shape, name)
        outputs[name] = UOp.make(Ops.POW, x.dtype, (x, y))
        inputs += [x, y]
        values.update({f"a_{name}": a, f"b_{name}": b})
    for exponent in (0, 1, 5, 62):  # a constant exponent: only its own bits are walked
        outputs[f"int8^{exponent}"] = UOp.make(Ops.POW, inputs[0].dtype, (inputs[0], UOp.const(exponent, "int8")))
        outputs[f"uint64^{exponent}"] = UOp.make(Ops.POW, inputs[-2].dtype, (inputs[-2], UOp.const(exponent, "uint64")))
    graph = Graph(outputs, inputs)
    want = evaluate_graph(graph, values)
    assert list(want["int8^5"][values["a_int8"] == 3]) == [-13] * 13 and (want["uint64^0"] == 1).all()
    a8, b8 = values["a_int8"], values["b_int8"]
    assert want["int8"][(a8 == 3) & (b8 == 5)] == -13 and want["int8"][(a8 == -1) & (b8 == -3)] == -1
    for device in ["PYTHON"] + ([] if _cpu_unusable() else ["CPU"]):
        got = evaluate_on_tinygrad(graph, values, device)
        for name in outputs:
            assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), (device, name)


def test_division_on_a_device_without_float64_stays_in_its_dtype(monkeypatch):
    """A device without float64 (Metal, WebGPU; none here, so PYTHON is told it lacks it)
    divides without FDIV in the operands' dtype, a * (1/b) rounded twice: a float64 cast
    there would ask the device for a dtype it does not have."""
    from uopcli.interop.tinygrad import backend
    has_dtype = backend._Runner.has_dtype
    monkeypatch.setattr(backend._Runner, "has_dtype",
                        lambda self, dtype: dtype != tinygrad.dtypes.float64 and has_dtype(self, dtype))
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(500) * 10.0 ** rng.integers(-5, 5, 500)).astype(np.float32)
    b = (rng.standard_normal(500) * 10.0 ** rng.integers(-5, 5, 500)).astype(np.float32)
    x, y = UOp.param("a", (a.size,)), UOp.param("b", (a.size,))
    got = evaluate_on_tinygrad(Graph({"q": x / y}, [x, y]), {"a": a, "b": b}, "PYTHON")["q"]
    twice = a * (np.float32(1) / b)
    assert np.count_nonzero(twice != a / b) > 0  # (the values tell the two ways apart)
    assert got.tobytes() == twice.tobytes()


def test_float32_sine_and_the_python_devices_are_tinygrads_own():
    """Only float64 on a renderer without SIN (CPU) is reduced by 2 pi first: float32 is
    tinygrad's own sine (within 8 float32 eps of np.sin up to |x| = 1e5, 4.8 measured; reduced with the
    float64 parts in float32 arithmetic it was 2e4 eps off), and on PYTHON, whose renderer
    has SIN, float64 is math.sin bit for bit."""
    rng = np.random.default_rng(2)
    x32 = (rng.uniform(-1, 1, 300) * 10.0 ** rng.integers(0, 6, 300)).astype(np.float32)
    x64 = rng.uniform(-1, 1, 300) * 10.0 ** rng.integers(0, 9, 300)
    a, b = UOp.param("a", (x32.size,)), UOp.param("b", (x64.size,), "float64")
    graph = Graph({"s32": a.sin(), "s64": b.sin()}, [a, b])
    for device in ["PYTHON"] + ([] if _cpu_unusable() else ["CPU"]):
        got = evaluate_on_tinygrad(graph, {"a": x32, "b": x64}, device)
        error = np.abs(got["s32"].astype(np.float64) - np.sin(x32.astype(np.float64)))
        assert error.max() <= 8 * np.finfo(np.float32).eps, (device, error.max() / np.finfo(np.float32).eps)
    import math
    python = evaluate_on_tinygrad(graph, {"a": x32, "b": x64}, "PYTHON")["s64"]
    assert python.tobytes() == np.array([math.sin(v) for v in x64]).tobytes()
