"""A watched judge end to end against a real Prefect server and a real MLflow server: the watch flow
run twice with an unchanged judge flags nothing; run twice with another model put behind the judge's
name between the looks (the suite's tiny model tiny-b for tiny-a) it flags the figures that moved,
ends the flow run Failed/JudgeChanged and tags the MLflow run. The judges are the tiny random-weights
models on the 30 shortest LLMBar pairs (expert labels); the looks run `judgebias watch` in this
process, on the session's Prefect server (``prefect_harness``) and MLflow server."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.config.watch import sha256_file

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.server]


def _audit(path: Path) -> str:
    table = pd.read_parquet(ROOT / "judgebias" / "data" / "llmbar_natural.parquet")
    table = table[table["judge"] == "GPT-4/Vanilla"]
    # The 30 shortest pairs: the cheapest forward passes.
    size = table["prompt"].str.len() + table["response_a"].str.len() + table["response_b"].str.len()
    table = table.assign(size=size).sort_values(["size", "pair_id"]).head(30)
    table[["pair_id", "prompt", "response_a", "response_b", "human"]].to_parquet(path, index=False)
    return sha256_file(path)


def _config(folder: Path, name: str, digest: str, template: str, model: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"watch:\n  name: {name}\n  audit: {{table: audit.parquet, sha256: {digest}}}\n"
        f"  judge: {{model: '{model}', template: {template}, name: tiny}}\n"
        "  looks: 2\n  spending: pocock\n  reps: 300\n  history: history\n",
        encoding="utf-8",
    )
    return path


def _look(config: Path):
    """``judgebias watch CONFIG --exit-code`` in this process (the command's own code path: its
    config check, environment defaults, server guard, flow and exit code)."""
    from judgebias.cli import app

    run = CliRunner().invoke(app, ["watch", str(config), "--exit-code"])
    assert run.exit_code in (0, 1), run.output[-3000:] + repr(run.exception)
    return run


def _record(folder: Path, name: str, index: int) -> dict:
    return json.loads((folder / "history" / name / f"look-{index:04d}" / "record.json").read_text())


class _Receiver:
    """A webhook receiver on 127.0.0.1 in a thread: the JSON bodies posted to it."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def _environ_restored():
    """The command sets environment defaults (PREFECT_HOME, console level, ...) for its process:
    undone after the test, so they do not leak into the rest of the session."""
    saved = dict(os.environ)
    yield
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


def test_watch_flags_a_changed_template_and_nothing_for_an_unchanged_judge(
        tmp_path, monkeypatch, request, _environ_restored, prefect_harness, mlflow_server, tiny_models):
    from prefect.settings import PREFECT_API_URL

    digest = _audit(tmp_path / "audit.parquet")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "watch-flow")
    api = PREFECT_API_URL.value()
    assert api, "prefect_harness sets the API of its server"
    uri = mlflow_server

    # The docs' automation: a JudgeChanged flow run posts to a webhook.
    from judgebias.flows.watch import alert_on_change

    receiver = _Receiver()
    automation = alert_on_change(receiver.url)
    assert automation
    # The session's server outlives the test: its automation goes with it.
    request.addfinalizer(lambda: httpx.delete(f"{api}/automations/{automation}", timeout=10))
    same = _config(tmp_path, "same", digest, "dbg-ab", tiny_models["tiny-a"])
    assert _look(same).exit_code == 0  # the reference look
    unchanged = _look(same)
    assert unchanged.exit_code == 0, unchanged.output
    assert "no figure changed" in unchanged.output
    record = _record(tmp_path, "same", 1)
    assert record["decision"]["changed"] == [] and record["decision"]["figures"]

    moved = _config(tmp_path, "moved", digest, "dbg-ab", tiny_models["tiny-a"])
    assert _look(moved).exit_code == 0
    # Another model put behind the judge's name (a new build replaces the one the team audited).
    _config(tmp_path, "moved", digest, "dbg-ab", tiny_models["tiny-b"])
    changed = _look(moved)
    assert changed.exit_code == 1, changed.output[-3000:]
    record = _record(tmp_path, "moved", 1)
    flagged = record["decision"]["changed"]
    assert flagged and "judge changed" in changed.output
    assert all(f["p_adjusted"] < record["decision"]["level"] for f in record["decision"]["figures"]
               if f["figure"] in flagged)
    assert (tmp_path / "history" / "moved" / "look-0001" / "history.png").is_file()

    # Prefect: the flow runs' final states say which look found a change. The server is the
    # session's: this test's runs are the watch runs on its configs.
    r = httpx.post(f"{api}/flow_runs/filter", timeout=10,
                   json={"sort": "EXPECTED_START_TIME_ASC", "flows": {"name": {"any_": ["judgebias-watch"]}}})
    r.raise_for_status()
    ours = [run for run in r.json() if run["parameters"].get("config_path", "").startswith(str(tmp_path))]
    states = [(run["state"]["type"], run["state"]["name"]) for run in ours]
    assert states == [("COMPLETED", "Completed")] * 3 + [("FAILED", "JudgeChanged")]
    assert all(f in ours[-1]["state"]["message"] for f in flagged)

    deadline = time.monotonic() + 60
    while not receiver.received and time.monotonic() < deadline:
        time.sleep(1)
    receiver.close()
    assert len(receiver.received) == 1, receiver.received
    assert receiver.received[0]["text"].startswith("judge changed")
    assert all(f in receiver.received[0]["message"] for f in flagged)

    # MLflow: one run per look; the changed look carries the tag naming the figures and the plot.
    import mlflow

    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("watch-flow").experiment_id],
                              order_by=["attributes.start_time ASC"])
    status = [(r.data.tags["judgebias.watch.name"], r.data.tags["judgebias.watch.status"]) for r in runs]
    assert status == [("same", "reference"), ("same", "unchanged"), ("moved", "reference"),
                      ("moved", "changed")]
    assert runs[-1].data.tags["judgebias.watch.changed"] == ",".join(flagged)
    assert runs[1].data.tags["judgebias.watch.changed"] == ""
    assert {a.path for a in client.list_artifacts(runs[-1].info.run_id, "watch")} == {
        "watch/history.png", "watch/watch_look.json"}
