"""uopcli's numpy evaluator against onnxruntime running our exported ONNX, side by side.

    .venv/bin/python bench/bench_onnx.py            # bench section 2's sizes (a minute or two)
    .venv/bin/python bench/bench_onnx.py --quick    # small sizes, seconds

Rows:
- the MLP gradient of bench section 2 (sum(relu(... relu(x @ W0 + b0) ...)), every
  weight and bias) and the conv net gradient of bench_eval.py: `evaluate` on the
  gradient UOps against `InferenceSession.run` on the same graph exported with
  `to_onnx` (CPU provider, default options: onnxruntime's own thread pool, on this
  machine's cores like OpenBLAS's), on the same inputs, run in turns; median wall and
  CPU time (all threads), and whether the values agree (float32: within 1e-3 of each
  gradient's scale, as bench_eval's same_gradients). One-off costs beside them: the
  export (to_onnx + serialize) and onnxruntime's session creation (its graph optimizer);
- export speed: to_onnx + serialization of differentiated bench families of about
  10^5 forward nodes, per gradient node, against writing the same graph as .uop;
- the gradient of a ResNet-50-sized ONNX model, imported (bench_onnx_gradient.py).
Prints a markdown section.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_eval  # noqa: E402
import graphs  # noqa: E402
from uopcli import Graph, toposort  # noqa: E402
from uopcli.backends.numpy import evaluate  # noqa: E402


def _graph(outputs: list, arrays: dict) -> Graph:
    """The gradient UOps as a Graph whose inputs are in the arrays' order."""
    params = {n.arg: n for n in toposort(outputs) if n.op == "PARAM"}
    return Graph({f"g{i}": out for i, out in enumerate(outputs)}, inputs=[params[name] for name in arrays])


def _cpu_and_wall(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def side_by_side(name: str, outputs: list, arrays: dict, repeats: int) -> list:
    import onnxruntime as ort
    from uopcli.interop.onnx.exporter import onnx_bytes
    graph = _graph(outputs, arrays)
    export_wall, export_cpu = _cpu_and_wall(lambda: onnx_bytes(graph))
    data = onnx_bytes(graph)
    holder = {}
    load_wall, load_cpu = _cpu_and_wall(
        lambda: holder.setdefault("s", ort.InferenceSession(data, providers=["CPUExecutionProvider"])))
    session = holder["s"]
    runs = bench_eval.times_in_turns([lambda: evaluate(outputs, arrays), lambda: session.run(None, arrays)], repeats)
    (ours_wall, ours_cpu, values), (theirs_wall, theirs_cpu, results) = runs
    same = bench_eval.same_gradients(results, values)
    return [name, f"{ours_wall * 1e3:.1f} ms (cpu {ours_cpu * 1e3:.1f})",
            f"{theirs_wall * 1e3:.1f} ms (cpu {theirs_cpu * 1e3:.1f})",
            f"{ours_wall / theirs_wall:.2f}x (cpu {ours_cpu / theirs_cpu:.2f}x)", "yes" if same else "NO",
            f"{export_cpu * 1e3:.0f} ms", f"{load_cpu * 1e3:.0f} ms", f"{len(data) / 2 ** 20:.1f} MiB"]


def export_speed(family: str, nodes: int) -> list:
    import tempfile

    from uopcli import save
    from uopcli.tools.differentiate import differentiate
    from uopcli.interop.onnx.exporter import onnx_bytes
    loss, targets = graphs.FAMILIES[family](graphs.fresh_uop_param(), graphs.size_for(family, nodes))
    gradient, _ = differentiate(Graph({"loss": loss}), [t.arg for t in targets])
    count = len(gradient.nodes())
    holder = {}
    _, onnx_cpu = _cpu_and_wall(lambda: holder.setdefault("b", onnx_bytes(gradient)))
    with tempfile.TemporaryDirectory() as tmp:
        _, uop_cpu = _cpu_and_wall(lambda: save(gradient, f"{tmp}/g.uop"))
    return [f"{family} gradient", f"{count:,}", f"{onnx_cpu:.2f} s", f"{onnx_cpu / count * 1e6:.1f}",
            f"{uop_cpu:.2f} s", f"{onnx_cpu / uop_cpu:.1f}x", f"{len(holder['b']) / 2 ** 20:.1f} MiB"]


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    args = parser.parse_args(argv)
    import onnxruntime
    mlps = [(32, 128, 2, 2)] if args.quick else [(256, 1024, 4, 5), (1024, 2048, 4, 3)]
    convs = [(1, 2, 6, 2)] if args.quick else [(32, 32, 32, 3)]
    rows = []
    for batch, width, layers, repeats in mlps:
        arrays = bench_eval.mlp_arrays(batch, width, layers)
        rows.append(side_by_side(f"MLP gradient, batch {batch}, width {width}, {layers} layers",
                                 bench_eval.mlp_gradient_graph(batch, width, layers), arrays, repeats))
    for batch, channels, size, repeats in convs:
        arrays = bench_eval.conv_arrays(batch, channels, size)
        rows.append(side_by_side(f"conv net gradient, batch {batch}, {channels} channels, {size}x{size}",
                                 bench_eval.conv_gradient_graph(batch, channels, size), arrays, repeats))
    from bench_onnx_gradient import FULL, QUICK, gradient_side_by_side
    resnet = gradient_side_by_side(**(QUICK if args.quick else FULL))
    sizes = 2_000 if args.quick else 100_000
    speed = [export_speed(family, sizes) for family in ("chain", "mlp", "attention")]
    print("## ONNX export: the numpy evaluator against onnxruntime\n\n"
          f"`bench/bench_onnx.py` (onnxruntime {onnxruntime.__version__}, CPU provider): each gradient evaluated "
          "by `evaluate` and by onnxruntime running the same graph exported with `to_onnx`, on the same inputs, "
          "in turns; median wall time and CPU time (user + system, all threads). *export* and *session* are "
          "the one-off CPU costs of writing the model and of onnxruntime loading and optimizing it.\n\n"
          + table(["gradient", "uopcli evaluate", "onnxruntime", "evaluate / onnxruntime", "same values",
                   "export", "session", "model"], rows)
          + "\n\nExport speed (CPU time): `to_onnx` and serialization of the gradient of a bench family of about "
          f"{sizes:,} forward nodes, against `save` of the same gradient as .uop.\n\n"
          + table(["graph", "gradient nodes", "ONNX export", "µs per node", ".uop save", "ratio", "model"], speed)
          + "\n\n" + resnet)


if __name__ == "__main__":
    main()
