"""``mlflow_run``: the one way this project opens an MLflow run.

Outside any run it configures the store (``TrackingSettings``) and starts a top-level run; inside
an active run it starts a nested child in the parent's experiment, so a flow can wrap several
analyses in one parent run without knowing who logs what.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tracking.settings import TrackingSettings


@contextmanager
def mlflow_run(run_name: str | None = None, *, settings: TrackingSettings | None = None,
               tags: Mapping[str, str] | None = None) -> Iterator[Any]:
    """Start (or nest) a run; yields the active ``mlflow.ActiveRun``. The run ends FAILED when the
    body raises, FINISHED otherwise (MLflow's context manager)."""
    settings = settings or TrackingSettings()
    settings.export_env()
    import mlflow

    parent = mlflow.active_run()
    if parent is None:
        settings.apply()
        run = mlflow.start_run(run_name=run_name, tags=dict(tags or {}))
    else:
        run = mlflow.start_run(run_name=run_name, nested=True, tags=dict(tags or {}),
                               experiment_id=parent.info.experiment_id)
    with run:
        yield run


def log_replay(summary, folder, params: Mapping[str, Any]) -> str:
    """One MLflow run for a human-loop replay: its settings, one metric per (judge, figure, method,
    budget) and statistic, and the folder (CSV, JSON, plot) as artifacts. Returns the run id."""
    import mlflow

    with mlflow_run("human-loop replay", tags={"judgebias.kind": "replay"}) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        metrics = {}
        for r in summary.to_dict("records"):
            base = f"{r['judge']}.{r['figure']}.{r['method']}.n{r['budget']}"
            for stat in ("bias", "rmse", "coverage", "width"):
                if r[stat] == r[stat]:
                    metrics[f"{base}.{stat}"] = float(r[stat])
        mlflow.log_metrics(metrics)
        mlflow.log_artifacts(str(folder), artifact_path="replay")
        return run.info.run_id
