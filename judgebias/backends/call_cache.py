"""Content-addressed cache of model calls.

A call's key is the sha256 of the canonical JSON of everything that determines its output: the
backend's ``identity()`` (kind, model id and revision or weights hash, endpoint), the operation,
the full prompt content, the options or continuation, the decoding parameters and the prompt
template version. Retries, timeouts, concurrency and API keys never enter the key: they change how
a result is obtained, not what it is. Failed items (``error`` set, including off-format answers)
are never stored, so a rerun retries exactly them.

Storage is one SQLite file in WAL mode under ``JUDGEBIAS_CACHE_DIR`` (default
``~/.cache/judgebias/calls``), outside the package. Each backend call batch is one transaction,
so a run killed half-way keeps every batch it finished; several processes (Dask workers) can share
the file because SQLite serializes writers and waits ``busy_timeout`` for the lock. A backend that
reports results as it finishes them (an ``on_results`` keyword: the local and OpenAI-compatible
backends) is also committed every ``commit_seconds`` within a batch, so a kill loses seconds of work,
not a batch (64 prompts were about 35 s of CPU work).

``CachedBackend(inner, cache)`` is itself a ``Backend``: it looks up all items of a batch,
forwards only the misses to ``inner`` in one batched call and returns results in input order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from judgebias import interrupts
from judgebias.backends.protocol import (
    Backend,
    Generation,
    GenerationParams,
    OptionScores,
    Prompt,
    TokenLogprobs,
)

ENV_CACHE_DIR = "JUDGEBIAS_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/judgebias/calls")
DB_NAME = "calls.sqlite"
# Bump when the stored value format or the key layout changes: old entries then simply miss.
KEY_SCHEMA = 1
# Within a backend call, results reported so far are committed once this many seconds have passed.
COMMIT_SECONDS = 5.0

OPERATIONS = ("score_options", "generate", "continuation_logprobs")
_RESULT_TYPES: dict[str, type] = {
    "score_options": OptionScores,
    "generate": Generation,
    "continuation_logprobs": TokenLogprobs,
}


def default_cache_dir() -> Path:
    """``$JUDGEBIAS_CACHE_DIR`` or ``~/.cache/judgebias/calls``."""
    return Path(os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR).expanduser()


def _canonical(obj: Any) -> str:
    # sort_keys + fixed separators: the same content gives the same bytes on every machine.
    # allow_nan=False: a NaN in a key would be a bug upstream (e.g. a NaN temperature).
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def call_key(identity: Mapping[str, Any], operation: str, payload: Mapping[str, Any],
             template_version: str = "") -> str:
    """sha256 hex digest of one model call's content.

    ``payload`` holds the operation's inputs (prompt, options / params / continuation).
    """
    if operation not in OPERATIONS:
        raise ValueError(f"unknown cached operation {operation!r}; expected one of {OPERATIONS}")
    doc = {"schema": KEY_SCHEMA, "backend": dict(identity), "op": operation, "input": dict(payload),
           "template": template_version}
    return hashlib.sha256(_canonical(doc).encode("utf-8")).hexdigest()


def encode_result(result: OptionScores | Generation | TokenLogprobs) -> str:
    # NaN is legal in a stored value (e.g. OptionScores.mass of a verdict-only judge).
    return json.dumps(dataclasses.asdict(result), sort_keys=True, ensure_ascii=False)


def decode_result(operation: str, text: str) -> OptionScores | Generation | TokenLogprobs:
    data = json.loads(text)
    cls = _RESULT_TYPES[operation]
    if cls is TokenLogprobs:
        data["logprobs"] = tuple(data["logprobs"])
    return cls(**data)



def _set_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL, retrying: two processes creating the same new database can get SQLITE_BUSY here
    at once, without SQLite's busy handler being called (it is not, where waiting could deadlock)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)

class ResponseCache:
    """SQLite store of successful model-call results, keyed by ``call_key``.

    ``ResponseCache(None)`` is a disabled cache: every lookup misses and nothing is stored.
    ``directory`` may also name a ``.sqlite``/``.db`` file directly. Safe to share between threads
    (one lock) and processes (SQLite locking); picklable, reconnecting lazily after unpickling.
    """

    def __init__(self, directory: str | os.PathLike | None, *, busy_timeout_s: float = 60.0) -> None:
        self.busy_timeout_s = busy_timeout_s
        if directory is None:
            self.path: Path | None = None
        else:
            p = Path(directory).expanduser()
            self.path = p if p.suffix in {".sqlite", ".db"} else p / DB_NAME
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, enabled: bool = True) -> ResponseCache:
        """The default cache (``$JUDGEBIAS_CACHE_DIR``), or a disabled one for ``--no-cache``."""
        return cls(default_cache_dir() if enabled else None)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path) if self.path else None!r})"

    def __getstate__(self) -> dict:
        return {"path": self.path, "busy_timeout_s": self.busy_timeout_s}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        self.busy_timeout_s = state["busy_timeout_s"]
        self._conn = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            assert self.path is not None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, check_same_thread=False,
                                       isolation_level=None)
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                _set_wal(conn, self.busy_timeout_s)
                # NORMAL in WAL mode: a committed batch survives a killed process (not a power cut).
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, op TEXT NOT NULL, "
                    "backend TEXT NOT NULL, value TEXT NOT NULL, created REAL NOT NULL)"
                )
            except (OSError, sqlite3.Error) as exc:
                raise OSError(f"cannot open the model-call cache at {self.path}: {exc} (set {ENV_CACHE_DIR} "
                              "to a writable folder, or disable the cache with --no-cache)") from exc
            self._conn = conn
        return self._conn

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """Stored values (JSON text) for the keys that are present."""
        if not self.enabled or not keys:
            return {}
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            conn = self._connect()
            # 500 per query stays under SQLite's bound-parameter limit on old builds.
            for i in range(0, len(unique), 500):
                chunk = unique[i:i + 500]
                marks = ",".join("?" * len(chunk))
                found.update(conn.execute(f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk))
        return found

    def put_many(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Store ``(key, operation, backend_identity_json, value_json)`` rows in ONE transaction."""
        if not self.enabled or not rows:
            return
        now = time.time()
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO calls (key, op, backend, value, created) VALUES (?, ?, ?, ?, ?)",
                    [(k, op, ident, value, now) for k, op, ident, value in rows],
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def __len__(self) -> int:
        if not self.enabled:
            return 0
        with self._lock:
            return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@dataclasses.dataclass
class CacheStats:
    """Counts shared by a ``CachedBackend`` and its ``with_template`` views."""

    calls: int = 0  # items forwarded to the inner backend
    hits: int = 0  # items answered from the cache
    stored: int = 0  # successful items written


def _is_failure(result: Any) -> bool:
    if getattr(result, "error", None):
        return True
    # Defensive: a "successful" score with NaN probabilities is off-format in all but name.
    # (Bounds in place of probabilities are a result: an option outside an API's top log-probs.)
    return (isinstance(result, OptionScores) and not result.bounds
            and any(math.isnan(p) for p in result.probs.values()))


def _takes_on_results(method: Any) -> bool:
    try:
        return "on_results" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin or a proxy without a signature: batch commits only
        return False


def on_results_kwargs(report: Callable | None) -> dict:
    return {} if report is None else {"on_results": report}


class _TimedCommits:
    """The results of one forwarded call as the inner backend reports them (``report({index in the
    call: result})``), committed once ``commit_seconds`` have passed since the last commit and at the
    end of the call. Each item is stored once; failures never."""

    def __init__(self, owner: CachedBackend, chunk: list[tuple[str, list[int]]], operation: str,
                 ident_json: str) -> None:
        self.owner, self.chunk, self.operation, self.ident_json = owner, chunk, operation, ident_json
        self.seen: set[int] = set()
        self.rows: list[tuple[str, str, str, str]] = []
        self.last = owner.clock()
        self.lock = threading.Lock()  # a backend may report from its worker threads

    def report(self, done: Mapping[int, Any]) -> None:
        with self.lock:
            for j, r in done.items():
                if j in self.seen or r is None:
                    continue
                self.seen.add(j)
                if not _is_failure(r):
                    self.rows.append((self.chunk[j][0], self.operation, self.ident_json, encode_result(r)))
            if self.owner.clock() - self.last >= self.owner.commit_seconds:
                self._commit()

    def commit(self) -> None:
        with self.lock:
            self._commit()

    def _commit(self) -> None:
        self.owner.cache.put_many(self.rows)
        self.owner.stats.stored += len(self.rows)
        self.rows = []
        self.last = self.owner.clock()


class CachedBackend:
    """A ``Backend`` that answers from ``cache`` and forwards only misses to ``inner``.

    ``chunk_size``: forward the misses in calls of at most this many items, each stored in its own
    transaction, so a long API batch that dies half-way keeps its finished chunks (None: one call).
    ``commit_seconds``: where ``inner``'s method takes an ``on_results`` callback, the results it
    reports are also committed whenever this long has passed since the last commit (``clock`` tells
    the time; tests inject one). Attributes the protocol does not cover (e.g. a local backend's
    attention summaries) are delegated to ``inner`` uncached.
    """

    def __init__(self, inner: Backend, cache: ResponseCache, template_version: str = "",
                 *, chunk_size: int | None = None, commit_seconds: float = COMMIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic, _stats: CacheStats | None = None) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size} must be >= 1 (or None for one call)")
        if not commit_seconds > 0:
            raise ValueError(f"commit_seconds={commit_seconds} must be > 0")
        self.inner = inner
        self.cache = cache
        self.template_version = template_version
        self.chunk_size = chunk_size
        self.commit_seconds = commit_seconds
        self.clock = clock
        self.stats = _stats if _stats is not None else CacheStats()
        self.name = inner.name

    @property
    def calls(self) -> int:
        return self.stats.calls

    @property
    def hits(self) -> int:
        return self.stats.hits

    def __getattr__(self, attr: str) -> Any:
        # Only reached for attributes not found normally; guard against recursion while unpickling.
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"CachedBackend({self.inner!r}, {self.cache!r}, template_version={self.template_version!r})"

    def with_template(self, version: str) -> CachedBackend:
        """A view keyed with another prompt-template version (same inner, cache and counters)."""
        return CachedBackend(self.inner, self.cache, version, chunk_size=self.chunk_size,
                             commit_seconds=self.commit_seconds, clock=self.clock, _stats=self.stats)

    def identity(self) -> dict:
        return self.inner.identity()

    def _run(self, operation: str, payloads: list[dict], forward: Callable[..., list]) -> list:
        """``forward(indices, on_results)`` calls the inner backend on ``payloads[indices]``;
        ``on_results`` is None where the inner method takes no such callback."""
        if not self.cache.enabled:  # disabled: everything forwarded, repeats included
            self.stats.calls += len(payloads)
            return list(forward(list(range(len(payloads))), None))
        identity = self.inner.identity()
        keys = [call_key(identity, operation, p, self.template_version) for p in payloads]
        stored = self.cache.get_many(keys)
        results: list = [None] * len(keys)
        misses: dict[str, list[int]] = {}  # key -> positions; a repeated item is forwarded once
        for i, k in enumerate(keys):
            if k in stored:
                results[i] = decode_result(operation, stored[k])
            else:
                misses.setdefault(k, []).append(i)
        self.stats.hits += sum(1 for r in results if r is not None)
        pending = list(misses.items())
        step = self.chunk_size or len(pending) or 1
        ident_json = _canonical(identity)
        streams = _takes_on_results(getattr(self.inner, operation))
        for start in range(0, len(pending), step):
            chunk = pending[start:start + step]
            firsts = [positions[0] for _, positions in chunk]
            self.stats.calls += len(firsts)
            batch = _TimedCommits(self, chunk, operation, ident_json)
            try:
                fresh = forward(firsts, batch.report if streams else None)
            except BaseException:
                batch.commit()  # what the backend reported before it failed or was interrupted
                raise
            if len(fresh) != len(firsts):
                raise RuntimeError(f"{self.inner.name}: {operation} returned {len(fresh)} results for "
                                   f"{len(firsts)} inputs")
            batch.report(dict(enumerate(fresh)))
            batch.commit()  # the rest of the batch, in one transaction
            for (_, positions), r in zip(chunk, fresh, strict=True):
                for i in positions:
                    results[i] = r
            interrupts.check()  # a Ctrl-C stops here, with this batch kept
        return results

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str]) -> list[OptionScores]:
        prompts, options = list(prompts), list(options)
        payloads = [{"prompt": p.key(), "options": options} for p in prompts]
        return self._run("score_options", payloads,
                         lambda idx, report: self.inner.score_options([prompts[i] for i in idx], options,
                                                                      **on_results_kwargs(report)))

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams) -> list[Generation]:
        prompts = list(prompts)
        payloads = [{"prompt": p.key(), "params": params.key()} for p in prompts]
        return self._run("generate", payloads,
                         lambda idx, report: self.inner.generate([prompts[i] for i in idx], params,
                                                                 **on_results_kwargs(report)))

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str]
                              ) -> list[TokenLogprobs]:
        contexts, continuations = list(contexts), list(continuations)
        if len(contexts) != len(continuations):
            raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
        payloads = [{"prompt": c.key(), "continuation": t}
                    for c, t in zip(contexts, continuations, strict=True)]
        return self._run("continuation_logprobs", payloads,
                         lambda idx, report: self.inner.continuation_logprobs(
                             [contexts[i] for i in idx], [continuations[i] for i in idx],
                             **on_results_kwargs(report)))
