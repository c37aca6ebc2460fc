"""Values as the commands print or store them: the table of outputs, their JSON, an .npz of
arrays, the evaluator's statistics. numpy is imported inside, when values are there."""

from __future__ import annotations


def _elements(results: dict) -> dict:
    """Outputs one array each (values.stored_elements: `t[0]`, `t[1]`, ... for a tuple
    output, None for a NOOP element; two outputs stored under one name are refused)."""
    from ..tools.values import stored_elements
    return stored_elements(results)


def _value_json(value):
    """An output in --json: an array's dtype, shape and values; a tuple output a list of
    those (null for a NOOP element)."""
    if isinstance(value, tuple):
        return [None if element is None else _array_json(element) for element in value]
    return _array_json(value)


def _array_json(array) -> dict:
    import numpy as np
    array = np.asarray(array)
    if array.dtype.kind == "f":
        values = _finite_or_text(array.astype(np.float64).tolist())
    else:
        values = array.tolist()
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": values}


def _finite_or_text(values):
    """JSON has no NaN or infinity: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(values, list):
        return [_finite_or_text(v) for v in values]
    if values != values or values in (float("inf"), float("-inf")):
        return repr(values)
    return values


def _stats_json(stats) -> dict:
    return {"seconds": stats.seconds, "peak_bytes": stats.peak_bytes}


def _stats_text(stats) -> str:
    return f"time {stats.seconds * 1e3:.3f} ms, peak live bytes {stats.peak_bytes} ({_human_bytes(stats.peak_bytes)})"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _table(results: dict, leading: int = 6) -> str:
    """One row per output: name, shape, dtype, min / mean / max, and its leading values
    (a NOOP element of a tuple output: a row saying so)."""
    import math

    import numpy as np
    rows = [("name", "shape", "dtype", "min", "mean", "max", "values")]
    for name, array in results.items():
        if array is None:
            rows.append((name, "-", "-", "-", "-", "-", "(none: a NOOP element)"))
            continue
        array = np.asarray(array)
        flat = array.reshape(-1)
        if flat.size and array.dtype.kind in "biuf":
            numeric = flat.astype(np.float64)
            with np.errstate(all="ignore"):  # the mean of [inf, -inf] is nan, and says so in the table
                # summing the shares, not dividing the sum, which overflows near the largest float64;
                # from -0.0, the identity of IEEE addition (numpy's 0.0 made the mean of [-0.0] +0)
                mean = np.sum(numeric / flat.size, initial=-0.0)
            # min and max of the numbers there are: a nan shows in the mean (and the values)
            numbers = numeric[~np.isnan(numeric)]
            low, high = (numbers.min(), numbers.max()) if numbers.size else (math.nan, math.nan)
            low, mean, high = (f"{v:.6g}" for v in (low, mean, high))
        else:
            low = mean = high = "-"
        shown = " ".join(_value_text(v) for v in flat[:leading]) + (" ..." if flat.size > leading else "")
        rows.append((name, f"[{','.join(map(str, array.shape))}]", array.dtype.name, low, mean, high, shown))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return "\n".join(("  ".join(cell.ljust(w) for cell, w in zip(row[:6], widths)) + "  " + row[6]).rstrip()
                     for row in rows)


def _value_text(value) -> str:
    if isinstance(value, (bool,)) or getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
        return "true" if value else "false"
    if getattr(value, "dtype", None) is not None and value.dtype.kind in "iu":
        return str(int(value))
    return f"{float(value):.6g}"
