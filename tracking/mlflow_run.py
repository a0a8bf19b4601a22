"""``mlflow_run``: the one way this project opens an MLflow run.

Outside any run it configures the store (``TrackingSettings``) and starts a top-level run; inside
an active run it starts a nested child in the parent's experiment, so a flow can wrap several
analyses in one parent run without knowing who logs what.

A store that fails after the start-up check (a server killed mid-run, one answering 500 on some
calls) ends the command in one line: every MLflow request is bounded (``settings.HTTP_BOUNDS``),
the run is marked FAILED where the server still takes that, and the failure is raised as
``TrackingFailed`` naming the server, never as MLflow's traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from judgebias.tracking.settings import TrackingFailed, TrackingSettings

# Marking a run FAILED on a store that just failed: one quick try, not another round of retries.
_LAST_TRY = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is the tracking store failing: MLflow's
    own exception or a failed HTTP request, as opposed to a bug or a stop."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        names = {(c.__module__.split(".")[0], c.__name__) for c in type(cur).__mro__}
        if ("mlflow", "MlflowException") in names or ("requests", "RequestException") in names:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def failure_line(exc: BaseException, uri: str, run_id: str | None, ended: bool | None) -> str:
    """One line: which server failed, in which run, the first line of its reason (no password)."""
    from judgebias.display import terminal_safe
    from judgebias.redaction import redact_uri

    reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    reason = redact_uri_text(reason, uri)
    where = f"MLflow tracking store {redact_uri(uri)}"
    run = f"run {run_id}" if run_id else "the run"
    state = ("; the run is marked FAILED" if ended else
             "; the run could not be marked FAILED (the store does not answer): it shows RUNNING"
             if ended is False else "")
    return terminal_safe(f"{where} failed while logging {run}: {reason[:300]}{state}; the files "
                         "written before stay; rerun the command once the store works, or log with "
                         "--no-mlflow")


def redact_uri_text(text: str, uri: str) -> str:
    """``text`` with ``uri``'s password (if any) replaced, wherever MLflow quoted the URI."""
    from urllib.parse import urlsplit

    from judgebias.redaction import REDACTED

    password = urlsplit(uri).password
    return text.replace(password, REDACTED) if password else text


def _end(status: str) -> bool:
    """End the active run with ``status`` in one quick try; whether the store took it. MLflow takes
    the run off its stack before asking the store, so its exit hook does not try again."""
    import mlflow

    saved = {k: os.environ.get(k) for k in _LAST_TRY}
    os.environ.update(_LAST_TRY)
    try:
        mlflow.end_run(status)
        return True
    except Exception:
        return False
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def mlflow_run(run_name: str | None = None, *, settings: TrackingSettings | None = None,
               tags: Mapping[str, str] | None = None, start_time: float | None = None) -> Iterator[Any]:
    """Start (or nest) a run; yields the active ``mlflow.ActiveRun``. The run ends FAILED when the
    body raises (KILLED on a stop), FINISHED otherwise. A failing store raises ``TrackingFailed``
    (one line). ``start_time`` (epoch seconds, top level only) backdates the run to when the work it
    records began."""
    settings = settings or TrackingSettings()
    settings.export_env()
    import mlflow

    parent = mlflow.active_run()
    try:
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
    except Exception as exc:
        if not store_failure(exc):
            raise
        raise TrackingFailed(failure_line(exc, mlflow.get_tracking_uri(), None, None)) from None
    run_id = run.info.run_id
    try:
        yield run
    except BaseException as exc:
        stop = not isinstance(exc, Exception)
        ended = _end("KILLED" if stop else "FAILED")
        if isinstance(exc, TrackingFailed) or stop or not store_failure(exc):
            raise
        raise TrackingFailed(failure_line(exc, mlflow.get_tracking_uri(), run_id, ended)) from None
    try:
        mlflow.end_run()
    except Exception as exc:
        if not store_failure(exc):
            raise
        _end("FAILED")
        raise TrackingFailed(failure_line(exc, mlflow.get_tracking_uri(), run_id, False)) from None
