"""map.map_graph's shards on a Dask cluster, with distributed's scheduler: one task per shard
(the whole graph on one worker), the Work (graph and fixed inputs) made by one task and
replicated to every worker once, and the sum as a tree of addition tasks whose shape is map.SumTree's, so the result
is the sequential run's, bit for bit. The scheduler does the rest: placing tasks, moving
data, and rerunning the tasks of a worker that dies (from their lineage: a lost sum is
recomputed from its shards).

Imported only when map_graph is given `dask=`: uopcli never needs dask otherwise.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import uuid

from ..errors import UOpError
from .map import MapError, MapReport, ShardError, SumTree, Work, add_results, finish, run_shard

WORKERS_TIMEOUT = 60   # seconds to wait for a scheduler's first worker
STOP_SECONDS = 5       # seconds a stopped run waits for its client and local cluster to close


class DaskMissing(MapError):
    """dask or distributed is not installed."""


class ClusterError(MapError):
    """The cluster cannot be reached, or has no worker."""


def require() -> None:
    """Import distributed, or say how to install it (DaskMissing)."""
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        raise DaskMissing(f"--dask needs dask and distributed ({e}): pip install 'uopgrad[dask]'") from None


SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")  # distributed's comms between processes (inproc is within one)
_ADDRESS = re.compile(r"(?:(?P<scheme>[A-Za-z][\w+.-]*)://)?(?P<host>\[[^\]]*\]|[^/:\[\]\s]+):(?P<port>\d+)/?")


def parse_target(target: str) -> tuple[str, int | None]:
    """("local", N or None) for `local` / `local:N`, else ("address", None) for a scheduler's
    address (tcp://host:8786, host:8786); ClusterError for text that is neither."""
    if target == "local":
        return "local", None
    if target.startswith("local:"):
        count = target[len("local:"):]
        if not count.isdigit() or int(count) < 1:
            raise _malformed(target, "give local:N with N a number of workers >= 1")
        return "local", int(count)
    found = _ADDRESS.fullmatch(target)
    scheme = found["scheme"] if found else (target.split("://")[0] if "://" in target else None)
    if scheme is not None and scheme.lower() not in SCHEMES:
        inproc = " (inproc:// is a scheduler inside one process: pass its distributed.Client)" \
            if scheme == "inproc" else ""
        raise _malformed(target, f"a scheduler's address is tcp://HOST:PORT ({', '.join(SCHEMES)}), not "
                                 f"{scheme}://{inproc}")
    if found is None:
        raise _malformed(target, "a scheduler's address is tcp://HOST:PORT, the port too (8786 unless the "
                                 "scheduler was told otherwise), or local:N")
    if not 0 < int(found["port"]) < 65536:
        raise _malformed(target, f"port {found['port']} is not one (1 to 65535)")
    return "address", None


def _malformed(target: str, why: str) -> ClusterError:
    return ClusterError(f"dask={target!r}: {why}", cli=f"--dask {target}: {why}")


@contextlib.contextmanager
def client_for(target):
    """(distributed.Client, seconds to start or reach the cluster) for a `dask=` value: a
    Client is used as it is (and left open); `local[:N]` starts a cluster of N single-threaded
    worker processes on 127.0.0.1 for the block (closed after it, workers and all); any other
    text is a running scheduler's address."""
    require()
    import distributed
    if isinstance(target, distributed.Client):
        yield target, 0.0
        return
    start = time.perf_counter()
    kind, count = parse_target(target)
    with contextlib.ExitStack() as stack:
        if kind == "local":
            import logging
            import warnings

            import dask
            method = _start_method()
            import threadpoolctl  # noqa: F401 - imported once, here, for the forked workers' first shard
            if method == "fork":
                _versions_looked_up()
            with dask.config.set({"distributed.worker.multiprocessing-method": method}), \
                    (_frozen_heap() if method == "fork" else _main_out_of_sight()), \
                    _interrupt_held(), warnings.catch_warnings():
                # its scheduler's HTTP server takes another port where 8787 is busy (another
                # cluster's): nothing for our stderr, which has one line per failure
                warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=count or os.cpu_count() or 1, threads_per_worker=1, processes=True, host="127.0.0.1",
                    dashboard_address=None, silence_logs=logging.CRITICAL))  # a task's failure is ours to say, in one line
            client = stack.enter_context(distributed.Client(cluster))
            if method == "fork":
                from .map_dask_plugin import FreshProcess
                client.register_plugin(FreshProcess(), name="uopgrad-fresh-process")
        else:
            _probe(target)
            try:
                client = stack.enter_context(distributed.Client(target))  # dask's connect timeout
            except (OSError, TimeoutError, ValueError) as e:
                raise ClusterError(f"cannot reach the Dask scheduler at {target}: {' '.join(str(e).split())}") \
                    from None
            try:
                client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
            except TimeoutError:
                raise ClusterError(f"the Dask scheduler at {target} has had no worker for {WORKERS_TIMEOUT} s: "
                                      f"start some (dask worker {target})") from None
        try:
            yield client, time.perf_counter() - start
        except KeyboardInterrupt:  # ^C, SIGTERM, SIGHUP (cli.app.Stopped)
            if not _closed_within(client, STOP_SECONDS):
                stack.pop_all()  # still closing: left to the process's end, as waiting may be forever
            raise


def _closed_within(client, seconds: float) -> bool:
    """Whether the client (and the local cluster it started) of a stopped run closed within
    `seconds`: closing needs distributed's event-loop thread and the scheduler to answer,
    and a stop lands anywhere, also where a lock that thread needs is held (a fresh-clone CI
    run saw a ^C'd run not end in 60 s). The workers of a local cluster not closed by then
    are killed: they are this run's own."""
    pids = _local_worker_pids(client)
    cluster = getattr(client, "cluster", None)

    def close():
        client.close()
        if cluster is not None:
            cluster.close()
    closing = threading.Thread(target=close, name="uopgrad-close-after-stop", daemon=True)
    closing.start()
    closing.join(seconds)
    if not closing.is_alive():
        return True
    import signal
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return False


def _local_worker_pids(client) -> list[int]:
    """The process ids of the worker processes a local cluster of this process started
    (read from its nannies, no message sent); none for a scheduler elsewhere."""
    nannies = getattr(getattr(client, "cluster", None), "workers", None) or {}
    pids = []
    for nanny in list(nannies.values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if isinstance(pid, int):
            pids.append(pid)
    return pids


def _probe(target: str) -> None:
    """Ask `target` who it is, within dask's connect timeout, before a Client does: a Client
    waits forever on a port that accepts and never answers (the scheduler's dashboard, 8787,
    given for 8786), and reads another protocol's reply (an HTTP server's) as a message
    of exabytes ("out of memory")."""
    import asyncio

    import dask
    from dask.utils import parse_timedelta
    from distributed.core import rpc
    seconds = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")

    async def identity():
        async with rpc(target, timeout=seconds) as scheduler:
            return await asyncio.wait_for(scheduler.identity(), seconds)
    try:
        answer = asyncio.run(identity())
    except (OSError, ValueError, asyncio.TimeoutError) as e:  # (TimeoutError is an OSError)
        timed_out = isinstance(e, (TimeoutError, asyncio.TimeoutError)) or "Timed out" in str(e)
        why = _why_no_answer(target, seconds) if timed_out else " ".join(str(e).split())
        raise ClusterError(f"cannot reach the Dask scheduler at {target}: {why}") from None
    except (MemoryError, Exception) as e:  # noqa: BLE001 - whatever another protocol's bytes become
        raise ClusterError(f"cannot reach the Dask scheduler at {target}: what answers there does not speak "
                           f"Dask's protocol ({type(e).__name__})") from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        kind = answer.get("type") if isinstance(answer, dict) else type(answer).__name__
        raise ClusterError(f"{target} is not a Dask scheduler but a {kind}: give the scheduler's address")


def _require_uopcli_on_workers(client) -> None:
    """ClusterError naming the workers that cannot import uopcli: a task they cannot
    unpickle (its function is uopcli's) never ends, and the run waited forever. Asked of
    the workers there at the start; exec is a builtin, which any worker can unpickle."""
    answers = client.run(exec, "import uopcli.tools.map", {}, on_error="return")
    failed = {worker: error for worker, error in answers.items() if isinstance(error, BaseException)}
    if failed:
        worker, error = sorted(failed.items())[0]
        others = f" (and {len(failed) - 1} more of {len(answers)})" if len(failed) > 1 else ""
        raise ClusterError(f"the Dask worker {worker}{others} cannot import uopcli "
                           f"({type(error).__name__}: {' '.join(str(error).split())}): install uopgrad where each "
                           f"worker runs (pip install 'uopgrad[dask]', the version this run uses) and restart it")


def _start_method() -> str:
    """How `local:N` starts its workers. Forked from this process where it runs no other
    thread (the CLI): two start in 0.2 s, with numpy, uopcli and distributed imported
    already. A fork copies other threads' locks as they are: with a caller's thread inside an
    OpenBLAS product, the workers' start or that thread hung for good; so, where this
    process has threads, from multiprocessing's fork server, a fresh single-threaded process
    (0.6 s for two); spawned where fork does not exist (1.4 s)."""
    if not hasattr(os, "fork"):
        return "spawn"
    return "fork" if threading.active_count() == 1 else "forkserver"


@contextlib.contextmanager
def _main_out_of_sight():
    """A bare `__main__` while the workers start: a fork server's or spawned child runs the
    caller's script again unless the script guards itself (`if __name__ == "__main__"`),
    and it would start a cluster of its own; the workers need nothing of it (their tasks
    are uopcli's functions)."""
    import sys
    import types
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _why_no_answer(target: str, seconds: float) -> str:
    """What a connection that timed out met, tried once more directly (distributed retries
    a refused connection until its timeout, and then says only "Timed out")."""
    import socket
    found = _ADDRESS.fullmatch(target)
    host, port = found["host"].strip("[]"), int(found["port"])
    tried = f"tried for {seconds:g} s"
    try:
        with socket.create_connection((host, port), timeout=min(seconds, 5)):
            pass
    except socket.gaierror:
        return f"no host is named {host!r} ({tried})"
    except ConnectionRefusedError:
        return f"nothing listens on port {port} of {host} ({tried}): start the scheduler (dask scheduler --port {port})"
    except OSError as e:
        return f"{host}:{port} does not answer ({e.strerror or type(e).__name__}; {tried})"
    return (f"no answer within {seconds:g} s (a scheduler listens on port 8786 unless told otherwise; 8787 is its "
            "dashboard)")


def _versions_looked_up() -> None:
    """The package versions a worker reports when it registers, looked up here, once, before
    any worker is forked. Looking them up imports modules lazily (importlib.metadata), and
    the scheduler did that in its own thread while the workers were being forked: a fork
    copies an import lock that another thread holds, and the worker then waited on it
    forever at registration (seen once in CI: `--dask local:2` never started). distributed
    caches each version, so neither the scheduler nor a forked worker imports for them now."""
    from distributed.versions import get_versions
    get_versions()


@contextlib.contextmanager
def _frozen_heap():
    """This process's objects out of the cyclic collector's reach while workers are forked
    (gc.freeze): a forked worker shares the parent's memory pages until it writes to them,
    and its first collection, which writes to every object it scans, copied the whole
    inherited heap (a worker's first shard took 0.3-0.5 s of CPU for 0.12 s of work)."""
    import gc
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _interrupt_held():
    """^C blocked in this thread while the local cluster starts. The threads the cluster
    starts here inherit the blocked signal and keep it (Python runs handlers in the main
    thread only), and so do the workers forked from them: a terminal's ^C to the whole
    process group reaches uopgrad, which stops its workers (each had printed a
    KeyboardInterrupt traceback of its own, 68 lines for two). A worker a nanny spawns
    later, after one died, does not keep the block: FreshProcess makes it ignore ^C once it
    is set up. A ^C during the start arrives when it is over, here."""
    import signal
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _as_a_fresh_process() -> None:
    """In a local worker (FreshProcess): undo what the uopgrad command set in its own
    process and a forked worker inherits, the cyclic garbage collector paused and
    SIGTERM/SIGHUP raised as exceptions (cli.app), which a long-lived worker needs as a
    fresh interpreter has them; and ignore ^C, which a terminal sends to the whole process
    group: the caller stops its workers."""
    import gc
    import signal
    gc.enable()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_on_dask(work: Work, paths: list, reduce: str, sink, progress, target) -> MapReport:
    """map_graph's run on the cluster `target` (see client_for)."""
    from distributed import as_completed
    with client_for(target) as (client, startup), _scheduler_loss_named(client):
        _require_uopcli_on_workers(client)
        at_start = client.scheduler_info()["workers"]
        workers = sum(w.get("nthreads", 1) for w in at_start.values())
        clock = time.perf_counter()
        run = uuid.uuid4().hex[:12]
        # a task that returns the Work, not scattered data: the scheduler keeps the task, so
        # when every worker that held the Work dies, it is made again (scattered data was
        # lost for good, and the run failed on "lost dependencies" with the workers back)
        shared = client.submit(_the_work, work, key=f"uopgrad-work-{run}", pure=False)
        client.replicate([shared])  # each worker receives it once
        start = time.perf_counter()
        send = start - clock
        futures = [client.submit(run_shard, shared, path, key=f"uopgrad-shard-{run}-{i}", pure=False)
                   for i, path in enumerate(paths)]
        shard_of = {future.key: path for future, path in zip(futures, paths)}
        tree = None
        if reduce != "none":
            sums = iter(range(len(paths)))
            tree = SumTree(len(paths), lambda left, right: client.submit(
                add_results, left, right, key=f"uopgrad-sum-{run}-{next(sums)}", pure=False))
            for index, future in enumerate(futures):
                tree.add(index, future)
        shards = []
        done = as_completed(futures)
        futures.clear()  # as_completed holds each until it is done; then it goes (its sum holds it for as long)
        for future in done:
            path = shard_of[future.key]
            if reduce == "none":
                result = _result(future, path)
                sink(path, result.outputs)
                shards += result.stats
            elif future.status != "finished":
                _result(future, path)  # raises the shard's error
            progress(1)
            del future
        total = None
        if tree is not None:
            total = _result(tree.root, "the sum of the shards")
            shards = total.stats
        elapsed = time.perf_counter() - start
        lost = sorted(set(at_start) - set(client.scheduler_info()["workers"]))
        return MapReport(finish(total, reduce, len(paths)) if total is not None else None, shards, workers,
                         startup, send, elapsed, lost)


@contextlib.contextmanager
def _scheduler_loss_named(client):
    """The scheduler gone mid-run as one line naming it: every future is then cancelled, at
    whatever step the run was (sending the Work, a shard, the sum), and the error blamed a
    shard, after distributed's 35-line traceback."""
    try:
        yield
    except Exception as e:
        if "scheduler-connection-lost" not in str(e) and client.status == "running":
            raise
        raise ClusterError(f"the Dask scheduler at {client.scheduler.address} went away during the run (the "
                           "connection to it was lost): nothing was written") from None


def _the_work(work: Work) -> Work:
    return work


def _result(future, where: str):
    """The future's value; a task's failure as one line naming the shard."""
    from distributed.client import FutureCancelledError
    try:
        return future.result()
    except UOpError:
        raise
    except FutureCancelledError as e:
        if e.reason == "scheduler-connection-lost":
            raise  # the run's failure, not the shard's: _scheduler_loss_named
        raise ShardError(f"{where}: the Dask task was cancelled ({e.reason})") from None
    except Exception as e:  # noqa: BLE001 - KilledWorker: the engine's failures
        raise ShardError(f"{where}: the Dask task failed: {type(e).__name__}: {' '.join(str(e).split())}") from None
