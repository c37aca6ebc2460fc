"""Today's architectures as PyTorch exports them (torch.onnx's TorchScript exporter, opset
17, float64, folding off): a ConvNeXt block (depthwise 7x7 conv, channels-last LayerNorm,
GELU, layer scale), a MobileNetV3 block (BatchNorm, hardswish, strided depthwise conv,
squeeze-and-excitation with hardsigmoid), a ViT block (nn.MultiheadAttention, tanh GELU),
a two-layer bidirectional GRU tagger with log-softmax, and a small U-Net (GroupNorm, SiLU,
max pool, bilinear upsampling, transposed conv, concatenation). Each is imported, evaluated
and differentiated (sum(output * c), c random: order and position seen) with respect to the
input and every parameter, against PyTorch's own forward and autograd.

Both of torch's exporters: the TorchScript one, and the dynamo one (torch.export, the
default since torch 2.9) without its optimizer (`optimize=False`), which would fuse each
BatchNorm into its Conv's weight, transpose Linear weights into new initializers and merge
equal ones: the gradient is then the exported initializers', not the module's parameters'
(README: "Exporting for gradients"). The optimized dynamo export is compared on what it
keeps: the output and the input's gradient.

Tolerances: float64 throughout, 1e-11 relative to the largest magnitude; the MobileNet and
U-Net blocks 1e-8, because ONNX stores an attribute as a float32 (HardSigmoid's alpha 1/6,
LeakyRelu's 0.1): the model as exported is 1e-9 away from PyTorch's, and onnxruntime reads
the same float32 attributes."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the exported-model tests skip")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from uopcli import GradientError, Graph, UOp, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import load_onnx  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402


class ConvNeXtBlock(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.dw, self.norm = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.LayerNorm(c)
        self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        return x + (self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma).permute(0, 3, 1, 2)


class MobileBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.expand, self.bn1 = nn.Conv2d(c, 4 * c, 1), nn.BatchNorm2d(4 * c)
        self.dw, self.bn2 = nn.Conv2d(4 * c, 4 * c, 3, stride=2, padding=1, groups=4 * c), nn.BatchNorm2d(4 * c)
        self.se1, self.se2, self.proj = nn.Conv2d(4 * c, c, 1), nn.Conv2d(c, 4 * c, 1), nn.Conv2d(4 * c, c, 1)

    def forward(self, x):
        y = F.hardswish(self.bn1(self.expand(x)))
        y = F.hardswish(self.bn2(self.dw(y)))
        return self.proj(y * F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1))))))


class ViTBlock(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(approximate="tanh"), nn.Linear(2 * d, d))

    def forward(self, x):
        q = self.n1(x)
        x = x + self.attn(q, q, q, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


class GRUTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru, self.out = nn.GRU(6, 8, num_layers=2, batch_first=True, bidirectional=True), nn.Linear(16, 3)

    def forward(self, x):
        return F.log_softmax(self.out(self.gru(x)[0]), -1)


class UNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.down, self.gn, self.mid = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.Conv2d(8, 8, 3, padding=1)
        self.up, self.out = nn.ConvTranspose2d(8, 8, 2, stride=2), nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = F.silu(self.gn(self.down(x)))
        b = F.leaky_relu(self.mid(F.max_pool2d(a, 2)), 0.1)
        u = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False) + self.up(b)
        return self.out(torch.cat([a, u], 1))


ARCHITECTURES = {  # module, input shape, tolerance
    "convnext": (ConvNeXtBlock, (2, 16, 8, 8), 1e-11), "mobilenet": (MobileBlock, (2, 8, 8, 8), 1e-8),
    "vit": (ViTBlock, (2, 5, 16), 1e-11), "gru": (GRUTagger, (2, 7, 6), 1e-11), "unet": (UNetish, (1, 3, 8, 8), 1e-8),
}


def _relative(ours, theirs) -> float:
    """A nan anywhere is an infinite error (max() over the errors would skip a nan that is not first)."""
    error = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-300))
    return error if error == error else float("inf")


def _model(name: str):
    """The architecture in float64, seeded, with trained-looking BatchNorm statistics (not
    the identity); and an input that wants its gradient."""
    module, shape, _ = ARCHITECTURES[name]
    torch.manual_seed(7)
    model = module().double().eval()
    for layer in model.modules():
        if isinstance(layer, nn.BatchNorm2d):
            layer.running_mean.uniform_(-0.5, 0.5)
            layer.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _export(model, x, path, exporter: str) -> None:
    if exporter == "torchscript":
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                          opset_version=17, do_constant_folding=False)
        return
    pytest.importorskip("onnxscript", reason="onnxscript is not installed: torch's dynamo exporter needs it")
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                      optimize=exporter == "dynamo-optimized", verbose=False)


def _imported_with_pytorchs_value(name: str, exporter: str, tmp_path):
    """The architecture exported, its gradient of sum(y·c) taken by PyTorch (c random), the
    export imported and its value checked against PyTorch's: (model, x, c, graph, inputs,
    tolerance)."""
    tolerance = ARCHITECTURES[name][2]
    model, x = _model(name)
    path = tmp_path / f"{name}.onnx"
    _export(model, x, path, exporter)
    y = model(x)
    c = torch.randn_like(y)
    (y * c).sum().backward()
    graph, weights = load_onnx(str(path))
    inputs = {**weights, "x": x.detach().numpy()}
    assert _relative(np.asarray(evaluate_graph(graph, inputs)["y"]), y.detach().numpy()) < tolerance
    return model, x, c, graph, inputs, tolerance


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_architecture_values_and_every_gradient_equal_pytorch(name, exporter, tmp_path):
    model, x, c, graph, inputs, tolerance = _imported_with_pytorchs_value(name, exporter, tmp_path)
    parameters = dict(model.named_parameters())
    wrt = ["x"] + [n for n in graph.input_names if n in parameters]
    assert len(wrt) - 1 == len(parameters), f"parameters not in the import: {set(parameters) - set(wrt)}"
    grads, _ = differentiate(graph, wrt, cotangent="input")
    values = evaluate_graph(grads, {**inputs, "cotangent_y": c.numpy()})
    truth = {"x": x.grad, **{n: p.grad for n, p in parameters.items()}}
    errors = {n: _relative(np.asarray(values[f"grad_{n}"]), truth[n].numpy()) for n in wrt}
    assert max(errors.values()) < tolerance, {n: f"{e:.1e}" for n, e in errors.items() if e >= tolerance}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_optimized_dynamo_export_keeps_the_values_and_the_inputs_gradient(name, tmp_path):
    """torch.onnx.export's defaults (dynamo, optimized): the weights may be fused or renamed,
    but the function of x is the model's: its value and x's gradient equal PyTorch's."""
    _, x, c, graph, inputs, tolerance = _imported_with_pytorchs_value(name, "dynamo-optimized", tmp_path)
    grads, _ = differentiate(graph, ["x"], cotangent="input")
    got = evaluate_graph(grads, {**inputs, "cotangent_y": c.numpy()})["grad_x"]
    assert _relative(np.asarray(got), x.grad.numpy()) < tolerance


def test_a_parameter_the_optimizer_fused_away_is_refused_with_the_export_that_keeps_it(tmp_path):
    """The installed `uopgrad diff` on the optimized export, asked for a BatchNorm weight the
    exporter fused into the Conv: exit status 1, one line naming the file, the inputs there
    are, the weights bn1 was folded into and the export setting that keeps it; no output
    file. A file from elsewhere gets no PyTorch advice."""
    model, x = _model("mobilenet")
    path = tmp_path / "mobilenet.onnx"
    _export(model, x, path, "dynamo-optimized")
    out = tmp_path / "grad.uop"
    run = subprocess.run(["uopgrad", "diff", str(path), "--wrt", "bn1.weight", "--cotangent", "ones", "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stdout == "" and not out.exists()
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"uopgrad: error: {path}: no input named 'bn1.weight' to differentiate with respect to; "
                           "inputs: x, expand.weight, expand.bias, dw.weight")
    assert line.endswith("; the exporter's optimizer folded the BatchNorm bn1 into expand.bias, expand.weight "
                         "(FuseBatchNormIntoConv), so its parameters are no inputs of the file: "
                         "torch.onnx.export(..., optimize=False) keeps them")  # where bn1 went, as the import saw
    graph = Graph({"y": UOp.param("w", (2,)).sum()}, meta={"onnx.producer": "tf2onnx 1.16"})
    with pytest.raises(GradientError) as refused:
        differentiate(graph, ["v"])
    assert str(refused.value) == "no input named 'v' to differentiate with respect to; inputs: w"
