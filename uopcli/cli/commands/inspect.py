"""`uopgrad info`, `print`, `convert` and `validate`: a graph file looked at, or rewritten."""

from __future__ import annotations

import sys

import click

from ..app import _command
from ..io import (_OPSET_HELP, _check_opset, _graph_data, _read_graph, _refuse_binary_terminal, _refuse_writing_read,
                  _uop_form, _with_onnx_weights, _write_together)


# ----------------------------------------------------------------------------- info, print

@_command("info", short="Statistics: nodes, ops, inputs, outputs, depth, FLOPs, sha256.", example="""\
  uopgrad info model.uop
  uopgrad info model.uop --json | jq .flops""")
@click.argument("source", metavar="IN")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON (an error too: {\"error\": ...}).")
def info(source, as_json):
    """Node count, count per op, inputs and outputs with shape and dtype, depth, total input
    elements, embedded bytes, an estimate of floating-point operations, and the sha256 of
    the graph's canonical bytes. An ONNX model's symbolic dimensions that --shape does not
    size are counted as 1 (meta.onnx.assumed_sizes says which)."""
    from ...tools.inspect import graph_info, info_text
    graph, _ = _read_graph(source, assume_size=1)  # an ONNX model's symbolic sizes left unsized: 1
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
    from ...tools.inspect import listing
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
  uopgrad convert model.uop --to json | less""")
@click.argument("source", metavar="IN")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Where to write (- for stdout; binary forms only to a pipe or a file, not a terminal).")
@click.option("--to", type=click.Choice(["json", "msgpack", "onnx"]),
              help="The form (default: JSON for a .json OUT, ONNX for .onnx, else MessagePack); one that OUT's "
                   "name contradicts (--to msgpack -o m.onnx) is refused.")
@click.option("--opset", type=int, metavar="N", help=_OPSET_HELP)
def convert(source, output, to, opset):
    """Write IN in canonical form, as JSON or MessagePack; or as a standard ONNX model
    (inputs and outputs keep their names; every op exported exactly)."""
    form = _uop_form(output, to)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "use --to json, or give -o FILE")
    _refuse_writing_read(source, {"-o": output}, in_place=True, graph_form=form)  # -o may be IN (the same graph,
    graph, _ = _read_graph(source)                                                 # another form), no other file read
    _write_together(_with_onnx_weights([(output, _graph_data(graph, form, opset, output))], output, form))


@_command("validate", short="Check a file against the format; print ok and counts.", example="""\
  uopgrad validate model.uop
  for f in *.uop; do uopgrad validate "$f" || exit 1; done""")
@click.argument("source", metavar="IN")
def validate(source):
    """Read IN as the format contract requires; print `ok` and its counts, or the error
    (exit status 1)."""
    from ...tools.inspect import counted
    graph, _ = _read_graph(source)
    counts = (counted(len(graph.nodes()), "node"), counted(len(graph.inputs), "input"),
              counted(len(graph.outputs), "output"))
    click.echo(f"ok: {', '.join(counts)}")
