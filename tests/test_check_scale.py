"""`check` at model scale, inputs that make sense, and `eval --debug-nans` (issue 31).

- the reference evaluator contracts a matmul spelled EXPAND, MUL, REDUCE without building
  the product, and frees what it no longer reads;
- random directions through every target catch a planted wrong gradient rule where no
  element is compared one by one; the report names the target and the step;
- a model's .npz beside it is noted, running statistics are never filled with noise, and
  with -i the CNN with BatchNorm passes (through the installed uopgrad);
- --debug-nans names the node that first makes a nan or inf, its forward function and
  scope: sigmoid's gradient at -100 in float16 (--literal), a log of an underflow, an
  ONNX LayerNorm of a constant row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import uopcli
from uopcli import Graph, Metadata, UOp, dtypes
from uopcli.backends.reference import reference_evaluate
from uopcli.core import gradient as gradient_module
from uopcli.core.ops import Ops
from uopcli.core.uop import next_serial
from uopcli.tools import check as check_module
from uopcli.tools.check import check_gradients
from uopcli.tools.nans import hunt_nans

ROOT = Path(__file__).resolve().parent.parent
UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")
SAMPLES = ROOT / "samples" / "onnx"


def uopgrad(*args, cwd=None, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([UOPGRAD, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300,
                          input=stdin)


def scoped(path: str, fn):
    """fn(), its new nodes given scope `path` (as an importer fills it)."""
    since = next_serial()
    result = fn()
    stack = [result]
    while stack:
        node = stack.pop()
        if node.serial < since or (node.meta is not None and node.meta.scope is not None):
            continue
        node.set_meta((node.meta or Metadata())._replace(scope=path))
        stack.extend(node.src)
    return result


# ----------------------------------------------------------------------------- the reference evaluator

def test_reference_contracts_a_spelled_out_matmul_without_the_product():
    """(256, 512) @ (512, 384) spelled as tinygrad spells it: the product would be 50M
    float64s (400 MB); the reference's peak stays within a few of its operands."""
    a, b = UOp.param("ma", (256, 512), dtypes.float64), UOp.param("mb", (512, 384), dtypes.float64)
    product = a.reshape((256, 1, 512)).expand((256, 384, 512)) * b.permute((1, 0)).reshape((1, 384, 512)).expand(
        (256, 384, 512))
    out = product.sum(2)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((256, 512)), rng.standard_normal((512, 384))
    tracemalloc.start()
    got, = reference_evaluate([out], {"ma": x, "mb": w})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(got, x @ w, rtol=1e-12, atol=1e-10)
    assert peak < 8 * (x.nbytes + w.nbytes + got.nbytes), peak
    # an axis summed that neither factor has counts its length; integers wrap as additions would
    i = UOp.param("mi", (3,), dtypes.int32)
    wide = (i.reshape((3, 1)).expand((3, 200)) * i.reshape((3, 1)).expand((3, 200))).sum(1)
    assert wide.dtype is dtypes.int32
    values = np.array([1, 3, 1 << 20], np.int32)
    got, = reference_evaluate([wide], {"mi": values})
    wrapped = [(int(v) * int(v) * 200 + (1 << 31)) % (1 << 32) - (1 << 31) for v in values]
    assert got.reshape(-1).tolist() == wrapped == [200, 1800, 0]


def test_reference_frees_values_after_their_last_read():
    x = UOp.param("fx", (1000, 1000), dtypes.float64)
    chain = x
    for _ in range(8):
        chain = (chain + 1.0).sqrt()
    value = np.ones((1000, 1000))
    tracemalloc.start()
    reference_evaluate([chain.sum()], {"fx": value})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 3.5 * value.nbytes, peak  # two or three live arrays, not nine


# ----------------------------------------------------------------------------- check at scale

def _transformer(dim=32, hidden=64, tokens=6):
    """A one-block pre-norm transformer with scopes (bench/check_model.py's, small)."""
    params = []

    def param(name, shape):
        params.append(UOp.param(name, shape, dtypes.float32))
        return params[-1]
    x, y = param("x", (tokens, dim)), param("y", (tokens, dim))
    g1, wqkv, wo = param("ln1.weight", (dim,)), param("attn.qkv.weight", (dim, 3 * dim)), param("attn.proj", (dim, dim))
    g2, w1, w2 = param("ln2.weight", (dim,)), param("mlp.fc", (dim, hidden)), param("mlp.proj", (hidden, dim))
    b2 = param("mlp.proj.bias", (dim,))
    normed = scoped("ln1", lambda: x.layernorm() * g1)
    q, k, v = normed.linear(wqkv).chunk(3, dim=-1)
    h = x + scoped("attn", lambda: q.scaled_dot_product_attention(k, v, is_causal=True).linear(wo))
    h = h + scoped("mlp", lambda: (h.layernorm() * g2).linear(w1).gelu().linear(w2, b2))
    loss = ((h - y) * (h - y)).mean()
    return Graph({"loss": loss}, inputs=params)


WEIGHTS = ["ln1.weight", "attn.qkv.weight", "attn.proj", "ln2.weight", "mlp.fc", "mlp.proj", "mlp.proj.bias"]


def test_directions_alone_pass_a_right_gradient_and_catch_a_planted_wrong_rule(monkeypatch):
    """No element compared one by one (the budget of a large model): the two directions
    through every weight pass the right gradient, and catch d√x = dx/(2.2√x) in the
    layernorms; each target alone along the failed direction names the ones at fault."""
    monkeypatch.setattr(check_module, "PAIR_BUDGET", 0)
    graph = _transformer()
    good = check_gradients(graph, WEIGHTS, seed=1)
    assert good.passed and [t.samples for t in good.targets] == [0] * len(WEIGHTS)
    assert len(good.directions) == 2 and all(d.rel_error < 1e-6 for d in good.directions)
    assert good.evaluations == 5  # the point, then two directions of two evaluations
    assert "step: h = 6.06e-06 · max(1, |x|) (float64: eps^(1/3))" in good.lines()
    total = sum(int(np.prod(node.shape)) for node in graph.inputs if node.arg in WEIGHTS)
    assert good.limited.startswith(f"0 elements compared one by one, not the default's 112 (up to 16 a target; the "
                                   f"targets hold {total:,}), as one evaluation")

    rules = gradient_module.GRADIENT_RULES
    monkeypatch.setitem(rules, Ops.SQRT, lambda g, y, need: (gradient_module._div(
        g, gradient_module._mul(y, gradient_module._const(y, 2.2))),))
    bad = check_gradients(_transformer(), WEIGHTS, seed=1)
    assert not bad.passed and not bad.directions[0].passed
    failed = {t.name for t in bad.targets if not t.passed}
    # the layernorm's gradient flows into everything before the second norm ...
    assert {"ln1.weight", "attn.qkv.weight", "attn.proj"} <= failed
    # ... and not into what comes after it: the MLP's output weights are right
    assert "mlp.proj" not in failed and "mlp.proj.bias" not in failed
    named = next(t for t in bad.targets if t.name == "attn.qkv.weight")
    assert named.samples >= 4 and named.max_rel_error > 1e-3  # the worst element named
    assert bad.lines()[-1].startswith("FAILED: ln1.weight")


def test_the_benchmarks_transformer_is_the_size_the_issue_asks_for():
    """bench/check_model.py's model (what bench/bench_check.py times): about 900 forward
    nodes and about a million weights, with scopes; its default check compares few
    elements one by one and says so."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from check_model import transformer, weights
    finally:
        sys.path.pop(0)
    graph = transformer()
    count = sum(int(np.prod(graph.input(name).shape)) for name in weights(graph))
    assert 850 <= len(graph.nodes()) <= 950 and 900_000 <= count <= 1_100_000
    assert {n.meta.scope for n in graph.nodes() if n.meta and n.meta.scope} >= {"blocks.3/attn", "head", "loss"}
    from uopcli.tools.check import planned_evaluations
    assert planned_evaluations(graph, weights(graph), None, 2) < 80  # not 16 an element of 61 targets


def test_default_check_compares_elements_while_they_are_cheap():
    graph = _transformer()
    report = check_gradients(graph, WEIGHTS, seed=0)
    assert report.passed and report.limited == ""
    assert [t.samples for t in report.targets] == [16] * len(WEIGHTS)


def test_values_that_do_not_move_are_reused():
    """An element of the last weight costs the nodes after it, not the model: counted by
    the reference evaluator's walk."""
    from uopcli.tools.check_numeric import Loss
    from uopcli.tools.check_float64 import to_float64
    graph = to_float64(_transformer())
    feed = {n.arg: np.random.default_rng(0).standard_normal(n.shape) for n in graph.inputs}
    loss = Loss(list(graph.outputs.values()), [1.0], feed, ["mlp.proj.bias", "ln1.weight"])
    computed = []
    import uopcli.backends.reference as reference
    original = reference._value

    def counting(node, values):
        computed.append(node)
        return original(node, values)
    reference._value = counting
    try:
        moved = dict(feed)
        moved["mlp.proj.bias"] = feed["mlp.proj.bias"] + 1e-3
        late = loss({"mlp.proj.bias": moved["mlp.proj.bias"]})
        late_count = len(computed)
        computed.clear()
        full = reference_evaluate(list(graph.outputs.values()), moved)[0]
        full_count = len(computed)
    finally:
        reference._value = original
    assert late == pytest.approx(float(full), rel=1e-14)
    assert late_count < full_count / 5, (late_count, full_count)


# ----------------------------------------------------------------------------- inputs that make sense

@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    pytest.importorskip("onnx", reason="onnx is not installed: the CNN is read from samples/onnx")
    work = tmp_path_factory.mktemp("cnn")
    done = uopgrad("convert", SAMPLES / "cnn-dynamo18.onnx", "-o", work / "cnn.uop")
    assert done.returncode == 0, done.stderr
    return work


CNN_WEIGHTS = "conv1.weight,conv1.bias,bn1.weight,bn1.bias,conv2.weight,bn2.bias,fc.weight"


def test_cnn_with_batchnorm_notes_its_npz_and_passes_with_it(cnn):
    done = uopgrad("check", "cnn.uop", "--wrt", CNN_WEIGHTS, cwd=cnn)
    assert done.returncode == 1 and done.stdout == ""
    note, error = done.stderr.splitlines()
    assert note.startswith("uopgrad: cnn.npz beside cnn.uop holds values for inputs given none (conv1.weight")
    assert note.endswith("-i cnn.npz gives them theirs")
    assert error == ("uopgrad: error: cnn.uop: not filling bn1.running_mean, bn1.running_var, bn2.running_mean, "
                     "bn2.running_var (running statistics) with random values: the file says they are not weights "
                     "or data; -i cnn.npz gives the model's own")
    random = uopgrad("eval", "cnn.uop", "--random", cwd=cnn)
    assert random.returncode == 1 and "not filling bn1.running_mean" in random.stderr and random.stdout == ""
    checked = uopgrad("check", "cnn.uop", "--wrt", CNN_WEIGHTS, "-i", "cnn.npz", "--json", cwd=cnn)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stderr == ""  # given, so no note
    report = json.loads(checked.stdout)
    assert report["passed"] and report["forward_finite"] and len(report["directions"]) == 2
    assert [t["target"] for t in report["targets"]] == CNN_WEIGHTS.split(",")


def test_map_random_refuses_running_statistics_as_eval_random_does(cnn):
    """eval --map --random filled BatchNorm's running_var with noise (negative variances:
    every output nan, exit 0), where eval --random refuses; both now refuse, with the note
    that cnn.npz beside the file holds the values. Given them, --map sums what one
    evaluation per shard gives."""
    shards = cnn / "shards"
    shards.mkdir(exist_ok=True)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    for i, x in enumerate(xs):
        np.savez(shards / f"part-{i}.npz", x=x)
    for extra in ([], ["--dask", "local:1"]):
        refused = uopgrad("eval", "cnn.uop", "--map", "shards/*.npz", "--random", *extra, cwd=cnn)
        assert refused.returncode == 1 and refused.stdout == "", refused.stderr
        note, error = refused.stderr.splitlines()
        assert note.startswith("uopgrad: cnn.npz beside cnn.uop holds values for inputs given none (conv1.weight")
        assert error.startswith("uopgrad: error: cnn.uop: not filling bn1.running_mean, bn1.running_var, "
                                "bn2.running_mean, bn2.running_var (running statistics) with random values")
    missing = uopgrad("eval", "cnn.uop", "--map", "shards/*.npz", cwd=cnn)
    assert missing.returncode == 1 and missing.stderr.startswith("uopgrad: cnn.npz beside cnn.uop holds values")
    summed = uopgrad("eval", "cnn.uop", "--map", "shards/*.npz", "-i", "cnn.npz", "--random", "--json", cwd=cnn)
    assert summed.returncode == 0 and summed.stderr == "", summed.stderr
    each = []
    for i in range(3):
        one = uopgrad("eval", "cnn.uop", "-i", "cnn.npz", "-i", f"x=shards/part-{i}.npz:x", "--json", cwd=cnn)
        each.append(np.array(json.loads(one.stdout)["outputs"]["out"]["values"]))
    got = np.array(json.loads(summed.stdout)["outputs"]["out"]["values"])
    np.testing.assert_allclose(got, sum(each), rtol=1e-6)
    assert np.all(np.isfinite(got)) and np.abs(got).max() > 0


def test_a_running_statistics_tangent_is_a_direction_random_values_fill(cnn):
    """hvp --wrt bn1.running_var adds the input tangent_bn1.running_var, a direction: eval
    --random fills it (it was refused as a running statistic, by its name's ending), and
    still refuses the statistics themselves. (The net is piecewise linear in conv1.weight:
    its curvature is the cross term with 1/sqrt(running_var).)"""
    done = uopgrad("hvp", "cnn.uop", "--wrt", "bn1.running_var,conv1.weight", "--cotangent", "input", "-o", "h.uop",
                   cwd=cnn)
    assert done.returncode == 0, done.stderr
    refused = uopgrad("eval", "h.uop", "--random", cwd=cnn)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "not filling bn1.running_mean, bn1.running_var, bn2.running_mean, bn2.running_var (" in refused.stderr
    filled = uopgrad("eval", "h.uop", "--random", "-i", "cnn.npz", "--json", cwd=cnn)
    assert filled.returncode == 0, filled.stderr
    outputs = json.loads(filled.stdout)["outputs"]
    assert list(outputs) == ["hvp_bn1.running_var", "hvp_conv1.weight"]
    assert all(np.isfinite(outputs[n]["values"]).all() for n in outputs)
    assert np.abs(outputs["hvp_conv1.weight"]["values"]).max() > 0


def test_eval_notes_the_npz_once_and_only_when_it_helps(cnn):
    done = uopgrad("eval", "cnn.uop", "-i", "x=0.5", cwd=cnn)
    assert done.returncode == 1 and done.stderr.count("cnn.npz beside cnn.uop") == 1
    ok = uopgrad("eval", "cnn.uop", "-i", "x=0.5", "-i", "cnn.npz", "--json", cwd=cnn)
    assert ok.returncode == 0 and ok.stderr == ""


# ----------------------------------------------------------------------------- --debug-nans

def test_debug_nans_on_sigmoid_gradient_in_float16_written_literally(tmp_path):
    x = UOp.param("x", (3,), dtypes.float16)
    y = scoped("act", lambda: x.sigmoid())
    (tmp_path / "sig.uop").write_bytes(uopcli.save(Graph({"y": y.sum()}, inputs=[x])))
    assert uopgrad("diff", "sig.uop", "--wrt", "x", "-o", "grad.uop", cwd=tmp_path).returncode == 0
    np.save(tmp_path / "x.npy", np.array([-100, 0, 2], np.float16))
    done = uopgrad("eval", "grad.uop", "-i", "x=x.npy", "--literal", "--debug-nans", cwd=tmp_path)
    assert done.returncode == 1 and "nan" in done.stdout  # the values, then why
    lines = done.stderr.splitlines()
    printed = uopgrad("print", "grad.uop", cwd=tmp_path).stdout
    head = lines[0]
    assert head.startswith("uopgrad: first nan: %") and " MUL float16[3], ∇ sigmoid (differentiates %" in head
    index = head.split("%")[1].split()[0]
    assert f"%{index} = MUL float16[3]" in printed
    assert "in scope act" in head and "1 nan among 3 elements (first made at [0])" in head
    assert any("depends on: input x[0] = -100.0" in line for line in lines)
    assert "  the inf it is made from:" in lines and any("first inf:" in s and "EXP2" in s and ", sigmoid, in scope act"
                                                         in s for s in lines)
    # the forward node it differentiates is sigmoid's, and a forward one
    twin = head.split("differentiates ")[1].split(")")[0]
    assert f"{twin.split()[0]} = {twin.split()[1]} float16[3]" in printed
    assert "sigmoid" in printed.split(f"{twin.split()[0]} = ")[1].splitlines()[0]
    # simplified as tinygrad runs it, the gradient at -100 is finite: nothing to hunt, exit 0
    fine = uopgrad("eval", "grad.uop", "-i", "x=x.npy", "--debug-nans", cwd=tmp_path)
    assert fine.returncode == 0 and fine.stderr == ""
    # and through stdin
    piped = subprocess.run(f"{UOPGRAD} diff sig.uop --wrt x | {UOPGRAD} eval - -i x=x.npy --literal --debug-nans",
                           shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert piped.returncode == 1 and piped.stderr.splitlines()[0] == head
    # --json: the finding is in the document too, with the exit status; -o still gets the values computed
    done = uopgrad("eval", "grad.uop", "-i", "x=x.npy", "--literal", "--debug-nans", "--json", cwd=tmp_path)
    document = json.loads(done.stdout)
    assert done.returncode == 1 and document["exit_status"] == 1 and document["outputs"]["grad_x"]["values"][0] == "nan"
    found = document["not_finite"]
    assert (found["kind"], found["node"]) == ("nan", f"%{index} MUL float16[3]") and found["origin"]["kind"] == "inf"
    assert head.endswith(found["made"]) and found["sources"] and found["elements"]
    fine = json.loads(uopgrad("eval", "grad.uop", "-i", "x=x.npy", "--debug-nans", "--json", cwd=tmp_path).stdout)
    assert "not_finite" not in fine and "exit_status" not in fine
    done = uopgrad("eval", "grad.uop", "-i", "x=x.npy", "--literal", "--debug-nans", "-o", "out.npz", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.splitlines()[0] == head
    assert np.isnan(np.load(tmp_path / "out.npz")["grad_x"][0])


def test_debug_nans_on_a_log_of_an_underflow():
    x = UOp.param("x", (4,))
    out = scoped("head/prob", lambda: (x * 2.0).exp()).log().sum()   # exp(-200) underflows in float32
    graph = Graph({"out": out}, inputs=[x])
    finding = hunt_nans(graph, {"x": np.array([1.0, -60.0, 0.5, -0.25], np.float32)})
    assert finding.kind == "inf"
    numbered = {node: i for i, node in enumerate(graph.nodes())}
    log2 = next(n for n in graph.nodes() if n.op == Ops.LOG2)
    assert finding.node == f"%{numbered[log2]} LOG2 float32[4]"
    assert finding.meta.startswith("log")
    assert finding.made.startswith("1 inf among 4 elements (first made at [1]), from finite sources")
    assert finding.elements == ["its element [1] depends on: input x[1] = -60.0"]
    assert finding.sources[0].endswith("EXP2 float32[4]: min 0 max 7.38906, 0 of 4 not finite")
    # the value it takes the log of comes from the scope head/prob, where the underflow happened
    assert hunt_nans(graph, {"x": np.zeros(4, np.float32)}) is None


def test_debug_nans_on_an_onnx_layernorm_of_a_constant_row(tmp_path):
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=0.0,
                            name="/encoder/norm/LayerNormalization")
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "scale"),
                               numpy_helper.from_array(np.zeros(4, np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "ln.onnx")
    np.save(tmp_path / "x.npy", np.array([[1, 2, 3, 4], [5, 5, 5, 5]], np.float32))  # row 1: variance 0
    done = uopgrad("eval", "ln.onnx", "-i", "x=x.npy", "--debug-nans", cwd=tmp_path)
    assert done.returncode == 1
    head = done.stderr.splitlines()[0]
    assert head.startswith("uopgrad: first nan: %") and "LayerNormalization, in scope encoder/norm" in head
    assert "4 nans among 8 elements (first made at [1,0])" in head
    assert "input x[1,0] = 5.0" in done.stderr and "input x[0," not in done.stderr
    assert "the inf it is made from:" in done.stderr  # 0 · (1/√0)
    finite = uopgrad("eval", "ln.onnx", "-i", "x=1", "-i", "x=x.npy", "--debug-nans", cwd=tmp_path)
    assert finite.returncode == 1  # -i twice is an error, not a hunt
    np.save(tmp_path / "ok.npy", np.arange(8, dtype=np.float32).reshape(2, 4))
    fine = uopgrad("eval", "ln.onnx", "-i", "x=ok.npy", "--debug-nans", cwd=tmp_path)
    assert fine.returncode == 0 and fine.stderr == ""


def test_check_says_first_that_the_forward_is_not_finite_and_names_a_gradients_nan():
    x = UOp.param("x", (3,))
    graph = Graph({"loss": scoped("model", lambda: x.log()).sum()}, inputs=[x])
    report = check_gradients(graph, ["x"], inputs={"x": np.array([1.0, -1.0, 2.0], np.float32)})
    assert not report.passed and not report.forward_finite
    assert report.lines()[0].startswith("the forward value is not finite at these inputs (L = nan)")
    assert "LOG2 float32[3], log, in scope model" in report.lines()[1]
    # a finite forward whose gradient is not: sqrt at 0 (d√x = 1/(2√x) = inf)
    root = Graph({"loss": scoped("model", lambda: x.sqrt()).sum()}, inputs=[x])
    report = check_gradients(root, ["x"], inputs={"x": np.array([1.0, 0.0, 4.0], np.float32)}, samples=3)
    assert report.forward_finite and not report.passed
    text = "\n".join(report.lines())
    assert "note: the analytic gradient of x is not finite" in text
    assert "first inf: %7 FDIV float32[3], backward, in scope model: 1 inf among 3 elements (first made at [1])" in text
    assert "its element [1] depends on: input x[1] = 0.0" in text


def test_debug_nans_names_an_input_that_holds_the_nan():
    x = UOp.param("x", (3,))
    graph = Graph({"out": (x * 2.0).exp().sum()}, inputs=[x])
    finding = hunt_nans(graph, {"x": np.array([1.0, np.nan, 0.5], np.float32)})
    assert finding.kind == "nan" and finding.node == "%0 PARAM float32[3]"
    assert finding.made == "input x holds 1 nan among 3 elements: given, not made"
