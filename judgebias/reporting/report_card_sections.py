"""Sections of the report page beyond one judge's figures (``judgebias.reporting.report_card`` places them):
the judges side by side, each judge's style regression with its coefficients, and what an
experiment's run folder adds (``judgebias.reporting.run_page``: notes, links, ablations, probe plots).

Each section is built once as plain rows and formatted twice, HTML (escaped) and markdown (made
safe): every name in them comes from data.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from typing import Any

from judgebias.display import markdown_safe
from judgebias.metrics import registry
from judgebias.reporting.run_page import RunExtras
from judgebias.reporting.trust import STYLE_TERMS, fmt, fmt_ci, fmt_p

# --- the judges side by side ----------------------------------------------------------------------


def side_by_side(result: Mapping[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(judges, [(figure label, one "value [low, high] n=N" cell per judge)]) for every registered
    figure that some judge has, in the registry's order; "" where a judge lacks it."""
    judges = list((result.get("judges") or {}).keys())
    rows, parent = [], ""
    for key, fig in registry.FIGURES.items():
        name = fig.label.strip(" .")
        if fig.label.startswith(" "):  # a sub-row ("  ... minus humans") reads with its parent's name
            name = f"{parent}: {name}"
        else:
            parent = name
        name += f" ({fig.how})" if fig.how else ""
        cells = []
        for judge in judges:
            est = (result["judges"][judge] or {}).get(key) or {}
            if est.get("value") is None:
                cells.append("")
                continue
            ci = fmt_ci(est, fig.signed)
            # n alone: each judge's own table below gives its clusters and design effect
            cells.append(f"{fmt(est['value'], fig.signed)}{' ' + ci if ci else ''} n={est.get('n', '?')}")
        if any(cells):
            rows.append((name, cells))
    return judges, rows


def side_by_side_html(judges: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    if len(judges) < 2 or not rows:
        return []
    e = html.escape
    out = ["<h2 id='side-by-side'>The judges side by side</h2>",
           "<p class='family'>Each figure with its 95% interval and n; what each means and its source are "
           "in the judge's own table below.</p>",
           "<table class='side-by-side'><tr><th>figure</th>" + "".join(f"<th>{e(j)}</th>" for j in judges)
           + "</tr>"]
    out += [f"<tr><td>{e(name)}</td>" + "".join(f"<td class='num'>{e(c)}</td>" for c in cells) + "</tr>"
            for name, cells in rows]
    return [*out, "</table>"]


def side_by_side_markdown(judges: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    if len(judges) < 2 or not rows:
        return []
    out = ["## The judges side by side", "",
           "| figure | " + " | ".join(markdown_safe(j) for j in judges) + " |",
           "|---|" + "---|" * len(judges)]
    out += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    return [*out, ""]


# --- the style regression's coefficients -----------------------------------------------------------

_TERMS = {**STYLE_TERMS, "log_ppl_diff": "higher perplexity (log ppl A - B)",
          "intercept": "intercept (pull towards A at an even human split)",
          "human_a": "the humans' choice (quality control)"}


def regression_rows(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    """The choice regression's terms: log-odds of picking A per unit (per SD where standardized),
    the judge's beside the humans' on the same pairs, each with its 95% interval and p."""
    reg = metrics.get("regression") or {}
    human = (metrics.get("regression_human") or {}).get("terms") or {}
    rows = []
    for term, t in (reg.get("terms") or {}).items():
        h = human.get(term)
        rows.append({
            "term": _TERMS.get(term, term.replace("_", " ")),
            "judge": f"{fmt(t.get('coef'), True)} {fmt_ci(t, True)}",
            "p": fmt_p(t["p_value"]) if t.get("p_value") is not None else "",
            "human": f"{fmt(h.get('coef'), True)} {fmt_ci(h, True)}" if h else "",
        })
    return rows


def regression_intro(metrics: Mapping[str, Any]) -> str:
    reg = metrics.get("regression") or {}
    r2 = f"McFadden R2 {fmt(reg['value'])}, " if reg.get("value") is not None else ""
    note = f" Note: {reg['note']}." if reg.get("note") else ""
    return (f"Style regression (choice regressed on origin, length, markdown and perplexity differences; "
            f"{r2}n={reg.get('n', '?')}): log-odds of picking A per unit of each term (per standard "
            f"deviation where standardized), 95% Wald intervals; > 0: the judge favours the side with more "
            f"of it.{note}")


def regression_html(intro: str, rows: list[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    e = html.escape
    out = [f"<p class='family'>{e(intro)}</p>",
           "<table class='regression'><tr><th>term</th><th>judge: coefficient [95% CI]</th><th>p</th>"
           "<th>humans, same pairs</th></tr>"]
    out += [f"<tr><td>{e(r['term'])}</td><td class='num'>{e(r['judge'])}</td><td class='num'>{e(r['p'])}</td>"
            f"<td class='num'>{e(r['human'])}</td></tr>" for r in rows]
    return [*out, "</table>"]


def regression_markdown(intro: str, rows: list[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    out = ["", f"*{intro}*", "", "| term | judge: coefficient [95% CI] | p | humans, same pairs |",
           "|---|---|---|---|"]
    return out + [f"| {r['term']} | {r['judge']} | {r['p']} | {r['human']} |" for r in rows]


# --- what the run folder adds ----------------------------------------------------------------------


def _figure_html(png: bytes, text: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f"<figure><img alt='{html.escape(text)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(text)}</figcaption></figure>")


def _td(cell: str) -> str:
    # Figures do not wrap (td.num); a reason why there is none is a sentence and must.
    kind = "" if cell.startswith("n/a") else " class='num'"
    return f"<td{kind}>{html.escape(cell)}</td>"


def head_html(extras: RunExtras | None) -> list[str]:
    """The run's notes (the weak-judge caveat) and its links, under the title."""
    if extras is None:
        return []
    e = html.escape
    out = [f"<p class='caveat'>{e(n)}</p>" for n in extras.notes]
    if extras.links:
        out += ["<h2 id='links'>Links</h2>", "<ul class='links'>"]
        for link in extras.links:
            text = f"<a href='{e(link.href)}'>{e(link.text)}</a>" if link.href else e(link.text)
            out.append(f"<li>{text}{' - ' + e(link.note) if link.note else ''}</li>")
        out.append("</ul>")
    return out


def tail_html(extras: RunExtras | None) -> list[str]:
    """The ablations (DBG before and after, plot, caption) and the probes' plots."""
    if extras is None:
        return []
    e = html.escape
    out = []
    for ab in extras.ablations:
        out += [f"<h2>{e(ab.title.capitalize())}: DBG before and after</h2>",
                "<table class='ablation'><tr><th>judge</th>"
                + "".join(f"<th>{e(c)}</th>" for c in ab.conditions) + "</tr>"]
        out += [f"<tr><td>{e(j)}</td>" + "".join(_td(c) for c in cells) + "</tr>" for j, cells in ab.rows]
        out.append("</table>")
        if ab.plot:
            out.append(_figure_html(ab.plot, ab.caption))
    if extras.plots:
        out.append("<h2>Probes and pointwise scores</h2>")
        out += [_figure_html(png, text) for text, png in extras.plots]
    return out


def head_markdown(extras: RunExtras | None) -> list[str]:
    if extras is None:
        return []
    out = [f"> {markdown_safe(n)}" for n in extras.notes]
    if extras.links:
        out += ["", "## Links", ""]
        for link in extras.links:
            text = f"[{markdown_safe(link.text)}](<{link.href}>)" if link.href else markdown_safe(link.text)
            out.append(f"- {text}{' - ' + markdown_safe(link.note) if link.note else ''}")
    return [*out, ""] if out else []


def tail_markdown(extras: RunExtras | None) -> list[str]:
    """The ablations' tables (their plots live in the ablation's folder, linked from its page)."""
    if extras is None:
        return []
    out = []
    for ab in extras.ablations:
        out += [f"## {markdown_safe(ab.title.capitalize())}: DBG before and after", "",
                "| judge | " + " | ".join(markdown_safe(c) for c in ab.conditions) + " |",
                "|---|" + "---|" * len(ab.conditions)]
        out += [f"| {markdown_safe(j)} | " + " | ".join(markdown_safe(c) for c in cells) + " |"
                for j, cells in ab.rows]
        out += ["", f"*{markdown_safe(ab.caption)}*", ""]
    return out
