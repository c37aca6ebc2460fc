"""uopgrad benchmarks, side by side with tinygrad 0.14.0 and hand-written numpy, in one run.

    make bench                      # everything; writes bench/RESULTS.md
    .venv/bin/python bench/run.py --quick --no-write    # a smoke run of every section

Sections: differentiation (uopcli vs tinygrad compute_gradient, and the whole `uopgrad diff`
process), evaluation (uopcli.evaluate vs numpy by hand), files (load/save vs bare msgpack),
scaling (per-node cost from 10^3 to 10^6 nodes), start-up (`uopgrad info`) and agreement
(the gradients of small models as numbers, against tinygrad's).
Every measurement runs in a fresh process (see worker.py); the targets of issues 2, 3 and 7
are judged at the end, from ratios measured in this run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
UOPGRAD = str(Path(PY).parent / "uopgrad")
RESULTS = HERE / "RESULTS.md"
FINDINGS = HERE / "findings.md"
TINYGRAD_VERSION = "0.14.0"
GIB = 1 << 30
AGREE_RTOL = 1e-4  # float32 gradients from two evaluation orders
_REFERENCE = " (for reference)"  # a scaling row shown beside the targets, not judged


# ----------------------------------------------------------------------------- configuration

@dataclass
class Config:
    diff_sizes: dict[str, list[int]]        # family -> forward node counts
    tinygrad_max: int                       # largest graph handed to tinygrad
    grad_repeats: int
    eval_models: list[tuple[int, int, int]]  # (batch, width, layers)
    eval_repeats: int
    matmul: tuple[int, int, int]            # (n, k, m) for the EXPAND/MUL/REDUCE product
    file_sizes: dict[str, list[int]]
    startup_runs: int
    scaling_sizes: list[int] = field(default_factory=list)
    whole_eval_runs: int = 1                # whole evaluation processes per side (median)
    conv: tuple[int, int, int] = (32, 32, 32)  # (batch, channels, size) of the conv net (no target)
    # family -> repeat count of the small models whose gradients are compared with tinygrad's
    # (about 100 nodes: tinygrad's interpreter backend takes ~100 s at 1,000)
    agree_units: dict[str, int] = field(default_factory=lambda: {"chain": 30, "mlp": 7, "attention": 2})


FULL = Config(
    diff_sizes={"chain": [1_000, 10_000, 100_000, 1_000_000], "mlp": [1_000, 10_000, 100_000],
                "attention": [1_000, 10_000, 100_000]},
    tinygrad_max=1_000_000, grad_repeats=3,
    eval_models=[(256, 1024, 4), (1024, 2048, 4)], eval_repeats=3, matmul=(512, 1024, 1024),
    file_sizes={"chain": [1_000, 10_000, 100_000, 1_000_000], "mlp": [1_000_000]},
    startup_runs=31, scaling_sizes=[1_000, 10_000, 100_000, 1_000_000], whole_eval_runs=7)

QUICK = Config(
    diff_sizes={"chain": [1_000, 10_000], "mlp": [1_000], "attention": [1_000]},
    tinygrad_max=1_000, grad_repeats=1,
    eval_models=[(64, 128, 2)], eval_repeats=1, matmul=(64, 128, 128), conv=(2, 4, 8),
    file_sizes={"chain": [1_000, 10_000]}, startup_runs=5, scaling_sizes=[1_000, 10_000])


# ----------------------------------------------------------------------------- processes

class BenchError(Exception):
    pass


@dataclass
class Child:
    returncode: int
    stdout: bytes
    stderr: bytes
    wall: float        # seconds, start to exit
    cpu: float         # seconds of CPU (user + system): what the process cost, whatever else runs
    peak_rss: int      # bytes, the child's own maximum resident set


def _median_by_wall(results: list[dict]) -> dict:
    return sorted(results, key=lambda r: r["wall"])[len(results) // 2]


def numpy_env() -> dict[str, str]:
    """The environment for numpy measurements: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (set on
    some machines here for old OpenBLAS builds) slow a current numpy; drop both together."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    return env


def run_child(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> Child:
    """Run `cmd` to completion; return its output, wall time and its own peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.0005)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Child(proc.returncode, out.read(), err.read(), wall, usage.ru_utime + usage.ru_stime,
                     usage.ru_maxrss * 1024)


def worker(task: str, env: dict | None = None, **args) -> dict:
    """Run one worker.py task in a fresh process; its JSON result plus wall time and peak RSS."""
    child = run_child([PY, str(HERE / "worker.py"), task, json.dumps(args)], env=env)
    if child.returncode != 0:
        raise BenchError(_last_line(child.stderr) or f"worker {task} exited {child.returncode}")
    result = json.loads(child.stdout.decode().strip().splitlines()[-1])
    result["wall"] = child.wall
    result["peak_rss"] = child.peak_rss
    return result


def _last_line(text: bytes) -> str:
    lines = [ln for ln in text.decode(errors="replace").strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tinygrad_status() -> str | None:
    """None when tinygrad 0.14.0 is importable, else why its rows are skipped."""
    if importlib.util.find_spec("tinygrad") is None:
        return "skipped (tinygrad not installed: pip install -e '.[bench]')"
    from importlib.metadata import version
    found = version("tinygrad")
    return None if found == TINYGRAD_VERSION else f"skipped (tinygrad {found}, need {TINYGRAD_VERSION})"


# ----------------------------------------------------------------------------- formatting

def us(seconds: float, nodes: int) -> str:
    return f"{seconds / nodes * 1e6:.2f}"


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    measured: str
    met: bool | None   # None: not measured in this run

    def row(self) -> list[str]:
        verdict = "not measured" if self.met is None else "**met**" if self.met else "**MISSED**"
        return [self.name, self.measured, verdict]


# ----------------------------------------------------------------------------- sections

class Bench:
    def __init__(self, cfg: Config, quick: bool, workdir: Path):
        self.cfg, self.quick, self.workdir = cfg, quick, workdir
        self.load_at_start = os.getloadavg()[0]
        self.tiny_skip = tinygrad_status()
        self.sections: list[str] = []
        self.targets: list[Target] = []
        self.grad: dict[tuple[str, str, int], dict] = {}    # (lib, family, size) -> result
        self.cli: dict[tuple[str, int], dict] = {}           # (family, size) -> result
        self.speedups: dict[tuple[str, int], tuple] = {}     # (family, size) -> (in process, whole, rounds)
        self.files: dict[tuple[str, int], dict] = {}

    def units(self, family: str, size: int) -> int:
        sys.path.insert(0, str(HERE))
        import graphs
        return graphs.size_for(family, size)

    # ------------------------------------------------------------------ 1. differentiation
    def differentiation(self) -> None:
        rows = []
        for family, sizes in self.cfg.diff_sizes.items():
            for size in sizes:
                rows.append(self._diff_row(family, size))
        self.sections.append(
            "## 1. Differentiation\n\n"
            "`compute_gradient` in process (the same model built with each library's own API; "
            "root seeded with 1, every parameter a target), and the whole `uopgrad diff` process "
            "(start, read, differentiate, write). µs per forward node counts each library's own "
            "nodes. In-process costs are CPU time (user + system) of the call, best of a few runs: "
            "on a shared machine wall time swings with the other processes, CPU time far less; "
            "for `uopgrad diff` both the process's wall and CPU time are shown. *speed-up* is "
            "tinygrad's CPU time over ours on the same model (the stricter of the time ratio and the "
            "per-node ratio); *whole process* compares the whole `uopgrad diff` process with "
            "tinygrad's `compute_gradient` call alone. Where the targets judge the speed-ups (50,000 "
            "nodes and more, below 10⁶), the measurements run in 3 *rounds*, each timing our call, "
            "tinygrad's call and `uopgrad diff` one after another, and a speed-up is the median of the "
            "rounds' ratios: this machine's speed drifts by tens of percent over seconds, so only "
            "runs made close together compare the code rather than the moment. The tinygrad column "
            "is the median of its runs, ours the best.\n\n"
            + table(["graph", "nodes (ours / tinygrad)", "uopcli CPU µs/node", "tinygrad CPU µs/node",
                     "speed-up in process", "`uopgrad diff` µs/node (whole process)", "`uopgrad diff` CPU µs/node",
                     "speed-up whole process",
                     "`uopgrad diff` peak RSS", "rounds"], rows)
            + "\n\n" + self._steps_table())

    def _diff_row(self, family: str, size: int) -> list:
        """Both libraries' compute_gradient and the whole `uopgrad diff`, in rounds (see
        _rounds): each round runs the three in turn, and a speed-up is the median of the
        rounds' ratios, so each ratio compares runs made within seconds of each other."""
        units = self.units(family, size)
        tiny_cell = self.tiny_skip or (f"skipped (> {self.cfg.tinygrad_max:,} nodes: --tinygrad-max)"
                                       if size > self.cfg.tinygrad_max else None)
        graph = self._write_graph(family, size, units)
        rounds = self._rounds(size) if tiny_cell is None else 1
        ours_runs, theirs_runs, cli_runs = [], [], []
        for number in range(rounds):
            progress(f"diff {family} {size}" + (f" (round {number + 1} of {rounds})" if rounds > 1 else ""))
            ours_runs.append(self._try("grad", lib="uopcli", family=family, units=units,
                                       repeats=self._repeats(size, self.cfg.grad_repeats)))
            if tiny_cell is None:
                theirs_runs.append(self._try("grad", lib="tinygrad", family=family, units=units,
                                             repeats=1 if size >= 100_000 else 2))
            cli_runs.append(self._cli_diff(graph, size))
        ours = self.grad[("uopcli", family, size)] = _merged(ours_runs)
        theirs = self.grad[("tinygrad", family, size)] = _merged(theirs_runs) if theirs_runs else None
        cli = self.cli[(family, size)] = min(cli_runs, key=lambda r: r.get("wall", float("inf")))
        speed_in = _median_ratio(theirs_runs, ours_runs)
        speed_cli = _median_ratio(theirs_runs, cli_runs)
        self.speedups[(family, size)] = (speed_in, speed_cli, rounds)
        if tiny_cell is None:
            tiny_cell = _cell(theirs, lambda r: us(r["median_cpu_seconds"], r["nodes"]))
        return [f"{family} {size:,}",
                f"{_count(ours)} / {_count(theirs)}",
                _cell(ours, lambda r: us(r["cpu_seconds"], r["nodes"])), tiny_cell, fmt_ratio(speed_in),
                _cell(cli, lambda r: us(r["wall"], r["nodes"])), _cell(cli, lambda r: us(r["cpu"], r["nodes"])),
                fmt_ratio(speed_cli),
                _cell(cli, lambda r: mib(r["peak_rss"])), rounds]

    def _steps_table(self) -> str:
        """Where each whole `uopgrad diff` process (the best run) spent its CPU time, from
        its --stats, against the budget the 20x target leaves it."""
        rows, smallest = [], 10_000 if self.quick else 100_000
        for (family, size), cli in self.cli.items():
            if size < smallest or "error" in cli:
                continue
            steps = cli["steps_cpu"]
            per_node = lambda seconds: f"{seconds / cli['nodes'] * 1e6:.2f}"
            theirs = self.grad.get(("tinygrad", family, size))
            budget = "–"
            if theirs and "error" not in theirs:
                total = theirs["median_cpu_seconds"]
                budget = per_node(min(total, total / theirs["nodes"] * cli["nodes"]) / 20)
            rows.append([f"{family} {size:,}", per_node(cli["cpu"] - sum(steps.values())),
                         *(per_node(steps[label]) for label in DIFF_STEPS), per_node(cli["cpu"]), budget])
        return ("Where the whole `uopgrad diff` process spends its CPU time (µs per forward node, from "
                "`uopgrad diff --stats` in the best run above): *start-up and exit* is the process's CPU "
                "time less its steps (interpreter, imports, leaving). *20× budget* is what the whole process "
                "may take to be 20× faster than tinygrad's `compute_gradient` on the same model (the "
                "stricter of the time and the per-node ratio, against tinygrad's median run).\n\n"
                + table(["graph", "start-up and exit", *DIFF_STEPS, "whole process", "20× budget"], rows))

    def _rounds(self, size: int) -> int:
        """Rounds of the differentiation measurements: 3 where the speed-ups are judged
        (50,000 nodes and more) and tinygrad takes seconds, not minutes; 1 elsewhere (the
        10^6-node chain: tinygrad alone takes ~3 minutes a run)."""
        return 1 if self.quick or size < 50_000 or size >= 1_000_000 else 3

    def _repeats(self, size: int, quick: int) -> int:
        """Runs per graph of our compute_gradient, load and save: the scaling section
        compares medians, and a median of short runs needs more of them (9 up to 10^4
        nodes, milliseconds each; 3 above). `quick` runs for a --quick smoke run."""
        if self.quick:
            return quick
        return 9 if size <= 10_000 else 3

    @staticmethod
    def _try(task: str, **args) -> dict:
        try:
            return worker(task, **args)
        except BenchError as error:
            return {"error": str(error)}

    def _write_graph(self, family: str, size: int, units: int) -> dict:
        """The family graph as a file for `uopgrad diff`: its path, node count and input names."""
        path = self.workdir / f"{family}_{size}.uop"
        info = self._try("write_graph", family=family, units=units, path=str(path))
        return {**info, "path": path, "out": self.workdir / f"{family}_{size}_grad.uop"}

    def _cli_diff(self, graph: dict, size: int) -> dict:
        """The best (by wall time) of a few whole `uopgrad diff` processes on the graph."""
        if "error" in graph:
            return graph
        try:
            runs = 1 if self.quick or size >= 1_000_000 else 2 if size >= 100_000 else 3
            best = None
            for _ in range(runs):
                child = run_child([UOPGRAD, "diff", str(graph["path"]), "--wrt", ",".join(graph["wrt"]),
                                   "-o", str(graph["out"]), "--quiet", "--stats"])
                if child.returncode != 0:
                    raise BenchError(_last_line(child.stderr) or f"uopgrad diff exited {child.returncode}")
                if best is None or child.wall < best.wall:
                    best = child
            return {"nodes": graph["nodes"], "wall": best.wall, "cpu": best.cpu, "peak_rss": best.peak_rss,
                    "bytes_in": graph["bytes"], "bytes_out": graph["out"].stat().st_size,
                    "steps_cpu": _step_times(best.stderr)}
        except (BenchError, OSError) as error:
            return {"error": str(error)}

    # ------------------------------------------------------------------ 2. evaluation
    def evaluation(self) -> None:
        rows, self.eval_results = [], {}
        env = numpy_env()
        for batch, width, layers in self.cfg.eval_models:
            progress(f"eval mlp batch {batch} width {width} layers {layers}")
            model = dict(batch=batch, width=width, layers=layers)
            try:
                timed = worker("eval_time", env=env, repeats=self.cfg.eval_repeats, **model)
                ours, numpy = self._whole_processes(env, model)
            except BenchError as error:
                rows.append([f"MLP batch {batch}, width {width}, {layers} layers", f"error: {error}",
                             *["–"] * 9])
                continue
            time_ratio = timed["seconds"] / timed["numpy_seconds"]
            wall_ratio = ours["wall"] / numpy["wall"]
            mem_ratio = ours["peak_rss"] / numpy["peak_rss"]
            self.eval_results[(batch, width, layers)] = (time_ratio, wall_ratio, mem_ratio)
            rows.append([f"MLP batch {batch}, width {width}, {layers} layers",
                         f"{timed['seconds'] * 1e3:.0f} ms", f"{timed['numpy_seconds'] * 1e3:.0f} ms",
                         fmt_ratio(time_ratio), f"{ours['wall']:.2f} s", f"{numpy['wall']:.2f} s",
                         fmt_ratio(wall_ratio), mib(ours["peak_rss"]), mib(numpy["peak_rss"]),
                         fmt_ratio(mem_ratio), "yes" if timed["same"] else "NO"])
        matmul_table = self._matmul_table(env)
        conv_table = self._conv_table(env)
        compiled_table = self._compiled_table(env)
        self.sections.append(
            "## 2. Evaluation\n\n"
            "The gradient graph of `sum(relu(...relu(x @ W0 + b0)... @ W3 + b3))` for every weight and "
            "bias (`compute_gradient`), evaluated by `uopcli.evaluate`, against a hand-written numpy "
            "forward and backward of the same model (float32, same inputs; models from "
            "`bench/bench_eval.py`). *evaluate* and *numpy* are the best in-process times, run in turns "
            "in one process; *whole process* is the median of runs from start to exit of each side alone (in turns) "
            "(imports, inputs, for uopcli also building and differentiating the graph, one evaluation), "
            "and peak RSS is that process's. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both.\n\n"
            + table(["model", "uopcli evaluate", "numpy", "ratio", "uopcli whole process",
                     "numpy whole process", "ratio", "uopcli peak RSS", "numpy peak RSS", "ratio", "same result"],
                    rows)
            + "\n\n" + matmul_table + "\n\n" + conv_table + "\n\n" + compiled_table)

    def _whole_processes(self, env: dict, model: dict):
        """Each side's whole process, run in turns `whole_eval_runs` times; the run of median
        wall time of each side (one run alone swings by more than the 10% at stake here: 7
        runs, as 3 still let one slow moment of the shared machine decide)."""
        runs = [(worker("eval_whole", env=env, side="uopcli", **model),
                 worker("eval_whole", env=env, side="numpy", **model)) for _ in range(self.cfg.whole_eval_runs)]
        return tuple(_median_by_wall([pair[side] for pair in runs]) for side in (0, 1))

    def _matmul_table(self, env: dict) -> str:
        n, k, m = self.cfg.matmul
        progress(f"eval matmul {n}x{k} @ {k}x{m}")
        self.matmul_ratio = None
        try:
            result = worker("matmul", env=env, n=n, k=k, m=m, repeats=7)
        except BenchError as error:
            return f"Product {n}×{k} @ {k}×{m} from EXPAND/MUL/REDUCE: error: {error}"
        self.matmul_ratio = result["seconds"] / result["numpy_seconds"]
        return table(["product", "uopcli evaluate", "np.matmul", "ratio", "same result"],
                     [[f"{n}×{k} @ {k}×{m} built as RESHAPE/EXPAND/MUL/REDUCE ADD",
                       f"{result['seconds'] * 1e3:.1f} ms", f"{result['numpy_seconds'] * 1e3:.1f} ms",
                       fmt_ratio(self.matmul_ratio), "yes" if result["same"] else "NO"]])

    def _compiled_table(self, env: dict) -> str:
        """One graph evaluated many times: `compile_graph(graph)` once, then a call per input
        set, against `evaluate_graph`, which compiles on every call (bench_eval.compiled_results)."""
        progress("eval compiled once")
        try:
            result = worker("compiled", env=env, quick=self.quick)
        except BenchError as error:
            return f"Compile once, call many times: error: {error}"
        sys.path.insert(0, str(HERE))
        import bench_eval
        return ("One graph evaluated many times (a loop, a sweep, the shards of `eval --map`): "
                "`program = compile_graph(graph)` once, then `program(inputs)` per call, against "
                "`evaluate_graph(graph, inputs)`, which simplifies and compiles on every call; per call, the "
                "median of runs in turns over 3 input sets (`bench_eval.compiled_results`). *compile once* "
                "is `compile_graph` (simplification included), paid once.\n\n"
                + table(bench_eval.COMPILED_HEADER, [bench_eval.compiled_row(r) for r in result["rows"]]))

    def _conv_table(self, env: dict) -> str:
        """A conv net's weight gradients against hand-written im2col numpy (no target: what
        a user evaluating a CNN meets; its windows are movement ops, see uopcli/backends/numpy/strided.py)."""
        batch, channels, size = self.cfg.conv
        progress(f"eval conv net batch {batch} channels {channels} size {size}")
        try:
            result = worker("conv_eval", env=env, batch=batch, channels=channels, size=size, repeats=5)
        except BenchError as error:
            return f"Conv net: error: {error}"
        return ("The weight gradients of `sum(relu(conv(relu(conv(x, W0)), W1)))` (3×3, padding 1; "
                "`conv2d` spells its windows with movement ops, which the evaluator runs as strided views "
                "and their gradient as strided scatter-adds) against hand-written numpy with im2col "
                "(`bench_eval.numpy_conv_gradient`), in one process in turns; peak is what tracemalloc "
                "sees each allocate. For reference: no target.\n\n"
                + table(["model", "uopcli evaluate", "numpy", "ratio", "uopcli peak", "numpy peak", "ratio",
                         "same result"],
                        [[f"conv net batch {batch}, {channels} channels, {size}×{size}",
                          f"{result['seconds'] * 1e3:.0f} ms", f"{result['numpy_seconds'] * 1e3:.0f} ms",
                          fmt_ratio(result["seconds"] / result["numpy_seconds"]), mib(result["peak"]),
                          mib(result["numpy_peak"]), fmt_ratio(result["peak"] / result["numpy_peak"]),
                          "yes" if result["same"] else "NO"]]))

    # ------------------------------------------------------------------ 3. files
    def files_section(self) -> None:
        rows = []
        for family, sizes in self.cfg.file_sizes.items():
            for size in sizes:
                progress(f"files {family} {size}")
                r = self._try("files", family=family, nodes=size, repeats=self._repeats(size, 2))
                self.files[(family, size)] = r
                if "error" in r:
                    rows.append([f"{family} {size:,}", f"error: {r['error']}", *["–"] * 12])
                    continue
                rows.append([f"{family} {size:,}", f"{r['nodes']:,}", f"{r['bytes'] / 1e6:.1f} MB",
                             f"{r['load']:.3f} s", f"{r['nodes'] / r['load'] / 1e6:.2f} M",
                             f"{r['unpackb']:.3f} s", fmt_ratio(r["load"] / r["unpackb"]),
                             f"{r['unpackb_nogc']:.3f} s", fmt_ratio(r["load"] / r["unpackb_nogc"]),
                             f"{r['save']:.3f} s", f"{r['nodes'] / r['save'] / 1e6:.2f} M",
                             f"{r['packb']:.3f} s", fmt_ratio(r["save"] / r["packb"]),
                             "yes" if r["identical"] else "NO"])
        self.sections.append(
            "## 3. Files\n\n"
            "`uopcli.load` from bytes and `uopcli.save` to bytes (MessagePack form), best of several runs, "
            "against bare `msgpack.unpackb` on the same bytes and `msgpack.packb` of the unpacked document "
            "(graphs and timing from `bench/bench_files.py`). Each load starts from an empty intern table, "
            "as in a fresh process. `unpackb` runs as a user would call it, with Python's cyclic garbage "
            "collector on (the target's measure); `load` pauses the collector while it builds nodes, so "
            "*unpackb, GC paused* (for reference) is the parse alone at its fastest, and the ratio to it what "
            "building and checking the nodes costs on top of it.\n\n"
            + table(["graph", "nodes", "size", "load", "load nodes/s", "unpackb", "load / unpackb",
                     "unpackb, GC paused", "load / unpackb, GC paused",
                     "save", "save nodes/s", "packb", "save / packb", "save(load(b)) == b"], rows))

    # ------------------------------------------------------------------ 4. scaling
    def scaling(self) -> None:
        sizes = self.cfg.scaling_sizes
        lines = {
            "compute_gradient (chain, in process, CPU time, median)":
                lambda s: self._per_node(self.grad.get(("uopcli", "chain", s)), "median_cpu_seconds"),
            f"compute_gradient (chain, in process, user time only, median){_REFERENCE}":
                lambda s: self._per_node(self.grad.get(("uopcli", "chain", s)), "median_user_seconds"),
            f"compute_gradient (chain, in process, CPU time, best run){_REFERENCE}":
                lambda s: self._per_node(self.grad.get(("uopcli", "chain", s)), "cpu_seconds"),
            "`uopgrad diff` (chain, whole process, CPU time)": lambda s: self._per_node(self.cli.get(("chain", s)), "cpu"),
            "load (chain, CPU time, median)": lambda s: self._per_node(self.files.get(("chain", s)), "load_median"),
            "save (chain, CPU time, median)": lambda s: self._per_node(self.files.get(("chain", s)), "save_median"),
            f"load (chain, CPU time, best run){_REFERENCE}":
                lambda s: self._per_node(self.files.get(("chain", s)), "load"),
        }
        if not self.tiny_skip:
            lines[f"tinygrad compute_gradient (chain, CPU time){_REFERENCE}"] = \
                lambda s: self._per_node(self.grad.get(("tinygrad", "chain", s)), "cpu_seconds")
        rows, self.scale_ratios = [], {}
        for name, per_node in lines.items():
            values = {s: per_node(s) for s in sizes}
            growth = None
            if values.get(1_000_000) and values.get(10_000):
                growth = values[1_000_000] / values[10_000]
            self.scale_ratios[name] = growth
            rows.append([name, *(f"{values[s]:.2f}" if values[s] else "–" for s in sizes), fmt_ratio(growth)])
        big = self.cli.get(("chain", 1_000_000))
        peak = "not measured" if not big or "error" in big else mib(big["peak_rss"])
        self.sections.append(
            "## 4. Scaling\n\n"
            "µs per node by graph size (chains; from the runs above). *Growth* is the cost per node at "
            "10⁶ nodes over the cost at 10⁴. Differentiation is measured in CPU time (user + system), "
            "which other processes on the machine disturb less than wall time, as the median of its "
            "runs (9 up to 10⁴ nodes, 3 above): on this shared machine the same 30 ms run takes "
            "2.2–4.5 µs per node, so the best of a few short runs catches quiet moments a 5 s run "
            "cannot, and comparing best runs (shown for reference) overstates the growth. The "
            "user-time row leaves out the system time, most of which is the kernel handing the "
            "process fresh pages. Load and save are measured the same way (CPU time, median of 9 "
            "runs up to 10⁴ nodes and 3 above; bench_files.py).\n\n"
            + table(["step", *(f"{s:,}" for s in sizes), "growth 10⁶ / 10⁴"], rows)
            + f"\n\nPeak memory of `uopgrad diff` on the 10⁶-node chain (whole process): {peak}.")

    @staticmethod
    def _per_node(result: dict | None, key: str) -> float | None:
        if not result or "error" in result or key not in result:
            return None
        return result[key] / result["nodes"] * 1e6

    # ------------------------------------------------------------------ 5. start-up
    def startup(self) -> None:
        progress("start-up")
        small = self.workdir / "small.uop"
        rows = []
        try:
            worker("write_graph", family="mlp", units=2, path=str(small))
            commands = {"`python -c pass` (floor)": [PY, "-c", "pass"],
                        "`python -c 'import numpy'` (for scale)": [PY, "-c", "import numpy"],
                        "`uopgrad --version`": [UOPGRAD, "--version"],
                        "`uopgrad info small.uop`": [UOPGRAD, "info", str(small)]}
            self.startup_ms = None
            for name, cmd in commands.items():
                walls, cpus = [], []
                for _ in range(self.cfg.startup_runs):
                    child = run_child(cmd)
                    if child.returncode != 0:
                        raise BenchError(f"{' '.join(cmd[:2])}: {_last_line(child.stderr)}")
                    walls.append(child.wall)
                    cpus.append(child.cpu)
                median = statistics.median(walls) * 1e3
                rows.append([name, f"{median:.1f} ms", f"{min(walls) * 1e3:.1f} ms",
                             f"{statistics.median(cpus) * 1e3:.1f} ms"])
                if "info" in name:
                    self.startup_ms = median
        except BenchError as error:
            rows.append(["`uopgrad info small.uop`", f"error: {error}", "–", "–"])
            self.startup_ms = None
        self.sections.append(
            "## 5. Start-up\n\n"
            f"Whole process, wall time median and best of {self.cfg.startup_runs} runs, and the median CPU "
            "time (user + system: what the process itself cost, whatever else the machine runs); "
            "small.uop is a 2-layer MLP.\n\n"
            + table(["command", "wall median", "wall best", "CPU median"], rows))

    # ------------------------------------------------------------------ ONNX (bench_onnx.py)
    def onnx_section(self) -> None:
        """The evaluator against onnxruntime on our exported gradients, and export speed:
        bench_onnx.py in a process of its own, its markdown as the section."""
        progress("onnx: the evaluator against onnxruntime")
        child = run_child([PY, str(HERE / "bench_onnx.py"), *(["--quick"] if self.quick else [])], env=numpy_env())
        if child.returncode != 0:
            why = _last_line(child.stderr) or f"exit {child.returncode}"
            text = f"## ONNX export\n\nnot measured: {why}"
        else:
            text = child.stdout.decode()
        self.sections.append(text)

    # ------------------------------------------------------------------ 6. agreement
    def agreement(self) -> None:
        rows = []
        for family, units in self.cfg.agree_units.items():
            progress(f"agreement with tinygrad: {family}")
            if self.tiny_skip:
                rows.append([family, "–", "–", self.tiny_skip, "–"])
                continue
            r = self._try("agree", env={**os.environ, "DEV": "PYTHON"}, family=family, units=units,
                          workdir=str(self.workdir), uopgrad=UOPGRAD)
            if "error" in r:
                rows.append([family, "–", "–", f"error: {r['error']}", "–"])
                continue
            rows.append([family, f"{r['nodes']:,}", r["targets"], f"{r['worst']:.1e}",
                         "yes" if r["worst"] <= AGREE_RTOL else "NO"])
        self.sections.append(
            "## 6. Agreement with tinygrad\n\n"
            "The timings above compare the two libraries on the same models; here their gradients are "
            "compared as numbers. Each family is built small with both APIs (tinygrad's interpreter "
            "backend, `DEV=PYTHON`, needs no compiler but takes minutes at 1,000 nodes) and fed the same "
            "seeded inputs: tinygrad's `Tensor.gradient` for every parameter, realized, against the "
            "installed `uopgrad diff` followed by `uopgrad eval` on the saved model. *worst difference* "
            "is the largest |ours − tinygrad| over a gradient, relative to that gradient's largest "
            f"magnitude, the worst over the targets; both sides compute in float32, in different orders, "
            f"so they agree when it is at most {AGREE_RTOL:.0e}.\n\n"
            + table(["graph", "nodes", "targets", "worst difference", "agree"], rows))

    # ------------------------------------------------------------------ targets
    def judge(self) -> None:
        t = self.targets
        for family, sizes in self.cfg.diff_sizes.items():
            for size in sizes:
                if size < 50_000:
                    continue
                s_in, s_cli, _ = self.speedups.get((family, size), (None, None, 0))
                t.append(Target(f"in-process compute_gradient ≥ 30× tinygrad ({family} {size:,})",
                                fmt_ratio(s_in), None if s_in is None else s_in >= 30))
                t.append(Target(f"`uopgrad diff` whole process ≥ 20× tinygrad per node ({family} {size:,})",
                                fmt_ratio(s_cli), None if s_cli is None else s_cli >= 20))
        for family in ("chain", "mlp"):
            r = self.grad.get(("uopcli", family, 100_000))
            per = self._per_node(r, "cpu_seconds")
            t.append(Target(f"compute_gradient ≤ 5 µs per forward node ({family} 100,000, CPU time)",
                            "–" if per is None else f"{per:.2f} µs", None if per is None else per <= 5))
        for name, growth in getattr(self, "scale_ratios", {}).items():
            if name.endswith(_REFERENCE):
                continue
            t.append(Target(f"per-node cost at 10⁶ ≤ 1.5× at 10⁴: {name}", fmt_ratio(growth),
                            None if growth is None else growth <= 1.5))
        big = self.cli.get(("chain", 1_000_000))
        peak = None if not big or "error" in big else big["peak_rss"]
        t.append(Target("`uopgrad diff` of a 10⁶-node chain within 1 GiB peak memory",
                        "–" if peak is None else mib(peak), None if peak is None else peak <= GIB))
        for model, (time_ratio, wall_ratio, mem_ratio) in getattr(self, "eval_results", {}).items():
            label = f"batch {model[0]}, width {model[1]}"
            # issue 7 states the target for the whole process; the in-process ratio of the
            # evaluate call alone is shown beside it for reference
            t.append(Target(f"evaluation ≤ 1.1× numpy time, whole process ({label}; in process for reference)",
                            f"{fmt_ratio(wall_ratio)} (in process {fmt_ratio(time_ratio)})",
                            None if wall_ratio is None else wall_ratio <= 1.1))
            t.append(Target(f"evaluation ≤ 1.5× numpy peak memory ({label}, whole process)",
                            fmt_ratio(mem_ratio), None if mem_ratio is None else mem_ratio <= 1.5))
        ratio = getattr(self, "matmul_ratio", None)
        t.append(Target("EXPAND/MUL/REDUCE product ≤ 1.3× np.matmul", fmt_ratio(ratio),
                        None if ratio is None else ratio <= 1.3))
        for (family, size), r in self.files.items():
            if size < 1_000_000 or "error" in r:
                continue
            t.append(Target(f"read {family} 10⁶ ≤ 3× unpackb and ≤ 5 s",
                            f"{fmt_ratio(r['load'] / r['unpackb'])}, {r['load']:.2f} s",
                            r["load"] <= 3 * r["unpackb"] and r["load"] <= 5))
            t.append(Target(f"write {family} 10⁶ ≤ 5× packb and ≤ 5 s",
                            f"{fmt_ratio(r['save'] / r['packb'])}, {r['save']:.2f} s",
                            r["save"] <= 5 * r["packb"] and r["save"] <= 5))
        ms = getattr(self, "startup_ms", None)
        t.append(Target("`uopgrad info` on a small file ≤ 100 ms (whole process, median)",
                        "–" if ms is None else f"{ms:.0f} ms", None if ms is None else ms <= 100))

    # ------------------------------------------------------------------ report
    def report(self, seconds: float) -> str:
        parts = [
            "# uopgrad benchmarks\n",
            f"Generated by `bench/run.py{''.join(' ' + a for a in sys.argv[1:] if a != '--no-write')}` "
            "(`make bench` runs it without options) on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s; "
            "regenerate with `make bench`. Every number below comes from this one run.\n",
            "## Machine\n\n" + machine_description()
            + f"\n\nLoad average (1 min) at the start of the run {self.load_at_start:.2f}, at the end "
              f"{os.getloadavg()[0]:.2f}, on {os.cpu_count()} cores: above about 1, other processes shared "
              "the machine and wall times are inflated (CPU times much less so).",
            "## Targets\n\n" + table(["target", "measured", "verdict"], [x.row() for x in self.targets]),
            *self.sections,
        ]
        if FINDINGS.exists():
            parts.append(FINDINGS.read_text().strip())
        return "\n\n".join(p.strip() for p in parts) + "\n"


def _count(result: dict | None) -> str:
    return f"{result['nodes']:,}" if result and "nodes" in result else "–"


def _cell(result: dict | None, fmt) -> str:
    if result is None:
        return "–"
    if "error" in result:
        return f"error: {result['error'][:120]}"
    return fmt(result)


DIFF_STEPS = ("reading", "differentiating", "encoding", "writing")  # uopgrad diff --stats


def _step_times(stderr: bytes) -> dict[str, float]:
    """The CPU seconds of each step from `uopgrad diff --stats` (`reading  0.181 s  0.180 s`)."""
    steps = {}
    for line in stderr.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[0] in DIFF_STEPS:
            steps[fields[0]] = float(fields[3])
    missing = [label for label in DIFF_STEPS if label not in steps]
    if missing:
        raise BenchError(f"uopgrad diff --stats gave no time for {', '.join(missing)}")
    return steps


def _merged(runs: list[dict]) -> dict:
    """One compute_gradient result from the rounds' runs: best and median over all of them."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    cpu = [t for r in good for t in r["all_cpu_seconds"]]
    user = [t for r in good for t in r["all_user_seconds"]]
    return {**good[0], "cpu_seconds": min(cpu), "median_cpu_seconds": statistics.median(cpu),
            "user_seconds": min(user), "median_user_seconds": statistics.median(user),
            "all_cpu_seconds": cpu, "all_user_seconds": user}


def _median_ratio(theirs_runs: list[dict], ours_runs: list[dict]) -> float | None:
    """The median over rounds of tinygrad's time over ours (each _speedup): None when a
    round has no measurement of either side."""
    ratios = [_speedup(theirs, ours) for theirs, ours in zip(theirs_runs, ours_runs)]
    if not ratios or None in ratios:
        return None
    return statistics.median(ratios)


def _speedup(theirs: dict | None, ours: dict | None) -> float | None:
    """tinygrad's CPU time over ours (in process: compute_gradient; whole process: the
    `uopgrad diff` process), the smaller of the time ratio and the per-node ratio."""
    if not theirs or not ours or "error" in theirs or "error" in ours:
        return None
    our_time = ours["cpu_seconds"] if "cpu_seconds" in ours else ours["cpu"]
    time_ratio = theirs["cpu_seconds"] / our_time
    node_ratio = time_ratio * ours["nodes"] / theirs["nodes"]
    return min(time_ratio, node_ratio)


# ----------------------------------------------------------------------------- machine

def machine_description() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    probe = run_child([PY, "-c", _VERSIONS_PROBE], env=numpy_env())
    versions = json.loads(probe.stdout.decode() or "{}") if probe.returncode == 0 else {}
    rows = [["CPU", f"{cpu}, {os.cpu_count()} logical cores"], ["memory", mem],
            ["OS", f"{platform.system()} {platform.release()} {platform.machine()}"],
            ["Python", platform.python_version() + f" ({platform.python_implementation()})"]]
    rows += [[k, v] for k, v in versions.items()]
    rows.append(["uopgrad commit", _git_head()])
    return table(["", ""], rows)


_VERSIONS_PROBE = r"""
import json, importlib.metadata as md
out = {}
for name in ("numpy", "msgpack", "click", "tinygrad"):
    try: out[name] = md.version(name)
    except md.PackageNotFoundError: out[name] = "not installed"
import numpy
try:
    from threadpoolctl import threadpool_info
    out["BLAS (threadpoolctl)"] = "; ".join(
        f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} {i.get('num_threads')} threads"
        for i in threadpool_info() if i.get("user_api") == "blas") or "none found"
except ImportError:
    out["BLAS (threadpoolctl)"] = "threadpoolctl not installed"
print(json.dumps(out))
"""


def _git_head() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "uopcli"], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() + (" (uopcli modified)" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


# ----------------------------------------------------------------------------- main

SECTIONS = ("diff", "eval", "files", "startup", "agree", "onnx", "bridge")


def compile_package() -> None:
    """Write uopcli's bytecode before any process is timed. pip compiles the packages it
    installs, but not the sources of an editable install, and with PYTHONDONTWRITEBYTECODE
    set (as in some shells and CI images) no process would ever cache them: each would
    compile every module again (~30 ms) instead of loading it, unlike a user's second run."""
    import compileall
    compileall.compile_dir(str(ROOT / "uopcli"), quiet=1)


def bridge_section(quick: bool, tiny_skip: str | None) -> str:
    """Section 8 from bench/bench_tinygrad_bridge.py, run in a process of its own."""
    if tiny_skip:
        return f"## 8. The tinygrad bridge\n\n{tiny_skip}"
    progress("tinygrad bridge")
    child = run_child([PY, str(HERE / "bench_tinygrad_bridge.py"), *(["--quick"] if quick else [])])
    if child.returncode != 0:
        return f"## 8. The tinygrad bridge\n\nerror: {_last_line(child.stderr)}"
    return child.stdout.decode().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every section")
    parser.add_argument("--no-write", action="store_true", help="print the report instead of writing RESULTS.md")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the report")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, of {','.join(SECTIONS)}")
    parser.add_argument("--tinygrad-max", type=int, help="largest graph given to tinygrad (nodes)")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.tinygrad_max is not None:
        cfg.tinygrad_max = args.tinygrad_max
    only = set(args.only.split(","))
    start = time.perf_counter()
    compile_package()
    with tempfile.TemporaryDirectory(prefix="uopgrad-bench-") as tmp:
        bench = Bench(cfg, args.quick, Path(tmp))
        if "diff" in only:
            bench.differentiation()
        if "eval" in only:
            bench.evaluation()
        if "files" in only:
            bench.files_section()
        if "diff" in only or "files" in only:
            bench.scaling()
        if "startup" in only:
            bench.startup()
        if "agree" in only:
            bench.agreement()
        if "onnx" in only:
            bench.onnx_section()
        if "bridge" in only:  # 8. the tinygrad bridge (issue 22), its own script
            bench.sections.append(bridge_section(args.quick, bench.tiny_skip))
        bench.judge()
        text = bench.report(time.perf_counter() - start)
    if args.no_write:
        print(text)
    else:
        from bench_simplify import carry_section  # section 7 is written by bench_simplify.py: keep it
        args.out.write_text(carry_section(args.out.read_text() if args.out.exists() else "", text))
        progress(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
