"""Verbosity, position, agreement, perplexity and regression metrics on hand-computed tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from judgebias.metrics import (
    agreement,
    choice_regression,
    cohen_kappa,
    human_verbosity,
    perplexity_excess,
    perplexity_familiarity,
    perplexity_own_other,
    perplexity_preference,
    position_bias,
    position_flip_rate,
    verbosity_bias,
)
from judgebias.metrics.frame import word_counts
from judgebias.stats import InsufficientData, bootstrap_mean, kappa, wilson
from judgebias.tables.pairwise import validate


def table(rows: list[dict]) -> pd.DataFrame:
    base = {"prompt": "q", "response_a": "x", "response_b": "y", "judge": "j"}
    df, _ = validate(pd.DataFrame([{**base, "pair_id": f"p{i}", **r} for i, r in enumerate(rows)]))
    return df


W1, W3 = "one", "one two three"


def test_verbosity_bias_saito_eq6_and_alignment_bins():
    df = table([
        dict(response_a=W3, response_b=W1, human=["a"], verdict="a"),  # human longer, judge right
        dict(response_a=W3, response_b=W1, human=["a"], verdict="b"),  # human longer, judge shorter
        dict(response_a=W1, response_b=W3, human=["a"], verdict="b"),  # human shorter, judge longer
        dict(response_a=W1, response_b=W3, human=["a"], verdict="a"),  # human shorter, judge right
        dict(response_a=W1, response_b=W3, human=["a"], verdict="b"),  # human shorter, judge longer
        dict(response_a=W1, response_b="two", human=["a"], verdict="a"),  # equal length
        dict(response_a=W3, response_b=W1, human=["tie"], verdict="a"),  # human tie
    ])
    est = verbosity_bias(df, "j")
    # P(judge longer | human shorter) = 2/3, P(judge shorter | human longer) = 1/2 -> 2/3 - 1/2 = 1/6
    assert est.value == pytest.approx(1 / 6)
    assert est.n == 5
    assert est.exclusions == {"equal_length": 1, "human_tie": 1}
    bins = {(b["low"], b["high"]): b for b in est.details["alignment_bins"]}
    # chosen 3 words vs rejected 1: +200% -> open last bin, 1 of 2 agree
    assert bins[(100.0, None)]["n"] == 2 and bins[(100.0, None)]["rate"] == pytest.approx(0.5)
    # chosen 1 vs rejected 3: -66.7% -> [-80, -60), 1 of 3 agree; equal length sits at 0%
    assert bins[(-80.0, -60.0)]["n"] == 3 and bins[(-80.0, -60.0)]["rate"] == pytest.approx(1 / 3)
    assert bins[(0.0, 20.0)]["n"] == 1 and bins[(0.0, 20.0)]["rate"] == 1.0
    assert len(est.details["alignment_bins"]) == 11  # 10 bins of 20% in [-100, 100) + [100, inf)


def test_human_verbosity_one_unit_per_pair():
    df = table([dict(response_a=W3, response_b=W1, human=["a"]),
                dict(response_a=W3, response_b=W1, human=["b"]),
                dict(response_a=W1, response_b=W3, human=["b"]),
                dict(response_a=W1, response_b=W1, human=["a"])])
    est = human_verbosity(df)
    assert est.value == pytest.approx(2 / 3) and est.exclusions == {"equal_length": 1}


def test_word_counts_match_str_split():
    texts = pd.Series(["  hello world", "", None, "a\tb\nc", "é ü", "x\x01y z"], dtype="str")
    assert word_counts(texts).tolist() == [2, 0, 0, 3, 2, 2]


def test_position_flip_rate_and_bias():
    df = table([
        dict(p_a_ab=0.8, p_a_ba=0.7),  # consistent A; P(first) = (.8 + .3) / 2 = .55
        dict(p_a_ab=0.8, p_a_ba=0.3),  # flip; (.8 + .7) / 2 = .75
        dict(p_a_ab=0.6, p_a_ba=0.5),  # tie in one order: inconsistent, not a flip; (.6 + .5) / 2 = .55
        dict(verdict_ab="b", verdict_ba="a"),  # flip; first shown lost in both orders -> 0
        dict(p_a_ab=0.9),  # one order missing
    ])
    flip = position_flip_rate(df, "j")
    assert flip.value == pytest.approx(2 / 4) and flip.n == 4
    assert flip.details["inconsistent"] == 3
    assert flip.exclusions == {"missing_order": 1}
    bias = position_bias(df, "j")
    assert bias.value == pytest.approx((0.55 + 0.75 + 0.55 + 0.0) / 4)
    assert bias.ci_low < bias.value < bias.ci_high


def test_agreement_and_kappa_with_humans():
    df = table([dict(verdict="a", human=["a"]), dict(verdict="b", human=["a"]),
                dict(verdict="tie", human=["tie"]), dict(verdict="b", human=["b"]),
                dict(verdict="a", human=[])])
    agr = agreement(df, "j")
    assert agr.value == pytest.approx(3 / 4) and agr.exclusions == {"no_human_label": 1}
    k = cohen_kappa(df, "j")
    # po = 3/4; marginals judge (a1, b2, tie1), human (a2, b1, tie1): pe = (2 + 2 + 1) / 16
    pe = 5 / 16
    assert k.value == pytest.approx((0.75 - pe) / (1 - pe))
    assert k.ci_low < k.value < k.ci_high


def test_agreement_with_gold_panel():
    rows = []
    for i, (j, g) in enumerate([("a", "a"), ("b", "a"), ("b", "b")]):
        rows.append(dict(pair_id=f"p{i}", judge="j", verdict=j))
        rows.append(dict(pair_id=f"p{i}", judge="g", verdict=g))
    base = {"prompt": "q", "response_a": "x", "response_b": "y"}
    df = validate(pd.DataFrame([{**base, **r} for r in rows]))[0]
    assert agreement(df, "j", "gold").value == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="reference"):
        agreement(df, "j", "oracle")


def test_perplexity_preference_and_excess_over_humans():
    e = math.e
    df = table([
        dict(ppl_a=2, ppl_b=4, verdict="a", human=["b"]),  # lower = A; judge lower, human not
        dict(ppl_a=4, ppl_b=2, verdict="a", human=["a"]),  # lower = B; neither picks it
        dict(ppl_a=1, ppl_b=e, verdict="a", human=["a"]),  # lower = A; both pick it
        dict(ppl_a=3, ppl_b=3, verdict="a", human=["a"]),  # equal perplexity
        dict(verdict="a", human=["a"]),  # no perplexity
    ])
    pref = perplexity_preference(df, "j")
    assert pref.value == pytest.approx(2 / 3) and pref.n == 3
    assert pref.exclusions == {"equal_perplexity": 1, "no_perplexity": 1}
    # humans pick the lower-perplexity response in row 2 only (equal-perplexity row 3 is out): 1/3
    assert pref.details["human_p_lower"]["value"] == pytest.approx(1 / 3)
    exc = perplexity_excess(df, "j")
    # d = judge_lower - human_lower: (1-0, 0-0, 1-1) -> mean 1/3
    assert exc.value == pytest.approx(1 / 3)


def test_perplexity_own_vs_other_and_familiarity():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(200):
        own = i % 2 == 0
        ppl_a = float(np.exp(rng.normal(1.5 if own else 2.0, 0.3)))
        ppl_b = float(np.exp(rng.normal(2.0, 0.3)))
        rows.append(dict(generator_a="j" if own else "o", generator_b="x", ppl_a=ppl_a, ppl_b=ppl_b,
                         verdict="a" if ppl_a < ppl_b else "b"))
    df = table(rows)
    fam = perplexity_familiarity(df, "j")
    la, lb = np.log(df["ppl_a"].to_numpy()), np.log(df["ppl_b"].to_numpy())
    own = df["generator_a"].eq("j").to_numpy()
    own_logs, other_logs = la[own], np.concatenate([la[~own], lb])
    ref = sps.ttest_ind(own_logs, other_logs, equal_var=False)
    assert fam.value == pytest.approx(own_logs.mean() - other_logs.mean())
    assert fam.p_value == pytest.approx(ref.pvalue) and fam.value < 0
    oo = perplexity_own_other(df, "j")
    assert oo.details["n_own"] == 100 and oo.details["n_other"] == 100
    assert sum(b["n"] for b in oo.details["own_bins"]) == 100


def test_regression_recovers_known_effects_and_skips_absent_terms():
    rng = np.random.default_rng(1)
    n = 3000
    human_a = rng.random(n) < 0.5
    own = rng.choice([-1, 0, 1], n)
    logit = -0.2 + 1.5 * (human_a * 2 - 1) + 0.8 * own
    picks_a = rng.random(n) < 1 / (1 + np.exp(-logit))
    df = table([dict(generator_a={1: "j"}.get(int(o), "o"), generator_b={-1: "j"}.get(int(o), "x"),
                     human=["a" if h else "b"], verdict="a" if p else "b")
                for h, o, p in zip(human_a, own, picks_a, strict=True)])
    est = choice_regression(df, "j")
    terms = est.details["terms"]
    assert est.details["used"] == ["human_a", "self_origin"]  # equal word counts: constant
    assert "log_ppl_diff" in est.details["skipped_terms"]
    assert terms["self_origin"]["ci_low"] < 0.8 < terms["self_origin"]["ci_high"]
    # human_a is coded +1 / -1 like the simulation, so every coefficient is recovered as simulated
    assert terms["human_a"]["ci_low"] < 1.5 < terms["human_a"]["ci_high"]
    assert terms["intercept"]["coef"] == pytest.approx(-0.2, abs=0.15)
    assert terms["self_origin"]["p_value"] < 1e-6
    assert 0 < est.value < 1
    # The Wald inference is computed without statsmodels' refit: it must be statsmodels' own (same
    # design: intercept, human +1/-1, own +1/0/-1; no tie, so every row is used).
    import statsmodels.api as sm

    X = np.column_stack([np.ones(n), human_a * 2.0 - 1, own.astype(float)])
    ref = sm.Logit(picks_a.astype(float), X).fit(disp=0)
    ci = ref.conf_int(alpha=0.05)
    for i, name in enumerate(["intercept", "human_a", "self_origin"]):
        assert terms[name]["coef"] == pytest.approx(ref.params[i], rel=1e-9)
        assert terms[name]["ci_low"] == pytest.approx(ci[i, 0], rel=1e-9)
        assert terms[name]["ci_high"] == pytest.approx(ci[i, 1], rel=1e-9)
        assert terms[name]["p_value"] == pytest.approx(ref.pvalues[i], rel=1e-6)
    assert est.value == pytest.approx(ref.prsquared, rel=1e-9)


def test_regression_separates_same_family_from_exact_self():
    # j favours its own responses (+0.8) and is harder on its base model f's (-0.6): one merged
    # "own" term would blur the two; with a family map each gets its own coefficient.
    rng = np.random.default_rng(2)
    n = 4000
    human_a = rng.random(n) < 0.5
    origin = rng.choice(["j", "f", "o"], size=(n, 2))
    own = (origin[:, 0] == "j").astype(float) - (origin[:, 1] == "j")
    fam = (origin[:, 0] == "f").astype(float) - (origin[:, 1] == "f")
    logit = 0.1 + 1.2 * (human_a * 2 - 1) + 0.8 * own - 0.6 * fam
    picks_a = rng.random(n) < 1 / (1 + np.exp(-logit))
    df = table([dict(generator_a=a, generator_b=b, human=["a" if h else "b"], verdict="a" if p else "b")
                for (a, b), h, p in zip(origin, human_a, picks_a, strict=True)])
    terms = choice_regression(df, "j", family_map={"j": ["f"]}).details["terms"]
    assert terms["self_origin"]["ci_low"] < 0.8 < terms["self_origin"]["ci_high"]
    assert terms["family_origin"]["ci_low"] < -0.6 < terms["family_origin"]["ci_high"]
    assert terms["family_origin"]["ci_high"] < 0 < terms["self_origin"]["ci_low"]
    # A family given as one name, not a list, is that name (not its characters).
    base = df.assign(generator_a=df["generator_a"].replace("f", "base"),
                     generator_b=df["generator_b"].replace("f", "base"))
    one = choice_regression(base, "j", family_map={"j": "base"}).details["terms"]["family_origin"]
    assert one["coef"] == pytest.approx(terms["family_origin"]["coef"])
    # Without the map, f is an outside generator and no family term is fitted.
    assert "family_origin" not in choice_regression(df, "j").details["terms"]


def test_regression_newton_from_a_subsample_reaches_statsmodels_estimate():
    # Past _WARM_START_ROWS the Newton fit starts from a subsample's: the same maximum, to 1e-9.
    import statsmodels.api as sm

    from judgebias.metrics.regression import _WARM_START_ROWS, _newton

    rng = np.random.default_rng(3)
    n = _WARM_START_ROWS + 1000
    X = np.column_stack([np.ones(n), rng.normal(size=n), rng.normal(size=n)])
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.array([0.3, -1.0, 0.5]))))).astype(float)
    beta, converged = _newton(X, y)
    assert converged
    np.testing.assert_allclose(beta, sm.Logit(y, X).fit(disp=0).params, rtol=1e-9)


def test_regression_perfect_separation_is_a_note_not_a_crash():
    rows = [dict(generator_a="o", generator_b="x", human=[h], verdict=h, response_a="a " * (i % 7 + 1))
            for i, h in enumerate(["a", "b"] * 30)]
    est = choice_regression(table(rows), "j")
    assert "separation" in est.details["note"]


def test_stats_helpers():
    p, lo, hi = wilson(8, 10)
    # Wilson's lower bound; the upper is Brown-Cai-DasGupta's (2 failures of 10): 1 - chi2_4(0.05) / 20
    # = 1 - 0.7107 / 20 = 0.9645 (plain Wilson's 0.9433 under-covers p = 0.95; tests/test_interval_fixes.py)
    assert p == 0.8 and lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9645, abs=1e-4)
    values = np.r_[np.ones(30), np.zeros(70)]
    lo, hi, means = bootstrap_mean(values, reps=500, seed=0)
    assert lo < 0.3 < hi and means.size == 500
    lo2, hi2, _ = bootstrap_mean(values + np.arange(100) * 1e-9, reps=500, seed=0)  # chunked path
    assert abs(lo2 - lo) < 0.05 and abs(hi2 - hi) < 0.05
    assert math.isnan(kappa(np.array([[5, 0, 0], [0, 0, 0], [0, 0, 0]]))["value"])
    # One rated unit: not enough data, never "0 [0, 0]" (fault found by feeding analyze one row).
    with pytest.raises(InsufficientData, match="at least 2 rated units, got 1"):
        kappa(np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]]))
    with pytest.raises(InsufficientData):
        bootstrap_mean(np.array([]))


def test_precision_cost_compares_both_orders_of_the_shared_pairs():
    from judgebias.metrics import precision_cost

    run = pd.DataFrame({"pair_id": ["p1", "p2", "p3"], "p_a_ab": [0.60, 0.48, 0.9],
                        "p_a_ba": [0.30, float("nan"), 0.1], "verdict_ab": ["a", "b", "a"],
                        "verdict_ba": ["b", "b", "b"]})
    ref = pd.DataFrame({"pair_id": ["p1", "p2"], "p_a_ab": [0.62, 0.51], "p_a_ba": [0.30, 0.40],
                        "verdict_ab": ["a", "a"], "verdict_ba": ["b", "b"]})
    cost = precision_cost(run, ref)
    # Shared pairs p1, p2 (p3 has no reference). |dP(A)|: p1 ab 0.02, p1 ba 0.00, p2 ab 0.03; p2 ba is
    # NaN in the run and not compared -> 3 judgments, max 0.03, mean 0.05 / 3. Verdicts: p2 ab b -> a.
    assert cost["pairs"] == 2 and cost["judgments"] == 3
    assert cost["max_abs_dp_a"] == pytest.approx(0.03)
    assert cost["mean_abs_dp_a"] == pytest.approx(0.05 / 3)
    assert cost["verdicts_changed"] == 1
    with pytest.raises(ValueError, match="reference table lacks"):
        precision_cost(run, ref.drop(columns="verdict_ba"))
    with pytest.raises(ValueError, match="no pair_id in both"):
        precision_cost(run, ref.assign(pair_id=["x", "y"]))
