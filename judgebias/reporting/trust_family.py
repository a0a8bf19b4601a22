"""The declared family of tests behind a judge's statements, and its multiplicity adjustment.

Every statement of ``judgebias.reporting.trust`` that can become a "caution" (or that claims a detection,
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
from judgebias.multiplicity import ALPHA, HOLM, adjust, check_method

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
    the page is built (``judgebias.reporting.trust.statements``), with the same margins."""
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
