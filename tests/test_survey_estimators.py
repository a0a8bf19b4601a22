"""Design-based and prediction-powered estimators on hand-computed tables, and against ppi-python."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from judgebias.metrics.survey import (
    POISSON,
    STRATIFIED,
    SampleDesign,
    Z,
    design_cov,
    design_df,
    ht_mean,
    ht_total,
    newcomb_design,
    ratio,
    required_labels,
    smooth_estimate,
    wilson_design,
)
from judgebias.stats import InsufficientData, wilson


def test_horvitz_thompson_total_and_poisson_variance_by_hand():
    design = SampleDesign(np.array([0.5, 0.5, 1.0, 0.25]), np.array([True, False, True, True]))
    y = np.array([2.0, np.nan, 3.0, 1.0])  # the unsampled unit's value is never read
    # T = 2/0.5 + 3/1 + 1/0.25 = 4 + 3 + 4 = 11
    assert ht_total(y, design) == pytest.approx(11.0)
    # V = sum_s (1 - pi) y^2 / pi^2 = 0.5*4/0.25 + 0 + 0.75*1/0.0625 = 8 + 12 = 20
    assert design_cov(y, y, design) == pytest.approx(20.0)
    # HT mean over N = 4: 11/4 = 2.75, se = sqrt(20)/4
    est = ht_mean(y, design)
    assert est.value == pytest.approx(2.75)
    assert est.details["se"] == pytest.approx(math.sqrt(20) / 4)
    # df: weights 1/pi = 2, 1, 4 -> Kish (2 + 1 + 4)^2 / (4 + 1 + 16) = 49/21, minus 1 = 4/3
    assert est.details["df"] == pytest.approx(4 / 3)
    q = stats.t.ppf(0.975, 4 / 3)
    assert est.ci_low == pytest.approx(2.75 - q * math.sqrt(20) / 4)


def test_design_df_counts_the_units_that_carry_the_variable():
    # Ten labelled units, equal weights: a rate over a domain of four of them (the variable is zero
    # elsewhere) has 4 - 1 = 3 df, not 9.
    design = SampleDesign(np.full(10, 0.5), np.ones(10, bool))
    z = np.array([0.1, -0.3, 0.2, 0.4, 0, 0, 0, 0, 0, 0])
    assert design_df(z, design) == pytest.approx(3.0)
    # Unequal weights 2, 2, 2, 8 on the domain: Kish (14)^2 / (4 + 4 + 4 + 64) = 196/76 = 2.579 -> 1.579
    design2 = SampleDesign(np.array([0.5, 0.5, 0.5, 0.125] + [0.5] * 6), np.ones(10, bool))
    assert design_df(z, design2) == pytest.approx(196 / 76 - 1)
    # Stratified: at most n - H among the carrying units (4 units in 2 strata: 2 df).
    strat = SampleDesign(np.full(10, 0.5), np.ones(10, bool), STRATIFIED, np.array(list("aabb") + ["c"] * 6))
    assert design_df(z, strat) == pytest.approx(2.0)
    # A single carrying unit (or none) still gets the floor of 1 df.
    assert design_df(np.array([1.0] + [0.0] * 9), design) == 1.0


def test_stratified_variance_by_hand():
    # Stratum h1: N=4, 2 drawn (y = 1, 3); stratum h2: N=2, both drawn (a census: no variance).
    design = SampleDesign(np.array([0.5, 0.5, 0.5, 0.5, 1.0, 1.0]),
                          np.array([True, True, False, False, True, True]), STRATIFIED,
                          np.array(["h1"] * 4 + ["h2"] * 2))
    y = np.array([1.0, 3.0, np.nan, np.nan, 5.0, 7.0])
    # T = 4 * mean(1, 3) + (5 + 7) = 8 + 12 = 20
    assert ht_total(y, design) == pytest.approx(20.0)
    # V = N_h^2 (1 - n_h/N_h) s_h^2 / n_h = 16 * 0.5 * 2 / 2 = 8 (s^2 of {1, 3} is 2)
    assert design_cov(y, y, design) == pytest.approx(8.0)


def test_stratum_with_a_single_draw_has_no_variance_estimate():
    design = SampleDesign(np.array([1 / 3] * 3), np.array([True, False, False]), STRATIFIED,
                          np.array(["h"] * 3))
    with pytest.raises(InsufficientData, match="one labelled unit"):
        design_cov(np.array([1.0]), np.array([1.0]), design)


def test_hajek_ratio_with_linearised_variance_by_hand():
    # Poisson pi = 0.5 on N = 6; sampled units: y0 = 1, 0, 1 over y1 = 1, 1, 1.
    pi = np.full(6, 0.5)
    sampled = np.array([True, True, True, False, False, False])
    y = np.array([[1, 0, 1, np.nan, np.nan, np.nan], [1, 1, 1, np.nan, np.nan, np.nan]], dtype=float)
    est = smooth_estimate(y, ratio(0, 1), SampleDesign(pi, sampled))
    # R = (2/0.5) / (3/0.5) = 2/3; u = (y0 - R y1) / T1 = [1/3, -2/3, 1/3] / 6
    # V = sum (1 - 0.5) u^2 / 0.25 = 2 * (1/9 + 4/9 + 1/9) / 36 = 1/27
    assert est.value == pytest.approx(2 / 3)
    assert est.details["se"] == pytest.approx(math.sqrt(1 / 27), rel=1e-6)
    assert est.n == 3 and est.details["population_size"] == 6


def test_prediction_powered_with_fixed_lambda_by_hand():
    design = SampleDesign(np.full(4, 0.5), np.array([True, True, False, False]))
    y = np.array([[1.0, 0.0, np.nan, np.nan]])
    yhat = np.array([[0.8, 0.2, 0.6, 0.4]])
    est = smooth_estimate(y, lambda t: t[0] / 4, design, yhat=yhat, lam=1.0)
    # T = 1 * (0.8 + 0.2 + 0.6 + 0.4) + ((1 - 0.8) + (0 - 0.2)) / 0.5 = 2 + 0 = 2; theta = 2/4
    assert est.value == pytest.approx(0.5)
    # residuals on the mean scale: 0.25 * [0.2, -0.2]; V = sum 0.5 * r^2 / 0.25 = 2 * 2 * 0.0025 = 0.01
    assert est.details["se"] == pytest.approx(0.1, rel=1e-6)
    assert est.details["lambda"] == 1.0


def test_leave_one_out_lambda_by_hand():
    # N = 6, Poisson pi = 0.5, units 0-3 labelled; theta = mean, so u = y/6, uhat = yhat/6 and
    # a = (1 - pi)/pi^2 = 2. Terms a*u*uhat = 2*y*yhat/36 = [2, 0, 1, 1]/36, a*uhat^2 = [2, 2, .5, .5]/36.
    # Whole sample: lam = 4/5 = 0.8 (the unlabelled units' weight). Leaving each unit out:
    # (4-2)/(5-2) = 2/3, (4-0)/(5-2) = 4/3 -> clipped to 1, (4-1)/(5-.5) = 2/3, 2/3.
    design = SampleDesign(np.full(6, 0.5), np.array([True] * 4 + [False] * 2))
    y = np.array([[1.0, 0.0, 1.0, 1.0, np.nan, np.nan]])
    yhat = np.array([[1.0, 1.0, 0.5, 0.5, 0.8, 0.2]])
    est = smooth_estimate(y, lambda t: t[0] / 6, design, yhat=yhat)
    assert est.details["lambda"] == pytest.approx(0.8)
    # T = 0.8 * (0.8 + 0.2)                       unlabelled units, whole-sample lambda  = 0.8
    #   + 2/3*1 + 1*1 + 2/3*0.5 + 2/3*0.5         labelled units' own lambda * yhat    = 7/3
    #   + (1/3 - 1 + 2/3 + 2/3) / 0.5             labelled residuals y - lam_i * yhat  = 4/3
    # = 4.4667; theta = T / 6
    assert est.value == pytest.approx((0.8 + 7 / 3 + 4 / 3) / 6)


def test_tuned_lambda_keeps_the_estimator_unbiased_over_repeated_draws():
    # Leave-one-out tuning: a labelled unit's weight never depends on its own draw, so the totals
    # stay unbiased whatever the predictor (here a biased one, on small samples).
    rng = np.random.default_rng(5)
    big_n = 200
    y_all = (rng.random(big_n) < 0.3).astype(float)
    yhat = np.clip(0.6 * y_all + 0.3 + 0.1 * rng.standard_normal(big_n), 0, 1)[None, :]  # biased upward
    pi = np.clip(0.05 + 0.2 * rng.random(big_n), 0, 1)
    values = []
    for _ in range(4000):
        s = rng.random(big_n) < pi
        values.append(smooth_estimate(np.where(s, y_all, np.nan)[None, :], lambda t: t[0] / big_n,
                                      SampleDesign(pi, s), yhat=yhat).value)
    # Monte-Carlo s.e. of the mean of 4,000 draws is about 0.001 here.
    assert np.mean(values) == pytest.approx(y_all.mean(), abs=0.004)


def test_effective_sample_size_is_read_off_the_interval():
    # A simple random sample of 200 of 2,000 (one stratum) with the classical estimator: the uniform
    # sample with an interval as wide is itself, so the ESS is 200, df and finite-population
    # correction included (required_labels solves (1 - m/N) S^2 / m = se^2 with t on m's df).
    rng = np.random.default_rng(3)
    big_n = 2000
    y_all = (rng.random(big_n) < 0.4).astype(float)
    sampled = np.zeros(big_n, bool)
    sampled[rng.choice(big_n, 200, replace=False)] = True
    design = SampleDesign(np.full(big_n, 0.1), sampled, STRATIFIED, np.array(["all"] * big_n))
    est = smooth_estimate(np.where(sampled, y_all, np.nan)[None, :], lambda t: t[0] / big_n, design)
    assert est.details["effective_sample_size"] == pytest.approx(200, abs=1)


def test_tuned_lambda_never_widens_and_uses_a_good_predictor():
    rng = np.random.default_rng(3)
    big_n = 2000
    truth = rng.random(big_n)
    y_all = (rng.random(big_n) < truth).astype(float)
    sampled = rng.random(big_n) < 0.1
    design = SampleDesign(np.full(big_n, 0.1), sampled)
    y = np.where(sampled, y_all, np.nan)[None, :]
    g = lambda t: t[0] / big_n  # noqa: E731
    hajek = smooth_estimate(y, g, design)
    useless = smooth_estimate(y, g, design, yhat=rng.random(big_n)[None, :])
    good = smooth_estimate(y, g, design, yhat=truth[None, :])
    assert useless.details["se"] <= hajek.details["se"] + 1e-12
    assert good.details["se"] < 0.85 * hajek.details["se"]
    assert 0.0 <= good.details["lambda"] <= 1.0
    assert good.details["effective_sample_size"] > 1.3 * design.n


def test_ppi_is_unbiased_over_repeated_poisson_draws_with_unequal_probabilities():
    # The estimator's defining property: whatever the predictor and the probabilities, its mean over
    # the design's draws is the population figure (here a conditional rate).
    rng = np.random.default_rng(0)
    big_n = 300
    den = (rng.random(big_n) < 0.6).astype(float)
    num = den * (rng.random(big_n) < 0.7)
    truth = num.sum() / den.sum()
    yhat = np.vstack([den * 0.9, den])  # a biased predictor of the numerator
    pi = np.clip(0.05 + 0.3 * rng.random(big_n), 0, 1)
    values = []
    for _ in range(3000):
        s = rng.random(big_n) < pi
        y = np.where(s, np.vstack([num, den]), np.nan)
        values.append(smooth_estimate(y, ratio(0, 1), SampleDesign(pi, s), yhat=yhat, lam=0.8).value)
    # Ratio estimators carry an O(1/n) bias; with ~55 labels per draw it is far below 0.005.
    assert np.mean(values) == pytest.approx(truth, abs=0.005)


def test_agrees_with_ppi_python_on_a_uniform_sample():
    ppi = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(7)
    big_n, n, lam = 500, 60, 0.7
    yhat_all = rng.random(big_n)
    y_all = (rng.random(big_n) < yhat_all).astype(float)
    idx = rng.choice(big_n, n, replace=False)
    sampled = np.zeros(big_n, bool)
    sampled[idx] = True
    design = SampleDesign(np.full(big_n, n / big_n), sampled, STRATIFIED, np.array(["all"] * big_n))
    y = np.where(sampled, y_all, np.nan)[None, :]
    ours = smooth_estimate(y, lambda t: t[0] / big_n, design, yhat=yhat_all[None, :], lam=lam)
    # Same point: lam * mean(yhat over all N) + mean over the sample of (y - lam * yhat).
    theirs = ppi.ppi_mean_pointestimate(y_all[sampled], yhat_all[sampled], yhat_all, lam=lam)
    assert ours.value == pytest.approx(float(np.squeeze(theirs)), abs=1e-12)
    # Variance: ppi-python treats the N predictions as a second random sample (lam^2 var/N) and the
    # labelled rectifier with ddof=0; the finite-population one knows every prediction and applies
    # (1 - n/N) with ddof=1. Undo both differences and the rectifier terms are equal.
    lo, hi = ppi.ppi_mean_ci(y_all[sampled], yhat_all[sampled], yhat_all, alpha=0.05, lam=lam)
    ppi_var = ((float(np.squeeze(hi)) - float(np.squeeze(lo))) / (2 * Z)) ** 2
    imputed = (lam * yhat_all).var() / big_n
    ours_var = ours.details["se"] ** 2 / (1 - n / big_n) * (n - 1) / n
    assert ours_var == pytest.approx(ppi_var - imputed, rel=1e-6)
    # And lam = 0 is the classical sample mean.
    classical = smooth_estimate(y, lambda t: t[0] / big_n, design, yhat=yhat_all[None, :], lam=0.0)
    assert classical.value == pytest.approx(y_all[sampled].mean())


def test_wilson_on_effective_sample_size_reduces_to_wilson_for_a_simple_sample():
    # p = 0.3 from n = 50 labels with se^2 = p(1-p)/n gives n* = 50: the plain Wilson interval.
    p, n = 0.3, 50
    lo, hi = wilson_design(p, math.sqrt(p * (1 - p) / n), n)
    _, w_lo, w_hi = wilson(15, 50)
    assert (lo, hi) == pytest.approx((w_lo, w_hi), abs=1e-4)
    # With p = 1 and no spread, n* falls back to the labelled count: Wilson of 8/8.
    lo1, hi1 = wilson_design(1.0, 0.0, 8)
    assert hi1 == 1.0 and lo1 == pytest.approx(wilson(8, 8)[1], abs=1e-4)
    # Newcomb for the difference: 0.3 - 0.3 is centred on 0 and symmetric.
    d_lo, d_hi = newcomb_design(0.3, (lo, hi), 0.3, (lo, hi))
    assert d_lo == pytest.approx(-d_hi)


def test_bad_input_is_refused_with_the_unit_named():
    with pytest.raises(ValueError, match="unit 1"):
        SampleDesign(np.array([0.5, 0.0]), np.array([True, False]))
    design = SampleDesign(np.array([0.5, 0.5]), np.array([True, True]), POISSON)
    with pytest.raises(ValueError, match="lacks its label"):
        ht_total(np.array([1.0, np.nan]), design)
    with pytest.raises(ValueError, match="half-width"):
        required_labels(0.25, 100, 0.0)


def test_required_labels_with_finite_population_correction():
    # S^2 = 0.25, h = 0.05: n0 = 1.96^2 * 0.25 / 0.0025 = 384.1; N = 1000: 384.1 / 1.3841 = 277.5 -> 278;
    # then t on 277 df = 1.9686: n0 = 387.5, / 1.3875 = 279.3 -> 280; t on 279 df = 1.9685 -> 280 again.
    assert required_labels(0.25, 1000, 0.05) == 280
    # Half the units carry the variable: 278 -> t on 138 df = 1.9773 -> n0 = 391.0, / 1.3910 = 281.1
    # -> 282; t on 140 df = 1.9771 -> 282 again.
    assert required_labels(0.25, 1000, 0.05, 0.5) == 282
