"""linearize's tangent inputs and transpose's refusals, as a Python caller meets them
(core/forward.py). A PARAM is its name, shape and dtype (hash-consed): a tangent input
named as a node the graph already has would be that node, and transpose would count the
direction twice (J^T u doubled). Values against torch.func (vjp, jvp) in float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0 where it can)")

from uopcli import GradientError, UOp, dtypes  # noqa: E402
from uopcli.backends.numpy import evaluate  # noqa: E402
from uopcli.core.forward import compute_jvp, jvp, linearize, transpose  # noqa: E402
from uopcli.core.graph import Graph  # noqa: E402
from uopcli.core.walks import toposort  # noqa: E402
from uopcli.tools.names import fresh  # noqa: E402

f64 = dtypes.float64
C = np.array([1.0, 2.0, 3.0])


def _torch_vjp_jvp(f, primals, u, v):
    """(J^T u, J v) of f at primals, by torch.func in float64."""
    ps = tuple(torch.tensor(p, dtype=torch.float64) for p in primals)
    _, pullback = torch.func.vjp(f, *ps)
    back = pullback(torch.tensor(u, dtype=torch.float64))
    _, forward = torch.func.jvp(f, ps, tuple(torch.tensor(t, dtype=torch.float64) for t in v))
    return [b.numpy() for b in back], forward.numpy()


def _graph_params(roots):
    return {n.arg for n in toposort(roots) if n.op == "PARAM" and isinstance(n.arg, str)}


def test_an_input_named_like_the_tangent_is_not_the_tangent():
    """sum(x * c) with c named tangent_x: J^T u = u c = [1, 2, 3] (it was [2, 4, 6]: the
    "new" input was c itself), J e0 = c[0] = 1 (it was 14: v could not be given apart)."""
    x, c = UOp.param("x", (3,), f64), UOp.param("tangent_x", (3,), f64)
    y = (x * c).sum()
    lin = linearize(y, x)
    (t,) = lin.tangent_inputs
    assert t is not c and t is not x and t.arg == "tangent2_x" and (t.shape, t.dtype) == ((3,), f64)
    assert t.arg not in _graph_params([y])
    u = UOp.param("u", (), f64)
    (back,) = transpose(lin, u)
    x0, v = np.array([0.5, -1.0, 4.0]), np.array([1.0, 0.0, 0.0])
    feed = {"x": x0, "tangent_x": C, "u": np.float64(1.0), "tangent2_x": v}
    jtu, jv = evaluate([back, lin.tangent_outputs[0]], feed)
    (want_jtu,), want_jv = _torch_vjp_jvp(lambda xs: (xs * torch.tensor(C)).sum(), [x0], 1.0, [v])
    np.testing.assert_array_equal(jtu, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(jtu, want_jtu)
    assert jv == 1.0 == want_jv
    # the linear graph and the forward graph sit in one Graph: no two inputs of one name
    graph = Graph({"y": y, "Jv": lin.tangent_outputs[0], "JTu": back})
    assert sorted(graph.input_names) == ["tangent2_x", "tangent_x", "u", "x"]


def test_two_targets_whose_tangent_names_meet_get_two_inputs():
    """An unnamed target in position 0 and an input named "0" both name tangent_0: the
    second is numbered, and J^T u of f(h, z) = sum(h z) is (u z, u h) as torch gives it."""
    a, zero = UOp.param("a", (3,), f64), UOp.param("0", (3,), f64)
    h = a * 2.0
    lin = linearize((h * zero).sum(), [h, zero])
    first, second = lin.tangent_inputs
    assert first is not second and [first.arg, second.arg] == ["tangent_0", "tangent2_0"]
    a0, z0, u = np.array([0.5, -1.5, 2.0]), np.array([3.0, 0.25, -1.0]), 1.5
    dh, dz = np.array([1.0, -2.0, 0.5]), np.array([0.0, 4.0, -3.0])
    feed = {"a": a0, "0": z0, "u": np.float64(u), "tangent_0": dh, "tangent2_0": dz}
    got = evaluate([*transpose(lin, UOp.param("u", (), f64)), lin.tangent_outputs[0]], feed)
    (want_h, want_z), want_jv = _torch_vjp_jvp(lambda hs, zs: (hs * zs).sum(), [2 * a0, z0], u, [dh, dz])
    np.testing.assert_allclose(got[0], want_h, rtol=1e-15)
    np.testing.assert_allclose(got[1], want_z, rtol=1e-15)
    np.testing.assert_allclose(got[2], want_jv, rtol=1e-15)


def test_a_tangent_input_is_never_a_target_nor_a_param_of_another_shape():
    """Targets x and tangent_x (tangent_x unused by the root): x's tangent is not the target
    tangent_x; an input tangent_w of another shape takes the name too (one Graph of both
    would have two inputs tangent_w)."""
    x, tx = UOp.param("x", (3,), f64), UOp.param("tangent_x", (3,), f64)
    w, other = UOp.param("w", (2,), f64), UOp.param("tangent_w", (5,), f64)
    y = (x * x).sum() + (w * other.sum()).sum()
    lin = linearize(y, [x, tx, w])
    assert [t.arg for t in lin.tangent_inputs] == ["tangent2_x", "tangent_tangent_x", "tangent2_w"]
    assert not set(lin.tangent_inputs) & {x, tx, w, other}
    x0, w0, o0 = np.array([1.0, -2.0, 0.5]), np.array([3.0, -1.0]), np.arange(5.0)
    back = transpose(lin, UOp.param("u", (), f64))
    got = evaluate(back, {"x": x0, "w": w0, "tangent_w": o0, "u": np.float64(2.0)})
    np.testing.assert_array_equal(got[0], 2.0 * 2 * x0)       # u d/dx sum(x^2) = 2 u x
    np.testing.assert_array_equal(got[1], np.zeros(3))        # y does not depend on the target tangent_x
    np.testing.assert_array_equal(got[2], 2.0 * np.full(2, o0.sum()))


def test_numbering_is_the_graph_level_tools_rule():
    x = UOp.param("x", (), f64)
    taken = {"tangent_x", "tangent2_x"}
    y = x * UOp.param("tangent_x", (), f64) * UOp.param("tangent2_x", (), f64)
    assert linearize(y, x).tangent_inputs[0].arg == fresh("tangent", "x", set(taken)) == "tangent3_x"
    s0 = UOp.slot(0, (), f64)
    assert [t.arg for t in linearize(s0 * UOp.param("t0", (), f64), s0, prefix="t").tangent_inputs] == ["t2_0"]


def test_a_target_given_twice_is_refused():
    """Two tangent inputs for one node: the walk would read only the last, and J v would
    silently leave out the first direction."""
    x = UOp.param("x", (3,), f64)
    with pytest.raises(GradientError, match=r"^linearize: target 1 is target 0 again: <UOp PARAM float64\[3\] 'x'"):
        linearize(x.sum(), [x, x])


# ----------------------------------------------------------------------------- transpose's refusals

def test_transpose_names_the_cotangent_and_its_tangent_output():
    x = UOp.param("x", (3,), f64)
    lin = linearize(x * x, x)
    with pytest.raises(GradientError, match=r"^transpose: cotangent 0 is float64\[\], but tangent output 0 "
                                            r"\(of root 0, <UOp MUL float64\[3\] .*\) is float64\[3\]: a cotangent "
                                            r"has its tangent output's shape and dtype$") as caught:
        transpose(lin, UOp.const(1.0, f64))
    assert "root_grad" not in str(caught.value)
    with pytest.raises(GradientError, match=r"^transpose: cotangent 0 is float32\[3\], but tangent output 0 .* "
                                            r"is float64\[3\]"):
        transpose(lin, UOp.param("u", (3,), dtypes.float32))
    two = linearize([x.sin(), x.sum()], x)
    with pytest.raises(GradientError, match=r"^transpose: cotangent 1 is float64\[3\], but tangent output 1 "
                                            r"\(of root 1, .*\) is float64\[\]"):
        transpose(two, [UOp.param("u", (3,), f64), UOp.param("v", (3,), f64)])


def test_transpose_takes_no_cotangent_of_one_of_several_outputs_as_zero():
    """A NOOP among several cotangents is a zero one (compute_gradient's TUPLE seed)."""
    x = UOp.param("x", (3,), f64)
    lin = linearize([x.sin(), x.sum()], x)
    (back,) = transpose(lin, [UOp.noop(), UOp.param("v", (), f64)])
    np.testing.assert_array_equal(evaluate([back], {"x": C, "v": np.float64(2.5)})[0], np.full(3, 2.5))


@pytest.mark.parametrize("call, message", [
    (lambda lin, x: transpose(lin, 1.0), r"^transpose: cotangents are nodes \(UOp\), one or a list; got float 1.0$"),
    (lambda lin, x: transpose(lin, np.ones(())), r"^transpose: cotangents are nodes .*; got ndarray array\(1.\)$"),
    (lambda lin, x: transpose(lin, "u"), r"^transpose: cotangents are nodes .*; got str 'u'$"),
    (lambda lin, x: transpose(lin, [np.ones(3)]), r"^transpose: cotangents are nodes .*; item 0 is ndarray"),
    (lambda lin, x: transpose(tuple(lin), x), r"^transpose takes what linearize returns \(a Linearized\), got tuple"),
    (lambda lin, x: linearize(x.sum(), "x"), r"^linearize: targets are nodes \(UOp\), one or a list; got str 'x'$"),
    (lambda lin, x: linearize("y", x), r"^linearize: roots are nodes .*; got str 'y'$"),
    (lambda lin, x: linearize(x.sum(), UOp.noop()), r"^linearize: target 0 is <UOp NOOP void src=0>, not a value$"),
    (lambda lin, x: jvp(x.sum(), [x]), r"^tangents are a mapping \{node: its tangent\}, got list"),
    (lambda lin, x: compute_jvp(x.sum(), {x: UOp.param("t", (3,), f64)}, batch=2),
     r"does not fit float64\[2, 3\] of .* \(batch=2: a leading axis of 2 directions\)$"),
])
def test_a_wrong_argument_is_one_line_in_the_callers_terms(call, message):
    x = UOp.param("x", (3,), f64)
    with pytest.raises(GradientError, match=message):
        call(linearize(x * x, x), x)
