"""`uopgrad eval --map` over a data set, in one run: 16 shards of an MLP gradient whose
evaluation takes about 0.2 s each, run one after another in one process and on
`--dask local:2` (two worker processes on this two-core machine), each as the whole
`uopgrad` process a user runs; then on a warm cluster (started once), where the time
between one shard's end and the next one's start on a worker is the scheduling overhead.

    make bench-map                                  # writes bench/RESULTS-map.md
    .venv/bin/python bench/bench_map.py --no-write  # prints it only
    .venv/bin/python bench/bench_map.py --quick --no-write   # a smoke run

Targets (issue 34): --dask local:2 at least 1.6x faster than the sequential run, the
cluster's start-up included and reported separately; the scheduling overhead per shard
under 5% of a 0.2 s shard. Both results are the same bytes, and the sum is the whole
batch's gradient within 1e-12 (relative, float64).
Other processes on the machine skew every timing: the load average is printed with each.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from uopcli import Graph, UOp, dtypes, evaluate_graph, save  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402
from uopcli.tools.map import map_graph  # noqa: E402

UOPGRAD = str(Path(sys.executable).parent / "uopgrad")
RESULTS = HERE / "RESULTS-map.md"
SIZES = (64, 512, 16)  # in, hidden, out of the MLP


def gradient(batch: int) -> Graph:
    """The gradient of a summed squared error of a tanh MLP over `batch` rows (float64)."""
    n_in, hidden, n_out = SIZES
    x, y = UOp.param("x", (batch, n_in), dtypes.float64), UOp.param("y", (batch, n_out), dtypes.float64)
    w1, w2 = UOp.param("w1", (n_in, hidden), dtypes.float64), UOp.param("w2", (hidden, n_out), dtypes.float64)
    error = (x @ w1).tanh() @ w2 - y
    graph, _ = differentiate(Graph({"loss": (error * error).sum()}, inputs=[x, y, w1, w2]), ["w1", "w2"],
                             keep_forward=True)
    return graph


def write_data(directory: Path, shards: int, batch: int) -> dict:
    rng = np.random.default_rng(0)
    n_in, hidden, n_out = SIZES
    fixed = {"w1": rng.standard_normal((n_in, hidden)) / 8, "w2": rng.standard_normal((hidden, n_out)) / 23}
    for name, value in fixed.items():
        np.save(directory / f"{name}.npy", value)
    (directory / "shards").mkdir()
    for i in range(shards):
        np.savez(directory / "shards" / f"part-{i:03d}.npz", x=rng.standard_normal((batch, n_in)),
                 y=rng.standard_normal((batch, n_out)))
    save(gradient(batch), directory / "grad.uop")
    return fixed


def autogroup() -> str:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "unknown"


def load() -> float:
    return os.getloadavg()[0]


STATS = re.compile(r"start-up ([\d.]+) s, sending the graph and fixed inputs ([\d.]+) s, run ([\d.]+) s, "
                   r"mean shard ([\d.]+) s")
OVERHEAD = re.compile(r"overhead per shard: ([\d.]+) ms")


def run_cli(directory: Path, out: str, *extra: str) -> dict:
    """One whole `uopgrad eval --map` process: its wall time and what --stats said."""
    args = [UOPGRAD, "eval", "grad.uop", "--map", "shards/*.npz", "-i", "w1=w1.npy", "-i", "w2=w2.npy",
            "--stats", "-o", out, *extra]
    before, start = load(), time.perf_counter()
    done = subprocess.run(args, cwd=directory, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench_map: {' '.join(args)} failed:\n{done.stderr}")
    startup, send, run, shard = map(float, STATS.search(done.stderr).groups())
    overhead = OVERHEAD.search(done.stderr)
    return {"wall": wall, "startup": startup, "send": send, "run": run, "shard": shard,
            "overhead": float(overhead.group(1)) / 1e3 if overhead else None, "load": (before + load()) / 2}


def one_shard_seconds(directory: Path, fixed: dict, batch: int) -> float:
    """A shard's evaluation here, BLAS on one thread as map runs it (median of 3)."""
    from threadpoolctl import threadpool_limits

    from uopcli.core.simplify import simplify
    graph = simplify(gradient(batch))
    inputs = {**dict(np.load(directory / "shards" / "part-000.npz")), **fixed}
    times = []
    with threadpool_limits(limits=1, user_api="blas"):
        evaluate_graph(graph, inputs)
        for _ in range(3):
            start = time.perf_counter()
            evaluate_graph(graph, inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


SHARD_SECONDS = 0.2  # the shard: "a gradient whose evaluation takes about 0.2 s"


def calibrated_batch(probe: int = 2000) -> int:
    """Rows per shard that make one shard's evaluation take about SHARD_SECONDS on this
    machine now (a shard's time grows linearly with its rows)."""
    with tempfile.TemporaryDirectory(prefix="bench-map-probe-") as scratch:
        directory = Path(scratch)
        fixed = write_data(directory, 1, probe)
        seconds = one_shard_seconds(directory, fixed, probe)
    return max(256, round(probe * SHARD_SECONDS / seconds / 100) * 100)


def warm_cluster(directory: Path, fixed: dict, batch: int, repeats: int) -> list:
    """map_graph on one LocalCluster of two workers, started once: run times and the gaps."""
    import logging

    import distributed
    paths = sorted((directory / "shards").glob("*.npz"))
    graph = gradient(batch)
    rows = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        map_graph(graph, paths[:2], fixed, dask=client)  # the workers' first shard parses the graph
        for _ in range(repeats):
            before = load()
            report = map_graph(graph, paths, fixed, dask=client)
            gaps = report.scheduling_gaps()
            shard = statistics.mean(s.read_seconds + s.eval_seconds + s.prepare_seconds for s in report.shards)
            rows.append({"run": report.run_seconds, "send": report.send_seconds, "gap": statistics.mean(gaps),
                         "gap_max": max(gaps), "shard": shard, "load": (before + load()) / 2,
                         "cpu": statistics.mean(s.cpu_seconds for s in report.shards)})
        here = map_graph(graph, paths, fixed)  # the same shards in this process, for their CPU time
        rows[-1]["cpu_here"] = statistics.mean(s.cpu_seconds for s in here.shards)
        rows[-1]["wall_here"] = statistics.mean(s.read_seconds + s.eval_seconds for s in here.shards)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 small shards, one repeat: a smoke run")
    parser.add_argument("--no-write", action="store_true", help=f"print only (do not write {RESULTS.name})")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="rows per shard (default: as many as make a shard "
                        f"take about {SHARD_SECONDS} s here, measured first)")
    args = parser.parse_args()
    shards, batch, repeats = (4, 256, 1) if args.quick else (16, args.batch or calibrated_batch(), args.repeats)
    with tempfile.TemporaryDirectory(prefix="bench-map-") as scratch:
        directory = Path(scratch)
        fixed = write_data(directory, shards, batch)
        shard_seconds = one_shard_seconds(directory, fixed, batch)
        sequential, local = [], []
        for _ in range(repeats):  # alternated, so that a change of load falls on both
            sequential.append(run_cli(directory, "seq.npz"))
            local.append(run_cli(directory, "dask.npz", "--dask", "local:2"))
        same = (directory / "seq.npz").read_bytes() == (directory / "dask.npz").read_bytes()
        error = whole_batch_error(directory, fixed, shards, batch)
        warm = warm_cluster(directory, fixed, batch, repeats)
    text = report(shards, batch, shard_seconds, sequential, local, warm, same, error)
    print(text)
    if not args.no_write and not args.quick:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}")


def whole_batch_error(directory: Path, fixed: dict, shards: int, batch: int) -> float:
    """The largest relative difference between the summed shards and the gradient graph of
    the whole batch on the concatenated data."""
    parts = [dict(np.load(p)) for p in sorted((directory / "shards").glob("*.npz"))]
    data = {name: np.concatenate([p[name] for p in parts]) for name in ("x", "y")}
    whole = evaluate_graph(gradient(shards * batch), {**data, **fixed}, simplify="tinygrad")
    with np.load(directory / "seq.npz") as summed:
        return max(float(np.max(np.abs(summed[k] - v)) / np.max(np.abs(v))) for k, v in whole.items())


def break_even(shards: int, sequential: list, local: list) -> str:
    """From this run's fixed costs (a process's wall time beyond its shards) and per-shard
    times: how many such shards make the whole local:2 process 1.6x faster (an estimate)."""
    median = lambda rows, key: statistics.median(r[key] for r in rows)
    fixed_seq = median(sequential, "wall") - median(sequential, "run")
    fixed_dask = median(local, "wall") - median(local, "run")
    per_seq, per_dask = median(sequential, "run") / shards, median(local, "run") / shards
    if per_seq <= 1.6 * per_dask:
        return (f"start-up included, no number of shards reaches 1.6x here: a shard costs {per_dask:.3f} s on "
                f"the cluster against {per_seq:.3f} s in one process")
    needed = (1.6 * fixed_dask - fixed_seq) / (per_seq - 1.6 * per_dask)
    return (f"start-up included, 1.6x takes about {max(needed, 0):.0f} shards of this size (an estimate from this "
            f"run: fixed costs {fixed_seq:.2f} s in one process and {fixed_dask:.2f} s with the cluster, "
            f"{per_seq:.3f} s against {per_dask:.3f} s a shard)")


def report(shards, batch, shard_seconds, sequential, local, warm, same, error) -> str:
    median = lambda rows, key: statistics.median(r[key] for r in rows)
    seq_wall, dask_wall = median(sequential, "wall"), median(local, "wall")
    seq_run, dask_run = median(sequential, "run"), median(local, "run")
    startup = median(local, "startup")
    warm_run, warm_gap = median(warm, "run"), median(warm, "gap")
    warm_shard = median(warm, "shard")
    loads = [r["load"] for r in sequential + local + warm]
    lines = [
        "# eval --map over a data set: sequential and on Dask (bench/bench_map.py)",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {min(loads):.2f} to {max(loads):.2f} during the runs (other processes shared the cores "
        f"where it is above about 1). {shards} shards of {batch} rows of an MLP gradient "
        f"({'x'.join(map(str, SIZES))}, float64, w.r.t. both weights); one shard evaluates in "
        f"{shard_seconds:.3f} s here (BLAS on one thread, as map runs it). Medians of {len(sequential)} runs, "
        f"alternated.",
        "",
        "## Whole `uopgrad eval --map` processes",
        "",
        "| run | process wall | of which: cluster start-up | running the shards | the rest (Python, imports, "
        "reading, simplifying, closing) |",
        "|---|---|---|---|---|",
        f"| sequential | {seq_wall:.2f} s | - | {seq_run:.2f} s | {seq_wall - seq_run:.2f} s |",
        f"| --dask local:2 | {dask_wall:.2f} s | {startup:.2f} s | {dask_run:.2f} s | "
        f"{dask_wall - dask_run - startup:.2f} s |",
        "",
        f"- speed-up, whole process (start-up included): **{seq_wall / dask_wall:.2f}x**",
        f"- speed-up of running the shards (start-up reported above): **{seq_run / dask_run:.2f}x**",
        f"- the shards' time on a warm cluster (started once, {len(warm)} runs): {warm_run:.2f} s, "
        f"{seq_run / warm_run:.2f}x the sequential run",
        f"- {break_even(shards, sequential, local)}",
        "",
        "## Scheduling overhead per shard (warm cluster)",
        "",
        f"The mean gap between one shard's end and the next one's start on a worker: **{warm_gap * 1e3:.2f} ms**, "
        f"{100 * warm_gap / warm_shard:.2f}% of a mean shard of {warm_shard:.3f} s (target: under 5% of a 0.2 s "
        f"shard, 10 ms); largest gap {max(r['gap_max'] for r in warm) * 1e3:.1f} ms. Sending the graph and "
        f"weights to both workers once: {median(warm, 'send') * 1e3:.1f} ms.",
        "",
        "## CPU time against wall time",
        "",
        f"A shard's own CPU time (its thread's, reading and evaluating): {warm[-1]['cpu']:.3f} s on a worker, "
        f"{warm[-1]['cpu_here']:.3f} s in one process (whose shards took {warm[-1]['wall_here']:.3f} s of wall "
        f"time each, against {warm_shard:.3f} s on a worker). A shard's wall time is its CPU time plus the "
        f"time its thread waited for a core. This machine's kernel groups processes by "
        f"session for CPU fairness (sched_autogroup_enabled = {autogroup()}): under other sessions' load, the "
        f"two workers and their parent share one session's share, as the sequential run has one to itself, so a "
        f"speed-up shows only on a machine whose load average stays below its core count.",
        "",
        "## Results",
        "",
        f"- --dask local:2 wrote the sequential run's bytes: **{'yes' if same else 'NO'}**",
        f"- the sum of the {shards} shards against the gradient graph of all {shards * batch} rows: largest "
        f"relative difference {error:.2e} (target 1e-12)",
        "",
        "## Targets",
        "",
        f"- local:2 at least 1.6x the sequential run, start-up included: "
        f"{'met' if seq_wall / dask_wall >= 1.6 else 'missed'} ({seq_wall / dask_wall:.2f}x); running the "
        f"shards alone: {'met' if seq_run / dask_run >= 1.6 else 'missed'} ({seq_run / dask_run:.2f}x)",
        f"- scheduling overhead under 5% of a shard: {'met' if warm_gap < 0.05 * warm_shard else 'missed'} "
        f"({100 * warm_gap / warm_shard:.2f}%)",
        f"- same bytes: {'met' if same else 'missed'}; whole batch within 1e-12: "
        f"{'met' if error <= 1e-12 else 'missed'}",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
