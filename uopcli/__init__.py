"""uopcli: differentiate, evaluate, draw and store tinygrad-style UOp graphs.

    from uopcli import UOp, Graph, compute_gradient, evaluate_graph, load, save

The core (UOp, Graph, load/save) imports without numpy; the heavier parts are imported
on first use, so a command that only reads a file starts fast.
"""

import sys as _sys
import types as _types

from .errors import EvaluationError, FormatError, GradientError, GraphError, UOpError
from .ops import DType, Ops, dtypes
from .uop import CallArg, Metadata, UOp, toposort
from .graph import Graph
from .fileformat import Limits, load, save

__version__ = "0.1.0"

# name -> module that defines it, imported when the name is first used
_LAZY = {
    "compute_gradient": "gradient",
    "evaluate": "evaluate",
    "evaluate_graph": "evaluate",
    "EvalStats": "evaluate",
    "differentiate": "differentiate",
    "DiffReport": "differentiate",
    "render": "render",
    "to_dot": "render",
    "RenderError": "render",
    "simplify": "simplify",
}


# Functions named like the module that defines them. Importing such a module (as the CLI
# and `from uopcli.evaluate import ...` do) makes Python set it as an attribute of this
# package, which would shadow the function: `from uopcli import evaluate` would then give
# the module. The package's own module type keeps the function in its place.
_SHADOWED = frozenset(name for name, module in _LAZY.items() if name == module)


class _Package(_types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        if name in _SHADOWED and isinstance(value, _types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'uopcli' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["UOp", "Ops", "DType", "dtypes", "Metadata", "CallArg", "toposort",
           "Graph", "load", "save", "Limits", *_LAZY,
           "UOpError", "GraphError", "GradientError", "EvaluationError", "FormatError", "__version__"]
