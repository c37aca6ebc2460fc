"""ONNX's conformance data through uopgrad and through onnxruntime, counted side by side.

    .venv/bin/python bench/bench_onnx_conformance.py [--write]

Each case (tests/_onnx_conformance.py: the node cases, the wheel's model data as shipped
and at opset 18, the light zoo) is run by uopgrad (import_model + evaluate_graph) and by
onnxruntime's CPU provider, each compared with the stored outputs by the same comparison
(integers and bools equal, floats within the case's rtol/atol, nan and infinities where
the truth has them). uopgrad's refusals are grouped by the reason
tests/onnx_conformance_refused.py gives. With --write, the tables replace the section
"ONNX's conformance data" of bench/ONNX-RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import _onnx_conformance as conformance  # noqa: E402
from onnx_conformance_refused import refusal_reason  # noqa: E402

SECTION = "## ONNX's conformance data: uopgrad beside onnxruntime"


def onnxruntime_outcome(case) -> str:
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(case.model, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any failure to load is "not run"
        return "not run"
    names = [i.name for i in session.get_inputs()]
    for inputs, outputs in case.data_sets:
        if any(isinstance(a, list) for a in inputs + outputs):
            return "not run"
        try:
            got = session.run(None, dict(zip(names, inputs)))
        except Exception:  # noqa: BLE001
            return "not run"
        if len(got) != len(outputs):
            return "wrong"
        for ours, truth in zip(got, outputs):
            if conformance.mismatch(np.asarray(ours), np.asarray(truth), case.rtol, conformance.atol_of(case), False):
                return "wrong"
    return "pass"


def cases_of(kind: str, cache: str):
    if kind == "node":
        return conformance.node_cases(cache), 0
    if kind == "zoo":
        return [conformance.zoo_case(p) for p in conformance.zoo_models()], 0
    cases, unconverted = [], 0
    for sub in ("simple", "pytorch-converted", "pytorch-operator"):
        for folder in conformance.model_dirs(sub):
            try:
                cases.append(conformance.model_case(folder, 18 if kind == "opset 18" else None))
            except Exception:  # noqa: BLE001 - version_converter cannot convert it
                unconverted += 1
    return cases, unconverted


def measure(kinds, cache: str) -> dict:
    import onnxruntime as ort
    ort.set_default_logger_severity(4)
    results = {}
    for kind in kinds:
        cases, unconverted = cases_of(kind, cache)
        ours, theirs, reasons, unlisted = collections.Counter(), collections.Counter(), collections.Counter(), []
        ops = collections.Counter()
        cpu = [0.0, 0.0]
        for case in cases:
            start = time.process_time()
            outcome = conformance.run_case(case)
            cpu[0] += time.process_time() - start
            ours[outcome.status] += 1
            if outcome.status == "refused":
                reason = refusal_reason(outcome.detail, outcome.ops)
                reasons[reason or "NOT LISTED"] += 1
                if reason is None:
                    unlisted.append(f"{case.name}: {outcome.detail}")
                for op, version in outcome.ops:
                    ops[op if version is None else f"{op}-{version}"] += 1
            elif outcome.status != "pass":
                unlisted.append(f"{case.name}: {outcome.status}: {outcome.detail}")
            start = time.process_time()
            theirs[onnxruntime_outcome(case)] += 1
            cpu[1] += time.process_time() - start
        results[kind] = dict(total=len(cases), unconverted=unconverted, ours=ours, theirs=theirs, reasons=reasons,
                             ops=ops, unlisted=unlisted, cpu=cpu)
        print(kind, len(cases), dict(ours), dict(theirs), f"cpu {cpu[0]:.1f} s / {cpu[1]:.1f} s", file=sys.stderr)
    return results


def markdown(results: dict, stamp: str) -> str:
    lines = [SECTION, "", f"<!-- bench/bench_onnx_conformance.py, {stamp} -->", "",
             "`bench/bench_onnx_conformance.py`: each case run by uopgrad (`import_model` + `evaluate_graph`, "
             "as `uopgrad eval` runs an .onnx file) and by onnxruntime's CPU provider, both compared with the "
             "stored outputs the same way (integers and bools equal; floats within the case's rtol/atol, 1e-3/1e-7 "
             "unless it says; nan and infinities where the truth has them). *refused*: the importer says no, in "
             "one line (the reasons below); *wrong*: a value differs; *error*: anything raised after the import. "
             "onnxruntime's *not run*: its session or run raised. CPU seconds for the whole set.", "",
             "| data | cases | uopgrad passes | refused | wrong | error | onnxruntime passes | not run | wrong "
             "| CPU uopgrad / onnxruntime |", "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"node": "node cases (`collect_testcases()`)",
             "shipped": "model data as shipped (simple, pytorch-converted, pytorch-operator)",
             "opset 18": "the same converted to opset 18", "zoo": "light model zoo (onnx/backend/test/data/light)"}
    for kind, r in results.items():
        total = f"{r['total']:,}" + (f" ({r['unconverted']} not convertible)" if r["unconverted"] else "")
        lines.append(f"| {names[kind]} | {total} | {r['ours']['pass']} | {r['ours']['refused']} | "
                     f"{r['ours']['wrong']} | {r['ours']['error']} | {r['theirs']['pass']} | "
                     f"{r['theirs']['not run']} | {r['theirs']['wrong']} | {r['cpu'][0]:.1f} s / {r['cpu'][1]:.1f} s |")
    lines += ["", "What uopgrad refuses, by reason (tests/onnx_conformance_refused.py; a case counts once):", "",
              "| reason | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    every = sorted({reason for r in results.values() for reason in r["reasons"]},
                   key=lambda reason: -sum(r["reasons"][reason] for r in results.values()))
    for reason in every:
        lines.append(f"| {reason} | " + " | ".join(str(r["reasons"][reason]) for r in results.values()) + " |")
    top = collections.Counter()
    for r in results.values():
        top.update(r["ops"])
    lines += ["", "The ops and versions refused most often (cases, all sets): " +
              ", ".join(f"{op} {n}" for op, n in top.most_common(40)) + "."]
    unlisted = [u for r in results.values() for u in r["unlisted"]]
    if unlisted:
        lines += ["", "Not listed, failing (must be none):", ""] + [f"- {re.sub(r'[|]', '/', u)[:200]}" for u in unlisted]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the section of bench/ONNX-RESULTS.md")
    parser.add_argument("--kinds", default="node,shipped,opset 18,zoo")
    args = parser.parse_args()
    import tempfile
    cache = os.path.join(tempfile.gettempdir(), f"uopgrad-onnx-conformance-{os.getuid()}")
    results = measure(args.kinds.split(","), cache)
    import onnx
    import onnxruntime
    stamp = (f"{time.strftime('%Y-%m-%d')}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}; "
             f"CPU times on a shared 2-core machine (load {os.getloadavg()[0]:.0f})")
    text = markdown(results, stamp)
    print(text)
    if args.write:
        path = os.path.join(HERE, "ONNX-RESULTS.md")
        old = open(path).read()
        head = old.split(SECTION)[0].rstrip("\n")
        rest = old.split(SECTION)[1] if SECTION in old else ""
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        with open(path, "w") as f:
            f.write(head + "\n\n" + text + tail)


if __name__ == "__main__":
    main()
