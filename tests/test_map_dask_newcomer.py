"""`eval --map --dask` and `map_graph(dask=...)` where a newcomer's set-up differs from the
happy path: a program with threads of its own, a worker without uopcli, a scheduler that
dies, a malformed address, Python callers' errors. Real schedulers and workers, each test
stopping what it starts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from _map_helpers import BIN, session_processes

distributed = pytest.importorskip("distributed", reason="dask and distributed (the extra uopgrad[dask]) are not "
                                  "installed: make test installs them")
DASK = shutil.which("dask", path=BIN) or shutil.which("dask")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(script: str, cwd, timeout: float = 60) -> subprocess.CompletedProcess:
    """`script` run as a user's program (not under pytest), with this checkout's uopcli."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    (cwd / "prog.py").write_text(textwrap.dedent(script))
    process = subprocess.Popen([sys.executable, "prog.py"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    finally:  # a hung run's workers too
        if session_processes(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="without fork, local workers are always spawned")
def test_local_workers_start_beside_a_thread_inside_a_matrix_product(tmp_path):
    """A program whose other thread runs numpy products (OpenBLAS) while map_graph starts
    `local:2`: forked workers hung the start, or froze that thread for good (3 of 3 runs).
    From a fork server they start, the sums are the sequential run's bits, the thread goes
    on, and the script (no `if __name__ == "__main__"` guard) runs once."""
    done = _python("""
        import threading, time
                from uopcli import UOp, Graph, dtypes, differentiate
        from uopcli.tools.map import map_graph
        print("script started", flush=True)
        x = UOp.param("x", (16, 8), dtypes.float32); w = UOp.param("w", (8, 4), dtypes.float32)
        g, _ = differentiate(Graph({"l": ((x @ w) ** 2).sum()}, inputs=[x, w]), ["w"])
        rng = np.random.default_rng(3)
        paths = [f"s{i}.npz" for i in range(4)]
        for p in paths: np.savez(p, x=rng.standard_normal((16, 8)).astype(np.float32))
        fixed = {"w": rng.standard_normal((8, 4)).astype(np.float32)}
        stop, count = False, [0]
        def busy():
            a = rng.standard_normal((300, 300))
            while not stop:
                a @ a; count[0] += 1
        threading.Thread(target=busy, daemon=True).start()
        while not count[0]: time.sleep(0.01)
        local = map_graph(g, paths, fixed, dask="local:2").outputs["grad_w"]
        before = count[0]; time.sleep(0.5)
        print("thread ran on:", count[0] > before)
        stop = True
        print("same bits:", local.tobytes() == map_graph(g, paths, fixed).outputs["grad_w"].tobytes())
    """, tmp_path, timeout=40)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["script started", "thread ran on: True", "same bits: True"], done.stdout
