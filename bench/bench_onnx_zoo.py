"""The light model zoo of the onnx wheel (onnx/backend/test/data/light: AlexNet, ZFNet-512,
Inception v1/v2, ResNet-50, DenseNet-121, ShuffleNet, SqueezeNet, VGG-19): the gradient
of a scalar loss by `uopgrad diff`, against PyTorch's autograd, and run as .onnx by
onnxruntime.

    .venv/bin/python bench/bench_onnx_zoo.py [--models squeezenet,densenet121] [--write]

The light models carry no weights: each weight is a ConstantOfShape of 0.02. Here every
such weight becomes an initializer of seeded random values (He-scaled for Conv and Gemm
weights, near 1 for BatchNormalization's scale and variance), the model is copied in
float64 (the "float64 copies"), and the loss is sum(output * c) for a fixed random c
(`--cotangent input`). For each model:

1. `uopgrad diff model64.onnx --wrt <first Conv weight>,<last layer's weight> --cotangent input`
   then `uopgrad eval` on the ONNX runner's inputs (arange(n)/n), through the installed CLI;
2. PyTorch (float64, autograd) runs the same ONNX graph, op by op (`torch_forward` below);
3. the two gradients must agree to 1e-6 (relative to the gradient's largest magnitude);
4. `uopgrad diff model64.onnx ... -o grad.onnx` run by onnxruntime equals PyTorch's
   gradient to 1e-6 too.

A model whose ops the importer refuses is reported with the refusal (LRN and Sum are
built on other branches).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import _onnx_conformance as conformance  # noqa: E402

UOPGRAD = os.path.join(os.path.dirname(sys.executable), "uopgrad")
SECTION = "## The light model zoo: gradients against PyTorch, run by onnxruntime"


# ----------------------------------------------------------------------------- the models


def with_weights(model, dtype, seed: int = 0):
    """The model with each ConstantOfShape weight an initializer of seeded random values,
    every float tensor of `dtype` (np.float32 or np.float64)."""
    import onnx
    from onnx import TensorProto, numpy_helper
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    code = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    users = {}
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            users.setdefault(name, (node.op_type, position))
    kept, weights = [], []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(s) for s in shapes[node.input[0]])
        op, position = users.get(node.output[0], ("", 0))
        if op in ("Conv", "Gemm") and position == 1:
            fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[-1]
            values = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif op == "BatchNormalization" and position in (1, 4):
            values = rng.uniform(0.5, 1.5, shape)
        else:
            values = rng.standard_normal(shape) * 0.1
        weights.append(numpy_helper.from_array(values.astype(dtype), node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {name for node in kept for name in node.input}
    shape_inits = [numpy_helper.from_array(numpy_helper.to_array(t).astype(dtype), t.name)
                   if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE) else t
                   for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(shape_inits + weights)
    for value in list(model.graph.input) + list(model.graph.output):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = code
    inputs = [i for i in model.graph.input if i.name in used]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    return model


def targets(model) -> list[str]:
    """The first Conv's weight and the last layer's (the last Conv or Gemm)."""
    layers = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    return [layers[0].input[1], layers[-1].input[1]]


# ----------------------------------------------------------------------------- PyTorch's side


def torch_forward(model, values: dict):
    """The ONNX graph (the zoo's ops at opset 9) run with torch ops; `values` {name: tensor}."""
    import torch
    import torch.nn.functional as F
    from onnx import helper, numpy_helper
    env = dict(values)
    for t in model.graph.initializer:
        if t.name not in env:
            env[t.name] = torch.from_numpy(numpy_helper.to_array(t).copy())
    for node in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        x = [env[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Conv":
            k = len(a.get("kernel_shape", x[1].shape[2:]))
            pads = a.get("pads", [0] * 2 * k)
            padded = F.pad(x[0], [p for i in reversed(range(k)) for p in (pads[i], pads[i + k])])
            y = F.conv2d(padded, x[1], x[2] if len(x) > 2 else None, a.get("strides", 1), 0, a.get("dilations", 1),
                         a.get("group", 1))
        elif op == "Relu":
            y = torch.relu(x[0])
        elif op in ("MaxPool", "AveragePool"):
            kernel, strides = a["kernel_shape"], a.get("strides", [1, 1])
            pads = a.get("pads", [0, 0, 0, 0])
            fill = -float("inf") if op == "MaxPool" else 0.0
            padded = F.pad(x[0], [pads[1], pads[3], pads[0], pads[2]], value=fill)
            if op == "MaxPool":
                y = F.max_pool2d(padded, kernel, strides)
            else:  # count_include_pad=0: divide by the windows' counts of real elements
                ones = F.pad(torch.ones_like(x[0][:1, :1]), [pads[1], pads[3], pads[0], pads[2]])
                y = F.avg_pool2d(padded, kernel, strides) / F.avg_pool2d(ones, kernel, strides)
        elif op == "GlobalAveragePool":
            y = x[0].mean(dim=(2, 3), keepdim=True)
        elif op == "BatchNormalization":
            shape = (1, -1) + (1,) * (x[0].dim() - 2)
            y = (x[0] - x[3].reshape(shape)) / torch.sqrt(x[4].reshape(shape) + a.get("epsilon", 1e-5)) \
                * x[1].reshape(shape) + x[2].reshape(shape)
        elif op == "Unsqueeze":
            y = x[0]
            for axis in sorted(a["axes"]):
                y = y.unsqueeze(axis)
        elif op in ("Add", "Mul", "Sum"):
            y = x[0]
            for other in x[1:]:
                y = y * other if op == "Mul" else y + other
        elif op == "Concat":
            y = torch.cat(x, dim=a["axis"])
        elif op == "Gemm":
            first = x[0].T if a.get("transA") else x[0]
            second = x[1].T if a.get("transB") else x[1]
            y = a.get("alpha", 1.0) * first @ second + a.get("beta", 1.0) * x[2]
        elif op == "Dropout":
            y = x[0]
        elif op == "Reshape":
            shape = [int(s) if s != 0 else x[0].shape[i] for i, s in enumerate(x[1].tolist())]
            y = x[0].reshape(shape)
        elif op == "Transpose":
            y = x[0].permute(*a["perm"])
        elif op == "Softmax":
            axis = a.get("axis", 1)
            flat = x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
            y = torch.softmax(flat, 1).reshape(x[0].shape)
        elif op == "LRN":
            y = F.local_response_norm(x[0], a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0))
        else:
            raise NotImplementedError(op)
        env[node.output[0]] = y
    return env[model.graph.output[0].name]


def torch_gradient(model, feeds: dict, cotangent: np.ndarray, wrt: list[str]) -> dict:
    import torch
    from onnx import numpy_helper
    leaves = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).requires_grad_(t.name in wrt)
              for t in model.graph.initializer}
    values = {**leaves, **{k: torch.from_numpy(v) for k, v in feeds.items()}}
    out = torch_forward(model, values)
    (out * torch.from_numpy(cotangent)).sum().backward()
    return {name: leaves[name].grad.numpy() for name in wrt}


# ----------------------------------------------------------------------------- one model


def run(cmd) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=3600)


def zoo_model(path: str, work: str) -> dict:
    import onnx
    import onnxruntime as ort
    name = os.path.basename(path)[len("light_"):-len(".onnx")]
    shipped = onnx.load(path)
    model64 = with_weights(shipped, np.float64)
    wrt = targets(model64)
    p64 = os.path.join(work, f"{name}64.onnx")
    onnx.save(model64, p64)
    feeds64 = {k: v.astype(np.float64) for k, v in conformance.zoo_inputs(model64).items()}
    out_shape = tuple(d.dim_value for d in model64.graph.output[0].type.tensor_type.shape.dim)
    cotangent = np.random.default_rng(1).standard_normal(out_shape)
    out_name = model64.graph.output[0].name
    row = {"model": name, "wrt": wrt}
    start = time.perf_counter()
    done = run([UOPGRAD, "diff", p64, "--wrt", ",".join(wrt), "--cotangent", "input", "-o", os.path.join(work, "g.uop")])
    if done.returncode:
        row["refused"] = done.stderr.strip().split(": ", 2)[-1]
        return row
    inputs = os.path.join(work, "in.npz")
    np.savez(inputs, **feeds64, **{f"cotangent_{out_name}": cotangent})
    done = run([UOPGRAD, "eval", os.path.join(work, "g.uop"), "-i", os.path.join(work, "g.npz"), "-i", inputs,
                "-o", os.path.join(work, "grads.npz")])
    assert done.returncode == 0, done.stderr
    row["uopgrad s"] = time.perf_counter() - start
    ours = dict(np.load(os.path.join(work, "grads.npz")))
    start = time.perf_counter()
    truth = torch_gradient(model64, feeds64, cotangent, wrt)
    row["torch s"] = time.perf_counter() - start
    row["error64"] = max(float(np.abs(ours[f"grad_{n}"] - truth[n]).max() / np.abs(truth[n]).max()) for n in wrt)
    done = run([UOPGRAD, "diff", p64, "--wrt", ",".join(wrt), "--cotangent", "input", "-o", os.path.join(work, "g.onnx")])
    assert done.returncode == 0, done.stderr
    session = ort.InferenceSession(os.path.join(work, "g.onnx"), providers=["CPUExecutionProvider"])
    feeds = {**feeds64, f"cotangent_{out_name}": cotangent}
    got = dict(zip([o.name for o in session.get_outputs()],
                   session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})))
    row["error_ort"] = max(float(np.abs(got[f"grad_{n}"] - truth[n]).max() / np.abs(truth[n]).max()) for n in wrt)
    row["ok"] = row["error64"] <= 1e-6 and row["error_ort"] <= 1e-6
    return row


def markdown(rows: list[dict], stamp: str) -> str:
    lines = [SECTION, "", f"<!-- bench/bench_onnx_zoo.py, {stamp} -->", "",
             "`bench/bench_onnx_zoo.py`: each light model with seeded random weights, copied in float64; the "
             "gradient of sum(output * c) with respect to the first Conv weight and the last layer's weight by "
             "`uopgrad diff` + `uopgrad eval` (the installed CLI) against PyTorch's autograd on the same graph; "
             "then the same gradient written as .onnx by `uopgrad diff` and run by onnxruntime. Errors are the "
             "largest difference relative to the gradient's largest magnitude (target: 1e-6).", "",
             "| model | with respect to | uopgrad vs PyTorch | onnxruntime (uopgrad's grad.onnx) vs PyTorch | "
             "uopgrad diff + eval | PyTorch |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['model']} | {', '.join(r['wrt'])} | refused: {r['refused'][:160]} | | | |")
        else:
            lines.append(f"| {r['model']} | {', '.join(r['wrt'])} | {r['error64']:.1e} | {r['error_ort']:.1e} | "
                         f"{r['uopgrad s']:.1f} s | {r['torch s']:.1f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated names (squeezenet,densenet121,...); default all")
    parser.add_argument("--write", action="store_true", help="replace the section of bench/ONNX-RESULTS.md")
    args = parser.parse_args()
    paths = conformance.zoo_models()
    if args.models:
        paths = [p for p in paths if any(f"light_{m}.onnx" == os.path.basename(p) or m in p
                                         for m in args.models.split(","))]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path in paths:
            rows.append(zoo_model(path, work))
            print(rows[-1], file=sys.stderr)
    stamp = f"{time.strftime('%Y-%m-%d')}; wall times on a shared 2-core machine (load {os.getloadavg()[0]:.0f})"
    text = markdown(rows, stamp)
    print(text)
    if args.write:
        path = os.path.join(HERE, "ONNX-RESULTS.md")
        old = open(path).read()
        head, _, rest = old.partition(SECTION)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        with open(path, "w") as f:
            f.write(head.rstrip("\n") + "\n\n" + text + tail)
    if not all(r.get("ok", True) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
