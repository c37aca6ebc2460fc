"""The models a newcomer tried (issue 29), exported from PyTorch with the legacy exporter
(do_constant_folding=False, as the README says to export for gradients): a GRU classifier,
a small U-Net (Conv2d, ConvTranspose2d, nn.Upsample bilinear and nearest, skip
concatenations), a GroupNorm block, a stack of the activations (LeakyReLU, ReLU6,
Hardswish, Softplus, ELU, Mish); and a ViT exported with the legacy exporter's
defaults (constant folding on). Through the installed `uopgrad diff` and `eval`, their
forward values and their gradients equal PyTorch's."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the exported-model tests skip")
nn = torch.nn


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 8, batch_first=True, bidirectional=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out.mean(1))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.ReLU())
        self.bottom = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up2 = nn.ConvTranspose2d(16, 4, 2, stride=2)
        self.up3 = nn.Upsample(scale_factor=2, mode="nearest")
        self.out = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        a = self.down1(x)                                 # [N, 4, 8, 8]
        b = self.down2(a)                                 # [N, 8, 4, 4]
        c = self.bottom(b)                                # [N, 8, 2, 2]
        u = torch.cat([self.up1(c), b], 1)                # [N, 16, 4, 4]
        u = torch.cat([self.up2(u), a], 1)                # [N, 8, 8, 8]
        return self.out(u) + self.up3(self.out(u)[:, :, ::2, ::2])


class GroupNormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.conv(x))).mean((2, 3)))


class Activations(nn.Module):
    """The activations a newcomer met refused one per run: each between two layers."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(6, 8), nn.LeakyReLU(0.1), nn.Linear(8, 8), nn.ReLU6(), nn.Linear(8, 8), nn.Hardswish(),
            nn.Linear(8, 8), nn.Softplus(), nn.Linear(8, 8), nn.ELU(), nn.Linear(8, 8), nn.Mish(), nn.Linear(8, 2))

    def forward(self, x):
        return self.layers(x * 3.0)  # wide enough to reach each activation's bends and flat parts


MODELS = {  # name: (module, input shape, the parameters whose gradients are compared)
    "activations": (Activations, (16, 6), [f"layers.{i}.weight" for i in (0, 2, 4, 6, 8, 10, 12)]),
    "gru": (GRUClassifier, (2, 4, 5), ["gru.weight_ih_l0", "gru.weight_hh_l0_reverse", "gru.bias_hh_l0", "head.weight"]),
    "unet": (UNet, (1, 2, 8, 8), ["down1.0.weight", "up2.weight", "up2.bias", "out.weight"]),
    "groupnorm": (GroupNormBlock, (2, 3, 5, 5), ["conv.weight", "norm.weight", "norm.bias", "head.bias"]),
}


def uopgrad(*args):
    run = subprocess.run(["uopgrad", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_exported_model_differentiates_as_pytorch_does(name, tmp_path):
    module_class, shape, targets = MODELS[name]
    torch.manual_seed(29)
    model = module_class().eval()
    x = torch.randn(*shape)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["out"], dynamo=False,
                      do_constant_folding=False, opset_version=17)
    out = model(x)
    out.sum().backward()
    parameters = dict(model.named_parameters())
    np.save(tmp_path / "x.npy", x.numpy())
    uopgrad("eval", path, "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out.npz")
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out"], out.detach().numpy(), rtol=1e-4, atol=1e-5,
                               err_msg=f"{name}: forward")
    uopgrad("diff", path, "--wrt", ",".join(targets), "--cotangent", "ones", "-o", tmp_path / "grad.uop")
    uopgrad("eval", tmp_path / "grad.uop", "-i", tmp_path / "grad.npz", "-i", f"x={tmp_path / 'x.npy'}",
            "-o", tmp_path / "grads.npz")
    grads = np.load(tmp_path / "grads.npz")
    for target in targets:
        want = parameters[target].grad.numpy()
        assert np.abs(want).max() > 0, f"{name}: PyTorch's gradient of {target} is zero: the comparison would be weak"
        np.testing.assert_allclose(grads[f"grad_{target}"], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}: d out / d {target}")


# ----------------------------------------------------------------------------- a ViT, legacy defaults

class ViT(nn.Module):
    """A small vision transformer as a newcomer writes one: patches by a strided Conv2d, a
    class token, learned positions, nn.TransformerEncoder (pre-norm, GELU), a head."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 16))
        self.pos = nn.Parameter(torch.randn(1, 5, 16) * 0.02)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        patches = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), patches], 1) + self.pos
        return self.head(self.norm(self.encoder(tokens))[:, 0])


def _parameter_behind(user: str) -> str:
    """The PyTorch parameter an exporter's folded `onnx::MatMul_N` is the transpose of,
    from the ONNX node that reads it (`uopgrad info`'s used-by line)."""
    module = user.split(" ")[0].rsplit("/", 1)[0].strip("/").replace("/", ".")
    return module.replace("self_attn", "self_attn.in_proj_weight") if module.endswith("self_attn") \
        else f"{module}.weight"


def _export_vit(tmp_path, trained: bool):
    torch.manual_seed(29)
    model = ViT().eval()
    if trained:  # every weight its own value, as after training (at initialisation the layers are copies)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
    x = torch.randn(2, 3, 8, 8)
    path = tmp_path / "vit.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["out"], dynamo=False)  # defaults
    np.save(tmp_path / "x.npy", x.numpy())
    out = model(x)
    out.sum().backward()
    info = __import__("json").loads(uopgrad("info", path, "--json").stdout)
    return model, out, path, info


def _vit_gradients(path, tmp_path, info) -> dict:
    weights = [i["name"] for i in info["inputs"] if i["name"] != "x"]
    uopgrad("diff", path, "--wrt", ",".join(weights), "--cotangent", "ones", "-o", tmp_path / "grad.uop")
    uopgrad("eval", tmp_path / "grad.uop", "-i", tmp_path / "grad.npz", "-i", f"x={tmp_path / 'x.npy'}",
            "-o", tmp_path / "grads.npz")
    grads = np.load(tmp_path / "grads.npz")
    return {name: grads[f"grad_{name}"] for name in weights}


def test_a_vit_exported_with_the_legacy_defaults_differentiates_as_pytorch_does(tmp_path):
    """Constant folding on (the legacy exporter's default): every parameter is an input by
    its own name, except the transposed MatMul weights the exporter folded into
    `onnx::MatMul_N`, which `uopgrad info` leads back to their module; each gradient,
    under either name, is PyTorch's."""
    model, out, path, info = _export_vit(tmp_path, trained=True)
    uopgrad("eval", path, "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out.npz")
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out"], out.detach().numpy(), rtol=1e-4, atol=1e-5)
    grads = _vit_gradients(path, tmp_path, info)
    parameters = dict(model.named_parameters())
    compared = set()
    for name, ours in grads.items():
        if name in parameters:
            want = parameters[name].grad.numpy()
        else:
            (user,) = info["used_by"][name]  # one reader: a folded copy of one parameter
            want = parameters[_parameter_behind(user)].grad.numpy().T
            name = _parameter_behind(user)
        assert np.abs(want).max() > 0, name
        np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5, err_msg=f"d out / d {name}")
        compared.add(name)
    assert compared == set(parameters)  # every parameter, under its name or its folded copy's


def test_a_fresh_vits_merged_layers_are_shown_and_get_the_sum_of_their_gradients(tmp_path):
    """At initialisation nn.TransformerEncoder's layers are copies: constant folding then
    keeps one transposed weight for both layers. `uopgrad info` names both readers (the
    README says to export with do_constant_folding=False), and the one gradient is the sum
    of the two layers' gradients, which is what the merged graph computes."""
    model, _, path, info = _export_vit(tmp_path, trained=False)
    merged = {name: users for name, users in info["used_by"].items() if name.startswith("onnx::")}
    assert len(merged) == 3 and all(len(users) == 2 for users in merged.values()), merged
    grads = _vit_gradients(path, tmp_path, info)
    parameters = dict(model.named_parameters())
    for name, users in merged.items():
        behind = [_parameter_behind(user) for user in users]
        assert [b.split(".")[2] for b in behind] == ["0", "1"], behind  # layers.0 and layers.1
        want = sum(parameters[b].grad.numpy() for b in behind).T
        np.testing.assert_allclose(grads[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
