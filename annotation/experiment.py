"""The experiment's scheduled annotation sync: the run folder's judgment table in, Label Studio's
labels back, the human-anchored figures recomputed (the Prefect flow ``flows/sync.py`` runs it)."""

from __future__ import annotations

from judgebias.annotation.sync import SyncSettings, sync
from judgebias.config.experiment import ExperimentConfig
from judgebias.layout import RunLayout
from judgebias.runstore import RunStore
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
    (progress or print)(
        f"annotation sync: pulled {result['pulled']}, pushed {result['pushed']}, merged table {result['out']}"
        + (f"; {result['stopped']}" if result.get("stopped") else "")
    )
    return result
