"""The WorkerPlugin `--dask local:N` registers on its forked workers (a module of its own: it
imports distributed at once, and a plugin is sent to the workers by reference to its class,
which must be importable by name)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin


class FreshProcess(WorkerPlugin):
    """map_dask._as_a_fresh_process in every worker, those a nanny starts again after one died
    included (client.run reaches only the workers of the moment)."""

    def setup(self, worker) -> None:
        from .map_dask import _as_a_fresh_process
        _as_a_fresh_process()
