"""``annotate replay`` on a pointwise table whose items all carry human ratings: the rating loop's proof.

As the pairwise replay (``judgebias.annotation.replay``): for each budget and repetition the ratings are
hidden, the loop draws items in batches by the design (the rating push's own frame, so the same
probabilities) and reveals the drawn items' ratings, and each rating figure is estimated Hájek
(``design``) and PPI++ with the judge's score as the prediction (``ppi``). The truth is the figure
over every item of the population with its ratings. The contested-pairs ranking and the plain
estimate on a uniform sample have no rating counterpart here: the two methods are the estimators
``annotate pull`` reports.

The population is the items every measured judge scored that carry a human rating (an unrated item
has no truth to score against); how many were left out is returned with the results.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.annotation.rating_loop import measured_judges, rating_frame, rating_units
from judgebias.annotation.replay import ReplaySettings, draw_loop
from judgebias.annotation.sampling import combined_design
from judgebias.metrics.pointwise_survey import FIGURES, rating_estimate, rating_features
from judgebias.metrics.survey import SampleDesign
from judgebias.stats import InsufficientData

RATING_METHODS = ("design", "ppi")


def _population(table: pd.DataFrame, settings: ReplaySettings
                ) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], dict]:
    if settings.population != "all":
        raise ValueError(f"--population {settings.population}: a pointwise table's population is every "
                         "item the judges scored (own responses are a figure there: score_self_preference)")
    unknown = [f for f in settings.figures if f not in FIGURES]
    if unknown:
        raise ValueError(f"unknown rating figure {unknown[0]!r} (a pointwise table replays: "
                         f"{', '.join(FIGURES)})")
    judges = measured_judges(table, settings.judges)
    units = rating_units(table, judges, self_map=settings.self_map)
    feats = {j: rating_features(table, j, self_map=settings.self_map).loc[units.index] for j in judges}
    rated = np.logical_and.reduce([np.isfinite(f["human"].to_numpy(float)) for f in feats.values()])
    if not rated.any():
        raise ValueError("no item the judges scored carries a human rating (column 'human_scores'): "
                         "replay needs a table rated throughout")
    keep = units.index[rated]
    info = {"items": int(rated.sum()), "unrated_left_out": int((~rated).sum()), "judges": judges}
    return units.loc[keep], {j: f.loc[keep] for j, f in feats.items()}, info


def rating_replay(table: pd.DataFrame, settings: ReplaySettings) -> tuple[pd.DataFrame, dict]:
    """(one row per judge, figure, method, budget and repetition, as ``replay.replay`` gives them;
    the population's counts)."""
    units, feats, info = _population(table, settings)
    population = units.index
    frame = rating_frame(units)
    census = SampleDesign(np.ones(len(population)), np.ones(len(population), bool), population="census")
    truth = {}
    for j, f in feats.items():
        for fig in settings.figures:
            try:
                truth[j, fig] = rating_estimate(f, population, census, fig, ppi=False).value
            except InsufficientData:
                continue  # e.g. no own response: the figure is not defined on this population
    rows = []
    rng = np.random.default_rng(settings.seed)
    for budget in settings.budgets:
        for rep in range(settings.reps):
            draws = draw_loop(frame, budget, settings, seed=int(rng.integers(2**31)))
            drawn = draws.loc[draws["selected"], "pair_id"]
            design, order, _ = combined_design(draws, drawn, population="all")
            seen = pd.Index(order).isin(list(drawn))
            for (j, fig), true in truth.items():
                f = feats[j].loc[order]
                hidden = f.assign(human=np.where(seen, f["human"].to_numpy(float), np.nan))
                for method in RATING_METHODS:
                    try:
                        est = rating_estimate(hidden, pd.Index(order), design, fig, ppi=method == "ppi")
                        res = (est.value, est.ci_low, est.ci_high)
                    except InsufficientData:
                        res = (np.nan, np.nan, np.nan)
                    rows.append({"judge": j, "figure": fig, "method": method, "budget": budget, "rep": rep,
                                 "labels": design.n, "value": res[0], "ci_low": res[1], "ci_high": res[2],
                                 "truth": true})
    return pd.DataFrame(rows), info
