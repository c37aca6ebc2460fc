"""uopcli: differentiate, evaluate, draw and store tinygrad-style UOp graphs."""

from .errors import EvaluationError, FormatError, GradientError, GraphError, UOpError
from .ops import DType, Ops, dtypes
from .uop import CallArg, Metadata, UOp, toposort
from .graph import Graph
from .fileformat import Limits, load, save

__version__ = "0.1.0"

__all__ = ["UOp", "Ops", "DType", "dtypes", "Metadata", "CallArg", "toposort",
           "Graph", "load", "save", "Limits",
           "UOpError", "GraphError", "GradientError", "EvaluationError", "FormatError", "__version__"]
