"""The experiment-part registry (``judgebias.parts``): every variant folder's prefix, console words
and summary group come from one declaration, and a probe declared there alone reaches the run folder
layout, the stage lines, the experiment summary, its MLflow run and the report card."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from judgebias import parts as P
from judgebias.config.experiment import load_config
from judgebias.reporting.experiment_summary import probe_lines, probe_results, stage_groups
from judgebias.reporting.report_card import render_markdown
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tasks.stage_lines import variant_words

DEMO = Path(__file__).parents[1] / "configs" / "demo.yaml"

# A toy probe: a "pirate voice" rewrite of one side, its two figures per judge and variant, its own
# generic config section (``probes.pirate``) and the two functions below that make it run on the
# main run's pairs. The declaration and these functions are all that is added: no file of judgebias.
TOY = P.Part("pirate", "probe", "pirate", "pirate probe", ("probe_hash", "pirate"), ("probes", "pirate"),
             per_variant=True, variants_at="voices",
             figures=(P.PartFigure("kept", "kept under {variant}", "verdict kept when one side talks {what}",
                                   "Toy 2026", False),
                      P.PartFigure("drift", "drift toward {variant}", "P(pirate side) after - before",
                                   "Toy 2026", True)),
             params=(("sample", "sample"), ("seed", "seed")), summary="pirate probe (a toy), 95% intervals",
             runs=P.PairwiseProbe(f"{__name__}:pirate_pairs", f"{__name__}:pirate_report"))
TOY_ON = {"probes": {"pirate": {"sample": 4, "seed": 7}}}


def pirate_pairs(pairs, ctx: P.ProbeContext):
    """A seeded sample of the main run's pairs, one side (by the pair's position) said like a pirate."""
    import pandas as pd

    sample = pairs.sample(n=min(ctx.section.sample or len(pairs), len(pairs)), random_state=ctx.section.seed)
    rows = []
    for i, rec in enumerate(sample.to_dict("records")):
        side = "ab"[i % 2]
        rows.append({**rec, f"response_{side}": f"Arr, matey! {rec[f'response_{side}']}",
                     "pair_id": f"{rec['pair_id']}~arr", "source_pair_id": rec["pair_id"],
                     "perturbation": "arr@1", "perturbed_side": side})
    return pd.DataFrame(rows)


def pirate_report(before, after, probe_pairs, ctx: P.ProbeContext) -> dict:
    """Per judge: verdicts kept and the shift toward the pirate side (the CALM estimators)."""
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate
    from judgebias.stages.probes import probe_document, probe_table

    tables = {judge: {"arr@1": probe_table(before[judge], rows, probe_pairs, judge)}
              for judge, rows in after.items()}
    return probe_document("voices", {"arr@1": {"description": "like a pirate"}}, tables,
                          (("kept", robustness_rate), ("drift", perturbation_shift)))


# Hand-made figures as a probe stage writes them: 7 of 10 verdicts kept (Wilson-style interval given),
# the P(pirate side) moved by +0.12.
RESULT = {"voices": {"arr@1": {"description": "like a pirate"}},
          "judges": {"j1": {"arr@1": {"kept": {"value": 0.7, "ci_low": 0.4, "ci_high": 0.89, "n": 10},
                                      "drift": {"value": 0.12, "ci_low": 0.02, "ci_high": 0.22, "n": 10}}}}}


def test_every_declared_prefix_names_one_part_and_its_words():
    assert [p.prefix for p in P.PARTS.values()] == ["style", "finetune", "perturb", "recognition",
                                                     "pointwise", "pwprobe", "annotated", "imported"]
    for part in P.PARTS.values():
        label = f"{part.prefix}{part.sep}abc/judge_pairs"
        assert P.part_of(label) is part
        assert stage_groups({label: 2.0}) == {part.words: 2.0}
        assert variant_words(label).startswith(part.words)
    assert P.part_of("judge_pairs[j1]") is None and P.part_of("styles/x") is None
    assert variant_words("style-3f2a/attractive") == "style ablation, attractive"
    with pytest.raises(ValueError, match="declared twice"):
        P.index_parts([*P.PARTS.values(), dataclasses.replace(P.PARTS["finetune"], name="again")])
    with pytest.raises(ValueError, match="unknown experiment part 'nope'"):
        RunLayout.of("nope", key="x")


def test_the_layout_reads_the_declared_prefixes():
    cfg = load_config(DEMO)
    assert RunLayout.style(cfg, "humorous").prefix == f"style-{cfg.ablation_hash('style_rewrite')}/humorous/"
    assert RunLayout.perturbation(cfg).prefix == f"perturb-{cfg.probe_hash('perturbations')}/"
    assert RunLayout.recognition(cfg).prefix == f"recognition-{cfg.probe_hash('self_recognition')}/"
    assert RunLayout.pointwise_probes(cfg).prefix == f"pwprobe-{cfg.probe_hash('pointwise')}/"
    assert RunLayout.imported("a b").prefix == "imported/a_b/"
    assert RunLayout.annotated("d1").prefix == "annotated-d1/"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(P, "PARTS", P.index_parts([*P.PARTS.values(), TOY]))
    return TOY


def test_a_toy_probe_declared_alone_reaches_layout_summary_mlflow_and_report_card(toy, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.probes import log_probes
    from judgebias.tracking.settings import TrackingSettings

    cfg = load_config(DEMO, TOY_ON)
    # The run folder: its own variant folder, keyed by the hash of the section it depends on.
    where = RunLayout.of("pirate", cfg)
    assert where.prefix == f"pirate-{cfg.probe_hash('pirate')}/"
    store = RunStore(tmp_path / "run")
    store.path(where.probe_result).parent.mkdir(parents=True)
    store.path(where.probe_result).write_text(json.dumps(RESULT))
    # The console and the summary: its stage lines and compute time, its figures.
    assert variant_words(where.label) == "pirate probe"
    assert stage_groups({f"{where.label}/judge_pairs[j1]": 3.0}) == {"pirate probe": 3.0}
    results = probe_results(cfg, store)
    assert results["pirate"] == RESULT
    assert probe_lines(results) == ["\npirate probe (a toy), 95% intervals",
                                    "  j1  kept under arr    0.700 [0.400, 0.890] n=10",
                                    "  j1  drift toward arr  +0.120 [+0.020, +0.220] n=10"]
    # MLflow: one nested run "probe:pirate", its declared params and figures.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = TrackingSettings(tracking_uri=uri, experiment_name="parts-test")
    with mlflow_run("parent", settings=settings) as parent:
        log_probes(cfg, store, {})
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([parent.info.experiment_id],
                              f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_name = {r.info.run_name: r for r in runs}
    run = by_name["probe:pirate"]
    assert run.data.params == {"sample": "4", "seed": "7", "probe_hash": cfg.probe_hash("pirate")}
    assert run.data.metrics["j1.arr.kept"] == pytest.approx(0.7)
    assert run.data.metrics["j1.arr.drift.ci_high"] == pytest.approx(0.22)
    assert run.data.metrics["j1.arr.kept.n"] == 10
    assert mlflow.active_run() is None
    # The figure registry lists its figures beside every other probe's.
    from judgebias.metrics.registry import probe_figures

    assert {"pirate.kept", "pirate.drift", "perturbations.shift"} <= set(probe_figures())
    # The report card: the judge's section holds both rows with interval, n, meaning and source.
    md = render_markdown({"judges": {"j1": {}}, "probes": results}, title="T")
    assert "kept under arr" in md and "verdict kept when one side talks like a pirate" in md
    assert "+0.120" in md and "Toy 2026" in md


def pointwise_table():
    """Judge j scores five items on 1..5 (it wrote i1, i2); org/g scores three, without humans."""
    import pandas as pd

    from judgebias.tables.pointwise import validate_pointwise

    scores, humans, gens = [2, 3, 3, 4, 5], [[1, 3], [3], [2, 4], [5], [5, 5]], ["j", "j", "m", "m", "m"]

    def row(i, judge, score, human):
        return dict(item_id=f"i{i}", prompt=f"q{i}", response=f"answer {i}", generator=gens[i - 1],
                    judge=judge, score=score, score_argmax=score, scale_min=1, scale_max=5,
                    criterion="overall", human_scores=human)

    rows = [row(i, "j", scores[i - 1], humans[i - 1]) for i in range(1, 6)]
    rows += [row(i, "org/g", 4, []) for i in range(1, 4)]
    return validate_pointwise(pd.DataFrame(rows))[0]


def test_a_toy_pointwise_figure_declared_alone_reaches_analyze_text_mlflow_and_page(monkeypatch):
    from judgebias.metrics import pointwise as PW
    from judgebias.metrics import registry as R
    from judgebias.reporting.pointwise_analysis import analyze_pointwise, format_pointwise
    from judgebias.reporting.trust_pointwise import pointwise_rows
    from judgebias.tracking.log_pointwise import flatten_pointwise

    toy = R.PointwiseFigure("score_toy", lambda c: PW.score_mae_human(c.df, c.judge), "toy error",
                            "mean |judge - human| once more", "Toy 2026", signed=False,
                            mlflow_value="score_toy.mean_abs_error")
    monkeypatch.setattr(R, "POINTWISE_FIGURES", R.index_pointwise([*R.POINTWISE_FIGURES.values(), toy]))
    result = analyze_pointwise(pointwise_table(), reps=200)
    j = result["judges"]["j"]
    # judge j's scores 2 3 3 4 5 against human means 2 3 3 5 5: |diffs| 0 0 0 1 0, mean 0.2
    assert j["score_toy"]["value"] == pytest.approx(0.2) == j["score_agreement_human"]["mae"]["value"]
    assert "score_toy" in result["judges"]["org/g"]["skipped"]  # no human scores: its reason, never 0
    text = format_pointwise(result).splitlines()
    assert any(line.startswith("  score_toy ") and "0.200" in line for line in text)
    assert flatten_pointwise(result)["j.score_toy.mean_abs_error"] == pytest.approx(0.2)
    row = next(r for r in pointwise_rows(j, None, "j") if r["figure"] == "toy error")
    assert row["value"] == "0.200" and row["source"] == "Toy 2026"
    with pytest.raises(ValueError, match="declared twice"):
        R.index_pointwise([toy, toy])


def test_the_experiment_flow_runs_each_part_the_config_enables_in_declared_order(toy):
    from judgebias.flows.experiment import PART_FLOWS, runs_in_experiment

    assert set(PART_FLOWS) <= set(P.PARTS)
    demo, pointwise = load_config(DEMO), load_config(DEMO.parent / "pointwise.yaml")
    toy_on = load_config(DEMO, TOY_ON)
    ran = {name: [p.name for p in P.PARTS.values() if runs_in_experiment(p) and p.enabled(cfg)]
           for name, cfg in (("demo", demo), ("pointwise", pointwise), ("toy", toy_on))}
    # demo.yaml: both ablations and both pairwise probes on; pointwise.yaml: its judges and their
    # probes; the toy's section switches it on, after every part declared before it.
    assert ran == {"demo": ["style_rewrite", "finetune", "perturbations", "self_recognition"],
                   "pointwise": ["pointwise", "pointwise_probes"],
                   "toy": ["style_rewrite", "finetune", "perturbations", "self_recognition", "pirate"]}


def test_a_probe_section_is_checked_against_the_declared_probes(toy):
    demo = load_config(DEMO)
    # Unwritten, a declared probe's generic section is there, switched off; its hash still keys it.
    assert demo.probes.pirate.enabled is False and not TOY.enabled(demo)
    on = load_config(DEMO, TOY_ON)
    assert on.probes.pirate.sample == 4 and TOY.enabled(on)
    assert on.config_hash() == demo.config_hash()  # a probe never moves the main run's folder
    assert on.probe_hash("pirate") != demo.probe_hash("pirate")
    assert on.probe_hash("perturbations") == demo.probe_hash("perturbations")
    with pytest.raises(ValueError, match=r"unknown probe 'parrot'; declared probes: .*pirate"):
        load_config(DEMO, {"probes": {"parrot": {"sample": 2}}})
    with pytest.raises(ValueError, match="probe 'pirate': sampel"):
        load_config(DEMO, {"probes": {"pirate": {"sampel": 2}}})
    with pytest.raises(ValueError, match="unknown probe 'parrot'"):
        demo.probe_hash("parrot")
    with pytest.raises(ValueError, match="must be 'module:function'"):
        P.PairwiseProbe("no_colon", "m:f")
    with pytest.raises(ValueError, match="only a pairwise probe"):
        dataclasses.replace(P.PARTS["pointwise_probes"], runs=TOY.runs)


def test_a_toy_probe_declared_in_the_test_alone_runs_in_an_experiment(toy, probes_run, tmp_path):
    """The toy runs in `experiment` beside the built-in probes, on a copy of the probes' shared run
    folder (every other stage is read back): its pairs judged by both judges in its own folder, its
    figures in the console summary, its own MLflow run and the report card."""
    import os
    import shutil

    import yaml
    from mlflow.tracking import MlflowClient

    from judgebias.flows.experiment import experiment
    from judgebias.reporting.experiment_summary import console_report
    from judgebias.tracking.probes import probe_metrics

    doc = yaml.safe_load((probes_run["base"] / "probes.yaml").read_text())
    doc["probes"]["pirate"] = {"sample": 2, "seed": 3}
    doc["run_dir"] = str(tmp_path / "runs")
    doc["tracking"] = {"experiment": "toy-probe", "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    path = tmp_path / "pirate.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    assert cfg.config_hash() == probes_run["cfg"].config_hash()
    shutil.copytree(probes_run["store"].root, cfg.run_path())
    cwd = os.getcwd()
    os.chdir(tmp_path)  # MLflow's sqlite store puts artifacts in ./mlruns
    try:
        tracking = experiment(str(path), cfg=cfg)
    finally:
        os.chdir(cwd)
    store, where = RunStore(cfg.run_path()), RunLayout.of("pirate", cfg)
    # The run folder: its pairs, each judge's judgments of them in both orders, its figures, its timing.
    pairs = store.read_frame(where.pairs)
    assert len(pairs) == 2 and pairs["response_a"].str.startswith("Arr, matey! ").sum() == 1
    for judge in ("ta", "tb"):
        judged = store.read_frame(where.judgments(judge))
        assert sorted(judged["pair_id"]) == sorted(pairs["pair_id"]) and judged["p_a_ab"].notna().all()
    result = store.read_json(where.probe_result)
    assert set(result["judges"]) == {"ta", "tb"}
    assert result["voices"] == {"arr@1": {"description": "like a pirate"}}
    kept = {j: result["judges"][j]["arr@1"]["kept"] for j in ("ta", "tb")}
    assert all(k["value"] is not None and 0 <= k["value"] <= 1 and k["n"] == 2 for k in kept.values()), kept
    assert f"{where.label}/pirate_report" in store.manifest()["stages"]
    assert store.read_json(RunLayout().probes_index)["pirate"] == where.probe_result
    # The console summary: its figures under its heading, its compute time in its own group.
    text = console_report(cfg, store, tracking, wall_s=1.0, peak_rss_gb=0.1)
    assert "\npirate probe (a toy), 95% intervals\n" in text
    assert "pirate probe " in text.split("compute time")[1]
    assert f"ta  kept under arr    {kept['ta']['value']:.3f}" in text
    # MLflow: its own run under the experiment's, its declared params and every figure it wrote.
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("toy-probe").experiment_id],
                                f"tags.`mlflow.parentRunId` = '{tracking['run_id']}' and "
                                "tags.`judgebias.probe` = 'pirate'")
    assert run.data.params == {"sample": "2", "seed": "3", "probe_hash": cfg.probe_hash("pirate")}
    expected = probe_metrics(TOY, result)
    assert {"ta.arr.kept", "tb.arr.kept", "ta.arr.kept.n"} <= set(expected)
    assert run.data.metrics == pytest.approx(expected)
    # The report card: the judges' rows with their meaning and source.
    page = store.path(RunLayout().report_html).read_text()
    assert "kept under arr" in page and "verdict kept when one side talks like a pirate" in page
    assert "Toy 2026" in page
