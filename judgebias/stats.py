"""Statistical building blocks shared by the bias metrics: the result record, interval estimators
(Wilson, Newcomb difference of proportions, t intervals, a vectorized bootstrap) and tests, for
independent units and, in the second half, for units nested in clusters.

One concept, past 600 lines on purpose: every clustered estimator is its independent form with a
clustered variance, and falls back to that form exactly where each unit is its own cluster, so the
two halves are the same estimators read two ways (split, each clustered function would import its
twin from the other module for that fallback).

Everything here is vectorized and works on counts or numpy arrays; nothing loops per row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

ALPHA = 0.05


class InsufficientData(ValueError):
    """The table is well formed but holds no usable rows for this metric (e.g. no pair contains the
    judge's own response). ``analyze`` records the reason as a skipped metric instead of failing."""


@dataclass(frozen=True)
class Estimate:
    """One figure with its 95% interval.

    ``n`` is the number of units (pairs or rows) the figure is computed on, ``exclusions`` counts
    the units left out, by reason; ``clusters`` how many shared units (prompts, items) those units
    fall in, ``cluster_by`` the column that says so and ``design_effect`` the ratio of the figure's
    clustered variance to its variance as if the units were independent (None: not clustered).
    ``statistic``/``p_value`` test the null of no bias (difference = 0, proportion = 0.5, ...),
    ``method`` names the estimator and interval, ``details`` holds metric-specific parts
    (confusion matrix, bins, component rates).
    """

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    exclusions: Mapping[str, int] = field(default_factory=dict)
    statistic: float | None = None
    p_value: float | None = None
    method: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    clusters: int | None = None
    design_effect: float | None = None
    cluster_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": _num(self.value), "ci_low": _num(self.ci_low), "ci_high": _num(self.ci_high),
            "n": int(self.n), "exclusions": {k: int(v) for k, v in sorted(self.exclusions.items())},
        }
        if self.statistic is not None or self.p_value is not None:
            out["statistic"] = _num(self.statistic)
            out["p_value"] = _num(self.p_value)
        if self.method:
            out["method"] = self.method
        if self.clusters is not None:
            out["clusters"] = int(self.clusters)
            out["cluster_by"] = self.cluster_by
            out["design_effect"] = _num(self.design_effect)
        out.update({k: jsonable(v) for k, v in self.details.items()})
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


def _num(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def jsonable(value: Any) -> Any:
    """Numpy scalars/arrays, tuples and NaN turned into plain JSON values (NaN/inf -> null)."""
    if isinstance(value, Estimate):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _num(value)
    return value


def wilson(count: float, nobs: int) -> tuple[float, float, float]:
    """Proportion with its 95% score interval; (nan, nan, nan) when ``nobs`` is 0.

    Wilson's interval, with Brown, Cai & DasGupta's (2001, Sec. 4.1.1) boundary modification for
    n <= 100: at 1..3 successes (or failures) the near bound becomes the one-sided Poisson bound,
    because there Wilson's coverage dips far below 95% (n = 10, p = 0.95: 0.91; the coverage
    benchmark saw 0.89 for a judge that agrees with humans on 95% of pairs). Effective, fractional
    counts (a survey design's) keep the plain score interval: the modification is defined for counts."""
    if nobs <= 0:
        return math.nan, math.nan, math.nan
    _, low, high = wilson_arrays(np.array([count], dtype=float), np.array([nobs], dtype=float))
    return count / nobs, float(low[0]), float(high[0])


def _poisson_near_bound(x: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where Brown-Cai-DasGupta modify Wilson's lower bound (integer x in 1..x*, x* = 2 for n <= 50,
    3 for 50 < n <= 100) and that bound, chi2_{2x}(alpha) / (2n) (one-sided Poisson)."""
    from scipy.stats import chi2

    whole = (x == np.round(x)) & (n == np.round(n))
    x_star = np.where(n <= 50, 2, 3)
    hit = whole & (n <= 100) & (x >= 1) & (x <= x_star)
    bound = np.where(hit, chi2.ppf(ALPHA, 2 * np.maximum(x, 1)) / (2 * np.where(n > 0, n, 1)), np.nan)
    return hit, bound


def wilson_arrays(counts: np.ndarray, nobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorized ``wilson`` intervals for many bins at once (NaN where a bin is empty)."""
    from statsmodels.stats.proportion import proportion_confint

    counts = np.asarray(counts, dtype=float)
    nobs = np.asarray(nobs, dtype=float)
    safe = np.where(nobs > 0, nobs, 1.0)
    low, high = proportion_confint(counts, safe, alpha=ALPHA, method="wilson")
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    hit, bound = _poisson_near_bound(counts, nobs)
    low = np.where(hit, np.minimum(low, bound), low)
    hit, bound = _poisson_near_bound(nobs - counts, nobs)  # the same at the upper end, by symmetry
    high = np.where(hit, np.maximum(high, 1.0 - bound), high)
    empty = nobs <= 0
    rate = np.where(empty, np.nan, counts / safe)
    return rate, np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def proportion_interval(count: float, nobs: int) -> tuple[float, float, float]:
    """A share with its 95% interval, as every single-proportion figure reports it: Agresti-Coull
    (the Wald interval of the share with two successes and two failures added, clipped to [0, 1]);
    (nan, nan, nan) when ``nobs`` is 0.

    Why not Wilson: Wilson's coverage oscillates below 93% at many (n, p) even with the boundary
    bound (exactly, over p in [0.01, 0.99]: a minimum of 0.915-0.929 for most n up to 50; 0.923 at
    n = 25, p = 0.3, which the coverage benchmark saw as 0.918 for a position flip rate).
    Agresti-Coull's minimum is 0.930 or more from n = 32 and at least 0.92 from n = 8, at a mean
    width 2-5% larger (Brown, Cai & DasGupta 2001 recommend it from n = 40)."""
    if nobs <= 0:
        return math.nan, math.nan, math.nan
    _, low, high = proportion_intervals(np.array([count], dtype=float), np.array([nobs], dtype=float))
    return count / nobs, float(low[0]), float(high[0])


def proportion_intervals(counts: np.ndarray, nobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorized ``proportion_interval`` for many bins at once (NaN where a bin is empty)."""
    from statsmodels.stats.proportion import proportion_confint

    counts = np.asarray(counts, dtype=float)
    nobs = np.asarray(nobs, dtype=float)
    safe = np.where(nobs > 0, nobs, 1.0)
    low, high = proportion_confint(counts, safe, alpha=ALPHA, method="agresti_coull")
    low, high = np.clip(np.asarray(low, dtype=float), 0, 1), np.clip(np.asarray(high, dtype=float), 0, 1)
    empty = nobs <= 0
    rate = np.where(empty, np.nan, counts / safe)
    return rate, np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def diff_proportions(count1: float, n1: int, count2: float, n2: int) -> dict[str, float]:
    """p1 - p2 of two independent proportions: Newcomb (Wilson-score) 95% interval and a
    two-sided score test of p1 == p2 (statsmodels)."""
    from statsmodels.stats.proportion import confint_proportions_2indep, test_proportions_2indep

    if n1 <= 0 or n2 <= 0:
        raise InsufficientData(f"a group is empty (n1={n1}, n2={n2}); the difference is undefined")
    low, high = confint_proportions_2indep(count1, n1, count2, n2, method="newcomb",
                                           compare="diff", alpha=ALPHA)
    with np.errstate(divide="ignore", invalid="ignore"):  # its side odds ratio divides by 0 at p = 1
        test = test_proportions_2indep(count1, n1, count2, n2, method="score", compare="diff")
    return {"value": count1 / n1 - count2 / n2, "ci_low": float(low), "ci_high": float(high),
            "statistic": _num(test.statistic), "p_value": _num(test.pvalue)}


def paired_diff_proportions(both: int, first_only: int, second_only: int, neither: int) -> dict[str, float]:
    """p1 - p2 of two proportions measured on the same units, p1 = (both + first_only) / n and
    p2 = (both + second_only) / n: Newcombe's (1998, Stat. Med. 17:2635, method 10) score interval
    from the two margins' Wilson intervals and their correlation phi (continuity-corrected when
    positive, as there), with the exact sign test of the discordant units as its test."""
    a, b, c, d = (int(v) for v in (both, first_only, second_only, neither))
    if min(a, b, c, d) < 0:
        raise ValueError(f"paired counts must be >= 0, got {(a, b, c, d)}")
    if a + b + c + d == 0:
        raise InsufficientData("no paired unit")
    diff, low, high = _paired_newcombe(a, b, c, d)
    return {"value": diff, "ci_low": low, "ci_high": high,
            "statistic": float(b - c), "p_value": sign_test(b, c)}


def mean_t(values: np.ndarray, null: float = 0.0,
           bounds: tuple[float, float] | None = None) -> dict[str, float]:
    """Mean with its t 95% interval and a one-sample t-test against ``null``. ``bounds``: what the
    mean can be (a probability, a difference of probabilities); the interval is clipped to it, which
    never drops the truth, so coverage can only rise, and no interval reads as an impossible value."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = values.size
    if n == 0:
        raise InsufficientData("no values")
    mean = float(values.mean())
    if n < 2:
        return {"value": mean, "ci_low": math.nan, "ci_high": math.nan, "statistic": math.nan,
                "p_value": math.nan}
    sd = float(values.std(ddof=1))
    se = sd / math.sqrt(n)
    q = stats.t.ppf(1 - ALPHA / 2, n - 1)
    if se == 0:
        return {"value": mean, "ci_low": mean, "ci_high": mean,
                "statistic": math.nan, "p_value": 1.0 if mean == null else 0.0}
    t = (mean - null) / se
    lo, hi = mean - q * se, mean + q * se
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return {"value": mean, "ci_low": lo, "ci_high": hi, "statistic": t,
            "p_value": float(2 * stats.t.sf(abs(t), n - 1))}


def mean_t_figure(values: np.ndarray, *, null: float | None = 0.0,
                  bounds: tuple[float, float] | None = None, method: str | None = None) -> dict[str, Any]:
    """``mean_t`` as a figure inside another figure's details: value, interval (clipped to
    ``bounds``, what the quantity can be; a t interval of a share can pass 1), n and the p-value of
    ``null`` (none when ``null`` is None: a share has no null worth testing)."""
    d = mean_t(values, null=0.0 if null is None else null, bounds=bounds)
    out = {"value": d["value"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": int(np.size(values))}
    if null is not None:
        out["p_value"] = d["p_value"]
    if method:
        out["method"] = method
    return out


def welch(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """mean(x) - mean(y) with Welch's 95% interval and t-test (unequal variances)."""
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size < 2 or y.size < 2:
        raise InsufficientData(f"Welch's test needs at least 2 values per group (got {x.size}, {y.size})")
    cm = CompareMeans(DescrStatsW(x), DescrStatsW(y))
    t, p, _df = cm.ttest_ind(usevar="unequal")
    low, high = cm.tconfint_diff(alpha=ALPHA, usevar="unequal")
    return {"value": float(x.mean() - y.mean()), "ci_low": float(low), "ci_high": float(high),
            "statistic": _num(t), "p_value": _num(p)}


def sign_test(n_plus: int, n_minus: int) -> float:
    """Two-sided exact sign test p-value (ties already removed); 1.0 when there is nothing to test."""
    from scipy.stats import binomtest

    n = int(n_plus + n_minus)
    if n == 0:
        return 1.0
    return float(binomtest(int(n_plus), n, 0.5).pvalue)


def bootstrap_mean(values: np.ndarray, *, reps: int = 2000, seed: int = 0,
                   chunk_elems: int = 20_000_000) -> tuple[float, float, np.ndarray]:
    """Expanded percentile 95% interval of the mean by resampling units with replacement.

    The plain percentile interval is too narrow in small samples: the bootstrap spread uses the
    divisor n, not n - 1, and normal rather than t tails (the coverage benchmark: 0.85 at 10 pairs,
    0.92 at 25). Hesterberg's expansion (2015, "What teachers should know about the bootstrap")
    widens each side's distance from the mean by sqrt(n / (n - 1)) * t_{n-1} / z, which tends to 1
    as n grows (1.22 at n = 10, 1.05 at n = 50, 1.01 at n = 200).

    When the values take few distinct levels (win indicators and their differences), resampling
    n units is exactly a multinomial draw over the level counts, which costs O(reps x levels)
    whatever n is. Otherwise indices are drawn in chunks so memory stays bounded.
    Returns (low, high, the bootstrap means).
    """
    values = np.asarray(values, dtype=float)
    n = values.size
    if n == 0:
        raise InsufficientData("nothing to resample")
    rng = np.random.default_rng(seed)
    levels, counts = np.unique(values, return_counts=True)
    if levels.size <= 64:
        draws = rng.multinomial(n, counts / n, size=reps)
        means = draws @ levels / n
    else:
        per = max(1, chunk_elems // n)
        parts = []
        for start in range(0, reps, per):
            k = min(per, reps - start)
            parts.append(values[rng.integers(0, n, size=(k, n))].mean(axis=1))
        means = np.concatenate(parts)
    return (*_expanded_percentiles(values, means, n), means)


def _expanded_percentiles(values: np.ndarray, means: np.ndarray, units: int) -> tuple[float, float]:
    """The bootstrap means' 2.5% and 97.5% points widened by ``expansion(units)`` about the mean of
    ``values``, never past what a mean of these values can be (the data's range)."""
    low, high = np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2])
    center, factor = float(values.mean()), expansion(units)
    return (max(center - factor * (center - float(low)), float(values.min())),
            min(center + factor * (float(high) - center), float(values.max())))


def expansion(n: int) -> float:
    """Hesterberg's small-sample expansion of a percentile bootstrap interval: sqrt(n / (n - 1))
    t_{n-1}(0.975) / z(0.975) (1 for a single unit, whose interval is a point anyway)."""
    from scipy import stats

    if n < 2:
        return 1.0
    return math.sqrt(n / (n - 1)) * float(stats.t.ppf(1 - ALPHA / 2, n - 1) / stats.norm.ppf(1 - ALPHA / 2))


def kappa(table: np.ndarray) -> dict[str, float]:
    """Cohen's kappa of a square agreement table with its 95% interval and z-test (statsmodels).

    The interval is a score (Wilson) interval of the observed agreement on kappa's effective sample
    size, mapped through kappa = (po - pe) / (1 - pe): the asymptotic Wald interval (kappa +- 1.96
    se) covered 0.43 of the time at 10 pairs and 0.77 at 25 for a judge with kappa 0.91 (a sample
    that agrees on every pair has se 0 and the interval [1, 1]), and passed 1. The effective size
    is po (1 - po) / (se (1 - pe))^2, at most n (and n when that ratio is 0/0), so the interval is
    the asymptotic one where that one is right, and stays inside [-1, 1]."""
    from statsmodels.stats.inter_rater import cohens_kappa

    table = np.asarray(table, dtype=float)
    n = table.sum()
    if n < 2:
        # One unit gives kappa 0 [0, 0] (or 1) with no information in it: say so instead.
        raise InsufficientData(f"Cohen's kappa needs at least 2 rated units, got {int(n)}")
    observed = np.trace(table) / n
    expected = float((table.sum(0) * table.sum(1)).sum() / n**2)
    if expected >= 1.0:
        # Both raters used one single category: kappa is 0/0, undefined rather than 0.
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "statistic": math.nan,
                "p_value": math.nan, "observed": observed, "expected": expected}
    with np.errstate(divide="ignore", invalid="ignore"):  # tiny tables: a zero null variance
        res = cohens_kappa(table)
    se_po = float(res["std_kappa"]) * (1.0 - expected)  # kappa's standard error on the po scale
    spread = observed * (1.0 - observed)
    n_eff = float(n) if se_po <= 0 or spread <= 0 else min(float(n), spread / se_po**2)
    _, lo, hi = wilson(observed * n_eff, n_eff)
    return {"value": float(res["kappa"]), "ci_low": max(-1.0, (lo - expected) / (1.0 - expected)),
            "ci_high": min(1.0, (hi - expected) / (1.0 - expected)), "statistic": _num(res["z_value"]),
            "p_value": _num(res["pvalue_two_sided"]), "observed": observed, "expected": expected}


def count_reasons(reasons: list[tuple[str, np.ndarray]], size: int) -> tuple[np.ndarray, dict[str, int]]:
    """Assign each unit the FIRST reason (in order) that excludes it; returns (kept mask, counts)."""
    keep = np.ones(size, dtype=bool)
    counts: dict[str, int] = {}
    for reason, mask in reasons:
        hit = keep & np.asarray(mask, dtype=bool)
        k = int(hit.sum())
        if k:
            counts[reason] = k
        keep &= ~hit
    return keep, counts


# --- Clustered inference ----------------------------------------------------------------------
# Real tables nest their units: many pairs per prompt, many criteria per item. A figure's units are
# then not independent, and a variance that treats them so is too small (1.2-1.9x on public data).
# Every figure computes its variance from the units' linearized influence values summed within
# their clusters (CR1, Liang & Zeger 1986, with the G / (G - 1) small-cluster factor) and reads its
# quantiles from t on G - 1 degrees of freedom. Where every unit is its own cluster the figure keeps
# the independent-units method the coverage benchmark checked, unchanged.

FEW_CLUSTERS = 20


@dataclass(frozen=True)
class Clusters:
    """The cluster (shared unit: a prompt, a story, a conversation) of each unit of one figure, as
    codes ``0 .. count - 1`` in the units' order, and the column that defined them (``by``;
    ``"none"`` when every unit stands alone)."""

    codes: np.ndarray
    by: str

    def __post_init__(self) -> None:
        codes = np.asarray(self.codes)
        whole = codes.size == 0 or (np.issubdtype(codes.dtype, np.integer) and codes.min() >= 0)
        if codes.ndim != 1 or not whole:
            raise ValueError("Clusters: codes must be one non-negative integer per unit")
        if not isinstance(self.by, str) or not self.by:
            raise ValueError("Clusters: by must name the clustering column (or 'none')")

    @classmethod
    def of(cls, labels: Any, by: str) -> Clusters:
        """Clusters from any labels per unit (equal labels, one cluster); a missing label is a
        cluster of its own unit (a unit with no prompt shares nothing we can see)."""
        import pandas as pd

        codes, uniques = pd.factorize(pd.Series(np.asarray(labels, dtype=object)), use_na_sentinel=True)
        codes = np.asarray(codes, dtype=np.int64)
        lone = codes < 0
        if lone.any():
            codes[lone] = len(uniques) + np.arange(int(lone.sum()))
        return cls(codes, by)

    @classmethod
    def independent(cls, n: int) -> Clusters:
        return cls(np.arange(int(n), dtype=np.int64), "none")

    def __len__(self) -> int:
        return int(np.asarray(self.codes).size)

    def subset(self, keep: np.ndarray) -> Clusters:
        """The clusters of the kept units, recoded densely."""
        kept = np.asarray(self.codes)[np.asarray(keep)]
        if kept.size == 0:
            return Clusters(np.zeros(0, dtype=np.int64), self.by)
        # the codes in order, renumbered 0.. (np.unique's inverse, without its sort: a pass)
        present = np.zeros(int(kept.max()) + 1, dtype=np.int64)
        present[kept] = 1
        return Clusters((np.cumsum(present) - 1)[kept], self.by)

    @cached_property
    def count(self) -> int:
        # cached: every figure asks several times (singletons, nested, its method), and counting
        # is a pass over the units (``Clusters`` is frozen, its codes never change)
        codes = np.asarray(self.codes)
        return int(np.bincount(codes).astype(bool).sum()) if codes.size else 0

    @property
    def singletons(self) -> bool:
        """Every unit is its own cluster: clustered and independent inference coincide."""
        return self.count == len(self)

    def sizes(self) -> np.ndarray:
        return np.bincount(np.asarray(self.codes))


@dataclass(frozen=True)
class ClusteredVariance:
    """The variance of an estimator from its units' influence values: ``se`` clustered (CR1),
    ``se_independent`` as if the units were independent, their squared ratio the design effect."""

    se: float
    se_independent: float
    clusters: int
    n: int

    @property
    def design_effect(self) -> float:
        if self.se_independent > 0:
            return (self.se / self.se_independent) ** 2
        return 1.0 if self.se == 0 else math.inf

    @property
    def df(self) -> int:
        """Degrees of freedom of the t quantile: clusters - 1."""
        return max(self.clusters - 1, 1)

    def t_quantile(self) -> float:
        from scipy import stats

        return float(stats.t.ppf(1 - ALPHA / 2, self.df))


def clustered_variance(influence: np.ndarray, clusters: Clusters) -> ClusteredVariance:
    """CR1 standard error of an estimator whose error is ``sum(influence)`` to first order (the
    influence value of unit i: (y_i - mean) / n for a mean; (y_i - R x_i) / sum(x) for a ratio
    sum(y) / sum(x)); beside it the standard error treating the units as independent, with the
    same n / (n - 1) factor, so that singleton clusters give a design effect of exactly 1.

    Worked example (tests/test_clustered.py): values 1, 1, 0, 0 in clusters {0, 0, 1, 1}: mean 1/2,
    influence +-1/8; cluster sums 1/4, -1/4; CR1 variance 2/1 * (1/16 + 1/16) = 1/4 (se 1/2);
    independent 4/3 * 4/64 = 1/12; design effect 3."""
    psi = np.asarray(influence, dtype=float)
    codes = np.asarray(clusters.codes)
    if psi.ndim != 1 or psi.size != codes.size:
        raise ValueError(f"clustered_variance: {psi.size} influence values for {codes.size} units")
    if not np.isfinite(psi).all():
        raise ValueError("clustered_variance: influence values must be finite")
    n, g = psi.size, clusters.count
    if n < 2 or g < 2:
        raise InsufficientData(f"a clustered variance needs at least 2 clusters, got {g} ({n} units)")
    totals = np.bincount(codes, weights=psi)
    var_c = g / (g - 1) * float(np.sum(totals**2))
    var_i = n / (n - 1) * float(np.sum(psi**2))
    return ClusteredVariance(math.sqrt(var_c), math.sqrt(var_i), g, n)


def mean_influence(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return (values - values.mean()) / values.size


def ratio_influence(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Influence values of sum(y) / sum(x) (a share inside a subset: y = hit and in the subset, x =
    in the subset)."""
    y, x = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    total = float(x.sum())
    if total == 0:
        raise InsufficientData("the ratio's denominator is 0")
    return (y - (float(y.sum()) / total) * x) / total


def clustered_mean_t(values: np.ndarray, clusters: Clusters, null: float = 0.0,
                     bounds: tuple[float, float] | None = None) -> dict[str, float]:
    """``mean_t`` with clustered units: CR1 standard error, t on clusters - 1 degrees of freedom;
    exactly ``mean_t`` where every unit is its own cluster. Adds ``clusters`` and ``design_effect``."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    if values.size != len(clusters):
        raise ValueError(f"clustered_mean_t: {values.size} values for {len(clusters)} units")
    if not nested(clusters) or values.size < 2:
        out = mean_t(values, null=null, bounds=bounds)
        return {**out, "clusters": clusters.count, "design_effect": 1.0}
    mean = float(values.mean())
    v = clustered_variance(mean_influence(values), clusters)
    extra = {"clusters": v.clusters, "design_effect": v.design_effect}
    if v.se == 0:
        return {"value": mean, "ci_low": mean, "ci_high": mean, "statistic": math.nan,
                "p_value": 1.0 if mean == null else 0.0, **extra}
    q, t = v.t_quantile(), (mean - null) / v.se
    lo, hi = mean - q * v.se, mean + q * v.se
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return {"value": mean, "ci_low": lo, "ci_high": hi, "statistic": t,
            "p_value": float(2 * stats.t.sf(abs(t), v.df)), **extra}


def effective_size(n: float, variance: ClusteredVariance) -> float:
    """The number of independent units worth as much as ``n`` clustered ones for a share's score
    interval: n / design effect (never more than n: a design effect under 1 is noise at these
    sizes), times (z / t_{G-1})^2 so that the interval's z reads as t on clusters - 1 degrees of
    freedom (Korn & Graubard 1998's degrees-of-freedom adjusted effective sample size)."""
    from scipy import stats

    z = float(stats.norm.ppf(1 - ALPHA / 2))
    return n / max(variance.design_effect, 1.0) * (z / variance.t_quantile()) ** 2


def clustered_proportion(hits: np.ndarray, clusters: Clusters) -> dict[str, float]:
    """A share of units with its 95% interval: ``proportion_interval`` (Agresti-Coull) at the
    effective size when the units are clustered, exactly ``proportion_interval`` when every unit is
    its own cluster."""
    hits = np.asarray(hits, dtype=bool)
    if hits.size != len(clusters):
        raise ValueError(f"clustered_proportion: {hits.size} units for {len(clusters)} cluster codes")
    n, k = hits.size, int(hits.sum())
    if n == 0:
        raise InsufficientData("no units")
    if clusters.singletons or clusters.count < 2:
        p, lo, hi = proportion_interval(k, n)
        return {"value": p, "ci_low": lo, "ci_high": hi, "clusters": clusters.count, "design_effect": 1.0}
    v = clustered_variance(mean_influence(hits), clusters)
    m = effective_size(n, v)
    _, lo, hi = proportion_interval(k / n * m, m)
    return {"value": k / n, "ci_low": lo, "ci_high": hi, "clusters": v.clusters,
            "design_effect": v.design_effect}


def cluster_bootstrap_means(values: np.ndarray, clusters: Clusters, *, reps: int = 2000,
                            seed: int = 0) -> tuple[float, float, np.ndarray]:
    """``bootstrap_mean`` resampling whole clusters: each resample draws as many clusters as
    there are, with replacement, and takes the mean of their units (a ratio of cluster sums to
    cluster sizes). Hesterberg's expansion on the number of clusters. Where every unit is its own
    cluster it is ``bootstrap_mean`` itself."""
    values = np.asarray(values, dtype=float)
    if values.size != len(clusters):
        raise ValueError(f"cluster_bootstrap_means: {values.size} values for {len(clusters)} units")
    if not nested(clusters):
        return bootstrap_mean(values, reps=reps, seed=seed)
    codes = np.asarray(clusters.codes)
    sums = np.bincount(codes, weights=values)
    sizes = np.bincount(codes).astype(float)
    g = sums.size
    rng = np.random.default_rng(seed)
    per = max(1, 20_000_000 // g)  # resamples drawn in chunks: memory bounded at many clusters
    parts = []
    for start in range(0, reps, per):
        draws = rng.multinomial(g, np.full(g, 1.0 / g), size=min(per, reps - start)).astype(float)
        parts.append((draws @ sums) / (draws @ sizes))
    means = np.concatenate(parts)
    return (*_expanded_percentiles(values, means, g), means)


FEW_CLUSTERS_NOTE = "rests on only"


def cluster_note(clusters: int, by: str, few: int = FEW_CLUSTERS) -> tuple[str, ...]:
    """The warning of a figure that rests on few clusters (its interval's own coverage is checked
    from ``few`` clusters on: ``FEW_CLUSTERS`` unless the figure's registry entry needs more)."""
    if by != "none" and 0 < clusters < few:
        return (f"{FEW_CLUSTERS_NOTE} {clusters} clusters ({by}): its interval is less reliable below "
                f"{few}",)
    return ()


def clustered_diff_proportions(hit1: np.ndarray, in1: np.ndarray, hit2: np.ndarray, in2: np.ndarray,
                               clusters: Clusters) -> dict[str, float]:
    """p1 - p2 of two shares over units of one table (p1 = hits among ``in1``, p2 among ``in2``;
    the groups may share clusters, so their covariance counts): Newcomb's interval at the
    effective sizes (each group's size over the difference's design effect, with the t on
    clusters - 1 adjustment of ``effective_size``) and a Wald t-test on the clustered standard
    error. Exactly ``diff_proportions`` (Newcomb, score test) where every unit is its own cluster."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    in1, in2 = np.asarray(in1, dtype=bool), np.asarray(in2, dtype=bool)
    h1, h2 = np.asarray(hit1, dtype=bool) & in1, np.asarray(hit2, dtype=bool) & in2
    if not (h1.size == h2.size == in1.size == in2.size == len(clusters)):
        raise ValueError("clustered_diff_proportions: hits, groups and clusters differ in length")
    n1, n2, k1, k2 = int(in1.sum()), int(in2.sum()), int(h1.sum()), int(h2.sum())
    if clusters.singletons or clusters.count < 2 or n1 == 0 or n2 == 0:
        return {**diff_proportions(k1, n1, k2, n2), "clusters": clusters.count, "design_effect": 1.0}
    from scipy import stats

    v = clustered_variance(ratio_influence(h1, in1) - ratio_influence(h2, in2), clusters)
    scale = effective_size(1.0, v)
    low, high = confint_proportions_2indep(k1 * scale, n1 * scale, k2 * scale, n2 * scale,
                                           method="newcomb", compare="diff", alpha=ALPHA)
    diff = k1 / n1 - k2 / n2
    t = diff / v.se if v.se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
    p = float(2 * stats.t.sf(abs(t), v.df)) if math.isfinite(t) else 0.0
    return {"value": diff, "ci_low": float(low), "ci_high": float(high), "statistic": _num(t),
            "p_value": p, "clusters": v.clusters, "design_effect": v.design_effect}


def clustered_share_test(hits: np.ndarray, clusters: Clusters, null: float = 0.5) -> tuple[float, float]:
    """(statistic, p-value) of share == ``null`` over clustered units: a Wald t-test on the CR1
    standard error, clusters - 1 degrees of freedom (the exact binomial test assumes independent
    units)."""
    from scipy import stats

    hits = np.asarray(hits, dtype=float)
    v = clustered_variance(mean_influence(hits), clusters)
    diff = float(hits.mean()) - null
    if v.se == 0:
        return math.nan, (1.0 if diff == 0 else 0.0)
    t = diff / v.se
    return t, float(2 * stats.t.sf(abs(t), v.df))


def clustered_welch(values: np.ndarray, group: np.ndarray, clusters: Clusters) -> dict[str, float]:
    """mean(values in ``group``) - mean(the others) over units of one table whose groups may share
    clusters: Wald t on the CR1 standard error of the difference, clusters - 1 degrees of freedom;
    exactly ``welch`` where every unit is its own cluster."""
    from scipy import stats

    values, group = np.asarray(values, dtype=float), np.asarray(group, dtype=bool)
    if not (values.size == group.size == len(clusters)):
        raise ValueError("clustered_welch: values, groups and clusters differ in length")
    if clusters.singletons:
        return {**welch(values[group], values[~group]), "clusters": clusters.count, "design_effect": 1.0}
    if group.sum() < 2 or (~group).sum() < 2:
        raise InsufficientData(f"a difference of means needs at least 2 values per group "
                               f"(got {int(group.sum())}, {int((~group).sum())})")
    diff = float(values[group].mean() - values[~group].mean())
    v = clustered_variance(ratio_influence(values * group, group) - ratio_influence(values * ~group, ~group),
                           clusters)
    extra = {"clusters": v.clusters, "design_effect": v.design_effect}
    if v.se == 0:
        return {"value": diff, "ci_low": diff, "ci_high": diff, "statistic": math.nan,
                "p_value": 1.0 if diff == 0 else 0.0, **extra}
    q, t = v.t_quantile(), diff / v.se
    return {"value": diff, "ci_low": diff - q * v.se, "ci_high": diff + q * v.se, "statistic": t,
            "p_value": float(2 * stats.t.sf(abs(t), v.df)), **extra}


def clustered_ols_slope(y: np.ndarray, x: np.ndarray, clusters: Clusters) -> dict[str, float]:
    """OLS slope of y on x with its 95% interval and t-test: HC3 where every unit is its own
    cluster, else the cluster-robust covariance (statsmodels' CR1 with its small-sample factor)
    and t on clusters - 1 degrees of freedom; ``design_effect``: the slope's clustered variance over
    its HC1 (independent, same factor) variance."""
    import statsmodels.api as sm

    X = sm.add_constant(np.asarray(x, dtype=float), has_constant="add")
    model = sm.OLS(np.asarray(y, dtype=float), X)
    if clusters.singletons:
        fit = model.fit(cov_type="HC3")
        deff = 1.0
    else:
        fit = model.fit(cov_type="cluster", cov_kwds={"groups": np.asarray(clusters.codes)}, use_t=True)
        hc1 = model.fit(cov_type="HC1")
        deff = float(fit.bse[1] ** 2 / hc1.bse[1] ** 2) if hc1.bse[1] > 0 else 1.0
    low, high = fit.conf_int(ALPHA)[1]
    return {"value": float(fit.params[1]), "ci_low": float(low), "ci_high": float(high),
            "statistic": float(fit.tvalues[1]), "p_value": float(fit.pvalues[1]),
            "clusters": clusters.count, "design_effect": deff}


def nested(clusters: Clusters) -> bool:
    """Whether a figure's units nest: some cluster holds two units and there are two clusters or
    more to estimate a clustered variance from. Otherwise every figure keeps its independent-units
    method (with a single cluster it has no other; ``cluster_fields`` then says so)."""
    return not clusters.singletons and clusters.count >= 2


def cluster_fields(result: Mapping[str, Any], clusters: Clusters,
                   warnings: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The ``Estimate`` keywords of a clustered result (``clusters``, ``design_effect`` as the
    clustered functions return them): the column, and the few-clusters note after ``warnings``."""
    g = int(result["clusters"])
    notes = cluster_note(g, clusters.by)
    if g == 1 and len(clusters) > 1:
        notes = (f"all {len(clusters)} units share one cluster ({clusters.by}): its interval treats them as "
                 "independent, which they are not; --cluster-by names another unit",)
    return {"clusters": g, "design_effect": result["design_effect"], "cluster_by": clusters.by,
            "warnings": (*warnings, *notes)}


def clustered_how(clusters: Clusters, count: int | None = None) -> str:
    """The end of a nested figure's ``method``: how many clusters of which column."""
    return f"{clusters.count if count is None else count} clusters ({clusters.by})"


def clustered_mean_figure(values: np.ndarray, clusters: Clusters, *, null: float | None = 0.0,
                          bounds: tuple[float, float] | None = None,
                          method: str | None = None) -> dict[str, Any]:
    """``mean_t_figure`` on clustered units (``clustered_mean_t``), with its clusters and design
    effect; exactly ``mean_t_figure`` plus those two where every unit is its own cluster."""
    d = clustered_mean_t(values, clusters, null=0.0 if null is None else null, bounds=bounds)
    out = {"value": d["value"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": int(np.size(values))}
    if null is not None:
        out["p_value"] = d["p_value"]
    if method:
        out["method"] = mean_how(clusters, method)
    out["clusters"], out["design_effect"] = d["clusters"], d["design_effect"]
    return out


def clustered_share_figure(hits: np.ndarray, clusters: Clusters) -> dict[str, Any]:
    """A share inside another figure's details: value, interval (``clustered_proportion``), n,
    clusters and design effect (an empty share: value None, n 0)."""
    hits = np.asarray(hits, dtype=bool)
    if hits.size == 0:
        return {"value": None, "ci_low": None, "ci_high": None, "n": 0}
    d = clustered_proportion(hits, clusters)
    return {"value": d["value"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": int(hits.size),
            "clusters": d["clusters"], "design_effect": d["design_effect"]}


def clustered_share(hits: np.ndarray, clusters: Clusters, null: float = 0.5) -> dict[str, Any]:
    """A share with its interval (``clustered_proportion``) and its test of ``null``: the exact
    binomial test (statistic: the count) where every unit is its own cluster, else the Wald t-test
    on the CR1 standard error (``clustered_share_test``). ``nested`` says which."""
    from scipy.stats import binomtest

    hits = np.asarray(hits, dtype=bool)
    d = clustered_proportion(hits, clusters)
    n, k = hits.size, int(hits.sum())
    is_nested = nested(clusters)
    if is_nested:
        statistic, p_value = clustered_share_test(hits, clusters, null)
    else:
        statistic = float(k)
        p_value = sign_test(k, n - k) if null == 0.5 else float(binomtest(k, n, null).pvalue)
    return {**d, "statistic": statistic, "p_value": p_value, "nested": is_nested}


def _paired_newcombe(a: float, b: float, c: float, d: float) -> tuple[float, float, float]:
    """Newcombe's (1998, method 10) interval of p1 - p2 from the four paired counts (may be
    fractional: effective counts), the correlation phi continuity-corrected when positive."""
    from statsmodels.stats.proportion import proportion_confint

    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = (proportion_confint(k, n, alpha=ALPHA, method="wilson") for k in (a + b, a + c))
    denom = math.sqrt(float(a + b) * (c + d) * (a + c) * (b + d))
    cross = a * d - b * c
    phi = 0.0 if denom == 0 else (max(cross - n / 2, 0.0) if cross > 0 else cross) / denom
    below = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    above = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    diff = p1 - p2
    return diff, max(diff - below, -1.0), min(diff + above, 1.0)


def clustered_paired_diff(first: np.ndarray, second: np.ndarray, clusters: Clusters) -> dict[str, Any]:
    """p1 - p2 of two shares measured on the same units (``first``, ``second``: hits per unit):
    exactly ``paired_diff_proportions`` (Newcombe's paired score interval, exact sign test) where
    every unit is its own cluster; nested, Newcombe's interval at the effective counts (each count
    times n_eff / n, ``effective_size`` of the difference's clustered variance) and the Wald t-test
    on the CR1 standard error of the mean difference."""
    from scipy import stats

    j, h = np.asarray(first, dtype=bool), np.asarray(second, dtype=bool)
    if not (j.size == h.size == len(clusters)):
        raise ValueError("clustered_paired_diff: the two hit arrays and the clusters differ in length")
    counts = [int((j & h).sum()), int((j & ~h).sum()), int((~j & h).sum()), int((~j & ~h).sum())]
    if clusters.singletons or clusters.count < 2:
        return {**paired_diff_proportions(*counts), "clusters": clusters.count, "design_effect": 1.0,
                "nested": False}
    diffs = j.astype(float) - h.astype(float)
    v = clustered_variance(mean_influence(diffs), clusters)
    scale = effective_size(1.0, v)
    value, lo, hi = _paired_newcombe(*(k * scale for k in counts))
    mean = float(diffs.mean())
    t = mean / v.se if v.se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    p = float(2 * stats.t.sf(abs(t), v.df)) if math.isfinite(t) else 0.0
    return {"value": value, "ci_low": lo, "ci_high": hi, "statistic": _num(t), "p_value": p,
            "clusters": v.clusters, "design_effect": v.design_effect, "nested": True}


def kappa_influence(first: np.ndarray, second: np.ndarray, categories: int) -> np.ndarray:
    """Influence values of Cohen's kappa = (po - pe) / (1 - pe) of two raters' labels (codes
    0 .. categories - 1) per unit: (1 / n) [(agree_i - po) / (1 - pe) + (po - 1) / (1 - pe)^2
    sum_k (r_k (1[x_i = k] - x_k) + x_k (1[y_i = k] - r_k))], x_k and r_k the two raters' shares of
    category k (the delta method of po and pe, each a smooth function of the units' means)."""
    x, y = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    n = x.size
    px = np.bincount(x, minlength=categories) / n
    py = np.bincount(y, minlength=categories) / n
    agree = (x == y).astype(float)
    po, pe = float(agree.mean()), float(px @ py)
    pe_dev = (py[x] - pe) + (px[y] - pe)  # sum_k r_k 1[x_i=k] - pe, plus its twin for y
    return ((agree - po) / (1 - pe) + (po - 1) / (1 - pe) ** 2 * pe_dev) / n


def clustered_kappa(first: np.ndarray, second: np.ndarray, clusters: Clusters,
                    categories: int = 3) -> dict[str, Any]:
    """Cohen's kappa of two raters' label codes per unit with its 95% interval: exactly ``kappa``
    (score interval on its effective size) where every unit is its own cluster; nested, the same
    interval on that effective size divided by kappa's design effect (CR1 against independent
    variance of ``kappa_influence``) with the t on clusters - 1 adjustment of ``effective_size``,
    and a Wald t-test of 0 on the CR1 standard error."""
    from scipy import stats
    from statsmodels.stats.inter_rater import cohens_kappa

    x, y = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    if not (x.size == y.size == len(clusters)):
        raise ValueError("clustered_kappa: the two label arrays and the clusters differ in length")
    table = np.bincount(x * categories + y, minlength=categories**2).reshape(categories, categories)
    k = kappa(table)
    if clusters.singletons or clusters.count < 2 or not math.isfinite(k["value"]):
        return {**k, "clusters": clusters.count, "design_effect": 1.0, "nested": False}
    v = clustered_variance(kappa_influence(x, y, categories), clusters)
    n = float(x.size)
    observed, expected = k["observed"], k["expected"]
    with np.errstate(divide="ignore", invalid="ignore"):
        res = cohens_kappa(table.astype(float))
    se_po = float(res["std_kappa"]) * (1.0 - expected)
    spread = observed * (1.0 - observed)
    n_eff = n if se_po <= 0 or spread <= 0 else min(n, spread / se_po**2)
    m = effective_size(n_eff, v)
    _, lo, hi = wilson(observed * m, m)
    t = k["value"] / v.se if v.se > 0 else math.nan
    p = float(2 * stats.t.sf(abs(t), v.df)) if math.isfinite(t) else (1.0 if k["value"] == 0 else 0.0)
    return {**k, "ci_low": max(-1.0, (lo - expected) / (1.0 - expected)),
            "ci_high": min(1.0, (hi - expected) / (1.0 - expected)), "statistic": _num(t), "p_value": p,
            "clusters": v.clusters, "design_effect": v.design_effect, "nested": True}


def share_how(clusters: Clusters, result: Mapping[str, Any]) -> str:
    """How a share's interval (``clustered_proportion``) was computed, for its ``method``."""
    if not nested(clusters):
        return "Agresti-Coull interval"
    return ("Agresti-Coull interval at the effective size (CR1 design effect, t on clusters - 1), "
            f"{clustered_how(clusters, int(result['clusters']))}")


def mean_how(clusters: Clusters, independent: str) -> str:
    """How a mean's t interval (``clustered_mean_t``) was computed: ``independent``, the method's
    words for independent units, as it is where every unit is its own cluster, else with the CR1
    standard error and the clusters named."""
    if not nested(clusters):
        return independent
    return f"{independent}, on the CR1 standard error with t on clusters - 1, {clustered_how(clusters)}"


def clustered_rate(values: np.ndarray, clusters: Clusters) -> dict[str, Any]:
    """A mean of values in [0, 1] (win credits: 1, 1/2, 0) read as a share: ``proportion_interval``
    of its sum over n where the units are independent, at the effective size where they nest."""
    values = np.asarray(values, dtype=float)
    n = values.size
    if n == 0:
        raise InsufficientData("no units")
    if not nested(clusters):
        p, lo, hi = proportion_interval(float(values.sum()), n)
        return {"value": p, "ci_low": lo, "ci_high": hi, "clusters": clusters.count, "design_effect": 1.0}
    v = clustered_variance(mean_influence(values), clusters)
    m = effective_size(n, v)
    _, lo, hi = proportion_interval(float(values.mean()) * m, m)
    return {"value": float(values.mean()), "ci_low": lo, "ci_high": hi, "clusters": v.clusters,
            "design_effect": v.design_effect}
