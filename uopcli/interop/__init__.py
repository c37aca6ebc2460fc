"""Bridges to other frameworks: the only place optional packages (tinygrad, onnx) are
imported, each lazily inside its own module, so `import uopcli` never needs them."""
