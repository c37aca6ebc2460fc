"""Calls told apart where no source location does it: which call of its function made a node.

A front end that records no source location (tinygrad) tags every node a function made with
the function's name only, so the calls of `linear` inside one module share one metadata key
(scope, name, loc, backward). Such a key's forward nodes are split into their connected
pieces (joined through the context's other nodes of the same function or of none, not
through inputs). Pieces of like ops (the same count of each op) are separate calls,
numbered in canonical (graph) order. Pieces whose ops differ may be one call in parts (a
loss's target and logits sides, joined only through a node of another name) and are not
split; calls that feed each other make one piece and stay one call: nothing tells them
apart.

Backward nodes carry their forward node's metadata but not which node it was, and the
backward of one call is often several pieces (a product's gradient to each factor). Each
backward piece is matched to the forward call whose neighbours it touches:
- a forward node of the call (or an input of it) that the piece reads;
- a backward neighbour (a node the piece reads or feeds) made for a forward unit next to the
  call: a call of another function, or an already matched call of a split function (so the
  gradient's path, once tied at one end, ties the next piece along).
A piece goes to the call with the most such evidence when one call has the most; a piece
with no evidence, or a tie, stays unmatched (its group says so). Matching repeats until
nothing more is matched. Every walk is in canonical order, so the same graph gives the same
numbers.

A forward node computed from constants alone (tinygrad's `-1.0` inside `tanh`) belongs to
no call: front ends keep one node per such value, shared by every call that builds it
(tinygrad for the whole process), and its metadata names whichever call built it first,
perhaps for another model an hour before. It never joins calls: it is in the one call its
users are in (in `piece`); any other is placed with its users by groups.py, as a constant
is.
"""

from __future__ import annotations

from collections import Counter

from ...core.ops import Ops
from ...core.uop import UOp
from ...core.walks import scope_sources

_LEAVES = (Ops.PARAM, Ops.CONST, Ops.BUFFER)
_NOT_CONSTANT = (*_LEAVES, Ops.FUNCTION, Ops.CALL)  # a call's value is its body's: not looked into
UNMATCHED = -1  # the piece number of a backward node matched to no call


class Calls:
    """`piece[node]`: the number (0, 1, ...) of the call that made `node`, for the nodes of a
    split function (two or more unconnected forward pieces), UNMATCHED for a backward node
    matched to none; `count[key]`: how many calls a split function's forward key has (its
    key is `call_key(meta)` with backward False); `parts[key]`: how many pieces a function
    has that is not split because its pieces' ops differ."""

    def __init__(self, nodes: list[UOp], call_key):
        self._key = call_key
        self.piece: dict[UOp, int] = {}
        self.count: dict[tuple, int] = {}
        self.parts: dict[tuple, int] = {}
        # nodes computed from constants alone; those in `piece` are one call's own
        self.constants = constants = constant_expressions(nodes)
        # what no call owns whatever its metadata says (a constant several calls share, an input
        # named like the calls): groups.py places it with its users
        self.loose: set[UOp] = set()
        users = _users(nodes) if constants else {}
        keyed: dict[tuple, list[UOp]] = {}
        for node in nodes:
            meta = node.meta
            if meta is not None and meta.name and not meta.loc:
                keyed.setdefault(call_key(meta), []).append(node)
        joined: dict[str, dict] = {}  # function name -> node -> its piece (one walk per name)
        for key, members in keyed.items():
            if key[3] or len(members) < 2:
                continue
            if key[1] not in joined:
                joined[key[1]] = _joined(nodes, key[1], constants)
            found = _split(members, joined[key[1]], constants, users)
            if len(found) > 1 and len({tuple(sorted(Counter(n.op for n in piece).items())) for piece in found}) > 1:
                self.parts[key] = len(found)  # pieces of unlike ops: one call in parts, or several
            elif len(found) > 1:
                self.count[key] = len(found)
                for number, piece in enumerate(found):
                    for node in piece:
                        self.piece[node] = number
                self.loose.update(node for node in members if node not in self.piece)
        self.loose.update(constants.difference(self.piece))
        if self.count:
            self._match_backward(nodes, keyed)

    def _match_backward(self, nodes: list[UOp], keyed: dict) -> None:
        unit = {}  # forward node -> (forward key, call number): the call (or function) that made it
        for node in nodes:
            meta = node.meta
            if meta is not None and meta.name and not meta.backward \
                    and (node not in self.constants or node in self.piece):  # (a constant's name is any call's)
                unit[node] = (self._key(meta), self.piece.get(node, 0))
        near: dict[tuple, set] = {}  # unit -> units it reads or feeds, and the nodes it reads
        for node, mine in unit.items():
            for src in scope_sources(node):
                other = unit.get(src)
                if other is not None and other != mine:
                    near.setdefault(mine, set()).add(other)
                    near.setdefault(other, set()).add(mine)
                elif other is None and not _is_backward(src):
                    near.setdefault(mine, set()).add(src)  # an input of the call
        users: dict[UOp, list[UOp]] = {}
        for node in nodes:
            for src in scope_sources(node):
                users.setdefault(src, []).append(node)
        todo = []  # (forward key, backward piece)
        for key in self.count:
            backward_key = (*key[:3], True)
            for piece in components(keyed.get(backward_key, [])):
                todo.append((key, piece))
                for node in piece:
                    self.piece[node] = UNMATCHED
        pending: set[UOp] = {node for _, piece in todo for node in piece}
        while todo:
            # a piece decides once no neighbour of it is pending (its evidence is final);
            # when none can, the piece with the most evidence for one call decides alone
            ready = [item for item in todo if not self._waits(item[1], pending, users)]
            if ready:
                decided = [(piece, self._best(key, piece, unit, near, users)[0]) for key, piece in ready]
            else:
                scored = [(self._best(key, piece, unit, near, users), piece) for key, piece in todo]
                (number, _), piece = max(scored, key=lambda item: item[0][1])
                if number is None:
                    break
                decided = [(piece, number)]
            for piece, number in decided:
                for node in piece:
                    self.piece[node] = UNMATCHED if number is None else number
                    pending.discard(node)
            gone = {id(piece) for piece, _ in decided}
            todo = [item for item in todo if id(item[1]) not in gone]

    @staticmethod
    def _waits(piece: list[UOp], pending: set, users: dict) -> bool:
        inside = set(piece)
        return any(other in pending and other not in inside
                   for node in piece for other in [*scope_sources(node), *users.get(node, ())])

    def _best(self, key: tuple, piece: list[UOp], unit: dict, near: dict, users: dict) -> tuple:
        """(call, strength): the call with a strict majority of the piece's evidence (a
        neighbour next to k calls gives each 1/k), or None: also when evidence that can
        point to one call only points to two (the gradients of two calls summed into one
        piece, as for a weight or an input several calls share)."""
        inside = set(piece)
        score: Counter = Counter()
        sure: set = set()  # the calls some evidence points to alone
        calls = [(key, number) for number in range(self.count[key])]
        for node in piece:
            for other in [*scope_sources(node), *users.get(node, ())]:
                if other in inside:
                    continue
                if not _is_backward(other):  # a forward value the piece reads
                    mine = unit.get(other)
                    if mine is not None and mine[0] == key:
                        touched = [mine, mine]  # the call's own value: counts twice
                    else:
                        touched = [call for call in calls if (mine or other) in near.get(call, ())]
                else:  # a gradient it reads or feeds: made for a forward unit next to calls
                    mine = self._backward_unit(other)
                    if mine is None or mine[0] == key:
                        continue
                    touched = [call for call in calls if mine in near.get(call, ())]
                if touched and len(set(touched)) == 1:
                    sure.add(touched[0])
                for call in touched:
                    score[call] += 1 / len(touched) if touched[0] != touched[-1] else 1
        if not score or len(sure) > 1:
            return None, 0.0
        best, top = score.most_common(1)[0]
        return (best[1], top) if top * 2 > sum(score.values()) else (None, 0.0)

    def _backward_unit(self, node: UOp):
        """The forward unit a backward node was made for: its function's forward key and the
        call it is matched to (None while unmatched, or for a node of no function)."""
        meta = node.meta
        number = self.piece.get(node, 0)
        if meta is None or not meta.name or number == UNMATCHED:
            return None
        return self._key(meta._replace(backward=False)), number

def constant_expressions(nodes: list[UOp]) -> set[UOp]:
    """The forward nodes of `nodes` (sources before users) computed from constants alone,
    through no input, BUFFER or call. (A gradient is often constant down a chain from its
    seed, each node made for one forward node: the backward's metadata is ours to trust.)"""
    found: set[UOp] = set()
    for node in nodes:
        sources = node.src
        if sources and node.op not in _NOT_CONSTANT and not _is_backward(node) \
                and all(src.op == Ops.CONST or src in found for src in sources):
            found.add(node)
    return found


def _joined(nodes: list[UOp], name: str, constants: set[UOp]) -> dict:
    """node -> a number naming its piece, for the context's forward nodes of function
    `name` or of none (not an input, not a shared constant), joined by their edges: the
    scope assignment may have put part of a call elsewhere, and a call of another function
    is what parts two calls."""
    joins = [node for node in nodes if not _is_backward(node) and node.op not in _LEAVES and node not in constants
             and (node.meta is None or node.meta.name is None or node.meta.name == name)]
    return {node: number for number, piece in enumerate(components(joins)) for node in piece}


def _split(members: list[UOp], joined: dict, constants: set[UOp], users: dict) -> list[list[UOp]]:
    """One key's `members` as its calls, ordered by their first node. A constant is in the
    one piece its users are in; one that several pieces use (or none) is in none."""
    found: dict[int, list[UOp]] = {}
    for node in members:
        if node in constants:
            pieces = _pieces_using(node, joined, constants, users)
            if len(pieces) != 1:
                continue
            number = pieces.pop()
        elif node in joined:
            number = joined[node]
        else:  # an input or a backward body's slot that carries the name: no call's work
            continue
        found.setdefault(number, []).append(node)
    return list(found.values())


def _pieces_using(constant: UOp, joined: dict, constants: set[UOp], users: dict) -> set[int]:
    """The pieces of `joined` that use `constant`, directly or through other constants."""
    pieces: set[int] = set()
    stack, seen = [constant], {constant}
    while stack:
        for user in users.get(stack.pop(), ()):
            if user in constants:
                if user not in seen:
                    seen.add(user)
                    stack.append(user)
            elif user in joined:
                pieces.add(joined[user])
    return pieces


def _users(nodes: list[UOp]) -> dict[UOp, list[UOp]]:
    found: dict[UOp, list[UOp]] = {}
    for node in nodes:
        for src in scope_sources(node):
            found.setdefault(src, []).append(node)
    return found


def components(nodes: list[UOp]) -> list[list[UOp]]:
    """`nodes` as the pieces their edges among themselves join, each in the order given,
    ordered by their first node."""
    parent = {node: node for node in nodes}

    def root(node):
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node
    for node in nodes:
        for src in scope_sources(node):
            if src in parent:
                a, b = root(src), root(node)
                if a is not b:
                    parent[a] = b
    found: dict[UOp, list[UOp]] = {}
    for node in nodes:
        found.setdefault(root(node), []).append(node)
    return list(found.values())


def _is_backward(node: UOp) -> bool:
    return node.meta is not None and bool(node.meta.backward)
