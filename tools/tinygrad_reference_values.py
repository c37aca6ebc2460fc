"""Run every case of tests/tinygrad_cases.py on tinygrad (and torch, where a case names a
torch form) and store what came out in tests/data/tinygrad_reference.json, which the tests
compare the builder with (so `make test` needs neither package).

    .venv/bin/pip install tinygrad==0.14.0 torch   # torch is optional
    .venv/bin/python tools/tinygrad_reference_values.py [--also-cpu] [-o PATH] [--only PREFIX --merge]

tinygrad runs on its PYTHON device, the emulator that executes each UOp as its definition
says (an 8-bit add wraps at 8 bits). `--also-cpu` runs each case again on the CPU device
(clang) and marks the cases whose values differ there: C promotes narrow integers to int
inside one kernel, so `(b - a).cast(float32)` of uint8 100 and 200 is -100 on CPU and 156
on PYTHON; such a value is the backend's, not the Tensor function's meaning.

For each case: per output its tinygrad dtype (weak dtypes included: `int8 + 2.5` is
"weakfloat"), the dtype its values come out as, shape and values (NaN and infinities as
the strings "nan", "inf", "-inf"; an integer quotient by zero as null, C leaves it
undefined); or the error tinygrad raised, with the stage (build or realize).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("DEV", "PYTHON")

from tinygrad_cases import DIVIDING, all_cases, flat_outputs  # noqa: E402

DEFAULT_OUTPUT = ROOT / "tests" / "data" / "tinygrad_reference.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--also-cpu", action="store_true", help="mark cases whose values differ on the CPU device")
    parser.add_argument("--only", default="", help="run only cases whose name starts with this")
    parser.add_argument("--merge", action="store_true", help="update these cases in the existing output, keep the rest")
    args = parser.parse_args()
    import tinygrad
    from tinygrad import Device
    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: torch values are left out", file=sys.stderr)
    started = time.time()
    results = json.loads(args.output.read_text())["cases"] if args.merge and args.output.exists() else {}
    for case in all_cases():
        if not case.name.startswith(args.only):
            continue
        entry = run_tinygrad(case, Device.DEFAULT)
        if args.also_cpu and "outputs" in entry and not _divides_by_zero(case):
            entry["cpu_differs"] = run_tinygrad(case, "CPU").get("outputs") != entry["outputs"]
        if torch is not None and case.torch is not None:
            entry["torch"] = run_torch(case, torch)
        results[case.name] = entry
        if len(results) % 500 == 0 and not args.merge:
            print(f"{len(results)} cases, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    document = {"tinygrad": tinygrad.__version__ if hasattr(tinygrad, "__version__") else _version("tinygrad"),
                "torch": None if torch is None else torch.__version__, "device": Device.DEFAULT,
                "numpy": np.__version__, "cases": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=0, sort_keys=True) + "\n")
    print(f"{len(results)} cases in {time.time() - started:.0f} s -> {args.output}", file=sys.stderr)
    return 0


def _divides_by_zero(case) -> bool:
    """An integer quotient by zero traps (SIGFPE) on the CPU device: such cases stay off it."""
    return case.name.startswith("binary/") and case.name.split("/")[1] in DIVIDING


def _version(package: str) -> str:
    from importlib.metadata import version
    return version(package)


def run_tinygrad(case, device: str) -> dict:
    from tinygrad import Context, Tensor
    with Context(DEV=device):
        tensors = {name: Tensor(array, device=device) for name, array in case.inputs.items()}
        try:
            built = case.build(Tensor, **tensors)
        except Exception as error:  # noqa: BLE001 - every refusal is a result
            return _error("build", error)
        outputs = list(flat_outputs(built))
        try:
            arrays = [t.numpy() for t in outputs]
        except Exception as error:  # noqa: BLE001
            return _error("realize", error)
        return {"outputs": [_output(case, t.dtype, array) for t, array in zip(outputs, arrays)]}


def run_torch(case, torch) -> dict:
    tensors = {name: torch.from_numpy(array.copy()) for name, array in case.inputs.items()}
    try:
        built = case.torch(torch, **tensors)
    except Exception as error:  # noqa: BLE001
        return _error("build", error)
    return {"outputs": [_output(case, str(t.dtype).removeprefix("torch."), t.numpy()) for t in flat_outputs(built)]}


def _error(stage: str, error: Exception) -> dict:
    return {"error": {"stage": stage, "type": type(error).__name__, "message": str(error).splitlines()[0][:300]
                      if str(error) else ""}}


def _output(case, dtype, array: np.ndarray) -> dict:
    name = dtype if isinstance(dtype, str) else repr(dtype).removeprefix("dtypes.")
    values = array.tolist()
    method = case.name.split("/")[1] if case.name.startswith("binary/") else None
    if method in DIVIDING and array.dtype.kind in "iub" and "b" in case.inputs:
        divisor = np.broadcast_to(case.inputs["b"], array.shape)
        values = np.where(divisor == 0, None, array.astype(object)).tolist()
    return {"tinygrad_dtype": name, "dtype": array.dtype.name, "shape": list(array.shape), "values": _encode(values)}


def _encode(values):
    if isinstance(values, list):
        return [_encode(v) for v in values]
    if isinstance(values, float) and not math.isfinite(values):
        return "nan" if math.isnan(values) else ("inf" if values > 0 else "-inf")
    return values


if __name__ == "__main__":
    sys.exit(main())
