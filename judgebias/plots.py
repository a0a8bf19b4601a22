"""Figures of the papers, drawn from ``analyze`` output (pure: data in, matplotlib Figure out).

Figures are built with ``matplotlib.figure.Figure`` directly (Agg rendering, no pyplot global
state, nothing shown); ``save_figures`` writes PNGs when asked. Every figure is FIGSIZE inches at
DPI, i.e. 800 x 500 pixels, unless a size is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

FIGSIZE = (8.0, 5.0)
DPI = 100


def _figure(figsize=FIGSIZE) -> tuple[Figure, Any]:
    fig = Figure(figsize=figsize, dpi=DPI)
    return fig, fig.add_subplot(1, 1, 1)


def confusion_matrix(confusion: Mapping[str, int], title: str = "") -> Figure:
    """Wataoka Fig. 2: rows = human (own better / other better), columns = judge, with row rates."""
    m = np.array([[confusion["tp"], confusion["fn"]], [confusion["fp"], confusion["tn"]]], dtype=float)
    fig, ax = _figure((5.0, 4.5))
    rates = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, f"{int(v)}\n({rates[i, j]:.0%})", ha="center", va="center",
                color="white" if rates[i, j] > 0.6 else "black")
    ax.set_xticks([0, 1], ["judge: own", "judge: other"])
    ax.set_yticks([0, 1], ["human: own", "human: other"])
    ax.set_title(title or "Self-preference confusion matrix")
    fig.tight_layout()
    return fig


def win_rate_heatmap(records: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """DBG paper Fig. 2: rows = raters (judges, then gold and human), columns = generator pairings,
    cell = win rate of the first-named generator (n in small print)."""
    if not records:
        raise ValueError("no win-rate records to plot")
    pairings = sorted({(r["generator_x"], r["generator_y"]) for r in records})
    special = [s for s in ("gold", "human") if any(r["rater"] == s for r in records)]
    raters = sorted({r["rater"] for r in records} - set(special)) + special
    grid = np.full((len(raters), len(pairings)), np.nan)
    counts = np.zeros_like(grid)
    for r in records:
        i, j = raters.index(r["rater"]), pairings.index((r["generator_x"], r["generator_y"]))
        grid[i, j], counts[i, j] = r["win_rate_x"], r["n"]
    width = max(6.0, 1.3 * len(pairings) + 3)
    fig, ax = _figure((width, max(3.0, 0.6 * len(raters) + 2)))
    ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu_r", vmin=0, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.0%}\nn={int(counts[i, j])}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(pairings)), [f"{x}\nvs {y}" for x, y in pairings], fontsize=8)
    ax.set_yticks(range(len(raters)), raters)
    if special:
        ax.axhline(len(raters) - len(special) - 0.5, color="black", linewidth=1.5)
    ax.set_title(title or "Win rate of the first-named generator, per rater")
    fig.tight_layout()
    return fig


def _centers(bins: Sequence[Mapping[str, Any]], step: float) -> np.ndarray:
    out = []
    for b in bins:
        lo, hi = b["low"], b["high"]
        if lo is None:
            out.append(hi - step / 2)
        elif hi is None:
            out.append(lo + step / 2)
        else:
            out.append((lo + hi) / 2)
    return np.array(out, dtype=float)


def _curve(ax, bins, step, label, marker="o"):
    bins = [b for b in bins if b["n"] > 0 and b["rate"] is not None]
    if not bins:
        return
    x = _centers(bins, step)
    y = np.array([b["rate"] for b in bins], dtype=float)
    lo = np.array([b["ci_low"] for b in bins], dtype=float)
    hi = np.array([b["ci_high"] for b in bins], dtype=float)
    ax.errorbar(x, y, yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)], marker=marker, capsize=3,
                label=label)
    for xi, yi, b in zip(x, y, bins, strict=True):
        ax.annotate(f"({b['n']})", (xi, yi), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=7)


def verbosity_curve(bins: Sequence[Mapping[str, Any]], title: str = "",
                    xlabel: str = "word count difference, chosen vs rejected (%)",
                    ylabel: str = "human alignment") -> Figure:
    """Saito Fig. 5: agreement with humans by (len_chosen - len_rejected) / len_rejected in %
    (or any rate binned by a relative word-count difference, e.g. Fig. 4 for humans)."""
    fig, ax = _figure()
    _curve(ax, bins, 20.0, ylabel)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_title(title or "Verbosity: human alignment by length difference")
    fig.tight_layout()
    return fig


def perplexity_curves(series: Mapping[str, Sequence[Mapping[str, Any]]], title: str = "",
                      xlabel: str = "log ppl(A) - log ppl(B)") -> Figure:
    """Wataoka Figs. 3-4: win rate of A by log-perplexity difference, one curve per series
    (judge vs human, or own vs other)."""
    fig, ax = _figure()
    for (label, bins), marker in zip(series.items(), "osD^v", strict=False):
        _curve(ax, bins, 0.5, label, marker)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("P(A wins)")
    ax.set_ylim(0, 1.05)
    ax.axhline(0.5, color="grey", linewidth=0.8)
    ax.legend()
    ax.set_title(title or "Win rate by perplexity difference")
    fig.tight_layout()
    return fig


def estimate_bars(estimates: Mapping[str, Mapping[str, Any]], title: str = "", ylabel: str = "") -> Figure:
    """One bar per judge with its 95% interval (DBG scores, or any other estimate)."""
    items = [(k, e) for k, e in estimates.items() if e and e.get("value") is not None]
    if not items:
        raise ValueError("no estimate to plot")
    names = [k for k, _ in items]
    v = np.array([e["value"] for _, e in items], dtype=float)
    lo = np.array([e["ci_low"] if e.get("ci_low") is not None else np.nan for _, e in items], dtype=float)
    hi = np.array([e["ci_high"] if e.get("ci_high") is not None else np.nan for _, e in items], dtype=float)
    fig, ax = _figure()
    ax.bar(range(len(v)), v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], capsize=4,
           color=["tab:red" if x > 0 else "tab:blue" for x in v])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(v)), names, rotation=20, ha="right")
    ax.set_ylabel(ylabel or "DBG score")
    ax.set_title(title or "DBG score (judge - gold win rate on own responses), 95% CI")
    fig.tight_layout()
    return fig


def figures_for(result: Mapping[str, Any]) -> dict[str, Figure]:
    """Every figure an ``analyze`` result supports, keyed by a file-friendly name."""
    figs: dict[str, Figure] = {}
    judges = result.get("judges") or {}
    for judge, m in judges.items():
        if "self_preference_eo" in m:
            figs[f"confusion_{judge}"] = confusion_matrix(m["self_preference_eo"]["confusion"],
                                                          f"{judge}: own response better? (human vs judge)")
        if "verbosity_bias" in m:
            figs[f"verbosity_{judge}"] = verbosity_curve(m["verbosity_bias"]["alignment_bins"],
                                                         f"{judge}: human alignment by length difference")
        pp = m.get("perplexity_preference")
        if pp:
            series = {judge: pp["judge_bins"]}
            if pp.get("human_bins"):
                series["human"] = pp["human_bins"]
            figs[f"perplexity_{judge}"] = perplexity_curves(series, f"{judge} vs humans by perplexity")
        oo = m.get("perplexity_own_other")
        if oo:
            figs[f"perplexity_own_other_{judge}"] = perplexity_curves(
                {"own response (as A)": oo["own_bins"], "other models' pairs": oo["other_bins"]},
                f"{judge}: own vs other texts by perplexity")
    hv = (result.get("humans") or {}).get("verbosity")
    if hv and hv.get("a_win_bins"):
        figs["verbosity_humans"] = verbosity_curve(
            hv["a_win_bins"], "Humans: P(A preferred) by (len A - len B) / len B (Saito Fig. 4)",
            xlabel="word count difference, A vs B (%)", ylabel="P(humans prefer A)")
    dbg = {j: m["dbg"] for j, m in judges.items() if "dbg" in m}
    if dbg:
        figs["dbg"] = estimate_bars(dbg)
    if result.get("win_rates"):
        figs["win_rates"] = win_rate_heatmap(result["win_rates"])
    return figs


def dbg_before_after(out: Mapping[str, Any], title: str) -> Figure:
    """Grouped bars: DBG per judge per ablation condition, with 95% intervals (``out["judges"]``:
    judge -> condition -> estimate)."""
    judges = list(out["judges"])
    conditions = list(next(iter(out["judges"].values())).keys()) if judges else []
    fig, ax = _figure((6.4, 4.0))
    width = 0.8 / max(1, len(conditions))
    for k, cond in enumerate(conditions):
        vals, lo, hi = [], [], []
        for j in judges:
            e = out["judges"][j].get(cond) or {}
            v = e.get("value")
            vals.append(np.nan if v is None else v)
            lo.append(0 if v is None or e.get("ci_low") is None else v - e["ci_low"])
            hi.append(0 if v is None or e.get("ci_high") is None else e["ci_high"] - v)
        x = np.arange(len(judges)) + k * width
        ax.bar(x, vals, width, yerr=[lo, hi], capsize=3, label=cond)
        for xi, v in zip(x, vals, strict=True):
            if np.isnan(v):  # not computable (e.g. no gold judge left): say so instead of a blank
                ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.3")
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xticks(np.arange(len(judges)) + width * (len(conditions) - 1) / 2, judges)
    ax.set_ylabel("DBG score (judge - gold win rate)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def attention_layers(per_layer, judge: str) -> Figure:
    """DBG Fig. 7: a judge's mean attention per layer to each generator's responses
    (``per_layer``: layers x generators)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure((6.4, 4.0))
    for gen in per_layer.columns:
        ax.plot(per_layer.index, per_layer[gen], marker="o", ms=3, label=f"responses of {gen}")
    ax.set_xlabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean attention from the answer position")
    ax.set_title(f"Judge {judge}: attention to each generator's responses (both orders)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def semantic_shift(sem, title: str = "Responses before and after rewriting (PCA of sentence embeddings)"
                   ) -> Figure:
    """DBG App. A.3: originals and rewrites in one 2-D projection, one marker per style."""
    fig, ax = _figure((6.4, 4.8))
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
    fig.tight_layout()
    return fig


def replay_figure(summary) -> Figure:
    """Human-loop replay: mean 95%-interval width (top) and coverage (bottom) against labels, one
    line per method, one column per (judge, figure). Coverage has the 0.95 target drawn."""
    panels = list(summary.groupby(["judge", "figure"], sort=True).groups)
    cols = max(len(panels), 1)
    fig = Figure(figsize=(3.6 * cols, 6.4), dpi=DPI)
    axes = fig.subplots(2, cols, squeeze=False)
    styles = {"ranking": ("tab:red", "x"), "uniform": ("tab:gray", "o"), "design": ("tab:blue", "s"),
              "ppi": ("tab:green", "^")}
    for c, (judge, figure) in enumerate(panels):
        part = summary[(summary["judge"] == judge) & (summary["figure"] == figure)]
        for method, (color, marker) in styles.items():
            m = part[part["method"] == method].sort_values("labels")
            if m.empty:
                continue
            axes[0, c].plot(m["labels"], m["width"], color=color, marker=marker, label=method)
            axes[1, c].plot(m["labels"], m["coverage"], color=color, marker=marker, label=method)
        axes[0, c].set_title(f"{figure}\n{judge}", fontsize=9)
        budgets = sorted(set(part["budget"]))
        for ax in axes[:, c]:
            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(NullLocator())  # log minor ticks overlap at these few budgets
            ax.set_xticks(budgets, [str(b) for b in budgets], fontsize=8)
        axes[1, c].axhline(0.95, color="black", linewidth=0.8, linestyle="--")
        axes[1, c].set_ylim(-0.02, 1.02)
        axes[1, c].set_xlabel("labels (mean per repetition)")
    axes[0, 0].set_ylabel("mean 95% interval width")
    axes[1, 0].set_ylabel("coverage of the all-labels figure")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI)
    return path


def save_figures(figures: Mapping[str, Figure], directory: str | Path) -> list[Path]:
    """Write each figure as ``<directory>/<name>.png``; returns the paths."""
    return [save_figure(fig, Path(directory) / f"{name.replace('/', '_').replace(' ', '_')}.png")
            for name, fig in figures.items()]
