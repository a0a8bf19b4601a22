"""The coverage benchmark's registry: what a figure family is and how one is run.

A family simulates one table (or set of arrays) of ``n`` units from a generating process whose
true figures are known in closed form (or, for the human loop, are the census values of a fixed
population), and computes its figures with THE PRODUCT'S OWN functions (``judgebias.metrics``):
the benchmark measures the code users run, never a re-implementation of it. Only the truths are
computed here, from the generating process's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from judgebias.stats import Estimate, InsufficientData

# (value, ci_low, ci_high) of one figure in one replication; None when the product reported the
# figure as undefined (InsufficientData, or no finite value or interval).
Interval = tuple[float, float, float] | None


@dataclass(frozen=True)
class Figure:
    """One printed figure: its key (as in metrics.json, or ``metric.part``), the interval method
    the product uses, and its true value under the family's generating process."""

    name: str
    method: str
    truth: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.truth):
            raise ValueError(f"figure {self.name!r}: the truth must be finite, got {self.truth!r}")


@dataclass(frozen=True)
class Family:
    """A generating process and the figures computed on it.

    ``simulate(rng, n)`` draws one sample of ``n`` units (pairs, rows or expected labels);
    ``estimate(sample)`` returns each figure's interval by calling the product's function (a figure
    missing from the mapping, or None, was not defined on that sample)."""

    name: str
    description: str
    nuisance: str
    figures: tuple[Figure, ...]
    simulate: Callable[[np.random.Generator, int], Any]
    estimate: Callable[[Any], Mapping[str, Interval]]

    def __post_init__(self) -> None:
        names = [f.name for f in self.figures]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"family {self.name!r}: figures must be non-empty and unique, got {names}")


def interval(value: Any, low: Any, high: Any) -> Interval:
    """A finite (value, low, high) or None: a figure without a finite interval is not defined."""
    try:
        v, lo, hi = float(value), float(low), float(high)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(v) and math.isfinite(lo) and math.isfinite(hi)):
        return None
    return v, lo, hi


def of_estimate(est: Estimate) -> Interval:
    return interval(est.value, est.ci_low, est.ci_high)


def of_part(part: Mapping[str, Any]) -> Interval:
    """A figure nested in another figure's details ({"value", "ci_low", "ci_high", ...})."""
    return interval(part.get("value"), part.get("ci_low"), part.get("ci_high"))


def safely(fn: Callable[[], Interval]) -> Interval:
    """``fn()``, with the product's "too few data" answer read as an undefined figure."""
    try:
        return fn()
    except InsufficientData:
        return None
