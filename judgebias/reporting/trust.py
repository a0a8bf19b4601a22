"""What a judge can be trusted for, derived from its figures by fixed rules (never text from a
model): each statement names the figure it rests on and its interval. Whether a statement claims a
finding (a "caution", a direction) is decided by its test in the judge's declared family of tests
(``judgebias.reporting.trust_family``), adjusted for the family's size: Holm by default, so that a judge with
none of the biases gets even one false caution with probability at most 5%. The thresholds (0.9
position consistency, a 0.05 shift) are reading aids stated in the text, never tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.multiplicity import NAMES, PROMISE
from judgebias.reporting.trust_family import STYLE_TERMS, Family, family, mutual_gold

__all__ = ["STYLE_TERMS", "family", "family_note", "family_sentence", "fmt", "fmt_ci", "fmt_p", "mutual_gold",
           "probe_statements", "statements", "trust_summary"]

Said = list[tuple[str, str]]


def _excludes_zero(est: Mapping[str, Any], null: float = 0.0) -> int:
    """+1 / -1 when the interval lies above / below ``null``, 0 when it spans it or is missing
    (describes a figure nobody claims a finding from, e.g. the humans' own style terms)."""
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


def fmt_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def p_text(fam: Family, key: str) -> str:
    """"; p=0.004, adjusted 0.071" for a member of the family ("" otherwise), with a word when the
    test is significant alone but not once adjusted (a hint, never a finding)."""
    pair = fam.p(key)
    if pair is None:
        return ""
    raw, adj = pair
    hint = f", significant alone but not after adjusting for {fam.size} tests" if fam.raw_only(key) else ""
    return f"; p{'' if raw < 0.001 else '='}{fmt_p(raw)}, adjusted {fmt_p(adj)}{hint}"


def statements(metrics: Mapping[str, Any], probes: Mapping[str, Any] | None = None, judge: str | None = None,
               *, mutual_gold: bool = False, method: str | None = None) -> tuple[Said, Family]:
    """Every statement about one judge (its analyze figures, then its probes) and the family of
    tests they were decided by; ``method`` None: the analysis's recorded method, else Holm."""
    fam = family(metrics, probes, judge, mutual_gold=mutual_gold, method=method)
    said = trust_summary(metrics, mutual_gold=mutual_gold, fam=fam)
    if probes and judge is not None:
        said += probe_statements(probes, judge, fam=fam)
    return said, fam


def family_sentence(fam: Family) -> str:
    """What "adjusted for N tests" means, in one sentence (the report page; consoles: family_note)."""
    if not fam.size:
        return "No statement about this judge rests on a test (no figure carries a p-value)."
    return (f"Adjusted for {fam.size} tests ({NAMES[fam.method]}): a caution needs its test to stay "
            f"significant at 5% after adjusting for all {fam.size} tests behind these statements, so "
            f"{PROMISE[fam.method]}; the intervals are per-figure 95%.")


def family_note(fam: Family) -> str:
    """The short form for a console line: "cautions adjusted for 21 tests (Holm): ..."."""
    if not fam.size:
        return "no statement rests on a test"
    return f"cautions adjusted for {fam.size} tests ({NAMES[fam.method]}): {PROMISE[fam.method]}"


def trust_summary(metrics: Mapping[str, Any], *, mutual_gold: bool = False,
                  fam: Family | None = None) -> Said:
    """(kind, statement) pairs for one judge; kind is "ok", "caution" or "info". ``fam``: the
    judge's family of tests (default: the tests of these figures alone, for a judge without probes)."""
    fam = fam if fam is not None else family(metrics, mutual_gold=mutual_gold)
    out: Said = _order(metrics, fam)
    ceiling, agree = metrics.get("human_ceiling"), metrics.get("agreement_human")
    if ceiling and ceiling.get("gap"):
        gap, judge_agrees = ceiling["gap"], ceiling["judge"]["value"]
        figure = (f"(gap {fmt(gap['value'], True)} {fmt_ci(gap, True)}, n={ceiling['n']}"
                  f"{p_text(fam, 'human_ceiling')})")
        sign = fam.rejects("human_ceiling")
        if sign < 0:
            out.append(("caution",
                        f"Humans: agrees with the annotators' majority on {fmt(judge_agrees, pct=True)}"
                        " of pairs; one annotator agrees with the others on "
                        f"{fmt(ceiling['value'], pct=True)} "
                        f"{figure}; not a substitute for human labels on this kind of data."))
        else:
            how = "more often than" if sign > 0 else "about as often as"
            out.append(("ok", f"Humans: agrees with the annotators {how} another annotator does {figure}."))
    elif agree:
        out.append(
            (
                "info",
                f"Humans: agrees with the human majority on {fmt(agree['value'], pct=True)} of "
                f"{agree['n']} pairs {fmt_ci(agree, False, pct=True)}; no second annotator for a ceiling.",
            )
        )
    out += _preference(metrics, "self", "Self-preference", "its own outputs", fam)
    out += _preference(metrics, "family", "Family preference", "its family's outputs", fam)
    out += _dbg(metrics.get("dbg"), "dbg", "its own responses", mutual_gold, fam)
    out += _dbg(metrics.get("family_dbg"), "family_dbg", "its family's responses", mutual_gold, fam)
    vb = metrics.get("verbosity_bias")
    if vb and fam.rejects("verbosity_bias") > 0:
        out.append(
            (
                "caution",
                f"Length: prefers the longer response more than humans do (verbosity bias "
                f"{fmt(vb['value'], True)} {fmt_ci(vb, True)}, n={vb['n']}{p_text(fam, 'verbosity_bias')}).",
            )
        )
    out += _style_statements(metrics.get("regression") or {}, metrics.get("regression_human") or {}, fam)
    return out


# A reading aid, stated in the text, never a test: a judge that keeps its choice on fewer pairs
# than this has verdicts worth folding over both orders even when neither position is favoured.
CONSISTENT = 0.9


def _order(metrics: Mapping[str, Any], fam: Family) -> Said:
    """The test is position bias (does the first- or second-shown response win more than half the
    time?); the consistency share is read beside it: a noisy judge flips without favouring a side."""
    pc, pb = metrics.get("position_consistency"), metrics.get("position_bias")
    if not pc and not pb:
        return []
    parts = []
    if pb:
        parts.append(f"P(first shown wins) {fmt(pb['value'])} {fmt_ci(pb, False)}, n={pb['n']}")
    consistency = (f"the same choice in both orders on {fmt(pc['value'], pct=True)} of {pc['n']} pairs "
                   f"{fmt_ci(pc, False, pct=True)}") if pc else ""
    inner = ("; ".join(parts) + p_text(fam, "order")).removeprefix("; ")
    figure = f"({inner})" if inner else ""
    if sign := fam.rejects("order"):
        side = "first" if sign > 0 else "second"
        return [("caution", f"Order: favours the {side}-shown response {figure}"
                 + (f"; {consistency}" if consistency else "")
                 + "; judge every pair in both orders and fold them (single-order verdicts are unreliable).")]
    steady = not pc or pc["value"] >= CONSISTENT
    text = "Order: no position bias detectable" + (f" {figure}" if figure else "")
    if consistency:
        text += f"; {consistency}"
    text += "." if steady else ("; its choices change with the order without favouring a position "
                                "(noise): read verdicts folded over both orders.")
    return [("ok" if steady else "info", text)]


def _preference(metrics: Mapping[str, Any], kind: str, title: str, whose: str, fam: Family) -> Said:
    """EO against humans when there is one; else DP, which mixes bias with quality. The evaluator
    quality baseline, where computed, says whether the preference goes beyond the judge's competence."""
    key = f"{kind}_preference_eo"
    eo, dp = metrics.get(key), metrics.get(f"{kind}_preference_dp")
    sign = fam.rejects(key) if eo else 0
    competence, beyond = _competence(metrics, kind, sign, fam)
    if eo:
        text = {
            1: f"favours {whose} beyond their quality",
            -1: f"is harder on {whose} than humans",
            0: f"no preference for {whose} detectable against humans",
        }[sign]
        return [("caution" if sign or beyond else "ok",
                 f"{title}: {text} (EO {fmt(eo['value'], True)} {fmt_ci(eo, True)}, n={eo['n']}"
                 f"{p_text(fam, key)}){competence}.")]
    if competence:
        return [("caution" if beyond else "info", f"{title}: {competence.removeprefix('; ')}.")]
    if dp:
        return [("info",
                 f"{title}: picks {whose} in {fmt(dp.get('p_own'), pct=True)} of {dp['n']} pairs "
                 f"(DP {fmt(dp['value'], True)} {fmt_ci(dp, True)}); without human labels this mixes "
                 "bias with real quality.")]
    return []


def _competence(metrics: Mapping[str, Any], kind: str, eo_sign: int, fam: Family) -> tuple[str, bool]:
    """The evaluator-quality-baseline clause ("; ..." or "") and whether it claims a preference beyond
    competence (its adjusted test rejects above 0). EO significant but EQB not: explained by competence."""
    key = f"{kind}_preference_eqb"
    eqb = metrics.get(key)
    if not eqb or eqb.get("value") is None:
        return "", False
    own = "its own" if kind == "self" else "its family's"
    figure = (f"(EQB {fmt(eqb['value'], True)} {fmt_ci(eqb, True)}, n={eqb['n']} question-opponent pairs"
              f"{p_text(fam, key)})")
    same = f"on the same questions it votes for {own} wrong answers"
    sign = fam.rejects(key)
    if sign > 0:
        return (f"; beyond its own competence: {same} more often than for other models' wrong answers beaten "
                f"by the same opponent {figure}"), True
    if sign < 0:
        return (f"; {same} less often than for other models' wrong answers beaten by the same opponent "
                f"{figure}"), False
    if eo_sign > 0:
        return (f"; explained by its competence: {same} no detectably more often than for other models' "
                f"wrong answers beaten by the same opponent {figure}, so it misjudges the questions it gets "
                "wrong itself, whoever wrote the answer"), False
    return (f"; on the same questions no difference detectable between its votes for {own} wrong answers "
            f"and for other models' wrong answers beaten by the same opponent {figure}"), False


def _dbg(dbg: Mapping[str, Any] | None, key: str, whose: str, mutual_gold: bool, fam: Family) -> Said:
    if not dbg:
        return []
    if mutual_gold:
        return [("info",
                 f"DBG {fmt(dbg['value'], True)} {fmt_ci(dbg, True)}: two judges are each other's whole gold "
                 "panel, so the interval is wide and both scores are equal by construction; add a third "
                 "judge or human labels to separate them.")]
    if sign := fam.rejects(key):
        return [("caution",
                 f"Against the gold panel, gives {whose} {'more' if sign > 0 else 'fewer'} wins than the "
                 f"panel does (DBG {fmt(dbg['value'], True)} {fmt_ci(dbg, True)}, n={dbg['n']}"
                 f"{p_text(fam, key)}).")]
    return []


def _style_statements(reg: Mapping[str, Any], human: Mapping[str, Any], fam: Family) -> Said:
    """The judge's style terms whose adjusted test rejects; those the humans' own model shows too
    (its interval, a description of the humans, not a claim about the judge) are information."""
    terms, hterms = reg.get("terms") or {}, human.get("terms") or {}
    if reg.get("note"):
        return []
    shared, own = [], []
    for term, label in STYLE_TERMS.items():
        t = terms.get(term)
        sign = fam.rejects(f"style:{term}")
        if not t or sign == 0:
            continue
        h = hterms.get(term)
        piece = (f"{'' if sign > 0 else 'fewer/less '}{label} ({fmt(t['coef'], True)}"
                 f"{p_text(fam, f'style:{term}')})")
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


def probe_statements(probes: Mapping[str, Any], judge: str, fam: Family | None = None) -> Said:
    """What the probes say about one judge: perturbations whose adjusted shift test rejects (those
    under ``MATERIAL_SHIFT`` apart), and self-recognition against chance. ``fam``: the judge's whole
    family (``statements``); default: the probes' tests alone."""
    fam = fam if fam is not None else family({}, probes, judge)
    out: Said = []
    pert = probes.get("perturbations") or {}
    figures = (pert.get("judges") or {}).get(judge) or {}
    moved, small = [], []
    for tag, entry in figures.items():
        shift = entry.get("shift") or {}
        if shift.get("value") is not None and fam.rejects(f"perturbation:{tag}"):
            what = (pert.get("perturbations") or {}).get(tag, {}).get("description", tag)
            piece = (f"{what} ({'toward' if shift['value'] > 0 else 'away from'} that side, shift "
                     f"{fmt(shift['value'], True)} {fmt_ci(shift, True)}, n={shift['n']}"
                     f"{p_text(fam, f'perturbation:{tag}')})")
            (moved if abs(shift["value"]) >= MATERIAL_SHIFT else small).append(piece)
    if moved:
        out.append(("caution", f"Perturbations (CALM) that move its P(A) by {MATERIAL_SHIFT} or more: "
                    + "; ".join(moved) + "."))
    if small:
        out.append(("info", f"Perturbations (CALM) with a detectable shift under {MATERIAL_SHIFT} "
                    "(the size is a reading aid; the test is adjusted): " + "; ".join(small) + "."))
    if figures and not moved and not small:
        out.append(("ok", f"None of the {len(figures)} perturbations tried (CALM) moved it detectably."))
    rec_judges = (probes.get("self_recognition") or {}).get("judges") or {}
    rec = (rec_judges.get(judge) or {}).get("self_recognition")
    if rec and rec.get("value") is not None:
        sign = fam.rejects("self_recognition")
        text = {1: "tells its own answers apart", -1: "picks the other answer as its own",
                0: "does not recognise its own answers beyond chance"}[sign]
        out.append(("info", f"Self-recognition: {text} ({fmt(rec['value'], pct=True)} of {rec['n']} "
                            f"pairs {fmt_ci(rec, False, pct=True)}{p_text(fam, 'self_recognition')}; "
                            "Panickssery et al. link this to "
                            "self-preference)."))
    return out
