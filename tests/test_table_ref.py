"""A large input table is recorded in MLflow by reference (digest, path, rows) and a size-capped
sample, not copied; a small one is still copied. Against a real MLflow (SQLite store)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from test_analyze import synthetic
from typer.testing import CliRunner

from judgebias.tables.files import read_raw, write_table


@pytest.fixture
def mlflow_uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _run(uri: str, path: Path, max_bytes: int | None):
    from mlflow.tracking import MlflowClient

    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.settings import TrackingSettings
    from judgebias.tracking.table_ref import log_table

    with mlflow_run("table", settings=TrackingSettings(tracking_uri=uri, experiment_name="t")) as run:
        ref = log_table(path, max_bytes=max_bytes)
    client = MlflowClient(tracking_uri=uri)
    return ref, client.get_run(run.info.run_id), client


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_large_table_is_referenced_with_a_capped_sample(tmp_path, mlflow_uri, suffix):
    table = synthetic(200)
    path = write_table(table, tmp_path / f"t{suffix}")
    limit = path.stat().st_size // 3  # "large": three times the limit
    _, run, client = _run(mlflow_uri, path, limit)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.data.tags["judgebias.table_logged"] == "reference+sample"
    assert run.data.params["table.sha256"] == digest
    assert run.data.params["table.rows"] == str(len(table))
    assert run.data.params["table.bytes"] == str(path.stat().st_size)
    names = {a.path for a in client.list_artifacts(run.info.run_id, "table")}
    assert names == {f"table/sample_{path.name}", "table/reference.json"}  # no copy of the table
    got = Path(client.download_artifacts(run.info.run_id, "table", str(tmp_path / "dl")))
    reference = json.loads((got / "reference.json").read_text())
    assert reference["sha256"] == digest and reference["path"] == str(path.resolve())
    sample_file = got / f"sample_{path.name}"
    assert sample_file.stat().st_size <= limit
    sample = read_raw(sample_file)
    assert 0 < len(sample) == reference["sample_rows"] < len(table)
    head = read_raw(path).head(len(sample))
    pd.testing.assert_frame_equal(sample[["pair_id", "judge", "p_a"]], head[["pair_id", "judge", "p_a"]])


def test_small_table_is_copied(tmp_path, mlflow_uri):
    path = write_table(synthetic(20), tmp_path / "t.jsonl")
    ref, run, client = _run(mlflow_uri, path, None)  # default limit: 50 MB
    assert ref["logged"] == run.data.tags["judgebias.table_logged"] == "copy"
    names = {a.path for a in client.list_artifacts(run.info.run_id, "table")}
    assert names == {"table/t.jsonl"}
    assert run.data.params["table.sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_limit_from_the_environment(monkeypatch):
    from judgebias.tracking.table_ref import max_copy_bytes

    monkeypatch.setenv("JUDGEBIAS_MLFLOW_TABLE_MAX_MB", "0.5")
    assert max_copy_bytes() == 2**19
    monkeypatch.setenv("JUDGEBIAS_MLFLOW_TABLE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="JUDGEBIAS_MLFLOW_TABLE_MAX_MB"):
        max_copy_bytes()


def test_cli_analyze_references_a_table_over_the_limit(tmp_path, mlflow_uri, monkeypatch):
    from mlflow.tracking import MlflowClient

    from judgebias.cli import app

    path = write_table(synthetic(60), tmp_path / "t.parquet")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("JUDGEBIAS_MLFLOW_TABLE_MAX_MB", str(path.stat().st_size / 2 / 2**20))
    res = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "m.json"), "--reps", "100",
                                   "--no-report"])
    assert res.exit_code == 0, res.output
    client = MlflowClient(tracking_uri=mlflow_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # not its judges' runs
    assert run.data.tags["judgebias.table_logged"] == "reference+sample"
    names = {a.path for a in client.list_artifacts(run.info.run_id, "table")}
    assert "table/t.parquet" not in names and "table/sample_t.parquet" in names
