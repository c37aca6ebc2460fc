"""ONNX's backend conformance data, run the way ONNX's own runner runs a backend
(onnx/backend/test/runner): each case's model through uopgrad (`import_model` +
`evaluate_graph`, as `uopgrad eval` runs an .onnx file) on each of its data sets, the
outputs compared with the stored ones.

- node cases: `onnx.backend.test.case.node.collect_testcases()` (1,884 with onnx 1.23;
  they take ~20 s of CPU to generate, so they are cached once per onnx version, pickled);
- model data: the wheel's onnx/backend/test/data/{simple,pytorch-converted,pytorch-operator},
  as shipped and converted to opset 18 by onnx.version_converter;
- the light zoo: onnx/backend/test/data/light (one input, one stored output each).

Comparison (`mismatch`): ONNX's runner compares with np.testing.assert_allclose at the
case's rtol/atol (1e-3/1e-7 unless the case says); here integers and bools must be equal,
dtypes and shapes the same, nan where the truth has nan, infinities equal, and a zero's
sign equal where the op defines it (SIGNED_ZERO_OPS: the ops whose result is a copy or an
exactly rounded function of its inputs, where -0.0 is part of the answer).

Used by tests/test_onnx_conformance.py and bench/bench_onnx_conformance.py.
"""

from __future__ import annotations

import fcntl
import glob
import os
import pickle
import re
from typing import NamedTuple

import numpy as np

# ops whose outputs' zero signs are defined (IEEE: -x, |x|, copies, rounding; a product's
# or a sum's zero sign depends on the order of operations and is not compared)
SIGNED_ZERO_OPS = {
    "Neg", "Abs", "Floor", "Ceil", "Round", "Relu", "Identity", "Reshape", "Transpose", "Flatten",
    "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
    "Expand", "Tile", "Where", "Cast", "CastLike", "Reciprocal", "Sqrt", "Mul", "Div", "Sign",
    "Max", "Min", "Clip", "Pad", "DepthToSpace", "SpaceToDepth", "Trilu", "Sin", "Tanh", "Erf",
}


class Case(NamedTuple):
    name: str
    model: bytes             # the serialized ModelProto
    data_sets: list          # [(inputs [array], outputs [array])]
    rtol: float = 1e-3
    atol: float = 1e-7


# ----------------------------------------------------------------------------- the cases


def onnx_data_dir() -> str:
    import onnx.backend.test
    return os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")


def node_cases(cache_dir: str) -> list[Case]:
    """The node cases, generated once per onnx version into cache_dir (a lock keeps
    parallel test workers from generating them twice)."""
    import onnx
    path = os.path.join(cache_dir, f"node-cases-onnx-{onnx.__version__}.pickle")
    os.makedirs(cache_dir, exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            cases = _generate_node_cases()
            with open(path + ".tmp", "wb") as f:
                pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(path + ".tmp", path)
    with open(path, "rb") as f:
        return pickle.load(f)


def _generate_node_cases() -> list[Case]:
    import warnings

    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow warnings (casts to float8 ...)
        collected = node.collect_testcases(None)
    cases = []
    for case in collected:
        data_sets = [([_array(a) for a in inputs], [_array(a) for a in outputs]) for inputs, outputs in case.data_sets]
        cases.append(Case(case.name, case.model.SerializeToString(), data_sets, case.rtol, case.atol))
    return cases


def _array(value):
    """A data set's value as numpy (some cases store TensorProtos: float16 casts, ...); a
    sequence or optional stays a list (refused)."""
    from onnx import TensorProto, numpy_helper
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value if isinstance(value, list) else np.asarray(value)


def model_dirs(kind: str) -> list[str]:
    """The model-data folders of one kind (simple, pytorch-converted, pytorch-operator)."""
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(onnx_data_dir(), kind, "*", "model.onnx")))


def model_case(folder: str, opset: int | None = None) -> Case:
    """A model-data folder as a Case; with `opset`, the model converted to it first (raises
    what onnx.version_converter raises when it cannot)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(folder, "model.onnx"))
    if opset is not None:
        from onnx import version_converter
        model = version_converter.convert_version(model, opset)
    data_sets = []
    for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        def read(prefix):
            arrays = []
            for i in range(len(glob.glob(os.path.join(data, f"{prefix}_*.pb")))):
                tensor = onnx.TensorProto()
                with open(os.path.join(data, f"{prefix}_{i}.pb"), "rb") as f:
                    tensor.ParseFromString(f.read())
                arrays.append(numpy_helper.to_array(tensor))
            return arrays
        data_sets.append((read("input"), read("output")))
    kind = os.path.basename(os.path.dirname(folder))
    return Case(f"{kind}/{os.path.basename(folder)}", model.SerializeToString(), data_sets)


def zoo_models() -> list[str]:
    return sorted(glob.glob(os.path.join(onnx_data_dir(), "light", "*.onnx")))


def zoo_inputs(model) -> dict:
    """The inputs ONNX's runner feeds a light model (Runner.generate_dummy_data, random=False):
    arange(n) / n in each input's shape, float32."""
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for x in model.graph.input:
        if x.name not in initializers:
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def zoo_case(path: str) -> Case:
    """A light zoo model with the runner's inputs and its stored output (light_*_output_0.pb)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    tensor = onnx.TensorProto()
    with open(os.path.splitext(path)[0] + "_output_0.pb", "rb") as f:
        tensor.ParseFromString(f.read())
    inputs = list(zoo_inputs(model).values())
    return Case(os.path.basename(path), model.SerializeToString(), [(inputs, [numpy_helper.to_array(tensor)])])


# ----------------------------------------------------------------------------- running


class Outcome(NamedTuple):
    status: str              # "pass", "refused" (the importer's FormatError), "error", "wrong"
    detail: str = ""         # the refusal, the error or the mismatch
    ops: tuple = ()          # the ops a refusal names ((op, version) pairs; empty: not an op's)


def import_outcome(case: Case) -> Outcome:
    """Only the import: pass or refused."""
    import onnx

    from uopcli import FormatError
    from uopcli.interop.onnx.importer import import_model
    model = onnx.ModelProto()
    model.ParseFromString(case.model)
    try:
        import_model(model, source=case.name)
    except FormatError as e:
        return Outcome("refused", str(e), refused_ops(e))
    return Outcome("pass")


# Cases whose stored outputs carry the rounding of a float32 computation beyond the case's
# atol: {name: the atol they are held to instead}. numpy 2's FFT keeps float32 as complex64,
# and the inverse DFT cases' imaginary parts, -7e-16 by the float64 transform of the same
# input, are stored as 1.9e-7 (1.6 ulps of the values' size of 1), above the atol of 1e-7.
# tests/test_onnx_signal.py checks that the stored truth is that far from float64's and ours
# within 1e-7 of it: when ONNX's data is regenerated exactly, that test says to drop these.
ROUNDED_TRUTH = {"test_dft_inverse": 2.5e-7, "test_dft_inverse_opset19": 2.5e-7}


def atol_of(case: Case) -> float:
    return max(case.atol, ROUNDED_TRUTH.get(case.name, 0.0))


def run_case(case: Case) -> Outcome:
    """The case through uopgrad: pass, refused (with the ops refused), error (anything
    raised after the import accepted the model) or wrong (a value differs)."""
    import onnx

    from uopcli import FormatError, evaluate_graph
    from uopcli.interop.onnx.importer import import_model
    model = onnx.ModelProto()
    model.ParseFromString(case.model)
    initializers = {t.name for t in model.graph.initializer}
    input_names = [i.name for i in model.graph.input if i.name not in initializers]
    bound: dict = {}
    try:
        graph, weights = import_model(model, source=case.name)
    except FormatError as e:
        if not any(text in str(e) for text in SPECIALIZED) or len(case.data_sets) != 1:
            return Outcome("refused", str(e), refused_ops(e))
        # an axes, shape or pads input: fixed to the run's values, as a backend that
        # specializes on its inputs does and as a user does with --constant; a symbolic
        # dimension given the run's size (--shape). Integer and bool inputs are fixed at
        # once; a float input only where the importer names it as one it must know (a
        # Resize's scales, a OneHot's depth): the others stay inputs, to be evaluated
        given = {name: value for name, value in zip(input_names, case.data_sets[0][0]) if isinstance(value, np.ndarray)}
        bound = {name: value for name, value in given.items() if value.dtype.kind in "iub"}
        while True:
            shapes = {name: value.shape for name, value in given.items() if name not in bound}
            try:
                graph, weights = import_model(model, shapes, source=case.name, constants=bound)
                break
            except FormatError as again:
                named = _NAMED_INPUT.search(str(again))
                if named is None or named.group(1) not in given or named.group(1) in bound:
                    return Outcome("refused", str(again), refused_ops(again))
                bound[named.group(1)] = given[named.group(1)]
    output_names = list(graph.outputs)
    ops = {n.op_type for n in model.graph.node}
    for inputs, outputs in case.data_sets:
        if any(isinstance(a, list) for a in inputs + outputs):
            return Outcome("refused", "a sequence input or output")
        feeds = dict(weights)
        feeds.update((name, value) for name, value in zip(input_names, inputs) if name not in bound)
        try:
            result = evaluate_graph(graph, feeds)
        except Exception as e:  # noqa: BLE001 - any error here is the case failing, reported
            return Outcome("error", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
        got = [result[name] for name in output_names]
        if len(got) != len(outputs):
            return Outcome("wrong", f"{len(got)} outputs, the case has {len(outputs)}")
        for i, (ours, truth) in enumerate(zip(got, outputs)):
            problem = mismatch(np.asarray(ours), np.asarray(truth), case.rtol, atol_of(case),
                               signed_zero=bool(ops) and ops <= SIGNED_ZERO_OPS)
            if problem:
                return Outcome("wrong", f"output {i} ({output_names[i]}): {problem}")
    return Outcome("pass")


# the refusals a run retries with its inputs' values and shapes known at import
SPECIALIZED = ("must be known when importing", "symbolic dimension", "no shape in the file")
_NAMED_INPUT = re.compile(r"but it is the model's input '([^']+)': give its value with --constant")


def refused_ops(error) -> tuple:
    """The (op, version) pairs a refusal names: all of an UnsupportedOps refusal's, or the
    one node's op (version None) of any other refusal of a node."""
    missing = getattr(error, "missing", None)
    if missing:
        return tuple((op, version) for op, version, _count in missing)
    return ((error.op, None),) if getattr(error, "op", None) else ()


def mismatch(ours: np.ndarray, truth: np.ndarray, rtol: float, atol: float, signed_zero: bool) -> str:
    """Why `ours` is not `truth` (empty when it is): see the module's docstring."""
    if ours.dtype != truth.dtype:
        return f"dtype {ours.dtype}, the truth's {truth.dtype}"
    if ours.shape != truth.shape:
        return f"shape {ours.shape}, the truth's {truth.shape}"
    if truth.dtype.kind != "f":
        bad = ours != truth
        return _first(bad, ours, truth, "differ") if bad.any() else ""
    wide_ours, wide_truth = ours.astype(np.float64), truth.astype(np.float64)
    nan_ours, nan_truth = np.isnan(wide_ours), np.isnan(wide_truth)
    if (nan_ours != nan_truth).any():
        return _first(nan_ours != nan_truth, ours, truth, "nan where the truth is not, or not where it is")
    inf_truth = np.isinf(wide_truth)
    if (np.isinf(wide_ours) != inf_truth).any() or (wide_ours[inf_truth] != wide_truth[inf_truth]).any():
        return _first((np.isinf(wide_ours) != inf_truth) | (inf_truth & (wide_ours != wide_truth)), ours, truth,
                      "infinities differ")
    finite = ~(nan_truth | inf_truth)
    far = np.zeros(truth.shape, bool)
    far[finite] = np.abs(wide_ours[finite] - wide_truth[finite]) > atol + rtol * np.abs(wide_truth[finite])
    if far.any():
        return _first(far, ours, truth, f"beyond rtol {rtol}, atol {atol}")
    if signed_zero:
        zeros = (wide_truth == 0) & (wide_ours == 0)
        signs = zeros & (np.signbit(wide_ours) != np.signbit(wide_truth))
        if signs.any():
            return _first(signs, ours, truth, "the sign of a zero differs")
    return ""


def _first(bad: np.ndarray, ours, truth, what: str) -> str:
    where = np.flatnonzero(bad.reshape(-1))[:4]
    return (f"{int(bad.sum())} of {bad.size} {what}; at {where.tolist()}: ours "
            f"{ours.reshape(-1)[where].tolist()}, truth {truth.reshape(-1)[where].tolist()}")
