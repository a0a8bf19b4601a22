"""Repeat-run noise of a sampling judge: the same pair judged K times (``judgebias judge --repeats K``).

The table keeps one row per pair and judge (the first repeat is the row's own verdict, as a single
run would have written it) and the K folded verdicts in the list column ``repeat_verdicts``.
Two figures read it:

* ``repeat_stability``: per pair, the share of the K verdicts that equal the pair's most frequent
  one (1 = the judge said the same every time, 1/3 = as scattered as three labels can be); their
  mean with a t interval, and the share of pairs with all K identical (Agresti-Coull).
* ``repeat_kappa``: Fleiss' kappa (1971) with the K repeats as raters over a / b / tie: agreement
  between runs of the judge beyond what its label shares give by chance. 95% interval by an
  expanded percentile bootstrap over the pairs (as ``stats.bootstrap_mean``).

A pair with a missing verdict in some repeat is left out (counted): Fleiss' kappa needs K labels per pair.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.stats import (
    ALPHA,
    Estimate,
    InsufficientData,
    count_reasons,
    expansion,
    mean_t,
    proportion_interval,
)

REPEATS_COLUMN = "repeat_verdicts"
LABELS = ("a", "b", "tie")


def repeat_counts(rows: pd.DataFrame, what: str) -> tuple[np.ndarray, dict[str, int]]:
    """(pairs x 3 counts of a / b / tie over the repeats, exclusions) of a judge's rows."""
    if REPEATS_COLUMN not in rows.columns:
        raise InsufficientData(f"{what}: no {REPEATS_COLUMN} column (judge with --repeats K)")
    lists = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else [] for v in rows[REPEATS_COLUMN]]
    sizes = np.array([len(v) for v in lists])
    k = int(sizes.max()) if sizes.size else 0
    if k < 2:
        raise InsufficientData(f"{what}: fewer than 2 repeats per pair")
    bad = [x for v in lists for x in v if x is not None and x not in LABELS]
    if bad:
        raise ValueError(f"{what}: column {REPEATS_COLUMN!r} holds {bad[0]!r}, not 'a', 'b', 'tie' or empty")
    missing = np.array([len(v) < k or any(x is None for x in v) for v in lists])
    keep, excl = count_reasons([("missing_repeat", missing)], len(lists))
    counts = np.array(
        [[sum(x == lab for x in v) for lab in LABELS] for v, ok in zip(lists, keep, strict=True) if ok],
        dtype=float,
    ).reshape(-1, 3)
    if counts.shape[0] == 0:
        raise InsufficientData(f"{what}: no pair with all {k} repeats; excluded: {excl}")
    return counts, excl


def _fleiss(agreement: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Fleiss' kappa from the mean per-pair agreement P-bar and the label shares p_j (last axis)."""
    expected = (shares**2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected < 1, (agreement - expected) / (1 - expected), np.nan)


def verdict_stability(rows: pd.DataFrame, judge: str) -> Estimate:
    """Mean share of a pair's K verdicts equal to its most frequent one; t interval clipped to [0, 1]."""
    counts, excl = repeat_counts(rows, "repeat_stability")
    k = counts[0].sum()
    per_pair = counts.max(axis=1) / k
    d = mean_t(per_pair, null=1.0, bounds=(0.0, 1.0))
    same = int((counts.max(axis=1) == k).sum())
    share, lo, hi = proportion_interval(same, len(per_pair))
    return Estimate(
        value=d["value"],
        ci_low=d["ci_low"],
        ci_high=d["ci_high"],
        n=len(per_pair),
        exclusions=excl,
        method=f"mean over pairs of the share of the {int(k)} repeats giving the pair's most frequent "
        "verdict; t interval clipped to [0, 1]",
        details={
            "repeats": int(k),
            "all_identical": {"value": share, "ci_low": lo, "ci_high": hi, "n": len(per_pair), "count": same},
        },
    )


def repeat_kappa(rows: pd.DataFrame, judge: str, *, reps: int = 2000, seed: int = 0) -> Estimate:
    """Fleiss' kappa of the K repeats over a / b / tie, with an expanded percentile bootstrap
    interval over the pairs."""
    counts, excl = repeat_counts(rows, "repeat_kappa")
    n, k = counts.shape[0], counts[0].sum()
    if n < 2:
        raise InsufficientData("repeat_kappa: fewer than 2 pairs with all repeats")
    per_pair = ((counts**2).sum(axis=1) - k) / (k * (k - 1))
    value = float(_fleiss(per_pair.mean(), counts.sum(axis=0) / (n * k)))
    if np.isnan(value):
        raise InsufficientData(
            "repeat_kappa: every repeat of every pair gave the same label; kappa is "
            "undefined (the repeats agree perfectly: see repeat_stability)"
        )
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=reps)
    draws = _fleiss(weights @ per_pair / n, (weights @ counts) / (n * k))
    draws = draws[np.isfinite(draws)]
    low, high = np.quantile(draws, [ALPHA / 2, 1 - ALPHA / 2])
    f = expansion(n)
    return Estimate(
        value=value,
        ci_low=max(-1.0, value - f * (value - float(low))),
        ci_high=min(1.0, value + f * (float(high) - value)),
        n=n,
        exclusions=excl,
        method=f"Fleiss' kappa, the {int(k)} repeats as raters over a/b/tie; expanded percentile "
        f"bootstrap over the pairs ({reps} resamples)",
        details={"repeats": int(k), "observed_agreement": float(per_pair.mean())},
    )
