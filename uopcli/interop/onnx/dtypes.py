"""Element types: ONNX's TensorProto.DataType codes and format v1's dtypes, both ways.

Plain integers (the values of onnx.TensorProto's enum, fixed by the ONNX spec's onnx.proto),
so this table needs no import of onnx."""

from uopcli.core.ops import DType, dtypes

# TensorProto.DataType code -> dtype (onnx.proto: FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5
# INT32=6 INT64=7 BOOL=9 FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13)
FROM_ONNX: dict[int, DType] = {
    1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16,
    6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64,
    12: dtypes.uint32, 13: dtypes.uint64,
}
TO_ONNX: dict[DType, int] = {dtype: code for code, dtype in FROM_ONNX.items()}

# the names ONNX gives the codes we do not map, for error messages (onnx.proto)
UNSUPPORTED_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16",
                     17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ",
                     21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}

# the float types the format lacks (bfloat16, the float8s, float4): a model stored in one,
# as torch exports a checkpoint loaded in bfloat16, is refused with what to do instead
NARROW_FLOATS = {16, 17, 18, 19, 20, 23, 24}


def unsupported_type(code: int) -> str:
    """'element type NAME is not supported', and for a float type the format lacks, the
    export that imports."""
    hint = (" (the format's floats are float16, float32 and float64: export the model in one, e.g. torch's "
            "model.float() before torch.onnx.export)") if code in NARROW_FLOATS else ""
    return f"element type {UNSUPPORTED_NAMES.get(code, code)} is not supported{hint}"


# The doc_string the exporter gives the initializers it writes for a graph's constants (CONST
# values, BUFFER data, shapes and axes), so the importer reads them back as constants: other
# float initializers are a model's weights, which become inputs (a round trip
# .uop -> .onnx -> .uop keeps the graph's inputs, not one more per constant).
CONSTANT_DOC = "uopgrad constant"
