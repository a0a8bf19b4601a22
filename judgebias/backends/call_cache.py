"""The content-addressed cache of model calls, as a backend (``CachedBackend``): it looks up all items
of a batch in the store (``judgebias.backends.call_store``: what a key holds and where it lives),
forwards only the misses to the inner backend in one batched call and returns results in input
order. Failed items (``error`` set, including off-format answers) are never stored, so a rerun
retries exactly them. Each backend call batch is one transaction, so a run killed half-way keeps
every batch it finished; a backend that reports results as it finishes them (an ``on_results``
keyword: the local and OpenAI-compatible backends) is also committed every ``commit_seconds``
within a batch, so a kill loses seconds of work, not a batch (64 prompts were about 35 s of CPU work).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from judgebias.backends.call_store import (  # noqa: F401  (the cache's public names, also here)
    DB_NAME,
    DEFAULT_CACHE_DIR,
    ENV_CACHE_DIR,
    KEY_SCHEMA,
    OPERATIONS,
    ResponseCache,
    call_key,
    canonical,
    decode_result,
    default_cache_dir,
    encode_result,
)
from judgebias.backends.protocol import (
    Backend,
    Generation,
    GenerationParams,
    OptionScores,
    Prompt,
    TokenLogprobs,
)
from judgebias.runs import interrupts

# Within a backend call, results reported so far are committed once this many seconds have passed.
COMMIT_SECONDS = 5.0


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
        ident_json = canonical(identity)
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

    def missing(self, operation: str, payloads: Sequence[dict]) -> list[int]:
        """The positions of ``payloads`` a call would forward to the inner backend (not in the
        cache; a repeated item once), without calling it: what a run still has to pay for."""
        if not self.cache.enabled:
            return list(range(len(payloads)))
        identity = self.inner.identity()
        keys = [call_key(identity, operation, p, self.template_version) for p in payloads]
        stored = self.cache.get_many(keys)
        seen: set[str] = set()
        out = []
        for i, k in enumerate(keys):
            if k not in stored and k not in seen:
                seen.add(k)
                out.append(i)
        return out

    @staticmethod
    def score_payloads(prompts: Sequence[Prompt], options: Sequence[str]) -> list[dict]:
        return [{"prompt": p.key(), "options": list(options)} for p in prompts]

    @staticmethod
    def generate_payloads(prompts: Sequence[Prompt], params: GenerationParams) -> list[dict]:
        return [{"prompt": p.key(), "params": params.key()} for p in prompts]

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str]) -> list[OptionScores]:
        prompts, options = list(prompts), list(options)
        payloads = self.score_payloads(prompts, options)
        return self._run("score_options", payloads,
                         lambda idx, report: self.inner.score_options([prompts[i] for i in idx], options,
                                                                      **on_results_kwargs(report)))

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams) -> list[Generation]:
        prompts = list(prompts)
        payloads = self.generate_payloads(prompts, params)
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
