"""Pointwise judges against human ratings: agreement, bias and the shape of the score distribution.

Inputs are pointwise tables (``judgebias.pointwise_table``): ``score`` is the judge's (expected)
score, ``human_scores`` the raters' scores of the same response on the same scale. The human
reference of a row is the mean of its raters.

- Agreement (Zheng et al. 2023, MT-bench, Sec. 4: single-answer grading against human experts;
  Bavaresco et al. 2024, JUDGE-BENCH): Spearman's rho and Kendall's tau-b against the mean rating,
  each with a Fisher-z interval (rho: Bonett & Wright 2000's standard error sqrt((1 + r^2/2)/(n-3));
  tau: Fieller, Hartley & Pearson 1957's sqrt(0.437/(n-4))); quadratic weighted kappa (Cohen 1968)
  of the rounded judge score against the rounded mean rating, with a percentile bootstrap interval
  over items; mean absolute error with a t interval.
- Bias: mean judge - human score with a t interval (calibration before a score gates anything).
- Distribution (Stureborg et al. 2024, "LLMs are inconsistent and biased evaluators"): skew of the
  scores, the share of round numbers (multiples of 5 on a scale reaching 10) and the range used.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from judgebias.pointwise_table import human_mean
from judgebias.stats import Estimate, InsufficientData, mean_t, proportion_interval

Z95 = 1.959963984540054


def judge_rows(df: pd.DataFrame, judge: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """The judge's rows with a score; rows without one (an excluded judgment) are counted."""
    for column in ("judge", "score"):
        if column not in df.columns:
            raise ValueError(f"pointwise figures need column {column!r}")
    mine = df[df["judge"] == judge]
    if mine.empty:
        raise InsufficientData(f"no row of judge {judge!r}")
    ok = np.isfinite(mine["score"].to_numpy(dtype=float))
    if not ok.any():
        raise InsufficientData(f"no scored row of judge {judge!r}: all {len(mine)} judgment(s) excluded "
                               "(judge_error says why)")
    excl = {"no_score": int((~ok).sum())} if (~ok).any() else {}
    return mine[ok].reset_index(drop=True), excl


def with_human(
    df: pd.DataFrame, judge: str, minimum: int = 1
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(judge scores, mean human scores, exclusions) over the judge's rows with both."""
    rows, excl = judge_rows(df, judge)
    if "human_scores" not in rows.columns:
        raise InsufficientData("no human_scores column")
    h = human_mean(rows)
    ok = np.isfinite(h)
    if (~ok).any():
        excl = {**excl, "no_human_score": int((~ok).sum())}
    s = rows["score"].to_numpy(dtype=float)[ok]
    if ok.sum() < minimum:
        raise InsufficientData(
            f"{int(ok.sum())} row(s) of judge {judge!r} with a human score; need {minimum}"
        )
    return s, h[ok], excl


def half_up(x: np.ndarray) -> np.ndarray:
    """Rounding as a rater reads 7.5 (up), not numpy's round-half-to-even."""
    return np.floor(np.asarray(x, dtype=float) + 0.5)


def _fisher(r: float, se: float) -> tuple[float, float]:
    z = math.atanh(max(min(r, 1 - 1e-12), -1 + 1e-12))
    return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)


def _rank_with_human(df: pd.DataFrame, judge: str, minimum: int, correlate, se, method: str) -> Estimate:
    """A rank correlation of the judge's scores with the mean human score (``correlate``: scipy's
    function giving the statistic and its p-value), with a Fisher-z interval of standard error
    ``se(statistic, n)``."""
    s, h, excl = with_human(df, judge, minimum=minimum)
    if np.ptp(s) == 0 or np.ptp(h) == 0:
        raise InsufficientData("the judge's or the humans' scores are all equal: no rank correlation")
    r, p = correlate(s, h)
    low, high = _fisher(float(r), se(float(r), len(s)))
    return Estimate(float(r), low, high, len(s), excl, statistic=float(r), p_value=float(p), method=method)


def score_spearman_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Spearman's rho of the judge's scores with the mean human score; Fisher-z interval with
    Bonett-Wright's standard error; p-value of scipy's test of rho = 0."""
    from scipy.stats import spearmanr

    return _rank_with_human(df, judge, 4, spearmanr, lambda r, n: math.sqrt((1 + r * r / 2) / (n - 3)),
                            "Spearman rho vs mean human score, Fisher-z interval (Bonett-Wright SE)")


def score_kendall_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Kendall's tau-b with the mean human score; Fisher-z interval with SE sqrt(0.437/(n-4))."""
    from scipy.stats import kendalltau

    return _rank_with_human(df, judge, 5, kendalltau, lambda _, n: math.sqrt(0.437 / (n - 4)),
                            "Kendall tau-b vs mean human score, Fisher-z interval (Fieller et al. SE)")


def quadratic_kappa(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Quadratic weighted kappa of integer ratings, along the last axis (so a bootstrap's rows at once).

    With weights (i - j)^2 the expected disagreement sum_ij w_ij r_i c_j / n is
    sum x^2 + sum y^2 - 2 sum x sum y / n, the observed one sum (x - y)^2: no confusion matrix."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = x.shape[-1]
    observed = ((x - y) ** 2).sum(-1)
    expected = (x * x).sum(-1) + (y * y).sum(-1) - 2 * x.sum(-1) * y.sum(-1) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(expected > 0, 1.0 - observed / np.where(expected > 0, expected, 1.0), np.nan)


def score_kappa_human(df: pd.DataFrame, judge: str, *, reps: int = 2000, seed: int = 0) -> Estimate:
    """Quadratic weighted kappa of the rounded judge score against the rounded mean human score,
    with a percentile bootstrap interval over items."""
    s, h, excl = with_human(df, judge, minimum=2)
    x, y = half_up(s), half_up(h)
    value = float(quadratic_kappa(x, y))
    if math.isnan(value):
        raise InsufficientData("the rounded scores are constant and equal: kappa undefined")
    idx = np.random.default_rng(seed).integers(0, len(x), size=(reps, len(x)))
    boot = quadratic_kappa(x[idx], y[idx])
    boot = boot[np.isfinite(boot)]
    low, high = np.quantile(boot, [0.025, 0.975]) if boot.size else (math.nan, math.nan)
    return Estimate(
        value,
        float(low),
        float(high),
        len(x),
        excl,
        method=f"quadratic weighted kappa, rounded (half up) scores, percentile bootstrap "
        f"({reps} resamples, seed {seed})",
    )


def score_mae_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Mean absolute difference of the judge's score and the mean human score (t interval)."""
    s, h, excl = with_human(df, judge, minimum=1)
    d = mean_t(np.abs(s - h))
    return Estimate(
        d["value"], d["ci_low"], d["ci_high"], len(s), excl, method="mean |judge - mean human|, t interval"
    )


def score_bias_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Mean of judge score - mean human score over the judge's rated items (t interval, t-test of 0):
    above 0, the judge scores higher than people do."""
    s, h, excl = with_human(df, judge, minimum=1)
    d = mean_t(s - h)
    return Estimate(
        d["value"],
        d["ci_low"],
        d["ci_high"],
        len(s),
        excl,
        statistic=d["statistic"],
        p_value=d["p_value"],
        method="mean (judge - mean human score), one-sample t",
    )


def skew_se(n: int) -> float:
    """Standard error of the adjusted sample skewness under normality."""
    return math.sqrt(6.0 * n * (n - 1) / ((n - 2) * (n + 1) * (n + 3)))


def score_distribution(df: pd.DataFrame, judge: str) -> Estimate:
    """Skewness of the judge's scores (adjusted Fisher-Pearson, normal interval with the skew's
    standard error), with the share of round scores and the range of the scale used in details.

    Round scores: the most probable score (``score_argmax``) a multiple of 5, on scales that reach
    10 (5 and 10 of 1..10: 2 of 10 scores, a share of 0.2 under a flat use of the scale), with an
    Agresti-Coull interval; on shorter scales there is no round number to prefer."""
    from scipy.stats import skew

    rows, excl = judge_rows(df, judge)
    if len(rows) < 3:
        raise InsufficientData(f"{len(rows)} scored row(s) of judge {judge!r}; the skew needs 3")
    s = rows["score"].to_numpy(dtype=float)
    lo, hi = int(rows["scale_min"].min()), int(rows["scale_max"].max())
    if rows["scale_min"].nunique() > 1 or rows["scale_max"].nunique() > 1:
        raise InsufficientData(f"judge {judge!r} scored on more than one scale; split the table by scale")
    whole = half_up(rows["score_argmax"].to_numpy(dtype=float) if "score_argmax" in rows else s)
    whole = np.where(np.isfinite(whole), whole, half_up(s))
    details: dict = {
        "used_min": float(whole.min()),
        "used_max": float(whole.max()),
        "levels_used": int(np.unique(whole).size),
        "levels": hi - lo + 1,
        "mean": float(s.mean()),
    }
    if hi >= 10:
        round_set = [k for k in range(lo, hi + 1) if k % 5 == 0]
        count = int(np.isin(whole, round_set).sum())
        p, low, high = proportion_interval(count, len(whole))
        details["round_share"] = Estimate(
            p,
            low,
            high,
            len(whole),
            method=f"share of most probable scores in {round_set}, Agresti-Coull interval",
            details={"flat_share": len(round_set) / (hi - lo + 1)},
        )
    else:
        details["round_share"] = None
    if np.ptp(s) == 0:
        value, low, high = math.nan, math.nan, math.nan
        excl = {**excl, "constant_scores": len(s)}
    else:
        value = float(skew(s, bias=False))
        se = skew_se(len(s))
        low, high = value - Z95 * se, value + Z95 * se
    return Estimate(
        value,
        low,
        high,
        len(s),
        excl,
        method="adjusted sample skewness of the scores, normal interval (SE under normality)",
        details=details,
    )
