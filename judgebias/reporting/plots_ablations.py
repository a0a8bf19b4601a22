"""The DBG paper's ablation and attention figures (pure: data in, matplotlib Figure out, with the
conventions of ``judgebias.reporting.plots``): DBG per judge before and after a style rewrite or a
fine-tune, the rewrites' semantic shift, and a judge's attention per layer to each generator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from judgebias.reporting.plots import axis_span, label, new_figure


def dbg_before_after(out: Mapping[str, Any], title: str) -> Figure:
    """Grouped bars: DBG per judge per ablation condition, with 95% intervals (``out["judges"]``:
    judge -> condition -> estimate). Every group stays inside the frame (an all-n/a group draws no
    bar, so autoscaling cut it off), each bar's value is marked by a line in its colour (a bar of
    height 0 is otherwise invisible) and an uncomputable one says "n/a" where its bar would be."""
    judges = list(out["judges"])
    conditions = list(next(iter(out["judges"].values())).keys()) if judges else []
    conditions.sort(key=lambda c: c != "before")  # "before" first: a comparison read back from JSON is sorted
    fig, ax = new_figure((6.4, 4.0))
    width = 0.8 / max(1, len(conditions))
    ends: list[float] = []
    for k, cond in enumerate(conditions):
        vals, lo, hi = [], [], []
        for j in judges:
            e = out["judges"][j].get(cond) or {}
            v = e.get("value")
            vals.append(np.nan if v is None else v)
            lo.append(0 if v is None or e.get("ci_low") is None else v - e["ci_low"])
            hi.append(0 if v is None or e.get("ci_high") is None else e["ci_high"] - v)
        x = np.arange(len(judges)) + (k - (len(conditions) - 1) / 2) * width
        ends += [v + d for v, d in zip(vals, hi, strict=True)]
        ends += [v - d for v, d in zip(vals, lo, strict=True)]
        bars = ax.bar(x, vals, width, yerr=[lo, hi], capsize=3, label=cond, edgecolor="black", linewidth=0.6)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        ax.plot(x, vals, linestyle="none", marker="_", markersize=width * 330 / max(1, len(judges)),
                markeredgewidth=3, color=color, zorder=4)
        for xi, v in zip(x, vals, strict=True):
            if np.isnan(v):  # not computable (e.g. no gold judge left): say so instead of a blank
                ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.3", rotation=90)
    ax.axhline(0, color="black", lw=1.0, zorder=3)
    ax.set_ylim(*axis_span(ends))
    ax.set_xlim(-0.5, len(judges) - 0.5)
    ax.set_xticks(np.arange(len(judges)), [label(j) for j in judges])
    ax.set_ylabel("DBG score (judge - gold win rate)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, title="condition", title_fontsize=8)
    return fig


def attention_layers(per_layer, judge: str) -> Figure:
    """DBG Fig. 7: a judge's mean attention per layer to each generator's responses
    (``per_layer``: layers x generators)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = new_figure((6.4, 4.0))
    for gen in per_layer.columns:
        ax.plot(per_layer.index, per_layer[gen], marker="o", ms=3, label=f"responses of {gen}")
    ax.set_xlabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean attention from the answer position")
    ax.set_title(f"Judge {judge}: attention to each generator's responses (both orders)", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def semantic_shift(sem, title: str = "Responses before and after rewriting (PCA of sentence embeddings)"
                   ) -> Figure:
    """DBG App. A.3: originals and rewrites in one 2-D projection, one marker per style."""
    fig, ax = new_figure((6.4, 4.8))
    ax.scatter(sem["orig_x"], sem["orig_y"], s=18, c="0.3", label="original")
    markers = {"attractive": ("^", "tab:orange"), "humorous": ("s", "tab:blue")}
    for style, part in sem.groupby("style", sort=True):
        marker, color = markers.get(str(style), ("o", "tab:green"))
        ax.scatter(part["rew_x"], part["rew_y"], s=18, marker=marker, c=color, alpha=0.8,
                   label=f"{style} (mean cos {part['cosine'].mean():.2f})")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return fig
