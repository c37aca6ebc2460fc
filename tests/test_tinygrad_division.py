"""Float division exported from tinygrad: Tensor.div writes a / b as a * (1/b) (MUL of
RECIPROCAL), and tinygrad's devices with FDIV in their renderer (CPU's clang and LLVM, CUDA,
METAL, ...) divide once, correctly rounded (codegen/decomp/op.py get_late_rewrite_patterns:
`a * (1/b) -> a/b`); its PYTHON interpreter has no FDIV and rounds twice. `eval` simplifies as
tinygrad runs a graph (the algebraic `quotient` row), so its values are tinygrad CPU's, bit for
bit, and torch's; `--literal` evaluates the MUL of RECIPROCAL as written (two roundings), which
is what the PYTHON device computes. Gradients, the way back (to_tinygrad) and ONNX agree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _tinygrad_usable import import_tinygrad, unusable_reason
tinygrad = import_tinygrad()

from tinygrad import Tensor  # noqa: E402

from uopcli import evaluate_graph  # noqa: E402
from uopcli.core.simplify import simplify  # noqa: E402
from uopcli.interop.tinygrad import evaluate_on_tinygrad, export, save, to_tinygrad  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

_UNUSABLE = unusable_reason()
pytestmark = pytest.mark.skipif(_UNUSABLE is not None, reason=_UNUSABLE or "")

BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=os.environ.get("PATH")) or shutil.which("uopgrad", path=BIN)
RNG = np.random.default_rng(5)
A = RNG.standard_normal((4, 512))
B = RNG.standard_normal((4, 512))
V = RNG.standard_normal(512)
FUZZED = np.array([41.0, -0.56694704, 3.0], np.float32)  # 41 * fl(1/41) is 0.99999994 in float32

# name -> program of a, b ([4, 512]) and v ([512]): divisions as tinygrad writes them
PROGRAMS = {
    "a / b": lambda a, b, v: a / b,
    "3 / a": lambda a, b, v: 3.0 / a,
    "a / 3": lambda a, b, v: a / 3.0,  # 1/3 folded to a constant, in tinygrad too: a * fl(1/3)
    "a / v broadcast": lambda a, b, v: a / v,
    "a * b / v": lambda a, b, v: a * b / v,
    "sqrt|a| / b": lambda a, b, v: a.abs().sqrt() / b,
    "b.reciprocal() * a": lambda a, b, v: b.reciprocal() * a,
    "1/a * 1/b": lambda a, b, v: a.reciprocal() * b.reciprocal(),
    "a / (b * 2)": lambda a, b, v: a / (b * 2),
    "floor(a / b)": lambda a, b, v: a.div(b, rounding_mode="floor"),
    "trunc(a / b)": lambda a, b, v: a.div(b, rounding_mode="trunc"),
}


def _tensors(dtype, device):
    return tuple(Tensor(x.astype(dtype), device=device) for x in (A, B, V))


def _exported(program, dtype, device):
    a, b, v = _tensors(dtype, device)
    y = PROGRAMS[program](a, b, v)
    exported = export({"y": y}, inputs={"a": a, "b": b, "v": v})
    return exported, y.numpy()


def _differ(ours, theirs) -> str:
    ours = np.asarray(ours)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    bad = ours != theirs
    return f"{bad.sum()} of {bad.size} differ, e.g. ours {ours[bad][:3]} tinygrad's {theirs[bad][:3]}" if bad.any() else ""


# float16 programs of one division only: tinygrad's CPU computes a chain of float16 ops in
# float32 and rounds once at its end (trunc(a / b) is 391 where the float16 quotient truncates
# to 392), which the format, rounding each op, does not
ONE_OP = ("a / b", "3 / a", "a / 3", "a / v broadcast", "b.reciprocal() * a", "floor(a / b)")


@pytest.mark.parametrize("program,dtype", [(p, d) for d in (np.float16, np.float32, np.float64) for p in PROGRAMS
                                           if d is not np.float16 or p in ONE_OP])
def test_eval_gives_tinygrad_cpus_quotient(program, dtype):
    """The default evaluation (simplified as tinygrad runs it) is tinygrad CPU's, bit for bit."""
    exported, theirs = _exported(program, dtype, "CPU")
    ours = evaluate_graph(exported.graph, exported.values, simplify="tinygrad")["y"]
    assert not _differ(ours, theirs), f"{program} {np.dtype(dtype).name}: {_differ(ours, theirs)}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("program", [p for p in PROGRAMS if p != "a / 3"])
def test_literal_is_the_product_as_written_which_tinygrads_python_device_computes(program, dtype):
    """--literal keeps a * (1/b) as written: two roundings, as tinygrad's PYTHON interpreter
    (no FDIV) computes it; on these values it differs from the quotient somewhere."""
    exported, theirs = _exported(program, dtype, "PYTHON")
    literal = evaluate_graph(exported.graph, exported.values, simplify=None)["y"]
    assert not _differ(literal, theirs), f"{program}: {_differ(literal, theirs)}"
    if not program.startswith(("floor", "trunc")):
        simplified = evaluate_graph(exported.graph, exported.values, simplify="tinygrad")["y"]
        assert _differ(simplified, theirs), f"{program}: the quotient equals the product everywhere"


def test_the_fuzzers_program_on_the_command_line(tmp_path):
    """x = 41: floor(x / x) is 1 and x / x == 1 in tinygrad (CPU and PYTHON) and torch, and in
    `uopgrad eval`; `--literal` is the product as written, 41 * fl(1/41) < 1."""
    x = Tensor(FUZZED)
    y = Tensor(FUZZED.copy())  # another tensor: tinygrad's `x/x -> 1` does not apply
    outputs = {"floor_x_over_x": x.div(x, rounding_mode="floor"), "x_over_x_eq_1": (x / x) == 1,
               "floor_x_over_y": x.div(y, rounding_mode="floor")}
    save(tmp_path / "p.uop", outputs=outputs, inputs={"x": x, "y": y})
    expected = {name: t.numpy().tolist() for name, t in outputs.items()}
    assert expected == {"floor_x_over_x": [1.0, 1.0, 1.0], "x_over_x_eq_1": [True] * 3, "floor_x_over_y": [1.0] * 3}
    torch = pytest.importorskip("torch")
    t = torch.tensor(FUZZED)
    assert torch.div(t, t.clone(), rounding_mode="floor").tolist() == [1.0, 1.0, 1.0]

    def run(*extra):
        done = subprocess.run([UOPGRAD, "eval", "p.uop", "-i", "p.npz", "--json", *extra], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return {name: out["values"] for name, out in json.loads(done.stdout)["outputs"].items()}
    assert run() == expected
    assert run("--literal")["floor_x_over_y"] == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("loss", ["sum(a / b)", "sum(a / b * v)", "sum((a / b)^2)", "sum(v / b)"])
def test_gradients_are_tinygrads_own(loss):
    """diff of a division, evaluated by default, is tinygrad CPU's Tensor.gradient bit for bit;
    --literal is its PYTHON device's (the gradient of 1/b is (-g * y) * y, tinygrad's order)."""
    build = {"sum(a / b)": lambda a, b, v: (a / b).sum(), "sum(a / b * v)": lambda a, b, v: (a / b * v).sum(),
             "sum((a / b)^2)": lambda a, b, v: (a / b).square().sum(), "sum(v / b)": lambda a, b, v: (v / b).sum()}
    for device, mode in (("CPU", "tinygrad"), ("PYTHON", None)):
        a, b, v = _tensors(np.float32, device)
        out = build[loss](a, b, v)
        exported = export({"loss": out}, inputs={"a": a, "b": b})
        grad, _ = differentiate(exported.graph, ["a", "b"])
        theirs = [g.numpy() for g in out.gradient(a, b)]
        ours = evaluate_graph(grad, exported.values, simplify=mode)
        for name, expected in zip(("grad_a", "grad_b"), theirs):
            assert not _differ(ours[name], expected), f"{loss} {name} vs tinygrad {device}: {_differ(ours[name], expected)}"


def test_the_way_back_divides_as_tinygrad_does():
    """to_tinygrad of the exported graph (MUL of RECIPROCAL) computes what tinygrad computed on
    that device; of the simplified graph (FDIV), the quotient on every device, fdiv=False too;
    and evaluate_on_tinygrad, which simplifies, gives eval's values."""
    for device in ("CPU", "PYTHON"):
        exported, theirs = _exported("a / b", np.float32, device)
        written = to_tinygrad(exported.graph, device=device)(**exported.values)["y"].numpy()
        assert not _differ(written, theirs), f"{device}: {_differ(written, theirs)}"
    cpu = _exported("a / b", np.float32, "CPU")[1]
    simplified = simplify(exported.graph)
    for device in ("CPU", "PYTHON"):
        for fdiv in (True, False):
            back = to_tinygrad(simplified, device=device, fdiv=fdiv)(**exported.values)["y"].numpy()
            assert not _differ(back, cpu), f"{device} fdiv={fdiv}: {_differ(back, cpu)}"
        on = evaluate_on_tinygrad(exported.graph, exported.values, device, simplify="tinygrad")["y"]
        assert not _differ(on, cpu), f"evaluate_on_tinygrad {device}: {_differ(on, cpu)}"


def test_onnx_of_the_simplified_graph_divides_as_eval():
    """The simplified graph's FDIV is ONNX Div (onnxruntime: the quotient, eval's values); the
    graph as written is Mul of Reciprocal (--literal's values)."""
    pytest.importorskip("onnxruntime")
    import onnxruntime
    from uopcli.interop.onnx.exporter import to_onnx
    exported, cpu = _exported("a / v broadcast", np.float32, "CPU")
    for graph, expected in ((simplify(exported.graph), cpu),
                            (exported.graph, evaluate_graph(exported.graph, exported.values, simplify=None)["y"])):
        model = to_onnx(graph)
        ops = {node.op_type for node in model.graph.node}
        assert ("Div" in ops) == (graph is not exported.graph)
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {i.name: exported.values[i.name] for i in session.get_inputs()}
        (got,) = session.run(["y"], feed)
        assert not _differ(got, np.asarray(expected)), _differ(got, np.asarray(expected))
