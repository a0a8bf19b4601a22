"""One annotation sync: pull labels, optionally push the next batch, recompute, log to MLflow.

``sync(SyncSettings(...))`` is what the Prefect flow ``sync_annotations`` and ``judgebias annotate
pull`` call. A server that is down raises ``LabelStudioError`` (naming the URL) before anything is
written: the ledger keeps what earlier syncs stored and the next sync catches up.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from judgebias.annotation.labelstudio import (
    KEY_ENV,
    URL_ENV,
    LabelStudioClient,
    PullResult,
    PushResult,
    ServerSettings,
    project_title,
)
from judgebias.annotation.sampling import DEFAULT_DESIGN, DEFAULT_POPULATION
from judgebias.annotation.store import Ledger, default_ledger_path


def default_output_path(table: str | Path) -> Path:
    """``runs/x/judgments.jsonl`` -> ``runs/x/judgments.human.jsonl`` (the table with merged labels)."""
    table = Path(table)
    return table.with_name(table.name.split(".")[0] + ".human.jsonl")


class TablePaths:
    """Where a sync reads and writes, from ``table``, ``ledger``, ``out``, ``url_env`` and
    ``api_key_env`` (the pairwise and the rating settings both have them)."""

    table: Path
    ledger: Path | None
    out: Path | None
    url_env: str
    api_key_env: str

    def server(self) -> ServerSettings:
        return ServerSettings.from_env(os.environ.get(self.url_env), os.environ.get(self.api_key_env))

    @property
    def ledger_path(self) -> Path:
        return Path(self.ledger) if self.ledger else default_ledger_path(self.table)

    @property
    def out_path(self) -> Path:
        return Path(self.out) if self.out else default_output_path(self.table)


@dataclass
class SyncSettings(TablePaths):
    table: Path
    judges: Sequence[str] = ()  # measured judges; all judges in the table when empty
    ledger: Path | None = None
    out: Path | None = None
    self_map: Mapping[str, Sequence[str]] = field(default_factory=dict)
    gold: Sequence[str] | None = None  # gold panel (default: every other judge)
    budget: int = 0  # pairs to push after the pull (0: pull only)
    project_title: str = "judgebias pairwise preferences"
    swap_seed: int = 0
    url_env: str = URL_ENV
    api_key_env: str = KEY_ENV
    log_mlflow: bool = True
    tracking_uri: str | None = None
    experiment: str | None = None  # MLflow experiment; default MLFLOW_EXPERIMENT_NAME or "judgebias"
    parent_run_id: str | None = None
    reps: int = 2000
    seed: int = 0
    design: str = DEFAULT_DESIGN
    population: str = DEFAULT_POPULATION
    min_prob: float | None = None
    # Stop asking for labels once this figure's PPI++ 95% half-width is at most target_half_width
    # for every measured judge (e.g. "eo", 0.05); None: push the budget every time.
    target_figure: str = "eo"
    target_half_width: float | None = None

    def design_settings(self):
        from judgebias.annotation.loop import DesignSettings

        return DesignSettings(design=self.design, population=self.population, min_prob=self.min_prob,
                              seed=self.swap_seed, judges=list(self.judges) or None, gold=self.gold,
                              self_map=dict(self.self_map))

    @property
    def figures_path(self) -> Path:
        """The figures of the last recompute (``judgments.human.figures.json``): the next pull prints
        each figure before -> after."""
        out = self.out_path
        return out.with_name(out.name.split(".")[0] + ".human.figures.json")

    def previous_figures(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.figures_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # first pull, or an unreadable file: no "before" to show


@dataclass
class SyncResult:
    pull: PullResult | None
    push: PushResult | None
    figures: dict[str, dict[str, Any]]  # per measured judge
    status: dict[str, Any]
    out_path: Path
    run_id: str | None = None
    stopped: str | None = None  # why no batch was pushed although a budget was given
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)  # figures of the last pull

    def summary(self) -> dict[str, Any]:
        return {
            "pulled": self.pull.counts.as_dict() if self.pull else None,
            "pull_exclusions": self.pull.exclusions.to_dict() if self.pull else {},
            "pull_exclusion_examples": dict(self.pull.exclusions.examples) if self.pull else {},
            "pushed": self.push.pushed if self.push else 0,
            "status": self.status,
            "out": str(self.out_path),
            "mlflow_run_id": self.run_id,
            "stopped": self.stopped,
            "figures": self.figures,
            "previous_figures": self.previous,
        }


def recompute_from_ledger(settings: SyncSettings) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Merge the ledger into the table, write the merged table, and compute the figures per judge."""
    from judgebias.annotation.feedback import recompute
    from judgebias.annotation.loop import design_from_ledger
    from judgebias.tables.files import read_table, write_table

    table, _ = read_table(settings.table)
    ledger = Ledger(settings.ledger_path)
    labels = ledger.labels(include_skipped=True, include_deleted=True)
    design = design_from_ledger(ledger, table)
    judges = list(settings.judges) or sorted({j for j in table["judge"].dropna() if j})
    if not judges:
        raise ValueError(f"{settings.table}: the table names no judge")
    figures: dict[str, dict[str, Any]] = {}
    metrics: dict[str, float] = {}
    for judge in judges:
        merged, rec = recompute(table, labels, judge, self_map=settings.self_map, gold=settings.gold,
                                reps=settings.reps, seed=settings.seed, design=design)
        figures[judge] = rec.figures
        metrics.update({f"{judge}.{k}": v for k, v in rec.flat_metrics().items()})
    write_table(merged, settings.out_path)
    from judgebias.runs.store import atomic_write_text

    atomic_write_text(settings.figures_path, json.dumps(figures, indent=2, sort_keys=True, default=str))
    return figures, metrics


def target_reached(figures: dict[str, dict[str, Any]], figure: str, half_width: float) -> str | None:
    """A sentence saying the target is met for every judge that has the figure, else None."""
    widths = {}
    for judge, figs in figures.items():
        est = ((figs.get("estimates") or {}).get(figure) or {}).get("ppi") or {}
        if est.get("ci_low") is None or est.get("ci_high") is None:
            if figure in (figs.get("estimates") or {}):
                return None  # defined for this judge but not estimable yet: keep labelling
            continue
        widths[judge] = (est["ci_high"] - est["ci_low"]) / 2
    if widths and all(w <= half_width for w in widths.values()):
        shown = ", ".join(f"{j} ±{w:.3f}" for j, w in sorted(widths.items()))
        return f"target met: {figure} 95% half-width <= {half_width:g} ({shown}); no new batch pushed"
    return None


def sync(settings: SyncSettings, *, client: LabelStudioClient | None = None) -> SyncResult:
    """Pull (and push ``budget`` more pairs), recompute, and log the figures as a linked MLflow run."""
    if settings.budget > 0:
        project_title(settings.project_title)  # a title the server refuses: said before anything changes
    ledger = Ledger(settings.ledger_path)
    client = client or LabelStudioClient(settings.server())
    pulled = client.pull(ledger)
    pushed = stopped = None
    previous = settings.previous_figures()
    figures, metrics = recompute_from_ledger(settings)
    if settings.budget > 0:
        from judgebias.annotation.loop import next_batch
        from judgebias.tables.files import read_table

        if settings.target_half_width is not None:
            stopped = target_reached(figures, settings.target_figure, settings.target_half_width)
        if stopped is None:
            table, _ = read_table(settings.table)
            with ledger.lock():
                batch = next_batch(table, ledger, settings.budget, settings.design_settings())
                pushed = client.push(batch.rows, ledger, project_title=settings.project_title,
                                     seed=settings.swap_seed)
    status = ledger.status()
    run_id = None
    if settings.log_mlflow:
        from judgebias.tracking.feedback_run import log_feedback_run

        params = {
            "table": str(settings.table),
            "ledger": str(settings.ledger_path),
            "label_studio_url": client.url,
            "project_title": settings.project_title,
            "judges": ",".join(figures),
            "self_map": json.dumps(
                {k: list(v) if not isinstance(v, str) else v for k, v in settings.self_map.items()},
                sort_keys=True,
            ),
            "gold": ",".join(settings.gold or []) or "all other judges",
            "design": settings.design,
            "population": settings.population,
            "human_gold_rule": "human vote share replaces the panel vote on labelled pairs",
        }
        metrics.update({f"status.{k}": float(v) for k, v in status.items() if isinstance(v, int)})
        run_id = log_feedback_run(
            metrics,
            {"figures": figures, "status": status},
            params,
            tracking_uri=settings.tracking_uri,
            experiment=settings.experiment,
            parent_run_id=settings.parent_run_id,
            # What a reader of the runs list wants first: how many labels this figure rests on.
            run_name=f"human labels: {status.get('labelled', 0)} of {status.get('pushed', 0)} pairs "
                     f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        )
    return SyncResult(pull=pulled, push=pushed, figures=figures, status=status, out_path=settings.out_path,
                      run_id=run_id, stopped=stopped, previous=previous)
