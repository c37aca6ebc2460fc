"""The commands, grouped as README.md groups them; importing each module registers its
commands on the group (uopcli.cli.app.main)."""

from . import diff, evaluate, inspect, render  # noqa: F401 - registers the commands
from . import forward  # noqa: F401 - jvp, hvp, jacobian, hessian
