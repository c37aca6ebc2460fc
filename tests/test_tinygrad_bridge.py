"""The tinygrad bridge against the real tinygrad 0.14: a zoo of models written with
tinygrad.nn is exported, then the installed `uopgrad diff` and `uopgrad eval` must give
tinygrad's own `Tensor.gradient` and forward values; exported graphs run on tinygrad
(`to_tinygrad`, `eval --backend tinygrad`) give the same values again; bad requests fail
with one line and write nothing.

tinygrad compiles every kernel with clang: all the zoo's tinygrad results are realized in
one schedule, in module-scoped fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# tinygrad raises Python's recursion limit to 10,000 when its scheduler is imported; the
# suite's other tests check behaviour at the default limit, so it is restored after the
# import here and raised only while these tests run (the `_tinygrad_recursion_limit` fixture)
_RECURSION_LIMIT = sys.getrecursionlimit()
tinygrad = pytest.importorskip("tinygrad", reason="tinygrad is not installed for this Python "
                               "(pip install 'uopgrad[tinygrad]'; make test installs it)")

from _tinygrad_usable import unusable_reason  # noqa: E402

_UNUSABLE = unusable_reason()  # before the limit is read: a first kernel imports tinygrad's scheduler
_TINYGRAD_RECURSION_LIMIT = max(sys.getrecursionlimit(), _RECURSION_LIMIT)
sys.setrecursionlimit(_RECURSION_LIMIT)
pytestmark = pytest.mark.skipif(_UNUSABLE is not None, reason=_UNUSABLE or "")


@pytest.fixture(scope="module", autouse=True)
def _tinygrad_recursion_limit():
    sys.setrecursionlimit(_TINYGRAD_RECURSION_LIMIT)
    yield
    sys.setrecursionlimit(_RECURSION_LIMIT)

from tinygrad import Tensor, dtypes  # noqa: E402

from tinygrad_zoo import ZOO  # noqa: E402
from uopcli import evaluate_graph, load  # noqa: E402
from uopcli.interop.tinygrad import ExportError, export, save, to_graph, to_tinygrad  # noqa: E402

BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=BIN) or shutil.which("uopgrad")
TOLERANCE = 1e-5  # of each array's largest magnitude (float32)
# a gradient under this share of the model's largest is zero in exact arithmetic (a conv bias
# before batch norm, a key bias under softmax): its values are rounding noise in both, and
# its error is measured against the model's largest gradient instead
ZERO_SHARE = 1e-4
# the round trip and the tinygrad backend on a few models of different kinds: each graph
# tinygrad runs is compiled kernel by kernel with clang, which is what the zoo's time goes to
ROUND_TRIP = ("mlp_mse", "conv_avgpool_sparse_xent", "batchnorm_train", "embedding_int_tokens", "slicing_padding",
              "int_and_bool", "tinygrad_function")


def uopgrad(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    assert UOPGRAD is not None, "the uopgrad console script is not installed"
    return subprocess.run([UOPGRAD, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def assert_close(ours, theirs, what: str, floor: float = 0.0) -> None:
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, \
        f"{what}: {ours.dtype}{ours.shape} vs tinygrad's {theirs.dtype}{theirs.shape}"
    if theirs.dtype.kind != "f":
        np.testing.assert_array_equal(ours, theirs, err_msg=what)
        return
    scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
    error = float(np.max(np.abs(ours.astype(np.float64) - theirs))) if theirs.size else 0.0
    assert np.all(np.isfinite(ours)) == np.all(np.isfinite(theirs)), what
    assert error <= TOLERANCE * max(scale, floor), f"{what}: max error {error:.3g} > {TOLERANCE} * {scale:.3g}"


# ----------------------------------------------------------------------------- the zoo

class Exported:
    """One zoo model, exported to <dir>/<name>.uop + .npz, with tinygrad's own results."""

    def __init__(self, name: str, folder: Path):
        self.name, self.folder = name, folder
        self.case = ZOO[name]()
        self.exported = save(folder / f"{name}.uop", self.case.outputs, self.case.inputs, self.case.state_dict)
        named = {**self.case.inputs, **self.case.state_dict}
        graph_inputs = {p.arg: p for p in self.exported.graph.inputs}
        self.wrt = [n for n in named if n in graph_inputs and graph_inputs[n].dtype.is_float]
        self.gradients = self.case.outputs["loss"].gradient(*(named[n] for n in self.wrt))
        self.roundtrip = to_tinygrad(self.exported.graph)(**self.exported.values) if name in ROUND_TRIP else {}

    def tensors(self) -> list:
        return [*self.case.outputs.values(), *self.gradients, *self.roundtrip.values()]

    def fetch(self) -> None:
        self.expected = {name: t.numpy() for name, t in self.case.outputs.items()}
        self.expected.update((f"grad_{n}", g.numpy()) for n, g in zip(self.wrt, self.gradients))
        self.roundtrip_values = {name: t.numpy() for name, t in self.roundtrip.items()}


_ZOO: dict[str, Exported] = {}  # built once per process: see the fixture


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Exported]:
    """The zoo, exported and run by tinygrad, once per process: pytest-xdist tears module
    fixtures down whenever a worker's queue runs dry mid-module and sets them up again,
    and building the zoo (tinygrad compiling every kernel with clang) is 1-2 minutes."""
    if not _ZOO:
        folder = tmp_path_factory.mktemp("zoo")  # a session's folder: it outlives the module
        models = {name: Exported(name, folder) for name in ZOO}
        Tensor.realize(*(t for m in models.values() for t in m.tensors()))  # one schedule: compiled together
        for model in models.values():
            model.fetch()
        _ZOO.update(models)
    return _ZOO


def test_the_zoo_is_big_enough():
    assert len(ZOO) >= 15


@pytest.mark.parametrize("name", list(ZOO))
def test_cli_gradients_and_values_match_tinygrad(zoo, name):
    """`uopgrad diff --keep-forward` then `uopgrad eval -i model.npz`: every output and every
    gradient as tinygrad's forward and Tensor.gradient give them."""
    model = zoo[name]
    folder = model.folder
    done = uopgrad("diff", f"{name}.uop", "--wrt", ",".join(model.wrt), "--of", "loss", "--keep-forward",
                   "-o", f"{name}-train.uop", cwd=folder)
    assert done.returncode == 0, done.stderr
    done = uopgrad("eval", f"{name}-train.uop", "-i", f"{name}.npz", "-o", f"{name}-out.npz", cwd=folder)
    assert done.returncode == 0, done.stderr
    largest = max(float(np.max(np.abs(v))) for k, v in model.expected.items() if k.startswith("grad_"))
    with np.load(folder / f"{name}-out.npz") as results:
        assert set(results.files) == set(model.expected), f"{sorted(results.files)} vs {sorted(model.expected)}"
        for key, theirs in model.expected.items():
            zero = float(np.max(np.abs(theirs))) < ZERO_SHARE * largest if key.startswith("grad_") else False
            assert_close(results[key], theirs, f"{name}: {key}", largest if zero else 0.0)


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_through_to_tinygrad(zoo, name):
    """The exported graph, run by tinygrad through its Tensor API, gives tinygrad's forward."""
    model = zoo[name]
    for key, value in model.roundtrip_values.items():
        assert_close(value, model.expected[key], f"{name}: {key} after the round trip")


@pytest.mark.parametrize("name", ["mlp_mse", "int_and_bool", "tinygrad_function"])
def test_gradient_graph_on_tinygrad_equals_numpy(zoo, name):
    """`eval --backend tinygrad` of the gradient graph writes and prints what the numpy
    backend does (the same arrays within float32 rounding, the same table layout)."""
    model = zoo[name]
    folder = model.folder
    if not (folder / f"{name}-train.uop").exists():
        done = uopgrad("diff", f"{name}.uop", "--wrt", ",".join(model.wrt), "--of", "loss", "--keep-forward",
                       "-o", f"{name}-train.uop", cwd=folder)
        assert done.returncode == 0, done.stderr
    tables = {}
    for backend in ("numpy", "tinygrad"):
        done = uopgrad("eval", f"{name}-train.uop", "-i", f"{name}.npz", "--backend", backend,
                       "-o", f"{name}-{backend}.npz", cwd=folder)
        # nothing on stderr either: tinygrad's compile workers leave no semaphores behind
        assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr
        done = uopgrad("eval", f"{name}-train.uop", "-i", f"{name}.npz", "--backend", backend, cwd=folder)
        assert done.returncode == 0, done.stderr
        tables[backend] = [line.split()[:3] for line in done.stdout.splitlines()]  # name, shape, dtype
    assert tables["numpy"] == tables["tinygrad"]
    with np.load(folder / f"{name}-numpy.npz") as by_numpy, np.load(folder / f"{name}-tinygrad.npz") as by_tinygrad:
        assert by_numpy.files == by_tinygrad.files
        for key in by_numpy.files:
            assert_close(by_tinygrad[key], by_numpy[key], f"{name}: {key} on tinygrad")


def test_both_backends_run_the_simplified_graph(tmp_path):
    """`eval` simplifies first (tinygrad's algebraic rewrites): --backend tinygrad runs that
    same graph, so the sigmoid gradient at -1000 is 0 on both, and the options that belong
    to the numpy evaluator alone are refused with tinygrad."""
    from uopcli import Graph, UOp
    from uopcli import save as save_uop
    from uopcli.errors import EvaluationError
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    from uopcli.tools.differentiate import differentiate
    x = UOp.param("x", (3,))
    graph, _ = differentiate(Graph({"y": x.sigmoid().sum()}), ["x"])
    save_uop(graph, tmp_path / "grad.uop")
    printed = {}
    for backend in ("numpy", "tinygrad"):
        done = uopgrad("eval", "grad.uop", "-i", "x=-1000", "--json", "--backend", backend, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        printed[backend] = json.loads(done.stdout)
    assert printed["numpy"] == printed["tinygrad"]
    assert printed["tinygrad"]["outputs"]["grad_x"]["values"] == [0.0, 0.0, 0.0]
    done = uopgrad("eval", "grad.uop", "-i", "x=-1000", "--backend", "tinygrad", "--keep-intermediates",
                   "-o", "values.npz", cwd=tmp_path)
    assert done.returncode == 2 and "--keep-intermediates" in done.stderr and not (tmp_path / "values.npz").exists()
    with pytest.raises(EvaluationError, match="simplify must be one of"):
        evaluate_on_tinygrad(graph, {"x": np.zeros(3, np.float32)}, "CPU", simplify="fast")


def test_evaluate_on_tinygrad_in_process_gives_the_evaluators_values(monkeypatch):
    """What `eval --backend tinygrad` calls (the CLI tests run it in a subprocess, where
    mutation testing cannot see it): a tuple output with a NOOP element and a plain one,
    with each simplify mode, bit for bit the numpy evaluator's (a division included);
    tinygrad's own failure to realize is one line naming it."""
    from uopcli import Graph, UOp, evaluate_graph
    from uopcli.errors import EvaluationError
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    x, n = UOp.param("x", (4,)), UOp.param("n", (4,), "int32")
    quotient = x / (x + 3.0)  # FDIV, which CPU's renderer has: sent as itself (Tensor.alu)
    table = UOp.buffer(np.array([0.5, -2.0, 3.0, 0.25], np.float32))  # on the device asked for, as the inputs
    graph = Graph({"t": UOp.tuple(x * 2.0, UOp.noop(), n + 1), "y": (x - 1.5).maximum(0.0) + quotient * table},
                  [x, n])
    inputs = {"x": np.array([-0.0, 1.5, -3.25, 1e30], np.float32), "n": np.array([-1, 0, 7, 2 ** 31 - 1], np.int32)}
    for mode, device in ((None, "CPU"), ("exact", "CPU"), ("tinygrad", "CPU"), (None, "PYTHON")):
        ours, truth = evaluate_on_tinygrad(graph, inputs, device, simplify=mode), evaluate_graph(graph, inputs)
        assert ours["t"][1] is None and list(ours) == ["t", "y"], mode
        for got, want in ((ours["t"][0], truth["t"][0]), (ours["t"][2], truth["t"][2]), (ours["y"], truth["y"])):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (mode, got, want)
    # the modes differ on tinygrad too: the gradient of x / (1 + e), e = 2^(-x/ln2), at -1000
    # is nan as written (exact), 0 with tinygrad's rewrites; each as the numpy evaluator gives
    # it in that mode. (Not silu: its gradient, 1/(1+e)'s as tinygrad writes it, (-g y) y, is
    # a product tinygrad's own compiler rewrites to 0 whatever uopgrad sends it; the graph's
    # FDIV here is sent as itself, which its rules do not read.)
    from uopcli.tools.differentiate import differentiate
    e = (x * -1.4426950408889634).exp2()
    gradient, _ = differentiate(Graph({"y": (x / (e + 1.0)).sum()}, [x]), ["x"])
    at = {"x": np.array([-1000.0, 0.0, 2.0, 1000.0], np.float32)}
    found = {mode: evaluate_on_tinygrad(gradient, at, "CPU", simplify=mode)["grad_x"] for mode in ("exact", "tinygrad")}
    assert np.isnan(found["exact"][0]) and found["tinygrad"][0] == 0.0
    for mode, got in found.items():
        np.testing.assert_allclose(got, evaluate_graph(gradient, at, simplify=mode)["grad_x"], rtol=1e-6)

    # the device asked for is the one used: a device tinygrad does not have fails in one line,
    # before tinygrad imports its module (test_a_device_tinygrad_lacks_is_a_usage_error)
    with pytest.raises(EvaluationError, match=r"^no tinygrad device 'NOSUCH': tinygrad's devices are [A-Z, ]*CPU"):
        evaluate_on_tinygrad(graph, inputs, "NOSUCH")

    def fails(*tensors):
        raise RuntimeError("no compiler\n   for CPU")
    monkeypatch.setattr(Tensor, "realize", fails)
    with pytest.raises(EvaluationError, match=r"^tinygrad could not run the graph: RuntimeError: no compiler for CPU$"):
        evaluate_on_tinygrad(graph, inputs, "CPU")


def test_an_fdiv_tinygrad_folds_to_constants_is_run_spelled():
    """tinygrad folds an op of two constants with a Python table that has no FDIV: a sum
    over an empty axis divided by itself (0/0, as the max-pool HVP of a conv net makes
    inside a kernel) failed with KeyError FDIV. evaluate_on_tinygrad runs such a graph with
    every FDIV spelled a * (1/b) in float64: nan, and the other division bit for bit the
    numpy evaluator's (float32); to_tinygrad(fdiv=False) is that graph for the caller."""
    from uopcli import Graph, UOp, evaluate_graph
    from uopcli.core.ops import Ops
    from uopcli.interop.tinygrad import evaluate_on_tinygrad, to_tinygrad
    empty, y = UOp.param("empty", (0, 3)), UOp.param("y", (3,))
    def ratio(x):  # 0/0
        total = x.sum(0)
        return UOp.make(Ops.FDIV, total.dtype, (total, total))
    inside = UOp.function("ratio", [ratio(UOp.slot(0, (0, 3)))], [empty]).gettuple(0)  # a call's body too
    graph = Graph({"q": ratio(empty) + y, "c": inside + y, "r": UOp.make(Ops.FDIV, y.dtype, (y, y + 3.0))},
                  [empty, y])
    inputs = {"empty": np.zeros((0, 3), np.float32), "y": np.array([1.0, -0.1, 3.3e-5], np.float32)}
    truth = evaluate_graph(graph, inputs)
    assert np.isnan(truth["q"]).all()
    # start from tinygrad's state outside any Tensor method: a test before this one in the
    # same worker may have had a tinygrad method raise, which leaves its name behind (below)
    import tinygrad.tensor
    tinygrad.tensor._METADATA.set(None)
    for device in ("CPU", "PYTHON"):
        got = evaluate_on_tinygrad(graph, inputs, device)
        for name in ("q", "c"):  # (nan's sign is no one's promise)
            assert got[name].dtype == np.float32 and np.isnan(got[name]).all(), (device, name)
        assert got["r"].dtype == np.float32 and got["r"].tobytes() == truth["r"].tobytes(), device
    spelled = to_tinygrad(graph, "CPU", fdiv=False)(**inputs)
    assert spelled["r"].numpy().tobytes() == truth["r"].tobytes() and np.isnan(spelled["q"].numpy()).all()
    # tinygrad does not put back the name of a Tensor method that raised (the failed
    # realize): an export after it tagged every node `realize`. Its names are its own again.
    from uopcli.interop.tinygrad import to_graph
    w = Tensor([[1.0, -2.0], [0.5, 3.0]])
    exported = to_graph({"out": (w @ w).relu()}, {"w": w})
    names = {n.meta.name for n in exported.nodes() if n.meta is not None}
    # (<=: tinygrad's nodes are shared in a process, and another test may have named one first)
    assert {"__matmul__", "relu"} <= names and "realize" not in names, names


def test_the_spelled_rerun_is_for_fdivs_keyerror_only_and_on_the_device_asked_for(monkeypatch):
    """evaluate_on_tinygrad runs a graph with its FDIVs as themselves, and again spelled
    (to_tinygrad(fdiv=False)) only when tinygrad failed to fold an FDIV, on the device it
    was asked for. The values cannot tell the two graphs apart here (CPU's tinygrad makes
    a * (1/b) one division again, PYTHON has no FDIV; a device that kept the two roundings
    would be an ulp off in float64), so the calls are looked at. Any other KeyError is
    tinygrad's failure, one line naming it, and not run again."""
    from uopcli import Graph, UOp
    from uopcli.core.ops import Ops
    from uopcli.errors import EvaluationError
    from uopcli.interop.tinygrad import backend, evaluate_on_tinygrad
    calls, real = [], backend.to_tinygrad

    def spy(graph, device=None, fdiv=True):
        calls.append((device, bool(fdiv)))
        return real(graph, device, fdiv)
    monkeypatch.setattr(backend, "to_tinygrad", spy)
    empty, y = UOp.param("empty", (0, 3)), UOp.param("y", (3,))
    total = empty.sum(0)
    folded = Graph({"q": UOp.make(Ops.FDIV, total.dtype, (total, total)) + y}, [empty, y])  # 0/0 (see above)
    plain = Graph({"r": UOp.make(Ops.FDIV, y.dtype, (y, y + 3.0))}, [y])
    inputs = {"empty": np.zeros((0, 3), np.float32), "y": np.array([1.0, -0.1, 3.3e-5], np.float32)}
    assert np.isnan(evaluate_on_tinygrad(folded, inputs, "CPU")["q"]).all()
    assert calls == [("CPU", True), ("CPU", False)]
    calls.clear()
    evaluate_on_tinygrad(plain, {"y": inputs["y"]}, "CPU")
    assert calls == [("CPU", True)]

    def missing(graph, device=None, fdiv=True):
        calls.append((device, bool(fdiv)))
        raise KeyError("no such buffer")
    calls.clear()
    monkeypatch.setattr(backend, "to_tinygrad", missing)
    with pytest.raises(EvaluationError, match=r"^tinygrad could not run the graph: KeyError: 'no such buffer'$"):
        evaluate_on_tinygrad(folded, inputs, "CPU")
    assert calls == [("CPU", True)]


def test_a_scalar_input_stays_a_scalar():
    """A 0-d input (samples/poly.uop's x) is a 0-d Tensor: np.ascontiguousarray makes any
    array at least 1-d, so x, and every output made from it, came back with shape (1,)."""
    from uopcli import Graph, UOp, evaluate_graph
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    x, v = UOp.param("x", ()), UOp.param("v", (2,))
    graph = Graph({"y": x * x - 5.0, "z": v * x}, [x, v])
    inputs = {"x": np.array(1.5, np.float32), "v": np.array([2.0, -3.0], np.float32)}
    truth = evaluate_graph(graph, inputs)
    got = evaluate_on_tinygrad(graph, inputs, "CPU")
    for name in ("y", "z"):
        assert got[name].shape == truth[name].shape and got[name].tobytes() == truth[name].tobytes(), name


def test_max_of_a_nan_is_nan():
    """MAX and REDUCE MAX: nan wins, as the numpy evaluator (np.maximum) gives it.
    tinygrad's maximum and max are a comparison and a where: max(1, nan) was 1, and a
    row's max was nan only where the nan came first."""
    from uopcli import Graph, UOp, evaluate_graph
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    a, b = UOp.param("a", (4, 3)), UOp.param("b", (4, 3))
    graph = Graph({"m": a.maximum(b), "r": a.max(1), "e": UOp.param("z", (2, 0)).max(1)},
                  [a, b, UOp.param("z", (2, 0))])
    nan, inf = np.nan, np.inf
    inputs = {"a": np.array([[nan, 1, 2], [1, nan, 2], [1, 2, nan], [3, -inf, 2]], np.float32),
              "b": np.array([[1, nan, 5], [nan, nan, -inf], [-2, 7, 1], [inf, 1, -5]], np.float32),
              "z": np.zeros((2, 0), np.float32)}
    truth = evaluate_graph(graph, inputs)
    assert np.isnan(truth["m"]).sum() == 5 and np.isnan(truth["r"]).sum() == 3
    for device in ("CPU", "PYTHON"):
        got = evaluate_on_tinygrad(graph, inputs, device)
        for name in ("m", "r", "e"):
            np.testing.assert_array_equal(got[name], truth[name], err_msg=f"{device}: {name}")


def test_pow_at_the_edges_is_cs_pow():
    """Float POW is C's pow (np.power) where an operand is infinite, nan, a signed zero or
    one: tinygrad's pow casts the exponent to int32 to tell its parity, which raised
    OverflowError on PYTHON for an infinite exponent and gave nan on CPU for (-2)^inf and
    1^nan; (-0)^-3 was +inf. Finite values within tinygrad's exp2(b log2 a)."""
    from uopcli import Graph, UOp, evaluate_graph
    from uopcli.core.ops import Ops
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    bases = [-2.0, -1.0, -0.5, 0.0, -0.0, 0.5, 1.0, 2.0, np.inf, -np.inf, np.nan]
    powers = [-3.0, -2.5, -1.0, 0.0, -0.0, 0.5, 2.0, 3.0, np.inf, -np.inf, np.nan]
    a, b = np.repeat(np.array(bases, np.float32), len(powers)), np.tile(np.array(powers, np.float32), len(bases))
    x, y = UOp.param("a", (a.size,)), UOp.param("b", (a.size,))
    graph = Graph({"p": UOp.make(Ops.POW, x.dtype, (x, y)), "s": x.pow(2.0)}, [x, y])
    truth = evaluate_graph(graph, {"a": a, "b": b})
    for device in ("CPU", "PYTHON"):
        got = evaluate_on_tinygrad(graph, {"a": a, "b": b}, device)
        for name in ("p", "s"):
            want, found = truth[name], got[name]
            edge = ~np.isfinite(want) | (want == 0) | (want == 1)
            np.testing.assert_array_equal(found[edge], want[edge], err_msg=f"{device}: {name}")
            signed = edge & ~np.isnan(want)  # (nan's sign is no one's promise)
            assert np.array_equal(np.signbit(found[signed]), np.signbit(want[signed])), (device, name)
            np.testing.assert_allclose(found[~edge], want[~edge], rtol=1e-6, err_msg=f"{device}: {name}")


def test_metadata_names_the_tensor_functions(zoo):
    """tinygrad's metadata (the Tensor function that made a node) is node metadata, and
    `uopgrad print` shows it."""
    graph = zoo["conv_avgpool_sparse_xent"].exported.graph
    names = {n.meta.name for n in graph.nodes() if n.meta is not None}
    assert {"conv2d", "linear", "relu", "avg_pool2d", "sparse_categorical_crossentropy"} <= names
    done = uopgrad("print", "conv_avgpool_sparse_xent.uop", cwd=zoo["conv_avgpool_sparse_xent"].folder)
    assert done.returncode == 0 and "conv2d" in done.stdout and "sparse_categorical_crossentropy" in done.stdout


def test_inputs_are_named_and_the_npz_holds_them(zoo):
    """Named inputs first (in order), then state_dict keys as reached; data nobody named is
    buffer_0, ...; the .npz holds every input's value; lazy weights got realized values."""
    mlp = zoo["mlp_mse"]
    assert mlp.exported.graph.input_names[:2] == ["x", "y"]
    assert set(mlp.exported.graph.input_names) == {"x", "y", "l1.weight", "l1.bias", "l2.weight", "l2.bias"}
    with np.load(mlp.folder / "mlp_mse.npz") as values:
        assert set(values.files) == set(mlp.exported.graph.input_names)
        np.testing.assert_array_equal(values["l1.weight"], mlp.case.state_dict["l1.weight"].numpy())
    dropout = zoo["dropout_mask"].exported
    assert "buffer_0" in dropout.graph.input_names  # the realized dropout mask
    mask = dropout.values["buffer_0"]
    assert mask.dtype == np.bool_ and 0 < mask.sum() < mask.size
    lazy = zoo["mlp_lazy_weights"].exported.values["l1.weight"]
    assert np.all(np.abs(lazy) <= 0.5) and np.unique(lazy).size == lazy.size  # nn.Linear's uniform(-1/2, 1/2)


def test_weak_constants_commit_to_their_users_dtype():
    """A Python number in float16 and int arithmetic: the file holds concrete dtypes only,
    and numpy's evaluation of it is tinygrad's value."""
    from uopcli import evaluate_graph
    x = Tensor(np.linspace(-2, 2, 6, dtype=np.float16).reshape(2, 3))
    n = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    y = (x * 0.3 + 1).exp2() * 2 ** -3
    k = (n * 3 - 7) // 2 + (n % 4) * (n > 2)
    z = x * (Tensor(300.0) * 300.0 / 1000.0)  # a weak product: 90000 fits float32, not float16
    exported = export({"y": y, "k": k, "z": z}, {"x": x, "n": n})
    dtype_names = {node.dtype.name for node in exported.graph.nodes()}
    assert dtype_names <= {"float16", "float32", "int32", "bool"}
    results = evaluate_graph(exported.graph, exported.values)
    assert results["y"].dtype == np.float16 and results["k"].dtype == np.int32
    np.testing.assert_allclose(results["y"].astype(np.float32), y.numpy().astype(np.float32), rtol=2e-3)
    np.testing.assert_array_equal(results["k"], k.numpy())
    np.testing.assert_array_equal(results["z"], z.numpy())
    back = to_tinygrad(exported.graph)(**exported.values)["k"].numpy()  # CDIV, CMOD of negatives on tinygrad
    np.testing.assert_array_equal(back, k.numpy())


def test_to_graph_realizes_nothing():
    x = Tensor.empty(3, 4)
    w = Tensor.rand(4, 2)  # lazy random: to_graph must not compute it
    graph = to_graph({"out": (x @ w).relu()}, {"x": x, "w": w})
    assert graph.input_names == ["x", "w"] and graph.outputs["out"].shape == (3, 2)
    assert w.uop.op is not tinygrad.uop.ops.Ops.BUFFER


# ----------------------------------------------------------------------------- bad input

def _refused(tmp_path, outputs, inputs=None, state_dict=None) -> str:
    with pytest.raises(ExportError) as info:
        save(tmp_path / "bad.uop", outputs, inputs, state_dict)
    message = str(info.value)
    assert "\n" not in message
    assert not (tmp_path / "bad.uop").exists() and not (tmp_path / "bad.npz").exists()
    return message


def test_random_bits_not_realized_are_refused(tmp_path):
    x = Tensor.ones(3, 3).contiguous()
    noise = Tensor.rand(3, 3, contiguous=False)  # no CONTIGUOUS: the THREEFRY itself is reached
    message = _refused(tmp_path, {"y": x * noise + x}, {"x": x})
    assert "THREEFRY" in message and "output 'y'" in message and "made by Tensor." in message


def test_a_dtype_the_format_lacks_is_refused(tmp_path):
    """tinygrad records no Tensor function on a CAST: the refusal names the nearest ones
    around it (what made its value, what reads it) and the floats the format has."""
    # data of their own: tinygrad shares equal nodes between tensors, with the metadata of
    # whichever made them first (Tensor.ones(4) made in another test would name its function)
    x = Tensor(np.array([1.5, -2.0, 0.25, 3.0], np.float32))
    message = _refused(tmp_path, {"y": x.cast(dtypes.bfloat16).cast(dtypes.float32).sum()}, {"x": x})
    assert message == ("cannot export tinygrad CAST (an input of Tensor.sum), reached from output 'y': has dtype "
                       "bfloat16, which format v1 does not have: the format's floats are float16, float32 and "
                       "float64, build the model in one (Tensor.float(); tinygrad's default float: "
                       "DEFAULT_FLOAT=float32 in the environment, or Context(DEFAULT_FLOAT='float32'))")
    w = Tensor(np.array([[0.5, 1.0], [2.0, -1.0], [0.0, 3.0], [1.0, 1.0]], np.float32))
    mixed = (x.reshape(1, 4).cast(dtypes.bfloat16) @ w.cast(dtypes.bfloat16)).float().relu()
    message = _refused(tmp_path, {"y": mixed.sum()}, {"x": x, "w": w})
    assert message.startswith("cannot export tinygrad CAST (from Tensor.__matmul__, an input of Tensor.relu), "
                              "reached from output 'y': has dtype bfloat16")
    fp8 = _refused(tmp_path, {"y": x.cast(dtypes.fp8e4m3).float().sum()}, {"x": x})
    assert "has dtype fp8e4m3, which format v1 does not have: the format's floats are" in fp8


def test_the_dtype_refusals_hint_works(tmp_path):
    """A model built in bfloat16 by tinygrad's default float is refused; built again as the
    refusal says (Context in Python, DEFAULT_FLOAT in the environment: tinygrad 0.14's
    dtypes.default_float cannot be set), it exports and gives tinygrad's value."""
    from tinygrad import Context

    def model():
        x = Tensor([[1.5, 2.0, 0.25]]).contiguous()
        return x, (x @ Tensor([[0.5], [1.0], [2.0]])).relu().sum()

    with Context(DEFAULT_FLOAT="bfloat16"):
        x, y = model()
        assert "DEFAULT_FLOAT=float32 in the environment, or Context(DEFAULT_FLOAT='float32')" in \
            _refused(tmp_path, {"y": y}, {"x": x})
        with Context(DEFAULT_FLOAT="float32"):
            x, y = model()
            exported = save(tmp_path / "m.uop", {"y": y}, {"x": x})
    assert evaluate_graph(exported.graph, exported.values)["y"] == y.item() == 3.25
    script = "from tinygrad import Tensor; print(Tensor([1.5]).dtype)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "DEFAULT_FLOAT": "float32"})
    assert done.stdout.strip() == "dtypes.float", done.stderr


def test_a_symbolic_shape_is_refused_naming_its_variables(tmp_path):
    """A bound Variable (as an unbound one) in a shape: one line naming the op, the Variable
    (and what it is bound to) and what to do, never tinygrad's reprs of its UOps."""
    from tinygrad import Variable
    n = Variable("n", 1, 8)
    a = Tensor(np.arange(8, dtype=np.float32))
    message = _refused(tmp_path, {"y": a[:n.bind(3)].sum()}, {"a": a})
    assert message == ("cannot export tinygrad SHRINK (made by Tensor.__getitem__), reached from output 'y': its shape "
                       "depends on the Variable n (bound to 3), and format v1 has static shapes: build the graph with "
                       "an int in its place (a file per size)")
    grid = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
    message = _refused(tmp_path, {"y": grid[:n, :Variable("m", 1, 8).bind(2)].sum()}, {"grid": grid})
    assert message.endswith("'y': its shape depends on the Variables n, m (bound to 2), and format v1 has static "
                            "shapes: build the graph with ints in their place (a file per size)")


def test_colliding_input_names_are_refused(tmp_path):
    x, w = Tensor.ones(2).contiguous(), Tensor.ones(2).contiguous()
    message = _refused(tmp_path, {"y": (x * w).sum()}, {"weight": x}, {"weight": w})
    assert "'weight' collides" in message
    message = _refused(tmp_path, {"y": (x * w).sum()}, {"a": x, "b": x, "w": w})
    assert "'a' and 'b' are the same tensor" in message
    message = _refused(tmp_path, {"y": (x * w).sum()}, {"my x": x})
    assert "'my x'" in message


def test_a_missing_value_fails_in_one_line_and_writes_nothing(zoo, tmp_path):
    """model.npz without one member: eval names the missing input; an npz member that
    names no input is reported, never dropped; nothing is written."""
    folder = zoo["mlp_mse"].folder
    with np.load(folder / "mlp_mse.npz") as values:
        arrays = {k: values[k] for k in values.files}
    np.savez(tmp_path / "partial.npz", **{k: v for k, v in arrays.items() if k != "l1.bias"})
    np.savez(tmp_path / "extra.npz", **arrays, typo=np.zeros(2, np.float32))
    for archive, expected in (("partial.npz", "missing input value: l1.bias float32[8]"),
                              ("extra.npz", "member typo names no input")):
        done = uopgrad("eval", str(folder / "mlp_mse.uop"), "-i", str(tmp_path / archive), "-o",
                       str(tmp_path / "out.npz"), cwd=tmp_path)
        assert done.returncode == 1 and done.stdout == ""
        *notes, error = done.stderr.strip().splitlines()
        assert error.startswith("uopgrad: error:") and expected in error, done.stderr
        # the one note (issue 31): the model's own .npz beside it holds what -i left out
        assert notes == ([] if archive == "extra.npz" else
                         [f"uopgrad: {folder / 'mlp_mse.npz'} beside {folder / 'mlp_mse.uop'} holds values for inputs "
                          f"given none (l1.bias): -i {folder / 'mlp_mse.npz'} gives them theirs"]), done.stderr
        assert not (tmp_path / "out.npz").exists()


def test_backend_option_without_tinygrad_says_how_to_install(zoo, tmp_path):
    """A Python where `import tinygrad` fails: --backend tinygrad exits 1 with the extra's
    install line; the numpy backend and `import uopcli` never touch tinygrad."""
    shadow = tmp_path / "shadow" / "tinygrad"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named tinygrad')\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    folder = zoo["mlp_mse"].folder
    done = uopgrad("eval", "mlp_mse.uop", "-i", "mlp_mse.npz", "--backend", "tinygrad", cwd=folder, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert "pip install 'uopgrad[tinygrad]'" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = uopgrad("eval", "mlp_mse.uop", "-i", "mlp_mse.npz", cwd=folder, env=env)
    assert done.returncode == 0 and "loss" in done.stdout, done.stderr
    probe = subprocess.run([sys.executable, "-c", "import sys, uopcli, uopcli.cli, uopcli.interop.tinygrad; "
                            "print('tinygrad' in sys.modules)"], capture_output=True, text=True,
                           env={**os.environ, **env})
    assert probe.stdout.strip() == "False", probe.stderr


def _devices_text() -> str:
    """tinygrad's devices as its runtime modules (ops_<device>.py) name them, storage and
    NULL (which computes nothing) aside."""
    runtime = Path(tinygrad.__file__).parent / "runtime"
    names = {p.stem[4:].upper() for p in runtime.glob("ops_*.py")} - {"DISK", "TINYFS", "NPY", "NULL"}
    return ", ".join(sorted(names))


@pytest.mark.parametrize("device, renamed", [
    ("CLANG", "tinygrad 0.14 renamed CLANG to CPU (DEV=CPU:CLANG picks its clang renderer); "),
    ("llvm", "tinygrad 0.14 renamed LLVM to CPU (DEV=CPU:LLVM picks its LLVM renderer); "),
    ("GPU:1", "tinygrad 0.14 renamed GPU to CL; "),
    ("NOSUCHDEVICE", ""),
    ("NULL", "tinygrad's NULL device computes nothing (its kernels run nothing and it returns no values); "),
    ("disk", "tinygrad's DISK device computes nothing (it only holds data); ")])
def test_a_device_tinygrad_lacks_is_a_usage_error(tmp_path, device, renamed):
    """Checked before anything runs: an old name said ModuleNotFoundError, and a graph that
    folds to constants (samples/poly.uop) ran on a device that does not exist, exit 0.
    NULL was listed among the devices, then failed as 'internal error: RuntimeError: no
    copyout on NULL'; DISK was accepted, unlisted."""
    poly = Path(__file__).parent.parent / "samples" / "poly.uop"
    done = uopgrad("eval", str(poly), "-i", "x=2", "--backend", "tinygrad", "--device", device, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"uopgrad: error: Invalid value for '--device': {device!r}: {renamed}tinygrad's devices "
                           f"are {_devices_text()} (see 'uopgrad eval --help')\n")
    from uopcli.errors import EvaluationError
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    graph = load(poly)
    with pytest.raises(EvaluationError) as info:
        evaluate_on_tinygrad(graph, {"x": np.float32(2)}, device=device)
    assert str(info.value) == f"no tinygrad device {device!r}: {renamed}tinygrad's devices are {_devices_text()}"
    assert evaluate_on_tinygrad(graph, {"x": np.float32(2)}, device="cpu")["y"] == 33


def test_loaded_file_is_the_exported_graph(zoo):
    model = zoo["transformer_block"]
    loaded = load(model.folder / "transformer_block.uop")
    assert loaded.input_names == model.exported.graph.input_names
    assert len(loaded) == len(model.exported.graph)
