"""Small models written with tinygrad's own front end (tinygrad.nn and Tensor functions),
for the bridge's tests. Each builder returns a Case: the outputs, the named inputs and the
model's state_dict, as a user would hand them to `save`. Sizes are tiny: tinygrad's CPU
backend compiles every kernel with clang, and the whole zoo must stay quick.

Imported only by tests that have tinygrad (tests/test_tinygrad_bridge.py)."""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from tinygrad import Context, Tensor, dtypes, function, nn
from tinygrad.nn.state import get_state_dict


class Case(NamedTuple):
    outputs: dict      # name -> Tensor
    inputs: dict       # name -> Tensor (data the user names)
    state_dict: dict   # key -> Tensor (the model's weights)


def _data(seed: int, *shape: int, scale: float = 1.0) -> Tensor:
    rng = np.random.default_rng(seed)
    return Tensor((rng.standard_normal(shape) * scale).astype(np.float32))


def _seeded(model):
    """Deterministic weights (tinygrad's own initialisers are lazy random tensors)."""
    rng = np.random.default_rng(7)
    for tensor in get_state_dict(model).values():
        if tensor.dtype == dtypes.float32:
            tensor.assign(Tensor((rng.standard_normal(tensor.shape) * 0.5).astype(np.float32))).realize()
    return model


class _MLP:
    def __init__(self):
        self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)

    def __call__(self, x):
        return self.l2(self.l1(x).relu())


def mlp_mse() -> Case:
    model, x, y = _seeded(_MLP()), _data(1, 5, 4), _data(2, 5, 3)
    return Case({"loss": ((model(x) - y) ** 2).mean()}, {"x": x, "y": y}, get_state_dict(model))


def mlp_lazy_weights() -> Case:
    """nn.Linear's own initialisation, not realized: the export realizes it. Seeded:
    tinygrad seeds its generator from the clock, and a draw of l1.weight's 32 values (of
    about 2^23 floats) repeats one in 17,000 runs, which the bridge's test refuses."""
    Tensor.manual_seed(5)
    model, x = _MLP(), _data(3, 5, 4)
    return Case({"loss": model(x).square().sum()}, {"x": x}, get_state_dict(model))


class _ConvNet:
    def __init__(self):
        self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(8, 3)

    def __call__(self, x):
        return self.fc(self.conv(x).relu().avg_pool2d(2).flatten(1))


def conv_avgpool_sparse_xent() -> Case:
    model, x = _seeded(_ConvNet()), _data(4, 2, 1, 6, 6)
    labels = Tensor([0, 2], dtype=dtypes.int32)
    loss = model(x).sparse_categorical_crossentropy(labels)
    return Case({"loss": loss}, {"x": x, "labels": labels}, get_state_dict(model))


def conv_maxpool() -> Case:
    conv = _seeded(nn.Conv2d(2, 3, 3, padding=1, stride=1))
    x = _data(5, 1, 2, 4, 4)
    out = conv(x).max_pool2d(2).tanh()
    return Case({"loss": out.square().mean()}, {"x": x}, get_state_dict(conv))


class _ConvBN:
    def __init__(self):
        self.conv, self.bn = nn.Conv2d(1, 2, 3), nn.BatchNorm(2)

    def __call__(self, x):
        return self.bn(self.conv(x)).relu()


def batchnorm_train() -> Case:
    model, x = _seeded(_ConvBN()), _data(6, 3, 1, 5, 5)
    with Context(TRAINING=1):
        out = model(x)
    return Case({"loss": (out * out.flip(3)).mean()}, {"x": x}, get_state_dict(model))


def batchnorm_eval() -> Case:
    model, x = _seeded(_ConvBN()), _data(8, 2, 1, 5, 5)
    model.bn.running_var.assign(model.bn.running_var.abs() + 0.5).realize()
    return Case({"loss": model(x).sum()}, {"x": x}, get_state_dict(model))


def layernorm_gelu() -> Case:
    norm, fc = _seeded(nn.LayerNorm(6)), _seeded(nn.Linear(6, 2))
    x = _data(9, 3, 6)
    loss = fc(norm(x).gelu()).square().mean()
    return Case({"loss": loss}, {"x": x}, {**{f"norm.{k}": v for k, v in get_state_dict(norm).items()},
                                           **{f"fc.{k}": v for k, v in get_state_dict(fc).items()}})


def embedding_int_tokens() -> Case:
    emb = _seeded(nn.Embedding(10, 4))
    tokens = Tensor([[1, 5, 9], [0, 5, 3]], dtype=dtypes.int32)
    out = emb(tokens)
    return Case({"loss": (out * out.cumsum(1)).sum()}, {"tokens": tokens}, get_state_dict(emb))


class _Attention:
    def __init__(self, dim: int = 8, heads: int = 2):
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def __call__(self, x):
        b, t, d = x.shape
        split = lambda y: y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        att = split(self.q(x)).scaled_dot_product_attention(split(self.k(x)), split(self.v(x)), is_causal=True)
        return self.o(att.transpose(1, 2).reshape(b, t, d))


def multihead_attention() -> Case:
    model, x = _seeded(_Attention()), _data(10, 2, 3, 8)
    return Case({"loss": model(x).square().mean()}, {"x": x}, get_state_dict(model))


def lstm_unrolled() -> Case:
    cell = _seeded(nn.LSTMCell(3, 4))
    xs = _data(11, 2, 2, 3)
    h_c = None
    for step in range(2):
        h_c = cell(xs[step], h_c)
    h, c = h_c
    return Case({"loss": h.sum() + c.square().mean()}, {"xs": xs}, get_state_dict(cell))


def cross_entropy_smoothing() -> Case:
    fc, x = _seeded(nn.Linear(5, 4)), _data(12, 3, 5)
    target = Tensor(np.eye(4, dtype=np.float32)[[1, 3, 0]])
    loss = fc(x).cross_entropy(target, label_smoothing=0.1) + fc(x).log_softmax().exp().max() * 0.1
    return Case({"loss": loss}, {"x": x, "target": target}, get_state_dict(fc))


def activations() -> Case:
    x = _data(13, 4, 5)
    y = x.silu() + x.gelu() + x.softmax(1) + x.sigmoid() * x.tanh() + x.leaky_relu(0.1) + x.elu() + x.softplus()
    return Case({"loss": (y * x.abs().sqrt()).sum(), "probs": x.softmax(0)}, {"x": x}, {})


class _Block:
    def __init__(self, dim: int = 8):
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _Attention(dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.down(self.up(self.ln2(x)).gelu())


def transformer_block() -> Case:
    model, x = _seeded(_Block()), _data(14, 2, 3, 8)
    return Case({"loss": model(x).square().mean()}, {"x": x}, get_state_dict(model))


def slicing_padding() -> Case:
    x, w = _data(15, 4, 6), _data(16, 3, 2)
    parts = x[1:, 2:4] * w + x[:3, ::3].flip(0)
    padded = parts.pad(((1, 0), (0, 2))) + x[::2, :3].pad(((0, 2), (1, 0)))
    joined = Tensor.cat(padded, padded[:, ::-1], dim=1).stack(padded.repeat(1, 2), dim=0)
    a, b = joined.chunk(2, dim=2)
    return Case({"loss": (a * b.shrink((None, (0, 4), (1, 4))).pad((None, None, (1, 0)))).sum()},
                {"x": x, "w": w}, {})


def cumsum_cummax() -> Case:
    x = _data(17, 3, 5)
    y = x.cumsum(1) * x.cumsum(0).exp() + x.cummax(1)[0]
    return Case({"loss": y.square().sum()}, {"x": x}, {})


def int_and_bool() -> Case:
    x = _data(18, 4, 5)
    positive = x > 0                                    # bool
    counts = positive.cast(dtypes.int32).sum(1)         # int
    parity = (counts % 2 == 0) & (counts // 2 >= 1)     # int // and %, bool &
    hot = x.argmax(1).one_hot(5)                        # int argmax, one-hot
    y = positive.where(x, x * 0.1) * parity.unsqueeze(1).where(2.0, -1.0) + (hot * x).sum(1, keepdim=True)
    return Case({"loss": y.square().mean() + (x * counts.float().unsqueeze(1)).mean(),
                 "counts": counts}, {"x": x}, {})


def norms_and_losses() -> Case:
    rms, group = _seeded(nn.RMSNorm(4)), _seeded(nn.GroupNorm(2, 4))
    x, target = _data(19, 2, 4, 3), Tensor(np.array([[1, 0, 1], [0, 0, 1]] * 4, np.float32).reshape(2, 4, 3))
    y = group(x) + rms(x.transpose(1, 2)).transpose(1, 2)
    loss = y.binary_crossentropy_logits(target) + y.logsumexp(1).mean()
    return Case({"loss": loss}, {"x": x, "target": target},
                {**{f"rms.{k}": v for k, v in get_state_dict(rms).items()},
                 **{f"group.{k}": v for k, v in get_state_dict(group).items()}})


def dropout_mask() -> Case:
    """A random mask (dropout in training): realized by the export, an input of its own."""
    fc, x = _seeded(nn.Linear(4, 4)), _data(20, 3, 4)
    Tensor.manual_seed(3)
    with Context(TRAINING=1):
        y = fc(x).dropout(0.5)
    return Case({"loss": y.square().sum()}, {"x": x}, get_state_dict(fc))


@function
def _scaled_tanh(x: Tensor, w: Tensor) -> Tensor:
    return (x * w).tanh() * 2


def tinygrad_function() -> Case:
    x, w = _data(21, 3, 4), _data(22, 3, 4)
    return Case({"loss": _scaled_tanh(x, w).sum()}, {"x": x, "w": w}, {})


class _Head:
    def __init__(self, dim: int, vocab: int):
        self.norm, self.proj = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def __call__(self, x):
        return self.proj(self.norm(x))


class _GPT:
    """A 4-block transformer: state_dict keys embedding.weight, blocks.<i>.attn.q.weight,
    ..., head.proj.bias (the module paths the export turns into scopes)."""

    def __init__(self, vocab: int = 10, dim: int = 8, blocks: int = 4):
        self.embedding = nn.Embedding(vocab, dim)
        self.blocks = [_Block(dim) for _ in range(blocks)]
        self.head = _Head(dim, vocab)

    def __call__(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gpt_four_blocks() -> Case:
    """Not in ZOO (its gradient is the viewer's test page, not the CLI's)."""
    model = _seeded(_GPT())
    tokens = Tensor([[1, 5, 9], [0, 5, 3]], dtype=dtypes.int32)
    targets = Tensor([[5, 9, 2], [5, 3, 1]], dtype=dtypes.int32)
    loss = model(tokens).sparse_categorical_crossentropy(targets)
    return Case({"loss": loss}, {"tokens": tokens, "targets": targets}, get_state_dict(model))


ZOO: dict[str, Callable[[], Case]] = {f.__name__: f for f in (
    mlp_mse, mlp_lazy_weights, conv_avgpool_sparse_xent, conv_maxpool, batchnorm_train, batchnorm_eval,
    layernorm_gelu, embedding_int_tokens, multihead_attention, lstm_unrolled, cross_entropy_smoothing,
    activations, transformer_block, slicing_padding, cumsum_cummax, int_and_bool, norms_and_losses,
    dropout_mask, tinygrad_function)}
