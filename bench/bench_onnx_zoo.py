"""The light model zoo of the onnx wheel (onnx/backend/test/data/light: AlexNet, ZFNet-512,
Inception v1/v2, ResNet-50, DenseNet-121, ShuffleNet, SqueezeNet, VGG-19): the gradient
of a scalar loss by `uopgrad diff`, against PyTorch's autograd, and run as .onnx by
onnxruntime.

    .venv/bin/python bench/bench_onnx_zoo.py [--models squeezenet,densenet121] [--write] [--notes TEXT]

The light models carry no weights: each weight is a ConstantOfShape of 0.02. Here every
such weight becomes an initializer of seeded random values (He-scaled for Conv and Gemm
weights, near 1 for BatchNormalization's scale), each BatchNormalization's mean and variance are
set to its input's statistics on the runner's inputs (`calibrate`: else ResNet-50's and
ShuffleNet's Softmax saturates and both gradients are exactly 0), the model is copied in
float64 (the "float64 copies"), and the loss is sum(output * c) for a fixed random c
(`--cotangent input`). For each model:

1. `uopgrad diff model64.onnx --wrt <first Conv weight>,<last layer's weight> --cotangent input`
   then `uopgrad eval` on the ONNX runner's inputs (arange(n)/n), through the installed CLI;
2. PyTorch (float64, autograd) runs the same ONNX graph, op by op (`torch_forward` below);
3. the two gradients must agree to 1e-6 (relative to the gradient's largest magnitude);
4. `uopgrad diff model64.onnx ... -o grad.onnx` run by onnxruntime equals PyTorch's
   gradient to 1e-6 too.

Each step (the two uopgrad commands, PyTorch's side, the export, onnxruntime's side) runs in
a process of its own under a 10 GB address-space cap, and reports its wall time and peak
resident memory: a side that runs out of memory fails alone, named in the table, and the
others are still measured. A model whose ops the importer refuses is reported with the
refusal.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

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
    """The first Conv's weight and the last layer's (the last Conv or Gemm), each the
    initializer itself where the layer reads it through a Reshape (inception_v1's Gemm)."""
    made_by = {out: node for node in model.graph.node for out in node.output}
    weights = {t.name for t in model.graph.initializer}

    def weight(name: str) -> str:
        while name not in weights and name in made_by and made_by[name].op_type == "Reshape":
            name = made_by[name].input[0]
        return name

    layers = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    return [weight(layers[0].input[1]), weight(layers[-1].input[1])]


def calibrate(model, feeds: dict) -> int:
    """Each BatchNormalization's mean and variance set to the statistics of its input on
    `feeds` (as a trained model's running statistics would be), in place; the number set.
    With random ones, a residual network's activations grow block by block (ResNet-50's
    logits reach 1.8e5), Softmax saturates to exactly one-hot in float64 and both
    gradients are exactly 0: nothing would be compared."""
    import torch
    from onnx import numpy_helper
    if not any(n.op_type == "BatchNormalization" for n in model.graph.node):
        return 0
    stats: dict = {}
    with torch.no_grad():
        torch_forward(model, {k: torch.from_numpy(v) for k, v in feeds.items()}, stats)
    for i, t in enumerate(model.graph.initializer):
        if t.name in stats:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(stats[t.name].numpy(), t.name))
    return len(stats) // 2


# ----------------------------------------------------------------------------- PyTorch's side


def torch_forward(model, values: dict, batch_stats: dict | None = None):
    """The ONNX graph (the zoo's ops at opset 9) run with torch ops; `values` {name: tensor}.
    With `batch_stats`, BatchNormalization normalizes by its input's own per-channel mean
    and variance and records them there under the names of its mean and variance inputs."""
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
            if batch_stats is not None:
                dims = [0] + list(range(2, x[0].dim()))
                x[3] = batch_stats[node.input[3]] = x[0].mean(dim=dims)
                x[4] = batch_stats[node.input[4]] = x[0].var(dim=dims, unbiased=False)
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

MEMORY_CAP = 10 * 10 ** 9  # bytes of address space per step (RLIMIT_AS): a step over it fails alone


class Step(NamedTuple):
    ok: bool
    seconds: float
    peak_bytes: int            # the step's process's largest resident set (ru_maxrss)
    error: str                 # the last line of its stderr, or the signal that ended it


def step(cmd, cap: int = MEMORY_CAP) -> Step:
    """`cmd` in its own process under the address-space cap, timed, with its peak memory
    (each side measured apart: the uopgrad CLI, PyTorch, onnxruntime).

    The peak is GNU time's %M for `cmd` where /usr/bin/time exists: a process forked from
    this one starts with this one's resident set (the weights it holds, torch once
    `calibrate` ran) and Linux keeps that in its ru_maxrss across exec, so wait4's number
    would count the bench's own memory too; forked from the small `time` process instead,
    it counts `cmd` alone."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    start = time.perf_counter()
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak:
        timer = ["/usr/bin/time", "-f", "%M", "-o", peak.name] if os.path.exists("/usr/bin/time") else []
        proc = subprocess.Popen(timer + [str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = [line for line in err.read().decode(errors="replace").splitlines() if line.strip()]
        report = peak.read().splitlines()  # time's: a status line where cmd failed, then %M
    seconds = time.perf_counter() - start
    measured = [line for line in report if line.strip().isdigit()]
    peak_bytes = int(measured[-1]) * 1024 if measured else usage.ru_maxrss * 1024
    signal = next((line.partition("signal ")[2] for line in report if "terminated by signal" in line), "")
    error = ""
    if proc.returncode < 0 or signal:
        error = f"killed by signal {signal or -proc.returncode}"
    elif proc.returncode:
        error = lines[-1] if lines else f"exit status {proc.returncode}"
    return Step(proc.returncode == 0, seconds, peak_bytes, error)


def side(which: str, work: str) -> None:
    """One side in this process (`--side torch|ort`): PyTorch's gradient of the float64 model,
    or onnxruntime's run of uopgrad's grad.onnx; the gradients to WORK/<side>.npz."""
    import json
    meta = json.load(open(os.path.join(work, "meta.json")))
    feeds = dict(np.load(os.path.join(work, "in.npz")))
    cotangent_name = f"cotangent_{meta['output']}"
    if which == "torch":
        import onnx
        cotangent = feeds.pop(cotangent_name)
        got = torch_gradient(onnx.load(os.path.join(work, "model64.onnx")), feeds, cotangent, meta["wrt"])
    else:
        import onnxruntime as ort
        session = ort.InferenceSession(os.path.join(work, "g.onnx"), providers=["CPUExecutionProvider"])
        outputs = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
        got = {o.name[len("grad_"):]: v for o, v in zip(session.get_outputs(), outputs)}
    np.savez(os.path.join(work, f"{which}.npz"), **{name: got[name] for name in meta["wrt"]})


def zoo_model(path: str, work: str) -> dict:
    import json

    import onnx
    name = os.path.basename(path)[len("light_"):-len(".onnx")]
    model64 = with_weights(onnx.load(path), np.float64)
    wrt = targets(model64)
    feeds64 = {k: v.astype(np.float64) for k, v in conformance.zoo_inputs(model64).items()}
    calibrated = calibrate(model64, feeds64)
    p64 = os.path.join(work, "model64.onnx")
    onnx.save(model64, p64)
    out_shape = tuple(d.dim_value for d in model64.graph.output[0].type.tensor_type.shape.dim)
    cotangent = np.random.default_rng(1).standard_normal(out_shape)
    out_name = model64.graph.output[0].name
    del model64
    inputs = os.path.join(work, "in.npz")
    np.savez(inputs, **feeds64, **{f"cotangent_{out_name}": cotangent})
    with open(os.path.join(work, "meta.json"), "w") as f:
        json.dump({"wrt": wrt, "output": out_name}, f)
    row = {"model": name, "wrt": wrt, "steps": {}, "calibrated": calibrated}
    me = [sys.executable, os.path.abspath(__file__)]
    plan = [
        ("diff", [UOPGRAD, "diff", p64, "--wrt", ",".join(wrt), "--cotangent", "input",
                  "-o", os.path.join(work, "g.uop")]),
        ("eval", [UOPGRAD, "eval", os.path.join(work, "g.uop"), "-i", os.path.join(work, "g.npz"), "-i", inputs,
                  "-o", os.path.join(work, "grads.npz")]),
        ("torch", me + ["--side", "torch", "--work", work]),
        ("export", [UOPGRAD, "diff", p64, "--wrt", ",".join(wrt), "--cotangent", "input",
                    "-o", os.path.join(work, "g.onnx")]),
        ("ort", me + ["--side", "ort", "--work", work]),
    ]
    for label, cmd in plan:
        if label == "ort" and not row["steps"]["export"].ok:
            break
        done = row["steps"][label] = step(cmd)
        print(f"  {name} {label}: {done.seconds:.1f} s, peak {done.peak_bytes / 1e9:.2f} GB {done.error[:300]}",
              file=sys.stderr)
        if label == "diff" and not done.ok:
            row["refused"] = done.error.split(": ", 2)[-1]
            return row
    steps = row["steps"]
    row["ok"] = False
    if not steps["torch"].ok:
        return row
    truth = dict(np.load(os.path.join(work, "torch.npz")))
    row["largest"] = [float(np.abs(truth[n]).max()) for n in wrt]
    if not all(row["largest"]):  # an all-zero gradient compares nothing: a failure of the setup
        return row

    def error(got: dict) -> float:
        return max(float(np.abs(got[n] - truth[n]).max() / np.abs(truth[n]).max()) for n in wrt)

    if steps["eval"].ok:
        ours = dict(np.load(os.path.join(work, "grads.npz")))
        row["error64"] = error({n: ours[f"grad_{n}"] for n in wrt})
    if steps.get("ort") and steps["ort"].ok:
        row["error_ort"] = error(dict(np.load(os.path.join(work, "ort.npz"))))
    row["ok"] = row.get("error64", 1.0) <= 1e-6 and row.get("error_ort", 1.0) <= 1e-6
    return row


def _cell(row: dict, key: str, *labels: str) -> str:
    """The error, or why there is none (the step that failed and how)."""
    if key in row:
        return f"{row[key]:.1e}"
    if "largest" in row and not all(row["largest"]):
        return "PyTorch's gradient is all zeros: nothing compared"
    for label in labels:
        done = row["steps"].get(label)
        if done is not None and not done.ok:
            return f"{label} failed: {done.error[:120]}"
    return "not run"


def _cost(row: dict, *labels: str) -> str:
    """Seconds and peak resident memory of the steps (the peak: the largest of them)."""
    done = [row["steps"][label] for label in labels if label in row["steps"]]
    if not done:
        return ""
    return f"{sum(d.seconds for d in done):.1f} s, {max(d.peak_bytes for d in done) / 1e9:.2f} GB"


def markdown(rows: list[dict], stamp: str, notes: str = "") -> str:
    lines = [SECTION, "", f"<!-- bench/bench_onnx_zoo.py, {stamp} -->", "",
             "`bench/bench_onnx_zoo.py`: each light model with seeded random weights, copied in float64; the "
             "gradient of sum(output * c) with respect to the first Conv weight and the last layer's weight by "
             "`uopgrad diff` + `uopgrad eval` (the installed CLI) against PyTorch's autograd on the same graph; "
             "then the same gradient written as .onnx by `uopgrad diff` and run by onnxruntime. Errors are the "
             "largest difference relative to the gradient's largest magnitude (target: 1e-6). BatchNormalization's "
             "mean and variance are its input's statistics on the runner's input (as a trained model's would be; "
             "random ones saturate ResNet-50's and ShuffleNet's Softmax, and every gradient is exactly 0). "
             "Each step runs in "
             f"its own process under a {MEMORY_CAP / 1e9:.0f} GB address-space cap; its wall time and peak "
             "resident memory (GNU time's maximum resident set of that process alone) are listed per side: uopgrad's diff + eval, PyTorch's forward + "
             "backward, and uopgrad's .onnx export + onnxruntime's session and run (the peak is the larger of "
             "the two processes).", "",
             "| model | with respect to | uopgrad vs PyTorch | onnxruntime (uopgrad's grad.onnx) vs PyTorch | "
             "uopgrad diff + eval | PyTorch | export + onnxruntime |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['model']} | {', '.join(r['wrt'])} | refused: {r['refused'][:160]} | | | | |")
        else:
            lines.append(f"| {r['model']} | {', '.join(r['wrt'])} | {_cell(r, 'error64', 'eval', 'torch')} | "
                         f"{_cell(r, 'error_ort', 'export', 'ort', 'torch')} | {_cost(r, 'diff', 'eval')} | "
                         f"{_cost(r, 'torch')} | {_cost(r, 'export', 'ort')} |")
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated names (squeezenet,densenet121,...); default all")
    parser.add_argument("--write", action="store_true", help="replace the section of bench/ONNX-RESULTS.md")
    parser.add_argument("--notes", default="", help="a paragraph written under the table")
    parser.add_argument("--side", choices=("torch", "ort"), help=argparse.SUPPRESS)  # one step, in its process
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side(args.side, args.work)
        return
    paths = conformance.zoo_models()
    if args.models:
        paths = [p for p in paths if any(f"light_{m}.onnx" == os.path.basename(p) or m in p
                                         for m in args.models.split(","))]
    rows, load = [], os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        for path in paths:
            rows.append(zoo_model(path, work))
            print(rows[-1], file=sys.stderr)
    stamp = f"{time.strftime('%Y-%m-%d')}; wall times on a shared 2-core machine (load {load:.0f} at the start, {os.getloadavg()[0]:.0f} at the end)"
    text = markdown(rows, stamp, args.notes)
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
