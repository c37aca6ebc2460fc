"""The tinygrad bridge, side by side with tinygrad in one run; prints a markdown section.

    .venv/bin/python bench/bench_tinygrad_bridge.py            # full sizes (a few minutes)
    .venv/bin/python bench/bench_tinygrad_bridge.py --quick    # small sizes

Rows:
- export: `to_graph` of a tinygrad graph of about 100,000 UOps against what tinygrad itself
  spent building it (the `Tensor` calls until the graph exists, nothing realized). Target:
  the export costs at most 2x the build. CPU time, best of the repeats, each on a freshly
  built graph;
- evaluation: the MLP gradient of section 2 (the gradient graph of
  sum(relu(...relu(x @ W0 + b0)...)) for every weight and bias), evaluated by the numpy
  backend and by `--backend tinygrad` (CPU), in process (the first tinygrad call compiles its
  kernels with clang; later calls find them in tinygrad's cache) and as whole `uopgrad eval`
  processes. No target: the numbers say which backend to pick on a CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

UOPGRAD = str(Path(sys.executable).parent / "uopgrad")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build_tinygrad_graph(steps: int):
    """A recurrent net over a few shared weights (data), `steps` long: each step a matmul,
    a bias, a nonlinearity, a slice and pad, and a reduction, as a model's layers make them."""
    from tinygrad import Tensor
    x, w, b = Tensor.empty(4, 8), Tensor.empty(8, 8), Tensor.empty(8)
    h = x
    for step in range(steps):
        z = (h @ w + b * (1 + step % 3)).gelu() if step % 2 else (h @ w + b).relu()
        h = z - z.mean(1, keepdim=True) + z[:, 1:].pad((None, (0, 1))) * 0.5
    loss = h.square().sum()
    return loss, {"x": x, "w": w, "b": b}


def bench_export(target_nodes: int, repeats: int) -> list[str]:
    from uopcli.interop.tinygrad import to_graph
    from uopcli.core.uop import sweep_intern_table
    probe, _ = build_tinygrad_graph(100)  # the first steps share constants: measure a longer run
    per_step = len(probe.uop.toposort()) / 100
    steps = max(1, int(target_nodes / per_step))
    best_build = best_export = float("inf")
    for _ in range(repeats):
        start = _cpu()
        loss, inputs = build_tinygrad_graph(steps)
        built = _cpu()
        graph = to_graph({"loss": loss}, inputs)
        done = _cpu()
        best_build, best_export = min(best_build, built - start), min(best_export, done - built)
        tinygrad_nodes, our_nodes = len(loss.uop.toposort()), len(graph)
        del graph
        sweep_intern_table()
    ratio = best_export / best_build
    return [f"export of {tinygrad_nodes:,} tinygrad UOps ({our_nodes:,} of ours)", f"{best_build:.2f} s",
            f"{best_export:.2f} s", f"{ratio:.2f}x", f"{best_export / tinygrad_nodes * 1e6:.1f}",
            "≤ 2x: " + ("met" if ratio <= 2 else "NOT met")]


def bench_eval(batch: int, width: int, layers: int, repeats: int, workdir: Path) -> list[list[str]]:
    from bench_eval import mlp_arrays, mlp_gradient_graph

    from uopcli import Graph, evaluate_graph, save
    from uopcli.interop.tinygrad import evaluate_on_tinygrad
    from uopcli.tools.values import npz_bytes
    arrays = mlp_arrays(batch, width, layers)
    grads = mlp_gradient_graph(batch, width, layers)
    names = [f"w{i // 2}" if i % 2 == 0 else f"b{i // 2}" for i in range(2 * layers)]
    graph = Graph({f"grad_{n}": g for n, g in zip(names, grads)})
    graph = Graph(graph.outputs, [graph.input(n) for n in arrays])

    def timed(fn):
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result

    first_tinygrad, by_tinygrad = timed(lambda: evaluate_on_tinygrad(graph, arrays, "CPU"))
    numpy_times, tinygrad_times = [], []
    for _ in range(repeats):
        seconds, by_numpy = timed(lambda: evaluate_graph(graph, arrays))
        numpy_times.append(seconds)
        tinygrad_times.append(timed(lambda: evaluate_on_tinygrad(graph, arrays, "CPU"))[0])
    worst = max(float(np.max(np.abs(by_numpy[k] - by_tinygrad[k])) / max(1e-30, float(np.max(np.abs(by_numpy[k])))))
                for k in by_numpy)
    save(graph, workdir / "grad.uop")
    (workdir / "inputs.npz").write_bytes(npz_bytes(arrays))
    whole = {}
    for backend in ("numpy", "tinygrad"):
        start = time.perf_counter()
        done = subprocess.run([UOPGRAD, "eval", "grad.uop", "-i", "inputs.npz", "--backend", backend,
                               "-o", f"{backend}.npz"], cwd=workdir, capture_output=True, text=True)
        whole[backend] = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"uopgrad eval --backend {backend}: {done.stderr.strip()}")
    model = f"MLP gradient, batch {batch}, width {width}, {layers} layers"
    return [[model, "in process, first call", f"{min(numpy_times) * 1e3:.0f} ms", f"{first_tinygrad * 1e3:.0f} ms",
             f"{first_tinygrad / min(numpy_times):.1f}x", f"{worst:.1e}"],
            [model, "in process, best later call", f"{min(numpy_times) * 1e3:.0f} ms",
             f"{min(tinygrad_times) * 1e3:.0f} ms", f"{min(tinygrad_times) / min(numpy_times):.1f}x", ""],
            [model, "whole `uopgrad eval` process", f"{whole['numpy']:.2f} s", f"{whole['tinygrad']:.2f} s",
             f"{whole['tinygrad'] / whole['numpy']:.1f}x", ""]]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args(argv)
    nodes, repeats, model = (10_000, 1, (64, 128, 2)) if args.quick else (100_000, 3, (256, 1024, 4))
    export_row = bench_export(nodes, repeats)
    with tempfile.TemporaryDirectory(prefix="uopgrad-bridge-") as tmp:
        eval_rows = bench_eval(*model, repeats=repeats, workdir=Path(tmp))
    print("## 8. The tinygrad bridge\n\n"
          "Export: tinygrad's own cost of building a graph (the `Tensor` calls, nothing realized) against "
          "`uopcli.interop.tinygrad.to_graph` of it, CPU time, best of the runs "
          "(`bench/bench_tinygrad_bridge.py`).\n\n"
          + table(["graph", "tinygrad builds it", "export", "export / build", "export µs per UOp", "target"],
                  [export_row])
          + "\n\nEvaluation: the MLP gradient of section 2, the numpy backend against `--backend tinygrad` on "
          "tinygrad's CPU device (clang), same inputs; *worst difference* is the largest |tinygrad − numpy| of a "
          "gradient over its largest magnitude. No target.\n\n"
          + table(["model", "measure", "numpy", "tinygrad", "tinygrad / numpy", "worst difference"], eval_rows))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
