"""Store tinygrad's realized gradients of the activations at large |x|, for the tests.

    DEV=CPU python tools/tinygrad_activation_gradients.py   # writes tests/tinygrad_activation_gradients.json

For each activation and dtype: x = [-1000, -300, -100, 100, 300, 1000], the gradient of
sum(activation(x)) with respect to x as tinygrad computes it (Tensor.gradient, realized on
its CPU device, where its kernel compiler rewrites the graph before running it). The
tests compare uopgrad's simplified gradients with these values, without tinygrad.
Needs tinygrad 0.14.0 (the bench extra: pip install -e '.[bench]').
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

POINTS = [-1000.0, -300.0, -100.0, 100.0, 300.0, 1000.0]
ACTIVATIONS = ["sigmoid", "tanh", "gelu", "quick_gelu", "softplus", "mish", "silu"]
DTYPES = ["float32", "float16"]
OUT = Path(__file__).resolve().parent.parent / "tests" / "tinygrad_activation_gradients.json"


def _number(value: float):
    return value if math.isfinite(value) else repr(value)  # JSON has no nan or inf


def main() -> int:
    os.environ.setdefault("DEV", "CPU")
    from tinygrad import Tensor, dtypes
    table = {}
    for dtype in DTYPES:
        for name in ACTIVATIONS:
            x = Tensor(POINTS, dtype=getattr(dtypes, dtype))
            (grad,) = getattr(x, name)().sum().gradient(x)
            table[f"{name}/{dtype}"] = [_number(float(v)) for v in grad.numpy().tolist()]
    from importlib.metadata import version
    document = {"tinygrad": version("tinygrad"),
                "device": os.environ["DEV"], "points": POINTS, "gradients": table}
    OUT.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
