"""The one import of tinygrad, with the message that says how to get it, and the dtype
table both directions share."""

from __future__ import annotations

from ...errors import UOpError
from ...core.ops import DType, dtypes

INSTALL_HINT = "pip install 'uopgrad[tinygrad]'"
SUPPORTED = "0.14"


class TinygradMissing(UOpError):
    """tinygrad cannot be imported here."""


def import_tinygrad():
    """The tinygrad package, or TinygradMissing saying how to install it."""
    try:
        import tinygrad
    except ImportError as e:
        raise TinygradMissing(f"tinygrad is not installed ({e}); install the extra: {INSTALL_HINT}") from None
    return tinygrad


# the format's dtypes are named as tinygrad's `dtypes` attributes; the format has no
# bfloat16, fp8 or weak dtypes
_FORMAT_DTYPES = (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
                  dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)
_ours_by_tinygrad: dict = {}


def our_dtype(tg_dtype) -> DType | None:
    """Our dtype for a tinygrad dtype; None where the format has none (bfloat16, fp8,
    weak, void, pointers)."""
    if not _ours_by_tinygrad:
        _ours_by_tinygrad.update((tinygrad_dtype(d), d) for d in _FORMAT_DTYPES)
    return _ours_by_tinygrad.get(tg_dtype)


def tinygrad_dtype(dtype: DType):
    """tinygrad's dtype object for one of ours."""
    from tinygrad import dtypes as tg_dtypes
    return getattr(tg_dtypes, dtype.name)


# device names of earlier tinygrads -> what 0.14 calls them (its CPU device picks a
# renderer by DEV=CPU:<RENDERER>, not by the device name)
_RENAMED = {"CLANG": "CPU (DEV=CPU:CLANG picks its clang renderer)",
            "LLVM": "CPU (DEV=CPU:LLVM picks its LLVM renderer)",
            "GPU": "CL"}
_STORAGE_ONLY = {"DISK", "TINYFS", "NPY"}  # devices that hold data but compute nothing
# devices that run nothing: NULL's kernels are no-ops and it has no copyout (a device for
# timing tinygrad's own compiler); eval there failed as "internal error: no copyout on NULL"
_COMPUTES_NOTHING = {"NULL": "its kernels run nothing and it returns no values"}


def unknown_device(device: str) -> str | None:
    """Why tinygrad has no device `device` to evaluate on (checked before anything runs:
    tinygrad itself fails with an import error of its module, or not at all where the graph
    folds to constants), or None. Its devices are its runtime modules
    (tinygrad.Device._devices), but those that hold data only, or compute nothing (NULL)."""
    from tinygrad import Device
    known = getattr(Device, "_devices", None)
    name = device.split(":", 1)[0].upper()
    if not isinstance(known, list):
        return None
    usable = set(known) - _STORAGE_ONLY - set(_COMPUTES_NOTHING)
    if name in usable:
        return None
    if name in known:
        why = _COMPUTES_NOTHING.get(name, "it only holds data")
        said = f"tinygrad's {name} device computes nothing ({why}); "
    else:
        said = f"tinygrad {SUPPORTED} renamed {name} to {_RENAMED[name]}; " if name in _RENAMED else ""
    return f"{device!r}: {said}tinygrad's devices are {', '.join(sorted(usable))}"
