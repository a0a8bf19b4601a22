"""Every pairwise figure on nested tables (pairs sharing prompts), computed by hand or checked
against an independent computation, and on singleton clusters (``--cluster-by none``) equal to the
independent-units method it had before."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from judgebias.metrics import frame as F
from judgebias.metrics.agreement import agreement, agreement_two_class, cohen_kappa, tie_rate
from judgebias.metrics.ceiling import human_ceiling
from judgebias.metrics.dbg import dbg_score
from judgebias.metrics.perplexity import (
    perplexity_excess,
    perplexity_familiarity,
    perplexity_own_other,
    perplexity_preference,
)
from judgebias.metrics.position import position_bias, position_consistency, position_flip_rate
from judgebias.metrics.regression import choice_regression
from judgebias.metrics.self_preference import self_preference_score
from judgebias.metrics.verbosity import verbosity_bias
from judgebias.stats import (
    Clusters,
    bootstrap_mean,
    cluster_bootstrap_means,
    clustered_mean_t,
    clustered_variance,
    diff_proportions,
    kappa,
    kappa_influence,
    mean_influence,
    mean_t,
    paired_diff_proportions,
    proportion_interval,
)

Z, T3 = sps.norm.ppf(0.975), sps.t.ppf(0.975, 3)
# The share pattern of the nested table: prompts q0..q3, two pairs each, hits 1 1 | 1 1 | 0 0 | 1 0.
# p = 5/8; influence (y - 5/8) / 8 = 3/64 (hit), -5/64 (miss); prompt totals 6, 6, -10, -2 (/64);
# CR1 4/3 * (36 + 36 + 100 + 4) / 4096 = 4/3 * 176/4096; independent 8/7 * (5 * 9 + 3 * 25) / 4096
# = 8/7 * 120/4096; design effect (4/3 * 176) / (8/7 * 120) = 1.711111.
PATTERN = [1, 1, 1, 1, 0, 0, 1, 0]
DEFF = (4 / 3 * 176) / (8 / 7 * 120)


def nested(**columns) -> pd.DataFrame:
    """Judge 'j', 8 pairs in prompts q0..q3 (two each); ``columns``: per-row lists or constants."""
    base = {"pair_id": [f"p{i}" for i in range(8)], "prompt": [f"q{i // 2}" for i in range(8)],
            "response_a": "one two three", "response_b": "one", "judge": "j",
            "generator_a": "x", "generator_b": "y", "human": [["a"]] * 8, "verdict": "a"}
    base.update(columns)
    return pd.DataFrame({k: v if isinstance(v, list) else [v] * 8 for k, v in base.items()})


def flat(df: pd.DataFrame) -> pd.DataFrame:
    return F.prepare(df, cluster_by="none")


def share_at_effective_size(k: int, n: int, deff: float, t: float = T3) -> tuple[float, float]:
    m = n / deff * (Z / t) ** 2
    _, lo, hi = proportion_interval(k / n * m, m)
    return lo, hi


def test_agreement_and_tie_rate_by_hand():
    df = nested(verdict=["a" if h else "b" for h in PATTERN])
    est = agreement(df, "j")
    assert est.value == 5 / 8 and est.clusters == 4 and est.cluster_by == "prompt"
    assert est.design_effect == pytest.approx(DEFF)
    assert (est.ci_low, est.ci_high) == pytest.approx(share_at_effective_size(5, 8, DEFF))
    assert "effective size" in est.method and "4 clusters (prompt)" in est.method
    assert any("only 4 clusters" in w for w in est.warnings)
    old = agreement(flat(df), "j")
    assert (old.ci_low, old.ci_high) == proportion_interval(5, 8)[1:]
    assert old.method == "percent agreement over a/b/tie; Agresti-Coull interval"
    assert (old.clusters, old.design_effect, old.warnings) == (8, 1.0, ())
    two = agreement_two_class(df, "j")
    assert (two.value, two.design_effect) == (5 / 8, pytest.approx(DEFF))
    ties = tie_rate(nested(verdict=["tie" if h else "a" for h in PATTERN]), "j")
    assert ties.value == 5 / 8 and ties.design_effect == pytest.approx(DEFF)
    assert (ties.ci_low, ties.ci_high) == pytest.approx(share_at_effective_size(5, 8, DEFF))


def _weighted_kappa(x, y, w, k=3):
    table = np.zeros((k, k))
    np.add.at(table, (x, y), w)
    n = table.sum()
    po, pe = np.trace(table) / n, (table.sum(0) * table.sum(1)).sum() / n**2
    return (po - pe) / (1 - pe)


def test_kappa_influence_is_the_derivative_and_clustered_interval():
    judge = np.array([0, 0, 1, 1, 0, 2, 1, 0])
    human = np.array([0, 0, 1, 0, 1, 2, 1, 1])
    psi = kappa_influence(judge, human, 3)
    base = _weighted_kappa(judge, human, np.ones(8))
    # the influence value of unit i is d kappa / d w_i at equal weights (finite difference)
    for i in range(8):
        w = np.ones(8)
        w[i] += 1e-6
        assert psi[i] == pytest.approx((_weighted_kappa(judge, human, w) - base) / 1e-6, abs=1e-5)
    codes = np.array(["a", "b", "tie"])
    df = nested(verdict=list(codes[judge]), human=[[c] for c in codes[human]])
    est, old = cohen_kappa(df, "j"), cohen_kappa(flat(df), "j")
    k = kappa(np.bincount(judge * 3 + human, minlength=9).reshape(3, 3))
    assert (old.value, old.ci_low, old.ci_high, old.p_value) == (k["value"], k["ci_low"], k["ci_high"],
                                                                 k["p_value"])
    v = clustered_variance(psi, Clusters(np.repeat(np.arange(4), 2), "prompt"))
    assert est.value == pytest.approx(k["value"]) and est.design_effect == pytest.approx(v.design_effect)
    assert est.p_value == pytest.approx(2 * sps.t.sf(abs(k["value"] / v.se), 3))
    assert "design effect" in est.method and old.method.endswith("z-test of 0")


def test_position_bias_by_hand_and_flip_rate():
    # first shown wins: verdicts a / b in the two orders -> 1 (both times), a / a -> 1/2
    ab, ba = "a", ["b" if h else "a" for h in PATTERN]
    df = nested(verdict_ab=ab, verdict_ba=ba)
    est = position_bias(df, "j")
    # values 1 1 | 1 1 | .5 .5 | 1 .5, mean 6.5/8 = 0.8125; influence (y - 0.8125) / 8 = 3/128, -5/128;
    # prompt totals 6, 6, -10, -2 (/128); CR1 4/3 * 176 / 16384 = 0.0143229 (se 0.119679); deff as above;
    # t(3) 3.182446 -> 0.8125 +- 0.380872, the top clipped to 1
    assert est.value == pytest.approx(0.8125) and est.design_effect == pytest.approx(DEFF)
    assert est.ci_low == pytest.approx(0.8125 - T3 * math.sqrt(4 / 3 * 176 / 16384)) and est.ci_high == 1.0
    assert est.p_value == pytest.approx(2 * sps.t.sf(0.3125 / math.sqrt(4 / 3 * 176 / 16384), 3))
    old = position_bias(flat(df), "j")
    ref = mean_t(np.array([1, 1, 1, 1, .5, .5, 1, .5]), null=0.5, bounds=(0, 1))
    assert (old.ci_low, old.ci_high, old.p_value) == (ref["ci_low"], ref["ci_high"], ref["p_value"])
    assert old.method == "mean P(first shown wins); t interval clipped to [0, 1], t-test of 0.5"
    # a flip where the first-shown won twice: the flip pattern is PATTERN
    flips = position_flip_rate(df, "j")
    assert flips.value == 5 / 8 and flips.design_effect == pytest.approx(DEFF)
    assert (flips.ci_low, flips.ci_high) == pytest.approx(share_at_effective_size(5, 8, DEFF))
    cons = position_consistency(df, "j")
    assert cons.value == 3 / 8 and cons.design_effect == pytest.approx(DEFF)  # 1 - the same pattern
    assert cons.details["preference_fairness"]["clusters"] == 4
    assert position_consistency(flat(df), "j").details["preference_fairness"]["design_effect"] == 1.0


def test_self_preference_score_and_human_ceiling_means():
    p = [0.9, 0.7, 0.8, 0.6, 0.2, 0.4, 0.5, 0.3]
    df = nested(generator_a="j", p_a=p)
    est = self_preference_score(df, "j", {"j": {"j"}})
    scores = 2 * np.array(p) - 1
    ref = clustered_mean_t(scores, Clusters(np.repeat(np.arange(4), 2), "prompt"), bounds=(-1, 1))
    assert (est.value, est.ci_low, est.ci_high, est.p_value) == pytest.approx(
        (ref["value"], ref["ci_low"], ref["ci_high"], ref["p_value"]))
    # by hand: scores .8 .4 | .6 .2 | -.6 -.2 | 0 -.4, mean 0.1; prompt totals of (y - .1)/8:
    # 1.0/8, 0.6/8, -1.0/8, -0.6/8; CR1 4/3 * (1 + .36 + 1 + .36) / 64 = 0.056667
    assert est.design_effect == pytest.approx(
        (4 / 3 * 2.72 / 64) / (8 / 7 * float(np.sum((scores - 0.1) ** 2)) / 64))
    old = self_preference_score(flat(df), "j", {"j": {"j"}})
    assert old.method == "mean(score_own - score_other); t interval clipped to [-1, 1], one-sample t-test"
    # ceiling: three labels per pair
    labels = [["a", "a", "b"], ["a", "a", "a"], ["b", "b", "a"], ["a", "b", "b"]] * 2
    ceil = human_ceiling(nested(human=labels), "j")
    assert ceil.clusters == 4 and ceil.details["gap"]["clusters"] == 4
    assert human_ceiling(flat(nested(human=labels)), "j").method.endswith("t interval clipped to [0, 1]")


def test_verbosity_bias_nested_and_singleton():
    # response A is always the longer; humans pick A on pairs 0-3 (longer), B on 4-7 (shorter)
    human = [["a"]] * 4 + [["b"]] * 4
    verdict = ["a", "b", "a", "a", "a", "a", "b", "a"]
    df = nested(human=human, verdict=verdict)
    est, old = verbosity_bias(df, "j"), verbosity_bias(flat(df), "j")
    # P(longer | human shorter) = 3/4 (pairs 4, 5, 7), P(shorter | human longer) = 1/4 (pair 1)
    assert est.value == old.value == pytest.approx(0.5)
    assert {k: getattr(old, k) for k in ("ci_low", "ci_high", "statistic", "p_value")} == \
        {k: v for k, v in diff_proportions(3, 4, 1, 4).items() if k != "value"}
    # nested: prompts q0, q1 are all-longer (human), q2, q3 all-shorter: the two groups' clusters differ
    assert est.clusters == 4 and est.design_effect > 0 and "CR1" in est.method
    assert est.details["p_longer_when_human_chose_shorter"]["clusters"] == 2


def test_dbg_cluster_bootstrap_and_t_test():
    p = [0.9, 0.8, 0.7, 0.6, 0.4, 0.2, 0.9, 0.1]
    rows = nested(generator_a="j", p_a=p, human=[["b"]] * 8)
    est = dbg_score(rows, "j", {"j": {"j"}}, human_as_gold=True, reps=500, seed=4)
    d = np.array([1, 1, 1, 1, 0, 0, 1, 0], dtype=float)  # judge's win minus the humans' (they never pick j)
    codes = Clusters(np.repeat(np.arange(4), 2), "prompt")
    lo, hi, _ = cluster_bootstrap_means(d, codes, reps=500, seed=4)
    assert (est.value, est.ci_low, est.ci_high) == (5 / 8, lo, hi)
    assert est.p_value == pytest.approx(clustered_mean_t(d, codes)["p_value"])
    assert est.design_effect == pytest.approx(DEFF) and "cluster bootstrap" in est.method
    old = dbg_score(flat(rows), "j", {"j": {"j"}}, human_as_gold=True, reps=500, seed=4)
    assert (old.ci_low, old.ci_high) == bootstrap_mean(d, reps=500, seed=4)[:2]
    assert old.method.endswith("sign test")


def test_perplexity_figures_nested():
    ppl_a = [2.0, 2.0, 2.0, 2.0, 9.0, 9.0, 2.0, 9.0]  # A has the lower perplexity where PATTERN is 1
    df = nested(ppl_a=ppl_a, ppl_b=4.0, human=[["a"], ["b"]] * 4)
    pref = perplexity_preference(df, "j")  # the judge always picks A
    assert pref.value == 5 / 8 and pref.design_effect == pytest.approx(DEFF)
    assert pref.p_value == pytest.approx(2 * sps.t.sf(
        (5 / 8 - 0.5) / math.sqrt(4 / 3 * 176 / 4096), 3))
    old = perplexity_preference(flat(df), "j")
    assert old.method.endswith("exact binomial test") and old.statistic == 5.0
    ex, ex_old = perplexity_excess(df, "j"), perplexity_excess(flat(df), "j")
    j = np.array(PATTERN, dtype=bool)
    h = np.array([ppl < 4 for ppl in ppl_a]) == np.array([True, False] * 4)
    counts = [int((j & h).sum()), int((j & ~h).sum()), int((~j & h).sum()), int((~j & ~h).sum())]
    assert ex_old.ci_low == paired_diff_proportions(*counts)["ci_low"]
    codes = Clusters(np.repeat(np.arange(4), 2), "prompt")
    assert ex.p_value == pytest.approx(clustered_mean_t(j.astype(float) - h, codes)["p_value"])
    assert ex.design_effect == pytest.approx(
        clustered_variance(mean_influence(j.astype(float) - h), codes).design_effect)


def test_perplexity_familiarity_against_statsmodels_cluster_ols():
    import statsmodels.api as sm

    ppl_a = [2.0, 3.0, 2.5, 4.0, 1.5, 2.0, 3.5, 2.2]
    ppl_b = [5.0, 4.0, 6.0, 4.5, 3.0, 7.0, 3.8, 2.9]
    df = nested(generator_a="j", ppl_a=ppl_a, ppl_b=ppl_b)
    est = perplexity_familiarity(df, "j", {"j": {"j"}})
    logs = np.log(np.r_[ppl_a, ppl_b])
    own = np.r_[np.ones(8), np.zeros(8)]
    groups = np.r_[np.repeat(np.arange(4), 2), np.repeat(np.arange(4), 2)]
    fit = sm.OLS(logs, sm.add_constant(own)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    # statsmodels' CR1 adds (N - 1) / (N - K) = 15/14 to G / (G - 1); the figure's has only the latter
    se = float(fit.bse[1]) / math.sqrt(15 / 14)
    assert est.value == pytest.approx(float(fit.params[1]))
    assert est.ci_high - est.value == pytest.approx(T3 * se)
    # with --cluster-by none the rows are singletons: Welch on the responses, as before
    assert perplexity_familiarity(flat(df), "j", {"j": {"j"}}).method.endswith("Welch interval and t-test")


def _log_mh(w1, n1, w0, n0):
    a, b, c, d = w1, n1 - w1, w0, n0 - w0
    n = n1 + n0
    return math.log(np.sum(a * d / n) / np.sum(b * c / n))


def test_perplexity_own_other_clustered_mh():
    # 16 pairs in 4 prompts: pairs 0-7 own (j as A), 8-15 without j; two perplexity strata
    rows = []
    wins = [1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0]
    for i in range(16):
        rows.append({"pair_id": f"p{i}", "prompt": f"q{i % 4}", "response_a": "x", "response_b": "y",
                     "judge": "j", "generator_a": "j" if i < 8 else "u", "generator_b": "v",
                     "verdict": "a" if wins[i] else "b", "ppl_a": 2.0 if i % 2 else 1.0, "ppl_b": 1.0})
    df = pd.DataFrame(rows)
    est = perplexity_own_other(df, "j", {"j": {"j"}})
    from statsmodels.stats.contingency_tables import StratifiedTable

    assert est.clusters == 4
    # the value is the Mantel-Haenszel OR itself; the interval's influence values are the derivative of
    # log OR in each unit's weight (finite differences over the strata's weighted counts)
    stratum = np.array([i % 2 for i in range(16)])
    own = np.arange(16) < 8
    win = np.array(wins, dtype=bool)

    def log_or(w):
        w1 = np.bincount(stratum[own], weights=(w * win)[own], minlength=2)
        n1 = np.bincount(stratum[own], weights=w[own], minlength=2)
        w0 = np.bincount(stratum[~own], weights=(w * win)[~own], minlength=2)
        n0 = np.bincount(stratum[~own], weights=w[~own], minlength=2)
        return _log_mh(w1, n1, w0, n0)

    psi = np.array([(log_or(np.ones(16) + 1e-7 * (np.arange(16) == i)) - log_or(np.ones(16))) / 1e-7
                    for i in range(16)])
    v = clustered_variance(psi, Clusters(np.arange(16) % 4, "prompt"))
    assert math.log(est.value) == pytest.approx(log_or(np.ones(16)))
    assert math.log(est.ci_high) - math.log(est.value) == pytest.approx(T3 * v.se, rel=1e-5)
    assert est.design_effect == pytest.approx(v.design_effect, rel=1e-5)
    old = perplexity_own_other(flat(df), "j", {"j": {"j"}})
    tables = np.array([[[win[own & (stratum == k)].sum(), (~win)[own & (stratum == k)].sum()],
                        [win[~own & (stratum == k)].sum(), (~win)[~own & (stratum == k)].sum()]]
                       for k in (0, 1)], dtype=float).transpose(1, 2, 0)
    assert (old.ci_low, old.ci_high) == pytest.approx(StratifiedTable(tables).oddsratio_pooled_confint())


def test_regression_cluster_sandwich_against_statsmodels():
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    n, prompts = 240, 30
    q = np.repeat(np.arange(prompts), n // prompts)
    effect = rng.normal(0, 1.5, prompts)[q]  # a shared prompt effect: the rows of a prompt correlate
    words_a = rng.integers(5, 60, n)
    own_a = rng.random(n) < 0.5
    p = 1 / (1 + np.exp(-(0.5 * own_a - 0.5 * ~own_a + 0.02 * (words_a - 30) + effect)))
    picks_a = rng.random(n) < p
    df = pd.DataFrame({"pair_id": [f"p{i}" for i in range(n)], "prompt": [f"q{i}" for i in q],
                       "response_a": [" ".join(["w"] * k) for k in words_a], "response_b": "w " * 30,
                       "judge": "j", "generator_a": np.where(own_a, "j", "x"),
                       "generator_b": np.where(own_a, "x", "j"),
                       "verdict": np.where(picks_a, "a", "b"), "human": [["a"]] * n})
    est = choice_regression(df, "j", {"j": {"j"}})
    terms = est.details["terms"]
    used = est.details["used"]
    X = np.column_stack([np.ones(n)] + [
        {"self_origin": own_a * 2.0 - 1, "word_diff": None}[u] if u == "self_origin" else
        ((words_a - 30) - (words_a - 30).mean()) / (words_a - 30).std() for u in used])
    fit = sm.Logit(picks_a.astype(float), X).fit(disp=0, cov_type="cluster", cov_kwds={"groups": q},
                                                use_t=True)
    for i, name in enumerate(["intercept", *used]):
        assert terms[name]["coef"] == pytest.approx(float(fit.params[i]), rel=1e-6)
        half = (terms[name]["ci_high"] - terms[name]["ci_low"]) / 2
        assert half == pytest.approx(float(fit.bse[i]) * sps.t.ppf(0.975, prompts - 1), rel=1e-6)
        assert terms[name]["p_value"] == pytest.approx(float(fit.pvalues[i]), rel=1e-6)
    assert est.clusters == prompts and "CR1 sandwich" in est.method
    assert est.design_effect == max(t["design_effect"] for t in terms.values())
    old = choice_regression(flat(df), "j", {"j": {"j"}})
    assert old.method == "Logit of judge picks A; Wald intervals; value = McFadden pseudo-R2"
    assert "design_effect" not in old.details["terms"]["self_origin"]


def test_length_controlled_win_rate_cluster_sandwich_against_statsmodels():
    import statsmodels.api as sm

    from judgebias.metrics.win_rate import length_controlled_win_rate

    rng = np.random.default_rng(3)
    n, prompts = 60, 12
    q = np.repeat(np.arange(prompts), n // prompts)
    chars = rng.integers(20, 200, n)
    vote = np.clip(0.5 + 0.002 * (chars - 100) + rng.normal(0, 0.3, prompts)[q], 0.02, 0.98)
    df = pd.DataFrame({"pair_id": [f"p{i}" for i in range(n)], "prompt": [f"q{i}" for i in q],
                       "response_a": ["x" * k for k in chars], "response_b": "x" * 100, "judge": "j",
                       "generator_a": "m", "generator_b": "base", "p_a": vote})
    est = length_controlled_win_rate(df, "j", "m", "base")
    delta = chars - 100.0
    X = np.column_stack([np.ones(n), np.tanh(delta / delta.std(ddof=1))])
    fit = sm.GLM(vote, X, family=sm.families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": q})
    # statsmodels' CR1 carries (N - 1) / (N - K) = 59/58 besides G / (G - 1); the figure's has only the latter
    se = float(fit.bse[0]) / math.sqrt(59 / 58)
    theta = float(fit.params[0])
    t11 = sps.t.ppf(0.975, prompts - 1)
    assert est.ci_high == pytest.approx(1 / (1 + math.exp(-(theta + t11 * se))), rel=1e-6)
    assert est.clusters == prompts and "CR1" in est.method and any("12 clusters" in w for w in est.warnings)
    assert est.details["raw_win_rate"]["clusters"] == prompts
    old = length_controlled_win_rate(flat(df), "j", "m", "base")
    assert "HC3 errors, t on n - 2 df" in old.method and old.design_effect == 1.0


def test_probes_cluster_by_the_prompt_column():
    from judgebias.metrics.recognition import self_recognition
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate

    after = ["a" if h else "b" for h in PATTERN]
    probe = pd.DataFrame({"judge": "j", "pair_id": [f"p{i}" for i in range(8)], "perturbation": "authority",
                          "perturbed_side": "b", "verdict_before": "a", "verdict_after": after,
                          "prompt": [f"q{i // 2}" for i in range(8)]})
    rate = robustness_rate(probe, "j", "authority")
    assert rate.value == 5 / 8 and rate.clusters == 4 and rate.design_effect == pytest.approx(DEFF)
    assert (rate.ci_low, rate.ci_high) == pytest.approx(share_at_effective_size(5, 8, DEFF))
    alone = robustness_rate(probe.drop(columns="prompt"), "j", "authority")
    assert (alone.ci_low, alone.ci_high) == proportion_interval(5, 8)[1:]
    assert alone.method == "share of unchanged verdicts; Agresti-Coull interval"
    shift = perturbation_shift(probe, "j", "authority")  # vote for b: 0 -> 0 (unchanged) or 1
    assert shift.value == 3 / 8 and shift.design_effect == pytest.approx(DEFF)
    recog = pd.DataFrame({"pair_id": [f"p{i}" for i in range(8)], "judge": "j", "generator_a": "j",
                          "generator_b": "x", "p_a": [0.9 if h else 0.2 for h in PATTERN],
                          "prompt": [f"q{i // 2}" for i in range(8)]})
    est = self_recognition(recog, "j", {"j": {"j"}})
    assert est.value == 5 / 8 and est.design_effect == pytest.approx(DEFF) and "CR1" in est.method
    assert est.details["mean_confidence"]["n"] == 8


def test_analyze_records_cluster_by_and_prints_clusters(capsys):
    from judgebias.reporting.analysis import analyze
    from judgebias.reporting.console_table import format_report
    from judgebias.reporting.report_card import render_markdown

    df = nested(verdict=["a" if h else "b" for h in PATTERN])
    result = analyze(df)
    assert result["settings"]["cluster_by"] == "prompt" and result["dataset"]["clusters"] == 4
    assert result["humans"]["verbosity"]["clusters"] == 4  # humans always pick the longer A
    from judgebias.tracking.log_analysis import analysis_params

    assert analysis_params(result)["cluster_by"] == "prompt"
    fig = result["judges"]["j"]["agreement_human"]
    assert (fig["clusters"], fig["cluster_by"]) == (4, "prompt")
    assert fig["design_effect"] == pytest.approx(DEFF)
    text = format_report(result)
    assert "n=8 in 4 prompts, deff 1.71, few clusters;" in text
    assert "pairs nest in 4 prompts" in text
    page = render_markdown(result, title="t")
    assert "8 in 4 prompts, deff 1.71, few clusters" in page
    flat_result = analyze(df, cluster_by="none")
    assert flat_result["settings"]["cluster_by"] == "none"
    assert "deff" not in format_report(flat_result)
    assert flat_result["judges"]["j"]["agreement_human"]["ci_low"] == proportion_interval(5, 8)[1]
    with pytest.raises(ValueError, match="no column 'story'"):
        analyze(df, cluster_by="story")


def test_cli_cluster_by(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    table = tmp_path / "t.jsonl"
    nested(verdict=["a" if h else "b" for h in PATTERN]).to_json(table, orient="records", lines=True)
    runner = CliRunner()
    bad = runner.invoke(app, ["analyze", str(table), "--out", str(tmp_path / "m.json"), "--no-mlflow",
                              "--no-report", "--cluster-by", "story"])
    assert bad.exit_code == 2 and "no column 'story' to cluster by" in bad.output
    ok = runner.invoke(app, ["analyze", str(table), "--out", str(tmp_path / "m.json"), "--no-mlflow",
                             "--no-report", "--cluster-by", "none"])
    assert ok.exit_code == 0, ok.output
    import json

    assert json.loads((tmp_path / "m.json").read_text())["settings"]["cluster_by"] == "none"


def test_leaderboard_resamples_the_cluster_column():
    from judgebias.metrics.leaderboard import fit_leaderboard

    rows = []
    for k in range(12):  # 12 prompts (topics of 3), a-b and b-c on each
        for a, b, y in (("a", "b", 1.0 if k % 3 else 0.0), ("b", "c", 1.0 if k % 4 else 0.0)):
            rows.append({"pair_id": f"{a}{b}{k}", "prompt": f"q{k}", "topic": f"t{k // 3}",
                         "response_a": "x", "response_b": "y", "generator_a": a, "generator_b": b,
                         "judge": "j", "verdict": "a" if y else "b", "human": []})
    df = pd.DataFrame(rows)
    by_prompt = fit_leaderboard(df, reps=40, seed=1)
    by_topic = fit_leaderboard(df, reps=40, seed=1, cluster_by="topic")
    alone = fit_leaderboard(df, reps=40, seed=1, cluster_by="none")
    assert (by_prompt.cluster_by, by_prompt.clusters) == ("prompt", 12)
    assert (by_topic.cluster_by, by_topic.clusters) == ("topic", 4)
    assert (alone.cluster_by, alone.clusters) == ("none", 24)
    assert by_prompt.fits["raw"]["j"].n == by_topic.fits["raw"]["j"].n == 24
    with pytest.raises(ValueError, match="no column 'story'"):
        fit_leaderboard(df, reps=40, cluster_by="story")


def test_cluster_text_compact_forms():
    from judgebias.reporting.cluster_text import cluster_text, n_text

    assert n_text({"n": 744, "clusters": 80, "cluster_by": "prompt", "design_effect": 1.6}) == \
        "744 in 80 prompts, deff 1.60"
    assert n_text({"n": 40, "clusters": 12, "cluster_by": "story_id", "design_effect": 2.0}) == \
        "40 in 12 clusters of story_id, deff 2.00, few clusters"
    assert cluster_text({"n": 5, "clusters": 1, "cluster_by": "prompt", "design_effect": 1.0}) == \
        "in 1 prompt, treated as independent"
    # every unit its own cluster, or clustering turned off: n alone
    assert n_text({"n": 8, "clusters": 8, "cluster_by": "prompt", "design_effect": 1.0}) == "8"
    assert n_text({"n": 8, "clusters": 8, "cluster_by": "none", "design_effect": 1.0}) == "8"
    assert n_text({"n": 8}) == "8"
