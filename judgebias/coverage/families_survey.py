"""The human-loop family: EO and judge-human agreement estimated from a Poisson sample of labelled
pairs with unequal inclusion probabilities, Hájek (no predictions) and PPI++ (the gold panel's vote
as the prediction), by ``judgebias.metrics.human.estimate``. Here the population is fixed (drawn
once) and the sample is what varies, as in the product; the truth is the population's census value.
``n`` is the expected number of labels."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

from judgebias.coverage import tables as T
from judgebias.coverage.registry import Family, Figure, of_estimate, safely
from judgebias.metrics.human import estimate, variables
from judgebias.metrics.survey import SampleDesign

A, B, TIE = 0, 1, 2
POPULATION = 4000
_SEED = 20261125
_HUMAN = np.array([0.55, 0.15, 0.30])   # humans prefer own / other / tie: tie-heavy, small TNR domain
_NO_OWN = 0.2
NAMES = ("eo", "agreement_human")


@cache
def population() -> tuple[pd.DataFrame, dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The fixed population: ``human.pair_features``-shaped frame, each estimand's (y, yhat) from the
    product's ``human.variables``, and the size measure the inclusion probabilities follow."""
    rng = np.random.default_rng(_SEED)
    n = POPULATION
    rel = T.categorical(rng, _HUMAN, n)
    side = np.where(rng.random(n) < _NO_OWN, -1, rng.integers(0, 2, n))
    own_abs = np.where(side == 1, B, A)
    human = np.where(rel == 2, TIE, np.where(rel == 0, own_abs, 1 - own_abs))
    # The gold panel's vote for A leans toward the human majority's side; a tie sits near 0.5.
    lean = np.where(human == A, rng.beta(4, 2, n), np.where(human == B, rng.beta(2, 4, n), rng.beta(3, 3, n)))
    p_own = np.where(rel == 0, rng.beta(4, 1.5, n),
                     np.where(rel == 1, rng.beta(1.6, 1.4, n), rng.beta(2, 1.5, n)))
    p_a = np.where(side == 1, 1 - p_own, p_own)
    choice = np.where(p_a > 0.5, A, np.where(p_a < 0.5, B, TIE))
    features = pd.DataFrame({"own": np.where(side < 0, -1, own_abs), "choice": choice, "vote": p_a,
                             "human": human,
                             "human_vote": np.where(human == A, 1.0, np.where(human == B, 0.0, 0.5)),
                             "gold": lean, "words_a": np.full(n, 100), "words_b": np.full(n, 120)},
                            index=pd.Index(np.arange(n).astype(str), name="pair_id"))
    arrays = {name: variables(features, name) for name in NAMES}
    size = 0.3 + 2.0 * (0.5 - np.abs(lean - 0.5))          # contested pairs are drawn more often
    return features, arrays, size


def inclusion(size: np.ndarray, n: int) -> np.ndarray:
    """Probabilities proportional to ``size`` summing to ``n``, capped at 1 (the excess spread over
    the rest, as a PPS design does)."""
    if not 0 < n <= size.size:
        raise ValueError(f"expected labels must be in (0, {size.size}], got {n}")
    pi = np.zeros(size.size)
    capped = np.zeros(size.size, dtype=bool)
    for _ in range(size.size):
        free = ~capped
        pi[free] = size[free] * (n - capped.sum()) / size[free].sum()
        pi[capped] = 1.0
        if not (pi[free] > 1).any():
            return pi
        capped |= pi > 1
    return pi


def _truths() -> dict[str, float]:
    _, arrays, _ = population()
    t_eo = arrays["eo"][0].sum(axis=1)
    t_ag = arrays["agreement_human"][0].sum(axis=1)
    eo = t_eo[0] / t_eo[1] - t_eo[2] / t_eo[3]
    return {"human.eo.hajek": eo, "human.eo.ppi": eo, "human.agreement_human.hajek": t_ag[0] / t_ag[1],
            "human.agreement_human.ppi": t_ag[0] / t_ag[1]}


def _simulate(rng: np.random.Generator, n: int) -> SampleDesign:
    _, _, size = population()
    pi = inclusion(size, n)
    return SampleDesign(pi=pi, sampled=rng.random(pi.size) < pi, population="coverage benchmark")


def _estimate(design: SampleDesign) -> dict:
    _, arrays, _ = population()
    out = {}
    for name in NAMES:
        y, yhat = arrays[name]
        for method, pred in (("hajek", None), ("ppi", yhat)):
            out[f"human.{name}.{method}"] = safely(
                lambda y=y, pred=pred, name=name: of_estimate(estimate(y, pred, name, design)))
    return out


FAMILIES: tuple[Family, ...] = (
    Family("human_loop", f"Poisson sample of a fixed population of {POPULATION} pairs (n = expected labels)",
           "unequal inclusion (contested pairs 3x as likely); humans prefer own 55%, other 15%, tie 30%",
           tuple(Figure(k, "as metrics.human.estimate", v) for k, v in _truths().items()),
           _simulate, _estimate),
)
