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
