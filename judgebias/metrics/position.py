"""Position consistency: does the verdict survive swapping the two responses?

Per-order choices come from p_a_ab / p_a_ba (> 0.5 = A; p_a_ba is already mapped back to the
original A) or, for verdict-only judges, from verdict_ab / verdict_ba.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.stats import (
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_mean_figure,
    clustered_mean_t,
    clustered_proportion,
    clustered_share_figure,
    count_reasons,
    mean_how,
    share_how,
)


def order_choices(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Choice codes (original terms) in the A-first and B-first presentations."""
    out = []
    for order in ("ab", "ba"):
        p = F.float_col(rows, f"p_a_{order}")
        col = f"verdict_{order}"
        verdict = F.label_codes(rows[col], col) if col in rows.columns else \
            np.full(len(rows), F.MISSING, dtype=np.int8)
        out.append(F.choice_codes(p, verdict))
    return out[0], out[1]


def _both_orders(df: pd.DataFrame, judge: str, what: str):
    """The judge's rows, which of them were judged in both orders, the exclusions, and the choice
    codes of the kept rows in the A-first and B-first presentations."""
    F.require(df, ["judge"], what)
    rows = F.judge_rows(df, judge, what)
    ab, ba = order_choices(rows)
    keep, excl = count_reasons([("missing_order", (ab == F.MISSING) | (ba == F.MISSING))], len(rows))
    if not keep.any():
        raise InsufficientData("no pair judged in both presentation orders (p_a_ab/p_a_ba or verdict_ab/ba)")
    return rows, keep, excl, ab[keep], ba[keep]


def position_flip_rate(df: pd.DataFrame, judge: str) -> Estimate:
    """Share of pairs whose choice flips between A and B when the order is swapped (Agresti-Coull interval).
    ``details.inconsistent_rate`` also counts a tie in one order against a choice in the other."""
    rows, keep, excl, a, b = _both_orders(df, judge, "position_flip_rate")
    n = int(keep.sum())
    flipped = ((a == F.A) & (b == F.B)) | ((a == F.B) & (b == F.A))
    clusters = F.clusters(rows, keep)
    d = clustered_proportion(flipped, clusters)
    ir = clustered_share_figure(a != b, clusters)
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n, exclusions=excl,
                    method="share of pairs with A/B flipped by the swap; " + share_how(clusters, d),
                    details={"flips": int(flipped.sum()), "inconsistent": int((a != b).sum()),
                             "inconsistent_rate": {k: ir[k] for k in ("value", "ci_low", "ci_high")}},
                    **cluster_fields(d, clusters))


def first_shown_wins(rows: pd.DataFrame) -> np.ndarray:
    """Per row, P(the first-shown response wins) averaged over both orders (NaN without both):
    position_bias's unit, also resampled by the run comparison (judgebias.reporting.run_compare)."""
    p_ab, p_ba = F.float_col(rows, "p_a_ab"), F.float_col(rows, "p_a_ba")
    ab, ba = order_choices(rows)
    win_ab = np.select([ab == F.A, ab == F.B, ab == F.TIE], [1.0, 0.0, 0.5], np.nan)
    first_ab = np.where(np.isnan(p_ab), win_ab, p_ab)
    # In the B-first order the first-shown response is B: P(first wins) = 1 - P(A).
    win_ba = np.select([ba == F.B, ba == F.A, ba == F.TIE], [1.0, 0.0, 0.5], np.nan)
    first_ba = np.where(np.isnan(p_ba), win_ba, 1.0 - p_ba)
    return (first_ab + first_ba) / 2


def position_bias(df: pd.DataFrame, judge: str) -> Estimate:
    """Mean P(the response shown first wins), averaged over both orders; 0.5 = no position bias.
    From probabilities: (p_a_ab + (1 - p_a_ba)) / 2 per pair; from verdicts: the first-shown
    response's win (1 / 0, tie 1/2) averaged over the two orders. t interval, t-test of 0.5."""
    F.require(df, ["judge"], "position_bias")
    rows = F.judge_rows(df, judge, "position_bias")
    first = first_shown_wins(rows)
    keep, excl = count_reasons([("missing_order", np.isnan(first))], len(rows))
    if not keep.any():
        raise InsufficientData("no pair judged in both presentation orders")
    clusters = F.clusters(rows, keep)
    d = clustered_mean_t(first[keep], clusters, null=0.5, bounds=(0.0, 1.0))
    method = "mean P(first shown wins); " + mean_how(clusters, "t interval clipped to [0, 1], t-test of 0.5")
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(keep.sum()),
                    exclusions=excl, statistic=d["statistic"], p_value=d["p_value"], method=method,
                    **cluster_fields(d, clusters))


# The nine (A-first choice, B-first choice) outcomes, in original terms. In the B-first order the
# first-shown response is B, so (a, b) means "the first-shown response won both times" (primacy).
_OUTCOMES = {
    (F.A, F.A): "a_a", (F.B, F.B): "b_b", (F.TIE, F.TIE): "tie_tie",
    (F.A, F.B): "primacy_flip", (F.B, F.A): "recency_flip",
    (F.A, F.TIE): "a_tie", (F.TIE, F.A): "tie_a", (F.B, F.TIE): "b_tie", (F.TIE, F.B): "tie_b",
}


def position_consistency(df: pd.DataFrame, judge: str) -> Estimate:
    """Position consistency (Shi et al. 2024, "Judging the judges"): the share of pairs whose choice
    is the same in both presentation orders, a tie against a choice counting as inconsistent (Agresti-Coull
    interval). ``details`` holds every outcome's count (``outcomes``), the flips of any kind (A<->B
    and choice<->tie), the primacy/recency balance and, with probabilities, the mean P(A) shift.

    Balance: per pair +1 when the second-shown response won in both orders (recency), -1 when the
    first-shown did (primacy), 0 otherwise; its mean (t interval, t-test of 0) reads like Shi et
    al.'s preference fairness without their normalisation: 0 = no side favoured, -1 = every pair
    decided by being shown first.
    Mean P(A) shift: p_a_ab - p_a_ba, what moving A from second to first adds to its probability."""
    rows, keep, excl, a, b = _both_orders(df, judge, "position_consistency")
    n = int(keep.sum())
    outcomes = {name: int(((a == x) & (b == y)).sum()) for (x, y), name in _OUTCOMES.items()}
    consistent = outcomes["a_a"] + outcomes["b_b"] + outcomes["tie_tie"]
    clusters = F.clusters(rows, keep)
    d = clustered_proportion(a == b, clusters)
    balance = np.select([(a == F.B) & (b == F.A), (a == F.A) & (b == F.B)], [1.0, -1.0], 0.0)
    details: dict = {
        "outcomes": outcomes,
        "flips_ab": outcomes["primacy_flip"] + outcomes["recency_flip"],
        "flips_choice_tie": n - consistent - outcomes["primacy_flip"] - outcomes["recency_flip"],
        "preference_fairness": clustered_mean_figure(
            balance, clusters, bounds=(-1.0, 1.0),
            method="mean of +1 recency / -1 primacy per pair; t interval, t-test of 0"),
    }
    p_ab, p_ba = F.float_col(rows, "p_a_ab")[keep], F.float_col(rows, "p_a_ba")[keep]
    has = ~np.isnan(p_ab - p_ba)
    if has.any():
        details["mean_p_a_shift"] = clustered_mean_figure(
            (p_ab - p_ba)[has], clusters.subset(has), bounds=(-1.0, 1.0),
            method="mean of p_a_ab - p_a_ba per pair; t interval, t-test of 0")
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n, exclusions=excl,
                    method="share of pairs with the same choice in both orders (tie vs choice "
                           "inconsistent); " + share_how(clusters, d), details=details,
                    **cluster_fields(d, clusters))
