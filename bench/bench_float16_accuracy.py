"""float16 accuracy of the ONNX importer, op by op, beside onnxruntime.

    PYTHONPATH=. .venv/bin/python bench/bench_float16_accuracy.py [--write] [--only Op,Op]

For every op of the import table that takes float16 (the skipped ones are listed at the end
of the table, with why), a one-node float16 model is built and fed values at magnitudes
around 1e-3, 1, 30, 300, 3,000 and 30,000, both signs (the op's domain where it has one:
|x| for Log, [-1, 1] for Asin, 1 + |x| for Acosh ...), plus the op's own edges. Each
magnitude's feed is run by

- uopgrad: import_model + evaluate_graph of the float16 model;
- onnxruntime's CPU provider on the same model ("-" where it has no float16 kernel);
- the truth: the same model with every float16 tensor made float64, imported by uopgrad
  and evaluated on the same values widened (uopgrad's float64 import is within a few
  float64 ulps of mpmath for the elementwise ops, tests/test_onnx_float64_accuracy.py),
  rounded to float16 once. onnx.reference's float64 run is compared with it too: the
  column "ref64" is the largest gap between the two in float16 ulps (">1" would make the
  truth doubtful there).

An error is the distance from the rounded truth in float16 ulps, counted as steps between
adjacent float16 values, so below float16's smallest normal (6.1e-5) a step is the
smallest subnormal (6e-8), and 65,504 -> inf is one step. "nonfinite" counts the values
that are inf or nan where the truth is finite. With --write, the table goes to
bench/RESULTS-float16.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if "uopcli" not in sys.modules:  # run as a script: this checkout's uopcli
    sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from _float16_sweep import CASES, SKIPPED, sweep_case  # noqa: E402
from uopcli.interop.onnx.import_table import TABLE  # noqa: E402


def _fmt(cell):
    if cell is None:
        return "-", "-", ""
    u, bad, where = cell
    return ("inf" if u == np.inf else f"{u:g}"), str(bad), where


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    lines = ["| op | ours: max ulps | ours: nonfinite | worst at | onnxruntime: max ulps | onnxruntime: nonfinite"
             " | ref64 |", "|---|---:|---:|---|---:|---:|---:|"]
    start = time.time()
    for case in CASES:
        if only and case.op not in only and case.label not in only:
            continue
        try:
            row = sweep_case(case)
        except Exception as e:  # noqa: BLE001 - one op's failure is a row, not the end
            lines.append(f"| {case.label} | error: {type(e).__name__}: {str(e)[:80]} | | | | | |")
            print(lines[-1], flush=True)
            continue
        u, bad, where = _fmt(row["ours"])
        ou, obad, _ = _fmt(row["ort"])
        ref = "-" if row["ref"] is None else ("inf" if row["ref"] == np.inf else f"{row['ref']:g}")
        lines.append(f"| {case.label} | {u} | {bad} | {where} | {ou} | {obad} | {ref} |")
        print(lines[-1], flush=True)
    print(f"{time.time() - start:.0f} s", file=sys.stderr)
    swept = {c.op for c in CASES}
    missing = sorted(set(TABLE) - swept - {op for ops in SKIPPED.values() for op in ops})
    notes = [f"- skipped, {why}: {', '.join(ops)}" for why, ops in SKIPPED.items()]
    if missing:
        notes.append(f"- not swept yet: {', '.join(missing)}")
    if args.write:  # the table and notes replaced; the file's own "## " sections after them kept
        path = os.path.join(HERE, "RESULTS-float16.md")
        kept = ""
        if os.path.exists(path):
            text = open(path).read()
            kept = text[text.index("\n## "):] if "\n## " in text else ""
        with open(path, "w") as f:
            f.write("# float16 accuracy of the ONNX importer beside onnxruntime\n\n")
            f.write(__doc__.split("\n\n", 1)[1].strip() + "\n\n")
            f.write("\n".join(lines) + "\n\n" + "\n".join(notes) + "\n" + kept)
    else:
        print("\n".join(notes))


if __name__ == "__main__":
    main()
