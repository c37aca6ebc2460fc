"""Whole models exported from PyTorch (samples/onnx, made by samples/onnx/export_torch.py
with torch.onnx's legacy and dynamo exporters): imported, their forward values equal
PyTorch's and onnxruntime's, their gradients (`uopgrad diff` + `eval`, and the library)
equal PyTorch's autograd gradients stored beside them, and `uopgrad check` passes. Then
bad input: refusals in one line naming the file and the node, exit 1, nothing written;
fuzzed files never escape as a traceback."""

from __future__ import annotations

import os
import pathlib
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import helper  # noqa: E402

from uopcli import FormatError, UOpError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model, load_onnx  # noqa: E402

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples" / "onnx"
MODELS = sorted(p.name for p in SAMPLES.glob("*.onnx"))
FAMILIES = ("mlp", "cnn", "bert", "gpt2", "lstm")


def stored(name: str):
    return dict(np.load(SAMPLES / name.replace(".onnx", ".npz")))


def feeds_of(graph, reference: dict) -> dict:
    return {n: reference[n] for n in graph.input_names if n in reference}


def assert_close(got, want, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def test_the_samples_cover_every_model_and_both_exporters():
    assert len(MODELS) == 20
    for family in FAMILIES:
        for exporter in ("legacy", "dynamo"):
            assert any(m.startswith(f"{family}-{exporter}") for m in MODELS), (family, exporter)
    assert all((SAMPLES / m).stat().st_size < 1 << 20 for m in MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_forward_and_gradients_equal_pytorch(name):
    graph, weights = load_onnx(str(SAMPLES / name))
    reference = stored(name)
    feeds = feeds_of(graph, reference)
    values = {**weights, **feeds}
    assert_close(evaluate_graph(graph, values)["out"], reference["out"], f"{name}: forward against PyTorch")
    session = ort.InferenceSession(str(SAMPLES / name), providers=["CPUExecutionProvider"])
    assert_close(evaluate_graph(graph, values)["out"], session.run(None, feeds)[0], f"{name}: against onnxruntime")
    targets = [n[len("grad_"):] for n in reference if n.startswith("grad_")]
    assert len(targets) >= 3 and set(targets) <= set(graph.input_names)
    grad, _ = differentiate(graph, targets, cotangent="ones")
    result = evaluate_graph(grad, values)
    for target in targets:
        assert_close(result[f"grad_{target}"], reference[f"grad_{target}"], f"{name}: d out / d {target}")


def uopgrad(*args, cwd=None):
    return subprocess.run(["uopgrad", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("name", ["mlp-legacy14.onnx", "cnn-dynamo18.onnx", "bert-legacy17.onnx",
                                  "gpt2-dynamo20.onnx", "lstm-legacy14.onnx"])
def test_the_cli_differentiates_imported_models_as_pytorch_does(name, tmp_path):
    reference = stored(name)
    targets = [n[len("grad_"):] for n in reference if n.startswith("grad_")]
    data = [n for n in ("x", "input_ids") if n in reference]
    np.save(tmp_path / "data.npy", reference[data[0]])
    run = uopgrad("diff", SAMPLES / name, "--wrt", ",".join(targets), "--cotangent", "ones", "-o", tmp_path / "grad.uop")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "grad.npz").is_file()  # the model's weights, beside the gradient graph
    run = uopgrad("eval", tmp_path / "grad.uop", "-i", tmp_path / "grad.npz", "-i", f"{data[0]}={tmp_path / 'data.npy'}",
                  "-o", tmp_path / "grads.npz")
    assert run.returncode == 0, run.stderr
    grads = np.load(tmp_path / "grads.npz")
    for target in targets:
        assert_close(grads[f"grad_{target}"], reference[f"grad_{target}"], f"{name}: uopgrad's d out / d {target}")
    # the same gradient as ONNX carries the model's weights: onnxruntime runs it on the data alone
    run = uopgrad("diff", SAMPLES / name, "--wrt", ",".join(targets), "--cotangent", "ones", "-o", tmp_path / "grad.onnx")
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "grad.onnx.npz").exists()
    onnx.checker.check_model(onnx.load(str(tmp_path / "grad.onnx")), full_check=True)
    session = ort.InferenceSession(str(tmp_path / "grad.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == data
    in_ort = dict(zip([o.name for o in session.get_outputs()], session.run(None, {data[0]: reference[data[0]]})))
    assert list(in_ort) == [f"grad_{target}" for target in targets]
    for target in targets:
        assert_close(in_ort[f"grad_{target}"], reference[f"grad_{target}"], f"{name}: onnxruntime's d out / d {target}")
        assert_close(in_ort[f"grad_{target}"], grads[f"grad_{target}"], f"{name}: onnxruntime against uopgrad eval")


@pytest.mark.parametrize("name, wrt", [("mlp-dynamo18.onnx", "x,fc1.weight,fc2.bias"),
                                       ("cnn-legacy14.onnx", "x,conv2.weight,bn1.weight"),
                                       ("bert-dynamo18.onnx", "word_embeddings.weight,encoder.1.norm1.weight"),
                                       ("gpt2-legacy17.onnx", "x,attn.query.weight,c_fc.bias"),
                                       ("lstm-dynamo20.onnx", "x,lstm.weight_hh_l0")])
def test_uopgrad_check_passes_on_the_models_own_weights(name, wrt):
    run = uopgrad("check", SAMPLES / name, "--wrt", wrt, "--samples", "4")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.rstrip().endswith("match finite differences (float64)")


def test_eval_of_an_onnx_file_uses_its_own_weights(tmp_path):
    reference = stored("gpt2-legacy14.onnx")
    np.save(tmp_path / "x.npy", reference["x"])
    run = uopgrad("eval", SAMPLES / "gpt2-legacy14.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    assert_close(np.load(tmp_path / "out.npz")["out"], reference["out"], "eval gpt2-legacy14.onnx")
    # a weight given with -i wins over the file's
    run = uopgrad("eval", SAMPLES / "mlp-legacy14.onnx", "-i", "x=0", "-i", "fc2.weight=0", "-i", "fc2.bias=1", "--json")
    assert run.returncode == 0 and '"values": [[1.0, 1.0, 1.0, 1.0]' in run.stdout.replace("\n", ""), run.stdout


def test_convert_writes_the_graph_and_its_weights_beside(tmp_path):
    run = uopgrad("convert", SAMPLES / "cnn-legacy17.onnx", "-o", tmp_path / "model.uop")
    assert run.returncode == 0, run.stderr
    weights = np.load(tmp_path / "model.npz")
    assert "conv1.weight" in weights.files and "bn1.running_var" in weights.files and "x" not in weights.files
    reference = stored("cnn-legacy17.onnx")
    np.save(tmp_path / "x.npy", reference["x"])
    run = uopgrad("eval", tmp_path / "model.uop", "-i", tmp_path / "model.npz", "-i", f"x={tmp_path / 'x.npy'}",
                  "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    assert_close(np.load(tmp_path / "out.npz")["out"], reference["out"], "converted cnn")
    listing = uopgrad("print", tmp_path / "model.uop").stdout
    assert "# Conv" in listing or "Conv" in listing


def test_simplify_keeps_an_onnx_models_weights_and_writes_onnx(tmp_path):
    """simplify puts an ONNX model's weights where diff does: beside a .uop OUT, inside an
    .onnx OUT (which onnxruntime runs to the model's values). It once wrote the .uop alone,
    and refused an .onnx OUT naming the input file."""
    reference = stored("cnn-legacy17.onnx")
    run = uopgrad("simplify", SAMPLES / "cnn-legacy17.onnx", "-o", tmp_path / "small.uop")
    assert run.returncode == 0, run.stderr
    np.save(tmp_path / "x.npy", reference["x"])
    run = uopgrad("eval", tmp_path / "small.uop", "-i", tmp_path / "small.npz", "-i", f"x={tmp_path / 'x.npy'}",
                  "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    assert_close(np.load(tmp_path / "out.npz")["out"], reference["out"], "simplified cnn")
    run = uopgrad("simplify", SAMPLES / "cnn-legacy17.onnx", "-o", tmp_path / "small.onnx", "--opset", "18")
    assert run.returncode == 0, run.stderr
    model = onnx.load(tmp_path / "small.onnx")
    assert model.opset_import[0].version == 18 and len(model.graph.node) > 0
    session = ort.InferenceSession(str(tmp_path / "small.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]  # the weights are initializers
    assert_close(session.run(["out"], {"x": reference["x"]})[0], reference["out"], "simplified cnn in onnxruntime")


def test_a_nodes_scope_from_dynamos_nested_names_or_else_from_its_legacy_name():
    from uopcli.interop.onnx.importer import _scope

    def node(name, scopes=None):
        made = helper.make_node("MatMul", ["a", "b"], ["c"], name=name)
        if scopes is not None:
            made.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=scopes)
        return made
    # each dynamo scope is relative to the one before; the last part is the op
    assert _scope(node("x", "['', 'encoder.0', 'encoder.0.attention', 'matmul']")) == "encoder.0/attention"
    assert _scope(node("/encoder/layer.0/MatMul", "['', 'enc")) == "encoder/layer.0"  # unreadable: the name's
    assert _scope(node("/MatMul")) is None and _scope(node("MatMul")) is None


def test_the_graph_says_which_model_it_was_imported_from():
    """By the sha256 of the model's bytes (what sha256sum prints), not by its file's name: a
    renamed copy gives the same graph (it was meta.imported_from, the name)."""
    import hashlib
    graph, _ = load_onnx(str(SAMPLES / "mlp-legacy14.onnx"))
    digest = hashlib.sha256((SAMPLES / "mlp-legacy14.onnx").read_bytes()).hexdigest()
    assert graph.meta == {"onnx.opset": "14", "onnx.producer": "pytorch 2.13.0", "onnx.sha256": digest,
                          "onnx.torch_exporter": "legacy"}


def test_module_paths_become_the_scope_of_the_nodes():
    for name in ("gpt2-legacy17.onnx", "gpt2-dynamo18.onnx"):
        graph, _ = load_onnx(str(SAMPLES / name))
        metas = [n.meta for n in graph.nodes() if n.meta is not None]
        scopes = {m.scope for m in metas}
        assert {"attn/query", "ln_1", "c_fc"} <= scopes, (name, sorted(s for s in scopes if s))
        assert any(m.name == "LayerNormalization" for m in metas)


# ----------------------------------------------------------------------------- bad input


def one_line_refusal(run, *words):
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uopgrad: error: "), run.stderr
    assert "Traceback" not in run.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def save(model, path) -> pathlib.Path:
    onnx.save(model, str(path))
    return pathlib.Path(path)


def mlp_model():
    return onnx.load(str(SAMPLES / "mlp-legacy14.onnx"))


def test_truncated_and_foreign_files_are_refused(tmp_path):
    whole = (SAMPLES / "mlp-legacy14.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "text.onnx").write_bytes(b"this is not a model\n")
    (tmp_path / "empty.onnx").write_bytes(b"")
    run = uopgrad("convert", tmp_path / "cut.onnx", "-o", tmp_path / "out.uop")
    one_line_refusal(run, "cut.onnx", "not an ONNX model")
    assert not (tmp_path / "out.uop").exists() and not (tmp_path / "out.npz").exists()
    for name in ("text.onnx", "empty.onnx"):  # the same refusal, without a process each
        with pytest.raises(FormatError, match=rf"^{tmp_path / name}: not an ONNX model"):
            load_onnx(str(tmp_path / name))


def test_an_unsupported_op_or_attribute_is_refused_naming_the_node(tmp_path):
    model = mlp_model()
    model.graph.node[1].op_type = "StringNormalizer"
    run = uopgrad("convert", save(model, tmp_path / "op.onnx"), "-o", tmp_path / "out.uop")
    one_line_refusal(run, "op.onnx", model.graph.node[1].name, "(StringNormalizer)", "not supported")
    model = mlp_model()
    model.graph.node[0].attribute.append(helper.make_attribute("colour", 3))
    run = uopgrad("diff", save(model, tmp_path / "attr.onnx"), "--wrt", "x", "--cotangent", "ones", "-o", tmp_path / "g.uop")
    one_line_refusal(run, "attr.onnx", model.graph.node[0].name, "(Gemm)", "attribute 'colour'")
    model = mlp_model()
    assert not list(tmp_path.glob("out.*")) and not list(tmp_path.glob("g.*"))


def test_a_symbolic_dimension_needs_a_shape(tmp_path):
    model = mlp_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = save(model, tmp_path / "dynamic.onnx")
    run = uopgrad("eval", path, "-i", "x=1")
    one_line_refusal(run, "dynamic.onnx", "input with a symbolic dimension: x [batch, 8]: give its size with "
                     "--shape batch=<size> (or --shape x=<dims>)")
    run = uopgrad("eval", path, "--shape", "x=5,8", "-i", "x=1", "--json")
    assert run.returncode == 0 and '"shape": [5, 4]' in run.stdout, run.stderr
    run = uopgrad("eval", path, "--shape", "x=5,9", "-i", "x=1")
    one_line_refusal(run, "dynamic.onnx", "does not fit")


def test_external_data_is_read_and_its_absence_refused(tmp_path):
    model = mlp_model()
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").is_file()
    graph, weights = load_onnx(str(tmp_path / "ext.onnx"))
    inline, inline_weights = load_onnx(str(SAMPLES / "mlp-legacy14.onnx"))
    assert all(np.array_equal(weights[k], inline_weights[k]) for k in inline_weights)
    (tmp_path / "ext.onnx.data").unlink()
    run = uopgrad("convert", tmp_path / "ext.onnx", "-o", tmp_path / "out.uop")
    one_line_refusal(run, "ext.onnx", "ext.onnx.data", "missing")
    assert not (tmp_path / "out.uop").exists()


def test_a_value_that_must_be_known_at_import_is_refused_when_computed():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    shape = helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [2])
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="/reshape")]
    graph = helper.make_graph(nodes, "g", [x, shape], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    with pytest.raises(FormatError, match=r"node '/reshape' \(Reshape\): shape \(input 1\) must be known"):
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), source="m.onnx")


def test_fuzzed_files_never_escape_as_a_traceback(tmp_path):
    """Mutated bytes and mutated fields: every outcome is a graph or a UOpError (which the
    CLI prints as one line)."""
    rng = np.random.default_rng(7)
    pristine = (SAMPLES / "gpt2-legacy17.onnx").read_bytes()
    outcomes = {"imported": 0, "refused": 0}
    for trial in range(80):
        data = bytearray(pristine)
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        path = tmp_path / f"bytes{trial}.onnx"
        path.write_bytes(bytes(data))
        outcomes[_import_outcome(path)] += 1
    model = onnx.load(str(SAMPLES / "lstm-legacy14.onnx"))
    for trial in range(60):
        mutated = onnx.ModelProto()
        mutated.CopyFrom(model)
        _mutate_a_field(mutated, rng)
        path = tmp_path / f"field{trial}.onnx"
        path.write_bytes(mutated.SerializeToString())
        outcomes[_import_outcome(path)] += 1
    assert outcomes["refused"] > 20 and outcomes["imported"] > 5, outcomes
    run = uopgrad("info", tmp_path / "bytes0.onnx")
    assert "Traceback" not in run.stderr and run.returncode in (0, 1)


def _import_outcome(path) -> str:
    try:
        load_onnx(str(path))
    except UOpError:
        return "refused"
    return "imported"


def _mutate_a_field(model, rng) -> None:
    nodes = model.graph.node
    node = nodes[int(rng.integers(0, len(nodes)))]
    choice = int(rng.integers(0, 6))
    if choice == 0 and node.attribute:
        attribute = node.attribute[int(rng.integers(0, len(node.attribute)))]
        attribute.i = int(rng.integers(-5, 50))
        del attribute.ints[:]
        attribute.ints.extend(int(v) for v in rng.integers(-3, 9, int(rng.integers(0, 4))))
    elif choice == 1 and node.input:
        node.input[int(rng.integers(0, len(node.input)))] = ["", "x", "nowhere", node.output[0]][int(rng.integers(0, 4))]
    elif choice == 2:
        tensor = model.graph.initializer[int(rng.integers(0, len(model.graph.initializer)))]
        tensor.dims[0] = int(rng.integers(0, 20))
    elif choice == 3:
        tensor = model.graph.initializer[int(rng.integers(0, len(model.graph.initializer)))]
        tensor.data_type = int(rng.integers(0, 25))
    elif choice == 4:
        dim = model.graph.input[0].type.tensor_type.shape.dim
        dim[int(rng.integers(0, len(dim)))].dim_value = int(rng.integers(0, 9))
    else:
        node.op_type = ["Add", "Relu", "Concat", "Gather", "Unsqueeze", "Slice"][int(rng.integers(0, 6))]


def test_importing_without_onnx_for_a_uop_file_never_imports_onnx():
    code = ("import sys, uopcli, uopcli.cli; from click.testing import CliRunner; "
            "r = CliRunner().invoke(uopcli.cli.main, ['info', sys.argv[1]]); "
            "assert r.exit_code == 0, r.output; assert 'onnx' not in sys.modules, 'onnx imported'")
    sample = SAMPLES.parent / "mlp.uop"
    run = subprocess.run([os.sys.executable, "-c", code, str(sample)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_the_onnx_readme_shows_what_its_commands_print_today(tmp_path):
    """samples/onnx/README.md's transcript is what the commands print now (run again by
    tools/refresh_readme.py on a copy; numbers may round as another CPU does)."""
    copy = tmp_path / "README.md"
    copy.write_text((SAMPLES / "README.md").read_text())
    root = SAMPLES.parent.parent
    run = subprocess.run([os.sys.executable, str(root / "tools" / "refresh_readme.py"), str(copy)],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and "warning" not in run.stderr, run.stderr
    assert run.stdout.strip() == f"{copy}: unchanged", "run python tools/refresh_readme.py samples/onnx/README.md"
