"""Forward mode: sizes and speed of jvp and hvp graphs against the reverse-mode peers, on
the bench families (chain, MLP, attention) at 10^4 and 10^5 forward nodes. Writes
bench/RESULTS-forward.md.

    python bench/bench_forward.py             # measure, write bench/RESULTS-forward.md
    python bench/bench_forward.py --quick --no-write

Targets (issue 33), each a ratio measured in this run:
- size: the JVP graph (`uopgrad jvp --simplify`) has at most 3x the forward graph's nodes,
  and fewer than the double-VJP route (`diff --cotangent input` twice: J v as the gradient,
  with respect to the cotangent u, of <J^T u, v>, simplified the same way). The output is
  the family's last activation before the sum (non-scalar: for a scalar loss J v is just
  <grad, v>, and the double-VJP route has no u);
- writing: `uopgrad hvp` (the whole process: read, build, write; its CPU time) takes at most 2x the time
  `uopgrad diff` takes for the gradient of the same loss with respect to the same inputs;
- evaluating: the HVP graph evaluates in at most 3x the gradient graph's time (in process,
  `evaluate_graph` as written, the same inputs, best of the repeats).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS-forward.md"
UOPGRAD = str(Path(sys.executable).parent / "uopgrad")
sys.path.insert(0, str(HERE))

from graphs import FAMILIES, size_for, uop_param  # noqa: E402

from uopcli import Graph, evaluate_graph, save  # noqa: E402
from uopcli.core.ops import Ops  # noqa: E402
from uopcli.core.simplify import simplify  # noqa: E402
from uopcli.core.uop import sweep_intern_table  # noqa: E402
from uopcli.core.walks import no_gc  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402
from uopcli.tools.forward import hvp, jvp  # noqa: E402
from uopcli.tools.values import gather_inputs  # noqa: E402

SIZE_LIMIT, WRITE_LIMIT, EVAL_LIMIT = 3.0, 2.0, 3.0


def _family(family: str, nodes: int):
    with no_gc():
        loss, targets = FAMILIES[family](uop_param, size_for(family, nodes))
    activation = loss
    while activation.op in (Ops.RESHAPE, Ops.REDUCE, Ops.CAST):  # the sum's argument
        activation = activation.src[0]
    return loss, activation, [t.arg for t in targets]


def sizes(family: str, nodes: int) -> dict:
    loss, activation, wrt = _family(family, nodes)
    forward = Graph({"y": activation})
    raw_jvp = jvp(forward, wrt)
    first, _ = differentiate(forward, wrt, cotangent="input")            # J^T u, u = cotangent_y
    second, _ = differentiate(first, ["cotangent_y"], [f"grad_{n}" for n in wrt], cotangent="input")  # d<J^T u, v>/du
    return {"forward": len(forward), "jvp": len(simplify(raw_jvp)), "double_vjp": len(simplify(second)),
            "jvp_raw": len(raw_jvp), "double_vjp_raw": len(second)}


def _process_cpu(command: list[str]) -> tuple[float, dict]:
    """The CPU seconds (user + system) of the whole process, and its steps' CPU seconds as
    its --stats table gives them ({"reading": s, "differentiating": s, "encoding": s, ...}):
    on a shared machine the wall time says more about the neighbours than the command."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*command, "--stats"], check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    steps = {}
    for line in done.stderr.splitlines():  # `reading   0.181 s   0.180 s`: wall, CPU
        parts = line.split()
        if len(parts) == 5 and parts[2] == parts[4] == "s":
            steps[parts[0]] = float(parts[3])
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, steps


def _best_cpu(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def speeds(family: str, nodes: int, repeats: int, folder: str) -> dict:
    loss, _, wrt = _family(family, nodes)
    model = os.path.join(folder, f"{family}-{nodes}.uop")
    save(Graph({"loss": loss}), model)
    names = ",".join(wrt)
    out = os.path.join(folder, "out.uop")
    best_diff = best_hvp = (float("inf"), {})
    for _ in range(repeats):   # in turns: the machine's load falls on both alike; the best run and its steps
        best_diff = min(best_diff, _process_cpu([UOPGRAD, "diff", model, "--wrt", names, "-o", out]), key=_first)
        best_hvp = min(best_hvp, _process_cpu([UOPGRAD, "hvp", model, "--wrt", names, "-o", out]), key=_first)
    (diff_s, diff_steps), (hvp_s, hvp_steps) = best_diff, best_hvp
    forward = Graph({"loss": loss})
    split = _hvp_split(forward, wrt, repeats)  # first: the nodes it makes must not exist yet
    gradient, _ = differentiate(forward, wrt)
    products = hvp(forward, wrt)
    inputs = gather_inputs(products.inputs, (), 0)
    grad_inputs = {k: v for k, v in inputs.items() if k in set(gradient.input_names)}
    grad_eval = hvp_eval = float("inf")
    for _ in range(repeats):
        grad_eval = min(grad_eval, _best_cpu(lambda: evaluate_graph(gradient, grad_inputs), 1))
        hvp_eval = min(hvp_eval, _best_cpu(lambda: evaluate_graph(products, inputs), 1))
    sweep_intern_table()
    return {"diff_s": diff_s, "hvp_s": hvp_s, "grad_eval": grad_eval, "hvp_eval": hvp_eval,
            "grad_nodes": len(gradient), "hvp_nodes": len(products), "forward_nodes": len(forward),
            "diff_steps": diff_steps, "hvp_steps": hvp_steps, **split}


def _first(pair):
    return pair[0]


def _hvp_split(forward: Graph, wrt: list[str], repeats: int) -> dict:
    """hvp's differentiating step in its two walks, in process (CPU, best of the repeats):
    the gradient (reverse mode, as diff's) and the JVP over the gradient graph. Each repeat
    makes its nodes anew (the last one's are swept first): finding them hash-consed
    would time look-ups, not the walks."""
    from uopcli.core.forward import compute_jvp
    from uopcli.tools.forward import _gradients, _tangent_inputs
    targets, params = _tangent_inputs(forward, wrt)
    gradient_s = jvp_s = float("inf")
    for _ in range(repeats):
        sweep_intern_table()
        with no_gc():
            start = time.process_time()
            grads, _ = _gradients(forward, "loss", targets, None)
            middle = time.process_time()
            compute_jvp(grads, dict(zip(targets, params)))
            gradient_s, jvp_s = min(gradient_s, middle - start), min(jvp_s, time.process_time() - middle)
        del grads
    sweep_intern_table()
    return {"gradient_s": gradient_s, "jvp_s": jvp_s}


def _step_row(family: str, nodes: int, p: dict) -> str:
    d, h = p["diff_steps"], p["hvp_steps"]
    made_by_gradient = p["grad_nodes"] - p["forward_nodes"]
    made_by_jvp = p["hvp_nodes"] - p["grad_nodes"]
    return (f"| {family} | {nodes:,} | {_t(d.get('reading', 0))} | {_t(d.get('differentiating', 0))} | "
            f"{_t(d.get('encoding', 0))} | {_t(h.get('reading', 0))} | {_t(p['gradient_s'])} | {_t(p['jvp_s'])} | "
            f"{_t(h.get('encoding', 0))} | {1e6 * p['gradient_s'] / max(made_by_gradient, 1):.2f} | "
            f"{1e6 * p['jvp_s'] / max(made_by_jvp, 1):.2f} |")


def _t(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _load(averages: tuple) -> str:
    return " / ".join(f"{a:.2f}" for a in averages) + " over 1 / 5 / 15 min"


def _mark(ratio: float, limit: float) -> str:
    return f"{ratio:.2f}× {'✓' if ratio <= limit else '✗'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^3 and 10^4 nodes, one repeat")
    parser.add_argument("--no-write", action="store_true", help="print the results instead of writing them")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (best of)")
    args = parser.parse_args()
    node_counts = (1_000, 10_000) if args.quick else (10_000, 100_000)
    repeats = 1 if args.quick else args.repeats
    size_rows, speed_rows, step_rows, met = [], [], [], True
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        for family in FAMILIES:
            for nodes in node_counts:
                print(f"forward mode: {family} at {nodes:,} forward nodes", file=sys.stderr, flush=True)
                s = sizes(family, nodes)
                ratio = s["jvp"] / s["forward"]
                fewer = s["jvp"] < s["double_vjp"]
                met &= ratio <= SIZE_LIMIT and fewer
                size_rows.append(f"| {family} | {s['forward']:,} | {s['jvp']:,} | {_mark(ratio, SIZE_LIMIT)} | "
                                 f"{s['double_vjp']:,} | {s['jvp'] / s['double_vjp']:.2f}× {'✓' if fewer else '✗'} | "
                                 f"{s['jvp_raw']:,} | {s['double_vjp_raw']:,} | {s['jvp_raw'] / s['double_vjp_raw']:.2f}× |")
                sweep_intern_table()
                p = speeds(family, nodes, repeats, folder)
                write, run = p["hvp_s"] / p["diff_s"], p["hvp_eval"] / p["grad_eval"]
                met &= write <= WRITE_LIMIT and run <= EVAL_LIMIT
                speed_rows.append(f"| {family} | {nodes:,} | {p['grad_nodes']:,} | {p['hvp_nodes']:,} | "
                                  f"{_t(p['diff_s'])} | {_t(p['hvp_s'])} | {_mark(write, WRITE_LIMIT)} | "
                                  f"{_t(p['grad_eval'])} | {_t(p['hvp_eval'])} | {_mark(run, EVAL_LIMIT)} |")
                step_rows.append(_step_row(family, nodes, p))
    text = "\n".join([
        "# Forward mode (bench/bench_forward.py)", "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores, shared "
        f"(load average {_load(load_before)} at the start, {_load(os.getloadavg())} at the end). "
        f"All targets met: {'yes' if met else 'NO'}.", "",
        "## Sizes: the JVP graph against the forward graph and the double-VJP route", "",
        "Forward graph: the family's last activation (before its sum), as a non-scalar output; "
        "JVP: `jvp --wrt <every parameter> --simplify`; double VJP: `diff --cotangent input` of it, "
        "then `diff --wrt cotangent_y --of grad_* --cotangent input` (J v = d<J^T u, v>/du), simplified. "
        f"Targets: JVP ≤ {SIZE_LIMIT:g}× forward, and fewer nodes than the double VJP.", "",
        "| family | forward nodes | JVP nodes (simplified) | JVP / forward | double-VJP nodes (simplified) | "
        "JVP / double VJP | JVP as written | double VJP as written | ratio as written |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *size_rows, "",
        "## Speed: writing and evaluating an HVP against the gradient", "",
        "Writing: whole `uopgrad diff` and `uopgrad hvp` processes on the scalar loss, every parameter, best "
        f"of {repeats} (CPU time of the process, user + system, in turns). Evaluating: `evaluate_graph` as written, in process, CPU, best of {repeats}. "
        f"Targets: hvp ≤ {WRITE_LIMIT:g}× diff to write, ≤ {EVAL_LIMIT:g}× the gradient to evaluate.", "",
        "| family | forward nodes | gradient nodes | HVP nodes | diff | hvp | hvp / diff | eval gradient | eval HVP | "
        "HVP / gradient |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *speed_rows, "",
        "## Where writing an HVP spends its time", "",
        "The steps of the best runs above (their --stats, CPU), and hvp's differentiating step split, in "
        "process, into its gradient (the same walk as diff's) and its JVP over the gradient graph. The HVP "
        "file has twice the gradient file's nodes (forward, gradient and one tangent node per gradient-graph "
        "node, roughly), so with every step's cost per node equal the ratio is "
        "(read + gradient + JVP + 2 encode) / (read + gradient + encode): under 2× only where the JVP costs "
        "less than read + gradient. Per node made: nodes each walk makes, and its µs per node made.", "",
        "| family | forward nodes | diff: read | gradient | encode | hvp: read | gradient | JVP | encode | "
        "gradient µs/node made | JVP µs/node made |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *step_rows, ""])
    if args.no_write:
        print(text)
    else:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
