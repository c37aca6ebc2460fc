"""`uopgrad render` (graphviz pictures, or the html page) and `uopgrad view` (the page in
the browser)."""

from __future__ import annotations

import os
import sys

import click

from ..app import _command, _given, _names
from ..io import _note, _read_graph, _reading, _refuse_binary_terminal, _refuse_writing_read, _write


RENDER_EXTENSIONS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot",
                     ".html": "html", ".htm": "html"}


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
    if values_path is not None:
        _reading("the file --values reads", values_path, "--values")
    _refuse_writing_read(source, {"-o": output})
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
    from ...views.graphviz import render as draw
    graph, _ = _read_graph(source)
    options = {"outputs": _names(outputs, "--outputs") or None, "around": around, "depth": depth,
               "collapse_functions": collapse_functions}
    if max_nodes is not None:
        options["max_nodes"] = max_nodes
    notes: list[str] = []
    picture = draw(graph, fmt, notes, **options)
    _write(output, picture)
    for note in notes:  # written all the same, exit 0: but not as drawn
        _note(f"{output}: {note}")


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
    from ...views.graphviz import render
    graph, _ = _read_graph(source)
    title = "<stdin>" if source == "-" else os.path.basename(source)
    return render(graph, "html", title=title, values=values_path or None, outputs=_names(outputs, "--outputs") or None)


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
    if values_path is not None:
        _reading("the file --values reads", values_path, "--values")
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
