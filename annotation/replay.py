"""Replay the human loop on a table whose human labels are all known: the proof that it is sound.

For each budget and repetition the labels are hidden, the loop buys them in batches (draw, reveal the
drawn pairs' labels), and the figure is estimated; the all-labels figure over the same population is
the truth. Four methods:

* ``ranking``: the contested-pairs ranking (``judgebias.annotation.selection``), top of the list first, with
  the plain estimate on the labelled pairs (deterministic: every repetition is the same);
* ``uniform``: simple random sample, plain estimate (the standard metric on the labelled pairs);
* ``design``: the probability design (default Poisson), Hájek estimate with design variance;
* ``ppi``: the same draws, PPI++ with the gold panel's votes as predictions.

Reported per method, budget, judge and figure: bias, RMSE, 95%-interval coverage, mean width, and
the share of repetitions where the figure was defined at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from judgebias.annotation.sampling import DEFAULT_DESIGN, Frame, combined_design, draw_batch, population_frame
from judgebias.annotation.selection import select_pairs
from judgebias.metrics import agreement, self_preference_eo, verbosity_bias
from judgebias.metrics import frame as F
from judgebias.metrics.human import ESTIMANDS, applicable, estimate, pair_features, population_variables
from judgebias.metrics.survey import SampleDesign, smooth_estimate
from judgebias.stats import InsufficientData

METHODS = ("ranking", "uniform", "design", "ppi")
FIGURES = ("eo", "agreement_human", "verbosity")
_PLAIN = {
    "eo": lambda t, j, sm: self_preference_eo(t, j, sm),
    "agreement_human": lambda t, j, sm: agreement(t, j, "human"),
    "verbosity": lambda t, j, sm: verbosity_bias(t, j),
}


@dataclass(frozen=True)
class ReplaySettings:
    judges: Sequence[str]
    budgets: Sequence[int] = (25, 50, 100, 200, 400)
    reps: int = 200
    batch: int = 25
    design: str = DEFAULT_DESIGN
    population: str = "all"
    figures: Sequence[str] = FIGURES
    self_map: Mapping[str, Iterable[str]] | None = None
    gold: Sequence[str] | None = None
    seed: int = 0


def _masked(prepared: pd.DataFrame, labelled_pairs: np.ndarray) -> pd.DataFrame:
    """The prepared table with human labels only on ``labelled_pairs`` (pair codes)."""
    keep = np.isin(prepared[F.PAIR].to_numpy(), labelled_pairs)
    out = prepared.copy(deep=False)
    out[F.HUMAN] = np.where(keep, prepared[F.HUMAN].to_numpy(), F.MISSING).astype(np.int8)
    out[F.HUMAN_VOTE] = np.where(keep, prepared[F.HUMAN_VOTE].to_numpy(), np.nan)
    out[F.HUMAN_N] = np.where(keep, prepared[F.HUMAN_N].to_numpy(), 0)
    out[F.HUMAN_TIES] = np.where(keep, prepared[F.HUMAN_TIES].to_numpy(), 0)
    return out


def _plain(prepared, codes_of, pair_ids, judge, figure, self_map) -> tuple[float, float, float] | None:
    try:
        est = _PLAIN[figure](_masked(prepared, codes_of[list(pair_ids)]), judge, self_map)
    except InsufficientData:
        return None
    if est.value is None or est.ci_low is None or np.isnan(est.ci_low):
        return None
    return est.value, est.ci_low, est.ci_high


def draw_loop(frame: Frame, budget: int, settings: ReplaySettings, seed: int) -> pd.DataFrame:
    """The loop's draws for one budget: batches of ``settings.batch`` until the budget is spent."""
    parts, drawn, spent, batch = [], [], 0, 0
    while spent < budget and len(drawn) < len(frame.pairs):
        n = min(settings.batch, budget - spent)
        batch += 1
        rows = draw_batch(frame, settings.design, n, exclude=drawn, seed=seed * 1000 + batch)
        rows = rows.assign(batch=batch, design=settings.design)
        parts.append(rows)
        drawn.extend(rows.index[rows["selected"]])
        spent += n
    return pd.concat(parts).rename_axis("pair_id").reset_index()


def replay(table: pd.DataFrame, settings: ReplaySettings) -> pd.DataFrame:
    """One row per (judge, figure, method, budget, repetition): estimate, interval and the truth."""
    unknown = [f for f in settings.figures if f not in ESTIMANDS]
    if unknown:
        raise ValueError(f"unknown figure {unknown[0]!r} (a pairwise table replays: {', '.join(ESTIMANDS)})")
    prepared = F.prepare(table)
    codes_of = pd.Series(prepared[F.PAIR].to_numpy(), index=prepared["pair_id"].to_numpy())
    codes_of = codes_of[~codes_of.index.duplicated()]
    frame = population_frame(table, settings.population, judges=settings.judges, gold_judges=settings.gold,
                             self_map=settings.self_map)
    population = frame.pairs.index
    over = [b for b in settings.budgets if b > len(population)]
    if over:  # labels beyond the population would be drawn from pairs that are not there
        raise ValueError(f"--budgets {over[0]} is more labels than the {len(population)} pairs of the "
                         f"population {settings.population!r}: give budgets up to {len(population)}")
    feats = {j: pair_features(table, j, self_map=settings.self_map, gold=settings.gold)
             for j in settings.judges}
    census = SampleDesign(np.ones(len(population)), np.ones(len(population), bool), population="census")
    truth, arrays = {}, {}
    for j, f in feats.items():
        for fig in applicable(f[f.index.isin(population)], settings.figures):
            y, yhat = population_variables(f, population, fig)
            y = np.nan_to_num(y, nan=0.0)  # a pair the table left unlabelled: no human majority
            arrays[j, fig] = (y, yhat)
            truth[j, fig] = smooth_estimate(y, ESTIMANDS[fig].g, census).value
    ranking = select_pairs(table, max(settings.budgets), judges=settings.judges, gold_judges=settings.gold,
                           self_map=settings.self_map, include_labelled=True).chosen
    ranking = ranking[ranking["pair_id"].isin(population)]["pair_id"].tolist()
    rows = []

    def add(j, fig, method, budget, rep, labels, res):
        value, lo, hi = res if res is not None else (np.nan, np.nan, np.nan)
        rows.append({"judge": j, "figure": fig, "method": method, "budget": budget, "rep": rep,
                     "labels": labels, "value": value, "ci_low": lo, "ci_high": hi,
                     "truth": truth[j, fig]})

    rng = np.random.default_rng(settings.seed)
    for budget in settings.budgets:
        top = ranking[:budget]
        for (j, fig) in arrays:
            add(j, fig, "ranking", budget, 0, len(top),
                _plain(prepared, codes_of, top, j, fig, settings.self_map))
        for rep in range(settings.reps):
            uniform = rng.choice(population.to_numpy(), size=min(budget, len(population)), replace=False)
            draws = draw_loop(frame, budget, settings, seed=int(rng.integers(2**31)))
            drawn = draws.loc[draws["selected"], "pair_id"]
            design, order, _ = combined_design(draws, drawn, population=settings.population)
            for (j, fig), (y, yhat) in arrays.items():
                add(j, fig, "uniform", budget, rep, len(uniform),
                    _plain(prepared, codes_of, uniform, j, fig, settings.self_map))
                idx = population.get_indexer(order)
                for method, pred in (("design", None), ("ppi", yhat[:, idx])):
                    try:
                        est = estimate(y[:, idx], pred, fig, design)
                        res = (est.value, est.ci_low, est.ci_high)
                    except InsufficientData:
                        res = None
                    add(j, fig, method, budget, rep, design.n, res)
    return pd.DataFrame(rows)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Bias, RMSE, coverage and mean width per (judge, figure, method, budget), over defined reps."""
    r = results.assign(err=results["value"] - results["truth"],
                       covered=(results["ci_low"] <= results["truth"])
                       & (results["truth"] <= results["ci_high"]),
                       width=results["ci_high"] - results["ci_low"], defined=results["value"].notna())
    d = r[r["defined"]]
    keys = ["judge", "figure", "method", "budget"]
    out = d.groupby(keys).agg(bias=("err", "mean"), rmse=("err", lambda e: float(np.sqrt(np.mean(e**2)))),
                              coverage=("covered", "mean"), width=("width", "mean"),
                              labels=("labels", "mean"), truth=("truth", "first"))
    out["defined"] = r.groupby(keys)["defined"].mean()
    out["reps"] = r.groupby(keys).size()
    return out.reset_index()


def labels_saved(summary: pd.DataFrame) -> pd.DataFrame:
    """How many labels PPI++ saves at equal width: per (judge, figure, budget), the labels the Hájek
    estimate of the same draws would need for PPI++'s mean width there, interpolated on log width
    against log labels between the replayed budgets (widths fall about as 1/sqrt(n)); NaN outside
    the replayed range. Both estimators' intervals are the ones whose coverage the replay reports."""
    rows = []
    for (judge, figure), g in summary.groupby(["judge", "figure"], sort=True):
        hajek = g[g["method"] == "design"].sort_values("labels")
        ppi = g[g["method"] == "ppi"].set_index("budget")
        if len(hajek) < 2 or ppi.empty:
            continue
        log_n, log_w = np.log(hajek["labels"].to_numpy()), np.log(hajek["width"].to_numpy())
        for budget, r in ppi.iterrows():
            # Width falls with labels, so interpolate labels as a function of (decreasing) width.
            order = np.argsort(log_w)
            w = np.log(r["width"])
            inside = log_w.min() <= w <= log_w.max()
            need = float(np.exp(np.interp(w, log_w[order], log_n[order]))) if inside else np.nan
            rows.append({"judge": judge, "figure": figure, "budget": budget, "labels": r["labels"],
                         "ppi_width": r["width"], "hajek_labels_for_that_width": need,
                         "labels_saved": need - r["labels"] if inside else np.nan})
    return pd.DataFrame(rows)


def saved_markdown(saved: pd.DataFrame) -> str:
    """``labels_saved`` as a markdown table."""
    lines = ["| judge | figure | labels | PPI++ width | Hájek labels for that width | saved |",
             "|---|---|---|---|---|---|"]
    for r in saved.itertuples(index=False):
        need = "beyond the replayed budgets" if np.isnan(r.hajek_labels_for_that_width) else \
            f"{r.hajek_labels_for_that_width:.0f}"
        gain = "" if np.isnan(r.labels_saved) else f"{r.labels_saved:+.0f} ({r.labels_saved / r.labels:+.0%})"
        lines.append(f"| {r.judge} | {r.figure} | {r.labels:.0f} | {r.ppi_width:.3f} | {need} | {gain} |")
    return "\n".join(lines)


def markdown(summary: pd.DataFrame, methods: Sequence[str] = METHODS) -> str:
    """The summary as one markdown table: a row per (judge, figure, budget), per method its
    bias / RMSE / coverage / mean width (the ranking is deterministic: its coverage is 0 or 1)."""
    head = ("| judge | figure | labels | "
            + " | ".join(f"{m} bias / RMSE / cover / width" for m in methods) + " |")
    lines = [head, "|" + "---|" * (3 + len(methods))]
    for (judge, figure, budget), g in summary.groupby(["judge", "figure", "budget"], sort=True):
        cells = []
        for m in methods:
            r = g[g["method"] == m]
            if r.empty:
                cells.append("-")
                continue
            r = r.iloc[0]
            undefined = f" ({1 - r['defined']:.0%} undefined)" if r["defined"] < 1 else ""
            if abs(r["labels"] - budget) > 0.02 * budget:  # Poisson draws: the size is random, re-draws free
                undefined += f" [{r['labels']:.0f} labels]"
            cells.append(f"{r['bias']:+.3f} / {r['rmse']:.3f} / {r['coverage']:.2f} / "
                         f"{r['width']:.3f}{undefined}")
        lines.append(f"| {judge} | {figure} | {budget} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
