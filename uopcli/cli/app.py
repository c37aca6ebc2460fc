"""The `uopgrad` command: a thin click layer over the library, built for shell pipelines.

Every command parses its options, calls the library, prints. What they share lives here:
- IN and OUT may be `-` (stdin / stdout); binary output to a terminal is refused.
- Outputs are written atomically (a temporary file beside the target, then os.replace):
  a failing command writes nothing and leaves an existing file alone; -o may name IN.
- Exit status 0 success, 1 bad input or a failed check, 2 wrong usage; every error is one
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
import time

import click

from .. import __version__
from ..formats.atomic import descriptor_named, write_all, write_atomically_together
from ..errors import UOpError

PROG = "uopgrad"
EXIT_FAILURE = 1
BINARY_FORMS = {"msgpack", "npz", "png", "pdf", "onnx"}
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2
RENDER_EXTENSIONS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot",
                     ".html": "html", ".htm": "html"}


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
    """--shape NAME=D1,D2,... (repeatable): an ONNX input's shape where the file's is symbolic."""
    chosen = ctx.meta.setdefault("uopgrad.shapes", {})
    for text in values:
        name, _, dims = text.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = (-1,)
        if not name or not dims or any(d < 0 for d in shape):
            raise click.BadParameter(f"{text!r}: give NAME=D1,D2,... with whole sizes >= 0", ctx, param)
        chosen[name] = shape


def _limits():
    """The reader limits: the defaults, with what --limit raised or lowered."""
    from ..formats.uop import DEFAULT_LIMITS
    ctx = click.get_current_context(silent=True)
    chosen = ctx.meta.get("uopgrad.limits") if ctx else None
    return DEFAULT_LIMITS._replace(**chosen) if chosen else DEFAULT_LIMITS


def _flag(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(f"uopgrad.{name}"))


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
                      metavar="NAME=DIMS", help="For an .onnx IN: the shape of an input whose dimensions are "
                      "symbolic, e.g. x=1,3,224,224.")(fn)
    return fn


def _guarded(fn):
    """Library errors become one line naming the file; anything else is a bug, reported as
    one line too (with the traceback under --debug)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, BrokenPipeError):
            raise
        except UOpError as e:
            _maybe_traceback()
            raise CommandFailed(_name_file(" ".join(str(e).split()))) from e
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
    return wrapper


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


def _command(name: str, example: str, short: str):
    """A subcommand with --quiet/--debug, error guarding, and an example in its --help."""
    def decorate(fn):
        fn = _guarded(fn)
        fn = _common_options(fn)
        fn.__click_params__ = fn.__click_params__[-4:] + fn.__click_params__[:-4]  # listed last in --help
        doc = _cleandoc(fn.__doc__ or "")
        fn.__doc__ = f"{doc}\n\n\b\nExample:\n{example}"
        return main.command(name, short_help=short)(fn)
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


# ----------------------------------------------------------------------------- reading, writing

def _read_graph(path: str, remember: bool = True):
    """(Graph, raw bytes) from a path or `-` (stdin); an .onnx path is imported (interop/onnx)."""
    from ..formats.uop import loads, read_bytes
    display = "<stdin>" if path == "-" else path
    if remember:
        click.get_current_context().meta["uopgrad.file"] = display
    if path.lower().endswith(".onnx"):
        return _read_onnx(path), None
    if path == "-":
        if sys.stdin is None:
            raise CommandFailed("IN is - but stdin is closed: pipe a graph in (... | uopgrad ...) "
                                "or redirect one (< model.uop)")
        if _is_terminal(sys.stdin):
            raise CommandFailed("IN is - but stdin is a terminal: pipe a graph in (... | uopgrad ...) "
                                "or redirect one (< model.uop)")
        source = sys.stdin.buffer
    else:
        source = path
    limits = _limits()
    data = read_bytes(source, limits=limits, name=display)  # refuses an oversized file before reading it all
    return loads(data, limits=limits, name=display), data


def _is_terminal(stream) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # CliRunner's streams have no descriptor
        return False


def _stdout_is_terminal() -> bool:
    return _is_terminal(sys.stdout)


def _descriptor_is_terminal(descriptor: int | None) -> bool:
    if descriptor is None:  # a path that names a file, not a descriptor
        return False
    try:
        return os.isatty(descriptor)
    except OSError:
        return False


def _refuse_binary_terminal(dest: str, form: str, hint: str) -> None:
    """Binary data on a terminal garbles it: refused for "-" and for paths such as
    /dev/stdout or /dev/fd/1 that name a terminal's descriptor."""
    if form not in BINARY_FORMS:
        return
    if _stdout_is_terminal() if dest == "-" else _descriptor_is_terminal(descriptor_named(dest)):
        raise CommandFailed(f"refusing to write binary {form} data to a terminal: redirect or pipe it "
                            f"(> file, | uopgrad ...) or {hint}")


def _write(dest: str, data) -> None:
    """Write bytes, or the pieces of a file in order (formats.uop.dump_parts), to a path
    (atomically) or to stdout ("-")."""
    _write_together([(dest, data)])


def _write_together(files: list[tuple[str, object]]) -> None:
    """Several outputs all or none: the files are renamed into place only once every one
    is written (stdout, "-", goes last: what reached a pipe cannot be taken back)."""
    to_files = [(dest, data) for dest, data in files if dest != "-"]
    try:
        write_atomically_together(to_files)
    except OSError as e:
        raise CommandFailed(f"{e.filename}: cannot write: {e.strerror or e}") from None
    for dest, data in files:
        if dest == "-":
            write_all(sys.stdout.buffer, data)
            sys.stdout.buffer.flush()


# ----------------------------------------------------------------------------- ONNX models (IN ending in .onnx)
# interop/onnx, and onnx itself, are imported only when an .onnx file is given. The model's
# float initializers (its weights) are inputs of the graph; their values are the inputs'
# defaults for eval and check, and go beside a .uop that convert or diff writes (OUT.npz).

def _read_onnx(path: str):
    try:
        import onnx  # noqa: F401 - only to say what is missing
    except ImportError:
        raise CommandFailed(f"{path}: reading ONNX models needs the onnx package: pip install 'uopgrad[onnx]'") from None
    from ..interop.onnx.importer import load_onnx
    ctx = click.get_current_context()
    graph, weights = load_onnx(path, ctx.meta.get("uopgrad.shapes"))
    ctx.meta["uopgrad.weights"] = weights
    return graph


def _onnx_weights() -> dict | None:
    """The weights of the ONNX model IN (None for a .uop IN)."""
    return click.get_current_context().meta.get("uopgrad.weights")


def _with_onnx_weights(files: list, output: str, form: str) -> list:
    """`files` plus OUT.npz, the ONNX model's weights, beside a .uop OUT (written together);
    an ONNX OUT holds them itself (_graph_data)."""
    weights = _onnx_weights()
    if not weights or form == "onnx":
        return files
    if output == "-":
        _note("the model's weights are not written with OUT on stdout: give -o FILE to get FILE.npz beside it")
        return files
    return files + [(os.path.splitext(output)[0] + ".npz", npz_bytes(weights))]


def _same_file(a: str, b: str) -> bool:
    return a != "-" and b != "-" and os.path.realpath(a) == os.path.realpath(b)


def _given(name: str) -> bool:
    """Whether the user gave option `name` (not its default)."""
    from click.core import ParameterSource
    return click.get_current_context().get_parameter_source(name) is not ParameterSource.DEFAULT


def _check_specs(ctx, param, specs: tuple) -> tuple:
    """-i values look like NAME=VALUE or data.npz (values.split_spec): a usage error otherwise (exit 2),
    before any reading."""
    from ..tools.values import split_spec
    for spec in specs:
        try:
            split_spec(spec)
        except UOpError as e:
            raise click.BadParameter(str(e), ctx, param) from None
    return specs


def _uop_form(dest: str, to: str | None = None) -> str:
    if to:
        return to
    if dest.lower().endswith(".onnx"):  # ONNX export: see _graph_data
        return "onnx"
    return "json" if dest.lower().endswith(".json") else "msgpack"


# ----------------------------------------------------------------------------- ONNX output
# A graph written to a .onnx OUT (or --to onnx) is exported as standard ONNX
# (uopcli.interop.onnx.exporter); the onnx package is imported only then.

_OPSET_HELP = "ONNX opset of an ONNX OUT (default 20)."


def _check_opset(form: str, opset: int | None) -> None:
    if opset is not None and form != "onnx":
        raise click.UsageError("--opset is for ONNX output: give -o FILE.onnx (or --to onnx)")


def _graph_data(graph, form: str, opset: int | None):
    """What a graph file holds: the .uop form's pieces (formats.uop.dump_parts), or ONNX
    bytes, where an ONNX model IN's weights are initializers, as in IN: the file runs
    given only the model's own inputs (and cotangents)."""
    if form != "onnx":
        from ..formats.uop import dump_parts
        return dump_parts(graph, form)
    try:
        from ..interop.onnx.exporter import onnx_bytes
    except ModuleNotFoundError as e:
        raise CommandFailed(f"writing ONNX needs the {e.name} package, which is not installed: "
                            "pip install 'uopgrad[onnx]'") from None
    return onnx_bytes(graph, opset, _onnx_weights())


def _names(text: str | None, option: str) -> list[str]:
    if text is None:
        return []
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise click.BadParameter(f"{text!r} is not a comma-separated list of names", param_hint=option)
    return names


def _note(message: str) -> None:
    """Progress and diagnostics (not results): stderr, silenced by --quiet."""
    if not _flag("quiet"):
        click.echo(f"{PROG}: {message}", err=True)


def _stderr_is_terminal() -> bool:
    return _is_terminal(sys.stderr)


def _progress_bar(length: int, label: str):
    """A click progress bar on stderr when stderr is a terminal and not --quiet; else a
    stand-in with the same interface that draws nothing."""
    if length and _stderr_is_terminal() and not _flag("quiet"):
        return click.progressbar(length=length, label=label, file=sys.stderr)
    return _NoBar()


class _Steps:
    """Work in a few long steps (read, compute, write), shown on a terminal as a progress
    bar whose label names the step under way; each step's wall and CPU time is kept for
    --stats."""

    def __init__(self, *labels: str):
        self.labels, self.done = labels, 0
        self.bar = _progress_bar(len(labels), labels[0])
        self.times: list[tuple[str, float, float]] = []  # (label, wall seconds, CPU seconds)

    def __enter__(self):
        self.bar.__enter__()
        self._started = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def next(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.times.append((self.labels[self.done], wall - self._started[0], cpu - self._started[1]))
        self._started = (wall, cpu)
        self.done += 1
        if self.done < len(self.labels):
            self.bar.label = self.labels[self.done]
        self.bar.update(1)

    def table(self) -> str:
        """The steps' times, a line each: `reading   0.181 s   0.180 s` (wall, CPU)."""
        width = max(len(label) for label in self.labels)
        lines = [f"{'step':<{width}}  {'wall':>9}  {'CPU':>9}"]
        lines += [f"{label:<{width}}  {wall:>7.3f} s  {cpu:>7.3f} s" for label, wall, cpu in self.times]
        return "\n".join(lines)


class _NoBar:
    label = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int) -> None:
        pass


# ----------------------------------------------------------------------------- diff

@_command("diff", short="Differentiate outputs with respect to inputs; write the gradient graph.", example="""\
  uopgrad diff model.uop --wrt x,w -o grad.uop
  uopgrad diff model.uop --wrt x --of y --cotangent ones | uopgrad eval - --random
  uopgrad diff grad.uop --of grad_x --cotangent ones --wrt x -o hess.uop""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs to differentiate with respect to (x,w); "
              "the result's outputs are grad_x, grad_w in this order.")
@click.option("--of", "of_", metavar="NAMES", help="Outputs to differentiate (default: the only one); "
              "several are differentiated together, their gradients adding up.")
@click.option("--cotangent", type=click.Choice(["ones", "input"]), help="Seed of a non-scalar output: all ones, "
              "or a new input cotangent_<output>.")
@click.option("--keep-forward", is_flag=True, help="Keep the forward outputs, before the gradients.")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Where to write the gradient graph (.json for the JSON form, .onnx for ONNX).")
@click.option("--report", "report_path", metavar="FILE", help="Also write the zero-gradient report as JSON.")
@click.option("--stats", is_flag=True, help="Print each step's wall and CPU time on stderr (also with --quiet).")
@click.option("--simplify", "simplify_", is_flag=True, help="Simplify the gradient graph (as uopgrad simplify does).")
@click.option("--opset", type=click.IntRange(min=1), metavar="N", help=_OPSET_HELP)
def diff(source, wrt, of_, cotangent, keep_forward, output, report_path, stats, simplify_, opset):
    """Write the gradient graph of IN's output(s) with respect to the inputs --wrt.

    The result keeps every input of IN, in order (plus cotangent_<output> inputs with
    --cotangent input), so the same -i values feed both files. Targets whose gradient is
    identically zero are reported on stderr, with the reason.
    """
    from ..tools.differentiate import differentiate
    form = _uop_form(output)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "give -o FILE")
    if report_path == "-" and output == "-":
        raise click.UsageError("--report - and the graph cannot both go to stdout: give -o OUT")
    if report_path and _same_file(report_path, output):
        raise click.UsageError(f"--report and -o name the same file ({output}): give the report another")
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    with _Steps("reading", "differentiating", "encoding", "writing") as steps:
        graph, _ = _read_graph(source)
        steps.next()
        result, report = differentiate(graph, wrt_names, of_names or None, cotangent, keep_forward)
        result = _simplified(result) if simplify_ else result  # --simplify
        steps.next()
        data = _graph_data(result, form, opset)
        steps.next()
        files = _with_onnx_weights([(output, data)], output, form)
        if report_path:
            import json
            files.append((report_path, (json.dumps(report.to_dict(), indent=2) + "\n").encode()))
        _write_together(files)  # both or neither
        steps.next()
    if cotangent and all(not graph.output(name).shape for name in of_names or graph.output_names):
        _note(f"--cotangent {cotangent} has no effect: the outputs differentiated are scalars (seeded with 1)")
    for line in report.lines():
        _note(line)
    if stats:
        click.echo(steps.table(), err=True)


# ----------------------------------------------------------------------------- simplify

@_command("simplify", short="Rewrite a graph smaller: exact rewrites, and tinygrad's algebraic ones.", example="""\
  uopgrad simplify grad.uop -o grad-small.uop
  uopgrad simplify grad.uop --exact -o same-bits.uop
  uopgrad diff model.uop --wrt w | uopgrad simplify - -o grad.uop""")
@click.argument("source", metavar="IN")
@click.option("-o", "--output", required=True, metavar="OUT", help="Where to write (- for stdout; .json for JSON).")
@click.option("--exact", is_flag=True, help="Only the rewrites that change no bit of any value.")
def simplify(source, output, exact):
    """Write IN simplified: rewrites that never change a value (x*1, -(-x), movements that
    undo each other, constant folding, ...) and, without --exact, the algebraic rewrites
    tinygrad's compiler applies (which change rounding, not meaning, and make the
    gradients of sigmoid, tanh, gelu, ... finite where tinygrad's are). Inputs, outputs
    and node metadata are kept; the node counts before and after go to stderr.
    """
    from ..formats.uop import dump_parts
    form = _uop_form(output)
    _refuse_binary_terminal(output, form, "give -o FILE")
    graph, _ = _read_graph(source)
    result = _simplified(graph, exact)
    before, after = len(graph.nodes()), len(result.nodes())
    _write(output, dump_parts(result, form))
    _note(f"{before} -> {after} nodes ({'exact rewrites' if exact else 'exact and tinygrad rewrites'})")


def _simplified(graph, exact: bool = False):
    from ..core.simplify import simplify as simplified
    return simplified(graph, exact=exact)


# ----------------------------------------------------------------------------- eval

@_command("eval", short="Evaluate a graph on given or random inputs.", example="""\
  uopgrad eval model.uop -i x=x.npy -i w=weights.npz -i b=0.1
  uopgrad eval grad.uop --random --seed 1 --stats
  uopgrad eval grad.uop -i x=data.npz:features --random -o grads.npz""")
@click.argument("source", metavar="IN")
@click.option("-i", "--input", "specs", multiple=True, metavar="NAME=VALUE", callback=_check_specs,
              help="An input's value: x.npy, data.npz (member NAME), data.npz:key, or a number filled to its shape; "
                   "a bare data.npz gives every input its member.")
@click.option("--random", "use_random", is_flag=True, help="Fill inputs not given with seeded random values.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --random.")
@click.option("-o", "--output", metavar="OUT.npz", help="Store the outputs in an .npz under their names (- for stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print the outputs as JSON.")
@click.option("--stats", is_flag=True, help="Add the evaluation time and peak live bytes.")
@click.option("--literal", is_flag=True, help="Run the graph as written: without tinygrad's algebraic rewrites "
              "(the exact ones, which change no bit, still apply).")
@click.option("--keep-intermediates", is_flag=True, help="With -o OUT.npz, also store every node's value as %<i> "
              "(its number in `uopgrad print`), for `uopgrad render --values`. The graph is then evaluated as "
              "written, outputs included, since a simplified graph no longer has those nodes.")
@click.option("--backend", type=click.Choice(["numpy", "tinygrad"]), default="numpy", show_default=True,
              help="Who computes: the numpy evaluator, or tinygrad (the extra uopgrad[tinygrad]); both run the "
                   "same simplified graph.")
@click.option("--device", metavar="DEV", help="tinygrad's device (CPU, CUDA, METAL, ...; default: tinygrad's DEV).")
def eval_(source, specs, use_random, seed, output, as_json, stats, literal, keep_intermediates, backend, device):
    """Evaluate IN's outputs and print them as a table (or --json, or -o OUT.npz).

    The graph is simplified first, as tinygrad's compiler would before running it, so the
    values are what tinygrad computes (the gradient of sigmoid at -1000 is 0, not 0*inf);
    --literal runs it as written.
    """
    _check_backend(backend, device, stats, keep_intermediates)  # tinygrad backend (issue 22)
    if output and as_json:
        raise click.UsageError("give either -o OUT.npz or --json, not both")
    if _given("seed") and not use_random:
        raise click.UsageError("--seed is the seed of --random: give --random too")
    if keep_intermediates and not output:
        raise click.UsageError("--keep-intermediates stores node values in -o OUT.npz: give -o too")
    if output:
        _refuse_binary_terminal(output, "npz", "give -o OUT.npz")
    from ..backends.numpy import EvalStats, evaluate_graph
    from ..tools.values import gather_inputs
    with _Steps("reading", "evaluating") as steps:
        graph, _ = _read_graph(source)
        inputs = gather_inputs(graph.inputs, specs, seed if use_random else None, defaults=_onnx_weights())
        steps.next()
        eval_stats = EvalStats() if stats else None
        simplify = "exact" if literal else "tinygrad"
        if backend == "tinygrad":  # the same simplified graph as numpy's, so the two agree
            results = _evaluate_on_tinygrad(graph, inputs, device, simplify)
        else:
            results = evaluate_graph(graph, inputs, stats=eval_stats, simplify=simplify)
        steps.next()
    if output:
        arrays = {name: a for name, a in _elements(results).items() if a is not None}
        if keep_intermediates:  # --keep-intermediates: every node's value too (tools/intermediates.py)
            from ..tools.intermediates import with_intermediates
            arrays = with_intermediates(graph, inputs, arrays)
        _write(output, npz_bytes(arrays))
        if eval_stats is not None:
            click.echo(_stats_text(eval_stats), err=True)
    elif as_json:
        import json
        document = {"outputs": {name: _value_json(a) for name, a in results.items()}}
        if eval_stats is not None:
            document["stats"] = _stats_json(eval_stats)
        click.echo(json.dumps(document))
    else:
        click.echo(_table(_elements(results)))
        if eval_stats is not None:
            click.echo(_stats_text(eval_stats))


def _check_backend(backend: str, device: str | None, stats: bool, keep_intermediates: bool) -> None:
    """--device, --stats and --keep-intermediates fit their backend; tinygrad is there (else
    how to install it)."""
    if backend != "tinygrad":
        if device is not None:
            raise click.UsageError("--device is tinygrad's device: give --backend tinygrad too")
        return
    if stats:
        raise click.UsageError("--stats measures the numpy evaluator; time tinygrad with its own DEBUG=2")
    if keep_intermediates:
        raise click.UsageError("--keep-intermediates evaluates every node with the numpy evaluator: "
                               "not with --backend tinygrad")
    from ..interop.tinygrad import TinygradMissing, import_tinygrad
    try:
        import_tinygrad()
    except TinygradMissing as e:
        raise CommandFailed(f"--backend tinygrad: {e}") from None


def _evaluate_on_tinygrad(graph, inputs: dict, device: str | None, simplify: str) -> dict:
    from ..interop.tinygrad import close_compile_workers, evaluate_on_tinygrad
    try:
        return evaluate_on_tinygrad(graph, inputs, device, simplify=simplify)
    finally:
        close_compile_workers()  # the CLI leaves with os._exit, which would strand them


def _elements(results: dict) -> dict:
    """Outputs one array each: a TUPLE, FUNCTION or CALL output (a tuple of arrays, None
    for a NOOP element) becomes one entry per element, named `t[0]`, `t[1]`, ..."""
    flat = {}
    for name, value in results.items():
        if isinstance(value, tuple):
            flat.update((f"{name}[{i}]", element) for i, element in enumerate(value))
        else:
            flat[name] = value
    return flat


def _value_json(value):
    """An output in --json: an array's dtype, shape and values; a tuple output a list of
    those (null for a NOOP element)."""
    if isinstance(value, tuple):
        return [None if element is None else _array_json(element) for element in value]
    return _array_json(value)


def npz_bytes(arrays: dict) -> bytes:
    """An .npz archive of `arrays` (what numpy.savez writes), deterministic: fixed
    timestamps, members in output order, no pickles."""
    import io
    import zipfile

    import numpy as np
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _array_json(array) -> dict:
    import numpy as np
    array = np.asarray(array)
    if array.dtype.kind == "f":
        values = _finite_or_text(array.astype(np.float64).tolist())
    else:
        values = array.tolist()
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": values}


def _finite_or_text(values):
    """JSON has no NaN or infinity: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(values, list):
        return [_finite_or_text(v) for v in values]
    if values != values or values in (float("inf"), float("-inf")):
        return repr(values)
    return values


def _stats_json(stats) -> dict:
    return {"seconds": stats.seconds, "peak_bytes": stats.peak_bytes}


def _stats_text(stats) -> str:
    return f"time {stats.seconds * 1e3:.3f} ms, peak live bytes {stats.peak_bytes} ({_human_bytes(stats.peak_bytes)})"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _table(results: dict, leading: int = 6) -> str:
    """One row per output: name, shape, dtype, min / mean / max, and its leading values
    (a NOOP element of a tuple output: a row saying so)."""
    import math

    import numpy as np
    rows = [("name", "shape", "dtype", "min", "mean", "max", "values")]
    for name, array in results.items():
        if array is None:
            rows.append((name, "-", "-", "-", "-", "-", "(none: a NOOP element)"))
            continue
        array = np.asarray(array)
        flat = array.reshape(-1)
        if flat.size and array.dtype.kind in "biuf":
            numeric = flat.astype(np.float64)
            with np.errstate(all="ignore"):  # the mean of [inf, -inf] is nan, and says so in the table
                # summing the shares, not dividing the sum, which overflows near the largest float64
                mean = np.sum(numeric / flat.size)
            # min and max of the numbers there are: a nan shows in the mean (and the values)
            numbers = numeric[~np.isnan(numeric)]
            low, high = (numbers.min(), numbers.max()) if numbers.size else (math.nan, math.nan)
            low, mean, high = (f"{v:.6g}" for v in (low, mean, high))
        else:
            low = mean = high = "-"
        shown = " ".join(_value_text(v) for v in flat[:leading]) + (" ..." if flat.size > leading else "")
        rows.append((name, f"[{','.join(map(str, array.shape))}]", array.dtype.name, low, mean, high, shown))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return "\n".join(("  ".join(cell.ljust(w) for cell, w in zip(row[:6], widths)) + "  " + row[6]).rstrip()
                     for row in rows)


def _value_text(value) -> str:
    if isinstance(value, (bool,)) or getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
        return "true" if value else "false"
    if getattr(value, "dtype", None) is not None and value.dtype.kind in "iu":
        return str(int(value))
    return f"{float(value):.6g}"


# ----------------------------------------------------------------------------- check

@_command("check", short="Compare gradients with finite differences (exit 1 on failure).", example="""\
  uopgrad check model.uop --wrt w1,w2
  uopgrad check model.uop --wrt x -i x=x.npy --samples 50 --seed 3 --json""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs whose gradients are checked.")
@click.option("--of", "of_", metavar="NAMES", help="Outputs to differentiate (default: the only one).")
@click.option("-i", "--input", "specs", multiple=True, metavar="NAME=VALUE", callback=_check_specs,
              help="An input's value (as for eval; a bare data.npz gives every input its member); inputs not "
                   "given are seeded random values.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random inputs, "
              "cotangents and sampled elements.")
@click.option("--samples", type=click.IntRange(min=1), default=16, show_default=True,
              help="Elements compared per target, at most.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--literal", is_flag=True, help="Evaluate the gradient graph as written (not simplified as eval does).")
def check(source, wrt, of_, specs, seed, samples, as_json, literal):
    """Differentiate IN, evaluate the gradients in float64 and compare them with central
    finite differences on up to --samples elements per target.

    Non-scalar outputs are weighted by seeded random cotangents; DETACH values are held
    fixed (gradients do not flow through them). An element fails when
    |analytic - numeric| > 1e-6*max(1,|L|) + 1e-4*max(|analytic|,|numeric|). Exit status 1
    when any target fails.
    """
    from ..tools.check import check_gradients
    from ..tools.values import gather_inputs
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    graph, _ = _read_graph(source)
    given = gather_inputs(graph.inputs, specs, seed, defaults=_onnx_weights())
    total = sum(min(_size(graph, n), samples) for n in wrt_names if n in graph.input_names)
    with _progress_bar(total, "finite differences") as bar:
        report = check_gradients(graph, wrt_names, of_names or None, given, seed, samples, progress=bar.update,
                                 simplify="exact" if literal else "tinygrad")
    if as_json:
        import json
        click.echo(json.dumps(report.to_dict()))
    else:
        click.echo("\n".join(report.lines()))
    return 0 if report.passed else EXIT_FAILURE


def _size(graph, name: str) -> int:
    n = 1
    for s in graph.input(name).shape:
        n *= s
    return n


# ----------------------------------------------------------------------------- info, print

@_command("info", short="Statistics: nodes, ops, inputs, outputs, depth, FLOPs, sha256.", example="""\
  uopgrad info model.uop
  uopgrad info model.uop --json | jq .flops""")
@click.argument("source", metavar="IN")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def info(source, as_json):
    """Node count, count per op, inputs and outputs with shape and dtype, depth, total input
    elements, embedded bytes, an estimate of floating-point operations, and the sha256 of
    the graph's canonical bytes."""
    from ..tools.inspect import graph_info, info_text
    graph, _ = _read_graph(source)
    stats = graph_info(graph)
    if as_json:
        import json
        click.echo(json.dumps(stats))
    else:
        click.echo(info_text(stats))


@_command("print", short="A readable listing, one node a line.", example="""\
  uopgrad print model.uop
  uopgrad diff model.uop --wrt x | uopgrad print - | less""")
@click.argument("source", metavar="IN")
def print_(source):
    """List IN's nodes in file order, one a line (`%12 = MUL float32[32,64] %10 %11  #
    relu, backward`), function bodies indented, then the outputs."""
    from ..tools.inspect import listing
    graph, _ = _read_graph(source)
    out = sys.stdout
    for line in listing(graph):
        out.write(line)
        out.write("\n")
    out.flush()


# ----------------------------------------------------------------------------- convert, validate

@_command("convert", short="Rewrite a .uop file as canonical JSON or MessagePack, or as ONNX.", example="""\
  uopgrad convert model.uop -o model.json
  uopgrad convert model.json -o model.uop
  uopgrad convert grad.uop -o grad.onnx --opset 21
  uopgrad convert model.uop --to json -o - | less""")
@click.argument("source", metavar="IN")
@click.option("-o", "--output", required=True, metavar="OUT", help="Where to write (- for stdout).")
@click.option("--to", type=click.Choice(["json", "msgpack", "onnx"]),
              help="The form (default: JSON for a .json OUT, ONNX for .onnx, else MessagePack).")
@click.option("--opset", type=click.IntRange(min=1), metavar="N", help=_OPSET_HELP)
def convert(source, output, to, opset):
    """Write IN in canonical form, as JSON or MessagePack; or as a standard ONNX model
    (inputs and outputs keep their names; every op exported exactly)."""
    form = _uop_form(output, to)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "use --to json, or give -o FILE")
    graph, _ = _read_graph(source)
    _write_together(_with_onnx_weights([(output, _graph_data(graph, form, opset))], output, form))


@_command("validate", short="Check a file against the format; print ok and counts.", example="""\
  uopgrad validate model.uop
  for f in *.uop; do uopgrad validate "$f" || exit 1; done""")
@click.argument("source", metavar="IN")
def validate(source):
    """Read IN as the format contract requires; print `ok` and its counts, or the error
    (exit status 1)."""
    from ..tools.inspect import counted
    graph, _ = _read_graph(source)
    counts = (counted(len(graph.nodes()), "node"), counted(len(graph.inputs), "input"),
              counted(len(graph.outputs), "output"))
    click.echo(f"ok: {', '.join(counts)}")


# ----------------------------------------------------------------------------- render

@_command("render", short="Draw a graph with graphviz (svg, png, pdf, dot), or as an interactive page (html).",
          example="""\
  uopgrad render grad.uop -o grad.svg
  uopgrad render grad.uop -o grad.html --values values.npz
  uopgrad render grad.uop -o part.png --around x --depth 3
  uopgrad render big.uop --outputs loss --collapse-functions --format dot -o - | dot -Tsvg > big.svg""")
@click.argument("source", metavar="IN")
@click.option("-o", "--output", required=True, metavar="OUT", help="Where to write the picture (- for stdout).")
@click.option("--format", "fmt", type=click.Choice(["svg", "png", "pdf", "dot", "html"]),
              help="The format (default: from OUT's extension; svg for -). html: one offline page for a graph "
                   "of any size, opened one level of groups at a time.")
@click.option("--max-nodes", type=click.IntRange(min=1), metavar="N",
              help="Refuse graphs with more nodes than this (default 500).")
@click.option("--outputs", "outputs", metavar="NAMES", help="Draw only what these outputs depend on.")
@click.option("--around", metavar="NAME", help="Draw only the nodes within --depth edges of this input or output.")
@click.option("--depth", type=click.IntRange(min=0), default=2, show_default=True, help="Distance for --around.")
@click.option("--collapse-functions", is_flag=True, help="Draw each FUNCTION/CALL as one box, without its body.")
@click.option("--values", "values_path", metavar="VALUES.npz", help="html: show each node's min/mean/max from "
              "`uopgrad eval -o VALUES.npz --keep-intermediates`.")
def render(source, output, fmt, max_nodes, outputs, around, depth, collapse_functions, values_path):
    """Draw IN: one box per node (op, dtype, shape, arg, the function that made it),
    colours by op family, backward nodes dashed red, function bodies as clusters, a legend.
    With --format html (or OUT.html): one self-contained page, see `uopgrad view`."""
    if (fmt or _render_format(output)) == "html":  # the page: views/html
        _write(output, _html_page(source, outputs, values_path, max_nodes=max_nodes, around=around,
                                  collapse_functions=collapse_functions))
        return
    if values_path:
        raise click.UsageError("--values is shown by the html page: give -o OUT.html or --format html")
    if outputs and around:
        raise click.UsageError("give either --outputs or --around, not both")
    if _given("depth") and not around:
        raise click.UsageError("--depth is the distance for --around: give --around NAME too")
    fmt = fmt or _render_format(output)
    _refuse_binary_terminal(output, fmt, "give -o FILE")
    from ..views.graphviz import render as draw
    graph, _ = _read_graph(source)
    options = {"outputs": _names(outputs, "--outputs") or None, "around": around, "depth": depth,
               "collapse_functions": collapse_functions}
    if max_nodes is not None:
        options["max_nodes"] = max_nodes
    _write(output, draw(graph, fmt, **options))


def _render_format(output: str) -> str:
    if output == "-":
        return "svg"
    ext = os.path.splitext(output)[1].lower()
    if ext not in RENDER_EXTENSIONS:
        raise click.UsageError(f"cannot tell the format from {output!r}: give --format svg|png|pdf|dot|html "
                               f"or an OUT ending in .svg, .png, .pdf, .dot or .html")
    return RENDER_EXTENSIONS[ext]


# ----------------------------------------------------------------------------- the html page and view

def _html_page(source: str, outputs: str | None, values_path: str | None, *, max_nodes=None, around=None,
               collapse_functions=False) -> bytes:
    """The page of IN (`render --format html`, `view`): every node, grouped into levels."""
    for given, option in ((max_nodes, "--max-nodes"), (around, "--around"), (collapse_functions, "--collapse-functions")):
        if given:
            raise click.UsageError(f"{option} is for static pictures; the html page holds every node "
                                   f"(use its search and focus)")
    from ..core.graph import Graph
    from ..views.html.page import page_html
    from ..views.html.values import value_stats
    graph, _ = _read_graph(source)
    names = _names(outputs, "--outputs")
    if names:
        missing = [n for n in names if n not in graph.outputs]
        if missing:
            raise CommandFailed(f"no output named {missing[0]!r}; outputs: {', '.join(graph.outputs) or 'none'}")
        graph = Graph({n: graph.outputs[n] for n in dict.fromkeys(names)}, meta=graph.meta)
    values = value_stats(graph, values_path) if values_path else None
    title = "<stdin>" if source == "-" else os.path.basename(source)
    return page_html(graph, title=title, values=values).encode()


@_command("view", short="Open a graph as an interactive page in the browser.", example="""\
  uopgrad view grad.uop
  uopgrad view grad.uop --values values.npz""")
@click.argument("source", metavar="IN")
@click.option("--values", "values_path", metavar="VALUES.npz", help="Show each node's min/mean/max from "
              "`uopgrad eval -o VALUES.npz --keep-intermediates`.")
@click.option("--outputs", "outputs", metavar="NAMES", help="Show only what these outputs depend on.")
def view(source, values_path, outputs):
    """Write IN's page (what `render -o OUT.html` writes) to a temporary file and open it in
    the browser; without a display (no DISPLAY or WAYLAND_DISPLAY on Linux), print its path."""
    import tempfile
    page = _html_page(source, outputs, values_path)
    stem = "stdin" if source == "-" else os.path.splitext(os.path.basename(source))[0]
    descriptor, path = tempfile.mkstemp(prefix=f"uopgrad-{stem}-", suffix=".html")
    os.close(descriptor)
    _write(path, page)
    if _has_display():
        import webbrowser
        if webbrowser.open("file://" + os.path.abspath(path)):
            _note(f"opened {path} in the browser")
            return
    click.echo(path)


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


if __name__ == "__main__":  # python -m uopcli.cli.app
    main()
