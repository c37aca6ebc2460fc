"""`uopgrad eval IN --map 'shards/*.npz'`: the graph over a data set's shards, reduced or one
file per shard, in this process or on a Dask cluster (`--dask`). A thin layer over
uopcli.tools.map; dask is imported only for --dask (uopcli.tools.map_dask)."""

from __future__ import annotations

import contextlib
import os

import click

from ..app import CommandFailed, _flag, _given
from ..io import (_explain_inputs, _note, _onnx_weights, _progress_bar, _read_graph, _reading, _refuse_binary_terminal,
                  _refuse_directory_read, _refuse_other_than_npz, _refuse_writing_read, _write)
from ..output import _table, _value_json


def map_options(fn):
    """--map, --reduce and --dask, for `eval`."""
    fn = click.option("--dask", "dask_target", metavar="ADDRESS|local[:N]",
                      help="With --map: run the shards on a Dask cluster: local:N starts N worker processes here "
                           "for the run; tcp://HOST:8786 uses a running scheduler (`dask scheduler`, "
                           "`dask worker`). The extra uopgrad[dask].")(fn)
    fn = click.option("--reduce", "reduction", type=click.Choice(["sum", "mean", "none"]), default=None,
                      help="With --map: add each output over the shards (sum, the default), divide that by "
                           "their number (mean), or write one .npz per shard into the directory -o OUT, named "
                           "after the shard (none).")(fn)
    fn = click.option("--map", "map_pattern", metavar="'SHARDS/*.npz'",
                      help="Evaluate once per shard: each .npz the pattern matches gives the inputs its members "
                           "name (the graph's shapes and dtypes); -i inputs are the same for every shard. "
                           "--stats then times each shard.")(fn)
    return fn


def refuse_expanded_pattern(ctx, pattern: str, arguments: list) -> None:
    """A usage error when the shell expanded an unquoted --map pattern: --map took the first
    shard, and the others came as arguments (click said "Got unexpected extra arguments", or
    read one as IN). A pattern without * ? [ and .npz arguments (IN's among them) is that."""
    shards = [a for a in arguments if a is not None and a.lower().endswith(".npz")]
    if not shards or any(c in pattern for c in "*?[") or not pattern.lower().endswith(".npz"):
        return
    example = os.path.join(os.path.dirname(pattern), "*.npz")
    raise click.UsageError(f"--map {pattern} and {len(shards)} more .npz argument{'s' if len(shards) > 1 else ''} "
                           f"({shards[0]}{', ...' if len(shards) > 1 else ''}): the shell expanded the pattern; "
                           f"quote it: --map '{example}'", ctx)


def check_map_usage(map_pattern, reduction, dask_target) -> bool:
    """Whether this is a --map run; --reduce and --dask only with --map."""
    if map_pattern is None:
        for value, option in ((reduction, "--reduce"), (dask_target, "--dask")):
            if value is not None:
                raise click.UsageError(f"{option} is for a run over shards: give --map 'SHARDS/*.npz' too")
        return False
    return True


def eval_map(source, specs, use_random, seed, output, as_json, stats, literal, keep_intermediates, backend, device,
             map_pattern, reduction, dask_target):
    """`eval --map`: check every shard, gather the fixed inputs, run, write."""
    reduction = reduction or "sum"
    _check_usage(output, as_json, keep_intermediates, backend, device, reduction, use_random, dask_target)
    from ...tools import map as mapping
    try:
        if dask_target is not None:
            from ...tools.map_dask import require
            require()
        paths = mapping.shard_paths(map_pattern)
        for path in paths:
            _reading(f"the shard {path}", path, "--map")
        _refuse_writing_read(None, {"-o": output})
        # an ONNX model's symbolic sizes: from -i's arrays, else from the first shard's members
        sizing = (*specs, paths[0]) if paths[0].lower().endswith(".npz") else specs
        graph, _ = _read_graph(source, specs=sizing)
        _refuse_shard_members_in_a_bare_npz(specs, paths[0])
        shard_inputs = mapping.check_shards(graph, paths, _named_by(specs))
        if reduction == "none":
            mapping.output_names(paths)
            _refuse_directory_read(output)
    except mapping.MapError as e:  # names its shard and member: no need of IN's name in front
        raise CommandFailed(e.cli_message) from None
    _explain_inputs(source, graph, specs, use_random, [node for node in graph.inputs if node.arg not in shard_inputs])
    fixed = _fixed_inputs(graph, shard_inputs, specs, seed if use_random else None)
    with _progress_bar(len(paths), "shards") as bar, _dask_logs_off(dask_target):
        try:
            report = mapping.map_graph(graph, paths, fixed, reduce=reduction, out_dir=output if reduction == "none"
                                       else None, dask=dask_target, simplify="exact" if literal else "tinygrad",
                                       progress=bar.update, shard_inputs=shard_inputs)
        except mapping.MapError as e:  # a shard, or the cluster
            raise CommandFailed(e.cli_message) from None
    shown_as = {os.path.abspath(path): path for path in paths}
    if stats and not as_json:  # with --json: under "stats" in the document
        click.echo("\n".join(report.lines()), err=True)
    if report.lost_workers:
        _note(report.lost_workers_note())
    not_finite = report.not_finite_note(source, shown_as)
    for note in (not_finite, report.overflow_note()):
        if note:
            _note(note)
    if reduction == "none":
        return
    if output:
        from ...tools.values import npz_bytes
        _write(output, npz_bytes(report.outputs))
    elif as_json:
        import json
        document = {"outputs": {name: _value_json(a) for name, a in report.outputs.items()}}
        if stats:
            document["stats"] = report.stats_dict(shown_as)
        click.echo(json.dumps(document))
    else:
        click.echo(_table(report.outputs))


@contextlib.contextmanager
def _dask_logs_off(dask_target):
    """No log lines of distributed's during a --dask run (--debug keeps them): a lost
    scheduler or ^C had it log tracebacks of 35-140 lines before our one line, which says
    what failed (a task's error, a lost worker or scheduler all reach this process as
    exceptions or in the report)."""
    if dask_target is None or _flag("debug"):
        yield
        return
    import logging
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def _check_usage(output, as_json, keep_intermediates, backend, device, reduction, use_random, dask_target) -> None:
    if dask_target is not None:  # the text itself (local:0): a usage error, before dask is looked for
        from ...tools.map_dask import ClusterError, parse_target
        try:
            parse_target(dask_target)
        except ClusterError as e:
            raise click.UsageError(e.cli_message) from None
    if _given("seed") and not use_random:
        raise click.UsageError("--seed is the seed of --random: give --random too")
    if keep_intermediates:
        raise click.UsageError("--keep-intermediates is for one evaluation, not --map")
    if backend != "numpy" or device is not None:
        raise click.UsageError("--map evaluates with the numpy evaluator: not with --backend tinygrad or --device")
    if reduction == "none":
        if not output or output == "-":
            raise click.UsageError("--reduce none writes one .npz per shard into a directory: give -o DIR")
        if output.lower().endswith(".npz"):  # the directory would be named like a file
            raise click.UsageError(f"--reduce none writes a directory of one .npz per shard, not the file {output}: "
                                   "give -o DIR (or --reduce sum/mean for one OUT.npz)")
        if as_json:
            raise click.UsageError("--reduce none writes files: not --json")
    elif output:
        if as_json:
            raise click.UsageError("give either -o OUT.npz or --json, not both")
        _refuse_binary_terminal(output, "npz", "give -o OUT.npz")
        _refuse_other_than_npz(output)


def _named_by(specs) -> list[str]:
    """The inputs the -i specs give: NAME of NAME=VALUE, every member of a bare data.npz."""
    from ...tools.map import read_members
    from ...tools.values import split_spec
    names = []
    for spec in specs:
        name, value = split_spec(spec)
        names += [name] if name is not None else list(read_members(value))
    return names


def _refuse_shard_members_in_a_bare_npz(specs, shard: str) -> None:
    """A whole `-i data.npz` that also holds what the shards give (the tinygrad bridge's
    mlp.npz: the weights and the batch it was traced with): refused, as check_shards would,
    but saying how to take the other members alone."""
    from ...tools.map import read_members
    from ...tools.values import split_spec
    if not shard.lower().endswith(".npz"):
        return  # refused as no shard elsewhere
    given = set(read_members(shard))
    for spec in specs:
        name, value = split_spec(spec)
        members = list(read_members(value)) if name is None else []
        both = [member for member in members if member in given]
        if both:
            others = " ".join(f"-i {member}={value}" for member in members if member not in given)
            raise CommandFailed(f"-i {value} holds {', '.join(both)}, which the shards give (each shard its own): "
                                f"take the other members alone{': ' + others if others else ''}")


def _fixed_inputs(graph, shard_inputs, specs, random_seed) -> dict:
    """The inputs the shards do not give: -i, an ONNX model's own weights, or --random."""
    from ...tools.values import gather_inputs
    others = [node for node in graph.inputs if node.arg not in shard_inputs]
    return gather_inputs(others, specs, random_seed, defaults=_onnx_weights(), roots=graph.outputs.values())
