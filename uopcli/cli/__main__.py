"""python -m uopcli.cli: the `uopgrad` command."""

from . import main

main()
