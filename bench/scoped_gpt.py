"""A deep GPT-like model whose nodes carry scopes, and its gradient graph: what the HTML
viewer's tests and benchmarks open (a real gradient of a real model, of any size).

    graph = gradient_graph(blocks=24)   # about 10,000 nodes

Every block is `gpt/block.<i>` with `ln1`, `attn`, `ln2` and `mlp` inside, as an importer
would fill the metadata `scope` from a model's module names; differentiation carries the
scope onto the backward nodes.
"""

from __future__ import annotations

from uopcli import Graph, Metadata, UOp, dtypes
from uopcli.tools.differentiate import differentiate
from uopcli.core.uop import next_serial

NODES_PER_BLOCK = 241  # gradient-graph nodes per block (4 blocks: 1,025 nodes)


def scoped(path: str, fn, *args):
    """fn(*args), with every node it made that has no scope yet given scope `path` (inner
    scopes, tagged first, win)."""
    since = next_serial()
    result = fn(*args)
    stack = list(result) if isinstance(result, tuple) else [result]
    while stack:
        node = stack.pop()
        if node.serial < since or (node.meta is not None and node.meta.scope is not None):
            continue
        meta = node.meta or Metadata()
        node.set_meta(meta._replace(scope=path))
        stack.extend(node.src)
    return result


def forward_graph(blocks: int, tokens: int = 4, dim: int = 8, hidden: int = 16) -> Graph:
    """x (tokens, dim) through `blocks` pre-norm transformer blocks, a head, and an MSE loss."""
    params: list[UOp] = []

    def param(name: str, shape: tuple) -> UOp:
        node = UOp.param(name, shape, dtypes.float32)
        params.append(node)
        return node

    x = param("x", (tokens, dim))
    target = param("y", (tokens, dim))
    h = x
    for i in range(blocks):
        s = f"gpt/block.{i}"
        g1, wqkv, wo = param(f"ln1_g{i}", (dim,)), param(f"wqkv{i}", (dim, 3 * dim)), param(f"wo{i}", (dim, dim))
        g2, w1, w2 = param(f"ln2_g{i}", (dim,)), param(f"w1_{i}", (dim, hidden)), param(f"w2_{i}", (hidden, dim))

        def attention(h, g1=g1, wqkv=wqkv, wo=wo, s=s):
            normed = scoped(f"{s}/ln1", lambda: h.layernorm() * g1)
            q, k, v = scoped(f"{s}/attn", lambda: normed.linear(wqkv).chunk(3, dim=-1))
            return scoped(f"{s}/attn", lambda: q.scaled_dot_product_attention(k, v, is_causal=True).linear(wo))

        def mlp(h, g2=g2, w1=w1, w2=w2, s=s):
            normed = scoped(f"{s}/ln2", lambda: h.layernorm() * g2)
            return scoped(f"{s}/mlp", lambda: normed.linear(w1).gelu().linear(w2))

        h = scoped(s, lambda h=h: h + attention(h))
        h = scoped(s, lambda h=h: h + mlp(h))
    out = scoped("gpt/head", lambda: h.layernorm())
    loss = scoped("loss", lambda: ((out - target) * (out - target)).mean())
    return Graph({"loss": loss}, inputs=params)


def gradient_graph(blocks: int) -> Graph:
    """The gradient of forward_graph(blocks) with respect to every weight, forward kept."""
    forward = forward_graph(blocks)
    weights = [name for name in forward.input_names if name not in ("x", "y")]
    graph, _ = differentiate(forward, weights, keep_forward=True)
    return graph


def blocks_for(nodes: int) -> int:
    return max(1, round(nodes / NODES_PER_BLOCK))
