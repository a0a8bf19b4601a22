"""The interval methods changed because the coverage benchmark (``judgebias coverage``,
docs/benchmarks.md) found them below 93% coverage, each on a small hand-computed example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from judgebias.metrics.win_rate import _hc3_se
from judgebias.stats import bootstrap_mean, expansion, kappa, wilson

Z = 1.959963984540054


def _plain_wilson(x: float, n: float) -> tuple[float, float]:
    p = x / n
    mid = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2)) / (1 + Z**2 / n)
    return mid - half, mid + half


def test_wilson_takes_the_poisson_bound_next_to_zero_and_one():
    # 2 of 10: lower = chi2_4(0.05) / (2 * 10) = 0.71072 / 20 = 0.035536 (plain Wilson: 0.0567)
    _, lo, hi = wilson(2, 10)
    assert lo == pytest.approx(stats.chi2.ppf(0.05, 4) / 20) and lo == pytest.approx(0.035536, abs=1e-6)
    assert hi == pytest.approx(_plain_wilson(2, 10)[1])
    # 8 of 10 is the mirror image: upper = 1 - 0.035536 = 0.964464, which now covers p = 0.95
    _, lo, hi = wilson(8, 10)
    assert hi == pytest.approx(0.964464, abs=1e-6) and lo == pytest.approx(_plain_wilson(8, 10)[0])
    # 3 of 60: x* = 3 for 50 < n <= 100: lower = chi2_6(0.05) / 120 = 1.63538 / 120 = 0.013628
    assert wilson(3, 60)[1] == pytest.approx(0.013628, abs=1e-6)
    # 3 of 40 (x* = 2 there), 2 of 150 (n > 100), 0 of 10 and fractional counts: plain Wilson
    for x, n in ((3, 40), (2, 150), (0, 10), (2.5, 10)):
        assert wilson(x, n)[1:] == pytest.approx(_plain_wilson(x, n), abs=1e-9)


def test_bootstrap_interval_is_expanded_for_small_samples_and_stays_in_range():
    # n = 10: sqrt(10/9) * t_9(0.975) / z = 1.054093 * 2.262157 / 1.959964 = 1.216616
    assert expansion(10) == pytest.approx(1.216616, abs=1e-6)
    assert expansion(1) == 1.0 and 1.0 < expansion(1000) < 1.002
    values = np.array([0.0, 1, 1, 0, 1, 1, 0.5, 0, 1, 0.5])  # mean 0.6
    lo, hi, means = bootstrap_mean(values, reps=2000, seed=3)
    q_lo, q_hi = np.quantile(means, [0.025, 0.975])
    assert lo == pytest.approx(0.6 - expansion(10) * (0.6 - q_lo))
    assert hi == pytest.approx(min(1.0, 0.6 + expansion(10) * (q_hi - 0.6)))
    # nine ones and a zero: the expanded upper end would pass 1, the largest mean possible
    lo, hi, _ = bootstrap_mean(np.r_[np.ones(9), 0.0], reps=2000, seed=0)
    assert hi == 1.0 and lo < 0.9


def test_kappa_interval_of_a_perfect_small_table_is_not_a_point():
    # 10 pairs, all agreeing: po = 1, pe = 0.5^2 + 0.4^2 + 0.1^2 = 0.42, kappa = 1 with se 0; the
    # old interval was [1, 1]. Now: Wilson of 10/10 on n_eff = n = 10 is [0.722467, 1], mapped
    # through (x - 0.42) / 0.58: [0.521495, 1].
    k = kappa(np.array([[5, 0, 0], [0, 4, 0], [0, 0, 1]]))
    assert k["value"] == 1.0
    assert k["ci_low"] == pytest.approx((0.722467 - 0.42) / 0.58, abs=1e-5) and k["ci_high"] == 1.0


def test_kappa_interval_stays_within_minus_one_and_one():
    # Total disagreement on 4 pairs: po = 0, pe = 0.5, kappa = -1; the mapped lower end
    # (0 - 0.5) / 0.5 = -1 at most, never below.
    k = kappa(np.array([[0, 2], [2, 0]]))
    assert k["value"] == pytest.approx(-1.0)
    assert k["ci_low"] == pytest.approx(-1.0) and k["ci_high"] <= 1.0


def test_hc3_standard_error_of_an_intercept_only_fit():
    # Intercept only, y = (0.2, 0.4, 0.9, 0.5): mu = 0.5 (theta = 0), w = 0.25, n w = 1, every
    # leverage 1/4; residuals (-0.3, -0.1, 0.4, 0) / 0.75, squares sum 0.26 / 0.5625 = 0.462222;
    # HC3 variance = 0.462222 / (n w)^2 -> se = 0.679869 (HC0 would be sqrt(0.26) = 0.509902).
    se = _hc3_se(np.ones((4, 1)), np.array([0.2, 0.4, 0.9, 0.5]), np.array([0.0]))
    assert se[0] == pytest.approx(0.679869, abs=1e-6)


def test_paired_difference_score_interval_by_hand():
    from judgebias.stats import paired_diff_proportions

    # both 3, first only 4, second only 1, neither 2 (n = 10): p1 = 7/10, p2 = 4/10, diff 0.3.
    # Wilson 7/10 = [0.396778, 0.892209], 4/10 = [0.168180, 0.687326]; a d - b c = 6 - 4 = 2 > 0,
    # corrected to max(2 - n/2, 0) = 0, so phi = 0 and
    # lower = 0.3 - sqrt((0.7 - 0.396778)^2 + (0.687326 - 0.4)^2) = 0.3 - sqrt(0.091944 + 0.082556)
    #       = 0.3 - 0.417732 = -0.117732
    # upper = 0.3 + sqrt((0.892209 - 0.7)^2 + (0.4 - 0.168180)^2) = 0.3 + sqrt(0.036944 + 0.053741)
    #       = 0.3 + 0.301139 = 0.601139
    d = paired_diff_proportions(3, 4, 1, 2)
    assert d["value"] == pytest.approx(0.3)
    assert d["ci_low"] == pytest.approx(-0.117732, abs=1e-5)
    assert d["ci_high"] == pytest.approx(0.601139, abs=1e-5)
    # the test is the exact sign test of the 4 vs 1 discordant pairs: 2 * P(X >= 4 | 5, 1/2) = 0.375
    assert d["p_value"] == pytest.approx(0.375)
    with pytest.raises(ValueError):
        paired_diff_proportions(1, -1, 0, 0)


def test_share_interval_is_agresti_coull_by_hand():
    from judgebias.stats import proportion_interval, proportion_intervals

    # 2 of 5: n~ = 5 + z^2 = 8.841459, p~ = (2 + z^2 / 2) / n~ = 0.443448,
    # half-width z sqrt(p~ (1 - p~) / n~) = 0.327462 -> [0.115987, 0.770910]
    p, lo, hi = proportion_interval(2, 5)
    assert p == pytest.approx(0.4)
    assert lo == pytest.approx(0.115987, abs=1e-6) and hi == pytest.approx(0.770910, abs=1e-6)
    # 0 of 10 stays inside [0, 1]; an empty bin is NaN
    assert proportion_interval(0, 10)[1] == 0.0
    rate, low, high = proportion_intervals(np.array([2.0, 0.0]), np.array([5.0, 0.0]))
    assert low[0] == pytest.approx(lo) and np.isnan(rate[1]) and np.isnan(high[1])


def test_dbg_says_when_its_pairs_are_too_few_for_a_full_95_percent():
    import pandas as pd

    from judgebias.metrics.dbg import SMALL_PAIRS, dbg_score

    def table(pairs: int) -> pd.DataFrame:
        # the judge ("j") and one gold judge ("g") on pairs of j's response vs another model's
        rows = []
        for i in range(pairs):
            for judge, p in (("j", 0.8 if i % 3 else 0.3), ("g", 0.6 if i % 2 else 0.4)):
                rows.append({"pair_id": f"p{i}", "judge": judge, "generator_a": "j", "generator_b": "o",
                             "response_a": "x", "response_b": "y", "p_a": p})
        return pd.DataFrame(rows)
    small, enough = dbg_score(table(SMALL_PAIRS - 1), "j"), dbg_score(table(SMALL_PAIRS), "j")
    assert any(w.startswith(f"only {SMALL_PAIRS - 1} pairs") for w in small.warnings)
    assert not any("coverage benchmark" in w for w in enough.warnings)


def test_t_interval_of_a_bounded_mean_stays_in_its_range():
    # Six pairs, P(first shown wins) 0, 0, 0, 0, 0, 0.5: mean 1/12 = 0.0833, sd = sqrt(6 * (0.5/6)^2 ...)
    # by hand: deviations -1/12 (x5) and 5/12 -> var = (5/144 + 25/144) / 5 = 1/24, sd 0.2041,
    # se 0.0833, t_5 = 2.5706 -> [0.0833 - 0.2142, 0.0833 + 0.2142] = [-0.1309, 0.2975]; a probability
    # cannot be below 0, so the interval reads [0, 0.2975] (the truth is never in what was cut off).
    from judgebias.stats import mean_t

    values = np.array([0, 0, 0, 0, 0, 0.5])
    raw = mean_t(values, null=0.5)
    assert raw["ci_low"] == pytest.approx(-0.1309, abs=1e-4)
    clipped = mean_t(values, null=0.5, bounds=(0.0, 1.0))
    assert clipped["ci_low"] == 0.0 and clipped["ci_high"] == pytest.approx(0.2975, abs=1e-4)
    assert clipped["p_value"] == raw["p_value"] and clipped["value"] == pytest.approx(1 / 12)
