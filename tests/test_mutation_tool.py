"""tools/mutation.py's own checks of a mutmut run, without running mutmut: a run that
stopped before its mutants must fail loudly, never print a score of 0/0."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("mutation_tool", Path(__file__).parent.parent / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mutation)

# the end of mutmut 3.8.1's output when a mapped test failed in its clean run (spinner frames
# joined by carriage returns, then pytest's summary and mutmut's reason)
CLEAN_RUN_FAILED = ("⠋ Running clean tests\r⠙ Running clean tests\r"
                    "=========================== short test summary info ============================\n"
                    "FAILED tests/test_x.py::test_y[float32]\n"
                    "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
                    "Failed to run clean test\n")


def test_a_mutmut_run_that_exits_nonzero_is_reported_with_its_reason_and_failing_test():
    line = mutation.run_failure(1, CLEAN_RUN_FAILED)
    assert line == "mutmut run exited 1: Failed to run clean test (FAILED tests/test_x.py::test_y[float32])"
    assert "\n" not in line


def test_a_mutmut_run_that_exits_zero_is_no_failure():
    assert mutation.run_failure(0, "Running mutation testing\n572/572 done\n") is None


def test_a_run_whose_mutants_have_no_result_fails_instead_of_scoring_zero_of_zero():
    stats = {"killed": 0, "survived": 0, "total": 572, "no_tests": 0, "timeout": 0, "segfault": 0}
    with pytest.raises(SystemExit, match=r"^mutation: no mutant ran: of 572, 0 reached by no mapped test"):
        mutation.counted(stats, "out/mutation/x/mutmut-run.log")


def test_a_run_counts_timeouts_and_segfaults_as_killed():
    stats = {"killed": 400, "survived": 130, "total": 572, "no_tests": 2, "timeout": 30, "segfault": 10}
    assert mutation.counted(stats) == (570, 440)


def test_current_tests_include_a_file_mapped_after_the_run(tmp_path, monkeypatch):
    """--recheck DIR --current-tests runs the run's mapped files and those mapped to its targets
    now: a tests/test_*_mutants.py written for the survivors, absent when the run started."""
    root = tmp_path / "root"
    (root / "tests").mkdir(parents=True)
    for name in ["test_a.py", "test_a_mutants.py"]:
        (root / "tests" / name).write_text("def test_x():\n    pass\n")
    where = tmp_path / "scratch"
    (where / "mutants" / "tests").mkdir(parents=True)
    (where / "pyproject.toml").write_text('[tool.mutmut]\nonly_mutate = ["pkg/mod.py", "pkg/sub/*"]\n'
                                          'pytest_add_cli_args_test_selection = ["tests/test_a.py"]\n'
                                          'pytest_add_cli_args = ["-q"]\n')
    monkeypatch.setattr(mutation, "ROOT", root)
    monkeypatch.setattr(mutation, "TESTS", [("pkg/mod.py", ["tests/test_a_mutants.py", "tests/test_a.py"]),
                                            ("pkg/sub", ["tests/test_a.py", "tests/test_gone.py"])])
    assert mutation.refresh_tests(where) == ["tests/test_a_mutants.py", "tests/test_a.py"]
    assert (where / "mutants" / "tests" / "test_a_mutants.py").exists()
