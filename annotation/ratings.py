"""Human ratings of single responses in Label Studio: the pointwise counterpart of the pairwise tasks.

An annotator sees the prompt, ONE response and the rubric, and picks a rating on the table's scale
(a ``Choices`` control with one choice per score, so a 0-5 or 1-10 scale reads the same). The task's
``data`` holds only what is shown plus the opaque item key, and nothing else goes to the server: the
item id, its inclusion probability and the judges' scores stay in the ledger and the table, so no
score or judge name can anchor a rater (Label Studio's Data Manager can list a task's meta).

The ledger (``judgebias.annotation.store``) keeps the design and the pushed tasks as it does for pairs (an
item's unit id in ``pair_id``, its key in ``pair_key``); ratings go to their own ``ratings`` table
of the same file, upserted by annotation id with the newest edit winning, as labels are.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import pandas as pd

from judgebias.annotation.labelstudio import (
    DEFAULT_MAX_ANNOTATIONS,
    LabelStudioClient,
    LabelStudioError,
    PullResult,
    PushResult,
    ServerSettings,
    canonical_time,
)
from judgebias.annotation.markup import markdown_html, with_style
from judgebias.annotation.store import Ledger, PushedTask, UpsertCounts
from judgebias.tables.pairwise import Exclusions

RATING_FIELD, REASON_FIELD = "rating", "reason"
RATING_INSTRUCTIONS = (
    "<p>Read the prompt and the response, then rate the response on the scale shown, following the "
    "rubric under it.</p><ul><li>Judge the content: correct, helpful, following the instructions it "
    "was given. Do not reward length or formatting for themselves.</li><li>Use the whole scale; the "
    "reason is optional and is saved with your rating.</li></ul>"
    "<p>Your ratings are used to measure how far an automatic judge's scores can be trusted.</p>"
)
_RATINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS ratings (
    annotation_id INTEGER NOT NULL,
    server_url    TEXT NOT NULL,
    task_id       INTEGER NOT NULL,
    item_key      TEXT NOT NULL,
    unit_id       TEXT NOT NULL,
    annotator     TEXT NOT NULL,
    rating        REAL,
    skipped       INTEGER NOT NULL,
    reason        TEXT,
    updated_at    TEXT NOT NULL,
    pulled_at     TEXT NOT NULL,
    deleted       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (server_url, annotation_id)
);
"""


def item_key(unit_id: str, prompt: str, response: str, rubric: str) -> str:
    """A hash of the unit id AND the texts shown: edited texts make a new task, and the key is opaque
    (item ids of real data sets often name the generator)."""
    digest = hashlib.sha256("\x1f".join((unit_id, prompt, response, rubric)).encode("utf-8")).hexdigest()
    return "ik-" + digest[:24]


def rating_config(scale_min: int, scale_max: int) -> str:
    """The labelling config with one choice per score; digit hotkeys where the scale fits 0-9."""
    if not (isinstance(scale_min, int) and isinstance(scale_max, int)) or scale_min >= scale_max:
        raise ValueError(f"a rating scale needs integers scale_min < scale_max, got "
                         f"{scale_min!r}..{scale_max!r}")
    if scale_max - scale_min > 20:
        raise ValueError(f"scale {scale_min}..{scale_max} has more than 21 points: too many choices to show")
    keys = scale_min >= 0 and scale_max <= 9
    choices = "\n".join(
        f'    <Choice value="{k}"' + (f' hotkey="{k}"' if keys else "") + "/>"
        for k in range(scale_min, scale_max + 1))
    text = resources.files("judgebias.annotation").joinpath("rating_config.xml").read_text(encoding="utf-8")
    return with_style(text.replace("<!-- CHOICES -->", choices))


def default_rubric(criterion: str, scale_min: int, scale_max: int) -> str:
    """What the rater reads when no rubric is given: the criterion scored and the scale's ends."""
    what = criterion.strip() or "overall quality"
    return f"Rate the response's {what} from {scale_min} (worst) to {scale_max} (best)."


@dataclass(frozen=True)
class Rating:
    """One annotation of a rating task; ``rating`` is None for a skipped (cancelled) annotation."""

    annotation_id: int
    server_url: str
    task_id: int
    item_key: str
    unit_id: str
    annotator: str
    rating: float | None
    skipped: bool
    reason: str | None
    updated_at: str


def parse_rating(ann: dict, task: PushedTask, scale: tuple[int, int]) -> Rating:
    """One exported annotation -> a rating (a ValueError for a value off the scale). Pure."""
    who = ann.get("completed_by")
    if isinstance(who, dict):
        who = who.get("id", who.get("email"))
    rating = reason = None
    for item in ann.get("result") or []:
        value = item.get("value") or {}
        if item.get("from_name") == RATING_FIELD:
            choices = value.get("choices") or []
            if len(choices) > 1:  # the config offers one choice per item: a hand-edited one does not
                raise ValueError(f"several ratings {choices!r} for one item (the config offers one)")
            raw = choices[0] if choices else value.get("rating")
            if raw is not None:
                try:
                    rating = float(raw)
                except (TypeError, ValueError):
                    rating = math.nan
                if not (math.isfinite(rating) and scale[0] <= rating <= scale[1] and rating == int(rating)):
                    raise ValueError(f"rating {raw!r} is not one the config offers "
                                     f"({scale[0]}..{scale[1]})")
        elif item.get("from_name") == REASON_FIELD and value.get("text"):
            text = value["text"]
            reason = "\n".join(text) if isinstance(text, list) else str(text)
    skipped = bool(ann.get("was_cancelled")) or rating is None
    return Rating(int(ann["id"]), task.server_url, task.task_id, task.pair_key, task.pair_id,
                  f"ls-user-{who}", None if skipped else rating, skipped, reason,
                  canonical_time(ann.get("updated_at") or ann.get("created_at")))


# -- the ratings table of the ledger ---------------------------------------------------------------
def _connect(ledger: Ledger):
    con = ledger._connect()
    con.executescript(_RATINGS_SCHEMA)
    return con


def upsert_ratings(ledger: Ledger, ratings: Iterable[Rating], *, seen_tasks: Iterable[int],
                   server_url: str) -> UpsertCounts:
    """Upsert by (server, annotation id), the newer ``updated_at`` winning; annotations of the tasks
    in ``seen_tasks`` (a full export of them) that the export lacks were deleted: marked, not counted."""
    ratings = list(ratings)
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    new = updated = unchanged = deleted = 0
    with closing(_connect(ledger)) as con, con:
        for r in ratings:
            row = con.execute("SELECT updated_at, deleted FROM ratings WHERE server_url = ? AND "
                              "annotation_id = ?", (r.server_url, r.annotation_id)).fetchone()
            values = (r.task_id, r.item_key, r.unit_id, r.annotator, r.rating, int(r.skipped), r.reason,
                      r.updated_at, now)
            if row is None:
                con.execute("INSERT INTO ratings (annotation_id, server_url, task_id, item_key, unit_id, "
                            "annotator, rating, skipped, reason, updated_at, pulled_at) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (r.annotation_id, r.server_url, *values))
                new += 1
            elif r.updated_at > row["updated_at"] or row["deleted"]:
                con.execute("UPDATE ratings SET task_id = ?, item_key = ?, unit_id = ?, annotator = ?, "
                            "rating = ?, skipped = ?, reason = ?, updated_at = ?, pulled_at = ?, deleted = 0 "
                            "WHERE server_url = ? AND annotation_id = ?", (*values, r.server_url,
                                                                          r.annotation_id))
                updated += 1
            else:
                unchanged += 1
        present = {r.annotation_id for r in ratings}
        for task_id in set(seen_tasks):
            for (aid,) in con.execute("SELECT annotation_id FROM ratings WHERE server_url = ? AND "
                                      "task_id = ? AND deleted = 0", (server_url, task_id)).fetchall():
                if aid not in present:
                    con.execute("UPDATE ratings SET deleted = 1, pulled_at = ? WHERE server_url = ? AND "
                                "annotation_id = ?", (now, server_url, aid))
                    deleted += 1
    return UpsertCounts(new, updated, unchanged, deleted)


def live_ratings(ledger: Ledger) -> pd.DataFrame:
    """The rating of each (unit, annotator) that counts: the latest edit, skips and deletions left out."""
    with closing(_connect(ledger)) as con:
        df = pd.read_sql_query("SELECT * FROM ratings WHERE skipped = 0 AND deleted = 0 "
                               "ORDER BY unit_id, annotator, updated_at, annotation_id", con)
    return df.drop_duplicates(["item_key", "annotator"], keep="last").reset_index(drop=True)


def rating_status(ledger: Ledger) -> dict[str, Any]:
    tasks = ledger.tasks()
    with closing(_connect(ledger)) as con:
        all_ = pd.read_sql_query("SELECT * FROM ratings WHERE deleted = 0", con)
    live = live_ratings(ledger)
    rated = set(live["item_key"])
    return {"pushed": len(tasks), "labelled": len(rated & set(tasks["pair_key"])),
            "pending": len(set(tasks["pair_key"]) - rated), "labels": len(live),
            "skipped": int(all_["skipped"].astype(bool).sum())}


# -- the client -------------------------------------------------------------------------------------
class RatingClient(LabelStudioClient):
    """A Label Studio client whose projects rate one response on ``scale``."""

    control = RATING_FIELD
    description = "judgebias pointwise rating: how good is this response?"
    instructions = RATING_INSTRUCTIONS

    def __init__(self, settings: ServerSettings, scale: tuple[int, int], **kw):
        super().__init__(settings, **kw)
        self.scale = (int(scale[0]), int(scale[1]))

    def label_config(self) -> str:
        return rating_config(*self.scale)

    def push(self, chosen: pd.DataFrame, ledger: Ledger, *, project_title: str, seed: int = 0,
             max_annotations: int = DEFAULT_MAX_ANNOTATIONS) -> PushResult:
        """Push rating tasks for ``chosen`` (unit_id, item_key, prompt, response, rubric, item_id, pi,
        judge_scores). Keys already in the ledger are skipped; tasks already on the server with a key
        the ledger lacks (an interrupted push) are adopted, not created again."""
        project_id = self.ensure_project(project_title, max_annotations=max_annotations)
        todo = chosen[~chosen["item_key"].isin(ledger.pushed_keys())]
        already = len(chosen) - len(todo)
        keys = set(todo["item_key"])
        adopted = [PushedTask(t.data["pair_key"], str(row.unit_id), project_id, int(t.id), False, self.url)
                   for t in self._server_tasks(project_id)
                   if (t.data or {}).get("pair_key") in keys
                   for row in todo[todo["item_key"] == t.data["pair_key"]].itertuples()]
        ledger.record_tasks(adopted)
        rows = todo[~todo["item_key"].isin({t.pair_key for t in adopted})]
        task_ids: list[int] = []
        if len(rows):
            # Only what is shown and the opaque key, as for pairs: Label Studio's Data Manager can list
            # a task's meta, and a judge's score (or name) there could anchor a rater.
            # The raw texts and, shown by the config, their markdown made readable and inert.
            payload = [{"data": {"prompt": r.prompt, "response": r.response, "rubric": r.rubric,
                                 "pair_key": r.item_key,
                                 **{f"{k}_html": markdown_html(getattr(r, k))
                                    for k in ("prompt", "response", "rubric")}}}
                       for r in rows.itertuples()]
            self._call("importing tasks", self._ls.projects.import_tasks, id=project_id, request=payload)
            on_server = self._oldest_tasks(project_id, set(rows["item_key"]))
            recorded = [PushedTask(r.item_key, str(r.unit_id), project_id, int(on_server[r.item_key].id),
                                   False, self.url) for r in rows.itertuples() if r.item_key in on_server]
            ledger.record_tasks(recorded)
            task_ids = [t.task_id for t in recorded]
            if len(recorded) < len(rows):
                raise LabelStudioError(f"Label Studio at {self.url} did not create "
                                       f"{len(rows) - len(recorded)} of the rating tasks; the others are "
                                       "recorded, run push again")
        return PushResult(project_id, len(rows), already, len(adopted), task_ids)

    def pull_ratings(self, ledger: Ledger) -> PullResult:
        """Export every project this ledger pushed to here and upsert its ratings (all annotators,
        skips and edits; the whole export is read before the ledger is touched)."""
        index = ledger.task_index(self.url)
        projects = sorted({t.project_id for tasks in index.values() for t in tasks})
        exported = [self.export(pid) for pid in projects]
        ratings: list[Rating] = []
        seen: list[int] = []
        unknown = 0
        excluded = Exclusions()
        for tasks in exported:
            for task in tasks:
                key = (task.get("data") or {}).get("pair_key")
                pushed = next((t for t in index.get(int(task["id"]), []) if t.pair_key == key), None)
                if pushed is None:
                    unknown += 1
                    continue
                seen.append(pushed.task_id)
                for ann in task.get("annotations") or []:
                    try:
                        ratings.append(parse_rating(ann, pushed, self.scale))
                    except (ValueError, KeyError, TypeError) as exc:
                        excluded.add("unreadable_annotation", example=f"annotation {ann.get('id')}: {exc}")
        counts = upsert_ratings(ledger, ratings, seen_tasks=seen, server_url=self.url)
        return PullResult(projects=projects, tasks_seen=len(seen), counts=counts, unknown_tasks=unknown,
                          exclusions=excluded)


def judge_scores_by_unit(table: pd.DataFrame, units: pd.Series) -> Mapping[str, dict[str, float]]:
    """Per unit id, each judge's score (what a task's meta carries)."""
    out: dict[str, dict[str, float]] = {}
    for unit, judge, score in zip(units, table["judge"], table["score"], strict=True):
        if judge and score == score:
            out.setdefault(str(unit), {})[str(judge)] = float(score)
    return out
