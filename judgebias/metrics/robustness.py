"""What a perturbation does to a judge (CALM, Ye et al. 2024): robustness rate and shift.

Input: one row per (judge, pair, perturbation) with the judge's folded result before and after
one side was perturbed (``judgebias.probes``): columns ``judge``, ``pair_id``, ``perturbation``,
``perturbed_side`` ("a"/"b"), ``verdict_before``, ``verdict_after`` ("a"/"b"/"tie"/None) and,
for judges with probabilities, ``p_a_before``, ``p_a_after``.

* robustness rate: share of pairs whose verdict is unchanged (CALM's robustness rate), with a
  Agresti-Coull interval; population: the pairs with a verdict both before and after.
* shift toward the perturbed side: mean of P(perturbed side) after minus before, with a t interval
  and a t-test against 0; P(side) is P(A) for side a and 1 - P(A) for side b. Verdict-only judges
  count a verdict as 1 / 0 (1/2 for a tie). > 0: the perturbation helps the side it was added to.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.metrics.frame import column_clusters, require, rows_of
from judgebias.stats import (
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_mean_t,
    clustered_proportion,
    mean_how,
    share_how,
)

REQUIRED = ("judge", "pair_id", "perturbation", "perturbed_side", "verdict_before", "verdict_after")
_VOTE = {"a": 1.0, "b": 0.0, "tie": 0.5}


def _rows(df: pd.DataFrame, judge: str, perturbation: str, what: str) -> pd.DataFrame:
    require(df, REQUIRED, what)
    bad = ~df["perturbed_side"].isin(["a", "b"])
    if bad.any():
        row = df.index[bad.to_numpy()][0]
        raise ValueError(f"{what}: row {row}: perturbed_side must be 'a' or 'b', got "
                         f"{df.loc[row, 'perturbed_side']!r}")
    for col in ("verdict_before", "verdict_after"):
        odd = df[col].notna() & ~df[col].isin(list(_VOTE))
        if odd.any():
            row = df.index[odd.to_numpy()][0]
            raise ValueError(f"{what}: row {row}: {col} must be a, b, tie or empty, got {df.loc[row, col]!r}")
    return rows_of(df, what, judge, "perturbation", perturbation, "pair_id")


def robustness_rate(df: pd.DataFrame, judge: str, perturbation: str) -> Estimate:
    """Share of pairs whose verdict the perturbation left unchanged; details count the changes
    toward and away from the perturbed side and to or from a tie."""
    rows = _rows(df, judge, perturbation, "robustness_rate")
    before, after = rows["verdict_before"], rows["verdict_after"]
    usable = before.notna() & after.notna()
    excl = {"no_verdict_before": int(before.isna().sum()),
            "no_verdict_after": int((before.notna() & after.isna()).sum())}
    excl = {k: v for k, v in excl.items() if v}
    n = int(usable.sum())
    if n == 0:
        raise InsufficientData(f"no pair with a verdict before and after; excluded: {excl}")
    b, a = before[usable].to_numpy(), after[usable].to_numpy()
    side = rows.loc[usable, "perturbed_side"].to_numpy()
    same = int((b == a).sum())
    clusters = column_clusters(rows).subset(usable.to_numpy())
    d = clustered_proportion(b == a, clusters)
    rate, lo, hi = d["value"], d["ci_low"], d["ci_high"]
    changed = b != a
    toward = int((changed & (a == side)).sum())
    away = int((changed & (b == side)).sum())
    return Estimate(value=rate, ci_low=lo, ci_high=hi, n=n, exclusions=excl,
                    method="share of unchanged verdicts; " + share_how(clusters, d),
                    details={"unchanged": same, "changed_toward_perturbed": toward,
                             "changed_away_from_perturbed": away,
                             "changed_other": int(changed.sum()) - toward - away,
                             "population": f"pairs judged by {judge} before and after {perturbation}"},
                    **cluster_fields(d, clusters))


def perturbation_shift(df: pd.DataFrame, judge: str, perturbation: str) -> Estimate:
    """Mean change of the perturbed side's probability (or vote), with a t interval and test."""
    rows = _rows(df, judge, perturbation, "perturbation_shift")
    side_a = (rows["perturbed_side"] == "a").to_numpy()
    has_p = "p_a_before" in rows.columns and "p_a_after" in rows.columns
    if has_p:
        pb = pd.to_numeric(rows["p_a_before"], errors="coerce").to_numpy(dtype=float)
        pa = pd.to_numeric(rows["p_a_after"], errors="coerce").to_numpy(dtype=float)
        if not (np.isfinite(pb) & np.isfinite(pa)).any():
            has_p = False
    if not has_p:
        pb = rows["verdict_before"].map(_VOTE).to_numpy(dtype=float)
        pa = rows["verdict_after"].map(_VOTE).to_numpy(dtype=float)
    ok = np.isfinite(pb) & np.isfinite(pa)
    excl = {"missing_before_or_after": int((~ok).sum())} if (~ok).any() else {}
    if not ok.any():
        raise InsufficientData(f"no pair with a probability or verdict before and after; excluded: {excl}")
    shift = np.where(side_a, pa - pb, pb - pa)[ok]
    clusters = column_clusters(rows).subset(ok)
    d = clustered_mean_t(shift, clusters, bounds=(-1.0, 1.0))
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(ok.sum()),
                    exclusions=excl, statistic=d["statistic"], p_value=d["p_value"],
                    method=("mean P(perturbed side) after - before" if has_p else
                            "mean vote for the perturbed side after - before (no probabilities)")
                    + "; " + mean_how(clusters, "t interval clipped to [-1, 1], one-sample t-test"),
                    details={"scale": "probability" if has_p else "vote",
                             "population": f"pairs judged by {judge} before and after {perturbation}"},
                    **cluster_fields(d, clusters))
