"""Figures of a pointwise table (pure: table in, matplotlib Figure out), with the conventions of
``judgebias.reporting.plots``: FIGSIZE at DPI, names from data through ``plots.label``, no pyplot state.

One figure per judge: the share of its scores at each level of the scale, beside the share of the
rounded mean human score on the items people rated (the reference of ``score_agreement_human`` and
``score_distribution``), so a judge that crowds the top of the scale or favours round numbers
(Stureborg et al. 2024) is seen against what people gave the same responses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from judgebias.metrics.pointwise import half_up
from judgebias.reporting.plots import label, new_figure
from judgebias.tables.pointwise import human_mean


def judge_levels(rows: pd.DataFrame) -> np.ndarray:
    """Each scored row's level as ``score_distribution`` counts it: the most probable score where
    known, else the expected score rounded half up."""
    s = rows["score"].to_numpy(dtype=float)
    whole = half_up(rows["score_argmax"].to_numpy(dtype=float) if "score_argmax" in rows else s)
    return np.where(np.isfinite(whole), whole, half_up(s))


def _shares(levels: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.array([(levels == k).sum() for k in scale], dtype=float) / max(len(levels), 1)


def score_distribution(df: pd.DataFrame, judge: str, title: str = "") -> Figure:
    """Bars of the share of ``judge``'s scores at each level, with the humans' beside them where
    any of its rows has human scores. Raises ``ValueError`` when the judge has no scored row."""
    mine = df[df["judge"] == judge]
    rows = mine[np.isfinite(mine["score"].to_numpy(dtype=float))]
    if rows.empty:
        raise ValueError(f"no scored row of judge {judge!r} to plot")
    # A judge on several scales gets one axis over all of them (analyze skips its skew instead).
    scale = np.arange(int(rows["scale_min"].min()), int(rows["scale_max"].max()) + 1)
    series = {f"judge {label(judge)} (n={len(rows)})": judge_levels(rows)}
    if "human_scores" in rows.columns:
        h = human_mean(rows)
        h = h[np.isfinite(h)]
        if h.size:
            series[f"humans, rounded mean rating (n={h.size})"] = half_up(h)
    fig, ax = new_figure()
    width = 0.8 / len(series)
    for i, (name, levels) in enumerate(series.items()):
        ax.bar(scale + (i - (len(series) - 1) / 2) * width, _shares(levels, scale), width, label=name)
    ax.set_xticks(scale, [str(k) for k in scale])
    ax.set_xlabel("score")
    ax.set_ylabel("share of responses")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    shown = label(judge)
    vs = " vs humans" if len(series) > 1 else " (no human scores)"
    ax.set_title(title or f"{shown}: score distribution{vs}", fontsize=10, wrap=True)
    return fig


def pointwise_figures(df: pd.DataFrame, judges: list[str] | None = None) -> dict[str, Figure]:
    """``score_distribution_<judge>`` for every judge of a validated pointwise table with a scored
    row (names are file stems for ``plots.save_figures`` / MLflow, escaped there)."""
    figs: dict[str, Figure] = {}
    for judge in judges if judges is not None else sorted(j for j in df["judge"].unique() if j):
        scored = np.isfinite(df.loc[df["judge"] == judge, "score"].to_numpy(dtype=float))
        if scored.any():
            figs[f"score_distribution_{judge}"] = score_distribution(df, judge)
    return figs

