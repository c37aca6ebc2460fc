"""The gradient of a ResNet-50-sized ONNX model: our numpy evaluator against onnxruntime
running the gradient we export, side by side in one run (issue 23).

    .venv/bin/python bench/bench_onnx_gradient.py                 # 3,4,6,3 blocks, 25.6 M weights
    .venv/bin/python bench/bench_onnx_gradient.py --quick         # 1,1,1,1 blocks of widths 8..64, 32x32

The model is bench_onnx_import.py's (ResNet-50's layout, random weights, built with
onnx.helper). As a user would: `load_onnx`, the gradient of sum(logits) with respect to
every weight (`differentiate`, cotangent ones), then
    ours    evaluate_graph(gradient, weights + x)
    theirs  onnxruntime (CPU provider, default options) on `to_onnx(gradient, weights=...)`,
            the weights as initializers, fed x alone (what `uopgrad diff model.onnx -o
            grad.onnx` writes)
run in turns on the same x; median wall and CPU time (all threads), whether the values
agree (bench_eval.same_gradients), and the one-off costs: export and session creation.
Prints a markdown section (bench_onnx.py adds it to run.py's onnx section).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_eval  # noqa: E402
from bench_onnx_import import resnet50  # noqa: E402

FULL = dict(blocks=(3, 4, 6, 3), image=64, batch=1, base=64, repeats=2)
QUICK = dict(blocks=(1, 1, 1, 1), image=32, batch=1, base=8, repeats=1)  # widths 8..64: seconds


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def gradient_side_by_side(blocks, image: int, batch: int, base: int, repeats: int) -> str:
    import onnxruntime as ort

    from uopcli import evaluate_graph
    from uopcli.interop.onnx.exporter import onnx_bytes
    from uopcli.interop.onnx.importer import load_onnx
    from uopcli.tools.differentiate import differentiate
    with tempfile.TemporaryDirectory(prefix="uopgrad-onnx-grad-") as folder:
        path = os.path.join(folder, "model.onnx")
        count = resnet50(path, tuple(blocks), image=image, batch=batch, base=base)
        graph, weights = load_onnx(path)
    x = np.random.default_rng(1).standard_normal((batch, 3, image, image)).astype(np.float32)
    (gradient, _), diff_wall, _ = _timed(lambda: differentiate(graph, list(weights), None, "ones", False))
    data, _, export_cpu = _timed(lambda: onnx_bytes(gradient, weights=weights))
    session, _, session_cpu = _timed(lambda: ort.InferenceSession(data, providers=["CPUExecutionProvider"]))
    names = [o.name for o in session.get_outputs()]
    feeds = {**weights, "x": x}
    def ours():  # once, then the outputs in onnxruntime's order
        values = evaluate_graph(gradient, feeds)
        return [values[n] for n in names]

    runs = bench_eval.times_in_turns([ours,
                                      lambda: session.run(None, {"x": x})], repeats)
    (ours_wall, ours_cpu, ours), (theirs_wall, theirs_cpu, theirs) = runs
    same = bench_eval.same_gradients(theirs, ours)
    row = [f"ResNet-50 layout, blocks {','.join(map(str, blocks))}, widths {base}-{8 * base}, {count / 1e6:.1f} M weights, "
           f"x {batch}x3x{image}x{image}; {len(gradient.nodes()):,} gradient nodes",
           f"{ours_wall:.2f} s (cpu {ours_cpu:.2f})", f"{theirs_wall:.2f} s (cpu {theirs_cpu:.2f})",
           f"{ours_wall / theirs_wall:.2f}x (cpu {ours_cpu / theirs_cpu:.2f}x)", "yes" if same else "NO",
           f"{diff_wall:.1f} s", f"{export_cpu:.1f} s", f"{session_cpu:.1f} s", f"{len(data) / 2 ** 20:.0f} MiB"]
    header = ["model", "uopcli evaluate", "onnxruntime", "evaluate / onnxruntime", "same values",
              "differentiate", "export", "session", "grad.onnx"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), "| " + " | ".join(row) + " |"]
    return ("### The gradient of a ResNet-50-sized model\n\n"
            f"`bench/bench_onnx_gradient.py` (median of {repeats}, in turns): the gradient of sum(logits) with "
            "respect to every weight of bench_onnx_import.py's model, imported with `load_onnx`, evaluated by "
            "`evaluate_graph` and by onnxruntime on the exported gradient (weights as initializers, fed x "
            "alone). *differentiate* is wall time, *export* and *session* CPU time, one-off.\n\n" + "\n".join(lines))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,1,1,1 blocks, widths 8-64, 32x32: a smoke run")
    parser.add_argument("--image", type=int, help="input height and width (default 64; 32 with --quick)")
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    if args.image:
        config["image"] = args.image
    print(gradient_side_by_side(**config))


if __name__ == "__main__":
    main()
