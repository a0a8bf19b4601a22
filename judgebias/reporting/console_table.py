"""A readable terminal table of an ``analyze`` result (what ``judgebias analyze`` prints): one row per
figure of the registry (``judgebias.metrics.registry``: its label and how to read it), in its order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.metrics import registry
from judgebias.reporting.cluster_text import cluster_text, unit_name
from judgebias.reporting.trust import family_note, mutual_gold, statements


def _fmt(x: Any, signed: bool = True) -> str:
    if x is None:
        return "   n/a"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _p(p: Any, adjusted: Any = None) -> str:
    """The raw p-value and, for a test of the judge's statement family, its adjusted one."""
    if p is None:
        return ""
    text = "p<1e-4" if p < 1e-4 else f"p={p:.3g}"
    if adjusted is not None:
        text += " (adj <1e-4)" if adjusted < 1e-4 else f" (adj {adjusted:.3g})"
    return text


def format_estimate(est: Mapping[str, Any]) -> str:
    """Value, interval, n (with its clusters and design effect where the units nest) and p-value."""
    ci = f"[{_fmt(est.get('ci_low'))}, {_fmt(est.get('ci_high'))}]" if est.get("ci_low") is not None else ""
    nested = cluster_text(est)
    n = f"n={est.get('n', 0):<7}" if not nested else f"n={est.get('n', 0)} {nested};"
    return f"{_fmt(est.get('value')):>7} {ci:<18} {n} {_p(est.get('p_value'), est.get('p_adjusted'))}"


def _details(key: str, d: Mapping[str, Any]) -> list[str]:
    """The sub-lines of a figure whose details are read beside it (an estimate's details are
    top-level keys of its dict)."""
    if key == "human_ceiling" and d.get("judge"):
        return [f"    {'judge on the same references':<36} {format_estimate({**d['judge'], 'n': d['n']})}",
                f"    {'judge - ceiling':<36} {format_estimate({**d['gap'], 'n': d['n']})}"]
    if key == "position_consistency" and d.get("outcomes"):
        o = d["outcomes"]
        lines = [f"    flips: {d['flips_ab']} A<->B ({o['primacy_flip']} first-shown won both, "
                 f"{o['recency_flip']} second-shown won both), {d['flips_choice_tie']} choice<->tie"]
        pf = d.get("preference_fairness")
        if pf:
            lines.append(f"    {'recency - primacy share':<36} {format_estimate(pf)}")
        if d.get("mean_p_a_shift"):
            lines.append(f"    {'P(A) first minus second':<36} {format_estimate(d['mean_p_a_shift'])}")
        return lines
    return []


def _share(est: Mapping[str, Any]) -> str:
    return f"{_fmt(est['value'], False)} [{_fmt(est['ci_low'], False)}, {_fmt(est['ci_high'], False)}]"


def _length_controlled(lc: Mapping[str, Any]) -> list[str]:
    rates = lc.get("rates") or []
    if not rates:
        return []
    lines = ["", "win rate against the baseline, raw and length-controlled (AlpacaEval 2 GLM: full form with "
                 "instruction difficulty, or length-only)"]
    for r in rates:
        form = "full" if "form" in r else "length-only"
        lines.append(f"  {r['judge'] + ': ' + r['model'] + ' vs ' + r['baseline']:<52} "
                     f"raw {_share(r['raw_win_rate'])}  LC {_share(r)} ({form})  n={r['n']}")
    return lines


def _statement_lines(metrics: Mapping[str, Any], mutual: bool) -> list[str]:
    """The judge's report-card statements (``judgebias.reporting.trust``), decided by its adjusted tests."""
    said, fam = statements(metrics, mutual_gold=mutual)
    if not said:
        return []
    return ["  report card:", *[f"    [{kind}] {text}" for kind, text in said], f"    {family_note(fam)}"]


def format_report(result: Mapping[str, Any], *, show_skipped: bool = True) -> str:
    ds = result.get("dataset") or {}
    lines = [f"{ds.get('rows', 0)} rows, {ds.get('pairs', 0)} pairs, {len(ds.get('judges') or [])} judge(s), "
             f"{ds.get('human_labelled_pairs', 0)} human-labelled pairs"]
    by = (result.get("settings") or {}).get("cluster_by")
    if by and by != "none" and ds.get("clusters"):
        lines.append(f"pairs nest in {unit_name(by, ds['clusters'])}: intervals and tests allow for it "
                     "(--cluster-by)")
    if ds.get("exclusions"):
        lines.append(f"rows excluded by validation: {ds['exclusions']}")
    hv = (result.get("humans") or {}).get("verbosity")
    if hv:
        lines.append(f"humans pick the longer response: {format_estimate(hv)}")
    lines += _length_controlled(result.get("length_controlled") or {})
    mutual = mutual_gold(result)
    for judge, metrics in (result.get("judges") or {}).items():
        lines += ["", f"== {judge} " + "=" * max(0, 70 - len(judge))]
        for key, fig in registry.FIGURES.items():
            est = metrics.get(key)
            if not est:
                continue
            lines.append(f"  {fig.label:<38} {format_estimate(est)}  {fig.how}")
            lines += _details(key, est)
            if "terms" in est:  # the regressions' coefficients, one line each
                for term, t in (est.get("terms") or {}).items():
                    ci = f"[{_fmt(t['ci_low'])}, {_fmt(t['ci_high'])}]"
                    lines.append(f"    {term:<36} {_fmt(t['coef']):>7} {ci}  "
                                 f"{_p(t['p_value'], t.get('p_adjusted'))}")
                if est.get("note"):
                    lines.append(f"    note: {est['note']}")
            for w in est.get("warnings") or []:
                lines.append(f"    warning: {w}")
        lines += _statement_lines(metrics, mutual)
        skipped = metrics.get("skipped") or {}
        if show_skipped and skipped:
            lines.append("  not computed:")
            for key, reason in skipped.items():
                lines.append(f"    {key}: {reason}")
    return "\n".join(lines)
