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
