"""The benchmark harness runs end to end (`bench/run.py --quick`), so it cannot rot.

Nothing is timed here: the run only has to finish, cover every section, and produce no
error cells. tinygrad is optional; without it its rows say skipped.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_quick_benchmark_runs_every_section():
    run = subprocess.run([sys.executable, "bench/run.py", "--quick", "--no-write"], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    report = run.stdout
    for heading in ("## Machine", "## Targets", "## 1. Differentiation", "## 2. Evaluation", "## 3. Files",
                    "## 4. Scaling", "## 5. Start-up", "## 6. Agreement with tinygrad"):
        assert heading in report
    assert "error:" not in report, [line for line in report.splitlines() if "error:" in line]
    assert "`uopgrad info small.uop`" in report
    assert "| graph | start-up and exit | reading | differentiating | encoding | writing |" in report
    agreement = report.split("## 6. Agreement with tinygrad", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in agreement.splitlines() if line.startswith(("| chain", "| mlp", "| attention"))]
    assert len(rows) == 3, agreement
    if _tinygrad_status() is None:  # tinygrad 0.14.0 is installed: the gradients were compared, and agree
        assert all(row.endswith("| yes |") for row in rows), rows


def _tinygrad_status():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from run import tinygrad_status
    finally:
        sys.path.pop(0)
    return tinygrad_status()


@pytest.mark.timeout(120)
def test_quick_prod_gradient_benchmark_runs():
    """bench/bench_prod_grad.py (REDUCE MUL's first derivative against numpy) runs and checks its values."""
    run = subprocess.run([sys.executable, "bench/bench_prod_grad.py", "--quick", "--repeats", "1"], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| (")]
    assert len(rows) == 3, run.stdout
