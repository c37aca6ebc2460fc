"""The simplification walk's shortcuts lose nothing.

The walk tries a row only where the node's signature (its op and dtype, its sources' ops,
facts about them, the CONST values rows ask for) and the ctx flags say it can apply. That
is an optimisation only: a rewriter that tries every row whose op fits on every node
(`gated=False`) must give the very same nodes, on the samples' gradients, the row pools,
graphs made to have the facts, and random graphs and their gradients."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from uopcli import Graph, Metadata, Ops, UOp, dtypes, evaluate, load
from uopcli.core.simplify import EXACT, TINYGRAD
from uopcli.core.simplify import nodes as n
from uopcli.core.simplify.walk import Rewriter
from uopcli.core.walks import creation_order, no_gc, toposort
from uopcli.tools.differentiate import differentiate

from test_simplify import SAMPLES, random_graphs
from test_simplify_rows import exact_pool, tinygrad_pool

TABLES = {"exact": (EXACT,), "tinygrad": (EXACT, TINYGRAD)}


def _same_result(roots, tables):
    gated = Rewriter(*tables).rewrite_roots(roots)
    reference = Rewriter(*tables, gated=False).rewrite_roots(roots)
    for root, a, b in zip(roots, gated, reference):
        assert a is b, f"the gated walk gave {a!r} where trying every row gives {b!r} (from {root!r})"
    return gated


def _gradient_roots(graph: Graph) -> list:
    scalar = all(node.shape == () for node in graph.outputs.values())
    gradient, _ = differentiate(graph, [p.arg for p in graph.inputs if p.dtype.is_float],
                                cotangent=None if scalar else "ones")
    return list(gradient.outputs.values())


@pytest.mark.parametrize("mode", sorted(TABLES))
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_gating_loses_no_rewrite_on_a_sample_gradient(path, mode):
    graph = load(path)
    roots = _gradient_roots(graph) + list(graph.outputs.values())
    out = _same_result(roots, TABLES[mode])
    assert sum(len(toposort([r])) for r in out) < sum(len(toposort([r])) for r in roots)  # it did rewrite


@pytest.mark.parametrize("mode", sorted(TABLES))
def test_gating_loses_no_rewrite_on_the_row_pools(mode):
    pool = exact_pool() + tinygrad_pool()
    out = _same_result(pool, TABLES[mode])
    assert sum(a is not b for a, b in zip(pool, out)) > len(pool) // 2


def _fact_graphs() -> list:
    """Nodes whose rewrites depend on the facts: broadcast scalars through every
    selecting movement, constants through movements, a move of a NEG, scalar PARAMs and
    BUFFERs, deep movement chains of a scalar."""
    x, s = UOp.param("x", (2, 3)), UOp.param("s", ())
    one_buffer = UOp.buffer(np.array(2.5, np.float32))
    table = UOp.buffer(np.arange(6, dtype=np.float32).reshape(2, 3))
    deep = s
    for shape in [(1,), (1, 1), (1, 1, 1), (1, 1), (1,), (1, 1, 1, 1), (1,), (1, 1)]:
        deep = deep.reshape(shape)
    return [
        x * s.reshape(1, 1).expand(2, 3), s.reshape(1, 1).expand(2, 3).permute(1, 0),
        x + one_buffer.reshape(1, 1).expand(2, 3), one_buffer.reshape(1, 1).expand(2, 3).flip((0,)) * x,
        x * UOp.const(3.0).reshape(1, 1).expand(2, 3).shrink(((0, 1), (0, 3))).expand(2, 3),
        (table.permute(1, 0).reshape(6) * UOp.const(2.0).reshape(1).expand(6)).reshape(2, 3) + x,
        table.flip((1,)).pad(((0, 0), (1, 0))).shrink(((0, 2), (1, 4))) + table,
        x + (-x).permute(1, 0).permute(1, 0), (-(x.sum(1, keepdim=True))).expand(2, 3) + x,
        -(s.reshape(1, 1).expand(2, 3)), s.reshape(1, 1).expand(2, 3).cast(dtypes.float16).cast(dtypes.float32) + x,
        deep.expand(1, 1) * 2.0, x * deep.reshape(1, 1).expand(2, 3),
        (x.sum() * 1.0).reshape(1, 1).expand(2, 3) + x,
    ]


@pytest.mark.parametrize("mode", sorted(TABLES))
def test_gating_loses_no_rewrite_where_the_facts_decide(mode):
    roots = _fact_graphs()
    out = _same_result(roots, TABLES[mode])
    assert sum(a is not b for a, b in zip(roots, out)) >= len(roots) - 2


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_gating_loses_no_rewrite_on_random_graphs_and_their_gradients(graph):
    with no_gc():
        roots = list(graph.outputs.values()) + _gradient_roots(graph)
        for tables in TABLES.values():
            _same_result(roots, tables)


def test_a_deep_product_holding_a_ratio_is_rewritten_without_recursion():
    """sigmoid's ratio row looks for 1/(1+e) among a product's factors, memoised per
    node; a product 10^5 MULs deep, made before the ratio was seen, must not make it
    recurse (it raised RecursionError before). The pair e * 1/(1+e) is rewritten."""
    x = UOp.param("x", (4,))
    with no_gc():
        product = x
        for _ in range(100_000):
            product = product * x
        e = (x * -1.4426950408889634).exp2()
        literal = product * (e * (e + 1.0).reciprocal())
        (out,) = Rewriter(EXACT, TINYGRAD).rewrite_roots([literal])
    ratio = (e + 1.0).reciprocal()
    assert any(node.op == Ops.SUB and node.src[1] is ratio for node in toposort([out]))
    values = {"x": np.array([1.0, -1.0, 1.0, -1.0], np.float32)}
    np.testing.assert_allclose(*evaluate([out, literal], values), rtol=1e-5)


@pytest.mark.parametrize("base_shape", [(2, 1, 3), (1, 4, 1, 5), (3, 1, 1, 2, 1)])
def test_the_view_length_is_what_the_view_builds(base_shape):
    """_shorter_unit_axis_chain decides from unit_axis_view_length before it builds."""
    import itertools
    base = UOp.param("b", base_shape)
    axes = [i for i, s in enumerate(base_shape) if s != 1]
    checked = 0
    for order in itertools.permutations(axes):
        sizes = [base_shape[i] for i in order]
        for ones in range(4):
            for positions in itertools.combinations(range(len(sizes) + ones), ones):
                shape, it = [], iter(sizes)
                shape = tuple(1 if i in positions else next(it) for i in range(len(sizes) + ones))
                view = n.unit_axis_view(base, list(order), shape)
                steps, node = 0, view
                while node is not base:
                    steps, node = steps + 1, node.src[0]
                assert n.unit_axis_view_length(base, list(order), shape) == steps, (order, shape)
                checked += 1
    assert checked > 20


def test_creation_order_puts_sources_first_and_reaches_what_toposort_reaches():
    x = UOp.param("x", (3,))
    late = UOp.param("late", (3,))  # made after x: an older node may use a newer one only through its users
    roots = [(x * 2.0 + late).sin(), late.exp2() * x]
    order = creation_order(roots)
    assert set(order) == set(toposort(roots))
    position = {node: i for i, node in enumerate(order)}
    assert all(position[s] < position[node] for node in order for s in node.src)


def test_a_node_whose_own_rows_raise_the_flag_gets_the_rows_it_admits():
    """e/(1+e) as the graph's first ratio: the bookkeeping row notes the ratio on this
    very node, and the ratio row, admitted from then on, still rewrites it."""
    x = UOp.param("x", (4,))
    e = (x * -1.4426950408889634).exp2()
    (out,) = Rewriter(EXACT, TINYGRAD).rewrite_roots([e / (e + 1.0)])
    assert out.op == Ops.SUB and out.src[1] is (e + 1.0).reciprocal()


def test_rows_that_never_settle_are_refused_with_one_line():
    """A table whose row keeps making a new node (sin x -> sin(x*1) -> ...) stops at the
    walk's chain limit with an error naming the op, not a hang or a RecursionError."""
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.errors import UOpError
    growing = PatternMatcher([(UPat(Ops.SIN, src=(UPat.var("x"),)), lambda x: (x * 1.0).sin())])
    with pytest.raises(UOpError, match="do not reach a fixpoint at a SIN node"):
        Rewriter(growing).rewrite_roots([UOp.param("x", (2,)).sin()])


def test_the_chain_limit_allows_max_chain_rewrites_of_one_node_and_refuses_one_more():
    """x + n rewritten to x + (n-1) until n is 0: n successive rewrites of one node. The
    limit is a count, so a table that needs exactly _MAX_CHAIN steps settles."""
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.core.simplify.walk import _MAX_CHAIN
    from uopcli.errors import UOpError
    countdown = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))),
                                 lambda x, c: x + (c.arg - 1.0) if c.arg > 0 else None)])
    x = UOp.param("chain_x", ())
    (out,) = Rewriter(countdown).rewrite_roots([x + float(_MAX_CHAIN)])
    assert out.src[0] is x and out.src[1].arg == 0.0
    with pytest.raises(UOpError, match="do not reach a fixpoint at a ADD node"):
        Rewriter(countdown).rewrite_roots([x + float(_MAX_CHAIN + 1)])


def test_rows_that_loop_through_new_sources_are_refused_with_one_line():
    """-x -> -(-x), whose new source -x is rewritten again before it is final: the depth
    counts the nested sources too, so this is the walk's error, not a RecursionError. The
    walk recurses once per nested new source (a few frames each, 100 levels before the limit
    here; mutmut's trampolines triple the frames): the stack is given room for that, not for
    a walk that never stops counting."""
    import sys
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.errors import UOpError
    nesting = PatternMatcher([(UPat(Ops.NEG, name="n"), lambda n: UOp.make(Ops.NEG, n.dtype, (n,)))])
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        with pytest.raises(UOpError, match="do not reach a fixpoint at a NEG node"):
            Rewriter(nesting).rewrite_roots([-UOp.param("nest_x", ())])
    finally:
        sys.setrecursionlimit(limit)


# ----------------------------------------------------------------------------- metadata
# A rebuilt node keeps the metadata of the node it rebuilds; a node that was already in the
# graph keeps its own (the first tag wins). Fresh PARAM names: nodes are interned, and a tag
# set by another test would be the "first" one here.

def _metadata_case(n_src: int, name: str):
    x, y = UOp.param(f"{name}_x", (3,)), UOp.param(f"{name}_y", (3,))
    op = (lambda u: u.sin()) if n_src == 1 else (lambda u: u + y)
    return op(x), op(x * 1.0)  # the second, x*1 -> x, is rebuilt as the first


@pytest.mark.parametrize("n_src", [1, 2])
def test_a_rebuilt_node_takes_the_metadata_of_the_node_it_rebuilds(n_src):
    _, literal = _metadata_case(n_src, f"meta_new{n_src}")
    literal.set_meta(Metadata("written", "model.py:3"))
    (out,) = Rewriter(EXACT).rewrite_roots([literal])
    assert out is not literal and out.src[0].op == Ops.PARAM
    assert out.meta == Metadata("written", "model.py:3")


@pytest.mark.parametrize("n_src", [1, 2])
def test_a_node_already_in_the_graph_keeps_its_own_metadata(n_src):
    """sin(x) tagged "first" and sin(x*1) tagged "second": the second's rebuild is the first
    node itself, which must keep "first" (and so must the graph the caller passed)."""
    first, second = _metadata_case(n_src, f"meta_old{n_src}")
    first.set_meta(Metadata("first"))
    second.set_meta(Metadata("second"))
    out = Rewriter(EXACT).rewrite_roots([first, second])
    assert out[0] is first and out[1] is first
    assert first.meta == Metadata("first")


# ----------------------------------------------------------------------------- what the gates see
# The gating is the walk's speed (a node no row can match costs a dictionary lookup); the
# tests above show it loses no rewrite, these that it gates: the facts a signature test is
# given, rows kept out until their test or flag admits them, each signature tested once.

def _facts_seen(root, op=Ops.CAST, rows=()):
    """The source facts a signature test sees for `op` nodes (a row that rewrites nothing)."""
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.core.simplify.walk import only_when
    seen = []
    probe = only_when(lambda key: seen.append((key[1], key.facts)) and False)(lambda node: None)
    Rewriter(PatternMatcher([(UPat(op, name="node"), probe), *rows])).rewrite_roots([root])
    return seen


def test_the_facts_a_signature_test_is_given():
    from uopcli.core.simplify.walk import CONSTANT, MOVED_NEG, SCALAR
    x, y, s = UOp.param("facts_x", (2, 3)), UOp.param("facts_y", (2, 3)), UOp.param("facts_s", ())
    table = UOp.buffer(np.arange(6, dtype=np.float32).reshape(2, 3))
    cases = {  # a source of a CAST -> the facts its user's signature carries
        "a PARAM": (x, 0), "a shape-() PARAM": (s, SCALAR), "a CONST": (UOp.const(2.0), SCALAR | CONSTANT),
        "a broadcast CONST": (UOp.const(2.0).reshape(1, 1).expand(2, 3), SCALAR | CONSTANT),
        "a BUFFER": (table, CONSTANT), "a padded BUFFER": (table.pad(((1, 0), (0, 0))), CONSTANT),
        "a permuted BUFFER": (table.permute(1, 0), CONSTANT), "a moved NEG": ((-x).permute(1, 0), MOVED_NEG),
        "a padded NEG": ((-x).pad(((1, 0), (0, 0))), 0), "a NEG": (-x, 0), "a sum to ()": (x.sum(), SCALAR),
        "a broadcast sum": (x.sum().reshape(1, 1).expand(2, 3), SCALAR), "an ADD": (x + y, 0),
        "a scalar ADD": (s + s, SCALAR), "a permuted ADD": ((x + y).permute(1, 0), 0),
        "an EXP2 of a BUFFER": (table.exp2(), 0), "a reshaped PARAM": (x.reshape(3, 2), 0),
    }
    seen = {name: _facts_seen(source.cast(dtypes.int32)) for name, (source, _) in cases.items()}
    assert seen == {name: [(dtypes.int32, (facts,))] for name, (_, facts) in cases.items()}


@pytest.mark.parametrize("shape, scalar", [((2, 3), False), ((), True)])
def test_the_facts_of_a_source_a_row_made(shape, scalar):
    """SQRT(x) -> CAST(CAST(x)): the new inner CAST's signature is computed on the way to its
    fixpoint, and a shape-() source is SCALAR there too (and only there)."""
    from uopcli.core.pattern import UPat
    from uopcli.core.simplify.walk import SCALAR
    twice = (UPat(Ops.SQRT, src=(UPat.var("x"),)), lambda x: x.cast(dtypes.float64).cast(dtypes.float32))
    seen = _facts_seen(UOp.param(f"made_x{len(shape)}", shape).sqrt(), rows=[twice])
    assert (dtypes.float64, (SCALAR if scalar else 0,)) in seen and len(seen) == 2


def test_a_row_is_tried_only_where_its_test_and_its_flag_admit_it():
    """A row gated on a CONST source meets only the SIN of a CONST; a row admitted after a
    flag meets the node that raised it and the nodes after, not the one before."""
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.core.simplify.walk import only_when
    tried = []

    def note(node, ctx):
        if node.src[0].op == Ops.CONST:
            ctx["a constant was seen"] = True

    on_constants = only_when(lambda key: key[2] == Ops.CONST)(lambda node: tried.append(("constants", node)))
    flagged = only_when(lambda key: True, after="a constant was seen")(lambda node: tried.append(("flagged", node)))
    sin = UPat(Ops.SIN, name="node")
    x, y = UOp.param("gate_x", (3,)), UOp.param("gate_y", (3,))
    before, constant, after = x.sin(), UOp.const(123.25).sin(), y.sin()  # walked in this order (creation)
    Rewriter(PatternMatcher([(sin, note), (sin, on_constants), (sin, flagged)])).rewrite_roots([before, constant, after])
    assert {node for kind, node in tried if kind == "constants"} == {constant}
    assert {node for kind, node in tried if kind == "flagged"} == {constant, after}


def _odd_sin_table(tested: list, tried: list):
    """sin(-x) -> -sin(x) and -(-x) -> x, recording each signature tested and each SIN tried."""
    from uopcli.core.pattern import PatternMatcher, UPat
    from uopcli.core.simplify.walk import only_when

    @only_when(lambda key: tested.append(tuple(key)) or True)
    def odd(node):
        tried.append(node)
        inner = node.src[0]
        return -(inner.src[0].sin()) if inner.op == Ops.NEG else None

    def double_negation(node):
        return node.src[0].src[0] if node.src[0].op == Ops.NEG else None

    return PatternMatcher([(UPat(Ops.SIN, name="node"), odd), (UPat(Ops.NEG, name="node"), double_negation)])


def test_each_signature_is_tested_once_per_rewriter():
    """Four sin(-x) over two walks: SIN of a NEG (the walk's own nodes) and SIN of a PARAM
    (the sin(x) a row made) are each tested once; then their rows come from the cache."""
    tested = []
    rewriter = Rewriter(_odd_sin_table(tested, []))
    xs = [UOp.param(f"once_x{i}", (3,)) for i in range(4)]
    for pair in (xs[:2], xs[2:]):
        out = rewriter.rewrite_roots([(-x).sin() for x in pair])
        assert out == [-(x.sin()) for x in pair]
    assert len(tested) == 2 and set(tested) == {(Ops.SIN, dtypes.float32, Ops.NEG), (Ops.SIN, dtypes.float32, Ops.PARAM)}


def test_a_final_node_is_not_tried_again():
    """-(sin(-x)) -> -(-(sin x)) -> sin x: the sin(x) the first rewrite made is final when
    the second rewrite arrives at it, and is returned as it is, not tried again."""
    tried = []
    x = UOp.param("final_x", (3,))
    (out,) = Rewriter(_odd_sin_table([], tried)).rewrite_roots([-((-x).sin())])
    assert out is x.sin()
    assert tried == [(-x).sin(), x.sin()]


def test_a_rebuilt_final_node_is_not_tried_again():
    """sin(-(-x)) is rebuilt as sin(x), final as it is; the later sin(-x) -> -(sin x) makes
    a node over that very sin(x), which is known final, not tried again."""
    tried = []
    x = UOp.param("rebuilt_x", (3,))
    out = Rewriter(_odd_sin_table([], tried)).rewrite_roots([(-(-x)).sin(), -((-x).sin())])
    assert out == [x.sin(), x.sin()]
    assert tried == [x.sin(), (-x).sin()]


def test_a_row_is_matched_only_where_its_signature_cannot_tell():
    """A pattern that asks no more than the signature holds (ops, a CONST's value, names)
    binds without matching; a dtype on a source or a name bound twice needs the match; a
    pattern for every source is not matched on a node whose sources' ops it excludes."""
    from uopcli.core.pattern import PatternMatcher, UPat
    matched = []

    class Counting(UPat):
        __slots__ = ()

        def match(self, node, bindings):
            matched.append(node)
            return super().match(node, bindings)

    x, y = UOp.param("bound_x", (3,)), UOp.param("bound_y", (3,))
    patterns = {"direct": Counting(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", 0.0)), name="node"),
                "a source dtype": Counting(Ops.ADD, src=(UPat.var("x", dtypes.float32), UPat.cvar("c", 0.0)), name="node"),
                "a name twice": Counting(Ops.ADD, src=(UPat.var("x"), UPat.var("x")), name="node"),
                "every source a CONST": Counting(Ops.ADD, src=UPat(Ops.CONST), name="node")}
    roots = {"direct": x + 0.0, "a source dtype": x + 0.0, "a name twice": x + x, "every source a CONST": x + y}
    seen = {}
    for name, pattern in patterns.items():
        matched.clear()
        (out,) = Rewriter(PatternMatcher([(pattern, lambda node, **_: node.src[0])])).rewrite_roots([roots[name]])
        seen[name] = (list(matched), out)
    assert seen == {"direct": ([], x), "a source dtype": ([x + 0.0], x), "a name twice": ([x + x], x),
                    "every source a CONST": ([], x + y)}
