"""The one graph-substitution routine (uopcli/core/substitute.py): each of its options
changes what it reaches, and a million-node chain substitutes at the default recursion limit."""

import sys

from uopcli import Metadata, Ops, UOp
from uopcli.core.substitute import rebuilt, substitute
from uopcli.core.walks import no_gc


def _x(name: str) -> UOp:
    return UOp.param(f"substitute_{name}", (3,))


def test_users_are_rebuilt_and_untouched_parts_stay_the_same_objects():
    x, y, z = _x("a"), _x("b"), _x("c")
    side = z.exp2()
    root = x.sin() + side
    (out,) = substitute([root], {x: y})
    assert out is y.sin() + side
    assert out.src[1] is side
    assert substitute([root], {}) == [root]


def test_values_are_not_substituted_in_turn():
    x, y, z = _x("d"), _x("e"), _x("f")
    assert substitute([x.sin()], {x: y, y: z}) == [y.sin()]


def test_several_roots_share_one_walk():
    x, y = _x("g"), _x("h")
    a, b = x.sin(), x.sin().sqrt()
    assert substitute([a, b, x], {x: y}) == [y.sin(), y.sin().sqrt(), y]


def test_into_bodies_decides_whether_a_function_body_changes():
    x, y = _x("i"), _x("j")
    slot = UOp.slot(0, (3,))
    fn = UOp.function("f", [slot * 2.0], [x])
    mapping = {slot: slot.sin(), x: y}
    (kept,) = substitute([fn[0]], mapping, into_bodies=False)
    assert kept is UOp.function("f", [slot * 2.0], [y])[0]
    (entered,) = substitute([fn[0]], mapping, into_bodies=True)
    assert entered is UOp.function("f", [slot.sin() * 2.0], [y])[0]


def test_into_backward_decides_whether_a_call_backward_body_changes():
    x = _x("k")
    call = UOp.trace_call("c", lambda a: a * 2.0, lambda a, g: g * 2.0, x)
    grad_slot = UOp.slot(1, (3,))
    mapping = {grad_slot: grad_slot.sin()}
    assert substitute([call[0]], mapping, into_backward=False) == [call[0]]
    (out,) = substitute([call[0]], mapping, into_backward=True)
    assert out.src[0].op == Ops.CALL and out.src[0].src == call.src
    assert out.src[0].arg.name == "c"
    assert out.src[0].arg.grad is UOp.tuple(grad_slot.sin() * 2.0)


def test_keep_meta_gives_a_rebuilt_node_the_metadata_of_the_node_it_rebuilds():
    x, y, z = _x("l"), _x("m"), _x("n")
    tag = Metadata("mine", "here.py:1")
    tagged = x.sin().set_meta(tag)
    (with_meta,) = substitute([tagged], {x: y}, keep_meta=True)
    assert with_meta is y.sin() and with_meta.meta == tag
    (without,) = substitute([tagged], {x: z}, keep_meta=False)
    assert without is z.sin() and without.meta is None


def test_rebuilt_keeps_a_tag_the_node_already_has():
    x, y = _x("o"), _x("p")
    first = Metadata("first")
    y.sin().set_meta(first)
    out = rebuilt(x.sin().set_meta(Metadata("second")), (y,))
    assert out is y.sin() and out.meta == first


def test_a_million_node_chain_substitutes_at_the_default_recursion_limit():
    limit = sys.getrecursionlimit()
    base, other = _x("q"), _x("r")
    with no_gc():
        node = base
        for _ in range(1_000_000):
            node = node.sin()
        (out,) = substitute([node], {base: other})
    assert sys.getrecursionlimit() == limit
    depth = 0
    while out.op == Ops.SIN:
        out, depth = out.src[0], depth + 1
    assert depth == 1_000_000 and out is other


# ----------------------------------------------------------------------------- the callers' options

def test_the_gradients_closed_bodies_leave_a_nested_body_alone():
    """Renumbering the slots a backward body reads (slot 1 to 0) must not reach a nested
    function's body: its slot 1 is its own (the same interned node, another scope)."""
    from uopcli.core.gradient import _closed_body
    s0, s1 = UOp.slot(0, (3,)), UOp.slot(1, (3,))
    inner = UOp.function("inner", [s1 * 2.0], [s1, s1])
    (out,), slots = _closed_body([s1 + inner[0]])
    assert slots == [s1]
    assert out is s0 + UOp.function("inner", [s1 * 2.0], [s0, s0])[0]


def test_check_freezes_a_detach_in_a_backward_body_too():
    """freeze_detached swaps a DETACH for a BUFFER of its value wherever that node appears,
    a CALL's backward body included."""
    import numpy as np

    from uopcli.tools.check import freeze_detached
    x = _x("s")
    frozen = UOp.buffer(np.arange(3, dtype=np.float32)).detach()
    call = UOp.trace_call("c", lambda a: a * frozen, lambda a, g: g * frozen, x)
    (out,) = freeze_detached([call[0].sum() + frozen.sum()], {})
    assert not [n for n in out.toposort() if n.op == Ops.DETACH]
