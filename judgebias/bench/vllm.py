"""The ``vllm`` row of ``judgebias bench``: the same prompts and option token ids through vLLM.

The engine start (process, weights, compilation, warm-up) is timed apart from judging, as the
in-process engine's load is; peak memory is the high-water resident memory of vLLM's process tree
(the worker, its engine core and model-runner processes), read from ``/proc`` (None elsewhere).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from judgebias.backends.process_table import descendants


def tree_peak_gib(pid: int) -> float | None:
    """Sum of VmHWM (peak resident memory) over ``pid`` and its descendants; None without /proc."""
    total = 0
    for p in descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 2**20 if total else None


def bench_vllm(model: str, prompts: list, options: tuple[str, ...] | list[str], *, dtype: str
               ) -> tuple[dict[str, Any], list[float]]:
    """(row, P(first option) per prompt) of vLLM judging ``prompts`` in one call."""
    from judgebias.backends.vllm_backend import VLLMBackend

    backend = VLLMBackend(model, dtype=dtype)
    try:
        start = time.perf_counter()
        backend.score_options(prompts[:2], options)  # engine start + warm-up, as the engine's
        started = time.perf_counter() - start
        start = time.perf_counter()
        scores = backend.score_options(prompts, options)
        seconds = time.perf_counter() - start
        proc = backend._proc
        peak = tree_peak_gib(proc.pid) if proc is not None else None
    finally:
        backend.close()
    row = {"seconds": round(seconds, 3), "start_seconds": round(started, 1), "dtype": backend.dtype,
           "vllm": f"{backend.vllm_dist} {backend.vllm_version}", "peak_memory_gib": peak,
           "bounds": sum(1 for s in scores if s.bounds)}
    return row, [s.probs[options[0]] for s in scores]
