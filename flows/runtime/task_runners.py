"""Where the chunks of a distributed judging run execute: Prefect task runners.

A thread pool in this process (the default) or a Dask cluster, local (one process per worker) or
an existing one by address. The work itself is ``judgebias.engine.workers``; the chunks
``judgebias.engine.chunks``.
"""

from __future__ import annotations

import os
from typing import Any

from judgebias.engine.workers import ENV_TORCH_THREADS


def make_task_runner(kind: str = "thread", max_workers: int = 1, address: str | None = None, *,
                     threads_per_worker: int = 1, torch_threads: int | None = None):
    """A Prefect task runner: ``"thread"`` (a pool of ``max_workers`` threads in this process) or
    ``"dask"`` (an existing cluster at ``address``, else a local cluster of ``max_workers``
    processes with ``threads_per_worker`` task threads each; one process per model copy).

    Dask starts worker processes with one torch thread, which leaves cores idle when there are
    fewer workers than cores; local workers get ``torch_threads`` intra-op threads (default: this
    machine's cores divided among the workers).
    """
    if kind == "thread":
        if address:
            raise ValueError("address only applies to the 'dask' task runner")
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=max_workers)
    if kind != "dask":
        raise ValueError(f"unknown task runner {kind!r}; use 'thread' or 'dask'")
    from judgebias.flows.runtime.dask_runner import ApiAwareDaskTaskRunner

    if address:
        return ApiAwareDaskTaskRunner(address=address)
    threads = torch_threads or max(1, (os.cpu_count() or 1) // max_workers)
    return ApiAwareDaskTaskRunner(cluster_kwargs={
        "n_workers": max_workers, "processes": True, "threads_per_worker": threads_per_worker,
        "env": {ENV_TORCH_THREADS: str(threads)}})


def task_runner_from_config(cfg: Any):
    """From a ``judgebias.config.experiment.TaskRunnerConfig`` (kind, max_workers, address)."""
    return make_task_runner(cfg.kind, cfg.max_workers, cfg.address)

