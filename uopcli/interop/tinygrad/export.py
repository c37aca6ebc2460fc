"""tinygrad 0.14 Tensors (or bare UOps) -> Graph, and their data -> arrays.

    from uopcli.interop.tinygrad import save
    save("model.uop", outputs={"loss": loss}, inputs={"x": x}, state_dict=nn.state.get_state_dict(model))

tinygrad 0.14's tensor-level graph is not format v1, which keeps tinygrad's earlier,
explicit conventions. What the rows of `_RULES` map, each exactly (same values, same
gradients):
- elementwise sources broadcast numpy-style: each is reshaped and expanded to the result;
- EXPAND prepends axes (shape = arg + source shape): a RESHAPE adding 1s, then EXPAND;
- REDUCE (op, n) reduces the n leading axes and drops them: REDUCE over 0..n-1, RESHAPE;
- PAD and SHRINK take (offset, size) per axis, and shapes are STACKs of CONSTs (`marg`);
- weak dtypes (a Python number's): a weak CONST takes the dtype its user needs; a weak
  computation runs at least at the default width and is cast to it (tinygrad's
  commit rules), so the file only has concrete dtypes;
- data: a BUFFER, and what a tensor's storage becomes (a RESHAPE or COPY of it, an assign's
  AFTER, a CONTIGUOUS of random values) is an input of the graph, not a computation, one per
  storage: its views (RESHAPE, COPY) read that input reshaped. Named tensors (`inputs`,
  `state_dict`) become PARAMs of those names, others `buffer_0`, ...; all their values are
  realized with tinygrad and returned (and saved beside the file as .npz). A tensor's second
  name (tied weights) and, where no output depends on any named tensor (an output realized
  before the export), the names are recorded in graph meta for `diff --wrt` to explain;
  the latter is also an ExportWarning;
- a named tensor tinygrad holds as constants alone (a 0-d tensor of a number is a CONST,
  one node with the program's equal constants) is refused where reached (shared_constants.py);
- COPY between devices is the value itself (the file has no devices);
- an integer CONST its dtype cannot hold (tinygrad's `-u` of a uint8 is `u * -1`, its abs and
  sign make a uint8 -1, `u + 300` a uint8 300) is wrapped to the dtype, as tinygrad's ops
  compute with it; a comparison or MAX with one is decided as tinygrad's range analysis
  decides it (`u < -1` is False), and a flooring division by one is refused (tinygrad's
  value is neither wrapped nor floored).
What has no counterpart (random bits not realized, multi-device ops, custom kernels,
symbolic shapes) is refused with one line naming the tinygrad op and the Tensor function
that made it. tinygrad's metadata (the Tensor function that made a node) becomes node
metadata `name`; tinygrad 0.14 records no source location, so `loc` stays empty. Each node's
`scope` is the module whose forward made it (module_calls.py), its path from the state_dict's
keys (scopes.py).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from ...errors import UOpError
from ...core.graph import Graph
from ...core.ops import DType, Ops, dtypes, least_upper_dtype
from ...core.uop import Metadata, UOp, valid_name
from ._tinygrad import import_tinygrad, our_dtype
from .export_rules import _rules
from .module_calls import ModuleScopes
from .scopes import assign_scopes
from .shared_constants import built_from_constants, refusal


class ExportError(UOpError):
    """A tinygrad graph that the format cannot hold, or a bad inputs/outputs request."""


class ExportWarning(UserWarning):
    """An export that is likely not what was meant (no output depends on any named tensor)."""


class Exported(NamedTuple):
    graph: Graph
    values: dict  # input name -> numpy array (every input of the graph)


# flags of the first pass
_FREE = 1     # depends on no named input
_RANDOM = 2   # computes random bits (THREEFRY)
_DATA = 4     # a tensor's storage: an input of the graph


def export(outputs: Mapping, inputs: Mapping | None = None, state_dict: Mapping | None = None) -> Exported:
    """The Graph of `outputs` ({name: Tensor or UOp}) with `inputs` ({name: Tensor}) and
    the tensors of `state_dict` ({key: Tensor}) as named inputs, and every input's value
    (realized by tinygrad: lazy weights are computed now, as tinygrad would compute them).
    Every one of `inputs` is an input of the graph, in order; state_dict tensors only where
    the outputs reach them (BatchNorm's running statistics in training mode do not)."""
    tg = import_tinygrad()
    graph, walk, named = _translated(tg, outputs, inputs, state_dict)
    return Exported(graph, _realize_values(tg, graph, walk, named))


def to_graph(outputs: Mapping, inputs: Mapping | None = None, state_dict: Mapping | None = None) -> Graph:
    """The Graph of `outputs` (see `export`), without realizing any value."""
    tg = import_tinygrad()
    return _translated(tg, outputs, inputs, state_dict)[0]


def _translated(tg, outputs, inputs, state_dict):
    outputs = _check_names(outputs, "output")
    inputs = _check_names(inputs or {}, "input")
    named, same = _named_uops(tg, inputs, dict(state_dict or {}))
    scopes = ModuleScopes(tg, dict(state_dict or {}))
    walk = _Walk(tg, {uop: name for name, (uop, _) in named.items()}, scopes.scope_of)
    roots = {name: _uop_of(tg, value, f"output {name!r}") for name, value in outputs.items()}
    walk.classify(roots.values())
    graph_outputs = {name: walk.translate(root, name) for name, root in roots.items()}
    reached = {p.arg for p in walk.params}
    # the user's inputs all stay, in their order, used or not; the rest as reached
    given = [walk.param(named[name][0], name) for name in inputs]
    listed = set(given)
    graph = Graph(graph_outputs, given + [p for p in walk.params if p not in listed],
                  meta={"producer": "uopgrad tinygrad export", "tinygrad": _version()})
    _note_names(graph, same, [name for name in named if name not in reached], len(named))
    assign_scopes(graph, {key for key in state_dict or {} if key in named and key not in inputs}, scopes.recorded)
    return graph, walk, named


def _note_names(graph: Graph, same: dict, unreached: list, given: int) -> None:
    """Record in the graph's meta the names given that are no input of it, for `diff --wrt`
    to say why: another name of an input's tensor (tied weights), or none reached at all
    (then also a warning now: the outputs are constants, likely realized before export)."""
    import json
    import warnings

    from ...tools.inspect import SAME_TENSORS, UNREACHED
    from ...tools.names import briefly
    inputs = set(graph.input_names)
    same = {alias: name for alias, name in same.items() if name in inputs}
    if same:
        graph.meta[SAME_TENSORS] = json.dumps(same)
    if given and len(unreached) == given:
        graph.meta[UNREACHED] = json.dumps(unreached)
        outputs = ", ".join(map(repr, graph.outputs))
        which = f"outputs {outputs} depend" if len(graph.outputs) > 1 else f"output {outputs} depends"
        warnings.warn(ExportWarning(f"tinygrad export: {which} on none of the named tensors given "
                                    f"({briefly(unreached)}): a tensor realized before the export (loss.realize()) "
                                    f"holds its value, not the graph that computed it; export before realizing"),
                      stacklevel=_caller_level())


def _caller_level() -> int:
    """warnings.warn's stacklevel of the first caller outside this package (save, export and
    to_graph reach the warning through different depths)."""
    import os
    import sys
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level


def save(path, outputs: Mapping, inputs: Mapping | None = None, state_dict: Mapping | None = None,
         values_path=None) -> Exported:
    """Export (see `export`) and write the graph to `path` and the inputs' values to
    `values_path` (default: `path` with .npz for its suffix), both or neither."""
    import os

    from ...formats.atomic import write_atomically_together
    from ...formats.uop import dumps
    from ...tools.values import npz_bytes
    exported = export(outputs, inputs, state_dict)
    path = os.fspath(path)
    if values_path is None:
        values_path = (path[:-4] if path.endswith(".uop") else path) + ".npz"
    write_atomically_together([(path, dumps(exported.graph)), (os.fspath(values_path), npz_bytes(exported.values))])
    return exported


# ----------------------------------------------------------------------------- names and values

def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("tinygrad")
    except PackageNotFoundError:
        return "unknown"


def _check_names(mapping: Mapping, what: str) -> dict:
    if not isinstance(mapping, Mapping):
        raise ExportError(f"{what}s must be a dict of name -> tensor, got {type(mapping).__name__}")
    for name in mapping:
        if not isinstance(name, str) or not valid_name(name):
            raise ExportError(f"{what} name {name!r} must be a non-empty string without '=', ',' or whitespace")
    return dict(mapping)


def _uop_of(tg, value, what: str):
    if isinstance(value, tg.Tensor):
        return value.uop
    if isinstance(value, tg.UOp):
        return value
    raise ExportError(f"{what} must be a tinygrad Tensor or UOp, got {type(value).__name__}")


def _named_uops(tg, inputs: dict, state_dict: dict) -> tuple[dict, dict]:
    """name -> (tinygrad UOp, the Tensor or UOp given): `inputs` first, then state_dict
    keys. A name in both collides; a tensor under two input names is refused; a state_dict
    tensor already named (tied weights) keeps its first name: second, {its key: that name}.
    Two names on one node built from constants are two tensors tinygrad merged: refused."""
    from tinygrad.uop.ops import Ops as TOps
    named: dict = {}
    same: dict = {}
    by_uop: dict = {}
    for name, value in inputs.items():
        uop = _uop_of(tg, value, f"input {name!r}")
        if uop in by_uop and built_from_constants(TOps, uop):
            raise ExportError(refusal(TOps, name, uop, also=by_uop[uop]))
        if uop in by_uop:
            raise ExportError(f"inputs {by_uop[uop]!r} and {name!r} are the same tensor: name it once")
        named[name], by_uop[uop] = (uop, value), name
    for key, value in state_dict.items():
        if not isinstance(key, str) or not valid_name(key):
            raise ExportError(f"state_dict key {key!r} is not a valid input name (no '=', ',' or whitespace)")
        if key in named:
            raise ExportError(f"input name {key!r} collides: it is given in inputs and is a state_dict key")
        uop = _uop_of(tg, value, f"state_dict[{key!r}]")
        if uop in by_uop and built_from_constants(TOps, uop):
            raise ExportError(refusal(TOps, key, uop, also=by_uop[uop]))
        if uop in by_uop:
            same[key] = by_uop[uop]
        else:
            named[key], by_uop[uop] = (uop, value), key
    return named, same


def _realize_values(tg, graph: Graph, walk: "_Walk", named: dict) -> dict:
    """Every input's value, realized by tinygrad in one schedule (named tensors as given,
    data reached in the graph from its node)."""
    tensors = {}
    for param in graph.inputs:
        name = param.arg
        given = named.get(name, (None, None))[1]
        tensors[name] = given if isinstance(given, tg.Tensor) else tg.Tensor(walk.source_of[name])
    try:
        tg.Tensor.realize(*tensors.values())
        values = {name: t.numpy() for name, t in tensors.items()}
    except Exception as e:  # noqa: BLE001 - tinygrad's own refusal (a device missing, a compiler failing)
        raise ExportError(f"tinygrad could not compute the inputs' values: {type(e).__name__}: {e}") from None
    for param in graph.inputs:
        array = values[param.arg]
        if array.dtype != param.dtype.np or tuple(array.shape) != param.shape:
            raise ExportError(f"input {param.arg!r}: tinygrad gave {array.dtype}{list(array.shape)}, "
                              f"the graph has {param.dtype.name}{list(param.shape)}")
    return values


# ----------------------------------------------------------------------------- the walk

_LEAVES = (Ops.PARAM, Ops.CONST, Ops.BUFFER)


class _Walk:
    """Two iterative passes over tinygrad's graph: `classify` marks what is data and what
    depends on named inputs; `translate` builds our nodes, one rule per tinygrad op."""

    def __init__(self, tg, names: dict, scope_of):
        from tinygrad.uop.ops import Ops as TOps
        self.tg, self.T, self.names, self.scope_of = tg, TOps, names, scope_of
        self.flags: dict = {}
        self.memo: dict = {}
        self.params: list[UOp] = []         # graph inputs in the order reached
        self.source_of: dict[str, object] = {}  # input name -> the tinygrad node it stands for
        self._param_of: dict = {}
        self._data_chain = {TOps.RESHAPE, TOps.COPY, TOps.CONTIGUOUS, TOps.AFTER}
        # what data passes through unchanged, element order included: views of one storage
        self._same_values = {TOps.RESHAPE, TOps.COPY, TOps.CONTIGUOUS}
        self._stands_for: dict = {}  # data node -> the data node whose input holds its values
        self._rules = _rules(TOps)
        self._weak = set(tg.dtypes.weaks)
        self._output, self._root = "", None
        self._claimed: set[UOp] = set()  # our nodes this export made or met for a tinygrad node
        self._buffers = 0
        self._taken = set(names.values())

    # -- first pass
    def classify(self, roots) -> None:
        T, flags, names = self.T, self.flags, self.names
        stack = [(r, False) for r in roots]
        while stack:
            node, ready = stack.pop()
            if node in flags:
                continue
            if node in names:
                if built_from_constants(T, node):  # the program's equal constants are this node too
                    raise ExportError(refusal(T, names[node], node))
                flags[node] = _DATA
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((s, False) for s in node.src if s not in flags)
                continue
            free, random = True, node.op is T.THREEFRY
            for s in node.src:
                f = flags[s]
                free = free and bool(f & _FREE)
                random = random or bool(f & _RANDOM)
            f = (_FREE if free else 0) | (_RANDOM if random else 0)
            if free and (node.op is T.BUFFER or (node.op in self._data_chain and flags[node.src[0]] & _DATA)
                         or (node.op is T.CONTIGUOUS and random)):
                f |= _DATA
            flags[node] = f
        self._group_data()

    def _group_data(self) -> None:
        """Each data node -> the one node whose input holds its values. Views of one
        storage (a realized `h` and `h.reshape(...)`, one rand draw and its flatten) are
        one input, reshaped where used: an input per view would let `-i` and `--wrt` change
        only some of the uses of the one tensor."""
        by_storage: dict = {}
        for node, f in self.flags.items():
            if f & _DATA:
                by_storage.setdefault(self._storage(node), []).append(node)
        for storage, nodes in by_storage.items():
            held_by = self._holder(storage, nodes)
            self._stands_for.update((node, held_by) for node in nodes)

    def _storage(self, node):
        """The data below `node` that it passes on unchanged (a named tensor is its own)."""
        while node not in self.names and node.op in self._same_values and self.flags[node.src[0]] & _DATA:
            node = node.src[0]
        return node

    def _holder(self, storage, nodes):
        """The node an input stands for: the tensor over a flat BUFFER (its RESHAPE) when
        the graph views the buffer through one tensor only, else the storage itself."""
        if storage.op is self.T.BUFFER:
            tensors = {n for n in nodes if n.op is self.T.RESHAPE and n.src[0] is storage}
            if len(tensors) == 1:
                return tensors.pop()
        return storage

    # -- second pass
    def translate(self, root, output_name: str) -> UOp:
        self._output, self._root = output_name, root
        want = self._default(root.dtype) if root.dtype in self._weak else None
        memo, flags = self.memo, self.flags
        stack = [(root, want, False)]
        while stack:
            node, want, ready = stack.pop()
            key = (node, want)
            if key in memo:
                continue
            if flags.get(node, 0) & _DATA:
                memo[key] = self._data(node)
                continue
            rule = self._rules.get(node.op)
            if rule is None:
                raise self._refuse(node, "has no counterpart in format v1")
            sources = rule.sources(self, node, want)
            if not ready:
                stack.append((node, want, True))
                stack.extend((s, w, False) for s, w in sources if (s, w) not in memo)
                continue
            memo[key] = self._build(rule, node, want, [memo[(s, w)] for s, w in sources])
        return memo[(root, self._default(root.dtype) if root.dtype in self._weak else None)]

    def _build(self, rule, node, want, srcs) -> UOp:
        try:
            result = rule.build(self, node, want, srcs)
        except ExportError:
            raise
        except UOpError as e:
            raise self._refuse(node, f"does not fit the format: {e}") from None
        self._tag(node, result)
        return result

    def _tag(self, node, made: UOp) -> None:
        """Our nodes made for tinygrad `node` get its function's name and the scope of the
        module that made it: those reached from `made` that no earlier tinygrad node of
        this export claimed (the first claim wins, as tinygrad tags a shared node once).
        A node that exists already is claimed too, and its tag replaced: nodes are shared
        by structure in a process, and a graph exported earlier (another model on the same
        input names) must not decide this export's names and scopes."""
        metadata, scope = node.metadata, self.scope_of(node)
        meta = Metadata(name=metadata[0].name if metadata else None, scope=scope) if metadata or scope else None
        claimed, stack = self._claimed, [made]
        while stack:
            ours = stack.pop()
            if ours in claimed:
                continue
            claimed.add(ours)
            if ours.op in _LEAVES:  # a constant, drawn beside its users, keeps its first tag; an input none
                if ours.meta is None and ours.op != Ops.PARAM:
                    ours.set_meta(meta)
                continue
            ours.set_meta(meta)
            stack.extend(ours.src)
            if ours.op == Ops.CALL and ours.arg.grad is not None:
                stack.append(ours.arg.grad)

    def _data(self, node) -> UOp:
        """Data `node` as the input holding its values, reshaped to its shape."""
        held_by = self._stands_for[node]
        param = self.param(held_by, self.names.get(held_by))
        shape = self.shape(node)
        if shape == param.shape:
            return param
        view = UOp.make(Ops.RESHAPE, param.dtype, (param,), shape)
        self._tag(node, view)
        return view

    def param(self, node, name: str | None) -> UOp:
        """The graph input standing for tinygrad data `node` (named, or buffer_0, ...)."""
        found = self._param_of.get(node)
        if found is not None:
            return found
        if node.dtype in self._weak:
            raise self._refuse(node, f"input {name!r} has a weak dtype: give the tensor a concrete dtype")
        dtype = self.dtype(node)
        while name is None:  # buffer_0, buffer_1, ...: the next number no named input has
            candidate = f"buffer_{self._buffers}"
            self._buffers += 1
            if candidate not in self._taken:
                name = candidate
        param = UOp.param(name, self.shape(node), dtype)
        self._param_of[node] = param
        self.source_of[name] = node
        self.params.append(param)
        return param

    # -- helpers the rules use
    def dtype(self, node) -> DType:
        dtype = our_dtype(node.dtype)
        if dtype is None:
            # every integer width is the format's: what lands here is a float (bfloat16, fp8)
            raise self._refuse(node, f"has dtype {str(node.dtype).removeprefix('dtypes.')}, which format v1 does not "
                                     "have: the format's floats are float16, float32 and float64, build the model in "
                                     "one (Tensor.float(); tinygrad's default float: DEFAULT_FLOAT=float32 in the "
                                     "environment, or Context(DEFAULT_FLOAT='float32'))")
        return dtype

    def shape(self, node) -> tuple[int, ...]:
        shape = node.shape
        if not all(isinstance(s, int) for s in shape):
            raise self._symbolic(node, shape)
        return tuple(shape)

    def marg(self, node):
        arg = node.marg
        flat = [a for pair in arg for a in (pair if isinstance(pair, tuple) else (pair,))]
        if not all(isinstance(a, int) for a in flat):
            raise self._symbolic(node, flat)
        return arg

    def _symbolic(self, node, values) -> ExportError:
        """The refusal of a shape that holds tinygrad Variables (bound or not), naming them."""
        named = dict.fromkeys(text for value in values if not isinstance(value, int) for text in _variables(value))
        which = f"Variables {', '.join(named)}" if len(named) > 1 else f"Variable {''.join(named) or '(unnamed)'}"
        instead = "ints in their place" if len(named) > 1 else "an int in its place"
        return self._refuse(node, f"its shape depends on the {which}, and format v1 has static shapes: "
                                  f"build the graph with {instead} (a file per size)")

    def is_weak(self, node) -> bool:
        return node.dtype in self._weak

    def _default(self, tg_dtype) -> DType:
        return dtypes.default_float if tg_dtype is self.tg.dtypes.weakfloat else dtypes.default_int

    def compute_dtype(self, node, want: DType) -> DType:
        """Where a weak computation runs: its target, at least the default width of its kind."""
        return least_upper_dtype(want, self._default(node.dtype))

    def value_dtype(self, node, want) -> DType:
        """The dtype `node` computes in: its own, or (weak) the width it commits to."""
        return self.compute_dtype(node, want) if self.is_weak(node) else self.dtype(node)

    def want(self, src, dtype: DType):
        """The key a source is translated under: a weak source commits to `dtype`."""
        return dtype if src.dtype in self._weak else None

    def _refuse(self, node, why: str) -> ExportError:
        return ExportError(f"cannot export tinygrad {node.op.name}{self._made_by(node)}, reached from output "
                           f"{self._output!r}: {why}")

    def _made_by(self, node) -> str:
        """` (made by Tensor.f)`; for a node tinygrad records no function on (Tensor.cast's
        CAST, matmul's cast back from its accumulator), the functions around it: ` (from
        Tensor.f, an input of Tensor.g)`, f a source's, g the nearest user's on a shortest
        path from the output that has one; "" where none has."""
        if node.metadata:
            return f" (made by Tensor.{node.metadata[0].name})"
        user_of = _breadth_first(self._root, until=node)  # node -> the user it was reached from
        user = user_of.get(node)
        while user is not None and not user.metadata:
            user = user_of[user]
        # its own sources only: below them tinygrad shares nodes (devices, constants) among
        # tensors, with the metadata of whichever tensor made them first
        source = next((s for s in node.src if s.metadata), None)
        around = [f"from Tensor.{source.metadata[0].name}"] if source is not None else []
        around += [f"an input of Tensor.{user.metadata[0].name}"] if user is not None else []
        return f" ({', '.join(around)})" if around else ""


def _variables(value) -> list[str]:
    """`n (bound to 3)` for each tinygrad Variable in shape `value` (`n` where unbound):
    tinygrad 0.14 binds one as AFTER(variable, STORE(variable, CONST))."""
    bound = {n.src[0]: n.src[1].src[1].arg for n in value.toposort()
             if n.op.name == "AFTER" and len(n.src) == 2 and n.src[1].op.name == "STORE"
             and n.src[1].src[-1].op.name == "CONST"}
    texts = []
    for variable in value.variables():
        name = getattr(variable.arg, "name", None) or str(variable.arg)
        texts.append(f"{name} (bound to {bound[variable]})" if variable in bound else name)
    return texts


def _breadth_first(root, until) -> dict:
    """The nodes below tinygrad node `root`, nearest first, each mapped to the user it was
    first reached from (root: None), until `until` is reached."""
    user_of = {root: None}
    queue, at = [root], 0
    while at < len(queue) and until not in user_of:
        for s in queue[at].src:
            if s not in user_of:
                user_of[s] = queue[at]
                queue.append(s)
        at += 1
    return user_of
