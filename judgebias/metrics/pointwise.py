"""Pointwise judges against human ratings: agreement, bias and the shape of the score distribution.

Inputs are pointwise tables (``judgebias.tables.pointwise``): ``score`` is the judge's (expected)
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

Rows nest: one item is scored on several criteria (and a prompt may have several items). Each row
belongs to a cluster, by default its item (``--cluster-by COLUMN``, ``none``); where clusters hold
several rows, intervals and tests use the clustered variance of ``judgebias.stats`` (the rank
correlations scale their Fisher-z standard error by the design effect of their influence values,
kappa resamples whole clusters), and where every row is its own cluster they are the independent
methods named above, unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from judgebias.metrics.frame import CLUSTER, CLUSTER_BY
from judgebias.stats import (
    Clusters,
    Estimate,
    InsufficientData,
    cluster_note,
    clustered_mean_t,
    clustered_proportion,
    clustered_variance,
)
from judgebias.tables.pointwise import human_mean

Z95 = 1.959963984540054
DEFAULT_CLUSTER_BY = "item_id"


def with_clusters(df: pd.DataFrame, cluster_by: str | None = None) -> pd.DataFrame:
    """The table with each row's cluster code (``_jb_cluster``): equal values of ``cluster_by``
    (default the item, so an item's criteria share a cluster), ``"none"``: every row its own.
    ValueError naming the column when the table has none of that name."""
    by = cluster_by or df.attrs.get(CLUSTER_BY) or DEFAULT_CLUSTER_BY
    if not isinstance(by, str) or not by.strip():
        raise ValueError(f"cluster_by: expected a column name or 'none', got {by!r}")
    if CLUSTER in df.columns and df.attrs.get(CLUSTER_BY) == by:
        return df
    if by == "none":
        codes = np.arange(len(df), dtype=np.int64)
    elif by not in df.columns:
        raise ValueError(f"cluster_by: the pointwise table has no column {by!r} to cluster by "
                         f"(columns: {', '.join(map(str, df.columns))}; 'none' treats rows as independent)")
    else:
        codes = Clusters.of(df[by].to_numpy(dtype=object), by).codes
    out = df.assign(**{CLUSTER: codes})
    out.attrs[CLUSTER_BY] = by
    return out


def row_clusters(rows: pd.DataFrame, keep: np.ndarray | None = None) -> Clusters:
    """The clusters of a judge's rows (``judge_rows``' output; ``keep``: the rows a figure uses)."""
    out = Clusters(rows[CLUSTER].to_numpy(dtype=np.int64), rows.attrs.get(CLUSTER_BY, DEFAULT_CLUSTER_BY))
    return out if keep is None else out.subset(np.asarray(keep, dtype=bool))


def clustered(est: Estimate, clusters: Clusters, design_effect: float) -> Estimate:
    """``est`` with its clusters, design effect and the few-clusters warning attached."""
    import dataclasses

    return dataclasses.replace(est, clusters=clusters.count, design_effect=design_effect,
                               cluster_by=clusters.by,
                               warnings=est.warnings + cluster_note(clusters.count, clusters.by))


def judge_rows(df: pd.DataFrame, judge: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """The judge's rows with a score, each with its cluster (``with_clusters``); rows without a
    score (an excluded judgment) are counted."""
    for column in ("judge", "score"):
        if column not in df.columns:
            raise ValueError(f"pointwise figures need column {column!r}")
    df = with_clusters(df)
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
    s, h, excl, _ = with_human_clusters(df, judge, minimum)
    return s, h, excl


def with_human_clusters(
    df: pd.DataFrame, judge: str, minimum: int = 1
) -> tuple[np.ndarray, np.ndarray, dict[str, int], Clusters]:
    """``with_human`` and the clusters of those rows."""
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
    return s, h[ok], excl, row_clusters(rows, ok)


def half_up(x: np.ndarray) -> np.ndarray:
    """Rounding as a rater reads 7.5 (up), not numpy's round-half-to-even."""
    return np.floor(np.asarray(x, dtype=float) + 0.5)


def _fisher(r: float, se: float) -> tuple[float, float]:
    z = math.atanh(max(min(r, 1 - 1e-12), -1 + 1e-12))
    return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)


def spearman_influence(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Influence values of Spearman's rho as the Pearson correlation of the ranks (the ranks taken
    as given): (zx zy - r (zx^2 + zy^2) / 2) / n with zx, zy the standardized ranks."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    zx, zy = (rx - rx.mean()) / rx.std(), (ry - ry.mean()) / ry.std()
    r = float(np.mean(zx * zy))
    return (zx * zy - r * (zx**2 + zy**2) / 2) / x.size


KENDALL_PAIRS = 400_000_000  # beyond n^2 of this, Kendall's design effect is read from Spearman's


def kendall_influence(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Influence values of Kendall's tau as a U-statistic: 2 (c_i - tau) / n, c_i the mean
    concordance sign(x_i - x_j) sign(y_i - y_j) of unit i with the others (computed in blocks)."""
    n = x.size
    c = np.empty(n)
    step = max(1, 20_000_000 // n)
    for start in range(0, n, step):
        sx = np.sign(x[start:start + step, None] - x[None, :])
        sy = np.sign(y[start:start + step, None] - y[None, :])
        c[start:start + step] = (sx * sy).sum(axis=1) / (n - 1)
    return 2 * (c - c.mean()) / n


def _rank_with_human(df: pd.DataFrame, judge: str, minimum: int, correlate, se, method: str,
                     influence) -> Estimate:
    """A rank correlation of the judge's scores with the mean human score (``correlate``: scipy's
    function giving the statistic and its p-value), with a Fisher-z interval of standard error
    ``se(statistic, n)``; on clustered rows that standard error times the square root of the
    design effect of the correlation's ``influence`` values (at least 1), t quantiles on clusters - 1
    degrees of freedom and a Wald test on the same scale."""
    from scipy import stats

    s, h, excl, clusters = with_human_clusters(df, judge, minimum=minimum)
    if np.ptp(s) == 0 or np.ptp(h) == 0:
        raise InsufficientData("the judge's or the humans' scores are all equal: no rank correlation")
    r, p = correlate(s, h)
    if clusters.singletons or clusters.count < 3:
        low, high = _fisher(float(r), se(float(r), len(s)))
        est = Estimate(float(r), low, high, len(s), excl, statistic=float(r), p_value=float(p), method=method)
        return clustered(est, clusters, 1.0)
    if influence is kendall_influence and s.size**2 > KENDALL_PAIRS:
        influence, method = spearman_influence, f"{method}; design effect from Spearman's influence values"
    v = clustered_variance(influence(s, h), clusters)
    se_z = se(float(r), len(s)) * math.sqrt(max(v.design_effect, 1.0))
    q = v.t_quantile()
    z = math.atanh(max(min(float(r), 1 - 1e-12), -1 + 1e-12))
    t = z / se_z
    est = Estimate(float(r), math.tanh(z - q * se_z), math.tanh(z + q * se_z), len(s), excl,
                   statistic=float(r), p_value=float(2 * stats.t.sf(abs(t), v.df)),
                   method=f"{method} x sqrt(design effect), t on {v.clusters - 1} df "
                          f"({clusters.by} clusters)")
    return clustered(est, clusters, v.design_effect)


def score_spearman_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Spearman's rho of the judge's scores with the mean human score; Fisher-z interval with
    Bonett-Wright's standard error; p-value of scipy's test of rho = 0."""
    from scipy.stats import spearmanr

    return _rank_with_human(df, judge, 4, spearmanr, lambda r, n: math.sqrt((1 + r * r / 2) / (n - 3)),
                            "Spearman rho vs mean human score, Fisher-z interval (Bonett-Wright SE)",
                            spearman_influence)


def score_kendall_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Kendall's tau-b with the mean human score; Fisher-z interval with SE sqrt(0.437/(n-4))."""
    from scipy.stats import kendalltau

    return _rank_with_human(df, judge, 5, kendalltau, lambda _, n: math.sqrt(0.437 / (n - 4)),
                            "Kendall tau-b vs mean human score, Fisher-z interval (Fieller et al. SE)",
                            kendall_influence)


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
    with a percentile bootstrap interval over items; on clustered rows the bootstrap resamples whole
    clusters (kappa is a function of five sums, so a resample is cluster sums weighted by how often
    each cluster was drawn)."""
    s, h, excl, clusters = with_human_clusters(df, judge, minimum=2)
    x, y = half_up(s), half_up(h)
    value = float(quadratic_kappa(x, y))
    if math.isnan(value):
        raise InsufficientData("the rounded scores are constant and equal: kappa undefined")
    method = (f"quadratic weighted kappa, rounded (half up) scores, percentile bootstrap "
              f"({reps} resamples, seed {seed})")
    if clusters.singletons:
        idx = np.random.default_rng(seed).integers(0, len(x), size=(reps, len(x)))
        boot = quadratic_kappa(x[idx], y[idx])
        design_effect = 1.0
    else:
        boot = _cluster_kappa_draws(x, y, clusters, reps, seed)
        method += f" over {clusters.count} {clusters.by} clusters"
        plain = quadratic_kappa(*(a[np.random.default_rng(seed).integers(0, len(x), size=(reps, len(x)))]
                                  for a in (x, y)))
        spread_c, spread_i = np.nanvar(boot), np.nanvar(plain)
        design_effect = float(spread_c / spread_i) if spread_i > 0 else 1.0
    boot = boot[np.isfinite(boot)]
    low, high = np.quantile(boot, [0.025, 0.975]) if boot.size else (math.nan, math.nan)
    return clustered(Estimate(value, float(low), float(high), len(x), excl, method=method),
                     clusters, design_effect)


def _cluster_kappa_draws(x: np.ndarray, y: np.ndarray, clusters: Clusters, reps: int,
                         seed: int) -> np.ndarray:
    """Quadratic kappa of ``reps`` cluster resamples, from per-cluster sums of x, y, x^2, y^2, (x-y)^2
    and the cluster sizes."""
    codes, g = np.asarray(clusters.codes), clusters.count
    sums = np.stack([np.bincount(codes, weights=w, minlength=g)
                     for w in (np.ones_like(x), x, y, x * x, y * y, (x - y) ** 2)])
    rng = np.random.default_rng(seed)
    out = []
    per = max(1, 20_000_000 // g)
    for start in range(0, reps, per):
        w = rng.multinomial(g, np.full(g, 1.0 / g), size=min(per, reps - start)).astype(float)
        n, sx, sy, sxx, syy, sd = (w @ row for row in sums)
        expected = sxx + syy - 2 * sx * sy / n
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(expected > 0, 1.0 - sd / np.where(expected > 0, expected, 1.0), np.nan))
    return np.concatenate(out)


def score_mae_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Mean absolute difference of the judge's score and the mean human score (t interval)."""
    s, h, excl, clusters = with_human_clusters(df, judge, minimum=1)
    d = clustered_mean_t(np.abs(s - h), clusters)
    return clustered(Estimate(d["value"], d["ci_low"], d["ci_high"], len(s), excl,
                              method="mean |judge - mean human|, t interval" + _on(clusters)),
                     clusters, d["design_effect"])


def _on(clusters: Clusters) -> str:
    """What a t interval's method adds on clustered rows."""
    return "" if clusters.singletons else \
        f" on the CR1 standard error, t on {clusters.count - 1} df ({clusters.by} clusters)"


def score_bias_human(df: pd.DataFrame, judge: str) -> Estimate:
    """Mean of judge score - mean human score over the judge's rated items (t interval, t-test of 0):
    above 0, the judge scores higher than people do."""
    s, h, excl, clusters = with_human_clusters(df, judge, minimum=1)
    d = clustered_mean_t(s - h, clusters)
    est = Estimate(d["value"], d["ci_low"], d["ci_high"], len(s), excl, statistic=d["statistic"],
                   p_value=d["p_value"],
                   method="mean (judge - mean human score), one-sample t" + _on(clusters))
    return clustered(est, clusters, d["design_effect"])


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
        clusters = row_clusters(rows)
        share = clustered_proportion(np.isin(whole, round_set), clusters)
        details["round_share"] = clustered(Estimate(
            share["value"],
            share["ci_low"],
            share["ci_high"],
            len(whole),
            method=f"share of most probable scores in {round_set}, Agresti-Coull interval"
            + ("" if clusters.singletons else f" at the effective size ({clusters.by} clusters)"),
            details={"flat_share": len(round_set) / (hi - lo + 1)},
        ), clusters, share["design_effect"])
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
