"""The experiment flow end to end on two tiny random-weights models (real SmolLM2 tokenizer, real
Llama forward passes): tables, metrics, ablations, MLflow (embedded and a real server), resumability.

One experiment run (``experiment_run`` in conftest) is shared by the session; each test reads it.
Faults (signals, kills mid-logging) are in test_flows_faults.py.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_table_holds_every_judge_on_every_pair_in_both_orders(experiment_run):
    from judgebias.tables.files import read_table

    store = experiment_run["store"]
    table, excluded = read_table(store.path("table.parquet"))
    assert excluded.total == 0
    pairs = store.read_frame("pairs.parquet")
    assert len(pairs) == 6 and set(pairs["generator_a"]) == {"ta"} and set(pairs["generator_b"]) == {"tb"}
    assert sorted(table["judge"].unique()) == ["ta", "tb"]
    assert len(table) == 2 * len(pairs)
    ok = table["judge_error"].isna()
    assert ok.any()
    both = table[ok]
    # p_a is the mean of both presentation orders (each already mapped back to the original A).
    assert ((both["p_a_ab"] + both["p_a_ba"]) / 2 - both["p_a"]).abs().max() < 1e-12
    assert table[["ppl_a", "ppl_b"]].notna().all().all() and (table[["ppl_a", "ppl_b"]] > 0).all().all()
    for judge in ("ta", "tb"):
        responses = store.read_frame(f"responses/{judge}.parquet")
        assert len(responses) == 6 and responses["error"].isna().all()


def test_a_config_handed_to_the_flow_is_not_parsed_again(experiment_run):
    # The experiment, both ablations and the probes ran on the object `judgebias run` parsed.
    assert experiment_run["config_parses"] == 0


def test_metrics_and_gold_are_those_of_analyze_on_the_table(experiment_run):
    from judgebias.reporting.analysis import analyze
    from judgebias.tables.files import read_table

    store = experiment_run["store"]
    metrics = store.read_json("metrics.json")
    table, _ = read_table(store.path("table.parquet"))
    assert metrics == json.loads(json.dumps(analyze(table, self_map={"ta": {"ta"}, "tb": {"tb"}})))
    for judge in ("ta", "tb"):
        dbg = metrics["judges"][judge]["dbg"]
        assert dbg["ci_low"] <= dbg["value"] <= dbg["ci_high"]
        assert dbg["gold_panel"] == ["tb" if judge == "ta" else "ta"]
    gold = store.read_frame("gold.parquet")
    assert set(gold["judge"]) == {"ta", "tb"}
    tb_rows = table[table["judge"] == "tb"].set_index("pair_id")["p_a"]
    gold_ta = gold[gold["judge"] == "ta"].set_index("pair_id")["gold_p_a"]
    # The gold of judge ta is the other judge's P(A), pair by pair.
    assert (gold_ta - tb_rows.reindex(gold_ta.index)).abs().max() < 1e-12


def test_ablations_compare_dbg_before_and_after(experiment_run):
    cfg, store = experiment_run["cfg"], experiment_run["store"]
    style = store.read_json(f"style-{cfg.ablation_hash('style_rewrite')}/comparison.json")
    # The rewriter is tiny-a, i.e. judge ta: left out of the gold, so tb has no gold judge left.
    assert style["excluded_from_gold"] == ["ta"]
    assert set(style["judges"]["ta"]) == {"before", "attractive", "humorous"}
    assert style["judges"]["ta"]["before"]["gold_panel"] == ["tb"]
    assert style["judges"]["tb"]["attractive"]["value"] is None
    sem = store.read_frame(f"style-{cfg.ablation_hash('style_rewrite')}/semantic.parquet")
    assert set(sem["style"]) == {"attractive", "humorous"}
    assert sem["cosine"].between(-1, 1).all()
    ft_prefix = f"finetune-{cfg.ablation_hash('finetune')}/"
    ft = store.read_json(f"{ft_prefix}comparison.json")
    assert set(ft["judges"]) == {"ta", "tb"} and set(ft["judges"]["ta"]) == {"before", "finetuned"}
    for gen in ("ta", "tb"):
        info = store.read_json(f"{ft_prefix}adapters/{gen}.json")
        assert len(info["losses"]) == 2 and info["trainable_params"] > 0
        assert (Path(info["adapter_dir"]) / "adapter_config.json").exists()
    before = store.read_frame("responses/ta.parquet")
    after = store.read_frame(f"{ft_prefix}responses/ta.parquet")
    assert len(after) == 3 and set(after["instruction_id"]) <= set(before["instruction_id"])


def test_plots_are_real_pngs(experiment_run):
    cfg, store = experiment_run["cfg"], experiment_run["store"]
    # judgebias.reporting.plots: 8 x 5 in at 150 dpi
    assert png_size(store.path("plots/dbg.png")) == (1200, 750)
    width, height = png_size(store.path("plots/win_rates.png"))  # sized by its number of rows/columns
    assert width >= 300 and height >= 200
    if cfg.analyses.attention:
        assert png_size(store.path("plots/attention_ta.png")) == (960, 600)  # 6.4 x 4 in at 150 dpi
    style = f"style-{cfg.ablation_hash('style_rewrite')}/plots/"
    assert png_size(store.path(style + "semantic_shift.png")) == (960, 720)
    assert png_size(store.path(style + "dbg_before_after.png")) == (960, 600)
    ft = f"finetune-{cfg.ablation_hash('finetune')}/plots/dbg_before_after.png"
    assert png_size(store.path(ft)) == (960, 600)


def test_mlflow_has_parent_nested_runs_params_and_artifacts(experiment_run):
    import mlflow
    from mlflow.tracking import MlflowClient

    run_id = experiment_run["result"]["run_id"]
    client = MlflowClient(tracking_uri=experiment_run["cfg"].tracking.tracking_uri)
    parent = client.get_run(run_id)
    params, metrics = parent.data.params, parent.data.metrics
    assert params["config.judges.0.model"].endswith("tiny-a")
    assert len(params["data_hash"]) == 16 and params["version.torch"].startswith("2.")
    assert params["git_commit"]
    m = experiment_run["store"].read_json("metrics.json")["judges"]["ta"]["dbg"]
    assert metrics["ta.dbg"] == pytest.approx(m["value"])
    assert metrics["ta.dbg.ci_low"] == pytest.approx(m["ci_low"])
    assert metrics["ta.dbg.ci_high"] == pytest.approx(m["ci_high"])
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'"
    )
    names = {r.info.run_name: r for r in children}
    assert set(names) == {"judge:ta", "judge:tb", "ablation:style_rewrite", "ablation:finetune",
                          "leaderboard"}
    # Per-judge runs carry the same metric names, so the UI compares judges column by column.
    assert names["judge:ta"].data.metrics["dbg"] == pytest.approx(m["value"])
    assert set(names["judge:ta"].data.metrics) == set(names["judge:tb"].data.metrics)
    style_metrics = names["ablation:style_rewrite"].data.metrics
    assert "ta.dbg.before" in style_metrics and "semantic_cosine.attractive.mean" in style_metrics
    ft_run = names["ablation:finetune"]
    assert len(client.get_metric_history(ft_run.info.run_id, "ta.train_loss")) == 2
    local = Path(
        mlflow.artifacts.download_artifacts(
            run_id=ft_run.info.run_id,
            artifact_path="adapters/ta",
            tracking_uri=experiment_run["cfg"].tracking.tracking_uri,
        )
    )
    assert (local / "adapter_config.json").exists()
    table = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run_id,
            artifact_path="table/table.parquet",
            tracking_uri=experiment_run["cfg"].tracking.tracking_uri,
        )
    )
    assert len(pd.read_parquet(table)) == 12
    arts = {a.path for a in client.list_artifacts(names["ablation:style_rewrite"].info.run_id, "plots")}
    assert {"plots/semantic_shift.png", "plots/dbg_before_after.png"} <= arts
    assert not any("OPENAI" in v or "sk-" in v for v in params.values())
    # The run's description (rendered by the UI) is the headline table, and the link goes to the run.
    note = parent.data.tags["mlflow.note.content"]
    assert "| judge | metric | estimate [95% CI] |" in note and "| ta |" in note
    page = f"/#/experiments/{parent.info.experiment_id}/runs/{run_id}"
    assert experiment_run["result"]["run_url"].endswith(page)
    # The parent run is logged at the end but dated from the flow's start: its duration in the UI is
    # the flow's, so it began before the first stage finished (the manifest's UTC stamps, 1 s steps).
    from datetime import datetime

    finished = [datetime.fromisoformat(v["finished"].replace("Z", "+00:00")).timestamp()
                for v in experiment_run["store"].manifest()["stages"].values()]
    assert parent.info.start_time / 1000 <= min(finished) + 1
    assert parent.info.end_time - parent.info.start_time >= 1000 * (max(finished) - min(finished))
    # Each judge's own figures are in its nested run; the parent keeps those across judges.
    from judgebias.reporting.plots import judge_figures

    stems = [p.stem for p in experiment_run["store"].path("plots").glob("*.png")]
    in_parent = {Path(a.path).stem for a in client.list_artifacts(run_id, "plots")}
    for judge in ("ta", "tb"):
        own = judge_figures(stems, judge)
        assert own, f"no figure of {judge} in {stems}"
        child = names[f"judge:{judge}"].info.run_id
        in_child = {Path(a.path).stem for a in client.list_artifacts(child, "plots")}
        assert in_child == set(own) and not in_parent & set(own)
    assert "dbg" in in_parent


def test_leaderboard_stage_ranks_the_generators_logs_and_ends_the_report_card(experiment_run):
    """Two generators: the stage ranks them (raw for each judge), recommends by the rules, writes its
    plots apart, ends the run's page with its section and is logged to MLflow in its own nested run;
    a rerun of the stage reads it back."""
    from mlflow.tracking import MlflowClient

    from judgebias.runs.layout import RunLayout
    from judgebias.stages import compute_leaderboard

    store, layout = experiment_run["store"], RunLayout()
    board = store.read_json(layout.leaderboard)
    assert board["models"] == ["ta", "tb"] and set(board["rankings"]["raw"]) == {"ta", "tb"}
    # Each judge wrote one of the two candidates: R1 excludes both, and every comparison has a
    # relative of every judge, so no panel is left: the rules recommend nobody.
    r = board["recommendation"]
    assert r["recommended"] is None and r["order"] == []
    assert [c["outcome"] for c in r["raters"]["ta"]["checks"] if c["rule"] == "R1"] == ["excluded"]
    assert "every judge is related" in board["skipped"]["panel"]["panel"]
    # The judges' figures come from the metrics stage, the time from the judging stage (measured in
    # this fresh run: no cached call).
    metrics = store.read_json(layout.metrics)["judges"]["ta"]
    assert r["raters"]["ta"]["profile"]["position_consistency"]["value"] == pytest.approx(
        metrics["position_consistency"]["value"])
    stage = store.manifest()["stages"]["judge_pairs[ta]"]
    timing = r["raters"]["ta"]["profile"]["timing"]
    if stage["hits"] == 0:
        assert timing["seconds_per_1000"] == pytest.approx(1000 * stage["seconds"] / stage["rows"])
    else:
        assert timing is None
    plots = sorted(p.name for p in store.path(layout.leaderboard_plots).glob("*.png"))
    assert plots[0] == "leaderboard_forest.png"
    page = store.path(layout.report_html).read_text(encoding="utf-8")
    tail = page[page.index("<h2 id='leaderboard'>"):]
    assert "Leaderboard of the generators" in tail and "alt='leaderboard_forest'" in tail
    assert "<h2" not in tail[4:], "the leaderboard section is the page's last"
    md = store.path(layout.report_md).read_text(encoding="utf-8")
    assert "## Leaderboard of the generators" in md and "leaderboard_plots/leaderboard_forest.png" in md
    # Cached: the stage reads its JSON back and its timing entry is not rewritten.
    before = store.manifest()["stages"]["compute_leaderboard"]
    table = pd.read_parquet(store.path(layout.table))
    assert compute_leaderboard(experiment_run["cfg"], store, table, {}) == board
    assert store.manifest()["stages"]["compute_leaderboard"] == before
    client = MlflowClient(tracking_uri=experiment_run["cfg"].tracking.tracking_uri)
    run_id = experiment_run["result"]["run_id"]
    (child,) = client.search_runs([client.get_run(run_id).info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{run_id}' "
                                                "and tags.`judgebias.kind` = 'leaderboard'")
    assert child.data.metrics["leaderboard.raw.ta.ta.rank"] in (1.0, 2.0)
    arts = {a.path for a in client.list_artifacts(child.info.run_id)}
    assert "leaderboard.json" in arts
    logged_plots = {a.path for a in client.list_artifacts(child.info.run_id, "plots")}
    assert "plots/leaderboard_forest.png" in logged_plots


def test_prefect_markdown_artifact_names_the_mlflow_run(experiment_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["judgebias-tiny"]))
        )
    assert arts, "no markdown artifact"
    assert experiment_run["result"]["run_id"] in arts[0].data
    assert "| ta | DBG score" in arts[0].data


def test_killed_run_resumes_without_repeating_model_calls(experiment_run):
    from judgebias.flows.experiment import experiment

    store = experiment_run["store"]
    before = pd.read_parquet(store.path("table.parquet"))
    # As if killed after the model calls of judge tb but before its stage output was written.
    for name in (
        "judgments/tb.parquet",
        "perplexity/tb.parquet",
        "table.parquet",
        "gold.parquet",
        "metrics.json",
    ):
        store.path(name).unlink()
    cwd = os.getcwd()
    os.chdir(experiment_run["base"])
    try:
        experiment(
            str(experiment_run["config_path"]),
            {"ablations": {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}},
        )
    finally:
        os.chdir(cwd)
    stages = store.manifest()["stages"]
    for stage in ("judge_pairs[tb]", "perplexity_analysis[tb]"):
        assert stages[stage]["calls"] == 0, stages[stage]
        assert stages[stage]["hits"] > 0
    after = pd.read_parquet(store.path("table.parquet"))
    cols = ["pair_id", "judge", "p_a", "p_a_ab", "p_a_ba", "ppl_a", "ppl_b"]
    pd.testing.assert_frame_equal(
        before[cols].sort_values(["judge", "pair_id"]).reset_index(drop=True),
        after[cols].sort_values(["judge", "pair_id"]).reset_index(drop=True),
    )


@pytest.mark.server
def test_metrics_read_back_from_a_real_mlflow_server(experiment_run, mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    from judgebias.runs.store import RunStore
    from judgebias.tracking.experiment import log_experiment

    uri = mlflow_server
    cfg = experiment_run["cfg"].model_copy(
        update={"tracking": experiment_run["cfg"].tracking.model_copy(update={"tracking_uri": uri})}
    )
    # A copy of the run folder: logging rewrites its mlflow.json, which other tests read.
    store = RunStore(shutil.copytree(experiment_run["store"].root, tmp_path / "run"))
    result = log_experiment(cfg, store, config_source=str(experiment_run["config_path"]))
    run = MlflowClient(tracking_uri=uri).get_run(result["run_id"])
    metrics = experiment_run["store"].read_json("metrics.json")["judges"]
    for judge in ("ta", "tb"):
        assert run.data.metrics[f"{judge}.dbg"] == pytest.approx(metrics[judge]["dbg"]["value"])
        assert run.data.metrics[f"{judge}.position_bias.ci_high"] == pytest.approx(
            metrics[judge]["position_bias"]["ci_high"]
        )
    arts = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(result["run_id"], "table")}
    assert arts == {"table/table.parquet"}


@pytest.mark.server
def test_nightly_sync_flow_pushes_pairs_and_recomputes_metrics(
    experiment_run, labelstudio_server, monkeypatch
):
    from judgebias.flows.sync import sync_annotations

    settings = labelstudio_server.settings
    monkeypatch.setenv("LABEL_STUDIO_URL", settings.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", settings.api_key)
    cwd = os.getcwd()
    os.chdir(experiment_run["base"])
    try:
        out = sync_annotations(str(experiment_run["config_path"]), {"annotation": {"budget": 3}})
    finally:
        os.chdir(cwd)
    assert out["sync"]["pushed"] == 3
    assert out["judges"] == ["ta", "tb"]
    merged = Path(out["sync"]["out"])
    assert merged.exists() and merged.parent == experiment_run["store"].root
    annotated = list(experiment_run["store"].root.glob("annotated-*/metrics.json"))
    assert len(annotated) == 1
    assert json.loads(annotated[0].read_text())["dataset"]["pairs"] == 6


def test_finetune_ablation_rerun_reuses_adapters_and_model_calls(experiment_run):
    from judgebias.flows.experiment import finetune_ablation

    cfg, store = experiment_run["cfg"], experiment_run["store"]
    prefix = f"finetune-{cfg.ablation_hash('finetune')}/"
    before = {g: store.read_json(f"{prefix}adapters/{g}.json") for g in ("ta", "tb")}
    comparison = store.read_json(f"{prefix}comparison.json")
    shutil.rmtree(store.path(prefix))  # the ablation's whole folder is gone
    finetune_ablation(experiment_run["cfg"])
    stages = store.manifest()["stages"]
    for g in ("ta", "tb"):
        after = store.read_json(f"{prefix}adapters/{g}.json")
        assert after["from_cache"] is True and after["adapter_sha256"] == before[g]["adapter_sha256"]
        assert stages[f"{prefix}generate_responses[{g}]"]["calls"] == 0
        assert stages[f"{prefix}judge_pairs[{g}]"]["calls"] == 0
    assert store.read_json(f"{prefix}comparison.json") == comparison


def test_the_run_page_links_its_mlflow_run_and_ablations_once_logged(experiment_run):
    # The page is written before MLflow logs the run; the flow's summary rebuilds it once
    # mlflow.json exists, so the run folder's page links the run it was logged to.
    store = experiment_run["store"]
    link = store.read_json("mlflow.json")
    page = store.path("report.html").read_text(encoding="utf-8")
    assert f"href='{link['run_url']}'" in page
    assert "class='side-by-side'" in page and "Honest caveat" in page  # tiny judges: the caveat
    cfg = experiment_run["cfg"]
    if cfg.ablations.style_rewrite.enabled:
        assert "class='ablation'" in page and f"style-{cfg.ablation_hash('style_rewrite')}/" in page
