"""Scopes of exported tinygrad graphs (uopcli/interop/tinygrad/module_calls.py, scopes.py):
each node is in the module whose forward made it. The oracle is tinygrad's graph itself:
while a test runs a model, each module call's arguments and output are logged, and the
nodes a call made are those below its output and not below its arguments. Graphs are made
with `to_graph` (nothing is realized: no device needed)."""

from __future__ import annotations

import functools
import weakref
from collections import Counter

import pytest

from _tinygrad_usable import import_tinygrad
import_tinygrad()

from tinygrad import Tensor, dtypes, nn  # noqa: E402
from tinygrad.nn.state import get_state_dict  # noqa: E402
from tinygrad_zoo import gpt_four_blocks, mlp_mse, transformer_block  # noqa: E402
from uopcli import Ops  # noqa: E402
from uopcli.interop.tinygrad import module_calls, to_graph  # noqa: E402
from uopcli.interop.tinygrad.scopes import _free, module_of  # noqa: E402


def _graph(case):
    return to_graph(case.outputs, case.inputs, case.state_dict)


def _scopes_by_name(graph) -> dict:
    """metadata name -> Counter of the scopes of the nodes it made. Constants are left out:
    a constant is one shared node, whose metadata is whoever tagged it first in this process
    (a builder graph of an earlier test may have made the same 0.0 as `relu` at its loc)."""
    found: dict = {}
    for node in graph.nodes():
        if node.meta is not None and node.meta.name and node.op != Ops.CONST:
            found.setdefault(node.meta.name, Counter())[node.meta.scope] += 1
    return found


def test_module_paths_keep_list_indices_with_their_list():
    assert module_of("blocks.0.attn.qkv.weight") == ("blocks.0", "attn", "qkv")
    assert module_of("layers.1.2.bias") == ("layers.1.2",)
    assert module_of("weight") == ()
    assert module_of("embedding.weight") == ("embedding",)


def test_a_linear_is_in_its_module_its_activation_where_it_is_called_and_the_loss_at_the_top():
    graph = _graph(mlp_mse())
    scopes = _scopes_by_name(graph)
    assert set(scopes["linear"]) == {"l1", "l2"}
    assert set(scopes["relu"]) == {None}  # `l2(l1(x).relu())`: the model's own forward calls it
    assert set(scopes["mean"]) == {None}
    assert all(n.meta is None or n.meta.scope is None for n in graph.inputs)


def test_a_blocks_parts_go_to_its_sub_modules():
    """One block (keys ln1.weight, attn.q.weight, ...): a LayerNorm's normalisation is in
    its module though it reads no weight; attention's softmax is between q, k, v and o: in
    attn; the residual adds take the graph's input: at the top."""
    graph = _graph(transformer_block())
    scopes = _scopes_by_name(graph)
    assert set(scopes["layernorm"]) - {None} == {"ln1", "ln2"}  # None: 1/8, a constant both share
    assert set(scopes["scaled_dot_product_attention"]) - {None} == {"attn"}  # None: its causal mask's constants
    assert {"attn/q", "attn/k", "attn/v", "attn/o", "up", "down"} <= set(scopes["linear"])
    assert set(scopes["__add__"]) - {"ln1", "ln2"} == {None}  # LayerNorm's bias add, and the residuals
    # q, k and v each reshape ln1's output: one node, which all three made, so it is attn's
    into_qkv = [n for n in graph.nodes() if n.op == Ops.RESHAPE and n.src[0].meta is not None
                and (n.src[0].meta.name, n.src[0].meta.scope) == ("__add__", "ln1")]
    assert len(into_qkv) == 1 and into_qkv[0].meta.scope == "attn"


def test_each_block_of_a_stack_holds_its_own_residual_stream():
    """Four blocks: the residual adds of block i are in blocks.i (they take the block's
    input and its sub-modules' outputs), the embedding and head in their own."""
    graph = _graph(gpt_four_blocks())
    order = graph.nodes()
    residuals = [n for n in order if n.meta is not None and n.meta.name == "__add__" and n.shape == (2, 3, 8)
                 and n.meta.scope is not None and "/" not in n.meta.scope]
    assert Counter(n.meta.scope for n in residuals) == Counter({f"blocks.{i}": 2 for i in range(4)})
    scopes = {n.meta.scope for n in order if n.meta is not None and n.meta.scope}
    assert {"embedding", "head/norm", "head/proj", "blocks.0/attn", "blocks.3/ln2"} <= scopes
    assert not any(s.startswith("blocks.0/attn/") and s.split("/")[-1] not in "qkvo" for s in scopes)
    loss = {n.meta.scope for n in order if n.meta is not None and n.meta.name == "sparse_categorical_crossentropy"}
    assert None in loss and loss <= {None, "head/proj"}  # what takes the targets too stays at the top


# ----------------------------------------------------------------------------- made by whom

class _EncoderAndCNN:
    """The newcomer's model: a LayerNorm between two Linears, a BatchNorm between two Convs."""

    def __init__(self):
        self.enc, self.ln, self.fc = nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)
        self.conv1, self.bn1, self.conv2 = nn.Conv2d(1, 2, 3), nn.BatchNorm(2), nn.Conv2d(2, 2, 3)

    def __call__(self, x, img):
        return self.fc(self.ln(self.enc(x))).sum() + self.conv2(self.bn1(self.conv1(img))).relu().sum()


class _SelfAttention:
    def __init__(self, dim: int, heads: int = 2):
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def __call__(self, x):
        b, t, d = x.shape
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=2))
        return self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))


class _FeedForward:
    def __init__(self, dim: int):
        self.fc, self.proj = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def __call__(self, x):
        return self.proj(self.fc(x).gelu())


class _GPTBlock:
    def __init__(self, dim: int):
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(dim), _SelfAttention(dim), nn.LayerNorm(dim), \
            _FeedForward(dim)

    def __call__(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _TinyGPT:
    def __init__(self, vocab: int = 7, dim: int = 8):
        self.wte, self.blocks = nn.Embedding(vocab, dim), [_GPTBlock(dim) for _ in range(2)]
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def __call__(self, tokens):
        x = self.wte(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


_MODULE_CLASSES = (nn.Linear, nn.LayerNorm, nn.Conv2d, nn.BatchNorm, nn.Embedding, _SelfAttention, _FeedForward,
                   _GPTBlock)


def _log_module_calls(monkeypatch) -> list:
    """(module, its Tensor arguments, its output) of each call of a module of these classes."""
    log: list = []
    for cls in _MODULE_CLASSES:
        def logged(self, *args, _call=cls.__call__, **kwargs):
            out = _call(self, *args, **kwargs)
            log.append((self, [a for a in args if isinstance(a, Tensor)], out))
            return out
        monkeypatch.setattr(cls, "__call__", logged)
    return log


def _module_paths(obj, path: tuple = (), found: dict | None = None) -> dict:
    """id(module) -> its path, as get_state_dict names its attributes."""
    found = {} if found is None else found
    for name, value in vars(obj).items():
        for part, member in ([(f"{name}.{i}", m) for i, m in enumerate(value)] if isinstance(value, list)
                             else [(name, value)]):
            if hasattr(member, "__dict__") and not isinstance(member, Tensor):
                found[id(member)] = path + (part,)
                _module_paths(member, path + (part,), found)
    return found


def _below(roots) -> set:
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.src)
    return seen


class _Exported:
    """A model's graph, each logged call's output node, and the scope each node must have:
    the module whose call made it (made by several sibling calls, as q, k and v's shared
    reshape of their input: their common parent)."""

    def __init__(self, model, log: list, outputs: dict, inputs: dict):
        paths = _module_paths(model)
        calls = {f"call_{i}": (paths[id(module)], args, out) for i, (module, args, out) in enumerate(log)}
        named = {**outputs, **{f"{c}_out": out for c, (_, _, out) in calls.items()},
                 **{f"{c}_in{j}": a for c, (_, args, _) in calls.items() for j, a in enumerate(args)}}
        self.graph = to_graph(named, inputs, get_state_dict(model))
        nodes = self.graph.outputs
        self.out = {"/".join(path): nodes[f"{c}_out"] for c, (path, _, _) in calls.items()}
        made_by: dict = {}
        for c, (path, args, _) in calls.items():
            for node in _below([nodes[f"{c}_out"]]) - _below([nodes[f"{c}_in{j}"] for j in range(len(args))]):
                made_by.setdefault(node, set()).add(path)
        self.order = [n for n in self.graph.nodes() if n.op != Ops.PARAM and n not in _free(self.graph.nodes())]
        self.expected = {n: _innermost(made_by.get(n, set())) for n in self.order}

    def scope(self, node):
        return node.meta.scope if node.meta is not None else None

    def named(self, name: str, op=None) -> list:
        """The nodes tinygrad's function `name` made (of `op`)."""
        return [n for n in self.order if n.meta is not None and n.meta.name == name and (op is None or n.op == op)]

    def between(self, first: str, last: str) -> set:
        """The nodes on the way from module `first`'s output to module `last`'s."""
        return {n for n in _below([self.out[last]]) if self.out[first] in _below([n])} - {self.out[first]}


def _innermost(paths: set) -> str | None:
    """The common parent of the deepest of `paths` (those no other path lies inside)."""
    leaves = [p for p in paths if not any(q != p and q[:len(p)] == p for q in paths)]
    if not leaves:
        return None
    common = leaves[0]
    for path in leaves[1:]:
        common = common[:next((i for i, (a, b) in enumerate(zip(common, path)) if a != b), min(len(common), len(path)))]
    return "/".join(common) or None


def _misplaced(exported: _Exported) -> list:
    return [(str(n), exported.scope(n), want) for n, want in exported.expected.items() if exported.scope(n) != want]


# the weights stay tinygrad's lazy initialisers: to_graph realizes nothing, so nothing compiles;
# the inputs have names no other test's graph has: uopgrad's nodes are hash-consed and keep the
# metadata of the first graph that made them (a RESHAPE of another test's input `tokens`,
# made with no scope, kept none here when that test ran first in the process)

@pytest.fixture(scope="module")
def encoder_and_cnn():
    with pytest.MonkeyPatch.context() as patch:
        log = _log_module_calls(patch)
        model = _EncoderAndCNN()
        x, img = Tensor.ones(2, 4).contiguous(), Tensor.ones(1, 1, 7, 7).contiguous()
        y = model(x, img)
    return _Exported(model, log, {"y": y}, {"scopes_x": x, "scopes_img": img})


@pytest.fixture(scope="module")
def tiny_gpt():
    with pytest.MonkeyPatch.context() as patch:
        log = _log_module_calls(patch)
        model = _TinyGPT()
        tokens = Tensor([[1, 5, 6], [0, 5, 3]], dtype=dtypes.int32)
        logits = model(tokens)
    return _Exported(model, log, {"logits": logits}, {"scopes_gpt_tokens": tokens})


def test_a_layernorms_normalisation_and_the_next_linears_input_are_their_own(encoder_and_cnn):
    """`fc(ln(enc(x)))`: ln's reductions are ln's, not enc's; fc's reshape of ln's output is fc's."""
    e = encoder_and_cnn
    reductions = e.named("layernorm", Ops.REDUCE)
    assert len(reductions) == 2 and {e.scope(n) for n in reductions} == {"ln"}
    reshape_of_ln = [n for n in e.order if n.op == Ops.RESHAPE and n.src[0] is e.out["ln"]]
    assert len(reshape_of_ln) == 1 and e.scope(reshape_of_ln[0]) == "fc"
    assert e.scope(e.out["enc"]) == "enc" and e.scope(e.out["ln"]) == "ln"


def test_a_convs_windows_on_a_batchnorms_output_are_the_convs(encoder_and_cnn):
    """`conv2(bn1(...))`: the 18 reshapes, expands, permutes and shrinks that cut conv2's input
    into windows (all before conv2's weight) are conv2's, as is the rest of its call."""
    e = encoder_and_cnn
    weight = next(p for p in e.graph.inputs if p.arg == "conv2.weight")
    windows = {n for n in e.between("bn1", "conv2") if weight not in _below([n])}
    assert len(windows) == 18 and {e.scope(n) for n in windows} == {"conv2"}
    assert {e.scope(n) for n in e.between("bn1", "conv2")} == {"conv2"}
    assert {e.scope(n) for n in e.named("batchnorm")} == {"bn1"}
    assert {e.scope(n) for n in e.named("relu")} == {None}  # the model's own forward calls it


def test_every_node_of_the_encoder_and_cnn_is_in_the_module_that_made_it(encoder_and_cnn):
    assert _misplaced(encoder_and_cnn) == []
    assert {s for s in encoder_and_cnn.expected.values()} == {None, "enc", "ln", "fc", "conv1", "bn1", "conv2"}


def test_a_gpts_final_norm_head_and_qkv_inputs_are_their_own(tiny_gpt):
    g = tiny_gpt
    final_norm = g.between("blocks.1", "ln_f")
    assert {g.scope(n) for n in g.named("layernorm", Ops.REDUCE) if n in final_norm} == {"ln_f"}
    assert {g.scope(n) for n in final_norm} == {"ln_f"}
    reshape_of_ln_f = [n for n in g.order if n.op == Ops.RESHAPE and n.src[0] is g.out["ln_f"]]
    assert len(reshape_of_ln_f) == 1 and g.scope(reshape_of_ln_f[0]) == "head"
    into_qkv = [n for n in g.order if n.op == Ops.RESHAPE and n.src[0] is g.out["blocks.1/ln_1"]]
    assert len(into_qkv) == 1 and g.scope(into_qkv[0]) == "blocks.1/attn/qkv"
    linears = {"wte", "head", *(f"blocks.{i}/{m}" for i in range(2) for m in ("attn/qkv", "attn/proj", "mlp/fc",
                                                                                "mlp/proj"))}
    assert {g.scope(n) for n in g.named("linear")} <= linears  # no stray `linear` outside a Linear


def test_every_node_of_a_gpt_is_in_the_module_that_made_it(tiny_gpt):
    assert _misplaced(tiny_gpt) == []
    scopes = set(tiny_gpt.expected.values())
    assert {"blocks.0", "blocks.1/attn", "blocks.1/attn/qkv", "blocks.1/ln_2", "ln_f", "head", "wte"} <= scopes


def test_the_scopes_hold_when_the_model_is_dropped_before_the_export():
    """The modules are not kept alive: their tensors (the state_dict's) name them."""
    def outputs():
        model = _EncoderAndCNN()
        x, img = Tensor.ones(2, 4).contiguous(), Tensor.ones(1, 1, 7, 7).contiguous()
        return model(x, img), {"x": x, "img": img}, get_state_dict(model), weakref.ref(model)
    y, inputs, state_dict, model = outputs()
    assert model() is None
    scopes = _scopes_by_name(to_graph({"y": y}, inputs, state_dict))
    assert set(scopes["layernorm"]) - {None} == {"ln"} and set(scopes["conv2d"]) == {"conv1", "conv2"}


def test_a_graph_built_before_recording_gets_scopes_guessed_from_its_weights(monkeypatch):
    """Nothing noted (the model ran before the bridge was imported): the weights' modules."""
    monkeypatch.setattr(module_calls, "_made_in", weakref.WeakKeyDictionary())
    scopes = _scopes_by_name(_graph(mlp_mse()))
    assert set(scopes["linear"]) == {"l1", "l2"} and set(scopes["mean"]) == {None}


# ----------------------------------------------------------------------------- a method is a method

class _AttnSelf:
    def __init__(self, d):
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def __call__(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.o((q @ k.transpose(-1, -2)).softmax(-1) @ v)


class _AttnS:
    """_AttnSelf with its instance named `s`: the same module, the same scopes."""

    def __init__(s, d):  # noqa: N805
        s.qkv, s.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def __call__(s, x):  # noqa: N805
        q, k, v = s.qkv(x).chunk(3, dim=-1)
        return s.o((q @ k.transpose(-1, -2)).softmax(-1) @ v)


def _traced(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        return method(*args, **kwargs)
    return wrapper


class _AttnLambdaAndDecorated:
    """The same again, its call a lambda of the class body and its attention a decorated method."""

    def __init__(this, d):  # noqa: N805
        this.qkv, this.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    @_traced
    def attend(me, q, k, v):  # noqa: N805
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v

    __call__ = lambda m, x: m.o(m.attend(*m.qkv(x).chunk(3, dim=-1)))  # noqa: E731


def _run_block(block, x):
    """A free function taking a module first is not that module's method."""
    return block(x).relu()


class _Blocks:
    def __init__(self, attn, name: str):
        self.blocks = [attn(4), attn(4)]
        self.name = name

    def __call__(self, x):
        for b in self.blocks:
            x = _run_block(b, x)
        return x


def _softmax_scopes(attn, name: str) -> Counter:
    model = _Blocks(attn, name)
    x = Tensor.ones(3, 4).contiguous()
    graph = to_graph({"y": model(x).sum()}, {name: x}, get_state_dict(model))
    return Counter(n.meta.scope for n in graph.nodes() if n.meta is not None and n.meta.name in ("softmax", "relu")
                   and n.op != Ops.CONST)


@pytest.mark.parametrize("attn", [_AttnSelf, _AttnS, _AttnLambdaAndDecorated], ids=lambda c: c.__name__)
def test_a_methods_first_parameter_may_have_any_name(attn):
    """The bridge tells a method call by its instance's class having the function, not by the
    parameter's name: `def __call__(s, x)` (a newcomer's block) got no scope, its softmax drawn
    at the top, both blocks' merged. The relu `_run_block` (a free function given the block)
    applies is the model's own: at the top. Each model's input has its own name (hash-consed
    nodes keep the first graph's metadata)."""
    scopes = _softmax_scopes(attn, f"method_names_{attn.__name__}_x")
    assert scopes == Counter({"blocks.0": 17, "blocks.1": 17, None: 2 * 2}), scopes


def test_a_model_exported_after_one_with_a_renamed_instance_keeps_its_scopes():
    """The newcomer's second case: the same two-block model, written with `s` and then with
    `self`, exported one after the other with the same names, so the second graph's nodes are
    the first's (hash-consed, with the first's metadata): right now because both get the same
    scopes. (Two graphs of one structure whose scopes differ still share the first's: the
    interning's limit, not the recording's.)"""
    for attn in (_AttnS, _AttnSelf):
        assert _softmax_scopes(attn, "renamed_then_self_x") == Counter({"blocks.0": 17, "blocks.1": 17, None: 4})


class _Base:
    def forward(me, x):  # noqa: N805
        return x

    @property
    def size(me):  # noqa: N805
        return 1


class _Derived(_Base):
    def forward(me, x):  # noqa: N805
        return super().forward(x)


def test_a_method_is_told_by_its_class_not_its_parameters_name():
    """An inherited method reached by super(), a property's getter, a lambda, a decorated
    method: methods; a free function taking the module first, or another class's method, not."""
    assert module_calls._is_method_of(_Derived, _Base.forward.__code__)
    assert module_calls._is_method_of(_Derived, _Derived.forward.__code__)
    assert module_calls._is_method_of(_Derived, _Base.size.fget.__code__)
    assert module_calls._is_method_of(_AttnLambdaAndDecorated, _AttnLambdaAndDecorated.__call__.__code__)
    assert module_calls._is_method_of(_AttnLambdaAndDecorated, _AttnLambdaAndDecorated.attend.__wrapped__.__code__)
    assert not module_calls._is_method_of(_AttnS, _run_block.__code__)
    assert not module_calls._is_method_of(_Base, _Derived.forward.__code__)
    assert not module_calls._is_method_of(_AttnS, _AttnSelf.__call__.__code__)


_EXPORT_AFTER = """
import sys
sys.path.insert(0, sys.argv[1])
from tinygrad_zoo import ZOO, gpt_four_blocks
from uopcli.interop.tinygrad import save
for name in sys.argv[3:]:  # other models exported first, in this process
    case = ZOO[name]()
    save(sys.argv[2] + "." + name, case.outputs, case.inputs, case.state_dict)
case = gpt_four_blocks()
save(sys.argv[2], case.outputs, case.inputs, case.state_dict)
"""


def test_an_export_is_the_same_file_whatever_the_process_exported_before(tmp_path):
    """Nodes are shared by structure in a process: an embedding of the same token input
    exported first made the GPT's one-hot nodes its own, and the GPT export lost their
    `embedding` scope (CI saw the viewer fold the embedding away, and two Linears' nodes at
    the top). Each export now tags every node it makes, shared or not: the GPT's file is
    the same bytes after the embedding's, after every zoo model, and alone."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    files = {}
    for before in ((), ("embedding_int_tokens",), ("mlp_mse", "embedding_int_tokens", "lstm_unrolled",
                                                   "transformer_block", "norms_and_losses")):
        out = tmp_path / f"gpt-after-{len(before)}.uop"
        done = subprocess.run([sys.executable, "-c", _EXPORT_AFTER, here, str(out), *before],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        files[before] = out.read_bytes()
    alone = files.pop(())
    assert all(data == alone for data in files.values()), [before for before, data in files.items() if data != alone]


def test_an_export_takes_its_own_tags_for_nodes_an_earlier_export_made():
    """In one process: exported after an embedding of the same tokens, the GPT's one-hot
    nodes are in `embedding` (the earlier export's graph now carries the GPT's tags there:
    a node has one metadata per process)."""
    from tinygrad_zoo import embedding_int_tokens
    _graph(embedding_int_tokens())
    graph = _graph(gpt_four_blocks())
    tokens = graph.input("tokens")
    one_hot = [n for n in graph.nodes() if n.op == Ops.CMPNE and tokens in n.toposort()]
    assert len(one_hot) == 2 and all(n.meta.scope == "embedding" for n in one_hot), [n.meta for n in one_hot]
