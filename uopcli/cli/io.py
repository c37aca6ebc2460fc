"""Reading and writing for the commands: graphs from a path or stdin (an .onnx IN, or ONNX
bytes on stdin, imported, its weights kept as the inputs' defaults), graph files written
atomically (.uop, JSON, or ONNX; an ONNX model's weights beside a .uop OUT as OUT.npz),
terminals refused binary data, -i specs checked, notes and progress on stderr."""

from __future__ import annotations

import os
import sys
import time

import click

from ..errors import UOpError
from ..formats.atomic import descriptor_named, write_all, write_atomically_together
from .app import PROG, CommandFailed, _current_file, _flag, _limits
from ..tools.values import npz_bytes


BINARY_FORMS = {"msgpack", "npz", "png", "pdf", "onnx"}


# ----------------------------------------------------------------------------- reading, writing

def _read_graph(path: str, remember: bool = True, specs: tuple = (), wrt: list[str] = (),
                assume_size: int | None = None):
    """(Graph, raw bytes) from a path or `-` (stdin); an .onnx path, or ONNX bytes on stdin,
    is imported (interop/onnx), its symbolic dimensions sized by --shape, else by the arrays
    that the -i `specs` (eval's, check's) give those inputs, else (info) `assume_size`;
    `wrt` (--wrt's names) tells its refusals which inputs are to be differentiated."""
    from ..formats.uop import loads, read_bytes
    _reading_graph(path)
    display = "<stdin>" if path == "-" else path
    if remember:
        click.get_current_context().meta["uopgrad.file"] = display
    form = None if path == "-" else _form_of_file(path)
    if form == "onnx":
        _refuse_limits_for_onnx()
        return _read_onnx(path, None, specs, wrt, assume_size), None
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
        if form is not None:  # a file told by its bytes or name (a pipe's bytes are told below)
            _refuse_import_options(display)
    limits = _limits()
    data = read_bytes(source, limits=limits, name=display)  # refuses an oversized file before reading it all
    if form is None:  # stdin, a pipe or a descriptor (<(cat model.onnx)): read once, told by its bytes
        from ..formats.sniff import looks_like_uop
        if not looks_like_uop(data):  # no name to go by: ONNX is what else a graph comes as
            _refuse_limits_for_onnx()
            return _read_onnx(display, data, specs, wrt, assume_size), None
        _refuse_import_options(display)
    graph = loads(data, limits=limits, name=display)
    if path != "-":
        _reading_graph(path, graph)  # the .npz beside it: the model's values, or not (known now)
    return graph, data


_NAMED_FORMS = {".onnx": "onnx", ".uop": "uop", ".json": "uop", ".msgpack": "uop"}


def _form_of_file(path: str) -> str | None:
    """How to read the file at `path`: "onnx" or "uop" by its first bytes where they say
    (formats/sniff.py: a MessagePack map or JSON text, a protobuf starting as ONNX does),
    else by its extension (.onnx; .uop, .json, .msgpack), whose reader's refusal says what
    is wrong; a note when the bytes contradict the extension (out.onnx holding MessagePack).
    None for what is no regular file (a pipe, /dev/fd/63: it can be read once) and for a
    file of neither kind without such an extension: its bytes are read whole and told, or
    refused, as stdin's are."""
    content, named = _forms_of_file(path)
    if content and named and content != named:
        what = ("a .uop file (a MessagePack or JSON map)" if content == "uop" else "an ONNX model")
        extension = os.path.splitext(path)[1].lower()
        _note(f"{path}: read as {what}, as its bytes are, though its name ends in {extension}")
    return content or named  # None: bytes of neither kind, and no name to go by: said as stdin's are


def _forms_of_file(path: str) -> tuple[str | None, str | None]:
    """(the form its first bytes say, the form its extension says), each None where it says
    none; both None for what is no regular file (not opened: a FIFO's writer would be cut off)."""
    import stat
    from ..formats.sniff import looks_like_onnx, looks_like_uop
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None, None
        with open(path, "rb") as file:
            head = file.read(4096)
    except OSError:
        head = b""  # the reader says why it cannot be read
    named = _NAMED_FORMS.get(os.path.splitext(path)[1].lower())
    content = None if not head else "uop" if looks_like_uop(head) else "onnx" if looks_like_onnx(head) else None
    return content, named


def _refuse_limits_for_onnx() -> None:
    """--limit bounds what the .uop reader accepts; an ONNX model is read by onnx, which these
    limits do not reach: said, not silently ignored."""
    if click.get_current_context().meta.get("uopgrad.limits"):
        raise click.UsageError("--limit bounds a .uop file as it is read; an ONNX IN is read by onnx, which it does "
                               "not bound: convert it first (uopgrad convert model.onnx -o model.uop) to read it under "
                               "limits")


def _refuse_import_options(display: str) -> None:
    """--constant and --shape shape an ONNX model as it is imported; a .uop IN has its inputs'
    shapes in the file: either given for one is a usage error (--shape x=3,3 was silently
    ignored, x staying [16,8])."""
    meta = click.get_current_context().meta
    if meta.get("uopgrad.constants"):
        raise click.UsageError(f"--constant fixes inputs of an ONNX IN when importing; a .uop IN ({display}) takes "
                               "its inputs' values with -i/--input")
    if meta.get("uopgrad.shapes"):
        raise click.UsageError(f"--shape sizes an ONNX IN's inputs and symbolic dimensions when importing; a .uop IN "
                               f"({display}) has its shapes in the file (uopgrad info lists them)")


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
    is written, stdout ("-") included, which is written after the files' temporaries and
    before their renames (what reached a pipe cannot be taken back; a file renamed before
    a failed stdout, `--report - > /dev/full`, was left behind with exit status 1). No file
    is written that the command reads, nor one file twice (_refuse_written_twice)."""
    _refuse_written_twice(files)

    def to_stdout():
        for dest, data in files:
            if dest == "-":
                write_all(sys.stdout.buffer, data)
                sys.stdout.buffer.flush()
    try:
        write_atomically_together([(dest, data) for dest, data in files if dest != "-"], before_renames=to_stdout)
    except OSError as e:
        if e.filename == "<stdout>":  # the stream's own error, worded where every stdout error is
            raise
        raise CommandFailed(f"{e.filename}: cannot write: {e.strerror or e}") from None


# ----------------------------------------------------------------------------- ONNX models (IN ending in .onnx)
# interop/onnx, and onnx itself, are imported only when an .onnx file is given, or stdin's
# bytes are neither MessagePack's nor JSON's map (formats/sniff.py). The model's
# float initializers (its weights) are inputs of the graph; their values are the inputs'
# defaults for eval and check, and go beside a .uop that convert or diff writes (OUT.npz).

def _read_onnx(path: str, data: bytes | None = None, specs: tuple = (), wrt: list[str] = (),
               assume: int | None = None):
    """The graph of the ONNX model at `path`, or in `data` (read from stdin, named `path`)."""
    from ..formats.sniff import describe, looks_like_onnx
    try:
        import onnx  # noqa: F401 - only to say what is missing
    except ImportError:
        if data is not None:
            raise CommandFailed(f"{path}: not a .uop file (a MessagePack or JSON map) but {describe(data)}; "
                                "reading ONNX models needs the onnx package: pip install 'uopgrad[onnx]'") from None
        raise CommandFailed(f"{path}: reading ONNX models needs the onnx package: pip install 'uopgrad[onnx]'") from None
    from ..errors import FormatError
    from ..interop.onnx.importer import import_model, load_onnx, model_digest, parse_model
    from ..tools.values import given_shapes
    ctx = click.get_current_context()
    shapes, constants = ctx.meta.get("uopgrad.shapes"), ctx.meta.get("uopgrad.constants")
    given = given_shapes(specs) if specs else None  # the -i arrays' shapes, read from their headers
    if data is None:
        external: list[str] = []
        try:
            graph, weights = load_onnx(path, shapes, constants, given, assume, wrt, external)
        finally:  # the model's external data files are read too: no output may replace them
            for file in external:
                _reading(f"the external data of IN {path} ({os.path.relpath(file)})", file, "IN")
    else:
        try:
            model = parse_model(data, path)
        except FormatError:
            if looks_like_onnx(data):  # a truncated or damaged model: the parser's words
                raise
            raise CommandFailed(f"{path}: neither a .uop file (a MessagePack or JSON map) nor an ONNX model: "
                                f"{describe(data)}") from None
        graph, weights = import_model(model, shapes, source=path, constants=constants, given_shapes=given,
                                      assume_size=assume, wrt=wrt, digest=model_digest(data))
    ctx.meta["uopgrad.weights"] = weights
    _note_renamed(path, graph.meta)
    return graph


def _note_renamed(path: str, meta: dict) -> None:
    """A note naming the model's inputs and outputs that the graph calls by other names
    (their ONNX names have whitespace, '=' or ','; tools/inspect.RENAMED), so a user who
    types the ONNX name learns the graph's."""
    from ..tools.inspect import RENAMED, meta_json
    from ..core.uop import printable
    renamed = meta_json(meta, RENAMED, dict)
    if renamed:
        shown = ", ".join(f"{printable(repr(k))} is {printable(str(v))}" for k, v in renamed.items())
        _note(f"{path}: ONNX names with whitespace, '=' or ',' are renamed: {shown}")


def _explain_inputs(source: str, graph, specs, use_random: bool, inputs=None) -> None:
    """Of `inputs` (default the graph's; --map: those its shards do not give): a note when
    IN's .npz beside it holds values for those given none, or when they are an ONNX model's
    weights a pipe carried none of; random values never fill what the file says is a
    buffer or a statistic (tools/model_inputs.py)."""
    from ..tools.model_inputs import beside_note, missing_inputs, refuse_random_state, unwritten_weights_note
    missing = missing_inputs(graph.inputs if inputs is None else inputs, specs, _onnx_weights())
    for note in (beside_note(source, specs, missing), unwritten_weights_note(graph.meta, missing, use_random)):
        if note:
            _note(note)
    if use_random:
        refuse_random_state(source, missing)


def _note_values_beside(source: str, output: str, graph) -> None:
    """A note when IN is a .uop with IN.npz beside it (the model's values, of `graph`'s
    inputs) and OUT a file of another stem: no OUT.npz is written beside OUT, so evaluating
    it needs -i IN.npz (eval notes that by itself only for the .npz beside the file it
    evaluates)."""
    from ..tools.model_inputs import archive_beside, holds_values_of
    values = archive_beside(source)
    if values is None or output == "-" or _is_stream(output) or not holds_values_of(values, graph.input_names):
        return
    if os.path.splitext(os.path.realpath(output))[0] == os.path.splitext(os.path.realpath(source))[0]:
        return  # OUT.npz is IN.npz: eval OUT finds it
    _note(f"{values} beside {source} holds the model's values: evaluate {output} with -i {values}")


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
    if _is_stream(output):  # /dev/null, /dev/stdout, a shell's >(...): no file beside it (/dev/null.npz was made)
        _note(f"the model's weights are not written with OUT {output}, which is not a file (nothing beside it "
              "holds them): give -o FILE to get FILE.npz beside it")
        return files
    _refuse_weights_as_graph(output)
    beside = _weights_beside(output)
    _writing(beside, "-o", f"{beside}, the model's weights beside -o {output},")
    _refuse_replacing_other_values(beside, output, weights)
    return files + [(beside, npz_bytes(weights))]


def _weights_beside(output: str) -> str:
    return os.path.splitext(output)[0] + ".npz"


def _refuse_weights_as_graph(output: str) -> None:
    """An OUT whose weights beside it would be OUT itself (-o grad.npz): the weights replaced
    the graph just written, exit 0. Refused (not written elsewhere, as grad.npz.npz): a graph
    named .npz reads as values to every later command, and to the one who named it."""
    if _same_file(_weights_beside(output), output):
        stem = os.path.splitext(output)[0]
        raise click.UsageError(f"-o {output}: an ONNX model's weights go beside a .uop OUT as OUT.npz, here {output} "
                               f"itself, which would replace the graph; give -o {stem}.uop (the weights then in "
                               f"{stem}.npz) or -o {stem}.onnx (which holds them)")


def _refuse_replacing_other_values(beside: str, output: str, weights) -> None:
    """OUT.npz, the weights written beside a .uop OUT, may replace an earlier run's (some
    member names in common: the same model, or a version of it), not a file of other arrays
    (a data set named like the model): that is refused, as -o over an input is."""
    if not os.path.exists(beside):
        return
    from ..tools.names import briefly
    from ..tools.values import npz_headers
    try:
        held = set(npz_headers(beside))
    except UOpError:
        held = None  # not an .npz at all: no earlier run wrote it
    if held is None or not held & set(weights):
        what = "is no .npz" if held is None else f"holds other arrays ({briefly(sorted(held))})"
        raise CommandFailed(f"{beside} {what}: writing the model's weights beside {output} would replace it; "
                            "move it, or give -o another name")  # a file in the way, not named: exit status 1


# ----------------------------------------------------------------------------- no file read is written over
# The one policy, for every command: a command never writes over a file it reads, be it -o,
# --report, or the weights beside OUT. What a command reads is recorded as it is named
# (_reading): IN and the model's values beside a .uop IN (IN.npz, the only copy of a
# converted model's weights; told once IN is read: _reading_graph), -i's files
# (_check_specs), --values, --constant's .npy (app.py), --map's shards. Each command names its outputs before its work
# (_refuse_writing_read), and _write_together checks every file again before writing any,
# the guard no command can miss. convert and simplify may write IN itself (in_place: the
# same graph in another form, or smaller), never the other files they read. An empty path
# is a usage error naming its option. Devices and descriptors (/dev/null, /dev/stdout,
# >(...)) are written in place, replacing no file: never refused.

def _reading(what: str, path: str, option: str) -> None:
    """Record that this command reads the file `path` (`what` names it in a refusal: "IN",
    "the file -i x=x.npy reads", ...): no output may replace it."""
    if path == "":
        raise click.UsageError(f"{option} is an empty path: name a file" + (" (or - for stdin)" if option == "IN" else ""))
    ctx = click.get_current_context(silent=True)
    if ctx is not None and path != "-":
        read = ctx.meta.setdefault("uopgrad.read", [])
        if (what, path) not in read:  # IN is named before the work (_refuse_writing_read) and as it is read
            read.append((what, path))


def _reading_graph(source: str, graph=None) -> None:
    """IN, and the model's values beside a .uop IN (model.npz beside model.uop, the only
    copy of a converted model's weights): an .npz holding a value for one of IN's inputs,
    or a file that is no .npz (model_inputs.holds_values_of). One that holds none is not
    (an earlier `eval IN -o IN.npz` wrote IN's outputs there, and running the same command
    again replaces them); which it is, is known once IN is read (`graph`), and then an
    output already named on it is refused, as one named after it is."""
    from ..tools.model_inputs import archive_beside, holds_values_of
    _reading("IN", source, "IN")
    values = archive_beside(source)
    if values is None or not holds_values_of(values, None if graph is None else graph.input_names):
        return
    _reading(f"the model's values beside IN {source}", values, "IN")
    ctx = click.get_current_context(silent=True)
    if graph is not None and ctx is not None:
        for path, (label, option) in ctx.meta.get("uopgrad.written", {}).items():
            _refuse_read(path, label, option)


def _writing(path: str, option: str, label: str | None = None) -> None:
    """Record that `path` is written, for option `option` (`label`: how a refusal names it,
    default "-o OUT"), and refuse it where it is a file the command reads."""
    if path == "":
        raise click.UsageError(f"{option} is an empty path: name a file (or - for stdout)")
    label = label or f"{option} {path}"
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        written = ctx.meta.setdefault("uopgrad.written", {})
        for other, (other_label, other_option) in written.items():
            if other_label != label and path != "-" and not _is_stream(path) and _same_file(other, path):
                raise click.UsageError(f"{label} is also {other_label}: one would replace the other; give "
                                       f"{other_option} another file")
        written[path] = (label, option)
    _refuse_read(path, label, option)


def _refuse_read(path: str, label: str, option: str) -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is None or path == "-" or _is_stream(path):
        return
    in_place = ctx.meta.get("uopgrad.in_place", False)
    for what, read in ctx.meta.get("uopgrad.read", ()):
        if _same_file(read, path) and not (in_place and what == "IN"):
            raise click.UsageError(f"{label} is {what}: writing it would replace the file read; give {option} "
                                   "another file")


def _refuse_writing_read(source: str | None, outputs: dict, in_place: bool = False,
                         graph_form: str | None = None) -> None:
    """Before any work: refuse each of `outputs` ({option: path}, None where not given) that
    names a file the command reads (IN, unless `in_place`, the values beside it, -i's,
    --values', --constant's, recorded as their options were read) or is empty. With
    `graph_form` (-o's form, a graph), an .onnx IN's weights beside -o that would be -o
    itself are refused too (_refuse_weights_as_graph), IN told an ONNX model as reading will
    tell it (by its bytes, else its name); a model piped in is refused there once read."""
    if source is not None:
        _reading_graph(source)
    if in_place:
        click.get_current_context().meta["uopgrad.in_place"] = True
    for option, path in outputs.items():
        if path is not None:
            _writing(path, option)
    output = outputs.get("-o")
    if graph_form not in (None, "onnx") and output not in (None, "-") and not _is_stream(output) \
            and _is_onnx_file(source):
        _refuse_weights_as_graph(output)


def _is_onnx_file(source: str) -> bool:
    """Whether reading `source` will read an ONNX model (as _form_of_file decides, unsaid)."""
    content, named = _forms_of_file(source)
    return (content or named) == "onnx"


def _refuse_directory_read(directory: str) -> None:
    """An OUT directory replaced as a whole (eval --map --reduce none): refused when it holds,
    at any depth, a file the command reads (-o shards/ replaced the data set with the outputs)."""
    root = os.path.realpath(directory)
    inside = root.rstrip(os.sep) + os.sep
    for what, path in click.get_current_context().meta.get("uopgrad.read", ()):
        if os.path.exists(path) and (os.path.realpath(path) + os.sep).startswith(inside):
            held = f"IN ({path})" if what == "IN" else what
            raise click.UsageError(f"-o {directory} holds {held}: --reduce none replaces the directory as a whole, "
                                   "which would lose it; give -o a directory of its own")


def _refuse_written_twice(files: list) -> None:
    """Every file about to be written, checked again against what the command reads (the
    outputs named by _writing say their option), and for two outputs on one file."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    written = ctx.meta.get("uopgrad.written", {})
    seen: list[str] = []
    for dest, _ in files:
        if dest == "-":
            continue
        label, option = written.get(dest, (f"-o {dest}", "-o"))
        _refuse_read(dest, label, option)
        if not _is_stream(dest) and any(_same_file(other, dest) for other in seen):
            raise click.UsageError(f"two outputs name the file {dest}: one would replace the other; give one "
                                   "another file")
        seen.append(dest)


def _is_stream(path: str) -> bool:
    """A destination written in place, not a file replaced (atomic.py): a descriptor's path
    (/dev/stdout, /dev/fd/63), a device (/dev/null), a FIFO or a socket."""
    import stat
    if descriptor_named(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _same_file(a: str, b: str) -> bool:
    """The same file by its path (symlinks followed) or, where both exist, by its device and
    inode (a hard link)."""
    if a == "-" or b == "-":
        return False
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def _refuse_other_than_npz(output: str | None) -> None:
    """eval's -o is an .npz archive whatever its name: -o results.json wrote a zip, exit 0.
    An OUT not named .npz is refused, but for stdout and devices or descriptors (a pipe
    has no name to go by), and a directory, which the write refuses naming it."""
    if output is None or output == "-" or output.lower().endswith(".npz") or _is_stream(output) \
            or os.path.isdir(output):
        return
    stem, ext = os.path.splitext(output)
    hint = f", or print them with --json > {output}" if ext.lower() == ".json" else ""
    raise click.UsageError(f"-o {output}: eval writes its outputs as an .npz archive, whatever the name; give "
                           f"-o {stem}.npz{hint}")


def _check_specs(ctx, param, specs: tuple) -> tuple:
    """-i values look like NAME=VALUE or data.npz (values.split_spec): a usage error otherwise (exit 2),
    before any reading."""
    from ..tools.values import _npz_member, split_spec
    for spec in specs:
        try:
            name, value = split_spec(spec)
        except UOpError as e:
            raise click.BadParameter(str(e), ctx, param) from None
        path = value if name is None else _npz_member(value, name)[0] or (value if value.endswith(".npy") else None)
        if path is not None:  # (eval -i gg.npz -o gg.npz overwrote the weights it read)
            _reading(f"the file -i {spec} reads", path, "-i")
    return specs


def _uop_form(dest: str, to: str | None = None) -> str:
    """The form of a graph OUT: --to's, else by OUT's extension (.onnx, .json, else
    MessagePack); --to contradicting the extension (--to msgpack -o out.onnx, which no
    reader would take for what it holds) is a usage error."""
    if to:
        extension = os.path.splitext(dest)[1].lower() if dest != "-" else ""
        says = {".onnx": "onnx", ".json": "json", ".msgpack": "msgpack"}.get(extension)
        if (says is not None and says != to) or (extension == ".uop" and to == "onnx"):
            right = {"onnx": ".onnx", "json": ".json or .uop", "msgpack": ".uop or .msgpack"}[to]
            named = {".onnx": "ONNX", ".json": "JSON", ".msgpack": "MessagePack", ".uop": "the .uop format"}[extension]
            raise click.UsageError(f"--to {to} contradicts -o {dest}, whose name says {named}: give -o a {right} "
                                   "name, or leave out --to")
        return to
    if dest.lower().endswith(".onnx"):  # ONNX export: see _graph_data
        return "onnx"
    return "json" if dest.lower().endswith(".json") else "msgpack"


# ----------------------------------------------------------------------------- ONNX output
# A graph written to a .onnx OUT (or --to onnx) is exported as standard ONNX
# (uopcli.interop.onnx.exporter); the onnx package is imported only then.

_OPSET_HELP = "ONNX opset of an ONNX OUT: 18 up to the newest the installed onnx knows (default 20)."


def _check_opset(form: str, opset: int | None) -> None:
    if opset is not None and form != "onnx":
        raise click.UsageError("--opset is for ONNX output: give -o FILE.onnx (or --to onnx)")


def _graph_data(graph, form: str, opset: int | None, output: str):
    """What a graph file holds: the .uop form's pieces (formats.uop.dump_parts), or ONNX
    bytes, where an ONNX model IN's weights are initializers, as in IN: the file runs
    given only the model's own inputs (and cotangents). A .uop of an ONNX model on stdout
    goes without its weights (no file beside it to hold them): its meta names them, so
    that eval can say why they are missing (tools/model_inputs.unwritten_weights_note)."""
    if form != "onnx":
        from ..formats.uop import dump_parts
        weights = _onnx_weights()
        if output == "-" or _is_stream(output):  # nothing beside a pipe or device
            from ..tools.model_inputs import mark_unwritten_weights, mark_values_beside
            if weights:
                mark_unwritten_weights(graph, list(weights))
            elif _current_file() not in (None, "<stdin>"):  # a .uop IN: the values beside it stay behind
                mark_values_beside(graph, _current_file())
        return dump_parts(graph, form)
    try:
        from ..interop.onnx.exporter import onnx_bytes
    except ModuleNotFoundError as e:
        raise CommandFailed(f"writing ONNX needs the {e.name} package, which is not installed: "
                            "pip install 'uopgrad[onnx]'") from None
    return onnx_bytes(graph, opset, _onnx_weights())


def _note(message: str) -> None:
    """Progress and diagnostics (not results): stderr, silenced by --quiet."""
    if not _flag("quiet"):
        click.echo(f"{PROG}: {message}", err=True)


def _note_shared_weights(graph, wrt: list[str]) -> None:
    """A note for each --wrt weight of an imported model that several modules read (its
    gradient is the sum of theirs), or that has a BatchNorm folded into it (its gradient is
    the folded weight's): tools/inspect.shared_weight_notes and folded_weight_notes."""
    from ..tools.inspect import folded_weight_notes, shared_weight_notes
    weights = set(_onnx_weights() or ()) or None  # an .onnx IN's weights: a data input gets no hint on them
    for line in shared_weight_notes(graph, wrt, weights) + folded_weight_notes(graph, wrt):
        _note(line)


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
