"""Graphviz pictures of UOp graphs: forward and backward told apart, functions as clusters.

`to_dot` writes the DOT text itself (deterministic, no Graphviz needed); `render` pipes it
through the `dot` program (via the `graphviz` package, imported only then) for svg/png/pdf.

What the picture shows (the contract tests check):
- One box per node: op and short arg (`REDUCE ADD (1,)`, `CONST 0.5`), dtype and shape,
  and the metadata name of the function that made it (`relu`). Edges run from a source to
  its user; where source order matters (`SUB`, `WHERE`, call args, ...) they are numbered.
- Fill colour = op family (`FAMILY_COLOURS`, one fixed palette for every picture).
  Forward nodes are rounded with a thin border; nodes made by differentiation
  (`meta.backward`) are square with a thick dashed red border and read `∇ relu`.
- Graph inputs are drawn as named, thick-bordered `invhouse` shapes; every output gets its
  own `house` marker below the node it names.
- A legend (cluster `cluster_legend`) lists the families present, forward vs backward,
  input and output.
- Scopes: the main graph and every distinct FUNCTION/CALL body (and CALL backward body).
  Hash-consing shares a body between calls that compute the same thing, so each distinct
  body is drawn once, as one cluster, titled by its uses (`FUNCTION rnn_cell (5 calls)`),
  and every call that uses it gets a bold "body" edge from its TUPLE (a dashed red
  "backward" edge from a CALL's backward body); the call's own edges are labelled
  `arg i`, which is slot i in the body. A body with a single call also gets dotted edges
  from the args to its slot PARAMs. A body whose calls all sit in one scope is nested in
  that scope's cluster; otherwise it is drawn at the top level. A node reached
  from several scopes (a CONST, a slot PARAM shared by two bodies) is drawn once per
  scope, so every cluster is complete and no edge crosses into a function's inside.
- Long edges are cut. A CONST or BUFFER is drawn once per use, beside its user (ids
  `n<i>_0`, `n<i>_1`, ...), and on its own only when it is an output. A source more than
  LONG_EDGE levels above its user (a forward value a gradient reads, a weight) gets a
  reference beside the user (`n<i>_r<k>`, a dotted box "↑ op ... (above)") instead of an edge
  through every level in between. `dot` places an edge over k levels as k hidden nodes:
  a 458-node gradient graph took over 2 minutes (46,000 hidden nodes), a 453-node forward
  graph over 5 (its constants), and each takes under a second with the cuts.
- `collapse_functions=True` draws each call as one 3-D box and no bodies.
- Node ids come from the canonical node order (`Graph.nodes()`), never from `id()`; all
  walks go in that order, so the same graph gives the same bytes.
"""

from __future__ import annotations

import html
import math
import re
from collections import deque
from typing import Iterable, Sequence

from ..errors import UOpError
from ..core.graph import Graph
from ..core.ops import CALLS, FAMILY, Ops
from ..core.uop import UOp, printable
from ..core.walks import scope_sources, scope_toposort, toposort

DEFAULT_MAX_NODES = 500
FORMATS = ("svg", "png", "pdf", "dot", "html")
INSTALL_DOT_HINT = ("the Graphviz 'dot' program is not installed: install it with `apt-get install graphviz` "
                    "(Debian/Ubuntu) or `brew install graphviz` (macOS), or use ")


class RenderError(UOpError):
    """A picture that cannot be drawn: too large, unknown names or format, no `dot`."""


def dot_missing() -> RenderError:
    """No `dot` program: how to install it, or what needs none (the DOT text), as each caller says it."""
    return RenderError(INSTALL_DOT_HINT + "render(graph, 'dot')", cli=INSTALL_DOT_HINT + "--format dot")


# ----------------------------------------------------------------------------- style tables
# One row per op family: (fill colour, what the legend says). A ColorBrewer "Set3"-like
# pastel palette: black text stays readable on every fill, and the colours never change
# between pictures, so a reader learns them once.
FAMILY_COLOURS: dict[str, tuple[str, str]] = {
    "leaf":     ("#e6e6e6", "leaf: PARAM CONST BUFFER"),
    "unary":    ("#a6cee3", "unary: NEG EXP2 LOG2 SQRT ..."),
    "binary":   ("#b2df8a", "binary: ADD MUL FDIV CMPLT ..."),
    "ternary":  ("#fdbf6f", "ternary: WHERE MULACC"),
    "reduce":   ("#fb9a99", "reduce: REDUCE"),
    "movement": ("#cab2d6", "movement: RESHAPE EXPAND PAD ..."),
    "identity": ("#ffff99", "identity: CONTIGUOUS DETACH COPY"),
    "call":     ("#8dd3c7", "call: FUNCTION CALL TUPLE GETTUPLE"),
    "memory":   ("#d9b38c", "memory: STORE AFTER"),
}
assert set(FAMILY_COLOURS) == set(FAMILY.values()), "every op family has a colour"

FORWARD_BORDER = "#4d4d4d"
BACKWARD_BORDER = "#c0392b"   # red, dashed and thick: differentiation made this node
TANGENT_BORDER = "#1f78b4"    # blue, dotted and thick: forward mode (jvp, hvp) made this node
FONT = "Helvetica"

# Ops whose source order changes the result: their edges carry the source index.
ORDERED_OPS = frozenset({Ops.SUB, Ops.FDIV, Ops.POW, Ops.CMPLT, Ops.CDIV, Ops.CMOD, Ops.SHL, Ops.SHR,
                         Ops.WHERE, Ops.MULACC, Ops.STORE, Ops.AFTER, Ops.TUPLE})

MAIN = None  # the scope key of the main graph; a body's scope key is its TUPLE node
_COPIED = frozenset({Ops.CONST, Ops.BUFFER})  # drawn once per use (see the module's docstring)
LONG_EDGE = 8  # levels: a source further above its user is drawn as a reference beside it


# ----------------------------------------------------------------------------- public API

def to_dot(graph: Graph, *, outputs: Sequence[str] | None = None, around: str | None = None, depth: int = 2,
           max_nodes: int | None = DEFAULT_MAX_NODES, collapse_functions: bool = False) -> str:
    """The DOT text of `graph` (or of the part `outputs` / `around` select). Raises
    RenderError when the picture would hold more than `max_nodes` nodes (None: no limit)."""
    if outputs is not None and around is not None:
        raise RenderError("choose either outputs or around, not both")
    if around is not None and (not isinstance(depth, int) or depth < 0):
        raise RenderError(f"depth must be a whole number >= 0, got {depth!r}")
    order = graph.nodes()
    whole = outputs is None and around is None
    if whole and not collapse_functions and max_nodes is not None and len(order) > max_nodes:
        raise _too_large(len(order), max_nodes, _has_calls(order))  # copies only add boxes: refuse before any work
    roots = _selected_roots(graph, outputs)
    if around is not None:
        chosen = _neighbourhood(graph, order, around, depth)
    elif outputs is not None:
        chosen = set(toposort(roots.values()))
    else:
        chosen = set(order)  # unused inputs too
    return _Drawing(graph, order, roots, chosen, collapse_functions).dot(max_nodes)


def render(graph: Graph, fmt: str = "svg", notes: list[str] | None = None, **options) -> bytes:
    """The picture as bytes in `fmt` (svg, png, pdf; dot: the DOT text, UTF-8 encoded, which
    to_dot gives as a str; html: the offline viewer page, see _html_page).
    `options` are to_dot's. Formats other than dot need Graphviz's `dot` program. What the
    picture lost on the way (a PNG too large for cairo's bitmaps, scaled down by dot) is
    appended to `notes`, or, with no list given, issued as a RenderWarning."""
    if fmt not in FORMATS:
        raise RenderError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    if fmt == "html":
        return _html_page(graph, **options)
    text = to_dot(graph, **options).encode()
    if fmt == "dot":
        return text
    found: list[str] = []
    picture = _run_dot(text, fmt, found)
    if notes is not None:
        notes.extend(found)
    else:
        import warnings
        for note in found:
            warnings.warn(note, RenderWarning, stacklevel=2)
    return picture


def _html_page(graph: Graph, *, title: str | None = None, values: str | None = None,
               outputs: Sequence[str] | None = None, **picture_options) -> bytes:
    """The page `uopgrad render --format html` writes: every node of `graph` (or of the
    outputs named), grouped into levels, UTF-8; `title` (default: the graph's meta name, else
    "graph"); `values`: an .npz of node values (`uopgrad eval -o`), shown per node. Needs `dot`."""
    if picture_options:
        raise RenderError(f"{', '.join(picture_options)}: for static pictures; the html page holds every node "
                          f"(use its search and focus)")
    from .html.page import page_html
    from .html.values import value_stats
    if outputs is not None:
        graph = Graph(_selected_roots(graph, outputs), meta=graph.meta)
    stats = value_stats(graph, values) if values is not None else None
    return page_html(graph, title=title or graph.meta.get("name") or "graph", values=stats).encode()


class RenderWarning(UserWarning):
    """The picture was written, but not as drawn (a bitmap scaled down to fit)."""


# dot -Tpng (cairo) says this on stderr and scales the whole bitmap down, its text with it
_SCALED = re.compile(r"graph is too large for cairo-renderer bitmaps\. Scaling by ([0-9.]+) to fit")


def _run_dot(text: bytes, fmt: str, notes: list[str]) -> bytes:
    try:
        import graphviz
    except ImportError:
        raise RenderError("the Python package 'graphviz' is missing: pip install graphviz") from None
    try:
        picture = _pipe_noting(text, fmt, notes)  # not graphviz.pipe(quiet=True): dot's warnings are read
        return _fixed_pdf_dates(picture) if fmt == "pdf" else picture
    except graphviz.ExecutableNotFound:
        raise dot_missing() from None
    except graphviz.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RenderError(f"dot failed: {detail[0] if detail else exc}") from None


def _pipe_noting(text: bytes, fmt: str, notes: list[str]) -> bytes:
    """graphviz.pipe, dot's warnings read: a scaled-down bitmap gives a note."""
    import graphviz
    proc = graphviz.backend.execute.run_check([*graphviz.backend.dot_command.command("dot", fmt)],
                                              input=text, capture_output=True, quiet=True)
    scaled = _SCALED.search((proc.stderr or b"").decode(errors="replace"))
    if scaled:
        notes.append(f"the picture is too large for a {fmt.upper()} bitmap (cairo's limit is 32767 pixels a side): "
                     f"dot scaled it by {float(scaled.group(1)):.3g} to fit, its text with it; "
                     f"svg or pdf keep it full size (or draw a part: --around, --outputs)")
    return proc.stdout


FIXED_DATE = 315532800  # 1980-01-01 00:00:00 UTC, as the members of the .npz files written (values.npz_bytes)


def _fixed_pdf_dates(pdf: bytes) -> bytes:
    """`pdf` with cairo's /CreationDate (and /ModDate) the time SOURCE_DATE_EPOCH gives, else
    1980-01-01 UTC: the same graph renders to the same bytes, as svg and png do (cairo 1.16
    writes the wall-clock time and ignores SOURCE_DATE_EPOCH). The entry keeps its length,
    padded with spaces after the string where the date is shorter, so that the xref table's
    byte offsets stay right; an entry the date would lengthen is left as it is."""
    import os
    import re
    import time
    try:
        seconds = int(os.environ.get("SOURCE_DATE_EPOCH", FIXED_DATE))
        date = time.strftime("D:%Y%m%d%H%M%SZ", time.gmtime(seconds)).encode()
    except (ValueError, OverflowError, OSError):
        date = time.strftime("D:%Y%m%d%H%M%SZ", time.gmtime(FIXED_DATE)).encode()

    def fixed(match: re.Match) -> bytes:
        entry = match.group(1) + b" (" + date + b")"
        return entry.ljust(len(match.group(0))) if len(entry) <= len(match.group(0)) else match.group(0)
    return re.sub(rb"(/CreationDate|/ModDate) \((D:[0-9]{4}[^()\\]*)\)", fixed, pdf)


def _too_large(count: int, limit: int, collapsible: bool) -> RenderError:
    """`collapsible`: the graph has calls not yet drawn as one box each, so say how to."""
    head = f"the picture would have {count} nodes, more than the limit of {limit}; draw a part with"
    collapse = ", draw each function as one box with {}," if collapsible else ""
    python = (f"{head} outputs=[names] or around=name, depth=K{collapse.format('collapse_functions=True')} or "
              f"raise max_nodes, or draw the whole graph as a page a level at a time: render(graph, 'html')")
    return RenderError(python, cli=f"{head} --outputs NAMES or --around NAME --depth K"
                                   f"{collapse.format('--collapse-functions')} or raise --max-nodes, or draw the "
                                   f"whole graph as a page a level at a time: -o graph.html (or uopgrad view)")


def _has_calls(nodes) -> bool:
    return any(node.op in CALLS for node in nodes)


# ----------------------------------------------------------------------------- selection

def _selected_roots(graph: Graph, names: Sequence[str] | None) -> dict[str, UOp]:
    if names is None:
        return dict(graph.outputs)
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    if not names:
        raise RenderError("outputs: give at least one output name")
    missing = [n for n in names if n not in graph.outputs]
    if missing:
        raise RenderError(f"no output named {missing[0]!r}; outputs: {', '.join(graph.outputs) or 'none'}")
    return {n: graph.outputs[n] for n in dict.fromkeys(names)}


def _children(node: UOp) -> tuple[UOp, ...]:
    """Sources, plus a CALL's backward body (it hangs off the arg, not the sources)."""
    if node.op == Ops.CALL and node.arg.grad is not None:
        return (*node.src, node.arg.grad)
    return node.src


def _neighbourhood(graph: Graph, order: list[UOp], name: str, depth: int) -> set[UOp]:
    """Nodes within `depth` steps of the input/output `name`: up through sources and down
    through users (each direction on its own, so siblings do not flood the picture)."""
    centres = [n for n in graph.inputs if n.arg == name]
    if name in graph.outputs:
        centres.append(graph.outputs[name])
    if not centres:
        raise RenderError(f"around: no input or output named {name!r}; inputs: "
                          f"{', '.join(graph.input_names) or 'none'}; outputs: {', '.join(graph.outputs) or 'none'}")
    users: dict[UOp, list[UOp]] = {}
    for node in order:
        for child in _children(node):
            users.setdefault(child, []).append(node)
    chosen = set(centres)
    for step in (_children, lambda n: users.get(n, ())):
        frontier = deque((c, 0) for c in centres)
        seen = set(centres)
        while frontier:
            node, dist = frontier.popleft()
            if dist == depth:
                continue
            for nxt in step(node):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append((nxt, dist + 1))
        chosen |= seen
    return chosen


# ----------------------------------------------------------------------------- scopes

def _scope_walk(roots: Iterable[UOp]) -> tuple[dict, dict]:
    """Which scopes reach each node, without entering nested bodies.

    Returns (members: scope -> its nodes in walk order, callers: body scope -> the
    (scope, CALL/FUNCTION node) pairs that use it). Each distinct body is walked once."""
    members: dict = {}
    callers: dict = {}
    pending = deque([(MAIN, list(roots))])
    while pending:
        scope, scope_roots = pending.popleft()
        nodes = scope_toposort(scope_roots)
        members[scope] = nodes
        for node in nodes:
            if node.op not in CALLS:
                continue
            bodies = [node.src[0]]
            if node.op == Ops.CALL and node.arg.grad is not None:
                bodies.append(node.arg.grad)
            for body in bodies:
                if body not in callers:
                    callers[body] = []
                    pending.append((body, [body]))
                callers[body].append((scope, node))
    return members, callers


# ----------------------------------------------------------------------------- labels

def _compact(value) -> str:
    text = repr(value).replace(" ", "")
    return text if len(text) <= 36 else text[:35] + "…"


def _number(value) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    text = repr(value)
    return text if len(text) <= 8 else f"{value:.6g}"


def arg_text(node: UOp) -> str:
    """The short arg a box shows after the op ('' when there is none worth showing)."""
    op, arg = node.op, node.arg
    if arg is None or op == Ops.BUFFER:
        return ""  # a BUFFER's bytes say nothing at a glance; its shape line does
    if op == Ops.PARAM:
        return arg if isinstance(arg, str) else f"slot {arg}"
    if op == Ops.CONST:
        return _number(arg)
    if op == Ops.REDUCE:
        return f"{arg[0]} {_compact(arg[1])}"
    if op == Ops.CALL:
        return arg.name
    if op == Ops.FLIP:
        return "axes " + _compact(tuple(i for i, flipped in enumerate(arg) if flipped))
    if isinstance(arg, str):
        return arg
    return _compact(arg)


def type_text(node: UOp) -> str:
    if node.shape is None:
        return ""
    return f"{node.dtype.name}[{','.join(map(str, node.shape))}]"


def meta_text(node: UOp) -> str:
    """`relu` for a node the front-end function relu made, `∇ relu` for one differentiation
    made from it, `∇` alone when that forward node had no name."""
    meta = node.meta
    if meta is None:
        return ""
    name = meta.name if meta.name is None or len(meta.name) <= 40 else meta.name[:39] + "…"
    if meta.backward:
        return f"∇ {name}" if name else "∇"
    return name or ""


def _e(text: str) -> str:
    return html.escape(_shown(text), quote=True)


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + _shown(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _shown(text: str, limit: int = 200) -> str:
    """Text from the file as a picture can hold it: control characters escaped (dot refuses
    a NUL), and cut at `limit` characters (dot refuses very long strings)."""
    text = printable(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _html_label(head: str, lines: Sequence[tuple[str, str]]) -> str:
    """<head in bold> then (text, colour) lines in a smaller font."""
    parts = [f'<B>{_e(head)}</B>']
    for text, colour in lines:
        if text:
            parts.append(f'<FONT POINT-SIZE="9" COLOR="{colour}">{_e(text)}</FONT>')
    return "<" + "<BR/>".join(parts) + ">"


def _tooltip(node: UOp) -> str:
    words = [node.op, arg_text(node), type_text(node)]
    meta = node.meta
    if meta is not None:
        words.append(f"({'backward of ' if meta.backward else ''}{meta.name or '?'}"
                     f"{' in ' + meta.scope if meta.scope else ''}{' at ' + meta.loc if meta.loc else ''})")
    return " ".join(w for w in words if w)


def _fill(node: UOp) -> str:
    return FAMILY_COLOURS[FAMILY[node.op]][0]


# ----------------------------------------------------------------------------- drawing

_MAX_INDENT = 16  # DOT indentation stops growing here: 3,000 nested bodies made 65 MB of spaces


class _Drawing:
    """Turns a selection of a graph into DOT lines. Every walk is in canonical order."""

    def __init__(self, graph: Graph, order: list[UOp], roots: dict[str, UOp], chosen: set[UOp],
                 collapse: bool):
        self.index = {node: i for i, node in enumerate(order)}
        self.roots = roots
        self.collapse = collapse
        self.inputs = set(graph.inputs)
        self.output_nodes = set(roots.values())
        members, callers = _scope_walk([*roots.values(), *(n for n in graph.inputs if n in chosen)])
        self.callers = callers
        index = self.index
        self.members = {s: sorted((n for n in nodes if n in chosen), key=index.__getitem__)
                        for s, nodes in members.items()}
        if collapse:
            self.members = {MAIN: self.members[MAIN]}
        # a body with nothing selected (around/outputs) gets no empty cluster
        self.members = {s: nodes for s, nodes in self.members.items() if nodes or s is MAIN}
        self.drawn = {s: set(nodes) for s, nodes in self.members.items()}
        self.children = self._nest()
        self.lines: list[str] = []
        self.edges: list[str] = []
        self.ghosts: dict = {s: [] for s in self.members}  # scope -> declarations of cut sources
        self.ghost_ids: set[str] = set()
        self.copies: dict = {s: [] for s in self.members}  # scope -> [(copy id, node, is a reference)]
        self.copy_counts: dict = {}  # (scope, node, kind) -> the number of its last copy
        self.levels = self._levels()
        self.families: set[str] = set()

    # ids: node i of the main graph is n<i>; its copy in the body whose TUPLE is node j is b<j>_n<i>
    def prefix(self, scope) -> str:
        return "" if scope is MAIN else f"b{self.index[scope]}_"

    def node_id(self, scope, node: UOp) -> str:
        return f"{self.prefix(scope)}n{self.index[node]}"

    def _nest(self) -> dict:
        """scope -> the body scopes drawn inside its cluster (in canonical order). A body
        used from one scope only is nested there; otherwise it goes to the top level."""
        children: dict = {s: [] for s in self.members}
        for body in sorted((s for s in self.members if s is not MAIN), key=self.index.__getitem__):
            homes = {s for s, call in self.callers[body] if call in self.drawn.get(s, ())}
            parent = next(iter(homes)) if len(homes) == 1 else MAIN
            if parent is body:
                parent = MAIN
            children[parent].append(body)
        return children

    # ------------------------------------------------------------------ output
    def dot(self, max_nodes: int | None) -> str:
        count = sum(len(nodes) for nodes in self.members.values())
        if max_nodes is not None and count > max_nodes:
            raise _too_large(count, max_nodes, not self.collapse and _has_calls(self.index))
        out = self.lines
        out.append("digraph uop {")
        out.append(f'  graph [rankdir=TB fontname="{FONT}" fontsize=11 nodesep=0.15 ranksep=0.25 '
                   f'bgcolor="white" labeljust=l];')
        out.append(f'  node [shape=box style="rounded,filled" fontname="{FONT}" fontsize=10 '
                   f'margin="0.1,0.04" height=0.3 color="{FORWARD_BORDER}" penwidth=1];')
        out.append(f'  edge [color="#555555" arrowsize=0.6 fontname="{FONT}" fontsize=8 fontcolor="#555555"];')
        # Edges first (they find the cut sources each scope must declare), but written
        # last: an edge naming a node before its cluster would pull the node out of it.
        for scope in self.members:
            for node in self.members[scope]:
                self._edges(scope, node)
        self._scopes()
        self._outputs()
        out.extend(self.edges)
        self._bindings()
        self._legend()
        out.append("}")
        return "\n".join(out) + "\n"

    def _scopes(self) -> None:
        """Every scope's nodes, bodies as (nested) clusters; an explicit stack, no recursion."""
        stack: list = [(MAIN, "  ", False)]
        while stack:
            scope, indent, closing = stack.pop()
            if closing:
                self.lines.append(indent + "}")
                continue
            inner = indent
            if scope is not MAIN:
                self._cluster_open(scope, indent)
                stack.append((scope, indent, True))
                inner = indent + "  " if len(indent) < _MAX_INDENT else indent  # deep nesting: no wider
            for node in self.members[scope]:
                if not self._copies_only(scope, node):
                    self._node(scope, node, inner)
            for copy_id, node, reference in self.copies[scope]:
                self._node(scope, node, inner, copy_id, reference)
            self.lines.extend(inner + line for line in self.ghosts[scope])
            stack.extend((body, inner, False) for body in reversed(self.children[scope]))

    def _cluster_open(self, body: UOp, indent: str) -> None:
        """A body's cluster, titled by its uses: `FUNCTION rnn_cell (5 calls)`, or
        `∇ backward body of CALL f; FUNCTION f_backward` when one body serves both.
        Backward bodies get the backward style: a dashed red border and a ∇."""
        uses: dict[str, int] = {}
        for call in dict.fromkeys(call for _, call in self.callers[body]):
            if call.op == Ops.CALL and call.arg.grad is body:
                use = f"backward body of CALL {call.arg.name}"
            else:
                use = f"{call.op} {_call_name(call)}"
            uses[use] = uses.get(use, 0) + 1
        title = "; ".join(use + (f" ({count} calls)" if count > 1 else "") for use, count in uses.items())
        # a CALL's backward body, or a body differentiation made (`f_backward`): drawn as backward
        made_by_gradient = body.meta is not None and body.meta.backward
        if made_by_gradient or any(use.startswith("backward") for use in uses):
            title = "∇ " + title
            style = f'style="dashed,rounded,filled" color="{BACKWARD_BORDER}" penwidth=1.5'
        else:
            style = 'style="rounded,filled" color="#2a9d8f" penwidth=1.5'
        self.lines.append(f"{indent}subgraph cluster_b{self.index[body]} {{")
        self.lines.append(f'{indent}  label={_q(title)} {style} fillcolor="#f6fbfa" fontsize=10;')

    def _levels(self) -> dict:
        """(scope, node) -> its level: 0 for a node with no source drawn in its scope, else
        one more than its highest source's (the rank `dot` gives it, about)."""
        levels: dict = {}
        for scope, nodes in self.members.items():
            drawn = self.drawn[scope]
            for node in nodes:  # canonical order: sources first
                below = [levels[scope, s] for s in scope_sources(node) if s in drawn]
                levels[scope, node] = 1 + max(below) if below else 0
        return levels

    def _copies_only(self, scope, node: UOp) -> bool:
        """Whether `node` is a constant drawn only as its copies: it has some (a user in the
        picture) and is no output."""
        return node.op in _COPIED and (scope, node, "") in self.copy_counts \
            and not (scope is MAIN and node in self.output_nodes)

    def _node(self, scope, node: UOp, indent: str, node_id: str | None = None, reference: bool = False) -> None:
        self.families.add(FAMILY[node.op])
        backward = node.meta is not None and node.meta.backward
        tangent = _is_tangent(node.meta)  # forward mode's own family: its scope is under ∂
        meta_colour = TANGENT_BORDER if tangent else BACKWARD_BORDER if backward else "#444444"
        attrs = {"fillcolor": _q(_fill(node)), "tooltip": _q(_tooltip(node))}
        if node in self.inputs and scope is MAIN:
            attrs["label"] = _html_label(node.arg, [(f"input {type_text(node)}", "#222222")])
            attrs.update(shape="invhouse", style='"filled"', penwidth="2.5", color='"#000000"')
        else:
            head = f"{node.op} {arg_text(node)}".rstrip()
            meta_line = f"∂ {meta_text(node)}".rstrip() if tangent else meta_text(node)
            attrs["label"] = _html_label(head, [(type_text(node), "#222222"), (meta_line, meta_colour)])
            if node.op in CALLS and self.collapse:
                attrs.update(shape="box3d", style='"filled"', penwidth="1.5")
        if tangent:
            self.families.add("tangent")
            attrs.update(style='"filled,dotted"', penwidth="2.6", color=f'"{TANGENT_BORDER}"')
        elif backward:
            attrs.update(style='"filled,dashed"', penwidth="2.2", color=f'"{BACKWARD_BORDER}"')
        if reference:  # a long edge's source, drawn in full above: a small dotted pointer to it
            head = node.arg if node in self.inputs and scope is MAIN else f"{node.op} {arg_text(node)}".rstrip()
            attrs["label"] = _html_label(f"↑ {head}", [(f"{type_text(node)} (above)", "#555555")])
            attrs.update(shape="box", style='"rounded,filled,dotted"', penwidth="1.2", color='"#777777"',
                         fontsize="9")
        text = " ".join(f"{k}={v}" for k, v in attrs.items())
        self.lines.append(f"{indent}{node_id or self.node_id(scope, node)} [{text}];")

    def _edges(self, scope, node: UOp) -> None:
        me = self.node_id(scope, node)
        sources = node.src
        calls = node.op in CALLS
        for i, src in enumerate(sources):
            if calls and i == 0:
                if not self.collapse:
                    self._body_edge(src, me, "body", "bold", "#2a9d8f")
                continue
            ordered = node.op in ORDERED_OPS and len(sources) > 1
            label = f"arg {i - 1}" if calls else str(i) if ordered else ""
            self._edge(scope, src, me, label, node)
        if node.op == Ops.CALL and node.arg.grad is not None and not self.collapse:
            self._body_edge(node.arg.grad, me, "backward", "dashed", BACKWARD_BORDER)

    def _edge(self, scope, src: UOp, dest: str, label: str, user: UOp) -> None:
        if src not in self.drawn[scope]:
            tail = self._ghost(scope, src)
        elif src.op in _COPIED:
            tail = self._copy(scope, src, "", False)
        elif self.levels[scope, user] - self.levels[scope, src] > LONG_EDGE:
            tail = self._copy(scope, src, "r", True)
        else:
            tail = self.node_id(scope, src)
        attrs = f" [label={_q(label)}]" if label else ""
        self.edges.append(f"  {tail} -> {dest}{attrs};")

    def _copy(self, scope, node: UOp, kind: str, reference: bool) -> str:
        """A new box standing for `node` beside one user (see the module's docstring)."""
        key = (scope, node, kind)
        uses = self.copy_counts[key] = self.copy_counts.get(key, -1) + 1
        copy_id = f"{self.node_id(scope, node)}_{kind}{uses}"
        self.copies[scope].append((copy_id, node, reference))
        return copy_id

    def _body_edge(self, body: UOp, dest: str, label: str, style: str, colour: str) -> None:
        if body not in self.drawn.get(body, ()):
            return  # the body is outside the selection
        self.edges.append(f'  {self.node_id(body, body)} -> {dest} [label={_q(label)} style={style} '
                          f'color="{colour}" fontcolor="{colour}"];')

    def _ghost(self, scope, node: UOp) -> str:
        """A source outside the selection: a small dotted stand-in, so cut edges show."""
        ghost = f"{self.prefix(scope)}g{self.index[node]}"
        if ghost not in self.ghost_ids:
            self.ghost_ids.add(ghost)
            label = " ".join(w for w in ("…", node.op, arg_text(node), type_text(node)) if w)
            self.ghosts[scope].append(f'{ghost} [label={_q(label)} shape=box style="dotted" fontsize=8 '
                                      f'fontcolor="#777777" color="#999999" '
                                      f'tooltip={_q("not drawn: " + _tooltip(node))}];')
        return ghost

    def _outputs(self) -> None:
        for k, (name, node) in enumerate(self.roots.items()):
            if node not in self.drawn[MAIN]:
                continue
            label = _html_label(name, [("output", "#222222")])
            self.lines.append(f'  out{k} [label={label} shape=house style="filled" fillcolor="{_fill(node)}" '
                              f'penwidth=2.5 color="#000000"];')
            self.lines.append(f"  {self.node_id(MAIN, node)} -> out{k} [penwidth=1.5];")

    def _bindings(self) -> None:
        """Dotted edges from a call's args to the slots of its body: where values enter.
        Only for a body with one call: a shared body's calls say "arg i" on their edges, and
        one binding per call and slot would bury the picture in dotted lines."""
        for body in sorted((s for s in self.members if s is not MAIN), key=self.index.__getitem__):
            slots = [n for n in self.members[body] if n.op == Ops.PARAM and isinstance(n.arg, int)]
            if len(self.callers[body]) > 1:
                continue
            for scope, call in self.callers[body]:
                if call not in self.drawn.get(scope, ()):
                    continue
                args = call.src[1:]
                for slot in slots:  # (a constant arg has its copy at the call: no binding)
                    if slot.arg < len(args) and args[slot.arg] in self.drawn[scope] \
                            and args[slot.arg].op not in _COPIED:
                        self.lines.append(f"  {self.node_id(scope, args[slot.arg])} -> {self.node_id(body, slot)} "
                                          f'[style=dotted arrowhead=none color="#2a9d8f"];')

    def _legend(self) -> None:
        rows = ['<TR><TD COLSPAN="2"><B>legend</B></TD></TR>']
        for family, (colour, text) in FAMILY_COLOURS.items():  # (the "tangent" mark is no op family)
            if family in self.families:
                rows.append(f'<TR><TD BGCOLOR="{colour}" WIDTH="18"> </TD><TD ALIGN="LEFT">{_e(text)}</TD></TR>')
        rows.append('<TR><TD BORDER="1" STYLE="rounded" BGCOLOR="#ffffff" WIDTH="18"> </TD>'
                    '<TD ALIGN="LEFT">forward node (rounded, thin border)</TD></TR>')
        rows.append(f'<TR><TD BORDER="2" COLOR="{BACKWARD_BORDER}" BGCOLOR="#ffffff" WIDTH="18">∇</TD>'
                    f'<TD ALIGN="LEFT"><FONT COLOR="{BACKWARD_BORDER}">backward node (∇ forward fn; '
                    f'dashed red border)</FONT></TD></TR>')
        if "tangent" in self.families:
            rows.append(f'<TR><TD BORDER="2" COLOR="{TANGENT_BORDER}" BGCOLOR="#ffffff" WIDTH="18">∂</TD>'
                        f'<TD ALIGN="LEFT"><FONT COLOR="{TANGENT_BORDER}">tangent node (∂: made by forward mode, '
                        f'jvp/hvp; dotted blue border)</FONT></TD></TR>')
        rows.append('<TR><TD COLSPAN="2" ALIGN="LEFT">inputs and outputs: named, thick black border</TD></TR>')
        if any(reference for copies in self.copies.values() for _, _, reference in copies):
            rows.append('<TR><TD COLSPAN="2" ALIGN="LEFT">↑ dotted box: that node, drawn higher up</TD></TR>')
        table = ('<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="2">'
                 + "".join(rows) + "</TABLE>>")
        self.lines.append("  subgraph cluster_legend {")
        self.lines.append('    label="" style="rounded" color="#bbbbbb";')
        self.lines.append(f'    legend [shape=plaintext style="" label={table}];')
        self.lines.append("  }")


def _is_tangent(meta) -> bool:
    from ..core.forward import is_tangent
    return is_tangent(meta)


def _call_name(call: UOp) -> str:
    return call.arg.name if call.op == Ops.CALL else call.arg
