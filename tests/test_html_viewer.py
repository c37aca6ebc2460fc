"""The HTML viewer's Python side: the groups, the levels dot lays out, the page's data, the
values, and the commands (`render -o OUT.html`, `view`, `eval --keep-intermediates`).
What the page does in a browser is tests/test_html_browser.py's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from uopcli import Graph, UOp, load
from uopcli.views.html import groups as groups_module
from uopcli.views.html.groups import Grouping, is_copied
from uopcli.views.html.layout import COPY, GROUP, NODE, REF_GROUP, REF_NODE, Levels
from uopcli.views.html.page import page_html

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
sys.path.insert(0, str(ROOT / "bench"))
from scoped_gpt import gradient_graph  # noqa: E402
from _reference_eval import reference_evaluate  # noqa: E402

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed (make dot)")


def uopgrad(*args, env=None, check=True):
    exe = Path(sys.executable).parent / "uopgrad"
    done = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def page_data(html: str) -> dict:
    text = re.search(r'<script type="application/json" id="uop-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(text)


def levels_of(graph: Graph) -> tuple[Grouping, Levels]:
    grouping = Grouping(graph)
    inputs = {grouping.index[n]: n.arg for n in graph.inputs}
    outputs: dict[int, list[str]] = {}
    for name, node in graph.outputs.items():
        outputs.setdefault(grouping.index[node], []).append(name)
    return grouping, Levels(grouping, inputs, outputs)


@pytest.fixture(scope="module")
def scoped():
    """A 3-block GPT-like gradient graph with scopes (about 800 nodes), forward kept."""
    return gradient_graph(3)


# ----------------------------------------------------------------------------- groups

def test_every_node_has_one_home_and_sizes_add_up(scoped):
    grouping = Grouping(scoped)
    assert len(grouping.home) == len(scoped.nodes())
    assert sorted(i for g in grouping.groups for i in g.nodes) == list(range(len(grouping.order)))
    assert grouping.root.size == len(grouping.order)
    for group in grouping.groups:
        assert group.size == len(group.nodes) + sum(c.size for c in group.children)
        assert sum(group.ops.values()) == group.size
        for child in group.children:
            assert child.parent is group and child.depth == group.depth + 1


def test_scopes_nest_and_backward_twins_sit_beside_their_forward_groups(scoped):
    grouping = Grouping(scoped)
    by_label = {}
    for group in grouping.groups:
        by_label.setdefault(group.label, []).append(group)
    (gpt,) = by_label["gpt"]
    assert gpt.parent is grouping.root and not gpt.backward
    labels = [c.label for c in gpt.children]
    for i in range(3):  # `gpt` holds nearly everything: ∇ block.i branches off beside block.i, inside gpt
        (block,) = by_label[f"block.{i}"]
        (grad,) = by_label[f"∇ block.{i}"]
        assert block.parent is gpt and grad.parent is gpt and grad.backward and not block.backward
        assert block.twin is grad and grad.twin is block
        assert {c.label for c in block.children} == {"ln1", "attn", "ln2", "mlp"}
        assert {c.label for c in grad.children} >= {"∇ attn", "∇ mlp"}
    assert f"block.{0}" in labels and "∇ block.0" in labels
    # a block's weights have no metadata: they join the deepest group of their (forward) users
    wqkv = grouping.index[scoped.input("wqkv1")]
    assert grouping.home[wqkv].label == "attn" and grouping.home[wqkv].parent is by_label["block.1"][0]
    # every backward node with a scope sits under a ∇ group, every forward one under none
    for i, node in enumerate(grouping.order):
        if node.meta is not None and node.meta.scope and not is_copied(node):
            chain, group = [], grouping.home[i]
            while group is not None:
                chain.append(group.backward)
                group = group.parent
            assert any(chain) == bool(node.meta.backward), (node, node.meta)


def test_function_bodies_are_groups_placed_with_their_calls():
    grouping = Grouping(load(SAMPLES / "rnn.uop"))
    (body,) = [g for g in grouping.groups if g.kind == "body"]
    assert body.label == "FUNCTION rnn_cell (5 calls)" and body.parent is grouping.root
    calls = [n for n in grouping.order if n.op == "FUNCTION"]
    assert len(calls) == 5 and body.size == sum(1 for i, _ in enumerate(grouping.order)
                                                 if _inside(grouping, i, body))
    ste = Grouping(load(SAMPLES / "ste.uop"))
    bodies = {g.label: g for g in ste.groups if g.kind == "body"}
    assert set(bodies) == {"CALL quantise_ste", "∇ backward body of CALL quantise_ste"}
    assert bodies["∇ backward body of CALL quantise_ste"].backward
    assert not bodies["CALL quantise_ste"].backward


def _inside(grouping, i, group) -> bool:
    home = grouping.home[i]
    while home is not None and home is not group:
        home = home.parent
    return home is group


def test_calls_of_one_front_end_function_are_groups_numbered_apart():
    grouping = Grouping(load(SAMPLES / "gpt.uop"))
    labels = Counter(g.label for g in grouping.groups if g.parent is grouping.root)
    assert labels["layernorm #1"] == labels["layernorm #2"] == labels["layernorm #3"] == 1
    for group in grouping.groups:
        if group.kind == "call":
            names = {grouping.order[i].meta.name for i in group.nodes if not is_copied(grouping.order[i])}
            assert len(names) == 1
            name = names.pop()
            assert group.label.split(" #")[0] == ("∇ " if group.backward else "") + name


def test_large_levels_split_into_parts_forward_and_backward_apart(monkeypatch):
    monkeypatch.setattr(groups_module, "MAX_ITEMS", 7)
    x = UOp.param("x", (3,))
    y = x
    for _ in range(30):
        y = (y * 1.5).sin()
    from uopcli.tools.differentiate import differentiate
    graph, _ = differentiate(Graph({"y": y.sum()}), ["x"], keep_forward=True)
    grouping = Grouping(graph)
    for group in grouping.groups:
        items = len(group.children) + sum(1 for i in group.nodes if not is_copied(grouping.order[i]))
        assert items <= 7, (group.label, items)
    parts = [g for g in grouping.groups if g.kind == "part"]
    assert parts and any(p.backward for p in parts) and any(not p.backward for p in parts)
    for part in parts:
        for i in part.nodes:
            node = grouping.order[i]
            if not is_copied(node):
                assert bool(node.meta and node.meta.backward) == part.backward


# ----------------------------------------------------------------------------- levels and layout

def test_each_graph_edge_is_drawn_at_exactly_one_level(scoped):
    grouping, levels = levels_of(scoped)
    index = grouping.index
    expected_copies, expected_edges = set(), 0
    for user in grouping.order:
        if not levels.standalone[index[user]]:
            continue
        srcs = list(user.src) + ([user.arg.grad] if user.op == "CALL" and user.arg.grad is not None else [])
        for src in srcs:
            if levels.standalone[index[src]]:
                expected_edges += 1
            else:
                expected_copies.add((index[src], index[user]))
    copies = {(lv.items[a][1], lv.items[b][1]) for lv in levels.levels for a, b in lv.edges if lv.items[a][0] == COPY}
    counted = sum(c for lv in levels.levels for (a, b), c in lv.edges.items() if lv.items[a][0] != COPY)
    assert copies == expected_copies
    assert counted == expected_edges


@needs_dot
def test_dot_places_every_box_and_each_edge_ends_at_its_user(scoped):
    grouping, levels = levels_of(scoped)
    levels.lay_out()
    gpt = next(g for g in grouping.groups if g.label == "gpt")
    for level in levels.levels:
        assert len(level.boxes) == len(level.items)
        for (kind, ref, w, h, _), (x, y) in zip(level.items, level.boxes):
            assert 0 <= x and x + w <= level.width and 0 <= y and y + h <= level.height
        for (a, b) in level.edges:
            points = level.paths[a, b]
            (x, y), (_, _, w, h, _) = level.boxes[b], level.items[b]
            end_x, end_y = points[-2], points[-1]  # the arrow (about 10 px) runs from here into the user's box
            gap = max(x - end_x, end_x - (x + w), y - end_y, end_y - (y + h), 0)
            assert gap <= 14, (level.group.label, a, b, (end_x, end_y), (x, y, w, h))
    # in `gpt`, each ∇ block sits on the rank of its block, to its side
    level = levels.levels[gpt.id]
    assert len(level.twins) == 4 and level.reversed  # block.0-2 and head
    for a, b in level.twins:
        (xa, ya), (xb, yb) = level.boxes[a], level.boxes[b]
        ha, hb = level.items[a][3], level.items[b][3]
        assert abs((ya + ha / 2) - (yb + hb / 2)) < 1 and xa != xb


def test_long_edges_become_references_beside_their_user():
    x = UOp.param("x", (4,))
    y = x
    for _ in range(20):
        y = y.sin()
    graph = Graph({"out": (y + x).sum()})  # x feeds the first sin and, 20 ranks down, the add
    _, levels = levels_of(graph)
    top = levels.levels[0]
    refs = [k for k, item in enumerate(top.items) if item[0] == REF_NODE]
    assert [top.items[k][1] for k in refs] == [0]  # node 0 is x, in canonical order
    (user,) = [b for a, b in top.edges if a == refs[0]]
    assert top.items[user][0] == NODE and graph.nodes()[top.items[user][1]].op == "ADD"
    assert REF_GROUP not in {item[0] for item in top.items} and GROUP not in {item[0] for item in top.items}


# ----------------------------------------------------------------------------- the page

@needs_dot
def test_the_page_holds_every_node_and_level_and_nothing_from_outside():
    graph = load(SAMPLES / "mlp.uop")
    html = page_html(graph, title="t </script><b>x</b> __DATA__")
    data = page_data(html)
    order = graph.nodes()
    assert len(data["n"]["op"]) == len(order) == len(data["home"])
    assert [data["ops"][k] for k in data["n"]["op"]] == [n.op for n in order]
    assert data["outputs"] == [["loss", order.index(graph.outputs["loss"])]]
    assert [name for _, name in data["inputs"]] == graph.input_names
    assert len(data["levels"]) == len(data["groups"]["label"])
    assert "<title>t &lt;/script&gt;&lt;b&gt;x&lt;/b&gt; __DATA__</title>" in html
    assert data["title"] == "t </script><b>x</b> __DATA__"
    assert not re.search(r"(src|href)=\"(https?:)?//", html) and "http://" not in html.replace(
        "http://www.w3.org/2000/svg", "")  # no fetch, no CDN: the SVG namespace is the only URL


def test_values_become_min_mean_max_per_node(tmp_path):
    from uopcli.views.html.values import value_stats
    graph = load(SAMPLES / "poly.uop")
    x = graph.inputs[0]
    path = tmp_path / "v.npz"
    np.savez(path, x=np.full(x.shape, 2.0, np.float32), y=np.array(33.0, np.float32),
             **{"%1": np.full(x.shape, 2.0, np.float32), "t[0]": np.zeros(3)})
    stats = value_stats(graph, str(path))
    order = graph.nodes()
    assert stats[order.index(graph.outputs["y"])] == ["33", "33", "33", ""]
    assert stats[order.index(x)] == ["2", "2", "2", ""]
    from uopcli.views.html.values import summary
    assert summary(np.array([1.0, np.nan, 3.0])) == ["1", "2", "3", "1"]
    assert summary(np.array([True, False, False, False])) == ["0", "0.25", "1", ""]
    np.savez(path, y=np.zeros(5, np.float32))
    with pytest.raises(Exception, match=r"member 'y' has shape \[5\], but node %\d+ \(\w+\) is float32\[\]"):
        value_stats(graph, str(path))


# ----------------------------------------------------------------------------- commands

@needs_dot
def test_eval_keep_intermediates_stores_every_main_graph_node_as_the_reference_computes_it(tmp_path):
    grad = tmp_path / "g.uop"
    uopgrad("diff", SAMPLES / "mlp.uop", "--wrt", "w1,w2", "--keep-forward", "-o", grad)
    uopgrad("eval", grad, "--random", "--seed", "3", "--keep-intermediates", "-o", tmp_path / "v.npz")
    graph = load(grad)
    order = graph.nodes()
    with np.load(tmp_path / "v.npz") as archive:
        stored = {name: archive[name] for name in archive.files}
    keys = [k for k in stored if k.startswith("%")]
    assert len(keys) == sum(1 for n in order if n.shape is not None) and set(graph.outputs) <= set(stored)
    inputs = {n.arg: stored[f"%{order.index(n)}"] for n in graph.inputs}
    nodes = [order[int(k[1:])] for k in keys]
    for key, node, want in zip(keys, nodes, reference_evaluate(nodes, inputs)):
        np.testing.assert_allclose(stored[key], want, rtol=2e-5, atol=1e-5, err_msg=f"{key} {node.op}")
    np.testing.assert_array_equal(stored["loss"], stored[f"%{order.index(graph.outputs['loss'])}"])
    # the page shows them
    uopgrad("render", grad, "-o", tmp_path / "g.html", "--values", tmp_path / "v.npz")
    data = page_data((tmp_path / "g.html").read_text())
    i = order.index(graph.outputs["grad_w1"])
    g = stored["grad_w1"].astype(np.float64)
    assert data["values"][str(i)] == [f"{g.min():.6g}", f"{g.mean():.6g}", f"{g.max():.6g}", ""]


def test_keep_intermediates_refuses_what_it_cannot_do(tmp_path):
    done = uopgrad("eval", SAMPLES / "poly.uop", "-i", "x=1", "--keep-intermediates", check=False)
    assert done.returncode == 2 and "give -o too" in done.stderr
    x = UOp.param("x", ())
    from uopcli import save
    save(Graph({"%0": x + 1}), tmp_path / "clash.uop")
    done = uopgrad("eval", tmp_path / "clash.uop", "-i", "x=1", "--keep-intermediates", "-o", tmp_path / "o.npz",
                   check=False)
    assert done.returncode == 1 and "output '%0' is named like one" in done.stderr
    assert not (tmp_path / "o.npz").exists() and done.stderr.count("\n") == 1


@needs_dot
def test_render_html_takes_any_size_and_refuses_static_only_options(tmp_path):
    graph = gradient_graph(3)
    from uopcli import save
    save(graph, tmp_path / "big.uop")
    assert len(graph.nodes()) > 500  # static render's limit does not apply
    uopgrad("render", tmp_path / "big.uop", "--format", "html", "-o", tmp_path / "page.out")
    assert page_data((tmp_path / "page.out").read_text())["title"] == "big.uop"
    uopgrad("render", tmp_path / "big.uop", "-o", tmp_path / "part.html", "--outputs", "grad_wo0")
    part = page_data((tmp_path / "part.html").read_text())
    assert [name for name, _ in part["outputs"]] == ["grad_wo0"] and len(part["n"]["op"]) < len(graph.nodes())
    for option in (["--around", "x"], ["--collapse-functions"], ["--max-nodes", "10"]):
        done = uopgrad("render", tmp_path / "big.uop", "-o", tmp_path / "no.html", *option, check=False)
        assert done.returncode == 2 and "html page holds every node" in done.stderr
    done = uopgrad("render", tmp_path / "big.uop", "-o", tmp_path / "no.html", "--values", SAMPLES / "mlp.uop",
                   check=False)
    assert done.returncode == 1 and "not a .npz file" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "no.html").exists()
    done = uopgrad("render", tmp_path / "big.uop", "-o", tmp_path / "no.svg", "--values", "v.npz", check=False)
    assert done.returncode == 2 and "--values is shown by the html page" in done.stderr


@needs_dot
def test_view_prints_the_path_without_a_display_and_opens_a_browser_with_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env["TMPDIR"] = str(tmp_path)
    done = uopgrad("view", SAMPLES / "logreg.uop", env=env)
    path = Path(done.stdout.strip())
    assert path.parent == tmp_path and path.name.startswith("uopgrad-logreg-") and path.suffix == ".html"
    assert page_data(path.read_text())["title"] == "logreg.uop"
    # with a display: the browser (here a script standing in for one, via BROWSER) gets the file's URL
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    env.update(DISPLAY=":99", BROWSER=str(browser))
    done = uopgrad("view", SAMPLES / "logreg.uop", env=env)
    assert done.stdout == "" and "opened " in done.stderr
    url = opened.read_text().strip()
    assert url.startswith("file://") and Path(url[len("file://"):]).read_text().startswith("<!DOCTYPE html>")
