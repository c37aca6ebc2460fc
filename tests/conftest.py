"""Shared pytest set-up: `--runslow` runs the tests marked slow (long fuzz and scale runs),
and every test starts with an intern table as if it ran first."""

import gc
import signal

import pytest

from uopcli.core.uop import sweep_intern_table

# A shell starts a background job (`make test &` in a script) with SIGINT ignored, and the
# commands the tests start inherit that: the tests that stop a run with SIGINT, as Ctrl-C
# does, would find it ignored. The default handler here is what an exec'd child inherits
# as the default action (a handler resets on exec; "ignored" does not).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _leave_no_nodes_behind():
    """Hash-consing shares nodes between tests (and the first metadata tag wins): drop this
    test's nodes when it ends, so the tests that follow see a table as if they ran first."""
    yield
    # the young generations only: a full collection scans every object torch and tinygrad
    # made at import, 75 ms after each of thousands of tests; nodes are acyclic and die by
    # reference counting, and what a test's cycles (tracebacks, frames) hold is young
    gc.collect(1)
    sweep_intern_table()


@pytest.fixture
def default_recursion_limit():
    """Python's default recursion limit (1000) for the test: a deep-graph test proves a walk
    is iterative only there, and a test before it in the same process may have left it
    raised (importing tinygrad raises it to 10,000: a test that asserted <= 1000 failed in
    a run where a module before it imported tinygrad)."""
    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(limit)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (long fuzz and scale runs)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
