"""Population figures from a probability sample of human ratings (judgebias.metrics.pointwise_survey),
on hand-computed tables (arithmetic in the comments) and against ppi-python."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics.pointwise_survey import rating_estimate, rating_features, rating_figures
from judgebias.metrics.survey import POISSON, STRATIFIED, SampleDesign, t_quantile
from judgebias.stats import InsufficientData

# Four items; j wrote a and b, m wrote c and d. Judge j's scores s = 5, 3, 2, 4 (mean 3.5).
# Poisson design pi = 0.5, 0.5, 0.25, 0.25; a and c were drawn and rated: h_a = 4 (raters 3 and 5),
# h_c = 2.
UNITS = pd.Index(["a", "b", "c", "d"])
DESIGN = SampleDesign(np.array([0.5, 0.5, 0.25, 0.25]), np.array([True, False, True, False]), POISSON)


def table() -> pd.DataFrame:
    return pd.DataFrame({
        "item_id": list(UNITS), "judge": "j", "score": [5.0, 3.0, 2.0, 4.0],
        "generator": ["j", "j", "m", "m"], "human_scores": [[3.0, 5.0], [], [2.0], []],
        "criterion": "overall quality",
    })


def features() -> pd.DataFrame:
    return rating_features(table(), "j")


def test_hajek_human_mean_and_bias_by_hand():
    est = rating_estimate(features(), UNITS, DESIGN, "human_mean", ppi=False)
    # T_h = 4/0.5 + 2/0.25 = 16, T_1 = 1/0.5 + 1/0.25 = 6: mean 16/6 = 8/3.
    assert est.value == pytest.approx(8 / 3)
    # u = (h - 8/3)/6: u_a = 2/9, u_c = -1/9; Poisson variance sum (1 - pi) u^2 / pi^2
    # = 0.5 * (4/81) / 0.25 + 0.75 * (1/81) / 0.0625 = 8/81 + 12/81 = 20/81.
    assert est.details["se"] == pytest.approx(math.sqrt(20) / 9)
    # Kish on weights 2 and 4: 36/20 - 1 = 0.8, floored at 1 df.
    assert est.details["df"] == 1.0
    assert est.ci_high - est.value == pytest.approx(t_quantile(1.0) * math.sqrt(20) / 9)
    assert est.n == 2 and "Hájek" in est.method
    bias = rating_estimate(features(), UNITS, DESIGN, "score_bias_human", ppi=False)
    # s - h: a 5 - 4 = 1, c 2 - 2 = 0: T = 1/0.5 = 2 over T_1 = 6: 1/3.
    assert bias.value == pytest.approx(1 / 3)


def test_ppi_with_a_fixed_lambda_by_hand():
    est = rating_estimate(features(), UNITS, DESIGN, "human_mean", ppi=True, lam=1.0)
    # lam = 1: T_h = sum_U s + sum_s (h - s)/pi = 14 + (4 - 5)/0.5 + (2 - 2)/0.25 = 12,
    # T_1 = 4 + 0 = 4: mean 3 (= mean_U s 3.5 + the HT mean of h - s, -2/4).
    assert est.value == pytest.approx(3.0)
    # grad = (1/4, -12/16); residual grad.y - grad.yhat: a (4 - 5)/4 = -1/4, c (2 - 2)/4 = 0;
    # variance 0.5 * (1/16) / 0.25 = 1/8.
    assert est.details["se"] == pytest.approx(math.sqrt(1 / 8))
    bias = rating_estimate(features(), UNITS, DESIGN, "score_bias_human", ppi=True, lam=1.0)
    # mean_U s is known: 3.5 - 3 = 0.5, with the human mean's standard error.
    assert bias.value == pytest.approx(0.5)
    assert bias.details["se"] == pytest.approx(math.sqrt(1 / 8))
    zero = rating_estimate(features(), UNITS, DESIGN, "human_mean", ppi=True, lam=0.0)
    assert zero.value == pytest.approx(8 / 3)  # lam = 0 is the Hájek mean


def test_self_preference_by_hand():
    # Six items, uniform sample of 4 (one stratum, pi = 4/6). j wrote u1-u3, m u4-u6.
    # s = 5, 4, 3, 2, 3, 4; h on the sample: u1 3, u2 4, u4 2, u5 2.
    df = pd.DataFrame({
        "item_id": [f"u{i}" for i in range(1, 7)], "judge": "j", "score": [5.0, 4.0, 3.0, 2.0, 3.0, 4.0],
        "generator": ["j"] * 3 + ["m"] * 3,
        "human_scores": [[3.0], [4.0], [], [2.0], [2.0], []],
    })
    units = pd.Index(df["item_id"])
    sampled = np.array([True, True, False, True, True, False])
    design = SampleDesign(np.full(6, 4 / 6), sampled, STRATIFIED, np.array(["all"] * 6))
    f = rating_features(df, "j")
    hajek = rating_estimate(f, units, design, "score_self_preference", ppi=False)
    # s - h: own u1 2, u2 0 (mean 1); other u4 0, u5 1 (mean 0.5): gap 0.5.
    assert hajek.value == pytest.approx(0.5)
    # Linearised (weights 1.5 cancel in the ratios, T_own = T_other = 3): u_i = (d_i - 1)/3 on own
    # (1/3, -1/3), -(d_i - 0.5)/3 on other (1/6, -1/6). Mean 0, sample variance (2/9 + 2/36)/3 = 5/54;
    # stratified variance N^2 (1 - n/N) s^2 / n = 36 * (1/3) * (5/54) / 4 = 5/18.
    assert hajek.details["se"] == pytest.approx(math.sqrt(5 / 18))
    ppi = rating_estimate(f, units, design, "score_self_preference", ppi=True, lam=1.0)
    # lam = 1: own human mean = mean_own s 4 + HT mean of (h - s) = 4 + 1.5 (-2 + 0)/3 = 3;
    # other = 3 + 1.5 (0 - 1)/3 = 2.5. Gap (4 - 3) - (3 - 2.5) = 0.5: here the same as Hájek,
    # because every domain total of 1 is estimated exactly (1.5 * 2 = 3).
    assert ppi.value == pytest.approx(0.5)
    figs = rating_figures(f, units, design)
    assert set(figs) == {"human_mean", "score_bias_human", "score_self_preference"}
    assert figs["score_self_preference"]["design_based"]["value"] == pytest.approx(0.5)
    assert figs["human_mean"]["labels"] == 4 and figs["human_mean"]["population_size"] == 6


def test_tuned_ppi_narrows_the_interval_of_a_good_judge():
    rng = np.random.default_rng(3)
    big_n, n = 400, 60
    s = rng.integers(1, 11, big_n).astype(float)
    h = np.clip(s + rng.normal(0, 0.7, big_n), 1, 10)
    sampled = np.zeros(big_n, bool)
    sampled[rng.choice(big_n, n, replace=False)] = True
    df = pd.DataFrame({"item_id": [f"i{k}" for k in range(big_n)], "judge": "j", "score": s,
                       "generator": np.where(np.arange(big_n) % 2 == 0, "j", "m"),
                       "human_scores": [[float(x)] if t else [] for x, t in zip(h, sampled, strict=True)]})
    design = SampleDesign(np.full(big_n, n / big_n), sampled, STRATIFIED, np.array(["all"] * big_n))
    f, units = rating_features(df, "j"), pd.Index(df["item_id"])
    width = {}
    for name in ("human_mean", "score_bias_human", "score_self_preference"):
        hj = rating_estimate(f, units, design, name, ppi=False)
        pp = rating_estimate(f, units, design, name, ppi=True)
        assert pp.details["lambda"] > 0.5, name
        width[name] = (pp.ci_high - pp.ci_low) / (hj.ci_high - hj.ci_low)
    # The human mean gains most: Hájek averages h (sd ~2.9), PPI++ the residual h - s (sd 0.7).
    assert width["human_mean"] < 0.4
    # The Hájek bias and self-preference already average s - h (the lam = 1 form), so PPI++ can
    # only match them: within 10%.
    assert width["score_bias_human"] < 1.1 and width["score_self_preference"] < 1.1


def test_ppi_human_mean_agrees_with_ppi_python():
    ppi = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(11)
    big_n, n, lam = 300, 40, 0.6
    s = rng.integers(1, 6, big_n).astype(float)
    h = np.clip(np.round(s + rng.normal(0, 1, big_n)), 1, 5)
    sampled = np.zeros(big_n, bool)
    sampled[rng.choice(big_n, n, replace=False)] = True
    df = pd.DataFrame({"item_id": [f"i{k}" for k in range(big_n)], "judge": "j", "score": s,
                       "generator": "m",
                       "human_scores": [[float(x)] if t else [] for x, t in zip(h, sampled, strict=True)]})
    design = SampleDesign(np.full(big_n, n / big_n), sampled, STRATIFIED, np.array(["all"] * big_n))
    ours = rating_estimate(rating_features(df, "j"), pd.Index(df["item_id"]), design, "human_mean",
                           ppi=True, lam=lam)
    # Same point: lam * mean(s over all N) + mean over the sample of (h - lam s) (the count total of
    # a simple random sample is N exactly, so the ratio is that mean).
    theirs = ppi.ppi_mean_pointestimate(h[sampled], s[sampled], s, lam=lam)
    assert ours.value == pytest.approx(float(np.squeeze(theirs)), abs=1e-12)
    # Variance: ppi-python adds lam^2 var(s)/N for predictions it treats as a sample and uses ddof=0
    # without the finite-population factor; undo both and the rectifier variances are equal.
    z = 1.959963984540054
    lo, hi = ppi.ppi_mean_ci(h[sampled], s[sampled], s, alpha=0.05, lam=lam)
    ppi_var = ((float(np.squeeze(hi)) - float(np.squeeze(lo))) / (2 * z)) ** 2
    ours_var = ours.details["se"] ** 2 / (1 - n / big_n) * (n - 1) / n
    assert ours_var == pytest.approx(ppi_var - (lam * s).var() / big_n, rel=1e-6)


def test_bad_inputs_name_the_unit():
    f = features()
    with pytest.raises(ValueError, match="unit 'b' is counted as labelled"):
        rating_estimate(f, UNITS, SampleDesign(np.full(4, 0.5), np.array([True, True, False, False])),
                        "human_mean", ppi=False)
    df = table()
    df.loc[1, "score"] = np.nan
    with pytest.raises(ValueError, match="unit 'b' of the design has no score"):
        rating_estimate(rating_features(df, "j"), UNITS, DESIGN, "human_mean", ppi=False)
    with pytest.raises(InsufficientData):
        one_sided = table().assign(generator="j")
        rating_estimate(rating_features(one_sided, "j"), UNITS, DESIGN, "score_self_preference", ppi=False)
