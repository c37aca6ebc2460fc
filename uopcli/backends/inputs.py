"""What an input value may be, checked in one place for both evaluators and for the
checks that feed them (check_gradients, check_hvp, check_transpose): a numpy array of
exactly the node's shape and dtype, under a name the graph has.

A subclass of ndarray is read as the plain array it holds (np.asarray): inside an
evaluator numpy would apply the subclass's own meaning, and np.matrix turns an
elementwise MUL into a matrix product. A masked array is refused: its mask would be
ignored, and the masked elements computed from whatever lies under them."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import EvaluationError


def describe(node) -> str:
    """A value node's dtype and shape as messages name them: float32[2, 3]."""
    return f"{node.dtype.name}{list(node.shape)}"


def input_array(what: str, node, value, float_point: bool = False) -> np.ndarray:
    """`value` as the plain ndarray a node's input takes, or EvaluationError naming `what`.
    With `float_point`, a floating-point input takes an array of any float dtype (the
    checks compute in float64, so a float64 point for a float32 input is that point)."""
    if node.shape is None:
        raise EvaluationError(f"{what}: a {node.op} node has no value to supply")
    if value.__class__ is not np.ndarray:
        if isinstance(value, np.ma.MaskedArray):
            raise EvaluationError(f"{what}: a masked array's mask would be ignored; pass value.filled(v) "
                                  f"(the value masked elements take) or np.asarray(value)")
        if isinstance(value, (np.ndarray, np.generic)):
            value = np.asarray(value)  # np.matrix: its 2-D array (the shape check below still applies)
        else:
            raise EvaluationError(f"{what}: expected a numpy array {describe(node)}, got {type(value).__name__}")
    if value.shape != node.shape or value.dtype != node.dtype.np and not (
            float_point and node.dtype.is_float and value.dtype.kind == "f"):
        raise EvaluationError(f"{what}: expected {describe(node)}, got {value.dtype}{list(value.shape)}")
    return value


def checked_inputs(graph, inputs: Mapping, float_points: bool = False) -> dict:
    """{name: plain array} of `inputs`, given by name or by the input's PARAM node (as
    `evaluate` takes them): a name that is no input of `graph` (likely a typo), an input
    given twice and a value that does not fit its input are refused. Inputs left out are
    not asked for here (evaluate_graph asks for them as it runs). `float_points`: the
    checks' points, where a float input takes any float dtype (see input_array)."""
    by_name = {node.arg: node for node in graph.inputs}
    checked = {}
    for key, value in inputs.items():
        name = key if isinstance(key, str) else getattr(key, "arg", None)
        node = by_name.get(name) if isinstance(name, str) else None
        if node is None or (key is not name and key is not node):  # a node key: that very input
            raise EvaluationError(f"unknown input {key!r}; the graph's inputs: {', '.join(graph.input_names) or 'none'}")
        if name in checked:
            raise EvaluationError(f"input {name!r} is given twice (by its name and by its node)")
        checked[name] = input_array(f"input {name!r}", node, value, float_points)
    return checked
