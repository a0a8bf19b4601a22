"""Judging many pairs on several processes or machines: chunks, per-worker models, merging.

The work is cut into chunks of pairs with stable, content-derived ids (``shard``). Each chunk is
judged by ``judge_chunk`` wherever a task runner puts it (a thread, a local Dask worker process, a
Dask worker on another machine); ``merge`` puts the rows back in the original pair order and
checks that every chunk came back complete.

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

from judgebias.records import Pair
from judgebias.table import Exclusions

ENV_WORKER_MODELS = "JUDGEBIAS_WORKER_MODELS"


# --- sharding and merging (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """A slice of the pairs, in their original order. ``chunk_id`` depends only on ``task_key``
    (what is done to the pairs, e.g. which judge and template) and the pairs' ids and texts, so
    the same work gets the same id in every run and on every machine."""

    index: int
    chunk_id: str
    pairs: tuple[Pair, ...]

    @property
    def pair_ids(self) -> tuple[str, ...]:
        return tuple(p.pair_id for p in self.pairs)


def chunk_id(task_key: str, pairs: Sequence[Pair]) -> str:
    digest = hashlib.sha256(task_key.encode("utf-8") + b"\x1e")
    for p in pairs:
        # The pair's id and its texts: a pair whose text changed under the same id is new work.
        digest.update(f"{p.pair_id}\x1f{Pair.make_id(p.prompt, p.response_a, p.response_b)}\x1e".encode())
    return digest.hexdigest()[:20]


def shard(pairs: Sequence[Pair], chunk_size: int, task_key: str = "") -> list[Chunk]:
    """Cut ``pairs`` into consecutive chunks of at most ``chunk_size``.

    Raises ValueError for a chunk size below 1 or a repeated pair id (its rows could not be told
    apart when merging).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    seen: set[str] = set()
    dups = sorted({p.pair_id for p in pairs if p.pair_id in seen or seen.add(p.pair_id)})
    if dups:
        raise ValueError(f"{len(dups)} repeated pair_id(s), e.g. {dups[:5]}: each pair must appear once")
    return [Chunk(index=i, chunk_id=chunk_id(task_key, pairs[start:start + chunk_size]),
                  pairs=tuple(pairs[start:start + chunk_size]))
            for i, start in enumerate(range(0, len(pairs), chunk_size))]


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


# --- judges on workers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeSpec:
    """How to build a judge on a worker: small and picklable, unlike a loaded model.

    ``model`` is a local model spec (packaged alias, folder, ``.gguf``) for ``backend="local"`` or
    the API's model name for ``"openai"`` (key read on the worker from ``api_key_env``).
    ``chat=None`` picks the chat prompt when the model has a chat template.
    """

    name: str
    model: str
    template: str = "dbg-ab"
    backend: Literal["local", "openai"] = "local"
    base_url: str | None = None
    api_key_env: str | None = None
    chat: bool | None = None
    batch_size: int = 8
    cache_dir: str | None = None  # None: $JUDGEBIAS_CACHE_DIR on the worker

    def model_key(self) -> str:
        """What identifies the loaded backend (not the template, batch size or cache)."""
        return json.dumps({"backend": self.backend, "model": self.model, "base_url": self.base_url,
                           "api_key_env": self.api_key_env, "name": self.name}, sort_keys=True)

    def task_key(self) -> str:
        """What determines the judgments (for chunk ids): batch size and cache location do not."""
        return json.dumps({"model": self.model_key(), "template": self.template, "chat": self.chat},
                          sort_keys=True)

    @classmethod
    def from_config(cls, judge_cfg: Any, cache_dir: str | None = None) -> JudgeSpec:
        """From a ``judgebias.config.JudgeConfig`` entry."""
        chat = None if judge_cfg.prompt_kind == "auto" else judge_cfg.prompt_kind == "chat"
        return cls(name=judge_cfg.name, model=judge_cfg.model, template=judge_cfg.template,
                   backend=judge_cfg.backend, base_url=judge_cfg.base_url, api_key_env=judge_cfg.api_key_env,
                   chat=chat, batch_size=judge_cfg.batch_size, cache_dir=cache_dir)


def _build_backend(spec: JudgeSpec):
    if spec.backend == "openai":
        from judgebias.backends.openai_compat import OpenAICompatBackend

        if not spec.base_url:
            raise ValueError(f"judge {spec.name!r}: backend 'openai' needs base_url")
        kwargs: dict[str, Any] = {"name": spec.name}
        if spec.api_key_env:
            kwargs["api_key_env"] = spec.api_key_env
        return OpenAICompatBackend(spec.model, spec.base_url, **kwargs)
    from judgebias.backends.local import LocalBackend

    return LocalBackend(spec.model, name=spec.name)


_BACKENDS: OrderedDict[str, Any] = OrderedDict()
_BACKENDS_LOCK = threading.Lock()
_LOADS: dict[str, int] = {}


def _capacity() -> int:
    try:
        return max(1, int(os.environ.get(ENV_WORKER_MODELS, "1")))
    except ValueError:
        raise ValueError(f"{ENV_WORKER_MODELS} must be a whole number, got "
                         f"{os.environ[ENV_WORKER_MODELS]!r}") from None


def worker_backend(spec: JudgeSpec) -> tuple[Any, bool]:
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
    rows: list[dict]
    exclusions: dict[str, int] = field(default_factory=dict)
    calls: int = 0  # model calls made (cache misses)
    hits: int = 0  # answered by the model-call cache
    from_store: bool = False  # the whole chunk was already finished
    loaded_model: bool = False  # this chunk paid for loading the model in its process
    seconds: float = 0.0
    pid: int = 0


def judge_chunk(chunk: Chunk, spec: JudgeSpec, store_dir: str | None = None) -> ChunkResult:
    """Judge one chunk in both orders on this process (what a task runner runs)."""
    from judgebias.cache import CachedBackend, ResponseCache, default_cache_dir
    from judgebias.judging import judge_pairs
    from judgebias.prompts import judge_template

    start = time.perf_counter()
    store = ChunkStore(store_dir) if store_dir else None
    if store is not None:
        rows = store.get(chunk.chunk_id)
        if rows is not None:
            return ChunkResult(chunk.chunk_id, rows, from_store=True, pid=os.getpid(),
                               seconds=time.perf_counter() - start)
    inner, loaded = worker_backend(spec)
    cache = ResponseCache(spec.cache_dir or default_cache_dir())
    backend = CachedBackend(inner, cache)
    try:
        result = judge_pairs(list(chunk.pairs), backend, judge_template(spec.template), judge=spec.name,
                             chat=spec.chat, chunk_size=spec.batch_size * 4)
    finally:
        cache.close()
    out = ChunkResult(chunk.chunk_id, result.rows, exclusions=result.exclusions.to_dict(),
                      calls=backend.calls, hits=backend.hits, loaded_model=loaded, pid=os.getpid(),
                      seconds=time.perf_counter() - start)
    if store is not None:
        store.put(chunk.chunk_id, out.rows, meta={k: v for k, v in asdict(out).items() if k != "rows"})
    return out


@dataclass
class RunSummary:
    """Totals of a chunked judging run (what the flow logs and returns)."""

    chunks: int = 0
    pairs: int = 0
    calls: int = 0
    hits: int = 0
    chunks_from_store: int = 0
    model_loads: int = 0
    worker_pids: list[int] = field(default_factory=list)
    exclusions: dict[str, int] = field(default_factory=dict)
    chunk_seconds: float = 0.0


def summarize(results: Sequence[ChunkResult]) -> RunSummary:
    excl = Exclusions()
    for r in results:
        for reason, n in r.exclusions.items():
            excl.add(reason, n)
    return RunSummary(
        chunks=len(results), pairs=sum(len(r.rows) for r in results), calls=sum(r.calls for r in results),
        hits=sum(r.hits for r in results), chunks_from_store=sum(r.from_store for r in results),
        model_loads=sum(r.loaded_model for r in results),
        worker_pids=sorted({r.pid for r in results}), exclusions=excl.to_dict(),
        chunk_seconds=math.fsum(r.seconds for r in results))


# --- task runners --------------------------------------------------------------------------------------


def make_task_runner(kind: str = "thread", max_workers: int = 1, address: str | None = None, *,
                     threads_per_worker: int = 1):
    """A Prefect task runner: ``"thread"`` (a pool of ``max_workers`` threads in this process) or
    ``"dask"`` (an existing cluster at ``address``, else a local cluster of ``max_workers``
    processes with ``threads_per_worker`` threads each; one process per model copy)."""
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
    return ApiAwareDaskTaskRunner(cluster_kwargs={"n_workers": max_workers, "processes": True,
                                                  "threads_per_worker": threads_per_worker})


def task_runner_from_config(cfg: Any):
    """From a ``judgebias.config.TaskRunnerConfig`` (kind, max_workers, address)."""
    return make_task_runner(cfg.kind, cfg.max_workers, cfg.address)
