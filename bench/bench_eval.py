"""The numpy evaluator against plain numpy, side by side, in one run.

    .venv/bin/python bench/bench_eval.py            # full sizes (a minute or two)
    .venv/bin/python bench/bench_eval.py --quick    # small sizes, a few seconds

Rows:
- matmul: a (n,k) @ (k,m) product as uopcli builds it (RESHAPE/EXPAND/MUL/REDUCE ADD)
  against np.matmul on the same arrays (target: within 1.3x);
- MLP gradient: the gradient of sum(relu(... relu(x @ W0 + b0) ... @ W + b)) for every
  weight and bias (compute_gradient), evaluated, against a hand-written numpy forward and
  backward (target: within 1.1x of its time and 1.5x of its peak memory). Peak memory is
  what tracemalloc sees numpy allocate during the call (inputs excluded), plus the
  evaluator's own EvalStats.peak_bytes;
- conv net gradient: the weight gradients of two 3x3 convolutions with ReLUs against
  hand-written im2col numpy (no target: conv2d's windows are movement ops, run as strided
  views, and their gradient as strided scatter-adds; see uopcli/backends/numpy/strided.py);
- chain: a long scalar chain, per-node cost of the interpreter (compile + run).
Times are medians of repeats run in turns; prints a markdown table.

A second table: one graph evaluated many times, per call, compiled once
(`compile_graph(graph)(inputs)`) against `evaluate_graph(graph, inputs)`, which compiles on
every call: the repro's 150k-node elementwise chain and a sample model's gradient. Both
give the same bits (checked).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uopcli import Graph, UOp, differentiate, dtypes, load  # noqa: E402
from uopcli.backends.numpy import EvalStats, compile_graph, evaluate, evaluate_graph  # noqa: E402
from uopcli.core.walks import no_gc  # noqa: E402


def times_in_turns(fns, repeats: int) -> list[tuple[float, float, object]]:
    """Median wall time and median CPU time (this process, all threads) of each function,
    run in turns (ours, theirs, ours, ...) so that load from other processes falls on both
    sides alike. On a busy machine CPU time is the steadier of the two."""
    walls, cpus = [[] for _ in fns], [[] for _ in fns]
    outs = [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            outs[i] = None
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            outs[i] = fn()
            cpus[i].append(time.process_time() - cpu)
            walls[i].append(time.perf_counter() - wall)
    return [(statistics.median(w), statistics.median(c), out) for w, c, out in zip(walls, cpus, outs)]


def best_times(fns, repeats: int) -> list[tuple[float, object]]:
    """(median wall seconds, last output) per function, run in turns (bench/worker.py uses this)."""
    return [(wall, out) for wall, _, out in times_in_turns(fns, repeats)]


def time_cells(ours: tuple, theirs: tuple) -> list[str]:
    return [f"{ours[0] * 1e3:.1f} ms (cpu {ours[1] * 1e3:.1f})", f"{theirs[0] * 1e3:.1f} ms (cpu {theirs[1] * 1e3:.1f})",
            f"{ours[0] / theirs[0]:.2f}x (cpu {ours[1] / theirs[1]:.2f}x)"]


def same_gradients(values, refs) -> bool:
    """Our arrays and numpy's agree to float32 rounding (1e-3 of each gradient's scale)."""
    return all(np.allclose(v, r, rtol=1e-3, atol=1e-3 * float(np.abs(r).max() + 1)) for v, r in zip(values, refs))


def traced_peak(fn) -> int:
    """Peak bytes allocated while fn runs (numpy reports its array memory to tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ----------------------------------------------------------------------------- matmul

def bench_matmul(n: int, k: int, m: int, repeats: int) -> list:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, m), dtype=np.float32)
    product = UOp.param("a", (n, k)) @ UOp.param("b", (k, m))
    ours, theirs = times_in_turns([lambda: evaluate([product], {"a": a, "b": b}), lambda: np.matmul(a, b)], repeats)
    assert np.allclose(ours[2][0], theirs[2], rtol=1e-3, atol=1e-3)
    return [f"matmul {n}x{k} @ {k}x{m}", *time_cells(ours, theirs), "", "", "", "≤ 1.3x time"]


# ----------------------------------------------------------------------------- MLP gradient

def mlp_arrays(batch: int, width: int, layers: int) -> dict:
    rng = np.random.default_rng(0)
    scale = np.float32(1.0 / np.sqrt(width))
    arrays = {"x": rng.standard_normal((batch, width), dtype=np.float32)}
    for i in range(layers):
        arrays[f"w{i}"] = rng.standard_normal((width, width), dtype=np.float32) * scale
        arrays[f"b{i}"] = rng.standard_normal((width,), dtype=np.float32) * np.float32(0.1)
    return arrays


def mlp_gradient_graph(batch: int, width: int, layers: int) -> list:
    """[dW0, db0, dW1, ...] of sum(relu(... relu(x @ W0 + b0) ...)) as UOps."""
    from uopcli.core.gradient import compute_gradient
    h = UOp.param("x", (batch, width))
    targets = []
    for i in range(layers):
        w, b = UOp.param(f"w{i}", (width, width)), UOp.param(f"b{i}", (width,))
        h = (h @ w + b).relu()
        targets += [w, b]
    loss = h.sum()
    grads = compute_gradient(loss, loss.const_like(1.0), targets)
    return [grads[t] for t in targets]


def numpy_mlp_gradient(arrays: dict, layers: int) -> list:
    """The same gradient written by hand, as a careful numpy user would (in-place where safe)."""
    acts, h = [], arrays["x"]
    for i in range(layers):
        z = h @ arrays[f"w{i}"]
        z += arrays[f"b{i}"]
        acts.append(h)
        h = np.maximum(z, 0, out=z)
    grad = (h > 0).astype(np.float32)  # d sum(relu(z)) / dz
    del h
    grads = [None] * (2 * layers)
    for i in reversed(range(layers)):
        grads[2 * i] = acts[i].T @ grad
        grads[2 * i + 1] = grad.sum(0)
        if i:
            back = grad @ arrays[f"w{i}"].T
            back *= acts[i] > 0
            grad = back
        acts[i] = None
    return grads


def bench_mlp(batch: int, width: int, layers: int, repeats: int) -> list:
    arrays = mlp_arrays(batch, width, layers)
    outputs = mlp_gradient_graph(batch, width, layers)
    stats = EvalStats()
    ours, theirs = times_in_turns(
        [lambda: evaluate(outputs, arrays, stats=stats), lambda: numpy_mlp_gradient(arrays, layers)], repeats)
    assert same_gradients(ours[2], theirs[2])
    cells = time_cells(ours, theirs)
    del ours, theirs
    ours_peak = traced_peak(lambda: evaluate(outputs, arrays))
    theirs_peak = traced_peak(lambda: numpy_mlp_gradient(arrays, layers))
    mib = 1 << 20
    return [f"MLP gradient, batch {batch}, width {width}, {layers} layers",
            *cells,
            f"{ours_peak / mib:.0f} MiB (stats {stats.peak_bytes / mib:.0f})", f"{theirs_peak / mib:.0f} MiB",
            f"{ours_peak / theirs_peak:.2f}x", "≤ 1.1x time, ≤ 1.5x memory"]


# ----------------------------------------------------------------------------- conv net gradient

def conv_arrays(batch: int, channels: int, size: int) -> dict:
    rng = np.random.default_rng(0)
    scale = np.float32(1.0 / np.sqrt(9 * channels))
    return {"x": rng.standard_normal((batch, channels, size, size), dtype=np.float32),
            "w0": rng.standard_normal((channels, channels, 3, 3), dtype=np.float32) * scale,
            "w1": rng.standard_normal((channels, channels, 3, 3), dtype=np.float32) * scale}


def conv_gradient_graph(batch: int, channels: int, size: int) -> list:
    """[dW0, dW1] of sum(relu(conv(relu(conv(x, W0)), W1))), 3x3 convolutions with padding 1."""
    from uopcli.core.gradient import compute_gradient
    x = UOp.param("x", (batch, channels, size, size))
    w0, w1 = (UOp.param(f"w{i}", (channels, channels, 3, 3)) for i in range(2))
    loss = x.conv2d(w0, padding=1).relu().conv2d(w1, padding=1).relu().sum()
    grads = compute_gradient(loss, loss.const_like(1.0), [w0, w1])
    return [grads[w0], grads[w1]]


def _im2col(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N, C, 3, 3, H, W) windows of the zero-padded input, one copy."""
    from numpy.lib.stride_tricks import sliding_window_view
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return np.ascontiguousarray(sliding_window_view(padded, (3, 3), axis=(2, 3)).transpose(0, 1, 4, 5, 2, 3))


def _conv(cols: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(N, C, 3, 3, H, W) windows and (Cout, C, 3, 3) weights -> (N, Cout, H, W), by BLAS."""
    n, c, _, _, h, width = cols.shape
    out = np.matmul(w.reshape(w.shape[0], -1), cols.reshape(n, c * 9, h * width))
    return out.reshape(n, w.shape[0], h, width)


def numpy_conv_gradient(arrays: dict) -> list:
    """The same gradients written by hand with im2col, as a careful numpy user would."""
    x, w0, w1 = arrays["x"], arrays["w0"], arrays["w1"]
    n, c, h, width = x.shape
    cols0 = _im2col(x)
    h0 = _conv(cols0, w0)
    np.maximum(h0, 0, out=h0)
    cols1 = _im2col(h0)
    z1 = _conv(cols1, w1)
    g1 = (z1 > 0).astype(np.float32)                       # d sum(relu(z1)) / dz1
    del z1
    dw1 = np.tensordot(g1, cols1, axes=([0, 2, 3], [0, 4, 5]))
    del cols1
    dcols = np.matmul(w1.reshape(c, -1).T, g1.reshape(n, c, h * width)).reshape(n, c, 3, 3, h, width)
    del g1
    dh0 = np.zeros((n, c, h + 2, width + 2), np.float32)  # col2im: each window position adds back
    for i in range(3):
        for j in range(3):
            dh0[:, :, i:i + h, j:j + width] += dcols[:, :, i, j]
    del dcols
    g0 = dh0[:, :, 1:-1, 1:-1] * (h0 > 0)
    dw0 = np.tensordot(g0, cols0, axes=([0, 2, 3], [0, 4, 5]))
    return [dw0, dw1]


def bench_conv(batch: int, channels: int, size: int, repeats: int) -> list:
    arrays = conv_arrays(batch, channels, size)
    outputs = conv_gradient_graph(batch, channels, size)
    ours, theirs = times_in_turns([lambda: evaluate(outputs, arrays), lambda: numpy_conv_gradient(arrays)], repeats)
    assert same_gradients(ours[2], theirs[2])
    cells = time_cells(ours, theirs)
    del ours, theirs
    ours_peak = traced_peak(lambda: evaluate(outputs, arrays))
    theirs_peak = traced_peak(lambda: numpy_conv_gradient(arrays))
    mib = 1 << 20
    return [f"conv net gradient, batch {batch}, {channels} channels, {size}x{size}", *cells,
            f"{ours_peak / mib:.0f} MiB", f"{theirs_peak / mib:.0f} MiB", f"{ours_peak / theirs_peak:.2f}x",
            "for reference (no target)"]


# ----------------------------------------------------------------------------- chain

def bench_chain(length: int) -> list:
    with no_gc():
        y = UOp.param("x", (), dtypes.float32)
        for i in range(length // 2):
            y = y * 1.0000001 + 0.25
    stats = EvalStats()
    start = time.perf_counter()
    evaluate([y], {"x": np.float32(1)})
    seconds = time.perf_counter() - start
    evaluate([y], {"x": np.float32(1)}, stats=stats)
    return [f"scalar chain, {stats.nodes_evaluated:,} nodes", f"{seconds:.2f} s",
            f"{seconds / stats.nodes_evaluated * 1e6:.2f} µs/node", "", "", "", "", "a few seconds"]


# ----------------------------------------------------------------------------- compile once, call many times

def repro_chain(steps: int) -> tuple:
    """The user's repro: h = sin(h * 1.0001 + 0.5), `steps` times, over a float32[4]; its sum."""
    with no_gc():
        x = UOp.param("x", (4,), dtypes.float32)
        h = x
        for _ in range(steps):
            h = (h * 1.0001 + 0.5).sin()
        graph = Graph({"y": h.sum()})
    return graph, [{"x": np.full(4, v, np.float32)} for v in (1.0, -0.5, 2.0)]


def sample_gradient(name: str) -> tuple:
    """The gradient of samples/<name>.uop in every float input, with the forward kept."""
    graph = load(Path(__file__).resolve().parent.parent / "samples" / f"{name}.uop")
    grad = differentiate(graph, [n.arg for n in graph.inputs if n.dtype.is_float], keep_forward=True)[0]
    rng = np.random.default_rng(0)
    calls = [{n.arg: rng.standard_normal(n.shape).astype(n.dtype.np) for n in grad.inputs} for _ in range(3)]
    return grad, calls


def bench_compiled(label: str, graph, calls: list, repeats: int) -> dict:
    """Per-call wall and CPU seconds of a program compiled once against evaluate_graph, over
    the same calls in turns, and whether every output has the same bits."""
    start = time.perf_counter()
    program = compile_graph(graph)
    compile_seconds = time.perf_counter() - start

    def compiled():
        return [program(inputs) for inputs in calls]

    def every_call():
        return [evaluate_graph(graph, inputs) for inputs in calls]

    ours, theirs = times_in_turns([compiled, every_call], repeats)
    same = all(a[k].tobytes() == b[k].tobytes() for a, b in zip(ours[2], theirs[2]) for k in a)
    return {"label": label, "nodes": len(graph), "compile": compile_seconds, "same": bool(same),
            "ours": [ours[0] / len(calls), ours[1] / len(calls)], "theirs": [theirs[0] / len(calls), theirs[1] / len(calls)]}


def compiled_results(quick: bool) -> list[dict]:
    """The compile-once rows: the repro's chain (150k nodes; 6k with `quick`) and two
    sample models' gradients."""
    steps, repeats = (2_000, 2) if quick else (50_000, 3)
    return [bench_compiled("repro chain sin(h * 1.0001 + 0.5)", *repro_chain(steps), repeats),
            bench_compiled("gradient of samples/mlp.uop", *sample_gradient("mlp"), 5 * repeats),
            bench_compiled("gradient of samples/gpt.uop", *sample_gradient("gpt"), 5 * repeats)]


COMPILED_HEADER = ["graph", "compile once", "per call, compiled", "per call, evaluate_graph", "ratio", "same bits"]


def compiled_row(result: dict) -> list[str]:
    return [f"{result['label']}, {result['nodes']:,} nodes", f"{result['compile'] * 1e3:.0f} ms",
            *time_cells(result["ours"], result["theirs"]), "yes" if result["same"] else "NO"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    parser.add_argument("--compiled-only", action="store_true", help="only the compile-once table")
    args = parser.parse_args(argv)
    if not args.compiled_only:
        main_table(args.quick)
    compiled_table(args.quick)


def main_table(quick: bool) -> None:
    if quick:
        rows = [bench_matmul(128, 256, 256, 3), bench_mlp(128, 256, 3, 2), bench_conv(2, 4, 8, 2),
                bench_chain(100_000)]
    else:
        rows = [bench_matmul(512, 1024, 1024, 15), bench_mlp(256, 1024, 4, 7), bench_mlp(1024, 2048, 4, 5),
                bench_conv(32, 32, 32, 5), bench_chain(1_000_000)]
    header = ["case", "uopcli evaluate", "numpy", "time ratio", "uopcli peak", "numpy peak", "memory ratio",
              "target"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def compiled_table(quick: bool) -> None:
    print()
    print("| " + " | ".join(COMPILED_HEADER) + " |")
    print("|" + "---|" * len(COMPILED_HEADER))
    for result in compiled_results(quick):
        print("| " + " | ".join(compiled_row(result)) + " |")


if __name__ == "__main__":
    main()
