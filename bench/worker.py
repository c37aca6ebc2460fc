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

def task_grad(lib: str, family: str, units: int, repeats: int = 1) -> dict:
    """compute_gradient of one family graph, in uopcli or tinygrad, timed alone."""
    builder = graphs.FAMILIES[family]
    times, nodes, grad_nodes = [], 0, 0
    for rep in range(repeats):
        if lib == "uopcli":
            from uopcli import toposort
            from uopcli.gradient import compute_gradient
            loss, targets = builder(graphs.fresh_uop_param(), units)
            nodes = len(toposort([loss]))
            root_grad = loss.const_like(1.0)
            start = time.perf_counter()
            grads = compute_gradient(loss, root_grad, targets)
            times.append(time.perf_counter() - start)
            if rep == 0:
                grad_nodes = len(toposort([grads[t] for t in targets]))
        else:
            from tinygrad.mixin.gradient import compute_gradient
            loss, targets = builder(graphs.tinygrad_param_factory(offset=rep * 10_000_000), units)
            nodes = len(loss.toposort())
            root_grad = loss.const_like(1.0)
            start = time.perf_counter()
            grads = compute_gradient(loss, root_grad, set(targets))
            times.append(time.perf_counter() - start)
        del grads, loss, targets, root_grad
        gc.collect()
        if lib == "uopcli":
            from uopcli.uop import sweep_intern_table
            sweep_intern_table()
    return {"seconds": min(times), "all_seconds": times, "nodes": nodes, "grad_nodes": grad_nodes}


def task_write_graph(family: str, units: int, path: str) -> dict:
    """Save a family graph (outputs: loss) for the CLI runs; report its node count and input names."""
    from uopcli import toposort
    from uopcli.fileformat import save
    from uopcli.graph import Graph
    loss, targets = graphs.FAMILIES[family](graphs.uop_param, units)
    graph = Graph({"loss": loss})
    save(graph, path)
    return {"nodes": len(toposort([loss])), "wrt": [t.arg for t in targets], "bytes": os.path.getsize(path)}


# ----------------------------------------------------------------------------- files

def task_files(family: str, units: int, repeats: int = 3) -> dict:
    """load/save of one graph against bare msgpack.unpackb/packb on the same bytes."""
    import msgpack
    from uopcli.fileformat import load, save
    from uopcli.graph import Graph
    from uopcli.uop import sweep_intern_table

    loss, _ = graphs.FAMILIES[family](graphs.uop_param, units)
    data = save(Graph({"loss": loss}))
    del loss
    gc.collect()
    sweep_intern_table()  # nothing of the built graph may help the loads below

    def best(fn, *args):
        out, times = None, []
        for _ in range(repeats):
            out = None
            gc.collect()
            start = time.perf_counter()
            out = fn(*args)
            times.append(time.perf_counter() - start)
        return min(times), out

    unpack_s, obj = best(lambda b: msgpack.unpackb(b, raw=False, strict_map_key=False), data)
    pack_s, _ = best(msgpack.packb, obj)
    load_times = []
    graph = None
    for _ in range(repeats):
        graph = None
        gc.collect()
        sweep_intern_table()
        start = time.perf_counter()
        graph = load(data)
        load_times.append(time.perf_counter() - start)
    save_s, again = best(save, graph)
    nodes = len(graph.nodes())
    return {"nodes": nodes, "bytes": len(data), "load": min(load_times), "save": save_s,
            "unpackb": unpack_s, "packb": pack_s, "identical": again == data}


# ----------------------------------------------------------------------------- evaluation

def _mlp_arrays(batch: int, width: int, layers: int) -> dict:
    import numpy as np
    rng = np.random.default_rng(0)
    scale = np.float32(1.0 / np.sqrt(width))
    arrays = {"x": rng.standard_normal((batch, width), dtype=np.float32)}
    for i in range(layers):
        arrays[f"w{i}"] = rng.standard_normal((width, width), dtype=np.float32) * scale
        arrays[f"b{i}"] = rng.standard_normal((width,), dtype=np.float32) * np.float32(0.1)
    return arrays


def task_eval(side: str, batch: int, width: int, layers: int, repeats: int = 1) -> dict:
    """The MLP's gradient (every weight and bias) evaluated by uopcli, or by hand in numpy."""
    arrays = _mlp_arrays(batch, width, layers)
    if side == "numpy":
        run = lambda: _numpy_mlp_grad(arrays, layers)  # noqa: E731
    else:
        run = _uopcli_mlp_grad(arrays, batch, width, layers)
    times, out = [], None
    for _ in range(repeats):
        out = None
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    checksum = float(sum(float(abs(a).sum()) for a in out))
    return {"seconds": min(times), "all_seconds": times, "checksum": checksum, "outputs": len(out)}


def _numpy_mlp_grad(arrays: dict, layers: int) -> list:
    """Hand-written forward and backward of sum(relu(...relu(x @ W0 + b0)... @ W + b))."""
    import numpy as np
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


def _uopcli_mlp_grad(arrays: dict, batch: int, width: int, layers: int):
    from uopcli.evaluate import evaluate
    from uopcli.gradient import compute_gradient
    loss, targets = graphs.mlp(graphs.uop_param, layers, width=width, batch=batch)
    grads = compute_gradient(loss, loss.const_like(1.0), targets)
    outputs = [grads[t] for t in targets]
    return lambda: evaluate(outputs, arrays)


def task_matmul(n: int, k: int, m: int, repeats: int = 5) -> dict:
    """A (n,k) @ (k,m) product as uopcli builds it (RESHAPE/EXPAND/MUL/REDUCE ADD) against np.matmul."""
    import numpy as np
    from uopcli import UOp
    from uopcli.evaluate import evaluate
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, m), dtype=np.float32)
    product = UOp.param("a", (n, k)) @ UOp.param("b", (k, m))
    ops = sorted({u.op for u in product.toposort()})

    def best(fn):
        times, out = [], None
        for _ in range(repeats):
            out = None
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return min(times), out

    ours_s, (ours,) = best(lambda: evaluate([product], {"a": a, "b": b}))
    numpy_s, ref = best(lambda: np.matmul(a, b))
    close = bool(np.allclose(ours, ref, rtol=1e-3, atol=1e-3))
    return {"seconds": ours_s, "numpy_seconds": numpy_s, "ops": ops, "close": close}


# ----------------------------------------------------------------------------- main

TASKS = {"grad": task_grad, "write_graph": task_write_graph, "files": task_files, "eval": task_eval,
         "matmul": task_matmul}

if __name__ == "__main__":
    task, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    _finish(TASKS[task](**args))
