"""The reference evaluator (uopcli.backends.reference) against the numpy evaluator, and
`check`'s use of it: the finite differences come from the reference, so a fast-path bug in
the numpy evaluator fails a check instead of cancelling out."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from uopcli import Graph, Ops, UOp, dtypes, save
from uopcli.backends.reference import reference_evaluate, reference_evaluate_graph
from uopcli.tools.check import check_gradients
from uopcli.cli import main
from uopcli.backends.numpy import evaluate_graph
from uopcli.tools.values import random_value

from fileformat_cases import CASES


# the numpy evaluator's compiled op table and its in-place ufuncs
COMPILER = importlib.import_module("uopcli.backends.numpy.compiler")
TABLE = importlib.import_module("uopcli.backends.numpy.table")
# Floats may differ by rounding where the numpy evaluator contracts a product with BLAS
# (a matmul's sums in another order); everything else is bit for bit.
ROUNDING = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-14}


def _same(a, b) -> bool:
    """Equal values: ints and bools exactly, floats within a sum's reordering (nan where
    nan, infinities equal), tuples elementwise."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return a.tobytes() == b.tobytes()
    return bool(np.allclose(a, b, rtol=ROUNDING[a.dtype.type], atol=0, equal_nan=True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_two_evaluators_agree_bit_for_bit_on_every_op_and_dtype(case):
    graph = CASES[case]()
    inputs = {n.arg: random_value(n, seed=3) for n in graph.inputs}
    fast = evaluate_graph(graph, inputs)
    reference = reference_evaluate_graph(graph, inputs)
    assert list(fast) == list(reference)
    for name in fast:
        assert _same(fast[name], reference[name]), (case, name, fast[name], reference[name])


def test_integer_edges_follow_the_evaluators_decisions():
    i, j = UOp.param("ri", (6,), dtypes.int32), UOp.param("rj", (6,), dtypes.int32)
    graph = Graph({op.lower(): UOp.make(op, dtypes.int32, (i, j)) for op in (Ops.CDIV, Ops.CMOD, Ops.POW, Ops.FDIV)})
    a = np.array([7, -7, 7, -7, 5, np.iinfo(np.int32).min], np.int32)
    b = np.array([2, 2, -2, 0, -1, -1], np.int32)
    got = reference_evaluate_graph(graph, {"ri": a, "rj": b})
    assert got["cdiv"].tolist() == [3, -3, -3, 0, -5, np.iinfo(np.int32).min]  # toward zero; by zero 0; wraps
    assert got["cmod"].tolist() == [1, -1, 1, 0, 0, 0]                          # the dividend's sign
    assert got["fdiv"].tolist() == got["cdiv"].tolist()                          # integer FDIV is C division
    assert got["pow"].tolist() == [49, 49, 0, 1, 0, 0]                           # b < 0: 1/a^|b| truncated
    fast = evaluate_graph(graph, {"ri": a, "rj": b})
    assert all(_same(fast[k], got[k]) for k in got)


def test_reference_values_are_fresh_arrays_never_views_of_the_inputs():
    x = UOp.param("fx", (3, 4))
    y = x.permute((1, 0)).shrink(((0, 2), (0, 3))).reshape((6,))
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    out, = reference_evaluate([y], {"fx": value})
    assert out.flags.c_contiguous and out.flags.owndata and not np.shares_memory(out, value)
    assert out.tolist() == [0, 4, 8, 1, 5, 9]


def test_reference_refuses_a_missing_or_misfit_input():
    x = UOp.param("mx", (2,))
    with pytest.raises(Exception, match="no value for input 'mx'"):
        reference_evaluate([x.sin()], {})
    with pytest.raises(Exception, match="reference evaluator: input 'mx': expected float32\\[2\\], got float64\\[3\\]"):
        reference_evaluate([x.sin()], {"mx": np.zeros(3)})


def _sine_loss() -> Graph:
    x = UOp.param("sx", (5,))
    return Graph({"loss": x.sin().sum()})


def test_check_catches_a_numpy_evaluator_bug_that_would_cancel_out(monkeypatch):
    """SIN computed twice too large by the fast evaluator: its gradient graph (cos, built
    from SIN) is then 2cos, and finite differences of the same wrong evaluator would give
    2cos too. With the reference computing the finite differences, the check fails."""
    graph = _sine_loss()
    assert check_gradients(graph, ["sx"]).passed

    def doubled_sine(x, out=None):
        result = np.sin(x, out=out)
        result *= 2
        return result

    # both of the numpy evaluator's ways to run SIN: its compiled op table (a fresh array),
    # and the ufunc it writes into a dying source
    walk_kind, _, memory_kind = COMPILER._OP_INFO[Ops.SIN]
    monkeypatch.setitem(COMPILER._OP_INFO, Ops.SIN, (walk_kind, lambda node, x: doubled_sine(x), memory_kind))
    monkeypatch.setitem(TABLE.UFUNC_INTO, Ops.SIN, doubled_sine)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    assert np.allclose(evaluate_graph(graph, {"sx": x})["loss"], 2 * np.sin(x).sum())  # the bug bites
    report = check_gradients(graph, ["sx"])
    assert not report.passed
    target, = report.targets
    assert target.max_rel_error > 0.4  # 2cos against cos


def test_check_report_names_both_evaluators(tmp_path):
    path = tmp_path / "sine.uop"
    path.write_bytes(save(_sine_loss()))
    runner = CliRunner()
    text = runner.invoke(main, ["check", str(path), "--wrt", "sx"])
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[-2] == ("evaluators: analytic by the numpy evaluator on the gradient graph "
                                            "simplified as tinygrad runs it (--literal: as written), finite "
                                            "differences by the reference evaluator (op by op)")
    as_json = runner.invoke(main, ["check", str(path), "--wrt", "sx", "--json"])
    assert json.loads(as_json.output)["evaluators"] == {"analytic": "numpy", "numeric": "reference"}
