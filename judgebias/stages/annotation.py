"""Scheduled annotation sync: pull human labels, recompute the human-anchored figures."""

from __future__ import annotations

from pathlib import Path

from judgebias.config import ExperimentConfig
from judgebias.runstore import RunStore
from judgebias.stages._common import Progress, _noop
from judgebias.stages.results import compute_metrics, gold_for


def sync_annotations(
    cfg: ExperimentConfig, store: RunStore, *, push: bool = True, progress: Progress = _noop
) -> dict:
    """Pull new human labels from Label Studio into the experiment's table, send the next batch of
    pairs (``annotation.budget``), recompute the human-anchored figures and log them to MLflow
    (linked to the experiment's last run)."""
    from annotation.sync import SyncSettings, sync

    table = store.path("table.parquet")
    if not table.exists():
        raise ValueError(f"{table}: no judgment table yet; run the experiment first (judgebias run CONFIG)")
    last = store.read_json("mlflow.json") if store.has("mlflow.json") else {}
    a = cfg.annotation
    settings = SyncSettings(
        table=table,
        judges=list(cfg.self_map),
        self_map={k: [v] for k, v in cfg.self_map.items()},
        gold=gold_for(cfg, store.read_frame("table.parquet")),
        budget=a.budget if push else 0,
        project_title=a.project_title,
        url_env=a.url_env,
        api_key_env=a.api_key_env,
        tracking_uri=last.get("tracking_uri") or cfg.tracking.tracking_uri,
        experiment=cfg.tracking.experiment,
        parent_run_id=last.get("run_id"),
        design=a.design,
        population=a.population,
        min_prob=a.min_prob,
        target_figure=a.target_figure,
        target_half_width=a.target_half_width,
    )
    result = sync(settings).summary()
    progress(
        f"annotation sync: pulled {result['pulled']}, pushed {result['pushed']}, merged table {result['out']}"
        + (f"; {result['stopped']}" if result.get("stopped") else "")
    )
    return result


def annotated_metrics(
    cfg: ExperimentConfig, store: RunStore, merged_table: str, *, progress: Progress = _noop
) -> dict:
    """``analyze`` on the table with the human labels merged in; one folder per distinct merged table."""
    import hashlib

    from judgebias.io import read_table

    digest = hashlib.sha256(Path(merged_table).read_bytes()).hexdigest()[:12]
    table, _ = read_table(merged_table)
    return compute_metrics(cfg, store, table, prefix=f"annotated-{digest}/", progress=progress)
