"""The two probes as flows on the tiny local models with a real call cache: perturbed pairs judged
in both orders, self-recognition asked in both orders, their figures in the run folder, and a
rerun that makes no model call. The run folder is shared with test_flows_pointwise.py."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def probe_run(probes_run):
    return probes_run  # one run folder with the pointwise tests (conftest.probes_run)


def test_perturbed_pairs_are_judged_and_measured(probe_run):
    from judgebias.runs.layout import RunLayout

    cfg, store, out = probe_run["cfg"], probe_run["store"], probe_run["perturbed"]
    assert set(out["perturbations"]) == {"authority@1", "sentiment_hostile@1"}
    main_pairs = store.read_frame(RunLayout().pairs).set_index("pair_id")
    layout = RunLayout.perturbation(cfg)
    pairs = store.read_frame(layout.pairs)
    # Every perturbation of the same two sampled pairs, in one table judged in one call per judge.
    assert pairs["perturbation"].value_counts().to_dict() == {"authority@1": 2, "sentiment_hostile@1": 2}
    assert pairs.groupby("perturbation")["source_pair_id"].apply(frozenset).nunique() == 1
    for rec in pairs.to_dict("records"):
        other = "b" if rec["perturbed_side"] == "a" else "a"
        assert rec[f"response_{other}"] == main_pairs.loc[rec["source_pair_id"], f"response_{other}"]
    for judge in ("ta", "tb"):
        judged = store.read_frame(layout.judgments(judge))
        assert len(judged) == 4 and judged["p_a_ab"].notna().all() and judged["p_a_ba"].notna().all()
        for tag in out["perturbations"]:
            fig = out["judges"][judge][tag]
            assert 0 <= fig["robustness_rate"]["value"] <= 1 and fig["robustness_rate"]["n"] <= 2
            assert fig["shift"]["scale"] == "probability"
    assert store.path(RunLayout.perturbation(cfg).plot("perturbations")).is_file()  # judges overlaid


def test_self_recognition_asks_the_judge_about_its_own_pairs(probe_run):
    from judgebias.runs.layout import RunLayout

    cfg, store, out = probe_run["cfg"], probe_run["store"], probe_run["recognised"]
    layout = RunLayout.recognition(cfg)
    for judge in ("ta", "tb"):
        asked = store.read_frame(layout.judgments(judge))
        assert len(asked) == 2 and (asked["template_version"].str.startswith("self-recognition@1")).all()
        own = (asked["generator_a"] == judge) ^ (asked["generator_b"] == judge)
        assert own.all()
        rec = out["judges"][judge]["self_recognition"]
        assert rec.get("value") is None or 0 <= rec["value"] <= 1


def test_a_rerun_of_the_probes_makes_no_model_call(probe_run):
    from judgebias.flows.experiment import perturbation_probe, self_recognition_probe
    from judgebias.runs.layout import RunLayout

    cfg, store = probe_run["cfg"], probe_run["store"]
    before = store.read_json(RunLayout.perturbation(cfg).probe_result)
    # As if killed after the model calls but before any probe output was written.
    for judge in ("ta", "tb"):
        store.path(RunLayout.perturbation(cfg).judgments(judge)).unlink()
        store.path(RunLayout.recognition(cfg).judgments(judge)).unlink()
    store.path(RunLayout.perturbation(cfg).probe_result).unlink()
    store.path(RunLayout.recognition(cfg).probe_result).unlink()
    cwd = os.getcwd()
    os.chdir(probe_run["base"])
    try:
        after = perturbation_probe(cfg)
        self_recognition_probe(cfg)
    finally:
        os.chdir(cwd)
    stages = store.manifest()["stages"]
    reran = [s for s in stages if s.endswith(("judge_pairs[ta]", "judge_pairs[tb]")) and "/" in s]
    assert len(reran) == 4  # the perturbations (one call) + recognition, 2 judges each
    for stage in reran:
        assert stages[stage]["calls"] == 0 and stages[stage]["hits"] > 0, (stage, stages[stage])
    assert after == before


def test_probes_are_logged_as_nested_mlflow_runs(probe_run):
    from mlflow.tracking import MlflowClient

    from judgebias.tracking.experiment import settings_for
    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.probes import log_probes

    cfg, store = probe_run["cfg"], probe_run["store"]
    settings = settings_for(cfg)
    with mlflow_run("probes test", settings=settings) as parent:
        log_probes(cfg, store, {"judgebias.config_hash": cfg.config_hash()})
    client = MlflowClient(tracking_uri=settings.resolved_uri())
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_probe = {r.data.tags["judgebias.probe"]: r for r in children}
    # The run folder also holds the pointwise probes (conftest.probes_run): one nested run each.
    assert set(by_probe) == {"perturbations", "self_recognition", "pointwise_probes"}
    metrics = by_probe["perturbations"].data.metrics
    out = probe_run["perturbed"]["judges"]["ta"]["authority@1"]["robustness_rate"]
    assert metrics["ta.authority.robustness_rate"] == pytest.approx(out["value"])
    assert metrics["ta.authority.robustness_rate.n"] == out["n"]
    assert "probe.json" in {a.path for a in client.list_artifacts(by_probe["self_recognition"].info.run_id)}


def test_the_run_page_shows_the_probes(probe_run):
    from judgebias.runs.layout import RunLayout

    page = probe_run["store"].path(RunLayout().report_html).read_text()
    assert "robust to authority" in page and "shift toward sentiment_hostile" in page
    assert "Ye et al. 2024 (CALM)" in page
    assert "Perturbations (CALM)" in page or "perturbations tried (CALM)" in page


def test_the_report_command_rebuilds_the_page_with_the_probes(probe_run, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    store = probe_run["store"]
    out = tmp_path / "again.html"
    done = CliRunner().invoke(app, ["report", str(store.root), "-o", str(out)])
    assert done.exit_code == 0, done.output
    page = out.read_text()
    # Without the index the command has no config to find the hashed probe folders.
    assert "robust to authority" in page and "shift toward sentiment_hostile" in page


def test_probe_statements_by_hand():
    from judgebias.reporting.trust import probe_statements

    # Four tests (Holm): shifts 0.001, 0.7, 0.002 and recognition 0.008. Sorted: 4*0.001 = 0.004,
    # 3*0.002 = 0.006, 2*0.008 = 0.016, 1*0.7 -> three rejections at 0.05.
    est = {"value": 0.12, "ci_low": 0.02, "ci_high": 0.22, "n": 20, "p_value": 0.001}
    flat = {"value": 0.01, "ci_low": -0.05, "ci_high": 0.07, "n": 20, "p_value": 0.7}
    # detectable, under 0.05
    tiny = {"value": -0.004, "ci_low": -0.007, "ci_high": -0.001, "n": 80, "p_value": 0.002}
    described = {"authority@1": {"description": "a fake citation"},
                 "distraction@1": {"description": "an irrelevant sentence"},
                 "verbosity@1": {"description": "padding"}}
    shifts = {"authority@1": {"shift": est}, "distraction@1": {"shift": flat}, "verbosity@1": {"shift": tiny}}
    recognised = {"value": 0.8, "ci_low": 0.6, "ci_high": 0.92, "n": 20, "p_value": 0.008}
    probes = {"perturbations": {"perturbations": described, "judges": {"j": shifts}},
              "self_recognition": {"judges": {"j": {"self_recognition": recognised}}}}
    said = dict((text.split(":")[0].split(" (the test")[0], kind)
                for kind, text in probe_statements(probes, "j"))
    # Issue 41 item 3 added the inconclusive line: the flat shift +0.01 [-0.05, +0.07] is not
    # detectable, but its interval leaves the +-0.05 margin (before, it was simply not mentioned).
    assert said == {"Perturbations (CALM) that move its P(A) by 0.05 or more": "caution",
                    "Perturbations (CALM) with a detectable shift under their margin of 0.05": "info",
                    "Perturbations (CALM) with no detectable shift that the data cannot yet call harmless "
                    "(1 of 3)": "inconclusive",
                    "Self-recognition": "info"}
    text = " ".join(t for _, t in probe_statements(probes, "j"))
    assert ("a fake citation (toward that side, shift +0.120 [+0.020, +0.220], n=20; p=0.001, "
            "adjusted 0.004)") in text
    assert "the test is adjusted): padding (away from that side, shift -0.004" in text
    assert "an irrelevant sentence: a shift as large as +0.070 is not excluded" in text
    assert "tells its own answers apart (80.0% of 20 pairs" in text
    # The same shift with p = 0.03 is significant alone, not once adjusted for four tests (Holm).
    weaker = {**shifts, "authority@1": {"shift": {**est, "p_value": 0.03}}}
    weak = {**probes, "perturbations": {"perturbations": described, "judges": {"j": weaker}}}
    kinds = [k for k, t in probe_statements(weak, "j") if t.startswith("Perturbations (CALM) that move")]
    assert kinds == []
    assert probe_statements({}, "j") == []


def test_the_console_lists_every_perturbation_per_judge(probe_run):
    from judgebias.reporting.experiment_summary import perturbation_lines, probe_results

    lines = perturbation_lines(probe_results(probe_run["cfg"], probe_run["store"]))
    rows = lines[1:]
    assert len(rows) == 4  # 2 judges x 2 perturbations
    for judge in ("ta", "tb"):
        for tag in ("authority@1", "sentiment_hostile@1"):
            (row,) = [r for r in rows if r.split()[:2] == [judge, tag]]
            assert "unchanged" in row and "shift" in row and "n=2" in row
    assert perturbation_lines({}) == []
