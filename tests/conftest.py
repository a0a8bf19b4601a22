"""Session-wide defaults for the test suite: offline, quiet, and caches kept out of $HOME."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

# Nothing in the tests may reach a hub or phone home.
for key, value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "TOKENIZERS_PARALLELISM": "false",
    # A stopped MLflow server should fail a test in seconds, not after minutes of client retries.
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}.items():
    os.environ.setdefault(key, value)

# The dequantized packaged models are reused across test runs (first load 15-45 s, then ~1 s).
os.environ.setdefault("JUDGEBIAS_MODEL_CACHE", str(ROOT / ".judgebias" / "models"))


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _isolated_call_cache(tmp_path, monkeypatch):
    # Each test starts with an empty model-call cache unless it sets its own.
    monkeypatch.setenv("JUDGEBIAS_CACHE_DIR", str(tmp_path / "call-cache"))


@pytest.fixture(scope="session")
def labelstudio_server():
    """One real Label Studio server per test session (first start migrates a database: 25-90 s).

    Free port, temp data dir, random admin credentials with a legacy API token (``.settings`` gives
    url + api_key). A test may stop it; ``.start()`` brings it back on the same port and data.
    Skips when label-studio is not installed (scripts/labelstudio_install.sh)."""
    import shutil

    from annotation.server import find_label_studio, start_temporary

    if find_label_studio() is None:
        reason = "label-studio not installed (scripts/labelstudio_install.sh or LABEL_STUDIO_VENV)"
        if os.environ.get("CI"):  # CI installs it: a missing server there is a failure, not a skip
            pytest.fail(reason)
        pytest.skip(reason)
    server = start_temporary()
    yield server
    server.stop()
    shutil.rmtree(server.data_dir, ignore_errors=True)
