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
