"""ONNX import of a ResNet-50-sized model against its peer, in one run.

    .venv/bin/python bench/bench_onnx_import.py [--repeats 3] [--blocks 3,4,6,3]

The model is built here with onnx.helper: ResNet-50's layout (7x7 stem, bottleneck blocks
3-4-6-3 of widths 64-512 with expansion 4, BatchNormalization after every convolution,
global average pool, a 1000-way Gemm), about 25.6 million random float32 weights, saved
as one .onnx file. Each side runs in a fresh process, the median of --repeats is reported:

    peer   python: onnx.load(model.onnx) + np.savez(weights.npz, every initializer)
    ours   uopgrad convert model.onnx -o model.uop (import, write model.uop and model.npz)
    ours   (library) load_onnx + save(.uop) + np.savez of the weights, timed inside a process

Target (issue 23): ours at most 2x the peer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PY = sys.executable
UOPGRAD = str(Path(PY).parent / "uopgrad")
TARGET = 2.0


def resnet50(path: str, blocks=(3, 4, 6, 3), seed: int = 0, image: int = 224, batch: int = 1, base: int = 64) -> int:
    """Write the model (input x: batch x 3 x image x image; stage widths base..8*base,
    ResNet-50 at 64); returns its weight count."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    count = [0]

    def weight(name, *shape):
        array = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        initializers.append(numpy_helper.from_array(array, name))
        count[0] += array.size
        return name

    def conv_bn(x, name, cin, cout, k, stride=1, relu=True):
        pad = k // 2
        nodes.append(helper.make_node("Conv", [x, weight(f"{name}.weight", cout, cin, k, k)], [f"{name}.conv"],
                                      name=f"/{name}/Conv", kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4))
        bn = [weight(f"{name}.bn.{p}", cout) for p in ("weight", "bias", "running_mean")]
        var = f"{name}.bn.running_var"
        initializers.append(numpy_helper.from_array(rng.random(cout).astype(np.float32) + 0.5, var))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", *bn, var], [f"{name}.bn"],
                                      name=f"/{name}/BatchNormalization"))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"/{name}/Relu"))
        return f"{name}.relu"

    x = conv_bn("x", "stem", 3, base, 7, stride=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="/pool/MaxPool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", base
    for stage, (count_blocks, width) in enumerate(zip(blocks, (base, 2 * base, 4 * base, 8 * base))):
        for block in range(count_blocks):
            name = f"layer{stage + 1}.{block}"
            stride = 2 if block == 0 and stage > 0 else 1
            y = conv_bn(x, f"{name}.conv1", cin, width, 1)
            y = conv_bn(y, f"{name}.conv2", width, width, 3, stride)
            y = conv_bn(y, f"{name}.conv3", width, width * 4, 1, relu=False)
            shortcut = conv_bn(x, f"{name}.downsample", cin, width * 4, 1, stride, relu=False) if block == 0 else x
            nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}.add"], name=f"/{name}/Add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"/{name}/Relu"))
            x, cin = f"{name}.out", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="/avgpool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="/Flatten"))
    nodes.append(helper.make_node("Gemm", ["flat", weight("fc.weight", 1000, cin), weight("fc.bias", 1000)],
                                  ["logits"], name="/fc/Gemm", transB=1))
    graph = helper.make_graph(nodes, "resnet50", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, image, image])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return count[0]


PEER = """
import sys, numpy as np, onnx
from onnx import numpy_helper
model = onnx.load(sys.argv[1])
np.savez(sys.argv[2], **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
"""

LIBRARY = """
import sys, time, numpy as np
start = time.perf_counter()
from uopcli import save
from uopcli.interop.onnx.importer import load_onnx
graph, weights = load_onnx(sys.argv[1])
imported = time.perf_counter()
save(graph, sys.argv[2])
np.savez(sys.argv[3], **weights)
print(f"{imported - start:.4f} {time.perf_counter() - start:.4f} {len(graph.nodes())}")
"""


def timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if run.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {run.stderr[-2000:]}")
    return elapsed, run.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", default="3,4,6,3", help="bottleneck blocks per stage (ResNet-50: 3,4,6,3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="uopgrad-onnx-bench-") as folder:
        model = os.path.join(folder, "model.onnx")
        weights = resnet50(model, tuple(int(b) for b in args.blocks.split(",")))
        size = os.path.getsize(model)
        print(f"model: ResNet-50 layout, {weights / 1e6:.1f} M weights, {size / 2**20:.0f} MiB ({model})")
        peer, cli, library, imports = [], [], [], []
        for _ in range(args.repeats):
            peer.append(timed([PY, "-c", PEER, model, os.path.join(folder, "peer.npz")])[0])
            cli.append(timed([UOPGRAD, "convert", model, "-o", os.path.join(folder, "cli.uop")])[0])
            _, out = timed([PY, "-c", LIBRARY, model, os.path.join(folder, "lib.uop"), os.path.join(folder, "lib.npz")])
            first, total, nodes = out.split()
            imports.append(float(first))
            library.append(float(total))
        peer_s, cli_s = statistics.median(peer), statistics.median(cli)
        print(f"graph: {nodes} nodes; median of {args.repeats} fresh processes")
        print("| side | seconds | ratio to the peer |")
        print("|---|---|---|")
        print(f"| peer: python, onnx.load + np.savez of the weights (whole process) | {peer_s:.2f} | 1.00 |")
        print(f"| ours: uopgrad convert model.onnx -o model.uop (whole process, writes model.npz too) "
              f"| {cli_s:.2f} | {cli_s / peer_s:.2f} |")
        print(f"| ours: load_onnx + save + np.savez, inside the process (no start-up) | "
              f"{statistics.median(library):.2f} | - |")
        print(f"| of which load_onnx (parse, to arrays, build the graph) | {statistics.median(imports):.2f} | - |")
        verdict = "met" if cli_s / peer_s <= TARGET else "NOT met"
        print(f"target: convert at most {TARGET:g}x the peer: {verdict} ({cli_s / peer_s:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
