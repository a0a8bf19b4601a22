"""The report card page: statements derived from the figures, the HTML and markdown, the analyze and
report commands, MLflow, and the page as a real (headless) Chromium renders it."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_analyze import synthetic
from typer.testing import CliRunner

from judgebias.reporting.report_card import render_html, render_markdown, write_report
from judgebias.reporting.trust import mutual_gold, trust_summary
from judgebias.tables.files import write_table

RENDER = Path(__file__).with_name("render_page.py")


def _est(value, lo, hi, n=100, **extra):
    return {"value": value, "ci_low": lo, "ci_high": hi, "n": n, **extra}


def test_trust_statements_follow_the_adjusted_tests():
    # Seven tests (Holm): order 1e-6, ceiling gap 1e-5, EO 0.001, verbosity 0.17, style terms
    # lists 0.003, bold 0.0005, word_diff 0.3. Sorted: 7*1e-6, 6*1e-5, 5*0.0005 = 0.0025,
    # 4*0.001 = 0.004, 3*0.003 = 0.009 all under 0.05; then 2*0.17 = 0.34, 0.34 and 0.3 -> 0.34.
    metrics = {
        # first shown wins 62% (the test); consistency 0.62 is read beside it
        "position_bias": _est(0.62, 0.58, 0.66, 200, p_value=1e-6),
        "position_consistency": _est(0.62, 0.55, 0.69, 200),
        # interval above 0: favours its own
        "self_preference_eo": _est(0.20, 0.05, 0.35, 80, p_value=0.001),
        # judge 0.70 vs ceiling 0.88, gap interval below 0
        "human_ceiling": _est(
            0.88, 0.85, 0.91, 300, judge=_est(0.70, 0.65, 0.75), gap=_est(-0.18, -0.22, -0.14, p_value=1e-5)
        ),
        # spans 0 and leaves the +-0.05 margin: inconclusive, +0.12 not excluded
        "verbosity_bias": _est(0.05, -0.02, 0.12, p_value=0.17),
        # lists: the judge's (+0.3) beyond humans, whose interval spans 0; bold: shared by both
        "regression": {
            "terms": {
                "lists_style": {"coef": 0.3, "ci_low": 0.1, "ci_high": 0.5, "p_value": 0.003},
                "bold_style": {"coef": 0.4, "ci_low": 0.2, "ci_high": 0.6, "p_value": 0.0005},
                "word_diff": {"coef": 0.1, "ci_low": -0.1, "ci_high": 0.3, "p_value": 0.3},
            }
        },
        "regression_human": {
            "terms": {
                "lists_style": {"coef": 0.1, "ci_low": -0.1, "ci_high": 0.3},
                "bold_style": {"coef": 0.5, "ci_low": 0.3, "ci_high": 0.7},
            }
        },
    }
    said = trust_summary(metrics)
    kinds = [k for k, _ in said]
    text = " | ".join(t for _, t in said)
    assert kinds == ["caution", "caution", "caution", "inconclusive", "caution", "info"]
    assert "favours the first-shown response (P(first shown wins) 0.620 [0.580, 0.660], n=200; " \
           "p<0.001, adjusted <0.001); the same choice in both orders on 62.0% of 200 pairs" in text
    assert "majority on 70.0% of pairs; one annotator agrees with the others on 88.0%" in text
    assert "favours its own outputs beyond their quality (EO +0.200 [+0.050, +0.350], n=80; p=0.001, " \
           "adjusted 0.004)" in text
    assert "Length: no length preference beyond humans' detectable, but a gap as large as +0.120 is not " \
           "excluded (margin +-0.050" in text
    assert "prefers more list items (+0.300; p=0.003, adjusted 0.009) - humans on the same pairs do not" \
        in text
    assert "Style preferences the humans share: more bold text (+0.400" in text
    # Behaviour changed on purpose (issue 29): each alone would be a caution at 5% (intervals
    # exclude the null), but not once adjusted for 7 tests; a noisy judge without a favoured
    # position is information, not a caution.
    weak = {**metrics, "position_bias": _est(0.51, 0.47, 0.55, 200, p_value=0.4),
            "self_preference_eo": _est(0.10, 0.01, 0.19, 80, p_value=0.03)}
    said = dict((t.split(":")[0], (k, t)) for k, t in trust_summary(weak))
    # Changed on purpose (issue 41 item 3): neither interval lies inside its margin (0.5 +- 0.03;
    # +-0.05), so "not detectable" is inconclusive, no longer info / ok.
    assert said["Order"][0] == "inconclusive" and "no position bias detectable" in said["Order"][1]
    assert said["Self-preference"][0] == "inconclusive"
    assert "significant alone but not after adjusting for 7 tests" in said["Self-preference"][1]
    # A figure without a p-value is no test: its statement claims nothing (was "ok" before issue 41).
    assert [k for k, _ in trust_summary({"self_preference_eo": _est(0.3, 0.2, 0.4)})] == ["inconclusive"]
    # The same judge, consistent and no worse than an annotator, with no detectable self-preference:
    # before issue 41 three oks; now consistency alone (no position test) is information, and
    # neither EO [-0.08, +0.10] nor the gap's lower end -0.05 (not above the -0.05 margin) is inside.
    good = {
        "position_consistency": _est(0.95, 0.92, 0.97),
        "self_preference_eo": _est(0.01, -0.08, 0.10, p_value=0.8),
        "human_ceiling": _est(0.66, 0.6, 0.7, judge=_est(0.65, 0.6, 0.7),
                              gap=_est(-0.01, -0.05, 0.03, p_value=0.6)),
    }
    assert [k for k, _ in trust_summary(good)] == ["info", "inconclusive", "inconclusive"]
    # Two judges each other's whole gold: DBG is explained, not judged.
    two = {"judges": {"a": {"dbg": _est(0.0, -0.3, 0.3, gold_panel=["b"])},
                      "b": {"dbg": _est(0.0, -0.3, 0.3, gold_panel=["a"])}}}
    assert mutual_gold(two)
    three = {"judges": {**two["judges"], "c": {"dbg": _est(0.0, -0.3, 0.3, gold_panel=["a", "b"])}}}
    assert not mutual_gold(three)
    assert "each other's whole gold panel" in trust_summary(two["judges"]["a"], mutual_gold=True)[0][1]


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    from judgebias.reporting.analysis import analyze

    return analyze(synthetic(80), self_map={"j1": {"other"}}, reps=200)


def test_page_holds_every_figure_with_interval_and_source(analyzed, tmp_path):
    md = render_markdown(analyzed, title="T", provenance=["from a test"])
    eo = analyzed["judges"]["j1"]["self_preference_eo"]
    assert f"| {eo['value']:+.3f} | [{eo['ci_low']:+.3f}, {eo['ci_high']:+.3f}] | {eo['n']} |" in md
    assert (
        "Wataoka et al. 2024, Def. 4.1" in md and "## j3" in md and "Not computed" not in md.split("## j1")[0]
    )
    page = render_html(analyzed, title="T <script>", plots={"dbg": b"\x89PNG fake"})
    assert "T &lt;script&gt;" in page and "data:image/png;base64," in page
    html_path, md_path = write_report(tmp_path / "r.html", analyzed, title="T")
    assert html_path.read_text().startswith("<!doctype html>") and md_path.suffix == ".md"
    # The page says what the adjustment means, in one sentence per judge, and lists the tests.
    n = analyzed["judges"]["j1"]["multiplicity"]["tests"]
    assert f"Adjusted for {n} tests (Holm)" in md and "false alarm is at most 5%" in md
    assert f"The {n} tests (raw p -> adjusted p): order " in md
    assert "on average at most 5% of the cautions" in render_markdown(analyzed, title="T", multiplicity="bh")


def test_multiplicity_option_of_analyze_and_report(tmp_path):
    from judgebias.cli import app

    table = write_table(synthetic(40), tmp_path / "t.jsonl")
    out = tmp_path / "m.json"
    args = ["analyze", str(table), "-o", str(out), "--reps", "100", "--no-mlflow"]
    res = CliRunner().invoke(app, [*args, "--multiplicity", "bh"])
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())["judges"]["j1"]
    assert m["multiplicity"]["method"] == "bh" and "(adj " in res.output and "report card:" in res.output
    assert m["position_bias"]["p_adjusted"] >= m["position_bias"]["p_value"]
    assert "Benjamini-Hochberg" in (tmp_path / "m_report.md").read_text()
    again = CliRunner().invoke(app, ["report", str(out), "--multiplicity", "holm"])
    assert again.exit_code == 0 and "(Holm)" in (tmp_path / "m_report.md").read_text()
    bad = CliRunner().invoke(app, [*args, "--multiplicity", "bonferroni"])
    assert bad.exit_code == 2 and "--multiplicity" in bad.output


def test_analyze_writes_the_page_logs_it_and_report_reopens_it(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from judgebias.cli import app

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    table = write_table(synthetic(60), tmp_path / "t.jsonl")
    out = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["analyze", str(table), "-o", str(out), "--reps", "200"])
    assert res.exit_code == 0, res.output
    page = tmp_path / "m_report.html"
    assert (
        page.is_file()
        and (tmp_path / "m_report.md").is_file()
        and (tmp_path / "m_plots" / "dbg.png").is_file()
    )
    run_id = res.output.split("MLflow: run ")[1].split()[0]
    assert {"m_report.html", "m_report.md"} <= {a.path for a in MlflowClient(uri).list_artifacts(run_id)}

    again = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "again.html")])
    assert again.exit_code == 0, again.output
    from_run = CliRunner().invoke(app, ["report", run_id])
    assert from_run.exit_code == 0, from_run.output
    fetched = tmp_path / "reports" / run_id / "report.html"
    assert fetched.is_file() and "data:image/png;base64," in fetched.read_text()
    (tmp_path / "empty").mkdir()
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "empty")])
    assert bad.exit_code == 2 and "not a run folder" in bad.output
    (tmp_path / "x.json").write_text("[1, 2]")
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "expected the JSON of judgebias analyze" in bad.output


def test_the_page_renders_in_a_headless_browser(analyzed, tmp_path):
    pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="dev extra PyQt6-WebEngine not installed")
    from judgebias.reporting.plots import figures_for, save_figures

    save_figures(figures_for(analyzed), tmp_path / "plots")
    page, _ = write_report(
        tmp_path / "report.html", analyzed, title="Judge report card", plot_dir=tmp_path / "plots"
    )
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [sys.executable, str(RENDER), str(page), str(shot), "1100"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["loaded"] and seen["h1"] == "Judge report card"
    # the judges side by side, then per judge its figures and its style regression's coefficients
    assert seen["tables"] == 1 + 3 + 3 and seen["rows"] > 30
    n_plots = len(list((tmp_path / "plots").glob("*.png")))
    assert seen["images"] == seen["decoded"] == n_plots > 0  # every plot decodes
    assert seen["scroll_width"] <= seen["window_width"]  # nothing wider than the window
    assert any(t.startswith(("ok:", "caution:", "info:")) for t in seen["trust"])
    assert seen["shot_saved"] and seen["shot_size"][1] > 1000 and shot.stat().st_size > 50_000


def test_console_headline_signs_differences_only():
    from judgebias.reporting.experiment_summary import headline_rows

    # A probability (P(first shown wins)) printed "+0.675" reads like a difference from 0.
    metrics = {"judges": {"J": {"position_bias": {"value": 0.675, "ci_low": 0.6, "ci_high": 0.75, "n": 40},
                                "dbg": {"value": -0.1, "ci_low": -0.2, "ci_high": 0.0, "n": 40}}}}
    rows = {label.split(" (")[0]: est for _, label, est in headline_rows(metrics)}
    assert rows["position bias"] == "0.675 [0.600, 0.750] n=40"
    assert rows["DBG score"] == "-0.100 [-0.200, +0.000] n=40"


def test_the_two_class_agreement_row_is_named_as_a_share_not_as_kappa():
    # It followed Cohen's kappa in the registry as a sub-row and read "Cohen's kappa vs humans: where
    # humans pick a side" beside a share of 0.781.
    from judgebias.reporting.report_card import side_by_side

    result = {"judges": {"j": {"kappa_human": {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 100},
                               "agreement_human_2class": {"value": 0.781, "ci_low": 0.7, "ci_high": 0.85,
                                                          "n": 90}}}}
    _, rows = side_by_side(result)
    labels = dict((cells[0].split(" ")[0], name) for name, cells in rows)
    assert labels["0.781"].startswith("agreement where humans pick a side (share")
    assert "kappa" not in labels["0.781"]


@pytest.mark.parametrize("sign", [+1, -1])
def test_every_style_statement_reads_as_english_in_both_directions(sign):
    # A negative coefficient printed "fewer/less " before the positive label: "prefers fewer/less
    # more bold text", "fewer/less its own outputs". Each term, alone in its family (p=1e-6), must
    # say what the judge prefers in plain words for either sign.
    from judgebias.reporting.trust import STYLE_TERMS, STYLE_TERMS_NEGATIVE

    assert set(STYLE_TERMS_NEGATIVE) == set(STYLE_TERMS)
    for term, label in STYLE_TERMS.items():
        coef = 0.4 * sign
        # origin terms are read only with the humans' choice in the model (human_a, no p-value)
        metrics = {"regression": {"terms": {term: {"coef": coef, "ci_low": coef - 0.1 * sign,
                                                   "ci_high": coef + 0.1 * sign, "p_value": 1e-6},
                                            "human_a": {"coef": 1.0, "ci_low": 0.5, "ci_high": 1.5}}}}
        said = [t for _, t in trust_summary(metrics) if t.startswith("Style")]
        assert len(said) == 1, (term, said)
        expected = label if sign > 0 else STYLE_TERMS_NEGATIVE[term]
        assert f"prefers {expected} ({coef:+.3f}" in said[0], said[0]
        assert "fewer/less" not in said[0]
        words = said[0].split()
        # no comparative stacked on another ("fewer more", "less more", "fewer its")
        stacked = [(w, nxt) for w, nxt in itertools.pairwise(words)
                   if w in {"fewer", "less", "more"} and nxt in {"more", "fewer", "less", "its"}]
        assert not stacked, said[0]


def test_no_share_in_the_side_by_side_table_is_named_as_kappa():
    # Over every registered figure (not only the 2-class agreement row that once inherited
    # "Cohen's kappa vs humans:"): a row whose figure is a share, a rate or a probability never
    # reads as kappa, and a kappa row always does.
    from judgebias.metrics import registry
    from judgebias.reporting.report_card import side_by_side

    est = {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 10}
    _, rows = side_by_side({"judges": {"j": {key: est for key in registry.FIGURES}}})
    names = [name for name, _ in rows]
    assert len(names) == len(registry.FIGURES)
    for key, name in zip(registry.FIGURES, names, strict=True):
        is_kappa = "kappa" in key
        assert ("kappa" in name.lower()) == is_kappa, (key, name)
