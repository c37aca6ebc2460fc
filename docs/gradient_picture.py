#!/usr/bin/env python3
"""Draw the README's picture: the gradient of logistic regression's loss w.r.t. w and b.

    .venv/bin/python docs/gradient_picture.py     # writes docs/gradient.svg and docs/gradient.png

It is exactly what the command line draws (same library calls, same bytes):
    uopgrad diff samples/logreg.uop --wrt w,b | uopgrad render - -o docs/gradient.svg

Solid rounded boxes are the forward nodes the gradient reuses; dashed red boxes are the
nodes differentiation made, each labelled with the forward function it came from.
"""

from __future__ import annotations

from pathlib import Path

from uopcli.tools.differentiate import differentiate
from uopcli.formats.uop import load
from uopcli.core.graph import Graph
from uopcli.views.graphviz import render

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "samples" / "logreg.uop"


def logreg_gradient() -> Graph:
    gradient, _report = differentiate(load(SAMPLE), ["w", "b"])
    return gradient


def main() -> None:
    graph = logreg_gradient()
    for fmt in ("svg", "png"):
        (HERE / f"gradient.{fmt}").write_bytes(render(graph, fmt))
        print(f"wrote docs/gradient.{fmt}")


if __name__ == "__main__":
    main()
