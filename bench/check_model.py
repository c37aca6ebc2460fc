#!/usr/bin/env python3
"""A four-block transformer of about 900 forward nodes and 1 M weights, with scopes, for
`uopgrad check` at model scale (bench/bench_check.py). Too big to commit as a sample: it is
built here, with the builder, in a second.

    python bench/check_model.py DIR     # writes DIR/model.uop and DIR/model.npz

Tokens (16 integers below 512) get a learned token and position embedding of width 128, four pre-norm blocks (4-head causal attention with QK-norm, a GELU MLP of width 512), a
final norm, a head onto 512 classes, and cross-entropy against class probabilities `y`.
Every weight is a graph input; `model.npz` holds seeded values for all inputs (what
`save`/`convert` write beside a model), so `-i model.npz` gives them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoped_gpt import scoped  # noqa: E402 - the bench folder's helper, not a package

import uopcli  # noqa: E402
from uopcli import Graph, UOp, dtypes  # noqa: E402

TOKENS, DIM, HEADS, HIDDEN, CLASSES, BLOCKS = 16, 128, 4, 512, 512, 4


def transformer(blocks: int = BLOCKS) -> Graph:
    params: list[UOp] = []

    def param(name: str, shape: tuple) -> UOp:
        node = UOp.param(name, shape, dtypes.float32)
        params.append(node)
        return node

    tokens = UOp.param("tokens", (TOKENS,), dtypes.int32)
    params.append(tokens)
    y = param("y", (TOKENS, CLASSES))
    embed, pos = param("embed.weight", (CLASSES, DIM)), param("pos.weight", (TOKENS, DIM))
    h = scoped("embed", lambda: tokens.one_hot(CLASSES).cast(dtypes.float32).linear(embed) + pos)
    for i in range(blocks):
        s = f"blocks.{i}"
        g1, b1 = param(f"{s}.ln1.weight", (DIM,)), param(f"{s}.ln1.bias", (DIM,))
        wqkv, wo = param(f"{s}.attn.qkv.weight", (DIM, 3 * DIM)), param(f"{s}.attn.proj.weight", (DIM, DIM))
        cqkv, co = param(f"{s}.attn.qkv.bias", (3 * DIM,)), param(f"{s}.attn.proj.bias", (DIM,))
        gq, gk = param(f"{s}.attn.q_norm.weight", (DIM // HEADS,)), param(f"{s}.attn.k_norm.weight", (DIM // HEADS,))
        g2, b2 = param(f"{s}.ln2.weight", (DIM,)), param(f"{s}.ln2.bias", (DIM,))
        w1, c1 = param(f"{s}.mlp.fc.weight", (DIM, HIDDEN)), param(f"{s}.mlp.fc.bias", (HIDDEN,))
        w2, c2 = param(f"{s}.mlp.proj.weight", (HIDDEN, DIM)), param(f"{s}.mlp.proj.bias", (DIM,))

        def attention(h, s=s, g1=g1, b1=b1, wqkv=wqkv, wo=wo, cqkv=cqkv, co=co, gq=gq, gk=gk):
            normed = scoped(f"{s}/ln1", lambda: h.layernorm() * g1 + b1)

            def heads():
                q, k, v = normed.linear(wqkv, cqkv).chunk(3, dim=-1)
                q, k, v = [t.reshape((TOKENS, HEADS, DIM // HEADS)).permute((1, 0, 2)) for t in (q, k, v)]
                q, k = q.layernorm() * gq, k.layernorm() * gk  # QK-norm, per head
                out = q.scaled_dot_product_attention(k, v, is_causal=True)
                return out.permute((1, 0, 2)).reshape((TOKENS, DIM)).linear(wo, co)
            return scoped(f"{s}/attn", heads)

        def mlp(h, s=s, g2=g2, b2=b2, w1=w1, c1=c1, w2=w2, c2=c2):
            normed = scoped(f"{s}/ln2", lambda: h.layernorm() * g2 + b2)
            return scoped(f"{s}/mlp", lambda: normed.linear(w1, c1).gelu("none").linear(w2, c2))

        h = scoped(s, lambda h=h: h + attention(h))
        h = scoped(s, lambda h=h: h + mlp(h))
    gf, bf, head = param("ln_f.weight", (DIM,)), param("ln_f.bias", (DIM,)), param("head.weight", (DIM, CLASSES))
    logits = scoped("head", lambda: (h.layernorm() * gf + bf).linear(head))
    loss = scoped("loss", lambda: logits.cross_entropy(y))
    return Graph({"loss": loss}, inputs=params, meta={"producer": "bench/check_model.py"})


def values(graph: Graph, seed: int = 0) -> dict:
    """Seeded inputs: weights at a trained model's scale (fan-in), norms at 1 and 0."""
    rng = np.random.default_rng(seed)
    out = {}
    for node in graph.inputs:
        name, shape = node.arg, node.shape
        if name == "y":
            logits = rng.standard_normal(shape)
            p = np.exp(logits - logits.max(-1, keepdims=True))
            out[name] = (p / p.sum(-1, keepdims=True)).astype(np.float32)
        elif name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight", "norm.weight")):
            out[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif name == "tokens":
            out[name] = rng.integers(0, CLASSES, shape).astype(np.int32)
        elif len(shape) == 2:
            out[name] = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        else:
            out[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return out


def weights(graph: Graph) -> list[str]:
    return [name for name in graph.input_names if name not in ("tokens", "y")]


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".")
    out.mkdir(parents=True, exist_ok=True)
    graph = transformer()
    (out / "model.uop").write_bytes(uopcli.save(graph))
    np.savez(out / "model.npz", **values(graph))
    count = sum(int(np.prod(n.shape)) for n in graph.inputs if n.arg not in ("tokens", "y"))
    print(f"{out / 'model.uop'}: {len(graph.nodes())} nodes, {len(weights(graph))} weight inputs, {count:,} weights")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
