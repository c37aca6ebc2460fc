#!/usr/bin/env python3
"""Build the sample .uop files with uopgrad's public Python API.

    python samples/build.py            # rewrites samples/*.uop and samples/README.md
    python samples/build.py --out DIR  # writes them into DIR instead
    python samples/build.py --check    # exit 1 when a committed file differs from a rebuild

Every sample is a small, realistic training objective: the weights are graph inputs (not
embedded BUFFERs) so that `uopgrad diff --wrt` can differentiate with respect to them,
and the output is one scalar named `loss` (`y` for the polynomial). Nothing is random:
building twice gives the same bytes (the file format's canonical encoding), which
tests/test_samples.py checks against the committed files. Node metadata records where in
this file each composite was called (`loc`), so after editing it, run `make samples`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

import uopcli
from uopcli import Graph, UOp, dtypes
from uopcli.core.uop import sweep_intern_table

HERE = Path(__file__).resolve().parent
PRODUCER = "uopgrad samples/build.py"


def _inputs(**shapes) -> dict[str, UOp]:
    """Named float32 graph inputs, in the order given."""
    return {name: UOp.param(name, shape, dtypes.float32) for name, shape in shapes.items()}


def _graph(outputs: dict[str, UOp], inputs: dict[str, UOp], description: str) -> Graph:
    return Graph(outputs, inputs=list(inputs.values()), meta={"producer": PRODUCER, "description": description})


def _mse(prediction: UOp, target: UOp) -> UOp:
    return ((prediction - target) * (prediction - target)).mean()


# ----------------------------------------------------------------------------- the samples
# One builder per sample: it returns the Graph; SAMPLES below lists them in file order.

def mlp() -> Graph:
    """2-layer MLP, ReLU hidden layer, mean-squared-error loss."""
    v = _inputs(x=(16, 8), w1=(8, 32), b1=(32,), w2=(32, 4), b2=(4,), y=(16, 4))
    hidden = (v["x"] @ v["w1"] + v["b1"]).relu()
    prediction = hidden @ v["w2"] + v["b2"]
    return _graph({"loss": _mse(prediction, v["y"])}, v, mlp.__doc__)


def logreg() -> Graph:
    """Logistic regression, binary cross-entropy on sigmoid probabilities."""
    v = _inputs(x=(32, 10), w=(10,), b=(), y=(32,))
    p = (v["x"] @ v["w"] + v["b"]).sigmoid()
    y = v["y"]
    loss = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    return _graph({"loss": loss}, v, logreg.__doc__)


def softmax_xent() -> Graph:
    """Linear classifier over 10 classes, softmax cross-entropy with (one-hot) targets y."""
    v = _inputs(x=(32, 20), w=(20, 10), b=(10,), y=(32, 10))
    logits = v["x"] @ v["w"] + v["b"]
    loss = -(v["y"] * logits.log_softmax(-1)).sum(-1).mean()
    return _graph({"loss": loss}, v, softmax_xent.__doc__)


def conv_net() -> Graph:
    """Small conv net: 3x3 convolution (padding 1) + ReLU, 2x2 average pool, linear layer
    to 3 classes, softmax cross-entropy."""
    v = _inputs(x=(4, 2, 8, 8), kernel=(4, 2, 3, 3), kernel_bias=(4,), w=(64, 3), b=(3,), y=(4, 3))
    # tinygrad's conv2d and avg_pool2d: windows of the input from movement ops alone
    # (uopcli/builder/movement.py, _pool), multiplied by the kernel and summed
    features = v["x"].conv2d(v["kernel"], v["kernel_bias"], padding=1).relu()  # [4, 4, 8, 8]
    pooled = features.avg_pool2d((2, 2))                                       # [4, 4, 4, 4]
    logits = pooled.reshape(4, 64) @ v["w"] + v["b"]
    loss = -(v["y"] * logits.log_softmax(-1)).sum(-1).mean()
    return _graph({"loss": loss}, v, conv_net.__doc__)


def layernorm() -> Graph:
    """Layer normalisation over the last axis with gain and bias, MSE to a target."""
    v = _inputs(x=(8, 16), gamma=(16,), beta=(16,), y=(8, 16))
    x = v["x"]
    centred = x - x.mean(-1, keepdim=True)
    variance = (centred * centred).mean(-1, keepdim=True)
    normalised = centred / (variance + 1e-5).sqrt()
    out = normalised * v["gamma"] + v["beta"]
    return _graph({"loss": _mse(out, v["y"])}, v, layernorm.__doc__)


def attention() -> Graph:
    """Single-head causal self-attention with an output projection, MSE to a target. The
    causal mask is an embedded BUFFER (lower-triangular bools)."""
    seq, d = 6, 16
    v = _inputs(x=(seq, d), wq=(d, d), wk=(d, d), wv=(d, d), wo=(d, d), y=(seq, d))
    x = v["x"]
    q, k, val = x @ v["wq"], x @ v["wk"], x @ v["wv"]
    scores = (q @ k.T) * (1 / np.sqrt(d))
    causal = UOp.buffer(np.tril(np.ones((seq, seq), dtype=bool)))
    weights = causal.where(scores, -1e9).softmax(-1)
    out = (weights @ val) @ v["wo"]
    return _graph({"loss": _mse(out, v["y"])}, v, attention.__doc__)


GPT_TOKENS = (3, 1, 4, 1, 5, 9, 2, 6)  # the sequence the model learns to continue (vocabulary 12)


def gpt() -> Graph:
    """A one-block GPT-style language model written as in tinygrad: token and position
    embeddings, layernorm, two-head causal self-attention, a GELU MLP, residuals, and a
    head tied to the embedding; cross-entropy of each next token (the tokens are an
    embedded BUFFER)."""
    vocab, seq, dim, heads = 12, len(GPT_TOKENS), 16, 2
    v = _inputs(emb=(vocab, dim), pos=(seq, dim), ln_g=(dim,), ln_b=(dim,), wqkv=(dim, 3 * dim), wo=(dim, dim),
                w1=(dim, 2 * dim), w2=(2 * dim, dim))
    tokens = UOp.buffer(np.array(GPT_TOKENS, np.int32))
    x = tokens.one_hot(vocab) @ v["emb"] + v["pos"]                      # one_hot(int) @ float: promoted
    q, k, val = (x.layernorm() * v["ln_g"] + v["ln_b"]).linear(v["wqkv"]).chunk(3, dim=-1)
    q, k, val = (t.reshape(seq, heads, dim // heads).transpose(0, 1) for t in (q, k, val))
    attended = q.scaled_dot_product_attention(k, val, is_causal=True)    # (heads, seq, dim / heads)
    x = x + attended.transpose(0, 1).reshape(seq, dim).linear(v["wo"])
    x = x + x.layernorm().linear(v["w1"]).gelu().linear(v["w2"])
    logits = x.layernorm().linear(v["emb"].T)
    return _graph({"loss": logits[:-1].cross_entropy(tokens[1:])}, v, gpt.__doc__)


def rnn() -> Graph:
    """Elman RNN over 5 steps; the cell is one FUNCTION (its body shared by every step)
    returning the new state and the step's output; MSE of the outputs to targets y."""
    steps, batch, d_in, d_hidden, d_out = 5, 4, 3, 8, 2
    v = _inputs(x=(steps, batch, d_in), h0=(batch, d_hidden), wx=(d_in, d_hidden), wh=(d_hidden, d_hidden),
                b=(d_hidden,), w_out=(d_hidden, d_out), y=(steps, batch, d_out))

    def cell(x_t, h, wx, wh, b, w_out):
        h_new = (x_t @ wx + h @ wh + b).tanh()
        return h_new, h_new @ w_out

    h = v["h0"]
    loss = None
    for t in range(steps):
        x_t = v["x"].shrink(((t, t + 1), (0, batch), (0, d_in))).reshape(batch, d_in)
        y_t = v["y"].shrink(((t, t + 1), (0, batch), (0, d_out))).reshape(batch, d_out)
        call = UOp.trace_function("rnn_cell", cell, x_t, h, v["wx"], v["wh"], v["b"], v["w_out"])
        h, out = call.gettuple(0), call.gettuple(1)
        term = _mse(out, y_t)
        loss = term if loss is None else loss + term
    return _graph({"loss": loss * (1 / steps)}, v, rnn.__doc__)


def ste() -> Graph:
    """Quantisation-aware linear layer: weights clipped to [-1, 1] and rounded toward zero
    to multiples of 1/8 by a CALL whose backward body is the clipped straight-through
    estimator (the gradient passes where |w| < 1, zero elsewhere); MSE to a target."""
    v = _inputs(x=(8, 4), w=(4, 3), y=(8, 3))
    levels = 8.0

    def quantise(w):
        return (w.maximum(-1.0).minimum(1.0) * levels).trunc() * (1 / levels)

    def straight_through(w, grad_out):
        inside = (w > -1.0) & (w < 1.0)
        return inside.where(grad_out, 0.0)

    w_q = UOp.trace_call("quantise_ste", quantise, straight_through, v["w"]).gettuple(0)
    return _graph({"loss": _mse(v["x"] @ w_q, v["y"])}, v, ste.__doc__)


def poly() -> Graph:
    """y = 3x^4 - 2x^3 + x^2 - 5x + 7 for a scalar x (Horner form): its derivatives of
    every order are known (y' = 12x^3 - 6x^2 + 2x - 5, y'' = 36x^2 - 12x + 2, ...)."""
    v = _inputs(x=())
    x = v["x"]
    y = (((3 * x - 2) * x + 1) * x - 5) * x + 7
    return _graph({"y": y}, v, poly.__doc__)


class Sample(NamedTuple):
    build: Callable[[], Graph]
    try_it: str  # a command to try on it, from the repository's root (listed in samples/README.md)


SAMPLES: dict[str, Sample] = {
    "mlp": Sample(mlp, "uopgrad diff samples/mlp.uop --wrt w1,w2 -o grad.uop"
                       " && uopgrad eval grad.uop --random --seed 0"),
    "logreg": Sample(logreg, "uopgrad check samples/logreg.uop --wrt x,w,b,y"),
    "softmax_xent": Sample(softmax_xent, "uopgrad diff samples/softmax_xent.uop --wrt w,b --keep-forward"
                                         " | uopgrad eval - --random"),
    "conv2d": Sample(conv_net, "uopgrad check samples/conv2d.uop --wrt kernel,kernel_bias,w,b --samples 8"),
    "layernorm": Sample(layernorm, "uopgrad diff samples/layernorm.uop --wrt x,gamma,beta | uopgrad info -"),
    "attention": Sample(attention, "uopgrad diff samples/attention.uop --wrt wq,wk,wv,wo -o grad.uop"
                                   " && uopgrad render grad.uop -o attention-grad.svg"),
    "gpt": Sample(gpt, "uopgrad check samples/gpt.uop --wrt emb,wqkv,w1 --samples 6"),
    "rnn": Sample(rnn, "uopgrad print samples/rnn.uop"),
    "ste": Sample(ste, "uopgrad diff samples/ste.uop --wrt w -o grad.uop && uopgrad eval grad.uop --random --seed 1"),
    "poly": Sample(poly, "uopgrad diff samples/poly.uop --wrt x -o d1.uop"
                         " && uopgrad diff d1.uop --of grad_x --wrt x -o d2.uop && uopgrad eval d2.uop -i x=2"),
}

README_HEAD = """# Samples

Small, realistic training objectives saved as `.uop` files, for trying `uopgrad` and for
its tests. They are written by [`build.py`](build.py) with uopgrad's public Python API
(`make samples` rebuilds them, byte for byte: nothing is random). Every sample's weights are
graph inputs, so `uopgrad diff --wrt` can differentiate with respect to any of them, and its
output is one float32 scalar, `loss` (`y` for the polynomial). This file is written by
`build.py` too.

Each command below runs from the repository's root once `make demo` (or `make setup`) has
made `.venv/`; put `.venv/bin` on your `PATH` or write `.venv/bin/uopgrad`.
"""


def samples_readme() -> str:
    """samples/README.md: every sample, its inputs and a command to try."""
    parts = [README_HEAD]
    for name, sample in SAMPLES.items():
        graph = sample.build()
        (output_name, output), = graph.outputs.items()
        doc = " ".join(graph.meta["description"].split())
        rows = [f"| `{n.arg}` | {list(n.shape)} | {n.dtype.name} |" for n in graph.inputs]
        parts.append(f"\n## [`{name}.uop`]({name}.uop)\n\n{doc} {len(graph)} nodes; output `{output_name}` "
                     f"({output.dtype.name} scalar).\n\n| input | shape | dtype |\n|---|---|---|\n"
                     + "\n".join(rows) + f"\n\n```console\n$ {sample.try_it}\n```\n")
    return "".join(parts)


def sample_files() -> dict[str, bytes]:
    """Every file this script writes, by file name: the .uop files and README.md."""
    files = {}
    for name, sample in SAMPLES.items():
        files[f"{name}.uop"] = uopcli.save(sample.build())
        # Nodes are shared by structure and keep the metadata of whoever made them first (the
        # CONST 2.0 of one sample's tanh would say `tanh` in the next sample's polynomial):
        # dropping the finished graph's nodes lets every sample start as if built alone.
        sweep_intern_table()
    files["README.md"] = samples_readme().encode()
    return files


def build_all(out_dir: Path) -> dict[str, bytes]:
    """Write every sample file into out_dir; returns file name -> bytes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = sample_files()
    for file_name, data in files.items():
        (out_dir / file_name).write_bytes(data)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write into (default: samples/)")
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the files in --out, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = [file_name for file_name, data in sample_files().items()
                 if not (args.out / file_name).is_file() or (args.out / file_name).read_bytes() != data]
        for file_name in stale:
            print(f"{args.out / file_name} is out of date: run `make samples`", file=sys.stderr)
        return 1 if stale else 0
    for file_name, data in build_all(args.out).items():
        print(f"{args.out / file_name}  {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
