"""A weight several modules read (an exporter merged their equal values, as torch's dynamo
exporter's optimizer does by default; or a tied weight): `diff`, `jvp`, `hvp`, `jacobian`
and `hessian` say so for each --wrt name, since its gradient is the sum of theirs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")

from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

from uopcli import differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.inspect import modules_reading  # noqa: E402

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


def _scoped(node, *scopes: str):
    """The node as torch's dynamo exporter tags it: its module path in its name scopes."""
    prop = node.metadata_props.add()
    prop.key, prop.value = "pkg.torch.onnx.name_scopes", repr(["", *scopes])
    return node


def merged_model(producer: str = "pytorch") -> onnx.ModelProto:
    """y = sum(n2(n1(x) @ w)), n1 and n2 LayerNorms reading ONE scale `n1.weight` (as the
    dynamo optimizer leaves two fresh LayerNorms), each its own bias; the nodes carry the
    module paths as the dynamo exporter's do, but not the program they were made from (as
    an older torch wrote them): whether the model ties the scale or the exporter merged it,
    the file cannot tell."""
    nodes = [_scoped(helper.make_node("LayerNormalization", ["x", "n1.weight", "n1.bias"], ["h"],
                                      name="node_layer_norm"), "n1", "layer_norm"),
             _scoped(helper.make_node("MatMul", ["h", "w"], ["m"], name="node_matmul"), "lin", "matmul"),
             _scoped(helper.make_node("LayerNormalization", ["m", "n1.weight", "n2.bias"], ["o"],
                                      name="node_layer_norm_1"), "n2", "layer_norm_1"),
             _scoped(helper.make_node("ReduceSum", ["o"], ["y"], name="node_sum", keepdims=0), "sum")]
    rng = np.random.default_rng(0)
    weights = {"n1.weight": rng.normal(size=4), "n1.bias": rng.normal(size=4), "n2.bias": rng.normal(size=4),
               "w": rng.normal(size=(4, 4))}
    graph = helper.make_graph(nodes, "merged", [helper.make_tensor_value_info("x", T.DOUBLE, [3, 4])],
                              [helper.make_tensor_value_info("y", T.DOUBLE, [])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name=producer)


def test_the_modules_that_read_each_weight_are_found_through_its_uses():
    graph, _ = import_model(merged_model())
    assert modules_reading(graph, ["n1.weight", "n1.bias", "w", "x"]) == {"n1.weight": ["n1", "n2"]}
    assert modules_reading(graph, ["n1.bias"]) == {}


def test_the_merged_weights_gradient_is_the_sum_of_its_modules():
    """What the note says, in values: the gradient of the one scale equals the sum of the
    two LayerNorms' scale gradients (each computed with the other's scale held)."""
    graph, weights = import_model(merged_model())
    x = np.random.default_rng(1).normal(size=(3, 4))
    grads, _ = differentiate(graph, ["n1.weight"], cotangent=None)
    got = evaluate_graph(grads, {**weights, "x": x})["grad_n1.weight"]
    g, b1, b2, w = weights["n1.weight"], weights["n1.bias"], weights["n2.bias"], weights["w"]

    def norm(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)

    def loss(g1, g2):
        return float(((norm((norm(x) * g1 + b1) @ w) * g2) + b2).sum())
    eps = 1e-6
    numeric = [(loss(g + eps * e, g) - loss(g - eps * e, g) + loss(g, g + eps * e) - loss(g, g - eps * e)) / (2 * eps)
               for e in np.eye(4)]
    np.testing.assert_allclose(got, numeric, rtol=1e-6)


HINT = ("; unless the model shares it (a module applied twice, tied weights), torch's dynamo exporter merged weights "
        "of equal values (its optimizer, on by default): torch.onnx.export(..., optimize=False) keeps each module's own")


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("command", ["diff", "jvp", "hvp", "jacobian", "hessian"])
def test_each_command_notes_a_merged_wrt_weight_once(tmp_path, command):
    onnx.save(merged_model(), tmp_path / "m.onnx")
    done = subprocess.run([UOPGRAD, command, "m.onnx", "--wrt", "n1.weight,w", "-o", "out.uop"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "is read by" in line]
    assert notes == [f"uopgrad: n1.weight is read by 2 modules (n1, n2), so its gradient is the sum of theirs{HINT}"]


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_no_note_for_a_weight_one_module_reads_nor_a_torch_hint_for_another_producer(tmp_path):
    onnx.save(merged_model(), tmp_path / "m.onnx")
    onnx.save(merged_model(producer="tf2onnx"), tmp_path / "tf.onnx")
    alone = subprocess.run([UOPGRAD, "diff", "m.onnx", "--wrt", "n1.bias,w", "-o", "g.uop"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0 and "is read by" not in alone.stderr, alone.stderr
    other = subprocess.run([UOPGRAD, "diff", "tf.onnx", "--wrt", "n1.weight", "-o", "g.uop"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert other.returncode == 0
    assert "uopgrad: n1.weight is read by 2 modules (n1, n2), so its gradient is the sum of theirs\n" in other.stderr


# ----------------------------------------------------------------------------- a BatchNorm folded into a weight
# torch's dynamo exporter (its optimizer, on by default) folds a BatchNorm into the Conv
# before it: the Conv keeps its weight's name for W·γ/σ, and onnxscript tags the node with
# the rule and the BatchNorm's module path. diff and the forward commands say so.

def folded_model(producer: str = "pytorch") -> onnx.ModelProto:
    """y = sum(conv(x) * s): the Conv node tagged as onnxscript tags a fused BatchNorm."""
    conv = helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="node_Conv_13", pads=[1, 1, 1, 1])
    for key, value in (("pkg.onnxscript.rewriter.rule_name", "FuseBatchNormIntoConv"),
                       ("pkg.torch.onnx.name_scopes", "['', 'bn', '_native_batch_norm_legit_no_training']")):
        prop = conv.metadata_props.add()
        prop.key, prop.value = key, value
    nodes = [conv, helper.make_node("Mul", ["c", "s"], ["m"]), helper.make_node("ReduceSum", ["m"], ["y"], keepdims=0)]
    rng = np.random.default_rng(2)
    weights = {"conv.weight": rng.normal(size=(3, 2, 3, 3)), "conv.bias": rng.normal(size=3),
               "s": rng.normal(size=(1, 3, 4, 4))}
    graph = helper.make_graph(nodes, "folded", [helper.make_tensor_value_info("x", T.DOUBLE, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", T.DOUBLE, [])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name=producer)


FOLDED_NOTE = ("uopgrad: conv.weight has the BatchNorm bn folded into it by the exporter's optimizer "
               "(FuseBatchNormIntoConv): its gradient is that of the folded weight, not of the module's own; "
               "torch.onnx.export(..., optimize=False) keeps the Conv's own weights")


def test_the_import_records_the_weights_a_batchnorm_was_folded_into():
    from uopcli.tools.inspect import FOLDED_WEIGHTS, folded_weight_notes
    graph, _ = import_model(folded_model())
    assert graph.meta[FOLDED_WEIGHTS] == ('{"conv.bias": ["FuseBatchNormIntoConv", "bn"], '
                                         '"conv.weight": ["FuseBatchNormIntoConv", "bn"]}')
    assert folded_weight_notes(graph, ["s", "x", "conv.weight"]) == [FOLDED_NOTE.removeprefix("uopgrad: ")]
    other, _ = import_model(folded_model(producer="other"))
    assert folded_weight_notes(other, ["conv.bias"]) == [
        "conv.bias has the BatchNorm bn folded into it by the exporter's optimizer (FuseBatchNormIntoConv): its "
        "gradient is that of the folded weight, not of the module's own"]
    merged, _ = import_model(merged_model())
    assert FOLDED_WEIGHTS not in merged.meta and folded_weight_notes(merged, ["n1.weight"]) == []


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("command", ["diff", "hvp", "jacobian"])
def test_each_command_notes_a_folded_wrt_weight_once_also_after_convert(tmp_path, command):
    onnx.save(folded_model(), tmp_path / "m.onnx")
    converted = subprocess.run([UOPGRAD, "convert", "m.onnx", "-o", "m.uop"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=300)
    assert converted.returncode == 0 and converted.stderr == "", converted.stderr
    for source in ("m.onnx", "m.uop"):
        done = subprocess.run([UOPGRAD, command, source, "--wrt", "conv.weight,s", "-o", "out.uop"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert [line for line in done.stderr.splitlines() if "folded" in line] == [FOLDED_NOTE], source
    plain = subprocess.run([UOPGRAD, command, "m.onnx", "--wrt", "s", "-o", "out.uop"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "folded" not in plain.stderr


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_torchs_default_export_folds_batchnorm_and_diff_says_so(tmp_path):
    """torch.onnx.export with every default (dynamo, optimize=True): the gradient of the file's
    conv.weight is that of W·γ/σ (a chain rule away from torch's, which the note says), and
    diff notes it; with optimize=False the same command gives torch's gradient and no note."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("onnxscript", reason="onnxscript is not installed: torch's dynamo exporter needs it")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Tanh()).double().eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
        model[1].weight.uniform_(0.5, 2)
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    model(x).sum().backward()
    np.save(tmp_path / "x.npy", x.numpy())
    for optimize in (True, False):
        path = tmp_path / f"m{int(optimize)}.onnx"
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                          optimize=optimize, external_data=False)
        done = subprocess.run([UOPGRAD, "diff", path.name, "--wrt", "0.weight", "--cotangent", "ones",
                               "-o", f"g{int(optimize)}.uop"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        notes = [line for line in done.stderr.splitlines() if "folded" in line]
        assert notes == ([FOLDED_NOTE.replace("conv.weight", "0.weight").replace("BatchNorm bn", "BatchNorm 1")]
                         if optimize else [])
        run = subprocess.run([UOPGRAD, "eval", f"g{int(optimize)}.uop", "-i", f"g{int(optimize)}.npz", "-i",
                              "x=x.npy", "-o", "out.npz"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        got = np.load(tmp_path / "out.npz")["grad_0.weight"]
        scale = (model[1].weight / torch.sqrt(model[1].running_var + model[1].eps)).detach().numpy()
        truth = model[0].weight.grad.numpy()  # torch's: d/dW, where the file's W' = W * scale
        expected = truth / scale[:, None, None, None] if optimize else truth
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_a_derived_file_notes_only_the_models_own_modules(tmp_path):
    """In an hvp file the nodes differentiation made read a weight too, under the module's
    scope marked backward or tangent (∂/lin): a weight one module reads was noted as read
    by two ('lin, ∂/lin'); a merged one is still noted, with the model's modules only."""
    onnx.save(merged_model(), tmp_path / "m.onnx")
    made = subprocess.run([UOPGRAD, "hvp", "m.onnx", "--wrt", "w,n1.weight", "-o", "h.uop"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    for command in (["jvp", "h.uop"], ["diff", "h.uop", "--of", "hvp_w", "--cotangent", "ones"]):
        done = subprocess.run([UOPGRAD, *command, "--wrt", "w,n1.weight", "-o", "out.uop"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert [line for line in done.stderr.splitlines() if "is read by" in line] == [
            f"uopgrad: n1.weight is read by 2 modules (n1, n2), so its gradient is the sum of theirs{HINT}"], command


def test_a_folded_batchnorms_parameter_is_said_to_be_in_the_weights_it_was_folded_into():
    """--wrt bn.weight of a model whose BatchNorm bn the optimizer folded: the refusal named
    the usual suspects; the import recorded exactly where bn went."""
    from uopcli.errors import GradientError
    graph, _ = import_model(folded_model(), source="m.onnx")
    with pytest.raises(GradientError) as caught:
        differentiate(graph, ["bn.weight"])
    assert str(caught.value).endswith(
        "; the exporter's optimizer folded the BatchNorm bn into conv.bias, conv.weight (FuseBatchNormIntoConv), so "
        "its parameters are no inputs of the file: torch.onnx.export(..., optimize=False) keeps them")
    with pytest.raises(GradientError, match="PyTorch's ONNX exporter may have folded or renamed it"):
        differentiate(graph, ["fc.weight"])  # no folded module of that name: the general hint


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_a_data_input_several_modules_read_gets_no_exporter_hint(tmp_path):
    """x read by q and k (attention's input): its gradient sums theirs, said plainly; the
    dynamo optimizer merges weights, never a model's inputs, so no hint on it."""
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="/q/MatMul"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="/k/MatMul"),
             helper.make_node("Add", ["q", "k"], ["s"], name="/Add"),
             helper.make_node("ReduceSum", ["s"], ["y"], name="/ReduceSum", keepdims=0)]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(nodes, "qk", [helper.make_tensor_value_info("x", T.DOUBLE, [3, 4])],
                              [helper.make_tensor_value_info("y", T.DOUBLE, [])],
                              [numpy_helper.from_array(rng.normal(size=(4, 4)), n) for n in ("wq", "wk")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="pytorch"),
              tmp_path / "qk.onnx")
    done = subprocess.run([UOPGRAD, "diff", "qk.onnx", "--wrt", "x", "-o", "g.uop"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "uopgrad: x is read by 2 modules (q, k), so its gradient is the sum of theirs\n" in done.stderr


# ----------------------------------------------------------------------------- tied or merged, by real exports
# A weight several modules read is either one the model itself ties (one Parameter: GPT-2's
# wte and lm_head; its gradient is rightly the sum) or one torch's dynamo exporter merged
# (its optimizer, on by default, keeps one of several weights equal at export). The notes
# blamed the dynamo exporter's optimizer in both cases, also in exports made exactly as the
# README recommends (legacy without folding; dynamo with optimize=False), and refused a tied
# name the file lacks with "export with ... optimize=False": what had been done. The legacy
# exporter writes a tied weight once and separates equal ones by Identity nodes (the import
# makes each a weight again); a dynamo export's nodes name the parameter their program read
# (pkg.torch.onnx.fx_node: `linear(%tanh, %p_b_weight)`), so a node that reads a.weight in place
# of b.weight shows the merge.

def _torch_exports(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("onnxscript", reason="onnxscript is not installed: torch's dynamo exporter needs it")

    class Tied(torch.nn.Module):  # the repro's: embedding and head share one Parameter
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(self.emb(ids)).logsumexp(-1).sum()

    class EqualAtInit(torch.nn.Module):  # two Linears, their own Parameters, equal values
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4, bias=False)
            self.b = torch.nn.Linear(4, 4, bias=False)
            with torch.no_grad():
                self.b.weight.copy_(self.a.weight)

        def forward(self, x):
            return self.b(self.a(x).tanh()).sum()

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tied")
    tied, equal = Tied().double().eval(), EqualAtInit().double().eval()
    ids, x = torch.tensor([[1, 2, 3, 1]]), torch.randn(2, 4, dtype=torch.float64)
    exports = {
        "tied-legacy": (tied, (ids,), ["ids"], dict(dynamo=False, do_constant_folding=False)),
        "tied-dynamo": (tied, (ids,), ["ids"], dict(dynamo=True, optimize=False, external_data=False)),
        "equal-optimized": (equal, (x,), ["x"], dict(dynamo=True, optimize=True, external_data=False)),
        "equal-dynamo": (equal, (x,), ["x"], dict(dynamo=True, optimize=False, external_data=False)),
    }
    for name, (model, args, names, how) in exports.items():
        torch.onnx.export(model, args, str(folder / f"{name}.onnx"), input_names=names, **how)
    tied(ids).backward()
    return folder, {"ids": ids.numpy(), "x": x.numpy()}, tied.emb.weight.grad.numpy()


@pytest.fixture(scope="module")
def torch_exports(tmp_path_factory):
    return _torch_exports(tmp_path_factory)


def _notes_and_refusal(path, present: str, absent: str):
    """shared_weight_notes of --wrt `present` (as the CLI gives them: the file's weights known),
    and the message refusing --wrt `absent`."""
    from uopcli.errors import GradientError
    from uopcli.interop.onnx.importer import load_onnx
    from uopcli.tools.inspect import shared_weight_notes
    graph, weights = load_onnx(str(path))
    notes = shared_weight_notes(graph, [present], set(weights))
    with pytest.raises(GradientError) as caught:
        differentiate(graph, [absent])
    return graph, weights, notes, str(caught.value)


TIED_NOTE = ("{w} is read by 2 modules (emb, head), so its gradient is the sum of theirs; the model itself shares "
             "this one weight (one Parameter: tied weights, or a module applied twice), exported under the name {w}")
TIED_REFUSAL = ("no input named '{asked}' to differentiate with respect to; inputs: ids, {w}; module {module} reads "
                "{w}, one weight the model itself shares with {other} (tied: one Parameter), exported under the name "
                "{w}: {wrt}, whose gradient holds the uses of both")  # wrt: "wrt=['w']" in Python, "--wrt w" in the CLI


def test_a_tied_weight_of_a_legacy_export_is_the_models_own_sharing(torch_exports):
    """Legacy, folding off (as the README says): the one Parameter is emb.weight; no dynamo blame."""
    folder, values, torch_grad = torch_exports
    graph, weights, notes, refusal = _notes_and_refusal(folder / "tied-legacy.onnx", "emb.weight", "head.weight")
    assert graph.meta["onnx.torch_exporter"] == "legacy" and "onnx.merged_weights" not in graph.meta
    assert notes == [TIED_NOTE.format(w="emb.weight")]
    assert refusal == TIED_REFUSAL.format(asked="head.weight", w="emb.weight", module="head", other="emb",
                                          wrt="wrt=['emb.weight']")
    grads, _ = differentiate(graph, ["emb.weight"], cotangent=None)  # rightly the sum: torch's own
    np.testing.assert_allclose(evaluate_graph(grads, {**weights, "ids": values["ids"]})["grad_emb.weight"],
                               torch_grad, rtol=1e-12)


def test_a_tied_weight_of_a_dynamo_export_without_its_optimizer_is_the_models_own_sharing(torch_exports):
    """Dynamo, optimize=False (as the README says): the one Parameter is named head.weight, and
    --wrt emb.weight is refused with that name, not with the export already done."""
    folder, values, torch_grad = torch_exports
    graph, weights, notes, refusal = _notes_and_refusal(folder / "tied-dynamo.onnx", "head.weight", "emb.weight")
    assert graph.meta["onnx.torch_exporter"] == "dynamo" and graph.meta["onnx.merged_weights"] == "{}"
    assert notes == [TIED_NOTE.format(w="head.weight")]
    assert refusal == TIED_REFUSAL.format(asked="emb.weight", w="head.weight", module="emb", other="head",
                                          wrt="wrt=['head.weight']")
    assert "optimize=False" not in refusal
    grads, _ = differentiate(graph, ["head.weight"], cotangent=None)
    np.testing.assert_allclose(evaluate_graph(grads, {**weights, "ids": values["ids"]})["grad_head.weight"],
                               torch_grad, rtol=1e-12)


def test_equal_weights_the_dynamo_optimizer_merged_are_said_to_be_merged(torch_exports):
    """Two Linears equal at init, dynamo with its optimizer: b.weight was merged into a.weight."""
    folder, _, _ = torch_exports
    graph, _, notes, refusal = _notes_and_refusal(folder / "equal-optimized.onnx", "a.weight", "b.weight")
    assert graph.meta["onnx.merged_weights"] == '{"a.weight": ["b.weight"]}'
    assert notes == ["a.weight is read by 2 modules (a, b), so its gradient is the sum of theirs; torch's dynamo "
                     "exporter merged b.weight into it, their values being equal at export (its optimizer, on by "
                     "default): torch.onnx.export(..., dynamo=True, optimize=False) keeps each module's own"]
    assert refusal == ("no input named 'b.weight' to differentiate with respect to; inputs: x, a.weight; torch's "
                       "dynamo exporter merged b.weight into a.weight, their values being equal at export (its "
                       "optimizer, on by default): wrt=['a.weight'] gives the sum of both modules' gradients, and "
                       "torch.onnx.export(..., dynamo=True, optimize=False) keeps b.weight")
    separate, weights = import_model(onnx.load(str(folder / "equal-dynamo.onnx")))
    assert set(weights) == {"a.weight", "b.weight"} and modules_reading(separate, ["a.weight", "b.weight"]) == {}


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_diff_of_the_readmes_tied_exports_says_the_model_ties_the_weight(torch_exports):
    """The newcomer's commands: each export as the README recommends, each told the truth."""
    folder, _, _ = torch_exports
    legacy = subprocess.run([UOPGRAD, "diff", "tied-legacy.onnx", "--wrt", "emb.weight", "-o", "l.uop"], cwd=folder,
                            capture_output=True, text=True, timeout=300)
    assert legacy.returncode == 0, legacy.stderr
    assert [line for line in legacy.stderr.splitlines() if "is read by" in line] == [
        "uopgrad: " + TIED_NOTE.format(w="emb.weight")]
    dynamo = subprocess.run([UOPGRAD, "diff", "tied-dynamo.onnx", "--wrt", "emb.weight", "-o", "d.uop"], cwd=folder,
                            capture_output=True, text=True, timeout=300)
    assert dynamo.returncode == 1
    assert dynamo.stderr == "uopgrad: error: tied-dynamo.onnx: " + TIED_REFUSAL.format(
        asked="emb.weight", w="head.weight", module="emb", other="head", wrt="--wrt head.weight") + "\n"
