"""The gradients of the layer ops of issue 29 (test_onnx_import_layers.py has their values)
equal PyTorch's autograd in float64: one-node models with a weighted-sum loss,
differentiated by uopgrad's library."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the gradient comparisons skip")

from onnx import TensorProto  # noqa: E402

Fn = torch.nn.functional
D, B = TensorProto.DOUBLE, TensorProto.BOOL
RNG = np.random.default_rng(29)

def d64(*shape, scale=1.0):
    return RNG.standard_normal(shape) * scale


def loss_model(op, inputs: dict, attrs: dict, opset: int, out_shape: tuple):
    """One op node, then loss = Σ out·w (w a fixed input, so that every output element's
    gradient matters), as a float64 model; integer inputs are initializers (known at import)."""
    from onnx import helper, numpy_helper
    names = list(inputs)
    node = helper.make_node(op, [n if inputs[n] is not None else "" for n in names], ["out"], **attrs)
    weigh = helper.make_node("Mul", ["out", "w_loss"], ["weighed"])
    total = helper.make_node("ReduceSum", ["weighed"], ["loss"], keepdims=0)
    graph_inputs = [helper.make_tensor_value_info(n, D if a.dtype == np.float64 else B, a.shape)
                    for n, a in inputs.items() if a is not None and a.dtype != np.int64]
    graph_inputs.append(helper.make_tensor_value_info("w_loss", D, out_shape))
    known = [numpy_helper.from_array(a, n) for n, a in inputs.items() if a is not None and a.dtype == np.int64]
    graph = helper.make_graph([node, weigh, total], "loss", graph_inputs, [helper.make_tensor_value_info("loss", D, [])],
                              known)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def our_gradients(op, inputs: dict, attrs: dict, opset: int, wrt: list[str], w_loss: np.ndarray) -> dict:
    from uopcli import differentiate, evaluate_graph
    from uopcli.interop.onnx.importer import import_model
    graph, _ = import_model(loss_model(op, inputs, attrs, opset, w_loss.shape))
    grad, _ = differentiate(graph, wrt, cotangent="ones")
    feeds = {n: a for n, a in inputs.items() if a is not None and a.dtype != np.int64}
    values = evaluate_graph(grad, {**feeds, "w_loss": w_loss})
    return {name: values[f"grad_{name}"] for name in wrt}


def torch_gradients(function, inputs: dict, wrt: list[str], w_loss: np.ndarray) -> dict:
    tensors = {n: torch.tensor(a, requires_grad=n in wrt) for n, a in inputs.items() if a is not None}
    (function(**tensors) * torch.tensor(w_loss)).sum().backward()
    return {name: tensors[name].grad.numpy() for name in wrt}


def compare(op, inputs, attrs, opset, wrt, function, out_shape, ours_to_torch=None, rtol=1e-7):
    w_loss = d64(*out_shape)
    mine = our_gradients(op, inputs, attrs, opset, wrt, w_loss)
    torch_inputs = ours_to_torch(inputs) if ours_to_torch else inputs
    theirs = torch_gradients(function, torch_inputs, wrt, w_loss)
    for name in wrt:
        np.testing.assert_allclose(mine[name], theirs[name], rtol=rtol, atol=rtol / 10, err_msg=f"{op}: d loss / d {name}")


def test_normalisation_gradients_equal_pytorch():
    x, scale, bias = d64(2, 6, 3, 4), d64(6), d64(6)
    compare("GroupNormalization", dict(x=x, scale=scale, bias=bias), dict(num_groups=3, epsilon=1e-3, stash_type=11),
            21, ["x", "scale", "bias"], lambda x, scale, bias: Fn.group_norm(x, 3, scale, bias, 1e-3), x.shape)
    compare("InstanceNormalization", dict(x=x, scale=scale, bias=bias), dict(epsilon=1e-2), 22, ["x", "scale", "bias"],
            lambda x, scale, bias: Fn.instance_norm(x, weight=scale, bias=bias, eps=1e-2), x.shape)
    compare("RMSNormalization", dict(x=x, scale=d64(3, 4)), dict(axis=-2, epsilon=1e-3, stash_type=11), 23, ["x", "scale"],
            lambda x, scale: Fn.rms_norm(x, (3, 4), scale, 1e-3), x.shape)
    compare("LRN", dict(x=x), dict(size=3, alpha=0.3, beta=0.7, bias=1.5), 13, ["x"],
            lambda x: Fn.local_response_norm(x, 3, 0.3, 0.7, 1.5), x.shape)


def test_conv_transpose_gradients_equal_pytorch():
    x, w, b = d64(2, 4, 3, 4), d64(4, 3, 3, 2), d64(6)
    attrs = dict(strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2], group=2, dilations=[1, 2])
    # torch pads both sides alike: ONNX's pads (1, 0) and (0, 1) as torch's padding 1 / 0 then a cut
    def reference(x, w, b):
        full = Fn.conv_transpose2d(x, w, b, stride=(2, 3), padding=0, output_padding=(1, 2), groups=2, dilation=(1, 2))
        return full[:, :, 1:, :-1]
    out_shape = (2, 6, (3 - 1) * 2 + 2 + 1 + 1 - 1, (4 - 1) * 3 + 2 * 1 + 1 + 2 - 1)
    compare("ConvTranspose", dict(x=x, w=w, b=b), attrs, 22, ["x", "w", "b"], reference, out_shape)


def test_negative_log_likelihood_gradient_equals_pytorch():
    scores, target, weight = d64(5, 4, 3), RNG.integers(0, 4, (5, 3)), np.abs(d64(4)) + 0.1
    target[1, 2] = target[3, 0] = -7
    compare("NegativeLogLikelihoodLoss", dict(scores=scores, target=target, weight=weight),
            dict(ignore_index=-7), 22, ["scores"],
            lambda scores, target, weight: Fn.nll_loss(scores, target, weight, ignore_index=-7), ())


def test_gru_and_rnn_gradients_equal_pytorch():
    steps, batch, size, hidden = 4, 2, 3, 5
    x, h0 = d64(steps, batch, size), d64(1, batch, hidden)
    w, r, b = d64(1, 3 * hidden, size), d64(1, 3 * hidden, hidden), d64(1, 6 * hidden)

    def gru(x, w, r, b, h0):  # torch's GRU is ONNX's with linear_before_reset, gates r, z, n for z, r, h
        layer = torch.nn.GRU(size, hidden).double()
        wb, rb = b[0, :3 * hidden], b[0, 3 * hidden:]
        perm = torch.tensor(np.concatenate([np.arange(hidden, 2 * hidden), np.arange(hidden), np.arange(2 * hidden, 3 * hidden)]))
        params = {"weight_ih_l0": w[0][perm], "weight_hh_l0": r[0][perm], "bias_ih_l0": wb[perm], "bias_hh_l0": rb[perm]}
        y, _ = torch.func.functional_call(layer, params, (x, h0))
        return y.unsqueeze(1)
    compare("GRU", dict(x=x, w=w, r=r, b=b, lengths=None, h0=h0), dict(hidden_size=hidden, linear_before_reset=1), 22,
            ["x", "w", "r", "b", "h0"], lambda x, w, r, b, lengths=None, h0=None: gru(x, w, r, b, h0),
            (steps, 1, batch, hidden))
    w, r, b = d64(1, hidden, size), d64(1, hidden, hidden), d64(1, 2 * hidden)

    def rnn(x, w, r, b, h0, lengths=None):
        layer = torch.nn.RNN(size, hidden).double()
        params = {"weight_ih_l0": w[0], "weight_hh_l0": r[0], "bias_ih_l0": b[0, :hidden], "bias_hh_l0": b[0, hidden:]}
        y, _ = torch.func.functional_call(layer, params, (x, h0))
        return y.unsqueeze(1)
    compare("RNN", dict(x=x, w=w, r=r, b=b, lengths=None, h0=h0), dict(hidden_size=hidden), 22,
            ["x", "w", "r", "b", "h0"], rnn, (steps, 1, batch, hidden))


def test_resize_gradients_equal_pytorch():
    x = d64(2, 3, 4, 5)
    sizes = np.array([2, 3, 7, 3], np.int64)
    for mode, torch_mode in (("linear", "bilinear"), ("cubic", "bicubic")):
        compare("Resize", dict(x=x, roi=None, scales=None, sizes=sizes), dict(mode=mode), 19, ["x"],
                lambda x, sizes, roi=None, scales=None, torch_mode=torch_mode:
                Fn.interpolate(x, size=(7, 3), mode=torch_mode, align_corners=False), (2, 3, 7, 3))
    compare("Resize", dict(x=x, roi=None, scales=None, sizes=sizes), dict(mode="linear",
            coordinate_transformation_mode="align_corners"), 19, ["x"],
            lambda x, sizes, roi=None, scales=None: Fn.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True),
            (2, 3, 7, 3))
    compare("Resize", dict(x=x, roi=None, scales=None, sizes=sizes), dict(mode="nearest", nearest_mode="floor",
            coordinate_transformation_mode="asymmetric"), 19, ["x"],
            lambda x, sizes, roi=None, scales=None: Fn.interpolate(x, size=(7, 3), mode="nearest"), (2, 3, 7, 3))


def test_grid_sample_gradients_equal_pytorch():
    x, grid = d64(2, 3, 4, 5), d64(2, 3, 6, 2, scale=0.8)
    for mode, torch_mode, padding, corners in (("linear", "bilinear", "zeros", 0), ("linear", "bilinear", "reflection", 0),
                                               ("linear", "bilinear", "border", 1), ("cubic", "bicubic", "zeros", 0),
                                               ("nearest", "nearest", "zeros", 1)):
        compare("GridSample", dict(x=x, grid=grid), dict(mode=mode, padding_mode=padding, align_corners=corners), 22,
                ["x", "grid"] if mode != "nearest" else ["x"],
                lambda x, grid, m=torch_mode, p=padding, c=corners: Fn.grid_sample(x, grid, m, p, bool(c)), (2, 3, 3, 6))


def test_attention_gradients_equal_pytorch():
    q, k, v = d64(2, 4, 3, 8), d64(2, 2, 5, 8), d64(2, 2, 5, 6)
    mask = RNG.random((3, 5)) > 0.3
    mask[:, 0] = True
    compare("Attention", dict(q=q, k=k, v=v, mask=mask), dict(scale=0.2), 23, ["q", "k", "v"],
            lambda q, k, v, mask: Fn.scaled_dot_product_attention(q, k, v, mask, scale=0.2, enable_gqa=True),
            (2, 4, 3, 6))
    compare("Attention", dict(q=q, k=k, v=v), dict(is_causal=1), 23, ["q", "k", "v"],
            lambda q, k, v: Fn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), (2, 4, 3, 6))


def _rope(x, cos, sin, interleaved: bool, rotated: int):
    """RoPE on [batch, heads, seq, size] the LLMs' ways, not ONNX's: interleaved pairs as
    complex numbers times e^(iθ), halves as x·cos + rotate_half(x)·sin (LLaMA's)."""
    part, rest = x[..., :rotated], x[..., rotated:]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if interleaved:
        turned = torch.view_as_real(torch.view_as_complex(part.reshape(*part.shape[:-1], -1, 2).contiguous())
                                    * torch.complex(cos, sin)).reshape(part.shape)
    else:
        half = rotated // 2
        turned = part * torch.cat([cos, cos], -1) + torch.cat([-part[..., half:], part[..., :half]], -1) * \
            torch.cat([sin, sin], -1)
    return torch.cat([turned, rest], -1)


def test_rotary_embedding_gradients_equal_pytorch():
    x = d64(2, 3, 4, 10)
    angles = d64(7, 3)  # 7 positions, rotary_embedding_dim 6: three angles each
    positions = np.array([[0, 3, 6, 2], [5, 1, 1, 4]], np.int64)
    cos, sin = np.cos(angles), np.sin(angles)
    for interleaved in (0, 1):
        compare("RotaryEmbedding", dict(x=x, cos=cos, sin=sin, positions=positions),
                dict(interleaved=interleaved, rotary_embedding_dim=6), 23, ["x", "cos", "sin"],
                lambda x, cos, sin, positions, i=interleaved: _rope(x, cos[positions], sin[positions], bool(i), 6),
                x.shape)
    # 3-D [batch, seq, heads·size], cos/sin per batch and position, the whole head turned
    flat, cos, sin = d64(2, 4, 3 * 6), d64(2, 4, 3), d64(2, 4, 3)
    compare("RotaryEmbedding", dict(x=flat, cos=cos, sin=sin), dict(num_heads=3), 23, ["x", "cos", "sin"],
            lambda x, cos, sin: _rope(x.reshape(2, 4, 3, 6).transpose(1, 2), cos, sin, False, 6)
            .transpose(1, 2).reshape(2, 4, 18), flat.shape)


def test_col2im_gradient_equals_pytorch_fold():
    # image 5x6, blocks 2x3 every (2, 1), dilated (1, 2), padded 1: 3x4 = 12 blocks of 2 channels
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    x = d64(2, 2 * 6, 12)
    compare("Col2Im", dict(x=x, image=image, block=block), dict(strides=[2, 1], dilations=[1, 2], pads=[1, 1, 1, 1]),
            18, ["x"], lambda x, image, block: Fn.fold(x, (5, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
            (2, 2, 5, 6))


@pytest.mark.parametrize("activation", ["none", "silu"])
def test_an_op_imported_through_its_function_body_has_pytorchs_gradients(activation):
    """CausalConvWithState-27 has no import row: it is imported as the spec's own function
    body (functions.py), a context-dependent one chosen by its attributes and input types.
    Its output (the depthwise causal conv1d of [past_state, x], SiLU'd) and its gradients for
    every input equal PyTorch's. (The spec's body takes the SiLU in float32, also for float64
    inputs: so does the reference here, and the two float32 sigmoids' slopes agree to float32's
    rounding.)"""
    x, w, b, past = d64(2, 3, 5), d64(3, 1, 4), d64(3), d64(2, 3, 3)

    def reference(x, w, b, past):
        y = Fn.conv1d(torch.cat([past, x], dim=2), w, b, groups=3)
        return Fn.silu(y.float()).double() if activation == "silu" else y
    compare("CausalConvWithState", dict(x=x, w=w, b=b, past=past), dict(activation=activation), 27,
            ["x", "w", "b", "past"], reference, (2, 3, 5), rtol=1e-7 if activation == "none" else 1e-5)


@pytest.mark.parametrize("size, align_corners", [([2, 3, 4, 5], 0), ([2, 3, 4, 5], 1), ([2, 3, 4, 5, 3], 0),
                                                   ([2, 3, 4, 5, 3], 1), ([1, 1, 3, 1], 1), ([1, 2, 1, 4, 2], 0)])
def test_affine_grid_has_pytorchs_values_and_gradients(size, align_corners):
    """AffineGrid-20: the grid and its gradient for theta equal PyTorch's F.affine_grid's,
    2-D and 3-D, for a batch of 1 too (the spec's function body squeezes it away) and an
    axis of one point (0)."""
    size = np.array(size, np.int64)
    dims = len(size) - 2
    theta = d64(int(size[0]), dims, dims + 1)
    compare("AffineGrid", dict(theta=theta, size=size), dict(align_corners=align_corners), 20, ["theta"],
            lambda theta, size: Fn.affine_grid(theta, size.tolist(), align_corners=bool(align_corners)),
            (*size[:1], *size[2:], dims))


def test_det_has_numpys_values_and_pytorchs_gradients():
    """Det-22 by partial-pivoting elimination: values within 4 ulps·cond of numpy's (LAPACK's
    getrf, the same pivots) on a batch that needs every kind of row swap (a zero first pivot,
    a pivot below, none), a singular matrix (exactly 0), 1x1 and 4x4; gradients det·A⁻ᵀ equal
    PyTorch's, and at the singular matrix its cofactors (torch gives 0 there)."""
    from test_onnx_edges import _one_node
    from uopcli import evaluate_graph
    from uopcli.interop.onnx.importer import import_model
    rng = np.random.default_rng(7)
    cases = [rng.normal(size=(3, 4, 4)),
             np.array([[[0.0, 2.0, 1.0], [1.0, 0.0, 3.0], [4.0, 1.0, 0.0]],    # pivots from below
                       [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, 1.0, 7.0]],    # singular: det 0
                       [[5.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, -2.0]]]),  # no swap: -30
             rng.normal(size=(2, 1, 1))]
    for a in cases:
        imported, _ = import_model(_one_node("Det", {"a": a}, {}, {}, 22))
        got = evaluate_graph(imported, {"a": a})["out"]
        want = np.linalg.det(a)
        bound = 4 * np.finfo(np.float64).eps * np.linalg.norm(a, axis=(-2, -1)) ** a.shape[-1] + 0.0
        assert np.all(np.abs(got - want) <= bound), (got, want)
        w_loss = d64(*a.shape[:-2])
        slopes = our_gradients("Det", dict(a=a), {}, 22, ["a"], w_loss)["a"]
        regular = np.ones(len(a), bool)
        if a.shape == (3, 3, 3):
            assert got[1] == 0.0 and got[2] == -30.0 and abs(got[0] - 25.0) <= 4 * 25 * np.finfo(np.float64).eps
            # singular: the slope is still the cofactors (rank 2: not 0, which torch gives)
            cofactors = np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a[1], i, 0), j, 1))
                                   for j in range(3)] for i in range(3)])
            np.testing.assert_allclose(slopes[1], w_loss[1] * cofactors, rtol=1e-12, atol=1e-12)
            regular[1] = False
        theirs = torch_gradients(lambda a: torch.linalg.det(a), dict(a=a[regular]), ["a"], w_loss[regular])["a"]
        np.testing.assert_allclose(slopes[regular], theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction, torch_reduction, sign", [("max", "amax", 1.0), ("min", "amin", -1.0)])
def test_scatter_elements_max_and_min_split_a_tie_evenly(reduction, torch_reduction, sign):
    """ScatterElements max/min: a place where the data and two updates tie gives each a
    third of its gradient (torch's, and the REDUCE MAX rule's even split); it was built as
    the updates' max, then MAXIMUM with the data, which gave the data 1/2 and each update
    1/4. (Found by test_onnx_grad_fuzz.)"""
    x, updates = sign * np.array([1.0, 2.0, 0.0]), sign * np.array([1.0, 1.0, 2.0])
    indices = np.array([0, 0, 1], np.int64)  # place 0: a three-way tie; place 1: a two-way one
    compare("ScatterElements", dict(x=x, indices=indices, updates=updates), dict(axis=0, reduction=reduction), 18,
            ["x", "updates"], lambda x, indices, updates: x.scatter_reduce(0, indices, updates, torch_reduction),
            x.shape, rtol=1e-12)
