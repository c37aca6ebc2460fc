"""Issue 30's 13 plants, planted again one at a time: each must fail at least one test.

    python tools/plants.py             # make plants: every row, a few minutes
    python tools/plants.py --only 7    # row 7 alone

A mutation review once planted these realistic bugs and every test let them through; tests
were written since. This replays them in a scratch copy of the project's files (out/plants/):
for each row the original text must occur exactly once in its file (else the code moved and
the row must be updated), it is replaced by the planted text, the row's test files run in a
fresh interpreter, and the file is restored. It prints `caught by <first failing test>` or
`NOT CAUGHT`, and exits 1 if a plant is not caught, or if the tests fail unplanted (checked
first, once). The worktree is never changed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from mutation import copy_project  # tools/, beside this script

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "out" / "plants"


class Plant(NamedTuple):
    file: str
    original: str
    planted: str
    tests: list[str]
    issue: str  # the issue's words for the bug


SIMPLIFY = "uopcli/core/simplify/"
ONNX = "uopcli/interop/onnx/"
EXPORT = "uopcli/interop/tinygrad/export_rules.py"
DIFFERENTIAL, ULPS = ["tests/test_simplify_differential.py"], ["tests/test_simplify_ulps.py"]
EDGES, RULES = ["tests/test_onnx_edges.py"], ["tests/test_tinygrad_export_rules.py"]

# Each row's tests: of tools/mutation.py's TESTS for its module, the files that hold the case
# written for the bug (the rest cost minutes more per row and add nothing here). Rows where the
# code has changed since the issue say what the plant is now.
PLANTS = [
    # 1: the `not` dropped: a cast from a float counts as never -0.0 (one from an int as maybe, harmless)
    Plant(SIMPLIFY + "exact.py", "if x.op == Ops.CAST:\n        return not x.src[0].dtype.is_float",
          "if x.op == Ops.CAST:\n        return x.src[0].dtype.is_float", DIFFERENTIAL,
          "a cast from a float counted as never -0.0 (float16 -0.0 cast to float32, plus 0.0: "
          "simplified -0.0, as written +0.0)"),
    # 2
    Plant(SIMPLIFY + "exact.py", "dtypes.float16: 11,", "dtypes.float16: 16,", DIFFERENTIAL,
          "float16 mantissa 11 bits -> 16 (int16 3001 -> float16 -> int16: simplified 3001, as written 3000)"),
    # 3
    Plant(SIMPLIFY + "fold.py", "Ops.MAX: lambda node, a, b: _np().maximum(a, b),",
          "Ops.MAX: lambda node, a, b: max(a, b),", DIFFERENTIAL,
          "MAX folding np.maximum -> Python max (max(1, nan) folds to 1, max(-0.0, 0.0) to -0.0)"),
    # 4: _offset reads a CONST on the left of a SUB too, as if it were added
    Plant(SIMPLIFY + "algebraic.py", "if a.op == Ops.CONST and node.op == Ops.ADD:", "if a.op == Ops.CONST:", ULPS,
          "constant offsets: c - x read as x + c ((2 - x) + 1 becomes 3 + x)"),
    # 5: fold_constant_factors' bound (measured 2); the test's record of each bound fails first, and
    # with the record changed too, its "loose by 10x" check would
    Plant(SIMPLIFY + "algebraic.py", "`(x*c1)*c2 -> x*(c1*c2)`\", 3.0),", "`(x*c1)*c2 -> x*(c1*c2)`\", 30.0),", ULPS,
          "a row's ulp bound 3 -> 30 (must fail: a bound loose by 10x fails)"),
    # 6
    Plant(SIMPLIFY + "algebraic.py", "not set(axes) <= grown", "not set(axes) & grown", ULPS,
          "grown axes of an EXPAND: <= -> & (summing grown and kept axes raises a GraphError)"),
    # 7
    Plant(ONNX + "ops_tensor.py", "min(max(end, -1), size - 1)", "min(max(end, 0), size - 1)", EDGES,
          "Slice: a negative-step end clamped to 0, not -1 (a reversing Slice drops element 0)"),
    # 8: both SAME modes put the odd pad before, as SAME_LOWER does
    Plant(ONNX + "ops_nn.py", "pairs.append((small, large) if auto_pad == \"SAME_UPPER\" else (large, small))",
          "pairs.append((large, small))", EDGES,
          "auto_pad: SAME_UPPER padded as SAME_LOWER (MaxPool k=2 on 6x6 differs from onnxruntime)"),
    # 9: the restoring multiply now lives in emit.py's Emitter.where; exact.py's may_be_minus_zero
    # decides whether it is needed, and with > a -0.0 constant branch skips it
    Plant(ONNX + "exact.py", "math.copysign(1.0, node.arg) < 0", "math.copysign(1.0, node.arg) > 0", EDGES,
          "restoring -0.0 after Where: < 0 -> > 0 (where(c, -0.0, x) is +0.0 in onnxruntime)"),
    # 10: min picks the weak int where max picks the weak float
    Plant(EXPORT, "weakest = max(node.src,", "weakest = min(node.src,", RULES,
          "weak comparisons: both-weak picks int, not float"),
    # 11
    Plant(EXPORT, "\"MAX\": Ops.OR}", "\"MAX\": Ops.AND}", RULES,
          "bool MAX: MAX -> AND (Tensor.maximum of bools exported wrong)"),
    # 12
    Plant(EXPORT, "pads = ((i, len(parts) - 1 - i),)", "pads = ((len(parts) - 1 - i, i),)", RULES,
          "STACK: pieces padded in reverse (Tensor.stack(a, b) and a.cat(b) reversed)"),
    # 13
    Plant("uopcli/views/html/groups.py", "parent = common_ancestor(homes) if homes else self.root",
          "parent = homes[0] if homes else self.root", ["tests/test_html_groups.py"],
          "shared bodies: a body group put under its first caller, not the callers' common scope "
          "(a function called from layer.0 and layer.1 is drawn inside layer.0)"),
]


def pytest(tests: list[str]) -> tuple[bool, str]:
    """(passed, the first failing test id or pytest's last line), in a fresh interpreter."""
    shutil.rmtree(SCRATCH / ".hypothesis", ignore_errors=True)  # no example saved by an earlier plant
    run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "--timeout=600", *tests], cwd=SCRATCH, env={**os.environ, "PYTHONPATH": str(SCRATCH)},
                         capture_output=True, text=True)
    lines = run.stdout.splitlines()
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return run.returncode == 0, failed[0] if failed else (lines[-1] if lines else run.stderr.strip()[-300:])


def write(path: Path, text: str) -> None:
    """Write, and drop the module's cached bytecode: a plant of the same length written
    within the second of the last compile would otherwise pass as unchanged."""
    path.write_text(text)
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, metavar="N", help=f"replay row N alone (1-{len(PLANTS)})")
    args = parser.parse_args()
    if args.only is not None and not 1 <= args.only <= len(PLANTS):
        parser.error(f"--only takes a row from 1 to {len(PLANTS)}")
    rows = [(i, p) for i, p in enumerate(PLANTS, 1) if args.only in (None, i)]
    counts = {i: (ROOT / p.file).read_text().count(p.original) for i, p in rows}
    moved = [f"row {i}: {p.file} holds {counts[i]} copies of {p.original!r}" for i, p in rows if counts[i] != 1]
    if moved:
        print("\n".join(moved), file=sys.stderr)
        raise SystemExit("plants: the original text must occur exactly once: the code moved, update the rows")
    start = time.monotonic()
    copy_project(SCRATCH)
    tests = list(dict.fromkeys(t for _, p in rows for t in p.tests))
    passed, summary = pytest(tests)
    print(f"unplanted: {'passes' if passed else 'FAILS'} {' '.join(tests)} ({summary})", flush=True)
    if not passed:
        return 1
    missed = 0
    for i, p in rows:
        path = SCRATCH / p.file
        text = path.read_text()
        write(path, text.replace(p.original, p.planted))
        began = time.monotonic()
        try:
            passed, first = pytest(p.tests)
        finally:
            write(path, text)
        missed += passed
        print(f"{i:2}. {p.file}: {p.issue}\n    {'NOT CAUGHT' if passed else 'caught by ' + first} "
              f"({time.monotonic() - began:.0f} s)", flush=True)
    print(f"plants: {len(rows) - missed} of {len(rows)} caught in {time.monotonic() - start:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
