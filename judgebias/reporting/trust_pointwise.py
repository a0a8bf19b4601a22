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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from judgebias.multiplicity import HOLM, adjust, check_method
from judgebias.reporting.trust import Said, fmt, fmt_ci, p_text
from judgebias.reporting.trust_family import Family, Test, p_value_of, sign_of

LI_2025 = "Li et al. 2025"
# Figure key -> (row label, meaning, source, signed); the order of the page's rows.
ROWS: dict[str, tuple[str, str, str, bool]] = {
    "score_bias_human": (
        "score bias vs humans",
        "mean judge - mean human score",
        "Stureborg et al. 2024",
        True,
    ),
    "score_self_preference.eo": (
        "score self-preference (vs humans)",
        "(judge - human) on own responses minus on others'",
        "Spiliopoulou et al. 2025",
        True,
    ),
    "score_self_preference.dp": (
        "score own - others (raw)",
        "mean score of own responses minus others'; includes quality differences",
        "Spiliopoulou et al. 2025",
        True,
    ),
    "score_dbg": (
        "score DBG",
        "own responses: judge's score minus the gold panel's",
        "Beyond the Surface (DBG), 2025",
        True,
    ),
    "score_family_preference": (
        "score family preference",
        "(judge - human) on its family's responses minus others'",
        "Spiliopoulou et al. 2025",
        True,
    ),
    "score_verbosity": (
        "score verbosity",
        "slope of (judge - human) per 100 words",
        "Saito et al. 2023",
        True,
    ),
    "score_distribution": ("score skew", "skew of its scores (0 = symmetric)", "Stureborg et al. 2024", True),
    "pointwise_pairwise_consistency": (
        "lower-scored response wins",
        "share of compared pairs whose pairwise verdict went to the response it scored lower",
        "TrustJudge 2025",
        False,
    ),
}
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


def declare(figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str) -> Iterator[Test]:
    for key in CLAIMED:
        est = _at(figures, key)
        if est is not None and p_value_of(est) is not None:
            yield Test(key, key, p_value_of(est), sign_of(est["value"]))
    for tag, entry in _probe_figures(probes, judge).items():
        shift = entry.get("score_shift") or {}
        if shift.get("value") is not None and p_value_of(shift) is not None:
            yield Test(f"pwprobe:{tag}", f"pointwise_probes.{tag}.score_shift", p_value_of(shift),
                       sign_of(shift["value"]))


def pointwise_family(
    figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str, method: str | None = None
) -> Family:
    m = check_method(method or HOLM)
    tests = tuple(declare(figures, probes, judge))
    return Family(m, tests, tuple(adjust([t.p_value for t in tests], m)))


def pointwise_statements(
    figures: Mapping[str, Any], probes: Mapping[str, Any] | None, judge: str, method: str | None = None
) -> tuple[Said, Family]:
    """(kind, statement) pairs about one pointwise judge and the family they were decided by."""
    fam = pointwise_family(figures, probes, judge, method)
    out: Said = []

    def said(key: str, unit: str = "") -> str:
        est = _at(figures, key) or {}
        return f"{fmt(est['value'], True)}{unit} {fmt_ci(est, True)}, n={est['n']}{p_text(fam, key)}"

    bias = _at(figures, "score_bias_human")
    if bias is not None:
        sign = fam.rejects("score_bias_human")
        text = {
            1: "scores higher than the humans",
            -1: "scores lower than the humans",
            0: "no detectable difference from the humans' mean score",
        }[sign]
        out.append(
            ("caution" if sign else "ok", f"Against human scores: {text} ({said('score_bias_human')}).")
        )
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
                    f"({ROWS[key][0]}: {said(key)}).",
                )
            )
        else:
            out.append(("ok", f"No detectable score preference for {what} ({said(key)})."))
    if _at(figures, "score_verbosity") is not None and fam.rejects("score_verbosity"):
        out.append(
            ("caution", f"Its score errors grow with length ({said('score_verbosity')} per 100 words).")
        )
    moved, pfig = [], _probe_figures(probes, judge)
    descriptions = (probes or {}).get("probes") or {}
    for tag, entry in pfig.items():
        shift = entry.get("score_shift") or {}
        if shift.get("value") is not None and fam.rejects(f"pwprobe:{tag}"):
            what = descriptions.get(tag, {}).get("description", tag)
            rate = entry.get("unchanged_rate") or {}
            kept = f", {fmt(rate['value'], pct=True)} unchanged" if rate.get("value") is not None else ""
            moved.append(
                f"{what} ({'higher' if shift['value'] > 0 else 'lower'}, shift "
                f"{fmt(shift['value'], True)} {fmt_ci(shift, True)}, n={shift['n']}{kept}"
                f"{p_text(fam, f'pwprobe:{tag}')})"
            )
    if moved:
        out.append(
            ("caution", f"Scoring perturbations that move its scores ({LI_2025}): " + "; ".join(moved) + ".")
        )
    elif pfig:
        out.append(
            (
                "ok",
                f"None of the {len(pfig)} scoring perturbations tried ({LI_2025}) moved its scores "
                "detectably.",
            )
        )
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

    for key, (label, meaning, source, signed) in ROWS.items():
        add(label, _at(figures, key), signed, meaning, source)
    descriptions = (probes or {}).get("probes") or {}
    for tag, entry in _probe_figures(probes, judge).items():
        what = descriptions.get(tag, {})
        name = tag.split("@")[0]
        add(
            f"unchanged under {name}",
            entry.get("unchanged_rate"),
            False,
            f"share of most probable scores unchanged: {what.get('description', tag)}",
            what.get("source", ""),
            pct=True,
        )
        add(
            f"score shift under {name}",
            entry.get("score_shift"),
            True,
            "mean score variant - baseline (baseline's scale); 0 = not moved",
            what.get("source", ""),
        )
    return rows
