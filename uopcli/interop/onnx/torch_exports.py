"""What torch.onnx's exporters leave in a model about its weights: which exporter wrote it,
and which parameters the dynamo exporter's optimizer merged into another weight (equal
values at export), told apart from a weight the model itself ties (one Parameter read by
several modules). The importer keeps both in the graph's meta (tools/inspect.py's
TORCH_EXPORTER, MERGED_WEIGHTS), for diff's notes on a weight several modules read."""

from __future__ import annotations

import ast
import re


def torch_exporter(model) -> str:
    """Which of torch.onnx's exporters wrote the model: "dynamo" (torch.export's, whose nodes
    are named `node_linear` and carry `pkg.torch.onnx.*` metadata), "legacy" (TorchScript's,
    whose nodes are named by module path, `/head/MatMul`, with no metadata), "" (not torch)."""
    if not model.producer_name.startswith("pytorch"):
        return ""
    for node in model.graph.node:
        if node.name.startswith("node_") or any(p.key.startswith("pkg.torch.onnx.") for p in node.metadata_props):
            return "dynamo"
    return "legacy"


def merged_weights(graph, inputs_named: dict[str, str]) -> dict[str, list[str]] | None:
    """{weight: the parameters of other modules merged into it} of a dynamo export, from the
    program each node was made from (`pkg.torch.onnx.fx_node`, `linear(%tanh, %p_b_weight)`):
    a node of module b whose program read parameter b.weight, which the file lacks, but that
    reads weight a.weight had b.weight merged into a.weight by the exporter's optimizer
    (their values were equal). A weight read by several modules and merged into by none is
    one the model itself shares (tied: the program reads one parameter in each). None where
    no node says what it was made from (an older torch): which of the two is unknown."""
    own = {f"{prefix}{value.replace('.', '_')}": name for value, name in inputs_named.items()
           for prefix in ("p_", "b_", "c_")}  # torch.export's placeholder of each weight
    merged: dict[str, list[str]] = {}
    evidence = False
    for node in graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        program = props.get("pkg.torch.onnx.fx_node")
        if program is None:
            continue
        evidence = True
        read = [inputs_named[v] for v in dict.fromkeys(node.input) if v in inputs_named]
        placeholders = set(_PLACEHOLDER.findall(program.partition("(args")[2]))
        missing = [p for p in placeholders if p not in own and p[:2] in ("p_", "b_")]  # not in the file
        instead = [name for name in read if not any(own.get(p) == name for p in placeholders)]
        if len(missing) == 1 and len(instead) == 1:
            others = merged.setdefault(instead[0], [])
            name = _parameter_name(missing[0], props.get("pkg.torch.onnx.name_scopes", ""))
            if name not in others:
                others.append(name)
    return merged if evidence else None


_PLACEHOLDER = re.compile(r"%([pbc]_\w+)")  # torch.export's parameter (buffer, constant) in an fx_node


def _parameter_name(placeholder: str, name_scopes: str) -> str:
    """The parameter's name of torch.export placeholder `p_blocks_0_q_weight`, read by a node of
    module `blocks.0.q` (the last module of its name scopes): `blocks.0.q.weight`; where the
    module does not lead to it, the placeholder's own words."""
    bare = placeholder[2:]
    try:
        scopes = ast.literal_eval(name_scopes) if name_scopes else []
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        scopes = []
    if isinstance(scopes, list):
        for module in reversed([s for s in scopes[:-1] if isinstance(s, str) and s]):
            start = module.replace(".", "_") + "_"
            if bare.startswith(start):
                return f"{module}.{bare[len(start):]}"
    return bare
