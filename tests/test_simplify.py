"""Simplification of whole graphs: the samples' gradients (bit for bit with the exact table,
close with tinygrad's), idempotence, metadata, the activation gradients against tinygrad's
stored values, random graphs (hypothesis), the evaluator's entry point and the commands."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import uopcli
from uopcli import Graph, Ops, UOp, evaluate_graph, load, save
from uopcli.tools.differentiate import differentiate
from uopcli.formats.uop import dumps
from uopcli.core.simplify import simplify, simplify_nodes
from uopcli.core.walks import no_gc
from uopcli.tools.values import gather_inputs

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.uop"))
STORED = json.loads((Path(__file__).parent / "tinygrad_activation_gradients.json").read_text())


def _gradient(path):
    graph = load(path)
    return differentiate(graph, [n.arg for n in graph.inputs if n.dtype.is_float])[0]


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        a, b = (np.where(np.isnan(v), np.array(np.nan, v.dtype), v) for v in (a, b))
    return a.tobytes() == b.tobytes()


@pytest.fixture(scope="module", params=SAMPLES, ids=lambda p: p.stem)
def sample_gradient(request):
    return _gradient(request.param)


def test_exact_simplification_changes_no_bit_of_a_sample_gradient(sample_gradient):
    inputs = gather_inputs(sample_gradient.inputs, (), 0)
    literal = evaluate_graph(sample_gradient, inputs)
    exact = evaluate_graph(simplify(sample_gradient, exact=True), inputs)
    for name in literal:
        assert _same_bits(literal[name], exact[name]), name


def test_tinygrad_simplification_keeps_a_sample_gradient_close(sample_gradient):
    inputs = gather_inputs(sample_gradient.inputs, (), 0)
    literal = evaluate_graph(sample_gradient, inputs)
    simplified = evaluate_graph(sample_gradient, inputs, simplify="tinygrad")
    for name, value in literal.items():
        scale = max(1.0, float(np.max(np.abs(value))))
        np.testing.assert_allclose(simplified[name], value, rtol=1e-4, atol=1e-5 * scale, err_msg=name)


def test_simplification_is_idempotent_and_keeps_the_interface(sample_gradient):
    for exact in (True, False):
        once = simplify(sample_gradient, exact=exact)
        twice = simplify(once, exact=exact)
        assert dumps(twice) == dumps(once)
        assert once.output_names == sample_gradient.output_names
        assert once.input_names == sample_gradient.input_names
        assert once.meta == sample_gradient.meta
        assert len(once) <= len(sample_gradient)


def test_replacements_keep_metadata_a_backward_node_stays_backward():
    x = UOp.param("x", (4,))
    loss = x.sigmoid().sum()
    graph, _ = differentiate(Graph({"loss": loss}), ["x"])
    grad = simplify(graph).outputs["grad_x"]
    assert grad.meta is not None and grad.meta.backward and grad.meta.name == "sigmoid"
    before = set(graph.outputs["grad_x"].toposort())
    made = [n for n in grad.toposort() if n not in before and n.op != Ops.CONST]  # the rules' new nodes
    assert any(n.op == Ops.SUB for n in made)  # 1 - sigmoid
    assert all(n.meta is not None and n.meta.backward for n in made)
    forward = [n for n in grad.toposort() if n.op == Ops.EXP2]
    assert forward and not forward[0].meta.backward  # a forward node keeps its own tag


def test_gradient_nodes_fall_on_attention_and_gpt():
    """The issue's target: at least 15% fewer nodes on the GPT block's gradient; the
    attention sample's 14.7% (129 -> 110) and the nodes that remain are in bench/RESULTS.md."""
    counts = {}
    for name in ("gpt", "attention"):
        gradient = _gradient(ROOT / "samples" / f"{name}.uop")
        counts[name] = (len(gradient), len(simplify(gradient)))
    before, after = counts["gpt"]
    assert after <= 0.85 * before, counts
    # what the rows reach now, node for node (a lost rewrite of one node fails): gpt 412 -> 324
    # (21.4% fewer: the quotient row makes a * (1/b) one FDIV), attention 129 -> 110 (14.7%);
    # a change that does better lowers these
    assert counts == {"gpt": (412, 324), "attention": (129, 110)}, counts


def test_the_negation_of_a_shared_product_stays_one_node():
    """-(x*c) beside x*c (a SUB's gradients g and -g) is one NEG; x*(-c) would be two
    nodes, the product and its constant."""
    x, y = UOp.param("x", (3,)), UOp.param("y", (3,))
    g = x * 0.5
    shared, negated = simplify_nodes([g + y, -g])
    assert negated.op == Ops.NEG and negated.src[0] is g and shared.src[0] is g


# ----------------------------------------------------------------------------- activations

@pytest.mark.parametrize("key", sorted(STORED["gradients"]))
def test_activation_gradients_at_large_x_match_tinygrad(key):
    name, dtype = key.split("/")
    expected = np.array([float(v) for v in STORED["gradients"][key]], dtype=np.float64)
    x = UOp.param("x", (len(STORED["points"]),), dtype)
    graph, _ = differentiate(Graph({"y": getattr(x, name)().sum()}), ["x"])
    points = {"x": np.array(STORED["points"], dtype=dtype)}
    ours = np.asarray(evaluate_graph(graph, points, simplify="tinygrad")["grad_x"], np.float64)
    assert np.all(np.isfinite(ours)), f"{key}: {ours}"
    tinygrad_finite = np.isfinite(expected)  # float16 gelu: x^3 overflows in tinygrad's kernel (nan there)
    tolerance = 1e-6 if dtype == "float32" else 1e-3
    np.testing.assert_allclose(ours[tinygrad_finite], expected[tinygrad_finite], rtol=tolerance, atol=tolerance)


def test_the_literal_gradients_are_nan_where_the_simplified_are_not():
    x = UOp.param("x", (2,))
    graph, _ = differentiate(Graph({"y": x.sigmoid().sum()}), ["x"])
    points = {"x": np.array([-1000.0, 0.0], np.float32)}
    assert np.isnan(evaluate_graph(graph, points, simplify=None)["grad_x"][0])
    assert np.isnan(evaluate_graph(graph, points, simplify="exact")["grad_x"][0])
    assert evaluate_graph(graph, points, simplify="tinygrad")["grad_x"].tolist() == [0.0, 0.25]


def test_evaluate_graph_refuses_an_unknown_simplification():
    graph = Graph({"y": UOp.param("x", (2,)) * 1.0})
    with pytest.raises(uopcli.EvaluationError, match="simplify must be one of"):
        evaluate_graph(graph, {"x": np.ones(2, np.float32)}, simplify="fast")


def test_simplify_is_in_the_public_package():
    assert uopcli.simplify is simplify
    assert uopcli.simplify(Graph({"y": UOp.param("x", (2,)) * 1.0})).outputs["y"].op == Ops.PARAM


# ----------------------------------------------------------------------------- random graphs

_BINARY = ("add", "sub", "mul", "div_const", "max")
_UNARY = ("neg", "sigmoid", "exp2_bounded", "times_one", "plus_minus_zero", "double", "reshape_back",
          "sum_copies", "broadcast_scalar")


@st.composite
def random_graphs(draw):
    """A random graph over x, y (float32[3,4]): elementwise ops, sigmoid, and the shapes
    the rows rewrite (x*1, x+(-0.0), x+x, reshapes that undo each other, sums of copies,
    broadcast scalars), 2 to 12 ops deep."""
    x, y = UOp.param("x", (3, 4)), UOp.param("y", (3, 4))
    pool = [x, y]
    for _ in range(draw(st.integers(2, 12))):
        a = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(_BINARY + _UNARY))
        if kind in _BINARY:
            b = draw(st.sampled_from(pool))
            c = draw(st.sampled_from([0.5, 3.0, -1.25]))
            node = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                    "div_const": lambda: (a / c) * 2.0, "max": lambda: a.maximum(b)}[kind]()
        else:
            node = {"neg": lambda: -(-(-a)), "sigmoid": lambda: a.sigmoid() * (a * 0.5),
                    "exp2_bounded": lambda: (a * 0.01).exp2() + 0.0, "times_one": lambda: 1.0 * (a * 1.0),
                    "plus_minus_zero": lambda: a + UOp.const(-0.0), "double": lambda: a + a,
                    "reshape_back": lambda: a.reshape(4, 3).reshape(3, 4).permute(1, 0).permute(1, 0),
                    "sum_copies": lambda: a.reshape(3, 4, 1).expand(3, 4, 3).r(Ops.ADD, (2,)).reshape(3, 4),
                    "broadcast_scalar": lambda: a * UOp.full((3, 4), 2.0)}[kind]()
        pool.append(node)
    return Graph({"out": pool[-1]}, inputs=[x, y])


_VALUES = {"x": np.array([[-0.0, 0.5, -1.5, 2.0], [3.0, -0.25, 1e-3, 7.0], [0.0, -2.0, 1.25, -4.0]], np.float32),
           "y": np.array([[1.0, -0.0, 2.5, -3.0], [0.75, 4.0, -1.0, 0.0], [-0.5, 0.1, -6.0, 1.5]], np.float32)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_exact_bits_tinygrad_close_idempotent(graph):
    with no_gc():
        literal = evaluate_graph(graph, _VALUES)["out"]
        exact = simplify(graph, exact=True)
        assert _same_bits(evaluate_graph(exact, _VALUES)["out"], literal)
        rewritten = simplify(graph)
        assert dumps(simplify(rewritten)) == dumps(rewritten)
        assert dumps(simplify(exact, exact=True)) == dumps(exact)
        close = evaluate_graph(rewritten, _VALUES)["out"]
        finite = np.isfinite(literal)
        scale = max(1.0, float(np.max(np.abs(literal[finite])))) if finite.any() else 1.0
        np.testing.assert_allclose(close[finite], literal[finite], rtol=1e-4, atol=1e-5 * scale)


# ----------------------------------------------------------------------------- scale

def test_a_million_node_chain_simplifies_at_the_default_recursion_limit():
    limit = sys.getrecursionlimit()
    base = UOp.param("chain", (2,))
    with no_gc():
        node = base * 1.0  # simplified away at the bottom: every node above is rebuilt
        for _ in range(1_000_000):
            node = node.sin()
    (out,) = simplify_nodes([node], exact=True)
    assert sys.getrecursionlimit() == limit
    depth = 0
    while out.op == Ops.SIN:
        out, depth = out.src[0], depth + 1
    assert depth == 1_000_000 and out is base


# ----------------------------------------------------------------------------- commands

def _uopgrad(*args, stdin=None):
    exe = Path(sys.executable).parent / "uopgrad"
    return subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True)


@pytest.fixture(scope="module")
def sigmoid_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("simplify") / "sig.uop"
    x = UOp.param("x", (3,))
    save(Graph({"y": x.sigmoid().sum()}), path)
    return path


def test_cli_simplify_diff_simplify_and_eval_literal(sigmoid_file, tmp_path):
    grad, small, again = tmp_path / "grad.uop", tmp_path / "small.uop", tmp_path / "again.uop"
    assert _uopgrad("diff", sigmoid_file, "--wrt", "x", "-o", grad).returncode == 0
    run = _uopgrad("simplify", grad, "-o", small)
    assert run.returncode == 0 and b"nodes" in run.stderr
    assert _uopgrad("simplify", small, "-o", again).returncode == 0
    assert again.read_bytes() == small.read_bytes()  # idempotent, byte for byte
    piped = _uopgrad("diff", sigmoid_file, "--wrt", "x", "--simplify", "-o", "-")
    assert piped.returncode == 0 and piped.stdout == small.read_bytes()
    to_stdout = _uopgrad("simplify", grad)  # without -o, as diff: stdout, for the next command
    assert to_stdout.returncode == 0 and to_stdout.stdout == small.read_bytes()
    exact = tmp_path / "exact.uop"
    assert _uopgrad("simplify", grad, "--exact", "-o", exact).returncode == 0
    assert len(load(exact)) < len(load(grad)) and len(load(small)) < len(load(exact))
    default = json.loads(_uopgrad("eval", grad, "-i", "x=-1000", "--json").stdout)
    literal = json.loads(_uopgrad("eval", grad, "-i", "x=-1000", "--json", "--literal").stdout)
    assert default["outputs"]["grad_x"]["values"] == [0.0, 0.0, 0.0]
    assert literal["outputs"]["grad_x"]["values"] == ["nan", "nan", "nan"]


def test_cli_check_says_how_it_evaluated(sigmoid_file):
    default = _uopgrad("check", sigmoid_file, "--wrt", "x")
    assert default.returncode == 0
    assert b"numpy evaluator on the gradient graph simplified as tinygrad runs it" in default.stdout
    literal = _uopgrad("check", sigmoid_file, "--wrt", "x", "--literal")
    assert literal.returncode == 0 and b"numpy evaluator on the gradient graph as written (--literal)" in literal.stdout
    literal_json = _uopgrad("check", sigmoid_file, "--wrt", "x", "--literal", "--json")
    assert json.loads(literal_json.stdout)["simplified"] == "exact"


def test_cli_simplify_refuses_bad_input_and_writes_nothing(tmp_path):
    bad, out = tmp_path / "bad.uop", tmp_path / "out.uop"
    bad.write_bytes(b"not a graph")
    run = _uopgrad("simplify", bad, "-o", out)
    assert run.returncode == 1 and not out.exists()
    lines = run.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "bad.uop" in lines[0] and "Traceback" not in run.stderr.decode()
