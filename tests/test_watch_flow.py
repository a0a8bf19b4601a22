"""A watched judge end to end against a real Prefect server and a real MLflow server: the watch flow
run twice with an unchanged judge flags nothing; run twice with another model put behind the judge's
name between the looks (gemma-3-270m for SmolLM2) it flags the figures that moved, ends the flow run
Failed/JudgeChanged and tags the MLflow run. The judges are the packaged models on the 30 shortest
LLMBar pairs (expert labels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pandas as pd
import pytest
from servers import mlflow_server, prefect_server

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


def _config(folder: Path, name: str, digest: str, template: str,
            model: str = "smollm2-135m-instruct") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"watch:\n  name: {name}\n  audit: {{table: audit.parquet, sha256: {digest}}}\n"
        f"  judge: {{model: {model}, template: {template}, name: smol}}\n"
        "  looks: 2\n  spending: pocock\n  reps: 300\n  history: history\n",
        encoding="utf-8",
    )
    return path


def _look(config: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "judgebias", "watch", str(config), "--exit-code"],
                         env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
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


def test_watch_flags_a_changed_template_and_nothing_for_an_unchanged_judge(tmp_path, smollm2_folder):
    digest = _audit(tmp_path / "audit.parquet")
    (tmp_path / "mlflow").mkdir()
    (tmp_path / "prefect").mkdir()
    with mlflow_server(tmp_path / "mlflow") as uri, prefect_server(tmp_path / "prefect") as prefect_env:
        env = {**os.environ, **prefect_env, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "watch",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        # The docs' automation: a JudgeChanged flow run posts to a webhook.
        receiver = _Receiver()
        made = subprocess.run([sys.executable, "-c", "from judgebias.flows.watch import alert_on_change; "
                               f"print(alert_on_change({receiver.url!r}))"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-3000:]
        same = _config(tmp_path, "same", digest, "dbg-ab")
        assert _look(same, env, tmp_path).returncode == 0  # the reference look
        unchanged = _look(same, env, tmp_path)
        assert unchanged.returncode == 0, unchanged.stdout
        assert "no figure changed" in unchanged.stdout
        record = _record(tmp_path, "same", 1)
        assert record["decision"]["changed"] == [] and record["decision"]["figures"]

        moved = _config(tmp_path, "moved", digest, "dbg-ab")
        assert _look(moved, env, tmp_path).returncode == 0
        # Another model put behind the judge's name (a new build replaces the one the team audited).
        # An edited template alone does not do: SmolLM2 picks the first-shown answer under dbg-ab
        # and dbg-truthful alike (position bias 0.949 and 0.956 on these 30 pairs: no verdict moved).
        _config(tmp_path, "moved", digest, "dbg-ab", model="gemma-3-270m")
        changed = _look(moved, env, tmp_path)
        assert changed.returncode == 1, changed.stdout + changed.stderr[-2000:]
        record = _record(tmp_path, "moved", 1)
        flagged = record["decision"]["changed"]
        assert flagged and "judge changed" in changed.stdout
        assert all(f["p_adjusted"] < record["decision"]["level"] for f in record["decision"]["figures"]
                   if f["figure"] in flagged)
        assert (tmp_path / "history" / "moved" / "look-0001" / "history.png").is_file()

        # Prefect: the flow runs' final states say which look found a change.
        r = httpx.post(f"{prefect_env['PREFECT_API_URL']}/flow_runs/filter",
                       json={"sort": "EXPECTED_START_TIME_ASC"}, timeout=10)
        r.raise_for_status()
        states = [(run["state"]["type"], run["state"]["name"]) for run in r.json()]
        assert states == [("COMPLETED", "Completed")] * 3 + [("FAILED", "JudgeChanged")]
        assert all(f in r.json()[-1]["state"]["message"] for f in flagged)

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
        runs = client.search_runs([client.get_experiment_by_name("watch").experiment_id],
                                  order_by=["attributes.start_time ASC"])
        status = [(r.data.tags["judgebias.watch.name"], r.data.tags["judgebias.watch.status"]) for r in runs]
        assert status == [("same", "reference"), ("same", "unchanged"), ("moved", "reference"),
                          ("moved", "changed")]
        assert runs[-1].data.tags["judgebias.watch.changed"] == ",".join(flagged)
        assert runs[1].data.tags["judgebias.watch.changed"] == ""
        assert {a.path for a in client.list_artifacts(runs[-1].info.run_id, "watch")} == {
            "watch/history.png", "watch/watch_look.json"}
