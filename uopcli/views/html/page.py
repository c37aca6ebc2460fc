"""The page: one self-contained HTML file holding the graph's data (nodes, groups, one dot
layout per level) as JSON and the viewer's JS and CSS inline. Nothing is fetched: it opens
from disk, offline, in any current browser.

    html = page_html(graph, title="grad.uop", values=stats)   # str
"""

from __future__ import annotations

import json
import re
from importlib import resources

from ... import __version__
from ...core.graph import Graph
from ...core.ops import FAMILY, Ops
from ...core.uop import UOp
from ..graphviz import FAMILY_COLOURS, arg_text
from ..graphviz import _children as sources_with_bodies  # sources, and a CALL's backward body
from .groups import Grouping
from .layout import Levels, mix_text

FAMILIES = list(FAMILY_COLOURS)
FULL_ARG_LIMIT = 2000  # characters of an arg the details panel shows


def page_html(graph: Graph, *, title: str, values: dict[int, list[str]] | None = None,
              workers: int | None = None) -> str:
    """The page of `graph`; `values` maps a node's canonical index to [min, mean, max, nans]
    as text (see values.py)."""
    grouping = Grouping(graph)
    index = grouping.index
    input_names = {index[node]: node.arg for node in graph.inputs}
    output_names: dict[int, list[str]] = {}
    for name, node in graph.outputs.items():
        output_names.setdefault(index[node], []).append(name)
    levels = Levels(grouping, input_names, output_names)
    levels.lay_out(workers)
    data = _data(graph, grouping, levels, title, values or {})
    return _fill(data, title)


def _data(graph: Graph, grouping: Grouping, levels: Levels, title: str, values: dict) -> dict:
    order, index = grouping.order, grouping.index
    tables: dict[str, dict] = {"ops": {}, "dtypes": {}, "shapes": {}, "metas": {}}

    def code(table: str, key) -> int:
        found = tables[table].get(key)
        if found is None:
            found = tables[table][key] = len(tables[table])
        return found

    ops, dts, shapes, metas, args, sources = [], [], [], [], [], []
    full: dict[int, str] = {}
    for i, node in enumerate(order):
        ops.append(code("ops", node.op))
        dts.append(code("dtypes", node.dtype.name))
        shapes.append(-1 if node.shape is None else code("shapes", ",".join(map(str, node.shape))))
        meta = node.meta
        metas.append(-1 if meta is None else code("metas", (meta.name, meta.loc, meta.scope, 1 if meta.backward else 0)))
        short = arg_text(node)
        args.append(short)
        whole = _full_arg(node)
        if whole != short:
            full[i] = whole
        sources.append([index[s] for s in sources_with_bodies(node)])
    groups = grouping.groups
    return {
        "title": title, "version": __version__,
        "ops": list(tables["ops"]), "dtypes": list(tables["dtypes"]), "shapes": list(tables["shapes"]),
        "metas": [list(m) for m in tables["metas"]],
        "fam": [[name, colour, text] for name, (colour, text) in FAMILY_COLOURS.items()],
        "opFam": [FAMILIES.index(FAMILY[op]) for op in tables["ops"]],
        "n": {"op": ops, "dt": dts, "sh": shapes, "meta": metas, "arg": args, "src": sources},
        "full": full,
        "home": [group.id for group in grouping.home],
        "inputs": [[index[node], node.arg] for node in graph.inputs],
        "outputs": [[name, index[node]] for name, node in graph.outputs.items()],
        "groups": {
            "p": [-1 if g.parent is None else g.parent.id for g in groups],
            "label": [g.label for g in groups],
            "kind": [g.kind for g in groups],
            "bw": [1 if g.backward else 0 for g in groups],
            "twin": [-1 if g.twin is None else g.twin.id for g in groups],
            "size": [g.size for g in groups],
            "mix": [mix_text(g) for g in groups],
            "fam": [_family_counts(g.ops) for g in groups],
            "detail": [g.detail or g.kind for g in groups],
        },
        "levels": [_level_data(level) for level in levels.levels],
        "values": {str(i): stats for i, stats in values.items()},
    }


def _level_data(level) -> list:
    """[width, height, items (kind, ref, x, y, w, h flat), edges ([a, b, count, x0, y0, ...])]."""
    items: list[int] = []
    for (kind, ref, width, height, _), (x, y) in zip(level.items, level.boxes):
        items.extend((kind, ref, x, y, width, height))
    edges = []
    for (a, b), count in level.edges.items():
        points = level.paths.get((a, b))
        if points is None:  # dot drew no spline (cannot happen with these graphs): a straight line
            (xa, ya), (xb, yb) = level.boxes[a], level.boxes[b]
            points = [xa + level.items[a][2] // 2, ya + level.items[a][3], xb + level.items[b][2] // 2, yb]
        edges.append([a, b, count, *points])
    return [level.width, level.height, items, edges]


def _family_counts(ops) -> list[int]:
    counts = [0] * len(FAMILIES)
    for op, count in ops.items():
        counts[FAMILIES.index(FAMILY[op])] += count
    return counts


def _full_arg(node: UOp) -> str:
    """The arg as the details panel shows it: whole (up to FULL_ARG_LIMIT characters)."""
    arg = node.arg
    if arg is None:
        return ""
    if node.op == Ops.BUFFER:
        return f"{len(arg)} bytes of data"
    if node.op == Ops.CALL:
        text = arg.name + (" (with a backward body)" if arg.grad is not None else "")
    elif isinstance(arg, str):
        text = arg
    elif node.op == Ops.PARAM:
        text = f"slot {arg}"
    else:
        text = repr(arg)
    return text if len(text) <= FULL_ARG_LIMIT else text[:FULL_ARG_LIMIT - 1] + "…"



def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _fill(data: dict, title: str) -> str:
    # "<" never appears raw inside the JSON, so no "</script>" or "<!--" can end the script early
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    fills = {"/*CSS*/": _asset("viewer.css"), "/*JS*/": _asset("viewer.js"), "__VERSION__": __version__,
             "__TITLE__": _escape(title), "__DATA__": text}
    # one pass: what is filled in (a title saying __DATA__) is never looked at again
    return re.sub(r"/\*CSS\*/|/\*JS\*/|__VERSION__|__TITLE__|__DATA__", lambda m: fills[m.group()],
                  _asset("template.html"))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
