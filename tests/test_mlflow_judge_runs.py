"""MLflow's compare view lined analyze runs up as NaN: the parent's metric names carry the judge
(``<judge>.verbosity_bias``), so two runs of different judges shared no column but ``dataset.*``.
Each judge now has a nested run ``judge:<key>`` tagged ``judgebias.judge=<name>`` whose metrics
carry no judge in the name: the same names for every judge of every table. Against a real
``mlflow server``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

# Two tables, two judges each, no judge in both; one name MLflow would refuse in a key or a path.
TABLES = {"first": ("alpha", "org/beta"), "second": ("gamma", "../" + "n" * 300)}


def _table(path, judges, seed):
    """Pairs of a short and a longer answer from three generators, each judged by every judge, with
    three human labels: every pairwise figure but the self-preference ones can be computed."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(30):
        human = ["a", "b"][rng.integers(2)]
        for judge in judges:
            rows.append({"pair_id": f"p{i}", "prompt": f"question {i}", "response_a": "short",
                         "response_b": "a longer answer " * (1 + i % 4), "judge": judge,
                         "generator_a": ["g1", "g2", "g3"][i % 3], "generator_b": ["g2", "g3", "g1"][i % 3],
                         "p_a": float(rng.uniform(0.05, 0.95)), "human": [human, human, "a"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _judge_filter(name: str) -> str:
    return "tags.judgebias.judge = '" + name.replace("'", "\\'") + "'"


@pytest.mark.server
def test_analyze_runs_of_different_judges_share_metric_names_in_their_judge_runs(
        mlflow_server, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from judgebias.cli import app
    from judgebias.tracking.log_analysis import COMPARE_JUDGES, mlflow_key_ok, name_key

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "judge-runs")
    parents = {}
    for seed, (name, judges) in enumerate(TABLES.items()):
        table = _table(tmp_path / f"{name}.jsonl", judges, seed)
        res = CliRunner().invoke(app, ["analyze", str(table), "--out", str(tmp_path / f"{name}.json"),
                                       "--reps", "100", "--no-report", "--no-traces"])
        assert res.exit_code == 0, res.output
        parents[name] = res.output.split("MLflow: run ")[1].split()[0]

    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.get_experiment_by_name("judge-runs").experiment_id
    children = {}
    for table, judges in TABLES.items():
        parent = client.get_run(parents[table])
        for judge in judges:
            # The filter the parent's description names finds the judge's run, whatever its name.
            (run,) = client.search_runs([exp], filter_string=_judge_filter(judge))
            assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
            assert run.data.tags["judgebias.judge"] == judge and run.data.tags["judgebias.kind"] == "judge"
            assert run.data.tags["judgebias.dataset_digest"] == parent.data.params["table.sha256"]
            # A safe run name: the plain name kept, the hostile one (climbing, 303 characters) as its key.
            assert run.info.run_name == f"judge:{name_key(judge)}" and "../" not in run.info.run_name
            assert len(run.info.run_name) < 120
            # The same numbers as the parent's prefixed names, which stay as they were.
            prefix = name_key(judge) + "."
            assert {prefix + k: v for k, v in run.data.metrics.items()} == {
                k: v for k, v in parent.data.metrics.items() if k.startswith(prefix)}
            children[judge] = run
        assert COMPARE_JUDGES in parent.data.tags["mlflow.note.content"]
        assert f"{name_key(judges[0])}.verbosity_bias" in parent.data.metrics

    keys = {judge: set(run.data.metrics) for judge, run in children.items()}
    first = keys["alpha"]
    assert {"verbosity_bias", "verbosity_bias.ci_low", "verbosity_bias.ci_high", "verbosity_bias.n",
            "agreement_human", "agreement_gold"} <= first, sorted(first)
    assert all(k == first for k in keys.values()), {j: sorted(k ^ first) for j, k in keys.items()}
    assert all(mlflow_key_ok(k) and "alpha" not in k and "gamma" not in k for k in first)
    # The same judge-free names the imported tables' and the experiment's judge runs carry.
    from judgebias.tracking.log_analysis import judge_figure_metrics

    result = json.loads((tmp_path / "first.json").read_text())
    assert set(judge_figure_metrics(result, "alpha")) == first
