"""Pointwise, finished (issue 41.5): skip reasons that say why, unscored rows counted on import."""

from __future__ import annotations

import pandas as pd
import pytest
from test_pointwise_metrics import table
from typer.testing import CliRunner

from judgebias.reporting.pointwise_analysis import analyze_pointwise
from judgebias.tables.pointwise import unscored_reasons


def test_self_preference_skip_says_no_responses_by_the_judge():
    # judge g scored only j's responses (items 1-3): nothing of its own to prefer
    skipped = analyze_pointwise(table(), reps=100)["judges"]["g"]["skipped"]
    assert skipped["score_self_preference.dp"].startswith("no responses written by the judge")
    assert "Welch" not in skipped["score_self_preference.dp"]


def _with_failures() -> pd.DataFrame:
    t = table()
    t["judge_error"] = None
    # two rows fail the same way, one another way, one has no reason recorded; the human-only row
    # (no judge) is no judgment and is not counted
    t.loc[[0, 1], ["score", "judge_error"]] = [None, "no [RESULT] in the reply"]
    t.loc[2, ["score", "judge_error"]] = [None, "timeout after 3 tries"]
    t.loc[3, "score"] = None
    human_only = t.iloc[[4]].assign(judge="", score=None)
    return pd.concat([t, human_only], ignore_index=True)


def test_unscored_reasons_counts_judge_errors():
    assert unscored_reasons(_with_failures()) == {
        "no [RESULT] in the reply": 2, "timeout after 3 tries": 1, "no score and no judge_error given": 1}


def test_import_table_prints_unscored_rows_and_why(tmp_path):
    from judgebias.cli import app

    src, out = tmp_path / "scores.jsonl", tmp_path / "t.parquet"
    _with_failures().to_json(src, orient="records", lines=True)
    res = CliRunner().invoke(app, ["import", "table", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "unscored judge rows: 4" in res.output
    assert "2: no [RESULT] in the reply" in res.output and "1: timeout after 3 tries" in res.output


def _two_criteria() -> pd.DataFrame:
    """The hand-computed table of test_pointwise_metrics scored twice: 'overall' as there and
    'style', where the judge scores every item one point above its 'overall' score."""
    t = table()
    style = t.assign(criterion="style", score=t["score"] + 1, score_argmax=t["score_argmax"] + 1)
    return pd.concat([t, style], ignore_index=True)


def test_figures_per_criterion_beside_the_pooled_ones():
    result = analyze_pointwise(_two_criteria(), reps=100)
    assert result["settings"]["criteria"] == ["overall", "style"]
    by = result["by_criterion"]
    # overall: the hand-computed table's bias -1/6 (test_pointwise_metrics); style: +1 more = 5/6;
    # pooled over both: 1/3, its 12 rows in 6 item clusters
    assert by["overall"]["judges"]["j"]["score_bias_human"]["value"] == pytest.approx(-1 / 6)
    assert by["style"]["judges"]["j"]["score_bias_human"]["value"] == pytest.approx(5 / 6)
    pooled = result["judges"]["j"]["score_bias_human"]
    assert pooled["value"] == pytest.approx(1 / 3) and (pooled["n"], pooled["clusters"]) == (12, 6)
    assert by["overall"]["judges"]["j"]["score_bias_human"]["design_effect"] == 1.0
    from judgebias.reporting.pointwise_analysis import format_pointwise
    from judgebias.tracking.log_pointwise import flatten_pointwise

    assert "style / j: spearman" in format_pointwise(result)
    flat = flatten_pointwise(result)
    assert flat["j.criterion.style.score_bias_human.mean_judge_minus_human"] == pytest.approx(5 / 6)
    assert flat["j.score_bias_human.mean_judge_minus_human"] == pytest.approx(1 / 3)


def test_analyze_on_a_pointwise_table_writes_its_report_card(tmp_path):
    from judgebias.cli import app
    from judgebias.tables.files import write_table

    scores, out = tmp_path / "scores.jsonl", tmp_path / "m.json"
    write_table(_two_criteria(), scores)
    res = CliRunner().invoke(app, ["analyze", str(scores), "--out", str(out), "--no-mlflow", "--reps", "100"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "m_report.html").read_text()
    md = (tmp_path / "m_report.md").read_text()
    assert "no report card yet" not in res.output and "m_report.html" in res.output
    # one section per judge, its statements and figures, the table's clusters named
    assert "j (pointwise)" in page and "g (pointwise)" in page
    assert "Against human scores" in md and "12 clusters" not in md and "6 clusters by item_id" in md
    # `judgebias report` rebuilds the same page from the JSON
    again = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "again.html")])
    assert again.exit_code == 0, again.output
    assert "j (pointwise)" in (tmp_path / "again.html").read_text()
