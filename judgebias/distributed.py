"""Judging and generating on several processes or machines: chunks, per-worker models, merging.

The work is cut into chunks with stable, content-derived ids (``shard`` for pairs,
``shard_prompts`` for generation prompts). Each chunk is processed by ``judge_chunk`` /
``generate_chunk`` wherever a task runner puts it (a thread, a local Dask worker process, a Dask
worker on another machine); ``merge`` / ``merge_aligned`` put the results back in the original
order and check that every chunk came back complete.

Nothing is computed twice:

- each worker process loads a judge model once and keeps it (``worker_backend``, an LRU of
  ``JUDGEBIAS_WORKER_MODELS`` models, default 1) for all the chunks it gets;
- every model call goes through the content-addressed ``CachedBackend`` (one SQLite file shared by
  all workers that see the same ``cache_dir``; one transaction per batch), so a chunk cut short by
  a lost worker resumes from its last finished batch when Dask reschedules it;
- a finished chunk's rows are written to a ``ChunkStore`` (one file per chunk id, written
  atomically), so a rerun skips finished chunks without even loading the model.

``make_task_runner`` builds the Prefect task runner the judging flow uses: a thread pool (the
default) or a Dask cluster, local (one process per worker) or an existing one by address.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from judgebias.backends.protocol import Generation, GenerationParams, Prompt
from judgebias.records import Pair
from judgebias.table import Exclusions

ENV_WORKER_MODELS = "JUDGEBIAS_WORKER_MODELS"
ENV_TORCH_THREADS = "JUDGEBIAS_TORCH_THREADS"


# --- sharding and merging (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """A slice of the work items (pairs, or prompts to generate from), in their original order.

    ``keys`` name the items for merging (pair ids; positions for prompts). ``chunk_id`` depends
    only on ``task_key`` (what is done to the items, e.g. which judge and template) and the items'
    keys and content, so the same work gets the same id in every run and on every machine.
    """

    index: int
    chunk_id: str
    items: tuple[Any, ...]
    keys: tuple[str, ...]

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return self.items

    @property
    def pair_ids(self) -> tuple[str, ...]:
        return self.keys


def _chunk_id(task_key: str, keys: Sequence[str], contents: Sequence[str]) -> str:
    digest = hashlib.sha256(task_key.encode("utf-8") + b"\x1e")
    for key, content in zip(keys, contents, strict=True):
        digest.update(f"{key}\x1f{content}\x1e".encode())
    return digest.hexdigest()[:20]


def shard_items(items: Sequence[Any], keys: Sequence[str], contents: Sequence[str], chunk_size: int,
                task_key: str = "") -> list[Chunk]:
    """Cut ``items`` into consecutive chunks of at most ``chunk_size``; ``contents`` is a digest
    of each item's content (so an item changed under the same key is new work).

    Raises ValueError for a chunk size below 1 or a repeated key (its results could not be told
    apart when merging).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not len(items) == len(keys) == len(contents):
        raise ValueError(f"{len(items)} items, {len(keys)} keys and {len(contents)} content digests")
    seen: set[str] = set()
    dups = sorted({k for k in keys if k in seen or seen.add(k)})
    if dups:
        raise ValueError(f"{len(dups)} repeated pair_id(s)/key(s), e.g. {dups[:5]}: "
                         "each item must appear once")
    return [Chunk(index=i, chunk_id=_chunk_id(task_key, keys[start:start + chunk_size],
                                              contents[start:start + chunk_size]),
                  items=tuple(items[start:start + chunk_size]), keys=tuple(keys[start:start + chunk_size]))
            for i, start in enumerate(range(0, len(items), chunk_size))]


def shard(pairs: Sequence[Pair], chunk_size: int, task_key: str = "") -> list[Chunk]:
    """Chunks of pairs, keyed by pair id (see ``shard_items``)."""
    contents = [Pair.make_id(p.prompt, p.response_a, p.response_b) for p in pairs]
    return shard_items(pairs, [p.pair_id for p in pairs], contents, chunk_size, task_key)


def shard_prompts(prompts: Sequence[Prompt], chunk_size: int, task_key: str = "") -> list[Chunk]:
    """Chunks of prompts, keyed by position (see ``shard_items``)."""
    contents = [hashlib.sha256(json.dumps(p.key(), sort_keys=True).encode()).hexdigest()[:16]
                for p in prompts]
    return shard_items(prompts, [str(i) for i in range(len(prompts))], contents, chunk_size, task_key)


def merge_aligned(chunks: Sequence[Chunk], results: Mapping[str, Sequence[Any]]) -> list[Any]:
    """Per-item results listed in each chunk's item order, concatenated in chunk order.

    Raises ValueError naming the chunk when a result is missing or has the wrong length.
    """
    problems, merged = [], []
    for chunk in chunks:
        got = results.get(chunk.chunk_id)
        if got is None:
            problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): no result")
        elif len(got) != len(chunk.items):
            problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): {len(got)} results for "
                            f"{len(chunk.items)} items")
        else:
            merged.extend(got)
    if problems:
        raise ValueError(f"cannot merge {len(chunks)} chunk results: " + "; ".join(problems[:20]))
    return merged


def merge(chunks: Sequence[Chunk], results: Mapping[str, Sequence[dict]]) -> list[dict]:
    """The rows of every chunk, in the original pair order.

    ``results`` maps chunk id to that chunk's rows (one per pair, any order). Raises ValueError
    naming the chunk when a chunk's result is missing, lacks a pair, has an extra or repeated one.
    """
    problems: list[str] = []
    merged: list[dict] = []
    for chunk in chunks:
        rows = results.get(chunk.chunk_id)
        if rows is None:
            problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): no result")
            continue
        by_id: dict[str, dict] = {}
        for row in rows:
            pid = str(row.get("pair_id"))
            if pid in by_id:
                problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): pair {pid!r} returned twice")
            by_id[pid] = row
        missing = [pid for pid in chunk.pair_ids if pid not in by_id]
        extra = sorted(set(by_id) - set(chunk.pair_ids))
        if missing:
            problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): missing pair(s) {missing[:5]}")
        if extra:
            problems.append(f"chunk {chunk.index} ({chunk.chunk_id}): unexpected pair(s) {extra[:5]}")
        if not missing:
            merged.extend(by_id[pid] for pid in chunk.pair_ids)
    if problems:
        raise ValueError(f"cannot merge {len(chunks)} chunk results: " + "; ".join(problems[:20]))
    return merged


# --- finished chunks ---------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in a chunk result")


class ChunkStore:
    """Finished chunks' rows, one JSON file per chunk id under ``directory``.

    Files are written to a temporary name and renamed, so a worker killed while writing leaves no
    partial result; two workers finishing the same chunk write the same content. ``directory``
    must be shared by all workers (same path on every machine) for a rerun to see their chunks.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def _path(self, cid: str) -> Path:
        return self.directory / f"{cid}.json"

    def get(self, cid: str) -> list[dict] | None:
        try:
            text = self._path(cid).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return json.loads(text)["rows"]

    def put(self, cid: str, rows: Sequence[dict], meta: Mapping[str, Any] | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(cid)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        # NaN is kept (json writes it as NaN and reads it back): a missing score is not a 0.
        tmp.write_text(json.dumps({"chunk_id": cid, "meta": dict(meta or {}), "rows": list(rows)},
                                  default=_json_default, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    def __contains__(self, cid: str) -> bool:
        return self._path(cid).exists()


# --- models on workers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """How to build a model backend on a worker: small and picklable, unlike a loaded model.

    ``model`` is a local model spec (packaged alias, folder, ``.gguf``) for ``backend="local"`` or
    the API's model name for ``"openai"`` (its key is read on the worker from ``api_key_env``).
    """

    name: str
    model: str
    backend: Literal["local", "openai"] = "local"
    base_url: str | None = None
    api_key_env: str | None = None
    batch_size: int = 8
    cache_dir: str | None = None  # None: $JUDGEBIAS_CACHE_DIR on the worker
    # "package.module:function": called with this spec on the worker to build any other Backend
    # (an in-house client, a wrapped model); importable on every worker.
    factory: str | None = None

    def model_key(self) -> str:
        """What identifies the loaded backend (not the template, batch size or cache)."""
        return json.dumps({"backend": self.backend, "model": self.model, "base_url": self.base_url,
                           "api_key_env": self.api_key_env, "name": self.name, "factory": self.factory},
                          sort_keys=True)

    @classmethod
    def from_config(cls, ref: Any, cache_dir: str | None = None, **extra: Any):
        """From a generator/judge entry of ``judgebias.config`` (name, model, backend, ...)."""
        return cls(name=ref.name, model=ref.model, backend=ref.backend, base_url=ref.base_url,
                   api_key_env=ref.api_key_env, batch_size=ref.batch_size, cache_dir=cache_dir, **extra)


@dataclass(frozen=True)
class JudgeSpec(ModelSpec):
    """A judge: a model plus the template it judges with. ``chat=None`` picks the chat prompt when
    the model has a chat template."""

    template: str = "dbg-ab"
    chat: bool | None = None

    def task_key(self) -> str:
        """What determines the judgments (for chunk ids): batch size and cache location do not."""
        return json.dumps({"model": self.model_key(), "template": self.template, "chat": self.chat},
                          sort_keys=True)

    @classmethod
    def from_config(cls, ref: Any, cache_dir: str | None = None, **extra: Any) -> JudgeSpec:
        """From a ``judgebias.config.JudgeConfig`` entry."""
        chat = None if ref.prompt_kind == "auto" else ref.prompt_kind == "chat"
        return super().from_config(ref, cache_dir, template=ref.template, chat=chat, **extra)


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

    def score_options(self, prompts, options):
        with self._lock:
            return self._inner.score_options(prompts, options)

    def generate(self, prompts, params):
        with self._lock:
            return self._inner.generate(prompts, params)

    def continuation_logprobs(self, contexts, continuations):
        with self._lock:
            return self._inner.continuation_logprobs(contexts, continuations)


def _build_backend(spec: ModelSpec):
    if spec.factory:
        import importlib

        module, _, function = spec.factory.partition(":")
        try:
            build = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"model {spec.name!r}: factory {spec.factory!r} cannot be imported "
                             f"on this worker ({exc})") from None
        return build(spec)
    if spec.backend == "openai":
        from judgebias.backends.openai_compat import OpenAICompatBackend

        if not spec.base_url:
            raise ValueError(f"model {spec.name!r}: backend 'openai' needs base_url")
        kwargs: dict[str, Any] = {"name": spec.name}
        if spec.api_key_env:
            kwargs["api_key_env"] = spec.api_key_env
        return OpenAICompatBackend(spec.model, spec.base_url, **kwargs)
    from judgebias.backends.local import LocalBackend

    threads = os.environ.get(ENV_TORCH_THREADS)
    if threads:
        import torch

        # Set explicitly: OMP_NUM_THREADS in a worker's environment is read too late to count.
        torch.set_num_threads(int(threads))
    return _Serialized(LocalBackend(spec.model, name=spec.name))


_BACKENDS: OrderedDict[str, Any] = OrderedDict()
_BACKENDS_LOCK = threading.Lock()
_LOADS: dict[str, int] = {}


def _capacity() -> int:
    try:
        return max(1, int(os.environ.get(ENV_WORKER_MODELS, "1")))
    except ValueError:
        raise ValueError(f"{ENV_WORKER_MODELS} must be a whole number, got "
                         f"{os.environ[ENV_WORKER_MODELS]!r}") from None


def worker_backend(spec: ModelSpec) -> tuple[Any, bool]:
    """(the uncached backend for ``spec`` in this process, whether it was loaded just now).

    Loaded once per process and kept; beyond ``JUDGEBIAS_WORKER_MODELS`` models the least recently
    used is released (a worker judging several models in turn holds one at a time by default).
    """
    key = spec.model_key()
    with _BACKENDS_LOCK:  # one load even when a worker runs several threads
        if key in _BACKENDS:
            _BACKENDS.move_to_end(key)
            return _BACKENDS[key], False
        while len(_BACKENDS) >= _capacity():
            _BACKENDS.popitem(last=False)
            gc.collect()
        backend = _build_backend(spec)
        _BACKENDS[key] = backend
        _LOADS[key] = _LOADS.get(key, 0) + 1
        return backend, True


def worker_stats() -> dict[str, Any]:
    """This process's id, the models it holds and how often each was loaded."""
    with _BACKENDS_LOCK:
        return {"pid": os.getpid(), "held": len(_BACKENDS), "loads": dict(_LOADS)}


def release_worker_backends() -> None:
    with _BACKENDS_LOCK:
        _BACKENDS.clear()
        _LOADS.clear()
    gc.collect()


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
    from judgebias.cache import CachedBackend, ResponseCache, default_cache_dir

    inner, loaded = worker_backend(spec)
    return CachedBackend(inner, ResponseCache(spec.cache_dir or default_cache_dir())), loaded


def _finish(store: ChunkStore | None, out: ChunkResult, failed: bool) -> ChunkResult:
    out.finished = time.time()
    # A chunk with a failed item is not "finished": a rerun retries it (its successful items then
    # come from the call cache), as a failed call is never cached either.
    if store is not None and not failed:
        store.put(out.chunk_id, out.rows, meta={k: v for k, v in asdict(out).items() if k != "rows"})
    return out


def judge_chunk(chunk: Chunk, spec: JudgeSpec, store_dir: str | None = None) -> ChunkResult:
    """Judge one chunk of pairs in both orders in this process (what a task runner runs)."""
    from judgebias.judging import judge_pairs
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
        gens = []
        for start in range(0, len(prompts), spec.batch_size):
            gens.extend(runner.generate(prompts[start:start + spec.batch_size], params))
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


# --- task runners --------------------------------------------------------------------------------------


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
    from judgebias._dask_runner import ApiAwareDaskTaskRunner

    if address:
        return ApiAwareDaskTaskRunner(address=address)
    threads = torch_threads or max(1, (os.cpu_count() or 1) // max_workers)
    return ApiAwareDaskTaskRunner(cluster_kwargs={
        "n_workers": max_workers, "processes": True, "threads_per_worker": threads_per_worker,
        "env": {ENV_TORCH_THREADS: str(threads)}})


def task_runner_from_config(cfg: Any):
    """From a ``judgebias.config.TaskRunnerConfig`` (kind, max_workers, address)."""
    return make_task_runner(cfg.kind, cfg.max_workers, cfg.address)
