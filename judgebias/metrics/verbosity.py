"""Verbosity bias (Saito et al. 2023).

S = the response with more words, Y = the human choice, Y' = the judge's choice. Eq. 6:
    P(Y' = 1-Y | S = 1-Y) - P(Y' = 1-Y | S = Y)
= P(judge picks the longer | humans picked the shorter) - P(judge picks the shorter | humans picked
the longer); positive = the judge prefers verbose answers beyond what humans do. Ties (human or
judge) and pairs of equal length are excluded and counted.

Human alignment (Figure 5): agreement with the human choice binned by the word-count difference
(len_chosen - len_rejected) / len_rejected in %, 20%-wide bins from -100% to +100% (the last bin is
open: +100% and more).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.stats import (
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_diff_proportions,
    clustered_how,
    clustered_share,
    clustered_share_figure,
    count_reasons,
    nested,
    proportion_intervals,
)

BIN_EDGES = np.arange(-100.0, 100.0 + 1e-9, 20.0)  # -100, -80, ..., 100; then [100, inf)


def relative_difference(len_x: np.ndarray, len_y: np.ndarray) -> np.ndarray:
    """(len_x - len_y) / len_y in percent; +inf where len_y is 0 and len_x > 0, 0 when both are 0."""
    len_x = np.asarray(len_x, dtype=float)
    len_y = np.asarray(len_y, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 100.0 * (len_x - len_y) / len_y
    return np.where((len_x == 0) & (len_y == 0), 0.0, out)


def bin_rates(x: np.ndarray, hits: np.ndarray, edges: np.ndarray = BIN_EDGES) -> list[dict]:
    """Rate of ``hits`` per bin of ``x`` (left-closed bins, plus an open last bin [edges[-1], inf)
    and an open first bin (-inf, edges[0]) when needed), each with n and an Agresti-Coull interval."""
    x = np.asarray(x, dtype=float)
    hits = np.asarray(hits, dtype=float)
    full = np.concatenate([[-np.inf], edges, [np.inf]])
    idx = np.searchsorted(full, x, side="right") - 1
    nb = full.size - 1
    n = np.bincount(idx, minlength=nb)
    k = np.bincount(idx, weights=hits, minlength=nb)
    rate, lo, hi = proportion_intervals(k, n)
    out = []
    for i in range(nb):
        if i == 0 and n[0] == 0:
            continue  # the open first bin only shows when something falls below edges[0]
        out.append({"low": None if np.isinf(full[i]) else float(full[i]),
                    "high": None if np.isinf(full[i + 1]) else float(full[i + 1]),
                    "n": int(n[i]), "rate": rate[i], "ci_low": lo[i], "ci_high": hi[i]})
    return out


def verbosity_bias(df: pd.DataFrame, judge: str) -> Estimate:
    """Saito Eq. 6 with a Newcomb 95% interval and a score test; ``details.alignment_bins`` is the
    Figure 5 curve (the judge's agreement with humans by relative word-count difference)."""
    F.require(df, ["judge", "human", "response_a", "response_b"], "verbosity_bias")
    rows = F.judge_rows(df, judge, "verbosity_bias")
    human = rows[F.HUMAN].to_numpy()
    choice = rows[F.CHOICE].to_numpy()
    wa, wb = rows[F.WORDS_A].to_numpy(), rows[F.WORDS_B].to_numpy()
    longer = np.where(wa > wb, F.A, F.B).astype(np.int8)
    keep, excl = count_reasons([
        *F.human_reasons(human),
        *F.judge_reasons(choice),
        ("equal_length", wa == wb),
    ], len(rows))
    y, yj, s = human[keep], choice[keep], longer[keep]
    shorter_chosen = s != y
    wrong = yj != y
    n1, n2 = int(shorter_chosen.sum()), int((~shorter_chosen).sum())
    clusters = F.clusters(rows, keep)
    d = clustered_diff_proportions(wrong, shorter_chosen, wrong, ~shorter_chosen, clusters)
    p1 = clustered_share_figure(wrong[shorter_chosen], clusters.subset(shorter_chosen))
    p2 = clustered_share_figure(wrong[~shorter_chosen], clusters.subset(~shorter_chosen))
    method = "Saito Eq. 6; Newcomb interval, score test" if not nested(clusters) else \
        (f"Saito Eq. 6; Newcomb interval at the effective sizes, Wald t-test on the CR1 standard error, "
         f"{clustered_how(clusters, d['clusters'])}")

    # Figure 5 keeps equal lengths (they sit at 0%); only ties and missing labels are out.
    align_keep = np.isin(human, (F.A, F.B)) & np.isin(choice, (F.A, F.B))
    ha = human[align_keep]
    len_chosen = np.where(ha == F.A, wa[align_keep], wb[align_keep])
    len_rejected = np.where(ha == F.A, wb[align_keep], wa[align_keep])
    bins = bin_rates(relative_difference(len_chosen, len_rejected), choice[align_keep] == ha)
    return Estimate(
        value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n1 + n2, exclusions=excl,
        statistic=d["statistic"], p_value=d["p_value"],
        method=method,
        details={
            "p_longer_when_human_chose_shorter": p1,
            "p_shorter_when_human_chose_longer": p2,
            "alignment_bins": bins,
        }, **cluster_fields(d, clusters))


def human_verbosity(df: pd.DataFrame) -> Estimate:
    """How often humans prefer the longer response (one unit per pair), with the Figure 4 curve:
    P(humans pick A) by (len_A - len_B) / len_B in %. Ties and equal lengths are excluded."""
    F.require(df, ["human", "response_a", "response_b"], "human_verbosity")
    prepared = F.prepare(df)
    pair = prepared[F.PAIR].to_numpy()
    _, first = np.unique(pair, return_index=True)
    human = prepared[F.HUMAN].to_numpy()[first]
    wa, wb = prepared[F.WORDS_A].to_numpy()[first], prepared[F.WORDS_B].to_numpy()[first]
    keep, excl = count_reasons([
        *F.human_reasons(human),
        ("equal_length", wa == wb),
    ], len(first))
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData(f"no pair with a non-tie human majority and unequal lengths; excluded: {excl}")
    longer = np.where(wa > wb, F.A, F.B)
    clusters = F.clusters(prepared).subset(first).subset(keep)
    d = clustered_share(human[keep] == longer[keep], clusters)
    labelled = np.isin(human, (F.A, F.B))
    bins = bin_rates(relative_difference(wa[labelled], wb[labelled]), human[labelled] == F.A)
    method = "P(humans pick the longer response); " + (
        f"Agresti-Coull interval at the effective size, Wald t-test of 1/2 on the CR1 standard error, "
        f"{clustered_how(clusters, d['clusters'])}" if d["nested"]
        else "Agresti-Coull interval, exact binomial test")
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n, exclusions=excl,
                    statistic=d["statistic"], p_value=d["p_value"], method=method,
                    **cluster_fields(d, clusters),
                    details={"a_win_bins": bins})
