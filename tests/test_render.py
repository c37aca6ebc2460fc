"""uopgrad render: real graphs drawn by the real `dot`, and the SVG read back."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from uopcli import Metadata, UOp, compute_gradient, load, save
from uopcli.core.graph import Graph
from uopcli.core.ops import FAMILY
from uopcli.views.graphviz import (BACKWARD_BORDER, DEFAULT_MAX_NODES, FAMILY_COLOURS, RenderError, RenderWarning,
                                  arg_text, render, to_dot, type_text)
from uopcli.core.uop import next_serial, tag_new_nodes

ROOT = Path(__file__).resolve().parent.parent
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz `dot` is not installed (make setup installs it)")
SVG = "{http://www.w3.org/2000/svg}"


# ----------------------------------------------------------------------------- graphs

def mlp() -> Graph:
    x = UOp.param("x", (4, 3))
    w1 = UOp.param("w1", (3, 5))
    w2 = UOp.param("w2", (5, 2))
    hidden = (x @ w1).relu()
    out = (hidden @ w2).sum(1, keepdim=True) * 0.5
    padded = x.pad(((0, 1), (1, 0)))
    return Graph({"loss": out.sum(), "padded": padded})


def backward_tagged() -> tuple[Graph, set[UOp]]:
    """A forward graph plus nodes tagged as differentiation tags them (backward=True)."""
    x = UOp.param("x", (6,))
    y = x.sigmoid()
    since = next_serial()
    grad = y * (1 - y) * 3.0
    tag_new_nodes(grad, since, Metadata("sigmoid", "model.py:7", True))
    new = {n for n in grad.toposort() if n.serial >= since}
    return Graph({"y": y, "grad_x": grad}), new


def functions() -> Graph:
    x = UOp.param("x", (3,))
    w = UOp.param("w", (3,))
    f = UOp.trace_function("affine", lambda a, b: (a * b + 1.0,), x, w)
    c1 = UOp.trace_call("square", lambda a: (a * a,), lambda a, g: (g * a * 2.0,), x)
    c2 = UOp.trace_call("square", lambda a: (a * a,), lambda a, g: (g * a * 2.0,), w)  # same bodies as c1
    return Graph({"f": f[0], "s1": c1[0], "s2": c2[0]})


def chain(length: int) -> Graph:
    x = UOp.param("x", (2,))
    node = x
    for _ in range(length):
        node = node * 1.5
    return Graph({"y": node})


# ----------------------------------------------------------------------------- reading SVG

def svg_nodes(svg: bytes) -> dict[str, dict]:
    """Drawn node id -> {'text': [lines], 'shape': attributes of its polygon/path/ellipse}."""
    tree = ET.fromstring(svg)
    out = {}
    for group in tree.iter(f"{SVG}g"):
        if group.get("class") != "node":
            continue
        title = group.find(f"{SVG}title").text
        texts = [t.text or "" for t in group.iter(f"{SVG}text")]
        shape = next((el.attrib for el in group.iter() if el.tag in (f"{SVG}polygon", f"{SVG}path",
                                                                     f"{SVG}ellipse")), {})
        out[title] = {"text": texts, "shape": dict(shape)}
    for title in list(out):  # a constant is drawn once per use: n7_0, n7_1, ...; n7 is its first
        base, _, use = title.rpartition("_")
        if use == "0" and base not in out:
            out[base] = out[title]
    return out


def svg_clusters(svg: bytes) -> dict[str, list[str]]:
    tree = ET.fromstring(svg)
    return {g.find(f"{SVG}title").text: [t.text or "" for t in g.iter(f"{SVG}text")]
            for g in tree.iter(f"{SVG}g") if g.get("class") == "cluster"}


def drawn_ids(graph: Graph) -> dict[UOp, str]:
    return {node: f"n{i}" for i, node in enumerate(graph.nodes())}


def test_a_constant_is_drawn_beside_each_of_its_users():
    """One shared constant would pull edges through every layer (dot took minutes at 450
    nodes); each use gets its own copy, and an output constant keeps its own box too."""
    x = UOp.param("x", (3,))
    layers = x
    for _ in range(5):
        layers = (layers * 0.5 + 1.0).relu()
    half = UOp.const(0.5)
    graph = Graph({"y": layers.sum(), "half": half})
    dot = to_dot(graph)
    half_id = drawn_ids(graph)[half]
    copies = [f"{half_id}_{k}" for k in range(5)]
    ids = {half_id, *copies}
    declared = [line.split()[0] for line in dot.splitlines() if line.split() and line.split()[0] in ids
                and " -> " not in line]
    assert declared == [half_id, *copies]
    tails = [line.split()[0] for line in dot.splitlines() if " -> " in line and line.split()[0] in ids]
    assert sorted(tails) == sorted([*copies, half_id])  # each copy to one user; the box to its output


def test_a_constant_is_drawn_beside_its_user_in_a_selection_too():
    x, two = UOp.param("x", (3,)), UOp.const(2.0)
    graph = Graph({"y": (x * two).sin()})
    ids = drawn_ids(graph)
    dot = to_dot(graph, around="y", depth=3)
    assert f"  {ids[two]}_0 [" in dot and f"  {ids[two]} [" not in dot  # beside its user
    lone = to_dot(Graph({"y": x * two}), outputs=["y"])
    assert lone.count("CONST 2.0</B>") == 1


def test_no_edge_runs_more_than_a_few_levels_in_a_gradient_graph():
    """A gradient reads forward values and weights from far above; each such source gets a
    dotted reference beside its user (dot spent minutes on the hidden nodes of long edges)."""
    from uopcli.tools.differentiate import differentiate
    from uopcli.views.graphviz import LONG_EDGE
    x, weights = UOp.param("x", (4, 8)), []
    h = x
    for i in range(6):
        weights.append(UOp.param(f"w{i}", (8, 8)))
        h = (h @ weights[-1]).tanh()
    forward = Graph({"loss": (h * h).sum()}, inputs=[x, *weights])
    grad, _ = differentiate(forward, [f"w{i}" for i in range(6)])
    order = grad.nodes()
    level = {}
    for node in order:
        level[node] = 1 + max((level[s] for s in node.src), default=-1)
    by_id = {f"n{i}": node for i, node in enumerate(order)}
    dot = to_dot(grad, max_nodes=None)
    spans, references = [], 0
    for line in dot.splitlines():
        if " -> " not in line:
            continue
        tail, head = line.split()[0], line.split()[2].rstrip(";")
        if "_r" in tail:
            references += 1
            tail = tail.split("_")[0]
            assert level[by_id[head]] - level[by_id[tail]] > LONG_EDGE  # only long edges are cut
        elif tail in by_id and head in by_id:
            spans.append(level[by_id[head]] - level[by_id[tail]])
    assert references > 10 and max(spans) <= LONG_EDGE
    assert "↑ dotted box: that node, drawn higher up" in dot and "(above)" in dot


# ----------------------------------------------------------------------------- labels

def test_labels_show_op_short_arg_type_and_function_name():
    x = UOp.param("x", (2, 3))
    assert arg_text(x.sum(1, keepdim=True)) == "ADD (1,)"
    assert arg_text(UOp.const(0.5)) == "0.5"
    assert arg_text(x.pad(((0, 1), (1, 0)))) == "((0,1),(1,0))"
    assert arg_text(x.flip(1)) == "axes (1,)"
    assert arg_text(UOp.slot(2, (3,))) == "slot 2"
    assert type_text(x) == "float32[2,3]" and type_text(UOp.const(1)) == "int32[]"
    dot = to_dot(mlp())
    for text in ("<B>REDUCE ADD (1,)</B>", "<B>CONST 0.5</B>", "<B>PAD ((0,1),(1,0))</B>", ">relu<", ">matmul<"):
        assert text in dot


@needs_dot
def test_every_node_is_in_the_svg_with_its_label():
    graph = mlp()
    nodes = svg_nodes(render(graph, "svg"))
    for node, node_id in drawn_ids(graph).items():
        text = " ".join(nodes[node_id]["text"])
        if node in graph.inputs:
            assert node.arg in text and "input " + type_text(node) in text
        else:
            assert f"{node.op} {arg_text(node)}".strip() in text
            assert type_text(node) in text
            if node.meta is not None and node.meta.name:
                assert node.meta.name in text
    outputs = [n for n in nodes.values() if "output" in n["text"]]
    assert sorted(n["text"][0] for n in outputs) == ["loss", "padded"]
    # inputs and outputs stand out: thick black borders
    for node_id in ("n%d" % list(graph.nodes()).index(graph.input("x")),):
        assert nodes[node_id]["shape"]["stroke-width"] == "2.5"
    assert all(n["shape"]["stroke-width"] == "2.5" for n in outputs)


@needs_dot
def test_backward_nodes_are_drawn_distinctly_and_name_their_forward_function():
    graph, new = backward_tagged()
    nodes = svg_nodes(render(graph, "svg"))
    ids = drawn_ids(graph)
    # nodes are shared process-wide and the first tag wins: a constant another test's
    # gradient made first is a backward node too, so the drawing follows each node's tag
    tagged = {node for node in ids if node.meta is not None and node.meta.backward}
    assert new and new <= tagged and len(tagged) < len(ids)
    for node, node_id in ids.items():
        shape = nodes[node_id]["shape"]
        if node in tagged:
            assert shape["stroke"] == BACKWARD_BORDER and "stroke-dasharray" in shape
            assert (f"∇ {node.meta.name}" if node.meta.name else "∇") in nodes[node_id]["text"]
            assert node not in new or "∇ sigmoid" in nodes[node_id]["text"]
        else:
            assert shape.get("stroke") != BACKWARD_BORDER and "stroke-dasharray" not in shape
            assert not any("∇" in t for t in nodes[node_id]["text"])


def test_colours_follow_the_op_family_and_never_change():
    dot = to_dot(mlp())
    for node, node_id in drawn_ids(mlp()).items():
        # (a constant: its first copy)
        line = next(line for line in dot.splitlines() if line.strip().startswith((node_id + " [", node_id + "_0 [")))
        assert f'fillcolor="{FAMILY_COLOURS[FAMILY[node.op]][0]}"' in line
    assert len({c for c, _ in FAMILY_COLOURS.values()}) == len(FAMILY_COLOURS)  # one colour per family


@needs_dot
def test_legend_lists_the_families_present_and_the_backward_style():
    graph, _ = backward_tagged()
    svg = render(graph, "svg")
    assert "cluster_legend" in svg_clusters(svg)
    legend = " ".join(svg_nodes(svg)["legend"]["text"])
    present = {FAMILY[n.op] for n in graph.nodes()}
    for family, (_, text) in FAMILY_COLOURS.items():
        assert (text in legend) == (family in present), family
    assert "backward node" in legend and "forward node" in legend


@needs_dot
def test_function_and_call_bodies_are_clusters_and_a_shared_body_is_drawn_once():
    graph = functions()
    svg = render(graph, "svg")
    clusters = svg_clusters(svg)
    titles = sorted(" ".join(texts) for name, texts in clusters.items() if name != "cluster_legend")
    assert titles == ["CALL square (2 calls)", "FUNCTION affine", "∇ backward body of CALL square (2 calls)"]
    dot = to_dot(graph)
    assert dot.count('[label="body"') == 3 and dot.count('[label="backward"') == 2
    # each distinct body is drawn once, with its own slot PARAMs: affine, square, square's backward
    nodes = svg_nodes(svg)
    assert sum("PARAM slot 0" in " ".join(n["text"]) for n in nodes.values()) == 3


def test_deeply_nested_functions_are_nested_clusters_without_recursion():
    x = UOp.param("x", (2,))
    slot = UOp.slot(0, (2,))
    out = slot * 2.0
    for i in range(1200):  # past the default recursion limit
        out = UOp.function(f"f{i}", [out], [slot])[0] + 1.0
    dot = to_dot(Graph({"y": UOp.function("top", [out], [x])[0]}), max_nodes=None)
    assert dot.count("subgraph cluster_b") == 1201
    depth = deepest = 0
    for line in dot.splitlines():
        depth += line.endswith("{") - (line.strip() == "}")
        deepest = max(deepest, depth)
    assert deepest == 1 + 1201 and depth == 0  # each body inside its caller's
    # the indentation stops growing after a few levels: 3,000 levels made 65 MB of spaces
    assert max(len(line) - len(line.lstrip()) for line in dot.splitlines()) <= 20


def test_around_draws_no_empty_clusters():
    graph = functions()
    dot = to_dot(graph, around="f", depth=1)  # GETTUPLE and its FUNCTION, none of the bodies
    assert "FUNCTION affine" in dot and "subgraph cluster_b" not in dot
    assert "… TUPLE" not in dot  # the body edge is not a cut source


def test_collapse_functions_draws_each_call_as_one_box():
    graph = functions()
    dot = to_dot(graph, collapse_functions=True)
    assert "subgraph cluster_b" not in dot and "PARAM slot" not in dot
    assert dot.count("shape=box3d") == 3
    assert "CALL square" in dot and "FUNCTION affine" in dot


def test_nested_function_body_is_drawn_inside_its_caller():
    x = UOp.param("x", (3,))
    outer = UOp.trace_function("outer", lambda a: (UOp.trace_function("inner", lambda b: (b * 3.0,), a * 2.0)[0],), x)
    dot = to_dot(Graph({"y": outer[0]}))
    lines = dot.splitlines()
    opened = [i for i, line in enumerate(lines) if line.strip().startswith("subgraph cluster_b")]
    assert len(opened) == 2
    assert lines[opened[1]].startswith("    ") and not lines[opened[0]].startswith("    ")


@needs_dot
def test_png_and_pdf_are_produced():
    png = render(mlp(), "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 200 and height > 200
    assert render(mlp(), "pdf")[:5] == b"%PDF-"


# ----------------------------------------------------------------------------- size and parts

def test_a_graph_over_the_limit_is_refused_with_a_hint():
    assert DEFAULT_MAX_NODES == 500
    with pytest.raises(RenderError, match=r"outputs=\[names\] or around=name, depth=K or raise max_nodes, or draw "
                                          r"the whole graph as a page a level at a time: render\(graph, 'html'\)$") \
            as caught:  # Python's words; the CLI's, its flags:
        to_dot(chain(600))
    assert caught.value.cli_message.endswith("draw a part with --outputs NAMES or --around NAME --depth K or raise "
                                             "--max-nodes, or draw the whole graph as a page a level at a time: "
                                             "-o graph.html (or uopgrad view)")
    with pytest.raises(RenderError, match="more than the limit of 5"):
        render(mlp(), "dot", max_nodes=5)
    assert to_dot(chain(600), max_nodes=None).count(" -> ") >= 600


def test_the_hint_offers_collapsing_functions_only_where_there_are_functions_to_collapse():
    with pytest.raises(RenderError) as plain:
        to_dot(chain(600))
    assert "collapse" not in plain.value.cli_message and "collapse" not in str(plain.value)
    with pytest.raises(RenderError, match=r"depth=K, draw each function as one box with collapse_functions=True, "
                                          r"or raise max_nodes") as caught:
        to_dot(functions(), max_nodes=5)
    assert "--depth K, draw each function as one box with --collapse-functions, or raise --max-nodes" \
        in caught.value.cli_message
    with pytest.raises(RenderError) as collapsed:
        to_dot(functions(), max_nodes=5, collapse_functions=True)
    assert "collapse" not in collapsed.value.cli_message and "more than the limit of 5" in str(collapsed.value)


def test_a_huge_chain_is_refused_fast_and_drawn_in_part_without_recursion():
    graph = chain(20_000)  # far past the recursion limit: every walk is iterative
    with pytest.raises(RenderError):
        to_dot(graph)
    dot = to_dot(graph, around="y", depth=3)
    assert dot.count("<B>MUL</B>") == 4 and "… MUL float32[2]" in dot  # y and 3 steps up


def test_outputs_draws_only_those_outputs():
    graph = mlp()
    dot = to_dot(graph, outputs=["padded"])
    assert "PAD ((0,1),(1,0))" in dot and "matmul" not in dot and "w1" not in dot
    assert ">padded<" in dot and ">loss<" not in dot
    assert to_dot(graph, outputs="padded") == dot
    with pytest.raises(RenderError, match="no output named 'nope'; outputs: loss, padded"):
        to_dot(graph, outputs=["nope"])


def test_around_draws_k_steps_both_ways_and_marks_cut_edges():
    x = UOp.param("x", (3,))
    a = x * 2.0
    b = a + 1.0
    c = b.sqrt()
    graph = Graph({"y": c.sum()})
    near = to_dot(graph, around="x", depth=2)
    assert "<B>MUL</B>" in near and "<B>ADD</B>" in near and "SQRT" not in near
    assert "… CONST 1.0 float32[]" in near  # a source outside the walk: a dotted stand-in
    up = to_dot(graph, around="y", depth=1)
    assert "<B>RESHAPE ()</B>" in up and "<B>REDUCE ADD (0,)</B>" in up and "<B>SQRT</B>" not in up
    assert "… SQRT float32[3]" in up  # the cut source shows as a dotted stand-in
    only = to_dot(graph, around="x", depth=0)
    assert ">x<" in only and "MUL" not in only
    with pytest.raises(RenderError, match="around: no input or output named 'z'"):
        to_dot(graph, around="z")


def test_options_are_checked():
    with pytest.raises(RenderError, match="unknown format 'gif'"):
        render(mlp(), "gif")
    with pytest.raises(RenderError, match="either outputs or around"):
        to_dot(mlp(), outputs=["loss"], around="x")
    with pytest.raises(RenderError, match="depth"):
        to_dot(mlp(), around="x", depth=-1)


# ----------------------------------------------------------------------------- determinism, escaping, no dot

BUILD = """
import hashlib, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
import test_render as t
from uopcli.views.graphviz import to_dot
print(hashlib.sha256((to_dot(t.mlp()) + to_dot(t.functions()) + to_dot(t.backward_tagged()[0])).encode()).hexdigest())
"""


def test_the_same_graph_gives_the_same_bytes_in_every_process():
    assert render(functions(), "dot") == render(functions(), "dot")
    script = BUILD.format(root=str(ROOT), tests=str(ROOT / "tests"))
    digests = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        digests.add(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                   capture_output=True, text=True).stdout)
    assert len(digests) == 1


@needs_dot
def test_svg_bytes_are_stable():
    assert render(mlp(), "svg") == render(mlp(), "svg")


@needs_dot
def test_names_are_escaped():
    x = UOp.param('a<b>&"c\'\\d', (2,))
    graph = Graph({"o<&>": x * 2.0})
    nodes = svg_nodes(render(graph, "svg"))
    texts = [t for n in nodes.values() for t in n["text"]]
    assert 'a<b>&"c\'\\d' in texts and "o<&>" in texts


def test_without_dot_the_dot_format_works_and_others_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no `dot` to be found
    assert render(mlp(), "dot").startswith(b"digraph uop {")
    with pytest.raises(RenderError) as info:
        render(mlp(), "png")
    message = str(info.value)
    assert "apt-get install graphviz" in message and "brew install graphviz" in message
    assert "\n" not in message


def test_render_does_not_import_click():
    code = "import sys, uopcli.views.graphviz; print('click' in sys.modules, 'graphviz' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=str(ROOT)).stdout.split()
    assert out == ["False", "False"]


# ----------------------------------------------------------------------------- samples and gradients

def sample_builders() -> dict:
    path = ROOT / "samples" / "build.py"
    import importlib.util
    spec = importlib.util.spec_from_file_location("uopgrad_sample_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # SAMPLES maps a name to its builder, or to a record whose .build is the builder
    return {name: entry if callable(entry) else entry.build for name, entry in module.SAMPLES.items()}


def assert_whole_graph_drawn(graph: Graph, svg: bytes) -> None:
    """Every node of the graph is a box (in the main graph, or in its body's cluster)."""
    titles = set(svg_nodes(svg))
    for i, node in enumerate(graph.nodes()):
        assert f"n{i}" in titles or any(t.endswith(f"_n{i}") for t in titles), (i, node)
    assert "legend" in titles


@needs_dot
@pytest.mark.parametrize("name", sorted(sample_builders()))
def test_every_sample_renders_with_every_node(name):
    graph = sample_builders()[name]()
    svg = render(graph, "svg")
    assert_whole_graph_drawn(graph, svg)
    clusters = svg_clusters(svg)
    calls = [n for n in graph.nodes() if n.op in ("FUNCTION", "CALL")]
    bodies = {n.src[0] for n in calls} | {n.arg.grad for n in calls if n.op == "CALL" and n.arg.grad is not None}
    assert len(clusters) == len(bodies) + 1  # one per distinct body, and the legend


def test_committed_sample_files_render():
    files = sorted((ROOT / "samples").glob("*.uop"))
    assert len(files) >= 10, files  # the committed samples (samples/README.md lists them)
    for path in files:
        graph = load(path)
        dot = to_dot(graph)
        assert dot.startswith("digraph uop {") and "cluster_legend" in dot, path


def gradient_graph(name: str = "logreg", keep_forward: bool = True) -> Graph:
    """The gradient of a sample's loss with respect to its weights, by compute_gradient."""
    forward = sample_builders()[name]()
    loss = forward.outputs["loss"]
    targets = [n for n in forward.inputs if n.arg not in ("x", "y")]
    grads = compute_gradient(loss, loss.const_like(1.0), targets)
    outputs = {"loss": loss} if keep_forward else {}
    outputs.update({f"grad_{t.arg}": grads[t] for t in targets})
    return Graph(outputs, inputs=forward.inputs)


@needs_dot
def test_a_real_gradient_graph_tells_forward_from_backward():
    graph = gradient_graph("logreg")
    svg = render(graph, "svg")
    assert_whole_graph_drawn(graph, svg)
    nodes = svg_nodes(svg)
    ids = drawn_ids(graph)
    backward = [n for n in graph.nodes() if n.meta is not None and n.meta.backward]
    assert len(backward) > 10
    for node in graph.nodes():
        shape = nodes[ids[node]]["shape"]
        assert ("stroke-dasharray" in shape) == (node in backward), node
    assert any("∇ sigmoid" in nodes[ids[n]]["text"] for n in backward)
    assert {t[0] for t in (n["text"] for n in nodes.values()) if "output" in t} == {"loss", "grad_w", "grad_b"}


@needs_dot
def test_the_gradient_of_a_call_with_a_backward_body_draws_that_body():
    graph = gradient_graph("ste", keep_forward=False)
    clusters = svg_clusters(render(graph, "svg"))
    assert any("backward body of CALL quantise_ste" in " ".join(t) for t in clusters.values())


# ----------------------------------------------------------------------------- the installed command

def installed_uopgrad() -> Path:
    """The installed console script (make test installs the package into the venv running
    the tests): its absence is a failure of the set-up, not a reason to skip."""
    exe = Path(sys.executable).parent / "uopgrad"
    assert exe.exists(), f"the uopgrad console script is not installed beside {sys.executable}"
    helped = subprocess.run([str(exe), "render", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    return exe


@needs_dot
def test_uopgrad_render_end_to_end(tmp_path):
    exe = installed_uopgrad()
    graph = mlp()
    source = tmp_path / "mlp.uop"
    save(graph, source)

    def run(*args):
        return subprocess.run([str(exe), "render", str(source), *args], capture_output=True, cwd=tmp_path)

    done = run("-o", "mlp.svg")
    assert done.returncode == 0, done.stderr
    svg = (tmp_path / "mlp.svg").read_bytes()
    assert_whole_graph_drawn(load(source), svg)
    assert run("-o", "mlp.png").returncode == 0
    assert (tmp_path / "mlp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run("-o", "mlp.pdf").returncode == 0 and (tmp_path / "mlp.pdf").read_bytes()[:5] == b"%PDF-"
    from_stdin = subprocess.run([str(exe), "render", "-", "-o", "-", "--format", "svg"], input=source.read_bytes(),
                                capture_output=True, cwd=tmp_path)
    assert from_stdin.returncode == 0 and from_stdin.stdout == svg
    piped = run("--format", "dot", "-o", "-")
    assert piped.returncode == 0 and piped.stdout == render(load(source), "dot")
    part = run("--outputs", "padded", "--format", "dot", "-o", "-")
    assert b"PAD ((0,1),(1,0))" in part.stdout and b"matmul" not in part.stdout
    near = run("--around", "x", "--depth", "1", "--format", "dot", "-o", "-")
    assert near.returncode == 0 and b"PAD ((0,1),(1,0))" in near.stdout and b"REDUCE" not in near.stdout
    collapsed = run("--collapse-functions", "--format", "dot", "-o", "-")
    assert collapsed.returncode == 0
    refused = run("--max-nodes", "5", "-o", "small.svg")
    assert refused.returncode == 1 and not (tmp_path / "small.svg").exists()
    message = refused.stderr.decode().strip()
    assert message.startswith("uopgrad: error:") and "--outputs" in message and "--around" in message
    assert "\n" not in message


def test_a_function_body_made_by_differentiation_is_a_backward_cluster():
    x = UOp.param("x", (3,))
    f = UOp.trace_function("cube", lambda a: (a * a * a,), x)
    loss = f[0].sum()
    grad = compute_gradient(loss, loss.const_like(1.0), [x])[x]
    dot = to_dot(Graph({"loss": loss, "grad_x": grad}))
    titles = [line for line in dot.splitlines() if line.strip().startswith("label=")]
    backward = [t for t in titles if "cube_backward" in t]
    assert backward and all("∇ FUNCTION cube_backward" in t and "dashed" in t for t in backward)
    assert any("FUNCTION cube" in t and "∇" not in t for t in titles)


def tall_chain(ops: int = 700) -> Graph:
    """A chain of `ops` unary nodes: one rank each, taller than cairo's 32767-pixel bitmaps."""
    x = UOp.param("x", (4,))
    y = x
    for k in range(ops):
        y = y.exp2() if k % 2 else y.sqrt()
    return Graph({"y": y.sum()}, inputs=[x])


@needs_dot
@pytest.mark.timeout(60)
def test_a_png_scaled_down_to_fit_says_so_on_stderr(tmp_path):
    """dot shrinks a too-tall PNG (and its text) to fit and says so; uopgrad ran it quietly:
    exit 0, no word. Now one note names the factor and the way out, exit still 0."""
    save(tall_chain(), tmp_path / "chain.uop")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(output):
        return subprocess.run([sys.executable, "-m", "uopcli", "render", "chain.uop", "--max-nodes", "5000",
                               "-o", output], capture_output=True, text=True, cwd=tmp_path, env=env)
    done = run("chain.png")
    assert done.returncode == 0
    factor = done.stderr.split("dot scaled it by ")[1].split(" ")[0]
    assert 0.5 < float(factor) < 1
    assert done.stderr == (f"uopgrad: chain.png: the picture is too large for a PNG bitmap (cairo's limit is 32767 "
                           f"pixels a side): dot scaled it by {factor} to fit, its text with it; svg or pdf keep it "
                           f"full size (or draw a part: --around, --outputs)\n")
    width, height = struct.unpack(">II", (tmp_path / "chain.png").read_bytes()[16:24])
    assert height <= 32767 and (tmp_path / "chain.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = run("chain.svg")
    assert svg.returncode == 0 and svg.stderr == ""
    with pytest.warns(RenderWarning, match=f"dot scaled it by {factor} to fit"):
        render(tall_chain(), "png", max_nodes=5000)
    notes: list[str] = []
    assert render(mlp(), "png", notes)[:8] == b"\x89PNG\r\n\x1a\n" and notes == []
