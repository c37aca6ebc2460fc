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
                    "## 4. Scaling", "## 5. Start-up"):
        assert heading in report
    assert "error:" not in report, [line for line in report.splitlines() if "error:" in line]
    assert "`uopgrad info small.uop`" in report
