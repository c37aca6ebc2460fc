"""One measurement, in a process of its own: `python bench/worker.py TASK '{json args}'`.

Each task prints one JSON object on its last line of stdout. A fresh process per
measurement keeps the two libraries' caches (both hash-cons their nodes) from helping
each other or a later repeat, and lets the parent read the whole process's peak memory.
Times are the best of `repeats` runs, each on a freshly built graph (new parameter names,
so no node of an earlier repeat is reused).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphs  # noqa: E402


def _finish(result: dict) -> None:
    """Print the result and leave without tearing down million-node graphs (not measured)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


# ----------------------------------------------------------------------------- gradients

def _timed(fn, *args):
    """Run fn(*args); return (its result, wall seconds, CPU seconds, user-mode CPU seconds)."""
    start, cpu, user = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    result = fn(*args)
    return (result, time.perf_counter() - start, time.process_time() - cpu,
            resource.getrusage(resource.RUSAGE_SELF).ru_utime - user)


def task_grad(lib: str, family: str, units: int, repeats: int = 1) -> dict:
    """compute_gradient of one family graph, in uopcli or tinygrad, timed alone."""
    builder = graphs.FAMILIES[family]
    times, cpu_times, user_times, nodes, grad_nodes = [], [], [], 0, 0
    for rep in range(repeats):
        if lib == "uopcli":
            from uopcli import toposort
            from uopcli.core.gradient import compute_gradient
            loss, targets = builder(graphs.fresh_uop_param(), units)
            nodes = len(toposort([loss]))
            root_grad = loss.const_like(1.0)
            grads, wall, cpu, user = _timed(compute_gradient, loss, root_grad, targets)
            if rep == 0:
                grad_nodes = len(toposort([grads[t] for t in targets]))
        else:
            from tinygrad.mixin.gradient import compute_gradient
            loss, targets = builder(graphs.tinygrad_param_factory(offset=rep * 10_000_000), units)
            nodes = len(loss.toposort())
            root_grad = loss.const_like(1.0)
            grads, wall, cpu, user = _timed(compute_gradient, loss, root_grad, set(targets))
        times.append(wall)
        cpu_times.append(cpu)
        user_times.append(user)
        del grads, loss, targets, root_grad
        gc.collect()
        if lib == "uopcli":
            from uopcli.core.uop import sweep_intern_table
            sweep_intern_table()
    return {"seconds": min(times), "cpu_seconds": min(cpu_times), "user_seconds": min(user_times),
            "median_cpu_seconds": statistics.median(cpu_times), "median_user_seconds": statistics.median(user_times),
            "all_seconds": times, "all_cpu_seconds": cpu_times, "all_user_seconds": user_times,
            "nodes": nodes, "grad_nodes": grad_nodes}


def task_write_graph(family: str, units: int, path: str) -> dict:
    """Save a family graph (outputs: loss) for the CLI runs; report its node count and input names."""
    from uopcli import toposort
    from uopcli.formats.uop import save
    from uopcli.core.graph import Graph
    loss, targets = graphs.FAMILIES[family](graphs.uop_param, units)
    graph = Graph({"loss": loss})
    save(graph, path)
    return {"nodes": len(toposort([loss])), "wrt": [t.arg for t in targets], "bytes": os.path.getsize(path)}


# ----------------------------------------------------------------------------- files

def task_files(family: str, nodes: int, repeats: int = 3) -> dict:
    """load/save of one graph against bare msgpack on the same bytes (bench_files.measure)."""
    import bench_files
    return bench_files.measure(family, nodes, repeats)


# ----------------------------------------------------------------------------- evaluation
# The models and the hand-written numpy side are bench_eval.py's (the evaluator's own
# benchmark); here they run in processes of their own so whole-process memory can be read.

def task_eval_time(batch: int, width: int, layers: int, repeats: int = 3) -> dict:
    """Best evaluate time against the best numpy time, run in turns in one process (load
    from other processes then falls on both sides alike); checks both give the same arrays."""
    import bench_eval
    from uopcli.backends.numpy import evaluate
    arrays = bench_eval.mlp_arrays(batch, width, layers)
    outputs = bench_eval.mlp_gradient_graph(batch, width, layers)
    (ours, values), (theirs, refs) = bench_eval.best_times(
        [lambda: evaluate(outputs, arrays), lambda: bench_eval.numpy_mlp_gradient(arrays, layers)], repeats)
    same = bench_eval.same_gradients(values, refs)
    return {"seconds": ours, "numpy_seconds": theirs, "same": bool(same)}


def task_eval_whole(side: str, batch: int, width: int, layers: int) -> dict:
    """One whole process: inputs, (uopcli: graph and gradient,) one evaluation. The parent
    reads its wall time and peak RSS."""
    import bench_eval
    arrays = bench_eval.mlp_arrays(batch, width, layers)
    start = time.perf_counter()
    if side == "numpy":
        out = bench_eval.numpy_mlp_gradient(arrays, layers)
    else:
        from uopcli.backends.numpy import evaluate
        out = evaluate(bench_eval.mlp_gradient_graph(batch, width, layers), arrays)
    return {"seconds": time.perf_counter() - start, "outputs": len(out)}


def task_conv_eval(batch: int, channels: int, size: int, repeats: int = 5) -> dict:
    """The conv net's weight gradients: evaluate against hand-written numpy, times in turns,
    then each side's peak under tracemalloc; checks both give the same arrays."""
    import bench_eval
    from uopcli.backends.numpy import evaluate
    arrays = bench_eval.conv_arrays(batch, channels, size)
    outputs = bench_eval.conv_gradient_graph(batch, channels, size)
    (ours, values), (theirs, refs) = bench_eval.best_times(
        [lambda: evaluate(outputs, arrays), lambda: bench_eval.numpy_conv_gradient(arrays)], repeats)
    same = bench_eval.same_gradients(values, refs)
    del values, refs
    return {"seconds": ours, "numpy_seconds": theirs, "same": bool(same),
            "peak": bench_eval.traced_peak(lambda: evaluate(outputs, arrays)),
            "numpy_peak": bench_eval.traced_peak(lambda: bench_eval.numpy_conv_gradient(arrays))}


def task_compiled(quick: bool = False) -> dict:
    """One graph evaluated many times: compiled once against evaluate_graph per call."""
    import bench_eval
    return {"rows": bench_eval.compiled_results(quick)}


def task_matmul(n: int, k: int, m: int, repeats: int = 5) -> dict:
    """A (n,k) @ (k,m) product as uopcli builds it (RESHAPE/EXPAND/MUL/REDUCE ADD) against np.matmul."""
    import numpy as np
    import bench_eval
    from uopcli import UOp
    from uopcli.backends.numpy import evaluate
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, m), dtype=np.float32)
    product = UOp.param("a", (n, k)) @ UOp.param("b", (k, m))
    (ours, (value,)), (theirs, ref) = bench_eval.best_times(
        [lambda: evaluate([product], {"a": a, "b": b}), lambda: np.matmul(a, b)], repeats)
    return {"seconds": ours, "numpy_seconds": theirs, "same": bool(np.allclose(value, ref, rtol=1e-3, atol=1e-3))}


# ----------------------------------------------------------------------------- agreement

def _input_value(name: str, shape: tuple):
    """The seeded random value of input `name`: the same in every process and library."""
    import zlib
    import numpy as np
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def task_agree(family: str, units: int, workdir: str, uopgrad: str) -> dict:
    """The same model's gradients from tinygrad (Tensor.gradient, realized on its DEV=PYTHON
    interpreter, which needs no compiler) and from the installed `uopgrad` (diff, then eval
    on the same inputs): the largest difference relative to each gradient's largest value."""
    import subprocess
    import numpy as np
    from tinygrad import Tensor
    work = os.path.join(workdir, f"agree_{family}")
    os.makedirs(work, exist_ok=True)
    model, grad, inputs, ours_npz = (os.path.join(work, n) for n in ("model.uop", "grad.uop", "inputs.npz", "ours.npz"))
    info = task_write_graph(family, units, model)
    values = {}

    def tiny_param(name: str, shape: tuple):
        values[name] = _input_value(name, shape)
        return Tensor(values[name])
    loss, targets = graphs.FAMILIES[family](tiny_param, units)
    theirs = [g.numpy() for g in loss.gradient(*targets)]
    np.savez(inputs, **values)
    subprocess.run([uopgrad, "diff", model, "--wrt", ",".join(info["wrt"]), "-o", grad, "--quiet"], check=True)
    subprocess.run([uopgrad, "eval", grad, *(f"-i{name}={inputs}" for name in values), "-o", ours_npz, "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    with np.load(ours_npz) as ours:
        worst = max(float(np.abs(ours[f"grad_{name}"] - ref).max() / max(float(np.abs(ref).max()), 1e-30))
                    for name, ref in zip(info["wrt"], theirs))
    return {"nodes": info["nodes"], "targets": len(info["wrt"]), "worst": worst}


# ----------------------------------------------------------------------------- main

TASKS = {"grad": task_grad, "write_graph": task_write_graph, "files": task_files,
         "eval_time": task_eval_time, "eval_whole": task_eval_whole, "matmul": task_matmul, "conv_eval": task_conv_eval,
         "compiled": task_compiled,
         "agree": task_agree}

if __name__ == "__main__":
    task, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    _finish(TASKS[task](**args))
