"""`uopgrad eval` (values of the outputs, on numpy or tinygrad) and `uopgrad check` (the
gradients against finite differences)."""

from __future__ import annotations

import click

from ..app import EXIT_FAILURE, PROG, CommandFailed, _command, _given, _names
from ..io import (_check_specs, _explain_inputs, _onnx_weights, _progress_bar, _read_graph,
                  _refuse_binary_terminal, _refuse_other_than_npz, _refuse_writing_read, _Steps, _write)
from ...tools.values import npz_bytes
from ..output import _elements, _stats_json, _stats_text, _table, _value_json
from .evaluate_map import check_map_usage, eval_map, map_options


# ----------------------------------------------------------------------------- eval

@_command("eval", short="Evaluate a graph on given or random inputs.", example="""\
  uopgrad eval model.uop -i x=x.npy -i w=weights.npz -i b=0.1
  uopgrad eval grad.uop --random --seed 1 --stats
  uopgrad eval grad.uop -i x=data.npz:features --random -o grads.npz
  uopgrad eval grad.uop --map 'shards/*.npz' -i w=w.npy --reduce sum --dask local:2 -o grads.npz""")
@click.argument("source", metavar="IN")
@click.option("-i", "--input", "specs", multiple=True, metavar="NAME=VALUE", callback=_check_specs,
              help="An input's value: x.npy, data.npz (member NAME), data.npz:key, or a number filled to its shape; "
                   "a bare data.npz gives every input its member.")
@click.option("--random", "use_random", is_flag=True, help="Fill inputs not given with seeded random values "
              "(an integer index below the number of classes the graph compares it with).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --random.")
@click.option("-o", "--output", metavar="OUT.npz", help="Store the outputs in an .npz under their names (- for stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print the outputs as JSON (an error too: {\"error\": ...}).")
@click.option("--stats", is_flag=True, help="Print the evaluation time and peak live bytes on stderr (with --json: "
              "under \"stats\" in the document).")
@click.option("--literal", is_flag=True, help="Run the graph as written: without tinygrad's algebraic rewrites "
              "(the exact ones, which change no bit, still apply).")
@click.option("--keep-intermediates", is_flag=True, help="With -o OUT.npz, also store every node's value as %<i> "
              "(its number in `uopgrad print`), for `uopgrad render --values`. The graph is then evaluated as "
              "written, outputs included, since a simplified graph no longer has those nodes.")
@click.option("--backend", type=click.Choice(["numpy", "tinygrad"]), default="numpy", show_default=True,
              help="Who computes: the numpy evaluator, or tinygrad (the extra uopgrad[tinygrad]); both run the "
                   "same simplified graph.")
@click.option("--device", metavar="DEV", help="tinygrad's device (CPU, CUDA, METAL, ...; default: tinygrad's DEV).")
@click.option("--debug-nans", is_flag=True, help="When an output holds a nan or inf, name the node that first makes "
              "one (%index as `print` numbers it, op, metadata, sources, the input elements it depends on) on "
              "stderr (with --json: also under \"not_finite\" in the document), and exit 1; the outputs are still "
              "printed or written, as computed. Costs one more evaluation, only then.")
@map_options
def eval_(source, specs, use_random, seed, output, as_json, stats, literal, keep_intermediates, backend, device,
          debug_nans, map_pattern, reduction, dask_target):
    """Evaluate IN's outputs and print them as a table (or --json, or -o OUT.npz).

    The graph is simplified first, as tinygrad's compiler would before running it, so the
    values are what tinygrad computes (the gradient of sigmoid at -1000 is 0, not 0*inf);
    --literal runs it as written.
    """
    _refuse_writing_read(source, {"-o": output})  # (eval -i gg.npz -o gg.npz overwrote the weights it read)
    if check_map_usage(map_pattern, reduction, dask_target):  # over a data set's shards (issue 34)
        if debug_nans:
            raise click.UsageError("--debug-nans runs one evaluation: give it without --map (on one shard's -i)")
        return eval_map(source, specs, use_random, seed, output, as_json, stats, literal, keep_intermediates,
                        backend, device, map_pattern, reduction, dask_target)
    _check_backend(backend, device, stats, keep_intermediates)  # tinygrad backend (issue 22)
    if output and as_json:
        raise click.UsageError("give either -o OUT.npz or --json, not both")
    if _given("seed") and not use_random:
        raise click.UsageError("--seed is the seed of --random: give --random too")
    if keep_intermediates and not output:
        raise click.UsageError("--keep-intermediates stores node values in -o OUT.npz: give -o too")
    if output:
        _refuse_binary_terminal(output, "npz", "give -o OUT.npz")
        _refuse_other_than_npz(output)
    from ...backends.numpy import EvalStats, evaluate_graph
    from ...tools.index_range import check_index_values
    from ...tools.values import gather_inputs
    with _Steps("reading", "evaluating") as steps:
        graph, _ = _read_graph(source, specs=specs)  # (an ONNX model's symbolic sizes from -i's arrays)
        _explain_inputs(source, graph, specs, use_random)
        inputs = gather_inputs(graph.inputs, specs, seed if use_random else None, defaults=_onnx_weights(),
                               roots=graph.outputs.values())
        check_index_values(graph, inputs)  # a label outside the classes: refused (tools/index_range.py)
        steps.next()
        eval_stats = EvalStats() if stats else None
        simplify = "exact" if literal else "tinygrad"
        if backend == "tinygrad":  # the same simplified graph as numpy's, so the two agree
            results = _evaluate_on_tinygrad(graph, inputs, device, simplify)
        else:
            results = evaluate_graph(graph, inputs, stats=eval_stats, simplify=simplify)
        steps.next()
    finding = _not_finite(graph, inputs, results) if debug_nans else None  # --debug-nans (tools/nans.py)
    if output:
        arrays = {name: a for name, a in _elements(results).items() if a is not None}
        if keep_intermediates:  # --keep-intermediates: every node's value too (tools/intermediates.py)
            from ...tools.intermediates import with_intermediates
            arrays = with_intermediates(graph, inputs, arrays)
        _write(output, npz_bytes(arrays))
    elif as_json:
        import json
        document = {"outputs": {name: _value_json(a) for name, a in results.items()}}
        if eval_stats is not None:
            document["stats"] = _stats_json(eval_stats)
        if finding is not None:
            document.update(not_finite=finding.to_dict() if finding is not _REWRITES_MADE else _REWRITES_MADE,
                            exit_status=EXIT_FAILURE)
        click.echo(json.dumps(document))
    else:
        click.echo(_table(_elements(results)))
    if eval_stats is not None and not as_json:  # a diagnostic, as diff's and --map's: stdout holds the values alone
        import sys
        sys.stdout.flush()  # on a terminal, after the table
        click.echo(_stats_text(eval_stats), err=True)
    if finding is not None:
        _say_not_finite(finding)
        return EXIT_FAILURE


_REWRITES_MADE = ("the outputs are not finite, but the graph as written computes finite values: the rewrites eval "
                  "runs make them (--literal runs it as written)")


def _not_finite(graph, inputs: dict, results: dict):
    """--debug-nans: None when every float output is finite; else the Finding of the node
    that first makes a non-finite value (tools/nans.py), or _REWRITES_MADE when the graph
    as written makes none."""
    from ...tools.nans import hunt_nans
    from ...tools.values import not_finite
    if not not_finite(_elements(results)):
        return None
    return hunt_nans(graph, inputs) or _REWRITES_MADE


def _say_not_finite(finding) -> None:
    import sys
    sys.stdout.flush()  # the values first, then why, also when both go to one pipe
    lines = [finding] if finding is _REWRITES_MADE else finding.lines()
    click.echo("\n".join(f"{PROG}: {line}" if i == 0 else line for i, line in enumerate(lines)), err=True)


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
    from ...interop.tinygrad import TinygradMissing, import_tinygrad, unknown_device
    try:
        import_tinygrad()
    except TinygradMissing as e:
        raise CommandFailed(f"--backend tinygrad: {e}") from None
    unknown = device is not None and unknown_device(device)
    if unknown:
        raise click.BadParameter(unknown, param_hint="'--device'")


def _evaluate_on_tinygrad(graph, inputs: dict, device: str | None, simplify: str) -> dict:
    from ...interop.tinygrad import close_compile_workers, evaluate_on_tinygrad
    try:
        return evaluate_on_tinygrad(graph, inputs, device, simplify=simplify)
    finally:
        close_compile_workers()  # the CLI leaves with os._exit, which would strand them


# ----------------------------------------------------------------------------- check

@_command("check", short="Compare gradients with finite differences (exit 1 on failure).", example="""\
  uopgrad check model.uop --wrt w1,w2 -i model.npz
  uopgrad check model.uop --wrt x -i x=x.npy --samples 50 --seed 3 --json
  uopgrad check model.uop --against grad.uop -i model.npz
  uopgrad check model.uop --against hvp.uop -i model.npz""")
@click.argument("source", metavar="IN")
@click.option("--wrt", metavar="NAMES", help="Inputs whose gradients are checked (required but with --against).")
@click.option("--of", "of_", metavar="NAMES", help="Outputs to differentiate (default: the only one).")
@click.option("-i", "--input", "specs", multiple=True, metavar="NAME=VALUE", callback=_check_specs,
              help="An input's value (as for eval; a bare data.npz gives every input its member); inputs not "
                   "given are seeded random values, except what the file says is a buffer or a statistic.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random inputs, "
              "cotangents, directions and sampled elements.")
@click.option("--samples", type=click.IntRange(min=0), default=None,
              help="Elements compared one by one per target, at most [default: 16 while they cost little; on a "
                   "large model fewer, as the report says].")
@click.option("--directions", type=click.IntRange(min=0), default=2, show_default=True,
              help="Random directions through every target at once, two evaluations each.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (an error too: {\"passed\": false, \"error\": ...}).")
@click.option("--literal", is_flag=True, help="Evaluate the gradient graph (or --against FILE) as written (not "
              "simplified as eval does).")
@click.option("--transpose", is_flag=True, help="Forward mode: <u, J v> from jvp against <J^T u, v> from diff.")
@click.option("--hvp", is_flag=True, help="Forward mode: hvp against finite differences of the gradient "
              "(not with --transpose: one check a run).")
@click.option("--against", metavar="FILE", help="Check FILE, a diff, jvp, hvp, jacobian or hessian file written from "
              "IN, against finite differences of IN (its meta says what it is, of what, along what).")
def check(source, wrt, of_, specs, seed, samples, directions, as_json, literal, transpose, hvp, against):
    """Differentiate IN, evaluate the gradients in float64 and compare them with central
    finite differences: along --directions random directions through every target at once
    (<grad, v> against (L(x+hv) - L(x-hv))/2h), and on up to --samples elements per target.

    Non-scalar outputs are weighted by seeded random cotangents; DETACH values are held
    fixed (gradients do not flow through them). The step is h = eps^(1/3)·max(1,|x|) in
    float64. An element fails when |analytic - numeric| > 1e-6*max(1,|L|) +
    1e-4*max(|analytic|,|numeric|), a direction when it is off by more than 1e-9*max(1,|L|) +
    1e-6*max(...); a target whose gradient is too small beside |L| for its elements to show
    an error is also compared along a direction of its own. A forward value that is not finite is reported first, and a gradient that
    is not finite names the node that made it. Exit status 1 when anything fails.

    Where the differences are rounding noise, or every element and direction
    is at a kink (a MAX, comparison, TRUNC or cast to an integer choosing
    differently on either side), the verdict is "not checked ... choose
    another point", exit status 1.

    --hvp and --transpose check forward mode's rules; --against FILE checks a file that diff,
    jvp, hvp, jacobian or hessian wrote from IN against finite differences of IN (--wrt and
    --of from FILE's meta): a gradient file's grad_<x> along a random direction, then up to
    4 elements of each input one at a time (naming a wrong one), and the outputs it kept
    with --keep-forward. A diff of a diff file is checked against that file (its IN). None
    of them says ok having compared nothing (a kink, differences too noisy, every term 0):
    "not checked ... choose another point", exit status 1.
    """
    from ...tools.check import check_gradients, planned_evaluations
    from ...tools.index_range import check_index_values
    from ...tools.values import gather_inputs
    if samples == 0 and directions == 0:
        raise click.UsageError("--samples 0 and --directions 0 compare nothing: give one of them more")
    ignored = [f"--{name}" for name in ("samples", "directions", "literal") if _given(name)
               and not (against and name == "literal")]  # --against runs FILE as eval does, or as written
    mode = "--hvp" if hvp else "--transpose" if transpose else "--against" if against else None
    if ignored and mode:  # they shape the finite-difference check of the gradient
        raise click.UsageError(f"{' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} for check's "
                               f"gradient comparison, not {mode}")
    modes = [flag for flag, given in (("--hvp", hvp), ("--transpose", transpose), ("--against", against)) if given]
    if len(modes) > 1:  # reports of different kinds: one check a run
        raise click.UsageError(f"give one of {' and '.join(modes)}: each is a check of its own (run check twice)")
    if against:
        return _check_against(source, against, wrt, of_, specs, seed, as_json, literal)
    if wrt is None:
        raise click.UsageError("Missing option '--wrt' (only --against FILE takes it from FILE's meta).")
    wrt_names, of_names = _names(wrt, "--wrt"), _names(of_, "--of")
    graph, _ = _read_graph(source, specs=specs, wrt=wrt_names)
    _explain_inputs(source, graph, specs, True)
    given = gather_inputs(graph.inputs, specs, seed, defaults=_onnx_weights(), roots=graph.outputs.values())
    check_index_values(graph, given)  # before any mode: --hvp and --transpose evaluate these values too
    if transpose or hvp:  # forward mode's checks (tools/forward_check.py)
        from .forward import forward_check
        return forward_check(graph, wrt_names, of_names or None, given, seed, as_json, hvp)
    total = planned_evaluations(graph, wrt_names, samples, directions, of_names or None)
    with _progress_bar(total, "finite differences") as bar:
        report = check_gradients(graph, wrt_names, of_names or None, given, seed, samples, progress=bar.update,
                                 simplify="exact" if literal else "tinygrad", directions=directions)
    if as_json:
        import json
        click.echo(json.dumps(report.to_dict()))
    else:
        click.echo("\n".join(report.lines()))
    return 0 if report.passed else EXIT_FAILURE


def _check_against(source, against, wrt, of_, specs, seed, as_json, literal: bool) -> int:
    """`check IN --against FILE` (tools/file_check.py): FILE's meta says what to compare;
    --wrt and --of, when given, must say the same."""
    from ...tools.file_check import check_file, written_as
    from ...tools.index_range import check_index_values
    from ...tools.values import gather_inputs
    model, _ = _read_graph(source, specs=specs)
    written, _ = _read_graph(against, remember=False)
    click.get_current_context().meta["uopgrad.file"] = against  # what is refused from here on is FILE
    kind, of, along = written_as(written, against, model)
    for option, text, said in (("--wrt", wrt, along), ("--of", of_, of)):
        if text is not None and _names(text, option) != said:
            raise click.UsageError(f"{option} {text} is not what {against} is of: its meta says "
                                   f"{kind}_{option[2:]}={','.join(said)}")
    _explain_inputs(source, model, specs, True)
    given = gather_inputs(written.inputs, specs, seed, defaults=_onnx_weights(), roots=model.outputs.values())
    check_index_values(model, {k: v for k, v in given.items() if k in model.input_names})
    report = check_file(model, written, given, seed, file=against, simplify="exact" if literal else "tinygrad")
    if as_json:
        import json
        click.echo(json.dumps(report.to_dict()))
    else:
        click.echo("\n".join(report.lines()))
    return 0 if report.passed else EXIT_FAILURE
