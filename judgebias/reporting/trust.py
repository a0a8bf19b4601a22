"""What a judge can be trusted for, derived from its figures by fixed rules (never text from a
model): each statement names the figure it rests on and its interval. Whether a statement claims a
finding (a "caution", a direction) is decided by its test in the judge's declared family of tests
(``declare``, below), adjusted for the family's size: Holm by default, so that a judge with
none of the biases gets even one false caution with probability at most 5%. A statement that no bias
is there ("ok") needs more than a test that does not reject: the figure's equivalence to its margin
of practical irrelevance (``judgebias.metrics.margins``), adjusted in the same family; otherwise it is
"inconclusive" and says the largest effect the data cannot exclude and about how many more units
would settle it. The 0.9 position consistency is a reading aid stated in the text, never a test.

One concept, past 600 lines on purpose: the statements and the declared family of tests they are
decided by call each other back and forth (a statement reads its test's adjusted p-value; the family
is declared from the same figures the statements read), so they sit in one module.

The declared family of tests behind a judge's statements, and its multiplicity adjustment, comes
first. Every statement that can become a "caution" (or that claims a detection,
like self-recognition) rests on exactly one test of one figure, declared here and nowhere else
(``declare``). The tests of one judge (its analyze figures and, when the probes ran, its probe
figures) form one family; their p-values are adjusted together (``judgebias.multiplicity``: Holm by
default, Benjamini-Hochberg as an option) and a statement claims a finding only where the
ADJUSTED p-value is under 5%. Intervals stay per-figure 95% intervals.

The tests (the null each rejects, read from the figure's own ``p_value``):

=====================  ===================================  =========================================
test                   figure                               null
=====================  ===================================  =========================================
order                  position_bias (t-test of 0.5)        the first-shown response wins half the
                                                            time; position consistency is only read
human_ceiling          human_ceiling.gap (paired t-test)    agrees with humans as one annotator does
self/family EO         *_preference_eo (score test)         TPR = TNR against the human majority
self/family EQB        *_preference_eqb (cluster t-test)    votes for its own wrong answers as often as
                                                            for others' beaten by the same opponent
self/family DBG        dbg / family_dbg (sign test)         wins own pairs as often as the gold panel
verbosity              verbosity_bias (score test)          errors do not depend on length
style:<term>           regression.terms.<term> (Wald)       the style term's coefficient is 0
perturbation:<tag>     probes ... <tag>.shift (t-test)      the perturbation does not move P(side)
self_recognition       probes ... self_recognition          picks its own answer half the time
                       (exact binomial test)
=====================  ===================================  =========================================

A figure without a p-value (too few units) is no member: its statement cannot claim a finding.

Three verdicts (``judgebias.metrics.margins``): each member also tests equivalence against its
figure's declared margin of practical irrelevance (registry, ``--margin`` overrides). Those
equivalence p-values are adjusted together by the same method, as a second family over the same
members: a member's two nulls (effect 0; effect at least the margin) are disjoint, so it can be wrong
one way only, and each kind of claim keeps its own bound (Holm: the chance of even one false ok about
a judge is at most 5%, as for a false caution). ``caution`` where the zero test rejects after
adjustment; ``ok`` only where the adjusted equivalence test does (so the 95% interval lies inside the
margin); ``inconclusive`` otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from judgebias.metrics import margins as M
from judgebias.metrics.registry import margins as declared_margins
from judgebias.multiplicity import ALPHA, HOLM, NAMES, PROMISE, adjust, check_method

STYLE_TERMS = {
    "word_diff": "longer answers",
    "headers_style": "more markdown headers",
    "lists_style": "more list items",
    "bold_style": "more bold text",
    "self_origin": "its own outputs",
    "family_origin": "its family's outputs",
}
# What the judge prefers when a term's coefficient is negative: each term's own English opposite
# (a prefix "fewer/less" read "fewer/less more bold text").
STYLE_TERMS_NEGATIVE = {
    "word_diff": "shorter answers",
    "headers_style": "fewer markdown headers",
    "lists_style": "fewer list items",
    "bold_style": "less bold text",
    "self_origin": "other models' outputs over its own",
    "family_origin": "outputs from outside its family",
}


@dataclass(frozen=True)
class Test:
    """One member: ``key`` names the statement's test, ``figure`` the JSON path of the figure it
    reads, ``direction`` the sign of the estimate against its null (+1 / -1 / 0)."""

    key: str
    figure: str
    p_value: float
    direction: int
    margin: M.Margin | None = None  # the band its ok is read against (None: no ok can be claimed)
    width: float | None = None  # the margin in the figure's unit (a scale share times the scale)
    estimate: Mapping[str, Any] | None = None  # value, ci_low, ci_high, n of the figure it reads

    @property
    def equivalence_p(self) -> float:
        """The TOST p-value against the margin (``margins.equivalence_p``); 1 without a margin."""
        if self.margin is None or self.width is None or self.estimate is None:
            return 1.0
        return M.equivalence_p(self.estimate, self.width, null=self.margin.null, sides=self.margin.sides)


@dataclass(frozen=True)
class Family:
    method: str
    tests: tuple[Test, ...]
    adjusted: tuple[float, ...]
    alpha: float = ALPHA
    # The members' equivalence p-values adjusted together (same method); empty: none tested.
    equivalence: tuple[float, ...] = ()

    @property
    def size(self) -> int:
        return len(self.tests)

    def _index(self, key: str) -> int | None:
        return next((i for i, t in enumerate(self.tests) if t.key == key), None)

    def p(self, key: str) -> tuple[float, float] | None:
        """(raw, adjusted) p-value of the test ``key``; None when it is no member."""
        i = self._index(key)
        return None if i is None else (self.tests[i].p_value, self.adjusted[i])

    def rejects(self, key: str) -> int:
        """The direction (+1 / -1) when the adjusted test rejects at ``alpha``, else 0."""
        i = self._index(key)
        if i is None or self.adjusted[i] >= self.alpha:
            return 0
        return self.tests[i].direction

    def raw_only(self, key: str) -> bool:
        """Significant one test at a time, but not once adjusted: read as a hint, not a finding."""
        i = self._index(key)
        return i is not None and self.tests[i].p_value < self.alpha <= self.adjusted[i]

    def test(self, key: str) -> Test | None:
        i = self._index(key)
        return None if i is None else self.tests[i]

    def equivalent(self, key: str) -> bool:
        """The adjusted equivalence test rejects "at least the margin": the effect is shown to be
        practically irrelevant (its 95% interval inside the margin, and the family's adjustment met)."""
        i = self._index(key)
        return i is not None and i < len(self.equivalence) and self.equivalence[i] < self.alpha

    def verdict(self, key: str) -> str | None:
        """caution / ok / inconclusive for a member (``margins.verdict``), None for no member."""
        if self._index(key) is None:
            return None
        return M.verdict(bool(self.rejects(key)), self.equivalent(key))

    def member(self, i: int) -> dict[str, Any]:
        t = self.tests[i]
        out = {"test": t.key, "figure": t.figure, "p_value": t.p_value, "p_adjusted": self.adjusted[i]}
        if t.margin is not None and t.width is not None:
            out.update({"margin": t.width, "margin_null": t.margin.null, "margin_sides": t.margin.sides,
                        "equivalence_p": t.equivalence_p})
            if i < len(self.equivalence):
                out["equivalence_p_adjusted"] = self.equivalence[i]
        out["verdict"] = self.verdict(t.key)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "alpha": self.alpha, "tests": self.size,
                "members": [self.member(i) for i in range(self.size)]}


def build(method: str, tests: tuple[Test, ...] | list[Test]) -> Family:
    """The family of ``tests``: their zero p-values and their equivalence p-values each adjusted
    together by ``method``."""
    tests = tuple(tests)
    return Family(method, tests, tuple(adjust([t.p_value for t in tests], method)),
                  equivalence=tuple(adjust([t.equivalence_p for t in tests], method)))


def effective_margins(overrides: Mapping[str, float] | None = None) -> dict[str, M.Margin]:
    """The declared margins (registry and probes) with the values ``--margin`` gave instead."""
    base = dict(declared_margins())
    for key, value in (overrides or {}).items():
        if key in base:
            base[key] = replace(base[key], value=float(value))
    return base


def recorded_overrides(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The margin values an analysis recorded for a judge (``multiplicity.margins``), {} if none."""
    rec = ((metrics or {}).get("multiplicity") or {}).get("margins") or {}
    return {k: float(v) for k, v in rec.items() if isinstance(v, (int, float))}


def with_margin(test: Test, margin: M.Margin | None, est: Mapping[str, Any] | None,
                scale_range: float | None = None) -> Test:
    """``test`` carrying its margin (in the figure's unit: ``scale_range`` for a scale-share one) and
    the estimate its equivalence is read from."""
    if margin is None or est is None:
        return test
    return replace(test, margin=margin, width=margin.width(scale_range),
                   estimate={k: est.get(k) for k in ("value", "ci_low", "ci_high", "n")})


def sign_of(x: float | None, null: float = 0.0) -> int:
    if x is None:
        return 0
    return 1 if x > null else -1 if x < null else 0


def p_value_of(est: Mapping[str, Any] | None) -> float | None:
    p = (est or {}).get("p_value")
    return float(p) if isinstance(p, (int, float)) and 0.0 <= p <= 1.0 else None


def _recognition_p(rec: Mapping[str, Any]) -> float | None:
    """The figure's exact binomial p-value; for figures written before it carried one, the same
    test from its counts (``correct`` of ``n`` decided pairs)."""
    if (p := p_value_of(rec)) is not None:
        return p
    n, k = rec.get("n"), rec.get("correct")
    if not isinstance(n, int) or not isinstance(k, int) or n <= 0:
        return None
    from judgebias.stats import sign_test

    return sign_test(k, n - k)


def _analysis_tests(metrics: Mapping[str, Any], mutual_gold: bool, margins: Mapping[str, M.Margin]
                    ) -> Iterator[Test]:
    order = metrics.get("position_bias")
    if order and p_value_of(order) is not None:
        test = Test("order", "position_bias", p_value_of(order), sign_of(order.get("value"), 0.5))
        yield with_margin(test, margins.get("position_bias"), order)
    elif p_value_of((metrics.get("position_consistency") or {}).get("preference_fairness")) is not None:
        # Before position_bias, and for a table whose bias figure was not computable: the balance
        # of primacy against recency flips (t-test of 0) tests the same null; +1 = recency.
        pf = metrics["position_consistency"]["preference_fairness"]
        yield Test("order", "position_consistency.preference_fairness", p_value_of(pf),
                   -sign_of(pf.get("value")))
    gap = (metrics.get("human_ceiling") or {}).get("gap")
    if gap and p_value_of(gap) is not None:
        test = Test("human_ceiling", "human_ceiling.gap", p_value_of(gap), sign_of(gap.get("value")))
        yield with_margin(test, margins.get("human_ceiling"), gap)
    for key in ("self_preference_eo", "self_preference_eqb", "family_preference_eo", "family_preference_eqb"):
        est = metrics.get(key)
        if est and p_value_of(est) is not None:
            yield with_margin(Test(key, key, p_value_of(est), sign_of(est.get("value"))), margins.get(key),
                               est)
    if not mutual_gold:  # two judges each other's whole gold: DBG is explained, never claimed
        for key in ("dbg", "family_dbg"):
            est = metrics.get(key)
            if est and p_value_of(est) is not None:
                yield with_margin(Test(key, key, p_value_of(est), sign_of(est.get("value"))),
                                   margins.get(key), est)
    vb = metrics.get("verbosity_bias")
    if vb and p_value_of(vb) is not None:
        yield with_margin(Test("verbosity_bias", "verbosity_bias", p_value_of(vb), sign_of(vb.get("value"))),
                           margins.get("verbosity_bias"), vb)
    reg = metrics.get("regression") or {}
    terms = reg.get("terms") or {}
    if not reg.get("note"):
        for term in STYLE_TERMS:
            t = terms.get(term)
            # Origin terms are read only with the human label in the model: without it "prefers
            # its own" mixes bias with the quality of its own answers.
            if not t or p_value_of(t) is None or (term.endswith("_origin") and "human_a" not in terms):
                continue
            est = {"value": t.get("coef"), "ci_low": t.get("ci_low"), "ci_high": t.get("ci_high"),
                   "n": reg.get("n")}
            yield with_margin(Test(f"style:{term}", f"regression.terms.{term}", p_value_of(t),
                                    sign_of(t.get("coef"))), margins.get("regression"), est)


def _probe_tests(probes: Mapping[str, Any], judge: str, margins: Mapping[str, M.Margin]) -> Iterator[Test]:
    pert = ((probes.get("perturbations") or {}).get("judges") or {}).get(judge) or {}
    for tag, entry in pert.items():
        shift = entry.get("shift") or {}
        if shift.get("value") is not None and p_value_of(shift) is not None:
            yield with_margin(Test(f"perturbation:{tag}", f"probes.perturbations.{tag}.shift",
                                    p_value_of(shift), sign_of(shift["value"])),
                               margins.get("perturbation_shift"), shift)
    rec = (((probes.get("self_recognition") or {}).get("judges") or {}).get(judge) or {}).get(
        "self_recognition")
    if rec and rec.get("value") is not None and (p := _recognition_p(rec)) is not None:
        yield with_margin(Test("self_recognition", "probes.self_recognition", p, sign_of(rec["value"], 0.5)),
                           margins.get("self_recognition"), rec)


def declare(metrics: Mapping[str, Any] | None, probes: Mapping[str, Any] | None = None,
            judge: str | None = None, *, mutual_gold: bool = False,
            margins: Mapping[str, float] | None = None) -> list[Test]:
    """The tests behind one judge's statements: its analyze figures, then its probe figures, each
    with its margin: the declared one, else the value the analysis recorded for the judge, else
    the one ``margins`` gives (values overriding both)."""
    bands = effective_margins({**recorded_overrides(metrics), **(margins or {})})
    tests = list(_analysis_tests(metrics or {}, mutual_gold, bands))
    if probes and judge is not None:
        tests += _probe_tests(probes, judge, bands)
    return tests


def family(metrics: Mapping[str, Any] | None, probes: Mapping[str, Any] | None = None,
           judge: str | None = None, *, mutual_gold: bool = False, method: str | None = None,
           margins: Mapping[str, float] | None = None) -> Family:
    """The declared tests of one judge with their adjusted p-values (zero and equivalence). ``method``
    None: the one the analysis recorded (``metrics["multiplicity"]["method"]``), else Holm;
    ``margins``: as in ``declare``."""
    m = check_method(method or ((metrics or {}).get("multiplicity") or {}).get("method") or HOLM)
    return build(m, declare(metrics, probes, judge, mutual_gold=mutual_gold, margins=margins))


SCOPE = ("the tests of this judge's analysis figures; where probes ran, their tests join the family on "
         "the report page, which then adjusts for the larger number")


def mutual_gold(result: Mapping[str, Any]) -> bool:
    """Two measured judges, each the other's whole gold panel (read off their DBG figures): their
    DBG scores mirror each other by construction."""
    panels = {j: (m.get("dbg") or {}).get("gold_panel") for j, m in (result.get("judges") or {}).items()}
    panels = {j: p for j, p in panels.items() if p}
    if len(panels) != 2:
        return False
    (a, pa), (b, pb) = panels.items()
    return list(pa) == [b] and list(pb) == [a]


def _figure_at(metrics: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: Any = metrics
    for part in path.split(".") if not path.startswith("regression.terms.") else \
            ["regression", "terms", path.removeprefix("regression.terms.")]:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def attach(result: Mapping[str, Any], *, method: str = HOLM,
           margins: Mapping[str, float] | None = None) -> dict[str, Any]:
    """A copy of ``result`` (an analyze result) with each judge's family written into it:
    ``p_adjusted`` and ``verdict`` beside each member figure's ``p_value`` and ``multiplicity``
    (method, size, members, the margin values read) in the judge's metrics. ``margins``: values
    overriding the declared ones (``--margin``). The probes, which run later, join the family where
    the page is built (``statements``), with the same margins."""
    method = check_method(method)
    result = copy.deepcopy(dict(result))
    mutual = mutual_gold(result)
    values = {k: m.value for k, m in effective_margins(margins).items()}
    for metrics in (result.get("judges") or {}).values():
        fam = family(metrics, mutual_gold=mutual, method=method, margins=margins or {})
        for i, test in enumerate(fam.tests):
            fig = _figure_at(metrics, test.figure)
            if fig is not None:
                fig["p_adjusted"] = fam.adjusted[i]
                fig["verdict"] = fam.verdict(test.key)
        metrics["multiplicity"] = {**fam.to_dict(), "margins": values, "scope": SCOPE}
    return result


# The statements, decided by the family above.

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
