"""The experiment's scheduled annotation sync: the run folder's judgment table in, Label Studio's
labels back, the human-anchored figures recomputed (the Prefect flow ``flows/sync.py`` runs it).

Where the run has pointwise judges whose scores were sent for rating (``judgebias annotate push`` on
the run's pointwise table made its ledger), the same sync pulls their ratings, pushes the next batch
of items and refreshes the pointwise population figures (``judgebias.annotation.rating_sync``). The
rating loop is started by hand: rating tasks are a project of their own, and the flow never opens
one nobody asked for."""

from __future__ import annotations

from judgebias.annotation.sync import SyncSettings, sync
from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages import Progress, gold_for


def sync_annotations(
    cfg: ExperimentConfig, store: RunStore, *, push: bool = True, progress: Progress | None = None
) -> dict:
    """Pull new human labels from Label Studio into the experiment's table, send the next batch of
    pairs (``annotation.budget``), recompute the human-anchored figures and log them to MLflow
    (linked to the experiment's last run)."""
    layout = RunLayout()
    table = store.path(layout.table)
    if not table.exists():
        raise ValueError(f"{table}: no judgment table yet; run the experiment first (judgebias run CONFIG)")
    last = store.read_json(layout.mlflow_link) if store.has(layout.mlflow_link) else {}
    a = cfg.annotation
    settings = SyncSettings(
        table=table,
        judges=[j for j in cfg.self_map if cfg.judge(j).mode == "pairwise"],
        self_map=cfg.own_generators(),
        gold=gold_for(cfg, store.read_frame(layout.table)),
        budget=a.budget if push else 0,
        project_title=a.project_title,
        url_env=a.url_env,
        api_key_env=a.api_key_env,
        tracking_uri=_last_uri(last) or cfg.tracking.tracking_uri,
        experiment=cfg.tracking.experiment,
        parent_run_id=last.get("run_id"),
        design=a.design,
        population=a.population,
        min_prob=a.min_prob,
        target_figure=a.target_figure,
        target_half_width=a.target_half_width,
    )
    result = sync(settings).summary()
    (progress or print)(
        f"annotation sync: pulled {result['pulled']}, pushed {result['pushed']}, merged table {result['out']}"
        + (f"; {result['stopped']}" if result.get("stopped") else "")
    )
    result["ratings"] = sync_pointwise_ratings(cfg, store, push=push, parent_run_id=last.get("run_id"),
                                               tracking_uri=settings.tracking_uri, progress=progress)
    return result


def sync_pointwise_ratings(cfg: ExperimentConfig, store: RunStore, *, push: bool = True,
                           parent_run_id: str | None = None, tracking_uri: str | None = None,
                           progress: Progress | None = None) -> dict | None:
    """The rating half of the sync, on the run's pointwise table (None: the run has no pointwise judge;
    a ``skipped`` reason: no table or no rating ledger yet)."""
    from judgebias.annotation.rating_sync import RatingSyncSettings, sync_ratings
    from judgebias.annotation.store import default_ledger_path

    if not cfg.pointwise_judges():
        return None
    table = store.path(RunLayout.pointwise(cfg).table)
    say = progress or print
    if not table.exists():
        say(f"pointwise ratings: no pointwise table at {table} yet (the experiment's pointwise stage "
            "writes it)")
        return {"skipped": "no pointwise table", "table": str(table)}
    if not default_ledger_path(table).exists():
        say(f"pointwise ratings: none pushed for {table}; start the rating loop with "
            f"`judgebias annotate push {table}`")
        return {"skipped": "no rating ledger", "table": str(table)}
    a = cfg.annotation
    result = sync_ratings(RatingSyncSettings(
        table=table, self_map=cfg.own_generators(), budget=a.budget if push else 0, design=a.design,
        min_prob=a.min_prob, url_env=a.url_env, api_key_env=a.api_key_env, tracking_uri=tracking_uri,
        experiment=cfg.tracking.experiment, parent_run_id=parent_run_id)).summary()
    say(f"pointwise ratings: pulled {result['pulled']}, pushed {result['pushed']}, merged table "
        f"{result['out']}, figures {result['figures_path']}")
    return result


def _last_uri(last: dict) -> str | None:
    """The experiment run's tracking URI from its run folder, unless a password was cut out of it
    there (then the config's or the environment's URI, which still has it)."""
    from judgebias.redaction import REDACTED

    uri = last.get("tracking_uri")
    return None if not uri or REDACTED in str(uri) else str(uri)
