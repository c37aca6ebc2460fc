"""Graph-level differentiation: what `uopgrad diff` does, as a library call.

    grad_graph, report = differentiate(graph, ["x", "w"])            # outputs grad_x, grad_w
    grad_graph, report = differentiate(graph, ["x"], of=["y"], cotangent="input")

`compute_gradient` works on nodes; this module decides the graph around it:
- which output(s) to differentiate and how each is seeded (a scalar with 1; a non-scalar
  with all ones or with a new input `cotangent_<output>`; several outputs together as one
  TUPLE root, so their gradients add up);
- the result's outputs (`grad_<target>` in `wrt` order, after the forward outputs with
  `keep_forward`) and inputs (every forward input, in order, then the cotangent inputs),
  so the same input values feed the forward and the gradient file; a name already taken
  (a kept output `grad_x`, an input `cotangent_y`) is numbered: `grad2_x`, `cotangent2_y`
  (tools/names.py);
- a report of the targets whose gradient is identically zero, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..errors import GradientError
from ..core.graph import Graph
from ..core.ops import CALLS, Ops
from ..core.uop import Metadata, UOp, next_serial, tag_new_nodes
from .names import cotangent_names, fresh, name_list, wrt_words

COTANGENTS = (None, "ones", "input")
NOT_REACHED = "not reached"
ONLY_DETACH = "reached only through DETACH"
NO_GRADIENT = "reached only through operations without a gradient (or function arguments their bodies do not use)"
_BACKWARD = Metadata(None, None, True)

# Nodes a gradient passes through unchanged in value when it is zero: following them down
# to a CONST 0 proves a gradient identically zero (how compute_gradient spells "zeros").
_ZERO_PRESERVING = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.CAST, Ops.CONTIGUOUS, Ops.PERMUTE})


@dataclass
class ZeroGradient:
    target: str
    reason: str   # NOT_REACHED, ONLY_DETACH or NO_GRADIENT


@dataclass
class DiffReport:
    """What `differentiate` found worth telling: targets whose gradient is identically zero."""
    of: list[str]
    wrt: list[str]
    zero: list[ZeroGradient] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"of": self.of, "wrt": self.wrt,
                "zero_gradients": [{"target": z.target, "reason": z.reason} for z in self.zero]}

    def lines(self) -> list[str]:
        return [f"gradient of {', '.join(self.of)} with respect to {z.target} is identically zero: {z.reason}"
                for z in self.zero]


def differentiate(graph: Graph, wrt: Sequence[str], of: Sequence[str] | None = None,
                  cotangent: str | None = None, keep_forward: bool = False) -> tuple[Graph, DiffReport]:
    """The gradient graph of `graph`'s output(s) `of` with respect to inputs `wrt`."""
    if cotangent not in COTANGENTS:
        raise GradientError(f"cotangent must be 'ones', 'input' or None, got {cotangent!r}")
    wrt = _unique(wrt, "wrt")
    if not wrt:
        raise _nothing_to_differentiate()
    of = _chosen_outputs(graph, of)
    inputs = {node.arg: node for node in graph.inputs}  # one dict: wrt may name thousands
    targets = [_target(inputs, name, graph.meta, graph) for name in wrt]
    taken = set(graph.outputs) if keep_forward else set()
    grad_names = [fresh("grad", name, taken) for name in wrt]

    since = next_serial()
    seeds, cotangent_inputs = _seeds(graph, of, cotangent)
    for seed in seeds:
        tag_new_nodes(seed, since, _BACKWARD)
    if len(of) == 1:
        root, root_grad = graph.outputs[of[0]], seeds[0]
    else:
        root = UOp.tuple(*(graph.outputs[name] for name in of))
        root_grad = UOp.tuple(*seeds)

    from ..core.gradient import compute_gradient  # the core; imported here so `info` stays light
    grads = compute_gradient(root, root_grad, targets)

    outputs = list(graph.outputs.items()) if keep_forward else []
    outputs += [(grad_name, grads[t]) for grad_name, t in zip(grad_names, targets)]
    meta = dict(graph.meta)
    meta.update({"gradient_of": ",".join(of), "gradient_wrt": ",".join(wrt)})
    result = _known_good_graph(outputs, [*graph.inputs, *cotangent_inputs], meta)
    report = DiffReport(of, wrt, _zero_gradients(root, wrt, targets, grads))
    return result, report


def _known_good_graph(outputs: list[tuple[str, UOp]], inputs: list[UOp], meta: dict) -> Graph:
    """A Graph without Graph.__init__'s walk over every node (a fifth of `diff`'s time on
    large graphs): what it checks holds by construction here. The gradients reach only the
    forward graph's nodes (whose named PARAMs are all forward inputs), nodes the rules make
    from those and from constants (function bodies stay closed), and the seeds (CONSTs or
    the new cotangent inputs); output names are the forward names kept and new names that
    tools/names.fresh made unique among them, and so are the new inputs' names. That much is
    checked, as cheaply as a dict: an output named twice would silently drop the first."""
    graph = Graph.__new__(Graph)
    graph.outputs, graph.inputs, graph.meta = dict(outputs), inputs, meta
    for what, names in (("outputs", [name for name, _ in outputs]), ("inputs", [node.arg for node in inputs])):
        twice = _named_twice(names)
        if twice is not None:
            raise GradientError(f"internal error: the result would have two {what} named {twice!r}")
    return graph


def _named_twice(names: list[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


# ----------------------------------------------------------------------------- choosing

def _unique(names, what: str) -> list[str]:
    """`names` as a list (one str: one name), each at most once."""
    names = name_list(names, what)
    seen = set()
    for name in names:
        if name in seen:
            raise GradientError(f"{what}: {name!r} is named twice")
        seen.add(name)
    return names


def _chosen_outputs(graph: Graph, of: Sequence[str] | None) -> list[str]:
    if of is None or not name_list(of, "of"):
        if len(graph.outputs) == 1:
            return list(graph.outputs)
        if not graph.outputs:
            raise GradientError("the graph has no outputs to differentiate")
        head = f"the graph has {len(graph.outputs)} outputs ({', '.join(graph.outputs)}): choose which to differentiate"
        raise GradientError(f"{head} with of=[names]", cli=f"{head} with --of")
    of = _unique(of, "of")
    for name in of:
        if name not in graph.outputs:
            raise GradientError(f"no output named {name!r}; outputs: {', '.join(graph.outputs)}")
    return of


def _target(inputs: dict[str, UOp], name: str, meta: dict | None = None, graph: Graph | None = None) -> UOp:
    """The input `name` of a graph whose inputs are `inputs` (and file metadata `meta`; `graph`,
    for a missing name's hint)."""
    node = inputs.get(name)
    if node is None and name in _fixed_inputs(meta):
        raise GradientError(f"input {name!r} was fixed with --constant {name}=... when importing, so it is a "
                            f"constant of the graph, with no gradient; where its values set a shape (why an import "
                            f"asks for --constant), the format's static shapes cannot follow them, and the model "
                            f"cannot be differentiated with respect to {name} as exported")
    renamed = _renamed(meta).get(name)
    if node is None and renamed in inputs:
        head = (f"no input named {name!r} to differentiate with respect to: the ONNX model's {name!r} is input "
                f"{renamed} (renamed: a graph's names have no whitespace, '=' or ',');")
        python, cli = wrt_words(renamed)
        raise GradientError(f"{head} {python}", cli=f"{head} {cli}")
    if node is None:
        python, cli = _folded_hint(name, meta) or _tinygrad_hint(name, meta) or _shared_hint(name, graph) \
            or _exporter_hint(meta) or ("", "")
        head = f"no input named {name!r} to differentiate with respect to; inputs: {', '.join(inputs) or 'none'}"
        raise GradientError(f"{head}{python}", cli=f"{head}{cli}")
    if not node.dtype.is_float:
        raise GradientError(f"input {name!r} is {_type(node)}: only floating-point inputs have gradients")
    return node


def _renamed(meta: dict | None) -> dict:
    """{ONNX name: graph name} of an imported model's renamed inputs and outputs (tools/inspect.RENAMED)."""
    from .inspect import RENAMED, meta_json
    return meta_json(meta, RENAMED, dict)


def _fixed_inputs(meta: dict | None) -> list:
    """The inputs of an imported model that --constant fixed (tools/inspect.FIXED_INPUTS)."""
    from .inspect import FIXED_INPUTS, meta_json
    return meta_json(meta, FIXED_INPUTS, list)


# A hint in a message, in two spellings (Python, command line): UOpError's message and its `cli`;
# () where there is no hint (falsy, so hints chain with `or`).
Words = tuple


def _same_words(text: str) -> Words:
    return text, text


def _folded_hint(name: str, meta: dict | None) -> Words:
    """Where parameter `name`'s module is a BatchNorm the exporter folded into a weight
    (tools/inspect.folded_weights), which weights hold it now."""
    from .inspect import folded_weights
    module = name.rpartition(".")[0]
    folded = folded_weights(meta)
    into = [weight for weight, (_, where) in folded.items() if where.replace("/", ".") == module]
    if not module or not into:
        return ()
    return _same_words(f"; the exporter's optimizer folded the BatchNorm {module} into {', '.join(into)} "
                       f"({folded[into[0]][0]}), so its parameters are no inputs of the file: torch.onnx.export(..., "
                       f"optimize=False) keeps them")


def _tinygrad_hint(name: str, meta: dict | None) -> Words:
    """Why tinygrad tensor `name`, given to the export, is no input (tools/inspect.SAME_TENSORS,
    UNREACHED): another name of an input's tensor, or a tensor no output depended on."""
    from .inspect import SAME_TENSORS, UNREACHED, meta_json
    same = meta_json(meta, SAME_TENSORS, dict).get(name)
    if isinstance(same, str):
        head = f"; {name} is the same tensor as {same} in the tinygrad model exported (tied), so {same}'s " \
               f"gradient holds the uses of both:"
        python, cli = wrt_words(same)
        return f"{head} {python}", f"{head} {cli}"
    if name in meta_json(meta, UNREACHED, list):
        return _same_words(f"; {name} was given to the tinygrad export, but no output depended on it (an output realized "
                           f"before the export holds its value, not the graph that computed it)")
    return ()


def _shared_hint(name: str, graph: Graph | None) -> Words:
    """Where PyTorch parameter `name` is one its exporter merged into another weight, or one the
    model ties to another (tools/inspect.missing_weight_hint)."""
    if graph is None:
        return ()
    from .inspect import missing_weight_hint
    return missing_weight_hint(graph, name)


def _exporter_hint(meta: dict | None) -> Words:
    """What to do where a model's parameter is missing because its exporter folded it: PyTorch's
    exporters optimize for inference (README, "Exporting for gradients")."""
    from .inspect import exported_by_pytorch
    if not exported_by_pytorch(meta):
        return ()
    return _same_words("; PyTorch's ONNX exporter may have folded or renamed it (BatchNorm fused into the Conv "
                       "weight, Linear weights stored transposed as val_N, equal weights merged): export with "
                       "torch.onnx.export(..., dynamo=True, optimize=False), or dynamo=False, do_constant_folding=False")


def _seeds(graph: Graph, of: list[str], cotangent: str | None) -> tuple[list[UOp], list[UOp]]:
    """One seed gradient per output, plus the cotangent inputs made for them."""
    seeds, new_inputs = [], []
    names = cotangent_names(graph, of) if cotangent == "input" else {}
    for name in of:
        out = graph.outputs[name]
        if out.shape is None or not out.dtype.is_float:
            raise GradientError(f"output {name!r} is {_type(out)} ({out.op}): only floating-point outputs "
                                f"can be differentiated")
        if out.shape == ():
            seeds.append(UOp.const(1.0, out.dtype))
        elif cotangent == "ones":
            seeds.append(UOp.full(out.shape, 1.0, out.dtype))
        elif cotangent == "input":
            param = UOp.param(names[name], out.shape, out.dtype)
            seeds.append(param)
            new_inputs.append(param)
        else:
            head = f"output {name!r} is {_type(out)}, not a scalar: its gradient needs a cotangent"
            raise GradientError(f"{head} (cotangent='ones' for all ones, or cotangent='input' for a new input "
                                f"cotangent_{name})",
                                cli=f"{head} (--cotangent ones for all ones, or --cotangent input for a new input "
                                    f"cotangent_{name})")
    return seeds, new_inputs


def _type(node: UOp) -> str:
    shape = "" if node.shape is None else "[" + ",".join(map(str, node.shape)) + "]"
    return f"{node.dtype.name}{shape}"


# ----------------------------------------------------------------------------- zero report

def _zero_gradients(root: UOp, wrt: list[str], targets: list[UOp], grads: dict) -> list[ZeroGradient]:
    """Targets whose gradient is structurally zero, each with the reason. The walks that
    find the reason run only when there is such a target (they cost a pass over the graph)."""
    zero = [(name, t) for name, t in zip(wrt, targets) if is_zero(grads[t])]
    if not zero:
        return []
    reached = _reachable([root], through_detach=True)
    reached_live = _reachable([root], through_detach=False)
    report = []
    for name, t in zero:
        reason = NOT_REACHED if t not in reached else ONLY_DETACH if t not in reached_live else NO_GRADIENT
        report.append(ZeroGradient(name, reason))
    return report


def is_zero(node: UOp) -> bool:
    """True when `node` is a CONST 0, possibly reshaped, expanded or cast, or the output of
    a function whose body computes such a zero there (the gradient of a function argument
    its body does not use): zeros by construction."""
    while True:
        if node.op in _ZERO_PRESERVING:
            node = node.src[0]
        elif node.op == Ops.GETTUPLE and node.src[0].op in CALLS:
            node = node.src[0].src[0].src[node.arg]  # that output of the call's body TUPLE
        else:
            return node.op == Ops.CONST and node.arg == 0



def _reachable(roots: list[UOp], through_detach: bool, until: set | None = None) -> set[UOp]:
    """Nodes the `roots` depend on (iterative; not through DETACH unless `through_detach`);
    bodies are closed, so call args are enough, but walking the whole source tuple is as
    cheap and simpler. With `until`, the walk ends once it has met all of those nodes (the
    set it returns then holds them, and only part of the rest)."""
    seen = set(roots)
    stack = list(roots)
    left = len(until - seen) if until is not None else -1
    detach = Ops.DETACH
    while stack and left:
        node = stack.pop()
        if not through_detach and node.op == detach:
            continue
        for s in node.src:
            if s not in seen:
                seen.add(s)
                stack.append(s)
                if until is not None and s in until:
                    left -= 1
    return seen


def _nothing_to_differentiate() -> GradientError:
    head = "nothing to differentiate with respect to: name at least one input"
    return GradientError(f"{head} (wrt=[names])", cli=f"{head} (--wrt)")
