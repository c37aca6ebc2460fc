"""The graph inputs of an ONNX model as the importer reads them (a mixin of importer._Importer):
their declared types, the sizes of their symbolic dimensions (by a dimension's name, by an
input's, or from the values to be given; contradictions and what is left unsized refused in
one line each), and the inputs fixed to constants when importing (--constant)."""

from __future__ import annotations

import numpy as np

from uopcli import UOp
from uopcli.core.uop import valid_name

from .dtypes import FROM_ONNX, unsupported_type


class GraphInputs:
    """The importer's methods for its graph inputs: `_read_inputs` fills self.values,
    self.inputs and self.input_names for every input that is not an initializer."""

    def _read_inputs(self) -> None:
        from .importer import Value  # here: importer.py imports this module
        listed = [inp for inp in self.graph.input if inp.name not in self.values]
        initializers = {inp.name for inp in self.graph.input if inp.name in self.values}  # listed too (IR < 4)
        names = [inp.name for inp in listed]
        declared = {inp.name: self._declared_type(inp) for inp in listed}
        symbols = list(dict.fromkeys(d for _, dims in declared.values() for d in dims or () if isinstance(d, str)))
        by_input = {n: tuple(s) for n, s in self.shapes.items() if n in declared}  # an input's name wins
        by_name = {n: s for n, s in self.shapes.items() if n not in declared and n in symbols}
        for option, unknown, also in (
                ("--constant", [n for n in self.constants if n not in declared], ""),
                ("--shape", [n for n in self.shapes if n not in declared and n not in symbols and n not in initializers],
                 f"; symbolic dimensions: {', '.join(symbols) or 'none'}")):
            if unknown:
                self.fail(f"{option} names no input{' or symbolic dimension' * bool(also)} of the model: "
                          f"{', '.join(sorted(unknown))}; inputs: {', '.join(names) or 'none'}{also}")
        for name, shape in by_name.items():  # sizes by name first, then those inputs' shapes give
            size = shape if isinstance(shape, int) else shape[0] if len(shape) == 1 else None
            if size is None:
                self.fail(f"--shape {name}={','.join(map(str, shape))}: {name} is a symbolic dimension: give one size, "
                          f"--shape {name}=<size>")
            self._size(name, int(size), f"--shape {name}={size}")
        for name, shape in by_input.items():
            if name in self.constants:
                self.fail(f"--shape and --constant both name input {name!r}: a constant's shape is its value's")
            self._size_from(shape, declared[name][1], name, f"--shape {name}={','.join(map(str, shape))}")
        for inp in listed:  # a constant's value sizes its symbolic dimensions too
            if inp.name in self.constants:
                self.values[inp.name] = Value(const=self._pinned(inp, declared[inp.name]))
        given = {}  # shapes of the values to be given, for the inputs of symbolic shape --shape left
        for name, (_, dims) in declared.items():
            shape = self.given_shapes.get(name)
            symbolic = dims is None or not all(isinstance(d, int) for d in dims)
            if shape is not None and symbolic and name not in by_input and name not in self.constants:
                given[name] = tuple(int(n) for n in shape)
                self._size_from(given[name], dims, name, f"the value given for {name} ([{', '.join(map(str, shape))}])")
        if self.assume_size is not None:  # what no option and no value sized (uopgrad info)
            for name in symbols:
                if name not in self.sizes:
                    self._size(name, self.assume_size, "assumed")
                    self.assumed.append(name)
        unsized = []
        for inp in listed:
            if inp.name in self.constants:
                continue
            dtype, dims = declared[inp.name]
            shape = by_input.get(inp.name)
            shape = self._sized(dims) if shape is None else shape
            shape = given.get(inp.name) if shape is None else shape
            if shape is None:
                unsized.append((inp.name, dims))
                continue
            node = UOp.param(self.graph_name(inp.name), shape, dtype)
            self.values[inp.name] = Value(node=node)
            self.inputs.append(node)
            self.input_names[node] = inp.name
        if unsized:
            self.fail(self._unsized(unsized))

    def _size(self, name: str, size: int, by: str) -> None:
        """Symbolic dimension `name` is `size`, as `by` says; a contradiction is refused naming both."""
        if name in self.sizes and self.sizes[name] != size:
            self.fail(f"{by} gives {name}={size}, but {self._sized_by[name]}: a symbolic dimension has one size")
        if name not in self.sizes:
            self.sizes[name] = size
            self._sized_by[name] = by if by == f"--shape {name}={size}" else f"{by} gives {name}={size}"

    def _size_from(self, shape: tuple, dims, name: str, by: str) -> None:
        """The sizes `shape` (input `name`'s) gives its symbolic dimensions, once it fits the file's."""
        if dims is not None and (len(shape) != len(dims) or any(isinstance(d, int) and d != n
                                                               for d, n in zip(dims, shape))):
            self.fail(f"{by} does not fit the file's shape [{dims_text(dims)}] of input {name!r}")
        for d, n in zip(dims or (), shape):
            if isinstance(d, str):
                self._size(d, int(n), by)

    def _sized(self, dims) -> tuple[int, ...] | None:
        """The file's shape with its symbolic dimensions sized; None while one is not."""
        if dims is None:
            return None
        shape = tuple(self.sizes.get(d) if isinstance(d, str) else d for d in dims)
        return None if None in shape else shape

    def _unsized(self, unsized: list) -> str:
        """The one refusal for every input whose shape is still open, with what to type."""
        listed = ", ".join(f"{name} (no shape in the file)" if dims is None else
                           f"{name} [{dims_text([self.sizes.get(d, d) if isinstance(d, str) else d for d in dims])}]"
                           for name, dims in unsized)
        symbols = list(dict.fromkeys(d for _, dims in unsized for d in dims or ()
                                     if isinstance(d, str) and d not in self.sizes))
        whole = [name for name, dims in unsized if dims is None or None in dims]  # no name to size it by
        example = " ".join([f"--shape {d}=<size>" for d in symbols] + [f"--shape {n}=<dims>" for n in whole])
        if not whole:
            example += f" (or --shape {unsized[0][0]}=<dims>)"
        if all(dims is None for _, dims in unsized):
            return (f"{'inputs' if len(unsized) > 1 else 'input'} with no shape in the file: "
                    f"{', '.join(name for name, _ in unsized)}: give {'their shapes' if len(unsized) > 1 else 'its shape'}"
                    f" with {example}")
        one = len(unsized) == 1 and len(symbols) + unsized[0][1].count(None) == 1
        what = "a symbolic dimension" if one else "symbolic dimensions"
        if any(dims is None for _, dims in unsized):
            what += " or no shape"
        return (f"{'inputs' if len(unsized) > 1 else 'input'} with {what}: {listed}: give "
                f"{'its size' if one else 'their sizes'} with {example}")

    def _pinned(self, inp, declared) -> np.ndarray:
        """Input `inp`'s value from `constants`, as its element type (an integer or bool
        input exactly: 2.5 is no int64) and its shape (a symbolic dimension takes the
        value's size; values in a row fill a shape of as many elements)."""
        dtype, named = declared
        dims = None if named is None else [self.sizes.get(d) if isinstance(d, str) else d for d in named]
        given = np.asarray(self.constants[inp.name])
        what = f"--constant {inp.name}"
        if given.dtype.kind not in "biuf":
            self.fail(f"{what}: give numbers, not {given.dtype}")
        misfit = None if dtype.is_float else _first_misfit(given, dtype)
        if misfit is not None:
            self.fail(f"{what}: {misfit} is no value of the input's type {dtype.name}")
        value = given.astype(dtype.np)  # a float rounds to the input's float type, as a file's value would
        if dims is None:
            return value
        if None not in dims and value.size == int(np.prod(dims, dtype=np.int64)):
            return value.reshape(dims)
        if value.ndim != len(dims) or any(d is not None and d != n for d, n in zip(dims, value.shape)):
            shape = dims_text([n if n is not None else d for n, d in zip(dims, named)])
            self.fail(f"{what}: {value.size} value{'s' * (value.size != 1)} of shape {list(value.shape)} "
                      f"do not fit the file's shape [{shape}]")
        self._size_from(value.shape, named, inp.name, what)  # its symbolic dimensions take its sizes
        return value

    def _declared_type(self, inp):
        """(DType, dims) of a graph input as the file declares it: dims None where the file
        gives no shape; a symbolic dimension is its name (a str), or None if it has none."""
        from .importer import _text  # here: importer.py imports this module
        tensor_type = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
        if tensor_type is None:  # named with the first node that takes it
            user = next(((_text(n.name) or f"#{i}", _text(n.op_type)) for i, n in enumerate(self.graph.node)
                         if inp.name in n.input), (None, None))
            self.fail(f"input {inp.name!r} is not a tensor (a sequence, map or optional is not supported)",
                      repr(user[0]) if user[0] else None, user[1])
        dtype = FROM_ONNX.get(tensor_type.elem_type)
        if dtype is None:
            self.fail(f"input {inp.name!r}: {unsupported_type(tensor_type.elem_type)}")
        if not tensor_type.HasField("shape"):
            return dtype, None
        return dtype, [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else
                       (_text(d.dim_param) or None) if d.HasField("dim_param") else None
                       for d in tensor_type.shape.dim]


def _first_misfit(given: np.ndarray, dtype):
    """The first element of `given` that no value of the integer or bool type `dtype`
    equals (2.5, nan, 2^63 for int64, 2 for bool), else None: compared as Python numbers,
    since a cast and back can wrap (uint64 2^63 to int64 and back) or round (float64)."""
    low, high = (0, 1) if dtype.is_bool else (int(np.iinfo(dtype.np).min), int(np.iinfo(dtype.np).max))
    for element in given.reshape(-1).tolist():
        if isinstance(element, float) and not element.is_integer():
            return element
        if not low <= int(element) <= high:
            return element
    return None


def dims_text(dims) -> str:
    """`N, 6`: a shape as the file gives it, `?` for a symbolic dimension without a name."""
    return ", ".join("?" if d is None else str(d) for d in dims)


def safe_name(name: str, taken) -> str:
    """An ONNX name as a graph input or output name (no whitespace, '=' or ','; unique):
    the name itself when it is valid and not taken, else its unsafe characters as '_' and
    a suffix _2, _3, ... until it collides with nothing in `taken`."""
    safe = "".join("_" if ch.isspace() or ch in "=," else ch for ch in name) or "unnamed"
    candidate, n = safe, 1
    while candidate in taken or not valid_name(candidate):
        n += 1
        candidate = f"{safe}_{n}"
    return candidate


def graph_names(graph) -> dict[str, str]:
    """{ONNX name: graph name} for every name of `graph` that may name a graph input or
    output (its inputs, initializers, nodes' outputs, outputs): a valid name is its own, so
    every valid name is reserved first; only the others (whitespace, '=' or ',') are
    renamed, in the file's order, to names that collide with none of them. First come first
    served would have given initializer "a b" the name "a_b" and the real "a_b" "a_b_2", so
    --wrt a_b differentiated with respect to "a b"."""
    names = list(dict.fromkeys([v.name for v in graph.input] + [t.name for t in graph.initializer] +
                               [o for node in graph.node for o in node.output if o] +
                               [v.name for v in graph.output]))
    taken = {name for name in names if valid_name(name)}
    mapping = {name: name for name in taken}
    for name in names:
        if name not in mapping:
            mapping[name] = safe_name(name, taken)
            taken.add(mapping[name])
    return mapping
