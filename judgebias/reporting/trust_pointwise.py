"""What a pointwise judge can be trusted for: statements derived from its pointwise figures
(``judgebias.reporting.pointwise_analysis``) and its pointwise probes (``judgebias.stages.pointwise_probes``)
by fixed rules, like ``judgebias.reporting.trust`` for the pairwise side. Each claim rests on one test of the
judge's pointwise family, adjusted together (``judgebias.multiplicity``, Holm by default); a claim
needs its ADJUSTED p-value under 5%. The tests:

=======================  =====================================  ==================================
test                     figure                                 null
=======================  =====================================  ==================================
score_bias_human         score_bias_human (one-sample t)        scores as high as the humans' mean
score_self_preference    score_self_preference.eo (Welch t)     (judge - human) same on own/others
score_dbg                score_dbg (paired t)                   own responses scored as the gold
score_family_preference  score_family_preference (Welch t)      (judge - human) same on family
score_verbosity          score_verbosity (OLS slope)            error does not depend on length
pwprobe:<tag>            probes ... <tag>.score_shift (t-test)  the variant does not move scores
=======================  =====================================  ==================================

``score_self_preference.dp`` (own minus others, raw) mixes bias with the quality of the judge's own
responses: it is shown, never claimed.

Three verdicts, as on the pairwise side (``judgebias.reporting.trust``): each test's figure is
read against its margin of practical irrelevance (``judgebias.metrics.margins.POINTWISE_MARGINS``: 5%
of the score scale's range, the range read off ``score_distribution``'s levels), its equivalence
p-values adjusted in the same family; "ok" only where that test rejects, "inconclusive" otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from judgebias.metrics import registry
from judgebias.metrics.margins import POINTWISE_MARGINS, Margin
from judgebias.multiplicity import HOLM, check_method
from judgebias.parts import declared
from judgebias.reporting.trust import (
    Family,
    Said,
    Test,
    build,
    fmt,
    fmt_ci,
    margin_text,
    p_text,
    p_value_of,
    sign_of,
    unsettled,
    with_margin,
)

LI_2025 = "Li et al. 2025"
def declared_rows() -> dict[str, tuple[str, str, str, bool]]:
    """Figure key -> (row label, meaning, source, signed): the figure registry's pointwise figures
    that declare a page row, in its order (the page's rows)."""
    return {k: (f.label, f.meaning, f.source, f.signed) for k, f in registry.POINTWISE_FIGURES.items()
            if f.label}


CLAIMED = (
    "score_bias_human",
    "score_self_preference.eo",
    "score_dbg",
    "score_family_preference",
    "score_verbosity",
)


def _at(figures: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    head, _, part = key.partition(".")
    node = figures.get(head)
    if part and isinstance(node, Mapping):
        node = node.get(part)
    return node if isinstance(node, Mapping) and node.get("value") is not None else None


def _probe_figures(probes: Mapping[str, Any] | None, judge: str) -> Mapping[str, Any]:
    return (((probes or {}).get("judges") or {}).get(judge)) or {}


def scale_range(figures: Mapping[str, Any]) -> float | None:
    """The score scale's range (max - min) of the judge, from ``score_distribution``'s levels; None
    when unknown (then no scale-share margin, so no ok)."""
    levels = (figures.get("score_distribution") or {}).get("levels")
    return float(levels - 1) if isinstance(levels, (int, float)) and levels > 1 else None


def pointwise_margins(overrides: Mapping[str, float] | None = None) -> dict[str, Margin]:
    """The declared pointwise margins with the values ``--margin`` gave instead (unknown keys: the
    pairwise figures' own, ignored here)."""
    return {k: replace(m, value=float(overrides[k])) if k in (overrides or {}) else m
            for k, m in POINTWISE_MARGINS.items()}


def declare(figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str,
            margins: Mapping[str, float] | None = None) -> Iterator[Test]:
    bands, scale = pointwise_margins(margins), scale_range(figures)
    for key in CLAIMED:
        est = _at(figures, key)
        if est is not None and p_value_of(est) is not None:
            test = Test(key, key, p_value_of(est), sign_of(est["value"]))
            yield with_margin(test, bands.get(key), est, scale)
    for tag, entry in _probe_figures(probes, judge).items():
        shift = entry.get("score_shift") or {}
        if shift.get("value") is not None and p_value_of(shift) is not None:
            test = Test(f"pwprobe:{tag}", f"pointwise_probes.{tag}.score_shift", p_value_of(shift),
                        sign_of(shift["value"]))
            yield with_margin(test, bands["pwprobe_score_shift"], shift, scale)


def pointwise_family(
    figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str, method: str | None = None,
    margins: Mapping[str, float] | None = None,
) -> Family:
    return build(check_method(method or HOLM), tuple(declare(figures, probes, judge, margins)))


def pointwise_statements(
    figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str, method: str | None = None,
    margins: Mapping[str, float] | None = None,
) -> tuple[Said, Family]:
    """(kind, statement) pairs about one pointwise judge and the family they were decided by;
    ``margins``: values overriding the declared pointwise margins (shares of the scale)."""
    fam = pointwise_family(figures, probes, judge, method, margins)
    out: Said = []

    def said(key: str, unit: str = "") -> str:
        est = _at(figures, key) or {}
        return f"{fmt(est['value'], True)}{unit} {fmt_ci(est, True)}, n={est['n']}{p_text(fam, key)}"

    def absent(key: str, what: str) -> tuple[str, str]:
        """ok where equivalence is shown, else inconclusive with the effect not excluded."""
        if fam.equivalent(key):
            return "ok", f"{what} beyond its {margin_text(fam, key)} ({said(key)})"
        return "inconclusive", (f"{what} detectable, but one as large as {unsettled(fam, key)} "
                                f"({said(key)})")

    bias = _at(figures, "score_bias_human")
    if bias is not None:
        sign = fam.rejects("score_bias_human")
        if sign:
            text = "scores higher than the humans" if sign > 0 else "scores lower than the humans"
            out.append(("caution", f"Against human scores: {text} ({said('score_bias_human')})."))
        else:
            kind, text = absent("score_bias_human", "no difference from the humans' mean score")
            out.append((kind, f"Against human scores: {text}."))
    for key, what in (
        ("score_self_preference.eo", "its own responses"),
        ("score_family_preference", "its family's responses"),
        ("score_dbg", "its own responses against the gold panel"),
    ):
        if _at(figures, key) is None:
            continue
        sign = fam.rejects(key)
        if sign:
            out.append(
                (
                    "caution",
                    f"Scores {what} {'higher' if sign > 0 else 'lower'} than it should "
                    f"({declared_rows()[key][0]}: {said(key)}).",
                )
            )
        else:
            kind, text = absent(key, f"no score preference for {what}")
            out.append((kind, text[0].upper() + text[1:] + "."))
    if _at(figures, "score_verbosity") is not None and fam.rejects("score_verbosity"):
        out.append(
            ("caution", f"Its score errors grow with length ({said('score_verbosity')} per 100 words).")
        )
    moved, inside, unsure, pfig = [], [], [], _probe_figures(probes, judge)
    descriptions = (probes or {}).get("probes") or {}
    for tag, entry in pfig.items():
        shift = entry.get("score_shift") or {}
        key = f"pwprobe:{tag}"
        if shift.get("value") is None or fam.p(key) is None:
            continue
        what = descriptions.get(tag, {}).get("description", tag)
        rate = entry.get("unchanged_rate") or {}
        kept = f", {fmt(rate['value'], pct=True)} unchanged" if rate.get("value") is not None else ""
        figure = (f"shift {fmt(shift['value'], True)} {fmt_ci(shift, True)}, n={shift['n']}{kept}"
                  f"{p_text(fam, key)}")
        if fam.rejects(key):
            moved.append(f"{what} ({'higher' if shift['value'] > 0 else 'lower'}, {figure})")
        elif fam.equivalent(key):
            inside.append(f"{tag.split('@')[0]} ({figure})")
        else:
            unsure.append(f"{what}: a shift as large as {unsettled(fam, key)} ({figure})")
    if moved:
        out.append(
            ("caution", f"Scoring perturbations that move its scores ({LI_2025}): " + "; ".join(moved) + ".")
        )
    if inside:
        lead = f"All {len(pfig)}" if len(inside) == len(pfig) else f"{len(inside)} of the {len(pfig)}"
        out.append(("ok", f"{lead} scoring perturbations tried ({LI_2025}) left its scores within their "
                          "margin (each 95% interval inside): " + "; ".join(inside) + "."))
    if unsure:
        out.append(("inconclusive", f"Scoring perturbations ({LI_2025}) with no detectable shift that the "
                    f"data cannot yet call harmless ({len(unsure)} of {len(pfig)}): "
                    + "; ".join(unsure) + "."))
    ppc = _at(figures, "pointwise_pairwise_consistency")
    if ppc is not None:
        out.append(
            (
                "info",
                f"The response it scored lower won its pairwise verdict in "
                f"{fmt(ppc['value'], pct=True)} of {ppc['n']} pairs {fmt_ci(ppc, False, pct=True)} "
                "(TrustJudge 2025: scores and comparisons disagree).",
            )
        )
    return out, fam


def pointwise_rows(
    figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str
) -> list[dict[str, str]]:
    """The page's figure rows of one pointwise judge: its figures, then its probes'."""
    rows = []

    def add(
        label: str, est: Mapping[str, Any] | None, signed: bool, meaning: str, source: str, pct: bool = False
    ) -> None:
        if est and est.get("value") is not None:
            rows.append(
                {
                    "figure": label,
                    "value": fmt(est["value"], signed, pct),
                    "ci": fmt_ci(est, signed, pct),
                    "n": str(est.get("n", "")),
                    "meaning": meaning,
                    "source": source,
                }
            )

    for key, (label, meaning, source, signed) in declared_rows().items():
        add(label, _at(figures, key), signed, meaning, source)
    # the pointwise probes' figures (``probes``: their result), as their declaration says
    for _, fig, label, meaning, source, est in declared("pointwise_probes").judge_figures(probes, judge):
        add(label, est, fig.signed, meaning, source, pct=fig.pct)
    return rows
