"""A real MLflow server that fails after the start-up check: killed while traces are logged, or
answering 500 on one API call. The command ends in one line naming the server, keeps the files it
wrote, and leaves the run FAILED where the server still takes that (MLflow's own retries held
such a command 4 to 12 minutes, then printed tracebacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port
from fault_proxy import fault_proxy
from servers import kill_group, running

pytestmark = pytest.mark.server

# Never reached by a command that works: the subprocess limit a hang runs into.
HANG_LIMIT_S = 400


def _table(path: Path, judges=("j1", "j2"), pairs: int = 30) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(pairs):
        a_long = i % 2 == 0
        short, long = "short answer", " ".join(["a much longer answer"] * (2 + i % 5))
        human = ["a", "b"][rng.integers(2)]
        for judge in judges:
            rows.append({"pair_id": f"p{i}", "prompt": f"question {i}",
                         "response_a": long if a_long else short, "response_b": short if a_long else long,
                         "generator_a": "g1", "generator_b": "g2", "judge": judge,
                         "p_a": float(rng.uniform(0.05, 0.95)), "human": [human, human, "a"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def mlflow_argv(port: int, tmp: Path) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}",
            "--artifacts-destination", str(tmp / "artifacts")]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with running(mlflow_argv(port, tmp_path), health_url=f"{uri}/health", log=tmp_path / "mlflow.log",
                 what="mlflow server", env=env, grace=30) as proc:
        yield uri, proc


def _analyze(table: Path, out: Path, uri: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "faults"}
    return subprocess.run([sys.executable, "-m", "judgebias", "analyze", str(table), "--out", str(out),
                           "--reps", "100", *extra], capture_output=True, text=True, env=env,
                          timeout=HANG_LIMIT_S, cwd=out.parent)


def _one_line_error(done: subprocess.CompletedProcess, server: str) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert server in errors[0] and "failed while logging" in errors[0]
    return errors[0]


def test_a_server_killed_while_traces_are_logged_ends_the_command_in_one_line(mlflow_server, tmp_path):
    uri, proc = mlflow_server
    table = _table(tmp_path / "t.jsonl")
    with fault_proxy(uri, kill_on="/traces", kill=lambda: kill_group(proc)) as proxy:
        done = _analyze(table, tmp_path / "m.json", proxy["url"], "--traces")
    assert proxy["killed"], (proxy["seen"], done.stderr[-3000:])
    _one_line_error(done, proxy["url"])
    # The figures and the report card written before MLflow was reached stay.
    assert json.loads((tmp_path / "m.json").read_text())["judges"]
    assert (tmp_path / "m_report.html").exists()


def test_a_server_failing_one_call_ends_in_one_line_and_the_run_failed(mlflow_server, tmp_path):
    from mlflow import MlflowClient

    uri, _ = mlflow_server
    table = _table(tmp_path / "t.jsonl")
    with fault_proxy(uri, fail=("runs/log-batch",)) as proxy:
        done = _analyze(table, tmp_path / "m.json", proxy["url"], "--no-traces")
    assert proxy["failed"] >= 1
    line = _one_line_error(done, proxy["url"])
    assert "marked FAILED" in line
    assert json.loads((tmp_path / "m.json").read_text())["judges"]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("faults").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]
