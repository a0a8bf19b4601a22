"""The watched judge's history plot: each figure over the looks with its 95% interval, the reference
look's interval as a band, the looks where the figure changed in red (docs/watch.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from judgebias.reporting.plots import DPI, label, save_figure
from judgebias.reporting.run_compare import figure_name


def history_figure(records: Sequence[Mapping[str, Any]]) -> Figure:
    """One panel per figure the looks share; x is the look's index."""
    if not records:
        raise ValueError("watch history: no look to plot")
    keys = list(records[-1].get("figures") or {})
    if not keys:
        raise ValueError("watch history: the last look has no figure with an interval")
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = Figure(figsize=(4.0 * cols, 2.6 * rows + 0.4), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    last = records[-1]
    ref_index = (last.get("reference") or {}).get("index", 0)
    ref = next((r for r in records if r.get("index") == ref_index), records[0])
    for ax, key in zip(axes, keys, strict=False):
        band = (ref.get("figures") or {}).get(key)
        if band:
            ax.axhspan(band["ci_low"], band["ci_high"], color="#9ecae1", alpha=0.35,
                       label=f"reference (look {ref.get('index', 0)}) 95% interval")
        for r in records:
            est = (r.get("figures") or {}).get(key)
            if not est:
                continue
            decision = r.get("decision") or {}
            changed = key in (decision.get("changed") or [])
            x, v = r.get("index", 0), est["value"]
            ax.errorbar([x], [v], yerr=[[v - est["ci_low"]], [est["ci_high"] - v]], fmt="o", capsize=3,
                        color="#d62728" if changed else "#08519c")
        ax.set_title(label(figure_name(key)), fontsize=9)
        ax.set_xlabel("look", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(f"watch {label(last.get('watch', ''))}: figures over looks (red: changed)", fontsize=10)
    return fig


def history_plot(records: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    return save_figure(history_figure(records), path)
