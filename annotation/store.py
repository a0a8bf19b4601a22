"""The labels ledger, kept WITH the experiment (a SQLite file next to its judgment table).

It holds what was pushed (pair key -> task, and whether the two responses were shown swapped) and
every annotation pulled, in ORIGINAL pair terms (a / b / tie). Annotations are upserted by their
server id and the latest ``updated_at`` wins, so pulling twice, or pulling an annotation edited
since, never counts a label twice. The ledger is the only state: a server that is down or deleted
leaves it intact, and the next pull catches up. Writes are single transactions.

Pairs with byte-identical texts (``judgebias.annotation.keys.content_key``) share one task: each keeps its own
row in ``tasks`` (its pair key, its draw) with the task id of the first, and an annotation of that
task is stored once and read back as a label of every pair that shares the task.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

SCHEMA_VERSION = 4
# Version 1 ledgers lack the design tables; opening one adds them (its tasks stay "hand-picked").
# Versions 1-2 lack ``labels.both_bad``; opening one adds it (0: nobody could say so then).
# Versions 1-3 hold one pair per task and no ``tasks.content_key``; opening one adds the column (NULL:
# those tasks are not matched as twins) and drops the index that made a task id unique.
_UPGRADABLE = {1, 2, 3}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    pair_key   TEXT PRIMARY KEY,
    pair_id    TEXT NOT NULL,
    project_id INTEGER NOT NULL,
    task_id    INTEGER NOT NULL,
    swapped    INTEGER NOT NULL,
    server_url TEXT NOT NULL,
    pushed_at  TEXT NOT NULL,
    content_key TEXT  -- pairs with the same texts share a task (NULL: pushed before version 4)
);
CREATE INDEX IF NOT EXISTS tasks_by_server_task ON tasks (server_url, task_id);
CREATE TABLE IF NOT EXISTS labels (
    annotation_id INTEGER NOT NULL,
    server_url    TEXT NOT NULL,
    task_id       INTEGER NOT NULL,
    pair_key      TEXT NOT NULL REFERENCES tasks (pair_key),
    pair_id       TEXT NOT NULL,
    annotator     TEXT NOT NULL,
    label         TEXT CHECK (label IN ('a', 'b', 'tie')),
    skipped       INTEGER NOT NULL,
    reason        TEXT,
    updated_at    TEXT NOT NULL,
    pulled_at     TEXT NOT NULL,
    deleted       INTEGER NOT NULL DEFAULT 0,
    both_bad      INTEGER NOT NULL DEFAULT 0,  -- a tie the annotator marked "both bad"
    PRIMARY KEY (server_url, annotation_id)
);
CREATE TABLE IF NOT EXISTS batches (
    batch      INTEGER PRIMARY KEY,
    design     TEXT NOT NULL,
    population TEXT NOT NULL,
    seed       INTEGER NOT NULL,
    budget     REAL NOT NULL,
    params     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS draws (
    batch    INTEGER NOT NULL REFERENCES batches (batch),
    pair_key TEXT NOT NULL,
    pair_id  TEXT NOT NULL,
    stratum  TEXT NOT NULL,
    pi       REAL NOT NULL CHECK (pi > 0 AND pi <= 1),
    selected INTEGER NOT NULL,
    PRIMARY KEY (batch, pair_key)
);
"""


def default_ledger_path(table_path: str | Path) -> Path:
    """``results/judgments.jsonl`` -> ``results/judgments.labels.sqlite``."""
    table_path = Path(table_path)
    return table_path.with_name(table_path.name.split(".")[0] + ".labels.sqlite")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class PushedTask:
    pair_key: str
    pair_id: str
    project_id: int
    task_id: int
    swapped: bool
    server_url: str
    pushed_at: str = ""
    content_key: str | None = None


@dataclass(frozen=True)
class Label:
    """One annotation in original pair terms; ``label`` is None for a skipped (cancelled) annotation."""

    annotation_id: int
    server_url: str
    task_id: int
    pair_key: str
    pair_id: str
    annotator: str
    label: str | None
    skipped: bool
    reason: str | None
    updated_at: str
    both_bad: bool = False  # label "tie", chosen as "both bad": neither response is acceptable


# Deliberate parallel: shaped like selection.Weights (a frozen record of defaulted numbers).
@dataclass(frozen=True)
class UpsertCounts:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Ledger:
    """A SQLite ledger file. Open per operation; safe to keep in the experiment folder under git-lfs/DVC."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as con, con:
            con.executescript(_SCHEMA)
            con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            (version,) = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if int(version) in _UPGRADABLE:
                columns = {r[1] for r in con.execute("PRAGMA table_info(labels)")}
                if "both_bad" not in columns:
                    con.execute("ALTER TABLE labels ADD COLUMN both_bad INTEGER NOT NULL DEFAULT 0")
                if "content_key" not in {r[1] for r in con.execute("PRAGMA table_info(tasks)")}:
                    con.execute("ALTER TABLE tasks ADD COLUMN content_key TEXT")
                con.execute("DROP INDEX IF EXISTS tasks_by_task")
                con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                version = SCHEMA_VERSION
        if int(version) != SCHEMA_VERSION:
            raise ValueError(f"{self.path}: ledger schema {version}, this judgebias reads {SCHEMA_VERSION}")

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock on this ledger (a ``.lock`` file beside it) while a batch is drawn and
        pushed: two concurrent pushes would otherwise both create the project and both draw."""
        import fcntl

        with open(self.path.with_name(self.path.name + ".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open the labels ledger {self.path}: {exc}") from exc
        con.row_factory = sqlite3.Row
        return con

    # -- pushed tasks -------------------------------------------------------------------------------
    def pushed_keys(self) -> set[str]:
        with closing(self._connect()) as con:
            return {r[0] for r in con.execute("SELECT pair_key FROM tasks")}

    def record_tasks(self, tasks: Iterable[PushedTask]) -> int:
        """Insert pushed tasks; a key already present keeps its first record (the swap must not change)."""
        now = _now()
        rows = [
            (t.pair_key, t.pair_id, t.project_id, t.task_id, int(t.swapped), t.server_url, t.pushed_at or now,
             t.content_key)
            for t in tasks
        ]
        with closing(self._connect()) as con, con:
            before = con.total_changes
            con.executemany(
                "INSERT OR IGNORE INTO tasks (pair_key, pair_id, project_id, task_id, swapped, server_url, "
                "pushed_at, content_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            return con.total_changes - before

    def tasks(self) -> pd.DataFrame:
        with closing(self._connect()) as con:
            df = pd.read_sql_query("SELECT * FROM tasks ORDER BY pushed_at, pair_key", con)
        df["swapped"] = df["swapped"].astype(bool)
        return df

    @staticmethod
    def _task(r: sqlite3.Row) -> PushedTask:
        return PushedTask(r["pair_key"], r["pair_id"], r["project_id"], r["task_id"], bool(r["swapped"]),
                          r["server_url"], r["pushed_at"], r["content_key"])

    def task_index(self, server_url: str) -> dict[int, list[PushedTask]]:
        """Task id -> the pairs it stands for (several when their texts are identical), first pushed first."""
        with closing(self._connect()) as con:
            rows = con.execute("SELECT * FROM tasks WHERE server_url = ? ORDER BY pushed_at, rowid",
                               (server_url,)).fetchall()
        index: dict[int, list[PushedTask]] = {}
        for r in rows:
            index.setdefault(r["task_id"], []).append(self._task(r))
        return index

    def tasks_by_content(self, server_url: str) -> dict[str, PushedTask]:
        """Content key -> the first task pushed with those texts on this server (the one to share)."""
        out: dict[str, PushedTask] = {}
        for tasks in self.task_index(server_url).values():
            for t in tasks:
                if t.content_key is not None:
                    out.setdefault(t.content_key, tasks[0])
        return out

    # -- probability design ------------------------------------------------------------------------
    def record_batch(self, *, design: str, population: str, seed: int, budget: float,
                     params: dict, draws: pd.DataFrame) -> int:
        """Record one batch: its design and EVERY pair it could have drawn (pair_id index, pair_key,
        stratum, pi, selected), before anything is pushed, in one transaction. Returns the batch."""
        with closing(self._connect()) as con, con:
            (last,) = con.execute("SELECT COALESCE(MAX(batch), 0) FROM batches").fetchone()
            batch = int(last) + 1
            con.execute("INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (batch, design, population, int(seed), float(budget),
                         json.dumps(params, sort_keys=True), _now()))
            con.executemany(
                "INSERT INTO draws VALUES (?, ?, ?, ?, ?, ?)",
                [(batch, r.pair_key, str(pid), str(r.stratum), float(r.pi), int(bool(r.selected)))
                 for pid, r in zip(draws.index, draws.itertuples(index=False), strict=True)])
        return batch

    def batches(self) -> pd.DataFrame:
        with closing(self._connect()) as con:
            return pd.read_sql_query("SELECT * FROM batches ORDER BY batch", con)

    def draws(self) -> pd.DataFrame:
        """Every recorded draw with its batch's design: batch, design, population, pair_key, pair_id,
        stratum, pi, selected."""
        with closing(self._connect()) as con:
            df = pd.read_sql_query(
                "SELECT d.batch, b.design, b.population, d.pair_key, d.pair_id, d.stratum, d.pi, d.selected "
                "FROM draws d JOIN batches b USING (batch) ORDER BY d.batch, d.pair_key", con)
        df["selected"] = df["selected"].astype(bool)
        return df

    # -- labels -------------------------------------------------------------------------------------
    def upsert_labels(
        self,
        labels: Iterable[Label],
        *,
        seen_tasks: Iterable[int] | None = None,
        server_url: str | None = None,
    ) -> UpsertCounts:
        """Upsert by (server, annotation id); the newer ``updated_at`` wins. When ``seen_tasks`` is given
        (a full export of those tasks), annotations of those tasks missing from ``labels`` were deleted
        on the server and are marked deleted (kept for audit, no longer counted)."""
        labels = list(labels)
        now = _now()
        new = updated = unchanged = deleted = 0
        with closing(self._connect()) as con, con:
            for lab in labels:
                row = con.execute(
                    "SELECT updated_at, label, skipped, reason, deleted, both_bad FROM labels "
                    "WHERE server_url = ? AND annotation_id = ?",
                    (lab.server_url, lab.annotation_id),
                ).fetchone()
                values = (
                    lab.task_id,
                    lab.pair_key,
                    lab.pair_id,
                    lab.annotator,
                    lab.label,
                    int(lab.skipped),
                    lab.reason,
                    lab.updated_at,
                    now,
                )
                if row is None:
                    con.execute(
                        "INSERT INTO labels (annotation_id, server_url, task_id, pair_key, pair_id, "
                        "annotator, label, skipped, reason, updated_at, pulled_at, both_bad) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (lab.annotation_id, lab.server_url, *values, int(lab.both_bad)),
                    )
                    new += 1
                elif lab.updated_at > row["updated_at"] or row["deleted"]:
                    con.execute(
                        "UPDATE labels SET task_id = ?, pair_key = ?, pair_id = ?, annotator = ?, "
                        "label = ?, skipped = ?, reason = ?, updated_at = ?, pulled_at = ?, deleted = 0, "
                        "both_bad = ? WHERE server_url = ? AND annotation_id = ?",
                        (*values, int(lab.both_bad), lab.server_url, lab.annotation_id),
                    )
                    updated += 1
                else:
                    unchanged += 1
            if seen_tasks is not None:
                if server_url is None:
                    raise ValueError("server_url is required with seen_tasks")
                present = {lab.annotation_id for lab in labels}
                for task_id in set(seen_tasks):
                    for r in con.execute(
                        "SELECT annotation_id FROM labels WHERE server_url = ? AND task_id = ? "
                        "AND deleted = 0",
                        (server_url, task_id),
                    ).fetchall():
                        if r[0] not in present:
                            con.execute(
                                "UPDATE labels SET deleted = 1, pulled_at = ? WHERE server_url = ? "
                                "AND annotation_id = ?",
                                (now, server_url, r[0]),
                            )
                            deleted += 1
        return UpsertCounts(new, updated, unchanged, deleted)

    def labels(self, *, include_skipped: bool = False, include_deleted: bool = False) -> pd.DataFrame:
        """Current labels, one row per annotation, ordered by pair then annotator."""
        where = []
        if not include_skipped:
            where.append("skipped = 0")
        if not include_deleted:
            where.append("deleted = 0")
        # One row per (annotation, pair the task stands for): a twin pushed later gets the labels its
        # task already has. ``pair_key``/``pair_id`` are the task's pairs; the stored ones are the first.
        sql = ("SELECT l.annotation_id, l.server_url, l.task_id, "
               "COALESCE(t.pair_key, l.pair_key) AS pair_key, COALESCE(t.pair_id, l.pair_id) AS pair_id, "
               "l.annotator, l.label, l.skipped, l.reason, "
               "l.updated_at, l.pulled_at, l.deleted, l.both_bad FROM labels l LEFT JOIN tasks t "
               "ON t.server_url = l.server_url AND t.task_id = l.task_id")
        if where:
            sql += " WHERE " + " AND ".join(f"l.{w}" for w in where)
        with closing(self._connect()) as con:
            df = pd.read_sql_query(sql + " ORDER BY pair_id, annotator, annotation_id", con)
        for col in ("skipped", "deleted"):
            df[col] = df[col].astype(bool)
        for col in ("label", "reason"):  # SQL NULL as None, not NaN, like everywhere else in a table
            df[col] = df[col].astype(object).where(df[col].notna(), None)
        return df

    def status(self) -> dict:
        """Counts for ``judgebias annotate status``: pairs pushed / labelled / pending, the tasks they
        share, annotations (each counted once however many pairs its task stands for), per annotator."""
        tasks = self.tasks()
        expanded = self.labels(include_skipped=True)
        labelled_keys = set(expanded.loc[~expanded["skipped"], "pair_key"])
        labels = expanded.drop_duplicates(["server_url", "annotation_id"])
        per_annotator = {}
        for who, g in labels.groupby("annotator"):
            per_annotator[str(who)] = {
                "labelled": int((~g["skipped"]).sum()),
                "skipped": int(g["skipped"].sum()),
                "both_bad": int(g["both_bad"].astype(bool).sum()),
            }
        return {
            "pushed": len(tasks),
            "tasks": int(tasks[["server_url", "task_id"]].drop_duplicates().shape[0]),
            "labelled": len(labelled_keys & set(tasks["pair_key"])),
            "pending": len(set(tasks["pair_key"]) - labelled_keys),
            "labels": int((~labels["skipped"]).sum()),
            "skipped": int(labels["skipped"].sum()),
            "both_bad": int((labels["both_bad"].astype(bool) & ~labels["skipped"]).sum()),
            "per_annotator": per_annotator,
        }
