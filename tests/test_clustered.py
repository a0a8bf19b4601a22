"""Clustered inference (judgebias.stats, metrics.frame.cluster_codes): hand-computed nested tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import frame as F
from judgebias.metrics.self_preference import self_preference_dp, self_preference_eo
from judgebias.stats import (
    Clusters,
    InsufficientData,
    bootstrap_mean,
    cluster_bootstrap_means,
    clustered_diff_proportions,
    clustered_mean_t,
    clustered_proportion,
    clustered_variance,
    diff_proportions,
    effective_size,
    mean_influence,
    mean_t,
    proportion_interval,
)


def test_clustered_variance_by_hand():
    # values 1, 1, 0, 0 in clusters {0, 0, 1, 1}: mean 1/2, influence (y - 1/2) / 4 = +-1/8;
    # cluster totals +1/4, -1/4; CR1: 2 / (2 - 1) * (1/16 + 1/16) = 1/4 -> se 1/2;
    # independent: 4 / 3 * 4 * (1/64) = 1/12; design effect (1/4) / (1/12) = 3.
    v = clustered_variance(mean_influence(np.array([1, 1, 0, 0])), Clusters(np.array([0, 0, 1, 1]), "prompt"))
    assert v.se == pytest.approx(0.5)
    assert v.se_independent == pytest.approx(math.sqrt(1 / 12))
    assert v.design_effect == pytest.approx(3.0)
    assert (v.clusters, v.df) == (2, 1)


def test_singletons_have_design_effect_one():
    # every unit its own cluster: CR1 n / (n - 1) * sum(psi^2) is the independent variance itself
    x = np.array([0.3, 0.9, 0.1, 0.5, 0.7])
    v = clustered_variance(mean_influence(x), Clusters.independent(5))
    assert v.design_effect == pytest.approx(1.0)
    assert clustered_mean_t(x, Clusters.independent(5)) == {**mean_t(x), "clusters": 5, "design_effect": 1.0}


def test_clustered_mean_t_by_hand_and_against_statsmodels():
    # values 1 1 | 0 0 | 1 0 (three prompts): mean 1/2, influence +-1/12, cluster totals 1/6, -1/6, 0;
    # CR1 3/2 * (1/36 + 1/36) = 1/12 (se 0.288675); independent 6/5 * 6/144 = 1/20; deff 5/3;
    # t on 2 df: 4.302653 -> 0.5 +- 1.242069; t = 0.5 / 0.288675 = 1.7321, p = 0.2254.
    x = np.array([1.0, 1, 0, 0, 1, 0])
    c = Clusters(np.array([0, 0, 1, 1, 2, 2]), "prompt")
    d = clustered_mean_t(x, c)
    assert d["ci_low"] == pytest.approx(0.5 - 1.242069, abs=1e-6)
    assert d["ci_high"] == pytest.approx(0.5 + 1.242069, abs=1e-6)
    assert d["statistic"] == pytest.approx(math.sqrt(3), abs=1e-9)
    assert d["p_value"] == pytest.approx(0.2254, abs=1e-4)
    assert (d["clusters"], d["design_effect"]) == (3, pytest.approx(5 / 3))
    # an independent computation: OLS on a constant with statsmodels' cluster-robust covariance
    # (its correction G / (G - 1) * (N - 1) / (N - K) is CR1 for K = 1)
    import statsmodels.api as sm

    fit = sm.OLS(x, np.ones_like(x)).fit(cov_type="cluster", cov_kwds={"groups": c.codes})
    assert float(fit.bse[0]) == pytest.approx(math.sqrt(1 / 12), rel=1e-12)


def test_effective_size_and_clustered_proportion():
    # the same table as a share: deff 5/3, t(2) 4.302653, z 1.959964 ->
    # 6 / (5/3) * (1.959964 / 4.302653)^2 = 3.6 * 0.207500 = 0.74700 effective units
    x = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    c = Clusters(np.array([0, 0, 1, 1, 2, 2]), "prompt")
    v = clustered_variance(mean_influence(x), c)
    assert effective_size(6, v) == pytest.approx(0.74700, abs=1e-4)
    d = clustered_proportion(x, c)
    _, lo, hi = proportion_interval(0.5 * effective_size(6, v), effective_size(6, v))
    assert (d["value"], d["ci_low"], d["ci_high"]) == (0.5, lo, hi)
    _, lo6, hi6 = proportion_interval(3, 6)
    assert lo < lo6 and hi > hi6  # wider than treating the six as independent
    # singletons: exactly the independent Agresti-Coull interval
    s = clustered_proportion(x, Clusters.independent(6))
    assert (s["ci_low"], s["ci_high"], s["design_effect"]) == (lo6, hi6, 1.0)


def test_clustered_diff_proportions_reduces_to_newcomb_on_singletons():
    hit = np.array([1, 1, 0, 1, 0, 0, 1, 0], dtype=bool)
    g1 = np.array([1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
    d = clustered_diff_proportions(hit, g1, hit, ~g1, Clusters.independent(8))
    ref = diff_proportions(3, 4, 1, 4)
    assert {k: d[k] for k in ref} == ref and d["design_effect"] == 1.0


def test_clusters_of_labels_and_subset():
    c = Clusters.of(["q1", "q2", None, "q1", None], "prompt")
    # q1 -> 0, q2 -> 1, each missing label its own cluster (2, 3)
    assert c.codes.tolist() == [0, 1, 2, 0, 3] and c.count == 4 and not c.singletons
    kept = c.subset(np.array([True, False, True, True, False]))
    assert kept.codes.tolist() == [0, 1, 0] and kept.by == "prompt"
    with pytest.raises(ValueError, match="non-negative"):
        Clusters(np.array([-1, 0]), "prompt")
    with pytest.raises(InsufficientData, match="2 clusters"):
        clustered_variance(np.array([0.1, -0.1]), Clusters(np.array([0, 0]), "prompt"))


def test_cluster_bootstrap_widens_for_correlated_clusters():
    # 10 prompts, 4 rows each, every row of a prompt equal: 10 independent pieces of information
    x = np.repeat(np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 0], dtype=float), 4)
    c = Clusters(np.repeat(np.arange(10), 4), "prompt")
    lo_c, hi_c, means = cluster_bootstrap_means(x, c, reps=4000, seed=1)
    lo_i, hi_i, _ = bootstrap_mean(x, reps=4000, seed=1)
    assert means.shape == (4000,)
    assert (hi_c - lo_c) > 1.8 * (hi_i - lo_i)  # ~sqrt(4) = 2 times wider
    same = cluster_bootstrap_means(x, Clusters.independent(40), reps=500, seed=3)
    assert same[:2] == bootstrap_mean(x, reps=500, seed=3)[:2]


def _nested_table(prompts: int, per_prompt: int, pattern) -> pd.DataFrame:
    """Judge 'j' judges its own response (A) against 'x' (B); ``pattern(p, r)`` -> its choice."""
    rows = []
    for p in range(prompts):
        for r in range(per_prompt):
            rows.append({"pair_id": f"p{p}-{r}", "prompt": f"q{p}", "response_a": "own",
                         "response_b": "other", "generator_a": "j", "generator_b": "x", "judge": "j",
                         "verdict": pattern(p, r), "human": ["a" if (p + r) % 2 else "b"]})
    return pd.DataFrame(rows)


def test_self_preference_dp_clustered_by_prompt():
    # 6 prompts x 3 pairs; the judge picks its own response on every pair of prompts 0-3 and on none
    # of prompts 4-5: P(own) = 12/18 = 2/3, every prompt's pairs alike, so the design effect is
    # about the cluster size (3) and the interval widens about sqrt(3) times.
    df = _nested_table(6, 3, lambda p, r: "a" if p < 4 else "b")
    est = self_preference_dp(df, "j", {"j": {"j"}})
    flat = self_preference_dp(F.prepare(df, cluster_by="none"), "j", {"j": {"j"}})
    assert est.value == flat.value == pytest.approx(2 * 12 / 18 - 1)
    assert (est.clusters, est.cluster_by, flat.clusters, flat.cluster_by) == (6, "prompt", 18, "none")
    # influence (y - 2/3) / 18 summed per prompt: 3 * (1/3) / 18 = 1/18 (x4), 3 * (-2/3) / 18 = -1/9 (x2);
    # CR1 6/5 * (4/324 + 2/81) = 6/5 * 12/324 = 0.044444; independent 18/17 * (12/9 + 6 * 4/9) / 324
    # = 18/17 * 4 / 324 = 0.013072; design effect 3.4
    assert est.design_effect == pytest.approx(0.044444 / 0.013072, rel=1e-4)
    assert (est.ci_high - est.ci_low) > 1.7 * (flat.ci_high - flat.ci_low)
    assert flat.method.endswith("exact binomial test of P(own) = 1/2") and "CR1" in est.method
    assert est.warnings and "6 clusters" in est.warnings[0]
    assert est.to_dict()["design_effect"] == pytest.approx(est.design_effect)


def test_self_preference_eo_clusters_and_opt_out():
    df = _nested_table(8, 2, lambda p, r: "a" if (p + r) % 3 else "b")
    est = self_preference_eo(df, "j", {"j": {"j"}})
    flat = self_preference_eo(F.prepare(df, cluster_by="none"), "j", {"j": {"j"}})
    assert est.value == flat.value and est.clusters == 8 and flat.clusters == 16
    assert flat.method == "TPR - TNR; Newcomb interval, score test"


def test_cluster_by_unknown_column_is_named():
    df = _nested_table(2, 2, lambda p, r: "a")
    with pytest.raises(ValueError, match="no column 'story'"):
        F.prepare(df, cluster_by="story")


def test_cluster_caveats_read_the_figure_threshold():
    from judgebias.metrics.registry import CLUSTERS_NEEDED, cluster_caveats
    from judgebias.stats import Estimate, cluster_note

    # 30 prompts holding 100 pairs: enough for most figures (20), not for agreement (80 under nesting)
    est = Estimate(0.7, 0.6, 0.8, 100, clusters=30, design_effect=1.8, cluster_by="prompt",
                   warnings=("something else", *cluster_note(30, "prompt")))
    assert cluster_note(30, "prompt") == ()
    agreement = cluster_caveats("agreement_human", est)
    assert CLUSTERS_NEEDED["agreement_human"] == 80
    assert agreement.warnings == (
        "something else", "rests on only 30 clusters (prompt): its interval is less reliable below 80")
    assert cluster_caveats("self_preference_dp", est) is est
    # a regression on nested pairs says its intervals run short; on singleton clusters it does not
    assert "approximate" in cluster_caveats("regression", est).warnings[-1]
    flat = Estimate(0.7, 0.6, 0.8, 100, clusters=100, design_effect=1.0, cluster_by="prompt")
    assert cluster_caveats("regression", flat).warnings == ()
    # 12 prompts: the general threshold's note is replaced by the figure's own, not repeated
    few = Estimate(0.7, 0.6, 0.8, 50, clusters=12, design_effect=1.5, cluster_by="prompt",
                   warnings=cluster_note(12, "prompt"))
    assert cluster_caveats("kappa_human", few).warnings == (
        "rests on only 12 clusters (prompt): its interval is less reliable below 80",)
    none = Estimate(0.7, 0.6, 0.8, 50, clusters=50, design_effect=1.0, cluster_by="none")
    assert cluster_caveats("agreement_human", none) is none


def test_eo_parts_are_clustered_too():
    # 8 prompts x 3 pairs: every pair of a prompt alike, so each part's design effect is about 3
    df = _nested_table(8, 3, lambda p, r: "a" if p % 3 else "b")
    df["human"] = [["a"] if p % 2 else ["b"] for p in range(8) for _ in range(3)]
    est = self_preference_eo(df, "j", {"j": {"j"}})
    flat = self_preference_eo(F.prepare(df, cluster_by="none"), "j", {"j": {"j"}})
    for part in ("tpr", "tnr"):
        nested_part, flat_part = est.details[part], flat.details[part]
        assert nested_part["value"] == flat_part["value"] and nested_part["design_effect"] > 2
        assert (nested_part["ci_high"] - nested_part["ci_low"]) > (flat_part["ci_high"] - flat_part["ci_low"])
        assert flat_part["design_effect"] == 1.0
