"""``mlflow_run``: the one way this project opens an MLflow run.

Outside any run it configures the store (``TrackingSettings``) and starts a top-level run; inside
an active run it starts a nested child in the parent's experiment, so a flow can wrap several
analyses in one parent run without knowing who logs what.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from judgebias.tracking.settings import TrackingSettings


@contextmanager
def mlflow_run(run_name: str | None = None, *, settings: TrackingSettings | None = None,
               tags: Mapping[str, str] | None = None, start_time: float | None = None) -> Iterator[Any]:
    """Start (or nest) a run; yields the active ``mlflow.ActiveRun``. The run ends FAILED when the
    body raises, FINISHED otherwise (MLflow's context manager). ``start_time`` (epoch seconds, top
    level only) backdates the run to when the work it records began."""
    settings = settings or TrackingSettings()
    settings.export_env()
    import mlflow

    parent = mlflow.active_run()
    if parent is None:
        settings.apply()
        if start_time is None:
            run = mlflow.start_run(run_name=run_name, tags=dict(tags or {}))
        else:
            experiment = mlflow.get_experiment_by_name(settings.experiment_name)
            created = mlflow.MlflowClient().create_run(
                experiment.experiment_id, start_time=int(start_time * 1000), tags=dict(tags or {}),
                run_name=run_name)
            run = mlflow.start_run(run_id=created.info.run_id)
    else:
        run = mlflow.start_run(run_name=run_name, nested=True, tags=dict(tags or {}),
                               experiment_id=parent.info.experiment_id)
    with run:
        yield run

