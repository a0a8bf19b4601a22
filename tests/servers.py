"""Real service processes for the tests: started on 127.0.0.1, waited for, stopped by PID."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM (servers started from scripts ignore SIGINT), then SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


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
