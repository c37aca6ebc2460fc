"""The `uopgrad` command (the console script `uopcli.cli:main`)."""

from .app import main

__all__ = ["main"]
