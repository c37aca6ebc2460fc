#!/usr/bin/env python3
"""A two-layer MLP written with tinygrad.nn, saved as a .uop file for uopgrad.

    python samples/tinygrad/mlp.py [OUT_DIR]   # writes OUT_DIR/mlp.uop and OUT_DIR/mlp.npz

The model is plain tinygrad; the last line is all uopgrad needs: the loss, the data the
user names, and the model's state_dict (its weights become inputs named by their keys,
their values go to mlp.npz beside the graph). Then `uopgrad diff` differentiates it and
`uopgrad eval -i mlp.npz` evaluates it, with numpy or (`--backend tinygrad`) with tinygrad.
Nothing is random: the weights and data are seeded, so the files are the same every run.
"""

import sys
from pathlib import Path

import numpy as np
from tinygrad import Tensor, nn
from tinygrad.nn.state import get_state_dict

from uopcli.interop.tinygrad import save


class MLP:
    def __init__(self):
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).gelu())


rng = np.random.default_rng(0)
model = MLP()
for tensor in get_state_dict(model).values():  # seeded weights instead of tinygrad's random ones
    tensor.assign(Tensor((rng.standard_normal(tensor.shape) * 0.3).astype(np.float32))).realize()
x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
labels = Tensor(np.array([0, 2, 1, 2], dtype=np.int32))
loss = model(x).sparse_categorical_crossentropy(labels)

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
out.mkdir(parents=True, exist_ok=True)
save(out / "mlp.uop", outputs={"loss": loss}, inputs={"x": x, "labels": labels}, state_dict=get_state_dict(model))
print(f"loss {loss.item():.6f}: wrote {out / 'mlp.uop'} and {out / 'mlp.npz'}")
