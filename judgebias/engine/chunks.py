"""Work cut into chunks with stable, content-derived ids, and put back together.

``shard`` (pairs) and ``shard_prompts`` (generation prompts) cut the work; ``merge`` /
``merge_aligned`` put each chunk's results back in the original order and check that every chunk
came back complete; ``ChunkStore`` keeps finished chunks so a rerun skips them. Where a chunk runs
(a thread, a Dask worker, another machine) is decided by the flow (``flows/runtime/task_runners.py``); what
runs is ``judgebias.engine.workers``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judgebias.backends.protocol import Prompt
from judgebias.tables.records import Pair

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
