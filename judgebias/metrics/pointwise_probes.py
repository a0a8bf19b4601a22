"""What a scoring perturbation does to a pointwise judge (Li et al. 2025; Xu et al. 2026): the rate
of unchanged scores and the mean score shift.

Input (``probe_scores``): one row per (judge, probe, item) with the judge's score of the same
response under the probe's baseline and its variant, the variant already on the baseline's scale:
columns ``judge``, ``probe``, ``item_id``, ``score_before``, ``score_after`` (expected scores) and
``level_before``, ``level_after`` (the most probable score, the variant's mapped and rounded half up).

* unchanged rate: share of items whose most probable score is the same (Agresti-Coull interval);
  population: the items scored under both.
* score shift: mean of score_after - score_before (expected scores), t interval and one-sample
  t-test of 0. > 0: the variant scores the same responses higher.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from judgebias.metrics.frame import require, rows_of
from judgebias.metrics.pointwise import half_up
from judgebias.stats import Estimate, InsufficientData, mean_t, proportion_interval

REQUIRED = ("judge", "probe", "item_id", "score_before", "score_after", "level_before", "level_after")


def probe_scores(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    judge: str,
    probe: str,
    to_base: Callable[[float], float] = float,
) -> pd.DataFrame:
    """The rows of ``REQUIRED`` from two pointwise tables of one judge (baseline, variant) joined
    on ``item_id``; ``to_base`` maps a variant score onto the baseline's scale. An item missing
    from either side keeps NaN there (the figures count it)."""
    for what, df in (("before", before), ("after", after)):
        missing = [c for c in ("item_id", "score") if c not in df.columns]
        if missing:
            raise ValueError(f"probe_scores: the {what} table has no column(s) {missing}")

    def side(df: pd.DataFrame, mapped: bool) -> pd.DataFrame:
        score = pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=float)
        arg = (
            pd.to_numeric(df["score_argmax"], errors="coerce").to_numpy(dtype=float)
            if "score_argmax" in df.columns
            else score
        )
        if mapped:
            score = np.array([to_base(x) for x in score], dtype=float)
            arg = np.array([to_base(x) for x in arg], dtype=float)
        return pd.DataFrame(
            {"item_id": df["item_id"].astype(str).to_numpy(), "score": score, "level": half_up(arg)}
        )

    rows = side(before, False).merge(
        side(after, True), on="item_id", how="outer", suffixes=("_before", "_after")
    )
    return rows.assign(judge=judge, probe=probe)[list(REQUIRED)]


def _rows(df: pd.DataFrame, judge: str, probe: str, what: str) -> pd.DataFrame:
    require(df, REQUIRED, what)
    return rows_of(df, what, judge, "probe", probe, "item_id")


def _paired(rows: pd.DataFrame, before: str, after: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The before and after numbers, which items have both, and the exclusions of the others."""
    b = pd.to_numeric(rows[before], errors="coerce").to_numpy(dtype=float)
    a = pd.to_numeric(rows[after], errors="coerce").to_numpy(dtype=float)
    ok_b, ok_a = np.isfinite(b), np.isfinite(a)
    excl = {"no_score_before": int((~ok_b).sum()), "no_score_after": int((ok_b & ~ok_a).sum())}
    return b, a, ok_b & ok_a, {k: v for k, v in excl.items() if v}


def unchanged_rate(df: pd.DataFrame, judge: str, probe: str) -> Estimate:
    """Share of items whose most probable score the variant left unchanged; details count the
    moves up and down."""
    rows = _rows(df, judge, probe, "unchanged_rate")
    b, a, ok, excl = _paired(rows, "level_before", "level_after")
    n = int(ok.sum())
    if n == 0:
        raise InsufficientData(f"no item scored under both baseline and variant; excluded: {excl}")
    same = int((a[ok] == b[ok]).sum())
    rate, lo, hi = proportion_interval(same, n)
    return Estimate(
        value=rate,
        ci_low=lo,
        ci_high=hi,
        n=n,
        exclusions=excl,
        method="share of unchanged most probable scores; Agresti-Coull interval",
        details={
            "unchanged": same,
            "moved_up": int((a[ok] > b[ok]).sum()),
            "moved_down": int((a[ok] < b[ok]).sum()),
            "population": f"responses scored by {judge} under both sides of {probe}",
        },
    )


def score_shift(df: pd.DataFrame, judge: str, probe: str) -> Estimate:
    """Mean expected score under the variant minus under the baseline (baseline's scale), with a t
    interval and a t-test of 0."""
    rows = _rows(df, judge, probe, "score_shift")
    b, a, ok, excl = _paired(rows, "score_before", "score_after")
    if not ok.any():
        raise InsufficientData(f"no item scored under both baseline and variant; excluded: {excl}")
    d = mean_t(a[ok] - b[ok])
    return Estimate(
        value=d["value"],
        ci_low=d["ci_low"],
        ci_high=d["ci_high"],
        n=int(ok.sum()),
        exclusions=excl,
        statistic=d["statistic"],
        p_value=d["p_value"],
        method="mean expected score variant - baseline (baseline's scale); t interval, one-sample t-test",
        details={"population": f"responses scored by {judge} under both sides of {probe}"},
    )
