"""Where MLflow records go, resolved once from the environment.

``MLFLOW_TRACKING_URI`` wins when set (a server such as ``http://127.0.0.1:5000`` or any store
URI); otherwise an SQLite database ``mlflow.db`` in the working directory (MLflow 3 refuses the
plain file store without an opt-in). ``MLFLOW_EXPERIMENT_NAME`` names the experiment (default
``judgebias``). Telemetry is switched off.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from judgebias.config.experiment import ExperimentConfig

DEFAULT_EXPERIMENT = "judgebias"
REACH_TIMEOUT_S = 5.0
_REACHED: set[str] = set()  # servers that answered in this process: asked once, not per run opened


class TrackingUnavailable(RuntimeError):
    """The MLflow tracking server does not answer: said before any work, not after minutes of retries."""


class TrackingFailed(TrackingUnavailable):
    """The MLflow store failed after the start-up check (a server killed, or one answering 500):
    said in one line naming the server, once the bounded retries are spent."""


DB_NAME = "mlflow.db"
# MLflow's client retries a failing request 7 times with a backoff growing to 120 s and waits up to
# 120 s for each answer: one dead server held a command for 4 to 12 minutes before its traceback.
# These bounds (each one overridable in the environment) end a failing call within about 100 s,
# a refused connection within seconds; a healthy server answers each call in well under the timeout.
HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


class TrackingSettings(BaseSettings):
    """Frozen tracking settings; construct with keywords to override the environment."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    tracking_uri: str | None = Field(default=None, validation_alias=AliasChoices("MLFLOW_TRACKING_URI",
                                                                                 "tracking_uri"))
    experiment_name: str = Field(default=DEFAULT_EXPERIMENT,
                                 validation_alias=AliasChoices("MLFLOW_EXPERIMENT_NAME", "experiment_name"))
    disable_telemetry: bool = True

    def resolved_uri(self, workdir: str | os.PathLike | None = None) -> str:
        """The explicit URI, else ``sqlite:///<workdir>/mlflow.db`` (absolute, so a later ``chdir``
        cannot split one project's runs over two databases)."""
        if self.tracking_uri and self.tracking_uri.strip():
            return self.tracking_uri.strip()
        base = Path(workdir) if workdir is not None else Path.cwd()
        return f"sqlite:///{(base / DB_NAME).resolve()}"

    def check_reachable(self, timeout_s: float = REACH_TIMEOUT_S) -> None:
        """Raise ``TrackingUnavailable`` naming the server when an HTTP tracking URI does not answer
        within ``timeout_s`` (MLflow's client would retry for minutes, then fail after the work)."""
        import urllib.error
        import urllib.request

        from judgebias.redaction import redact_uri, uri_without_credentials

        uri = self.resolved_uri()
        if not uri.startswith(("http://", "https://")) or uri in _REACHED:
            return  # a local store has nothing to reach; a server that answered was asked already
        # urllib reads user:password@ as part of the host name: ask without them (a 401 is an answer)
        # and name the server without its password.
        base, shown = uri_without_credentials(uri).rstrip("/"), redact_uri(uri)
        try:
            urllib.request.urlopen(f"{base}/health", timeout=timeout_s).close()
        except urllib.error.HTTPError:
            pass  # something answered (a proxy asking for credentials is MLflow's business)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrackingUnavailable(
                f"MLflow tracking server {shown} does not answer ({reason}); start it, point "
                "MLFLOW_TRACKING_URI at a reachable one, or unset it to log to ./mlflow.db") from None
        # /health can answer while the API behind it fails (its database down): MLflow's client
        # would then retry every call for minutes. One cheap read of the API says so now; a 404
        # (no such experiment) is a working API, and 401/403 are the credentials' business.
        probe = f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"
        try:
            urllib.request.urlopen(probe, timeout=timeout_s).close()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TrackingUnavailable(
                    f"MLflow tracking server {shown} answers /health but its API fails (HTTP {exc.code} on "
                    "experiments/get-by-name); check its backend store, or unset MLFLOW_TRACKING_URI to "
                    "log to ./mlflow.db") from None
        except (urllib.error.URLError, OSError) as exc:
            raise TrackingUnavailable(f"MLflow tracking server {shown} answers /health but not its API "
                                      f"({getattr(exc, 'reason', exc)})") from None
        _REACHED.add(uri)

    def export_env(self) -> None:
        """Environment MLflow reads when it is imported (call before the first ``import mlflow``)."""
        if self.disable_telemetry:
            os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        for name, value in HTTP_BOUNDS.items():
            os.environ.setdefault(name, value)
        from judgebias.redaction import redact_uri

        uri = self.resolved_uri()
        if redact_uri(uri) != uri:  # MLflow would print "View run ... at: <the URI, password and all>"
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"

    def use_store(self) -> str:
        """Point the ``mlflow`` module at this store for reading (no experiment is created); the URI."""
        self.export_env()
        self.check_reachable()
        import mlflow

        uri = self.resolved_uri()
        mlflow.set_tracking_uri(uri)
        return uri

    def apply(self, workdir: str | os.PathLike | None = None) -> str:
        """Point the ``mlflow`` module at this store and experiment; returns the URI used."""
        self.export_env()
        self.check_reachable()
        import mlflow

        # A new sqlite store logs a dozen schema-migration lines that bury the command's own output.
        # So does "Creating a new experiment" (mlflow.tracking.fluent): the summary names the experiment.
        for name in ("mlflow.store.db.utils", "alembic.runtime.migration", "alembic",
                     "mlflow.tracking.fluent"):
            logging.getLogger(name).setLevel(logging.WARNING)
        uri = self.resolved_uri(workdir)
        with store_init_lock(uri):
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(self.experiment_name)
        return uri


def settings_for(cfg: ExperimentConfig) -> TrackingSettings:
    """An experiment's tracking settings: the config's URI wins; otherwise ``MLFLOW_TRACKING_URI``, else
    ./mlflow.db. Here rather than in ``judgebias.tracking.experiment`` (which imports pandas and
    matplotlib, seconds on a busy machine) so ``judgebias run`` can ask the server before anything else."""
    extra = {"tracking_uri": cfg.tracking.tracking_uri} if cfg.tracking.tracking_uri else {}
    return TrackingSettings(experiment_name=cfg.tracking.experiment, **extra)


@contextlib.contextmanager
def store_init_lock(uri: str) -> Iterator[None]:
    """For an SQLite tracking URI: one process at a time opens the store and creates the experiment.
    MLflow creates a fresh database's tables and runs its migrations on first use; two commands
    starting together on a new file raced there, and the second failed ("Online migration expected
    to match one row"). An exclusive ``flock`` on the database's folder (no lock file left beside
    it; SQLite's own locks are separate) serialises that first use; every other URI passes."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def sqlite_path(uri: str) -> Path | None:
    """The database file of an ``sqlite:///`` URI (None for any other store or an in-memory one)."""
    if not uri.startswith("sqlite:///"):
        return None
    name = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if not name or name == ":memory:" else Path(name)
