"""The store of the model-call cache: what a key is, what a value is, where they live.

A call's key is the sha256 of the canonical JSON of everything that determines its output: the
backend's ``identity()`` (kind, model id and revision or weights hash, endpoint), the operation,
the full prompt content, the options or continuation, the decoding parameters and the prompt
template version. Retries, timeouts, concurrency and API keys never enter the key: they change how
a result is obtained, not what it is.

Storage is one SQLite file in WAL mode under ``JUDGEBIAS_CACHE_DIR`` (default
``~/.cache/judgebias/calls``), outside the package; several processes (Dask workers) can share the
file because SQLite serializes writers and waits ``busy_timeout`` for the lock. The backend that
uses it is ``judgebias.backends.call_cache.CachedBackend``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgebias.backends.protocol import Generation, OptionScores, TokenLogprobs
from judgebias.runs.diskfull import naming_full_disk

ENV_CACHE_DIR = "JUDGEBIAS_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/judgebias/calls")
DB_NAME = "calls.sqlite"
# Bump when the stored value format or the key layout changes: old entries then simply miss.
KEY_SCHEMA = 1

OPERATIONS = ("score_options", "generate", "continuation_logprobs")
_RESULT_TYPES: dict[str, type] = {
    "score_options": OptionScores,
    "generate": Generation,
    "continuation_logprobs": TokenLogprobs,
}


def default_cache_dir() -> Path:
    """``$JUDGEBIAS_CACHE_DIR`` or ``~/.cache/judgebias/calls``."""
    return Path(os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR).expanduser()


def canonical(obj: Any) -> str:
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
    return hashlib.sha256(canonical(doc).encode("utf-8")).hexdigest()


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
            with naming_full_disk(self.path):  # SQLite says only "disk I/O error" on a full disk
                conn = self._open()
            self._conn = conn
        return self._conn

    def _open(self) -> sqlite3.Connection:
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
        return conn

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
        with self._lock, naming_full_disk(self.path):
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
