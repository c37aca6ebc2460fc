"""A differential fuzz of the ONNX importer against onnxruntime: hypothesis draws one-node
models over the attribute spaces importers get wrong (windows and their pads, resampling
modes, index arithmetic, negative and out-of-range arguments, ties) and the imported
graph, evaluated by our numpy evaluator, must give onnxruntime's outputs: the same shapes
and dtypes, integers and bools exactly, floats within 1e-5 relative (1e-6 of the output's
magnitude where results cross zero).

onnxruntime is the peer: a model it refuses (at session creation or run) is no example
(`assume`), nor is one where ours differs from it and onnx.reference differs from it too
(the peers disagree, so neither judges); those where the reference fails or differs from
both must stay rare (a bug could hide there), those where it agrees with ours outvote
onnxruntime. Where onnxruntime is known to depart from the spec the draws leave the case
out, with a comment that says how. Our importer may refuse a model, with a one-line
FormatError only; a refusal of a model onnxruntime runs must be one of the family's
KNOWN_REFUSALS (the importer's documented limits), and each family must compare most of
its examples (a family whose models all fail to build would otherwise pass unseen).

Integer inputs that shapes depend on (pads, axes, sizes, repeats, K) are initializers,
known at import, as the format's static shapes need. The default run draws EXAMPLES
examples per family (derandomized, so CI sees the same ones); UOPGRAD_FUZZ_EXAMPLES=N
draws N per family for a long hunt.
"""

from __future__ import annotations

import collections
import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx has no wheel for this Python: the ONNX import tests skip")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime has no wheel for this Python: the ONNX tests skip")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from uopcli import FormatError  # noqa: E402
from test_onnx_import_ops import Init, one_node_model, ours  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
EXAMPLES = int(os.environ.get("UOPGRAD_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
ort.set_default_logger_severity(4)

# Refusals of models onnxruntime runs that are the importer's stated limits, by family
# (regular expressions): a refusal matching none of these fails the family, an import bug
# though no wrong value. None so far: the fuzz's refusals were bugs, and are fixed
KNOWN_REFUSALS: dict[str, tuple[str, ...]] = {}


# ----------------------------------------------------------------------------- comparing

def mismatch(got, want) -> str | None:
    """Why `got` is not `want`, or None: shape and dtype exactly; floats within 1e-5
    relative, 1e-6 of the largest finite magnitude absolute; nan where nan; the rest exactly."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
    if want.dtype.kind == "f":
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        same = np.isclose(got, want, rtol=1e-5, atol=1e-6 * scale, equal_nan=True)
    else:
        same = got == want
    if same.all():
        return None
    bad = np.argwhere(~same)[:4]
    return (f"{(~same).sum()} of {same.size} differ; at {bad.tolist()}: ours {[got[tuple(i)].item() for i in bad]}, "
            f"onnxruntime {[want[tuple(i)].item() for i in bad]}")


def sorted_top_k(values, indices, axis):
    """TopK with sorted=0 leaves the order open: both outputs put in (value, index) order."""
    if values.size == 0:
        return values, indices
    values, indices = np.moveaxis(values, axis, -1), np.moveaxis(indices, axis, -1)
    order = np.lexsort((indices, values), axis=-1)
    return tuple(np.moveaxis(np.take_along_axis(a, order, -1), -1, axis) for a in (values, indices))


class Family:
    """One family's tally across its examples: compared, refused by us (with why)."""

    def __init__(self, name):
        self.name, self.compared, self.refusals = name, 0, collections.Counter()
        # examples where ours differs from onnxruntime and onnx.reference cannot judge: it
        # fails, or differs from both (where it agrees with ours onnxruntime is outvoted)
        self.disputed, self.outvoted = [], 0

    def run(self, op, inputs, attrs, opset=18, types=(F,), canonical=None):
        model, feeds = one_node_model(op, list(inputs), attrs, opset, len(types), list(types))
        try:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            theirs = session.run(None, feeds)
        except Exception:  # noqa: BLE001 - whatever onnxruntime refuses is no example
            assume(False)
        try:
            got = ours(model, feeds)
        except FormatError as refusal:
            message = str(refusal)
            assert "\n" not in message and "Traceback" not in message, f"a refusal of more than one line: {message!r}"
            known = KNOWN_REFUSALS.get(self.name, ())
            assert any(re.search(k, message) for k in known), \
                f"{op} {attrs} (opset {opset}): refused a model onnxruntime runs: {message}"
            self.refusals[message] += 1
            return
        if canonical is not None:
            got, theirs = canonical(got), canonical(theirs)
        problems = [(i, why) for i, (mine, peer) in enumerate(zip(got, theirs)) if (why := mismatch(mine, peer))]
        if len(got) != len(theirs):
            problems.append((len(got), f"{len(got)} outputs, onnxruntime {len(theirs)}"))
        if problems:
            try:
                reference = ReferenceEvaluator(model).run(None, feeds)
                if canonical is not None:
                    reference = canonical(reference)
                agree = all(mismatch(r, t) is None for r, t in zip(reference, theirs))
                vote = "the reference is ours" if all(mismatch(g, r) is None for g, r in zip(got, reference)) \
                    else "all three differ"
            except Exception:  # noqa: BLE001 - a reference that cannot run does not vouch for onnxruntime
                agree, vote = False, "the reference fails"
            if not agree:  # where the two peers differ neither judges (check() counts these)
                if vote == "the reference is ours":
                    self.outvoted += 1
                else:
                    self.disputed.append(f"[{vote}] {op} {attrs} (opset {opset}): " + problems[0][1])
                assume(False)
            shapes = {k: list(v.shape) for k, v in feeds.items()}
            raise AssertionError(f"{op} {attrs} (opset {opset}), inputs {shapes}, "
                                 f"initializers {[i.array.tolist() for i in inputs if isinstance(i, Init)]}: "
                                 + "; ".join(f"output {i}: {why}" for i, why in problems))
        self.compared += 1

    def check(self):
        """After the run: most examples compared (not refused)."""
        refused = sum(self.refusals.values())
        assert self.compared >= max(1, EXAMPLES // 2), \
            f"{self.name}: only {self.compared} of {EXAMPLES} examples compared; refusals {dict(self.refusals)}"
        assert refused <= self.compared, f"{self.name}: {refused} refusals, {self.compared} compared: {dict(self.refusals)}"
        # a wrong value where onnx.reference cannot vouch for onnxruntime is skipped, so a bug
        # there would hide among the disputes: they must stay few
        assert len(self.disputed) <= max(2, self.compared // 50), \
            f"{self.name}: {len(self.disputed)} examples where ours differs from onnxruntime and onnx.reference " \
            f"fails or differs from both, e.g. {self.disputed[:3]}"


def fuzz(strategy):
    """A test running `strategy`'s examples, each a dict of Family.run's arguments."""
    def decorate(test):
        def run_family():
            family = Family(test.__name__.removeprefix("test_"))

            @FUZZ
            @given(strategy)
            def one(example):
                family.run(**example)
            one()
            family.check()
        run_family.__name__, run_family.__doc__ = test.__name__, test.__doc__
        return run_family
    return decorate


# ----------------------------------------------------------------------------- values

seeds = st.integers(0, 2 ** 32 - 1)
STYLES = ("normal", "ties", "mixed")


def floats(seed, style, shape, positive=False):
    """float32 values: normal ones, or small halves with many ties and -0.0, or a mix."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    if style == "normal":
        x = rng.standard_normal(shape)
    elif style == "ties":
        x = rng.integers(-3, 4, shape) * 0.5
        x = np.where(rng.random(shape) < 0.15, -0.0, x)
    else:
        x = rng.standard_normal(shape)
        pool = np.array([0.0, -0.0, 1.0, -1.0, 2.5])
        x = np.where(rng.random(shape) < 0.3, rng.choice(pool, shape), x)
    x = np.asarray(x, np.float32)
    return np.abs(x) + np.float32(0.25) if positive else x


def i64(values):
    return np.asarray(values, dtype=np.int64)


@st.composite
def data(draw, shape, positive=False):
    return floats(draw(seeds), draw(st.sampled_from(STYLES)), shape, positive)


def payload(draw, shape):
    """(data, its type): floats fed at run time, or a quarter of the time an int64
    initializer, known at import, where the importer folds the node to a constant."""
    x = draw(data(shape))
    return (Init((x * 4).astype(np.int64)), I64) if draw(st.integers(0, 3)) == 0 else (x, F)


# hypothesis leans toward its simplest choice (the first of sampled_from, False, 0), which
# for an attribute would be its default: the first choice here is the one that does something
FLAG = st.sampled_from([1, 0])  # an attribute whose default is 0
FLAG_OFF = st.sampled_from([0, 1])  # one whose default is 1
GIVEN = st.sampled_from([True, False])


def maybe(draw, attrs, key, value):
    """Give an attribute, or (now and then) leave it out: its default applies then."""
    if draw(GIVEN):
        attrs[key] = value


def put(draw, attrs, key, value, default):
    """Give an attribute; where `value` is its default, give it or leave it out."""
    if value != default or draw(GIVEN):
        attrs[key] = value


# ----------------------------------------------------------------------------- windows

AUTO_PADS = ("NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@st.composite
def window(draw, rank, max_kernel=3, max_pad=2, pad_below_kernel=False):
    """kernel, strides, dilations, pads (begins then ends) and auto_pad of a window of `rank`."""
    kernel = [draw(st.integers(1, max_kernel if rank < 3 else 2)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.sampled_from([1, 1, 2, 3] if rank < 3 else [1, 2])) for _ in range(rank)]
    auto_pad = draw(st.sampled_from(AUTO_PADS))
    pads = [draw(st.integers(0, min(max_pad, k - 1) if pad_below_kernel else max_pad)) for k in kernel * 2]
    return kernel, strides, dilations, pads, auto_pad


def window_attrs(draw, kernel, strides, dilations, pads, auto_pad, dilated=True, name_kernel=True):
    attrs = {}
    if name_kernel or draw(st.booleans()):
        attrs["kernel_shape"] = kernel
    if set(strides) != {1} or draw(st.booleans()):
        attrs["strides"] = strides
    if dilated and (set(dilations) != {1} or draw(st.booleans())):
        attrs["dilations"] = dilations
    if auto_pad == "NOTSET":
        if any(pads) or draw(st.booleans()):
            attrs["pads"] = pads
        maybe(draw, attrs, "auto_pad", "NOTSET")
    else:
        attrs["auto_pad"] = auto_pad
    return attrs


def spatial(draw, kernel, dilations, pads, auto_pad, most=4):
    """Input sizes that leave at least one window (the padded input holds a dilated kernel)."""
    sizes = []
    for i, (k, d) in enumerate(zip(kernel, dilations)):
        span = (k - 1) * d + 1
        padded = pads[i] + pads[i + len(kernel)] if auto_pad == "NOTSET" else 0
        low = 1 if auto_pad.startswith("SAME") else max(1, span - padded)
        sizes.append(draw(st.integers(low, low + most)))
    return sizes


RANKS = st.sampled_from([1, 2, 2, 2, 3])


@st.composite
def conv(draw):
    rank = draw(RANKS)
    kernel, strides, dilations, pads, auto_pad = draw(window(rank))
    if auto_pad.startswith("SAME"):  # onnxruntime's Conv refuses SAME_* with dilations
        dilations = [1] * rank
    group, per_group, out_per_group = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    x = draw(data([n, group * per_group] + spatial(draw, kernel, dilations, pads, auto_pad)))
    w = draw(data([group * out_per_group, per_group] + kernel))
    inputs = [x, w] + ([draw(data([group * out_per_group]))] if draw(st.booleans()) else [])
    attrs = window_attrs(draw, kernel, strides, dilations, pads, auto_pad, name_kernel=draw(st.booleans()))
    if group > 1 or draw(st.booleans()):
        attrs["group"] = group
    return dict(op="Conv", inputs=inputs, attrs=attrs, opset=draw(st.sampled_from([11, 18, 22])))


@st.composite
def conv_transpose(draw):
    rank = draw(RANKS)
    kernel, strides, dilations, pads, auto_pad = draw(window(rank))
    group, per_group, out_per_group = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    sizes = [draw(st.integers(1, 4)) for _ in range(rank)]
    x = draw(data([draw(st.integers(1, 2)), group * per_group] + sizes))
    w = draw(data([group * per_group, out_per_group] + kernel))
    inputs = [x, w] + ([draw(data([group * out_per_group]))] if draw(st.booleans()) else [])
    attrs = window_attrs(draw, kernel, strides, dilations, pads, auto_pad, name_kernel=draw(st.booleans()))
    if group > 1 or draw(st.booleans()):
        attrs["group"] = group
    # output_padding below the stride (or the dilation), as the spec asks
    extra = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations)]
    if any(extra) or draw(st.booleans()):
        attrs["output_padding"] = extra
    natural = [s * (i - 1) + e + (k - 1) * d + 1 for s, i, e, k, d in zip(strides, sizes, extra, kernel, dilations)]
    if draw(st.integers(0, 3)) == 0:  # output_shape: the pads follow from it (less than the natural size)
        attrs["output_shape"] = [n - draw(st.integers(0, min(n - 1, 3))) for n in natural]
        attrs.pop("pads", None)
    elif attrs.get("auto_pad", "NOTSET") != "NOTSET":
        # Excluded: SAME_* where the full output is shorter than in·stride (the padding would
        # be negative). The spec's output is in·stride (ours: zeros past the full output);
        # onnxruntime clamps the padding to 0 and gives the shorter output; the reference fails
        assume(attrs["auto_pad"] == "VALID" or all(n >= i * s for n, i, s in zip(natural, sizes, strides)))
    else:
        # pads that leave at least one output
        attrs["pads"] = [min(p, max(0, (n - 1) // 2)) for p, n in zip(pads, natural * 2)]
    return dict(op="ConvTranspose", inputs=inputs, attrs=attrs, opset=draw(st.sampled_from([11, 22])))


@st.composite
def pool(draw):
    op = draw(st.sampled_from(["MaxPool", "MaxPool", "AveragePool", "LpPool"]))
    rank = draw(RANKS)
    kernel, strides, dilations, pads, auto_pad = draw(window(rank, pad_below_kernel=True))
    opset = draw(st.sampled_from({"MaxPool": [11, 12, 22], "AveragePool": [11, 19, 22], "LpPool": [11, 18, 22]}[op]))
    dilated = op == "MaxPool" or opset >= 18 and op == "LpPool" or opset >= 19
    # Excluded: dilations with SAME_*. onnxruntime and onnx.reference pad a SAME pool for the
    # undilated kernel (an output of 0 from 1 element: kernel 2, dilation 3, stride 2) where
    # the spec's pad_shape dilates it, for ceil(in / stride) outputs; ours follows the spec
    if not dilated or auto_pad.startswith("SAME"):
        dilations = [1] * rank
    x = draw(data([draw(st.integers(1, 2)), draw(st.integers(1, 2))]
                  + spatial(draw, kernel, dilations, pads, auto_pad)))
    attrs = window_attrs(draw, kernel, strides, dilations, pads, auto_pad, dilated=dilated)
    if op != "LpPool" or opset >= 18:
        maybe(draw, attrs, "ceil_mode", draw(FLAG))
    types = [F]
    if op == "AveragePool":
        maybe(draw, attrs, "count_include_pad", draw(FLAG))
    if op == "LpPool":
        maybe(draw, attrs, "p", draw(st.integers(1, 3)))
    if op == "MaxPool" and draw(st.booleans()):
        types = [F, I64]
        maybe(draw, attrs, "storage_order", draw(FLAG))
    return dict(op=op, inputs=[x], attrs=attrs, opset=opset, types=types)


@st.composite
def global_pool(draw):
    # (GlobalLpPool is not in the importer's table)
    op = draw(st.sampled_from(["GlobalMaxPool", "GlobalAveragePool"]))
    x = draw(data([draw(st.integers(1, 3)) for _ in range(draw(st.integers(3, 5)))]))
    return dict(op=op, inputs=[x], attrs={}, opset=draw(st.sampled_from([11, 22])))


# ----------------------------------------------------------------------------- resampling

TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0]


@st.composite
def resize(draw):
    opset = draw(st.sampled_from([11, 13, 18, 19]))
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
    rank = draw(st.sampled_from([2, 4, 4, 4]))
    shape = [draw(st.integers(1, 2)) for _ in range(rank - 2)] + [draw(st.integers(1, 5)) for _ in range(2)]
    transforms = TRANSFORMS + (["half_pixel_symmetric"] if opset >= 19 else []) + \
        (["tf_half_pixel_for_nn"] if opset == 11 else [])
    attrs = {"mode": mode}
    transform = draw(st.sampled_from(transforms))
    put(draw, attrs, "coordinate_transformation_mode", transform, "half_pixel")
    if mode == "nearest":
        maybe(draw, attrs, "nearest_mode", draw(st.sampled_from(NEAREST_MODES)))
    if mode == "cubic":
        maybe(draw, attrs, "cubic_coeff_a", draw(st.sampled_from([-0.75, -0.5, -0.6])))
        maybe(draw, attrs, "exclude_outside", draw(FLAG))
    if opset >= 18 and mode != "nearest":
        maybe(draw, attrs, "antialias", draw(FLAG))
    # the axes resized: the last two (all of a 2-D input), or one of them, by attribute from 18
    axes = list(range(rank - 2, rank)) if rank == 4 else [0, 1]
    if opset >= 18 and draw(st.booleans()):
        axes = draw(st.sampled_from([axes, axes[::-1], axes[:1], axes[1:]]))
        # (non-negative: onnxruntime 1.32 misreads negative Resize axes, [-1, 2] resizing
        # axis 2 alone, and onnx.reference refuses them; ours take them as the positive ones)
        attrs["axes"] = axes
    elif rank == 4:
        axes = list(range(rank))  # scales for every axis, the outer ones 1
    roi = None
    if transform == "tf_crop_and_resize":
        # binary fractions: a decimal roi (0.1) is no float32, and the peers compute the
        # coordinate in float32 where we do in float64, so nearest's rounding at a tie (0.5
        # from roi 0.1 to 1 of 3 elements, sized 7) would differ by that rounding alone
        starts = [draw(st.sampled_from([0.0, 0.125, 0.25, 0.5])) for _ in axes]
        ends = [draw(st.sampled_from([1.0, 0.875, 0.75, 1.25])) for _ in axes]
        roi = Init(np.array([0.0 if a < rank - 2 and rank == 4 else s for a, s in zip(axes, starts)]
                            + [1.0 if a < rank - 2 and rank == 4 else e for a, e in zip(axes, ends)], np.float32))
        maybe(draw, attrs, "extrapolation_value", draw(st.sampled_from([0.0, -1.5])))
    elif opset == 11 or draw(st.booleans()):
        roi = Init(np.zeros(0, np.float32))  # Resize-11 takes an empty roi
    if draw(st.booleans()):
        scales = [1.0 if a < rank - 2 and rank == 4 else draw(st.sampled_from(SCALES)) for a in axes]
        inputs = [roi, Init(np.array(scales, np.float32))]
    else:
        sizes = [shape[a] if a < rank - 2 and rank == 4 else draw(st.integers(1, 7)) for a in axes]
        inputs = [roi, Init(np.zeros(0, np.float32)) if opset == 11 else None, Init(i64(sizes))]
        if opset >= 18 and len(axes) > 1 and draw(st.booleans()):
            attrs["keep_aspect_ratio_policy"] = draw(st.sampled_from(["stretch", "not_larger", "not_smaller"]))
    inputs = [draw(data(shape))] + inputs
    while inputs[-1] is None:
        inputs.pop()
    return dict(op="Resize", inputs=inputs, attrs=attrs, opset=opset)


@st.composite
def grid_sample(draw):
    opset = draw(st.sampled_from([16, 20, 22]))
    modes = ["bilinear", "nearest", "bicubic"] if opset == 16 else ["linear", "nearest", "cubic"]
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    x = draw(data([n, c, draw(st.integers(1, 4)), draw(st.integers(1, 4))]))
    rng = np.random.default_rng(draw(seeds))
    out = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    # points inside and out, and points on the half-pixel grids where rounding ties
    grid = rng.uniform(-1.4, 1.4, (n, *out, 2))
    on_grid = rng.integers(-8, 9, grid.shape) / 8.0
    grid = np.where(rng.random(grid.shape) < 0.4, on_grid, grid).astype(np.float32)
    attrs = {}
    maybe(draw, attrs, "mode", draw(st.sampled_from(modes)))
    maybe(draw, attrs, "padding_mode", draw(st.sampled_from(["zeros", "border", "reflection"])))
    maybe(draw, attrs, "align_corners", draw(FLAG))
    return dict(op="GridSample", inputs=[x, grid], attrs=attrs, opset=opset)


# ----------------------------------------------------------------------------- indexing

def shapes(draw, low=1, high=3, most=4):
    return [draw(st.integers(low, most)) for _ in range(draw(st.integers(1 if low else 0, high)))]


BOUNDS = st.one_of(st.integers(-8, 8), st.sampled_from([100, -100, 2 ** 63 - 1, -2 ** 63, 2 ** 31 - 1, -2 ** 31]))


@st.composite
def slice_(draw):
    shape = [draw(st.integers(1, 6)) for _ in range(draw(st.integers(1, 3)))]
    rank = len(shape)
    axes = draw(st.permutations(range(rank)))[:draw(st.integers(1, rank))]
    axes = [a - rank if draw(st.booleans()) else a for a in axes]
    starts, ends = [draw(BOUNDS) for _ in axes], [draw(BOUNDS) for _ in axes]
    steps = [draw(st.sampled_from([1, 1, 2, 3, -1, -1, -2, -3])) for _ in axes]
    # Excluded: an end of INT64_MAX or INT32_MAX with a negative step. The spec clamps it to
    # size - 1 (an empty slice from there, as onnx.reference and ours); onnxruntime takes it
    # for "through the start" (its own shape inference expects the empty output and warns)
    assume(not any(step < 0 and end in (2 ** 63 - 1, 2 ** 31 - 1) for step, end in zip(steps, ends)))
    x, kind = payload(draw, shape)
    inputs = [x, Init(i64(starts)), Init(i64(ends))]
    if draw(st.booleans()) or steps != [1] * len(steps) or sorted(axes) != list(range(rank))[:len(axes)]:
        inputs.append(Init(i64(axes)))
        if steps != [1] * len(steps) or draw(st.booleans()):
            inputs.append(Init(i64(steps)))
    return dict(op="Slice", inputs=inputs, attrs={}, opset=draw(st.sampled_from([11, 13])), types=[kind])


@st.composite
def pad(draw):
    opset = draw(st.sampled_from([11, 13, 18, 19]))
    mode = draw(st.sampled_from(["constant", "reflect", "edge"] + (["wrap"] if opset >= 19 else [])))
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
    rank = len(shape)
    axes = list(range(rank))
    if opset >= 18 and draw(st.booleans()):
        axes = draw(st.permutations(range(rank)))[:draw(st.integers(1, rank))]
        axes = [a - rank if draw(st.booleans()) else a for a in axes]
    pads = [draw(st.integers(-2, 3)) for _ in axes * 2]
    x, kind = payload(draw, shape)
    inputs = [x, Init(i64(pads))]
    if mode == "constant" and draw(st.booleans()):
        fill = draw(st.sampled_from([0.0, -1.5, 2.0]))
        inputs.append(Init(np.float32(fill) if kind == F else np.int64(fill * 2)))
    if axes != list(range(rank)):
        inputs += [None] * (3 - len(inputs)) + [Init(i64(axes))]
    attrs = {"mode": mode} if mode != "constant" or draw(st.booleans()) else {}
    return dict(op="Pad", inputs=inputs, attrs=attrs, opset=opset, types=[kind])


def index_input(draw, values):
    """Indices as a model input or as an initializer (known at import: folded)."""
    return Init(values) if draw(st.booleans()) else values


@st.composite
def gather(draw):
    op = draw(st.sampled_from(["Gather", "GatherElements", "GatherND"]))
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
    rank = len(shape)
    rng = np.random.default_rng(draw(seeds))
    attrs = {}
    if op == "Gather":
        axis = draw(st.integers(-rank, rank - 1))
        index_shape = shapes(draw, low=0 if draw(st.booleans()) else 1, high=2)
        indices = rng.integers(-shape[axis], shape[axis], index_shape)
        put(draw, attrs, "axis", axis, 0)
    elif op == "GatherElements":
        axis = draw(st.integers(-rank, rank - 1))
        index_shape = [draw(st.integers(1, s)) for s in shape]
        index_shape[axis] = draw(st.integers(1, 4))
        indices = rng.integers(-shape[axis], shape[axis], index_shape)
        put(draw, attrs, "axis", axis, 0)
    else:
        batch = draw(st.integers(0, rank - 1))
        last = draw(st.integers(1, rank - batch))
        index_shape = shape[:batch] + shapes(draw, low=1, high=2, most=3)[:draw(st.integers(0, 2))] + [last]
        limits = np.array(shape[batch:batch + last])
        indices = (rng.integers(0, 1 << 30, index_shape) % limits) - limits * rng.integers(0, 2, index_shape)
        if batch or draw(st.booleans()):
            attrs["batch_dims"] = batch
    x, kind = payload(draw, shape)
    return dict(op=op, inputs=[x, index_input(draw, i64(indices))], attrs=attrs,
                opset=draw(st.sampled_from([13, 18])), types=[kind])


@st.composite
def scatter(draw):
    op = draw(st.sampled_from(["ScatterElements", "ScatterND"]))
    reduction = draw(st.sampled_from(["none", "add", "mul", "max", "min"]))
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
    rank = len(shape)
    rng = np.random.default_rng(draw(seeds))
    unique = reduction == "none"  # the order of writes to one place is open only where it makes no difference
    attrs = {}
    if op == "ScatterElements":
        axis = draw(st.integers(-rank, rank - 1))
        index_shape = [draw(st.integers(1, s)) for s in shape]
        if unique:
            index_shape[axis] = draw(st.integers(1, shape[axis]))
            line = np.argsort(rng.random(index_shape[:axis % rank] + [shape[axis]] + index_shape[axis % rank + 1:]),
                              axis=axis)
            indices = np.take(line, range(index_shape[axis]), axis=axis)
        else:
            index_shape[axis] = draw(st.integers(1, 4))
            indices = rng.integers(0, shape[axis], index_shape)
        indices = np.where(rng.random(indices.shape) < 0.5, indices - shape[axis], indices)
        updates_shape = list(indices.shape)
        put(draw, attrs, "axis", axis, 0)
    else:
        last = draw(st.integers(1, rank))
        places = list(np.ndindex(*shape[:last]))
        count = draw(st.integers(1, len(places) if unique else 5))
        chosen = rng.permutation(len(places))[:count] if unique else rng.integers(0, len(places), count)
        indices = np.array([places[i] for i in chosen]).reshape(count, last)
        indices = np.where(rng.random(indices.shape) < 0.5, indices - np.array(shape[:last]), indices)
        if count % 2 == 0 and draw(st.booleans()):
            indices = indices.reshape(2, count // 2, last)
        updates_shape = list(indices.shape[:-1]) + shape[last:]
    if reduction != "none" or draw(st.booleans()):
        attrs["reduction"] = reduction
    opset = 18 if reduction in ("max", "min") else draw(st.sampled_from([16, 18]))
    return dict(op=op, inputs=[draw(data(shape)), index_input(draw, i64(indices)), draw(data(updates_shape))],
                attrs=attrs, opset=opset)


@st.composite
def movement(draw):
    op = draw(st.sampled_from(["Split", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Trilu"]))
    attrs, types, opset = {}, [F], 18
    if op == "Split":
        shape = [draw(st.integers(1, 6)) for _ in range(draw(st.integers(1, 3)))]
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        size = shape[axis]
        if axis or draw(st.booleans()):
            attrs["axis"] = axis
        how = draw(st.sampled_from(["split", "num_outputs", "outputs"]))
        x, kind = payload(draw, shape)
        inputs = [x]
        if how == "split":
            cuts = sorted(draw(st.lists(st.integers(0, size), min_size=0, max_size=3)))
            split = np.diff([0] + cuts + [size]).tolist()
            inputs.append(Init(i64(split)))
            types = [kind] * len(split)
            opset = draw(st.sampled_from([13, 18]))
        elif how == "num_outputs":
            attrs["num_outputs"] = draw(st.integers(1, min(size, 4)))
            types = [kind] * attrs["num_outputs"]
        else:
            count = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
            types, opset = [kind] * count, 13
        return dict(op=op, inputs=inputs, attrs=attrs, opset=opset, types=types)
    if op == "Tile":
        shape = shapes(draw)
        x, kind = payload(draw, shape)
        inputs = [x, Init(i64([draw(st.integers(0, 3)) for _ in shape]))]
        types = [kind]
    elif op == "Expand":
        shape = shapes(draw)
        target = [draw(st.sampled_from([1, s, 3])) if s == 1 else draw(st.sampled_from([1, s])) for s in shape]
        target = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))] + target
        x, kind = payload(draw, shape)
        inputs = [x, Init(i64(target))]
        types = [kind]
    elif op in ("DepthToSpace", "SpaceToDepth"):
        block = draw(st.integers(1, 3))
        mode = draw(st.sampled_from(["DCR", "CRD"]))
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
        shape = [n, c * block * block, h, w] if op == "DepthToSpace" else [n, c, h * block, w * block]
        attrs["blocksize"] = block
        if op == "DepthToSpace":
            put(draw, attrs, "mode", mode, "DCR")
        inputs = [draw(data(shape))]
        opset = 13
    else:
        shape = [draw(st.integers(1, 2)) for _ in range(draw(st.integers(0, 2)))] + \
            [draw(st.integers(1, 5)), draw(st.integers(1, 5))]
        inputs = [draw(data(shape))]
        if draw(st.booleans()):
            inputs.append(Init(i64(draw(st.integers(-6, 6)))))
        maybe(draw, attrs, "upper", draw(FLAG_OFF))
        opset = 14
    return dict(op=op, inputs=inputs, attrs=attrs, opset=opset, types=types)


# ----------------------------------------------------------------------------- reductions, scans, sorting

REDUCES = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@st.composite
def reduce(draw):
    op = draw(st.sampled_from(REDUCES))
    shape = shapes(draw, low=1, high=3)
    rank = len(shape)
    opset = draw(st.sampled_from([13, 18]))
    axes = draw(st.permutations(range(rank)))[:draw(st.integers(0, rank))]
    axes = [a - rank if draw(st.booleans()) else a for a in axes]
    x = draw(data(shape, positive=op == "ReduceLogSum"))
    attrs, inputs = {}, [x]
    by_input = opset >= 18 or op == "ReduceSum"
    if axes or draw(st.booleans()):
        if by_input:
            inputs.append(Init(i64(axes)))
        elif axes:
            attrs["axes"] = axes
    maybe(draw, attrs, "keepdims", draw(FLAG_OFF))
    if by_input:
        maybe(draw, attrs, "noop_with_empty_axes", draw(FLAG))
    return dict(op=op, inputs=inputs, attrs=attrs, opset=opset)


@st.composite
def arg_sort(draw):
    op = draw(st.sampled_from(["ArgMax", "ArgMin", "TopK", "TopK", "CumSum"]))
    shape = shapes(draw)
    rank = len(shape)
    axis = draw(st.integers(-rank, rank - 1))
    integer = draw(st.integers(0, 3)) == 0
    x = draw(data(shape))
    if integer:
        x = (x * 2).astype(np.int64)
    attrs, canonical, types = {}, None, [I64 if integer else F]
    if op == "CumSum":
        inputs = [x, Init(np.array(axis, draw(st.sampled_from([np.int64, np.int32]))))]
        maybe(draw, attrs, "exclusive", draw(FLAG))
        maybe(draw, attrs, "reverse", draw(FLAG))
        return dict(op=op, inputs=inputs, attrs=attrs, opset=14, types=types)
    if op == "TopK":
        put(draw, attrs, "axis", axis, -1)
        k = draw(st.integers(0, shape[axis]))
        maybe(draw, attrs, "largest", draw(FLAG_OFF))
        maybe(draw, attrs, "sorted", draw(FLAG_OFF))
        if attrs.get("sorted", 1) == 0:
            canonical = lambda outs: sorted_top_k(np.asarray(outs[0]), np.asarray(outs[1]), axis)  # noqa: E731
        return dict(op=op, inputs=[x, Init(i64([k]))], attrs=attrs, opset=draw(st.sampled_from([11, 24])),
                    types=types + [I64], canonical=canonical)
    put(draw, attrs, "axis", axis, 0)
    maybe(draw, attrs, "keepdims", draw(FLAG_OFF))
    maybe(draw, attrs, "select_last_index", draw(FLAG))
    return dict(op=op, inputs=[x], attrs=attrs, opset=13, types=[I64])


@st.composite
def softmax(draw):
    op = draw(st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"]))
    shape = shapes(draw)
    attrs = {}
    if draw(st.booleans()):
        attrs["axis"] = draw(st.integers(-len(shape), len(shape) - 1))
    return dict(op=op, inputs=[draw(data(shape))], attrs=attrs, opset=draw(st.sampled_from([11, 13])))


# ----------------------------------------------------------------------------- products

@st.composite
def matmul(draw):
    k = draw(st.integers(1, 4))
    a_batch, b_batch = shapes(draw, low=1, high=2, most=3), shapes(draw, low=1, high=2, most=3)
    a_batch = a_batch[:draw(st.integers(0, 2))]
    b_batch = [draw(st.sampled_from([1, d])) for d in a_batch[len(a_batch) - len(b_batch[:len(a_batch)]):]] \
        if draw(st.booleans()) else b_batch[:draw(st.integers(0, 2))]
    a = [draw(st.integers(1, 3)), k] if draw(st.integers(0, 4)) else [k]
    b = [k, draw(st.integers(1, 3))] if draw(st.integers(0, 4)) else [k]
    a_shape = a_batch + a if len(a) == 2 else a
    b_shape = b_batch + b if len(b) == 2 else b
    return dict(op="MatMul", inputs=[draw(data(a_shape)), draw(data(b_shape))], attrs={},
                opset=draw(st.sampled_from([9, 13])))


@st.composite
def gemm(draw):
    m, k, n = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    attrs = {}
    trans_a, trans_b = draw(FLAG), draw(FLAG)
    maybe(draw, attrs, "transA", trans_a)
    maybe(draw, attrs, "transB", trans_b)
    trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
    maybe(draw, attrs, "alpha", draw(st.sampled_from([1.0, 0.5, -2.0, 0.0])))
    maybe(draw, attrs, "beta", draw(st.sampled_from([1.0, 0.25, -1.0, 0.0])))
    inputs = [draw(data([k, m] if trans_a else [m, k])), draw(data([n, k] if trans_b else [k, n]))]
    c = draw(st.sampled_from([None, [], [n], [1], [m, 1], [1, n], [m, n]]))
    if c is not None:
        inputs.append(draw(data(c)))
    return dict(op="Gemm", inputs=inputs, attrs=attrs, opset=draw(st.sampled_from([11, 13])))


@st.composite
def einsum(draw):
    """A valid equation: 1-3 operands of 0-4 letters (repeats make diagonals), an ellipsis
    on some, the output explicit (any subset of the letters, in any order) or implicit."""
    letters = "abcde"
    size = {c: draw(st.integers(1, 3)) for c in letters}
    ellipsis = [draw(st.integers(1, 2)) for _ in range(draw(st.integers(0, 2)))]
    terms, inputs, used = [], [], []
    with_ellipsis = False
    for _ in range(draw(st.integers(1, 3))):
        term = "".join(draw(st.sampled_from(letters[:4])) for _ in range(draw(st.integers(0, 3))))
        shape = [size[c] for c in term]
        if draw(st.integers(0, 3)) == 0:
            cut = draw(st.integers(0, len(term)))
            dims = ellipsis[len(ellipsis) - draw(st.integers(0, len(ellipsis))):]
            dims = [draw(st.sampled_from([1, d])) for d in dims]  # broadcasting against the others
            term, shape = term[:cut] + "..." + term[cut:], shape[:cut] + dims + shape[cut:]
            with_ellipsis = True
        terms.append(term)
        used += [c for c in term if c in letters]
        inputs.append(draw(data(shape)))
    equation = ",".join(terms)
    if draw(st.booleans()):
        distinct = sorted(set(used))
        out = draw(st.permutations(distinct))[:draw(st.integers(0, len(distinct)))]
        output = "".join(out)
        if with_ellipsis and draw(st.integers(0, 3)):
            cut = draw(st.integers(0, len(output)))
            output = output[:cut] + "..." + output[cut:]
        equation += "->" + output
    return dict(op="Einsum", inputs=inputs, attrs={"equation": equation}, opset=12)


# ----------------------------------------------------------------------------- the families

@fuzz(conv())
def test_conv():
    """Conv 1-3-D: strides, dilations, asymmetric pads, auto_pad, groups (depthwise), bias."""


@fuzz(conv_transpose())
def test_conv_transpose():
    """ConvTranspose: the same and output_padding, output_shape."""


@fuzz(pool())
def test_pool():
    """MaxPool (Indices, storage_order, dilations), AveragePool (count_include_pad), LpPool:
    ceil_mode, pads, auto_pad."""


@fuzz(global_pool())
def test_global_pool():
    """GlobalMaxPool, GlobalAveragePool on 1-3 spatial axes."""


@fuzz(resize())
def test_resize():
    """Resize 11-19: every mode, coordinate transform, nearest rounding; cubic's a and
    exclude_outside; antialias; axes; keep_aspect_ratio_policy; scales or sizes."""


@fuzz(grid_sample())
def test_grid_sample():
    """GridSample 16/20/22: modes, padding modes, align_corners, points on the rounding ties."""


@fuzz(slice_())
def test_slice():
    """Slice: negative starts, ends and steps, clamping out of range (int64 extremes), axes."""


@fuzz(pad())
def test_pad():
    """Pad: constant, reflect, edge, wrap; negative pads; axes."""


@fuzz(gather())
def test_gather():
    """Gather, GatherElements, GatherND (batch_dims): negative indices, known or not."""


@fuzz(scatter())
def test_scatter():
    """ScatterElements, ScatterND with each reduction (duplicates where the order cannot matter)."""


@fuzz(movement())
def test_movement():
    """Split, Tile, Expand, DepthToSpace/SpaceToDepth, Trilu."""


@fuzz(reduce())
def test_reduce():
    """Reduce*: axes by attribute or input, empty, negative; keepdims; noop_with_empty_axes."""


@fuzz(arg_sort())
def test_arg_sort():
    """ArgMax/ArgMin (select_last_index, keepdims), TopK (largest, sorted, ties), CumSum."""


@fuzz(softmax())
def test_softmax():
    """Softmax, LogSoftmax, Hardmax along any axis, opset 11's 2-D coercion and 13's axis."""


@fuzz(matmul())
def test_matmul():
    """MatMul: vectors, batch ranks broadcasting."""


@fuzz(gemm())
def test_gemm():
    """Gemm: transA, transB, alpha, beta, C broadcast from every shape it may take."""


@fuzz(einsum())
def test_einsum():
    """Einsum: random equations with repeated letters (diagonals), ellipses, implicit outputs."""

