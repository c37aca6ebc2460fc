"""Whether tinygrad (installed) can run here: its CPU backend compiles with clang. The
tinygrad test modules skip with the reason given when it cannot."""

from __future__ import annotations


def unusable_reason() -> str | None:
    """None when tinygrad computes 1 + [1, 2]; else why not, for a skip's reason."""
    from tinygrad import Tensor
    try:
        Tensor([1.0, 2.0]).add(1).numpy()
    except Exception as e:  # noqa: BLE001 - any reason tinygrad gives is the skip's reason
        return f"tinygrad cannot run on this machine ({type(e).__name__}: {e}); its CPU backend needs clang"
    return None


NOT_INSTALLED = "tinygrad is not installed for this Python (pip install 'uopgrad[tinygrad]'; make test installs it)"


def import_tinygrad():
    """tinygrad, imported; or the calling test module skipped, where it is not installed.
    Importing tinygrad raises Python's recursion limit to 10,000 (its scheduler): the limit
    is put back, as the suite's other tests check behaviour at the default one."""
    import sys

    import pytest
    limit = sys.getrecursionlimit()
    module = pytest.importorskip("tinygrad", reason=NOT_INSTALLED)
    sys.setrecursionlimit(limit)
    return module
