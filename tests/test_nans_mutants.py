"""The NaN tracer's findings (tools/nans.py: `eval --debug-nans`, check's notes on non-finite
values) where its mutation run (docs/mutation.md) found the tests blind: which node is named
(the first in evaluation order that makes a value, not one that passes it on; an input or a
buffer of the file that holds it), what is said of it (counts, the first element made, the
sources' spans, metadata and the forward node a backward one differentiates), the input
elements it depends on through each movement op, a call's body, and an inf a nan is made
from. Each finding is pinned line by line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopcli import Graph, Metadata, UOp, dtypes
from uopcli.tools.nans import hunt_nans


def lines(graph: Graph, **inputs) -> list[str]:
    finding = hunt_nans(graph, {k: np.asarray(v, np.float32) for k, v in inputs.items()})
    return finding.lines()


def named(node: UOp, **meta) -> UOp:
    node.set_meta(Metadata(**meta))
    return node


X = UOp.param("x", (2, 3))
GRID = [[1, 2, 3], [4, 5, 6]]


# ----------------------------------------------------------------------------- elements through movements

@pytest.mark.parametrize("make, value, shape, first, element", [
    (lambda x: x.permute((1, 0)), [[1, 2, 3], [4, -5, 6]], "3,2", "[1,1]", "x[1,1] = -5.0"),
    (lambda x: x.permute((1, 0)), [[1, 2, -3], [4, 5, 6]], "3,2", "[2,0]", "x[0,2] = -3.0"),
    (lambda x: x.flip(1), [[1, 2, -3], [4, 5, 6]], "2,3", "[0,0]", "x[0,2] = -3.0"),
    (lambda x: x.flip(0), [[1, 2, -3], [4, 5, 6]], "2,3", "[1,2]", "x[0,2] = -3.0"),
    (lambda x: x[:, 1:], [[1, 2, 3], [4, 5, -6]], "2,2", "[1,1]", "x[1,2] = -6.0"),
    (lambda x: x.pad(((0, 0), (2, 0))), [[1, 2, 3], [-4, 5, 6]], "2,5", "[1,2]", "x[1,0] = -4.0"),
    (lambda x: x.pad(((1, 0), (0, 1))), [[1, 2, 3], [4, -5, 6]], "3,4", "[2,1]", "x[1,1] = -5.0"),
    (lambda x: x.reshape(3, 2), [[1, 2, 3], [-4, 5, 6]], "3,2", "[1,1]", "x[1,0] = -4.0"),
])
def test_the_input_element_a_nan_depends_on_through_a_movement(make, value, shape, first, element):
    lines_ = lines(Graph({"o": make(X).sqrt()}, inputs=[X]), x=value)
    op = "SQRT"
    assert lines_[0] == (f"first nan: %2 {op} float32[{shape}]: 1 nan among {eval(shape.replace(',', '*'))} elements "
                         f"(first made at {first}), from sources that hold no nan there")
    assert lines_[-1] == f"  its element {first} depends on: input {element}"


def test_an_expanded_input_element_is_named_once_and_a_sum_names_its_row():
    y = UOp.param("y", (1, 3))
    out = lines(Graph({"o": y.expand(2, 3).sqrt()}, inputs=[y]), y=[[1, -2, 3]])
    assert out == ["first nan: %2 SQRT float32[2,3]: 2 nans among 6 elements (first made at [0,1]), from sources "
                   "that hold no nan there",
                   "  source %1 EXPAND float32[2,3]: min -2 max 3, 0 of 6 not finite",
                   "  its element [0,1] depends on: input y[0,1] = -2.0"]
    row = lines(Graph({"o": X.sum(axis=1).reshape(1, 2).sqrt()}, inputs=[X]), x=[[1, 2, 3], [-4, -5, -6]])
    assert row[0].startswith("first nan: %4 SQRT float32[1,2]: 1 nan among 2 elements (first made at [0,1])")
    assert row[-1] == "  its element [0,1] depends on: input x[1,0] = -4.0; input x[1,1] = -5.0; input x[1,2] = -6.0"


def test_more_than_eight_input_elements_are_counted_by_input_and_constants_alone_said_so():
    a, b = UOp.param("a", (3, 3)), UOp.param("b", (2,))
    total = a.sum().reshape(1).expand(2) - b   # each element depends on all 9 of a and one of b
    out = lines(Graph({"o": total.sqrt()}, inputs=[a, b]), a=np.ones((3, 3)), b=[1, 20])
    assert out[0].startswith("first nan: %") and "1 nan among 2 elements (first made at [1])" in out[0]
    assert out[-1] == "  its element [1] depends on 10 input elements: b (1), a (9)"  # as the walk reaches them
    constant = UOp.buffer(np.array([1.0, -1.0], np.float32)).sqrt()
    out = lines(Graph({"o": constant}), )
    assert out == ["first nan: %1 SQRT float32[2]: 1 nan among 2 elements (first made at [1]), from sources that "
                   "hold no nan there",
                   "  source %0 BUFFER float32[2]: min -1 max 1, 0 of 2 not finite",
                   "  it depends on no input (constants only)"]


# ----------------------------------------------------------------------------- which node is named

def test_the_first_node_in_evaluation_order_is_named_not_a_later_one_nor_one_passing_it_on():
    """sqrt(x) and log(y) both make a nan; the output adds them. sqrt is computed first: named,
    with its own count, not the ADD that only passes nans on (2 there)."""
    x, y = UOp.param("x", (3,)), UOp.param("y_order", (3,))
    first = x.sqrt()
    second = named(y.log2(), name="second")
    graph = Graph({"o": (first + second) * 2.0}, inputs=[x, y])
    out = lines(graph, x=[1, -1, 4], y_order=[-1, 1, 1])
    assert out[0] == ("first nan: %1 SQRT float32[3]: 1 nan among 3 elements (first made at [1]), from sources that "
                      "hold no nan there")
    assert out[1] == "  source %0 PARAM float32[3]: min -1 max 4, 0 of 3 not finite"
    assert out[2] == "  its element [1] depends on: input x[1] = -1.0"
    # the other way round, log first
    later = Graph({"o": (second + y.sqrt() * 0.0 + x.sqrt())}, inputs=[x, y])
    assert "second" in lines(later, x=[1, -1, 4], y_order=[-1, 1, 1])[0]


def test_a_nan_is_preferred_to_an_inf_and_a_nan_made_from_an_inf_names_where_the_inf_was_made():
    """1/x at 0 is inf (RECIPROCAL), times 0 a nan (MUL): the nan is named, made from an inf, and
    the inf's own finding follows, indented."""
    x = UOp.param("x_inverse", (3,))
    inverse = named(x.reciprocal(), name="inverse", scope="head")
    graph = Graph({"o": inverse * x, "i": inverse}, inputs=[x])
    out = lines(graph, x_inverse=[1, 0, 2])
    assert out == [
        "first nan: %2 MUL float32[3]: 1 nan among 3 elements (first made at [1]), from sources that hold no nan there",
        "  source %1 RECIPROCAL float32[3]: min 0.5 max 1, 1 of 3 not finite",
        "  source %0 PARAM float32[3]: min 0 max 2, 0 of 3 not finite",
        "  its element [1] depends on: input x_inverse[1] = 0.0",
        "  the inf it is made from:",
        "    first inf: %1 RECIPROCAL float32[3], inverse, in scope head: 1 inf among 3 elements (first made at [1]), "
        "from finite sources",
        "      source %0 PARAM float32[3]: min 0 max 2, 0 of 3 not finite",
        "      its element [1] depends on: input x_inverse[1] = 0.0"]
    only_inf = lines(Graph({"i": inverse}, inputs=[x]), x_inverse=[1, 0, 2])
    assert only_inf[0].startswith("first inf: %1 RECIPROCAL float32[3], inverse, in scope head: 1 inf among 3")


def test_an_inf_made_by_a_sum_of_finite_values_is_named_at_the_sum():
    x = UOp.param("x", (2, 2))
    out = lines(Graph({"o": x.sum(axis=1)}, inputs=[x]), x=[[2.0 ** 127, 2.0 ** 127], [1, 2]])  # 2^128: inf
    assert out[0] == "first inf: %1 REDUCE float32[2,1]: 1 inf among 2 elements (first made at [0,0]), from finite sources"
    assert out[1] == "  source %0 PARAM float32[2,2]: min 1 max 1.70141e+38, 0 of 4 not finite"
    assert out[2] == ("  its element [0,0] depends on: input x[0,0] = 1.7014118346046923e+38; "
                      "input x[0,1] = 1.7014118346046923e+38")


def test_a_sum_of_an_inf_passes_it_on_and_the_input_holding_it_is_named():
    x = UOp.param("x", (2, 2))
    out = lines(Graph({"o": x.sum(axis=1) * 2.0}, inputs=[x]), x=[[np.inf, 1], [1, 2]])
    assert out == ["first inf: %0 PARAM float32[2,2]: input x holds 1 inf among 4 elements: given, not made"]
    buffer = UOp.buffer(np.array([1.0, np.nan, np.nan], np.float32))
    out = lines(Graph({"o": buffer.exp2() + X.sum()}, inputs=[X]), x=GRID)
    assert out == ["first nan: %0 BUFFER float32[3]: a BUFFER of the file holds 2 nans among 3 elements: given, not made"]


def test_a_value_made_inside_a_function_is_named_at_the_calls_output():
    x = UOp.param("x", (3,))
    call = UOp.trace_function("body", lambda a: ((a * 2.0).sqrt(),), x)
    # numbered as `uopgrad print` does: the body's nodes first (%0-%4), then x (%5)
    out = lines(Graph({"o": call[0] + 1.0}, inputs=[x]), x=[1, -2, 4])
    assert out == [
        "first nan: %7 GETTUPLE float32[3]: 1 nan among 3 elements (first made at [1]), from sources that hold no "
        "nan there, inside the body of FUNCTION body",   # a FUNCTION's arg is its name (was an AttributeError)
        "  source %5 PARAM float32[3]: min -2 max 4, 0 of 3 not finite",
        # every element of every arg, as far as shapes tell (was "it depends on no input (constants only)")
        "  its element [1] depends on: input x[0] = 1.0; input x[1] = -2.0; input x[2] = 4.0"]
    w = UOp.param("w", (3,))
    custom = UOp.trace_call("sq", lambda v: (v.sqrt(),), lambda v, g: (g,), w * 2.0)
    assert lines(Graph({"o": custom[0]}, inputs=[w]), w=[1, -2, 4])[0] == (
        "first nan: %9 GETTUPLE float32[3]: 1 nan among 3 elements (first made at [1]), from sources that hold no "
        "nan there, inside the body of CALL sq")
    # an arg that holds the nan already: the call only passes it on; the input is named
    passed = lines(Graph({"o": call[0] + 1.0}, inputs=[x]), x=[1, np.nan, 4])
    assert passed == ["first nan: %5 PARAM float32[3]: input x holds 1 nan among 3 elements: given, not made"]
    inf = lines(Graph({"o": UOp.trace_function("f", lambda a: (a.reciprocal(),), x)[0]}, inputs=[x]), x=[1, 0, 4])
    assert inf[0] == ("first inf: %5 GETTUPLE float32[3]: 1 inf among 3 elements (first made at [1]), from finite "
                      "sources, inside the body of FUNCTION f")


def test_finite_outputs_and_integer_nodes_find_nothing():
    x = UOp.param("x", (3,))
    assert hunt_nans(Graph({"o": x.sqrt()}, inputs=[x]), {"x": np.array([1, 4, 9], np.float32)}) is None
    i = UOp.param("i", (3,), dtypes.int32)
    assert hunt_nans(Graph({"o": i * 2}, inputs=[i]), {"i": np.array([1, 2, 3], np.int32)}) is None


def test_a_source_with_no_finite_element_and_plurals():
    x = UOp.param("x", (2,))
    out = lines(Graph({"o": (x * 0.0) + x.reciprocal() * 0.0}, inputs=[x]), x=[0, 0])
    assert "2 nans among 2 elements (first made at [0])" in out[0]
    assert any(line.endswith("RECIPROCAL float32[2]: no finite element, 2 of 2 not finite") for line in out)


# ----------------------------------------------------------------------------- metadata

def test_a_backward_node_names_the_forward_node_it_differentiates():
    x = UOp.param("x_meta", (3,))   # its own nodes: metadata is set on hash-consed nodes
    forward = named(x.sqrt(), name="root", scope="enc", loc="model.py:3")
    grad = named(forward.reciprocal(), name="root", scope="enc", loc="model.py:3", backward=True)
    graph = Graph({"y": forward, "g": grad}, inputs=[x])
    out = lines(graph, x_meta=[1, 0, 4])
    assert out[0] == ("first inf: %2 RECIPROCAL float32[3], ∇ root (differentiates %1 SQRT float32), in scope enc, "
                      "at model.py:3: 1 inf among 3 elements (first made at [1]), from finite sources")
    marked = named(x.reciprocal(), backward=True, scope="s")
    assert lines(Graph({"g": marked}, inputs=[x]), x_meta=[1, 0, 4])[0].startswith(
        "first inf: %1 RECIPROCAL float32[3], backward, in scope s: 1 inf")


def test_a_finding_as_json_has_every_part_and_its_origin():
    x = UOp.param("x_json", (2,))
    finding = hunt_nans(Graph({"o": x.reciprocal() * x}, inputs=[x]), {"x_json": np.array([0, 1], np.float32)})
    d = finding.to_dict()
    assert d == {"kind": "nan", "node": "%2 MUL float32[2]", "meta": "",
                 "made": "1 nan among 2 elements (first made at [0]), from sources that hold no nan there",
                 "cause": "computed", "sources": ["%1 RECIPROCAL float32[2]: min 1 max 1, 1 of 2 not finite",
                             "%0 PARAM float32[2]: min 0 max 1, 0 of 2 not finite"],
                 "elements": ["its element [0] depends on: input x_json[0] = 0.0"],
                 "origin": {"kind": "inf", "node": "%1 RECIPROCAL float32[2]", "meta": "",
                            "made": "1 inf among 2 elements (first made at [0]), from finite sources",
                            "cause": "computed", "sources": ["%0 PARAM float32[2]: min 0 max 1, 0 of 2 not finite"],
                            "elements": ["its element [0] depends on: input x_json[0] = 0.0"], "origin": None}}


# ----------------------------------------------------------------------------- the dependency walk, further

def test_elements_through_an_expand_of_a_column_a_3d_permute_and_two_reads_of_one_input():
    y = UOp.param("y_col", (2, 1))
    out = lines(Graph({"o": y.expand(2, 3).sqrt()}, inputs=[y]), y_col=[[1], [-2]])
    assert out[0].startswith("first nan: %2 SQRT float32[2,3]: 3 nans among 6 elements (first made at [1,0])")
    assert out[-1] == "  its element [1,0] depends on: input y_col[1,0] = -2.0"
    z = UOp.param("z_3d", (2, 3, 4))
    value = np.where(np.arange(24).reshape(2, 3, 4) == 13, -1, 1)          # z[1,0,1] = -1
    out = lines(Graph({"o": z.permute((1, 2, 0)).sqrt()}, inputs=[z]), z_3d=value)
    assert out[0].startswith("first nan: %2 SQRT float32[3,4,2]: 1 nan among 24 elements (first made at [0,1,1])")
    assert out[-1] == "  its element [0,1,1] depends on: input z_3d[1,0,1] = -1.0"
    x = UOp.param("x_twice", (2, 3))
    out = lines(Graph({"o": (x[:, 1:] + x[:, :2]).sqrt()}, inputs=[x]), x_twice=[[1, 2, 3], [4, -9, 6]])
    assert out[0].startswith("first nan: %4 SQRT float32[2,2]: 2 nans among 4 elements (first made at [1,0])")
    assert out[-1] == "  its element [1,0] depends on: input x_twice[1,0] = 4.0; input x_twice[1,1] = -9.0"


def test_a_comparison_passes_on_every_element_of_its_sources():
    """A compare is no elementwise op of the walk: as far as shapes tell, every element."""
    a, b = UOp.param("a_cmp", (2,)), UOp.param("b_cmp", (2,))
    out = lines(Graph({"o": (a < b).where(a, b).sqrt()}, inputs=[a, b]), a_cmp=[1, -2], b_cmp=[3, 4])
    assert out[0].startswith("first nan: %") and "1 nan among 2 elements (first made at [1])" in out[0]
    assert out[-1] == ("  its element [1] depends on: input b_cmp[0] = 3.0; input b_cmp[1] = 4.0; "
                       "input a_cmp[0] = 1.0; input a_cmp[1] = -2.0")


def test_exactly_eight_input_elements_are_listed_nine_are_counted():
    for n, listed in [(8, True), (9, False)]:
        a = UOp.param(f"a{n}", (n,))
        value = np.ones(n)
        value[0] = -2 * n
        out = lines(Graph({"o": a.sum().sqrt()}, inputs=[a]), **{f"a{n}": value})
        assert out[-1].startswith("  its element [] depends on: input") is listed, out[-1]
        if not listed:
            assert out[-1] == "  its element [] depends on 9 input elements: a9 (9)"


def test_a_call_output_read_with_its_arg_and_a_call_made_nan_before_a_later_one():
    a = UOp.param("fa", (3,))
    call = UOp.trace_function("fb", lambda t: ((t * 2.0).sqrt(),), a)
    out = lines(Graph({"o": call[0] + a}, inputs=[a]), fa=[1, -2, 4])
    assert out[-1] == "  its element [1] depends on: input fa[0] = 1.0; input fa[1] = -2.0; input fa[2] = 4.0"
    # the call's nan (at [2]) comes before the SQRT's of the ADD (at [2] too): the call is named
    later = Graph({"o": (call[0] * 0.0 + 1.0).log2() + (a + 3.0).sqrt()}, inputs=[a])
    assert lines(later, fa=[1, 2, -4])[0].startswith("first nan: %7 GETTUPLE float32[3]: 1 nan among 3 elements "
                                                     "(first made at [2])")
    # a nan made after a call: the call's output is a source, with its span
    doubled = UOp.trace_function("fd", lambda t: (t * 2.0,), a)[0]
    after = lines(Graph({"o": doubled.sqrt()}, inputs=[a]), fa=[1, -2, 8])
    assert after[0].startswith("first nan: %7 SQRT float32[3]: 1 nan among 3 elements (first made at [1])")
    assert after[1] == "  source %6 GETTUPLE float32[3]: min -4 max 16, 0 of 3 not finite"
    # the arg read by the call and beside it: both masks of the same input, joined
    beside = lines(Graph({"o": (doubled + a).sqrt()}, inputs=[a]), fa=[1, -2, 8])
    assert beside[-1] == "  its element [1] depends on: input fa[0] = 1.0; input fa[1] = -2.0; input fa[2] = 8.0"
    # an arg that holds an inf: the call passes it on, the input is named
    passes = Graph({"o": UOp.trace_function("fc", lambda t: (t * 2.0,), a)[0]}, inputs=[a])
    assert lines(passes, fa=[1, np.inf, 4]) == [
        "first inf: %4 PARAM float32[3]: input fa holds 1 inf among 3 elements: given, not made"]


def test_the_input_named_is_the_one_that_holds_the_value_not_another():
    p, q = UOp.param("p_finite", (3,)), UOp.param("q_nan", (3,))
    assert lines(Graph({"o": p * 1.0 + q}, inputs=[p, q]), p_finite=[1, 2, 3], q_nan=[1, np.nan, 3]) == [
        "first nan: %3 PARAM float32[3]: input q_nan holds 1 nan among 3 elements: given, not made"]
    finding = hunt_nans(Graph({"o": p * 1.0 + q}, inputs=[p, q]),
                        {"p_finite": np.ones(3, np.float32), "q_nan": np.array([1, np.nan, 3], np.float32)})
    assert finding.to_dict()["meta"] == "" and finding.to_dict()["sources"] == []


def test_a_nan_an_ops_definition_gives_is_made_by_its_where():
    """A WHERE built for an op (metadata naming it, not an ONNX Where) taking a nan CONST:
    made there, by that op (cause "defined"), the condition named when it is no row of
    -inf; a WHERE of no op, or an ONNX Where, passes the CONST's nan on (given)."""
    x = UOp.param("x_def", (3,))
    chosen = named(x < 0.0, name="Mod")
    out = lines(Graph({"o": named(chosen.where(math.nan, x), name="Mod", loc="/Mod")}, inputs=[x]), x_def=[1, -2, 3])
    assert out == ["first nan: %4 WHERE float32[3], Mod, at /Mod: 1 nan among 3 elements (first made at [1]): made by "
                   "Mod, whose definition gives nan where %2 CMPLT bool[3] is true",
                   "  source %3 CONST float32[]: no finite element, 1 of 1 not finite",
                   "  source %0 PARAM float32[3]: min -2 max 3, 0 of 3 not finite",
                   "  its element [1] depends on: input x_def[0] = 1.0; input x_def[1] = -2.0; input x_def[2] = 3.0"]
    at_three = x.max(0, keepdim=True).eq(3.0).expand(3)  # a row's max, but not -inf: no row named
    out = lines(Graph({"o": named(at_three.where(math.nan, x), name="Top")}, inputs=[x]), x_def=[1, -2, 3])
    assert out[0].endswith("(first made at [0]): made by Top, whose definition gives nan where %4 EXPAND bool[3] is true")
    for meta, cut in (({}, -1.0), ({"name": "Where"}, -1.5)):  # (other nodes: equal ones are one)
        plain = (x < cut).where(math.nan, x)
        out = lines(Graph({"o": named(plain, **meta) if meta else plain}, inputs=[x]), x_def=[1, -2, 3])
        assert out[0].endswith("a CONST of the file holds 1 nan among 1 elements: given, not made")


def test_the_forward_twin_is_the_one_read_else_the_last_of_the_graph_else_none():
    x = UOp.param("x_twin", (3,))
    early = named(x * 2.0, name="act", scope="s")
    late = named(x * 3.0, name="act", scope="s")
    grad = named(early.reciprocal(), name="act", scope="s", backward=True)
    # it reads %early: that one, though a later forward node has the same function and scope
    graph = Graph({"a": late, "g": grad}, inputs=[x])
    numbered = {n: i for i, n in enumerate(graph.nodes())}
    out = lines(graph, x_twin=[1, 0, 2])
    assert f"∇ act (differentiates %{numbered[early]} MUL float32)" in out[0]
    # a backward node reading no such node: the graph's last forward node of the function
    lone = named(x.reciprocal(), name="act", scope="s", backward=True)
    graph = Graph({"a": early, "b": late, "g": lone}, inputs=[x])
    numbered = {n: i for i, n in enumerate(graph.nodes())}
    assert f"∇ act (differentiates %{numbered[late]} MUL float32)" in lines(graph, x_twin=[1, 0, 2])[0]
    # no forward node of that function at all: no twin named
    other = named((x * 5.0).reciprocal(), name="nothing_forward", backward=True)
    assert lines(Graph({"g": other}, inputs=[x]), x_twin=[1, 0, 2])[0].startswith(
        "first inf: %3 RECIPROCAL float32[3], ∇ nothing_forward: 1 inf")


def test_a_nan_made_by_a_sum_of_infinities_is_named_at_the_sum_and_the_inf_at_the_input():
    """inf + -inf in a REDUCE: a nan made where no source holds one, from an inf the input holds."""
    x = UOp.param("x_infs", (2, 2))
    out = lines(Graph({"o": x.sum(axis=1)}, inputs=[x]), x_infs=[[np.inf, -np.inf], [1, 2]])
    assert out == [
        "first nan: %1 REDUCE float32[2,1]: 1 nan among 2 elements (first made at [0,0]), from sources that hold no "
        "nan there",
        "  source %0 PARAM float32[2,2]: min 1 max 2, 2 of 4 not finite",
        "  its element [0,0] depends on: input x_infs[0,0] = inf; input x_infs[0,1] = -inf",
        "  the inf it is made from:",
        "    first inf: %0 PARAM float32[2,2]: input x_infs holds 2 infs among 4 elements: given, not made"]


def test_a_node_reached_twice_does_not_end_the_walk():
    """The walk meets `shared` twice before it reaches the SQRT, which made its nan first."""
    x, y = UOp.param("cx", (3,)), UOp.param("cy", (3,))
    shared = y.log2() * 2.0
    graph = Graph({"o": x.sqrt() + (shared + shared * 3.0)}, inputs=[x, y])
    assert lines(graph, cx=[1, -1, 4], cy=[-1, 1, 1])[0].startswith("first nan: %1 SQRT float32[3]: 1 nan")
