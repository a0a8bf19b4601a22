"""Real service processes for the tests: started on 127.0.0.1, waited for, stopped by PID."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def _leads_group(proc: subprocess.Popen) -> bool:
    try:
        return os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:  # reaped already
        return False


def _signal(proc: subprocess.Popen, sig: int, group: bool) -> None:
    """``sig`` to the process, or to its whole process group (``running`` starts each server in a
    session of its own): `mlflow server` runs uvicorn as a child, which a signal to the parent
    alone left running, orphaned."""
    try:
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass  # nothing of it is left


def stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM (servers started from scripts ignore SIGINT), then SIGKILL after ``grace`` seconds;
    to the server's whole process group where it leads one, the rest of which is SIGKILLed once
    the server has ended."""
    group = _leads_group(proc)
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            proc.wait(10)
    if group:
        _signal(proc, signal.SIGKILL, group)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to a server and everything in its process group (a crash, as a test injects it)."""
    _signal(proc, signal.SIGKILL, _leads_group(proc))


def wait_healthy(health_url: str, proc: subprocess.Popen, log: Path, what: str,
                 timeout: float = 90.0) -> None:
    """Until ``health_url`` answers 200; fails with the log's tail when the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(health_url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what} not healthy after {timeout} s:\n{log.read_text()[-3000:]}")


@contextmanager
def running(argv: list[str], *, health_url: str, log: Path, what: str,
            env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 90.0,
            grace: float = 20.0) -> Iterator[subprocess.Popen]:
    """Start ``argv`` with its output in ``log``, yield it once healthy, stop it by PID afterwards."""
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, env=dict(env) if env is not None else None, cwd=cwd, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(health_url, proc, log, what, timeout)
        yield proc
    finally:
        stop(proc, grace)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlflow_server(folder: Path, timeout: float = 180) -> Iterator[str]:
    """A real MLflow tracking server on 127.0.0.1 (SQLite store and artifacts under ``folder``);
    yields its URI, stops it by PID. ``timeout``: on a loaded machine its first start (database
    migrations) passed 90 s."""
    import os
    import sys

    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
            "--artifacts-destination", str(folder / "artifacts")]
    with running(argv, health_url=f"{uri}/health", log=folder / "mlflow.log", what="mlflow server", env=env,
                 timeout=timeout, grace=30):
        yield uri


@contextmanager
def prefect_server(home: Path) -> Iterator[dict[str, str]]:
    """A real Prefect server on 127.0.0.1 with its own PREFECT_HOME; yields the environment a client
    needs (``PREFECT_API_URL``, ``PREFECT_HOME``), stops it by PID."""
    import os
    import sys

    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    api = f"http://127.0.0.1:{port}/api"
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with running(argv, health_url=f"{api}/health", log=home / "server.log", what="Prefect server", env=env,
                 grace=30, timeout=180):
        yield {"PREFECT_API_URL": api, "PREFECT_HOME": str(home)}


_MIGRATED_HOME: list[Path] = []  # the session's migrated Prefect home, made on first use


def migrated_prefect_home(dest: Path) -> Path:
    """``dest`` made a fresh Prefect home (``PREFECT_HOME``) whose database is migrated already: a
    copy of one migrated once per test session. A server started on an empty home (Prefect's
    temporary one under ``judgebias run``, or ``prefect server start``) first runs every migration
    of its SQLite database, 10-30 s on 2 cores and more under load; on the copy it finds them done.
    Each test still gets a home of its own, with nothing of another test's runs in it."""
    if not _MIGRATED_HOME:
        template = Path(tempfile.mkdtemp(prefix="judgebias-prefect-home-"))
        atexit.register(shutil.rmtree, template, ignore_errors=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PREFECT_API", "PREFECT_SERVER_DATABASE"))}
        env["PREFECT_HOME"] = str(template)
        out = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
                             env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise AssertionError(f"migrating a Prefect database failed:\n{out.stdout}{out.stderr}")
        _MIGRATED_HOME.append(template)
    shutil.copytree(_MIGRATED_HOME[0], dest, dirs_exist_ok=True)
    return dest
