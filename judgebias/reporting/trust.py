"""What a judge can be trusted for, derived from its figures by fixed rules (never text from a
model): each statement names the figure it rests on and its interval. Whether a statement claims a
finding (a "caution", a direction) is decided by its test in the judge's declared family of tests
(``judgebias.reporting.trust_family``), adjusted for the family's size: Holm by default, so that a judge with
none of the biases gets even one false caution with probability at most 5%. A statement that no bias
is there ("ok") needs more than a test that does not reject: the figure's equivalence to its margin
of practical irrelevance (``judgebias.metrics.margins``), adjusted in the same family; otherwise it is
"inconclusive" and says the largest effect the data cannot exclude and about how many more units
would settle it. The 0.9 position consistency is a reading aid stated in the text, never a test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.metrics import margins as M
from judgebias.multiplicity import NAMES, PROMISE
from judgebias.reporting.trust_family import STYLE_TERMS, STYLE_TERMS_NEGATIVE, Family, family, mutual_gold

__all__ = ["STYLE_TERMS", "family", "family_note", "family_sentence", "fmt", "fmt_ci", "fmt_p", "mutual_gold",
           "probe_statements", "statements", "trust_summary", "unsettled"]

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


def margin_text(fam: Family, key: str, signed: bool = True, pct: bool = False) -> str:
    """"margin +-0.050" / "margin 0.5 +- 0.030" / "margin: not below -0.050" for a member."""
    t = fam.test(key)
    if t is None or t.margin is None or t.width is None:
        return "no margin declared"
    null, w = t.margin.null, t.width
    if t.margin.sides == M.LOWER:
        return f"margin: not below {fmt(null - w, signed, pct)}"
    if null:
        return f"margin {fmt(null, False, pct)} +- {fmt(w, False, pct)}"
    return f"margin +-{fmt(w, False, pct)}"


def settle_text(fam: Family, key: str) -> str:
    """"about 420 more pairs ... would settle it" by the planner's arithmetic (margins.to_settle)."""
    t = fam.test(key)
    if t is None or t.margin is None or t.width is None or t.estimate is None:
        return ""
    plan = M.to_settle(t.estimate, t.width, null=t.margin.null, sides=t.margin.sides)
    if plan is None:
        return ""
    if plan["more"] == 0:
        return f"the interval is narrow enough; the adjustment for {fam.size} tests holds it back"
    return (f"about {plan['more']:,} more {t.margin.unit} would settle it: {plan['n_needed']:,} in all, "
            f"more once adjusted for {fam.size} tests")


def unsettled(fam: Family, key: str, signed: bool = True, pct: bool = False) -> str:
    """The inconclusive clause: "up to +0.141 is not excluded (margin +-0.050; about ...)"."""
    t = fam.test(key)
    end = None
    if t is not None and t.estimate is not None:
        null, sides = (t.margin.null, t.margin.sides) if t.margin is not None else (0.0, M.BOTH)
        end = M.not_excluded(t.estimate, null=null, sides=sides)
    plan = settle_text(fam, key)
    return (f"{fmt(end, signed, pct)} is not excluded ({margin_text(fam, key, signed, pct)}"
            + (f"; {plan}" if plan else "") + ")")


def statements(metrics: Mapping[str, Any], probes: Mapping[str, Any] | None = None, judge: str | None = None,
               *, mutual_gold: bool = False, method: str | None = None,
               margins: Mapping[str, float] | None = None) -> tuple[Said, Family]:
    """Every statement about one judge (its analyze figures, then its probes) and the family of
    tests they were decided by; ``method`` None: the analysis's recorded method, else Holm;
    ``margins``: margin values overriding those the analysis recorded (else the declared ones)."""
    fam = family(metrics, probes, judge, mutual_gold=mutual_gold, method=method, margins=margins)
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
            f"{PROMISE[fam.method]}; an ok needs the figure's 95% interval inside its margin of practical "
            "irrelevance, that equivalence test adjusted the same way; anything else is inconclusive. "
            "The intervals are per-figure 95%.")


def family_note(fam: Family) -> str:
    """The short form for a console line: "cautions adjusted for 21 tests (Holm): ..."."""
    if not fam.size:
        return "no statement rests on a test"
    return (f"cautions adjusted for {fam.size} tests ({NAMES[fam.method]}): {PROMISE[fam.method]}; an ok "
            "needs the 95% interval inside its margin (equivalence, adjusted alike), else inconclusive")


def trust_summary(metrics: Mapping[str, Any], *, mutual_gold: bool = False,
                  fam: Family | None = None) -> Said:
    """(kind, statement) pairs for one judge; kind is "ok", "caution", "inconclusive" or "info". ``fam``: the
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
        elif sign > 0 or fam.equivalent("human_ceiling"):
            how = "more often than" if sign > 0 else "about as often as"
            out.append(("ok", f"Humans: agrees with the annotators {how} another annotator does {figure}."))
        else:
            out.append(("inconclusive",
                        "Humans: not detectably below one annotator's agreement with the others, but a gap "
                        f"as large as {unsettled(fam, 'human_ceiling')} {figure}; not yet shown to be a "
                        "substitute for human labels."))
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
    out += _length(metrics.get("verbosity_bias"), fam)
    out += _style_statements(metrics.get("regression") or {}, metrics.get("regression_human") or {}, fam)
    return out


def _length(vb: Mapping[str, Any] | None, fam: Family) -> Said:
    """Saito's accuracy gap: a caution when its test rejects, ok only inside its margin, else
    inconclusive with the gap not excluded (a verbosity test that misses after adjustment is no
    evidence of a judge indifferent to length)."""
    if not vb or vb.get("value") is None:
        return []
    figure = (f"(verbosity bias {fmt(vb['value'], True)} {fmt_ci(vb, True)}, n={vb['n']}"
              f"{p_text(fam, 'verbosity_bias')})")
    if sign := fam.rejects("verbosity_bias"):
        side = "longer" if sign > 0 else "shorter"
        return [("caution", f"Length: prefers the {side} response more than humans do {figure}.")]
    if fam.p("verbosity_bias") is None:
        return [("inconclusive", f"Length: no test of a length preference (too few units) {figure}.")]
    if fam.equivalent("verbosity_bias"):
        return [("ok", f"Length: no length preference beyond humans' past its "
                       f"{margin_text(fam, 'verbosity_bias')} {figure}.")]
    return [("inconclusive", "Length: no length preference beyond humans' detectable, but a gap as large as "
                             f"{unsettled(fam, 'verbosity_bias')} {figure}.")]


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
    shown = fam.equivalent("order")
    if shown:
        text = f"Order: no position bias beyond its margin ({margin_text(fam, 'order', False)})"
    elif fam.p("order") is not None:
        text = ("Order: no position bias detectable, but P(first shown wins) of "
                + unsettled(fam, "order", False))
    else:
        text = "Order: no test of position bias (no per-order P(first shown wins))"
    text += f" {figure}" if figure else ""
    if consistency:
        text += f"; {consistency}"
    text += "." if steady else ("; its choices change with the order without favouring a position "
                                "(noise): read verdicts folded over both orders.")
    if fam.p("order") is None:  # consistency alone describes; it shows no absence of a bias
        return [("info", text)]
    return [("ok" if steady else "info", text) if shown else ("inconclusive", text)]


def _preference(metrics: Mapping[str, Any], kind: str, title: str, whose: str, fam: Family) -> Said:
    """EO against humans when there is one; else DP, which mixes bias with quality. The evaluator
    quality baseline, where computed, says whether the preference goes beyond the judge's competence."""
    key = f"{kind}_preference_eo"
    eo, dp = metrics.get(key), metrics.get(f"{kind}_preference_dp")
    sign = fam.rejects(key) if eo else 0
    competence, beyond = _competence(metrics, kind, sign, fam)
    if eo:
        figure = f"(EO {fmt(eo['value'], True)} {fmt_ci(eo, True)}, n={eo['n']}{p_text(fam, key)})"
        if sign or beyond:
            text = (f"favours {whose} beyond their quality" if sign > 0
                    else f"is harder on {whose} than humans" if sign < 0
                    else f"no preference for {whose} detectable against humans")
            return [("caution", f"{title}: {text} {figure}{competence}.")]
        if fam.p(key) is None:
            return [("inconclusive",
                     f"{title}: no test of a preference for {whose} (too few units) {figure}{competence}.")]
        if fam.equivalent(key):
            return [("ok", f"{title}: no preference for {whose} beyond its {margin_text(fam, key)} against "
                           f"humans {figure}{competence}.")]
        return [("inconclusive", f"{title}: no preference for {whose} detectable against humans, but one "
                                 f"as large as {unsettled(fam, key)} {figure}{competence}.")]
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
        piece = (f"{label if sign > 0 else STYLE_TERMS_NEGATIVE[term]} ({fmt(t['coef'], True)}"
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


def _verdicts_kept(rate: Mapping[str, Any]) -> bool:
    """The verdicts-unchanged share shown at or above ``margins.VERDICTS_KEPT`` (True without one:
    a probe that reports no verdicts is read on its shift alone)."""
    if rate.get("value") is None:
        return True
    return rate.get("ci_low") is not None and rate["ci_low"] >= M.VERDICTS_KEPT


def probe_statements(probes: Mapping[str, Any], judge: str, fam: Family | None = None) -> Said:
    """What the probes say about one judge: perturbations whose adjusted shift test rejects (a
    caution from the shift's margin up, information under it), those shown to stay inside their
    margin (ok), those neither (inconclusive: the shift not excluded), and self-recognition against
    chance. ``fam``: the judge's whole family (``statements``); default: the probes' tests alone."""
    fam = fam if fam is not None else family({}, probes, judge)
    out: Said = []
    pert = probes.get("perturbations") or {}
    figures = (pert.get("judges") or {}).get(judge) or {}
    moved, small, inside, unsure = [], [], [], []
    material = 0.0
    for tag, entry in figures.items():
        shift = entry.get("shift") or {}
        key = f"perturbation:{tag}"
        if shift.get("value") is None or fam.p(key) is None:
            continue
        what = (pert.get("perturbations") or {}).get(tag, {}).get("description", tag)
        rate = entry.get("robustness_rate") or {}
        kept = (f", verdicts unchanged on {fmt(rate['value'], pct=True)}" if rate.get("value") is not None
                else "")
        figure = (f"shift {fmt(shift['value'], True)} {fmt_ci(shift, True)}, n={shift['n']}{kept}"
                  f"{p_text(fam, key)}")
        t = fam.test(key)
        width = t.width if t is not None and t.width is not None else 0.0
        material = max(material, width)
        verdict = fam.verdict(key)
        if verdict == M.CAUTION:
            piece = f"{what} ({'toward' if shift['value'] > 0 else 'away from'} that side, {figure})"
            (moved if abs(shift["value"]) >= width else small).append(piece)
        elif verdict == M.OK and _verdicts_kept(rate):
            inside.append(f"{tag.split('@')[0]} ({figure})")
        elif verdict == M.OK:
            changed = 1.0 - rate["value"]
            worst = 1.0 - rate["ci_low"] if rate.get("ci_low") is not None else None
            most = fmt(1 - M.VERDICTS_KEPT, pct=True)
            unsure.append(f"{what}: its mean P(A) stayed within +-{width:.2f}, but it changed "
                          f"{fmt(changed, pct=True)} of the verdicts and as many as {fmt(worst, pct=True)} "
                          f"is not excluded (ok needs at most {most}) ({figure})")
        else:
            unsure.append(f"{what}: a shift as large as {unsettled(fam, key)} ({figure})")
    band = f"{material:.2f}" if material else "its margin"
    if moved:
        out.append(("caution", f"Perturbations (CALM) that move its P(A) by {band} or more: "
                    + "; ".join(moved) + "."))
    if small:
        out.append(("info", f"Perturbations (CALM) with a detectable shift under their margin of {band} "
                    "(the test is adjusted): " + "; ".join(small) + "."))
    if inside:
        lead = (f"All {len(figures)} perturbations tried" if len(inside) == len(figures)
                else f"{len(inside)} of the {len(figures)} perturbations tried")
        out.append(("ok", f"{lead} (CALM) left its P(A) within +-{band} (each 95% interval inside): "
                    + "; ".join(inside) + "."))
    if unsure:
        out.append(("inconclusive", f"Perturbations (CALM) with no detectable shift that the data cannot yet "
                    f"call harmless ({len(unsure)} of {len(figures)}): " + "; ".join(unsure) + "."))
    rec_judges = (probes.get("self_recognition") or {}).get("judges") or {}
    rec = (rec_judges.get(judge) or {}).get("self_recognition")
    if rec and rec.get("value") is not None:
        sign = fam.rejects("self_recognition")
        figure = (f"({fmt(rec['value'], pct=True)} of {rec['n']} pairs {fmt_ci(rec, False, pct=True)}"
                  f"{p_text(fam, 'self_recognition')}; Panickssery et al. link this to self-preference)")
        if sign or fam.equivalent("self_recognition") or fam.p("self_recognition") is None:
            text = {1: "tells its own answers apart", -1: "picks the other answer as its own",
                    0: "does not recognise its own answers beyond chance"}[sign]
            out.append(("info", f"Self-recognition: {text} {figure}."))
        else:
            high = unsettled(fam, "self_recognition", signed=False, pct=True)
            out.append(("inconclusive", "Self-recognition: not detectably better than chance, but an "
                                        f"accuracy as high as {high} {figure}."))
    return out
