"""Log recomputed figures to MLflow as a NEW run linked to the experiment's run.

The run goes into the parent's MLflow experiment with ``mlflow.parentRunId`` (the UI nests it under
the experiment run, so before/after sit side by side) and ``judgebias.parent_run_id``. Only figures,
paths and the server URL are logged: the Label Studio API key never reaches this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

PARENT_TAG = "judgebias.parent_run_id"


def log_feedback_run(
    metrics: Mapping[str, float],
    figures: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    tracking_uri: str | None = None,
    experiment: str = "judgebias",
    parent_run_id: str | None = None,
    run_name: str | None = None,
) -> str:
    """Create the run, log metrics / params / ``human_feedback.json``; returns the run id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient()
    tags = {"judgebias.kind": "human_feedback"}
    if parent_run_id:
        try:
            parent = client.get_run(parent_run_id)
        except Exception as exc:  # MlflowException for an unknown id: say which id and where
            raise ValueError(
                f"MLflow run {parent_run_id!r} not found at {mlflow.get_tracking_uri()}: {exc}"
            ) from None
        experiment_id = parent.info.experiment_id
        tags.update({"mlflow.parentRunId": parent_run_id, PARENT_TAG: parent_run_id})
    else:
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    name = run_name or "human-feedback " + datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    run = client.create_run(experiment_id, tags=tags, run_name=name)
    run_id = run.info.run_id
    try:
        from mlflow.entities import Metric, Param

        now = int(datetime.now(UTC).timestamp() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())],
            params=[Param(k, str(v)[:500]) for k, v in sorted(params.items())],
        )
        client.log_text(
            run_id, json.dumps(figures, indent=2, sort_keys=True, default=str), "human_feedback.json"
        )
        client.set_terminated(run_id, "FINISHED")
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    return run_id
