"""ONNX models in and out: import an ONNX model as a Graph, export a Graph as standard ONNX.

Needs the optional extra `uopgrad[onnx]` (the `onnx` package), imported only here."""
