"""`eval --map --dask` and `map_graph(dask=...)` where a newcomer's set-up differs from the
happy path: a program with threads of its own, a worker without uopcli, a scheduler that
dies, a malformed address, Python callers' errors. Real schedulers and workers, each test
stopping what it starts."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from uopcli import Graph, UOp, dtypes
from uopcli.formats.uop import save
from uopcli.tools.differentiate import differentiate

from _map_helpers import BIN, UOPGRAD, session_processes

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
        import numpy as np
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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="without fork, local workers are always spawned")
def test_local_workers_are_forked_only_from_a_process_without_other_threads(tmp_path):
    """The CLI (one thread) forks, fast; a program with a thread of its own uses the fork server."""
    done = _python("""
        import threading
        from uopcli.tools.map_dask import _start_method
        print(_start_method())
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        print(_start_method())
    """, tmp_path)
    assert done.stdout.split() == ["fork", "forkserver"], done.stderr


@pytest.fixture
def scheduler():
    """A scheduler in this process (no worker of its own) on a free port of 127.0.0.1."""
    import logging
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None,
                                  silence_logs=logging.CRITICAL) as cluster:
        yield cluster


def _worker(address: str, directory, env: dict) -> subprocess.Popen:
    return subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                             "--local-directory", str(directory)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if session_processes(process.pid):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _small_run(tmp_path) -> list:
    """A gradient and two shards in tmp_path; the uopgrad arguments that map it."""
    rng = np.random.default_rng(4)
    for i in range(2):
        np.savez(tmp_path / f"s{i}.npz", x=rng.standard_normal((4, 3)).astype(np.float32))
    np.save(tmp_path / "w.npy", rng.standard_normal(3).astype(np.float32))
    x, w = UOp.param("x", (4, 3), dtypes.float32), UOp.param("w", (3,), dtypes.float32)
    save(differentiate(Graph({"loss": (x @ w).sum()}, inputs=[x, w]), ["w"])[0], str(tmp_path / "g.uop"))
    return ["eval", "g.uop", "--map", "s*.npz", "-i", "w=w.npy"]


@pytest.mark.skipif(DASK is None or UOPGRAD is None, reason="the dask or uopgrad console script is not installed")
def test_a_worker_without_uopcli_is_refused_at_once_by_name(scheduler, tmp_path):
    """A `dask worker` on a machine without uopgrad (here: a uopcli that fails to import)
    cannot unpickle a shard's task: the run waited forever. Now one line naming the worker
    and the fix, before any task is sent."""
    fake = tmp_path / "fake" / "uopcli"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("no uopgrad on this machine")\n')
    worker = _worker(scheduler.scheduler_address, tmp_path / "w",
                     {**os.environ, "PYTHONPATH": str(tmp_path / "fake")})
    try:
        with distributed.Client(scheduler) as client:
            client.wait_for_workers(1, timeout=60)
            address = next(iter(client.scheduler_info()["workers"]))
        args = _small_run(tmp_path)
        done = subprocess.run([UOPGRAD, *args, "--dask", scheduler.scheduler_address, "-o", "out.npz"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=30)  # was: forever
    finally:
        _stop(worker)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"uopgrad: error: the Dask worker {address} cannot import uopcli (ImportError: no uopgrad on this machine): "
        "install uopgrad where each worker runs (pip install 'uopgrad[dask]', the version this run uses) and restart "
        "it"], done.stderr
    assert not (tmp_path / "out.npz").exists()


def _many_shards(directory, count: int) -> None:
    """`count` shards in directory/many: links to the two of _small_run (a run that lasts)."""
    (directory / "many").mkdir()
    for i in range(count):
        os.symlink(directory / f"s{i % 2}.npz", directory / "many" / f"p{i:05d}.npz")


@pytest.mark.skipif(DASK is None or UOPGRAD is None, reason="the dask or uopgrad console script is not installed")
def test_a_scheduler_killed_mid_run_is_one_line_naming_it(tmp_path):
    """kill -9 of the scheduler while the shards run: distributed logged a 35-line traceback
    and the error blamed a shard ('p0113.npz: the Dask task failed: FutureCancelledError')."""
    args = _small_run(tmp_path)
    _many_shards(tmp_path, 3000)
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(tmp_path / "scheduler.json")], cwd=tmp_path,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    worker = run = None
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "scheduler.json").exists() or not (tmp_path / "scheduler.json").read_text():
            assert time.monotonic() < deadline and scheduler.poll() is None
            time.sleep(0.05)
        import json
        address = json.loads((tmp_path / "scheduler.json").read_text())["address"]
        worker = _worker(address, tmp_path / "w", dict(os.environ))
        run = subprocess.Popen([UOPGRAD, *args[:3], "many/*.npz", *args[4:], "--dask", address, "-o", "out.npz"],
                               cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        with distributed.Client(address, timeout=30) as client:
            while not any(str(key).startswith("uopgrad-shard") for keys in client.processing().values()
                          for key in keys):  # the shards are running
                assert time.monotonic() < deadline and run.poll() is None, run.communicate()
                time.sleep(0.05)
            os.kill(scheduler.pid, signal.SIGKILL)
            _, err = run.communicate(timeout=60)
    finally:
        for process in (run, worker, scheduler):
            if process is not None:
                _stop(process)
    assert run.returncode == 1 and err.splitlines() == [
        f"uopgrad: error: the Dask scheduler at {address} went away during the run (the connection to it was lost): "
        "nothing was written"], err
    assert not (tmp_path / "out.npz").exists()


def _a_long_local_run(tmp_path) -> subprocess.Popen:
    """uopgrad mapping 3,000 shards on `--dask local:2` (--reduce none -o stopped), in a
    session of its own, once it has written its first output."""
    args = _small_run(tmp_path)
    _many_shards(tmp_path, 3000)
    run = subprocess.Popen([UOPGRAD, *args[:3], "many/*.npz", *args[4:], "--dask", "local:2", "--reduce", "none",
                            "-o", "stopped"], cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not any(os.listdir(d) for d in glob.glob(str(tmp_path / ".stopped.*.tmp"))):
        if run.poll() is not None or time.monotonic() > deadline:
            _stop(run)
            pytest.fail(f"no output within 60 s: {run.communicate()}")
        time.sleep(0.01)
    return run


@pytest.mark.skipif(not hasattr(os, "fork") or UOPGRAD is None, reason="local workers are forked by the CLI only "
                    "where fork exists; the uopgrad console script")
def test_ctrl_c_to_the_process_group_of_a_local_cluster_run_is_one_line(tmp_path):
    """A terminal's ^C reaches uopgrad and its forked workers: each worker printed a
    KeyboardInterrupt traceback (68 lines for two). The workers ignore it; uopgrad stops
    them and says `interrupted`, with nothing written and nothing left running."""
    _ctrl_c_is_one_line(_a_long_local_run(tmp_path), tmp_path)


def _ctrl_c_is_one_line(run: subprocess.Popen, tmp_path) -> None:
    """^C to the run's process group: one line, exit status 1, nothing written."""
    try:
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        _stop(run)
    assert run.returncode == 1 and [line for line in err.splitlines() if line] == ["uopgrad: error: interrupted"], err
    assert not glob.glob(str(tmp_path / "*stopped*")) and not glob.glob(str(tmp_path / ".stopped*"))


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("after", [0.3, 1.0])
def test_ctrl_c_while_a_local_cluster_starts_is_one_line(tmp_path, after):
    """^C to the process group while `local:2` starts its scheduler and workers (held back
    until they have started, then raised: uopgrad stops them): one line, exit status 1,
    nothing written, nothing of its session left."""
    args = _small_run(tmp_path)
    _many_shards(tmp_path, 300)
    run = subprocess.Popen([UOPGRAD, *args[:3], "many/*.npz", *args[4:], "--dask", "local:2", "--reduce", "none",
                            "-o", "stopped"], cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(after)
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while session_processes(run.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = session_processes(run.pid)
    finally:
        _stop(run)
    assert run.returncode == 1 and [line for line in err.splitlines() if line] == ["uopgrad: error: interrupted"], err
    assert not glob.glob(str(tmp_path / "*stopped*")) and not glob.glob(str(tmp_path / ".stopped*"))
    assert left == [], f"still running after the run ended: {left}"


def _workers_ignoring_ctrl_c(pid: int, besides: list[int]) -> list[int]:
    """The Dask workers among `pid`'s children, but `besides`, that ignore SIGINT."""
    found = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline") as f:
                command = f.read()
            with open(f"/proc/{child}/status") as f:
                ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
        except OSError:
            continue
        if child not in besides and "resource_tracker" not in command and ignored & (1 << (signal.SIGINT - 1)):
            found.append(child)
    return found


@pytest.mark.skipif(not hasattr(os, "fork") or UOPGRAD is None, reason="local workers are forked by the CLI only "
                    "where fork exists; the uopgrad console script")
def test_ctrl_c_after_a_local_worker_was_started_again_is_one_line(tmp_path):
    """A local worker that dies is started again by its nanny (spawned: a fresh interpreter,
    whose ^C raises KeyboardInterrupt), and it printed a traceback of its own on the
    terminal's ^C: the set-up of the first workers reached only them. Every worker, started
    again or not, is now set up to ignore ^C. (Not covered: a ^C in the second or so a
    worker started again takes to start, before it is set up.)"""
    run = _a_long_local_run(tmp_path)
    try:
        deadline = time.monotonic() + 60
        first = _children(run.pid)
        assert len(first) == 2, first
        os.kill(first[0], signal.SIGKILL)
        while not _workers_ignoring_ctrl_c(run.pid, besides=first):  # its nanny starts another, set up
            assert run.poll() is None and time.monotonic() < deadline, "no worker started again ignores ^C"
            time.sleep(0.05)
    except BaseException:
        _stop(run)
        raise
    _ctrl_c_is_one_line(run, tmp_path)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("address, why", [
    ("http://127.0.0.1:8786", "a scheduler's address is tcp://HOST:PORT (tcp, tls, ws, wss, ucx), not http://"),
    ("127.0.0.1", "a scheduler's address is tcp://HOST:PORT, the port too (8786 unless the scheduler was told "
                  "otherwise), or local:N"),
    ("inproc://x", "a scheduler's address is tcp://HOST:PORT (tcp, tls, ws, wss, ucx), not inproc:// (inproc:// is a "
                   "scheduler inside one process: pass its distributed.Client)"),  # was: not enough values to unpack
    ("tcp://127.0.0.1:99999", "port 99999 is not one (1 to 65535)"),          # was: a 30 s wait, then "Timed out"
    ("tcp://127.0.0.1:0", "port 0 is not one (1 to 65535)"),
])
def test_a_malformed_address_is_a_usage_error_at_once(tmp_path, address, why):
    """Exit 2 (as `--dask local:0`), before dask is imported or anything read: was exit 1."""
    done = subprocess.run([UOPGRAD, "eval", "g.uop", "--map", "s*.npz", "--dask", address], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"uopgrad: error: --dask {address}: {why} (see 'uopgrad eval --help')"], done.stderr


def test_a_malformed_address_from_python_names_dask_not_the_flag(tmp_path):
    from uopcli.tools.map import map_graph
    from uopcli.tools.map_dask import ClusterError
    _small_run(tmp_path)
    from uopcli.formats.uop import load
    with pytest.raises(ClusterError) as caught:
        map_graph(load(str(tmp_path / "g.uop")), [str(tmp_path / "s0.npz")], {"w": np.load(tmp_path / "w.npy")},
                  dask="127.0.0.1")
    assert str(caught.value).startswith("dask='127.0.0.1': a scheduler's address is tcp://HOST:PORT, the port too")


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_a_refused_port_says_nothing_listens_there(tmp_path):
    """distributed retries a refused connection until its connect timeout, then said "no
    answer ... 8787 is its dashboard", as for a silent port."""
    import socket
    with socket.socket() as probe:  # a free port no scheduler listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = _small_run(tmp_path)
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"}
    done = subprocess.run([UOPGRAD, *args, "--dask", f"tcp://127.0.0.1:{port}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"uopgrad: error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}: nothing listens on port {port} "
        f"of 127.0.0.1 (tried for 1 s): start the scheduler (dask scheduler --port {port})"], done.stderr


def test_python_callers_read_python_and_the_cli_its_flags(tmp_path):
    """map_graph's refusals named -i and --reduce sum to Python callers; the command line's
    wording is now the errors' cli_message, which uopgrad prints."""
    from uopcli.formats.uop import load
    from uopcli.tools.map import map_graph
    from uopcli.errors import EvaluationError
    args = _small_run(tmp_path)
    graph, paths = load(str(tmp_path / "g.uop")), [str(tmp_path / "s0.npz"), str(tmp_path / "s1.npz")]
    w, x = np.load(tmp_path / "w.npy"), np.zeros((4, 3), np.float32)
    with pytest.raises(EvaluationError) as missing:
        map_graph(graph, paths, {})
    assert str(missing.value) == "missing input value: w float32[3] (neither a member of the shards nor in fixed=)"
    with pytest.raises(EvaluationError) as twice:
        map_graph(graph, paths, {"w": w, "x": x})
    assert str(twice.value) == f"{paths[0]}: member 'x' is an input given once for every shard (fixed=): give it in " \
                               "one place"
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([UOPGRAD, *args, "-i", "x=x.npy"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60) if UOPGRAD else None
    if done is not None:
        assert done.returncode == 1 and done.stderr.splitlines() == [
            "uopgrad: error: s0.npz: member 'x' is an input given once for every shard (-i): give it in one place"]


def test_no_shards_is_said_so_even_with_every_input_fixed(tmp_path):
    """map_graph(g, []) said "missing input value x", and with every input fixed raised a bare
    ValueError ("a sum needs at least one leaf")."""
    from uopcli.formats.uop import load
    from uopcli.tools.map import ShardError, map_graph
    _small_run(tmp_path)
    graph, w = load(str(tmp_path / "g.uop")), np.load(tmp_path / "w.npy")
    for fixed in ({"w": w}, {"w": w, "x": np.zeros((4, 3), np.float32)}):
        with pytest.raises(ShardError) as e:
            map_graph(graph, [], fixed)
        assert str(e.value) == "no shards: paths is empty (shard_paths(pattern) lists a data set's)"


def test_fixed_inputs_keyed_by_their_param_node_as_evaluate_graph_takes_them(tmp_path):
    from uopcli.errors import EvaluationError
    from uopcli.formats.uop import load
    from uopcli.tools.map import map_graph
    _small_run(tmp_path)
    graph, w = load(str(tmp_path / "g.uop")), np.load(tmp_path / "w.npy")
    paths = [str(tmp_path / "s0.npz"), str(tmp_path / "s1.npz")]
    node = next(n for n in graph.inputs if n.arg == "w")
    by_node, by_name = map_graph(graph, paths, {node: w}).outputs, map_graph(graph, paths, {"w": w}).outputs
    assert by_node["grad_w"].tobytes() == by_name["grad_w"].tobytes()
    xs = sum(np.load(p)["x"].astype(np.float64) for p in paths)
    np.testing.assert_allclose(by_node["grad_w"], xs.sum(0), rtol=1e-6)  # d/dw sum(x @ w) = column sums of x
    stranger = UOp.param("w", (4,), dtypes.float32)  # named as one, not one of its inputs
    with pytest.raises(EvaluationError) as e:
        map_graph(graph, paths, {stranger: w})
    assert "is not an input of the graph; inputs: x, w" in str(e.value)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_a_bare_npz_holding_the_batch_too_says_how_to_take_the_weights_alone(tmp_path):
    """The tinygrad bridge's mlp.npz holds the weights and the batch it was traced with: as a
    whole -i over shards it was refused with no way out. The hint's command runs, and its
    gradient is the column sums of the shards' x (d/dw of sum(x @ w))."""
    args = _small_run(tmp_path)
    np.savez(tmp_path / "model.npz", x=np.zeros((4, 3), np.float32), w=np.load(tmp_path / "w.npy"))
    done = subprocess.run([*[UOPGRAD, *args[:-2]], "-i", "model.npz"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "uopgrad: error: -i model.npz holds x, which the shards give (each shard its own): take the other members "
        "alone: -i w=model.npz"], done.stderr
    done = subprocess.run([UOPGRAD, *args[:-2], "-i", "w=model.npz", "-o", "out.npz"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    xs = sum(np.load(tmp_path / f"s{i}.npz")["x"].astype(np.float64) for i in range(2))
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["grad_w"], xs.sum(0), rtol=1e-6)


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
@pytest.mark.parametrize("order, more", [
    (["g.uop", "--map", "sh/s0.npz", "sh/s1.npz", "sh/s2.npz"], "2 more .npz arguments (sh/s1.npz, ...)"),
    (["--map", "sh/s0.npz", "sh/s1.npz", "sh/s2.npz", "g.uop"], "2 more .npz arguments (sh/s1.npz, ...)"),
    (["--map", "sh/s0.npz", "sh/s1.npz"], "1 more .npz argument (sh/s1.npz)"),  # IN forgotten: a shard as IN
])
def test_an_unquoted_pattern_the_shell_expanded_says_quote_it(tmp_path, order, more):
    """Was "Got unexpected extra arguments (...)" or "sh/s1.npz: neither a .uop file ...";
    one file given to --map unquoted, and nothing after it, still runs."""
    _small_run(tmp_path)
    (tmp_path / "sh").mkdir()
    for i in range(3):
        shutil.copy(tmp_path / f"s{i % 2}.npz", tmp_path / "sh" / f"s{i}.npz")
    done = subprocess.run([UOPGRAD, "eval", *order, "-i", "w=w.npy"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"uopgrad: error: --map sh/s0.npz and {more}: the shell expanded the pattern; quote it: --map 'sh/*.npz' "
        "(see 'uopgrad eval --help')"], done.stderr
    done = subprocess.run([UOPGRAD, "eval", "g.uop", "--map", "sh/s0.npz", "-i", "w=w.npy", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
