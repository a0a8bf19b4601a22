"""CI gates on an analyze result: rules over the registry's figure names, each rule passing, broken
or inconclusive for each judge.

Rules (one per ``--rule``, or a YAML list under ``rules:``):

* ``FIGURE[.value|.ci_low|.ci_high] OP NUMBER``, OP one of ``>= <= > <``: a bound. On an interval
  end (``agreement_human.ci_low >= 0.7``) the rule is decided by that number. On the point estimate
  (``position_consistency >= 0.8``, or ``.value``) a 95% interval that straddles the bound makes
  the rule *inconclusive*: the data cannot say on which side the judge is, and
  ``on_inconclusive`` ("pass" or "fail") decides.
* ``no caution on FIGURE``: broken when the figure's test rejects in the judge's family of tests
  (its ``p_adjusted`` under 5%: the report card's "caution"; ``judgebias.reporting.trust``).
* ``no change since RUN``: broken when ``judgebias compare RUN METRICS`` flags a change of any
  figure of the judge (Holm-adjusted; ``judgebias.reporting.run_compare``). The command runs that
  comparison and hands its result here.

A figure the run could not compute breaks the rule ("not computed: REASON"): a gate never passes on
a figure that is not there. Pure functions; the command (``cli/watch.py``) reads files and exits.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judgebias.metrics import registry as R
from judgebias.multiplicity import ALPHA

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
ON_INCONCLUSIVE = (PASS, FAIL)
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_FIELDS = ("value", "ci_low", "ci_high")
_BOUND = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)(?:\.(value|ci_low|ci_high))?\s*(>=|<=|>|<)\s*"
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
_CAUTION = re.compile(r"^\s*no\s+caution\s+on\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", re.IGNORECASE)
_CHANGE = re.compile(r"^\s*no\s+change\s+since\s+(\S.*?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Rule:
    text: str
    kind: str  # "bound", "caution" or "change"
    figure: str | None = None
    field: str = "value"
    op: str = ""
    bound: float = math.nan
    run: str | None = None


def _known(figure: str, text: str) -> str:
    if figure not in R.FIGURES:
        raise ValueError(
            f"rule {text!r}: {figure!r} is no figure; the registry's figures: {', '.join(R.FIGURES)}"
        )
    return figure


def parse_rule(text: str) -> Rule:
    """One rule from its text; ValueError naming the rule and the forms it may take."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"rule {text!r}: empty")
    if m := _BOUND.match(text):
        fig, field, op, num = m.groups()
        return Rule(text.strip(), "bound", _known(fig, text), field or "value", op, float(num))
    if m := _CAUTION.match(text):
        return Rule(text.strip(), "caution", _known(m.group(1), text))
    if m := _CHANGE.match(text):
        return Rule(text.strip(), "change", run=m.group(1))
    raise ValueError(
        f"rule {text!r} is none of: 'FIGURE[.value|.ci_low|.ci_high] >=|<=|>|< NUMBER', "
        "'no caution on FIGURE', 'no change since RUN'"
    )


def rules_from_yaml(text: str) -> list[Rule]:
    """Rules from a YAML document: a list of rule texts, or a mapping with such a list under ``rules``."""
    import yaml

    doc = yaml.safe_load(text)
    items = doc.get("rules") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list) or not items:
        raise ValueError("rules file: expected a list of rules, or one under 'rules:'")
    return [parse_rule(str(item)) for item in items]


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    judge: str
    status: str
    line: str


def _interval(est: Mapping[str, Any]) -> str:
    lo, hi = est.get("ci_low"), est.get("ci_high")
    return f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "(no interval)"


def _bound(rule: Rule, judge: str, est: Mapping[str, Any]) -> tuple[str, str]:
    value = est.get(rule.field)
    what = f"{rule.figure} = {est['value']:.3f} {_interval(est)}, n={est.get('n', '?')}"
    if value is None:
        return FAIL, f"{what}: no {rule.field}"
    holds = _OPS[rule.op](float(value), rule.bound)
    if rule.field == "value" and est.get("ci_low") is not None and est.get("ci_high") is not None:
        ends = [_OPS[rule.op](float(est[e]), rule.bound) for e in ("ci_low", "ci_high")]
        if ends[0] != ends[1]:
            return INCONCLUSIVE, f"{what}: the interval straddles {rule.bound:g}"
    return (PASS if holds else FAIL), what if rule.field == "value" else f"{what} ({rule.field} {value:.3f})"


def _caution(rule: Rule, metrics: Mapping[str, Any]) -> tuple[str, str]:
    members = [
        m
        for m in (metrics.get("multiplicity") or {}).get("members") or []
        if m.get("figure") == rule.figure or str(m.get("figure", "")).startswith(f"{rule.figure}.")
    ]
    est = metrics.get(rule.figure) or {}
    what = f"{rule.figure} = {est['value']:.3f} {_interval(est)}"
    if not members:
        return PASS, f"{what}: not among the judge's tested statements"
    worst = min(members, key=lambda m: m.get("p_adjusted", 1.0))
    p = worst.get("p_adjusted")
    if p is not None and p < ALPHA:
        return FAIL, f"{what}: caution ({worst.get('test')}, adjusted p {p:.3g})"
    return PASS, f"{what}: no caution (adjusted p {p:.3g})" if p is not None else what


def _change(rule: Rule, judge: str, comparison: Mapping[str, Any] | None) -> tuple[str, str]:
    if comparison is None:
        raise ValueError(f"rule {rule.text!r}: no comparison with {rule.run!r} was made")
    mine = [c for c in comparison["comparisons"] if c["after"]["judge"] == judge]
    if not mine:
        return FAIL, f"judge {judge!r} is not in {rule.run}: nothing to compare with"
    changed = [f for c in mine for f in c["figures"] if f["changed"]]
    if changed:
        return FAIL, "; ".join(f["statement"] for f in changed)
    n = sum(len(c["figures"]) for c in mine)
    return PASS, f"no change among {n} figure(s) ({comparison['multiplicity']['method']}-adjusted)"


def evaluate(
    rules: Sequence[Rule],
    result: Mapping[str, Any],
    *,
    judges: Sequence[str] | None = None,
    on_inconclusive: str = FAIL,
    comparisons: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Verdict]:
    """Every rule for every judge of ``result`` (an analyze result; ``judges`` to pick some).
    ``comparisons``: the compare result of each ``no change since RUN`` rule, by RUN."""
    if on_inconclusive not in ON_INCONCLUSIVE:
        raise ValueError(f"on_inconclusive must be 'pass' or 'fail', got {on_inconclusive!r}")
    all_judges = result.get("judges") or {}
    if not all_judges:
        raise ValueError("gate: the metrics hold no judge")
    names = list(judges) if judges else list(all_judges)
    unknown = [j for j in names if j not in all_judges]
    if unknown:
        raise ValueError(f"gate: judge(s) {unknown} not in the metrics (judges: {sorted(all_judges)})")
    out = []
    for judge in names:
        metrics = all_judges[judge]
        for rule in rules:
            if rule.kind == "change":
                status, line = _change(rule, judge, (comparisons or {}).get(rule.run))
            else:
                est = metrics.get(rule.figure)
                if not isinstance(est, Mapping) or est.get("value") is None:
                    reason = (metrics.get("skipped") or {}).get(rule.figure, "not in the metrics")
                    status, line = FAIL, f"{rule.figure}: not computed ({reason})"
                elif rule.kind == "bound":
                    status, line = _bound(rule, judge, est)
                else:
                    status, line = _caution(rule, metrics)
            out.append(Verdict(rule, judge, status, line))
    return out


def broken(verdicts: Sequence[Verdict], on_inconclusive: str = FAIL) -> list[Verdict]:
    """The verdicts that fail the gate: the failed ones, and the inconclusive ones under 'fail'."""
    return [v for v in verdicts if v.status == FAIL or (v.status == INCONCLUSIVE and on_inconclusive == FAIL)]


def report_line(v: Verdict) -> str:
    """'FAIL [judge] rule: figure = value [low, high], n=...' (one line per rule and judge)."""
    return f"{v.status.upper()} [{v.judge}] {v.rule.text}: {v.line}"
