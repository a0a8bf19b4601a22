"""What a worker process does with a chunk: judge or generate it with a model it keeps loaded.

Nothing is computed twice:

- each worker process builds a model backend once (``judgebias.backends.builder``) and keeps it
  (``worker_backend``, an LRU of ``JUDGEBIAS_WORKER_MODELS`` models, default 1) for all the chunks
  it gets;
- every model call goes through the content-addressed ``CachedBackend`` (one SQLite file shared by
  all workers that see the same ``cache_dir``; one transaction per batch), so a chunk cut short by
  a lost worker resumes from its last finished batch when it is rescheduled;
- a finished chunk's rows are written to a ``ChunkStore``, so a rerun skips finished chunks
  without even loading the model.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from judgebias.backends.builder import JudgeSpec, ModelSpec, build_backend, cached
from judgebias.backends.call_cache import on_results_kwargs
from judgebias.backends.protocol import Generation, GenerationParams, Prompt
from judgebias.backends.resident import Resident
from judgebias.engine.chunks import Chunk, ChunkStore
from judgebias.engine.pairwise import generate_all
from judgebias.tables.pairwise import Exclusions
from judgebias.tables.records import Pair

ENV_WORKER_MODELS = "JUDGEBIAS_WORKER_MODELS"
ENV_TORCH_THREADS = "JUDGEBIAS_TORCH_THREADS"


class _Serialized:
    """A local model shared by the threads of one worker, used by one call at a time: a forward
    pass already uses every core torch was given, and HF fast tokenizers fail ("Already borrowed")
    when two threads use one at once. API backends are not wrapped; their calls overlap."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.name = inner.name

    def __getattr__(self, attr: str) -> Any:
        if attr == "_inner":
            raise AttributeError(attr)
        return getattr(self._inner, attr)

    def identity(self) -> dict:
        return self._inner.identity()

    # on_results passes through, so the call cache still commits a long batch every few seconds.
    def score_options(self, prompts, options, on_results=None):
        with self._lock:
            return self._inner.score_options(prompts, options, **on_results_kwargs(on_results))

    def generate(self, prompts, params, on_results=None):
        with self._lock:
            return self._inner.generate(prompts, params, **on_results_kwargs(on_results))

    def continuation_logprobs(self, contexts, continuations, on_results=None):
        with self._lock:
            return self._inner.continuation_logprobs(contexts, continuations, **on_results_kwargs(on_results))


def _build_backend(spec: ModelSpec):
    threads = os.environ.get(ENV_TORCH_THREADS)
    if threads and spec.can("in_process"):
        import torch

        # Set explicitly: OMP_NUM_THREADS in a worker's environment is read too late to count.
        torch.set_num_threads(int(threads))
    backend = build_backend(spec)
    # One call at a time on a local model; API calls overlap.
    return _Serialized(backend) if spec.can("in_process") else backend


_BACKENDS = Resident(ENV_WORKER_MODELS, default=1, minimum=1)


def worker_backend(spec: ModelSpec) -> tuple[Any, bool]:
    """(the uncached backend for ``spec`` in this process, whether it was loaded just now).

    Loaded once per process and kept; beyond ``JUDGEBIAS_WORKER_MODELS`` models the least recently
    used is released (a worker judging several models in turn holds one at a time by default).
    """
    return _BACKENDS.get(spec.model_key(), lambda: _build_backend(spec))


def worker_stats() -> dict[str, Any]:
    """This process's id, the models it holds and how often each was loaded."""
    return {"pid": os.getpid(), "held": len(_BACKENDS), "loads": dict(_BACKENDS.builds)}


def release_worker_backends() -> None:
    _BACKENDS.clear()


@dataclass
class ChunkResult:
    chunk_id: str
    rows: list[dict]  # judgment-table rows, or Generation fields, one per item
    exclusions: dict[str, int] = field(default_factory=dict)
    calls: int = 0  # model calls made (cache misses)
    hits: int = 0  # answered by the model-call cache
    from_store: bool = False  # the whole chunk was already finished
    loaded_model: bool = False  # this chunk paid for loading the model in its process
    started: float = 0.0  # wall-clock (epoch) seconds, for throughput over a run's busy window
    finished: float = 0.0
    pid: int = 0

    @property
    def seconds(self) -> float:
        return self.finished - self.started


def _from_store(store: ChunkStore | None, chunk: Chunk) -> ChunkResult | None:
    rows = store.get(chunk.chunk_id) if store is not None else None
    if rows is None:
        return None
    now = time.time()
    return ChunkResult(chunk.chunk_id, rows, from_store=True, pid=os.getpid(), started=now, finished=now)


def _cached(spec: ModelSpec):
    inner, loaded = worker_backend(spec)
    return cached(inner, spec), loaded


def _finish(store: ChunkStore | None, out: ChunkResult, failed: bool) -> ChunkResult:
    out.finished = time.time()
    # A chunk with a failed item is not "finished": a rerun retries it (its successful items then
    # come from the call cache), as a failed call is never cached either.
    if store is not None and not failed:
        store.put(out.chunk_id, out.rows, meta={k: v for k, v in asdict(out).items() if k != "rows"})
    return out


def judge_chunk(chunk: Chunk, spec: JudgeSpec, store_dir: str | None = None) -> ChunkResult:
    """Judge one chunk of pairs in both orders in this process (what a task runner runs)."""
    from judgebias.engine.pairwise import judge_pairs
    from judgebias.prompts import judge_template

    started = time.time()
    store = ChunkStore(store_dir) if store_dir else None
    if (done := _from_store(store, chunk)) is not None:
        return done
    backend, loaded = _cached(spec)
    try:
        result = judge_pairs(list(chunk.items), backend, judge_template(spec.template), judge=spec.name,
                             chat=spec.chat, chunk_size=spec.batch_size * 4)
    finally:
        backend.cache.close()
    out = ChunkResult(chunk.chunk_id, result.rows, exclusions=result.exclusions.to_dict(),
                      calls=backend.calls, hits=backend.hits, loaded_model=loaded, pid=os.getpid(),
                      started=started)
    return _finish(store, out, failed=any(r.get("judge_error") for r in result.rows))


def generate_chunk(chunk: Chunk, spec: ModelSpec, params: GenerationParams, template_tag: str = "",
                   store_dir: str | None = None) -> ChunkResult:
    """Generate from one chunk of prompts in this process; rows are ``Generation`` fields."""
    started = time.time()
    store = ChunkStore(store_dir) if store_dir else None
    if (done := _from_store(store, chunk)) is not None:
        return done
    backend, loaded = _cached(spec)
    runner = backend.with_template(template_tag)  # the template version joins the cache key
    prompts = list(chunk.items)
    try:
        gens = generate_all(runner, prompts, params, spec.batch_size)
    finally:
        backend.cache.close()
    excl = Exclusions()
    for g in gens:
        if g.error:
            excl.add(g.error[:100])
    out = ChunkResult(chunk.chunk_id, [asdict(g) for g in gens], exclusions=excl.to_dict(),
                      calls=backend.calls, hits=backend.hits, loaded_model=loaded, pid=os.getpid(),
                      started=started)
    return _finish(store, out, failed=bool(excl.total))


def generations(rows: Sequence[dict]) -> list[Generation]:
    """``Generation`` values back from ``generate_chunk`` rows."""
    return [Generation(**r) for r in rows]


@dataclass
class RunSummary:
    """Totals of a chunked run (what the flow logs and returns)."""

    chunks: int = 0
    items: int = 0
    calls: int = 0
    hits: int = 0
    chunks_from_store: int = 0
    model_loads: int = 0
    worker_pids: list[int] = field(default_factory=list)
    exclusions: dict[str, int] = field(default_factory=dict)
    busy_seconds: float = 0.0  # from the first computed chunk's start to the last one's end

    @property
    def items_per_second(self) -> float:
        return self.items / self.busy_seconds if self.busy_seconds > 0 else math.nan


def summarize(results: Sequence[ChunkResult]) -> RunSummary:
    excl = Exclusions()
    for r in results:
        for reason, n in r.exclusions.items():
            excl.add(reason, n)
    computed = [r for r in results if not r.from_store]
    busy = (max(r.finished for r in computed) - min(r.started for r in computed)) if computed else 0.0
    return RunSummary(
        chunks=len(results), items=sum(len(r.rows) for r in results), calls=sum(r.calls for r in results),
        hits=sum(r.hits for r in results), chunks_from_store=len(results) - len(computed),
        model_loads=sum(r.loaded_model for r in results),
        worker_pids=sorted({r.pid for r in computed}), exclusions=excl.to_dict(), busy_seconds=busy)


class ChunkRoute(Protocol):
    """Where a stage's chunks run: the experiment's generation and judging stages hand their work
    to one when the flow spreads it over workers (``judgebias.tasks.chunks.FlowChunks``: every
    chunk a task on the flow's Dask runner). Results come back in input order, as one process
    would give them."""

    def judge(self, pairs: Sequence[Pair], spec: JudgeSpec, chunk_size: int) -> tuple[list[dict], RunSummary]:
        ...

    def generate(self, prompts: Sequence[Prompt], spec: ModelSpec, params: GenerationParams,
                 template_tag: str, chunk_size: int) -> tuple[list[Generation], RunSummary]:
        ...


# Chunks cut on the one-process route's batch boundaries, so each model call sees the same prompts
# as in one process (a local model's padding, hence its last float bits, depends on its batch).
JUDGE_CHUNK_PAIRS = 16
GENERATE_CHUNK_PROMPTS = 32


def judge_chunk_size(batch_size: int, target: int | None = None) -> int:
    """Pairs per chunk for a judge of ``batch_size``: the fewest whole scoring calls of the judging
    engine (``batch_size * 4`` prompts, i.e. ``batch_size * 2`` pairs in both orders) holding at
    least ``target`` pairs (default ``JUDGE_CHUNK_PAIRS``)."""
    target = target or JUDGE_CHUNK_PAIRS
    per_call = 2 * batch_size
    return per_call * max(1, math.ceil(target / per_call))


def generate_chunk_size(batch_size: int, target: int | None = None) -> int:
    """Prompts per chunk for a generator of ``batch_size``: whole batches, at least ``target``
    (default ``GENERATE_CHUNK_PROMPTS``)."""
    target = target or GENERATE_CHUNK_PROMPTS
    return batch_size * max(1, math.ceil(target / batch_size))
