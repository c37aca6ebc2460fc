"""Older versions of the ops in import_table.TABLE: one entry per (op, since_version), read
as a version the op's row follows, by the difference the ONNX spec documents
(https://onnx.ai/onnx/operators/, each op's "Changelog"). Nothing here computes an op: an
entry names the row's version whose meaning the node then has, the attributes the old
version had that the row has not (with their spec defaults), and, where the old version
spelled something differently, a `rewrite` that turns the node into the newer form
(attributes that became inputs, the legacy `broadcast`/`axis` of Add-6, ...) before the
row's function builds it.

    ("Gather", 1): Old(11, note="negative indices from 11")   same meaning, fewer types
    ("Pad", 2): Old(18, {"pads": None, "value": 0.0}, pad_attributes)  pads became an input

The importer looks a node's version up in its row first (TABLE[op].versions), then here.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np



class Old(NamedTuple):
    target: int                       # the row's version the node is read as
    attributes: dict = {}             # the old version's own attributes, with their defaults
    rewrite: Callable | None = None   # (ctx) -> None: the node in the target's form
    note: str = ""                    # the documented difference
    outputs: Callable | None = None   # (ctx, outputs) -> outputs: the old version's output types


# consumed_inputs (versions 1-5): a hint for in-place memory reuse, no meaning for the values
_CONSUMED = {"consumed_inputs": None}


def _take(ctx, name: str):
    """An old attribute's value (its default when absent), removed from the node's attributes."""
    return ctx.attrs.pop(name, ctx.old.attributes.get(name))


def _drop_consumed(ctx) -> None:
    ctx.attrs.pop("consumed_inputs", None)


def legacy_broadcast(ctx) -> None:
    """Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Less/Greater before 7: without `broadcast` the
    shapes are equal; with it, B's axes line up with A's from `axis` (default: B's last
    axis with A's last), which numpy broadcasting (version 7) needs written out as B
    reshaped with trailing 1s."""
    _drop_consumed(ctx)
    broadcast, axis = _take(ctx, "broadcast"), _take(ctx, "axis")
    a, b = ctx.x(0), ctx.x(1)
    if not broadcast:
        if a.shape != b.shape:
            ctx.refuse(f"shapes {list(a.shape)} and {list(b.shape)} differ and broadcast is 0")
        return
    rank_a, rank_b = len(a.shape), len(b.shape)
    start = rank_a - rank_b if axis is None else (axis + rank_a if axis < 0 else axis)
    if not 0 <= start <= rank_a - rank_b or any(
            s not in (1, a.shape[start + i]) for i, s in enumerate(b.shape)):
        ctx.refuse(f"B {list(b.shape)} does not broadcast onto A {list(a.shape)} from axis {start}")
    trailing = rank_a - rank_b - start
    if trailing:
        ctx.set_input(1, b.reshape(*b.shape, *(1,) * trailing))


def ignore_legacy(*names: str) -> Callable:
    """A rewrite that drops attributes with no meaning at inference (consumed_inputs, the
    broadcast flag of Gemm, which the later versions' unidirectional broadcast replaces)."""
    def rewrite(ctx) -> None:
        for name in names:
            ctx.attrs.pop(name, None)
    return rewrite


def inference_only(*names: str) -> Callable:
    """BatchNormalization and Dropout before 7: is_test=0 asks for training (batch statistics,
    a random mask), which the later versions dropped; refused, the rest is the target's."""
    def rewrite(ctx) -> None:
        if not _take(ctx, "is_test"):
            ctx.refuse("is_test=0 asks for training behaviour: only inference (is_test=1) is imported")
        for name in names:
            ctx.attrs.pop(name, None)
    return rewrite


def batch_norm_spatial(ctx) -> None:
    """BatchNormalization 1-7: spatial=1 (the default) is version 9's per-channel form;
    spatial=0 (statistics per activation) is refused."""
    _drop_consumed(ctx)
    if ctx.old.attributes.get("is_test") is not None and not _take(ctx, "is_test"):
        ctx.refuse("is_test=0 asks for training behaviour: only inference (is_test=1) is imported")
    if not _take(ctx, "spatial"):
        ctx.refuse("spatial=0 (statistics per activation) is not supported")


def attributes_to_inputs(*names: str, dtype=np.int64) -> Callable:
    """The attributes that later versions take as inputs, appended as constant inputs in
    the input order of the target version (None where absent)."""
    def rewrite(ctx) -> None:
        _drop_consumed(ctx)
        for offset, name in enumerate(names):
            value = _take(ctx, name)
            ctx.set_input(1 + offset, None if value is None else np.asarray(value, dtype=dtype))
    return rewrite


def pad_attributes(ctx) -> None:
    """Pad-1/2: pads (paddings in 1) and value attributes -> Pad-18's pads and constant_value inputs."""
    pads = _take(ctx, "pads") if "pads" in ctx.old.attributes else _take(ctx, "paddings")
    value = _take(ctx, "value")
    if pads is None:
        ctx.refuse("needs the attribute pads")
    ctx.set_input(1, np.asarray(pads, np.int64))
    ctx.set_input(2, np.asarray(value).astype(ctx.x(0).dtype.np))


def split_input_to_attribute(ctx) -> None:
    """Split-1: the sizes from an optional second input or the `split` attribute (version 2: the attribute)."""
    if ctx.present(1):
        ctx.attrs["split"] = [int(v) for v in np.asarray(ctx.static(1, "split")).reshape(-1)]
        ctx.set_input(1, None)


def concat_axis_default(ctx) -> None:
    """Concat-1: axis optional, 1 by default."""
    ctx.attrs.setdefault("axis", 1)


def cast_type_name(ctx) -> None:
    """Cast-1: `to` a type name ("FLOAT", "INT64", ...) rather than its code."""
    from onnx import TensorProto
    to = ctx.attrs.get("to")
    if isinstance(to, str):
        try:
            ctx.attrs["to"] = TensorProto.DataType.Value(to.upper())
        except ValueError:
            ctx.refuse(f"to={to!r} is not an ONNX element type")


def mask_of_input_type(ctx, outputs):
    """Dropout before 10: the mask output has the input's type (bool from 10): ones at inference."""
    if isinstance(outputs, list) and len(outputs) > 1:
        outputs = [outputs[0], outputs[1].cast(outputs[0].dtype)]
    return outputs


def channel_slope(ctx) -> None:
    """PRelu-1/6: a slope of shape [C] (or [1]) is per channel, on axis 1; PRelu-7 broadcasts
    it from the right, so a [C] slope becomes [C, 1, ..., 1]."""
    _drop_consumed(ctx)
    x, slope = ctx.x(0), ctx.x(1)
    if len(slope.shape) == 1 and slope.shape[0] != 1 and len(x.shape) > 2:
        ctx.set_input(1, slope.reshape(slope.shape + (1,) * (len(x.shape) - 2)))


def _unary(target: int = 6) -> Old:
    return Old(target, _CONSUMED, _drop_consumed, "consumed_inputs (no meaning) before 6")


def _broadcast(target: int, consumed: bool = False) -> Old:
    attributes = {"broadcast": 0, "axis": None, **(_CONSUMED if consumed else {})}
    return Old(target, attributes, legacy_broadcast, "legacy broadcast/axis before 7, numpy broadcasting from 7")


_WIDER = "the same meaning; later versions widen the element types"

VERSIONS: dict[tuple[str, int], Old] = {
    # -- elementwise: consumed_inputs before 6, the legacy broadcast before 7
    **{(op, 1): _unary() for op in ("Abs", "Neg", "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh",
                                    "Reciprocal", "Floor", "Ceil")},
    **{(op, 1): _broadcast(7, consumed=True) for op in ("Add", "Sub", "Mul", "Div")},
    **{(op, 6): _broadcast(7) for op in ("Add", "Sub", "Mul", "Div")},
    ("Pow", 1): _broadcast(7),
    **{(op, 1): _broadcast(7) for op in ("And", "Or", "Xor")},
    ("Equal", 1): _broadcast(11),
    ("Equal", 7): Old(11, note=_WIDER),
    ("Less", 1): _broadcast(9),
    ("Less", 7): Old(9, note=_WIDER),
    ("Greater", 1): _broadcast(9),
    ("Greater", 7): Old(9, note=_WIDER),
    ("Max", 1): Old(8, _CONSUMED, _drop_consumed, "consumed_inputs; equal shapes before 8"),
    ("Max", 6): Old(8, note="equal shapes before 8 (a case of broadcasting)"),
    ("Min", 1): Old(8, _CONSUMED, _drop_consumed, "consumed_inputs; equal shapes before 8"),
    ("Min", 6): Old(8, note="equal shapes before 8 (a case of broadcasting)"),
    ("Sum", 1): Old(8, _CONSUMED, _drop_consumed, "consumed_inputs; equal shapes before 8"),
    ("Sum", 6): Old(8, note="equal shapes before 8 (a case of broadcasting)"),
    ("Mean", 1): Old(8, _CONSUMED, _drop_consumed, "consumed_inputs; equal shapes before 8"),
    ("Mean", 6): Old(8, note="equal shapes before 8 (a case of broadcasting)"),
    ("PRelu", 1): Old(7, _CONSUMED, channel_slope, "consumed_inputs; a [C] slope is per channel before 7"),
    ("PRelu", 6): Old(7, rewrite=channel_slope, note="a [C] slope is per channel (axis 1) before 7"),
    ("Cast", 1): Old(6, rewrite=cast_type_name, note="`to` a type name before 6"),
    # -- products, windows, normalisation
    ("MatMul", 1): Old(9, note=_WIDER),
    ("Gemm", 1): Old(11, {"broadcast": 0}, ignore_legacy("broadcast"),
                     "C required and its broadcast flagged before 7; unidirectional broadcast from 7"),
    ("Gemm", 6): Old(11, {"broadcast": 0}, ignore_legacy("broadcast"), "as Gemm-1, without consumed_inputs"),
    ("Gemm", 7): Old(11, note="C required before 11"),
    ("Gemm", 9): Old(11, note="C required before 11; 9 widens the types"),
    ("Conv", 1): Old(11, note="the same meaning (11 rewords auto_pad)"),
    ("ConvTranspose", 1): Old(11, note="the same meaning (11 rewords auto_pad and output_shape)"),
    ("MaxPool", 1): Old(12, note="no storage_order, ceil_mode or dilations before 8/10"),
    ("MaxPool", 8): Old(12, note="the same meaning; no ceil_mode or dilations before 10"),
    ("AveragePool", 1): Old(11, note="no count_include_pad (0) before 7, no ceil_mode before 10"),
    ("AveragePool", 7): Old(11, note="no ceil_mode before 10"),
    ("AveragePool", 10): Old(11, note="the same meaning (11 rewords the padding)"),
    ("BatchNormalization", 1): Old(9, {"is_test": 0, "spatial": 1, **_CONSUMED}, batch_norm_spatial,
                                   "is_test and spatial; spatial=0 refused"),
    ("BatchNormalization", 6): Old(9, {"is_test": 0, "spatial": 1}, batch_norm_spatial,
                                   "is_test and spatial; spatial=0 refused"),
    ("BatchNormalization", 7): Old(9, {"spatial": 1}, batch_norm_spatial, "spatial; spatial=0 refused"),
    ("Dropout", 1): Old(12, {"is_test": 0, "ratio": 0.5, **_CONSUMED},
                        inference_only("ratio", "consumed_inputs"), "is_test=0 is training; ratio an attribute",
                        mask_of_input_type),
    ("Dropout", 6): Old(12, {"is_test": 0, "ratio": 0.5}, inference_only("ratio"),
                        "is_test=0 is training; ratio an attribute", mask_of_input_type),
    ("Dropout", 7): Old(12, {"ratio": 0.5}, ignore_legacy("ratio"),
                        "ratio an attribute, the identity at inference; the mask of the input's type",
                        mask_of_input_type),
    ("Dropout", 10): Old(12, {"ratio": 0.5}, ignore_legacy("ratio"),
                         "ratio an attribute, the identity at inference"),
    ("LSTM", 1): Old(7, {"output_sequence": 0}, ignore_legacy("output_sequence"),
                     "output_sequence (Y is always computed from 7)"),
    # -- reductions: negative axes from 11
    **{(op, 1): Old(11, note="negative axes from 11") for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceProd")},
    # -- shapes, movement, indexing
    ("Reshape", 1): Old(13, {"shape": None, **_CONSUMED}, attributes_to_inputs("shape"), "shape an attribute"),
    ("Reshape", 5): Old(13, note="0 copies the input's size in both; 13 widens the types"),
    ("Transpose", 1): Old(13, note=_WIDER),
    ("Flatten", 1): Old(11, note="floats only before 9; negative axis from 11"),
    ("Flatten", 9): Old(11, note="negative axis from 11"),
    ("Squeeze", 1): Old(11, note="negative axes from 11"),
    ("Unsqueeze", 1): Old(11, note="negative axes from 11"),
    ("Concat", 1): Old(11, rewrite=concat_axis_default, note="axis optional (1) before 4"),
    ("Concat", 4): Old(11, note="negative axis from 11"),
    ("Split", 1): Old(11, rewrite=split_input_to_attribute, note="split an optional input or an attribute"),
    ("Split", 2): Old(11, note="negative axis from 11"),
    ("Slice", 1): Old(10, {"starts": None, "ends": None, "axes": None},
                      attributes_to_inputs("starts", "ends", "axes"), "starts, ends and axes attributes before 10"),
    ("Gather", 1): Old(11, note="negative indices from 11"),
    ("Shape", 1): Old(13, note=_WIDER),
    ("Pad", 1): Old(18, {"paddings": None, "value": 0.0}, pad_attributes, "paddings and value attributes"),
    ("Pad", 2): Old(18, {"pads": None, "value": 0.0}, pad_attributes, "pads and value attributes"),
    # -- values known at import
    ("Constant", 1): Old(12, note="value only; 9 widens the types"),
    ("Constant", 9): Old(12, note="value only"),
    ("Constant", 11): Old(12, note="value or sparse_value (refused, a sparse tensor)"),
}
