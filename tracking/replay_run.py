"""Log a human-loop replay (``judgebias annotate replay``) as one MLflow run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.tracking.mlflow_run import mlflow_run


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
