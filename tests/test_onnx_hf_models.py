"""HuggingFace transformers models as users export them: tiny randomly initialised BERT,
GPT-2, Llama (RoPE, RMSNorm, SiLU, grouped-query attention), Qwen2, Mistral (sliding
window), T5 (relative position bias), ViT, BART, Whisper and CLIP's text tower, exported by
torch.onnx's TorchScript exporter (dynamo=False, opset 17) and by its default dynamo
exporter, each with its defaults otherwise (constant folding on: weights arrive transposed
and renamed, `onnx::MatMul_12`, `val_42`). Each import is evaluated and differentiated
(Σ out·c over every output, c seeded random) with respect to every weight and float input,
against torch's forward and autograd, and its values against onnxruntime's where
onnxruntime has the float64 kernels (it has no float64 Erf or Gelu).

Float64 throughout but for two float32 checks against onnxruntime. Tolerances, relative to
the largest magnitude (a gradient's, at least 1e-6 of the largest of all gradients: a
key's bias has a gradient that is 0 but for roundings, softmax being shift invariant):
- 1e-10 for values and 1e-9 for gradients where the model is float64 throughout;
- 1e-6 and 3e-6 for Llama, Qwen2, Mistral and T5, whose modelling code computes RMSNorm's
  mean square and RoPE's angles in float32 even in a float64 model (torch, onnxruntime and
  we round those float32 sums differently);
- 1e-8 and 1e-7 for the dynamo exports: the exporter stores scaled_dot_product_attention's
  scale √(1/√d) rounded through float32 (0.5946035524 for d = 8, not 0.5946035575).

Decoders see a padding mask: left padding in the TorchScript exports (a causal row that
only sees padding: the exporter writes Where(IsNaN(softmax), 0, softmax) for it, whose
gradient was nan), right padding in the dynamo ones (whose translation gives such a row a
uniform softmax where torch gives 0, the exporter's own difference). Token ids avoid the
padding id (torch leaves a padding_idx row's gradient 0, which is not the derivative).

Parameters the exporter folds into constants (position embeddings read at fixed
positions, T5's relative bias, Whisper's frozen positions) have no input to differentiate
with respect to; every other parameter is compared, tied ones (BART's shared embedding,
GPT-2's lm_head) as the sum over their copies."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: the HF model tests skip")
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the HF model tests skip")
tf = pytest.importorskip("transformers", reason="transformers is not installed (make test installs "
                         "transformers==5.23.0, the [torch-test] extra): the HF model tests skip")

from uopcli import evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import load_onnx  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

VOCAB, BATCH, SEQ = 48, 2, 8


def _tokens(gen, shape=(BATCH, SEQ)):
    return torch.randint(3, VOCAB, shape, generator=gen)  # 0-2: padding, bos, eos ids


def _mask(left: bool):
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if left:
        mask[1, :3] = 0
    else:
        mask[1, 6:] = 0
    return mask


def _decoder(config_class, model_class, **extra):
    def build(gen, left):
        config = config_class(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                              use_cache=False, pad_token_id=0, **extra)
        return model_class(config), {"input_ids": _tokens(gen), "attention_mask": _mask(left)}
    return build


def _bert(gen, left):
    config = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=32)
    token_types = torch.zeros(BATCH, SEQ, dtype=torch.long)
    token_types[:, 5:] = 1
    return tf.BertModel(config), {"input_ids": _tokens(gen), "attention_mask": _mask(False),
                                  "token_type_ids": token_types}


def _gpt2(gen, left):
    config = tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False)
    return tf.GPT2LMHeadModel(config), {"input_ids": _tokens(gen), "attention_mask": _mask(left)}


def _t5(gen, left):
    config = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                         relative_attention_num_buckets=8, relative_attention_max_distance=16, use_cache=False,
                         # the TorchScript exporter has no rule for sdpa with T5's float bias ("Unsupported
                         # type for attn_mask"): eager attention there, as users of that exporter must
                         attn_implementation="eager" if left else "sdpa")
    return tf.T5Model(config), {"input_ids": _tokens(gen), "decoder_input_ids": _tokens(gen, (BATCH, 5))}


def _vit(gen, left):
    config = tf.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64)
    return tf.ViTModel(config), {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=gen)}


def _bart(gen, left):
    config = tf.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           max_position_embeddings=32, use_cache=False)
    return tf.BartModel(config), {"input_ids": _tokens(gen), "attention_mask": _mask(False),
                                  "decoder_input_ids": _tokens(gen, (BATCH, 5))}


def _whisper(gen, left):
    config = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1,
                              encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                              decoder_ffn_dim=64, max_source_positions=8, max_target_positions=16, use_cache=False,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    # decoder_attention_mask given: without it the decoder's mask code calls torch.diff,
    # which the TorchScript exporter has no rule for
    return tf.WhisperModel(config), {"input_features": torch.randn(1, 8, 16, generator=gen),
                                     "decoder_input_ids": _tokens(gen, (1, 5)),
                                     "decoder_attention_mask": torch.ones(1, 5, dtype=torch.long)}


def _clip_text(gen, left):
    config = tf.CLIPTextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=16, eos_token_id=2)
    ids = _tokens(gen)
    ids[:, -1] = 2  # the pooled output is read at the end-of-text token (ArgMax, then a gather)
    return tf.CLIPTextModel(config), {"input_ids": ids, "attention_mask": _mask(False)}


MODELS = {
    "bert": _bert, "gpt2": _gpt2, "llama": _decoder(tf.LlamaConfig, tf.LlamaForCausalLM),
    "qwen2": _decoder(tf.Qwen2Config, tf.Qwen2ForCausalLM),
    "mistral": _decoder(tf.MistralConfig, tf.MistralForCausalLM, sliding_window=4),
    "t5": _t5, "vit": _vit, "bart": _bart, "whisper": _whisper, "clip_text": _clip_text,
}
FLOAT32_INSIDE = {"llama", "qwen2", "mistral", "t5"}
FOLDABLE = ("position_embedding", "embed_positions", "relative_attention_bias", "wpe", "cls_token")

VARIANTS = [*((name, "torchscript") for name in MODELS),
            *((name, "dynamo") for name in ("bert", "gpt2", "llama", "t5"))]  # 2-6 s each: the others' ops as these


class Outputs(torch.nn.Module):
    """The model called with named inputs, its tensor outputs as a tuple (return_dict=False:
    no output classes; use_cache=False: no past key values)."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        return tuple(o for o in out if isinstance(o, torch.Tensor))


class Exported:
    def __init__(self, name, exporter, dtype, folder):
        gen = torch.Generator().manual_seed(11)
        torch.manual_seed(0)
        model, inputs = MODELS[name](gen, exporter == "torchscript")
        with torch.no_grad():  # every weight distinct and no bias 0: the dynamo exporter merges equal ones
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        model = model.to(dtype).eval()
        self.inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        self.module = Outputs(model, list(self.inputs)).eval()
        self.outputs = [f"out{i}" for i in range(len(self.module(*self.inputs.values())))]
        self.path = str(folder / f"{name}-{exporter}-{str(dtype)[6:]}.onnx")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(self.module, tuple(self.inputs.values()), self.path, input_names=list(self.inputs),
                              output_names=self.outputs, dynamo=exporter == "dynamo",
                              **({} if exporter == "dynamo" else {"opset_version": 17}))
        self.graph, self.weights = load_onnx(self.path)
        self.feeds = {**self.weights, **{k: v.numpy() for k, v in self.inputs.items()}}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder, made = tmp_path_factory.mktemp("hf"), {}

    def get(name, exporter, dtype=torch.float64) -> Exported:
        if exporter == "dynamo":
            pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript (and onnx-ir): "
                                "its exports skip")
        if (name, exporter, dtype) not in made:
            made[name, exporter, dtype] = Exported(name, exporter, dtype, folder)
        return made[name, exporter, dtype]
    return get


def _relative(ours, theirs, floor=0.0) -> float:
    """max |ours - theirs| over the larger of max |theirs| and `floor`; a nan anywhere is an
    infinite error (max() over the errors would skip a nan that is not first)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    error = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), floor, 1e-300))
    return error if error == error else float("inf")


def _parameter_of(weights: dict, parameters: dict) -> dict:
    """Each imported weight's torch parameter and whether it is that parameter transposed
    (the exporters' constant folding stores Linear weights transposed, renamed): by name
    where the values agree, else by equal values."""
    found = {}
    for name, array in weights.items():
        for pname, p in ([(name, parameters[name])] if name in parameters else []) + list(parameters.items()):
            value = p.detach().numpy()
            if value.shape == array.shape and np.array_equal(value, array):
                found[name] = (pname, False)
                break
            if value.ndim == 2 and value.T.shape == array.shape and np.array_equal(value.T, array):
                found[name] = (pname, True)
                break
    return found


@pytest.mark.parametrize("name, exporter", VARIANTS, ids=[f"{n}-{e}" for n, e in VARIANTS])
def test_values_and_gradients_equal_torch(exported, name, exporter):
    model = exported(name, exporter)
    value_tol, grad_tol = (1e-6, 3e-6) if name in FLOAT32_INSIDE else (1e-8, 1e-7) if exporter == "dynamo" \
        else (1e-10, 1e-9)
    ours = evaluate_graph(model.graph, model.feeds)
    xs = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in model.inputs.items()}
    truth = model.module(*xs.values())
    for out, want in zip(model.outputs, truth):
        assert _relative(ours[out], want.detach().numpy()) < value_tol, out

    try:
        session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    except Exception as error:  # no float64 Erf (BERT, ViT, BART's GELU), no float64 Gelu-20
        assert "NOT_IMPLEMENTED" in str(error) and name in {"bert", "vit", "bart", "whisper"}, error
    else:
        theirs = session.run(model.outputs, {i.name: model.feeds[i.name] for i in session.get_inputs()})
        for out, want in zip(model.outputs, theirs):
            assert _relative(ours[out], want) < value_tol, f"{out} against onnxruntime"

    gen = torch.Generator().manual_seed(5)
    cotangents = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in truth]
    sum((t * c).sum() for t, c in zip(truth, cotangents)).backward()
    parameters = {n: p for n, p in model.module.named_parameters() if p.requires_grad}
    weights = {n: model.weights[n] for n in model.graph.input_names if n in model.weights}
    owner = _parameter_of(weights, parameters)
    unreached = set(parameters) - {p for p, _ in owner.values()}
    assert all(any(part in p for part in FOLDABLE) for p in unreached), f"parameters not imported: {unreached}"
    floats = [n for n, x in xs.items() if x.is_floating_point()]
    grads, _ = differentiate(model.graph, list(owner) + floats, of=model.outputs, cotangent="input")
    values = evaluate_graph(grads, {**model.feeds, **{f"cotangent_{o}": c.numpy()
                                                      for o, c in zip(model.outputs, cotangents)}})
    mine, want = {}, {}
    for weight, (pname, transposed) in owner.items():
        g = np.asarray(values[f"grad_{weight}"], np.float64)
        mine[pname] = mine.get(pname, 0) + (g.T if transposed else g)  # tied parameters: summed over copies
        p = parameters[pname]
        want[pname] = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
    for n in floats:
        mine[n], want[n] = values[f"grad_{n}"], xs[n].grad.numpy()
    largest = max(np.abs(w).max() for w in want.values())
    errors = {n: _relative(mine[n], want[n], 1e-6 * largest) for n in want}
    assert max(errors.values()) < grad_tol, {n: f"{e:.1e}" for n, e in errors.items() if e >= grad_tol}


@pytest.mark.parametrize("name, exporter", [("bert", "dynamo"), ("llama", "torchscript")])
def test_float32_exports_equal_torch_and_onnxruntime(exported, name, exporter):
    model = exported(name, exporter, torch.float32)
    ours = evaluate_graph(model.graph, model.feeds)
    session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    theirs = session.run(model.outputs, {i.name: model.feeds[i.name] for i in session.get_inputs()})
    truth = model.module(*model.inputs.values())
    for out, runtime, want in zip(model.outputs, theirs, truth):
        assert _relative(ours[out], runtime) < 1e-5 and _relative(ours[out], want.detach().numpy()) < 1e-5, out


def test_the_command_line_finds_evaluates_and_checks_a_renamed_weight(exported, tmp_path):
    """A user's path through a TorchScript export of BERT, whose Linear weights arrive
    transposed as `onnx::MatMul_N`: `info` leads the query projection's module to its
    weight, `eval` gives torch's values, `check` the gradients finite differences give."""
    from click.testing import CliRunner
    from uopcli.cli import main

    model = exported("bert", "torchscript")
    np.savez(tmp_path / "tokens.npz", **{k: v.numpy() for k, v in model.inputs.items()})

    def run(*args):
        result = CliRunner().invoke(main, [*args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    used = [line.split()[2] for line in run("info", model.path).splitlines()
            if line.startswith("used by") and line.endswith("/encoder/layer.0/attention/self/query/MatMul (MatMul)")]
    assert len(used) == 1 and used[0].startswith("onnx::MatMul_"), used
    run("eval", model.path, "-i", str(tmp_path / "tokens.npz"), "-o", str(tmp_path / "out.npz"))
    values = np.load(tmp_path / "out.npz")
    for out, want in zip(model.outputs, model.module(*model.inputs.values())):
        assert _relative(values[out], want.detach().numpy()) < 1e-10, out
    checked = run("check", model.path, "--of", "out0", "--wrt", f"{used[0]},model.embeddings.word_embeddings.weight",
                  "-i", str(tmp_path / "tokens.npz"))
    assert "ok: gradients of out0 match finite differences" in checked, checked
