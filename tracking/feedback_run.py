"""Log recomputed figures to MLflow as a NEW run linked to the experiment's run.

The run goes into the parent's MLflow experiment with ``mlflow.parentRunId`` (the UI nests it under
the experiment run, so before/after sit side by side) and ``judgebias.parent_run_id``. Store and
experiment resolution and run opening are the project's (``judgebias.tracking.settings``,
``judgebias.tracking.mlflow_run``). Only figures, paths and the server URL are logged: the Label Studio API
key never reaches this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from judgebias.redaction import redact_uri

PARENT_TAG = "judgebias.parent_run_id"


def log_feedback_run(metrics: Mapping[str, float], figures: Mapping[str, Any], params: Mapping[str, Any], *,
                     tracking_uri: str | None = None, experiment: str | None = None,
                     parent_run_id: str | None = None, run_name: str | None = None) -> str:
    """Create the run, log metrics / params / ``human_feedback.json``; returns the run id.

    ``tracking_uri`` / ``experiment`` default to the environment (``TrackingSettings``); with a
    ``parent_run_id`` the run lands in that run's experiment whatever ``experiment`` says."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.settings import TrackingSettings

    overrides: dict[str, str] = {}
    if tracking_uri:
        overrides["tracking_uri"] = tracking_uri
    if experiment:
        overrides["experiment_name"] = experiment
    settings = TrackingSettings(**overrides)
    tags = {"judgebias.kind": "human_feedback"}
    if parent_run_id:
        client = MlflowClient(settings.resolved_uri())
        try:
            parent = client.get_run(parent_run_id)
        except Exception as exc:  # MlflowException for an unknown id: say which id and where
            where = redact_uri(settings.resolved_uri())
            raise ValueError(f"MLflow run {parent_run_id!r} not found at {where}: {exc}") from None
        parent_experiment = client.get_experiment(parent.info.experiment_id).name
        settings = TrackingSettings(tracking_uri=settings.resolved_uri(), experiment_name=parent_experiment)
        tags.update({"mlflow.parentRunId": parent_run_id, PARENT_TAG: parent_run_id})
    name = run_name or "human-feedback " + datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    with mlflow_run(name, settings=settings, tags=tags) as run:
        mlflow.log_metrics({k: float(v) for k, v in sorted(metrics.items())})
        mlflow.log_params({k: str(v)[:500] for k, v in sorted(params.items())})
        mlflow.log_text(json.dumps(figures, indent=2, sort_keys=True, default=str), "human_feedback.json")
        return run.info.run_id
