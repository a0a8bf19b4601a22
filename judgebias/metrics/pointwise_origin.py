"""Pointwise figures that depend on who wrote a response or on another view of it: self-preference
(Equal-Opportunity and Demographic-Parity analogues), DBG against a gold panel of judges, verbosity
beyond the human one, and consistency with pairwise verdicts over the same responses.

- Self-preference on scores (Wataoka et al. 2024 define the pairwise EO/DP forms; Spiliopoulou et
  al. 2025, "Play Favorites", measure it as a score shift against human scores on the same items):
  EO analogue = mean(judge - human) on the judge's own responses - the same on other responses
  (Welch); DP analogue = mean score on own - mean score on others (Welch), no human needed.
- DBG on scores (Chen et al. 2025, "Beyond the Surface", Dominance/self-bias over gold judges):
  the judge's score minus the gold panel's mean score on the same own items (paired t).
- Verbosity: OLS slope of (judge - human) on length in 100 words, i.e. the judge's score-length
  slope minus the humans' (same x, so the slopes subtract exactly); HC3 interval.
- Pointwise-pairwise consistency (TrustJudge, Wang et al. 2025: score-comparison inconsistency):
  of the pairs a judge compared whose two responses it also scored differently, the share where the
  lower-scored response won; Agresti-Coull interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from judgebias.metrics.frame import isin
from judgebias.metrics.origin import SelfMap, self_set, with_family
from judgebias.metrics.pointwise import clustered, judge_rows, row_clusters
from judgebias.stats import (
    Clusters,
    Estimate,
    InsufficientData,
    clustered_mean_t,
    clustered_ols_slope,
    clustered_proportion,
    clustered_welch,
)
from judgebias.tables.pointwise import human_mean


def _tested(test: dict, n: int, excl: dict, clusters: Clusters, *, method: str, **extra) -> Estimate:
    """A clustered test's result (value, interval, statistic, p-value, design effect) as the
    figure's Estimate on ``n`` rows; every test-based figure below reads its result this way."""
    est = Estimate(test["value"], test["ci_low"], test["ci_high"], n, excl, statistic=test["statistic"],
                   p_value=test["p_value"], method=method, **extra)
    return clustered(est, clusters, test["design_effect"])


def _on(clusters: Clusters, what: str) -> str:
    return "" if clusters.singletons else f"; {what} on {clusters.count} {clusters.by} clusters (CR1, t on " \
        f"{clusters.count - 1} df)"


def _own_mask(df: pd.DataFrame, rows: pd.DataFrame, judge: str, self_map: SelfMap | None) -> np.ndarray:
    if "generator" not in rows.columns:
        raise InsufficientData("no generator column: whose response is it?")
    return isin(rows["generator"].astype(str), list(self_set(df, judge, self_map)))


def _known(rows: pd.DataFrame) -> np.ndarray:
    return (rows["generator"].astype(str).str.strip() != "").to_numpy()


def _welch_split(rows: pd.DataFrame, values: np.ndarray, keep: np.ndarray, group: np.ndarray, excl: dict,
                 method: str, who: str = "judge", **extra) -> Estimate:
    """Welch's difference of the kept ``values`` inside ``group`` minus outside it (own or family vs
    the others), n = the kept rows; on clustered rows the difference's clustered variance."""
    if not (keep & group).any():
        raise InsufficientData(f"no responses written by the {who} among the {int(keep.sum())} usable rows "
                               "(column generator; --self / --family say which generators count)")
    if not (keep & ~group).any():
        raise InsufficientData(f"no responses by other generators than the {who} to compare with")
    clusters = row_clusters(rows, keep)
    d = clustered_welch(values[keep], group[keep], clusters)
    return _tested(d, int(keep.sum()), excl, clusters,
                   method=method + _on(clusters, "the difference"), **extra)


def score_self_preference_eo(df: pd.DataFrame, judge: str, self_map: SelfMap | None = None) -> Estimate:
    """mean(judge - human) on own responses - mean(judge - human) on others' (Welch): the score
    analogue of Equal Opportunity, a judge more generous to itself than people are."""
    rows, excl = judge_rows(df, judge)
    own = _own_mask(df, rows, judge, self_map)
    h = human_mean(rows) if "human_scores" in rows else np.full(len(rows), np.nan)
    ok = np.isfinite(h) & _known(rows)
    excl = {**excl, **({"no_human_score": int((~np.isfinite(h)).sum())} if (~np.isfinite(h)).any() else {})}
    if not ok.any():
        raise InsufficientData(f"no row of judge {judge!r} with a human score and a known generator")
    gap = rows["score"].to_numpy(dtype=float) - h
    return _welch_split(rows, gap, ok, own, excl, "(judge - human) own - others, Welch t",
                        details={"n_own": int((ok & own).sum()), "n_other": int((ok & ~own).sum())})


def score_self_preference_dp(df: pd.DataFrame, judge: str, self_map: SelfMap | None = None) -> Estimate:
    """Mean score on own responses - mean score on others' (Welch): the Demographic-Parity analogue,
    which also holds real quality differences (the EO form takes them out with human scores)."""
    rows, excl = judge_rows(df, judge)
    own = _own_mask(df, rows, judge, self_map)
    known = _known(rows)
    if (~known).any():
        excl = {**excl, "unknown_generator": int((~known).sum())}
    s = rows["score"].to_numpy(dtype=float)
    return _welch_split(rows, s, known, own, excl, "score own - others, Welch t",
                        details={"n_own": int((known & own).sum()), "n_other": int((known & ~own).sum())})


def score_family_preference_eo(
    df: pd.DataFrame, judge: str, self_map: SelfMap | None, family_map: SelfMap | None
) -> Estimate:
    """The EO analogue with the judge's family (``--family``, not the judge itself) as "own"; the
    judge's own responses are left out."""
    family = {
        g for g in with_family(None, family_map).get(judge, ()) if g not in self_set(df, judge, self_map)
    }
    if not family:
        raise InsufficientData(f"no family given for judge {judge!r} (--family)")
    rows, excl = judge_rows(df, judge)
    gens = rows["generator"].astype(str)
    own = _own_mask(df, rows, judge, self_map)
    fam = isin(gens, list(family))
    h = human_mean(rows)
    ok = np.isfinite(h) & _known(rows) & ~own
    gap = rows["score"].to_numpy(dtype=float) - h
    return _welch_split(rows, gap, ok, fam, {**excl, "own_response": int(own.sum())},
                        "(judge - human) family - others, Welch t", who="judge's family")


def score_dbg(
    df: pd.DataFrame, judge: str, gold: Sequence[str] | None = None, self_map: SelfMap | None = None
) -> Estimate:
    """Mean over the judge's own responses of (its score - the gold panel's mean score of the same
    item on the same scale), paired t. Gold: the named judges, else every other judge."""
    rows, excl = judge_rows(df, judge)
    own = _own_mask(df, rows, judge, self_map)
    panel = [g for g in (gold or sorted(set(df["judge"]) - {judge, ""})) if g != judge]
    if not panel:
        raise InsufficientData("no gold judge besides the measured one")
    g = df[df["judge"].isin(panel) & np.isfinite(df["score"].to_numpy(dtype=float))]
    key = ["item_id", "criterion", "scale_min", "scale_max"]
    gold_mean = g.groupby(key, dropna=False)["score"].mean().rename("gold").reset_index()
    mine = rows[own].merge(gold_mean, on=key, how="left")
    has = mine["gold"].notna().to_numpy()
    if (~has).any():
        excl = {**excl, "no_gold_score": int((~has).sum())}
    d = mine["score"].to_numpy(dtype=float)[has] - mine["gold"].to_numpy(dtype=float)[has]
    if d.size == 0:
        raise InsufficientData(f"no own response of judge {judge!r} scored by the gold panel {panel}")
    clusters = row_clusters(mine, has)
    t = clustered_mean_t(d, clusters)
    return _tested(t, int(d.size), excl, clusters,
                   method="mean (judge - gold panel mean) on own responses, paired t"
                   + _on(clusters, "its mean"),
                   details={"gold": panel})


def words(texts: pd.Series) -> np.ndarray:
    return texts.astype(str).str.split().str.len().to_numpy(dtype=float)


def score_verbosity(df: pd.DataFrame, judge: str) -> Estimate:
    """Slope of (judge - mean human score) on response length per 100 words: the length preference
    the judge has beyond the raters'. OLS with HC3 standard errors; the two slopes are in details."""

    rows, excl = judge_rows(df, judge)
    h = human_mean(rows)
    ok = np.isfinite(h)
    if (~ok).any():
        excl = {**excl, "no_human_score": int((~ok).sum())}
    x = words(rows["response"])[ok] / 100.0
    s = rows["score"].to_numpy(dtype=float)[ok]
    if x.size < 3 or np.ptp(x) == 0:
        raise InsufficientData("need 3 rated responses of different lengths")
    clusters = row_clusters(rows, ok)
    fit = clustered_ols_slope(s - h[ok], x, clusters)
    slope_j = float(np.polyfit(x, s, 1)[0])
    slope_h = float(np.polyfit(x, h[ok], 1)[0])
    how = "HC3 interval" if clusters.singletons else \
        f"cluster-robust interval ({clusters.count} {clusters.by} clusters, t on {clusters.count - 1} df)"
    return _tested(fit, int(x.size), excl, clusters,
                   method=f"OLS slope of (judge - human) on length per 100 words, {how}",
                   details={"judge_slope": slope_j, "human_slope": slope_h})


def pointwise_pairwise_consistency(
    pointwise: pd.DataFrame, pairwise: pd.DataFrame, judge: str, pairwise_judge: str | None = None
) -> Estimate:
    """Share of compared pairs where the response the judge scored lower won its pairwise verdict.

    Responses are matched by (prompt, response text). Left out and counted: pairs with a response
    the judge did not score, tie or missing verdicts, and equal scores (no lower one)."""
    pj = pairwise_judge or judge
    for column in ("prompt", "response_a", "response_b", "judge", "verdict"):
        if column not in pairwise.columns:
            raise ValueError(f"pointwise_pairwise_consistency: the pairwise table has no column {column!r}")
    rows, _ = judge_rows(pointwise, judge)
    score = {
        (str(p), str(r)): float(s)
        for p, r, s in zip(rows["prompt"], rows["response"], rows["score"], strict=True)
    }
    pairs = pairwise[pairwise["judge"] == pj]
    if pairs.empty:
        raise InsufficientData(f"no pairwise verdict of judge {pj!r}")
    excl: dict[str, int] = {}
    lower: list[bool] = []
    prompts: list[str] = []
    for prompt, a, b, verdict in zip(
        pairs["prompt"], pairs["response_a"], pairs["response_b"], pairs["verdict"], strict=True
    ):
        sa, sb = score.get((str(prompt), str(a))), score.get((str(prompt), str(b)))
        reason = (
            "response_not_scored"
            if sa is None or sb is None
            else "tie_or_missing_verdict"
            if verdict not in ("a", "b")
            else "equal_scores"
            if sa == sb
            else None
        )
        if reason:
            excl[reason] = excl.get(reason, 0) + 1
            continue
        lower.append((verdict == "a") == (sa < sb))
        prompts.append(str(prompt))
    if not lower:
        raise InsufficientData(
            f"no pair of judge {pj!r} with both responses scored, a verdict and unequal scores"
        )
    # pairs of one prompt share it: they are clustered by prompt (the pairwise tables' unit)
    clusters = Clusters.of(prompts, "prompt")
    share = clustered_proportion(np.array(lower), clusters)
    lower_wins = int(sum(lower))
    return clustered(Estimate(
        share["value"],
        share["ci_low"],
        share["ci_high"],
        len(lower),
        excl,
        method="share of pairs the lower-scored response won, Agresti-Coull"
        + ("" if clusters.singletons else f" at the effective size ({clusters.count} prompt clusters)"),
        details={"lower_wins": lower_wins, "pairwise_judge": pj},
    ), clusters, share["design_effect"])
