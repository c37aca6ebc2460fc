"""ONNX models as Graphs: `load_onnx("model.onnx") -> (Graph, weights)`.

- Graph inputs become named inputs (PARAMs) of the shapes the file gives. A symbolic
  dimension (`["N", 6]`) takes its size from `shapes`, by its name (N: 7, everywhere it
  appears) or by the input's (x: (7, 6)), else from `given_shapes`, the shapes of the
  values the inputs will be given; sizes that contradict each other are refused at once,
  and the inputs left unsized are listed in one refusal. An input named in `constants`
  (the CLI's --constant) is fixed to that value instead, a constant of the graph: for the
  inputs that set a shape or the sampling positions (a Reshape's shape, a Resize's scales,
  a OneHot's depth), which a graph of static shapes must know when importing.
- Float initializers (the weights) become named inputs too, so they can be differentiated
  with respect to; their values are returned as `weights` {name: array} (the CLI writes
  them beside a converted file as model.npz, and uses them for inputs not given). Integer
  and bool initializers (index tables, masks, shapes), and those uopgrad's exporter wrote
  for a graph's constants (dtypes.CONSTANT_DOC), are constants of the graph.
- Each node is built by its row of import_table.TABLE. A node whose inputs are all known at
  import (constants, shapes, integer initializers; never weights) is computed then, so
  shape subgraphs (Shape, Gather, Concat, ... of sizes) fold to constants.
- Sequences (SequenceConstruct, SplitToSequence, ...) are unrolled: while importing, a
  sequence is a list of its tensors and each sequence op rewrites the list
  (ops_sequence.py); one at a graph input or output is refused.
- Every node made for an ONNX node carries Metadata(name=<op type>, loc=<ONNX node name>,
  scope=<module path>): the exporters' module path (`/encoder/layer.0/attention/MatMul`
  -> `encoder/layer.0/attention`) or the dynamo exporter's name scopes.
- Anything the importer cannot take exactly is refused with one FormatError naming the
  file, the ONNX node and its op, and what is missing.

onnx is imported inside the functions: importing this module needs nothing optional.
"""

from __future__ import annotations

import ast
import json
import math
import os
from typing import Iterable, Mapping

import numpy as np

from uopcli import FormatError, Graph, Metadata, UOp, UOpError
from uopcli.core.uop import next_serial
from uopcli.tools.inspect import FIXED_INPUTS, FOLDED_WEIGHTS, MERGED_WEIGHTS, RENAMED, TORCH_EXPORTER

from .control import CONTROL
from .torch_exports import merged_weights, torch_exporter
from .dtypes import CONSTANT_DOC, FROM_ONNX, TO_ONNX, unsupported_type
from .functions import body_opset, expanded_nodes, function_of, has_function
from .graph_inputs import GraphInputs, graph_names, safe_name
from .import_table import TABLE
from .import_versions import VERSIONS
from .ops_index import computed_from, differentiated
from .ops_sequence import TAKE_A_SEQUENCE, Sequence
from .ops_tensor import FOLD_LIMIT

ONNX_DOMAINS = ("", "ai.onnx")
# other domains whose ops the spec defines by function bodies, imported as those (functions.py)
BODY_DOMAINS = ("ai.onnx.preview",)


class Value:
    """An ONNX value while importing: its node (made on first use as data), its array when
    known at import, and whether it is a weight (an input that must never be folded); or a
    sequence: `seq`, the list of its elements (Values), never in the graph (ops_sequence.py)."""

    __slots__ = ("node", "const", "weight", "seq")

    def __init__(self, node: UOp | None = None, const=None, weight: bool = False, seq: list | None = None):
        self.node, self.const, self.weight, self.seq = node, const, weight, seq

    @property
    def shape(self) -> tuple[int, ...]:
        """A tensor's shape, from its node or its array."""
        return tuple(self.node.shape) if self.node is not None else tuple(np.shape(self.const))

    @property
    def dtype(self):
        """A tensor's element type, the format's DType, from its node or its array."""
        return self.node.dtype if self.node is not None else FROM_ONNX_NP(np.asarray(self.const))


def load_onnx(path: str, shapes: Mapping[str, tuple[int, ...]] | None = None, constants: Mapping | None = None,
              given_shapes: Mapping[str, tuple[int, ...]] | None = None, assume_size: int | None = None,
              wrt: Iterable[str] = (), external: list | None = None):
    """(Graph, weights) from an ONNX file, or from a serialized model's bytes
    (model.SerializeToString(); such a model's external data files are refused: there is
    no folder to find them in); external data files are read from the file's folder, and
    each one's path is appended to `external` (a list, when given: the CLI refuses to write
    over a file a command read)."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        data, path, base_dir = bytes(path), "<bytes>", None
    else:
        data, base_dir = read_bytes(path), os.path.dirname(os.path.abspath(path))
    return import_model(parse_model(data, path), shapes, source=path, base_dir=base_dir,
                        constants=constants, given_shapes=given_shapes, assume_size=assume_size, wrt=wrt,
                        digest=model_digest(data), external=external)


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", source=path) from None


def model_digest(data: bytes) -> str:
    """The sha256 of a model file's bytes, as the graph's meta records it (onnx.sha256):
    what `sha256sum model.onnx` prints, the same whatever the file is named or on stdin."""
    import hashlib
    return hashlib.sha256(data).hexdigest()


def parse_model(data: bytes, source: str = "<bytes>"):
    """The ModelProto in `data` (a file's bytes, or stdin's), refusing what is not a whole
    ONNX model; `source` names it in the refusal."""
    import onnx
    from google.protobuf.message import DecodeError
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise FormatError(f"not an ONNX model (truncated or another kind of file: {' '.join(str(e).split())})",
                          source=source) from None
    if not model.HasField("graph") or not model.graph.output:
        raise FormatError("not an ONNX model: it has no graph with outputs", source=source)
    return model


def import_model(model, shapes: Mapping[str, tuple[int, ...]] | None = None, source: str = "<model>",
                 base_dir: str | None = None, constants: Mapping | None = None,
                 given_shapes: Mapping[str, tuple[int, ...]] | None = None, assume_size: int | None = None,
                 wrt: Iterable[str] = (), digest: str | None = None, external: list | None = None):
    """(Graph, weights) from a ModelProto (see the module's docstring). `shapes`: the sizes
    of symbolic dimensions, {dimension name: size} or {input name: shape} (a name that is
    both is the input's); `constants`: {input name: values (array-like)} for inputs fixed
    when importing, each converted to the input's element type (exactly, for an integer or
    bool input) and shape; `given_shapes`: {input name: the shape of the value it will be
    given}, sizing what `shapes` leaves symbolic (names of other inputs are ignored);
    `assume_size`: the size of each symbolic dimension still unsized then (`uopgrad info`
    looks at a model nobody has sized yet), recorded in the graph's meta; `wrt`: the inputs
    the caller will differentiate with respect to (a refusal says they cannot be fixed);
    `digest`: the model file's model_digest, recorded in the graph's meta as onnx.sha256
    (never its file's name: the graph's bytes depend on the model's alone); `external`: a
    list the paths of the external data files read are appended to."""
    try:
        importer = _Importer(model, dict(shapes or {}), source, base_dir, dict(constants or {}),
                             dict(given_shapes or {}), assume_size, frozenset(wrt), digest)
        if external is not None:
            importer.external = external
        return importer.run()
    except UOpError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, UnicodeError, OverflowError) as e:
        # a damaged model protobuf still parsed (bytes where text should be, ...): one line, no traceback
        raise FormatError(f"a damaged ONNX model ({type(e).__name__}: {' '.join(str(e).split())})",
                          source=source) from None


# ----------------------------------------------------------------------------- the importer


class _Importer(GraphInputs):
    def __init__(self, model, shapes: dict, source: str, base_dir: str | None, constants: dict | None = None,
                 given_shapes: dict | None = None, assume_size: int | None = None, wrt: frozenset = frozenset(),
                 digest: str | None = None):
        self.digest = digest
        self.model, self.graph, self.shapes, self.source, self.base_dir = model, model.graph, shapes, source, base_dir
        self.constants, self.given_shapes = constants or {}, given_shapes or {}
        self.assume_size, self.assumed = assume_size, []  # symbolic dimensions sized by assume_size
        self.wrt = wrt  # the inputs to differentiate with respect to (--wrt), for refusals
        self.sizes: dict[str, int] = {}  # a symbolic dimension's name -> its size
        self._sized_by: dict[str, str] = {}  # ... -> what gave it (for a contradiction's refusal)
        self.values: dict[str, Value] = {}
        self.inputs: list[UOp] = []
        self.input_names: dict[UOp, str] = {}  # a graph input's PARAM -> its ONNX name (for refusals)
        self.weights: dict[str, np.ndarray] = {}
        self.weight_order: list[str] = []   # input names of the weights used, in the file's order
        self._weight_source: dict[str, str] = {}  # input name -> initializer name
        self.opset = _onnx_opset(model, source)
        self.domain_opsets = {entry.domain: entry.version for entry in model.opset_import}
        self._since: dict[tuple[str, int], int] = {}  # (op, opset) -> the version it picks
        self._copied_from: dict[str, str] = {}  # a weight copied by an Identity -> its initializer
        self._made_by: dict[str, tuple[str, str]] = {}  # a sequence's name -> (node label, op) that made it
        self.scope_prefix: str | None = None  # a Scan step's scope, over its body's nodes' own (control.py)
        self._names = graph_names(model.graph)  # ONNX name -> graph input/output name (graph_inputs.py)
        self.unfolded: dict[UOp, tuple] = {}  # a node of constants too large to compute -> (op, label, elements)
        self.renamed: dict[str, str] = {}  # the ONNX names the graph's inputs and outputs do not keep -> theirs
        self.external: list[str] = []  # the external data files read (load_onnx's `external`)

    def fail(self, message: str, node=None, op=None):
        raise FormatError(message, node=node, op=op, source=self.source)

    def run(self):
        self._refuse_unsupported()
        self._read_initializers()
        self._read_inputs()
        for index, node in enumerate(self.graph.node):
            self._import_node(node, index)
        outputs = {}
        for output in self.graph.output:
            value = self.values.get(output.name)
            if value is None:
                self.fail(f"output {output.name!r} is made by no node")
            if value.seq is not None:
                self.fail(f"output {output.name!r} is a sequence: the format has tensors only",
                          *self._made_by[output.name])
            node = self.weight_node(output.name, value) if value.weight else self.data(value)
            name = self.graph_name(output.name)
            if name in outputs:  # the same value listed twice: a name of its own, colliding with nothing
                name = safe_name(output.name, set(outputs) | set(self._names.values()))
                self.renamed.setdefault(output.name, name)
            outputs[name] = node
        in_file = {t.name: i for i, t in enumerate(self.graph.initializer)}  # weights in the file's order
        self.weight_order.sort(key=lambda name: in_file.get(self._copied_from.get(self._weight_source[name],
                                                                                  self._weight_source[name]), 0))
        inputs = self.inputs + [self.values[self._weight_source[name]].node for name in self.weight_order]
        graph = Graph(outputs, inputs=inputs, meta=self._meta())
        return graph, {name: self.weights[name] for name in self.weight_order}

    def unfolded_source(self, node: UOp):
        """(op, node label, elements) of a value too large to compute when importing that
        `node` is made from (self.unfolded), or None."""
        if not self.unfolded:
            return None
        stack, seen = [node], set()
        while stack:
            current = stack.pop()
            if current in self.unfolded:
                return self.unfolded[current]
            if current not in seen:
                seen.add(current)
                stack.extend(current.src)
        return None

    def graph_name(self, name: str) -> str:
        """The graph input or output name of ONNX value `name` (graph_names), a renaming
        recorded for the graph's meta (RENAMED) and the CLI's note."""
        graph_name = self._names.get(name)
        if graph_name is None:  # not a name of the top graph (a body's): one that collides with nothing
            graph_name = self._names[name] = safe_name(name, set(self._names.values()))
        if graph_name != name:
            self.renamed[name] = graph_name
        return graph_name

    def _meta(self) -> dict:
        meta = {"onnx.opset": str(self.opset)}
        if self.renamed:
            meta[RENAMED] = json.dumps(self.renamed, sort_keys=True)
        if self.model.producer_name:
            meta["onnx.producer"] = f"{self.model.producer_name} {self.model.producer_version}".strip()
        if self.digest:  # the model's bytes, not its file's name (a renamed copy, a pipe: the same graph)
            meta["onnx.sha256"] = self.digest
        if self.constants:  # inputs --constant fixed: the file no longer has them as inputs
            meta[FIXED_INPUTS] = json.dumps(sorted(self.constants))
        if self.assumed:
            meta["onnx.assumed_sizes"] = (f"{', '.join(f'{n}={self.assume_size}' for n in self.assumed)} (given no "
                                          f"size; --shape NAME=N sets one)")
        weights = {self._weight_source[name]: name for name in self.weight_order}  # ONNX value -> input
        folded = self._folded_weights(weights)
        if folded:
            meta[FOLDED_WEIGHTS] = json.dumps(folded, sort_keys=True)
        exporter = torch_exporter(self.model)
        if exporter:
            meta[TORCH_EXPORTER] = exporter
        merged = merged_weights(self.graph, weights) if exporter == "dynamo" else None
        if merged is not None:
            meta[MERGED_WEIGHTS] = json.dumps(merged, sort_keys=True)
        return meta

    def _folded_weights(self, inputs_named: dict[str, str]) -> dict[str, list[str]]:
        """{weight: [rewrite rule, module]} for each weight a node reads that an exporter's
        optimizer made by folding a BatchNorm into it: onnxscript (torch's dynamo export,
        optimize=True by default) tags such a node `pkg.onnxscript.rewriter.rule_name =
        FuseBatchNormIntoConv` (Gemm, ConvTranspose), with the BatchNorm's module path. The
        weight keeps the Conv's name but holds W·γ/σ, so its gradient is not the Conv's
        (`inputs_named`: ONNX value -> the graph input of that weight)."""
        folded = {}
        for node in self.graph.node:
            rule = next((p.value for p in node.metadata_props if p.key == "pkg.onnxscript.rewriter.rule_name"), "")
            if rule.startswith("FuseBatchNorm"):
                for value in node.input:
                    if value in inputs_named:
                        folded[inputs_named[value]] = [rule, _scope(node) or ""]
        return folded

    # -------------------------------------------------------------- inputs and initializers
    def _read_initializers(self) -> None:
        for tensor in self.graph.initializer:
            array = self.tensor_array(tensor, f"initializer {tensor.name!r}")
            if array.dtype.kind == "f" and tensor.doc_string != CONSTANT_DOC:  # uopgrad's own constants stay
                self.values[tensor.name] = Value(const=array, weight=True)
            else:
                self.values[tensor.name] = Value(const=array)

    def tensor_array(self, tensor, what: str, node=None, op=None) -> np.ndarray:
        """A TensorProto's values (its external data file read first)."""
        from onnx import external_data_helper, numpy_helper
        if tensor.data_type not in FROM_ONNX:
            self.fail(f"{what}: {unsupported_type(tensor.data_type)}", node, op)
        if external_data_helper.uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
            if self.base_dir is None:
                self.fail(f"{what}: its values are in an external file {location!r}, read from the model's "
                          "folder: give the model's path (not its bytes, as on stdin)", node, op)
            self.external.append(os.path.join(self.base_dir, location))  # before reading: a refusal may follow
            try:
                external_data_helper.load_external_data_for_tensor(tensor, self.base_dir)
            except FileNotFoundError:
                self.fail(f"{what}: its external data file {location!r} is missing", node, op)
            except Exception as e:  # noqa: BLE001 - onnx's ValidationError (a missing or escaping path), OSError
                outside = _outside_folder(location)
                if outside:  # refused whether or not the file is there: say so, not "missing"
                    self.fail(f"{what}: its external data file {location!r} is refused: {outside}", node, op)
                if not os.path.isfile(os.path.join(self.base_dir, location)):
                    self.fail(f"{what}: its external data file {location!r} is missing", node, op)
                self.fail(f"{what}: cannot read its external data {location!r}: {' '.join(str(e).split())}", node, op)
        try:
            array = numpy_helper.to_array(tensor)
        except (ValueError, TypeError) as e:  # a damaged tensor: too few bytes for its shape
            self.fail(f"{what}: damaged values ({' '.join(str(e).split())})", node, op)
        return array if array.flags.c_contiguous else array.copy()  # (ascontiguousarray makes 0-d 1-d)

    # -------------------------------------------------------------- values
    def data(self, value: Value) -> UOp:
        """The value's node; constants and weights get theirs on first use."""
        if value.node is None:
            value.node = constant_node(value.const)
        return value.node

    def weight_node(self, name: str, value: Value) -> UOp:
        if value.node is None:
            array = value.const
            value.node = UOp.param(self.graph_name(name), array.shape, FROM_ONNX_NP(array))
            self.weights[value.node.arg] = array
            self.weight_order.append(value.node.arg)
            self._weight_source[value.node.arg] = name
        return value.node

    # -------------------------------------------------------------- nodes
    def _refuse_unsupported(self) -> None:
        """Every op, version and attribute of the model that the importer does not take,
        refused at once in one line (op-version, how many nodes, the first node)."""
        missing: dict[tuple, list] = {}
        for index, node in enumerate(self.graph.node):
            op = _text(node.op_type)
            if node.domain not in ONNX_DOMAINS:
                if node.domain in BODY_DOMAINS and has_function(op, self.domain_opsets.get(node.domain), node.domain):
                    continue  # imported as its function body, its ops checked then
                key = (f"{node.domain}.{op}", None, "")
            else:
                since = self._since_version(op, None)
                found = _row_and_version(op, since)
                if op in CONTROL and since in CONTROL[op][1]:
                    continue  # decided when importing (control.py): its body's ops are checked then
                if found is None and since is not None and has_function(op, self.opset):
                    continue  # imported as its function body (functions.py), its ops checked then
                if found is None:
                    key = (op, since, "")
                else:
                    row, old = found
                    allowed = row.attributes if old is None else {**row.attributes, **old.attributes}
                    unknown = sorted(_text(a.name) for a in node.attribute if _text(a.name) not in allowed)
                    if not unknown:
                        continue
                    key = (op, since, ", ".join(f"attribute {a!r}" for a in unknown))
            missing.setdefault(key, []).append(_text(node.name) or f"#{index}")
        if missing:
            raise UnsupportedOps(missing, self.opset, self.source)

    def _import_node(self, node, index: int) -> None:
        op, name = _text(node.op_type), _text(node.name) or f"#{index}"
        label = repr(name)
        if node.domain not in ONNX_DOMAINS:  # another domain's op: its function body, if it has one
            self._import_function(node, index, op, None, label)
            return
        since = self._since_version(op, label)
        if op in CONTROL:  # decided when importing (control.py); another domain's op returned above
            if since not in CONTROL[op][1]:
                self.fail(_unsupported(op, since, "", self.opset), label, op)
            CONTROL[op][0](self, node, index, label, since)
            return
        found = _row_and_version(op, since)
        if found is None:  # no row: the spec's function body, if it has one (a body's own ops land here)
            self._import_function(node, index, op, since, label)
            return
        row, old = found
        attrs = self._attributes(node, row if old is None else row._replace(attributes={**row.attributes,
                                                                                        **old.attributes}), label)
        if op == "Identity" and self._copy_named_weight(node):
            return
        inputs = []
        for input_name in node.input:
            if not input_name:
                inputs.append(None)
                continue
            value = self.values.get(input_name)
            if value is None:
                self.fail(f"input {input_name!r} is made by no earlier node", label, op)
            if value.seq is not None and (len(inputs) or op not in TAKE_A_SEQUENCE):
                self.fail(f"input {len(inputs)} {input_name!r} is a sequence; only input 0 of a sequence op "
                          f"takes one", label, op)
            inputs.append(value)
        if op == "Identity" and inputs and inputs[0] is not None and inputs[0].seq is not None:
            self.values[node.output[0]], self._made_by[node.output[0]] = inputs[0], (label, op)
            return
        context = NodeContext(self, label, op, attrs, row, since, inputs, node.input, len(node.output))
        since_serial = next_serial()
        try:
            if old is not None:  # an older version: rewritten into the row's form (import_versions.py)
                context.old, context.since = old, old.target
                if old.rewrite is not None:
                    old.rewrite(context)
            outputs = context.build_outputs()
        except UOpError as e:
            if isinstance(e, FormatError) and str(e).startswith(f"{self.source}:"):
                raise
            self.fail(f"cannot be built: {' '.join(str(e).split())}", label, op)
        except (ValueError, TypeError, IndexError, KeyError, ArithmeticError, OverflowError, RecursionError) as e:
            self.fail(f"cannot be built ({type(e).__name__}: {' '.join(str(e).split())})", label, op)
        meta = Metadata(op, _text(node.name) or None, False, self.scope_of(node))
        for output_name, value in zip(node.output, outputs):
            if output_name:
                if value.node is not None:
                    _tag(value.node, since_serial, meta)
                for element in value.seq or ():
                    if element.node is not None:
                        _tag(element.node, since_serial, meta)
                if value.seq is not None:
                    self._made_by[output_name] = (label, op)
                self.values[output_name] = value

    def _import_function(self, node, index: int, op: str, since: int, label: str) -> None:
        """`node` as the nodes of the function body that defines its op (functions.py), each
        imported at the body's opset; refused in one line where the spec gives no body."""
        domain = "" if node.domain in ONNX_DOMAINS else node.domain
        version = self.domain_opsets.get(domain) if domain else self.opset
        if (domain and domain not in BODY_DOMAINS) or not has_function(op, version, domain):
            self.fail(_unsupported(f"{domain}.{op}" if domain else op, since, "", self.opset), label, op)
        types = [self._type_proto(name, label, op) for name in node.input]
        function = function_of(op, version, node, types, domain)
        outer, self.opset = self.opset, body_opset(function, self.opset)
        try:
            nodes = expanded_nodes(function, node, op, version, domain)
            for inner in nodes:  # refused as this node's, in one line, before any is built
                inner_op = _text(inner.op_type)
                inner_since = self._since_version(inner_op, label)
                if inner_op not in CONTROL and _row_and_version(inner_op, inner_since) is None \
                        and not has_function(inner_op, self.opset):
                    self.fail(f"is imported through its function body, which uses {inner_op}-{inner_since}: "
                              f"not supported by the importer", label, op)
            for inner in nodes:
                self._import_node(inner, index)
        finally:
            self.opset = outer

    def scope_of(self, node) -> str | None:
        """A node's module path (_scope), under the Scan step being imported."""
        own = _scope(node)
        return f"{self.scope_prefix}/{own}" if self.scope_prefix and own else self.scope_prefix or own

    def _type_proto(self, name: str, label: str, op: str):
        """The TypeProto of a value already imported (a context-dependent body is chosen by
        its inputs' element types and shapes); an empty one for an input left out."""
        from onnx import TypeProto, helper
        if not name:
            return TypeProto()
        value = self.values.get(name)
        if value is None:
            self.fail(f"input {name!r} is made by no earlier node", label, op)
        if value.seq is not None:
            self.fail(f"input {name!r} is a sequence: an op imported through its function body takes tensors",
                      label, op)
        if value.node is not None:
            return helper.make_tensor_type_proto(TO_ONNX[value.node.dtype], list(value.node.shape))
        return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(value.const.dtype), list(value.const.shape))

    def _copy_named_weight(self, node) -> bool:
        """An Identity of a weight whose output is named like a parameter (`ln2.bias`): the
        legacy torch exporter's constant folding merges equal initializers into one and
        reaches the others through such Identities. The output becomes a weight of its own
        (a copy of the values), so it is an input by its name with its own gradient."""
        if len(node.input) != 1 or len(node.output) != 1:
            return False
        value, output = self.values.get(node.input[0]), _text(node.output[0])
        if value is None or not value.weight or not _PARAMETER_NAME.match(output):
            return False
        self.values[output] = Value(const=value.const, weight=True)
        self._copied_from[output] = self._copied_from.get(node.input[0], node.input[0])
        return True

    def _since_version(self, op: str, label: str | None) -> int | None:
        """The version of `op` that the model's opset picks (None, for the list of
        refusals, when the op is not in it)."""
        key = (op, self.opset)  # a function body's ops are read at the body's opset
        if key not in self._since:
            import onnx.defs
            try:
                self._since[key] = onnx.defs.get_schema(op, self.opset, "").since_version
            except onnx.defs.SchemaError:
                if label is not None:
                    self.fail(f"{op} does not exist in opset {self.opset}", label, op)
                return None
        return self._since[key]

    def _attributes(self, node, row, label: str) -> dict:
        from onnx import AttributeProto, helper
        attrs = {}
        for attribute in node.attribute:
            if attribute.name not in row.attributes:
                self.fail(f"attribute {attribute.name!r} is not supported", label, node.op_type)
            if attribute.ref_attr_name:
                self.fail(f"attribute {attribute.name!r} refers to a function's attribute", label, node.op_type)
            if attribute.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
                                  AttributeProto.SPARSE_TENSORS, AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
                self.fail(f"attribute {attribute.name!r} is a graph, sparse tensor or type: not supported",
                          label, node.op_type)
            try:
                value = helper.get_attribute_value(attribute)
            except (ValueError, TypeError) as e:
                self.fail(f"attribute {attribute.name!r}: {e}", label, node.op_type)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode("utf-8", "replace") for v in value]
            attrs[attribute.name] = value
        return attrs


def FROM_ONNX_NP(array: np.ndarray):  # noqa: N802 - the dtype of a numpy array, as format v1's
    from uopcli.core.ops import dtype_of
    return dtype_of(array.dtype)


# ----------------------------------------------------------------------------- a node's context


class NodeContext:
    """What an op's function sees of its node: inputs as UOps or arrays, attributes with
    the table's defaults, and refusal naming the node."""

    def __init__(self, importer: _Importer, label: str, op: str, attrs: dict, row, since: int,
                 inputs: list, input_names, output_count: int):
        self.importer, self.label, self.op, self.attrs, self.row = importer, label, op, attrs, row
        self.since, self.inputs, self.input_names, self.output_count = since, inputs, list(input_names), output_count
        self.old = None  # the import_versions.Old entry of an older version

    # inputs
    @property
    def input_count(self) -> int:
        return len(self.inputs)

    def present(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def x(self, i: int) -> UOp | None:
        """Input i as a node (None when absent)."""
        if not self.present(i):
            return None
        value = self.inputs[i]
        if value.weight:
            return self.importer.weight_node(self.input_names[i], value)
        return self.importer.data(value)

    def static(self, i: int, what: str):
        """Input i's values, which must be known at import (None when absent)."""
        if not self.present(i):
            return None
        value = self.inputs[i]
        if value.const is None:
            big = self.importer.unfolded_source(value.node)
            if big is not None:
                op, label, elements = big
                self.refuse(f"{what} (input {i}) must be known when importing, but it is computed from the "
                            f"{elements} elements that {op} {label} makes, more than the {FOLD_LIMIT} computed when "
                            "importing")
            name = self.importer.input_names.get(value.node)
            if name is not None and name in self.importer.wrt:  # to differentiate with respect to: it cannot be
                self.refuse(f"{what} (input {i}) must be known when importing (a constant or a shape), "
                            f"but it is the model's input {name!r}; {differentiated([name])}")
            if name is not None:  # the model's input itself: the user can fix it
                self.refuse(f"{what} (input {i}) must be known when importing (a constant or a shape), "
                            f"but it is the model's input {name!r}: give its value with --constant {name}=...")
            self.refuse(f"{what} (input {i}) must be known when importing (a constant or a shape), but it is "
                        f"computed from {computed_from(value.node, self.importer.input_names, self.importer.wrt)}")
        return value.const

    def sequence(self, i: int) -> list:
        """Input i's elements (importer Values), refused when it is not a sequence."""
        if not self.present(i) or self.inputs[i].seq is None:
            self.refuse(f"input {i} must be a sequence")
        return list(self.inputs[i].seq)

    def element(self, i: int) -> Value:
        """Input i as a sequence's element (a weight by its node, so it stays an input)."""
        if not self.present(i):
            self.refuse(f"input {i} is missing: a sequence's element must be a tensor")
        value = self.inputs[i]
        return Value(node=self.x(i)) if value.weight else value

    @staticmethod
    def as_element(node: UOp) -> Value:
        return Value(node=node)

    def node_of(self, element: Value) -> UOp:
        return self.importer.data(element)

    def set_input(self, i: int, value) -> None:
        """Replace input i (an older version's rewrite): a UOp, an array known at import, or None."""
        while len(self.inputs) <= i:
            self.inputs.append(None)
            self.input_names.append("")
        self.inputs[i] = None if value is None else Value(node=value) if isinstance(value, UOp) else Value(const=value)
        self.input_names[i] = ""

    def with_inputs(self, nodes: dict) -> "NodeContext":
        """This node's context with inputs {i: node} replaced (a float16 input widened to
        float32, import_table._float32_inside); the others as they are."""
        inputs = [Value(node=nodes[i]) if i in nodes else v for i, v in enumerate(self.inputs)]
        names = ["" if i in nodes else n for i, n in enumerate(self.input_names)]
        inner = NodeContext(self.importer, self.label, self.op, self.attrs, self.row, self.since, inputs, names,
                            self.output_count)
        inner.old = self.old
        return inner

    def static_if_known(self, i: int):
        value = self.inputs[i] if self.present(i) else None
        return None if value is None or value.weight else value.const

    def shape_of(self, i: int) -> tuple[int, ...]:
        return self.inputs[i].shape

    # attributes
    def attr(self, name: str, default=None):
        if name in self.attrs:
            return self.attrs[name]
        value = self.row.attributes.get(name)
        return default if value is None else value

    def tensor_value(self, tensor) -> np.ndarray:
        return self.importer.tensor_array(tensor, "its tensor attribute", self.label, self.op)

    def refuse(self, why: str):
        self.importer.fail(why, self.label, self.op)

    # building
    def build_outputs(self) -> list[Value]:
        since = next_serial()
        foldable = self.row.folds and self.inputs and all(
            v is None or (v.const is not None and not v.weight) for v in self.inputs)
        result = self.row.build(self)
        if self.old is not None and self.old.outputs is not None:
            result = self.old.outputs(self, result)
        results = result if isinstance(result, list) else [result]
        if len(results) < self.output_count:
            self.refuse(f"has {self.output_count} outputs; the importer makes {len(results)}")
        if foldable and any(isinstance(r, UOp) for r in results):
            largest = _largest([r for r in results if isinstance(r, UOp)], since)
            if largest <= FOLD_LIMIT:
                results = _evaluated(results)
            else:  # too large to compute when importing: nodes, computed when the graph runs
                for r in results:
                    if isinstance(r, UOp):
                        self.importer.unfolded.setdefault(r, (self.op, self.label, largest))
        return [Value(const=r) if isinstance(r, np.ndarray) else Value(seq=r.items) if isinstance(r, Sequence)
                else Value(node=r) for r in results]

    def call(self, build, *inputs: UOp, attrs: dict | None = None):
        """Another op's function on these nodes (GatherND through Gather, Gelu through Erf)."""
        inner = NodeContext(self.importer, self.label, self.op, {**self.attrs, **(attrs or {})}, self.row, self.since,
                            [Value(node=n) for n in inputs], [""] * len(inputs), 1)
        return build(inner)


def _largest(roots: list[UOp], since: int) -> int:
    """The most elements of a node made since serial `since` that `roots` are computed
    from: what computing them when importing would hold at once, at least."""
    largest, stack, seen = 0, list(roots), set()
    while stack:
        node = stack.pop()
        if node in seen or node.serial < since:
            continue
        seen.add(node)
        if isinstance(node.shape, tuple):
            largest = max(largest, math.prod(node.shape))
        stack.extend(node.src)
    return largest


def _evaluated(results: list) -> list:
    """The arrays of nodes built from constants alone."""
    from uopcli.backends.numpy import evaluate
    nodes = [r for r in results if isinstance(r, UOp)]
    arrays = iter(evaluate(nodes, {}))
    return [next(arrays) if isinstance(r, UOp) else r for r in results]


def _outside_folder(location: str) -> str | None:
    """Why an external data `location` is refused as lying outside the model's folder (an
    absolute path, or one whose `..` climbs out of it, as onnx's loader refuses them), or
    None."""
    if os.path.isabs(location) or os.path.splitdrive(location)[0]:
        return "an absolute path (external data is read only from the model's folder and below, by a relative path)"
    if os.path.normpath(location).split(os.sep)[0] == os.pardir:
        return "it lies outside the model's folder (external data is read only from there and below)"
    return None


def constant_node(array: np.ndarray) -> UOp:
    """An array as a graph constant: one CONST broadcast where every element is equal,
    else a BUFFER of its bytes."""
    array = np.asarray(array)
    dtype = FROM_ONNX_NP(array)
    if array.size == 0:
        return UOp.full(array.shape, 0, dtype)
    first = array.reshape(-1)[0]
    same = np.isnan(array).all() if array.dtype.kind == "f" and np.isnan(first) else bool((array == first).all())
    return UOp.full(array.shape, first.item(), dtype) if same else UOp.buffer(array)


def _tag(root: UOp, since: int, meta: Metadata) -> None:
    """Give `meta` to the nodes made for one ONNX node (serial >= since), replacing the
    builder's own tag (its composite's name): the ONNX op and module path tell more."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node.serial < since or node in seen or node.op == "PARAM":  # a weight belongs to no one user
            continue
        seen.add(node)
        node.set_meta(meta)
        stack.extend(node.src)


def _scope(node) -> str | None:
    """The module path of an exporter's node: legacy torch.onnx names nodes
    `/encoder/layer.0/attention/MatMul` (the last part is the op); the dynamo exporter
    keeps the qualified module names in metadata `pkg.torch.onnx.name_scopes`
    (['', 'encoder.0', 'encoder.0.attention', 'matmul']), each part relative to the last."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                break
            if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
                break
            parts, parent = [], ""
            for scope in [s for s in scopes[:-1] if s]:
                parts.append(scope[len(parent) + 1:] if parent and scope.startswith(parent + ".") else scope)
                parent = scope
            return "/".join(parts) or None
    name = _text(node.name)
    if name.startswith("/") and name.count("/") > 1:
        return name[1:].rsplit("/", 1)[0]
    return None


_PARAMETER_NAME = __import__("re").compile(r"[A-Za-z_]\w*(\.\w+)+\Z")  # module.path.name, as torch names parameters


def _row_and_version(op: str, since: int | None):
    """(row, None) when the row follows version `since`, (row, import_versions.Old) when
    an older version maps onto it, None when neither."""
    row = TABLE.get(op)
    if row is None or since is None:
        return None
    if since in row.versions:
        return row, None
    old = VERSIONS.get((op, since))
    return (row, old) if old is not None and old.target in row.versions else None


class UnsupportedOps(FormatError):
    """A model with ops, versions or attributes the importer does not take, all of them in
    one line; `missing` lists each as (op, version or None, how many nodes)."""

    def __init__(self, missing: dict, opset: int, source: str):
        self.missing = [(op, since, len(nodes)) for (op, since, _), nodes in missing.items()]
        if sum(len(nodes) for nodes in missing.values()) == 1:  # one node: named as any refusal names it
            (op, since, what), (node,) = next(iter(missing.items()))
            super().__init__(_unsupported(op, since, what, opset), node=repr(node), op=op, source=source)
            return
        parts = []
        for (op, since, what), nodes in missing.items():
            where = f"node {nodes[0]!r}" if len(nodes) == 1 else f"{len(nodes)} nodes, first {nodes[0]!r}"
            parts.append(f"{op if since is None else f'{op}-{since}'}{' ' + what if what else ''} ({where})")
        what = "this op" if len(parts) == 1 else f"{len(parts)} of the model's ops, versions or attributes"
        super().__init__(f"the importer does not support {what} (opset {opset}): {'; '.join(parts)}", source=source)


def _unsupported(op: str, since: int | None, what: str, opset: int) -> str:
    if what:
        return f"{what} is not supported" if what.count("attribute") == 1 else f"{what} are not supported"
    if "." in op:
        return (f"op {op} is not supported (the standard ai.onnx ops are, and those of "
                f"{', '.join(BODY_DOMAINS)} that the spec defines by a function body)")
    if since is None:
        return f"{op} does not exist in opset {opset}"
    if op not in TABLE:
        return f"this op (version {since}, opset {opset}) is not supported by the importer"
    known = sorted(set(TABLE[op].versions) | {v for (o, v), old in VERSIONS.items() if o == op
                                               and old.target in TABLE[op].versions})
    return f"version {since} of {op} (opset {opset}) is not supported; supported: {', '.join(map(str, known))}"


def _text(value) -> str:
    """A protobuf string field as text (a damaged file's invalid UTF-8 comes back as bytes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _onnx_opset(model, source: str) -> int:
    for entry in model.opset_import:
        if entry.domain in ONNX_DOMAINS:
            return entry.version
    raise FormatError("the model imports no version of the standard ONNX ops (opset_import has no ai.onnx)",
                      source=source)
