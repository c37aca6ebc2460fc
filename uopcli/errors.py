"""The library's one exception family.

Every error the library raises on purpose is a `UOpError`; the CLI turns it into one line
on stderr and exit status 1. Anything else escaping is a bug.
"""


class UOpError(Exception):
    """Base class of every error uopcli raises for bad input or an impossible request.

    The message speaks Python (`wrt=`, `of=`, `cotangent="ones"`); where the command line
    spells the same thing as flags (`--wrt`, `--of`, `--cotangent ones`), `cli` holds the
    message in those words, and the CLI prints that one (`cli_message`)."""

    cli: str | None = None

    def __init__(self, *args, cli: str | None = None):
        super().__init__(*args)
        self.cli = cli

    @property
    def cli_message(self) -> str:
        return self.cli or str(self)


class GraphError(UOpError):
    """A node whose sources, dtype or arg do not fit its op."""


class GradientError(UOpError):
    """Differentiation cannot proceed (no rule, non-float target, CALL without backward)."""


class EvaluationError(UOpError):
    """A graph cannot be evaluated with the given inputs."""


class FormatError(UOpError):
    """A file that does not follow the UOp format contract, or exceeds the reader's limits."""

    def __init__(self, message, *, node=None, op=None, source=None):
        self.node, self.op, self.source = node, op, source
        where = ""
        if node is not None:
            where = f"node {node}" + (f" ({op})" if op else "") + ": "
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}{where}{message}")
