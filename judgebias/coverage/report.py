"""The benchmark's outputs: the long CSV, markdown tables (coverage with the share of
replications where the figure was defined; mean width; bias) and the coverage plot."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from judgebias.coverage import TARGET
from judgebias.display import spreadsheet_safe


def _wide(summary: pd.DataFrame, cell) -> str:
    ns = sorted(summary["n"].unique())
    lines = ["| family | figure | interval | " + " | ".join(f"n={n}" for n in ns) + " |",
             "|---|---|---|" + "---|" * len(ns)]
    for (fam, fig), g in summary.groupby(["family", "figure"], sort=False):
        by_n = {int(r["n"]): r for r in g.to_dict("records")}
        cells = [cell(by_n[n]) if n in by_n else "" for n in ns]
        lines.append(f"| {fam} | {fig} | {g['method'].iloc[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# Coverage over fewer reported replications than this is too noisy to print (or to count for
# ``reliable_from``): the cell says how often the product reported the figure instead.
MIN_REPORTED = 100


def _coverage_cell(r: dict) -> str:
    if r["defined"] == 0:
        return "not reported"
    reported = round(r["defined"] * r["reps"])
    if reported < MIN_REPORTED:
        return f"reported in {reported} of {int(r['reps'])}"
    text = f"{r['coverage']:.3f}"
    if r["coverage"] < TARGET:
        text = f"**{text}**"
    if r["defined"] < 0.995:
        text += f" (d {r['defined']:.2f})"
    return text


def _num(fmt: str):
    def cell(r: dict) -> str:
        return "" if r["defined"] == 0 or math.isnan(r[fmt[0]]) else format(r[fmt[0]], fmt[1])
    return cell


def markdown(summary: pd.DataFrame) -> str:
    """Three tables: coverage (bold below the target; "d" = share of replications where the product
    reported the figure, when not all), mean width, and bias (mean estimate - truth), then the
    smallest n from which each figure holds the target."""
    reps = int(summary["reps"].max())
    return "\n\n".join([
        f"Coverage of the 95% interval ({reps} replications per cell; bold: below {TARGET}; "
        "(d x): the figure was reported in a share x of the replications, coverage is over those):",
        _wide(summary, _coverage_cell),
        "Mean width of the interval:", _wide(summary, _num(("width", ".3f"))),
        "Bias (mean estimate - truth):", _wide(summary, _num(("bias", "+.3f"))),
        f"Smallest n of the grid from which the coverage stays at or above {TARGET}:",
        reliable_markdown(summary),
    ])


def reliable_from(summary: pd.DataFrame) -> pd.DataFrame:
    """Per figure, the smallest n of the grid from which on every larger n the figure was reported
    (in ``MIN_REPORTED`` replications or more) and its coverage reached the target (None when even
    the largest n misses it), with the lowest
    coverage seen from there on."""
    out = []
    for (fam, fig), g in summary.groupby(["family", "figure"], sort=False):
        g = g.sort_values("n")
        ok = ((g["defined"] * g["reps"] >= MIN_REPORTED) & (g["coverage"] >= TARGET)).to_numpy()
        # walk down from the largest n while every cell holds
        k = len(ok)
        while k > 0 and ok[k - 1]:
            k -= 1
        first = int(g["n"].iloc[k]) if k < len(ok) else None
        held = g.iloc[k:] if first is not None else g.iloc[0:0]
        out.append({"family": fam, "figure": fig, "method": g["method"].iloc[0], "reliable_from_n": first,
                    "lowest_coverage_from_there": float(held["coverage"].min()) if len(held) else math.nan})
    frame = pd.DataFrame(out)
    frame["reliable_from_n"] = pd.array([r["reliable_from_n"] for r in out], dtype="Int64")
    return frame


def reliable_markdown(summary: pd.DataFrame) -> str:
    lines = ["| family | figure | interval | reliable from n | lowest coverage from there |",
             "|---|---|---|---|---|"]
    for r in reliable_from(summary).to_dict("records"):
        n = "never" if pd.isna(r["reliable_from_n"]) else str(int(r["reliable_from_n"]))
        low = "" if math.isnan(r["lowest_coverage_from_there"]) else f"{r['lowest_coverage_from_there']:.3f}"
        lines.append(f"| {r['family']} | {r['figure']} | {r['method']} | {n} | {low} |")
    return "\n".join(lines) + "\n"


def coverage_figure(summary: pd.DataFrame) -> Figure:
    """Coverage against n (log scale), one panel per family, one line per figure; the target and
    95% as horizontal lines."""
    fams = list(dict.fromkeys(summary["family"]))
    cols = 4
    rows = math.ceil(len(fams) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    for ax, fam in zip(axes.ravel(), fams, strict=False):
        g = summary[(summary["family"] == fam) & (summary["defined"] * summary["reps"] >= MIN_REPORTED)]
        for name, f in g.groupby("figure", sort=False):
            ax.plot(f["n"], f["coverage"], marker="o", ms=3, label=name)
        ax.axhline(0.95, color="grey", lw=0.8)
        ax.axhline(TARGET, color="red", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_ylim(0.80, 1.0)
        ax.set_title(fam, fontsize=9)
        if len(g):
            ax.legend(fontsize=6, loc="lower right")
    for ax in axes.ravel()[len(fams):]:
        ax.set_axis_off()
    fig.supxlabel("n (units per table; expected labels for human_loop)")
    fig.supylabel("coverage of the 95% interval")
    return fig


def write(summary: pd.DataFrame, folder: str | Path) -> dict[str, Path]:
    """coverage.csv, coverage.md and coverage.png in ``folder`` (created); returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"csv": folder / "coverage.csv", "markdown": folder / "coverage.md",
             "plot": folder / "coverage.png"}
    spreadsheet_safe(summary).to_csv(paths["csv"], index=False, float_format="%.6g")
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    coverage_figure(summary).savefig(paths["plot"], dpi=110)
    return paths


# --- nested processes (``judgebias coverage --nested``; judgebias.coverage.nested) -----------------

def _nested_cell(r: dict) -> str:
    """"clustered / independent" coverage of one cell; bold below the target."""
    def one(cov: float, defined: float) -> str:
        reported = round(defined * r["reps"])
        if reported == 0:
            return "-"
        text = f"{cov:.3f}" if reported >= MIN_REPORTED else f"({cov:.2f} in {reported})"
        return f"**{text}**" if cov < TARGET and reported >= MIN_REPORTED else text
    return f"{one(r['coverage'], r['defined'])} / {one(r['coverage_independent'], r['defined_independent'])}"


def nested_markdown(summary: pd.DataFrame) -> str:
    """Coverage by figure x rows per cluster x ICC (rows of the table) x number of clusters
    (columns), each cell "the product's clustered interval / the same figure with
    ``cluster_by="none"``", then the smallest number of clusters from which each figure holds."""
    from judgebias.coverage.nested import reliable_from

    gs = sorted(summary["clusters"].unique())
    reps = sorted(summary["reps"].unique())
    se = math.sqrt(0.95 * 0.05 / min(reps))
    lines = [f"Coverage of the 95% interval on nested tables ({', '.join(map(str, reps))} replications per "
             f"cell, Monte-Carlo SE about {se:.3f} at 0.95; bold: below {TARGET}; each cell: as printed, "
             "clustered by the prompt / the same figure with `cluster_by=\"none\"`; units per table: "
             "clusters x the mean rows per cluster):", "",
             "| family | figure | interval | rows per cluster | ICC | "
             + " | ".join(f"{g} clusters" for g in gs) + " |",
             "|---|---|---|---|---|" + "---|" * len(gs)]
    for (fam, fig, rows, icc), g in summary.groupby(["family", "figure", "rows", "icc"], sort=False):
        by_g = {int(r["clusters"]): r for r in g.to_dict("records")}
        cells = [_nested_cell(by_g[c]) if c in by_g else "" for c in gs]
        lines.append(f"| {fam} | {fig} | {g['method'].iloc[0]} | {rows} | {icc:g} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Smallest number of clusters of the grid from which the clustered interval holds "
              f"{TARGET} at every larger number, ICC and rows per cluster (never: not even at the "
              "largest); the width ratio is clustered / independent at the largest ICC and number of "
              "clusters (the realised nesting of the figure's units); 'within noise': no cell more than "
              "1.645 Monte-Carlo SEs below the target and the cells from there pooled at or above it; the "
              "pooled column is the clustered coverage over the top ICC's cells from 20 clusters on, one "
              "number with less Monte-Carlo noise than a cell:", "",
              "| family | figure | holds from clusters | within noise from | lowest coverage from there | "
              "lowest anywhere | "
              "top ICC, 20+ clusters pooled (SE) | independent: lowest at the top ICC | width ratio |",
              "|---|---|---|---|---|---|---|---|---|"]
    top = summary[(summary["icc"] == summary["icc"].max())
                  & (summary["clusters"] == summary["clusters"].max())]
    ratio = top.groupby(["family", "figure"])["width_ratio"].mean()
    for r in reliable_from(summary).to_dict("records"):
        first, within = ("never" if pd.isna(r[c]) else str(int(r[c]))
                         for c in ("reliable_from_clusters", "within_noise_from_clusters"))
        def num(x: float) -> str:
            return "" if math.isnan(x) else f"{x:.3f}"
        w = ratio.get((r["family"], r["figure"]), math.nan)
        pooled = "" if math.isnan(r["pooled_top_icc"]) else \
            f"{num(r['pooled_top_icc'])} ({num(r['pooled_top_icc_se'])})"
        lines.append(f"| {r['family']} | {r['figure']} | {first} | {within} | "
                     f"{num(r['lowest_coverage_from_there'])} | "
                     f"{num(r['lowest_coverage'])} | {pooled} | {num(r['lowest_independent_at_top_icc'])} | "
                     f"{'' if math.isnan(w) else f'{w:.2f}'} |")
    return "\n".join(lines) + "\n"


def write_nested(summary: pd.DataFrame, folder: str | Path) -> dict[str, Path]:
    """coverage_nested.csv and coverage_nested.md in ``folder`` (created); returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"csv": folder / "coverage_nested.csv", "markdown": folder / "coverage_nested.md"}
    spreadsheet_safe(summary).to_csv(paths["csv"], index=False, float_format="%.6g")
    paths["markdown"].write_text(nested_markdown(summary), encoding="utf-8")
    return paths
