"""Pointwise figures on nested rows (several criteria per item): clustered by item, by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import pointwise as P
from judgebias.metrics import pointwise_origin as O
from judgebias.reporting.pointwise_analysis import analyze_pointwise


def _table(gaps_per_item: list[list[float]], generator=lambda i: "m") -> pd.DataFrame:
    """One row per (item, criterion); the human mean is 3, the judge's score 3 + the gap."""
    rows = []
    for i, gaps in enumerate(gaps_per_item):
        for c, gap in enumerate(gaps):
            rows.append({"item_id": f"i{i}", "prompt": f"q{i}", "response": "word " * (i + 1),
                         "generator": generator(i), "judge": "j", "criterion": f"c{c}",
                         "score": 3.0 + gap, "human_scores": [3.0], "scale_min": 1, "scale_max": 5})
    return pd.DataFrame(rows)


def test_score_bias_clustered_by_item_by_hand():
    # 3 items x 2 criteria, gaps (1, 1), (0, 0), (1, 0): mean 1/2; influence +-1/12 per row;
    # item totals 1/6, -1/6, 0; CR1 3/2 * 2/36 = 1/12; independent 6/5 * 6/144 = 1/20: deff 5/3;
    # t on 2 df 4.302653 * sqrt(1/12) = 1.242069
    df = _table([[1, 1], [0, 0], [1, 0]])
    est = P.score_bias_human(df, "j")
    assert est.value == pytest.approx(0.5)
    assert (est.ci_low, est.ci_high) == (pytest.approx(0.5 - 1.242069, abs=1e-6),
                                         pytest.approx(0.5 + 1.242069, abs=1e-6))
    assert (est.clusters, est.cluster_by, est.design_effect) == (3, "item_id", pytest.approx(5 / 3))
    assert "CR1" in est.method and est.warnings
    # --cluster-by none: the one-sample t of six independent rows, as before
    flat = P.score_bias_human(P.with_clusters(df, "none"), "j")
    sd = np.std([1, 1, 0, 0, 1, 0], ddof=1)  # 0.547723
    assert flat.ci_high - flat.value == pytest.approx(2.570582 * sd / math.sqrt(6), abs=1e-6)
    assert flat.method == "mean (judge - mean human score), one-sample t" and flat.design_effect == 1.0


def test_singleton_items_keep_the_independent_methods():
    df = _table([[g] for g in (1, 0, 2, 1, 0, 1, 2, 0)])
    for fn in (P.score_spearman_human, P.score_kendall_human, P.score_mae_human, P.score_bias_human):
        if fn in (P.score_spearman_human, P.score_kendall_human):
            df = df.assign(human_scores=[[float(h)] for h in (1, 2, 3, 4, 5, 1, 2, 3)])
        est = fn(df, "j")
        assert est.design_effect == 1.0 and est.clusters == 8 and "CR1" not in est.method


def test_rank_correlation_widens_when_criteria_repeat_an_item():
    # each item's judge and human scores are repeated over 4 criteria: 4 copies of 10 items hold
    # the information of 10, so the design effect of Spearman's influence values is about 4
    rng = np.random.default_rng(0)
    h = rng.integers(1, 6, size=10).astype(float)
    s = np.clip(h + rng.integers(-1, 2, size=10), 1, 5)
    rows = [{"item_id": f"i{i}", "prompt": "q", "response": "r", "generator": "m", "judge": "j",
             "criterion": f"c{c}", "score": s[i], "human_scores": [h[i]], "scale_min": 1, "scale_max": 5}
            for i in range(10) for c in range(4)]
    df = pd.DataFrame(rows)
    nested = P.score_spearman_human(df, "j")
    flat = P.score_spearman_human(P.with_clusters(df, "none"), "j")
    assert nested.value == flat.value
    assert nested.design_effect == pytest.approx(4.0, rel=0.15)
    assert (nested.ci_high - nested.ci_low) > 1.5 * (flat.ci_high - flat.ci_low)
    kappa = P.score_kappa_human(df, "j", reps=500, seed=1)
    kappa_flat = P.score_kappa_human(P.with_clusters(df, "none"), "j", reps=500, seed=1)
    assert (kappa.ci_high - kappa.ci_low) > (kappa_flat.ci_high - kappa_flat.ci_low)
    assert "10 item_id clusters" in kappa.method


def test_self_preference_welch_clustered():
    # items 0-2 by the judge ("j"), 3-5 by another model; two criteria each with equal gaps, so the
    # rows of an item carry one item's information
    df = _table([[1, 1], [2, 2], [1, 1], [0, 0], [1, 1], [0, 0]], generator=lambda i: "j" if i < 3 else "m")
    est = O.score_self_preference_eo(df, "j", {"j": {"j"}})
    flat = O.score_self_preference_eo(P.with_clusters(df, "none"), "j", {"j": {"j"}})
    # own mean 4/3, others 1/3: +1
    assert est.value == pytest.approx(1.0) and flat.value == pytest.approx(1.0)
    assert est.clusters == 6 and est.design_effect > 1.5
    assert (est.ci_high - est.ci_low) > (flat.ci_high - flat.ci_low)


def test_analyze_pointwise_records_clusters_and_refuses_an_unknown_column():
    df = _table([[1, 1], [0, 0], [1, 0], [2, 1]])
    out = analyze_pointwise(df)
    assert out["settings"]["cluster_by"] == "item_id" and out["settings"]["clusters"] == 4
    assert out["judges"]["j"]["score_bias_human"]["clusters"] == 4
    assert analyze_pointwise(df, cluster_by="prompt")["settings"]["cluster_by"] == "prompt"
    with pytest.raises(ValueError, match="no column 'story'"):
        analyze_pointwise(df, cluster_by="story")
