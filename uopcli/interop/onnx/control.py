"""ONNX's control flow, decided when importing: the format has no control flow, so each
construct becomes the plain graph it computes for this model's static shapes.

- If (1-25) whose condition is known when importing (a constant, or computed from shapes
  and attributes: AffineGrid's body asks whether the size is 2-D): the branch it takes,
  its nodes imported in place. A condition only known when running is refused.
- Scan (8-25, https://onnx.ai/onnx/operators/onnx__Scan.html): its sequence length is a
  static shape, so the body is imported once per step, unrolled. Step t reads the states
  the step before made (the initial states at t = 0) and element t of each scan input
  along its scan axis (element T-1-t for a reverse input); the final states are the last
  step's, and each scan output stacks its steps' elements along its output axis (in
  reverse for a prepending output). Scan-8 has a batch axis 0 (scanned along axis 1, each
  batch element on its own: its body sees no batch axis) and an optional sequence_lens,
  taken only where every length is the whole axis.
- Loop (1-25, https://onnx.ai/onnx/operators/onnx__Loop.html) whose trip count and
  condition are known when importing, step after step (a trip count from a shape, a
  condition computed from the iteration number or constants): unrolled the same way, its
  loop-carried values passed on (a sequence too: torch's scripted loops append each
  step's tensor to one, then concatenate it), its scan outputs stacked along a new axis 0.
  At most MAX_STEPS steps.

The body reads outer values by name (lexical capture), and its own names may shadow
outer ones: they are bound for the body's steps and put back afterwards. Each step's
nodes carry the step in their scope (`<scan's scope>/<scan's name>.<t>`), so the viewer
draws the unrolled steps as groups."""

from __future__ import annotations

import numpy as np

from ...core.uop import Metadata, next_serial

# op -> the since_versions whose meaning the importer follows (every version up to 25)
IF_VERSIONS = LOOP_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)
SCAN_VERSIONS = (8, 9, 11, 16, 19, 21, 23, 24, 25)
MAX_STEPS = 1 << 16  # a Loop unrolled further is refused: its graph would hold as many bodies


def import_if(im, node, index: int, label: str, since: int) -> None:
    """If: the branch its import-time condition takes, its outputs the If's."""
    value = im.values.get(node.input[0]) if len(node.input) == 1 else None
    if value is None or value.const is None or value.const.size != 1:
        im.fail("If's condition must be known when importing (a constant, or computed from shapes): "
                "the format has no control flow", label, "If")
    taken = "then_branch" if bool(value.const.reshape(())) else "else_branch"
    branch = _graph_attribute(node, taken)
    if branch is None or len(branch.output) != len(node.output):
        im.fail(f"its {taken} is missing or makes {len(branch.output) if branch else 0} outputs for "
                f"{len(node.output)}", label, "If")
    for tensor in branch.initializer:
        im.values[tensor.name] = _value(const=im.tensor_array(tensor, f"initializer {tensor.name!r}"))
    for inner in branch.node:
        im._import_node(inner, index)
    for name, made in zip(node.output, branch.output):
        if name:
            found = im.values.get(made.name)
            if found is None:
                im.fail(f"its {taken}'s output {made.name!r} is made by no node", label, "If")
            im.values[name] = found
            if found.seq is not None:
                im._made_by[name] = (label, "If")


# ----------------------------------------------------------------------------- Scan

def import_scan(im, node, index: int, label: str, since: int) -> None:
    """Scan, unrolled: see the module's docstring."""
    try:
        _import_scan(im, node, index, label, since)
    except _Refusal as why:
        im.fail(str(why), label, "Scan")


def _import_scan(im, node, index: int, label: str, since: int) -> None:
    body = _graph_attribute(node, "body")
    scans = _int_attribute(node, "num_scan_inputs")
    names = list(node.input)
    lengths = names.pop(0) if since == 8 else ""
    if body is None or scans is None or not 1 <= scans <= len(names):
        im.fail(f"needs a body and num_scan_inputs between 1 and its {len(names)} inputs", label, "Scan")
    states = len(names) - scans
    if len(body.input) != len(names) or len(body.output) < states:
        im.fail(f"its body takes {len(body.input)} inputs and makes {len(body.output)} outputs, for {states} "
                f"states and {scans} scan inputs", label, "Scan")
    produced = len(body.output) - states
    if len(node.output) > len(body.output):
        im.fail(f"has {len(node.output)} outputs; its body makes {len(body.output)}", label, "Scan")
    values = [_input(im, name, label) for name in names]
    run = _Steps(im, node, "Scan", body, index, label, states, any(node.output[states:]))
    with _bound(im, body):
        if since == 8:
            _check_lengths(im, lengths, values[states:], label)
            outputs = run.batched(values, _ints(node, "directions", scans), produced)
        else:
            outputs = run.scan(values, _ints(node, "scan_input_axes", scans),
                               _ints(node, "scan_input_directions", scans),
                               _ints(node, "scan_output_axes", produced),
                               _ints(node, "scan_output_directions", produced))
    for name, value in zip(node.output, outputs):
        if name:
            im.values[name] = value


# ----------------------------------------------------------------------------- Loop

def import_loop(im, node, index: int, label: str, since: int) -> None:
    """Loop, unrolled: see the module's docstring."""
    body = _graph_attribute(node, "body")
    names = list(node.input)
    if body is None or len(names) < 2:
        im.fail("needs a body, a trip count and a condition (either may be empty)", label, "Loop")
    trip, condition, carried = names[0], names[1], names[2:]
    if len(body.input) != 2 + len(carried) or len(body.output) < 1 + len(carried):
        im.fail(f"its body takes {len(body.input)} inputs and makes {len(body.output)} outputs, for "
                f"{len(carried)} loop-carried values (plus the iteration number and the condition)", label, "Loop")
    if len(node.output) > len(body.output) - 1:
        im.fail(f"has {len(node.output)} outputs; its body makes {len(body.output) - 1}", label, "Loop")
    limit = _known_scalar(im, trip, "trip count", label) if trip else None
    go = _known_scalar(im, condition, "condition", label) if condition else None
    if limit is None and go is None:
        im.fail("has neither a trip count nor a condition: it would never end", label, "Loop")
    if limit is not None and limit > MAX_STEPS and go is not False:
        im.fail(f"has a trip count of {int(limit):,}: unrolled, its graph would hold a body per step (at most "
                f"{MAX_STEPS:,})", label, "Loop")
    values = [_input(im, name, label, "Loop", sequences=True) for name in carried]
    run = _Steps(im, node, "Loop", body, index, label, 1 + len(carried), any(node.output[len(carried):]))
    with _bound(im, body):
        outputs = run.loop(None if limit is None else int(limit), None if go is None else bool(go), values)
    for name, value in zip(node.output, outputs):
        if name:
            im.values[name] = value
            if value.seq is not None:
                im._made_by[name] = (label, "Loop")


def _known_scalar(im, name: str, what: str, label: str):
    value = im.values.get(name)
    if value is None:
        im.fail(f"input {name!r} is made by no earlier node", label, "Loop")
    known = _known_one(value)
    if known is None:
        im.fail(f"its {what} must be known when importing (a constant, or computed from shapes): the format has "
                f"no control flow", label, "Loop")
    return known


def _known_one(value):
    """The one element of a value known when importing (an array, not a weight), else None."""
    if value.const is None or value.weight or np.size(value.const) != 1:
        return None
    return np.asarray(value.const).reshape(()).item()


class _Steps:
    """One Scan or Loop node's unrolling: its body imported once per step."""

    def __init__(self, im, node, op: str, body, index: int, label: str, states: int, scans_named: bool):
        """`states`: the body's outputs before its scan outputs; `scans_named`: whether the
        node names a scan output (without a step, one it names has no known shape)."""
        self.im, self.op, self.body, self.index, self.label, self.states = im, op, body, index, label, states
        self.scans_named = scans_named
        self.meta = Metadata(op, node.name or None, False, im.scope_of(node))
        # the node's own name, its module path (the scope above) cut off: /enc/scan -> scan
        self.step_scope = (node.name or node.output[0] or op).rsplit("/", 1)[-1] or op

    def fail(self, message: str):
        self.im.fail(message, self.label, self.op)

    def scan(self, values: list, in_axes: list, in_directions: list, out_axes: list, out_directions: list,
             prefix: str = "") -> list:
        """Scan-9 and later on the node's inputs (or, for Scan-8, one batch element's):
        the final states, then the scan outputs."""
        states, sequences = values[:self.states], values[self.states:]
        axes = [self._axis(a, len(v.shape), f"scan_input_axes[{i}]") for i, (a, v) in enumerate(zip(in_axes,
                                                                                                    sequences))]
        lengths = {v.shape[a] for v, a in zip(sequences, axes)}
        if len(lengths) != 1:
            self.fail(f"its scan inputs have different lengths {sorted(lengths)} along their scan axes")
        (length,) = lengths
        produced = len(self.body.output) - self.states
        if length == 0 and self.scans_named:
            self.fail("scans a sequence of length 0: the shape of its scan outputs is only known by running "
                      "the body")
        if length == 0:
            return states
        steps: list[list] = [[] for _ in range(produced)]
        for t in range(length):
            elements = [self._element(v, a, length - 1 - t if d else t) for v, a, d in zip(sequences, axes,
                                                                                          in_directions)]
            made = self._step(t, states + elements, prefix)
            self._tensors(made, 0)
            states = self._next_states(states, made[:self.states], t)
            for kept, element in zip(steps, made[self.states:]):
                kept.append(element)
        outputs = list(states)
        for k, (elements, direction) in enumerate(zip(steps, out_directions)):
            rank = len(elements[0].shape) + 1
            axis = self._axis(out_axes[k], rank, f"scan_output_axes[{k}]")
            outputs.append(self._stacked(elements[::-1] if direction else elements, axis))
        return outputs

    def batched(self, values: list, directions: list, produced: int) -> list:
        """Scan-8: each batch element (axis 0) scanned along axis 1 on its own, the
        results stacked back along axis 0."""
        batches = {v.shape[0] if v.shape else None for v in values}
        if len(batches) != 1 or None in batches:
            self.fail(f"Scan-8 takes states and scan inputs with one batch axis 0 of one size; got shapes "
                      f"{[list(v.shape) for v in values]}")
        (batch,) = batches
        per_batch = []
        for b in range(batch):
            inputs = [self._element(v, 0, b) for v in values]
            per_batch.append(self.scan(inputs, [0] * (len(values) - self.states), directions, [0] * produced,
                                       [0] * produced, prefix=f"[{b}]"))
        if batch == 0:
            self.fail("has a batch of size 0: its outputs' shapes are only known by running the body")
        return [self._stacked([outputs[k] for outputs in per_batch], 0) for k in range(len(per_batch[0]))]

    def loop(self, limit: int | None, condition: bool | None, carried: list) -> list:
        """Loop: steps while t < limit and the condition holds (None: not given); the
        final loop-carried values, then the scan outputs stacked along axis 0."""
        produced = len(self.body.output) - 1 - len(carried)
        steps: list[list] = [[] for _ in range(produced)]
        t = 0
        while (limit is None or t < limit) and condition is not False:
            if t == MAX_STEPS:
                self.fail(f"runs more than {MAX_STEPS:,} steps: unrolled, its graph would hold a body per step")
            step_inputs = [_value(const=np.array(t, np.int64)), _value(const=np.array(condition is not False))]
            made = self._step(t, step_inputs + carried, "")
            self._tensors(made, 1 + len(carried))
            if condition is not None:  # given: the body's condition decides whether to go on
                known = _known_one(made[0])
                if known is None:
                    self.fail(f"its condition after step {t} must be known when importing (computed from the "
                              f"iteration number or constants): the format has no control flow")
                condition = bool(known)
            carried = self._next_carried(carried, made[1:1 + len(carried)], t)
            for kept, element in zip(steps, made[1 + len(carried):]):
                kept.append(element)
            t += 1
        if t == 0 and self.scans_named:
            self.fail("runs no step: the shape of its scan outputs is only known by running the body")
        if t == 0:
            return carried
        for k, elements in enumerate(steps):
            if len({e.shape for e in elements}) != 1:
                self.fail(f"its scan output {k} changes shape between steps "
                          f"({', '.join(str(list(e.shape)) for e in elements[:3])}, ...)")
        return carried + [self._stacked(elements, 0) for elements in steps]

    def _next_carried(self, before: list, after: list, t: int) -> list:
        """A loop-carried value may change shape (the spec lets it), not its type; a
        sequence stays a sequence (of any length: torch's scripted loops append to one)."""
        for i, (old, new) in enumerate(zip(before, after)):
            if (old.seq is None) != (new.seq is None) or (old.seq is None and old.dtype != new.dtype):
                self.fail(f"its body changes loop-carried value {i} from {_described(old)} to {_described(new)} "
                          f"at step {t}")
        return after

    # ------------------------------------------------------------------ one step
    def _step(self, t: int, inputs: list, prefix: str) -> list:
        im, body = self.im, self.body
        for formal, value in zip(body.input, inputs):
            im.values[formal.name] = value
        outer = im.scope_prefix
        im.scope_prefix = _joined(outer, _joined(self.meta.scope, f"{self.step_scope}{prefix}.{t}"))
        try:
            for inner in body.node:
                im._import_node(inner, self.index)
        finally:
            im.scope_prefix = outer
        made = []
        for formal in body.output:
            value = im.values.get(formal.name)
            if value is None:
                self.fail(f"its body's output {formal.name!r} is made by no node")
            made.append(value)
        return made

    def _tensors(self, made: list, first: int) -> None:
        """Refuse a sequence among the body's outputs from `first` on (a Loop's carried values
        may be sequences, which are lists when importing; stacked or scanned ones may not)."""
        for formal, value in zip(self.body.output[first:], made[first:]):
            if value.seq is not None:
                self.fail(f"its body's output {formal.name!r} is a sequence: the format has tensors only")

    def _next_states(self, before: list, after: list, t: int) -> list:
        for i, (old, new) in enumerate(zip(before, after)):
            if old.shape != new.shape or old.dtype != new.dtype:
                self.fail(f"its body changes state {i} from {_described(old)} to {_described(new)} at step {t}: "
                          f"a state keeps its type and shape")
        return after

    # ------------------------------------------------------------------ slicing and stacking
    def _element(self, value, axis: int, position: int):
        """Element `position` of `value` along `axis` (the axis dropped): an array stays an
        array, so shapes computed from it are still known when importing."""
        if value.const is not None and not value.weight:
            return _value(const=np.take(value.const, position, axis=axis))
        since = next_serial()
        x = self.im.data(value)
        picked = x.shrink(tuple((position, position + 1) if d == axis else None for d in range(len(x.shape))))
        out = picked.reshape(x.shape[:axis] + x.shape[axis + 1:])
        _tag(out, since, self.meta)
        return _value(node=out)

    def _stacked(self, elements: list, axis: int):
        """The elements joined along a new axis `axis`: arrays by numpy; nodes pairwise, a
        balanced tree of joins (each join pads both halves to their sum, so a left-to-right
        chain of T joins would add T full-size tensors)."""
        if all(e.const is not None and not e.weight for e in elements):
            return _value(const=np.stack([e.const for e in elements], axis=axis))
        since = next_serial()
        parts = [self.im.data(e).unsqueeze(axis) for e in elements]
        while len(parts) > 1:
            parts = [parts[i].cat(parts[i + 1], dim=axis) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        _tag(parts[0], since, self.meta)
        return _value(node=parts[0])

    def _axis(self, axis: int, rank: int, what: str) -> int:
        if not -rank <= axis < rank:
            self.fail(f"{what} {axis} is out of range for rank {rank}")
        return axis % rank


# op -> (how it is imported, the versions it takes): the importer's dispatch
CONTROL = {"If": (import_if, IF_VERSIONS), "Scan": (import_scan, SCAN_VERSIONS), "Loop": (import_loop, LOOP_VERSIONS)}


# ----------------------------------------------------------------------------- helpers

class _bound:
    """The names a body defines, bound for its steps (its initializers read once) and the
    outer values put back after: a body may shadow an outer name, and its own names must
    not leak out."""

    def __init__(self, im, body):
        self.im, self.body = im, body
        self.names = {v.name for v in body.input} | {t.name for t in body.initializer}
        for inner in body.node:
            self.names.update(name for name in inner.output if name)

    def __enter__(self):
        self.saved = {name: self.im.values.get(name) for name in self.names}
        for tensor in self.body.initializer:
            self.im.values[tensor.name] = _value(const=self.im.tensor_array(tensor, f"initializer {tensor.name!r}"))
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                self.im.values.pop(name, None)
            else:
                self.im.values[name] = value
        return False


def _graph_attribute(node, name: str):
    return next((a.g for a in node.attribute if a.name == name and a.HasField("g")), None)


def _int_attribute(node, name: str) -> int | None:
    return next((int(a.i) for a in node.attribute if a.name == name), None)


def _ints(node, name: str, count: int) -> list[int]:
    """A per-input or per-output list attribute, 0 for each where it is left out."""
    given = next((list(a.ints) for a in node.attribute if a.name == name), None)
    if given is None:
        return [0] * count
    if len(given) != count:
        raise _Refusal(f"{name} has {len(given)} entries for {count}")
    return [int(v) for v in given]


class _Refusal(Exception):
    """A malformed Scan attribute, refused by import_scan in one line naming the node."""


def _input(im, name: str, label: str, op: str = "Scan", sequences: bool = False):
    value = im.values.get(name) if name else None
    if value is None:
        im.fail(f"input {name!r} is made by no earlier node" if name else "has an empty state or scan input",
                label, op)
    if value.seq is not None and sequences:
        return value
    if value.seq is not None:
        im.fail(f"input {name!r} is a sequence: the format has tensors only", label, op)
    if value.weight:  # a weight stays an input: its node, by its name
        return _value(node=im.weight_node(name, value))
    return value


def _check_lengths(im, name: str, sequences: list, label: str) -> None:
    """Scan-8's sequence_lens: taken only where every sequence has the whole axis (axis 1)."""
    if not name:
        return
    value = im.values.get(name)
    if value is None or value.const is None or value.weight:
        im.fail("sequence_lens must be known when importing: the format has static shapes", label, "Scan")
    full = {v.shape[1] for v in sequences if len(v.shape) > 1}
    lengths = {int(n) for n in np.asarray(value.const).reshape(-1)}
    if len(full) != 1 or not lengths <= full:
        im.fail(f"sequence_lens {sorted(lengths)} are not all the scan axis' length {sorted(full)}: variable "
                f"lengths (padded outputs) are not imported", label, "Scan")


def _value(node=None, const=None):
    from .importer import Value
    return Value(node=node, const=const)


def _tag(root, since: int, meta) -> None:
    from .importer import _tag as tag
    tag(root, since, meta)


def _described(value) -> str:
    return "a sequence" if value.seq is not None else f"{value.dtype.name}{list(value.shape)}"


def _joined(outer: str | None, inner: str | None) -> str | None:
    return f"{outer}/{inner}" if outer and inner else outer or inner
