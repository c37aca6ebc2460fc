"""`uopgrad jvp`, `hvp`, `jacobian` and `hessian`: forward-mode graphs (tools/forward.py)."""

from __future__ import annotations

import click

from ..app import EXIT_FAILURE, _command, _names
from ..io import _OPSET_HELP, _check_opset, _graph_data, _note, _note_shared_weights, _note_values_beside, \
    _read_graph, _refuse_binary_terminal, _refuse_writing_read, _Steps, _uop_form, _with_onnx_weights, \
    _write_together
from .diff import _simplified


TOTAL_NOTE_BYTES = 1 << 30  # the blocks' values together, above which a note says what evaluating them needs


def _writing_options(fn):
    """-o, --simplify, --stats and --opset, as diff has them."""
    fn = click.option("--opset", type=int, metavar="N", help=_OPSET_HELP)(fn)
    fn = click.option("--simplify", "simplify_", is_flag=True, help="Simplify the result (as uopgrad simplify does).")(fn)
    fn = click.option("--stats", is_flag=True, help="Print each step's wall and CPU time on stderr.")(fn)
    fn = click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
                      help="Where to write the graph (.json for the JSON form, .onnx for ONNX).")(fn)
    return fn


def _cotangent_option(fn):
    return click.option("--cotangent", type=click.Choice(["ones", "input"]), help="Weighting of a non-scalar output "
                        "(H of sum(u * output)): all ones, or a new input cotangent_<output> (cotangent2_<output> "
                        "where that is taken).")(fn)


def _matrix_options(fn):
    fn = click.option("--chunk", type=click.IntRange(min=1), default=256, show_default=True, metavar="N",
                      help="Basis tangents pushed through the graph at a time. A larger chunk makes fewer nodes, "
                      "faster to write and to evaluate (on a 4,739-weight Hessian, chunk 1 took 17 times as long as "
                      "256, and 5.6 times the memory); a smaller chunk bounds the size of each intermediate tensor (about "
                      "chunk x the largest activation), which matters only when those are large. With --limit "
                      "max_tensor_elements=N the chunk is lowered where needed so that no tensor of OUT exceeds N.")(fn)
    return fn


def _run(build, source: str, output: str, stats: bool, simplify_: bool, opset, keep_forward: bool = False,
         wrt: list[str] = (), matrix: str | None = None, of=None, maybe_zero=None) -> None:
    """Read IN, build the result with `build(graph)`, write it (atomically) to OUT; a note
    names the new inputs and outputs numbered because their plain names were taken, and
    each --wrt weight several modules read (_note_shared_weights); for the blocks of a
    `matrix` ("Jacobian", "Hessian"), what they hold in all when that is large
    (_note_total); each --wrt input the outputs `of(graph)` do not depend on (its
    derivatives are zeros; of those `maybe_zero(result)` names, if given); and the .npz
    beside a .uop IN, which evaluating OUT needs (_note_values_beside)."""
    form = _uop_form(output)
    _check_opset(form, opset)
    _refuse_binary_terminal(output, form, "give -o FILE")
    _refuse_writing_read(source, {"-o": output}, graph_form=form)
    with _Steps("reading", "differentiating", "encoding", "writing") as steps:
        graph, _ = _read_graph(source, wrt=list(wrt))
        steps.next()
        result = built = build(graph)
        _note_shared_weights(graph, list(wrt))
        if matrix:
            _note_total(matrix, result)
        result = _simplified(result) if simplify_ else result
        steps.next()
        data = _graph_data(result, form, opset, output)
        steps.next()
        _write_together(_with_onnx_weights([(output, data)], output, form))
        steps.next()
    _note_renamed(graph, result, keep_forward)
    if of is not None:
        from ...tools.forward import zero_derivatives
        for line in zero_derivatives(graph, wrt if maybe_zero is None else maybe_zero(built), of(graph)):
            _note(line)
    _note_values_beside(source, output, graph)
    if stats:
        click.echo(steps.table(), err=True)


def _note_total(matrix: str, result) -> None:
    """A note when the blocks (the result's outputs) together hold more than
    TOTAL_NOTE_BYTES: each is checked against --limit max_tensor_elements, but not their
    sum, and the file is small (the blocks are symbolic) while evaluating them is not."""
    import math
    from ...tools.forward import _bytes
    blocks = list(result.outputs.values())
    size = sum(math.prod(block.shape) * block.dtype.itemsize for block in blocks)
    if size <= TOTAL_NOTE_BYTES:
        return
    elements = sum(math.prod(block.shape) for block in blocks)
    mantissa, exponent = f"{elements:.2e}".split("e")
    count = f"{elements:,}" if elements < 1_000_000 else f"{mantissa}e{int(exponent)}"  # 1.17e9
    names = {block.dtype.name for block in blocks}
    kind = f"{names.pop()} " if len(names) == 1 else ""
    _note(f"the {matrix} blocks hold {count} {kind}values ({_bytes(size)}) in all: evaluating them needs "
          "at least that memory")


def _note_renamed(graph, result, keep_forward: bool) -> None:
    """`names already taken, so numbered: tangent_x -> tangent2_x (input)`, on stderr."""
    from ...tools.names import renamed_note
    note = renamed_note(result.input_names[len(graph.inputs):],
                        list(result.outputs)[len(graph.outputs) if keep_forward else 0:])
    if note:
        _note(note)


def _size_limit() -> int:
    """The most elements a Jacobian or Hessian block may have: --limit max_tensor_elements=N
    where given, else tools.forward.DEFAULT_LIMIT (the reader's own default, 2^40, would
    let a command build a graph no machine can evaluate)."""
    from ...tools.forward import DEFAULT_LIMIT
    ctx = click.get_current_context(silent=True)
    given = (ctx.meta.get("uopgrad.limits") or {}) if ctx else {}
    return given.get("max_tensor_elements", DEFAULT_LIMIT)


@_command("jvp", short="Forward mode: the Jacobian-vector products of outputs along tangent inputs.", example="""\
  uopgrad jvp model.uop --wrt x,w -o jvp.uop
  uopgrad jvp model.uop --wrt x --of y --keep-forward | uopgrad eval - --random""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs with a tangent (x,w): new inputs tangent_x, "
              "tangent_w of the same shape and dtype (tangent2_x where IN has tangent_x: x's second tangent).")
@click.option("--of", "of_", metavar="NAMES", help="Outputs whose tangents are written (default: every float output).")
@click.option("--keep-forward", is_flag=True, help="Keep the forward outputs, before the jvp_<output> outputs.")
@_writing_options
def jvp(source, wrt, of_, keep_forward, output, stats, simplify_, opset):
    """Write the directional derivatives of IN's outputs: jvp_<output> = J tangent, the sum
    over the --wrt inputs of d output / d input applied to tangent_<input>. Inputs: IN's,
    then tangent_<name> per --wrt name. A CALL with its own backward body is refused (as
    JAX refuses jvp of a custom_vjp).

    Names already taken are numbered: a jvp of a jvp or hvp file along x adds tangent2_x,
    x's second tangent (jvp_jvp_y is then d2y along tangent_x and tangent2_x); with
    --keep-forward, a kept output jvp_y makes the new one jvp2_y. Each name gets the
    lowest free number after its kind; a note on stderr says which."""
    from ...tools.forward import _float_outputs, jvp as build
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    _run(lambda g: build(g, wrt_names, of_names or None, keep_forward), source, output, stats, simplify_, opset,
         keep_forward, wrt_names, of=lambda g: _float_outputs(g, of_names or None))


@_command("hvp", short="Hessian-vector products of a scalar output (forward over reverse).", example="""\
  uopgrad hvp model.uop --wrt w,b -o hvp.uop
  uopgrad hvp model.uop --wrt w --of loss | uopgrad eval - --random""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs of the Hessian (w,b): outputs hvp_w, hvp_b; "
              "new inputs tangent_w, tangent_b (tangent2_w where IN has tangent_w).")
@click.option("--of", "of_", metavar="NAME", help="The scalar output (default: the only one).")
@_cotangent_option
@_writing_options
def hvp(source, wrt, of_, cotangent, output, stats, simplify_, opset):
    """Write H v for scalar output --of: hvp_<name> = sum over the --wrt inputs b of
    d2 of / d<name> db applied to tangent_b, the JVP of the gradient graph. Inputs: IN's,
    then tangent_<name> per --wrt name. A DETACH is a constant here, as in diff's gradient
    (stop-gradient): `check --hvp` says where that makes H v differ from the function's own
    Hessian (tinygrad's BatchNorm in training detaches its batch mean).

    Names already taken are numbered: an hvp of a jvp or hvp file along w adds tangent2_w
    (and cotangent2_<of> where IN has cotangent_<of>), the lowest free number after the
    kind; a note on stderr says which."""
    from ...tools.differentiate import is_zero
    from ...tools.forward import _one_output, hvp as build
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    _run(lambda g: build(g, wrt_names, of_names or None, cotangent), source, output, stats, simplify_, opset,
         wrt=wrt_names, of=lambda g: [_one_output(g, of_names or None, cotangent)],
         maybe_zero=lambda result: [name for name, out in zip(wrt_names, result.outputs.values()) if is_zero(out)])


@_command("jacobian", short="Full Jacobians, output.shape + input.shape, by batched forward mode.", example="""\
  uopgrad jacobian model.uop --wrt x --of y -o jac.uop
  uopgrad jacobian model.uop --wrt x --chunk 64 --limit max_tensor_elements=100000000 -o jac.uop""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs (columns): one jacobian_<output>_<input> each.")
@click.option("--of", "of_", metavar="NAMES", help="Outputs (rows; default: every float output).")
@_matrix_options
@_writing_options
def jacobian(source, wrt, of_, chunk, output, stats, simplify_, opset):
    """Write jacobian_<output>_<input> (shape output.shape + input.shape) for each output
    and --wrt input: the JVPs along every basis direction of the input, --chunk at a time.
    A block above --limit max_tensor_elements is refused, saying its size.

    A block whose name an earlier block has taken (outputs a and a_q, inputs q_r and r:
    the blocks (a, q_r) and (a_q, r) are both jacobian_a_q_r) gets the lowest free number,
    blocks in output-major order: the second is jacobian2_a_q_r; a note on stderr says so."""
    from ...tools.forward import _float_outputs, jacobian as build
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    limit = _size_limit()
    _run(lambda g: build(g, wrt_names, of_names or None, chunk, limit), source, output, stats, simplify_, opset,
         wrt=wrt_names, matrix="Jacobian", of=lambda g: _float_outputs(g, of_names or None))


@_command("hessian", short="Full Hessian blocks of a scalar output (forward over reverse).", example="""\
  uopgrad hessian model.uop --wrt w -o hess.uop
  uopgrad hessian model.uop --wrt w,b --of loss | uopgrad eval - --random""")
@click.argument("source", metavar="IN")
@click.option("--wrt", required=True, metavar="NAMES", help="Inputs: one hessian_<a>_<b> per pair.")
@click.option("--of", "of_", metavar="NAME", help="The scalar output (default: the only one).")
@_cotangent_option
@_matrix_options
@_writing_options
def hessian(source, wrt, of_, cotangent, chunk, output, stats, simplify_, opset):
    """Write hessian_<a>_<b> = d2 of / da db (shape a.shape + b.shape) for each pair of
    --wrt inputs: the Jacobian of the gradient, --chunk basis tangents at a time. A block
    above --limit max_tensor_elements is refused, saying its size. A DETACH is a constant,
    as for hvp (see `uopgrad hvp --help`).

    A block whose name an earlier block has taken (--wrt p,q_r,p_q,r: the blocks (p, q_r)
    and (p_q, r) are both hessian_p_q_r) gets the lowest free number, blocks in row-major
    order: the second is hessian2_p_q_r; an input cotangent_<of> already in IN makes the
    new one cotangent2_<of>. A note on stderr says what was numbered."""
    from ...tools.forward import _one_output, hessian as build
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    limit = _size_limit()
    _run(lambda g: build(g, wrt_names, of_names or None, chunk, limit, cotangent), source, output, stats, simplify_,
         opset, wrt=wrt_names, matrix="Hessian", of=lambda g: [_one_output(g, of_names or None, cotangent)])


def forward_check(graph, wrt, of, given, seed, as_json, hvp) -> int:
    """`uopgrad check --transpose` / `--hvp`: the report, and exit status 1 on failure."""
    from ...tools.forward_check import check_hvp, check_transpose
    report = check_hvp(graph, wrt, of, given, seed) if hvp else check_transpose(graph, wrt, of, given, seed)
    if as_json:
        import json
        click.echo(json.dumps(report.to_dict()))
    else:
        click.echo("\n".join(report.lines()))
    return 0 if report.passed else EXIT_FAILURE
