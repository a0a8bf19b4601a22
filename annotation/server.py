"""Start and stop a real Label Studio server process (tests, demos): free port, temp data dir, random
credentials, legacy API token enabled at first start, bound to 127.0.0.1, stopped by PID (SIGTERM).

The server lives in its own virtualenv (``LABEL_STUDIO_VENV``, else ``<repo>/.lsvenv``, else
``/opt/lsvenv``); its first start on a fresh data dir migrates a database (~25 s idle, longer on a
busy machine), so tests share one server per session.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from judgebias.annotation.labelstudio import ServerSettings

_REPO = Path(__file__).resolve().parents[1]


def find_label_studio() -> Path | None:
    """The ``label-studio`` executable of the server's own venv, or None."""
    candidates = [os.environ.get("LABEL_STUDIO_VENV"), str(_REPO / ".lsvenv"), "/opt/lsvenv"]
    for venv in filter(None, candidates):
        exe = Path(venv) / "bin" / "label-studio"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    found = shutil.which("label-studio")
    return Path(found) if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class LabelStudioServer:
    data_dir: Path
    port: int
    username: str = "admin@judgebias.local"
    password: str = field(default_factory=lambda: secrets.token_hex(12), repr=False)
    api_key: str = field(default_factory=lambda: secrets.token_hex(20), repr=False)
    executable: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> ServerSettings:
        return ServerSettings(url=self.url, api_key=self.api_key)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "labelstudio.log"

    def start(self, timeout: float = 240.0) -> LabelStudioServer:
        """Start (or restart on the same data dir and port) and wait for /health."""
        if self.process is not None and self.process.poll() is None:
            return self
        exe = self.executable or find_label_studio()
        if exe is None:
            raise RuntimeError(
                "label-studio is not installed: run scripts/labelstudio_install.sh (or set LABEL_STUDIO_VENV)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LABEL_STUDIO_")}
        env.update(
            LABEL_STUDIO_BASE_DATA_DIR=str(self.data_dir),
            LATEST_VERSION_CHECK="false",
            COLLECT_ANALYTICS="false",
            LABEL_STUDIO_USERNAME=self.username,
            LABEL_STUDIO_PASSWORD=self.password,
            LABEL_STUDIO_USER_TOKEN=self.api_key,
            LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN="true",
        )
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(exe),
                "start",
                "--no-browser",
                "--internal-host",
                "127.0.0.1",
                "--host",
                self.url,
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        (self.data_dir / "labelstudio.pid").write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout
        while not healthy(self.url):
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(
                    f"Label Studio exited with {self.process.returncode} while starting:\n{tail}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"Label Studio at {self.url} not healthy after {timeout:.0f}s; see {self.log_path}"
                )
            time.sleep(0.5)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's process group (it was started in its own session), then wait."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        (self.data_dir / "labelstudio.pid").unlink(missing_ok=True)


def start_temporary(timeout: float = 240.0) -> LabelStudioServer:
    """A fresh server on a free port with a temp data dir (caller stops it and removes ``data_dir``)."""
    data_dir = Path(tempfile.mkdtemp(prefix="judgebias-ls-"))
    return LabelStudioServer(data_dir=data_dir, port=free_port()).start(timeout=timeout)
