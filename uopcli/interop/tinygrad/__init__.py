"""tinygrad in and out: save tinygrad Tensors as .uop files (`save`, `export`, `to_graph`),
and run .uop graphs on tinygrad's devices (`to_tinygrad`, `evaluate_on_tinygrad`).

Needs the optional extra `uopgrad[tinygrad]` (tinygrad 0.14); tinygrad is imported only in
this package, on first use, so `import uopcli` never needs it.
"""

from ._tinygrad import INSTALL_HINT, TinygradMissing, import_tinygrad

_LAZY = {"save": "export", "export": "export", "to_graph": "export", "Exported": "export",
         "ExportError": "export", "to_tinygrad": "backend", "evaluate_on_tinygrad": "backend"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["save", "export", "to_graph", "to_tinygrad", "evaluate_on_tinygrad", "Exported", "ExportError",
           "TinygradMissing", "INSTALL_HINT", "import_tinygrad"]
