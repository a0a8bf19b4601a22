"""Figures of the papers, drawn from ``analyze`` output (pure: data in, matplotlib Figure out).

Figures are built with ``matplotlib.figure.Figure`` directly (Agg rendering, no pyplot global
state, nothing shown); ``save_figures`` writes PNGs when asked. Every figure is FIGSIZE inches at
DPI, i.e. 1200 x 750 pixels, unless a size is given: sharp enough to publish (150 dpi), ticks at 8 pt
or more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from judgebias.display import file_stem, terminal_safe
from judgebias.runs.diskfull import naming_full_disk

FIGSIZE = (8.0, 5.0)
DPI = 150  # a figure a user can publish or share as is; 100 dpi blurred the ticks when scaled

_LABEL_MAX = 40  # characters of a name shown in a title, tick or legend


def label(name: Any) -> str:
    """A name from data as plot text: control characters shown as escapes (a raw ESC would also
    reach the terminal through matplotlib's missing-glyph warning) and cut at 40 characters, so a
    300-character judge name cannot squeeze the axes to nothing."""
    text = terminal_safe(str(name))
    return text if len(text) <= _LABEL_MAX else text[:_LABEL_MAX - 1] + "…"


MIN_JOINED_N = 5  # bins with fewer pairs are drawn hollow and not joined: their rate is noise


def new_figure(figsize=FIGSIZE) -> tuple[Figure, Any]:
    # Constrained layout keeps titles, tick labels and legends inside the saved canvas.
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot(1, 1, 1)


def ink(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour ``rgba`` (WCAG relative luminance)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(float(c)) for c in rgba[:3])
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    # Contrast with black is (L + 0.05) / 0.05, with white 1.05 / (L + 0.05): equal at L = 0.179.
    return "black" if luminance > 0.179 else "white"


def confusion_matrix(confusion: Mapping[str, int], title: str = "") -> Figure:
    """Wataoka Fig. 2: rows = human (own better / other better), columns = judge, with row rates."""
    m = np.array([[confusion["tp"], confusion["fn"]], [confusion["fp"], confusion["tn"]]], dtype=float)
    fig, ax = new_figure((5.6, 4.8))
    rates = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    image = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, f"{int(v)}\n({rates[i, j]:.0%} of row)", ha="center", va="center",
                color=ink(image.cmap(image.norm(rates[i, j]))))
    ax.set_xticks([0, 1], ["judge: own", "judge: other"])
    ax.set_yticks([0, 1], ["human:\nown", "human:\nother"])
    ax.set_xlabel("judge's choice")
    ax.set_ylabel("human's choice")
    ax.set_title(title or "Self-preference confusion matrix", fontsize=10, wrap=True)
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
    fig, ax = new_figure((width, max(3.0, 0.6 * len(raters) + 2)))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu_r", vmin=0, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.0%}\nn={int(counts[i, j])}", ha="center", va="center", fontsize=8,
                    color=ink(image.cmap(image.norm(v))))
    ax.set_xticks(range(len(pairings)), [f"{label(x)}\nvs {label(y)}" for x, y in pairings], fontsize=8)
    ax.set_yticks(range(len(raters)), [label(r) for r in raters])
    if special:
        ax.axhline(len(raters) - len(special) - 0.5, color="black", linewidth=1.5)
    fig.colorbar(image, ax=ax, shrink=0.8, label="win rate of the first-named generator")
    ax.set_title(title or "Win rate of the first-named generator, per rater")
    return fig


def bin_label(b: Mapping[str, Any], unit: str = "") -> str:
    """``[-20, 0)`` as "-20..0", the open ends as "< -100" / ">= 100" (what the bin holds)."""
    lo, hi = b["low"], b["high"]

    def num(v: float) -> str:
        return f"{v:g}{unit}"

    if lo is None:
        return f"< {num(hi)}"
    if hi is None:
        return f">= {num(lo)}"
    return f"{num(lo)}..{num(hi)}"


def _key(b: Mapping[str, Any]) -> tuple[float, float]:
    return (-np.inf if b["low"] is None else b["low"], np.inf if b["high"] is None else b["high"])


def binned_rates(ax, series: Mapping[str, Sequence[Mapping[str, Any]]], unit: str = "") -> None:
    """One curve per series over the same bins, one x position per bin (labelled with its range and
    n per series, so open-ended bins are not drawn at a made-up value and n never covers a bar).
    Bins with n < MIN_JOINED_N are hollow and not joined; an empty bin breaks the line."""
    spans = [_key(b) for bins in series.values() for b in bins if b["n"] > 0]
    if not spans:
        ax.text(0.5, 0.5, "no data in any bin", transform=ax.transAxes, ha="center", va="center")
        return
    # Every bin from the first to the last with data, empty ones included, so positions keep order.
    every = {_key(b): b for bins in series.values() for b in bins}
    keys = [k for k in sorted(every) if min(spans) <= k <= max(spans)]
    by_key = {name: {_key(b): b for b in bins if b["n"] > 0 and b["rate"] is not None}
              for name, bins in series.items()}
    dodge = 0.12 if len(series) > 1 else 0.0
    for k, ((name, bins), marker) in enumerate(zip(by_key.items(), "osD^v", strict=False)):
        x = np.arange(len(keys)) + (k - (len(series) - 1) / 2) * dodge
        present = np.array([key in bins for key in keys])
        y = np.array([bins[key]["rate"] if key in bins else np.nan for key in keys], dtype=float)
        n = np.array([bins[key]["n"] if key in bins else 0 for key in keys])
        low = np.array([bins[key]["ci_low"] if key in bins else np.nan for key in keys], dtype=float)
        high = np.array([bins[key]["ci_high"] if key in bins else np.nan for key in keys], dtype=float)
        bars = [np.clip(y - low, 0, None)[present], np.clip(high - y, 0, None)[present]]
        line = ax.errorbar(x[present], y[present], yerr=bars, fmt=marker, capsize=3, label=name,
                           clip_on=False)
        color = line[0].get_color()
        small = present & (n < MIN_JOINED_N)
        if small.any():
            ax.plot(x[small], y[small], marker, mfc="white", mec=color, clip_on=False, zorder=3)
        ax.plot(x, np.where(n >= MIN_JOINED_N, y, np.nan), "-", color=color, linewidth=1.2)
    ticks = []
    for key in keys:
        ns = [str(bins[key]["n"]) if key in bins else "0" for bins in by_key.values()]
        # One n where the series agree; else two side by side, more one per line in legend order:
        # "n=a/b/c/d" under each of 11 bins ran into its neighbours (LLMBar's four judges).
        n_text = ns[0] if len(set(ns)) == 1 else "/".join(ns) if len(ns) <= 2 else "\n".join(ns)
        ticks.append(f"{bin_label(every[key], unit)}\nn={n_text}")
    ax.set_xticks(range(len(keys)), ticks, fontsize=8)
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylim(-0.04, 1.04)


def _small_note(series) -> str:
    small = any(0 < b["n"] < MIN_JOINED_N for bins in series.values() for b in bins)
    return f"; hollow: n < {MIN_JOINED_N}, not joined" if small else ""


def verbosity_curve(bins: Sequence[Mapping[str, Any]], title: str = "",
                    xlabel: str = "word count difference, chosen vs rejected (%)",
                    ylabel: str = "human alignment") -> Figure:
    """Saito Fig. 5: agreement with humans by (len_chosen - len_rejected) / len_rejected in %
    (or any rate binned by a relative word-count difference, e.g. Fig. 4 for humans)."""
    fig, ax = new_figure()
    series = {ylabel: bins}
    binned_rates(ax, series)  # the unit is in the axis label: "-100%..-80%" x 11 bins ran together
    ax.set_xlabel(xlabel + " (bins; 95% intervals" + _small_note(series) + ")")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Verbosity: human alignment by length difference")
    return fig


def verbosity_judges(series: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Saito Fig. 5 with every judge on one axis: the x (length of the humans' choice against the
    other) is a property of the pair, the same for all judges, so the curves compare directly."""
    fig, ax = new_figure()
    binned_rates(ax, series)  # the unit is in the axis label: "-100%..-80%" x 11 bins ran together
    ax.set_xlabel("word count difference, the humans' choice vs the other (%)\n(bins; n per judge in legend "
                  "order; 95% intervals" + _small_note(series) + ")")
    ax.set_ylabel("human alignment")
    ax.legend(fontsize=8)
    ax.set_title("Verbosity: each judge's agreement with humans by length difference")
    return fig


def perplexity_curves(series: Mapping[str, Sequence[Mapping[str, Any]]], title: str = "",
                      xlabel: str = "log ppl(A) - log ppl(B)") -> Figure:
    """Wataoka Figs. 3-4: win rate of A by log-perplexity difference, one curve per series
    (judge vs human, or own vs other)."""
    fig, ax = new_figure()
    binned_rates(ax, series)
    ax.set_xlabel(xlabel + " (bins; n per series in legend order; 95% intervals"
                  + _small_note(series) + ")")
    ax.set_ylabel("P(A wins)")
    ax.axhline(0.5, color="grey", linewidth=0.8)
    ax.legend(fontsize=8)
    ax.set_title(title or "Win rate by perplexity difference")
    return fig


def axis_span(values: Sequence[float]) -> tuple[float, float]:
    """Y limits that hold zero and every value with a margin, so no interval ends on the frame."""
    finite = [v for v in values if v is not None and np.isfinite(v)] + [0.0]
    lo, hi = min(finite), max(finite)
    pad = max(0.08 * (hi - lo), 0.02)
    return lo - pad, hi + pad


def estimate_bars(estimates: Mapping[str, Mapping[str, Any]], title: str = "", ylabel: str = "") -> Figure:
    """One bar per judge with its 95% interval (DBG scores, or any other estimate)."""
    items = [(k, e) for k, e in estimates.items() if e and e.get("value") is not None]
    if not items:
        raise ValueError("no estimate to plot")
    v = np.array([e["value"] for _, e in items], dtype=float)
    lo = np.array([e["ci_low"] if e.get("ci_low") is not None else np.nan for _, e in items], dtype=float)
    hi = np.array([e["ci_high"] if e.get("ci_high") is not None else np.nan for _, e in items], dtype=float)
    fig, ax = new_figure()
    ax.bar(range(len(v)), v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], capsize=4,
           color=["tab:red" if x > 0 else "tab:blue" for x in v])
    ax.axhline(0, color="black", linewidth=1.0, zorder=3)
    ax.set_ylim(*axis_span([*v, *lo, *hi]))
    # The value and n under each name: text over a bar would cover its interval.
    ax.set_xticks(range(len(v)), [f"{label(k)}\n{e['value']:+.2f} (n={e.get('n', '?')})" for k, e in items])
    ax.set_ylabel(ylabel or "DBG score")
    ax.set_title(title or "DBG score (judge - gold win rate on own responses), 95% CI")
    return fig


# The kinds of figure drawn once per judge, saved as <kind>_<judge>.
PER_JUDGE = ("confusion", "verbosity", "perplexity", "perplexity_own_other")


def judge_figures(stems: Iterable[str], judge: str) -> list[str]:
    """Which of these saved figure names (file stems) are ``judge``'s own figures."""
    mine = {file_stem(f"{kind}_{judge}") for kind in PER_JUDGE}
    return [s for s in stems if s in mine]


def figures_for(result: Mapping[str, Any]) -> dict[str, Figure]:
    """Every figure an ``analyze`` result supports, keyed by a file-friendly name."""
    figs: dict[str, Figure] = {}
    judges = result.get("judges") or {}
    for judge, m in judges.items():
        shown = label(judge)
        if "self_preference_eo" in m:
            figs[f"confusion_{judge}"] = confusion_matrix(m["self_preference_eo"]["confusion"],
                                                          f"{shown}: own response better? (human vs judge)")
        if "verbosity_bias" in m:
            figs[f"verbosity_{judge}"] = verbosity_curve(m["verbosity_bias"]["alignment_bins"],
                                                         f"{shown}: human alignment by length difference")
        pp = m.get("perplexity_preference")
        if pp:
            series = {shown: pp["judge_bins"]}
            title = f"{shown}: P(A wins) by perplexity difference (no human labels)"
            if pp.get("human_bins"):
                series["human"] = pp["human_bins"]
                title = f"{shown} vs humans: P(A wins) by perplexity difference"
            figs[f"perplexity_{judge}"] = perplexity_curves(series, title)
        oo = m.get("perplexity_own_other")
        if oo:
            figs[f"perplexity_own_other_{judge}"] = perplexity_curves(
                {"own response (as A)": oo["own_bins"], "other models' pairs": oo["other_bins"]},
                f"{shown}: own vs other texts by perplexity")
    ver = {label(j): m["verbosity_bias"]["alignment_bins"] for j, m in judges.items()
           if (m.get("verbosity_bias") or {}).get("alignment_bins")}
    if len(ver) > 1:  # the judges overlaid: they share the axis (see verbosity_judges)
        figs["verbosity_judges"] = verbosity_judges(ver)
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


_COVERAGE_FLOOR = 0.80


def replay_figure(summary) -> Figure:
    """Human-loop replay: mean 95%-interval width (top) and coverage (bottom) against labels, one
    line per method, one column per (judge, figure). Coverage is drawn from 0.80 up, where the
    difference between 0.93 and 0.95 shows; a coverage below (the ranking's 0) sits on the bottom
    edge as a down-pointing marker. 0.95 (nominal) and 0.93 (the accepted floor) are drawn."""
    panels = list(summary.groupby(["judge", "figure"], sort=True).groups)
    cols = max(len(panels), 1)
    fig = Figure(figsize=(3.6 * cols, 6.4), dpi=DPI, layout="constrained")
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
            cov = m["coverage"].to_numpy(dtype=float)
            off = cov < _COVERAGE_FLOOR
            axes[1, c].plot(m["labels"], np.maximum(cov, _COVERAGE_FLOOR), color=color, marker=marker,
                            label=method)
            if off.any():
                axes[1, c].plot(m["labels"][off], np.full(off.sum(), _COVERAGE_FLOOR), "v", color=color,
                                markersize=9, clip_on=False)
        axes[0, c].set_title(f"{figure}\n{judge}", fontsize=9)
        budgets = sorted(set(part["budget"]))
        for ax in axes[:, c]:
            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(NullLocator())  # log minor ticks overlap at these few budgets
            ax.set_xticks(budgets, [str(b) for b in budgets], fontsize=8)
        axes[1, c].axhline(0.95, color="black", linewidth=0.8, linestyle="--")
        axes[1, c].axhline(0.93, color="black", linewidth=0.6, linestyle=":")
        axes[1, c].set_ylim(_COVERAGE_FLOOR, 1.005)
        axes[1, c].set_xlabel("labels (mean per repetition)")
    axes[0, 0].set_ylabel("mean 95% interval width")
    axes[1, 0].set_ylabel("coverage of the all-labels figure\n(▼: below 0.80)")
    axes[0, 0].legend(fontsize=8)
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders created)."""
    path = Path(path)
    with naming_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fig.savefig(path, format="png", dpi=DPI)
        except BaseException:  # a half PNG would pass for a plot, and holds space on a full disk
            path.unlink(missing_ok=True)
            raise
    return path


def save_figures(figures: Mapping[str, Figure], directory: str | Path) -> list[Path]:
    """Write each figure as ``<directory>/<name>.png``; returns the paths."""
    return [save_figure(fig, Path(directory) / f"{file_stem(name)}.png") for name, fig in figures.items()]

