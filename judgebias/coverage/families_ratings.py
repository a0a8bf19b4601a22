"""The pointwise rating loop: the human mean score, the judge-human bias and the score self-preference
estimated from a Poisson sample of rated items with unequal inclusion probabilities, Hájek and PPI++
(the judge's score as the prediction), by ``judgebias.metrics.pointwise_survey.rating_estimate``.
As for the pairwise loop the population is fixed (drawn once) and the sample varies; the truth is
the census value. ``n`` is the expected number of rated items."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

from judgebias.coverage.families_survey import inclusion
from judgebias.coverage.registry import Family, Figure, of_estimate, safely
from judgebias.metrics.pointwise_survey import FIGURES, rating_estimate
from judgebias.metrics.survey import SampleDesign

POPULATION = 3000
_SEED = 20261126
_OWN = 0.3


@cache
def population() -> tuple[pd.DataFrame, np.ndarray]:
    """``rating_features``-shaped frame over the whole population (human scores known: the census)
    and the size measure the inclusion probabilities follow (own items and contested scores 2-3x).

    Scale 1..10: the human score is a rounded normal around an item quality; the judge adds +0.6
    overall, +0.8 more on its own responses, and noise of sd 1.2, rounded to the scale, so the
    prediction is good but biased, as a real judge's."""
    rng = np.random.default_rng(_SEED)
    n = POPULATION
    quality = rng.normal(6.0, 2.0, n)
    human = np.clip(np.round(quality + rng.normal(0, 0.8, n)), 1, 10)
    own = rng.random(n) < _OWN
    score = np.clip(np.round(quality + 0.6 + 0.8 * own + rng.normal(0, 1.2, n)), 1, 10)
    features = pd.DataFrame({"score": score, "human": human, "own": own, "other": ~own},
                            index=pd.Index(np.arange(n).astype(str), name="unit"))
    size = 1.0 + own + (np.abs(score - 5.5) < 2)
    return features, size


def _truths() -> dict[str, float]:
    f, _ = population()
    d = f["score"] - f["human"]
    truth = {"human_mean": float(f["human"].mean()), "score_bias_human": float(d.mean()),
             "score_self_preference": float(d[f["own"]].mean() - d[~f["own"]].mean())}
    return {f"ratings.{name}.{m}": v for name, v in truth.items() for m in ("hajek", "ppi")}


def _simulate(rng: np.random.Generator, n: int) -> SampleDesign:
    _, size = population()
    pi = inclusion(size, n)
    return SampleDesign(pi=pi, sampled=rng.random(pi.size) < pi, population="coverage benchmark")


def _estimate(design: SampleDesign) -> dict:
    f, _ = population()
    # Off the sample the human score is unknown to the estimator: hidden, as in the product.
    seen = f.assign(human=np.where(design.sampled, f["human"], np.nan))
    out = {}
    for name in FIGURES:
        for method, ppi in (("hajek", False), ("ppi", True)):
            out[f"ratings.{name}.{method}"] = safely(lambda name=name, ppi=ppi: of_estimate(
                rating_estimate(seen, seen.index, design, name, ppi=ppi)))
    return out


FAMILIES: tuple[Family, ...] = (
    Family("human_ratings", f"Poisson sample of a fixed population of {POPULATION} rated items "
           "(n = expected ratings)",
           "unequal inclusion (own and mid-scale items 2-3x as likely); judge +0.6, +0.8 more on own, "
           "noise sd 1.2 on a 1-10 scale",
           tuple(Figure(k, "as metrics.pointwise_survey.rating_estimate", v) for k, v in _truths().items()),
           _simulate, _estimate),
)
