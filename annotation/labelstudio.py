"""Label Studio client: push chosen pairs as blind pairwise tasks, pull annotations back into the ledger.

Annotators see the prompt and two responses, never the generators or judges; each pair is shown in
a seeded random left/right order stored in the ledger, so a choice maps back to the original A/B.
Everything that talks to the server goes through ``_call``, which turns transport failures into a
``LabelStudioError`` naming the URL (never the API key). The SDK is imported lazily.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from judgebias.annotation.keys import content_key
from judgebias.annotation.keys import swapped as seeded_swap
from judgebias.annotation.pairwise_tasks import (  # noqa: F401  (also this module's public names)
    CHOICE_FIELD,
    INSTRUCTIONS,
    REASON_FIELD,
    canonical_time,
    labeling_config,
    parse_annotation,
    shown_to_original,
    task_data,
)
from judgebias.annotation.store import Label, Ledger, PushedTask, UpsertCounts
from judgebias.redaction import redact_uri
from judgebias.tables.pairwise import Exclusions

DEFAULT_MAX_ANNOTATIONS = 3
URL_ENV, KEY_ENV = "LABEL_STUDIO_URL", "LABEL_STUDIO_API_KEY"


class LabelStudioError(RuntimeError):
    """The server could not be reached or refused a request; the message names the URL."""


TITLE_MIN, TITLE_MAX = 3, 50  # Label Studio's PROJECT_TITLE_MIN_LEN / PROJECT_TITLE_MAX_LEN


def project_title(title: str) -> str:
    """The project title as it is sent and matched (surrounding spaces dropped, as Label Studio's API
    drops them), or a ValueError for one Label Studio would refuse, so a push can say so before it
    records a batch."""
    cleaned = title.strip()
    if not TITLE_MIN <= len(cleaned) <= TITLE_MAX:
        raise ValueError(
            f"project title {cleaned[:TITLE_MAX + 10]!r} is too "
            f"{'short' if len(cleaned) < TITLE_MIN else 'long'}"
            f" ({len(cleaned)} characters): Label Studio takes {TITLE_MIN} to {TITLE_MAX} (--project-title)"
        )
    return cleaned


@dataclass(frozen=True)
class ServerSettings:
    url: str
    api_key: str = field(repr=False)

    @classmethod
    def from_env(cls, url: str | None = None, api_key: str | None = None) -> ServerSettings:
        url = url or os.environ.get(URL_ENV, "")
        api_key = api_key or os.environ.get(KEY_ENV, "")
        missing = [name for name, v in ((URL_ENV, url), (KEY_ENV, api_key)) if not v]
        if missing:
            raise LabelStudioError(
                f"{' and '.join(missing)} not set: export {URL_ENV}=http://127.0.0.1:8080 and "
                f"{KEY_ENV}=<token> "
                "(scripts/labelstudio_start.sh writes both to <data dir>/labelstudio.env; `source` that file)"
            )
        return cls(url=url.rstrip("/"), api_key=api_key)


@dataclass
class PushResult:
    project_id: int
    pushed: int
    already_in_ledger: int
    adopted_from_server: int
    task_ids: list[int] = field(default_factory=list)
    shared: int = 0  # pairs recorded on the task of a pair with the same texts (no new task)


@dataclass
class PullResult:
    projects: list[int]
    tasks_seen: int
    counts: UpsertCounts
    unknown_tasks: int = 0
    exclusions: Exclusions = field(default_factory=Exclusions)


class LabelStudioClient:
    # What a project of this client is made with and recognised by (``judgebias.annotation.ratings`` rates).
    control = CHOICE_FIELD
    description = "judgebias pairwise preference: which response is better?"
    instructions = INSTRUCTIONS

    def label_config(self) -> str:
        return labeling_config()

    def __init__(self, settings: ServerSettings, *, timeout: float = 30.0, max_retries: int = 1):
        from label_studio_sdk import LabelStudio

        self.settings = settings
        # What is shown and recorded (messages, the ledger's server column, MLflow params): the URL
        # without a password a user may have put in it; only the SDK gets the URL as given.
        self.url = redact_uri(settings.url)
        self._ls = LabelStudio(
            base_url=settings.url, api_key=settings.api_key, timeout=timeout, max_retries=max_retries
        )

    def __repr__(self) -> str:
        return f"LabelStudioClient(url={self.url!r})"

    def _call(self, what: str, fn: Callable, *args, **kwargs):
        import httpx
        from label_studio_sdk.core.api_error import ApiError

        try:
            return fn(*args, **kwargs)
        except (httpx.TransportError, ConnectionError) as exc:
            raise LabelStudioError(
                f"Label Studio at {self.url} is not reachable: {exc} (while {what})"
            ) from None
        except ApiError as exc:
            body = str(exc.body)[:300] if exc.body is not None else ""
            hint = (
                " (check LABEL_STUDIO_API_KEY; legacy tokens must be enabled)"
                if exc.status_code == 401
                else ""
            )
            raise LabelStudioError(
                f"Label Studio at {self.url} refused {what}: HTTP {exc.status_code} {body}{hint}"
            ) from None

    def check(self) -> None:
        self._call("checking the API key", self._ls.users.whoami)

    # -- projects -----------------------------------------------------------------------------------
    def _same_titled(self, title: str) -> list:
        """Projects titled exactly ``title``, oldest (lowest id) first."""
        listed = self._call("listing projects", lambda: list(self._ls.projects.list(title=title)))
        return sorted((p for p in listed if p.title == title), key=lambda p: int(p.id))

    def _judgebias_project(self, project, title: str) -> int:
        # A same-titled project made by hand would have its labels silently read as skips.
        controls = set((project.parsed_label_config or {}).keys())
        if self.control not in controls:
            raise LabelStudioError(
                f"Label Studio at {self.url}: project {project.id} {title!r} exists but has no "
                f"{self.control!r} choice (controls: {sorted(controls)}); it was not made by "
                "judgebias: pick another --project-title"
            )
        return int(project.id)

    def project_title_of(self, project_id: int) -> str:
        """The title of a project this server holds (what a scheduled push reuses)."""
        return self._call("reading the project", self._ls.projects.get, id=project_id).title

    def ensure_project(self, title: str, *, max_annotations: int = DEFAULT_MAX_ANNOTATIONS) -> int:
        """The id of the oldest project with this exact title, created with the pairwise config if absent.

        Safe against pushes of other ledgers (other folders, other machines) creating the same title at
        the same moment, which no local lock can see: after creating, the projects are listed again and
        the oldest wins. Label Studio numbers projects in creation order, so every pusher that lists
        after its own creation sees the same oldest one. The newer same-titled projects that are still
        empty (a concurrent pusher's, or one a create retried after a timeout left behind) are deleted:
        nobody imports into them, and annotators would otherwise see the title twice.
        """
        title = project_title(title)
        existing = self._same_titled(title)
        if existing:
            return self._judgebias_project(existing[0], title)
        created = self._call(
            "creating the project",
            self._ls.projects.create,
            title=title,
            label_config=self.label_config(),
            maximum_annotations=max_annotations,
            description=self.description,
            # Tasks are served in random order, so the pairs labelled so far are a random subset of
            # those pushed: the estimators' nonresponse adjustment rests on it
            # (judgebias.annotation.sampling).
            sampling="Uniform sampling",
            expert_instruction=self.instructions,
            show_instruction=True,
        )
        oldest, *newer = self._same_titled(title) or [created]
        kept = self._judgebias_project(oldest, title)
        for project in newer:
            if project.task_number == 0 and self.control in (project.parsed_label_config or {}):
                self._drop_duplicate(int(project.id), kept, title)
        return kept

    def _drop_duplicate(self, duplicate: int, kept: int, title: str) -> None:
        try:
            self._call(f"deleting project {duplicate}", self._ls.projects.delete, id=duplicate)
        except LabelStudioError as exc:
            # 404: the concurrent pusher deleted it first. Otherwise the push goes on into the kept
            # project, and the empty duplicate only clutters the project list.
            if "HTTP 404" not in str(exc):
                warnings.warn(f"{exc}; project {duplicate} {title!r} is an empty duplicate of project "
                              f"{kept}: delete it in Label Studio", stacklevel=2)

    def _server_tasks(self, project_id: int) -> list:
        """The project's tasks, oldest first: where a pair has two, every pusher takes the oldest."""
        listed = self._call(
            "listing tasks", lambda: list(self._ls.tasks.list(project=project_id, fields="all"))
        )
        return sorted(listed, key=lambda t: int(t.id))

    def _oldest_tasks(self, project_id: int, keys: set[str]) -> dict[str, Any]:
        """Per pair key of ``keys``, its oldest task in the project. A newer task of the same key was
        imported by another ledger's push at the same moment (both listed the project before either
        imported): it is deleted while nobody has labelled it, so annotators see each pair once. Both
        pushers list after importing, so both keep the same task whichever deletes the other."""
        kept: dict[str, Any] = {}
        for task in self._server_tasks(project_id):
            key = (task.data or {}).get("pair_key")
            if key not in keys:
                continue
            if key not in kept:
                kept[key] = task
            elif not (getattr(task, "total_annotations", 0) or getattr(task, "cancelled_annotations", 0)):
                try:
                    self._call(f"deleting task {task.id}", self._ls.tasks.delete, id=int(task.id))
                except LabelStudioError as exc:
                    if "HTTP 404" not in str(exc):  # 404: the other pusher deleted it first
                        warnings.warn(f"{exc}; task {task.id} duplicates task {kept[key].id}: delete it in "
                                      "Label Studio", stacklevel=2)
        return kept

    # -- push ---------------------------------------------------------------------------------------
    def push(
        self,
        chosen: pd.DataFrame,
        ledger: Ledger,
        *,
        project_title: str,
        seed: int,
        max_annotations: int = DEFAULT_MAX_ANNOTATIONS,
    ) -> PushResult:
        """Push the chosen pairs (rows with pair_id, pair_key, prompt, response_a, response_b).

        Idempotent twice over: keys already in the ledger are skipped, and tasks already on the server
        with a key the ledger lacks (a push interrupted after the import) are adopted, not re-created.
        A pair whose texts equal those of a pair already pushed here, or earlier in this batch, creates
        no task: it is recorded on that pair's task, so its annotators label it once.
        """
        project_id = self.ensure_project(project_title, max_annotations=max_annotations)
        known = ledger.pushed_keys()
        todo = chosen[~chosen["pair_key"].isin(known)]
        already = len(chosen) - len(todo)
        by_content = ledger.tasks_by_content(self.url)
        firsts: dict[str, object] = {}  # content key -> the row that gets the task
        twins: list[tuple[object, str]] = []
        for row in todo.itertuples(index=False):
            ck = content_key(row.prompt, row.response_a, row.response_b)
            if ck in by_content or ck in firsts:
                twins.append((row, ck))
            else:
                firsts[ck] = row
        by_key = {r.pair_key: (r, ck) for ck, r in firsts.items()}
        adopted: list[PushedTask] = []
        for task in self._server_tasks(project_id):
            data = task.data or {}
            row, ck = by_key.pop(data.get("pair_key"), (None, None))
            if row is not None:
                was_swapped = data.get("left") != row.response_a
                adopted.append(PushedTask(row.pair_key, str(row.pair_id), project_id, int(task.id),
                                          was_swapped, self.url, content_key=ck))
        if adopted:
            ledger.record_tasks(adopted)
        rows = list(by_key.values())
        swaps = [seeded_swap(r.pair_key, seed) for r, _ in rows]
        task_ids: list[int] = []
        missing: list[str] = []
        if rows:
            payload = [task_data(r, s) for (r, _), s in zip(rows, swaps, strict=True)]
            self._call("importing tasks", self._ls.projects.import_tasks, id=project_id, request=payload)
            # Task ids are matched by the pair key in each task's data, not by the order of the import
            # response, which the API does not promise.
            on_server = self._oldest_tasks(project_id, {r.pair_key for r, _ in rows})
            missing = [r.pair_key for r, _ in rows if r.pair_key not in on_server]
            # The order recorded is the one the kept task shows, which another ledger may have imported.
            recorded = [
                PushedTask(r.pair_key, str(r.pair_id), project_id, int(task.id),
                           (task.data or {}).get("left") != r.response_a, self.url, content_key=ck)
                for r, ck in rows
                if (task := on_server.get(r.pair_key)) is not None
            ]
            ledger.record_tasks(recorded)
            task_ids = [t.task_id for t in recorded]
        # Twins go last: the task they share must be recorded first (a twin of a pair whose import
        # failed stays unrecorded, and the next push retries both).
        by_content = ledger.tasks_by_content(self.url)
        shared = [PushedTask(row.pair_key, str(row.pair_id), first.project_id, first.task_id, first.swapped,
                             self.url, content_key=ck)
                  for row, ck in twins if (first := by_content.get(ck)) is not None]
        ledger.record_tasks(shared)
        if missing:
            raise LabelStudioError(
                f"Label Studio at {self.url} did not create tasks for {len(missing)} of {len(rows)} "
                f"pairs (first: {missing[0]}); the others are recorded, run push again"
            )
        return PushResult(project_id, len(rows), already, len(adopted), task_ids, shared=len(shared))

    # -- pull ---------------------------------------------------------------------------------------
    def export(self, project_id: int) -> list[dict]:
        def run() -> list[dict]:
            chunks = self._ls.projects.exports.download_sync(
                id=project_id, export_type="JSON", download_all_tasks=True
            )
            return json.loads(b"".join(chunks))

        return self._call(f"exporting project {project_id}", run)

    def pull(self, ledger: Ledger) -> PullResult:
        """Export every project this ledger pushed to on this server and upsert its annotations.

        All annotators, skips (``was_cancelled``) and edits are taken; the latest ``updated_at`` of an
        annotation wins in the ledger, and annotations deleted on the server are marked deleted. The
        whole export is read before the ledger is touched, so a failure mid-way changes nothing.
        """
        index = ledger.task_index(self.url)
        if not index:
            elsewhere = sorted(set(ledger.tasks()["server_url"]))
            if elsewhere:
                raise LabelStudioError(
                    f"Label Studio at {self.url}: this ledger's tasks were pushed to {', '.join(elsewhere)}, "
                    f"not here; set {URL_ENV} to that server (nothing was pulled)")
        projects = sorted({t.project_id for tasks in index.values() for t in tasks})
        exported = [(pid, self.export(pid)) for pid in projects]
        labels: list[Label] = []
        seen: list[int] = []
        unknown = 0
        excluded = Exclusions()
        for _, tasks in exported:
            for task in tasks:
                shown_key = (task.get("data") or {}).get("pair_key")
                # The pair whose key the task carries; its twins read the label through the ledger.
                pushed = next((t for t in index.get(int(task["id"]), []) if t.pair_key == shown_key), None)
                if pushed is None:
                    unknown += 1  # someone else's task in the same project: not ours to interpret
                    continue
                seen.append(pushed.task_id)
                for ann in task.get("annotations") or []:
                    try:
                        labels.append(parse_annotation(ann, pushed))
                    except (ValueError, KeyError, TypeError) as exc:
                        # One odd annotation (a hand-edited config, a choice renamed) must not block
                        # the sync of all others; it is counted and shown, never stored as a label.
                        excluded.add("unreadable_annotation", example=f"annotation {ann.get('id')}: {exc}")
        counts = ledger.upsert_labels(labels, seen_tasks=seen, server_url=self.url)
        return PullResult(projects=projects, tasks_seen=len(seen), counts=counts, unknown_tasks=unknown,
                          exclusions=excluded)
