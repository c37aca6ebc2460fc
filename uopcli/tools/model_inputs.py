"""Inputs that make sense for `eval` and `check`: what the values beside a model hold, and
which inputs random values must never fill.

- `save`, `convert` and `diff` write a model's values as `model.npz` beside `model.uop`. When
  that file is there and some inputs are given no value, `beside_note` says so, naming the
  file (`-i model.npz` gives them theirs), once.
- Some inputs are not weights or data but state: BatchNorm's running statistics (a random
  running_var is negative, and its sqrt a nan) and stored tensors such as a causal mask.
  Filling them with noise gives numbers that mean nothing, so `refuse_random_state` refuses
  to, naming them. What marks them, one row each (STATE_MARKS):
  the node's own metadata `name` (a front end that tags an input it made as "buffer" or a
  statistic), and the names front ends give them: PyTorch's and tinygrad's module state
  (`bn1.running_mean`, `running_var`, `num_batches_tracked`), Keras' (`moving_mean`,
  `moving_variance`), and tinygrad's export for stored tensors that have no state_dict
  name (`buffer_0`, `buffer_1`, ...). The inputs differentiation adds (`tangent_<input>`,
  `cotangent_<output>`, and where those are taken `tangent2_<input>`, ...: tools/names.py)
  are directions, never state, even when named after a statistic.
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterable, Sequence

from ..errors import EvaluationError
from ..core.uop import UOp
from .inspect import meta_json
from .names import briefly, is_direction

# (pattern on the input's name, or on its PARAM's metadata name; what it is)
STATE_MARKS = [
    (re.compile(r"(^|[./])running_(mean|var)$"), "running statistic"),              # torch, tinygrad BatchNorm
    (re.compile(r"(^|[./])num_batches_tracked$"), "running statistic"),             # torch BatchNorm's counter
    (re.compile(r"(^|[./])moving_(mean|variance)$"), "running statistic"),          # Keras BatchNormalization
    (re.compile(r"^buffer_\d+$"), "stored buffer"),                                 # tinygrad export, unnamed data
]
META_MARKS = {"buffer": "stored buffer", "statistic": "running statistic"}  # PARAM meta `name`
# the inputs differentiation adds are directions, whatever name they carry: jvp's and hvp's
# tangent_<input> (of bn1.running_mean too), diff --cotangent input's cotangent_<output>, and
# their numbered forms (tangent2_bn1.running_mean of a jvp of a jvp): names.is_direction


def state_kind(node: UOp) -> str | None:
    """What the file says input `node` is, when it is state rather than a weight or data."""
    if is_direction(node.arg):
        return None
    meta = node.meta
    if meta is not None and meta.name in META_MARKS:
        return META_MARKS[meta.name]
    for pattern, kind in STATE_MARKS:
        if pattern.search(node.arg):
            return kind
    return None


def archive_beside(source: str) -> str | None:
    """`model.npz` beside a `model.uop` IN, when there (not for stdin or an .onnx IN, whose
    weights are in the file)."""
    if source == "-" or source.lower().endswith(".onnx"):
        return None
    path = os.path.splitext(source)[0] + ".npz"
    return path if os.path.isfile(path) else None


def given_names(specs: Iterable[str]) -> set[str]:
    """The inputs that -i specs name: NAME=VALUE, and the members of a whole data.npz."""
    from .values import split_spec
    names: set[str] = set()
    for spec in specs:
        name, value = split_spec(spec)
        if name is not None:
            names.add(name)
        else:
            names |= set(_members(value))
    return names


def _members(path: str) -> list[str]:
    found = _npz_members(path)
    return [] if found is None else found  # gather_inputs reads it, and says what is wrong


def _npz_members(path: str) -> list[str] | None:
    """The array names of the .npz at `path` (its zip directory alone), None if it is none."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as archive:
            return [n[:-4] for n in archive.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile):
        return None


def holds_values_of(path: str, inputs: Iterable[str] | None) -> bool | None:
    """Whether `path`, the .npz beside a model (archive_beside), is the model's values: True
    when it holds a value for one of `inputs` (as save, convert and diff write it), or
    cannot be read as an .npz to tell (what else it is, nothing says); False when it holds
    none of them (an earlier `eval IN -o IN.npz` wrote IN's outputs there); None for a
    readable one without `inputs` (IN not read yet)."""
    members = _npz_members(path)
    if members is None:
        return True
    if inputs is None:
        return None
    return not set(members).isdisjoint(inputs)


def missing_inputs(inputs: Sequence[UOp], specs: Iterable[str], defaults: dict | None) -> list[UOp]:
    """The inputs neither -i nor a model's own weights give a value."""
    given = given_names(specs) | set(defaults or ())
    return [node for node in inputs if node.arg not in given]


def beside_note(source: str, specs: Sequence[str], missing: Sequence[UOp]) -> str | None:
    """One note when `model.npz` beside IN holds values for inputs given none."""
    path = archive_beside(source)
    if path is None or not missing:
        return None
    if any(spec == path or os.path.abspath(spec) == os.path.abspath(path) for spec in specs):
        return None
    held = [node.arg for node in missing if node.arg in set(_members(path))]
    if not held:
        return None
    shown = briefly(held)
    return f"{path} beside {source} holds values for inputs given none ({shown}): -i {path} gives them theirs"


# graph meta: JSON list of the inputs that are an ONNX model's weights the file was written
# without (a .uop on stdout: nothing beside it to hold them; cli/io.py's _graph_data)
UNWRITTEN_WEIGHTS = "onnx.weights_not_written"


# ... and, where they are the values in the .npz beside a .uop IN, that file's path
UNWRITTEN_FROM = "weights_not_written_from"


def mark_unwritten_weights(graph, names: list[str], archive: str | None = None) -> None:
    """Record in `graph`'s meta that its inputs `names` are not written with it: an ONNX
    model's weights, or (`archive`) the values in the .npz beside the .uop it came from."""
    graph.meta[UNWRITTEN_WEIGHTS] = json.dumps(names)
    if archive is not None:
        graph.meta[UNWRITTEN_FROM] = archive


def mark_values_beside(graph, source: str) -> None:
    """For a graph made from the .uop `source` and written to stdout: the inputs the .npz
    beside `source` holds values for (archive_beside) go unwritten, as a pipe carries none."""
    archive = archive_beside(source)
    held = set(_members(archive)) if archive else set()
    names = [node.arg for node in graph.inputs if node.arg in held]
    if names:
        mark_unwritten_weights(graph, names, archive)


def unwritten_weights_note(meta: dict, missing: Sequence[UOp], use_random: bool) -> str | None:
    """One note when inputs given no value are weights a pipe carried no values of
    (mark_unwritten_weights): random values fill them, or they are missing."""
    weights = {name for name in meta_json(meta, UNWRITTEN_WEIGHTS, list) if isinstance(name, str)}
    named = [node.arg for node in missing if node.arg in weights]
    if not named:
        return None
    shown = briefly(named)
    what = "random values fill" if use_random else "no value is given for"
    archive = meta.get(UNWRITTEN_FROM)
    if archive:
        return f"{what} {shown}: their values are in {archive}, which a pipe does not carry; -i {archive} gives them"
    return (f"{what} {shown}: the ONNX model's weights, which were not written with the graph on stdout; "
            f"-o FILE.uop writes them beside it as FILE.npz, for -i FILE.npz")


def refuse_random_state(source: str, missing: Sequence[UOp]) -> None:
    """EvaluationError naming the inputs random values would fill that are state."""
    kinds: dict[str, list[str]] = {}
    for node in missing:
        kind = state_kind(node)
        if kind:
            kinds.setdefault(kind, []).append(node.arg)
    if not kinds:
        return
    many = sum(map(len, kinds.values())) > 1
    listed = "; ".join(f"{', '.join(names)} ({kind + 's' if len(names) > 1 else 'a ' + kind})"
                       for kind, names in kinds.items())
    path = archive_beside(source)
    where = f"-i {path} gives the model's own" if path else "give their values with -i NAME=VALUE"
    raise EvaluationError(f"not filling {listed} with random values: the file says "
                          f"{'they are not weights' if many else 'it is not a weight'} or data; {where}")
