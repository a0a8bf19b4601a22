"""The pointwise rating loop against a REAL Label Studio server: push a probability sample of items of
a pointwise table, post ratings through the API as two annotators would (a skip, a second rater, an
edit after a pull), pull through the CLI and check the figures against an independent computation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(find_label_studio() is None and not os.environ.get("CI"),
                       reason="label-studio not installed (scripts/labelstudio_install.sh)"),
]

# Eight items rated 1..5 by judge j; j wrote i1-i4, m wrote i5-i8.
SCORES = [5.0, 4.0, 4.0, 3.0, 2.0, 3.0, 4.0, 1.0]


def pointwise_table() -> pd.DataFrame:
    return pd.DataFrame({
        "item_id": [f"i{k}" for k in range(1, 9)],
        "prompt": [f"question {k}" for k in range(1, 9)],
        "response": [f"answer {k} " + "word " * k for k in range(1, 9)],
        "generator": ["j"] * 4 + ["m"] * 4, "judge": "j", "score": SCORES,
        "scale_min": 1, "scale_max": 5, "criterion": "helpfulness", "human_scores": [[]] * 8,
    })


def _rate(sdk, task_id: int, user: int, rating: int | None) -> int:
    result = ([] if rating is None else
              [{"from_name": "rating", "to_name": "response", "type": "choices",
                "value": {"choices": [str(rating)]}}])
    return int(sdk.annotations.create(id=task_id, result=result, was_cancelled=rating is None,
                                      completed_by=user).id)


def test_push_rate_pull_recompute_against_real_server(ls_server, tmp_path, monkeypatch):
    from conftest import annotator

    from judgebias.annotation.ratings import RatingClient
    from judgebias.cli import app
    from judgebias.metrics.pointwise_survey import rating_estimate, rating_features
    from judgebias.metrics.survey import STRATIFIED, SampleDesign, t_quantile
    from judgebias.tables.files import read_raw, write_table
    from judgebias.tables.pointwise import validate_pointwise

    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)
    table = write_table(pointwise_table(), tmp_path / "scores.jsonl")
    runner = CliRunner()
    title = "judgebias rating test"
    res = runner.invoke(app, ["annotate", "push", str(table), "--budget", "6", "--design", "uniform",
                              "--project-title", title, "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert "6 rating task(s) created" in res.output
    ledger = Ledger(tmp_path / "scores.labels.sqlite")
    tasks = ledger.tasks().set_index("pair_id")
    assert len(tasks) == 6
    client = RatingClient(ls_server.settings, (1, 5))
    sdk = client._ls
    project = sdk.projects.get(id=int(tasks["project_id"].iloc[0]))
    assert "rating" in project.parsed_label_config
    assert [c for c in ("1", "2", "3", "4", "5") if f'value="{c}"' in project.label_config] == list("12345")
    # The task carries what is shown and the opaque key, nothing a rater could read a score or a
    # judge's name from (in data or meta: the Data Manager can list both); the ledger keeps the rest.
    first = sdk.tasks.get(id=int(tasks["task_id"].iloc[0]))
    assert not first.meta and set(first.data) == {"prompt", "response", "rubric", "pair_key",
                                                      "prompt_html", "response_html", "rubric_html"}
    assert "helpfulness" in first.data["rubric"] and "1 (worst) to 5 (best)" in first.data["rubric"]
    users = {"u1": sdk.users.whoami().id, "u2": annotator(sdk, "annotator2")}
    drawn = sorted(tasks.index, key=lambda u: int(u[1:]))
    # Ratings: a human score per drawn item, the first item rated by two annotators (4 and 2 -> 3),
    # the last one skipped (nonresponse), one edited after the first pull.
    truth = {u: 1 + (int(u[1:]) * 2) % 5 for u in drawn}
    ids = {}
    for u in drawn[:-1]:
        ids[u] = _rate(sdk, int(tasks.loc[u, "task_id"]), users["u1"], truth[u])
    _rate(sdk, int(tasks.loc[drawn[0], "task_id"]), users["u2"], 2)
    _rate(sdk, int(tasks.loc[drawn[-1], "task_id"]), users["u1"], None)
    res = runner.invoke(app, ["annotate", "pull", str(table), "--no-mlflow"])
    assert res.exit_code == 0, res.output
    assert "pulled: new 7, updated 0" in res.output
    edited = drawn[1]
    sdk.annotations.update(id=ids[edited], result=[{"from_name": "rating", "to_name": "response",
                                                    "type": "choices", "value": {"choices": ["5"]}}])
    truth[edited] = 5
    res = runner.invoke(app, ["annotate", "pull", str(table), "--no-mlflow", "--json"])
    assert res.exit_code == 0, res.output
    assert "updated 1" in res.output and "rated 5, pending 1" in res.output

    # The merged table: pulled ratings became human_scores.
    merged, _ = validate_pointwise(read_raw(tmp_path / "scores.human.jsonl"))
    hs = dict(zip(merged["item_id"], merged["human_scores"], strict=True))
    assert sorted(hs[drawn[0]]) == sorted([float(truth[drawn[0]]), 2.0])
    assert list(hs[edited]) == [5.0] and list(hs[drawn[-1]]) == []

    # Independent computation. Uniform draw of 6 of 8, one skip: 5 rated items, taken as a simple
    # random sample of 5 of 8 (the nonresponse adjustment), so Hájek is the plain mean with the
    # finite-population t interval: se = sqrt((1 - 5/8) s^2 / 5), df 4.
    figures = json.loads((tmp_path / "scores.ratings.figures.json").read_text())["j"]["estimates"]
    rated = drawn[:-1]
    h = np.array([np.mean(hs[u]) for u in rated])
    s = np.array([SCORES[int(u[1:]) - 1] for u in rated])
    own = np.array([int(u[1:]) <= 4 for u in rated])
    q = t_quantile(4.0)
    for name, values in (("human_mean", h), ("score_bias_human", s - h)):
        est = figures[name]["design_based"]
        se = np.sqrt((1 - 5 / 8) * values.var(ddof=1) / 5)
        assert est["value"] == pytest.approx(values.mean())
        m = values.mean()
        assert (est["ci_low"], est["ci_high"]) == pytest.approx((m - q * se, m + q * se))
        assert est["n"] == 5
    gap = (s - h)[own].mean() - (s - h)[~own].mean()
    assert figures["score_self_preference"]["design_based"]["value"] == pytest.approx(gap)
    # PPI++ as the pure estimator gives it on the same sample (the design rebuilt by hand).
    everything = pointwise_table().assign(human_scores=[list(hs[f"i{k}"]) for k in range(1, 9)])
    sampled = np.array([f"i{k}" in rated for k in range(1, 9)])
    design = SampleDesign(np.full(8, 5 / 8), sampled, STRATIFIED, np.array(["all"] * 8))
    ppi = rating_estimate(rating_features(everything, "j"), pd.Index([f"i{k}" for k in range(1, 9)]),
                          design, "human_mean", ppi=True)
    assert figures["human_mean"]["ppi"]["value"] == pytest.approx(ppi.value)
    assert figures["human_mean"]["ppi"]["ci_high"] == pytest.approx(ppi.ci_high)

    # The same pull logged to a real MLflow store, as a run linked to the experiment's run: the metric
    # names are judge.figure.estimator.part and the ledger's counts, the values the ones checked above.
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ml = mlflow.tracking.MlflowClient(uri)
    parent = ml.create_run(ml.create_experiment("judgebias-ratings-test"))
    ml.set_terminated(parent.info.run_id)
    res = runner.invoke(app, ["annotate", "pull", str(table), "--tracking-uri", uri, "--parent-run-id",
                              parent.info.run_id])
    assert res.exit_code == 0, res.output
    assert "pulled: new 0, updated 0, unchanged 7" in res.output
    run_id = res.output.split("MLflow run: ")[1].split()[0]
    run = ml.get_run(run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.info.experiment_id == parent.info.experiment_id
    assert run.info.run_name == "human ratings: 5 of 6 items"
    assert run.data.params["kind"] == "pointwise ratings" and run.data.params["judges"] == "j"
    assert run.data.params["label_studio_url"] == ls_server.url
    metrics = run.data.metrics
    # Items pushed 6, rated 5, pending 1 (the skip); 6 live ratings (two raters on the first), 1 skip.
    assert {k: v for k, v in metrics.items() if k.startswith("status.")} == {
        "status.pushed": 6.0, "status.labelled": 5.0, "status.pending": 1.0, "status.labels": 6.0,
        "status.skipped": 1.0}
    figure_names = {k for k in metrics if not k.startswith("status.")}
    assert figure_names == {f"j.{fig}.{est}.{part}" for fig in ("human_mean", "score_bias_human",
                                                                "score_self_preference")
                            for est in ("design_based", "ppi") for part in ("value", "ci_low", "ci_high")}
    for name, values in (("human_mean", h), ("score_bias_human", s - h)):
        m, se = values.mean(), np.sqrt((1 - 5 / 8) * values.var(ddof=1) / 5)
        assert metrics[f"j.{name}.design_based.value"] == pytest.approx(m)
        assert metrics[f"j.{name}.design_based.ci_low"] == pytest.approx(m - q * se)
        assert metrics[f"j.{name}.design_based.ci_high"] == pytest.approx(m + q * se)
    assert metrics["j.score_self_preference.design_based.value"] == pytest.approx(gap)
    assert metrics["j.human_mean.ppi.value"] == pytest.approx(ppi.value)
    assert metrics["j.human_mean.ppi.ci_high"] == pytest.approx(ppi.ci_high)
    logged = json.loads(Path(ml.download_artifacts(run_id, "human_feedback.json", str(tmp_path))).read_text())
    assert logged["status"]["labelled"] == 5 and set(logged["figures"]) == {"j"}
    assert ls_server.api_key not in json.dumps(run.data.params) + json.dumps(logged)


def test_nightly_sync_pulls_ratings_pushes_items_and_refreshes_the_pointwise_figures(ls_server, monkeypatch,
                                                                                      tmp_path):
    """The flow's stage (judgebias.annotation.experiment.sync_annotations) on a run with a pointwise
    judge: before any rating push it says how to start; after `annotate push` on the run's pointwise
    table and four ratings, it pulls them, pushes the config's next batch of items and refreshes the
    figures, logged to MLflow."""
    import mlflow
    from test_annotation_selection import scenario_table

    from judgebias.annotation.experiment import sync_annotations
    from judgebias.annotation.ratings import RatingClient
    from judgebias.cli import app
    from judgebias.config.experiment import ExperimentConfig
    from judgebias.runs.layout import RunLayout
    from judgebias.runs.store import RunStore

    model = {"model": "smollm2-135m-instruct"}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = ExperimentConfig.model_validate({
        "name": "rating-wiring",
        "generators": [{"name": n, **model} for n in ("J", "X", "Y")],
        "judges": [*({"name": n, **model} for n in ("J", "G1", "G2")),
                   {"name": "j", "mode": "pointwise", "template": "rubric-5-direct", **model}],
        "self_map": {"J": "J"},
        "annotation": {"budget": 2, "design": "uniform", "project_title": "judgebias rating flow pairs"},
        "tracking": {"tracking_uri": uri},
    })
    store = RunStore(tmp_path / "run")
    store.write_frame("table.parquet", scenario_table())
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)
    lines: list[str] = []

    first = sync_annotations(cfg, store, push=False, progress=lines.append)
    assert first["ratings"] == {"skipped": "no pointwise table",
                                "table": str(store.path(RunLayout.pointwise(cfg).table))}
    table = store.path(RunLayout.pointwise(cfg).table)
    store.write_frame(RunLayout.pointwise(cfg).table, pointwise_table())
    second = sync_annotations(cfg, store, push=False, progress=lines.append)
    assert second["ratings"]["skipped"] == "no rating ledger"
    assert lines[-1] == (f"pointwise ratings: none pushed for {table}; start the rating loop with "
                         f"`judgebias annotate push {table}`")

    # Started under a title of the user's own: the scheduled pushes must keep going there.
    res = CliRunner().invoke(app, ["annotate", "push", str(table), "--budget", "4", "--design", "uniform",
                                   "--seed", "5", "--project-title", "team ratings, round 1"])
    assert res.exit_code == 0, res.output
    ledger = Ledger(table.with_name("table.labels.sqlite"))
    tasks = ledger.tasks().set_index("pair_id")
    assert len(tasks) == 4
    sdk = RatingClient(ls_server.settings, (1, 5))._ls
    assert sdk.projects.get(id=int(tasks["project_id"].iloc[0])).title == "team ratings, round 1"
    me = sdk.users.whoami().id
    ratings = {u: 1 + int(u[1:]) % 5 for u in tasks.index}
    for u, r in ratings.items():
        _rate(sdk, int(tasks.loc[u, "task_id"]), me, r)

    third = sync_annotations(cfg, store, push=True, progress=lines.append)
    rs = third["ratings"]
    assert rs["pulled"] == {"new": 4, "updated": 0, "unchanged": 0, "deleted": 0}
    # The config's next batch: 2 more of the 4 items not drawn yet, uniform.
    assert rs["pushed"] == 2 and len(ledger.tasks()) == 6
    assert ledger.tasks()["project_id"].nunique() == 1  # the nightly batch joined the user's project
    assert rs["status"]["pushed"] == 6 and rs["status"]["labelled"] == 4
    assert lines[-1].startswith("pointwise ratings: pulled {'new': 4") and "pushed 2" in lines[-1]
    # Refreshed figures: the 4 rated items are a simple random sample of 4 of 8 (the second batch's
    # 2 items drawn after the recompute), so the Hájek human mean is their plain mean.
    human = np.array(list(ratings.values()), float)
    est = rs["figures"]["j"]["estimates"]["human_mean"]["design_based"]
    assert est["value"] == pytest.approx(human.mean()) and est["n"] == 4
    on_disk = json.loads(Path(rs["figures_path"]).read_text())
    assert on_disk["j"]["estimates"]["human_mean"]["design_based"]["value"] == pytest.approx(human.mean())
    run = mlflow.tracking.MlflowClient(uri).get_run(rs["mlflow_run_id"])
    assert run.data.metrics["j.human_mean.design_based.value"] == pytest.approx(human.mean())
    assert run.data.metrics["status.labelled"] == 4.0
