"""What tests/test_map*.py share: a gradient graph whose batch is the shard's, shards of a
data set written as .npz files, and the installed `uopgrad` run as a user runs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from uopcli import Graph, UOp, dtypes
from uopcli.formats.uop import save
from uopcli.tools.differentiate import differentiate

BIN = os.path.dirname(sys.executable)
UOPGRAD = shutil.which("uopgrad", path=BIN) or shutil.which("uopgrad")
IN, HIDDEN, OUT = 5, 7, 3


def mlp_gradient(batch: int, dtype=dtypes.float64, sizes: tuple = (IN, HIDDEN, OUT)) -> Graph:
    """The gradient of a summed squared error of a tanh MLP over `batch` rows, with respect
    to its weights w1 and w2: over shards, the sum of the shards' gradients is the whole
    batch's. Inputs x, y (the data) and w1, w2 (the weights); `sizes` (in, hidden, out)."""
    n_in, hidden, n_out = sizes
    x, y = UOp.param("x", (batch, n_in), dtype), UOp.param("y", (batch, n_out), dtype)
    w1, w2 = UOp.param("w1", (n_in, hidden), dtype), UOp.param("w2", (hidden, n_out), dtype)
    error = (x @ w1).tanh() @ w2 - y
    loss = (error * error).sum()
    grad, _ = differentiate(Graph({"loss": loss}, inputs=[x, y, w1, w2]), ["w1", "w2"], keep_forward=True)
    return grad


def write_gradient(path: Path, batch: int, sizes: tuple = (IN, HIDDEN, OUT)) -> Path:
    save(mlp_gradient(batch, sizes=sizes), path)
    return path


def write_weights(directory: Path, seed: int = 1, sizes: tuple = (IN, HIDDEN, OUT)) -> list[str]:
    """w1.npy and w2.npy in `directory`; the -i specs that give them."""
    rng = np.random.default_rng(seed)
    n_in, hidden, n_out = sizes
    np.save(directory / "w1.npy", rng.standard_normal((n_in, hidden)) / np.sqrt(n_in))
    np.save(directory / "w2.npy", rng.standard_normal((hidden, n_out)) / np.sqrt(hidden))
    return [f"w1={directory / 'w1.npy'}", f"w2={directory / 'w2.npy'}"]


def write_shards(directory: Path, count: int, batch: int, seed: int = 0,
                 sizes: tuple = (IN, HIDDEN, OUT)) -> tuple[list[Path], dict]:
    """`count` shards part-00.npz, ... of `batch` rows each (x, y); their paths and the whole
    data set, concatenated in the shards' order."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    xs, ys, paths = [], [], []
    n_in, _, n_out = sizes
    for i in range(count):
        x, y = rng.standard_normal((batch, n_in)), rng.standard_normal((batch, n_out))
        path = directory / f"part-{i:02d}.npz"
        np.savez(path, x=x, y=y)
        xs.append(x)
        ys.append(y)
        paths.append(path)
    return paths, {"x": np.concatenate(xs), "y": np.concatenate(ys)}


def uopgrad(*args, cwd: Path, timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    """The installed console script, with the venv's bin first on PATH."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([UOPGRAD, *map(str, args)], cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          **popen)


def uopgrad_process(*args, cwd: Path) -> subprocess.Popen:
    """The installed console script started in the background, in a session of its own (so
    that whatever it starts can be found, and stopped, by its session id). Its Python's
    faulthandler is on: `stacks_of_a_stuck(process)` shows where each thread waits."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([UOPGRAD, *map(str, args)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def stacks_of_a_stuck(process: subprocess.Popen) -> str:
    """What a process that does not end is doing: SIGABRT makes faulthandler print every
    thread's stack on its stderr (and ends it); its session is then stopped."""
    process.send_signal(signal.SIGABRT)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        err = b"(no stacks: it did not end on SIGABRT either)"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return err.decode(errors="replace")


def session_processes(session: int) -> list[int]:
    """The processes alive in session `session` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:  # state, ppid, pgrp, session
            found.append(int(entry))
    return found


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def on_terminal(args: list, cwd: Path) -> tuple[int, bytes, bytes]:
    """The installed uopgrad with stderr on a pseudo-terminal: (exit status, what the
    terminal showed, stdout)."""
    import pty
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen([UOPGRAD, *map(str, args)], cwd=cwd, stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        out, _ = process.communicate(timeout=120)
        return process.returncode, shown, out
    finally:
        os.close(leader)
