#!/usr/bin/env python3
"""Take the README's picture of the HTML viewer: the gradient of the one-block GPT sample,
its top level in headless Chromium, forward groups down the left, their ∇ twins beside
them, a backward node (of the logits slice) selected.

    .venv/bin/python docs/html_picture.py     # writes docs/html-viewer.png

The page is what the command line writes:
    uopgrad diff samples/gpt.uop --wrt emb,pos,ln_g,ln_b,wqkv,wo,w1,w2 -o gpt-grad.uop
    uopgrad render gpt-grad.uop -o gpt-grad.html
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from uopcli import load
from uopcli.tools.differentiate import differentiate
from uopcli.views.html.groups import Grouping
from uopcli.views.html.page import page_html

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "samples" / "gpt.uop"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync"]


def main() -> None:
    from playwright.sync_api import sync_playwright
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    forward = load(SAMPLE)
    gradient, _ = differentiate(forward, forward.input_names)
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "gpt-grad.html"
        page_path.write_text(page_html(gradient, title="gpt-grad.uop"), encoding="utf-8")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.goto(page_path.as_uri())
            page.wait_for_function("+(document.body.dataset.draws || 0) >= 1")
            selected = _top_level_backward_node(gradient, "__getitem__")
            page.evaluate("(i) => { uopViewer.goTo(i); }", selected)
            page.evaluate("document.getElementById('fit').click()")
            page.wait_for_timeout(200)
            page.screenshot(path=str(HERE / "html-viewer.png"))
            browser.close()


def _top_level_backward_node(graph, name: str) -> int:
    """A node of the top level that differentiation made for forward function `name`."""
    grouping = Grouping(graph)
    return next(i for i, node in enumerate(grouping.order) if grouping.home[i] is grouping.root
                and node.meta is not None and node.meta.backward and node.meta.name == name)


if __name__ == "__main__":
    main()
