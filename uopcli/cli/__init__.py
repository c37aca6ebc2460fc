"""The `uopgrad` command (the console script `uopcli.cli:main`), a thin click layer over the
library: app.py the group, its shared options and error handling; io.py reading and writing
graphs; output.py values as tables, JSON and .npz; commands/ the commands themselves, which
import what they compute with inside their bodies (start-up time)."""

from . import commands  # noqa: F401 - registers every command on the group
from .app import main

__all__ = ["main"]
