"""What a judge can be trusted for, derived from its figures by fixed rules (never text from a
model): each statement names the figure it rests on and its interval; the intervals decide
direction, the thresholds (0.9 position consistency) are reading aids stated in the text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STYLE_TERMS = {
    "word_diff": "longer answers",
    "headers_style": "more markdown headers",
    "lists_style": "more list items",
    "bold_style": "more bold text",
    "self_origin": "its own outputs",
    "family_origin": "its family's outputs",
}


def _excludes_zero(est: Mapping[str, Any], null: float = 0.0) -> int:
    """+1 / -1 when the interval lies above / below ``null``, 0 when it spans it or is missing."""
    lo, hi = est.get("ci_low"), est.get("ci_high")
    if lo is None or hi is None:
        return 0
    return 1 if lo > null else -1 if hi < null else 0


def fmt(x: Any, signed: bool = False, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def fmt_ci(est: Mapping[str, Any], signed: bool, pct: bool = False) -> str:
    """The interval in the unit of its value: a share printed as a percentage gets a percent interval."""
    if est.get("ci_low") is None:
        return ""
    return f"[{fmt(est['ci_low'], signed, pct)}, {fmt(est['ci_high'], signed, pct)}]"


def mutual_gold(result: Mapping[str, Any]) -> bool:
    """Two measured judges, each the other's whole gold panel (read off their DBG figures): their
    DBG scores mirror each other by construction."""
    panels = {j: (m.get("dbg") or {}).get("gold_panel") for j, m in (result.get("judges") or {}).items()}
    panels = {j: p for j, p in panels.items() if p}
    if len(panels) != 2:
        return False
    (a, pa), (b, pb) = panels.items()
    return list(pa) == [b] and list(pb) == [a]


def trust_summary(metrics: Mapping[str, Any], *, mutual_gold: bool = False) -> list[tuple[str, str]]:
    """(kind, statement) pairs for one judge; kind is "ok", "caution" or "info". Thresholds are
    reading aids stated in the text, the intervals decide direction."""
    out: list[tuple[str, str]] = []
    pc = metrics.get("position_consistency")
    if pc:
        v = pc["value"]
        kind = "ok" if v >= 0.9 else "caution"
        out.append(
            (
                kind,
                f"Order: the same choice in both orders on {fmt(v, pct=True)} of {pc['n']} pairs "
                f"{fmt_ci(pc, False, pct=True)}"
                + (
                    "."
                    if v >= 0.9
                    else "; judge every pair in both orders "
                    "and fold them (single-order verdicts are unreliable)."
                ),
            )
        )
    ceiling, agree = metrics.get("human_ceiling"), metrics.get("agreement_human")
    if ceiling and ceiling.get("gap"):
        gap, judge_agrees = ceiling["gap"], ceiling["judge"]["value"]
        if _excludes_zero(gap) < 0:
            out.append(
                (
                    "caution",
                    f"Humans: agrees with the annotators' majority on {fmt(judge_agrees, pct=True)}"
                    f" of pairs; one annotator agrees with the others on {fmt(ceiling['value'], pct=True)} "
                    f"(gap {fmt(gap['value'], True)} {fmt_ci(gap, True)}, n={ceiling['n']}); not a "
                    "substitute for human labels on this kind of data.",
                )
            )
        else:
            out.append(
                (
                    "ok",
                    f"Humans: agrees with the annotators about as often as another annotator does "
                    f"(gap {fmt(gap['value'], True)} {fmt_ci(gap, True)}, n={ceiling['n']}).",
                )
            )
    elif agree:
        out.append(
            (
                "info",
                f"Humans: agrees with the human majority on {fmt(agree['value'], pct=True)} of "
                f"{agree['n']} pairs {fmt_ci(agree, False, pct=True)}; no second annotator for a ceiling.",
            )
        )
    out += _preference(metrics, "self", "Self-preference", "its own outputs")
    out += _preference(metrics, "family", "Family preference", "its family's outputs")
    out += _dbg(metrics.get("dbg"), "its own responses", mutual_gold)
    out += _dbg(metrics.get("family_dbg"), "its family's responses", mutual_gold)
    vb = metrics.get("verbosity_bias")
    if vb and _excludes_zero(vb) > 0:
        out.append(
            (
                "caution",
                f"Length: prefers the longer response more than humans do (verbosity bias "
                f"{fmt(vb['value'], True)} {fmt_ci(vb, True)}, n={vb['n']}).",
            )
        )
    out += _style_statements(metrics.get("regression") or {}, metrics.get("regression_human") or {})
    return out


def _preference(metrics: Mapping[str, Any], kind: str, title: str, whose: str) -> list[tuple[str, str]]:
    """EO against humans when there is one; else DP, which mixes bias with quality."""
    eo, dp = metrics.get(f"{kind}_preference_eo"), metrics.get(f"{kind}_preference_dp")
    if eo:
        sign = _excludes_zero(eo)
        text = {
            1: f"favours {whose} beyond their quality",
            -1: f"is harder on {whose} than humans",
            0: f"no preference for {whose} detectable against humans",
        }[sign]
        return [("caution" if sign else "ok",
                 f"{title}: {text} (EO {fmt(eo['value'], True)} {fmt_ci(eo, True)}, n={eo['n']}).")]
    if dp:
        return [("info",
                 f"{title}: picks {whose} in {fmt(dp.get('p_own'), pct=True)} of {dp['n']} pairs "
                 f"(DP {fmt(dp['value'], True)} {fmt_ci(dp, True)}); without human labels this mixes "
                 "bias with real quality.")]
    return []


def _dbg(dbg: Mapping[str, Any] | None, whose: str, mutual_gold: bool) -> list[tuple[str, str]]:
    if not dbg:
        return []
    if mutual_gold:
        return [("info",
                 f"DBG {fmt(dbg['value'], True)} {fmt_ci(dbg, True)}: two judges are each other's whole gold "
                 "panel, so the interval is wide and both scores are equal by construction; add a third "
                 "judge or human labels to separate them.")]
    if sign := _excludes_zero(dbg):
        return [("caution",
                 f"Against the gold panel, gives {whose} {'more' if sign > 0 else 'fewer'} wins than the "
                 f"panel does (DBG {fmt(dbg['value'], True)} {fmt_ci(dbg, True)}, n={dbg['n']}).")]
    return []


def _style_statements(reg: Mapping[str, Any], human: Mapping[str, Any]) -> list[tuple[str, str]]:
    terms, hterms = reg.get("terms") or {}, human.get("terms") or {}
    if reg.get("note"):
        return []
    shared, own = [], []
    for term, label in STYLE_TERMS.items():
        t = terms.get(term)
        if not t or (term in ("self_origin", "family_origin") and "human_a" not in terms):
            continue
        sign = _excludes_zero(t)
        if sign == 0:
            continue
        h = hterms.get(term)
        piece = f"{'' if sign > 0 else 'fewer/less '}{label} ({fmt(t['coef'], True)})"
        (shared if h and _excludes_zero(h) == sign else own).append(piece)
    out = []
    if own:
        out.append(
            (
                "caution",
                "Style, at equal other terms (choice regression): prefers "
                + ", ".join(own)
                + (" - humans on the same pairs do not." if hterms else "."),
            )
        )
    if shared:
        out.append(("info", "Style preferences the humans share: " + ", ".join(shared) + "."))
    return out


# A reading aid, stated in the text: a shift of P(A) under this is reported as detectable but
# small. On dozens of pairs a judge whose P(A) barely moves (0.004, say) can have an interval that
# excludes 0; "moved by a fake citation" would overstate it.
MATERIAL_SHIFT = 0.05


def probe_statements(probes: Mapping[str, Any], judge: str) -> list[tuple[str, str]]:
    """What the probes say about one judge: perturbations whose shift interval excludes 0 (those
    under ``MATERIAL_SHIFT`` apart), and self-recognition against chance."""
    out: list[tuple[str, str]] = []
    pert = probes.get("perturbations") or {}
    figures = (pert.get("judges") or {}).get(judge) or {}
    moved, small = [], []
    for tag, entry in figures.items():
        shift = entry.get("shift") or {}
        if shift.get("value") is not None and _excludes_zero(shift):
            what = (pert.get("perturbations") or {}).get(tag, {}).get("description", tag)
            piece = (f"{what} ({'toward' if shift['value'] > 0 else 'away from'} that side, shift "
                     f"{fmt(shift['value'], True)} {fmt_ci(shift, True)}, n={shift['n']})")
            (moved if abs(shift["value"]) >= MATERIAL_SHIFT else small).append(piece)
    if moved:
        out.append(("caution", f"Perturbations (CALM) that move its P(A) by {MATERIAL_SHIFT} or more: "
                    + "; ".join(moved) + "."))
    if small:
        out.append(("info", f"Perturbations (CALM) with a detectable shift under {MATERIAL_SHIFT} "
                    "(a reading aid, not a test): " + "; ".join(small) + "."))
    if figures and not moved and not small:
        out.append(("ok", f"None of the {len(figures)} perturbations tried (CALM) moved it detectably."))
    rec_judges = (probes.get("self_recognition") or {}).get("judges") or {}
    rec = (rec_judges.get(judge) or {}).get("self_recognition")
    if rec and rec.get("value") is not None:
        sign = _excludes_zero(rec, 0.5)
        text = {1: "tells its own answers apart", -1: "picks the other answer as its own",
                0: "does not recognise its own answers beyond chance"}[sign]
        out.append(("info", f"Self-recognition: {text} ({fmt(rec['value'], pct=True)} of {rec['n']} "
                            f"pairs {fmt_ci(rec, False, pct=True)}; Panickssery et al. link this to "
                            "self-preference)."))
    return out
