"""A password inside a model's ``base_url`` and names from data on their way to MLflow, markdown and
spreadsheets: masked, escaped, defused (issue 45, security)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SECRET = "s3cret-pw-0123"
URL = f"https://judge:{SECRET}@llm.example.com/v1"


def test_a_password_in_base_url_stays_out_of_identity_cache_key_and_chunk_ids(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    from judgebias.backends.builder import JudgeSpec
    from judgebias.backends.openai_compat import OpenAICompatBackend

    backend = OpenAICompatBackend("m", URL)
    assert SECRET not in json.dumps(backend.identity()) and SECRET not in repr(backend)
    assert "judge:***@llm.example.com" in backend.identity()["base_url"]
    spec = JudgeSpec(name="j", model="m", backend="openai", base_url=URL)
    assert SECRET not in spec.model_key()
    # Another password for the same server is the same judge: the cache and chunks are shared.
    other = JudgeSpec(name="j", model="m", backend="openai", base_url=URL.replace(SECRET, "other"))
    assert other.model_key() == spec.model_key()


def test_mlflow_params_and_logged_config_text_mask_the_password():
    from judgebias.redaction import redact_uris
    from judgebias.tracking.log_analysis import safe_params

    params = safe_params({"config.judges.0.base_url": URL, "config.name": "demo"})
    assert params == {"config.judges.0.base_url": "https://judge:***@llm.example.com/v1",
                      "config.name": "demo"}
    text = f"judges:\n  - model: m\n    base_url: {URL}\n    other: 'http://plain.example.com/v1'\n"
    masked = redact_uris(text)
    assert SECRET not in masked and "judge:***@llm.example.com" in masked
    assert "http://plain.example.com/v1" in masked


def test_names_in_the_run_description_are_markdown_text():
    from judgebias.reporting.experiment_summary import headline_table

    lines = headline_table([("<img src=x onerror=alert(1)>", "EO", "+0.10 [0.0, 0.2]"), ("a|b", "EO", "0")])
    assert not any("<img" in line for line in lines)
    assert "&lt;img src=x onerror=alert(1)&gt;" in lines[2] and "a\\|b" in lines[3]


def test_spreadsheet_cells_from_names_cannot_run_as_formulas():
    from judgebias.display import spreadsheet_safe

    frame = pd.DataFrame({"judge": ["=HYPERLINK(\"http://x\")", "@SUM(A1)", "+1", "-2+3", "plain"],
                          "value": [-1.5, 2.0, 0.0, 1.0, 3.0]})
    safe = spreadsheet_safe(frame)
    assert safe["judge"].tolist() == ["'=HYPERLINK(\"http://x\")", "'@SUM(A1)", "'+1", "'-2+3", "plain"]
    assert safe["value"].tolist() == [-1.5, 2.0, 0.0, 1.0, 3.0]  # numbers stay numbers
    assert frame["judge"].iloc[0].startswith("=")  # the caller's frame is not changed


def test_replay_csv_defuses_a_judge_named_like_a_formula(tmp_path):
    root = Path(__file__).resolve().parents[1]
    table = pd.read_parquet(root / "judgebias" / "data" / "pandalm_testset.parquet")
    hostile = "=HYPERLINK(\"http://evil\")"
    table["judge"] = table["judge"].replace({"pandalm-7b": hostile})
    path = tmp_path / "t.parquet"
    table.to_parquet(path)
    done = subprocess.run([sys.executable, "-m", "judgebias", "annotate", "replay", str(path), "-j", hostile,
                           "--budgets", "25", "--reps", "2", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("results.csv", "summary.csv"):
        cells = (tmp_path / "r" / name).read_text().splitlines()[1].split(",")
        assert not any(c.startswith(("=", "@", '"=')) for c in cells), cells
        assert any(c.lstrip('"').startswith("'=HYPERLINK") for c in cells), cells


# --- end to end: what a real run writes, wherever it writes it ----------------------------------
def _files_holding(secret: str, *roots: Path) -> list[str]:
    """Every file under ``roots`` whose bytes hold ``secret`` (SQLite files and their WAL included)."""
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and secret.encode() in path.read_bytes():
                found.append(str(path))
    return found


@pytest.mark.slow
def test_a_run_through_prefect_keeps_the_password_out_of_every_store(prefect_harness, tmp_path, monkeypatch):
    """Generators and judges behind an endpoint whose base_url carries a password: the calls carry
    it, and no file of the run holds it: Prefect's database (flow-run parameters, logs), the MLflow
    store (params, the logged config, traces), the run folder, the call cache."""
    import base64

    import prefect.settings
    import yaml
    from prefect.logging.handlers import APILogHandler

    from judgebias.bench.openai_stub import StubServer, StubState
    from judgebias.config.experiment import load_config
    from judgebias.flows.experiment import experiment

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.chdir(tmp_path)  # MLflow's sqlite store puts artifacts in ./mlruns
    state = StubState()
    with StubServer(state) as server:
        url = server.base_url.replace("http://", f"http://judge:{SECRET}@")
        model = {"backend": "openai", "base_url": url}
        doc = {"name": "secret", "dataset": {"source": "mt-bench-40", "sample": 3, "seed": 0},
               "generators": [{"name": "ga", "model": "gen-a", "max_new_tokens": 8, **model},
                              {"name": "gb", "model": "gen-b", "max_new_tokens": 8, **model}],
               "judges": [{"name": "ja", "model": "judge-a", **model},
                          {"name": "jb", "model": "judge-b", **model}],
               "self_map": {"ja": "ga", "jb": "gb"}, "analyses": {"perplexity": False, "attention": False},
               "ablations": {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}},
               "tracking": {"experiment": "secret", "traces": True,
                            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
               "run_dir": str(tmp_path / "runs"), "cache_dir": str(tmp_path / "calls")}
        config = tmp_path / "config" / "secret.yaml"
        config.parent.mkdir()
        config.write_text(yaml.safe_dump(doc))
        result = experiment(str(config), cfg=load_config(config))
    APILogHandler().flush()  # the flow's log lines reach Prefect's database
    # The object kept the password: every call was sent with it (as HTTP basic credentials).
    sent = base64.b64encode(f"judge:{SECRET}".encode()).decode()
    assert state.summary()["accepted"] > 0 and set(state.authorizations) == {f"Basic {sent}"}
    assert Path(result["run_folder"], "metrics.json").is_file()
    prefect_db = Path(prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1])
    stores = [tmp_path / "runs", tmp_path / "calls", tmp_path / "mlruns", *tmp_path.glob("mlflow.db*"),
              *prefect_db.parent.glob(prefect_db.name + "*")]
    assert prefect_db.is_file() and all(p.exists() for p in stores[:3])
    assert _files_holding(SECRET, *stores) == []
    assert _files_holding("judge:***@", prefect_db.parent)  # the flow runs' parameters hold the masked URL


def test_judge_command_keeps_the_password_out_of_its_outputs_and_cache(tmp_path):
    from judgebias.bench.openai_stub import StubServer, StubState

    state = StubState()
    table = tmp_path / "pairs.jsonl"
    table.write_text("".join(json.dumps({"pair_id": str(i), "prompt": f"q{i}", "response_a": "x" * (i + 1),
                                         "response_b": "y"}) + "\n" for i in range(3)))
    out = tmp_path / "out" / "judged.jsonl"
    with StubServer(state) as server:
        url = server.base_url.replace("http://", f"http://judge:{SECRET}@")
        done = subprocess.run([sys.executable, "-m", "judgebias", "judge", str(table), "--backend", "openai",
                               "--base-url", url, "--judge", "m", "--out", str(out),
                               "--cache-dir", str(tmp_path / "calls")], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "OPENAI_API_KEY": "k"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert state.summary()["accepted"] > 0
    assert SECRET not in done.stdout + done.stderr
    assert _files_holding(SECRET, tmp_path / "out", tmp_path / "calls") == []


def test_the_mlflow_run_description_shows_hostile_names_as_text(tmp_path):
    """``analyze`` logging to MLflow: a judge named like HTML reaches the run's description (markdown,
    which MLflow renders) escaped."""
    import mlflow

    rows = [{"pair_id": f"p{i}", "prompt": f"q{i}", "response_a": "short",
             "response_b": "a longer one " * (i % 3 + 1),
             "judge": judge, "p_a": 0.2 + 0.6 * ((i * 7 + k) % 5) / 4, "human": ["a" if i % 2 else "b"]}
            for i in range(20) for k, judge in enumerate(["<img src=x onerror=alert(1)>", "plain"])]
    table = tmp_path / "t.jsonl"
    table.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "judgebias", "analyze", str(table), "--out",
                           str(tmp_path / "m.json"), "--no-traces"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path,
                          env={**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "names"})
    assert done.returncode == 0, done.stderr[-2000:]
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("names").experiment_id])
    (run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    note = run.data.tags["mlflow.note.content"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in note and "<img" not in note
    # Each judge's nested run leads with its own figures, the name as inert text there too.
    (child,) = [r for r in runs if r.data.tags.get("judgebias.judge") == "<img src=x onerror=alert(1)>"]
    note = child.data.tags["mlflow.note.content"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in note and "<img" not in note


def test_coverage_csvs_defuse_cells_that_start_like_a_formula(tmp_path):
    from judgebias.coverage.report import write
    from judgebias.coverage.runner import run

    summary = run(["verbosity"], ns=(25,), reps=2, seed=1)
    summary.loc[0, "figure"] = "=HYPERLINK(\"http://evil\")"
    paths = write(summary, tmp_path)
    text = paths["csv"].read_text()
    assert "'=HYPERLINK" in text and ",=HYPERLINK" not in text and ",\"=HYPERLINK" not in text
