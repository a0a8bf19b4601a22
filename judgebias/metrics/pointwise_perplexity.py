"""Familiarity on scores: does the judge score text it finds likely higher than people do?

Wataoka et al. (2024, Sec. 5) find pairwise judges prefer the response of lower perplexity beyond
what humans prefer (``judgebias.metrics.perplexity``). The pointwise analogue regresses the judge's
score minus the mean human score on the response's log-perplexity under the judge (column ``ppl``,
``judgebias judge --mode pointwise --perplexity``): a negative slope is a judge that rewards familiar
(low-perplexity) text more than raters do. As for ``score_verbosity``, the judge's and the humans'
own slopes are in the details, and the gap by log-perplexity quintile bins (the analogue of the
pairwise figure's binned win rates) shows its shape.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.metrics.pointwise import clustered, judge_rows, row_clusters
from judgebias.stats import Estimate, InsufficientData, clustered_ols_slope, mean_t_figure
from judgebias.tables.pointwise import human_mean

BINS = 5


def score_perplexity(df: pd.DataFrame, judge: str, *, bins: int = BINS) -> Estimate:
    """OLS slope of (judge - mean human score) on the log-perplexity of the response under the judge,
    with HC3 standard errors; ``judge_slope``/``human_slope`` and the per-bin gaps in details."""

    if "ppl" not in df.columns:
        raise InsufficientData("no ppl column (judge --mode pointwise --perplexity fills it)")
    rows, excl = judge_rows(df, judge)
    h = human_mean(rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ppl = np.log(pd.to_numeric(rows["ppl"], errors="coerce").to_numpy(dtype=float))
    no_ppl, no_human = ~np.isfinite(log_ppl), ~np.isfinite(h)
    for reason, mask in (("no_perplexity", no_ppl), ("no_human_score", no_human & ~no_ppl)):
        if mask.any():
            excl = {**excl, reason: int(mask.sum())}
    ok = ~no_ppl & ~no_human
    x, s, h = log_ppl[ok], rows["score"].to_numpy(dtype=float)[ok], h[ok]
    if x.size < 3 or np.ptp(x) == 0:
        raise InsufficientData(f"need 3 rated responses of different perplexities (have {x.size})")
    clusters = row_clusters(rows, ok)
    fit = clustered_ols_slope(s - h, x, clusters)
    how = "HC3 interval" if clusters.singletons else \
        f"cluster-robust interval ({clusters.count} {clusters.by} clusters, t on {clusters.count - 1} df)"
    return clustered(Estimate(
        fit["value"], fit["ci_low"], fit["ci_high"], int(x.size), excl,
        statistic=fit["statistic"], p_value=fit["p_value"],
        method=f"OLS slope of (judge - human) on log perplexity under the judge, {how}",
        details={"judge_slope": float(np.polyfit(x, s, 1)[0]), "human_slope": float(np.polyfit(x, h, 1)[0]),
                 "bins": _bins(x, s - h, bins)}), clusters, fit["design_effect"])


def _bins(x: np.ndarray, gap: np.ndarray, bins: int) -> list[dict]:
    """Mean judge - human gap per log-perplexity quantile bin (t interval; a bin of one item has none)."""
    edges = np.unique(np.quantile(x, np.linspace(0, 1, bins + 1)))
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max(edges.size - 2, 0))
    out = []
    for b in range(max(edges.size - 1, 1)):
        g = gap[which == b]
        if g.size:
            hi = float(edges[b + 1]) if edges.size > 1 else float(edges[0])
            out.append({"log_ppl_low": float(edges[b]), "log_ppl_high": hi,
                        **mean_t_figure(g, method="t interval")})
    return out
