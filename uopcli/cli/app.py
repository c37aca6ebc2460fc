"""The `uopgrad` group and what every command shares: a thin click layer over the library,
built for shell pipelines (the commands themselves are in commands/).

- IN and OUT may be `-` (stdin / stdout); binary output to a terminal is refused (io.py).
- Outputs are written atomically (a temporary file beside the target, then os.replace):
  a failing command writes nothing and leaves an existing file alone; -o may name IN.
- Exit status 0 success; 2 wrong usage: the command line is wrong by itself (an option
  unknown, malformed, given twice, contradicting another or not for this IN, an OUT that
  is a file the command reads), and another command line would work with the same files;
  1 the command line is fine but the files, the data, the environment (a terminal where
  binary output goes, a missing package, memory) or a check are not. Every error is one
  line `uopgrad: error: ...` naming the file (and the node, where the library names one);
  a traceback only with --debug.
- Start-up matters (`uopgrad info` within 100 ms, whole process): numpy, graphviz, the
  gradient and the evaluator are imported inside the commands that use them.
"""

from __future__ import annotations

import functools
import gc
import io
import os
import sys

import click

from .. import __version__
from ..errors import UOpError

PROG = "uopgrad"
EXIT_FAILURE = 1
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class CommandFailed(click.ClickException):
    """Bad input or a failed command: one line on stderr, exit status 1."""
    exit_code = EXIT_FAILURE


# ----------------------------------------------------------------------------- the group

class _Group(click.Group):
    """Turns every error into one `uopgrad: error: ...` line with the right exit status.

    Called as the console script (`__call__`) it also pauses the cyclic garbage collector
    (UOp graphs are acyclic: scanning them finds nothing) and ends the process with
    os._exit after flushing, skipping the teardown of large graphs. Called through
    `.main()` (click's CliRunner) it returns normally."""

    def __call__(self, *args, **kwargs):
        gc.disable()
        _whole_standard_streams()
        _stop_on_signals()
        try:
            code = self.main(*args, **{**kwargs, "standalone_mode": False})
        except SystemExit as e:  # sys.exit inside a command
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILURE)
        if not _flush_streams(say_why=code == 0):  # a failed command has said what failed
            code = code or EXIT_FAILURE
        os._exit(code)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            result = super().main(args, PROG, complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except click.exceptions.Abort as e:
            stopped_by = getattr(e.__cause__, "signal_name", None)
            _error_line("interrupted" if stopped_by is None else f"stopped by {stopped_by}")
            code = EXIT_FAILURE
        except _NO_ARGS_IS_HELP as e:  # bare `uopgrad`: the help, as a usage error
            click.echo(e.ctx.get_help() if e.ctx else e.format_message(), err=True)
            code = e.exit_code
        except click.ClickException as e:
            if "--json" in (sys.argv[1:] if args is None else list(args)) and not getattr(e, "json_written", False):
                _json_error(e, e.ctx.command.name if e.ctx is not None else "")  # an option parsed wrong
            _error_line(_one_line(e))
            code = e.exit_code
        except BrokenPipeError:
            # the reader went away (`uopgrad print big.uop | head`): not our failure to report
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            code = EXIT_FAILURE
        except OSError as e:  # --help or --version (printed while the options are read) to a full disk
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere, not to a traceback
            _error_line(f"cannot write to stdout: {e.strerror or e}")
            code = EXIT_FAILURE
        if standalone_mode:
            sys.exit(code)
        return code


def _whole_standard_streams() -> None:
    """Put stdout on an atomic.DescriptorWriter: it writes everything or fails naming
    <stdout>. A closed stdout or stderr (`>&-`) gets /dev/null on its descriptor, so that
    no file opened later takes that number: read-only for stdout, whose every write then
    fails (EBADF), write-only for stderr, which stays silent."""
    for fd, name, flags in ((1, "stdout", os.O_RDONLY), (2, "stderr", os.O_WRONLY)):
        if getattr(sys, name) is None:
            devnull = os.open(os.devnull, flags)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
            setattr(sys, name, _descriptor_text(fd, f"<{name}>", "utf-8", "strict", False))
    stdout = sys.stdout
    if isinstance(stdout, io.TextIOWrapper) and _descriptor(stdout) == 1:
        stdout.flush()
        sys.stdout = _descriptor_text(1, "<stdout>", stdout.encoding, stdout.errors, stdout.line_buffering)


def _descriptor(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _descriptor_text(fd: int, name: str, encoding: str, errors: str, line_buffering: bool):
    from ..formats.atomic import DescriptorWriter
    return io.TextIOWrapper(io.BufferedWriter(DescriptorWriter(fd, name), 1 << 16), encoding=encoding,
                            errors=errors, line_buffering=line_buffering)


def _one_line(e: click.ClickException) -> str:
    message = " ".join(e.format_message().split())
    if isinstance(e, click.UsageError) and e.ctx is not None:
        message += f" (see '{e.ctx.command_path} --help')"
    return message


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process is, as ^C's KeyboardInterrupt is: the
    same unwinding removes every temporary file, and the command says one line."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


def _stop_on_signals() -> None:
    """Turn SIGTERM and SIGHUP (a CI job's timeout, a closed terminal) into Stopped; their
    default action ends the process at once and leaves a half-written temporary file."""
    import signal

    def stop(signum, frame):
        raise Stopped(signal.Signals(signum).name)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def _error_line(message: str) -> None:
    click.echo(f"{PROG}: error: {message}", err=True)


def _flush_streams(say_why: bool = True) -> bool:
    """Flush stdout and stderr (os._exit will not); False when stdout could not take it
    (said on stderr if `say_why`, but for a reader that went away: `| head` is no failure
    to report)."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError) as error:
            if stream is sys.stdout:
                ok = False
                if say_why and not isinstance(error, BrokenPipeError):
                    _error_line(f"<stdout>: {getattr(error, 'strerror', None) or error}")
    return ok


# ----------------------------------------------------------------------------- shared options

def _set_flag(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[f"uopgrad.{param.name}"] = True


def _set_limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    """--limit NAME=N (repeatable): a reader limit of formats.uop.Limits for this command."""
    from ..formats.uop import Limits
    chosen = ctx.meta.setdefault("uopgrad.limits", {})
    for text in values:
        name, _, number = text.partition("=")
        if name not in Limits._fields:
            raise click.BadParameter(f"{text!r}: the limits are {', '.join(Limits._fields)}", ctx, param)
        try:
            value = int(number)
        except ValueError:
            value = -1
        if value < 0:
            raise click.BadParameter(f"{text!r}: give {name}=N, N a whole number >= 0", ctx, param)
        chosen[name] = value


def _set_shapes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    """--shape NAME=D1,D2,... (repeatable): the size of an ONNX model's symbolic dimension
    NAME, or input NAME's shape (the importer tells which, an input first). A size is at
    least 1 (a batch of 0 has nothing to differentiate: every gradient would be "not
    reached"); a name given twice has one size (the same repeat is fine)."""
    chosen = ctx.meta.setdefault("uopgrad.shapes", {})
    texts = ctx.meta.setdefault("uopgrad.shape_texts", {})  # name -> the --shape that gave it, for the error
    for text in values:
        name, _, dims = text.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = (-1,)
        if not name or not dims or any(d < 1 for d in shape):
            named = [d.strip() for d in dims.split(",") if d.strip().isidentifier()]
            hint = f" (size a symbolic dimension by its name: --shape {named[0]}=<size>)" if named else ""
            raise click.BadParameter(f"{text!r}: give NAME=D1,D2,... with whole sizes >= 1{hint}", ctx, param)
        if name in chosen and chosen[name] != shape:
            raise click.BadParameter(f"{texts[name]!r} and {text!r} give {name} two sizes: give one", ctx, param)
        chosen[name], texts[name] = shape, text


def _set_constants(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    """--constant NAME=V1,V2,... or NAME=FILE.npy (repeatable): an ONNX input fixed when
    importing; the importer converts the values to the input's type and shape."""
    chosen = ctx.meta.setdefault("uopgrad.constants", {})
    for text in values:
        name, _, given = text.partition("=")
        if not name or not given.strip():
            raise click.BadParameter(f"{text!r}: give NAME=V1,V2,... or NAME=FILE.npy", ctx, param)
        chosen[name] = _constant_values(given.strip(), text, ctx, param)
        if given.strip().lower().endswith(".npy"):  # a file read, that no output may replace
            from .io import _reading  # (io imports this module)
            _reading(f"the file --constant {text} reads", given.strip(), "--constant")


def _constant_values(given: str, text: str, ctx, param):
    """The numbers of `given` (a comma-separated list: ints, floats, inf, nan, true,
    false) or the array of the .npy file it names."""
    import numpy as np
    if given.lower().endswith(".npy"):
        try:
            return np.load(given, allow_pickle=False)
        except (OSError, ValueError) as e:
            # the file, not the command line, is at fault: exit status 1 (as an -i file's)
            raise CommandFailed(f"--constant {text}: cannot read {given}: {getattr(e, 'strerror', None) or e}") \
                from None
    numbers = []
    for token in given.split(","):
        word = token.strip().lower()
        try:
            numbers.append({"true": True, "false": False}[word] if word in ("true", "false")
                           else int(word) if word.lstrip("+-").isdigit() else float(word))
        except ValueError:
            raise click.BadParameter(f"{text!r}: {token.strip()!r} is not a number", ctx, param) from None
    return np.array(numbers)


def _limits():
    """The reader limits: the defaults, with what --limit raised or lowered."""
    from ..formats.uop import DEFAULT_LIMITS
    ctx = click.get_current_context(silent=True)
    chosen = ctx.meta.get("uopgrad.limits") if ctx else None
    return DEFAULT_LIMITS._replace(**chosen) if chosen else DEFAULT_LIMITS


def _flag(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(f"uopgrad.{name}"))


def _given(name: str) -> bool:
    """Whether the user gave option `name` (not its default)."""
    from click.core import ParameterSource
    return click.get_current_context().get_parameter_source(name) is not ParameterSource.DEFAULT


def _names(text: str | None, option: str) -> list[str]:
    if text is None:
        return []
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise click.BadParameter(f"{text!r} is not a comma-separated list of names", param_hint=option)
    return names


def _common_options(fn):
    """--quiet, --debug and --limit, accepted by the group and by every command."""
    fn = click.option("-q", "--quiet", is_flag=True, expose_value=False, is_eager=True, callback=_set_flag,
                      help="Print only results and errors.")(fn)
    fn = click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_flag,
                      help="Show a traceback on errors.")(fn)
    fn = click.option("--limit", multiple=True, expose_value=False, is_eager=True, callback=_set_limits,
                      metavar="NAME=N", help="Raise (or lower) a reader limit, e.g. max_nodes=50000000 "
                      "(names: max_file_bytes, max_nodes, max_arg_depth, max_rank, max_tensor_elements).")(fn)
    fn = click.option("--shape", multiple=True, expose_value=False, is_eager=True, callback=_set_shapes,
                      metavar="NAME=DIMS", help="For an ONNX IN (a file or stdin): the size of a symbolic "
                      "dimension, everywhere it appears (N=8), or an input's shape (x=8,3,224,224); a name that is "
                      "both is the input. eval and check take sizes not given from the -i arrays (eval --map: "
                      "from its first shard).")(fn)
    fn = click.option("--constant", multiple=True, expose_value=False, is_eager=True, callback=_set_constants,
                      metavar="NAME=VALUES", help="For an .onnx IN: fix an input to a value when importing, "
                      "e.g. scales=1,1,2,2 or depth=10 or shape=FILE.npy (an input that sets a shape, which "
                      "the format's static shapes must know).")(fn)
    return fn


def _guarded(fn, name: str):
    """Library errors become one line naming the file; anything else is a bug, reported as
    one line too (with the traceback under --debug). Under --json the error is also the
    JSON document on stdout (_json_error): a script that parses it, or a CI artifact,
    reads why, not an empty file."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return _one_line_errors(fn, args, kwargs)
        except click.ClickException as e:
            if kwargs.get("as_json"):
                _json_error(e, name)
            raise
    return wrapper


def _json_error(e: click.ClickException, name: str) -> None:
    """{"error": the error line's message, "exit_status": 1 or 2} on stdout; `check`'s
    report has "passed", so its error document says false there too."""
    import json
    if isinstance(e, click.UsageError) and e.ctx is None:  # as click will set it: the line names --help
        e.ctx = click.get_current_context(silent=True)
    document = {"error": _one_line(e), "exit_status": e.exit_code}
    if name == "check":
        document = {"passed": False, **document}
    try:
        click.echo(json.dumps(document))
    except OSError:  # stdout gone: the error line on stderr still says it
        pass
    e.json_written = True  # once: the group's handler sees the error again


def _one_line_errors(fn, args, kwargs):
    """fn(*args, **kwargs), its errors turned into CommandFailed (see _guarded)."""
    try:
        return fn(*args, **kwargs)
    except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, BrokenPipeError):
        raise
    except UOpError as e:
        _maybe_traceback()
        raise CommandFailed(_name_file(" ".join(e.cli_message.split()))) from e
    except OSError as e:
        _maybe_traceback()
        where = e.filename if e.filename is not None else _current_file()
        raise CommandFailed(f"{where}: {e.strerror or e}" if where else str(e)) from e
    except MemoryError as e:
        _maybe_traceback()
        raise CommandFailed(_name_file("out of memory")) from e
    except Exception as e:  # noqa: BLE001 - a bug: still one line, traceback on request
        _maybe_traceback()
        hint = "" if _flag("debug") else " (run with --debug for the traceback)"
        raise CommandFailed(_name_file(f"internal error: {type(e).__name__}: {e}{hint}")) from e


def _maybe_traceback() -> None:
    if _flag("debug"):
        import traceback
        traceback.print_exc(file=sys.stderr)


def _current_file() -> str | None:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("uopgrad.file") if ctx else None


def _name_file(message: str) -> str:
    where = _current_file()
    if where and not message.startswith(f"{where}:"):
        return f"{where}: {message}"
    return message


def _cleandoc(doc: str) -> str:
    """inspect.cleandoc without importing inspect (start-up time): strip the common indent."""
    lines = doc.expandtabs().strip().splitlines()
    rest = [line for line in lines[1:] if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in rest), default=0)
    return "\n".join([lines[0].strip(), *(line[indent:] for line in lines[1:])]) if lines else ""


class _Command(click.Command):
    """A command whose single-valued options given twice are a usage error: click keeps the
    last (`render -o a.svg -o b.svg` wrote b.svg alone, exit 0). Flags may repeat (the same
    on), and options of many values accumulate (-i, --limit, and the NAMES lists, which
    _accumulating turns into repeatable ones)."""

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_args(args):
            opts, largs, order = parse(args=args)  # order: each option as often as it was given
            _refuse_repeated(ctx, order)
            if opts.get("map_pattern") is not None:  # eval --map
                from .commands.evaluate_map import refuse_expanded_pattern
                refuse_expanded_pattern(ctx, opts["map_pattern"], [opts.get("source"), *largs])
            return opts, largs, order
        parser.parse_args = parse_args
        return parser


def _refuse_repeated(ctx: click.Context, order: list) -> None:
    seen = set()
    for param in order:
        if not isinstance(param, click.Option) or param.multiple or param.count or param.is_flag:
            continue
        if param.name in seen:
            raise click.UsageError(f"{'/'.join(param.opts)} is given twice: it takes one value, give it once", ctx)
        seen.add(param.name)


NAMES_METAVAR = "NAMES"  # a comma-separated list of names: --wrt, --of, --outputs


def _accumulating(param: click.Parameter) -> click.Parameter:
    """A NAMES option (a comma-separated list) as a repeatable one whose repeats add up:
    `--wrt a --wrt b` is `--wrt a,b` (what a Makefile's foreach writes); the command still
    gets one comma-separated text (None when not given)."""
    if not isinstance(param, click.Option) or param.metavar != NAMES_METAVAR or param.multiple:
        return param
    option = param.opts[-1]
    return click.Option([*param.opts, param.name], multiple=True, required=param.required, metavar=NAMES_METAVAR,
                        callback=_joined_names, help=f"{param.help} Repeats add up: {option} a {option} b is "
                        f"{option} a,b.")


def _joined_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> str | None:
    for text in values:
        _names(text, param.opts[-1])  # an empty name refused as the text given says it
    return ",".join(values) if values else None


def _command(name: str, example: str, short: str):
    """A subcommand with --quiet/--debug, error guarding, and an example in its --help; a
    single-valued option given twice is a usage error, a NAMES list's repeats add up
    (_Command, _accumulating)."""
    def decorate(fn):
        fn = _guarded(fn, name)
        fn = _common_options(fn)
        fn.__click_params__ = fn.__click_params__[-4:] + fn.__click_params__[:-4]  # listed last in --help
        fn.__click_params__ = [_accumulating(param) for param in fn.__click_params__]
        doc = _cleandoc(fn.__doc__ or "")
        fn.__doc__ = f"{doc}\n\n\b\nExample:\n{example}"
        return main.command(name, cls=_Command, short_help=short)(fn)
    return decorate


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name=PROG, message="%(prog)s %(version)s")
@_common_options
def main():
    """Differentiate, evaluate, check and draw tinygrad-style UOp graphs saved as .uop files.

    \b
    Example:
      uopgrad diff model.uop --wrt x,w -o grad.uop
      uopgrad eval grad.uop -i x=x.npy -i w=0.5
      uopgrad diff - --wrt x < model.uop | uopgrad eval - --random
    """
