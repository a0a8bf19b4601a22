"""How many labels a target interval needs, per design and estimator, from pilot variances.

For a figure theta = g(T) the linearised variable z_i = N * dg/dT . y_i (mean scale) drives every
design's variance:

* uniform, n of N without replacement: V = (1 - n/N) S_z^2 / n;
* stratified with Neyman allocation: V = sum_h (N_h/N)^2 (1 - n_h/N_h) S_zh^2 / n_h;
* Poisson with pi_i from the usefulness score: V = sum_i (1 - pi_i) z_i^2 / pi_i / N^2.

The pilot z uses the labels so far where a pair has them and the gold panel's prediction elsewhere
(before any label the panel stands in for humans, which a first batch corrects). PPI++ replaces z by
its residual z - lam * zhat, estimated on the labelled pairs only: without labels it is not planned.
The 95% half-width is t sqrt(V), with t on the degrees of freedom the estimate will have
(``survey.design_df``: Kish's effective number of labelled units that carry z, minus one, here
expected from the design's inclusion probabilities); the labels needed are the smallest n whose
half-width meets the target (bisection: the half-width falls as n grows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from judgebias.annotation.sampling import DESIGNS, Frame, neyman_allocation, poisson_probabilities
from judgebias.metrics import frame as F
from judgebias.metrics.human import ESTIMANDS, pair_features, population_variables
from judgebias.metrics.survey import numerical_gradient, t_quantile


def pilot(frame: Frame, table: pd.DataFrame, judge: str, figure: str, *, self_map=None, gold=None) -> dict:
    """Pilot linearised variables over the population: ``z`` (labels where known, else predictions),
    and, when at least 10 pairs carry labels, ``resid`` (PPI++ residual) on those pairs with lam."""
    feats = pair_features(table, judge, self_map=self_map, gold=gold)
    y, yhat = population_variables(feats, frame.pairs.index, figure)
    human = feats["human"].reindex(frame.pairs.index).fillna(F.MISSING).to_numpy()
    labelled = ~np.isnan(y).any(axis=0) & (human != F.MISSING)
    mixed = np.where(np.isnan(y), yhat, y)
    g = ESTIMANDS[figure].g
    totals = mixed.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if not np.isfinite(g(totals)):
            raise ValueError(f"{figure} is undefined on this population even with the gold panel's "
                             "predictions (no pair in its domain)")
    big_n = mixed.shape[1]
    grad = numerical_gradient(g, totals)
    out = {"z": big_n * (grad @ mixed), "labelled": int(labelled.sum()), "resid": None, "lam": None}
    if labelled.sum() >= 10:
        z, zh = big_n * (grad @ y[:, labelled]), big_n * (grad @ yhat[:, labelled])
        var_h = float(np.var(zh, ddof=1))
        lam = 0.0 if var_h <= 0 else float(np.clip(np.cov(z, zh, ddof=1)[0, 1] / var_h, 0, 1))
        out["resid"], out["lam"] = z - lam * zh, lam
    return out


def expected_half_width(frame: Frame, z: np.ndarray, design: str, n: int, *, labelled_only: bool = False,
                        min_prob: float | None = None) -> float:
    """95% half-width expected from ``n`` labels under ``design`` (``z`` over the whole population, or,
    with ``labelled_only``, a sample of it whose variance stands for the population's)."""
    pairs = frame.pairs
    big_n = len(pairs)
    n = min(n, big_n)
    carries = np.abs(z) > 1e-12 * max(float(np.max(np.abs(z))), 1e-300)
    if labelled_only:  # residuals known on a subsample only: their variance stands in everywhere
        s2 = float(np.var(z, ddof=1))
        return _quantile(n * float(carries.mean())) * math.sqrt(max(0.0, (1 - n / big_n) * s2 / n))
    if design == "uniform":
        v = (1 - n / big_n) * float(np.var(z, ddof=1)) / n
        return _quantile(n * float(carries.mean())) * math.sqrt(max(0.0, v))
    if design == "stratified":
        strata = pairs["stratum"].to_numpy()
        sizes = pairs.groupby("stratum").size()
        alloc = neyman_allocation(sizes, pairs.groupby("stratum")["spread"].mean(), n)
        v = 0.0
        for h, size in sizes.items():
            zh = z[strata == h]
            if alloc[h] > 0 and size > 1:
                v += (size / big_n) ** 2 * (1 - alloc[h] / size) * float(np.var(zh, ddof=1)) / alloc[h]
        pi = pd.Series(strata).map(alloc / sizes).to_numpy(dtype=float)
        return _quantile(_expected_kish(pi[carries])) * math.sqrt(max(v, 0.0))
    floor = min_prob if min_prob is not None else 0.5 * n / big_n
    pi = poisson_probabilities(pairs["score"].to_numpy(), n, floor)
    v = float(np.sum((1 - pi) * z**2 / pi)) / big_n**2
    return _quantile(_expected_kish(pi[carries])) * math.sqrt(v)


def _expected_kish(pi: np.ndarray) -> float:
    """Kish's effective number of labelled units among those that carry the variable, expected
    under inclusion probabilities ``pi``: (sum pi w)^2 / sum pi w^2 with w = 1/pi, i.e.
    count^2 / sum(1/pi). Uniform: n times the carrying share."""
    pi = pi[pi > 0]
    return float(pi.size**2 / np.sum(1.0 / pi)) if pi.size else 0.0


def _quantile(expected_units: float) -> float:
    """The interval's quantile at the expected design df (``survey.design_df``: Kish units - 1)."""
    return t_quantile(max(expected_units - 1.0, 1.0))


def labels_needed(frame: Frame, z: np.ndarray, design: str, half_width: float, **kw) -> int | None:
    """Smallest n whose expected half-width is <= ``half_width`` (None: not even with every pair)."""
    big_n = len(frame.pairs)
    low = max(2 * frame.pairs["stratum"].nunique(), 2) if design == "stratified" else 2
    if low > big_n or expected_half_width(frame, z, design, big_n, **kw) > half_width:
        return None
    hi = big_n
    while low < hi:
        mid = (low + hi) // 2
        if expected_half_width(frame, z, design, mid, **kw) <= half_width:
            hi = mid
        else:
            low = mid + 1
    return low


def plan(frame: Frame, table: pd.DataFrame, judge: str, figure: str, *, half_width: float | None,
         budgets: Sequence[int] = (), self_map=None, gold=None) -> pd.DataFrame:
    """One row per (design, estimator): labels needed for ``half_width`` and the half-width expected at
    each budget. PPI++ rows appear once at least 10 pairs carry labels."""
    p = pilot(frame, table, judge, figure, self_map=self_map, gold=gold)
    return plan_rows(frame, p, judge, figure, half_width=half_width, budgets=budgets)


def plan_rows(frame: Frame, p: dict, judge: str, figure: str, *, half_width: float | None,
              budgets: Sequence[int] = ()) -> pd.DataFrame:
    """The plan of a pilot ``p`` (``pilot``'s keys; the rating loop's pilot gives the same). A pilot
    with ``hajek_labelled_only`` has Hájek's ``z`` on the labelled units only (nothing stands in for
    a label elsewhere): planned as if uniform, like PPI++, and the other designs say why not."""
    rows = []
    sample_only = bool(p.get("hajek_labelled_only"))
    for design in DESIGNS:
        for estimator, z, kw in (("Hájek", p["z"], {"labelled_only": True} if sample_only else {}),
                                 ("PPI++", p["resid"], {"labelled_only": True})):
            if z is None or (kw and design != "uniform" and estimator == "PPI++"):
                continue  # PPI++ residuals are known on labelled units only: planned as if uniform
            row = {"figure": figure, "judge": judge, "design": design, "estimator": estimator,
                   "population_size": len(frame.pairs), "pilot_labels": p["labelled"]}
            if estimator == "PPI++":
                row["lambda"] = p["lam"]
            if kw and design != "uniform":
                row["note"] = p.get("why_uniform_only", "labels known on a sample only: planned as uniform")
                rows.append(row)
                continue
            try:
                if half_width is not None:
                    row["labels_for_target"] = labels_needed(frame, z, design, half_width, **kw)
                for b in budgets:
                    row[f"half_width_at_{b}"] = expected_half_width(frame, z, design, b, **kw)
            except ValueError as exc:  # e.g. a budget below 2 per stratum
                row["note"] = str(exc)
            rows.append(row)
    return pd.DataFrame(rows)
