"""MLflow's compare view lined analyze runs up as NaN: the parent's metric names carry the judge
(``<judge>.verbosity_bias``), so two runs of different judges shared no column but ``dataset.*``.
Each judge now has a nested run ``judge:<key>`` tagged ``judgebias.judge=<name>`` whose metrics
carry no judge in the name: the same names for every judge of every table. Against a real
``mlflow server``."""

from __future__ import annotations

import json

import pytest
from judged_tables import short_or_long
from typer.testing import CliRunner

# Two tables, two judges each, no judge in both; one name MLflow would refuse in a key or a path.
TABLES = {"first": ("alpha", "org/beta"), "second": ("gamma", "../" + "n" * 300)}


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
        table = short_or_long(tmp_path / f"{name}.jsonl", judges, seed)
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


@pytest.mark.server
def test_a_pointwise_analyze_run_has_a_judge_run_per_judge(mlflow_server, tmp_path, monkeypatch):
    """The pointwise path the same way: ``j`` and ``org/g`` (no human scores: fewer figures) each
    in a nested run, the figures of the parent's ``<judge>.`` names without the prefix."""
    from mlflow import MlflowClient
    from test_pointwise_mlflow import OTHER, table

    from judgebias.cli import app
    from judgebias.tables.files import write_table
    from judgebias.tracking.log_analysis import COMPARE_JUDGES, name_key
    from judgebias.tracking.log_pointwise import pointwise_judge_metrics

    path = write_table(table(), tmp_path / "scores.jsonl")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "judge-runs-pointwise")
    res = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "m.json"), "--reps", "100",
                                   "--no-report", "--no-traces"])
    assert res.exit_code == 0, res.output
    parent = MlflowClient(tracking_uri=mlflow_server).get_run(res.output.split("MLflow: run ")[1].split()[0])
    assert parent.data.tags["mlflow.note.content"].strip() == COMPARE_JUDGES
    client = MlflowClient(tracking_uri=mlflow_server)
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {r.data.tags["judgebias.judge"] for r in children} == {"j", OTHER}
    result = json.loads((tmp_path / "m.json").read_text())
    for run in children:
        judge = run.data.tags["judgebias.judge"]
        assert run.data.tags["judgebias.table_kind"] == "pointwise"
        assert run.data.metrics == pytest.approx(pointwise_judge_metrics(result, judge))
        prefix = name_key(judge) + "."
        in_parent = {k for k in parent.data.metrics if k.startswith(prefix)}
        assert {prefix + k for k in run.data.metrics} == in_parent
    judged = {r.data.tags["judgebias.judge"]: set(r.data.metrics) for r in children}
    assert "score_agreement_human.spearman" in judged["j"] - judged[OTHER]  # org/g has no humans
    assert "score_distribution.mean" in judged["j"] & judged[OTHER]


def test_a_judge_whose_name_begins_another_keeps_only_its_own_figures():
    """The experiment's judge runs took a judge's figures by stripping ``<judge>.`` off the parent's
    names: judge ``a`` also took ``a.b``'s (``a.b.verbosity_bias`` read as ``b.verbosity_bias``). Each
    judge's names now come from its own records; the parent's are those behind its key."""
    from judgebias.tracking.log_analysis import flatten_metrics, judge_figure_metrics
    from judgebias.tracking.log_pointwise import flatten_pointwise, pointwise_judge_metrics

    est = {"value": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n": 30}
    result = {"judges": {"a": {"verbosity_bias": est}, "a.b": {"verbosity_bias": {**est, "value": 0.5}}},
              "dataset": {"rows": 60}}
    assert judge_figure_metrics(result, "a") == {"verbosity_bias": 0.1, "verbosity_bias.ci_low": 0.0,
                                                 "verbosity_bias.ci_high": 0.2, "verbosity_bias.n": 30.0}
    assert judge_figure_metrics(result, "a.b")["verbosity_bias"] == 0.5
    assert flatten_metrics(result) == {
        **{f"a.{k}": v for k, v in judge_figure_metrics(result, "a").items()},
        **{f"a.b.{k}": v for k, v in judge_figure_metrics(result, "a.b").items()}, "dataset.rows": 60.0}
    # Pointwise, per criterion: a dotted judge's name stays whole before "criterion." (it was cut at
    # its first dot: "gpt-3.criterion.style.5.score_distribution").
    dist = {"score_distribution": {"value": 0.4, "n": 5}}  # the value is its skew (the registry's name)
    pw = {"judges": {"gpt-3.5": dist}, "by_criterion": {"style": {"judges": {"gpt-3.5": dist}}}}
    assert pointwise_judge_metrics(pw, "gpt-3.5") == {
        "score_distribution.skew": 0.4, "score_distribution.skew.n": 5.0,
        "criterion.style.score_distribution.skew": 0.4, "criterion.style.score_distribution.skew.n": 5.0}
    assert "gpt-3.5.criterion.style.score_distribution.skew" in flatten_pointwise(pw)
