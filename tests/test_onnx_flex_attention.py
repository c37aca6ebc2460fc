"""ai.onnx.preview's FlexAttention, imported through its context-dependent function body
(functions.py: another domain's op with a body is imported as that body, as ai.onnx's
are): scaled dot-product attention with grouped-query heads, its score_mod and prob_mod
subgraphs inlined. Values against onnx.reference in float32 and float64; gradients with
respect to Q, K and V against PyTorch's autograd of the same maths in float64 (the
causal mask, the soft cap, a relative position bias, a probability scale)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from uopcli import FormatError, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.differentiate import differentiate  # noqa: E402

TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
RNG = np.random.default_rng(41)


def _modifier(kind: str, elem: int) -> onnx.GraphProto | None:
    """A score_mod or prob_mod subgraph: s -> s' of the same shape [B, H, L, S]."""
    scores = helper.make_tensor_value_info("s", elem, None)
    out = helper.make_tensor_value_info("m", elem, None)
    if kind == "soft_cap":  # 5·tanh(s/5)
        nodes = [helper.make_node("Constant", [], ["cap"], value=helper.make_tensor("cap", elem, [], [5.0])),
                 helper.make_node("Div", ["s", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
                 helper.make_node("Mul", ["t", "cap"], ["m"])]
    elif kind in ("causal", "relative"):  # query i sees keys j <= i; or adds (j - i)·0.1
        nodes = [helper.make_node("Shape", ["s"], ["shape"]),
                 helper.make_node("Constant", [], ["two"], value_int=2),
                 helper.make_node("Constant", [], ["three"], value_int=3),
                 helper.make_node("Gather", ["shape", "two"], ["rows"]),
                 helper.make_node("Gather", ["shape", "three"], ["columns"]),
                 helper.make_node("Constant", [], ["zero"], value_int=0),
                 helper.make_node("Constant", [], ["one"], value_int=1),
                 helper.make_node("Range", ["zero", "rows", "one"], ["i"]),
                 helper.make_node("Range", ["zero", "columns", "one"], ["j"]),
                 helper.make_node("Constant", [], ["column_shape"], value_ints=[-1, 1]),
                 helper.make_node("Reshape", ["i", "column_shape"], ["i2"])]
        if kind == "causal":
            nodes += [helper.make_node("GreaterOrEqual", ["i2", "j"], ["seen"]),
                      helper.make_node("Constant", [], ["hidden"], value=helper.make_tensor("h", elem, [], [-np.inf])),
                      helper.make_node("Where", ["seen", "s", "hidden"], ["m"])]
        else:
            nodes += [helper.make_node("Sub", ["j", "i2"], ["offset"]),
                      helper.make_node("Cast", ["offset"], ["offset_f"], to=elem),
                      helper.make_node("Constant", [], ["slope"], value=helper.make_tensor("k", elem, [], [0.1])),
                      helper.make_node("Mul", ["offset_f", "slope"], ["bias"]),
                      helper.make_node("Add", ["s", "bias"], ["m"])]
    elif kind == "half":  # prob_mod: p·0.5
        nodes = [helper.make_node("Constant", [], ["h"], value=helper.make_tensor("h", elem, [], [0.5])),
                 helper.make_node("Mul", ["s", "h"], ["m"])]
    else:
        return None
    return helper.make_graph(nodes, kind, [scores], [out])


def _model(shapes, dtype, score_mod=None, prob_mod=None, scale=None):
    elem = TYPES[dtype]
    attrs = {} if scale is None else {"scale": scale}
    for name, kind in (("score_mod", score_mod), ("prob_mod", prob_mod)):
        graph = _modifier(kind, elem) if kind else None
        if graph is not None:
            attrs[name] = graph
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], name="/attn/flex", domain="ai.onnx.preview",
                            **attrs)
    inputs = [helper.make_tensor_value_info(n, elem, list(s)) for n, s in zip("QKV", shapes)]
    graph = helper.make_graph([node], "flex", inputs, [helper.make_tensor_value_info("Y", elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])


# (Q, K, V shapes, score_mod, prob_mod, scale): GQA (8 query heads on 2), a V head size of its own
CASES = [
    (((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)), None, None, None),
    (((2, 8, 3, 8), (2, 2, 6, 8), (2, 2, 6, 4)), None, None, 0.25),
    (((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), "causal", None, None),
    (((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), "soft_cap", "half", None),
    (((1, 4, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8)), "relative", None, 0.5),
]


def _inputs(shapes, dtype):
    return {n: RNG.standard_normal(s).astype(dtype) for n, s in zip("QKV", shapes)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shapes, score_mod, prob_mod, scale", CASES)
def test_flex_attention_equals_the_reference(shapes, score_mod, prob_mod, scale, dtype):
    model = _model(shapes, dtype, score_mod, prob_mod, scale)
    feeds = _inputs(shapes, dtype)
    graph, weights = import_model(model)
    got = evaluate_graph(graph, {**weights, **feeds})["Y"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=(2e-6 if dtype == np.float32 else 1e-14) * np.abs(want).max())


def _torch_flex(q, k, v, score_mod, prob_mod, scale):
    """The op's maths in PyTorch: (Q√σ)(K√σ)ᵀ, score_mod, softmax, prob_mod, times V; K and V
    heads repeated for their groups of query heads. The spec's body computes √σ in float32
    whatever the inputs' type (σ the scale attribute, else 1/√head_size), then casts it: so
    does this, else a float64 model would be 1e-8 off."""
    import torch
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    sigma = np.float32(scale) if scale is not None else np.float32(1) / np.sqrt(np.float32(q.shape[-1]))
    root = float(np.sqrt(sigma))
    s = (q * root) @ (k * root).transpose(-1, -2)
    rows, columns = torch.arange(s.shape[-2])[:, None], torch.arange(s.shape[-1])
    if score_mod == "causal":
        s = torch.where(rows >= columns, s, torch.tensor(-torch.inf, dtype=s.dtype))
    elif score_mod == "soft_cap":
        s = 5.0 * torch.tanh(s / 5.0)
    elif score_mod == "relative":
        s = s + (columns - rows).to(s.dtype) * 0.1
    p = torch.softmax(s, -1)
    if prob_mod == "half":
        p = p * 0.5
    return p @ v


@pytest.mark.parametrize("shapes, score_mod, prob_mod, scale", CASES)
def test_flex_attention_gradients_equal_pytorchs(shapes, score_mod, prob_mod, scale):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    feeds = _inputs(shapes, np.float64)
    graph, weights = import_model(_model(shapes, np.float64, score_mod, prob_mod, scale))
    tensors = {n: torch.tensor(a, requires_grad=True) for n, a in feeds.items()}
    y = _torch_flex(tensors["Q"], tensors["K"], tensors["V"], score_mod, prob_mod, scale)
    c = RNG.standard_normal(tuple(y.shape))
    (y * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(evaluate_graph(graph, {**weights, **feeds})["Y"], y.detach().numpy(), rtol=0, atol=1e-14)
    gradient, _ = differentiate(graph, list("QKV"), cotangent="input")
    values = evaluate_graph(gradient, {**weights, **feeds, "cotangent_Y": c})
    for name, t in tensors.items():
        np.testing.assert_allclose(values[f"grad_{name}"], t.grad.numpy(), rtol=0, atol=1e-13 * t.grad.abs().max().item(),
                                   err_msg=name)


def test_another_domains_op_without_a_body_is_still_refused_in_one_line():
    model = _model(CASES[0][0], np.float32)
    model.graph.node[0].op_type = "NoSuchAttention"
    with pytest.raises(FormatError) as refused:
        import_model(model)
    assert str(refused.value) == ("<model>: node '/attn/flex' (ai.onnx.preview.NoSuchAttention): op "
                                  "ai.onnx.preview.NoSuchAttention is not supported (the standard ai.onnx ops are, "
                                  "and those of ai.onnx.preview that the spec defines by a function body)")
