"""What the reader and the writer of .uop files share: the format's name and version, the
document's keys, the node meta keys, and the reader's limits."""

from __future__ import annotations

from typing import NamedTuple

FORMAT = "uop"
VERSION = 1
FORMS = ("msgpack", "json")

REQUIRED_KEYS = frozenset({"format", "version", "nodes", "inputs", "outputs"})
ALLOWED_KEYS = REQUIRED_KEYS | {"meta"}
META_KEYS = ("name", "loc", "scope", "backward")


class Limits(NamedTuple):
    """What the reader accepts at most. Raise a limit with e.g. `Limits(max_nodes=50_000_000)`
    (or `limits._replace(...)`).

    Every limit guards memory or time against a hostile or broken file; the defaults fit
    any graph this tool is meant for."""

    max_file_bytes: int = 1 << 30           # 1 GiB: the whole file (either form)
    max_nodes: int = 10_000_000             # entries of `nodes`
    max_arg_depth: int = 16                 # nesting of lists/maps inside one arg (v1 args need 2)
    max_rank: int = 16                      # axes of any shape (PARAM, BUFFER, RESHAPE, EXPAND, ...)
    max_tensor_elements: int = 1 << 40      # elements of any one tensor (stored or inferred)


DEFAULT_LIMITS = Limits()
V1_ARG_DEPTH = 2  # a valid v1 arg nests at most 2 levels: a map or array holding arrays (PARAM, PAD)


def raise_hint(limit: str) -> str:
    """How to read a file over `limit`, from Python or from the command line."""
    return f"(raise it: Limits({limit}=...) in Python, uopgrad --limit {limit}=N on the command line)"


def stream_name(stream) -> str:
    """What messages call a file object: its name, or "<stream>"."""
    label = getattr(stream, "name", None)
    return label if isinstance(label, str) else "<stream>"
