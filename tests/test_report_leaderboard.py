"""The report card's leaderboard section: the page ends with it, it says the recommendation and the
rules' figures, shows the forest plot first, and names from data stay inert."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.reporting.leaderboard import leaderboard
from judgebias.reporting.report_card import write_report

HOSTILE = "<script>alert(1)</script>|*x*"


def _table():
    # Three generators, all pairs, each against each on 8 prompts; humans label every pair and the
    # one judge j1 agrees with them but on one prompt in eight (so its kappa clears chance: R2).
    rows = []
    gens = ["g-long", "g-mid", HOSTILE]
    words = {"g-long": 30, "g-mid": 15, HOSTILE: 5}
    k = 0
    for i, a in enumerate(gens):
        for b in gens[i + 1:]:
            for p in range(8):
                k += 1
                human = ["a"] if (p % 4) else ["b"]
                rows.append({"pair_id": f"p{k}", "prompt": f"q{p}", "generator_a": a, "generator_b": b,
                             "response_a": "w " * words[a], "response_b": "w " * words[b],
                             "judge": "j1", "verdict": "a" if p % 4 and p != 5 else "b", "human": human})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def board():
    # The table's verdicts and labels are a function of the prompt alone: clustered by prompt (the
    # default) it holds 8 pieces of information, on which j1's kappa interval reaches below 0 (R2
    # fails, nobody is recommended). The page is what these tests are about: its pairs are declared
    # independent, as every table was before clustering.
    return leaderboard(_table(), reps=50, seed=1, cluster_by="none")


def test_the_page_ends_with_the_leaderboard_section_and_names_are_inert(board, tmp_path):
    from judgebias.reporting.plots_leaderboard import leaderboard_figures, save_leaderboard_figures

    plots = tmp_path / "lbplots"
    save_leaderboard_figures(leaderboard_figures(board), plots)
    result = {"judges": {}, "dataset": {}}
    page, md = write_report(tmp_path / "report.html", result, title="t", leaderboard=board,
                            leaderboard_plots=plots)
    html_text = page.read_text(encoding="utf-8")
    tail = html_text[html_text.index("<h2 id='leaderboard'>"):]
    assert tail.endswith("</body></html>") and "<h2" not in tail[4:]
    assert "<script>" not in html_text and "&lt;script&gt;" in tail
    # The forest plot comes first among the section's figures.
    assert tail.index("alt='leaderboard_forest'") < tail.index("alt='leaderboard_ranks_j1'")
    rec = board["recommendation"]
    assert f"Recommended rater: {rec['recommended']}" in tail  # the only judge, unrelated: it passes R1
    assert rec["recommended"] == "j1"
    for rule in ("R1", "R2", "R3", "R4", "ORDER"):
        assert f"<li>{rule}: " in tail
    text = md.read_text(encoding="utf-8")
    section = text[text.index("## Leaderboard of the generators"):]
    assert "<script>" not in section and "](<lbplots/leaderboard_forest.png>)" in section
    assert "### j1" in section and "| model | raw |" in section


def test_without_a_leaderboard_the_page_has_no_section(tmp_path):
    page, md = write_report(tmp_path / "r.html", {"judges": {}, "dataset": {}}, title="t")
    assert "leaderboard" not in page.read_text(encoding="utf-8").lower()
    assert "Leaderboard" not in md.read_text(encoding="utf-8")


def test_report_command_on_a_run_folder_keeps_the_section(board, tmp_path):
    import json

    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.runs.layout import RunLayout

    layout = RunLayout()
    (tmp_path / layout.metrics).write_text(json.dumps({"judges": {}, "dataset": {}}))
    (tmp_path / layout.leaderboard).write_text(json.dumps(board))
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 0, res.output
    page = (tmp_path / layout.report_html).read_text(encoding="utf-8")
    assert "<h2 id='leaderboard'>" in page and "Recommended rater: j1" in page


def test_console_report_lines_say_the_recommendation(board, tmp_path):
    from judgebias.reporting.experiment_summary import leaderboard_lines
    from judgebias.runs.layout import RunLayout
    from judgebias.runs.store import RunStore

    store = RunStore(tmp_path)
    assert leaderboard_lines(store) == []
    store.write_json(RunLayout().leaderboard, board)
    lines = leaderboard_lines(store)
    assert lines[1].startswith("leaderboard of the generators") and "Recommended rater: j1" in lines[2]


def test_captions_say_what_each_plot_shows_and_the_rank_chart_draws_rank_intervals(board, tmp_path):
    from judgebias.reporting.plots_leaderboard import (
        leaderboard_figures,
        rank_change_chart,
        save_leaderboard_figures,
    )
    from judgebias.reporting.report_card_leaderboard import leaderboard_html, leaderboard_markdown

    plots = tmp_path / "lbplots"
    save_leaderboard_figures(leaderboard_figures(board), plots)
    pngs = {p.stem: p.read_bytes() for p in plots.glob("*.png")}
    page = leaderboard_html(board, pngs)
    captions = page.split("<figcaption>")[1:]
    assert len(captions) == 2
    forest, ranks = (c[:c.index("</figcaption>")] for c in captions)
    # Words, not the file name: the population, the method, n and the bootstrap's clusters.
    assert "leaderboard_forest" not in forest and "leaderboard_ranks" not in ranks
    assert "Bradley-Terry strengths" in forest and "3 generators" in forest
    assert "n = 24 comparisons" in forest and "50 resamples of the pairs (24 clusters)" in forest
    assert ranks.startswith("j1: the rank") and "95% rank intervals" in ranks
    assert "raw 24" in ranks and "human 24" in ranks and "(24 clusters)" in ranks
    md = leaderboard_markdown(board, {stem: f"lbplots/{stem}.png" for stem in pngs})
    assert "*j1: the rank (1 = strongest)" in md
    # The chart's vertical bars span each model's rank interval, per column.
    fig = rank_change_chart(board, "j1")
    spans = set()
    for coll in fig.axes[0].collections:
        for seg in coll.get_segments():
            if len(seg) == 2 and seg[0][0] == seg[1][0]:
                spans.add((round(seg[0][1]), round(seg[1][1])))
    want = {(r["rank_ci_low"], r["rank_ci_high"]) for r in board["rankings"]["raw"]["j1"]}
    assert want <= spans
    assert any(lo < hi for lo, hi in want)  # at least one interval is wider than a point
