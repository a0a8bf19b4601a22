"""Margins of practical irrelevance, and what a figure's interval says against one.

A statement that a judge has no bias is a claim of equivalence, not the absence of a rejection: an
EO of +0.028 [-0.068, +0.141] on a few hundred pairs does not exclude a preference of +0.14. Every
figure that feeds a statement declares a margin (``Margin``): the band around its null inside which
an effect does not matter in practice, with a one-line argument. The figure registry
(``judgebias.metrics.registry``) carries the analysis figures' margins; ``PROBE_MARGINS`` and
``POINTWISE_MARGINS`` below the probes' and the pointwise figures' (those figures are computed
outside the registry). ``--margin FIGURE=VALUE`` overrides any of them (``parse_overrides``).

Against its margin a figure is, by fixed rules (``judgebias.reporting.trust`` applies them
inside the judge's family of tests):

* a caution when the family-adjusted test of its null rejects (unchanged);
* ok only when its equivalence is shown: two one-sided tests (TOST, Schuirmann 1987) of "the effect
  is at least the margin" on either side, each at 2.5%, so that a p-value under 5% is exactly "the
  printed 95% interval lies inside the band" (the textbook TOST at 5% reads a 90% interval, which
  could print an ok whose 95% interval leaves its margin). ``equivalence_p`` inverts the interval
  into that p-value (each side's standard error read off its half of the interval, normal
  approximation); the family adjusts these p-values by the same method as its zero tests;
* inconclusive otherwise: the data exclude neither 0 nor an effect as large as the interval's end
  farther from the null (``not_excluded``), and ``to_settle`` says about how many units would.

Pure functions on an estimate's JSON (value, ci_low, ci_high, n); no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from judgebias.metrics.survey import Z, required_labels
from judgebias.stats import ALPHA

BOTH, LOWER = "both", "lower"
SIDES = (BOTH, LOWER)
CAUTION, OK, INCONCLUSIVE = "caution", "ok", "inconclusive"
VERDICTS = (CAUTION, OK, INCONCLUSIVE)
# "About how many more" has no upper limit worth planning beyond: past this, say so.
PLANNING_POPULATION = 10**9


@dataclass(frozen=True)
class Margin:
    """The band of practical irrelevance of one figure: ``null`` +- ``value`` (``sides`` "both"), or
    only the side below ``null`` - ``value`` (``sides`` "lower": a judge agreeing with humans MORE
    often than an annotator does is no concern). ``why``: the one-line argument; ``unit``: what
    more of would narrow the interval (the figure's n counts these); ``scale_share``: ``value`` is
    a share of the score scale's range (pointwise figures: 0.05 of 1-10 is 0.45 points)."""

    value: float
    why: str
    null: float = 0.0
    sides: str = BOTH
    unit: str = "pairs"
    scale_share: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.value, (int, float)) or not math.isfinite(self.value) or self.value <= 0:
            raise ValueError(f"a margin must be a number > 0, got {self.value!r}")
        if not isinstance(self.why, str) or not self.why.strip():
            raise ValueError("a margin needs its one-line argument (why)")
        if self.sides not in SIDES:
            raise ValueError(f"margin sides must be one of {SIDES}, got {self.sides!r}")

    def width(self, scale_range: float | None = None) -> float | None:
        """The margin in the figure's unit: ``value``, or ``value`` x the scale's range for a
        ``scale_share`` margin (None when that range is unknown: no ok can be claimed)."""
        if not self.scale_share:
            return float(self.value)
        if scale_range is None or not scale_range > 0:
            return None
        return float(self.value) * float(scale_range)

    def text(self, scale_range: float | None = None) -> str:
        """"+-0.050 around 0" / "below -0.050" as a statement quotes it."""
        w = self.width(scale_range)
        if w is None:
            return f"{self.value:g} of the scale (scale unknown)"
        if self.sides == LOWER:
            return f"not below {self.null - w:+.3f}"
        return f"{self.null:g} +- {w:.3f}" if self.null else f"+-{w:.3f}"

    def record(self, source: str = "default") -> dict[str, Any]:
        """The margin as the JSON and MLflow params record it."""
        return {"value": float(self.value), "null": float(self.null), "sides": self.sides,
                "scale_share": self.scale_share, "unit": self.unit, "why": self.why, "source": source}


# The analysis figures' margins live on their registry entries; these are the figures computed
# elsewhere. The probes' P(A) shift and recognition accuracy are probabilities, so the same 5 points
# that bound the pairwise preference figures bound them.
PROBE_MARGINS: Mapping[str, Margin] = {
    "perturbation_shift": Margin(
        0.05, "a perturbation moving P(perturbed side) by under 5 points changes about 1 verdict in 20 "
        "near a tie, less than one annotator's disagreement with the others",
        unit="probe pairs of that perturbation"),
    "self_recognition": Margin(
        0.05, "recognising its own answer within 5 points of a coin flip cannot carry a self-preference "
        "larger than the 0.05 bound on EO", null=0.5, unit="recognition pairs"),
}
POINTWISE_MARGINS: Mapping[str, Margin] = {
    "score_bias_human": Margin(
        0.05, "a mean offset of 5% of the scale (under half a point of 1-10) keeps the judge's scores "
        "inside one scale step of the humans'", unit="scored responses with human scores",
        scale_share=True),
    "score_self_preference.eo": Margin(
        0.05, "5% of the scale more for its own responses than the humans give: under one scale step, "
        "as for the mean bias", unit="scored responses with human scores", scale_share=True),
    "score_family_preference": Margin(
        0.05, "as for its own responses: 5% of the scale", unit="scored responses with human scores",
        scale_share=True),
    "score_dbg": Margin(
        0.05, "its own responses scored within 5% of the scale of the gold panel's score",
        unit="own responses scored by the gold panel", scale_share=True),
    "score_verbosity": Margin(
        0.05, "an error growing by under 5% of the scale per 100 words stays under one scale step over "
        "the usual length range", unit="scored responses with human scores", scale_share=True),
    "pwprobe_score_shift": Margin(
        0.05, "a scoring perturbation moving scores by under 5% of the scale moves them by under one step",
        unit="probe responses of that perturbation", scale_share=True),
}


def check(margins: Mapping[str, Margin]) -> Mapping[str, Margin]:
    bad = [k for k, m in margins.items() if not isinstance(m, Margin)]
    if bad:
        raise ValueError(f"margins {bad} are not Margin declarations")
    return margins


def parse_overrides(items: Iterable[str], known: Iterable[str]) -> dict[str, float]:
    """``FIGURE=VALUE`` texts (``--margin``) as {figure: value}; ValueError naming the item for an
    unknown figure, a value that is no number > 0, or a figure given twice."""
    names, out = set(known), {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--margin {item!r}: expected FIGURE=VALUE, e.g. self_preference_eo=0.03")
        if key not in names:
            raise ValueError(f"--margin {item!r}: no figure {key!r} declares a margin; one of "
                             + ", ".join(sorted(names)))
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--margin {item!r}: {raw.strip()!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"--margin {item!r}: a margin must be > 0")
        if key in out:
            raise ValueError(f"--margin {item!r}: {key} is given twice")
        out[key] = value
    return out


def resolve(defaults: Mapping[str, Margin], overrides: Mapping[str, float] | None = None
            ) -> dict[str, dict[str, Any]]:
    """Every declared margin as recorded (``Margin.record``), the overridden ones with their new
    value and source "--margin"."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"margins given for undeclared figures: {', '.join(unknown)}")
    return {k: (replace(m, value=float(overrides[k])).record("--margin") if k in overrides else m.record())
            for k, m in defaults.items()}


def from_record(rec: Mapping[str, Any]) -> Margin:
    """A recorded margin (``Margin.record``, e.g. read back from a metrics JSON) as a Margin."""
    return Margin(float(rec["value"]), str(rec.get("why") or "recorded"), float(rec.get("null", 0.0)),
                  str(rec.get("sides", BOTH)), str(rec.get("unit", "pairs")), bool(rec.get("scale_share")))


def _sides(est: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """value, low, high; an interval of zero width (every unit the same: 8 probe pairs none of which
    changed) shows no spread rather than no effect, so it is widened to the rule-of-three bound
    +-3/n (with no unit moved in n, the 95% bound on the share that would move is 3/n, and a share
    of units moving by at most 1 each bounds the mean effect)."""
    v, lo, hi = est.get("value"), est.get("ci_low"), est.get("ci_high")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (v, lo, hi)):
        return None
    if lo == hi:
        n = est.get("n")
        if not isinstance(n, int) or n < 1:
            return None
        return float(v), float(v) - 3.0 / n, float(v) + 3.0 / n
    return float(v), float(lo), float(hi)


def _one_sided(distance: float, half: float) -> float:
    """P(Z > distance / se), se = half / Z: the one-sided p-value of "the effect is at the bound"
    when the estimate lies ``distance`` inside it and its interval reaches ``half`` toward it."""
    from scipy.stats import norm

    if half <= 0:  # an interval ending at the estimate on this side (clipped to a bound)
        return 0.0 if distance > 0 else 1.0
    return float(norm.sf(distance / (half / Z)))


def equivalence_p(est: Mapping[str, Any], margin: float, *, null: float = 0.0, sides: str = BOTH) -> float:
    """The p-value of "the effect is at least ``margin`` from ``null``" (sides "both") or "at least
    ``margin`` below it" (sides "lower"): twice the larger one-sided p-value (``LOWER``: twice the
    lower one), capped at 1, so that it is under 5% exactly when the 95% interval lies inside the
    band. 1.0 for an estimate without an interval (nothing shown)."""
    if sides not in SIDES:
        raise ValueError(f"sides must be one of {SIDES}, got {sides!r}")
    if not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    got = _sides(est)
    if got is None:
        return 1.0
    v, lo, hi = got
    p_low = _one_sided(v - (null - margin), v - lo)
    p_high = 0.0 if sides == LOWER else _one_sided((null + margin) - v, hi - v)
    return min(1.0, 2.0 * max(p_low, p_high))


def not_excluded(est: Mapping[str, Any], *, null: float = 0.0, sides: str = BOTH) -> float | None:
    """The largest effect the interval cannot exclude: its end farther from ``null`` (``LOWER``: its
    lower end, the only side that matters), None without an interval."""
    got = _sides(est)
    if got is None:
        return None
    _, lo, hi = got
    if sides == LOWER:
        return lo
    return lo if abs(lo - null) > abs(hi - null) else hi


def to_settle(est: Mapping[str, Any], margin: float, *, null: float = 0.0, sides: str = BOTH
              ) -> dict[str, Any] | None:
    """About how many units would settle an inconclusive figure, by the planner's arithmetic
    (``survey.required_labels``): the per-unit variance s2 = n (h / 1.96)^2 from the 95% half-width
    h at the current n, and the n whose expected half-width, around the same estimate, either
    excludes the null or fits inside the band: h* = max(|d|, margin - |d|) for d = value - null
    (``LOWER``: max(-d, margin + d)), which is at least margin / 2. The half-width is the printed
    one, so a design effect the interval carries (clustered rows) is in it already. Before the
    adjustment for the family's size: "about", and at least. None without an interval or n."""
    got = _sides(est)
    n = est.get("n")
    if got is None or not isinstance(n, int) or n < 2:
        return None
    v, lo, hi = got
    half = (hi - lo) / 2.0
    d = v - null
    target = max(-d, margin + d) if sides == LOWER else max(abs(d), margin - abs(d))
    if not half > 0 or not target > 0:
        return None
    if half <= target:
        return {"n": n, "n_needed": n, "more": 0, "target_half_width": target, "half_width": half}
    needed = required_labels(n * (half / Z) ** 2, PLANNING_POPULATION, target)
    return {"n": n, "n_needed": int(needed), "more": max(0, int(needed) - n), "target_half_width": target,
            "half_width": half}


def verdict(rejects: bool, equivalent: bool) -> str:
    """The three-way rule: caution when the zero test rejects, ok only when equivalence is shown."""
    return CAUTION if rejects else OK if equivalent else INCONCLUSIVE


assert ALPHA == 0.05  # equivalence_p's "each side at 2.5%" is the 95% interval's level

# A perturbation can leave the mean P(A) in place and still flip verdicts where the judge sits near
# a tie: "ok" for a perturbation also needs the 95% interval of its verdicts-unchanged share at or
# above this (at most 1 verdict in 10 changed), which a handful of pairs can never show.
VERDICTS_KEPT = 0.9
