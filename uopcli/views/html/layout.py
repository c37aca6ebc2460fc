"""One layout per level, by graphviz's `dot`, run at export time, levels batched into a few
`dot -Tplain` processes that run in parallel.

A level is what the page draws when a group is open: its child groups and its own nodes as
boxes ("items"), plus small boxes beside their users for constants, BUFFERs and slot PARAMs
(copies, as `uopgrad render` draws them) and for sources more than LONG_EDGE ranks above a
user (references: `dot` lays an edge over k ranks out as k hidden nodes, and a gradient's
reads of forward values made a 412-node level take 40 s instead of 0.2 s). An edge of the
graph is drawn at the level of the deepest group holding both ends, between the items
holding them; several such edges between two items are one edge with a count. A ∇ group
and its forward twin get the same rank, so backward sits beside forward.

Box sizes come from the label text (LabelSizes); the page draws the same lines in boxes of
the sizes given here, so what `dot` placed is what the page shows.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ...core.uop import UOp
from ..graphviz import LONG_EDGE, RenderError, arg_text, dot_missing, meta_text, type_text
from ..graphviz import _children as sources_with_bodies  # sources, and a CALL's backward body
from .groups import Group, Grouping, is_copied

NODE, GROUP, COPY, REF_NODE, REF_GROUP = range(5)  # item kinds, as the page reads them
CHAR_PX, LINE_PX, PAD_PX = 6.2, 12, 10             # the page's 10px sans-serif, roughly
MAX_LINE = 40                                       # characters a box line shows (the page cuts the same)
DOT_OPTIONS = 'rankdir=TB nodesep=0.25 ranksep=0.35 nslimit=4 mclimit=0.5 searchsize=30'


def cut(text: str, limit: int = MAX_LINE) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def node_lines(node: UOp, input_name: str | None, output_names: list[str]) -> list[str]:
    """The lines of a node's box (the page's viewer.js nodeLines makes the same)."""
    if input_name is not None:
        lines = [input_name, "input " + type_text(node)]
    else:
        lines = [f"{node.op} {arg_text(node)}".strip(), type_text(node)]
    lines.append(meta_text(node))
    if output_names:
        lines.append("→ " + ", ".join(output_names))
    return [cut(line) for line in lines if line]


def copy_line(node: UOp) -> str:
    return cut(f"{node.op} {arg_text(node)}".strip() if node.op != "BUFFER" else "BUFFER " + type_text(node))


def box_size(lines: list[str], extra_px: int = 0, min_width: int = 40) -> tuple[int, int]:
    width = max(min_width, int(CHAR_PX * max((len(line) for line in lines), default=1)) + 2 * PAD_PX)
    return width, LINE_PX * len(lines) + PAD_PX + extra_px


class Level:
    """The items and edges of one open group, before and after layout."""
    __slots__ = ("group", "items", "item_of", "edges", "twins", "reversed", "width", "height", "boxes", "paths")

    def __init__(self, group: Group):
        self.group = group
        self.items: list[tuple] = []          # (kind, ref, width, height, order)
        self.item_of: dict[tuple, int] = {}   # (kind, ref[, user]) -> item index
        self.edges: dict[tuple[int, int], int] = {}
        self.twins: list[tuple[int, int]] = []
        self.reversed: set[tuple[int, int]] = set()  # edges laid out upward (see Levels.dot_text)
        self.width = self.height = 0
        self.boxes: list[tuple[int, int]] = []  # top-left corner of each item, px
        self.paths: dict[tuple[int, int], list[int]] = {}

    def add(self, key: tuple, kind: int, ref: int, size: tuple[int, int], order: int) -> int:
        found = self.item_of.get(key)
        if found is None:
            found = self.item_of[key] = len(self.items)
            self.items.append((kind, ref, size[0], size[1], order))
        return found


class Levels:
    """Every group's level: items and edges from the grouping, then laid out by `dot`."""

    def __init__(self, grouping: Grouping, input_names: dict[int, str], output_names: dict[int, list[str]]):
        self.g = grouping
        self.input_names = input_names
        self.output_names = output_names
        self.levels = [Level(group) for group in grouping.groups]
        order = grouping.order
        used = {grouping.index[s] for node in order for s in sources_with_bodies(node)}
        self.standalone = [not is_copied(n) or i in output_names or i not in used for i, n in enumerate(order)]
        self._items()
        self._edges()
        self._cut_long_edges()

    # ------------------------------------------------------------------ items and edges
    def _items(self) -> None:
        order = self.g.order
        for level in self.levels:
            group = level.group
            for child in group.children:
                level.add((GROUP, child.id), GROUP, child.id, group_size(child), child.first)
            for i in group.nodes:
                if self.standalone[i]:
                    lines = node_lines(order[i], self.input_names.get(i), self.output_names.get(i, []))
                    level.add((NODE, i), NODE, i, box_size(lines), i)
            for child in group.children:
                if child.twin is not None and child.twin.parent is group and not child.backward:
                    level.twins.append((level.item_of[GROUP, child.id], level.item_of[GROUP, child.twin.id]))

    def _edges(self) -> None:
        g, order, home, levels = self.g, self.g.order, self.g.home, self.levels
        index = g.index
        for user_index, user in enumerate(order):
            if not self.standalone[user_index]:
                continue
            user_home = home[user_index]
            for src in sources_with_bodies(user):
                s = index[src]
                if not self.standalone[s]:  # a copy beside the user, at the user's level
                    level = levels[user_home.id]
                    copy = level.add((COPY, s, user_index), COPY, s, box_size([copy_line(src)]), user_index)
                    level.edges[copy, level.item_of[NODE, user_index]] = 1
                    continue
                level, a, b = _common_level(home[s], user_home, s, user_index)
                level = levels[level.id]
                edge = (level.item_of[a], level.item_of[b])
                level.edges[edge] = level.edges.get(edge, 0) + 1

    def _cut_long_edges(self) -> None:
        """Edges over more than LONG_EDGE ranks become a reference box beside the user (ranks
        as dot will lay them out, about: see _ranks)."""
        for level in self.levels:
            self._mirror(level)
            if len(level.items) <= LONG_EDGE:
                continue
            rank, laid_out = _ranks(level)
            for (a, b), count in list(level.edges.items()):
                if level.items[a][0] == COPY:
                    continue  # a copy is beside its user
                tail, head = laid_out(a, b)
                if abs(rank[head] - rank[tail]) > LONG_EDGE:
                    kind, ref = level.items[a][0], level.items[a][1]
                    ref_kind = REF_GROUP if kind == GROUP else REF_NODE
                    label = "↑ " + (self.g.groups[ref].label if kind == GROUP else
                                    node_lines(self.g.order[ref], self.input_names.get(ref), [])[0])
                    r = level.add((ref_kind, ref, b), ref_kind, ref, box_size([cut(label)]), level.items[b][4])
                    del level.edges[a, b]
                    level.reversed.discard((a, b))
                    level.edges[r, b] = count

    def _mirror(self, level: Level) -> None:
        """Where ∇ groups sit beside their forward twins, backward runs upward: each ∇ group
        on the rank of its twin, the gradient flowing from the last layer's back to the
        first's. So edges between two backward boxes are laid out reversed (and drawn with
        their arrow at the user); laid out downward, dot would break the cycles that twin
        ranks make by turning the forward chain upside down."""
        if not level.twins:
            return
        backward = [self._item_backward(item) for item in level.items]
        level.reversed = {(a, b) for a, b in level.edges
                          if backward[a] and backward[b] and (b, a) not in level.edges}

    def _item_backward(self, item: tuple) -> bool:
        kind, ref = item[0], item[1]
        if kind == GROUP:
            return self.g.groups[ref].backward
        meta = self.g.order[ref].meta
        return kind == NODE and meta is not None and bool(meta.backward)

    # ------------------------------------------------------------------ dot
    def dot_text(self, level: Level, with_twins: bool = True) -> str:
        lines = [f"digraph L{level.group.id} {{", f"graph [{DOT_OPTIONS}];",
                 'node [shape=box fixedsize=true label=""];']
        for k, (_, _, width, height, _) in enumerate(level.items):
            lines.append(f"i{k} [width={width / 72:.3f} height={height / 72:.3f}];")
        if with_twins:
            lines.extend(f"{{rank=same; i{a}; i{b};}}" for a, b in level.twins)
        for a, b in level.edges:
            lines.append(f"i{b} -> i{a} [dir=back];" if (a, b) in level.reversed else f"i{a} -> i{b};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def lay_out(self, workers: int | None = None) -> None:
        """Run `dot` on every level with more than one item, in parallel batches."""
        todo = [level for level in self.levels if len(level.items) > 1]
        for level in self.levels:
            if len(level.items) == 1:
                _, _, width, height, _ = level.items[0]
                level.width, level.height, level.boxes = width + 8, height + 8, [(4, 4)]
        workers = workers or min(8, os.cpu_count() or 1)
        batches: list[list[Level]] = [[] for _ in range(max(1, min(workers * 2, len(todo))))]
        loads = [0] * len(batches)
        for level in sorted(todo, key=lambda lv: -(len(lv.items) + len(lv.edges))):
            k = loads.index(min(loads))
            batches[k].append(level)
            loads[k] += len(level.items) + len(level.edges)
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(self._run_batch, batches):
                pass

    def _run_batch(self, batch: list[Level]) -> None:
        if not batch:
            return
        try:
            plain = run_dot("".join(self.dot_text(level) for level in batch))
            parts = plain.split("\nstop\n")
            if len(parts) - 1 != len(batch):
                raise RenderError("dot gave fewer layouts than levels")
        except RenderError:
            if len(batch) > 1:  # find the level dot refused; the others are laid out alone
                for level in batch:
                    self._run_batch([level])
                return
            # twins ranked together can trouble dot: without that constraint it always works
            parts = run_dot(self.dot_text(batch[0], with_twins=False)).split("\nstop\n")
        for level, part in zip(batch, parts):
            _read_plain(level, part)


def group_size(group: Group) -> tuple[int, int]:
    lines = [cut(group.label), f"{group.size} nodes", mix_text(group)]
    return box_size(lines, extra_px=8, min_width=110)


def mix_text(group: Group) -> str:
    """The three commonest ops inside: `MUL 40 · ADD 12 · EXPAND 9`."""
    return cut(" · ".join(f"{op} {count}" for op, count in group.ops.most_common(3)), 44)


def run_dot(text: str) -> str:
    try:
        done = subprocess.run(["dot", "-Tplain"], input=text.encode(), capture_output=True, check=False)
    except FileNotFoundError:
        raise dot_missing() from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise RenderError(f"dot failed: {detail[0] if detail else f'exit status {done.returncode}'}")
    return done.stdout.decode()


def _read_plain(level: Level, text: str) -> None:
    """`dot -Tplain`: inches, y up; the page wants px, y down, boxes by their top-left corner."""
    boxes: list[tuple[int, int]] = [(0, 0)] * len(level.items)
    height_in = 0.0
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "graph":
            height_in = float(words[3])
            level.width, level.height = round(float(words[2]) * 72) + 8, round(height_in * 72) + 8
        elif words[0] == "node":
            k = int(words[1][1:])
            _, _, width, height, _ = level.items[k]
            x, y = float(words[2]) * 72, (height_in - float(words[3])) * 72
            boxes[k] = (round(x - width / 2) + 4, round(y - height / 2) + 4)
        elif words[0] == "edge":
            a, b, n = int(words[1][1:]), int(words[2][1:]), int(words[3])
            points = []
            for j in range(n):
                points.append(round(float(words[4 + 2 * j]) * 72) + 4)
                points.append(round((height_in - float(words[5 + 2 * j])) * 72) + 4)
            if (b, a) in level.reversed:  # laid out upward: the path still ends at the user
                points = [v for j in range(n - 1, -1, -1) for v in points[2 * j:2 * j + 2]]
                a, b = b, a
            level.paths[a, b] = points
    level.boxes = boxes


def _ranks(level: Level):
    """Each item's rank as dot will about lay it out: twins merged into one rank, reversed
    edges turned around, cycles broken at the back edges of a depth-first walk in canonical
    order, then the longest path. Returns (rank of every item, edge -> its laid-out ends)."""
    count = len(level.items)
    rep = list(range(count))
    for a, b in level.twins:
        rep[b] = a

    def laid_out(a: int, b: int) -> tuple[int, int]:
        return (b, a) if (a, b) in level.reversed else (a, b)

    heads: dict[int, list[int]] = {}
    for a, b in level.edges:
        tail, head = laid_out(a, b)
        if rep[tail] != rep[head]:
            heads.setdefault(rep[tail], []).append(rep[head])
    order = sorted({rep[k] for k in range(count)}, key=lambda k: level.items[k][4])
    state = dict.fromkeys(order, 0)  # 0 unseen, 1 on the walk's stack, 2 done
    finished: list[int] = []
    back: set[tuple[int, int]] = set()
    for root in order:
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(heads.get(root, ())))]
        while stack:
            node, pending = stack[-1]
            for head in pending:
                if state[head] == 1:
                    back.add((node, head))
                elif state[head] == 0:
                    state[head] = 1
                    stack.append((head, iter(heads.get(head, ()))))
                    break
            else:
                stack.pop()
                state[node] = 2
                finished.append(node)
    rank = dict.fromkeys(order, 0)
    for node in reversed(finished):  # a topological order of the edges that are not back edges
        for head in heads.get(node, ()):
            if (node, head) not in back and rank[head] < rank[node] + 1:
                rank[head] = rank[node] + 1
    return [rank[rep[k]] for k in range(count)], laid_out


def _common_level(a: Group, b: Group, source: int, user: int) -> tuple[Group, tuple, tuple]:
    """The deepest group holding both nodes, and the item holding each there."""
    item_a, item_b = (NODE, source), (NODE, user)
    while a.depth > b.depth:
        item_a, a = (GROUP, a.id), a.parent
    while b.depth > a.depth:
        item_b, b = (GROUP, b.id), b.parent
    while a is not b:
        item_a, a = (GROUP, a.id), a.parent
        item_b, b = (GROUP, b.id), b.parent
    return a, item_a, item_b
