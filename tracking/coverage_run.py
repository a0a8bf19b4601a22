"""Log a coverage benchmark (``judgebias coverage --mlflow``) as one MLflow run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judgebias.tracking.log_analysis import sanitize
from judgebias.tracking.mlflow_run import mlflow_run


def coverage_metrics(summary) -> dict[str, float]:
    """``<family>.<figure>.n<n>.<coverage|width|bias|defined>`` for every finite value."""
    out: dict[str, float] = {}
    for r in summary.to_dict("records"):
        base = f"{r['family']}.{r['figure']}.n{r['n']}"
        for stat in ("coverage", "width", "bias", "defined"):
            v = r[stat]
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[sanitize(f"{base}.{stat}")] = float(v)
    return out


def log_coverage(summary, folder: str | Path, params: Mapping[str, Any]) -> str:
    """One run: the settings as params, one metric per (figure, n, statistic), the folder (CSV,
    markdown, plot) as artifacts. Returns the run id."""
    import mlflow

    with mlflow_run("coverage benchmark", tags={"judgebias.kind": "coverage"}) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        metrics = coverage_metrics(summary)
        keys = sorted(metrics)
        for i in range(0, len(keys), 500):
            mlflow.log_metrics({k: metrics[k] for k in keys[i:i + 500]})
        mlflow.log_artifacts(str(folder), artifact_path="coverage")
        return run.info.run_id
