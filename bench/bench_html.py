"""The HTML viewer's timings, in one run: writing the page (`uopgrad render -o OUT.html`, the
whole process) for 10^3, 10^4 and 10^5-node gradient graphs, its size per node, and, in
headless Chromium (Debian's, driven by playwright), the time from navigation to the first
level drawn and to open a level of 500 boxes.

    make bench-html                                  # writes bench/RESULTS-html.md
    .venv/bin/python bench/bench_html.py --no-write  # prints it only

Targets (issue 24): the page of 10^4 nodes written in at most 10 s, the cost growing no
faster than the node count (per-node time at 10^5 at most that at 10^4, with 20% slack for
noise); in the browser, the first level in under 2 s at 10^4 nodes and a 500-node group
opened in under 1 s.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from scoped_gpt import blocks_for, gradient_graph  # noqa: E402

from uopcli import Graph, UOp, save  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

UOPGRAD = str(Path(sys.executable).parent / "uopgrad")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
RESULTS = HERE / "RESULTS-html.md"


def chain_gradient(nodes: int) -> Graph:
    """A long elementwise chain and its gradient: no metadata names or scopes, so its levels
    are `part` groups of 500 boxes each (the largest level the page ever draws)."""
    x = UOp.param("x", (8,))
    y = x
    for _ in range(max(1, nodes // 7)):  # about 7 nodes per step, forward and backward
        y = (y * 1.0001 + 0.5).sin()
    graph, _ = differentiate(Graph({"y": y.sum()}), ["x"], keep_forward=True)
    return graph


def write_page(uop: Path, page: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([UOPGRAD, "render", str(uop), "-o", str(page)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"render failed: {done.stderr}")
    return {"seconds": time.perf_counter() - start, "bytes": page.stat().st_size}


def browser_times(pages: dict[str, Path], part_page: Path) -> dict:
    from playwright.sync_api import sync_playwright
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    found: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        for label, path in pages.items():
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(path.as_uri())
            page.wait_for_function("+(document.body.dataset.draws || 0) >= 1", timeout=120_000)
            found[label] = {"first": page.evaluate("uopViewer.timing.firstDrawMs") / 1000,
                            "largest": _open_largest(page)}
            page.close()
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(part_page.as_uri())
        page.wait_for_function("+(document.body.dataset.draws || 0) >= 1", timeout=120_000)
        found["part"] = _open_largest(page)
        page.close()
        browser.close()
    return found


def _open_largest(page) -> dict:
    """Open the level with the most boxes (after a first open, so the page is warm), twice;
    the time from the call to the second frame after it, as the page measures it."""
    g, items = page.evaluate("""() => { const d = JSON.parse(document.getElementById('uop-data').textContent);
        let best = 0; d.levels.forEach((l, g) => { if (l[2].length > d.levels[best][2].length) best = g; });
        return [best, d.levels[best][2].length / 6]; }""")
    times = []
    for _ in range(2):
        draws = int(page.evaluate("document.body.dataset.draws"))
        page.evaluate("(g) => uopViewer.open(g)", g)
        page.wait_for_function(f"+document.body.dataset.draws > {draws}")
        times.append(page.evaluate("uopViewer.timing.lastDrawMs") / 1000)
        page.evaluate("() => uopViewer.open(0)")
        page.wait_for_function(f"+document.body.dataset.draws > {draws + 1}")
    return {"seconds": max(times), "boxes": int(items), "size": page.evaluate(
        f"JSON.parse(document.getElementById('uop-data').textContent).groups.size[{g}]")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print the report, do not write RESULTS-html.md")
    parser.add_argument("--quick", action="store_true", help="10^3 and 10^4 only (a smoke run)")
    args = parser.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    started = time.time()
    rows, pages = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n in sizes:
            graph = gradient_graph(blocks_for(n))
            nodes = len(graph.nodes())
            uop, page = tmp / f"g{n}.uop", tmp / f"g{n}.html"
            save(graph, uop)
            written = write_page(uop, page)
            rows.append((n, nodes, written))
            pages[f"{nodes:,}"] = page
            print(f"page of {nodes:,} nodes: {written['seconds']:.2f} s, {written['bytes'] / nodes:.0f} B/node",
                  file=sys.stderr)
        chain = chain_gradient(10_000)
        save(chain, tmp / "chain.uop")
        write_page(tmp / "chain.uop", tmp / "chain.html")
        shown = browser_times(pages, tmp / "chain.html")
    report = _report(rows, shown, len(chain.nodes()), time.time() - started)
    print(report)
    if not args.no_write:
        RESULTS.write_text(report, encoding="utf-8")
    return 0


def _report(rows, shown, chain_nodes: int, seconds: float) -> str:
    per_node = {n: written["seconds"] / nodes for n, nodes, written in rows}
    at = {n: (nodes, written) for n, nodes, written in rows}
    lines = ["# HTML viewer timings", "",
             f"Generated by `bench/bench_html.py` (`make bench-html`) on "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s, "
             f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, chromium "
             f"{_chromium_version()}, commit {_git_head()}. Graphs: the gradients of GPT-like models with "
             "scopes (bench/scoped_gpt.py), forward kept.", "",
             "## Writing the page (`uopgrad render G.uop -o G.html`, whole process)", "",
             "| nodes | seconds | µs per node | page bytes | bytes per node |", "|---|---|---|---|---|"]
    for n, nodes, written in rows:
        lines.append(f"| {nodes:,} | {written['seconds']:.2f} | {per_node[n] * 1e6:.0f} | "
                     f"{written['bytes']:,} | {written['bytes'] / nodes:.0f} |")
    lines += ["", "## In headless Chromium", "",
              "| page | navigation to first level drawn | largest level (boxes, nodes inside) | opening it |",
              "|---|---|---|---|"]
    for label, found in shown.items():
        if label == "part":
            continue
        big = found["largest"]
        lines.append(f"| {label} nodes | {found['first']:.2f} s | {big['boxes']} boxes, {big['size']:,} nodes "
                     f"| {big['seconds']:.3f} s |")
    part = shown["part"]
    lines.append(f"| chain gradient, {chain_nodes:,} nodes (levels of 500 boxes) | | {part['boxes']} boxes, "
                 f"{part['size']:,} nodes | {part['seconds']:.3f} s |")
    targets = []
    if 10_000 in at:
        targets.append(("page of 10^4 nodes written in ≤ 10 s", f"{at[10_000][1]['seconds']:.2f} s",
                        at[10_000][1]["seconds"] <= 10))
    if 100_000 in per_node:
        ratio = per_node[100_000] / per_node[10_000]
        targets.append(("per-node writing time at 10^5 ≤ at 10^4 (×1.2 for noise)", f"{ratio:.2f}×", ratio <= 1.2))
    first = next((f for label, f in shown.items() if label != "part" and 9_000 < int(label.replace(",", "")) < 11_000),
                 None)
    if first is not None:
        targets.append(("first level drawn < 2 s at 10^4 nodes", f"{first['first']:.2f} s", first["first"] < 2))
    targets.append(("a 500-box group opened < 1 s", f"{part['seconds']:.3f} s ({part['boxes']} boxes)",
                    part["seconds"] < 1 and part["boxes"] >= 500))
    lines += ["", "## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {'**met**' if ok else '**MISSED**'} |" for what, value, ok in targets]
    return "\n".join(lines) + "\n"


def _chromium_version() -> str:
    try:
        text = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "?"
    found = re.search(r"[\d.]+", text)
    return found.group() if found else "?"


def _git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "?"


if __name__ == "__main__":
    sys.exit(main())

