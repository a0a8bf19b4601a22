"""Pointwise figures on one small hand-computed table (arithmetic in the comments)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from judgebias.metrics import pointwise as P
from judgebias.metrics import pointwise_origin as O
from judgebias.reporting.pointwise_analysis import analyze_pointwise, format_pointwise
from judgebias.stats import InsufficientData
from judgebias.tables.pairwise import validate
from judgebias.tables.pointwise import validate_pointwise

# Judge j on a 1..10 scale. Items 1-3 were written by j itself, 4-6 by m. Prompts q1..q3 each have
# one own and one other response (for the pairwise join). Response i has 10*i words.
SCORES = [2, 4, 5, 7, 9, 8]
HUMANS = [[3, 3], [4], [4, 6], [6], [8], [10, 10]]  # means 3, 4, 5, 6, 8, 10
GENERATORS = ["j", "j", "j", "m", "m", "m"]
PROMPTS = ["q1", "q2", "q3", "q1", "q2", "q3"]


def _response(i: int) -> str:
    return " ".join([f"w{i}"] * (10 * i))


def table() -> pd.DataFrame:
    rows = [
        dict(
            item_id=f"i{i}",
            prompt=PROMPTS[i - 1],
            response=_response(i),
            generator=GENERATORS[i - 1],
            judge="j",
            score=SCORES[i - 1],
            score_argmax=SCORES[i - 1],
            scale_min=1,
            scale_max=10,
            criterion="overall",
            human_scores=HUMANS[i - 1],
        )
        for i in range(1, 7)
    ]
    # A gold judge g scores the own items 1-3: 3, 3, 6.
    rows += [
        dict(
            item_id=f"i{i}",
            prompt=PROMPTS[i - 1],
            response=_response(i),
            generator="j",
            judge="g",
            score=s,
            score_argmax=s,
            scale_min=1,
            scale_max=10,
            criterion="overall",
            human_scores=[],
        )
        for i, s in ((1, 3), (2, 3), (3, 6))
    ]
    return validate_pointwise(pd.DataFrame(rows))[0]


def test_rank_agreement_with_the_mean_rater():
    df = table()
    # Ranks of the scores 1,2,3,4,6,5 against the human means' 1..6: d^2 = 0+0+0+0+1+1 = 2,
    # rho = 1 - 6*2/(6*35) = 0.942857. Fisher z: atanh(rho) = 1.76318, Bonett-Wright SE
    # sqrt((1 + rho^2/2)/(n-3)) = 0.69390, interval tanh(1.76318 -+ 1.95996*0.69390) = [0.3826, 0.9961].
    rho = P.score_spearman_human(df, "j")
    assert rho.value == pytest.approx(1 - 12 / 210)
    se = math.sqrt((1 + rho.value**2 / 2) / 3)
    assert (rho.ci_low, rho.ci_high) == pytest.approx(
        (math.tanh(math.atanh(rho.value) - 1.959964 * se), math.tanh(math.atanh(rho.value) + 1.959964 * se)),
        abs=1e-5,
    )
    assert rho.ci_low == pytest.approx(0.3826, abs=1e-3) and rho.n == 6
    # Kendall: 15 pairs, one discordant (items 5, 6): tau = (14 - 1)/15; SE sqrt(0.437/2) = 0.46744.
    tau = P.score_kendall_human(df, "j")
    assert tau.value == pytest.approx(13 / 15)
    z = math.atanh(13 / 15)
    assert tau.ci_high == pytest.approx(math.tanh(z + 1.959964 * math.sqrt(0.437 / 2)), abs=1e-5)


def test_kappa_mae_and_bias_against_humans():
    df = table()
    # Rounded scores x = 2,4,5,7,9,8 and rounded means y = 3,4,5,6,8,10: observed sum (x-y)^2 = 7,
    # expected sum x^2 + sum y^2 - 2 sum x sum y / n = 239 + 250 - 2*35*36/6 = 69: kappa = 1 - 7/69.
    kappa = P.score_kappa_human(df, "j", reps=500)
    assert kappa.value == pytest.approx(1 - 7 / 69)
    from sklearn.metrics import cohen_kappa_score

    assert kappa.value == pytest.approx(
        cohen_kappa_score([2, 4, 5, 7, 9, 8], [3, 4, 5, 6, 8, 10], weights="quadratic")
    )
    assert kappa.ci_low <= kappa.value <= kappa.ci_high
    # |s - h| = 1,0,0,1,1,2: MAE = 5/6. s - h = -1,0,0,1,1,-2: bias -1/6, sd sqrt((7 - 6/36)/5) = 1.16905,
    # t(5) = 2.570582: half width 2.570582 * 1.16905 / sqrt(6) = 1.22683.
    assert P.score_mae_human(df, "j").value == pytest.approx(5 / 6)
    bias = P.score_bias_human(df, "j")
    assert bias.value == pytest.approx(-1 / 6)
    assert bias.ci_high == pytest.approx(-1 / 6 + 1.22683, abs=1e-4) and bias.n == 6


def test_self_preference_eo_and_dp_and_dbg():
    df = table()
    # EO: (s - h) own = -1, 0, 0 (mean -1/3); others = 1, 1, -2 (mean 0): -1/3.
    eo = O.score_self_preference_eo(df, "j")
    assert eo.value == pytest.approx(-1 / 3) and eo.details["n_own"] == 3
    # DP: own scores 2, 4, 5 (mean 11/3, var 7/3), others 7, 9, 8 (mean 8, var 1): -13/3; Welch SE
    # sqrt(7/9 + 1/3) = 1.05409, df = (10/9)^2 / ((7/9)^2/2 + (1/3)^2/2) = 3.44828.
    dp = O.score_self_preference_dp(df, "j")
    assert dp.value == pytest.approx(-13 / 3)
    half = stats.t.ppf(0.975, 3.44828) * math.sqrt(10 / 9)
    assert dp.ci_low == pytest.approx(-13 / 3 - half, abs=1e-3)
    # DBG: own items j vs gold g: 2-3, 4-3, 5-6 = -1, 1, -1: mean -1/3 (paired t over 3 items).
    dbg = O.score_dbg(df, "j")
    assert dbg.value == pytest.approx(-1 / 3) and dbg.n == 3 and dbg.details["gold"] == ["g"]
    with pytest.raises(InsufficientData):
        O.score_self_preference_dp(df, "g")  # g has no response of another generator


def test_verbosity_is_the_slope_beyond_the_humans():
    df = table()
    # x = words/100 = 0.1..0.6 (mean 0.35, sum of squared deviations 0.175); y = s - h = -1,0,0,1,1,-2:
    # sum dev*y = 0.25 + 0.05 + 0.15 - 0.5 = -0.05, slope -0.05/0.175 = -0.285714. Judge slope
    # 2.35/0.175 = 13.428571, human slope 2.4/0.175 = 13.714286: the difference again.
    v = O.score_verbosity(df, "j")
    assert v.value == pytest.approx(-0.05 / 0.175)
    assert v.details["judge_slope"] - v.details["human_slope"] == pytest.approx(v.value)
    assert v.details["judge_slope"] == pytest.approx(2.35 / 0.175)


def test_distribution_skew_round_numbers_and_range():
    df = table()
    d = P.score_distribution(df, "j")
    s = np.array(SCORES, dtype=float)
    # Adjusted skewness G1 = g1 sqrt(n(n-1))/(n-2), g1 = m3/m2^1.5 (= -0.3191 here).
    dev = s - s.mean()
    g1 = (dev**3).mean() / (dev**2).mean() ** 1.5
    assert d.value == pytest.approx(g1 * math.sqrt(30) / 4) and d.value == pytest.approx(-0.3191, abs=1e-3)
    # Round scores (5, 10): one of six. Agresti-Coull: n~ = 9.8415, p~ = 2.92073/9.8415 = 0.29678,
    # half 1.95996 sqrt(p~(1-p~)/n~) = 0.28541: [0.0114, 0.5822].
    r = d.details["round_share"]
    assert r.value == pytest.approx(1 / 6)
    assert (r.ci_low, r.ci_high) == pytest.approx((0.0114, 0.5822), abs=1e-3)
    assert (d.details["used_min"], d.details["used_max"], d.details["levels_used"]) == (2.0, 9.0, 6)


def _pairs() -> pd.DataFrame:
    r = {i: _response(i) for i in range(1, 7)}
    rows = [
        ("q1", r[1], r[4], "a"),
        ("q2", r[2], r[5], "b"),
        ("q3", r[3], r[6], "tie"),
        ("q3", r[6], r[3], "a"),
        ("q1", r[1], "never scored", "a"),
    ]
    return validate(
        pd.DataFrame(
            [
                dict(pair_id=f"p{k}", prompt=p, response_a=a, response_b=b, judge="j", verdict=v)
                for k, (p, a, b, v) in enumerate(rows)
            ]
        )
    )[0]


def test_pointwise_pairwise_consistency():
    # q1: 2 vs 7, a won: the lower-scored won. q2: 4 vs 9, b won: consistent. q3 tie: out.
    # q3 swapped: 8 vs 5, a won: consistent. An unscored response: out. 1 of 3; Agresti-Coull
    # n~ = 6.8415, p~ = 2.92073/6.8415 = 0.42692, half 1.95996*0.189106 = 0.37064: [0.0563, 0.7976].
    c = O.pointwise_pairwise_consistency(table(), _pairs(), "j")
    assert c.value == pytest.approx(1 / 3) and c.n == 3
    assert (c.ci_low, c.ci_high) == pytest.approx((0.0563, 0.7976), abs=1e-3)
    assert c.exclusions == {"tie_or_missing_verdict": 1, "response_not_scored": 1}


def test_analyze_pointwise_writes_every_key_and_skips_with_reasons():
    result = analyze_pointwise(table(), pairwise=_pairs(), reps=200)
    j = result["judges"]["j"]
    for key in (
        "score_agreement_human",
        "score_bias_human",
        "score_self_preference",
        "score_dbg",
        "score_verbosity",
        "score_distribution",
        "pointwise_pairwise_consistency",
    ):
        assert key in j, key
    assert set(j["score_agreement_human"]) == {"spearman", "kendall", "weighted_kappa", "mae"}
    assert j["score_self_preference"]["eo"]["value"] == pytest.approx(-1 / 3)
    assert "score_family_preference" in j["skipped"]
    g = result["judges"]["g"]
    assert "score_bias_human" not in g and "with a human score" in g["skipped"]["score_bias_human"]
    text = format_pointwise(result)
    assert "score_agreement_human.spearman" in text and "not computed" in text


def test_a_judge_on_two_scales_gets_no_pooled_distribution():
    df = table()
    other = (
        df[df["judge"] == "j"].head(3).assign(criterion="rubric", scale_max=5, score=3.0, score_argmax=3.0)
    )
    with pytest.raises(InsufficientData, match="more than one scale"):
        P.score_distribution(pd.concat([df, other], ignore_index=True), "j")


def test_a_judge_whose_every_judgment_was_excluded_says_so():
    df = table().assign(score=lambda d: d["score"].where(d["judge"] != "g"))
    with pytest.raises(InsufficientData, match="no scored row of judge 'g': all 3 judgment"):
        P.score_bias_human(df, "g")


def test_family_preference_on_scores_leaves_own_responses_out():
    # Judge j; generator f is its family (--family j=f). (s - h): family 2, 1 (mean 1.5); others (o)
    # 0, -1 (mean -0.5); j's own response is left out and counted. EO = 2.0; Welch SE
    # sqrt(0.5/2 + 0.5/2) = 0.70711 on df 2 (t 4.30265): 2.0 -+ 3.04243.
    rows = [("f", 7, 5), ("f", 6, 5), ("o", 5, 5), ("o", 4, 5), ("j", 9, 5)]
    df = validate_pointwise(
        pd.DataFrame(
            [
                dict(
                    item_id=f"i{k}",
                    prompt="q",
                    response=f"r{k}",
                    generator=g,
                    judge="j",
                    score=s,
                    scale_min=1,
                    scale_max=10,
                    human_scores=[h],
                )
                for k, (g, s, h) in enumerate(rows)
            ]
        )
    )[0]
    fam = O.score_family_preference_eo(df, "j", None, {"j": ["f"]})
    assert fam.value == pytest.approx(2.0) and fam.exclusions["own_response"] == 1
    assert (fam.ci_low, fam.ci_high) == pytest.approx((2.0 - 3.04243, 2.0 + 3.04243), abs=1e-4)


def test_analyze_command_on_a_pointwise_file_with_a_pairwise_table(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.tables.files import write_table

    scores, pairs, out = tmp_path / "scores.jsonl", tmp_path / "pairs.jsonl", tmp_path / "m.json"
    write_table(table(), scores)
    write_table(_pairs(), pairs)
    res = CliRunner().invoke(
        app,
        ["analyze", str(scores), "--out", str(out), "--pairwise", str(pairs), "--no-mlflow", "--reps", "200"],
    )
    assert res.exit_code == 0, res.output
    j = json.loads(out.read_text())["judges"]["j"]
    assert j["pointwise_pairwise_consistency"]["value"] == pytest.approx(1 / 3)
    assert j["score_bias_human"]["value"] == pytest.approx(-1 / 6)
    assert "pointwise_pairwise_consistency" in res.output


def test_analyze_refuses_pairwise_option_with_a_pairwise_file(tmp_path):
    # A pairwise FILE has no scores: --pairwise would be ignored, so the command says so and stops.
    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.tables.files import write_table

    pairs, out = tmp_path / "pairs.jsonl", tmp_path / "m.json"
    write_table(_pairs(), pairs)
    res = CliRunner().invoke(app, ["analyze", str(pairs), "--out", str(out), "--pairwise", str(pairs),
                                   "--no-mlflow", "--reps", "200"])
    assert res.exit_code == 2
    assert "is a pairwise table" in res.output and not out.exists()
