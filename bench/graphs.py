"""The benchmark's graph families, written once and built with either library's own API.

Every builder takes a `param(name, shape)` function (the only call that differs between
uopcli and tinygrad) and uses only builder methods both libraries spell the same way
(`*`, `+`, `.sin()`, `.relu()`, `@`, `.softmax()`, `.transpose()`, `.sum()`), so the
two graphs are the same model built by each library's own front end. A builder returns
`(loss, targets)`: a scalar root and the list of parameters to differentiate for.

Sizes are given as a number of forward nodes wanted; `size_for` picks the family's
repeat count (chain steps, MLP layers, attention blocks) that comes closest.
"""

from __future__ import annotations

from typing import Callable

Param = Callable[[str, tuple], object]


def chain(param: Param, steps: int):
    """A long elementwise chain: y = sin(y * 1.0001 + 0.5), `steps` times, on a small vector."""
    x = param("x", (8,))
    y = x
    for _ in range(steps):
        y = (y * 1.0001 + 0.5).sin()
    return y.sum(), [x]


def mlp(param: Param, layers: int, width: int = 8, batch: int = 4):
    """A deep, narrow MLP: h = relu(h @ W_i + b_i); every weight and bias is a target."""
    x = param("x", (batch, width))
    h, targets = x, []
    for i in range(layers):
        w = param(f"w{i}", (width, width))
        b = param(f"b{i}", (width,))
        h = (h @ w + b).relu()
        targets += [w, b]
    return h.sum(), targets


def attention(param: Param, blocks: int, tokens: int = 4, dim: int = 8):
    """A stack of single-head self-attention blocks with residuals: x += softmax(q k^T / sqrt d) v Wo."""
    x = param("x", (tokens, dim))
    targets = []
    scale = 1.0 / dim ** 0.5
    for i in range(blocks):
        wq, wk, wv, wo = (param(f"{n}{i}", (dim, dim)) for n in ("wq", "wk", "wv", "wo"))
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = (q @ k.transpose(-2, -1)) * scale
        x = x + (scores.softmax(-1) @ v) @ wo
        targets += [wq, wk, wv, wo]
    return x.sum(), targets


FAMILIES = {"chain": chain, "mlp": mlp, "attention": attention}

# forward nodes per repeat unit, measured on uopcli graphs (see size_for)
_NODES_PER_UNIT: dict[str, float] = {}


def uop_param(name: str, shape: tuple):
    from uopcli import UOp
    return UOp.param(name, shape)


def tinygrad_param_factory(offset: int = 0):
    """A `param` for tinygrad: each name gets its own slot (tinygrad params are numbered);
    `offset` starts the numbering elsewhere, so a second graph shares no node with the first."""
    from tinygrad.dtype import dtypes
    from tinygrad.uop.ops import UOp as TinyUOp
    slots: dict[str, int] = {}

    def param(name: str, shape: tuple):
        slot = slots.setdefault(name, offset + len(slots))
        return TinyUOp.param(slot, dtypes.float32, shape)
    return param


def size_for(family: str, nodes: int) -> int:
    """The repeat count that gives about `nodes` forward nodes (measured once on a small uopcli graph)."""
    if family not in _NODES_PER_UNIT:
        from uopcli import toposort
        small, big = 4, 12
        n_small = len(toposort([FAMILIES[family](_fresh_uop_param(), small)[0]]))
        n_big = len(toposort([FAMILIES[family](_fresh_uop_param(), big)[0]]))
        _NODES_PER_UNIT[family] = (n_big - n_small) / (big - small)
    return max(1, round(nodes / _NODES_PER_UNIT[family]))


_fresh_counter = [0]


def _fresh_uop_param():
    """A uopcli `param` whose names are new each call, so nothing is shared with an earlier graph."""
    _fresh_counter[0] += 1
    prefix = f"s{_fresh_counter[0]}_"
    return lambda name, shape: uop_param(prefix + name, shape)


def fresh_uop_param():
    return _fresh_uop_param()
