"""A tinygrad model's gradient page: the 4-block transformer of tests/tinygrad_zoo.py is
exported (scopes from its state_dict's module paths), differentiated and drawn by the
installed `uopgrad`, then opened in headless Chromium at 1400x900. The top level is the
model's modules, each beside its ∇ twin; no label is drawn under 10 px; a block opens as
its sub-modules, each `linear` inside its Linear module, and its ∇ twin likewise.
UOPGRAD_SHOTS=<dir> also writes the three screenshots of docs/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _tinygrad_usable import import_tinygrad
import_tinygrad()
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make test installs it)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM) or shutil.which("dot") is None:
    pytest.skip("Debian's chromium and graphviz's dot are needed (make test installs both)", allow_module_level=True)

from tinygrad_zoo import gpt_four_blocks  # noqa: E402
from uopcli.interop.tinygrad import save  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
MODULES = ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "embedding", "head", "sparse_categorical_crossentropy"]
# what reads a page: the current level's child groups, and every drawn label's size on screen
LEVEL = """() => { const D = JSON.parse(document.getElementById('uop-data').textContent);
  const g = window.uopViewer.state.group, svg = document.getElementById('view');
  const sizes = [...svg.querySelectorAll('g.it:not(.hid) text')].map((t) => t.getBoundingClientRect().height);
  const fonts = [...svg.querySelectorAll('g.it:not(.hid) text')].map((t) =>
    parseFloat(getComputedStyle(t).fontSize) * svg.clientWidth / svg.viewBox.baseVal.width);
  return {group: g, label: D.groups.label[g], twin: D.groups.twin.map((t) => t < 0 ? null : D.groups.label[t]),
          kids: D.groups.label.map((l, k) => [l, k]).filter(([l, k]) => D.groups.p[k] === g),
          items: window.uopViewer.draw().items.length, smallest: Math.min(...fonts), boxes: sizes.length}; }"""


def _run(*args, cwd):
    done = subprocess.run([UOPGRAD, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt")
    case = gpt_four_blocks()
    exported = save(folder / "gpt.uop", case.outputs, case.inputs, case.state_dict)
    weights = [p.arg for p in exported.graph.inputs if p.dtype.is_float]
    _run("diff", "gpt.uop", "--wrt", ",".join(weights), "--of", "loss", "-o", "gpt-grad.uop", cwd=folder)
    _run("render", "gpt-grad.uop", "-o", "gpt-grad.html", cwd=folder)
    return folder / "gpt-grad.html"


@pytest.fixture(scope="module")
def tab(page):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        view = browser.new_page(viewport={"width": 1400, "height": 900})
        view.goto(page.as_uri())
        view.wait_for_function("document.body.dataset.draws >= 1")
        yield view
        browser.close()


def _open(tab, label: str) -> dict:
    before = tab.evaluate("document.body.dataset.draws")
    tab.evaluate("""(label) => { const D = JSON.parse(document.getElementById('uop-data').textContent);
      const g = D.groups.label.findIndex((l, k) => l === label && D.groups.p[k] === window.uopViewer.state.group);
      if (g < 0) throw new Error('no group ' + label); window.uopViewer.open(g); }""", label)
    tab.wait_for_function(f"document.body.dataset.draws > {before}")
    return tab.evaluate(LEVEL)


def _shot(tab, name: str) -> None:
    folder = os.environ.get("UOPGRAD_SHOTS")
    if folder:
        tab.screenshot(path=str(Path(folder) / name))


def test_the_top_level_is_the_models_modules_with_their_gradients(tab):
    level = tab.evaluate(LEVEL)
    labels = [label for label, _ in level["kids"]]
    forward = sorted(label for label in labels if not label.startswith("∇"))
    assert [m for m in MODULES if m in forward] == MODULES, forward
    for module in MODULES:
        assert "∇ " + module in labels, labels
        assert level["twin"][dict(level["kids"])[module]] == "∇ " + module
    assert len(labels) <= 30
    assert level["smallest"] >= 10, f"a label is drawn at {level['smallest']:.1f} px"
    _shot(tab, "tinygrad-gpt-grad-top.png")


def test_fit_keeps_labels_readable(tab):
    tab.click("#fit")
    level = tab.evaluate(LEVEL)
    assert level["smallest"] >= 10, f"after fit a label is drawn at {level['smallest']:.1f} px"


def test_a_block_opens_as_its_sub_modules_and_its_gradient_as_theirs(tab):
    level = _open(tab, "blocks.1")
    labels = {label for label, _ in level["kids"]}
    assert {"ln1", "attn", "ln2", "up", "down"} <= labels, labels
    assert level["smallest"] >= 10
    _shot(tab, "tinygrad-gpt-grad-block.png")
    tab.evaluate("window.uopViewer.open(0)")
    level = _open(tab, "∇ blocks.1")
    labels = {label for label, _ in level["kids"]}
    assert {"∇ ln1", "∇ attn", "∇ ln2", "∇ up", "∇ down"} <= labels, labels
    assert level["smallest"] >= 10
    details = tab.inner_text("#details")
    assert "differentiates" in details and "blocks.1" in details
    _shot(tab, "tinygrad-gpt-grad-backward-block.png")


def test_a_blocks_calls_of_linear_are_inside_its_linear_modules_and_so_are_their_gradients(tab):
    """Each `linear` node is in the Linear that called it, its input reshapes too: a block
    and its attention hold no `linear` group of their own (the input reshapes once made
    stray `linear #1..#3` groups beside up, down and attn), nor do their ∇ twins. Calls
    numbered apart are tests/test_html_groups.py's."""
    for block, attn, modules in (("blocks.2", "attn", ["up", "down"]), ("∇ blocks.2", "∇ attn", ["∇ up", "∇ down"])):
        tab.evaluate("window.uopViewer.open(0)")
        labels = {label for label, _ in _open(tab, block)["kids"]}
        assert set(modules) <= labels and not any("linear" in label for label in labels), labels
        labels = {label for label, _ in _open(tab, attn)["kids"]}
        assert {m.replace("up", "q").replace("down", "o") for m in modules} <= labels, labels
        assert not any("linear" in label for label in labels), labels


def test_the_page_data_names_every_scope_from_the_state_dict(page):
    text = page.read_text(encoding="utf-8")
    data = json.loads(text.split('id="uop-data">', 1)[1].split("</script>", 1)[0])
    scopes = {m[2] for m in data["metas"] if m[2]}
    assert {"blocks.0/attn/q", "blocks.3/down", "embedding", "head/proj"} <= scopes
