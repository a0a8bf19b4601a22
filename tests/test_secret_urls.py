"""A password inside a model's ``base_url`` and names from data on their way to MLflow, markdown and
spreadsheets: masked, escaped, defused (issue 45, security)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

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
