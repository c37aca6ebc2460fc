"""What `uopgrad info` and `uopgrad print` show: graph statistics and a readable listing.

Both walk the graph once, in the file format's canonical order, so node numbers (`%12`)
are the node indices a file stores, and the listing of a graph never changes between runs.
Nothing here needs numpy: `info` must start fast.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from typing import Iterator

from ..core.graph import Graph
from ..core.ops import CALLS, MOVEMENT, Ops
from ..core.uop import UOp, printable
from .names import briefly, wrt_words

_VIEWS = MOVEMENT | {Ops.CAST, Ops.DETACH, Ops.CONTIGUOUS}  # what reads a weight without computing on it

# FLOP estimate: floating-point operations per output element, one row per op. Ops not
# listed cost nothing (leaves, movement, identity, calls, memory, integer and bool ops).
# A REDUCE costs one per input element; a FUNCTION/CALL costs its body, once per call.
FLOPS_PER_ELEMENT: dict[str, int] = {
    Ops.NEG: 1, Ops.RECIPROCAL: 1, Ops.SQRT: 1, Ops.EXP2: 1, Ops.LOG2: 1, Ops.SIN: 1, Ops.TRUNC: 1,
    Ops.ADD: 1, Ops.SUB: 1, Ops.MUL: 1, Ops.FDIV: 1, Ops.MAX: 1, Ops.POW: 1,
    Ops.CMPLT: 1, Ops.CMPNE: 1, Ops.CMPEQ: 1,   # comparisons of floats
    Ops.WHERE: 1,
    Ops.MULACC: 2,                               # a*b+c
}


# ----------------------------------------------------------------------------- info

def graph_info(graph: Graph, canonical: bytes | None = None) -> dict:
    """Statistics of `graph` as a JSON-ready dict. `canonical` is the graph's canonical
    MessagePack bytes when the caller has them (else they are made, for the sha256)."""
    nodes = graph.nodes()
    if canonical is None:
        from ..formats.uop import save
        canonical = save(graph)
    counts = Counter(n.op for n in nodes)
    return {
        "nodes": len(nodes),
        "ops": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [{"name": n.arg, "dtype": n.dtype.name, "shape": list(n.shape)} for n in graph.inputs],
        "outputs": [{"name": name, "dtype": n.dtype.name, "shape": None if n.shape is None else list(n.shape)}
                    for name, n in graph.outputs.items()],
        "depth": depth(nodes),
        "input_elements": sum(math.prod(n.shape) for n in graph.inputs),
        "embedded_bytes": sum(len(n.arg) for n in nodes if n.op == Ops.BUFFER),
        "flops": flop_estimate(graph),
        "sha256": hashlib.sha256(canonical).hexdigest(),
        "meta": dict(graph.meta),
        **({"used_by": users} if (users := input_users(graph, nodes)) else {}),
    }


def input_users(graph: Graph, nodes: list[UOp]) -> dict[str, list[str]]:
    """Each input's users that carry a source location, as `location (name)`: for a model
    imported from ONNX, the ONNX nodes that read each initializer (`/fc1/Gemm (Gemm)`), so
    an exporter's renamed weight (`onnx::MatMul_18`) leads to its module.

    Users are found through views of the input (movement ops, casts): two ONNX nodes that
    read one weight the same way share that view's node (hash-consing), which carries the
    first one's location only; an exporter that merged equal weights of two modules into
    one initializer then shows both."""
    if "onnx.opset" not in graph.meta:  # only an imported model's locations are its node names
        return {}
    users: dict[str, list[str]] = {}
    for name, readers in _readers_through_views(graph.inputs, nodes).items():
        seen = [f"{m.loc} ({m.name})" if m.name else m.loc for m in _metas(readers) if m.loc]
        if seen:
            users[name] = list(dict.fromkeys(seen))
    return users


def modules_reading(graph: Graph, names: list[str]) -> dict[str, list[str]]:
    """{input name: the module paths (node scopes) that read it}, for each of `names` that
    more than one module reads, in an imported model: a weight the exporter merged because
    its modules' values were equal (or one the model ties), whose gradient sums theirs."""
    if "onnx.opset" not in graph.meta:
        return {}
    from ..core.forward import TANGENT_SCOPE
    wanted = [node for node in graph.inputs if node.arg in names]
    shared = {}
    for name, readers in _readers_through_views(wanted, graph.nodes()).items():
        # the model's own modules: in a forward-mode file the nodes made for a module's node
        # read the weight too, under the module's scope below the tangent one (∂/lin is lin)
        scopes = [m.scope.removeprefix(TANGENT_SCOPE).removeprefix("/") for m in _metas(readers) if m.scope]
        scopes = list(dict.fromkeys(scope for scope in scopes if scope))
        if len(scopes) > 1:
            shared[name] = scopes
    return shared


def shared_weight_notes(graph: Graph, names: list[str], weights=None) -> list[str]:
    """A line for each of `names` that several modules read (modules_reading): its gradient
    is the sum of theirs; for a weight of a PyTorch export (`weights`: the model's weight
    names, when known), why: torch's dynamo exporter merged other modules' equal weights into
    it (MERGED_WEIGHTS, and which export keeps each module's own), or the model itself shares
    it (tied weights, a module applied twice: one Parameter, which the legacy exporter, whose
    equal weights the import separates again, and a dynamo export whose nodes say what they
    read both write once), or, where the file cannot tell, either."""
    meta = graph.meta or {}
    merged = meta_json(meta, MERGED_WEIGHTS, dict)
    knows = meta.get(TORCH_EXPORTER) == "legacy" or MERGED_WEIGHTS in meta
    notes = []
    for name, modules in modules_reading(graph, names).items():
        shown = briefly(modules)
        others = merged.get(name)
        if not exported_by_pytorch(meta) or (weights is not None and name not in weights):
            hint = ""
        elif isinstance(others, list) and others:
            hint = (f"; torch's dynamo exporter merged {briefly([str(o) for o in others])} into it, their values being "
                    f"equal at export (its optimizer, on by default): torch.onnx.export(..., dynamo=True, "
                    f"optimize=False) keeps each module's own")
        elif knows:
            hint = (f"; the model itself shares this one weight (one Parameter: tied weights, or a module applied "
                    f"twice), exported under the name {name}")
        else:
            hint = ("; unless the model shares it (a module applied twice, tied weights), torch's dynamo exporter "
                    "merged weights of equal values (its optimizer, on by default): torch.onnx.export(..., "
                    "optimize=False) keeps each module's own")
        notes.append(f"{name} is read by {len(modules)} modules ({shown}), so its gradient is the sum of theirs{hint}")
    return notes


def missing_weight_hint(graph: Graph, name: str) -> tuple:
    """Why parameter `name` of a PyTorch export is no input of it, where the file tells: torch's
    dynamo exporter merged it into another weight of equal values (MERGED_WEIGHTS), or the
    model ties it to a weight its module reads, which the exporter wrote once under that
    weight's name (GPT-2's wte.weight and lm_head.weight: one Parameter). As (Python's
    words, the command line's): `wrt=['w']` or `--wrt w`; () otherwise."""
    meta = graph.meta or {}
    if not exported_by_pytorch(meta):
        return ()
    merged = meta_json(meta, MERGED_WEIGHTS, dict)
    into = [weight for weight, others in merged.items() if isinstance(others, list) and name in others]
    if into:
        return tuple(f"; torch's dynamo exporter merged {name} into {into[0]}, their values being equal at export "
                     f"(its optimizer, on by default): {wrt} gives the sum of both modules' gradients, and "
                     f"torch.onnx.export(..., dynamo=True, optimize=False) keeps {name}" for wrt in wrt_words(into[0]))
    if meta.get(TORCH_EXPORTER) != "legacy" and MERGED_WEIGHTS not in meta:
        return ()
    module, _, attribute = name.rpartition(".")
    if not module:
        return ()
    alike = [node.arg for node in graph.inputs if node.arg.rpartition(".")[2] == attribute and node.arg not in merged]
    for weight, modules in modules_reading(graph, alike).items():
        dotted = [m.replace("/", ".") for m in modules]
        if module in dotted:
            others = [m for m, d in zip(modules, dotted) if d != module]
            return tuple(f"; module {module} reads {weight}, one weight the model itself shares with "
                         f"{briefly(others)} (tied: one Parameter), exported under the name {weight}: {wrt}, whose "
                         f"gradient holds the uses of {'both' if len(modules) == 2 else 'all'}"
                         for wrt in wrt_words(weight))
    return ()


# graph meta of an imported model: JSON {weight: [rewrite rule, module]}, the weights an
# exporter's optimizer folded a BatchNorm into (interop/onnx/importer.py, _folded_weights)
FOLDED_WEIGHTS = "onnx.folded_weights"
# graph meta of an imported model torch.onnx wrote: which exporter, "dynamo" or "legacy" (interop/onnx/importer.py)
TORCH_EXPORTER = "onnx.torch_exporter"
# graph meta of a dynamo export whose nodes say what program they were made from: JSON {weight: [the
# parameters of other modules its optimizer merged into it, their values being equal]}, {} for none
MERGED_WEIGHTS = "onnx.merged_weights"
# graph meta of an imported model: JSON list of the inputs --constant fixed when importing
FIXED_INPUTS = "onnx.fixed_inputs"
# graph meta of an imported model: JSON {ONNX name: graph name}, the inputs and outputs whose
# ONNX names are no valid graph names (whitespace, '=', ','), renamed (interop/onnx/graph_inputs.py)
RENAMED = "onnx.renamed"

# graph meta of a tinygrad export: JSON {name: the input's name}, the names given for a
# tensor already named (tied weights: GPT-2's head.weight is wte.weight), which are no inputs
SAME_TENSORS = "tinygrad.same_tensors"
# graph meta of a tinygrad export: JSON list of the named tensors given that no output
# depends on (all of them: an output realized before the export holds its value, not its graph)
UNREACHED = "tinygrad.unreached"


def meta_json(meta: dict | None, key: str, kind: type):
    """The JSON value graph meta `key` holds, when it is a `kind` (list, dict); else an empty
    one: the notes and hints these entries feed are courtesies, a damaged entry gets none."""
    try:
        value = json.loads((meta or {}).get(key, "null"))
    except ValueError:
        return kind()
    return value if isinstance(value, kind) else kind()


def folded_weights(meta: dict | None) -> dict[str, tuple[str, str]]:
    """{weight: (rewrite rule, module)} of FOLDED_WEIGHTS, its well-formed entries."""
    return {weight: tuple(entry) for weight, entry in meta_json(meta, FOLDED_WEIGHTS, dict).items()
            if isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry)}


def folded_weight_notes(graph: Graph, names: list[str]) -> list[str]:
    """A line for each of `names` that holds a BatchNorm folded into it at export: it keeps
    the Conv's (Gemm's) name, but its gradient is that of W·γ/σ, not of the module's W."""
    folded = folded_weights(graph.meta)
    notes = []
    for name in names:
        if name not in folded:
            continue
        rule, module = folded[name]
        hint = ("; torch.onnx.export(..., optimize=False) keeps the Conv's own weights" if exported_by_pytorch(graph.meta)
                else "")
        notes.append(f"{name} has the BatchNorm {module or '(unnamed)'} folded into it by the exporter's optimizer "
                     f"({rule}): its gradient is that of the folded weight, not of the module's own{hint}")
    return notes


def exported_by_pytorch(meta: dict | None) -> bool:
    """Whether the graph was imported from an ONNX file that torch.onnx wrote."""
    return meta is not None and meta.get("onnx.producer", "").startswith("pytorch")


def _readers_through_views(params: list[UOp], nodes: list[UOp]) -> dict[str, list[UOp]]:
    """{param name: the nodes that read it, directly or through views of it, in order}."""
    readers: dict[UOp, list[UOp]] = {}
    for node in nodes:
        for src in dict.fromkeys(node.src):
            readers.setdefault(src, []).append(node)
    found: dict[str, list[UOp]] = {}
    for param in params:
        seen: list[UOp] = []
        stack, visited = [param], {param}
        while stack:
            for node in readers.get(stack.pop(), ()):
                seen.append(node)
                if node.op in _VIEWS and node not in visited:
                    visited.add(node)
                    stack.append(node)
        found[param.arg] = seen
    return found


def _metas(nodes: list[UOp]) -> list:
    return [node.meta for node in nodes if node.meta is not None]


def depth(nodes: list[UOp]) -> int:
    """Length of the longest chain of source edges (a lone input has depth 0). `nodes`
    must be in topological order (sources first), as Graph.nodes() gives them."""
    level: dict[UOp, int] = {}
    deepest = 0
    for node in nodes:
        d = 1 + max(map(level.__getitem__, node.src)) if node.src else 0
        if node.op == Ops.CALL and node.arg.grad is not None:
            d = max(d, 1 + level[node.arg.grad])
        level[node] = d
        deepest = d if d > deepest else deepest
    return deepest


def flop_estimate(graph: Graph, visits: int | None = None) -> int | None:
    """Floating-point operations one evaluation of every output performs (an estimate:
    FLOPS_PER_ELEMENT per element, bodies counted once per call); None when costing it
    would visit more than `visits` nodes (default: 10 per node of the graph, at least
    10^6).

    A body's cost is needed before its callers' and bodies nest, so scopes wait on a stack
    (the graph's outputs at the bottom) until the bodies they call are costed: iterative,
    however deep the nesting. Each body is walked once, in full: bodies that share nodes
    (body k built on body k-1's nodes) would cost bodies x nodes, hence the budget."""
    if visits is None:
        visits = max(10 ** 6, 10 * len(graph.nodes()))
    budget = [visits]
    body_cost: dict[UOp, int] = {}
    waiting: list[UOp | None] = [None]  # None: the graph's own scope, costed last
    while True:
        scope = waiting[-1]
        if scope in body_cost:  # waited on by two callers
            waiting.pop()
            continue
        roots = list(graph.outputs.values()) if scope is None else list(scope.src)
        cost, uncosted = _scope_flops(roots, body_cost, budget)
        if budget[0] < 0:
            return None
        if uncosted:
            waiting += dict.fromkeys(uncosted)
            continue
        waiting.pop()
        if scope is None:
            return cost
        body_cost[scope] = cost


def _scope_flops(roots: list[UOp], body_cost: dict[UOp, int], budget: list[int]) -> tuple[int, list[UOp]]:
    """The cost of one scope, and the bodies it calls whose cost is not known yet (if
    any, the cost is incomplete); each node visited takes one from budget[0], and the
    walk stops when it is spent."""
    total = 0
    uncosted: list[UOp] = []
    for node in _scope_walk(roots):
        budget[0] -= 1
        if budget[0] < 0:
            break
        op = node.op
        if op in CALLS:
            body = node.src[0]
            if body in body_cost:
                total += body_cost[body]
            else:
                uncosted.append(body)
        elif op == Ops.REDUCE:
            if node.dtype.is_float:
                total += math.prod(node.src[0].shape)
        elif op in FLOPS_PER_ELEMENT:
            operand = node.src[-1] if op != Ops.WHERE else node.src[1]
            if operand.dtype.is_float:
                total += FLOPS_PER_ELEMENT[op] * math.prod(node.shape)
    return total, uncosted


def _scope_walk(roots: list[UOp]) -> Iterator[UOp]:
    """Every node of one scope: not entering call bodies (src[0]) nor backward bodies."""
    seen = set(roots)
    stack = list(roots)
    while stack:
        node = stack.pop()
        yield node
        sources = node.src[1:] if node.op in CALLS else node.src
        for s in sources:
            if s not in seen:
                seen.add(s)
                stack.append(s)


def counted(number: int, noun: str) -> str:
    """`1 node`, `3 nodes`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def info_text(info: dict) -> str:
    """The human form of graph_info."""
    def typed(entry):
        shape = "" if entry["shape"] is None else "[" + ",".join(map(str, entry["shape"])) + "]"
        return f"{entry['name']} {entry['dtype']}{shape}"

    lines = [
        f"nodes           {info['nodes']}",
        f"depth           {info['depth']}",
        f"inputs          {', '.join(map(typed, info['inputs'])) or 'none'}",
        f"outputs         {', '.join(map(typed, info['outputs'])) or 'none'}",
        f"input elements  {info['input_elements']}",
        f"embedded bytes  {info['embedded_bytes']}",
        f"flops (est.)    {'unknown: function bodies share too many nodes to count' if info['flops'] is None else info['flops']}",
        f"sha256          {info['sha256']}",
        "ops             " + ", ".join(f"{op} {n}" for op, n in info["ops"].items()),
    ]
    lines = [printable(line) for line in lines]
    # a description may span lines; any other control character is shown escaped
    lines += [f"{'meta.' + printable(key):<15} {_printable_lines(value)}" for key, value in info["meta"].items()]
    lines += [printable(f"{'used by':<15} {name} <- {', '.join(users)}") for name, users in info.get("used_by", {}).items()]
    return "\n".join(lines)


def _printable_lines(text: str) -> str:
    return "\n".join(printable(line) for line in text.split("\n"))


# ----------------------------------------------------------------------------- listing

def listing(graph: Graph) -> Iterator[str]:
    """`uopgrad print`: one node a line, `%12 = MUL float32[32,64] %10 %11  # relu, backward`.

    Nodes come in canonical order (sources before users, `%n` = the file's node index);
    a function body's nodes are indented one step per nesting level, so each body reads as
    a block ending in its TUPLE, just before the call that uses it."""
    order, levels = _ordered_with_levels(graph)
    number = {node: i for i, node in enumerate(order)}
    ins = ", ".join(f"{n.arg} {_type(n)}" for n in graph.inputs)
    yield printable(f"# {counted(len(order), 'node')}; inputs: {ins or 'none'}")
    for node in order:
        yield "  " * levels[node] + printable(_line(node, number))
    for name, node in graph.outputs.items():
        yield printable(f"output {name} = %{number[node]}")


def _line(node: UOp, number: dict[UOp, int]) -> str:
    parts = [f"%{number[node]} = {node.op} {_type(node)}"]
    parts += [f"%{number[s]}" for s in node.src]
    arg = _arg(node, number)
    if arg:
        parts.append(arg)
    text = " ".join(parts)
    comment = _comment(node)
    return f"{text}  # {comment}" if comment else text


def _type(node: UOp) -> str:
    if node.shape is None:
        return node.dtype.name
    return f"{node.dtype.name}[{','.join(map(str, node.shape))}]"


def _arg(node: UOp, number: dict[UOp, int]) -> str:
    op, arg = node.op, node.arg
    if arg is None:
        return ""
    if op == Ops.PARAM:
        return arg if isinstance(arg, str) else f"slot {arg}"
    if op == Ops.BUFFER:
        return f"<{len(arg)} bytes>"
    if op == Ops.REDUCE:
        return f"{arg[0]} ({','.join(map(str, arg[1]))})"
    if op == Ops.CALL:
        return arg.name + ("" if arg.grad is None else f" grad=%{number[arg.grad]}")
    if op in (Ops.PAD, Ops.SHRINK):
        return "(" + ",".join(f"({a},{b})" for a, b in arg) + ")"
    if op == Ops.FLIP:
        return "(" + ",".join("1" if f else "0" for f in arg) + ")"
    if isinstance(arg, tuple):
        return "(" + ",".join(map(str, arg)) + ")"
    return repr(arg) if isinstance(arg, float) else str(arg)


def _comment(node: UOp) -> str:
    meta = node.meta
    if meta is None:
        return ""
    parts = [p for p in (meta.name, meta.scope and f"in {meta.scope}", "backward" if meta.backward else None) if p]
    return ", ".join(parts)


def _ordered_with_levels(graph: Graph) -> tuple[list[UOp], dict[UOp, int]]:
    """Graph.nodes()'s order (the same iterative post-order walk), plus each node's body
    nesting level: the level at which the walk first reached it."""
    order: list[UOp] = []
    level: dict[UOp, int] = {}
    for root in [*graph.outputs.values(), *graph.inputs]:
        if root in level:
            continue
        level[root] = 0
        stack = [(root, iter(_children(root, 0)))]
        while stack:
            node, children = stack[-1]
            for child, child_level in children:
                if child not in level:
                    level[child] = child_level
                    stack.append((child, iter(_children(child, child_level))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order, level


def _children(node: UOp, at: int) -> list[tuple[UOp, int]]:
    """Sources with the level they live at: a call's body (and backward body) one deeper."""
    if node.op not in CALLS:
        return [(s, at) for s in node.src]
    children = [(node.src[0], at + 1), *((s, at) for s in node.src[1:])]
    if node.op == Ops.CALL and node.arg.grad is not None:
        children.append((node.arg.grad, at + 1))
    return children
