"""``analyze`` of a Parquet or JSONL table too large for automatic traces (read without its response texts)
that ``--skip-invalid`` shrinks to a size that gets them: the traces are logged with the texts."""

from __future__ import annotations

import pandas as pd
import pytest
from test_mlflow_traces import small_table
from typer.testing import CliRunner

from judgebias.cli.options import TRACES_AUTO_ROWS
from judgebias.tables.files import write_table


@pytest.fixture()
def sqlite_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "lean")
    yield uri


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_skip_invalid_below_the_traces_threshold_logs_traces_with_texts(tmp_path, sqlite_uri, monkeypatch,
                                                                        suffix):
    from mlflow import MlflowClient

    from judgebias.cli import app
    from judgebias.tables import for_analysis as io

    reads = []
    real = io.read_for_analysis

    def spy(*args, **kwargs):
        table, exclusions = real(*args, **kwargs)
        # Lean, and column-wise (a categorical of the prompts): a JSONL table too, through Arrow.
        reads.append((kwargs.get("response_features") is not None,
                      isinstance(table["prompt"].dtype, pd.CategoricalDtype)))
        return table, exclusions

    monkeypatch.setattr(io, "read_for_analysis", spy)
    monkeypatch.setattr(io, "JSONL_COLUMNAR_BYTES", 0)  # a JSONL table read through Arrow, as a large one

    good = small_table()  # 14 valid rows
    bad = pd.DataFrame([{"pair_id": f"bad{i}", "prompt": f"q{i}", "response_a": f"left {i}",
                         "response_b": f"right {i}", "judge": "j1", "p_a": 1.5} for i in range(45)])
    table = pd.concat([good, bad], ignore_index=True)
    assert len(table) > TRACES_AUTO_ROWS >= len(good)  # read lean, then few enough for traces
    src = write_table(table, tmp_path / f"big.{suffix}")
    res = CliRunner().invoke(app, ["analyze", str(src), "--out", str(tmp_path / "m.json"), "--skip-invalid",
                                   "--reps", "200", "--no-report", "--self", "j2=y"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert reads == [(True, True)]  # read lean once; the texts of the rows kept are read back for the traces
    assert "MLflow traces: 14 logged" in res.output
    client = MlflowClient(tracking_uri=sqlite_uri)
    experiment = client.get_experiment_by_name("lean")
    traces = client.search_traces(locations=[experiment.experiment_id], max_results=100)
    assert len(traces) == 14
    by_key = {(t.data.spans[0].inputs["pair_id"], t.data.spans[0].inputs["judge"]): t.data.spans[0].inputs
              for t in traces}
    # The texts, not their counts or stand-ins: small_table's p2 has "yes " x 3 and "no " x 4.
    assert by_key["p2", "j1"]["response_a"] == "yes yes yes "
    assert by_key["p2", "j1"]["response_b"] == "no no no no "
    assert by_key["p2", "j1"]["prompt"] == "question 2 <b>bold</b>"
    assert not any("_jb_" in str(t.to_dict()) for t in traces)  # the counts that stood for them: gone
