"""The HTML viewer in a real headless Chromium (Debian's `chromium`, driven by playwright;
nothing downloads a browser): pages of the samples and of a 10,000-node gradient graph show
the top level, open groups, find nodes, show details, toggle forward/backward, focus, light
paths and export valid SVG. Screenshots go to out/html/. Skipped, with the reason, where
chromium or playwright cannot be had (`make test` installs both)."""

from __future__ import annotations

import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from uopcli import load, save
from uopcli.views.html.page import page_html
from uopcli.views.html.values import value_stats

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SHOTS = ROOT / "out" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
sys.path.insert(0, str(ROOT / "bench"))
from scoped_gpt import blocks_for, gradient_graph  # noqa: E402

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed for this Python "
                               "(make test installs it: pip install playwright)")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed (make test installs it: apt-get install chromium)",
                allow_module_level=True)
if shutil.which("dot") is None:
    pytest.skip("graphviz's dot is not installed (make dot)", allow_module_level=True)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def browser():
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The gradient of a GPT-like model with scopes, about 10,000 nodes, and its page."""
    graph = gradient_graph(blocks_for(10_000))
    path = tmp_path_factory.mktemp("pages") / "big.html"
    path.write_text(page_html(graph, title="gpt-grad.uop"), encoding="utf-8")
    return graph, path


class Page:
    """One opened page; JS errors and console errors fail the test that opened it."""

    def __init__(self, browser, path: Path, width: int = 1400, height: int = 900):
        self.page = browser.new_page(viewport={"width": width, "height": height}, accept_downloads=True)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.goto(path)

    def goto(self, path: Path) -> None:
        self.page.goto(path.as_uri())
        self.wait_draws(1)
        fetched = self.js("performance.getEntriesByType('resource').map((r) => r.name)")
        assert fetched == [], fetched  # offline: the page asks for nothing

    def js(self, script: str, arg=None):
        return self.page.evaluate(script, arg)

    def wait_draws(self, count: int) -> None:
        self.page.wait_for_function(f"+(document.body.dataset.draws || 0) >= {count}", timeout=15000)

    def draws(self) -> int:
        return int(self.js("document.body.dataset.draws"))

    def level(self) -> int:
        return int(self.js("document.body.dataset.level"))

    def crumbs(self) -> list[str]:
        return [t.strip() for t in self.page.inner_text("#crumbs").split("›")]

    def items(self, visible: bool = True) -> list[dict]:
        """The boxes drawn: kind and ref from the page's data, classes from the DOM."""
        return self.js("""(visible) => {
            const d = uopViewer.draw();
            return [...document.querySelectorAll('#view g.it')]
              .filter((el) => !visible || !el.classList.contains('hid'))
              .map((el) => { const [kind, ref] = d.items[+el.dataset.k];
                             return {kind, ref, cls: el.getAttribute('class'),
                                     text: [...el.querySelectorAll('text')].map((t) => t.textContent).join('\\n')}; });
        }""", visible)

    def click_box(self, title_start: str) -> None:
        """A real mouse click on the box whose tooltip starts with `title_start`."""
        count = self.draws()
        k = self.js("""(t) => { const el = [...document.querySelectorAll('#view g.it:not(.hid)')]
                   .find((g) => g.querySelector('title').textContent.startsWith(t));
                 uopViewer.centre(+el.dataset.k); return +el.dataset.k; }""", title_start)
        self.page.click(f"#view g.it[data-k='{k}']")
        self.settled(count)

    def settled(self, draws_before: int) -> None:
        self.page.wait_for_timeout(50)
        if self.draws() == draws_before:  # a click that drew nothing new (a node: details only)
            return
        self.wait_draws(draws_before + 1)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / name))

    def close(self) -> None:
        errors = self.errors
        self.page.close()
        assert not errors, errors


def level_data(page: Page, group: int) -> list:
    return page.js(f"JSON.parse(document.getElementById('uop-data').textContent).levels[{group}]")


def group_ids(page: Page) -> dict[str, int]:
    labels = page.js("JSON.parse(document.getElementById('uop-data').textContent).groups.label")
    found: dict[str, int] = {}
    for k, label in enumerate(labels):
        found.setdefault(label, k)
    return found


# ----------------------------------------------------------------------------- the big graph

def test_the_top_level_shows_groups_with_counts_and_op_mix(browser, big):
    graph, path = big
    page = Page(browser, path)
    assert page.level() == 0 and page.crumbs() == ["graph"]
    items = page.items()
    assert len(items) == len(level_data(page, 0)[2]) // 6
    labels = {item["text"].split("\n")[0] for item in items if item["kind"] == 1}
    assert {"gpt", "loss", "∇ loss"} <= labels
    sizes = page.js("JSON.parse(document.getElementById('uop-data').textContent).groups.size")
    assert sizes[0] == len(graph.nodes()) > 9_000
    gpt = next(item for item in items if item["kind"] == 1 and item["text"].startswith("gpt\n"))
    assert gpt["text"].split("\n")[1] == f"{sizes[gpt['ref']]} nodes" and "MUL" in gpt["text"].split("\n")[2]
    assert page.js("uopViewer.timing.firstDrawMs") < 5000
    page.shot("big-top.png")
    page.close()


def test_a_group_opens_as_its_own_level_with_breadcrumbs_back(browser, big):
    page = Page(browser, big[1])
    ids = group_ids(page)
    page.click_box("gpt:")
    assert page.level() == ids["gpt"] and page.crumbs() == ["graph", "gpt"]
    items = page.items()
    assert len(items) == len(level_data(page, ids["gpt"])[2]) // 6
    labels = {item["text"].split("\n")[0] for item in items}
    assert {"block.3", "∇ block.3", "head", "∇ head"} <= labels
    page.shot("big-gpt-level.png")
    page.click_box("block.3:")
    assert page.crumbs() == ["graph", "gpt", "block.3"]
    assert {item["text"].split("\n")[0] for item in page.items() if item["kind"] == 1} == {"ln1", "attn", "ln2", "mlp"}
    count = page.draws()
    page.page.click("#crumbs a:text('graph')")
    page.settled(count)
    assert page.level() == 0 and page.crumbs() == ["graph"]
    page.close()


def test_search_finds_a_node_and_shows_it_in_its_level(browser, big):
    graph, path = big
    page = Page(browser, path)
    order = graph.nodes()
    page.page.fill("#search", "wqkv7")
    page.page.wait_for_selector("#results a.hit")
    expected = [i for i, n in enumerate(order)
                if n.arg == "wqkv7" or any(name.find("wqkv7") >= 0 and node is n for name, node in graph.outputs.items())]
    assert page.page.inner_text("#results").startswith(f"{len(expected)} nodes match")
    param = order.index(graph.input("wqkv7"))
    count = page.draws()
    page.page.click(f"#results a[data-node='{param}']")
    page.settled(count)
    details = page.page.inner_text("#details")
    assert f"%{param} PARAM wqkv7" in details and "input\twqkv7" in details and "[8,24]" in details
    assert page.crumbs()[:3] == ["graph", "gpt", "block.7"]
    selected = [item for item in page.items() if "sel" in item["cls"].split()]
    assert [item["ref"] for item in selected] == [param]
    page.shot("big-search.png")
    page.close()


def test_a_click_shows_a_nodes_details_with_sources_and_users_as_links(browser, big):
    graph, path = big
    page = Page(browser, path)
    order = graph.nodes()
    i = next(i for i, n in enumerate(order) if n.op == "MUL" and n.meta.scope == "gpt/block.5/mlp")
    target = order[i]
    page.js("(i) => uopViewer.open(JSON.parse(document.getElementById('uop-data').textContent).home[i])", i)
    page.wait_draws(2)
    assert page.page.inner_text("#details").startswith(page.crumbs()[-1])  # the group's details
    page.click_box(f"%{i} ")
    details = page.page.inner_text("#details")
    assert details.startswith(f"%{i} {target.op}")
    assert [item["ref"] for item in page.items() if "sel" in item["cls"].split()] == [i]
    assert f"dtype\t{target.dtype.name}" in details and f"sources ({len(target.src)})" in details
    users = sum(1 for n in order for s in n.src if s is target)
    assert f"users ({users})" in details
    source = order.index(target.src[0])
    page.page.click(f"#details a[data-node='{source}']")
    assert page.page.inner_text("#details").startswith(f"%{source} {target.src[0].op}")
    page.close()


def test_the_forward_backward_toggle_changes_what_is_drawn(browser, big):
    page = Page(browser, big[1])
    page.js("(g) => uopViewer.open(g)", group_ids(page)["gpt"])
    page.wait_draws(2)
    both = page.items()
    page.page.check("input[value='fwd']")
    forward = page.items()
    assert 0 < len(forward) < len(both) and not any(" bw" in item["cls"] for item in forward)
    page.shot("big-gpt-forward.png")
    page.page.check("input[value='bwd']")
    backward = page.items()
    assert 0 < len(backward) < len(both)
    assert all(" bw" in item["cls"] or item["kind"] == 2 for item in backward)
    assert {item["ref"] for item in forward if item["kind"] == 1}.isdisjoint(
        {item["ref"] for item in backward if item["kind"] == 1})
    page.shot("big-gpt-backward.png")
    page.page.check("input[value='both']")
    assert len(page.items()) == len(both)
    page.close()


def test_the_svg_export_is_valid_svg_of_what_is_shown(browser, big, tmp_path):
    page = Page(browser, big[1])
    page.js("(g) => uopViewer.open(g)", group_ids(page)["gpt"])
    page.wait_draws(2)
    page.page.check("input[value='fwd']")
    shown = page.items()
    with page.page.expect_download() as download:
        page.page.click("#export")
    saved = tmp_path / "view.svg"
    download.value.save_as(saved)
    assert download.value.suggested_filename == "gpt.svg"
    root = ET.parse(saved).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    boxes = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if "it" in (g.get("class") or "").split()]
    assert len(boxes) == len(shown) and not any("hid" in (g.get("class") or "") for g in boxes)
    assert not any(" bw" in (g.get("class") or "") for g in boxes)
    assert root.find("{http://www.w3.org/2000/svg}style") is not None and float(root.get("width")) > 100
    page.close()


def test_a_backward_node_links_to_the_forward_group_and_node_it_differentiates(browser, big):
    graph, path = big
    page = Page(browser, path)
    order = graph.nodes()
    grad = order.index(graph.outputs["grad_w1_4"])
    page.js("(i) => uopViewer.goTo(i)", grad)
    page.wait_draws(2)
    assert page.crumbs()[:3] == ["graph", "gpt", "∇ block.4"]
    details = page.page.inner_text("#details")
    assert "backward (made by differentiation)" in details and "differentiates" in details
    forward_node = int(page.page.get_attribute("#details div.fwd a[data-node]", "data-node"))
    assert order[forward_node].meta.name == order[grad].meta.name and not order[forward_node].meta.backward
    # the gradient of w1 is the last node of the rule of w1's RESHAPE to (1, 8, 16) in linear
    assert order[forward_node].op == "RESHAPE" and order[forward_node].src == (graph.input("w1_4"),)
    assert order[forward_node].meta.scope == order[grad].meta.scope == "gpt/block.4/mlp"
    count = page.draws()
    page.page.click("#details div a[data-group]")
    page.settled(count)
    assert page.crumbs()[:4] == ["graph", "gpt", "block.4", "mlp"]
    page.close()


def test_focus_keeps_a_neighbourhood_and_a_path_lights_up(browser, big):
    graph, path = big
    page = Page(browser, path)
    order = graph.nodes()
    index = {n: i for i, n in enumerate(order)}
    centre = index[graph.input("w2_2")]
    page.js("(i) => uopViewer.goTo(i)", centre)
    page.wait_draws(2)
    page.page.fill("#focus-k", "1")
    page.page.click("#focus")
    near = {centre} | {index[s] for s in order[centre].src} | {i for i, n in enumerate(order) if order[centre] in n.src}
    assert page.page.inner_text("#status") == f"{len(near)} nodes within 1 steps of %{centre}"
    shown = page.items()
    assert shown and all(item["ref"] in near for item in shown if item["kind"] == 0)
    assert len(shown) < len(page.items(visible=False))
    page.page.click("#clear")
    assert len(page.items()) == len(page.items(visible=False))
    # every node on a path from input x to output grad_wo0
    page.page.select_option("#path-from", str(index[graph.input("x")]))
    page.page.select_option("#path-to", str(index[graph.outputs["grad_wo0"]]))
    page.page.click("#path")
    down, up = _reach([index[graph.input("x")]], order, index, down=True), _reach(
        [index[graph.outputs["grad_wo0"]]], order, index, down=False)
    on_path = down & up
    assert page.page.inner_text("#status") == f"{len(on_path)} nodes on paths from %{index[graph.input('x')]} " \
                                              f"to %{index[graph.outputs['grad_wo0']]}"
    lit = [item for item in page.items() if "on" in item["cls"].split()]
    assert lit and all(item["ref"] in on_path for item in lit if item["kind"] == 0)
    page.shot("big-path.png")
    page.close()


def _reach(starts, order, index, down: bool) -> set[int]:
    users: dict[int, list[int]] = {}
    for i, node in enumerate(order):
        for s in node.src:
            users.setdefault(index[s], []).append(i)
    seen, stack = set(starts), list(starts)
    while stack:
        i = stack.pop()
        for j in (users.get(i, []) if down else [index[s] for s in order[i].src]):
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


# ----------------------------------------------------------------------------- the samples

@pytest.fixture(scope="module")
def sample_pages(tmp_path_factory):
    """Each sample, and the gradients of a few, as pages."""
    from uopcli.tools.differentiate import differentiate
    folder = tmp_path_factory.mktemp("samples")
    pages = {}
    for path in sorted(SAMPLES.glob("*.uop")):
        graph = load(path)
        pages[path.stem] = (graph, folder / f"{path.stem}.html")
        pages[path.stem][1].write_text(page_html(graph, title=path.name), encoding="utf-8")
        if path.stem in ("gpt", "rnn", "ste", "conv2d", "attention"):
            grad, _ = differentiate(graph, graph.input_names, keep_forward=True)
            pages[path.stem + "-grad"] = (grad, folder / f"{path.stem}-grad.html")
            pages[path.stem + "-grad"][1].write_text(page_html(grad, title=f"{path.stem}-grad.uop"), encoding="utf-8")
    return pages


def test_every_sample_page_draws_its_top_level(browser, sample_pages):
    page = None
    for name, (graph, path) in sample_pages.items():
        if page is None:
            page = Page(browser, path, 1000, 700)
        else:
            page.goto(path)
        assert page.level() == 0 and page.page.inner_text("#title") == f"{page.js('document.title')} · " \
                                                                       f"{len(graph.nodes())} nodes"
        assert len(page.items()) == len(level_data(page, 0)[2]) // 6 > 0, name
    page.close()


def test_a_function_body_opens_and_the_gpt_gradient_makes_the_readme_picture(browser, sample_pages):
    page = Page(browser, sample_pages["rnn-grad"][1])
    page.click_box("FUNCTION rnn_cell")
    assert page.crumbs()[-1].startswith("FUNCTION rnn_cell")
    assert any(item["text"].startswith("tanh") for item in page.items())
    page.close()
    page = Page(browser, sample_pages["gpt-grad"][1], 1280, 800)
    page.click_box("∇ scaled_dot_product_attention:")
    page.click_box("%")
    page.shot("gpt-grad-attention.png")
    page.page.click("#crumbs a:text('graph')")
    page.page.wait_for_timeout(100)
    page.js("uopViewer.goTo(0); document.querySelector('#fit').click()")
    page.shot("gpt-grad-top.png")
    page.close()


def test_values_show_min_mean_max(browser, tmp_path):
    from uopcli.tools.differentiate import differentiate
    from uopcli.tools.intermediates import with_intermediates
    graph, _ = differentiate(load(SAMPLES / "mlp.uop"), ["w1", "w2"], keep_forward=True)
    rng = np.random.default_rng(0)
    inputs = {n.arg: rng.standard_normal(n.shape).astype(np.float32) for n in graph.inputs}
    arrays = with_intermediates(graph, inputs, {})
    save(graph, tmp_path / "g.uop")
    np.savez(tmp_path / "v.npz", **arrays)
    path = tmp_path / "g.html"
    path.write_text(page_html(graph, title="g", values=value_stats(graph, str(tmp_path / "v.npz"))))
    page = Page(browser, path)
    order = graph.nodes()
    i = order.index(graph.outputs["grad_w2"])
    page.js("(i) => uopViewer.goTo(i)", i)
    value = arrays[f"%{i}"].astype(np.float64)
    details = page.page.inner_text("#details")
    assert f"min {value.min():.6g}\nmean {value.mean():.6g}\nmax {value.max():.6g}" in details
    page.close()
