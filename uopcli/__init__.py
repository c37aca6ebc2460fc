"""uopcli: differentiate, evaluate, draw and store tinygrad-style UOp graphs."""

from .errors import EvaluationError, FormatError, GradientError, GraphError, UOpError
from .ops import DType, Ops, dtypes
from .uop import CallArg, Metadata, UOp, toposort

__version__ = "0.1.0"

__all__ = ["UOp", "Ops", "DType", "dtypes", "Metadata", "CallArg", "toposort",
           "UOpError", "GraphError", "GradientError", "EvaluationError", "FormatError", "__version__"]
