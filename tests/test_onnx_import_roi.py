"""RoiAlign and DeformConv (ops_roi.py): the imported graph, evaluated by our numpy
evaluator, equals onnxruntime's CPU kernels (and onnx.reference's, which made ONNX's node
cases) on random inputs, float32 and float64: rois computed from the model's inputs (data)
or constants, non-square outputs, both pooling modes, both coordinate transformations,
adaptive sampling (sampling_ratio 0, constant rois), offsets reaching outside X, offset
groups, groups, mask and bias. Their gradients (X, rois; X, W, offset, mask, B) equal
central finite differences (uopcli's check_gradients) in float64; and bad nodes are refused
in one line naming the node."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from uopcli import FormatError, differentiate, evaluate_graph  # noqa: E402
from uopcli.interop.onnx.importer import import_model  # noqa: E402
from uopcli.tools.check import check_gradients  # noqa: E402

RNG = np.random.default_rng(19)
_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64}
# errors against onnxruntime: its sums run in another order than ours (and the positions of
# adaptive sampling too), so float32 differs by rounding; float64 far below these
TOLERANCE = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def model_of(op, inputs: dict, attrs: dict, opset: int, constants: dict | None = None, shift: tuple = ()):
    """One `op` node on graph inputs `inputs` and Constant nodes `constants` (known at
    import); an input named in `shift` is first added to its graph input `<name>_shift`, so
    that it is computed from the model's inputs (data). Returns (model, feeds)."""
    nodes, graph_inputs, feeds, names = [], [], {}, []
    for name, array in {**inputs, **(constants or {})}.items():
        if array is None:
            names.append("")
            continue
        names.append(name)
        if name in (constants or {}):
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
            continue
        sources = [name, f"{name}_shift"] if name in shift else [name]
        for source in sources:
            value = array if source == name else RNG.standard_normal(array.shape).astype(array.dtype) * 0.3
            graph_inputs.append(helper.make_tensor_value_info(source, _TYPE[value.dtype], value.shape))
            feeds[source] = value
        if name in shift:
            names[-1] = f"{name}_data"
            nodes.append(helper.make_node("Add", sources, [names[-1]]))
    nodes.append(helper.make_node(op, names, ["out"], name=f"/head/{op}", **attrs))
    graph = helper.make_graph(nodes, "one", graph_inputs, [helper.make_tensor_value_info("out", _TYPE[
        next(a.dtype for a in inputs.values() if a is not None)], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def ours(model, feeds):
    graph, weights = import_model(model)
    return evaluate_graph(graph, {**weights, **feeds})["out"]


def peers(model, feeds, reference: bool = True):
    """onnxruntime's output, and onnx.reference's (None where not asked)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)[0]
    return theirs, ReferenceEvaluator(model).run(None, feeds)[0] if reference else None


def errors(got, want) -> tuple[float, float]:
    """(max abs error, max relative error where |want| > 1e-3)."""
    diff = np.abs(got.astype(np.float64) - want)
    big = np.abs(want) > 1e-3
    return float(diff.max(initial=0)), float((diff[big] / np.abs(want[big])).max(initial=0))


def assert_close(got, want, dtype, what):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    np.testing.assert_allclose(got, want, err_msg=what, **TOLERANCE[dtype])


# ----------------------------------------------------------------------------- RoiAlign


def boxes(count: int, height: int, width: int, dtype, scale: float = 1.0):
    """Random rois [count, 4] (x1, y1, x2, y2) in input coordinates (divided by spatial
    scale): some reach past X's edges, one is a thin sliver, one has its corners swapped."""
    x1 = RNG.uniform(-2, width - 2, count)
    y1 = RNG.uniform(-2, height - 2, count)
    w, h = RNG.uniform(0.3, width * 0.9, count), RNG.uniform(0.3, height * 0.9, count)
    rois = np.stack([x1, y1, x1 + w, y1 + h], axis=1)
    rois[0] = [-1.5, height - 2.2, width + 1.3, height + 0.8]   # past the right and bottom edges
    rois[1, 3] = rois[1, 1] + 0.2                               # a sliver
    rois[2] = rois[2, [2, 3, 0, 1]]                             # swapped corners
    return (rois / scale).astype(dtype)


ROI_CASES = [  # (dtype, opset, attributes, rois data or constant)
    (np.float32, 16, dict(output_height=3, output_width=5, sampling_ratio=2), "data"),
    (np.float32, 16, dict(output_height=4, output_width=2, sampling_ratio=3, mode="max",
                          coordinate_transformation_mode="output_half_pixel", spatial_scale=0.5), "data"),
    (np.float64, 16, dict(output_height=2, output_width=3, sampling_ratio=1, mode="max"), "data"),
    (np.float64, 16, dict(output_height=3, output_width=2, sampling_ratio=2,
                          coordinate_transformation_mode="output_half_pixel", spatial_scale=0.25), "data"),
    (np.float32, 10, dict(output_height=2, output_width=4, sampling_ratio=2), "data"),     # 10: output_half_pixel
    (np.float32, 16, dict(output_height=3, output_width=4), "constant"),                   # adaptive, half_pixel
    (np.float64, 16, dict(output_height=2, output_width=3, mode="max", spatial_scale=0.5), "constant"),
    (np.float32, 10, dict(output_height=4, output_width=3, mode="max"), "constant"),       # adaptive, 1x1 at least
    (np.float64, 16, dict(output_height=5, output_width=2, coordinate_transformation_mode="output_half_pixel"),
     "constant"),
]


@pytest.mark.parametrize("dtype, opset, attrs, rois_are", ROI_CASES,
                         ids=[f"{np.dtype(d).name}-{o}-{a.get('mode', 'avg')}-"
                              f"{a.get('coordinate_transformation_mode', 'default')}-ratio{a.get('sampling_ratio', 0)}-{r}"
                              for d, o, a, r in ROI_CASES])
def test_roi_align_matches_onnxruntime_and_the_reference(dtype, opset, attrs, rois_are):
    x = RNG.standard_normal((2, 3, 7, 9)).astype(dtype)
    rois = boxes(6, 7, 9, dtype, attrs.get("spatial_scale", 1.0))
    batch = np.array([1, 0, 1, 1, 0, 1], np.int64)
    if rois_are == "data":  # rois = rois + rois_shift: both graph inputs
        model, feeds = model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), attrs, opset, shift=("rois",))
    else:
        model, feeds = model_of("RoiAlign", dict(x=x), attrs, opset, constants=dict(rois=rois, batch=batch))
    got = ours(model, feeds)
    # onnxruntime has RoiAlign up to 16; the reference reads RoiAlign-10 as half_pixel (its
    # missing attribute is not the spec's output_half_pixel), so it judges 16 alone
    theirs, reference = peers(model, feeds, reference=opset == 16)
    assert_close(got, theirs, dtype, "RoiAlign against onnxruntime")
    if reference is not None:
        assert_close(got, reference.astype(dtype), dtype, "RoiAlign against onnx.reference")
    print("RoiAlign", dtype.__name__, attrs, rois_are, "max abs/rel error vs onnxruntime: %.3g %.3g" % errors(got, theirs))


def test_roi_align_22_matches_the_reference_and_16():
    """RoiAlign-22 (bfloat16 added) means 16: onnxruntime has no 22 kernel, so the
    reference judges it, and our 22 equals our 16."""
    x, rois, batch = RNG.standard_normal((1, 2, 6, 5)), boxes(4, 6, 5, np.float64), np.zeros(4, np.int64)
    attrs = dict(output_height=3, output_width=2, sampling_ratio=2, mode="max")
    model, feeds = model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), attrs, 22)
    got = ours(model, feeds)
    assert_close(got, ReferenceEvaluator(model).run(None, feeds)[0], np.float64, "RoiAlign-22 against onnx.reference")
    sixteen, feeds16 = model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), attrs, 16)
    np.testing.assert_array_equal(got, ours(sixteen, feeds16))


def test_roi_align_batch_indices_may_be_data():
    """The batch indices picked at run time: each roi reads its own image."""
    x, rois = RNG.standard_normal((3, 2, 5, 5)).astype(np.float32), boxes(4, 5, 5, np.float32)
    model, _ = model_of("RoiAlign", dict(x=x, rois=rois, batch=np.zeros(4, np.int64)),
                        dict(output_height=2, output_width=2, sampling_ratio=2), 16)
    for batch in (np.array([2, 0, 1, 2]), np.array([1, 1, 0, 2])):
        feeds = dict(x=x, rois=rois, batch=batch.astype(np.int64))
        assert_close(ours(model, feeds), peers(model, feeds)[0], np.float32, f"batch indices {batch}")


# ----------------------------------------------------------------------------- DeformConv


DEFORM_CASES = [  # (dtype, x shape, w shape, attributes, bias, mask, offset scale)
    (np.float32, (1, 2, 5, 6), (3, 2, 3, 3), dict(), False, False, 0.7),
    (np.float64, (2, 3, 6, 5), (4, 3, 2, 3), dict(pads=[1, 0, 2, 1], strides=[2, 1]), True, False, 1.2),
    (np.float32, (2, 4, 5, 5), (6, 2, 2, 2), dict(group=2, offset_group=2, dilations=[2, 1], pads=[1, 1, 1, 1]),
     True, True, 1.0),
    (np.float64, (1, 4, 4, 5), (2, 4, 3, 2), dict(offset_group=4, strides=[1, 2], pads=[1, 1, 0, 0]), False, True, 2.5),
    # offsets large enough that most samples leave X (and many taps read 0)
    (np.float32, (1, 2, 4, 4), (2, 1, 2, 2), dict(group=2, pads=[1, 1, 1, 1]), True, True, 4.0),
]


@pytest.mark.parametrize("dtype, x_shape, w_shape, attrs, bias, mask, reach", DEFORM_CASES,
                         ids=[f"{np.dtype(c[0]).name}-{'-'.join(c[3]) or 'plain'}{'-bias' if c[4] else ''}"
                              f"{'-mask' if c[5] else ''}-reach{c[6]}" for c in DEFORM_CASES])
def test_deform_conv_matches_onnxruntime_and_the_reference(dtype, x_shape, w_shape, attrs, bias, mask, reach):
    model, feeds = deform_model(dtype, x_shape, w_shape, attrs, bias, mask, reach)
    got = ours(model, feeds)
    theirs, reference = peers(model, feeds)
    assert_close(got, theirs, dtype, "DeformConv against onnxruntime")
    # the reference samples through its GridSample, which keeps the positions in float32:
    # it is a float32 judge, also of float64
    np.testing.assert_allclose(got, reference, err_msg="DeformConv against onnx.reference", **TOLERANCE[np.float32])
    print("DeformConv", dtype.__name__, attrs, "max abs/rel error vs onnxruntime: %.3g %.3g" % errors(got, theirs))


def deform_model(dtype, x_shape, w_shape, attrs, bias, mask, reach, opset=22):
    n, _, h, w = x_shape
    kh, kw = w_shape[2:]
    pads, strides, dilations = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [(size + pads[a] + pads[a + 2] - (k - 1) * d - 1) // s + 1
           for a, (size, k, s, d) in enumerate(zip((h, w), (kh, kw), strides, dilations))]
    groups = attrs.get("offset_group", 1)
    inputs = dict(x=RNG.standard_normal(x_shape), w=RNG.standard_normal(w_shape),
                  offset=RNG.standard_normal((n, groups * kh * kw * 2, *out)) * reach,
                  b=RNG.standard_normal(w_shape[0]) if bias else None,
                  mask=RNG.uniform(0, 1, (n, groups * kh * kw, *out)) if mask else None)
    inputs = {k: None if v is None else v.astype(dtype) for k, v in inputs.items()}
    # the offsets computed from the model's inputs (offset + offset_shift)
    return model_of("DeformConv", inputs, dict(kernel_shape=[kh, kw], **attrs), opset, shift=("offset",))


def test_deform_conv_with_an_output_of_one_row_matches_onnxruntime():
    """An output of size 1 along an axis (X as tall as the kernel) is an output."""
    model, feeds = deform_model(np.float64, (1, 2, 3, 5), (2, 2, 3, 2), dict(), True, True, 0.8)
    got = ours(model, feeds)
    assert got.shape == (1, 2, 1, 4)
    assert_close(got, peers(model, feeds)[0], np.float64, "DeformConv of one output row against onnxruntime")


def test_deform_conv_19_equals_22():
    model, feeds = deform_model(np.float64, (1, 2, 4, 5), (2, 2, 2, 2), dict(pads=[1, 1, 1, 1]), True, True, 1.5,
                                opset=19)
    got = ours(model, feeds)
    assert_close(got, peers(model, feeds)[0], np.float64, "DeformConv-19 against onnxruntime")


# ----------------------------------------------------------------------------- gradients


def gradient_report(model, feeds, wrt):
    """check_gradients of the imported graph at these inputs: central differences of
    L = Σ cotangent·out in float64 against the gradient graph, every element compared.
    check_gradients freezes detached nodes in its differences (it checks the rules), so a
    directional difference of the plain forward graph checks that nothing is cut off."""
    graph, _ = import_model(model)
    report = check_gradients(graph, wrt, inputs=feeds, seed=3, samples=10_000)
    assert report.passed, "\n".join(report.lines())
    cotangent = RNG.standard_normal(evaluate_graph(graph, feeds)["out"].shape)
    grads = evaluate_graph(differentiate(graph, wrt, cotangent="input")[0], {**feeds, "cotangent_out": cotangent})
    for name in wrt:  # one direction per input: <grad, v> against (L(x + hv) - L(x - hv)) / 2h
        v, h = RNG.standard_normal(feeds[name].shape), 1e-6
        at = [float((evaluate_graph(graph, {**feeds, name: feeds[name] + s * h * v})["out"] * cotangent).sum())
              for s in (1, -1)]
        np.testing.assert_allclose((grads[f"grad_{name}"] * v).sum(), (at[0] - at[1]) / (2 * h), rtol=1e-6,
                                   err_msg=f"d L / d {name} along a random direction")
    worst = max(t.max_rel_error for t in report.targets)
    print(" ".join(f"{t.name}: {t.samples} elements, max abs {t.max_abs_error:.2e} rel {t.max_rel_error:.2e}"
                   for t in report.targets), f"(worst rel {worst:.2e})")
    return report


@pytest.mark.parametrize("attrs", [dict(sampling_ratio=2), dict(sampling_ratio=2, mode="max"),
                                   dict(sampling_ratio=1, coordinate_transformation_mode="output_half_pixel",
                                        spatial_scale=0.5)],
                         ids=["avg", "max", "output-half-pixel"])
def test_roi_align_gradients_equal_finite_differences(attrs):
    """d/dX and d/drois (the rois a graph input). The samples keep clear of integer
    positions (where a tap changes: a kink)."""
    x = RNG.standard_normal((2, 2, 6, 7))
    rois = np.array([[0.37, 0.61, 4.23, 3.91], [1.13, 2.29, 5.71, 4.47], [-0.43, 0.2, 2.87, 5.33]]) \
        / attrs.get("spatial_scale", 1.0)
    model, feeds = model_of("RoiAlign", dict(x=x, rois=rois, batch=np.array([1, 0, 1], np.int64)),
                            dict(output_height=2, output_width=3, **attrs), 16)
    report = gradient_report(model, feeds, ["x", "rois"])
    assert all(t.samples == feeds[t.name].size for t in report.targets)  # every element compared


def test_roi_align_adaptive_gradients_equal_finite_differences():
    """sampling_ratio 0 with constant rois: the gradient for X (the rois are constants)."""
    x = RNG.standard_normal((1, 2, 6, 7))
    model, feeds = model_of("RoiAlign", dict(x=x), dict(output_height=2, output_width=2), 16,
                            constants=dict(rois=np.array([[0.3, 0.6, 4.2, 5.9], [1.1, 2.3, 2.4, 2.9]]),
                                           batch=np.zeros(2, np.int64)))
    gradient_report(model, feeds, ["x"])


@pytest.mark.parametrize("attrs, mask, bias", [(dict(pads=[1, 0, 1, 1], strides=[1, 2]), True, True),
                                               (dict(group=2, offset_group=2, dilations=[1, 2]), True, False)],
                         ids=["pads-strides-mask-bias", "groups-dilations-mask"])
def test_deform_conv_gradients_equal_finite_differences(attrs, mask, bias):
    """d/dX, d/dW, d/doffset, d/dmask, d/dB, with offsets that send some taps outside X."""
    model, feeds = deform_model(np.float64, (1, 4, 4, 5), (2, 4 // attrs.get("group", 1), 2, 2), attrs, bias, mask, 1.3)
    wrt = ["x", "w", "offset"] + (["mask"] if mask else []) + (["b"] if bias else [])
    gradient_report(model, feeds, wrt)


# ----------------------------------------------------------------------------- refusals


def refused(model) -> str:
    with pytest.raises(FormatError) as caught:
        import_model(model)
    message = str(caught.value)
    op = model.graph.node[-1].op_type
    assert "\n" not in message and f"'/head/{op}' ({op})" in message, message
    return message


def test_bad_nodes_are_refused_in_one_line():
    x, rois, batch = np.zeros((1, 1, 4, 4), np.float32), boxes(3, 4, 4, np.float32), np.zeros(3, np.int64)
    data_rois, _ = model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), dict(), 16)
    adaptive = ("<model>: node '/head/RoiAlign' (RoiAlign): sampling_ratio=0 samples each roi by its size, so the rois "
                "must be known when importing (the graph's tap count would depend on their values); give a "
                "sampling_ratio > 0")
    assert refused(data_rois) == adaptive
    weight_rois, _ = model_of("RoiAlign", dict(x=x), dict(output_height=2), 16, constants=dict(batch=batch))
    weight_rois.graph.node[-1].input.insert(1, "r")
    weight_rois.graph.initializer.append(numpy_helper.from_array(rois, "r"))  # a float initializer: a weight
    assert refused(weight_rois) == adaptive
    cases = [
        (model_of("RoiAlign", dict(x=x), dict(sampling_ratio=2), 16,
                  constants=dict(rois=rois, batch=np.array([0, 1, 0], np.int64)))[0],
         "a batch index of [0, 1, 0] is outside X's batch of 1"),
        (model_of("RoiAlign", dict(x=np.zeros((2, 3, 4, 4), np.float32)), dict(sampling_ratio=2), 16,  # N is not C
                  constants=dict(rois=rois, batch=np.array([0, 2, 1], np.int64)))[0],
         "a batch index of [0, 2, 1] is outside X's batch of 2"),
        (model_of("RoiAlign", dict(x=x, rois=rois[:, :3].copy(), batch=batch), dict(sampling_ratio=2), 16)[0],
         "X [1, 1, 4, 4], rois [3, 3] and batch_indices [3] do not fit: X [N, C, H, W], rois [R, 4], batch_indices [R]"),
        (model_of("RoiAlign", dict(x=x[0], rois=rois, batch=batch), dict(sampling_ratio=2), 16)[0],
         "X [1, 4, 4], rois [3, 4] and batch_indices [3] do not fit: X [N, C, H, W], rois [R, 4], batch_indices [R]"),
        (model_of("RoiAlign", dict(x=x.astype(np.int64), rois=rois, batch=batch), dict(sampling_ratio=2), 16)[0],
         "X and rois must be floats, batch_indices integers"),
        (model_of("RoiAlign", dict(x=x, rois=rois, batch=batch.astype(np.float32)), dict(sampling_ratio=2), 16)[0],
         "X and rois must be floats, batch_indices integers"),
        (model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), dict(sampling_ratio=2, mode="sum"), 16)[0],
         "mode='sum' is not avg or max, or coordinate_transformation_mode='half_pixel' is not half_pixel or "
         "output_half_pixel"),
        (model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), dict(sampling_ratio=2, output_height=0), 16)[0],
         "output_height 0 and output_width 1 must be >= 1, sampling_ratio 2 >= 0"),
        (model_of("RoiAlign", dict(x=x, rois=rois, batch=batch), dict(
            sampling_ratio=2, coordinate_transformation_mode="half_pixel"), 10)[0],
         "coordinate_transformation_mode is an attribute from RoiAlign-16 on"),
    ]
    w, offset = np.zeros((2, 1, 2, 2), np.float32), np.zeros((1, 8, 3, 3), np.float32)
    cases += [
        (model_of("DeformConv", dict(x=x, w=w, offset=offset[:, :, :2]), dict(), 22)[0],
         "offset [1, 8, 2, 3] must be [1, 8, 3, 3] (offset_group·kh·kw·2 over the output)"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset, b=None, mask=np.zeros((1, 8, 3, 3), np.float32)),
                  dict(), 22)[0], "mask [1, 8, 3, 3] must be [1, 4, 3, 3]"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset), dict(group=2), 22)[0],
         "X's 1 channels and W [2, 1, 2, 2] do not fit group=2 and offset_group=1"),
        (model_of("DeformConv", dict(x=x[0], w=w[0], offset=offset[0]), dict(), 22)[0],
         "X [1, 4, 4], W [1, 2, 2] and offset [8, 3, 3] must be 4-D (2-D DeformConv, as onnxruntime and onnx.reference "
         "build it)"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset[0]), dict(), 22)[0],    # only the offset is not 4-D
         "X [1, 1, 4, 4], W [2, 1, 2, 2] and offset [8, 3, 3] must be 4-D (2-D DeformConv, as onnxruntime and "
         "onnx.reference build it)"),
        (model_of("DeformConv", dict(x=x[0], w=w, offset=offset), dict(), 22)[0],    # only X
         "X [1, 4, 4], W [2, 1, 2, 2] and offset [1, 8, 3, 3] must be 4-D (2-D DeformConv, as onnxruntime and "
         "onnx.reference build it)"),
        (model_of("DeformConv", dict(x=x.astype(np.int64), w=w, offset=offset), dict(), 22)[0],
         "X, W, offset, B and mask must be floats"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset, b=np.zeros(3, np.float32)), dict(), 22)[0],
         "B [3] must be [2]"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset), dict(offset_group=0), 22)[0],
         "X's 1 channels and W [2, 1, 2, 2] do not fit group=1 and offset_group=0"),
        (model_of("DeformConv", dict(x=np.zeros((1, 2, 4, 4), np.float32), w=np.zeros((3, 1, 2, 2), np.float32),
                                     offset=offset), dict(group=2), 22)[0],                 # 3 outputs in 2 groups
         "X's 2 channels and W [3, 1, 2, 2] do not fit group=2 and offset_group=1"),
        # a non-square output ([2, 3]): the shapes asked for name each axis's own size
        (model_of("DeformConv", dict(x=np.zeros((1, 1, 3, 4), np.float32), w=w, offset=offset), dict(), 22)[0],
         "offset [1, 8, 3, 3] must be [1, 8, 2, 3] (offset_group·kh·kw·2 over the output)"),
        (model_of("DeformConv", dict(x=np.zeros((1, 1, 3, 4), np.float32), w=w, offset=offset[:, :, :2], b=None,
                                     mask=np.zeros((1, 4, 3, 3), np.float32)), dict(), 22)[0],
         "mask [1, 4, 3, 3] must be [1, 4, 2, 3]"),
        (model_of("DeformConv", dict(x=x, w=w, offset=offset), dict(kernel_shape=[3, 3]), 22)[0],
         "kernel_shape [3, 3] (W's [2, 2]), strides [1, 1], dilations [1, 1] and pads [0, 0, 0, 0] do not fit a 2-D "
         "kernel"),
    ]
    for attrs, said in ((dict(strides=[1]), "strides [1], dilations [1, 1] and pads [0, 0, 0, 0]"),
                        (dict(dilations=[1, 1, 1]), "strides [1, 1], dilations [1, 1, 1] and pads [0, 0, 0, 0]"),
                        (dict(strides=[0, 1]), "strides [0, 1], dilations [1, 1] and pads [0, 0, 0, 0]"),
                        (dict(pads=[-1, 0, 0, 0]), "strides [1, 1], dilations [1, 1] and pads [-1, 0, 0, 0]")):
        cases.append((model_of("DeformConv", dict(x=x, w=w, offset=offset), attrs, 22)[0],
                      f"kernel_shape [2, 2] (W's [2, 2]), {said} do not fit a 2-D kernel"))
    for model, why in cases:
        op = model.graph.node[-1].op_type
        assert refused(model) == f"<model>: node '/head/{op}' ({op}): {why}"


# rois (x1, y1, x2, y2) whose adaptive sample counts ceil(roi size / output size) sit on a
# rounding edge in float32 with spatial_scale 0.7 and 2 outputs: the corners are computed as
# onnxruntime computes them (roi·scale, less 0.5 with half_pixel, then the difference), and
# the shift by 0.5 that cancels in exact arithmetic changes the count here by one
EDGE_ROIS = np.array([[0.4, -0.3931961, 3.3, 2.4639468],      # half_pixel: less 0.5 (not plus) counts 1
                      [0.4, -0.04762042, 3.3, 2.8095226],     # half_pixel: less 0.5 (not 1.5) counts 2; also
                      #                                         output_half_pixel: no shift (not 1.0) counts 2
                      [0.4, -0.6689212, 3.3, 5.045365],       # half_pixel: less 0.5 (not 0) counts 2;
                      #                                         output_half_pixel: no shift (not 0.5) counts 3
                      [-0.3931961, 0.4, 2.4639468, 3.3],      # the same along x
                      [-0.6689212, 0.4, 5.045365, 3.3]], np.float32)


@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_adaptive_counts_round_as_onnxruntime(transform, mode):
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    attrs = dict(output_height=2, output_width=2, spatial_scale=0.7, mode=mode,
                 coordinate_transformation_mode=transform)
    model, feeds = model_of("RoiAlign", dict(x=x), attrs, 16,
                            constants=dict(rois=EDGE_ROIS, batch=np.zeros(len(EDGE_ROIS), np.int64)))
    got = ours(model, feeds)
    theirs, reference = peers(model, feeds)
    assert_close(got, theirs, np.float32, "RoiAlign at the sample counts' rounding edges against onnxruntime")


def test_roi_align_adaptive_empty_and_small_rois_as_onnxruntime():
    """half_pixel: a roi of negative height but positive width (or the other way) has no
    samples, so 0 (not one sample), as onnx.reference (onnxruntime fails on it: an integer
    overflow); output_half_pixel with 1x1 outputs: a roi smaller than 1x1 is taken as 1x1,
    so one sample per axis (not two), as onnxruntime and the reference."""
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    rois = np.array([[0.5, 3.2, 4.5, 1.1], [3.6, 0.7, 1.2, 4.1], [1.3, 1.6, 1.9, 2.4], [2.2, 0.9, 2.7, 1.8]],
                    np.float32)
    batch = np.zeros(len(rois), np.int64)
    for transform, size in (("half_pixel", 2), ("output_half_pixel", 1)):
        for mode in ("avg", "max"):
            attrs = dict(output_height=size, output_width=size, mode=mode, coordinate_transformation_mode=transform)
            model, feeds = model_of("RoiAlign", dict(x=x), attrs, 16, constants=dict(rois=rois, batch=batch))
            got = ours(model, feeds)
            theirs, reference = peers(model, feeds, reference=False) if transform == "output_half_pixel" else \
                (None, ReferenceEvaluator(model).run(None, feeds)[0])
            if theirs is not None:
                assert_close(got, theirs, np.float32, f"RoiAlign {transform} {mode} against onnxruntime")
            else:
                assert_close(got, reference, np.float32, f"RoiAlign {transform} {mode} against onnx.reference")
                assert not got[:2].any()


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_samples_exactly_on_the_edges_of_the_window_as_onnxruntime(mode):
    """A sample exactly at -1 or at H (W) is inside the window [-1, H] and reads the edge
    row (column), clamped; one bin of one sample (output_half_pixel, 1x1, sampling_ratio 1)
    puts it at the roi's centre."""
    h, w = 5, 6
    x = RNG.standard_normal((1, 2, h, w)).astype(np.float32)
    rois = np.array([[0.5, -2.0, 2.5, 0.0], [0.5, h - 1.0, 2.5, h + 1.0],     # a sample at y = -1, y = H
                     [-2.0, 1.5, 0.0, 3.5], [w - 1.0, 1.5, w + 1.0, 3.5],     # at x = -1, x = W
                     [-2.0, h - 1.0, 0.0, h + 1.0]], np.float32)              # at (-1, H): a corner
    attrs = dict(output_height=1, output_width=1, sampling_ratio=1, mode=mode,
                 coordinate_transformation_mode="output_half_pixel")
    model, feeds = model_of("RoiAlign", dict(x=x), attrs, 16, constants=dict(rois=rois, batch=np.zeros(5, np.int64)))
    got = ours(model, feeds)
    theirs, reference = peers(model, feeds)
    assert_close(got, theirs, np.float32, "RoiAlign on the window's edges against onnxruntime")
    assert_close(got, reference, np.float32, "RoiAlign on the window's edges against onnx.reference")
    if mode == "avg":   # the edge pixels themselves (interpolated at the centre of their two neighbours)
        np.testing.assert_allclose(got[:, :, 0, 0], [(x[0, :, 0, 1] + x[0, :, 0, 2]) / 2,
                                                     (x[0, :, h - 1, 1] + x[0, :, h - 1, 2]) / 2,
                                                     (x[0, :, 2, 0] + x[0, :, 3, 0]) / 2,
                                                     (x[0, :, 2, w - 1] + x[0, :, 3, w - 1]) / 2,
                                                     x[0, :, h - 1, 0]], rtol=1e-6)


@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_of_no_rois_is_empty_as_onnxruntime(ratio):
    """rois [0, 4] (a detector that found nothing): the output is [0, C, oh, ow], with
    adaptive sampling too (no roi to take the sample count from)."""
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    model, feeds = model_of("RoiAlign", dict(x=x), dict(output_height=2, output_width=3, sampling_ratio=ratio), 16,
                            constants=dict(rois=np.zeros((0, 4), np.float32), batch=np.zeros(0, np.int64)))
    assert_close(ours(model, feeds), peers(model, feeds, reference=False)[0], np.float32, "no rois")
