"""Hash-consing when threads build graphs at once (a notebook's thread pool, Dask's threaded
workers): the same structure made in several threads is one node, and sweeps of the intern
table that meet other threads' look-ups neither crash nor split a node in two. Before the
intern table entered nodes with setdefault, two threads making UOp.param("w") at once could
both miss the table and each keep their own: a gradient with respect to one of them was
silently zero in a graph built on the other."""

import gc
import sys
import threading

import numpy as np

from uopcli import UOp, compute_gradient, dtypes, evaluate
from uopcli.core.uop import live_node_count, sweep_intern_table

THREADS = 4


def _in_threads(work, rounds: int) -> list:
    """work(thread, round) in THREADS threads at once, switching as often as CPython allows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        results = []
        for round_ in range(rounds):
            start = threading.Barrier(THREADS)
            out = [None] * THREADS

            def run(k):
                start.wait()
                out[k] = work(k, round_)
            threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results.append(out)
        return results
    finally:
        sys.setswitchinterval(interval)


def test_threads_making_the_same_nodes_get_one_node_each():
    def make(k, round_):
        made = []
        for i in range(400):
            w = UOp.param(f"w{round_}_{i}", (3,), dtypes.float64)
            made.append((w, (w * 2.0).sin(), UOp.const(0.25 + i, dtypes.float64)))
        return made
    for per_thread in _in_threads(make, rounds=12):
        for nodes in zip(*per_thread):  # the i-th nodes of every thread: one node each
            for made in zip(*nodes):
                assert all(node is made[0] for node in made)


def test_a_gradient_built_beside_other_threads_is_right():
    def train_step(k, round_):
        wrong = 0
        for i in range(150):
            w = UOp.param(f"v{round_}_{i % 7}", (3,), dtypes.float64)
            loss = ((w * 2.0) ** 2).sum()
            again = UOp.param(f"v{round_}_{i % 7}", (3,), dtypes.float64)
            grad = compute_gradient(loss, loss.const_like(1.0), [again])[again]
            wrong += not np.array_equal(evaluate([grad], {w: np.ones(3)})[0], [8.0, 8.0, 8.0])
        return wrong
    was = gc.isenabled()
    assert all(wrong == 0 for out in _in_threads(train_step, rounds=4) for wrong in out)
    assert gc.isenabled() == was  # each walk pauses the collector: the last one out restores it


def test_sweeps_in_several_threads_at_once_keep_every_live_node():
    keep = [UOp.param("kept", (2,), dtypes.float32).exp2()]

    def churn(k, round_):
        for i in range(12):
            garbage = [(UOp.param(f"tmp{k}_{i}_{j}", (2,)) + float(j)).sqrt() for j in range(400)]
            del garbage
            sweep_intern_table()  # four sweeps at once, over each other's garbage
        return UOp.param("kept", (2,), dtypes.float32).exp2()
    for out in _in_threads(churn, rounds=2):
        assert all(node is keep[0] for node in out)
    sweep_intern_table()
    assert UOp.param("kept", (2,), dtypes.float32).exp2() is keep[0]
    assert live_node_count() > 0


def test_a_node_found_while_the_sweep_drops_it_stays_in_the_table(monkeypatch):
    """Another thread's look-up between the sweep's count and the node's removal (made here
    by the removal itself looking the node up first): the node goes back into the table, so
    that making it again gives that node, not a twin."""
    import uopcli.core.uop as uop
    name = "found_during_the_sweep"
    UOp.param(name, (5,)).exp2()  # garbage: nothing holds it
    held = []
    forget = uop._forget

    def looked_up_just_before(node):
        if node.op == "PARAM" and node.arg == name and not held:
            held.append(UOp.param(name, (5,)))  # another thread's look-up finds it
        forget(node)
    monkeypatch.setattr(uop, "_forget", looked_up_just_before)
    sweep_intern_table()
    monkeypatch.setattr(uop, "_forget", forget)
    assert held, "the sweep did not reach the node"
    assert UOp.param(name, (5,)) is held[0]
    assert held[0].exp2() is held[0].exp2()
