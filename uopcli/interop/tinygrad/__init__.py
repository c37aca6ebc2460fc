"""tinygrad in and out: save tinygrad Tensors as .uop files (`save`, `export`, `to_graph`),
and run .uop graphs on tinygrad's devices (`to_tinygrad`, `evaluate_on_tinygrad`).

Needs the optional extra `uopgrad[tinygrad]` (tinygrad 0.14). These modules import
tinygrad only inside their functions, on first use: importing them (and `uopcli`) never
needs it; a call without it raises TinygradMissing saying how to install the extra.
Where tinygrad is installed, importing this package starts noting which module makes each
tinygrad node (module_calls.py), for the exported nodes' `scope`: import it before running
the model.
"""

from ._tinygrad import INSTALL_HINT, TinygradMissing, import_tinygrad, unknown_device
from .backend import close_compile_workers, evaluate_on_tinygrad, to_tinygrad
from .export import Exported, ExportError, ExportWarning, export, save, to_graph
from .module_calls import record_module_calls

record_module_calls()

__all__ = ["save", "export", "to_graph", "to_tinygrad", "evaluate_on_tinygrad", "close_compile_workers", "Exported", "ExportError", "ExportWarning",
           "TinygradMissing", "INSTALL_HINT", "import_tinygrad", "unknown_device"]
