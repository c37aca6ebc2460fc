"""`uopgrad diff` (the gradient graph) and `uopgrad simplify` (a graph rewritten smaller)."""

from __future__ import annotations

import click

from ..app import _command, _names
from ..io import (_OPSET_HELP, _check_opset, _graph_data, _note, _note_shared_weights, _note_values_beside,
                  _read_graph, _refuse_binary_terminal, _refuse_writing_read, _same_file,
                  _Steps, _uop_form, _with_onnx_weights, _write_together)


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
              "or a new input cotangent_<output> (cotangent2_<output> where IN has that input).")
@click.option("--keep-forward", is_flag=True, help="Keep the forward outputs, before the gradients.")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Where to write the gradient graph (.json for the JSON form, .onnx for ONNX).")
@click.option("--report", "report_path", metavar="FILE", help="Also write the zero-gradient report as JSON.")
@click.option("--stats", is_flag=True, help="Print each step's wall and CPU time on stderr (also with --quiet).")
@click.option("--simplify", "simplify_", is_flag=True, help="Simplify the gradient graph (as uopgrad simplify does).")
@click.option("--opset", type=int, metavar="N", help=_OPSET_HELP)
def diff(source, wrt, of_, cotangent, keep_forward, output, report_path, stats, simplify_, opset):
    """Write the gradient graph of IN's output(s) with respect to the inputs --wrt.

    The result keeps every input of IN, in order (plus cotangent_<output> inputs with
    --cotangent input), so the same -i values feed both files. Targets whose gradient is
    identically zero are reported on stderr, with the reason.

    Names already taken are numbered: a diff --cotangent input of a file that has the
    input cotangent_y adds cotangent2_y; with --keep-forward, a kept output grad_x makes
    the new one grad2_x. Each name gets the lowest free number after its kind; a note on
    stderr says which.
    """
    from ...tools.differentiate import differentiate
    form = _uop_form(output)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "give -o FILE")
    if report_path == "-" and output == "-":
        raise click.UsageError("--report - and the graph cannot both go to stdout: give -o OUT")
    if report_path and _same_file(report_path, output):
        raise click.UsageError(f"--report and -o name the same file ({output}): give the report another")
    _refuse_writing_read(source, {"-o": output, "--report": report_path}, graph_form=form)
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    with _Steps("reading", "differentiating", "encoding", "writing") as steps:
        graph, _ = _read_graph(source, wrt=wrt_names)
        steps.next()
        result, report = differentiate(graph, wrt_names, of_names or None, cotangent, keep_forward)
        _note_shared_weights(graph, wrt_names)
        result = _simplified(result) if simplify_ else result  # --simplify
        steps.next()
        data = _graph_data(result, form, opset, output)
        steps.next()
        files = _with_onnx_weights([(output, data)], output, form)
        if report_path:
            import json
            files.append((report_path, (json.dumps(report.to_dict(), indent=2) + "\n").encode()))
        _write_together(files)  # both or neither
        steps.next()
    if cotangent and all(not graph.output(name).shape for name in of_names or graph.output_names):
        _note(f"--cotangent {cotangent} has no effect: the outputs differentiated are scalars (seeded with 1)")
    from ...tools.names import renamed_note
    renamed = renamed_note(result.input_names[len(graph.inputs):],
                           list(result.outputs)[len(graph.outputs) if keep_forward else 0:])
    for line in ([renamed] if renamed else []) + report.lines():
        _note(line)
    _note_values_beside(source, output, graph)
    if stats:
        click.echo(steps.table(), err=True)


# ----------------------------------------------------------------------------- simplify

@_command("simplify", short="Rewrite a graph smaller: exact rewrites, and tinygrad's algebraic ones.", example="""\
  uopgrad simplify grad.uop -o grad-small.uop
  uopgrad simplify grad.uop --exact -o same-bits.uop
  uopgrad diff model.uop --wrt w | uopgrad simplify - | uopgrad eval - --random""")
@click.argument("source", metavar="IN")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Where to write (.json for JSON, .onnx for ONNX).")
@click.option("--exact", is_flag=True, help="Only the rewrites that change no bit of any value.")
@click.option("--opset", type=int, metavar="N", help=_OPSET_HELP)
def simplify(source, output, exact, opset):
    """Write IN simplified: rewrites that never change a value (x*1, -(-x), movements that
    undo each other, constant folding, ...) and, without --exact, the algebraic rewrites
    tinygrad's compiler applies (which change rounding, not meaning, and make the
    gradients of sigmoid, tanh, gelu, ... finite where tinygrad's are). Inputs, outputs
    and node metadata are kept; the node counts before and after go to stderr. An ONNX
    model's weights go where diff puts them: beside a .uop OUT as OUT.npz, inside an .onnx
    OUT.
    """
    form = _uop_form(output)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "give -o FILE")
    _refuse_writing_read(source, {"-o": output}, in_place=True, graph_form=form)  # -o may be IN (the same function,
    graph, _ = _read_graph(source)                                                 # smaller), no other file read
    result = _simplified(graph, exact)
    before, after = len(graph.nodes()), len(result.nodes())
    _write_together(_with_onnx_weights([(output, _graph_data(result, form, opset, output))], output, form))
    _note(f"{before} -> {after} nodes ({'exact rewrites' if exact else 'exact and tinygrad rewrites'})")


def _simplified(graph, exact: bool = False):
    from ...core.simplify import simplify as simplified
    return simplified(graph, exact=exact)
