"""Reading and writing .uop files (format v1): MessagePack and JSON forms, canonical bytes, limits.

The contract is docs/format.md (a copy of the shared uop-format-v1 page plus what this
reader decided where that page is silent). In short:

    {"format": "uop", "version": 1, "nodes": [[op, dtype, [src...], arg(, meta)], ...],
     "inputs": [index, ...], "outputs": [[name, index], ...], "meta": {str: str}}

Reading treats every file as untrusted. Each refusal is a FormatError with one line that
names the file, and the node index and op where there is one. Nothing in a file is ever
executed or imported; both parsers build only plain lists, maps, strings, numbers and
bytes; work is linear in the file's size, and limits (`Limits`) bound the rest. The
MessagePack form's nodes are parsed one at a time (`_NodeStream`), so memory follows the
graph, not the file's bytes.

Speed: the reader's per-node loop assumes a well-formed node and lets Python's own checks
fail fast on anything else; only then does `diagnose` look again, slowly, to say exactly
what is wrong. Nodes are still built through UOp.make / UOp.param / UOp.const, so every
shape and dtype rule of the core applies to files too.

Writing is canonical: structurally equal nodes are one node (hash-consing already makes
them one object), nodes are numbered in the post-order of a depth-first walk from the
outputs (a CALL's backward body after the CALL's sources, before the CALL), unused inputs
come last, maps have sorted keys, floats are float64 and integers take their smallest
MessagePack encoding. The JSON form has one fixed layout (see `_json_text`).

The package: tables.py (what both sides share: the format's name, keys, limits),
reader.py (parsing either form, the node loop, the checks after it), decoders.py (the
reader's per-op rows), writer.py (canonical numbering, both forms, atomic writes).
"""

from .reader import load, loads, read_bytes
from .tables import DEFAULT_LIMITS, FORMAT, FORMS, VERSION, Limits
from .writer import dump_parts, dumps, save, write_parts

__all__ = ["Limits", "DEFAULT_LIMITS", "load", "loads", "read_bytes", "save", "dumps", "dump_parts", "write_parts",
           "FORMAT", "VERSION", "FORMS"]
