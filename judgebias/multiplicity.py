"""Adjusted p-values for a family of tests: Holm (family-wise error) and Benjamini-Hochberg (false
discovery rate).

A judge's report card makes about twenty claims, each resting on one test; tested one by one at 5%,
a judge with no bias at all would collect at least one false "caution" most of the time. Adjusting
the p-values of the whole family and rejecting where the *adjusted* p-value is under 5% bounds that:

* Holm (1979), the default: the chance of even one false rejection in the family is at most 5%,
  whatever the dependence between the tests. Uniformly more powerful than Bonferroni.
* Benjamini-Hochberg (1995), an option: the expected share of false rejections among the
  rejections is at most 5% (valid for independent or positively dependent tests). It rejects more,
  and so allows some false cautions on a judge that has none of the biases.

Pure functions on plain sequences; no I/O, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

HOLM = "holm"
BH = "bh"
METHODS = (HOLM, BH)
ALPHA = 0.05
# What "adjusted for N tests" promises, one sentence per method (the report page says it).
PROMISE = {
    HOLM: "the chance that even one caution about this judge is a false alarm is at most 5%",
    BH: "on average at most 5% of the cautions about this judge are false alarms",
}
NAMES = {HOLM: "Holm", BH: "Benjamini-Hochberg"}


def check_method(method: str) -> str:
    """``method`` lower-cased, or ValueError naming the choices (a CLI passes the user's text)."""
    m = str(method).strip().lower()
    aliases = {"benjamini-hochberg": BH, "fdr_bh": BH, "fdr": BH}
    m = aliases.get(m, m)
    if m not in METHODS:
        raise ValueError(f"multiplicity method must be one of {', '.join(METHODS)}, got {method!r}")
    return m


def _checked(p_values: Sequence[float]) -> np.ndarray:
    p = np.asarray(list(p_values), dtype=float)
    if p.ndim != 1:
        raise ValueError("p-values must be a flat sequence")
    bad = [x for x in p.tolist() if math.isnan(x) or not 0.0 <= x <= 1.0]
    if bad:
        raise ValueError(f"p-values must be numbers in [0, 1]; got {bad[:5]}")
    return p


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over k <= i of min(1, (m-k+1) p_(k));
    the running maximum keeps the adjusted values in the same order as the raw ones."""
    p = _checked(p_values)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values), in the input order.

    Sorted ascending: adjusted p_(i) = min over k >= i of min(1, m p_(k) / k)."""
    p = _checked(p_values)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, m * p[order] / np.arange(1, m + 1))
    adjusted = np.empty(m)
    adjusted[order] = np.minimum.accumulate(scaled[::-1])[::-1]
    return adjusted.tolist()


def adjust(p_values: Sequence[float], method: str = HOLM) -> list[float]:
    """Adjusted p-values of one family by ``method`` ("holm" or "bh"), in the input order."""
    return {HOLM: holm, BH: benjamini_hochberg}[check_method(method)](p_values)


# --- error control over repeated looks (a watched judge: docs/watch.md) -----------------------------
OBRIEN_FLEMING = "obrien-fleming"
POCOCK = "pocock"
SPENDING = (OBRIEN_FLEMING, POCOCK)
SPENDING_NAMES = {
    OBRIEN_FLEMING: "Lan-DeMets O'Brien-Fleming-type spending, alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))",
    POCOCK: "Lan-DeMets Pocock-type spending, alpha(t) = alpha ln(1 + (e - 1) t)",
}


def spent_alpha(t: float, alpha: float = ALPHA, kind: str = OBRIEN_FLEMING) -> float:
    """The error spent by information fraction ``t`` (0..1) under a Lan-DeMets (1983) spending
    function: O'Brien-Fleming-type spends almost nothing early and most at the end; Pocock-type
    spends evenly. Both reach ``alpha`` at t = 1."""
    from scipy.stats import norm

    if kind not in SPENDING:
        raise ValueError(f"unknown alpha spending {kind!r}; use one of {', '.join(SPENDING)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 <= t <= 1 or math.isnan(t):
        raise ValueError(f"information fraction must be in [0, 1], got {t}")
    if t == 0:
        return 0.0
    if kind == OBRIEN_FLEMING:
        return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    return float(alpha * math.log(1 + (math.e - 1) * t))


def look_alpha(look: int, looks: int, alpha: float = ALPHA, kind: str = OBRIEN_FLEMING) -> float:
    """The level of look ``look`` (1-based) of ``looks`` declared: the spending function's increment
    alpha(k/K) - alpha((k-1)/K). The increments add up to ``alpha``, so testing look k at its
    increment keeps the chance of any false alarm over the K looks at most ``alpha`` by the union
    bound, whatever the dependence between looks (they share a reference run); conservative where
    an exact group-sequential boundary would use the correlation."""
    if looks < 1 or not 1 <= look <= looks:
        raise ValueError(f"look {look} of {looks}: need 1 <= look <= looks")
    return spent_alpha(look / looks, alpha, kind) - spent_alpha((look - 1) / looks, alpha, kind)
