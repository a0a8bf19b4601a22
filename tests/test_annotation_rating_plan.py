"""``annotate plan`` and ``annotate replay`` on a pointwise table, without a server: the pilot's
linearised variables and the expected half-widths worked by hand, the replay's truth and its census."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.annotation.ratings import Rating, upsert_ratings
from judgebias.annotation.store import Ledger
from judgebias.cli import app
from judgebias.metrics.survey import t_quantile
from judgebias.tables.files import write_table

J_SCORES, M_SCORES = [4.0, 2.0, 3.0, 1.0], [3.0, 3.0, 2.0, 2.0]


def four_items(human=None, judges=("j", "m")) -> pd.DataFrame:
    """i1-i4 scored 1..5 by j (4, 2, 3, 1) and m (3, 3, 2, 2); j wrote i1 and i2."""
    human = human or {}
    rows = [dict(item_id=f"i{k + 1}", prompt=f"q{k}", response=f"a{k}", generator="j" if k < 2 else "x",
                 judge=judge, score=(J_SCORES if judge == "j" else M_SCORES)[k], scale_min=1, scale_max=5,
                 criterion="helpfulness", human_scores=human.get(f"i{k + 1}", []))
            for k in range(4) for judge in judges]
    return pd.DataFrame(rows)


def plan_json(path, *args) -> pd.DataFrame:
    res = CliRunner().invoke(app, ["annotate", "plan", str(path), "-j", "j", "--json", *args])
    assert res.exit_code == 0, res.output
    return pd.DataFrame(json.loads(res.output)).set_index(["design", "estimator"])


def test_plan_stands_in_the_gold_judges_score_for_unrated_items(tmp_path):
    path = write_table(four_items(), tmp_path / "scores.jsonl")
    # The one rating comes from the ledger (as `annotate pull` stored it): i1 rated 5.
    upsert_ratings(Ledger(tmp_path / "scores.labels.sqlite"),
                   [Rating(1, "http://ls", 7, "ik-1", "i1", "ls-user-1", 5.0, False, None, "2026-01-01")],
                   seen_tasks=[7], server_url="http://ls")
    # human_mean: h = (5 rated, then m's 3, 2, 2 standing in); T = (12, 4), g = T0/T1, so
    # z_i = N (h_i / T1 - T0 / T1^2) = h_i - 3 = (2, 0, -1, -1), S_z^2 = 6/3 = 2. Uniform, n = 2 of 4:
    # V = (1 - 2/4) * 2 / 2 = 0.5; 3 of 4 units carry z, so df = 2 * 3/4 - 1 -> floored at 1.
    rows = plan_json(path, "--figure", "human_mean", "-n", "2")
    assert rows.loc[("uniform", "Hájek"), "half_width_at_2"] == pytest.approx(t_quantile(1) * math.sqrt(0.5))
    assert rows["pilot_labels"].iloc[0] == 1 and ("uniform", "PPI++") not in rows.index
    # score_bias_human (the default figure): d = s - h = (-1, -1, 1, -1), ratio -1/2, z = d + 1/2 =
    # (-.5, -.5, 1.5, -.5), S_z^2 = 3/3 = 1; V = 0.5 * 1 / 2 = 0.25, all 4 carry z: df = 2 - 1 = 1.
    rows = plan_json(path, "-n", "2")
    assert rows.loc[("uniform", "Hájek"), "half_width_at_2"] == pytest.approx(t_quantile(1) * 0.5)
    assert rows.loc[("uniform", "Hájek"), "figure"] == "score_bias_human"
    res = CliRunner().invoke(app, ["annotate", "plan", str(path), "-j", "j", "-n", "2", "-n", "3"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("score_bias_human of j over 4 items it scored; pilot ratings: 1, other "
                                 "judges' mean score standing in on 3, the judge's own score on 0\n")
    assert "n=2: ±6.353" in res.output and "PPI++ is planned once 10 or more items" in res.output


def test_plan_without_a_gold_judge_uses_the_rated_items_as_uniform(tmp_path):
    path = write_table(four_items({"i1": [5.0], "i2": [1.0]}, judges=("j",)), tmp_path / "one.jsonl")
    # Rated h = (5, 1): z = h - 3 = (2, -2), s^2 = 8, standing for the population's: uniform n = 2 of 4,
    # V = (1 - 2/4) * 8 / 2 = 2, df = 2 - 1.
    rows = plan_json(path, "--figure", "human_mean", "-n", "2")
    assert rows.loc[("uniform", "Hájek"), "half_width_at_2"] == pytest.approx(t_quantile(1) * math.sqrt(2))
    assert "no other judge's score" in rows.loc[("poisson", "Hájek"), "note"]
    assert np.isnan(rows.loc[("poisson", "Hájek"), "half_width_at_2"])
    one = write_table(four_items({"i1": [5.0]}, judges=("j",)), tmp_path / "single.jsonl")
    res = CliRunner().invoke(app, ["annotate", "plan", str(one), "-j", "j", "-n", "2"])
    assert res.exit_code == 1 and "nothing stands in for the ratings" in res.output
    res = CliRunner().invoke(app, ["annotate", "plan", str(path), "-j", "j", "-n", "2",
                                   "--population", "own"])
    assert res.exit_code == 1 and "score_self_preference" in res.output
    res = CliRunner().invoke(app, ["annotate", "plan", str(path), "-j", "j", "-n", "2", "--figure", "eo"])
    assert res.exit_code == 1 and "unknown rating figure 'eo'" in res.output


def test_plan_ppi_from_ten_ratings(tmp_path):
    s = np.array([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], float)
    h = np.array([2, 2, 3, 5, 4, 1, 3, 3, 4, 5, 2, 1], float)
    df = pd.DataFrame({"item_id": [f"i{k}" for k in range(12)], "prompt": "q", "response": "a",
                       "generator": "x", "judge": "j", "score": s, "scale_min": 1, "scale_max": 5,
                       "criterion": "c", "human_scores": [[v] for v in h]})
    path = write_table(df, tmp_path / "twelve.jsonl")
    # human_mean PPI++ on the 12 rated items: z = h - hbar, zh = s - hbar (the same gradient), so
    # lam = cov(h, s) / var(s), clipped to [0, 1], and the residual is z - lam zh. Uniform n = 6 of 12:
    # V = (1 - 6/12) var(resid) / 6, df = 6 - 1.
    lam = np.cov(h, s, ddof=1)[0, 1] / np.var(s, ddof=1)
    resid = (h - h.mean()) - lam * (s - h.mean())
    rows = plan_json(path, "--figure", "human_mean", "-n", "6")
    ppi = rows.loc[("uniform", "PPI++")]
    assert ppi["lambda"] == pytest.approx(lam)
    assert ppi["half_width_at_6"] == pytest.approx(t_quantile(5) * math.sqrt(0.5 * np.var(resid, ddof=1) / 6))


def rated_six() -> pd.DataFrame:
    """Six items, judge j, every one rated; j wrote i1-i3."""
    s, h = [5.0, 4.0, 4.0, 2.0, 3.0, 1.0], [4.0, 4.0, 3.0, 3.0, 3.0, 2.0]
    return pd.DataFrame({"item_id": [f"i{k}" for k in range(1, 7)], "prompt": "q", "response": "a",
                         "generator": ["j"] * 3 + ["x"] * 3, "judge": "j", "score": s, "scale_min": 1,
                         "scale_max": 5, "criterion": "c", "human_scores": [[v] for v in h]})


def test_replay_truth_by_hand_and_a_census_budget_is_exact():
    from judgebias.annotation.rating_replay import rating_replay
    from judgebias.annotation.replay import ReplaySettings, summarize

    settings = ReplaySettings(judges=["j"], budgets=(3, 6), reps=4, batch=3, design="uniform",
                              figures=("human_mean", "score_bias_human", "score_self_preference"), seed=2)
    results, info = rating_replay(rated_six(), settings)
    assert info == {"items": 6, "unrated_left_out": 0, "judges": ["j"]}
    truth = results.groupby("figure")["truth"].first()
    # h mean 19/6; s - h = (1, 0, 1, -1, 0, -1): mean 0; own (1, 0, 1) mean 2/3, other (-1, 0, -1) -2/3.
    assert truth.to_dict() == pytest.approx({"human_mean": 19 / 6, "score_bias_human": 0.0,
                                             "score_self_preference": 4 / 3})
    assert set(results["method"]) == {"design", "ppi"} and len(results) == 3 * 2 * 2 * 4
    # Two uniform batches of 3 draw all 6: every estimate is the truth.
    census = results[results["budget"] == 6]
    assert (census["labels"] == 6).all()
    assert census["value"].to_numpy() == pytest.approx(census["truth"].to_numpy())
    half = results[results["budget"] == 3]
    assert (half["labels"] == 3).all() and half["value"].notna().any()
    summary = summarize(results)
    assert summary.loc[summary["budget"] == 6, "bias"].abs().max() == pytest.approx(0.0, abs=1e-12)


def test_replay_cli_on_a_pointwise_table(tmp_path):
    path = write_table(rated_six().assign(human_scores=[[4.0], [4.0], [3.0], [3.0], [3.0], []]),
                       tmp_path / "rated.jsonl")
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["annotate", "replay", str(path), "-j", "j", "--budgets", "2,5", "--reps",
                                   "3", "--batch", "2", "--design", "uniform", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("population: 5 rated items scored by j (1 without a rating left out)\n")
    for name in ("results.csv", "summary.csv", "summary.json", "summary.md", "labels_saved.csv",
                 "replay.png"):
        assert (out / name).is_file()
    md = (out / "summary.md").read_text()
    assert "| judge | figure | labels | design bias / RMSE / cover / width | ppi bias" in md
    assert "ranking" not in md
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["figure"]) == {"human_mean", "score_bias_human", "score_self_preference"}
    bad = CliRunner().invoke(app, ["annotate", "replay", str(path), "-j", "j", "--figures", "eo"])
    assert bad.exit_code == 1 and "unknown rating figure 'eo'" in bad.output
    own = CliRunner().invoke(app, ["annotate", "replay", str(path), "-j", "j", "--population", "own"])
    assert own.exit_code == 1 and "score_self_preference" in own.output
