"""Every judge of an MLflow experiment across its runs: read each run's ``metrics.json``, and log the
evaluator table (``judgebias.reporting.judges_table``) as an MLflow table artifact with its page."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgebias.reporting.judges_table import PER_1K, RunResult, dataset_of
from judgebias.tracking.settings import TrackingSettings

TABLE_ARTIFACT = "judges.json"


def collect(
    experiment: str | None = None, settings: TrackingSettings | None = None, max_runs: int = 1000
) -> list[RunResult]:
    """The analyze results of the experiment's runs that logged a ``metrics.json`` (top-level or
    nested), newest first. ValueError naming the experiment when it does not exist."""
    settings = settings or TrackingSettings()
    settings.apply()
    import mlflow

    name = experiment or settings.experiment_name
    exp = mlflow.get_experiment_by_name(name)
    if exp is None:
        raise ValueError(f"MLflow experiment {name!r} does not exist at {settings.resolved_uri()}")
    client = mlflow.MlflowClient()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in client.search_runs(
            [exp.experiment_id], max_results=max_runs, order_by=["start_time DESC"]
        ):
            if "metrics.json" not in {a.path for a in client.list_artifacts(run.info.run_id)}:
                continue
            path = mlflow.artifacts.download_artifacts(
                run_id=run.info.run_id,
                artifact_path="metrics.json",
                dst_path=str(Path(tmp) / run.info.run_id),
            )
            result = json.loads(Path(path).read_text(encoding="utf-8"))
            started = dt.datetime.fromtimestamp(run.info.start_time / 1000, tz=dt.UTC).isoformat(
                timespec="seconds"
            )
            out.append(
                RunResult(
                    run.info.run_id,
                    run.info.run_name or "",
                    started,
                    dataset_of(run.data.params, result),
                    result,
                    _per_1k(run.data.metrics, result),
                )
            )
    return out


def _per_1k(metrics: Mapping[str, float], result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per judge of the run, the time and price per 1k judgments it logged (``<judge key>.<PER_1K>``)."""
    from judgebias.tracking.log_analysis import name_key

    out = {}
    for judge in result.get("judges") or {}:
        found = {k: metrics[f"{name_key(judge)}.{k}"] for k in PER_1K if f"{name_key(judge)}.{k}" in metrics}
        if found:
            out[judge] = found
    return out


def log_judges_table(
    rows: Sequence[Mapping[str, Any]],
    page: str | Path | None = None,
    *,
    experiment: str | None = None,
    settings: TrackingSettings | None = None,
) -> str:
    """A run "judges across runs" in the experiment holding the table (``judges.json``, MLflow's table
    artifact format: the UI's artifact view shows it as a table) and its page; returns the run id."""
    from judgebias.tracking.mlflow_run import mlflow_run

    settings = settings or TrackingSettings()
    if experiment:
        settings = settings.model_copy(update={"experiment_name": experiment})
    import mlflow

    with mlflow_run("judges across runs", settings=settings, tags={"judgebias.command": "judges"}) as run:
        import pandas as pd

        columns = list(dict.fromkeys(k for r in rows for k in r))
        flat = {
            c: [json.dumps(r.get(c)) if isinstance(r.get(c), (list, dict)) else r.get(c) for r in rows]
            for c in columns
        }
        mlflow.log_table(pd.DataFrame(flat, columns=columns), TABLE_ARTIFACT)
        if page is not None:
            mlflow.log_artifact(str(page))
    return run.info.run_id
