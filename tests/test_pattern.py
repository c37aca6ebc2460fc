"""UPat matching, PatternMatcher dispatch, and the iterative bottom-up graph_rewrite."""

import sys

import pytest

from uopcli import Ops, UOp, UOpError, dtypes
from uopcli.core.pattern import PatternMatcher, UPat, graph_rewrite
from uopcli.core.walks import no_gc

x = UOp.param("x", (3,))
y = UOp.param("y", (3,))

# x*1 -> x, x+0 -> x, 1*x -> x
simplify = PatternMatcher([
    (UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("one", 1.0))), lambda a, one: a),
    (UPat(Ops.MUL, src=(UPat.cvar("one", 1.0), UPat.var("a"))), lambda a, one: a),
    (UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("zero", 0.0))), lambda a, zero: a),
])


def test_upat_matches_op_dtype_arg_and_sources():
    node = x * 2.0
    b = {}
    assert UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))).match(node, b)
    assert b["a"] is x and b["c"].arg == 2.0
    assert not UPat(Ops.ADD).match(node, {})
    assert UPat((Ops.ADD, Ops.MUL), dtypes.float32).match(node, {})
    assert not UPat(Ops.MUL, dtypes.int32).match(node, {})
    assert not UPat(Ops.MUL, src=(UPat.var(), UPat.cvar(value=3.0))).match(node, {})
    assert not UPat(Ops.MUL, src=(UPat.var(),)).match(node, {})  # source count must agree
    assert UPat(Ops.REDUCE, arg=("ADD", (0,))).match(x.r("ADD", (0,)), {})


def test_a_name_bound_twice_must_be_the_same_node():
    same = UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("a")))
    assert same.match(x * x, {})
    assert not same.match(x * y, {})


def test_src_as_one_pattern_applies_to_every_source():
    all_params = UPat(Ops.ADD, src=UPat(Ops.PARAM))
    assert all_params.match(x + y, {})
    assert not all_params.match(x + 1.0, {})


def test_bool_const_does_not_match_a_numeric_value():
    flag = UOp.const(True)
    assert not UPat.cvar(value=1).match(flag, {})
    assert UPat.cvar(value=1).match(UOp.const(1.0), {})


def test_matcher_tries_rows_in_order_and_passes_ctx():
    seen = []
    pm = PatternMatcher([
        (UPat(Ops.SIN, name="n"), lambda n, ctx: ctx.append(n)),  # returns None: next row
        (UPat(name="n"), lambda n: None),
        (UPat(Ops.SIN, src=(UPat.var("a"),)), lambda a: a.sqrt()),
    ])
    assert pm.rewrite(x.sin(), ctx=seen) is x.sqrt()
    assert seen == [x.sin()]
    assert pm.rewrite(x.exp2(), ctx=seen) is None


def test_graph_rewrite_simplifies_bottom_up_to_a_fixpoint():
    expr = ((x * 1.0 + 0.0) * 1.0).sin() + y * 1.0
    assert graph_rewrite(expr, simplify) is x.sin() + y


def test_graph_rewrite_rewrites_what_a_rule_returns():
    # SQRT(a) -> SIN(a*1): the new MUL must itself be simplified
    pm = simplify + PatternMatcher([(UPat(Ops.SQRT, src=(UPat.var("a"),)), lambda a: (a * 1.0).sin())])
    assert graph_rewrite(x.sqrt().sqrt(), pm) is x.sin().sin()


def test_graph_rewrite_keeps_metadata_of_rebuilt_nodes():
    relu = (x * 1.0).relu()
    out = graph_rewrite(relu, simplify)
    assert out is x.relu() and out.meta.name == "relu"


def test_graph_rewrite_detects_a_loop():
    pm = PatternMatcher([
        (UPat(Ops.SIN, src=(UPat.var("a"),)), lambda a: a.sin().sqrt()),
    ])
    with pytest.raises(UOpError):
        graph_rewrite(x.sin(), pm)


def test_graph_rewrite_of_a_million_node_chain_at_the_default_recursion_limit():
    limit = sys.getrecursionlimit()
    base = UOp.param("chain", (1,))
    node = base * 1.0  # simplified away at the bottom: every node above is rebuilt
    with no_gc():
        for _ in range(1_000_000):
            node = node.sin()
    out = graph_rewrite(node, simplify)
    assert sys.getrecursionlimit() == limit
    depth = 0
    while out.op == Ops.SIN:
        out = out.src[0]
        depth += 1
    assert depth == 1_000_000 and out is base
