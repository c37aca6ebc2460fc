"""More of tinygrad's Tensor functions, each built from UOp's primitives.

`UOp` inherits these mixins, split as tinygrad splits its own: elementwise (activations,
more maths, the short spellings), movement (tiling, windows, rearrange, pad's modes),
reduce (cumulative sums, sorting, einsum), creation (arange, eye, one-hot, tril),
nn (layers and losses) and indexing (numpy-style indexing, gather, scatter). They are
spelled and mean what tinygrad 0.14's are and do, so a model ported from tinygrad builds
here with the same code and has the same values and gradients. Nothing here is new to the
file format: every function is a small graph of the format's ops (the maths beside each),
and `diff` differentiates it node by node. Most graphs are tinygrad's own; where another
graph gives the same values more cheaply (`arange`, `cumsum`), its docstring says so.
The mixins work through `self`'s methods; they never import the node at module level.
"""

from typing import Sequence

from .creation import CreationMixin
from .elementwise import ElementwiseMixin
from .indexing import IndexingMixin
from .movement import MovementMixin
from .nn import NNMixin
from .reduce import ReduceMixin

MIXINS = (ElementwiseMixin, MovementMixin, ReduceMixin, CreationMixin, NNMixin, IndexingMixin)

# every public method of a mixin is a composite: uop.py tags the nodes each makes with its
# name (not the static ones, arange, eye, einsum, ..., which have no self to stay beside)
COMPOSITES: Sequence[str] = tuple(name for mixin in MIXINS for name, member in vars(mixin).items()
                                  if not name.startswith("_") and not isinstance(member, staticmethod))

__all__ = ["MIXINS", "COMPOSITES", *(mixin.__name__ for mixin in MIXINS)]
