"""Simplification: node counts, evaluation time, and the cost of simplifying a 10^6-node
gradient graph against the cost of making it. Writes section 7 of bench/RESULTS.md.

    python bench/bench_simplify.py            # measure, then update bench/RESULTS.md
    python bench/bench_simplify.py --no-write # print the section instead

For every sample and every bench family: the gradient graph (`diff --wrt` every float
input, or every parameter), its node count as written, after the exact rows
(`simplify --exact`) and after both tables (`simplify`), and the best in-process
evaluation time as written and simplified (same inputs). Then the cost of simplifying
against the cost of differentiating (the 10^6-node chain gradient, the MLP and attention
families at 10^5 forward nodes): CPU seconds, in turns, best of the rounds.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## 7. Simplification"
sys.path.insert(0, str(HERE))

from graphs import FAMILIES, size_for, uop_param  # noqa: E402

from uopcli import Graph, evaluate_graph, load  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402
from uopcli.core.simplify import simplify  # noqa: E402
from uopcli.core.walks import no_gc  # noqa: E402
from uopcli.tools.values import gather_inputs  # noqa: E402

FAMILY_NODES = 10_000      # forward nodes of each bench family's graph
MILLION_FORWARD = 430_000  # forward nodes of the chain whose gradient has ~10^6 nodes


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _row(label: str, gradient: Graph, repeats: int) -> tuple:
    exact, full = simplify(gradient, exact=True), simplify(gradient)
    inputs = gather_inputs(gradient.inputs, (), 0)
    literal_s = _best(lambda: evaluate_graph(gradient, inputs), repeats)
    simplified_s = _best(lambda: evaluate_graph(full, inputs), repeats)
    n, e, s = len(gradient), len(exact), len(full)
    return (label, n, e, s, f"{1 - s / n:.1%}", _ms(literal_s), _ms(simplified_s), f"{simplified_s / literal_s:.2f}×")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def sample_rows(repeats: int) -> list[tuple]:
    rows = []
    for path in sorted((ROOT / "samples").glob("*.uop")):
        graph = load(path)
        gradient, _ = differentiate(graph, [n.arg for n in graph.inputs if n.dtype.is_float])
        rows.append(_row(f"sample {path.stem}", gradient, repeats))
    return rows


def family_rows(repeats: int) -> list[tuple]:
    rows = []
    for family, build in FAMILIES.items():
        with no_gc():
            loss, targets = build(uop_param, size_for(family, FAMILY_NODES))
            gradient, _ = differentiate(Graph({"loss": loss}), [t.arg for t in targets])
        rows.append(_row(f"{family} ({FAMILY_NODES:,} forward nodes)", gradient, repeats))
    return rows


# the graphs whose simplification is timed against their differentiation: the 10^6-node
# chain gradient the target names, and the two families whose forward graph simplification
# rewrites too (so every node above a rewrite is made again)
COST_GRAPHS = (("chain", MILLION_FORWARD), ("mlp", 100_000), ("attention", 100_000))


def cost(family: str, forward_nodes: int, rounds: int) -> dict:
    """CPU seconds to differentiate the family's graph and to simplify its gradient, in
    turns, best of the rounds; with a walk over the gradient that has no rows to try (what
    visiting every node costs), and how many nodes simplify made anew.

    Every timing makes its nodes as a fresh process would: the results of the timings
    before it are dropped and swept from the intern table first. (Otherwise a second
    `differentiate` finds every node it makes already interned and only looks them up:
    that made it look twice as fast as a user's `uopgrad diff` is.)"""
    from uopcli.core.pattern import PatternMatcher
    from uopcli.core.simplify.walk import Rewriter
    from uopcli.core.uop import sweep_intern_table
    from uopcli.core.walks import toposort
    with no_gc():
        loss, targets = FAMILIES[family](uop_param, size_for(family, forward_nodes))
        forward = Graph({"loss": loss})
    wrt = [t.arg for t in targets]
    no_rows = Rewriter(PatternMatcher([]))
    times: dict[str, list] = {"diff": [], "simplify": [], "exact": [], "walk": []}

    def timed(name, fn):
        sweep_intern_table()
        start = time.process_time()
        out = fn()
        times[name].append(time.process_time() - start)
        return out

    for _ in range(rounds):
        gradient = None
        gradient, _ = timed("diff", lambda: differentiate(forward, wrt))
        timed("simplify", lambda: simplify(gradient))
        timed("exact", lambda: simplify(gradient, exact=True))
        timed("walk", lambda: no_rows.rewrite_roots(list(gradient.outputs.values())))
    simplified = simplify(gradient)
    made = len(set(toposort(simplified.outputs.values())) - set(toposort(gradient.outputs.values())))
    best = {name: min(values) for name, values in times.items()}
    return {"family": family, "nodes": len(gradient), "after": len(simplified), "made": made, **best}


def remaining() -> dict:
    """The attention sample's simplified gradient by op, and the GPT block's reduction."""
    from collections import Counter
    counts = {}
    for name in ("attention", "gpt"):
        graph = load(ROOT / "samples" / f"{name}.uop")
        gradient, _ = differentiate(graph, [n.arg for n in graph.inputs if n.dtype.is_float])
        counts[name] = (gradient, simplify(gradient))
    before, after = counts["attention"]
    ops = Counter(n.op if n.op != "REDUCE" else f"REDUCE {n.arg[0]}" for n in after.nodes())
    gpt_before, gpt_after = (len(g) for g in counts["gpt"])
    return {"before": len(before), "after": len(after), "ops": ", ".join(f"{op} {k}" for op, k in ops.most_common()),
            "gpt": f"{1 - gpt_after / gpt_before:.1%} ({gpt_before} → {gpt_after})"}


def section(samples: list, families: list, costs: list, remains: dict) -> str:
    head = ("| graph | gradient nodes | after `--exact` | after `simplify` | fewer | evaluate as written | "
            "evaluate simplified | time ratio |\n|---|---|---|---|---|---|---|---|")
    table = "\n".join("| " + " | ".join(map(str, row)) + " |" for row in samples + families)
    cost_head = ("| gradient | nodes | made anew | `differentiate` | `simplify` | ratio | `simplify --exact` | "
                 "a walk with no rows |\n|---|---|---|---|---|---|---|---|")
    cost_table = "\n".join(
        f"| {c['family']} | {c['nodes']:,} | {c['made']:,} | {c['diff']:.2f} s | {c['simplify']:.2f} s | "
        f"{c['simplify'] / c['diff']:.2f}× | {c['exact']:.2f} s | {c['walk']:.2f} s |" for c in costs)
    big = costs[0]
    ratio = big["simplify"] / big["diff"]
    return f"""{HEADING}

Written by `bench/bench_simplify.py` (run it alone; `make bench` keeps this section). Every
sample's gradient with respect to every float input, and every bench family's gradient
(every parameter), as `uopgrad diff` writes it, after the exact rows (`uopgrad simplify
--exact`: no bit of any value changes) and after both tables (`uopgrad simplify`, what
`uopgrad eval` runs by default); evaluation is the best in-process CPU time of
`evaluate_graph` on the same seeded inputs.

{head}
{table}

The cost of simplifying against the cost of making the gradient (CPU seconds, best of the
rounds, each round timing all in turns, each timing making its nodes anew as a fresh
process does: what the timings before it made is dropped first; "made anew": nodes of the result that are not in
the gradient, rebuilt above a rewrite or made by a row; "a walk with no rows": the same walk with
an empty table, what visiting every node costs):

{cost_head}
{cost_table}

The 10⁶-node gradient (the chain, {big['nodes']:,} nodes, {big['after']:,} after): `simplify`
takes {ratio:.2f}× the time `differentiate` took to make it (target ≤ 1×,
**{'met' if ratio <= 1 else 'MISSED'}**). A walk with no rows to try already costs
{big['walk'] / big['diff']:.2f}× `differentiate` on it, and each of the {big['made']:,} nodes made anew
(every node above a rewrite is) costs about what a node `differentiate` makes costs; the
rows themselves are the rest ("What profiling found", 19).

What remains of the attention sample's gradient ({remains['before']} → {remains['after']} nodes; the target
was 15% fewer), by op: {remains['ops']}. The forward graph it reuses stays (the inputs, the
mask, each matmul's RESHAPE/EXPAND/MUL/REDUCE ADD/RESHAPE, the softmax), and each backward
matmul is the same five nodes, the product itself (the evaluator runs them as one BLAS
call). None of these can go without changing what the graph computes: a RESHAPE after a
REDUCE drops the summed axis where the next operand needs another layout (chains of
RESHAPEs that only add or drop size-1 axes, with PERMUTEs, are already one node), an
EXPAND is the broadcast its MUL reads, and the softmax's backward (g/s, the sum of g·p,
its broadcast, the difference, the product with e) is the rule's own arithmetic; the
gradient of the target is the NEG of the scaled error the output's gradient starts from
(one node: folding the sign into the constant would make a second product). What
went: the seed's 1.0 times the mean's scale, broadcast scalars, the square's x+x (now one
constant times x), ln2·(1/ln2) around the softmax's exp, negations (into SUB and the
constants), and merged reshapes. The GPT block's gradient falls by {remains['gpt']}, most of it
the one-hot's and the causal mask's constant subgraphs, folded into BUFFERs.
"""


def write(text: str, out: Path) -> None:
    """Put the section into RESULTS.md: in place of the old one, or before the last section."""
    old = out.read_text() if out.exists() else ""
    out.write_text(carry_section(old, text.rstrip() + "\n", replace=True))


def carry_section(old: str, new: str, replace: bool = False) -> str:
    """`old` with the simplification section `new` put in (replace=True), or the report
    `new` with `old`'s simplification section kept (how run.py keeps it when it rewrites
    RESULTS.md)."""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.S | re.M)
    if replace:
        block, target = new, old
    else:
        found = pattern.search(old)
        if not found:
            return new
        block, target = found.group(0), new
    block = block.rstrip() + "\n\n"
    if pattern.search(target):
        return pattern.sub(lambda _: block, target, count=1)
    at = target.find("\n## 8. ")  # before the sections after it (8: the tinygrad bridge)
    at = target.find("\n## What profiling found") if at < 0 else at
    return target + "\n" + block if at < 0 else target[:at + 1] + block + target[at + 1:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing RESULTS.md")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the simplify-against-diff timings")
    args = parser.parse_args(argv)
    costs = [cost(family, nodes, args.rounds) for family, nodes in COST_GRAPHS]
    text = section(sample_rows(5), family_rows(3), costs, remaining())
    if args.no_write:
        print(text)
    else:
        write(text, RESULTS)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
