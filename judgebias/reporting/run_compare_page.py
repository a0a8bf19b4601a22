"""The run comparison as one self-contained HTML page in the report card's style (and a console text).

Built from a ``judgebias.reporting.run_compare.compare`` result only. Run names, judge names and
reasons come from files and MLflow: the page escapes every one of them.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from judgebias.reporting.report_card import _CSS
from judgebias.reporting.trust import fmt_p


def _est(e: Mapping[str, Any], share: bool, signed: bool = False) -> str:
    from judgebias.reporting.run_compare import _num

    if e.get("value") is None:
        return "n/a"
    unit = "%" if share and not signed else ""
    ci = (
        f" [{_num(e['ci_low'], share, signed)}, {_num(e['ci_high'], share, signed)}]"
        if e.get("ci_low") is not None
        else ""
    )
    return f"{_num(e['value'], share, signed)}{unit}{ci}"


def _pairing(p: Mapping[str, Any]) -> str:
    if p.get("paired"):
        return (
            f"Paired: {p['pairs']} pairs judged in both runs (matched by {p['matched_by']}; the before run "
            f"has {p['before_pairs']}, the after run {p['after_pairs']}), {p['clusters']} clusters "
            f"({p['cluster']}) resampled {p['reps']} times."
        )
    return f"Independent: {p.get('why', '')}."


def text_lines(result: Mapping[str, Any]) -> list[str]:
    """What the console prints: one line per comparison, then one per figure (changed ones marked)."""
    lines = []
    for c in result["comparisons"]:
        lines.append(
            f"{c['before']['judge']} ({c['before']['run']}) -> {c['after']['judge']} ({c['after']['run']})"
        )
        lines.append("  " + _pairing(c["pairing"]))
        lines += [f"  {'CHANGED ' if f['changed'] else '        '}{f['statement']}" for f in c["figures"]]
        lines += [f"  not compared: {k} ({v})" for k, v in c["not_compared"].items()]
    lines.append(f"{len(result['changed'])} figure(s) changed; {result['multiplicity']['promise']}")
    return lines


def page_head(title: str, provenance: Sequence[str]) -> list[str]:
    """A page's start in the report card's style, its provenance list left open for more lines."""
    e = html.escape
    return [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
            f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>", "<ul class='prov'>",
            *[f"<li>{e(p)}</li>" for p in provenance]]


def render_html(result: Mapping[str, Any], *, title: str, provenance: Sequence[str] = ()) -> str:
    e = html.escape
    parts = page_head(title, provenance)
    parts += [f"<li>{e(result['multiplicity']['promise'])}</li>", "</ul>"]
    for c in result["comparisons"]:
        head = f"{c['before']['judge']} ({c['before']['run']}) → {c['after']['judge']} ({c['after']['run']})"
        parts += [
            f"<h2>{e(head)}</h2>",
            f"<p class='family'>{e(_pairing(c['pairing']))}</p>",
            "<h3>What changed</h3>",
            "<ul class='trust'>",
        ]
        parts += [
            f"<li class='{'caution' if f['changed'] else 'info'}'>{e(f['statement'])}</li>"
            for f in c["figures"]
        ]
        parts += [
            "</ul>",
            "<table class='figures'><tr><th>figure</th><th>before [95% CI]</th><th>n</th>"
            "<th>after [95% CI]</th><th>n</th><th>difference [95% CI]</th><th>p</th><th>adjusted p</th>"
            "<th>method</th></tr>",
        ]
        for f in c["figures"]:
            d = f["difference"]
            parts.append(
                f"<tr><td>{e(f['label'])}</td><td class='num'>{e(_est(f['before'], f['share']))}</td>"
                f"<td class='num'>{e(str(f['before'].get('n', '')))}</td>"
                f"<td class='num'>{e(_est(f['after'], f['share']))}</td>"
                f"<td class='num'>{e(str(f['after'].get('n', '')))}</td>"
                f"<td class='num'>{e(_est(d, f['share'], signed=True))}{' points' if f['share'] else ''}</td>"
                f"<td class='num'>{fmt_p(d['p_value'])}</td><td class='num'>{fmt_p(f['p_adjusted'])}</td>"
                f"<td>{e(d['method'])}</td></tr>"
            )
        parts.append("</table>")
        extra = {**c["not_compared"], **(c["pairing"].get("independent_figures") or {})}
        if extra:
            parts.append(
                "<p class='skipped'>Not compared or not paired: "
                + "; ".join(f"<code>{e(k)}</code> ({e(v)})" for k, v in extra.items())
                + "</p>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)
