#!/usr/bin/env python3
"""Draw the README's picture: the gradient of logistic regression's loss w.r.t. w and b.

Solid rounded boxes are the forward nodes the gradient reuses; dashed red boxes are the
nodes differentiation made, each labelled with the forward function it came from.

    .venv/bin/python docs/gradient_picture.py     # writes docs/gradient.svg and docs/gradient.png

The same picture from the command line:
    uopgrad diff samples/logreg.uop --wrt w,b | uopgrad render - -o docs/gradient.svg
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from uopcli.gradient import compute_gradient
from uopcli.graph import Graph
from uopcli.render import render

HERE = Path(__file__).resolve().parent


def logreg_gradient() -> Graph:
    spec = importlib.util.spec_from_file_location("samples_build", HERE.parent / "samples" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    forward = build.logreg()
    loss = forward.outputs["loss"]
    targets = [forward.input("w"), forward.input("b")]
    grads = compute_gradient(loss, loss.const_like(1.0), targets)
    return Graph({f"grad_{t.arg}": grads[t] for t in targets}, inputs=forward.inputs)


def main() -> None:
    graph = logreg_gradient()
    for fmt in ("svg", "png"):
        (HERE / f"gradient.{fmt}").write_bytes(render(graph, fmt))
        print(f"wrote docs/gradient.{fmt}")


if __name__ == "__main__":
    main()
