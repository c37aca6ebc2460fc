"""Export small PyTorch models to ONNX, with PyTorch's forward outputs and gradients beside.

    /path/to/torch/venv/bin/python samples/onnx/export_torch.py [--out samples/onnx]

Needs torch (2.13.0 made the committed files), onnx and onnxscript (the dynamo exporter);
the tests that read what it writes need neither torch nor this script. For every model
(an MLP, a small CNN with BatchNorm and pooling, a 2-layer BERT-style encoder, a GPT-2-style
block, an LSTM) and every (exporter, opset) in EXPORTS it writes

    <model>-<exporter><opset>.onnx   the model, weights as initializers named like the
                                     module's parameters (constant folding off, BatchNorm
                                     kept: the names stay PyTorch's)
    <model>-<exporter><opset>.npz    inputs under the ONNX input names; `out` = the forward
                                     output; `grad_<name>` = d sum(out) / d <name> by autograd,
                                     for the float inputs and every parameter that is an
                                     initializer of the file (the cotangent of `out` is ones:
                                     `uopgrad diff --cotangent ones`)

Models are in eval mode (dropout off, BatchNorm on its running statistics). BatchNorm's
statistics and every norm's scale and shift are randomised: inference BatchNorm is then not
the identity, and no two norms hold equal weights (the legacy exporter would merge equal
initializers into one, whose gradient is then the sum of theirs).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import onnx
import torch
from torch import nn

EXPORTS = (("legacy", 14), ("legacy", 17), ("dynamo", 18), ("dynamo", 20))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2, stride=1)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.avg(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        batch, length, dim = x.shape
        split = lambda t: t.reshape(batch, length, self.heads, dim // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads)
        if self.causal:
            mask = torch.ones(length, length, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, length, dim))


class EncoderLayer(nn.Module):
    """BERT's post-norm layer: x + attention -> LayerNorm -> x + FFN (erf GELU) -> LayerNorm."""

    def __init__(self, dim: int):
        super().__init__()
        self.attention = Attention(dim, 2, causal=False)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.intermediate, self.output = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.output(nn.functional.gelu(self.intermediate(x))))


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 30, dim: int = 16, length: int = 6):
        super().__init__()
        self.word_embeddings, self.position_embeddings = nn.Embedding(vocab, dim), nn.Embedding(length, dim)
        self.norm = nn.LayerNorm(dim)
        self.encoder = nn.ModuleList([EncoderLayer(dim) for _ in range(2)])
        self.pooler = nn.Linear(dim, dim)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        for layer in self.encoder:
            x = layer(x)
        return torch.tanh(self.pooler(x[:, 0]))


class GPT2Block(nn.Module):
    """Pre-norm: x + causal attention(LayerNorm x), then x + MLP(LayerNorm x), tanh GELU."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, 2, causal=True)
        self.c_fc, self.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def models(rng: np.random.Generator):
    """(name, module, {input name: array})."""
    floats = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    yield "mlp", MLP(), {"x": floats(3, 8)}
    yield "cnn", SmallCNN(), {"x": floats(2, 3, 8, 8)}
    yield "bert", TinyBert(), {"input_ids": rng.integers(0, 30, (2, 6)).astype(np.int64)}
    yield "gpt2", GPT2Block(), {"x": floats(2, 5, 16)}
    yield "lstm", LSTMModel(), {"x": floats(2, 5, 4)}


def randomise_norms(module: nn.Module, generator: torch.Generator) -> None:
    for norm in module.modules():
        if not isinstance(norm, (nn.BatchNorm2d, nn.LayerNorm)):
            continue
        with torch.no_grad():
            norm.weight.copy_(1 + 0.3 * torch.randn(norm.weight.shape, generator=generator))
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=generator))
            if isinstance(norm, nn.BatchNorm2d):
                norm.running_mean.copy_(torch.randn(norm.num_features, generator=generator) * 0.5)
                norm.running_var.copy_(torch.rand(norm.num_features, generator=generator) + 0.5)


def export(module, inputs: dict, path: str, exporter: str, opset: int) -> None:
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    names = list(inputs)
    if exporter == "legacy":
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=names,
                          output_names=["out"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    else:
        program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, input_names=names,
                                    output_names=["out"], optimize=False, verbose=False)
        program.save(path)
    model = onnx.load(path)  # one file, no external data: the weights are small
    onnx.save(model, path)


def reference(module, inputs: dict, initializer_names: set) -> dict:
    """The forward output and autograd's gradients of sum(out)."""
    tensors = {name: torch.from_numpy(a.copy()) for name, a in inputs.items()}
    for t in tensors.values():
        if t.is_floating_point():
            t.requires_grad_(True)
    module.zero_grad()
    out = module(*tensors.values())
    out.sum().backward()
    stored = dict(inputs)
    stored["out"] = out.detach().numpy()
    for name, t in tensors.items():
        if t.grad is not None:
            stored[f"grad_{name}"] = t.grad.numpy()
    for name, parameter in module.named_parameters():
        if name in initializer_names and parameter.grad is not None:
            stored[f"grad_{name}"] = parameter.grad.numpy()
    return stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    for name, module, inputs in models(np.random.default_rng(0)):
        randomise_norms(module, generator)
        module.eval()
        for exporter, opset in EXPORTS:
            path = os.path.join(args.out, f"{name}-{exporter}{opset}.onnx")
            try:
                export(module, inputs, path, exporter, opset)
            except Exception as e:  # noqa: BLE001 - one exporter failing on one model is reported, not fatal
                print(f"{path}: export failed: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
                continue
            initializers = {i.name for i in onnx.load(path).graph.initializer}
            stored = reference(module, inputs, initializers)
            np.savez(path[:-len(".onnx")] + ".npz", **stored)
            grads = sorted(k for k in stored if k.startswith("grad_"))
            print(f"{path}: {os.path.getsize(path)} bytes, {len(grads)} gradients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
