"""Judge names from a third-party table are data, never paths, terminal commands or HTML: analyze on
a table whose judges are named like an attack writes every figure, inside its folder, one file each,
and prints and renders the names as inert text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from judged_tables import short_or_long

HOSTILE = ["..", "../x", "a/b", "a_b", "n" * 300, "nul\x00name", "\x1b]0;owned\x07\x1b[2Jclear",
           "<img src=x onerror=alert(1)>"]


def _table(path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        short, long = "short answer", " ".join(["a much longer answer"] * (2 + i % 5))
        a_long = i % 2 == 0
        human = ["a", "b"][rng.integers(2)]
        for judge in HOSTILE:
            rows.append({"pair_id": f"p{i}", "prompt": f"question {i}",
                         "response_a": long if a_long else short, "response_b": short if a_long else long,
                         "generator_a": "g1", "generator_b": "g2",
                         "judge": judge, "p_a": float(rng.uniform(0.05, 0.95)), "human": [human, human, "a"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_analyze_treats_hostile_judge_names_as_text(tmp_path):
    table = _table(tmp_path / "t.jsonl")
    plots = tmp_path / "plots"
    out = subprocess.run([sys.executable, "-m", "judgebias", "analyze", str(table), "--out",
                          str(tmp_path / "m.json"), "--plots-dir", str(plots), "--no-mlflow"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    # Printed names cannot drive the terminal: no escape, bell or NUL byte reaches it.
    assert not {"\x1b", "\x07", "\x00"} & set(out.stdout + out.stderr)
    assert "\\x1b]0;owned" in out.stdout
    # Every plot inside its folder, one file per judge: a/b and a_b do not overwrite each other.
    files = sorted(p for p in tmp_path.rglob("*.png"))
    assert files and all(p.parent == plots for p in files)
    verbosity = [p for p in files if p.name.startswith("verbosity_")
                 and p.name not in ("verbosity_humans.png", "verbosity_judges.png")]  # not per judge
    assert len(verbosity) == len(HOSTILE)
    assert all(len(p.name) < 120 for p in files)
    # The markdown report shows the HTML-looking name as text.
    md = (tmp_path / "m_report.md").read_text()
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md


HOSTILE_KEYS = [".", "..", "...", "../x", "/abs", "a//b", "n" * 300, "org/model", "plain-judge"]


@pytest.mark.server
def test_analyze_and_leaderboard_log_hostile_judge_names_to_a_real_mlflow_server(mlflow_server, tmp_path):
    """MLflow refuses keys such as ``...eo`` or ``../x.eo`` and keys over 250 characters: each judge
    gets a key MLflow takes (its own name where it can), distinct per judge."""
    from mlflow import MlflowClient

    table = short_or_long(tmp_path / "t.jsonl", HOSTILE_KEYS, seed=1)
    uri = mlflow_server
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "hostile"}
    for args in (["analyze", str(table), "--out", str(tmp_path / "m.json"), "--no-traces"],
                 ["leaderboard", str(table), "--out", str(tmp_path / "lb.json"), "--reps", "50"]):
        done = subprocess.run([sys.executable, "-m", "judgebias", *args], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "Traceback" not in done.stderr
    from judgebias.tracking.log_analysis import mlflow_key_ok, name_key

    client = MlflowClient(tracking_uri=uri)
    everything = client.search_runs([client.get_experiment_by_name("hostile").experiment_id])
    runs = [r for r in everything if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
    analyze_run = next(r for r in runs if r.data.tags.get("judgebias.command") == "analyze")
    # One nested run per judge: the tag holds the name as it is, the run's name its key.
    children = [r for r in everything if r.data.tags.get("mlflow.parentRunId") == analyze_run.info.run_id]
    assert sorted(r.data.tags["judgebias.judge"] for r in children) == sorted(HOSTILE_KEYS)
    assert all(r.info.status == "FINISHED" for r in children)
    assert all(r.info.run_name == "judge:" + name_key(r.data.tags["judgebias.judge"]) for r in children)
    keys = set(analyze_run.data.metrics)
    # One distinct key prefix per judge, each MLflow-valid; plain names keep their own.
    prefixes = {name_key(j) for j in HOSTILE_KEYS}
    assert len(prefixes) == len(HOSTILE_KEYS)
    assert {"org/model", "plain-judge"} <= prefixes
    for prefix in prefixes:
        assert any(k.startswith(prefix + ".") for k in keys), (prefix, sorted(keys)[:20])
    assert all(mlflow_key_ok(k) for k in keys)
