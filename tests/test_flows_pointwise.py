"""A pointwise judge in an experiment, end to end on the tiny local models with a real call cache:
the generated responses scored alone, the pointwise figures and plots in the run folder, the
pointwise probes' figures, the page's pointwise section, MLflow, and a rerun without a model call.
The run folder (3 instructions, 2 generators) is shared with test_flows_probes.py."""

from __future__ import annotations

import os

import pytest
from conftest import POINTWISE_PROBES

PROBES = POINTWISE_PROBES


@pytest.fixture
def pw_run(probes_run):
    return probes_run  # one run folder with the probe tests (conftest.probes_run)


def test_the_pointwise_judge_scores_every_response(pw_run):
    from judgebias.runs.layout import RunLayout

    cfg, store, out = pw_run["cfg"], pw_run["store"], pw_run["figures"]
    layout = RunLayout.pointwise(cfg)
    rows = store.read_frame(layout.judgments("pa"))
    # 3 instructions x 2 generators, each response once, read from the probabilities.
    assert len(rows) == 6 and set(rows["generator"]) == {"ta", "tb"}
    assert rows["score"].between(1, 5).all() and (rows["score_source"] == "probabilities").all()
    assert (rows["template_version"] == "rubric-5-direct@1-direct:chat").all()
    figs = out["judges"]["pa"]
    assert figs["score_distribution"]["n"] == 6
    assert figs["score_self_preference"]["dp"]["n"] == 6  # own (ta) against other (tb)
    assert "pointwise_pairwise_consistency" in figs or "pointwise_pairwise_consistency" in figs["skipped"]
    assert out["pairwise_twins"] == {"pa": "ta"}
    assert store.path(layout.plot("score_distribution_pa")).is_file()
    # The pairwise judges never saw the pointwise one.
    assert not store.has(RunLayout().judgments("pa"))


def test_every_pointwise_probe_has_its_two_figures(pw_run):
    out = pw_run["probed"]
    assert set(out["probes"]) == {f"{p}@1" for p in PROBES}
    for tag, entry in out["judges"]["pa"].items():
        rate, shift = entry["unchanged_rate"], entry["score_shift"]
        assert 0 <= rate["value"] <= 1 and rate["n"] == 3, (tag, rate)
        assert shift["n"] == 3 and -4 <= shift["value"] <= 4 and "p_value" in shift, (tag, shift)


def test_the_page_and_mlflow_show_the_pointwise_judge(pw_run):
    from mlflow.tracking import MlflowClient

    from judgebias.reporting.experiment_summary import console_report
    from judgebias.runs.layout import RunLayout
    from judgebias.tracking.experiment import settings_for
    from judgebias.tracking.log_pointwise import log_experiment_pointwise
    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.probes import log_probes

    cfg, store = pw_run["cfg"], pw_run["store"]
    page = store.path(RunLayout().report_html).read_text()
    assert "pa (pointwise)" in page and "unchanged under rubric_reversed" in page
    assert "scoring perturbations tried" in page or "Scoring perturbations that move" in page
    assert "pa (pointwise): the share of its scores at each level" in page  # its plot, captioned
    assert "Pointwise probes: how far each scoring perturbation" in page
    text = console_report(cfg, store, {}, wall_s=1.0, peak_rss_gb=0.1)
    assert "pa (pointwise) [" in text and "pa (pointwise): " in text
    settings = settings_for(cfg)
    with mlflow_run("pointwise test", settings=settings) as parent:
        log_probes(cfg, store, {})
        log_experiment_pointwise(cfg, store, {})
    client = MlflowClient(tracking_uri=settings.resolved_uri())
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    by_kind = {r.data.tags.get("judgebias.probe") or r.data.tags["judgebias.kind"]: r for r in children}
    # The run folder also holds the CALM probes (conftest.probes_run): one nested run each.
    assert set(by_kind) == {"pointwise", "pointwise_probes", "perturbations", "self_recognition"}
    probe_metrics = by_kind["pointwise_probes"].data.metrics
    rate = pw_run["probed"]["judges"]["pa"]["scale_1_10@1"]["unchanged_rate"]
    assert probe_metrics["pa.scale_1_10.unchanged_rate"] == pytest.approx(rate["value"])
    figures = by_kind["pointwise"].data.metrics
    assert figures["pa.score_distribution.skew.n"] == 6
    assert "plots" in {a.path for a in client.list_artifacts(by_kind["pointwise"].info.run_id)}
    probe_plots = client.list_artifacts(by_kind["pointwise_probes"].info.run_id, "plots")
    assert [a.path for a in probe_plots] == ["plots/pointwise_probes.png"]


def test_a_rerun_makes_no_model_call(pw_run):
    from judgebias.flows.experiment import pointwise_judging, pointwise_probe
    from judgebias.runs.layout import RunLayout

    cfg, store = pw_run["cfg"], pw_run["store"]
    # As if killed after the model calls but before any output was written.
    for folder in (RunLayout.pointwise(cfg).prefix, RunLayout.pointwise_probes(cfg).prefix):
        for path in store.path(folder).rglob("*"):
            if path.is_file():
                path.unlink()
    cwd = os.getcwd()
    os.chdir(pw_run["base"])
    try:
        again = pointwise_judging(cfg)
        probed = pointwise_probe(cfg)
    finally:
        os.chdir(cwd)
    stages = store.manifest()["stages"]
    reran = [s for s in stages if "judge_responses[pa]" in s]
    # The judge's own template, the reference baseline and the five variants, plus the main scores.
    assert len(reran) == 8, reran
    for stage in reran:
        assert stages[stage]["calls"] == 0 and stages[stage]["hits"] > 0, (stage, stages[stage])
    assert again["judges"] == pw_run["figures"]["judges"]
    assert probed == pw_run["probed"]
