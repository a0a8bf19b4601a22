"""``judgebias compare``: independent and paired differences, the fast resampling path against the
registry, matching by text, Holm, statements, the page, and the command on the bundled LLMBar table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from judgebias.bundled import BUNDLED, analyze_bundled
from judgebias.metrics import frame as F
from judgebias.metrics import registry as R
from judgebias.reporting.analysis import lean_table
from judgebias.reporting.run_compare import (
    ADDITIVE,
    Side,
    _kappa_of_cells,
    compare,
    figure_name,
    independent_difference,
    statement,
)
from judgebias.reporting.run_compare_page import render_html
from judgebias.stats import kappa
from judgebias.tables.files import read_table

LLMBAR = next(b for b in BUNDLED if b.name == "llmbar-natural")


@pytest.fixture(scope="module")
def llmbar():
    table, _ = read_table(LLMBAR.path())
    return table, analyze_bundled(LLMBAR, reps=200)


def _side(llmbar, judge, table=True, run="llmbar"):
    t, result = llmbar
    return Side(run, judge, result["judges"][judge], result["settings"], t if table else None)


def test_independent_difference_by_hand():
    # SE of each from its interval: 0.2 / (2 x 1.96) = 0.051022; of the difference: sqrt(2) x 0.051022
    # = 0.072156; d = 0.2: interval 0.2 -+ 1.96 x 0.072156 = [0.05858, 0.34142]; z = 2.7718, p = 0.005575.
    d = independent_difference(
        {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6}, {"value": 0.7, "ci_low": 0.6, "ci_high": 0.8}
    )
    assert d["value"] == pytest.approx(0.2)
    assert d["ci_low"] == pytest.approx(0.05858, abs=1e-4) and d["ci_high"] == pytest.approx(
        0.34142, abs=1e-4
    )
    assert d["p_value"] == pytest.approx(0.005575, abs=1e-5)
    assert not d["paired"] and "recovered from each run's 95% interval" in d["method"]


def test_kappa_of_cells_matches_the_figure():
    # judge rows a, b, tie x reference columns: 20 + 15 + 5 agree of 50
    table = np.array([[20, 3, 1], [4, 15, 1], [2, 2, 5]])
    assert float(_kappa_of_cells(table.ravel().astype(float))) == pytest.approx(kappa(table)["value"])


def test_fast_path_reproduces_every_additive_figure(llmbar):
    # The bootstrap's per-row sums must give the registry's own value, judge by judge.
    table, _ = llmbar
    lean = lean_table(F.prepare(table))
    for judge in ("ChatGPT/Vanilla", "GPT-4/Swap"):
        rows = lean[(lean["judge"] == judge).to_numpy()]
        inputs = R.Inputs(lean, rows, judge, {}, {}, None, False, 100, 0)
        for key, (rows_of, figure_of) in ADDITIVE.items():
            expected = R.FIGURES[key].compute(inputs).value
            assert float(figure_of(rows_of(inputs).sum(axis=0))) == pytest.approx(expected, abs=1e-12), key


def test_the_same_run_twice_changes_nothing(llmbar):
    result = compare([(_side(llmbar, "GPT-4/Vanilla"), _side(llmbar, "GPT-4/Vanilla"))], reps=200)
    c = result["comparisons"][0]
    assert c["pairing"]["paired"] and c["pairing"]["pairs"] == 100
    assert result["changed"] == []
    for f in c["figures"]:
        assert f["difference"]["value"] == 0 and f["p_adjusted"] == 1.0
        assert "no detectable change" in f["statement"]


def test_llmbar_prompt_change_vanilla_to_swap(llmbar):
    result = compare([(_side(llmbar, "ChatGPT/Vanilla"), _side(llmbar, "ChatGPT/Swap"))], reps=300)
    figs = {f["figure"]: f for f in result["comparisons"][0]["figures"]}
    pc = figs["position_consistency"]
    # 71 of 100 pairs kept their choice with Vanilla, 89 with Swap (the table's own counts)
    assert (pc["before"]["value"], pc["after"]["value"]) == (pytest.approx(0.71), pytest.approx(0.89))
    assert pc["changed"] and pc["difference"]["paired"]
    assert pc["statement"].startswith("position consistency rose from 71% to 89% (+18 points [")
    assert "regression" in result["comparisons"][0]["not_compared"]  # no interval: descriptive
    # Holm across the compared figures: each adjusted p at least its raw p
    assert all(f["p_adjusted"] >= f["difference"]["p_value"] for f in figs.values())
    assert result["multiplicity"]["tests"] == len(figs)
    assert "ChatGPT/Swap.position_consistency" in result["changed"]


def test_without_tables_the_runs_are_independent(llmbar):
    result = compare(
        [(_side(llmbar, "ChatGPT/Vanilla", table=False), _side(llmbar, "ChatGPT/Swap", table=False))],
        reps=200,
    )
    c = result["comparisons"][0]
    assert not c["pairing"]["paired"] and "tables are not both at hand" in c["pairing"]["why"]
    pc = next(f for f in c["figures"] if f["figure"] == "position_consistency")
    assert pc["before"]["value"] == pytest.approx(0.71) and not pc["difference"]["paired"]


def test_pairs_matched_by_text_when_ids_differ(llmbar):
    table, result = llmbar
    renamed = table.assign(pair_id="other-" + table["pair_id"].astype(str))
    after = Side("renamed", "ChatGPT/Swap", result["judges"]["ChatGPT/Swap"], result["settings"], renamed)
    c = compare([(_side(llmbar, "ChatGPT/Vanilla"), after)], reps=200, only=["position_consistency"])
    c = c["comparisons"][0]
    assert c["pairing"]["matched_by"] == "text digest" and c["pairing"]["pairs"] == 100
    assert [f["figure"] for f in c["figures"]] == ["position_consistency"]


def test_paired_uses_only_the_shared_pairs(llmbar):
    table, result = llmbar
    half = table[table["pair_id"].isin(sorted(set(table["pair_id"]))[:50])]
    after = Side("half", "ChatGPT/Swap", result["judges"]["ChatGPT/Swap"], result["settings"], half)
    c = compare([(_side(llmbar, "ChatGPT/Vanilla"), after)], reps=200, only=["tie_rate"])["comparisons"][0]
    assert c["pairing"]["pairs"] == 50 and c["pairing"]["before_pairs"] == 100
    assert c["figures"][0]["before"]["n"] == 50


def test_statement_in_points_and_numbers():
    f = {
        "label": "position consistency",
        "share": True,
        "changed": True,
        "p_adjusted": 0.002,
        "before": {"value": 0.71},
        "after": {"value": 0.89},
        "difference": {"value": 0.18, "ci_low": 0.08, "ci_high": 0.27},
    }
    assert (
        statement(f) == "position consistency rose from 71% to 89% (+18 points [+8, +27], adjusted p 0.002)"
    )
    g = {
        **f,
        "share": False,
        "changed": False,
        "label": "kappa",
        "p_adjusted": 0.4,
        "difference": {"value": -0.05, "ci_low": -0.2, "ci_high": 0.1},
    }
    assert (
        statement(g)
        == "kappa: 0.710 -> 0.890 (-0.050 [-0.200, +0.100], adjusted p 0.400): no detectable change"
    )
    assert figure_name("agreement_human_2class") == "agreement where humans pick a side"
    # An indented sub-row ("  ... minus humans") is named after the row it qualifies.
    assert figure_name("perplexity_excess") == "picks lower perplexity minus humans"
    assert figure_name("self_preference_eo") == "self-preference (EO)"


def test_unknown_figure_is_refused(llmbar):
    with pytest.raises(ValueError, match="unknown figure"):
        compare([(_side(llmbar, "ChatGPT/Vanilla"), _side(llmbar, "ChatGPT/Swap"))], only=["nope"])


def test_page_escapes_names(llmbar):
    result = compare(
        [(_side(llmbar, "ChatGPT/Vanilla", run="<script>x</script>"), _side(llmbar, "ChatGPT/Swap"))],
        reps=200,
        only=["tie_rate"],
    )
    page = render_html(result, title="<b>t</b>")
    assert "<script>x" not in page and "&lt;script&gt;x" in page and "&lt;b&gt;t" in page
    assert "judge says tie fell from 29% to 11%" in page


def test_compare_command_exit_code(tmp_path):
    from judgebias.cli import app

    out = tmp_path / "c.json"
    args = [
        "compare",
        "bundled:llmbar-natural",
        "bundled:llmbar-natural",
        "--judge",
        "ChatGPT/Vanilla",
        "--judge-b",
        "ChatGPT/Swap",
        "--out",
        str(out),
        "--reps",
        "200",
        "--figure",
        "position_consistency",
    ]
    res = CliRunner().invoke(app, [*args, "--exit-code"])
    assert res.exit_code == 1, res.output
    assert "CHANGED position consistency rose from 71% to 89%" in res.output
    assert json.loads(out.read_text())["changed"] == ["ChatGPT/Swap.position_consistency"]
    assert out.with_suffix(".html").is_file()
    assert CliRunner().invoke(app, args).exit_code == 0  # without --exit-code: 0 whatever changed
    same = CliRunner().invoke(
        app,
        [
            "compare",
            "bundled:llmbar-natural",
            "bundled:llmbar-natural",
            "--judge",
            "GPT-4/Swap",
            "--out",
            str(out),
            "--reps",
            "200",
            "--exit-code",
        ],
    )
    assert same.exit_code == 0, same.output


def test_compare_metrics_json_with_tables(tmp_path, llmbar):
    from judgebias.cli import app

    _, result = llmbar
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps(result))
    out = tmp_path / "c.json"
    base = ["compare", str(metrics), str(metrics), "--judge", "ChatGPT/Vanilla", "--judge-b", "ChatGPT/Swap",
            "--out", str(out), "--reps", "200"]
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.output
    assert not json.loads(out.read_text())["comparisons"][0]["pairing"]["paired"]
    res = CliRunner().invoke(app, [*base, "--table-a", str(LLMBAR.path()), "--table-b", str(LLMBAR.path())])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["comparisons"][0]["pairing"]["paired"]
    assert not math.isnan(json.loads(out.read_text())["comparisons"][0]["figures"][0]["p_adjusted"])


def test_compare_two_mlflow_runs_tags_the_later(tmp_path, monkeypatch, llmbar):
    from mlflow.tracking import MlflowClient

    from judgebias.cli import app
    from judgebias.tracking.log_analysis import log_analysis
    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.settings import TrackingSettings

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # the sqlite store's artifacts go to ./mlruns
    _, result = llmbar
    ids = []
    for name in ("before", "after"):
        with mlflow_run(name, settings=TrackingSettings()) as run:
            log_analysis(result, table_path=LLMBAR.path())
        ids.append(run.info.run_id)
    out = tmp_path / "c.json"
    res = CliRunner().invoke(app, ["compare", *ids, "--judge", "ChatGPT/Vanilla", "--judge-b", "ChatGPT/Swap",
                                   "--out", str(out), "--reps", "200", "--figure", "position_consistency",
                                   "--figure", "agreement_human"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["comparisons"][0]["pairing"]["paired"]  # the logged table came back
    tags = MlflowClient(tracking_uri=uri).get_run(ids[1]).data.tags
    assert tags["judgebias.compare.baseline_run"] == ids[0]
    assert ids[0] in tags["judgebias.compare.baseline_url"]
    assert tags["judgebias.compare.changed"] == "ChatGPT/Swap.position_consistency"
    assert tags["judgebias.compare.changed_count"] == "1"
    artifacts = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(ids[1], f"compare/{ids[0]}")}
    assert {f"compare/{ids[0]}/compare.json", f"compare/{ids[0]}/c.html"} <= artifacts
    # the same experiment's judges across its two runs: one row per run and judge, logged as a table
    page = tmp_path / "judges.html"
    res = CliRunner().invoke(app, ["judges", "--out", str(page)])
    assert res.exit_code == 0, res.output
    rows = json.loads(page.with_suffix(".json").read_text())
    assert len(rows) == 2 * 4 and {r["run_id"] for r in rows} == set(ids)
    vanilla = next(r for r in rows if r["judge"] == "ChatGPT/Vanilla")
    assert vanilla["agreement_human.value"] == pytest.approx(0.67)
    assert sum(map(sum, vanilla["confusion_vs_humans"])) == 100
    assert vanilla["dataset"].startswith("sha256 ")
    logged = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_run(ids[0]).info.experiment_id],
        filter_string="tags.`judgebias.command` = 'judges'")
    assert len(logged) == 1
    names = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(logged[0].info.run_id)}
    assert {"judges.json", "judges.html"} <= names


def test_judge_rows_and_page():
    from judgebias.reporting.judges_table import RunResult, judge_rows, render_html

    est = {"value": 0.7, "ci_low": 0.6, "ci_high": 0.8, "n": 50,
           "table": {"rows_judge_cols_human": [[20, 5, 0], [5, 15, 0], [2, 3, 0]]}}
    old = RunResult("r1", "old", "2026-11-01T00:00:00+00:00", "sha256 abc (50 pairs)",
                    {"judges": {"<j>": {"agreement_human": est, "skipped": {"dbg": "no generator names"}}}})
    new = RunResult("r2", "new", "2026-11-20T00:00:00+00:00", "sha256 abc (50 pairs)",
                    {"judges": {"<j>": {"agreement_human": {**est, "value": 0.75}}}})
    rows = judge_rows([old, new])
    assert [r["run_id"] for r in rows] == ["r2", "r1"]  # newest first
    assert rows[1]["agreement_human.value"] == 0.7 and rows[1]["dbg.value"] is None  # not computed: empty
    page = render_html(rows, title="t")
    assert "&lt;j&gt;" in page and "<j>" not in page and "0.750 [0.600, 0.800]" in page
    assert "20 5 0 / 5 15 0 / 2 3 0" in page


def test_time_and_price_per_1k_judgments_from_the_judging_stage():
    from judgebias.reporting.judges_table import RunResult, judge_rows, per_thousand, render_html

    # 52.2 s for 32 model calls: 52.2 * 1000 / 32 = 1631.25 s per 1k; $0.048 / 32 * 1000 = $1.50.
    assert per_thousand({"calls": 32, "hits": 8, "seconds": 52.2, "usage": {"usd": 0.048}}) == \
        {"seconds_per_1k": pytest.approx(1631.25), "usd_per_1k": pytest.approx(1.5)}
    # a local judge records no price; a fully cached stage made no judgment to time
    assert per_thousand({"calls": 32, "seconds": 52.2}) == {"seconds_per_1k": pytest.approx(1631.25)}
    assert per_thousand({"calls": 0, "hits": 32, "seconds": 0.4}) == {}
    assert per_thousand({"calls": 4, "seconds": 1.0, "usage": {"usd": None}}) == {"seconds_per_1k": 250.0}
    assert per_thousand({}) == {}
    with pytest.raises(ValueError, match="negative"):
        per_thousand({"calls": -1, "seconds": 1.0})
    run = RunResult("r1", "api", "2026-11-20T00:00:00+00:00", "sha256 abc (50 pairs)",
                    {"judges": {"gpt": {}, "local": {}}},
                    {"gpt": {"seconds_per_1k": 1631.25, "usd_per_1k": 1.5},
                     "local": {"seconds_per_1k": 250.0}})
    rows = {r["judge"]: r for r in judge_rows([run])}
    assert rows["gpt"]["usd_per_1k"] == 1.5 and rows["local"]["usd_per_1k"] is None
    page = render_html(list(rows.values()), title="t")
    assert "USD per 1k judgments" in page and "<td class='num'>1631</td><td class='num'>1.5</td>" in page
