"""uopcli: differentiate, evaluate, draw and store tinygrad-style UOp graphs.

    from uopcli import UOp, Graph, compute_gradient, evaluate_graph, load, save

The core (UOp, Graph) imports without numpy; everything else (load and save too) is
imported on first use, so a command that only reads a file starts fast.
"""

import copyreg

from .errors import EvaluationError, FormatError, GradientError, GraphError, UOpError
from .core.ops import DType, Ops, dtypes
from .core.uop import CallArg, Metadata, UOp
from .core.walks import toposort
from .core.graph import Graph

__version__ = "0.1.0"


def _pickled(obj):
    """Graphs and nodes pickle as the file format's bytes (formats/uop/pickled.py), imported
    only when something is pickled."""
    from .formats.uop.pickled import reduce
    return reduce(obj)


copyreg.pickle(UOp, _pickled)
copyreg.pickle(Graph, _pickled)

# name -> module that defines it, imported when the name is first used
_LAZY = {
    "load": "formats.uop",
    "save": "formats.uop",
    "Limits": "formats.uop",
    "compute_gradient": "core.gradient",
    "compute_jvp": "core.forward",
    "jvp": "core.forward",
    "linearize": "core.forward",
    "transpose": "core.forward",
    "hvp": "tools.forward",
    "jacobian": "tools.forward",
    "hessian": "tools.forward",
    "evaluate": "backends.numpy",
    "evaluate_graph": "backends.numpy",
    "compile_graph": "backends.numpy",
    "CompiledGraph": "backends.numpy",
    "EvalStats": "backends.numpy",
    "differentiate": "tools.differentiate",
    "DiffReport": "tools.differentiate",
    "render": "views.graphviz",
    "to_dot": "views.graphviz",
    "RenderError": "views.graphviz",
    "simplify": "core.simplify",
}


# No public name is the name of a submodule (those are core, builder, formats, backends,
# interop, views, tools, errors, cli): importing one never replaces a name of this package.


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'uopcli' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["UOp", "Ops", "DType", "dtypes", "Metadata", "CallArg", "toposort",
           "Graph", *_LAZY,
           "UOpError", "GraphError", "GradientError", "EvaluationError", "FormatError", "__version__"]
