"""``annotate plan`` on a pointwise table: the ratings a target interval needs, per design and estimator.

The same variance formulas as the pairwise plan (``judgebias.annotation.planning``), on the linearised
variable of a rating figure (``pointwise_survey.figure_variables``): ``z_i = N * dg/dT . y_i``. Where an
item has no human rating yet, the mean score of the gold judges (the table's other judges, or
``--gold``) stands in for it, as the gold panel's votes stand in for human labels in the pairwise
plan; where no gold judge scored the item, the measured judge's own score does (a prediction: it
makes the item's ``s - h`` zero, so a plan resting mostly on those is optimistic, and says so).
Without any gold judge the pilot uses the rated items alone, their variance standing for the
population's: planned as if uniform (the other designs need a value on every item). PPI++ (the
judge's score predicting the rating) is planned from the rated items once 10 or more carry a rating.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from judgebias.annotation.planning import plan_rows
from judgebias.annotation.rating_loop import rating_frame, rating_units
from judgebias.metrics.pointwise_survey import FIGURES, figure_variables, rating_features, unit_ids
from judgebias.metrics.survey import numerical_gradient
from judgebias.stats import InsufficientData

MIN_PPI_LABELS = 10


def gold_scores(table: pd.DataFrame, judge: str, gold: Sequence[str] | None = None) -> pd.Series:
    """Per unit, the mean score of the gold judges (default: every other judge of the table)."""
    names = list(gold) if gold else sorted({j for j in table["judge"].unique() if j and j != judge})
    if judge in names:
        raise ValueError(f"--gold: the measured judge {judge!r} cannot be its own gold panel")
    unknown = [g for g in names if g not in set(table["judge"])]
    if unknown:
        raise ValueError(f"--gold: judge {unknown[0]!r} has no row in the table")
    rows = table[table["judge"].isin(names) & np.isfinite(table["score"].to_numpy(dtype=float))]
    return rows["score"].astype(float).groupby(unit_ids(rows).to_numpy()).mean()


def _variables(f: pd.DataFrame, figure: str) -> tuple:
    try:
        return figure_variables(f, figure)
    except InsufficientData as exc:
        raise ValueError(f"{figure} is undefined on this population: {exc}") from None


def _totals_gradient(y: np.ndarray, g) -> np.ndarray:
    totals = y.sum(axis=1)
    try:
        with np.errstate(divide="ignore", invalid="ignore"):
            ok = np.isfinite(g(totals))
    except InsufficientData as exc:
        raise ValueError(str(exc)) from None
    if not ok:
        raise ValueError("the figure is undefined on this population")
    return numerical_gradient(g, totals)


def rating_pilot(table: pd.DataFrame, units: pd.Index, judge: str, figure: str, *, self_map=None,
                 gold: Sequence[str] | None = None) -> dict:
    """``planning.pilot``'s keys for a rating figure over ``units``: ``z`` (Hájek), ``resid`` and
    ``lam`` (PPI++, from 10 rated units), ``labelled``, plus where the stand-ins came from."""
    if figure not in FIGURES:
        raise ValueError(f"unknown rating figure {figure!r} (a pointwise table plans: {', '.join(FIGURES)})")
    feats = rating_features(table, judge, self_map=self_map).loc[units]
    _variables(feats.assign(human=feats["score"]), figure)  # defined on this population at all?
    h, s = feats["human"].to_numpy(float), feats["score"].to_numpy(float)
    rated = np.isfinite(h)
    big_n = len(feats)
    stand = gold_scores(table, judge, gold).reindex(units).to_numpy(float)
    out = {"labelled": int(rated.sum()), "resid": None, "lam": None,
           "from_gold": int((~rated & np.isfinite(stand)).sum()),
           "from_own_score": int((~rated & ~np.isfinite(stand)).sum())}
    if np.isfinite(stand).any():
        mixed = np.where(rated, h, np.where(np.isfinite(stand), stand, s))
        y, g = _variables(feats.assign(human=mixed), figure)[:2]
        out["z"] = big_n * (_totals_gradient(y, g) @ y)
    else:
        if rated.sum() < 2:
            raise ValueError(f"nothing stands in for the ratings: no other judge scored these items and "
                             f"{int(rated.sum())} is rated; push and rate a first batch (or give --gold "
                             "judges whose scores stand in) before planning")
        y, g = _variables(feats[rated], figure)[:2]
        out["z"] = int(rated.sum()) * (_totals_gradient(y, g) @ y)
        out["hajek_labelled_only"] = True
        out["from_own_score"] = 0
        out["why_uniform_only"] = ("no other judge's score stands in for unrated items: planned from the "
                                   "rated ones, as uniform")
    if rated.sum() >= MIN_PPI_LABELS:
        try:
            y_ppi, yhat, g_ppi = _variables(feats[rated], figure)[2:]
            grad = _totals_gradient(y_ppi, g_ppi)
        except ValueError:
            grad = None  # the rated items alone leave the figure undefined: no PPI++ pilot yet
        if grad is not None:
            n = int(rated.sum())
            z, zh = n * (grad @ y_ppi), n * (grad @ yhat)
            var_h = float(np.var(zh, ddof=1))
            lam = 0.0 if var_h <= 0 else float(np.clip(np.cov(z, zh, ddof=1)[0, 1] / var_h, 0, 1))
            out["resid"], out["lam"] = z - lam * zh, lam
    if not np.any(np.abs(out["z"]) > 1e-12):
        raise ValueError(f"{figure}: the pilot has no variance (every unrated item's stand-in is the judge's "
                         "own score, which makes judge - human zero); rate a first batch or give --gold "
                         "judges whose scores stand in")
    return out


def rating_plan(table: pd.DataFrame, judge: str, figure: str, *, half_width: float | None,
                budgets: Sequence[int] = (), self_map=None, gold: Sequence[str] | None = None
                ) -> tuple[pd.DataFrame, dict]:
    """(plan rows as ``planning.plan`` gives them, the pilot's counts) over the units ``judge`` scored."""
    units = rating_units(table, [judge], self_map=self_map)
    p = rating_pilot(table, units.index, judge, figure, self_map=self_map, gold=gold)
    rows = plan_rows(rating_frame(units), p, judge, figure, half_width=half_width, budgets=budgets)
    return rows, {k: p[k] for k in ("labelled", "from_gold", "from_own_score")}
