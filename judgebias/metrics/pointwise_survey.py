"""Pointwise figures for a whole population from a probability sample of human ratings.

A human rating is bought for items drawn by a probability design (``judgebias.metrics.survey``:
each item ``i`` of the population has a known inclusion probability ``pi_i``); the judge's score
``s_i`` is known on every item. Three figures, each Hájek and PPI++ (the judge's score as the
prediction of the human one):

* ``human_mean``: the population mean of the human score ``h``. Hájek: ``T_h / T_1`` (totals of ``h``
  and 1 over the sample, weighted by ``1/pi``). PPI++: the same ratio of the prediction-powered totals
  with ``yhat = (s, 1)``; ``lam = 1`` reads ``mean_U(s) + Hájek(h - s)``, ``lam = 0`` is Hájek.
* ``score_bias_human``: mean judge - human score over the population. ``mean_U(s)`` is known
  exactly, so PPI++ subtracts the PPI++ human mean from it; Hájek is the Hájek mean of ``s - h``
  (the design-based estimate that uses the labelled items alone).
* ``score_self_preference``: the Equal-Opportunity analogue on scores, the mean of ``s - h`` on the
  judge's own responses minus the same on the others'. Hájek: a difference of two domain ratios;
  PPI++: known domain means of ``s`` minus the PPI++ human means of each domain.

Intervals, degrees of freedom and the leave-one-out power tuning are ``survey.smooth_estimate``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from judgebias.metrics.frame import isin
from judgebias.metrics.origin import SelfMap, self_set
from judgebias.metrics.survey import SampleDesign, smooth_estimate
from judgebias.stats import Estimate, InsufficientData
from judgebias.tables.pointwise import human_mean

FIGURES = ("human_mean", "score_bias_human", "score_self_preference")
DESCRIPTIONS = {
    "human_mean": "population mean of the human score (mean of the raters per item)",
    "score_bias_human": "population mean of judge score - human score",
    "score_self_preference": "mean (judge - human) on the judge's own responses minus on the others'",
}


def unit_ids(df: pd.DataFrame) -> pd.Series:
    """The sampling unit of each row: its item, and its criterion where a table scores several."""
    crit = df["criterion"].astype(str) if "criterion" in df.columns else pd.Series("", index=df.index)
    several = crit.groupby(df["item_id"].astype(str)).nunique().max() > 1 if len(df) else False
    ids = df["item_id"].astype(str)
    return ids + "::" + crit if several else ids


def rating_features(df: pd.DataFrame, judge: str, *, self_map: SelfMap | None = None) -> pd.DataFrame:
    """One row per unit the judge scored (index: ``unit_ids``): ``score``, ``human`` (mean rating,
    NaN where unrated) and ``own`` (the judge, or a generator ``self_map`` gives it, wrote it)."""
    for column in ("item_id", "judge", "score", "generator", "human_scores"):
        if column not in df.columns:
            raise ValueError(f"rating figures need column {column!r}")
    rows = df[df["judge"] == judge]
    if rows.empty:
        raise InsufficientData(f"no row of judge {judge!r}")
    # An unscored row is no unit of this judge; a design unit without a score fails in _aligned.
    rows = rows[np.isfinite(rows["score"].to_numpy(dtype=float))]
    score = rows["score"].to_numpy(dtype=float)
    ids = unit_ids(rows)
    if ids.duplicated().any():
        raise ValueError(f"item {ids[ids.duplicated()].iloc[0]!r} appears twice for judge {judge!r}")
    gen = rows["generator"].astype(str)
    own = isin(gen, list(self_set(df, judge, self_map)))
    # An item whose writer is unknown is neither own nor other: it drops out of self-preference only.
    return pd.DataFrame({"score": score, "human": human_mean(rows), "own": own,
                         "other": ~own & (gen.str.strip() != "").to_numpy()},
                        index=pd.Index(ids, name="unit"))


def _aligned(features: pd.DataFrame, units: pd.Index, design: SampleDesign) -> pd.DataFrame:
    if len(units) != design.size:
        raise ValueError(f"the design has {design.size} units but {len(units)} unit ids were given")
    missing = units[~units.isin(features.index)]
    if len(missing):
        raise ValueError(f"unit {missing[0]!r} of the design has no score of this judge: the prediction is "
                         "needed on every unit of the population (judge it, or leave it out of the draw)")
    f = features.loc[units]
    unrated = f.index[design.sampled & ~np.isfinite(f["human"].to_numpy())]
    if len(unrated):
        raise ValueError(f"unit {unrated[0]!r} is counted as labelled but has no human rating")
    return f


def figure_variables(f: pd.DataFrame, name: str
                     ) -> tuple[np.ndarray, Callable, np.ndarray, np.ndarray, Callable]:
    """(y, g) of the Hájek form and (y, yhat, g) of the PPI++ form of one figure: rows of per-unit
    variables (NaN off the sample where they need a rating) and the function of their totals. The
    PPI++ rows predict ``h`` by ``s``; the known population means of ``s`` enter ``g`` as constants.
    ``f``: ``rating_features`` rows of the population (``annotate plan`` linearises these too)."""
    s, h = f["score"].to_numpy(float), f["human"].to_numpy(float)
    one = np.ones_like(s)
    if name == "human_mean":
        y = np.vstack([h, one])
        return y, _ratio, y, np.vstack([s, one]), _ratio
    if name == "score_bias_human":
        mean_s = float(s.mean())
        return (np.vstack([s - h, one]), _ratio, np.vstack([h, one]), np.vstack([s, one]),
                lambda t: mean_s - t[0] / t[1])
    own = f["own"].to_numpy(bool).astype(float)
    other = f["other"].to_numpy(bool).astype(float)
    if own.sum() == 0 or other.sum() == 0:
        raise InsufficientData("score_self_preference needs both own and other responses in the population "
                               f"(own {int(own.sum())}, other {int(other.sum())})")
    s_own, s_other = float(s[own > 0].mean()), float(s[other > 0].mean())
    d = s - h
    y_ppi = np.vstack([h * own, own, h * other, other])
    yhat = np.vstack([s * own, own, s * other, other])
    return (np.vstack([d * own, own, d * other, other]), _difference, y_ppi, yhat,
            lambda t: (s_own - _ratio(t[:2])) - (s_other - _ratio(t[2:])))


def _ratio(t: np.ndarray) -> float:
    if t[1] <= 0:
        raise InsufficientData("no labelled item in the domain of the figure")
    return float(t[0] / t[1])


def _difference(t: np.ndarray) -> float:
    return _ratio(t[:2]) - _ratio(t[2:])


def rating_estimate(features: pd.DataFrame, units: pd.Index, design: SampleDesign, name: str, *,
                    ppi: bool, lam: float | None = None) -> Estimate:
    """One figure of ``FIGURES`` over the population ``units`` (in the design's order): Hájek, or
    PPI++ with the judge's score predicting the human one (``lam``: fixed weight, None: tuned)."""
    if name not in FIGURES:
        raise ValueError(f"unknown rating figure {name!r} (known: {', '.join(FIGURES)})")
    f = _aligned(features, pd.Index(units), design)
    y, g, y_ppi, yhat, g_ppi = figure_variables(f, name)
    if not ppi:
        return smooth_estimate(y, g, design, name=name)
    return smooth_estimate(y_ppi, g_ppi, design, yhat=yhat, lam=lam, name=name)


def rating_figures(features: pd.DataFrame, units: pd.Index, design: SampleDesign,
                   names: Iterable[str] = FIGURES) -> dict[str, dict]:
    """Every figure Hájek (``design_based``) and PPI++ (``ppi``) side by side, as ``human_figures``
    gives the pairwise ones; a figure the sample cannot define carries its reason instead."""
    out: dict[str, dict] = {}
    for name in names:
        fig: dict = {"description": DESCRIPTIONS[name], "population": design.population,
                     "population_size": design.size, "labels": design.n}
        for key, ppi in (("design_based", False), ("ppi", True)):
            try:
                fig[key] = rating_estimate(features, units, design, name, ppi=ppi).to_dict()
            except InsufficientData as exc:
                fig[key] = {"value": None, "insufficient": str(exc)}
        out[name] = fig
    return out
