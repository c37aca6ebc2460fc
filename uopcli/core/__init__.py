"""The core: ops and dtypes (ops), the node and its interning (uop), shape and dtype
inference (inference), the walks (walks), Graph (graph), pattern rewriting (pattern) and
differentiation (gradient). It never imports numpy at module level, click, a format, a
backend or an optional package."""
