"""The leaderboard's pictures, drawn from ``judgebias.reporting.leaderboard.leaderboard`` output (pure: data
in, matplotlib Figure out, as in ``judgebias.reporting.plots``): a forest plot of the strengths with their 95%
intervals, one column per variant and one row per rater, and a rank-change chart (raw rank to each
variant's rank, one line per model, each rank with its 95% rank interval). Names from data go through
``plots.label`` (escaped, cut)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from judgebias.display import file_stem
from judgebias.reporting.plots import label

DPI = 150  # these charts hold many small labels: saved sharper than the 100-dpi figures of analyze


def _raters(result: Mapping[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for per in result["rankings"].values():
        seen.update(dict.fromkeys(per))
    return list(seen)


def forest_plot(result: Mapping[str, Any]) -> Figure:
    """Strengths with 95% intervals: one column per variant (a shared x axis), models on the y axis in
    the order of the human ranking where there is one, else of the first ranking; within a column each
    rater (judge, panel, humans) has its own colour and a small vertical offset. A dashed line at 0,
    the mean strength."""
    variants = [v for v, per in result["rankings"].items() if per]
    if not variants:
        raise ValueError("no ranking to plot")
    raters = _raters(result)
    reference = result.get("human") or next(iter(result["rankings"][variants[0]].values()))
    order = [r["model"] for r in reference]
    order += [m for m in result["models"] if m not in order]
    fig = Figure(figsize=(2.3 * len(variants) + 1.8, 0.5 * len(order) * max(1.0, len(raters) / 2) + 1.6),
                 dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(variants), sharey=True, sharex=True, squeeze=False)[0]
    y = np.arange(len(order))[::-1].astype(float)
    step = 0.7 / max(len(raters), 1)
    for ax, variant in zip(axes, variants, strict=True):
        for k, rater in enumerate(raters):
            recs = {r["model"]: r for r in result["rankings"][variant].get(rater, [])}
            if not recs:
                continue
            present = [j for j, m in enumerate(order) if m in recs]
            s = np.array([recs[order[j]]["strength"] for j in present])
            lo = np.array([recs[order[j]]["ci_low"] for j in present])
            hi = np.array([recs[order[j]]["ci_high"] for j in present])
            offset = (len(raters) - 1) / 2 * step - k * step
            ax.errorbar(s, y[present] + offset, xerr=[np.clip(s - lo, 0, None), np.clip(hi - s, 0, None)],
                        fmt="o", capsize=2, markersize=3.5, color=f"C{k % 10}", label=label(rater))
        ax.axvline(0.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(label(variant), fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("strength (log-odds)", fontsize=7)
    axes[0].set_yticks(y, [label(m) for m in order])
    handles = {}
    for ax in axes:
        for h, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(len(handles), 5),
               fontsize=8, title="rater", title_fontsize=8)
    fig.suptitle("Bradley-Terry strengths with 95% bootstrap intervals, per variant", fontsize=10)
    return fig


def rank_change_chart(result: Mapping[str, Any], rater: str) -> Figure:
    """Rank of each model under raw (left) and each variant of ``rater`` plus the humans' (right), each
    point with its 95% rank interval as a vertical bar; a model a variant does not rank leaves a gap."""
    columns = [(v, rater) for v in result["rankings"] if rater in result["rankings"][v]]
    if result.get("human") and rater != "human":
        columns.append(("human", "human"))
    if result["rankings"].get("panel", {}).get("panel") and rater != "panel":
        columns.insert(len(columns) - (1 if result.get("human") else 0), ("panel", "panel"))
    if len(columns) < 2:
        raise ValueError(f"{rater}: fewer than two rankings to compare")
    models = result["models"]
    # Each model's points sit slightly apart within a column so that overlapping rank intervals of
    # different models stay distinguishable.
    spread = min(0.3, 0.06 * len(models))
    shifts = np.linspace(-spread / 2, spread / 2, len(models)) if len(models) > 1 else np.zeros(1)
    fig = Figure(figsize=(max(6.0, 1.5 * len(columns) + 2.5), max(3.5, 0.45 * len(models) + 1.5)), dpi=DPI,
                 layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for j, model in enumerate(models):
        recs = [next((r for r in result["rankings"][v][who] if r["model"] == model), None)
                for v, who in columns]
        pos = [r["rank"] if r else np.nan for r in recs]
        x = np.arange(len(columns)) + shifts[j]
        line, = ax.plot(x, pos, marker="o", color=f"C{j % 10}")
        # The 95% rank interval: the 2.5% / 97.5% quantiles of the model's rank over the resamples.
        drawn = [k for k, r in enumerate(recs) if r]
        lo = np.array([recs[k]["rank_ci_low"] for k in drawn], dtype=float)
        hi = np.array([recs[k]["rank_ci_high"] for k in drawn], dtype=float)
        at = np.array([pos[k] for k in drawn], dtype=float)
        ax.errorbar(x[drawn], at, yerr=[np.clip(at - lo, 0, None), np.clip(hi - at, 0, None)], fmt="none",
                    ecolor=line.get_color(), elinewidth=1.2, capsize=3, alpha=0.6)
        first = next((k for k, p in enumerate(pos) if not np.isnan(p)), None)
        if first is not None:
            ax.annotate(label(model), (first - spread / 2, pos[first]), xytext=(-6, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=7,
                        color=line.get_color())
    names = []
    for v, who in columns:
        n = len(result["rankings"][v][who])
        names.append(label(v if who in (rater, v) else f"{v} ({who})")
                     + (f"\n({n} of {len(models)} models)" if n < len(models) else ""))
    ax.set_xticks(range(len(columns)), names, fontsize=8)
    ax.set_xlim(-1.6, len(columns) - 0.6)
    ax.set_ylim(len(models) + 0.5, 0.5)
    ax.set_yticks(range(1, len(models) + 1))
    ax.set_ylabel("rank (1 = strongest)")
    ax.set_title(f"Rank per variant with 95% rank intervals: {label(rater)}", fontsize=10)
    return fig


def leaderboard_figures(result: Mapping[str, Any]) -> dict[str, Figure]:
    """``leaderboard_forest`` and one ``leaderboard_ranks_<judge>`` per judge with a raw ranking."""
    figures = {"leaderboard_forest": forest_plot(result)}
    for rater in result["rankings"].get("raw", {}):
        try:
            figures[f"leaderboard_ranks_{rater}"] = rank_change_chart(result, rater)
        except ValueError:
            continue
    return figures


def save_leaderboard_figures(figures: Mapping[str, Figure], directory: str | Path) -> list[Path]:
    """Each figure as ``<directory>/<file_stem(name)>.png`` at DPI; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures.items():
        path = directory / f"{file_stem(name)}.png"
        fig.savefig(path, format="png", dpi=DPI)
        paths.append(path)
    return paths
