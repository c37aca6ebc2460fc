"""What uopgrad's ONNX importer refuses of ONNX's conformance data, and why: every
refused case must be covered here (tests/test_onnx_conformance.py); a case not covered
that is refused, raises or computes a wrong value fails the test.

Three kinds of keys:
- BY_OP: "Op" (every version) or "Op-N" (version N, the since_version the model's opset
  picks): the importer refuses the op as a whole, before building anything (its
  UnsupportedOps lists every such op of a model). A case whose model uses a listed op
  and passes fails too ("remove it from the list"): when an op is built, its rows leave
  this list.
- BY_DETAIL: (op, text): the op is imported, but a node of it is refused for a reason whose
  message contains `text` (an attribute value, an output).
- BY_MESSAGE: text in the refusal of anything but a node (an input's element type, ...).
"""

from __future__ import annotations

# -- the reasons, one line each (the groups below)
NOT_YET = "not yet built (not on issue 29's list of the ops a differentiable model uses)"
VALUE_SHAPE = "the output's shape depends on the input's values (uopgrad's graphs have static shapes)"
SEQUENCES = "sequences, optionals, maps and control flow (subgraphs): the format has tensors only"
RANDOM = "random or training-mode values: not a function of the inputs"
TRAINING = "training ops (ai.onnx.preview.training) and other domains (ai.onnx.ml): not ai.onnx's"
DTYPE = "an element type the format has not (string, bfloat16, float8, int4/uint4/float4, complex)"
PREVIEW = "a preview domain's op the spec gives no function body"
AT_IMPORT = ("an input that sets the output's shape or the sampling positions (OneHot's depth, a float "
             "Range, Resize's scales/sizes/roi) given at run time: uopgrad's graphs have static shapes")
CONVERTER = ("onnx.version_converter keeps PRelu-6's per-channel slope [C] where PRelu-7 broadcasts from the "
             "right: the converted model is not valid (as shipped, at opset 6, it passes)")
NOT_A_MODEL_OP = "image decoding outside a differentiable model (ImageDecoder: bytes of a JPEG or PNG file)"

_GROUPS: dict[str, tuple[str, ...]] = {
    NOT_YET: (
        # (every op once here is built; float64 Mod is refused BY_DETAIL)
    ),
    VALUE_SHAPE: (
        # (NonZero, Unique, Compress and NonMaxSuppression: built where the values that count are known)
    ),
    SEQUENCES: (
        "SequenceMap", "Optional", "OptionalGetElement", "OptionalHasElement",  # (the other sequence ops: BY_MESSAGE)
        # (If, Scan and Loop are decided when importing, control.py; refused by BY_MESSAGE where they cannot be)
    ),
    RANDOM: ("Bernoulli", "RandomUniformLike"),
    TRAINING: ("ai.onnx.preview.training.Gradient",),
    DTYPE: (
        "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer",
    ),
    PREVIEW: (
        # (the quantized ops are built, ops_quant.py, and BitCast, ops_tensor.py; their float8/int4/int2
        # cases are refused by element type; ai.onnx.preview's FlexAttention imports through its body)
    ),
    NOT_A_MODEL_OP: ("ImageDecoder",),  # (DFT, STFT, MelWeightMatrix: ops_signal.py; the windows: function bodies)
}

BY_OP: dict[str, str] = {key: reason for reason, keys in _GROUPS.items() for key in keys}

BY_DETAIL: dict[tuple[str, str], str] = {
    ("Dropout", "training_mode"): RANDOM,             # training_mode=true: a random mask
    ("Mod", "Mod of float64 is not supported"): NOT_YET,  # no exact float64 remainder from the format's ops
    ("PRelu", "do not broadcast"): CONVERTER,
    ("Cast", "element type"): DTYPE,                  # casts to float8, int4, ...
    ("Cast", "attribute 'round_mode'"): DTYPE,        # Cast-28's rounding of casts to float8e8m0
    ("CastLike", "element type"): DTYPE,
}

BY_MESSAGE: dict[str, str] = {
    "is not a tensor (a sequence, map or optional": SEQUENCES,
    "opset_import has no ai.onnx": TRAINING,          # models of ai.onnx.ml or training ops alone
    **{f"element type {name} is not supported": DTYPE for name in (
        "STRING", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
        "INT4", "FLOAT4E2M1", "COMPLEX64", "COMPLEX128", "24", "25", "26")},  # 24-26: FLOAT8E8M0, UINT2, INT2
    "a sequence input or output": SEQUENCES,
    "is a sequence: the format has tensors only": SEQUENCES,   # a sequence as the graph's output
    "so its positions must be constants": SEQUENCES,           # a position computed at run time
    "the format has no control flow": SEQUENCES,               # an If whose condition is computed at run time
    "must be known when importing (a constant or a shape), but it is computed": AT_IMPORT,
    "give its value with --constant": AT_IMPORT,               # a model's input itself (a run of several data sets)
}


def refusal_reason(detail: str, ops: tuple) -> str | None:
    """The reason a refusal is listed under, None when it is not listed."""
    for text, reason in BY_MESSAGE.items():
        if text in detail:
            return reason
    reasons = []
    for op, version in ops:
        if version is None and not any(o == op for o, _ in BY_DETAIL):
            reasons.append(BY_OP.get(op))  # another domain's op: no version
        elif version is None:
            reasons.append(next((r for (o, text), r in BY_DETAIL.items() if o == op and text in detail), None))
        else:  # the op, that version, or (for an attribute) a detail
            reasons.append(BY_OP.get(f"{op}-{version}") or BY_OP.get(op) or next(
                (r for (o, text), r in BY_DETAIL.items() if o == op and text in detail), None))
    return reasons[0] if reasons and all(reasons) else None


def listed_ops(ops) -> list[str]:
    """The BY_OP keys that name one of `ops` ((op, version) pairs of a model that passes)."""
    return [key for op, version in ops for key in (op, f"{op}-{version}") if key in BY_OP]
