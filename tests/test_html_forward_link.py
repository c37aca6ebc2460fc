"""The viewer's `differentiates ... forward node %i` line, in a real headless Chromium: the
forward node is the one the backward node was made for, or none is named. Metadata (name,
loc, scope) does not say which node: two reshapes of one function in one scope with no
source location (tinygrad, ONNX imports) were linked to the first of them, and the gradient
of samples/logreg.uop linked `∇ log` to log's ln 2 constant and to its own ∇ group."""

from __future__ import annotations

import bisect

import pytest

import uopcli.core.gradient as gradient_module
from uopcli import Graph, UOp, load
from uopcli.core.uop import Metadata, next_serial
from uopcli.tools.differentiate import differentiate
from uopcli.views.html.page import page_html

from test_html_browser import SAMPLES, Page  # noqa: F401  (skips as that module does)
from test_html_browser import browser  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(180)


def two_reshapes() -> Graph:
    """Reshapes A (4,8)->(2,16) and B (2,16)->(32,), both `reshape` in scope `attn`, no loc."""
    meta = Metadata(name="reshape", scope="attn")
    x, w = UOp.param("x", (4, 8)), UOp.param("w", (2, 16))
    a = x.reshape(2, 16).set_meta(meta)
    b = (a * w).exp2().reshape(32).set_meta(meta)
    return Graph({"loss": b.exp2().sum()}, inputs=[x, w])


def open_page(chromium, graph, tmp_path, name):
    path = tmp_path / f"{name}.html"
    path.write_text(page_html(graph, title=name), encoding="utf-8")
    return Page(chromium, path)


def forward_line(page: Page, i: int) -> str:
    page.js("(i) => uopViewer.goTo(i)", i)
    return page.page.inner_text("#details div.fwd")


def test_each_reshape_gradient_links_to_its_own_reshape(browser, tmp_path):  # noqa: F811
    grad, _ = differentiate(two_reshapes(), ["x"], keep_forward=True)
    order = grad.nodes()
    reshapes = [i for i, n in enumerate(order) if n.op == "RESHAPE" and n.meta is not None and n.meta.name == "reshape"]
    a, b = (i for i in reshapes if not order[i].meta.backward)
    back_b, back_a = (i for i in reshapes if order[i].meta.backward)
    assert order[a].shape == (2, 16) and order[b].shape == (32,)
    assert order[back_b].shape == (2, 16) and order[back_a].shape == (4, 8)
    page = open_page(browser, grad, tmp_path, "reshapes")
    assert forward_line(page, back_b) == f"differentiates reshape\nforward node %{b} RESHAPE (32,) float32[32]"
    assert forward_line(page, back_a) == f"differentiates reshape\nforward node %{a} RESHAPE (2,16) float32[2,16]"
    assert page.page.get_attribute("#details div.fwd a[data-node]", "data-node") == str(a)
    page.close()


def test_a_gradient_whose_forward_nodes_are_not_kept_names_none(browser, tmp_path):  # noqa: F811
    grad, _ = differentiate(load(SAMPLES / "logreg.uop"), ["w"])
    order = grad.nodes()
    fdiv = next(i for i, n in enumerate(order) if n.op == "FDIV" and n.meta is not None and n.meta.name == "log")
    page = open_page(browser, grad, tmp_path, "logreg")
    # not the ln 2 CONST log made, not its own `∇ log` group: what is known, the function
    assert forward_line(page, fdiv) == "differentiates log\nforward node not in this graph (no computed node of log here)"
    assert page.js("() => document.querySelectorAll('#details div.fwd a').length") == 0
    page.close()


def made_for(graph: Graph, wrt: list[str]) -> tuple[Graph, dict[int, int]]:
    """The gradient with the forward kept, and {backward node: the forward node whose rule made it}."""
    made = []
    rules_for = gradient_module._rules_for_one_call

    def recording(bodies):
        def wrap(rule):
            def recorded(g, node, need):
                made.append((next_serial(), node))
                return rule(g, node, need)
            return recorded
        return {op: wrap(rule) for op, rule in rules_for(bodies).items()}
    gradient_module._rules_for_one_call = recording
    try:
        grad, _ = differentiate(graph, wrt, keep_forward=True)
    finally:
        gradient_module._rules_for_one_call = rules_for
    order = grad.nodes()
    index = {n: i for i, n in enumerate(order)}
    starts = [serial for serial, _ in made] + [next_serial()]
    truth = {}
    for i, n in enumerate(order):
        if n.meta is not None and n.meta.backward and made and starts[0] <= n.serial < starts[-1]:
            truth[i] = index.get(made[bisect.bisect_right(starts, n.serial) - 1][1], -1)
    return grad, truth


@pytest.mark.parametrize("sample", ["mlp", "logreg", "attention", "gpt", "conv2d"])
def test_a_named_forward_node_is_the_one_whose_rule_made_the_backward_node(browser, tmp_path, sample):  # noqa: F811
    graph = load(SAMPLES / f"{sample}.uop")
    grad, truth = made_for(graph, [n for n in graph.input_names if graph.input(n).dtype.name.startswith("float")])
    page = open_page(browser, grad, tmp_path, sample)
    found = page.js("(ids) => ids.map((i) => uopViewer.forwardOf(i).node)", list(truth))
    wrong = [(i, truth[i], node) for i, node in zip(truth, found) if node >= 0 and node != truth[i]]
    named = sum(node >= 0 for node in found)
    assert wrong == [] and named >= len(truth) // 5, (wrong, named, len(truth))
    page.close()
