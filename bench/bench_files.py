"""Reading and writing .uop files against bare MessagePack on the same bytes.

    .venv/bin/python bench/bench_files.py [--quick] [--family chain|mlp|attention] [--repeats N]

For each size (10^3 .. 10^6 nodes; --quick stops at 10^5) it builds a graph with the
public API, writes it once (`save`), then times, best of N runs each, in CPU seconds of
this process (wall-clock seconds are shown too):

    load       uopcli.load(bytes)                      what a reader pays for a Graph
    unpackb    msgpack.unpackb(bytes)                  bare parsing, the cyclic GC left as it is
    unpackb*   msgpack.unpackb(bytes) with GC paused   bare parsing at its fastest
    save       uopcli.save(graph)                      canonical bytes from a Graph
    packb      msgpack.packb(the unpacked document)    bare encoding of the same structure

and prints nodes/s and the ratios load/unpackb, load/unpackb*, save/packb. The issue's
targets at 10^6 nodes: load <= 3x unpackb, save <= 5x packb, each <= 5 s. Every run
also checks that save(load(bytes)) gives the same bytes back.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import msgpack  # noqa: E402

from uopcli import Graph, UOp, load, save  # noqa: E402
from uopcli.core.uop import sweep_intern_table  # noqa: E402
from uopcli.core.walks import no_gc



def chain(nodes: int) -> UOp:
    """y = sin(y * 1.0001 + 0.5) repeated: three new nodes a step, one long dependency chain."""
    x = UOp.param("x", (8,))
    y = x
    for _ in range(max(1, nodes // 3)):
        y = (y * 1.0001 + 0.5).sin()
    return y.sum()


def mlp(nodes: int) -> UOp:
    """relu(h @ w_i + b_i) layers of width 8 (matmuls, reshapes, expands, reduces, wheres)."""
    h = UOp.param("x", (4, 8))
    per_layer = 14
    for i in range(max(1, nodes // per_layer)):
        h = (h @ UOp.param(f"w{i}", (8, 8)) + UOp.param(f"b{i}", (8,))).relu()
    return h.sum()


FAMILIES = {"chain": chain, "mlp": mlp}


def best(fn, repeats: int, pause_gc: bool = False, before=gc.collect):
    """Best of `repeats` runs as (CPU seconds, wall seconds, last result). CPU time (this
    process only) is what the ratios use: it stays meaningful when other jobs share the
    machine, where wall time swings by 2x or more."""
    cpu, wall, out = runs(fn, repeats, pause_gc, before)
    return min(cpu), min(wall), out


def runs(fn, repeats: int, pause_gc: bool = False, before=gc.collect):
    """Every run's CPU and wall seconds (two lists) and the last result."""
    cpu, wall, out = [], [], None
    for _ in range(repeats):
        out = None
        before()
        if pause_gc:
            gc.disable()
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
        gc.enable()
    return cpu, wall, out


def fresh_table():
    gc.collect()
    sweep_intern_table()  # every load builds every node anew, as in a fresh process


def measure(family: str, nodes: int, repeats: int) -> dict:
    with no_gc():
        graph = Graph({"loss": FAMILIES[family](nodes)})
    data = save(graph)
    graph = None
    fresh_table()
    unpack, _, doc = best(lambda: msgpack.unpackb(data), repeats)
    unpack_nogc, _, _ = best(lambda: msgpack.unpackb(data), repeats, pause_gc=True)
    pack, _, _ = best(lambda: msgpack.packb(doc), repeats)
    count = len(doc["nodes"])
    doc = None
    load_cpu, load_wall, loaded = runs(lambda: load(data), repeats, before=fresh_table)
    save_cpu, save_wall, again = runs(lambda: save(loaded), repeats)
    return {"family": family, "nodes": count, "bytes": len(data), "load": min(load_cpu), "save": min(save_cpu),
            "load_median": statistics.median(load_cpu), "save_median": statistics.median(save_cpu),
            "load_wall": min(load_wall), "save_wall": min(save_wall), "unpackb": unpack, "unpackb_nogc": unpack_nogc,
            "packb": pack, "identical": again == data}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 10^5 nodes, 2 repeats")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="chain")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    sizes = [10 ** 3, 10 ** 4, 10 ** 5] + ([] if args.quick else [10 ** 6])
    repeats = args.repeats or (2 if args.quick else 3)
    print(f"# .uop files vs bare msgpack ({args.family} graphs, best of {repeats}, CPU seconds; "
          f"unpackb* = with the cyclic GC paused; wall = wall-clock seconds)")
    header = ("nodes", "MB", "load s", "load nodes/s", "save s", "save nodes/s",
              "load/unpackb", "load/unpackb*", "save/packb", "load wall", "save wall", "same bytes")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ok = True
    for size in sizes:
        r = measure(args.family, size, repeats)
        ok &= r["identical"]
        print(f"| {r['nodes']:,} | {r['bytes'] / 1e6:.1f} | {r['load']:.3f} | {r['nodes'] / r['load']:,.0f} | "
              f"{r['save']:.3f} | {r['nodes'] / r['save']:,.0f} | {r['load'] / r['unpackb']:.2f} | "
              f"{r['load'] / r['unpackb_nogc']:.2f} | {r['save'] / r['packb']:.2f} | "
              f"{r['load_wall']:.3f} | {r['save_wall']:.3f} | {'yes' if r['identical'] else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
