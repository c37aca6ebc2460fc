"""One graph over a data set: the data set is a list of shards, .npz files whose members are
inputs of the graph with the graph's own shapes and dtypes (its batch shape); the other
inputs (the weights) are fixed, the same for every shard.

    paths = shard_paths("shards/*.npz")
    report = map_graph(graph, paths, fixed={"w": w}, reduce="sum")            # in this process
    report = map_graph(graph, paths, fixed={"w": w}, dask="local:2")          # on a Dask cluster
    report.outputs   -> {output name: the sum over the shards}

The unit of work is a shard: one task runs the whole graph on one worker (a task per op
would cost more in scheduling than the arithmetic). What every task needs besides its file,
the graph and the fixed inputs, is one `Work` object, sent to each worker once.

- `reduce="sum"` adds the shards' outputs in a binary tree whose shape depends only on the
  number of shards (SumTree): the result never depends on which shard finished first, and
  the sequential run and a cluster's give the same bits. "mean" divides that sum by the
  number of shards; "none" writes one .npz per shard into a directory, named after it.
- Every shard's member headers are checked before any shard runs (check_shards): a wrong
  member is one line naming the shard and the member, and nothing runs or is written.
- A label outside the classes the graph compares it with (index_range.py) is refused: in a
  fixed input before any shard runs, in a shard's member as the shard is read (one line
  naming the shard and the member; the run stops and writes nothing).
- Outputs are all-or-nothing: a directory of per-shard files is built beside its target
  and renamed into place at the end (StagedDirectory).
- Each shard runs its BLAS calls (the matrix products) on one thread, here and on every
  worker: OpenBLAS splits a product's sum differently for another thread count, which
  changes the last bits (a weight gradient sums over the batch). The parallelism is the
  shards'. The same bits hold between machines with the same BLAS and kind of CPU.
- Dask is imported only for `dask=...` (map_dask.py); this module needs numpy and
  threadpoolctl.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..errors import EvaluationError
from ..core.graph import Graph
from ..core.uop import UOp
from .values import not_finite, npz_bytes, npz_headers, read_archive, stored_elements, type_text

REDUCTIONS = ("sum", "mean", "none")


class MapError(EvaluationError):
    """A run over shards failed for something other than the graph (a shard, the cluster):
    one line that names what failed."""


class ShardError(MapError):
    """A shard that does not fit the graph: one line naming the shard (and the member)."""


# ----------------------------------------------------------------------------- the shards

def shard_paths(pattern: str) -> list[str]:
    """The files `pattern` (a glob: `shards/*.npz`) matches, sorted by path: the shards'
    order, which fixes the order of the sums."""
    paths = sorted(p for p in glob.glob(pattern) if not os.path.isdir(p))
    if not paths:
        raise ShardError(f"shard_paths({pattern!r}) matches no file", cli=f"--map {pattern!r} matches no file")
    return paths


def read_members(path: str) -> dict[str, tuple[tuple[int, ...], object]]:
    """{member: (shape, dtype)} of the shard at `path`, from its members' headers alone
    (values.npz_headers): checking a large data set reads almost none of it."""
    try:
        return npz_headers(path)
    except EvaluationError as e:
        raise ShardError(str(e)) from None


def check_shards(graph: Graph, paths: Sequence[str], fixed_names: Sequence[str] = ()) -> list[str]:
    """The names of the inputs the shards give (every shard the same ones), once every
    shard's headers fit the graph: each member names an input not among `fixed_names`, with
    its shape and dtype; ShardError naming the first shard and member that does not."""
    nodes = {node.arg: node for node in graph.inputs}
    fixed = set(fixed_names)
    members = {path: read_members(path) for path in paths}
    for path, headers in members.items():
        for name, (shape, dtype) in headers.items():
            _check_member(path, name, shape, dtype, nodes, fixed)
    given = [name for name in nodes if any(name in headers for headers in members.values())]
    for path, headers in members.items():
        for name in given:
            if name not in headers:
                having = next(p for p, h in members.items() if name in h)
                raise ShardError(f"{path}: no member {name!r} (input {type_text(nodes[name])}); {having} has one, "
                                 f"and every shard must give the same inputs")
    return given


def _check_member(path: str, name: str, shape: tuple, dtype, nodes: Mapping[str, UOp], fixed: set) -> None:
    node = nodes.get(name)
    if node is None:
        raise ShardError(f"{path}: member {name!r} names no input; inputs: {', '.join(nodes) or 'none'}")
    if name in fixed:
        head = f"{path}: member {name!r} is an input given once for every shard"
        raise ShardError(f"{head} (fixed=): give it in one place", cli=f"{head} (-i): give it in one place")
    native = dtype.newbyteorder("=") if not dtype.isnative else dtype
    if shape != node.shape or native != node.dtype.np:
        short = (native == node.dtype.np and len(shape) == len(node.shape) > 0 and shape[0] < node.shape[0]
                 and shape[1:] == node.shape[1:])
        hint = (f": every shard must hold the graph's {node.shape[0]} rows; run a shorter one on its own, with a "
                f"graph of its size (an ONNX model with a symbolic batch takes it from `-i {path}`)" if short else "")
        raise ShardError(f"{path}: member {name!r} is {dtype.name}[{','.join(map(str, shape))}] but input "
                         f"{name!r} is {type_text(node)}{hint}")


def output_names(paths: Sequence[str]) -> list[str]:
    """The per-shard files' names (reduce="none"): each shard's own file name, which must
    differ between shards."""
    seen: dict[str, str] = {}
    for path in paths:
        base = os.path.basename(path)
        if base in seen:
            head = f"{seen[base]} and {path} would both be written as {base}:"
            raise ShardError(f"{head} reduce='none' names each output after its shard",
                             cli=f"{head} --reduce none names each output after its shard")
        seen[base] = path
    return list(seen)


# ----------------------------------------------------------------------------- one shard

class Work:
    """What every shard's task needs besides its file: the (already simplified) graph as
    .uop bytes, the fixed inputs, the reader limits. One object, sent to each worker once;
    the graph is parsed and compiled on first use in each process and kept on the object
    (not pickled): the shards of a worker, in all its threads, run one compiled program."""

    def __init__(self, graph: Graph, fixed: Mapping, shard_inputs: Sequence[str], limits=None,
                 index_limits: Mapping | None = None):
        from ..formats.uop import dumps
        self.graph_bytes = dumps(graph)
        self.fixed = dict(fixed)
        self.shard_inputs = list(shard_inputs)
        self.limits = limits
        self.index_limits = dict(index_limits or {})  # {shard input: its IndexLimits}: its values' ranges
        self._graph: Graph | None = None
        self._program = None  # the graph's CompiledGraph, in this process

    def __getstate__(self):
        return {**self.__dict__, "_graph": None, "_program": None}

    @staticmethod
    def one_blas_thread():
        """A context in which BLAS runs on one thread (threadpoolctl)."""
        return _blas_controller().limit(limits=1, user_api="blas")

    def graph(self) -> Graph:
        if self._graph is None:
            from ..formats.uop import loads
            self._graph = loads(self.graph_bytes, limits=self.limits, name="<the mapped graph>")
        return self._graph

    def program(self):
        """The graph compiled once per process (simplified once already, by map_graph); two
        threads starting at once may both compile it, and one program is kept."""
        if self._program is None:
            from ..backends.numpy import compile_graph
            self._program = compile_graph(self.graph(), simplify=None)
        return self._program


_BLAS: list = []  # this process's threadpoolctl controller, made on first use


def _blas_controller():
    """One ThreadpoolController per process: making one finds the loaded BLAS libraries
    (about 80 ms here), which a Work made per run paid again on each worker's first shard."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController
        _BLAS.append(ThreadpoolController())
    return _BLAS[0]


@dataclass
class ShardStats:
    """Where and when one shard ran: `started` and `ended` are wall-clock times (time.time())
    on the worker; `prepare_seconds` is parsing the graph, on a worker's first shard only."""
    shard: str
    worker: str
    thread: int
    started: float
    ended: float
    read_seconds: float
    eval_seconds: float
    prepare_seconds: float = 0.0
    cpu_seconds: float = 0.0  # this thread's CPU time reading and evaluating: below the wall time, others ran
    not_finite: tuple = ()    # the outputs holding a nan or an infinity (a sum over the shards then does too)


@dataclass
class ShardResult:
    """A shard's outputs (or a sum of several shards'), with the stats of those shards."""
    outputs: dict
    stats: list = field(default_factory=list)
    narrow: dict = field(default_factory=dict)  # {output: its float16 dtype} where `outputs` holds float64 sums


def run_shard(work: Work, path: str) -> ShardResult:
    """Evaluate the graph on one shard's inputs and the fixed ones (the task of a worker)."""
    started, clock = time.time(), time.perf_counter()
    prepared = work._program is not None
    graph = work.graph()
    try:
        program = work.program()
        parsed, cpu_parsed = time.perf_counter(), time.thread_time()
        nodes = {node.arg: node for node in graph.inputs if node.arg in work.shard_inputs}
        given = read_archive(path, nodes)
        _check_indices(work.index_limits, given, path)
        inputs = {**work.fixed, **given}
        read = time.perf_counter()
        with work.one_blas_thread():
            outputs = _flat(program(inputs))
    except EvaluationError as e:
        message = str(e)
        raise ShardError(message if message.startswith(path) else f"{path}: {message}") from None
    done = time.perf_counter()
    stats = ShardStats(path, f"{socket.gethostname()}:{os.getpid()}", threading.get_ident(), started, time.time(),
                       read - parsed, done - read, 0.0 if prepared else parsed - clock, time.thread_time() - cpu_parsed,
                       not_finite(outputs))
    return ShardResult(outputs, [stats])


def _check_indices(limits: Mapping, given: Mapping, path: str) -> None:
    """ShardError naming the shard and member when a member holds a label outside its range."""
    from .index_range import first_refusal
    refusal = first_refusal(limits, given, "member")
    if refusal is not None:
        raise ShardError(f"{path}: {refusal}")


def _flat(results: dict) -> dict:
    """One array per name, as `eval -o` stores them (values.stored_elements); a NOOP element
    (None) is left out."""
    return {key: v for key, v in stored_elements(results).items() if v is not None}


def _check_stored_names(graph: Graph) -> None:
    """EvaluationError, before any shard runs, when two outputs would be stored under one name."""
    from ..backends.numpy.compiler import _output_roots
    layouts = {name: _output_roots(node)[1] for name, node in graph.outputs.items()}
    stored_elements({name: tuple(layout) if isinstance(layout, tuple) else None for name, layout in layouts.items()})


def add_results(left: ShardResult, right: ShardResult) -> ShardResult:
    """Each output of `left` plus the same output of `right`, in the sum's dtype (_summed):
    integers wrap, as the graph's own ADD does; bools count; float16 adds in float64."""
    import numpy as np
    with np.errstate(all="ignore"):  # an overflow is the sum's value: the not-finite note names the shards
        outputs = {name: np.add(_summed(value), _summed(right.outputs[name])) for name, value in left.outputs.items()}
    narrow = {**left.narrow, **right.narrow, **_narrow_dtypes(left.outputs), **_narrow_dtypes(right.outputs)}
    return ShardResult(outputs, left.stats + right.stats, narrow)


# How an output's dtype adds over the shards, by its numpy kind and size: the others add in their dtype.
#   bool          counts, in int64 (numpy's np.sum and torch.sum of bools; numpy's bool `+` is OR)
#   float16       adds in float64 and is rounded once to float16 at the end (finish): five shards of
#                 30000 have the mean 30000, not inf; the exact sum of float16s fits float64's 53 bits
def _summed(value):
    import numpy as np
    if value.dtype == np.bool_:
        return value.astype(np.int64)
    if _widened(value.dtype):
        return value.astype(np.float64)
    return value


def _widened(dtype) -> bool:
    """Whether _summed adds this float dtype in float64 (float16)."""
    return dtype.kind == "f" and dtype.itemsize < 4


def _narrow_dtypes(outputs: Mapping) -> dict:
    """{name: dtype} of the outputs _summed widens to float64, to round back to at the end."""
    return {name: value.dtype for name, value in outputs.items() if _widened(value.dtype)}


def _narrow_of(total: ShardResult) -> dict:
    """{name: dtype} to round `total`'s widened sums back to: those it holds, and those its
    additions recorded."""
    return {**_narrow_dtypes(total.outputs), **total.narrow}


def mean_of(total: ShardResult, count: int) -> dict:
    """The sum divided by the number of shards, in each output's floating dtype (a float16
    output: divided in float64, then rounded once)."""
    import numpy as np
    narrow = _narrow_of(total)
    means = {}
    for name, value in total.outputs.items():
        if value.dtype.kind not in "fc":
            _not_a_mean(name, value.dtype.name)
        value = _summed(value)
        means[name] = np.asarray(np.divide(value, np.asarray(count, value.dtype)), narrow.get(name, value.dtype))
    return means


def _not_a_mean(name: str, dtype: str):
    why = f"output {name!r} is {dtype}, and a mean of whole numbers is not one"
    raise EvaluationError(f"reduce='mean': {why}: use reduce='sum'", cli=f"--reduce mean: {why}: use --reduce sum")


# ----------------------------------------------------------------------------- the sum tree

class SumTree:
    """A sum over `count` leaves in a fixed binary tree, fed in any order: leaf i and leaf
    i+1 (i even) are added first, then those sums pairwise, level by level; an odd last node
    of a level is carried up alone. `combine(left, right)` adds two nodes (numbers, arrays,
    or Dask futures). Only nodes waiting for their sibling are held."""

    def __init__(self, count: int, combine: Callable):
        if count < 1:
            raise ValueError("a sum needs at least one leaf")
        self.widths = [count]  # nodes at each level, the root's level last
        while self.widths[-1] > 1:
            self.widths.append((self.widths[-1] + 1) // 2)
        self.combine = combine
        self.waiting: dict[tuple[int, int], object] = {}
        self.root = None

    def add(self, index: int, value) -> None:
        level = 0
        while level < len(self.widths) - 1:
            sibling = index ^ 1
            if sibling < self.widths[level]:
                if (level, sibling) not in self.waiting:
                    self.waiting[(level, index)] = value
                    return
                other = self.waiting.pop((level, sibling))
                value = self.combine(other, value) if sibling < index else self.combine(value, other)
            level, index = level + 1, index // 2
        self.root = value


# ----------------------------------------------------------------------------- the whole run

@dataclass
class MapReport:
    """What map_graph did: the reduced outputs ({name: ndarray}, a 0-d output too; None for
    reduce="none"), each shard's stats, and the times of the steps around the shards (seconds)."""
    outputs: dict | None
    shards: list
    workers: int
    startup_seconds: float  # starting (or reaching) the cluster; 0 in this process
    send_seconds: float     # sending the Work to every worker once
    run_seconds: float      # from the first shard submitted to the last result in
    lost_workers: list = field(default_factory=list)  # cluster workers there at the start, gone at the end

    def lost_workers_note(self) -> str | None:
        """Workers that left the cluster during the run: Dask ran again elsewhere what they
        held (shards, sums), so the result is the same, but the run took longer, and a
        worker that dies again and again is worth a look."""
        if not self.lost_workers:
            return None
        count = len(self.lost_workers)
        return (f"{count} worker{'s' if count != 1 else ''} left the cluster during the run "
                f"({', '.join(self.lost_workers)}): Dask ran the shards and sums {'they' if count != 1 else 'it'} "
                "held again on the others (the result does not depend on where a shard runs)")

    def not_finite_note(self, source: str, shown_as: Mapping[str, str] | None = None) -> str | None:
        """The shards whose outputs hold a nan or an infinity (the sum over the shards then
        does too, with no word of where it came from), in path order, and how to trace the
        first to the node that made it (`source`: IN as given; `shown_as`: a shard's path as
        the user gave it, by the path map_graph ran it as)."""
        shown_as = shown_as or {}
        bad = sorted((shown_as.get(s.shard, s.shard), s.not_finite) for s in self.shards if s.not_finite)
        if not bad:
            return None
        shown = "; ".join(f"{shard} ({', '.join(names)})" for shard, names in bad[:5])
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        return (f"{len(bad)} of {len(self.shards)} shard{'s' if len(self.shards) != 1 else ''} gave nan or inf: "
                f"{shown}{more}: `uopgrad eval {source} -i {bad[0][0]} --debug-nans` (with the same -i) names the "
                "node that made it")

    def overflow_note(self) -> str | None:
        """The reduced outputs holding a nan or an infinity that no shard's own output holds:
        the sum over the shards overflowed its dtype (which the shards' note cannot say)."""
        if self.outputs is None:
            return None
        from_shards = {name for s in self.shards for name in s.not_finite}
        made = [name for name in not_finite(self.outputs) if name not in from_shards]
        if not made:
            return None
        listed = ", ".join(f"{name} ({self.outputs[name].dtype.name})" for name in made)
        return (f"the sum over the shards overflowed to inf (or nan) in {listed}, though every shard's value is "
                "finite")

    def scheduling_gaps(self) -> list[float]:
        """Each worker thread's time between one shard's end and its next shard's start (on
        one clock: the worker's own): the overhead of running shards one task each
        (scheduling, moving data, the sum's additions; here, writing a shard's outputs)."""
        by_thread: dict[tuple[str, int], list[ShardStats]] = {}
        for stats in self.shards:
            by_thread.setdefault((stats.worker, stats.thread), []).append(stats)
        gaps = []
        for runs in by_thread.values():
            runs.sort(key=lambda s: s.started)
            gaps += [max(0.0, b.started - a.ended) for a, b in zip(runs, runs[1:])]
        return gaps

    def stats_dict(self, shown_as: Mapping[str, str] | None = None) -> dict:
        """--stats --json: what lines() prints, as JSON values (seconds; a shard's path as
        the user gave it, by `shown_as`, else as it ran)."""
        from dataclasses import asdict
        shown_as = shown_as or {}
        shards = [{**asdict(s), "shard": shown_as.get(s.shard, s.shard), "not_finite": list(s.not_finite)}
                  for s in sorted(self.shards, key=lambda s: s.shard)]
        gaps = self.scheduling_gaps()
        return {"shards": shards, "workers": self.workers, "startup_seconds": self.startup_seconds,
                "send_seconds": self.send_seconds, "run_seconds": self.run_seconds,
                "overhead_seconds_per_shard": sum(gaps) / len(gaps) if gaps else None,
                "lost_workers": list(self.lost_workers)}

    def lines(self) -> list[str]:
        """--stats: a line per shard, then the totals and the overhead per shard."""
        width = max(len(os.path.basename(s.shard)) for s in self.shards)
        lines = [f"{'shard':<{width}}  {'read':>9}  {'eval':>9}  {'CPU':>9}  worker"]
        for s in sorted(self.shards, key=lambda s: s.shard):
            prepare = f" (+{s.prepare_seconds:.3f} s parsing the graph)" if s.prepare_seconds else ""
            lines.append(f"{os.path.basename(s.shard):<{width}}  {s.read_seconds:7.3f} s  {s.eval_seconds:7.3f} s  "
                         f"{s.cpu_seconds:7.3f} s  {s.worker}{prepare}")
        task = sum(s.read_seconds + s.eval_seconds + s.prepare_seconds for s in self.shards) / len(self.shards)
        gaps = self.scheduling_gaps()
        lines.append(f"{len(self.shards)} shards on {self.workers} worker{'s' if self.workers != 1 else ''}: "
                     f"start-up {self.startup_seconds:.3f} s, sending the graph and fixed inputs "
                     f"{self.send_seconds:.3f} s, run {self.run_seconds:.3f} s, mean shard {task:.3f} s")
        if gaps:
            gap = sum(gaps) / len(gaps)
            lines.append(f"overhead per shard: {gap * 1e3:.2f} ms ({100 * gap / task:.1f}% of a shard's time), the mean "
                         f"gap between a shard's end and the next one's start on a worker ({len(gaps)} gaps: "
                         f"scheduling, moving, adding or writing outputs)")
        return lines


def map_graph(graph: Graph, paths: Sequence[str], fixed: Mapping | None = None, *, reduce: str = "sum",
              out_dir: str | None = None, dask=None, simplify: str | None = "tinygrad", limits=None,
              progress: Callable[[int], None] | None = None, shard_inputs: Sequence[str] | None = None,
              check_indices: bool = True) -> MapReport:
    """Evaluate `graph` on every shard in `paths` with the `fixed` inputs; reduce the
    outputs ("sum", "mean") or write each shard's into `out_dir` ("none", all or nothing).
    `dask`: None runs the shards here, one after another; "local" or "local:N" starts a
    local cluster of N worker processes for the run; any other text is a scheduler's
    address (tcp://host:8786); a distributed.Client is used as it is. `simplify` as for
    evaluate_graph (done once, here). `progress(1)` is called as each shard finishes.
    `shard_inputs`: what check_shards returned, if the caller has run it (else it runs here).
    `check_indices`: refuse a fixed input's or a shard's label outside the classes the graph
    compares it with (index_range.check_index_values; evaluate_graph itself checks nothing)."""
    if reduce not in REDUCTIONS:
        raise EvaluationError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    if (reduce == "none") != (out_dir is not None):
        raise EvaluationError("reduce='none' writes the shards' outputs into out_dir: give both or neither")
    fixed = _by_name(graph, fixed or {})
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)  # one path, not its letters
    if not paths:
        raise ShardError("no shards: paths is empty (shard_paths(pattern) lists a data set's)")
    if shard_inputs is None:
        shard_inputs = check_shards(graph, paths, list(fixed))
    if reduce == "none":
        output_names(paths)
    absolute = [os.path.abspath(p) for p in paths]  # as the workers, started elsewhere, find them
    given = dict(zip(absolute, map(str, paths)))  # a shard as its refusals name it: as the user did
    paths = absolute
    _check_fixed(graph, fixed, shard_inputs)
    _check_stored_names(graph)
    ranged = {}
    if check_indices:  # on the graph as given: simplifying may fold the comparisons it looks for
        from .index_range import check_index_values, index_limits
        check_index_values(graph, fixed)
        ranged = {name: limit for name, limit in index_limits(graph).items() if name in shard_inputs}
    if reduce == "mean":  # refused before the shards run (mean_of checks tuple elements after)
        for name, node in graph.outputs.items():
            if node.dtype.is_int or node.dtype.is_bool:
                _not_a_mean(name, node.dtype.name)
    if simplify is not None:
        from ..backends.numpy.compiled import simplified
        graph = simplified(graph, simplify)
    work = Work(graph, fixed, shard_inputs, limits, index_limits=ranged)
    staged = StagedDirectory(out_dir, keep=paths) if out_dir is not None else None
    sink = staged.write if staged is not None else None
    try:
        if dask is None:
            report = _run_here(work, paths, reduce, sink, progress or _ignore)
        else:
            from .map_dask import run_on_dask
            report = run_on_dask(work, paths, reduce, sink, progress or _ignore, dask)
        if staged is not None:
            staged.commit()
    except ShardError as e:
        raise ShardError(_as_given(str(e), given), cli=_as_given(e.cli_message, given)) from None
    finally:
        if staged is not None:
            staged.discard()
    return report


def _as_given(message: str, given: Mapping[str, str]) -> str:
    """`message` with each shard's absolute path written as the shard was given."""
    for absolute, shown in given.items():
        if absolute != shown:
            message = message.replace(absolute, shown)
    return message


def _by_name(graph: Graph, fixed: Mapping) -> dict:
    """`fixed` keyed by input name: a key may be the input's PARAM node, as evaluate_graph's."""
    inputs = set(graph.inputs)
    named = {}
    for key, value in fixed.items():
        if isinstance(key, UOp):
            if key not in inputs:
                raise EvaluationError(f"fixed input {key} is not an input of the graph; inputs: "
                                      f"{', '.join(node.arg for node in graph.inputs) or 'none'}")
            key = key.arg
        named[key] = value
    return named


def _check_fixed(graph: Graph, fixed: Mapping, shard_inputs: Sequence[str]) -> None:
    """Every input is given by the shards or by `fixed`, and `fixed` fits the graph."""
    from .values import check_value
    nodes = {node.arg: node for node in graph.inputs}
    for name, array in fixed.items():
        if name not in nodes:
            raise EvaluationError(f"fixed input {name!r} names no input; inputs: {', '.join(nodes) or 'none'}")
        check_value(name, nodes[name], array)
    missing = [node for name, node in nodes.items() if name not in fixed and name not in shard_inputs]
    if missing:
        listed = ", ".join(f"{n.arg} {type_text(n)}" for n in missing)
        head = f"missing input value{'s' if len(missing) > 1 else ''}: {listed} (neither a member of the shards nor"
        raise EvaluationError(f"{head} in fixed=)", cli=f"{head} given with -i)")


def _ignore(_: int) -> None:
    pass


def _run_here(work: Work, paths: Sequence[str], reduce: str, sink, progress) -> MapReport:
    """The shards one after another in this process, reduced by the same tree as on a cluster."""
    tree = SumTree(len(paths), add_results) if reduce != "none" else None
    shards = []
    start = time.perf_counter()
    for index, path in enumerate(paths):
        result = run_shard(work, path)
        shards += result.stats
        if tree is not None:
            tree.add(index, result)
        else:
            sink(path, result.outputs)
        progress(1)
    run = time.perf_counter() - start
    return MapReport(finish(tree.root, reduce, len(paths)) if tree else None, shards, 1, 0.0, 0.0, run)


def finish(total: ShardResult, reduce: str, count: int) -> dict:
    """The reduced outputs: ndarrays (a 0-d one too: numpy's arithmetic gives scalars), in
    the outputs' dtypes (a float16 sum rounded once from float64; a count of bools int64)."""
    import numpy as np
    if reduce == "mean":
        return mean_of(total, count)
    narrow = _narrow_of(total)
    with np.errstate(over="ignore"):  # a float16 sum past 65504 is inf, as numpy's
        return {name: np.asarray(_summed(v), narrow.get(name)) for name, v in total.outputs.items()}


# ----------------------------------------------------------------------------- a directory, all or nothing

class StagedDirectory:
    """The directory `target` built beside itself (`.NAME.<pid>.<random>.tmp`) and renamed
    into place by commit(); discard() removes what commit() did not place (an error, ^C,
    SIGTERM: no partial `target`). An existing `target` is replaced only if it holds
    nothing but regular .npz files (an earlier run's outputs): never a directory of other
    files, nor a sub-directory or link named like an .npz (its contents would go with it),
    nor one that holds a file of `keep` (the shards the run reads). Every refusal is a
    MapError naming `target`, raised before any shard runs."""

    def __init__(self, target: str, keep: Sequence[str] = ()):
        self.target = os.path.abspath(target)
        root = os.path.join(os.path.realpath(self.target), "")
        inside = next((path for path in keep if os.path.realpath(path).startswith(root)), None)
        if inside is not None:
            raise MapError(f"{target}: holds the shard {inside}: replacing the directory would lose the data "
                           f"set; write the outputs to a directory of their own")
        if os.path.lexists(self.target):
            _check_replaceable(target, self.target)
        from ..formats.atomic import temporary_beside
        self.temp = temporary_beside(self.target, reserve=len(".old"))  # commit's self.temp + ".old" fits too
        try:
            os.mkdir(self.temp)
        except OSError as e:  # the parent is missing, a file, read-only: say OUT, not the hidden name
            raise MapError(f"{target}: cannot write: {e.strerror}") from None
        self.old: str | None = None

    def write(self, shard: str, arrays: Mapping) -> None:
        from ..formats.atomic import write_atomically
        write_atomically(os.path.join(self.temp, os.path.basename(shard)), npz_bytes(arrays))

    def commit(self) -> None:
        from ..formats.atomic import _stop_signals_held
        with _stop_signals_held():  # both renames or, for a stop before them, neither
            if os.path.isdir(self.target):
                self.old = self.temp + ".old"
                os.rename(self.target, self.old)
            os.rename(self.temp, self.target)
            self.temp = None

    def discard(self) -> None:
        for leftover in (self.temp, self.old):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
        self.temp = self.old = None


def _check_replaceable(shown: str, target: str) -> None:
    """MapError unless `target` is a real directory (not a link to one) holding only
    regular files named *.npz: what an earlier --reduce none wrote, and nothing else."""
    import stat
    if os.path.islink(target):
        raise MapError(f"{shown}: is a symbolic link: --reduce none replaces the directory itself; give -o the "
                       f"directory it points to ({os.path.realpath(target)})")
    if not os.path.isdir(target):
        raise MapError(f"{shown}: exists and is not a directory: --reduce none writes a directory of .npz files "
                       f"there")
    with os.scandir(target) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            regular = stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)
            if not (regular and entry.name.endswith(".npz")):
                kind = "" if regular else f" ({_kind(entry)})"
                raise MapError(f"{shown}: holds {entry.name!r}{kind}, which this run did not write: refusing to "
                               f"replace a directory that holds anything but .npz files")


def _kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return "a symbolic link"
    return "a directory" if entry.is_dir() else "not a regular file"
