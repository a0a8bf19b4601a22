"""One rating sync: pull ratings, recompute the population figures, optionally push the next batch of
items, log to MLflow. The pointwise counterpart of ``judgebias.annotation.sync``: ``judgebias annotate
pull`` on a pointwise table and the nightly flow's stage (``judgebias.annotation.experiment``) call it.

A server that is down raises ``LabelStudioError`` (naming the URL) before the ledger is touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgebias.annotation.labelstudio import KEY_ENV, URL_ENV, PullResult, PushResult
from judgebias.annotation.sampling import DEFAULT_DESIGN
from judgebias.annotation.store import Ledger
from judgebias.annotation.sync import TablePaths

RATING_TITLE = "judgebias pointwise ratings"


def read_pointwise(table: str | Path):
    """The validated pointwise table of a file (``TableError`` / ``ValueError`` where it is not one)."""
    from judgebias.tables.files import read_raw
    from judgebias.tables.pointwise import validate_pointwise

    return validate_pointwise(read_raw(table), source=str(table))[0]


@dataclass
class RatingSyncSettings(TablePaths):
    table: Path
    judges: Sequence[str] | None = None  # measured judges; every judge of the table when None
    ledger: Path | None = None
    out: Path | None = None
    self_map: Mapping[str, Iterable[str]] = field(default_factory=dict)
    offline: bool = False  # no server: recompute from the ratings already in the ledger
    budget: int = 0  # items to push after the pull (0: pull only)
    design: str = DEFAULT_DESIGN
    min_prob: float | None = None
    seed: int = 0
    # None: the project the ledger's last batch went to on this server (a loop started with
    # `annotate push --project-title X` keeps X), else RATING_TITLE.
    project_title: str | None = None
    url_env: str = URL_ENV
    api_key_env: str = KEY_ENV
    log_mlflow: bool = True
    tracking_uri: str | None = None
    experiment: str | None = None
    parent_run_id: str | None = None


@dataclass
class RatingSyncResult:
    pull: PullResult | None
    push: PushResult | None
    figures: dict[str, Any]
    status: dict[str, Any]
    out_path: Path
    figures_path: Path
    run_id: str | None = None
    url: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"pulled": self.pull.counts.as_dict() if self.pull else None,
                "pull_exclusions": self.pull.exclusions.to_dict() if self.pull else {},
                "pull_exclusion_examples": dict(self.pull.exclusions.examples) if self.pull else {},
                "pushed": self.push.pushed if self.push else 0, "status": self.status,
                "out": str(self.out_path), "figures_path": str(self.figures_path),
                "mlflow_run_id": self.run_id, "figures": self.figures}


def rating_metrics(figures: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, float]:
    """What MLflow gets: ``judge.figure.estimator.value`` / ci_low / ci_high, and the ledger's counts
    as ``status.*`` (the pairwise pull logs its counts the same way)."""
    from judgebias.annotation.rating_loop import flat_metrics

    out = flat_metrics(figures)
    out.update({f"status.{k}": float(v) for k, v in status.items() if isinstance(v, int)})
    return out


def sync_ratings(settings: RatingSyncSettings, *, client=None) -> RatingSyncResult:
    """Pull (unless offline), recompute, write the merged table and figures, push ``budget`` more items
    (online only), and log the figures as an MLflow run linked to ``parent_run_id`` (online only)."""
    from judgebias.annotation.rating_loop import (
        RatingSettings,
        next_rating_batch,
        rating_estimates,
        rating_scale,
        write_outputs,
    )
    from judgebias.annotation.ratings import RatingClient, rating_status

    path = settings.ledger_path
    if not path.exists():
        raise ValueError(f"no labels ledger at {path}: nothing pushed yet (run `judgebias annotate push`)")
    ledger = Ledger(path)
    df = read_pointwise(settings.table)
    pulled = pushed = None
    if not settings.offline:
        client = client or RatingClient(settings.server(), rating_scale(df))
        pulled = client.pull_ratings(ledger)
    merged, figures = rating_estimates(df, ledger, settings.judges, self_map=settings.self_map)
    figures_path = write_outputs(merged, figures, settings.out_path)
    if settings.budget > 0 and not settings.offline:
        rs = RatingSettings(design=settings.design, min_prob=settings.min_prob, seed=settings.seed,
                            judges=settings.judges, self_map=settings.self_map, rubric=_last_rubric(ledger))
        with ledger.lock():
            batch = next_rating_batch(df, ledger, settings.budget, rs)
            if len(batch.rows):
                title = settings.project_title or _ledger_project_title(ledger, client)
                pushed = client.push(batch.rows, ledger, project_title=title, seed=settings.seed)
    status = rating_status(ledger)
    run_id = None
    if settings.log_mlflow and not settings.offline:
        from judgebias.tracking.feedback_run import log_feedback_run

        params = {"table": str(settings.table), "ledger": str(path), "kind": "pointwise ratings",
                  "judges": ",".join(figures), "label_studio_url": client.url}
        run_id = log_feedback_run(rating_metrics(figures, status), {"figures": figures, "status": status},
                                  params, tracking_uri=settings.tracking_uri, experiment=settings.experiment,
                                  parent_run_id=settings.parent_run_id,
                                  run_name=f"human ratings: {status['labelled']} of {status['pushed']} items")
    return RatingSyncResult(pulled, pushed, figures, status, settings.out_path, figures_path, run_id,
                            client.url if client is not None else None)


def _last_rubric(ledger: Ledger) -> str | None:
    """The rubric the last batch was pushed with: a scheduled push keeps showing raters the same text
    (a new rubric would make new item keys and leave the earlier ratings stale)."""
    batches = ledger.batches()
    return json.loads(batches["params"].iloc[-1]).get("rubric") if len(batches) else None


def _ledger_project_title(ledger: Ledger, client) -> str:
    """The title of the project the ledger's latest task on this server went to (RATING_TITLE when none)."""
    tasks = ledger.tasks()
    here = tasks[tasks["server_url"] == client.url]
    return client.project_title_of(int(here["project_id"].iloc[-1])) if len(here) else RATING_TITLE
