"""python -m uopcli: the `uopgrad` command (as python -m uopcli.cli)."""

from .cli import main

main()
