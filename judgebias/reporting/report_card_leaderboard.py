"""The report card's leaderboard section (the page ends with it): which rater the rules recommend
and why, each rater's rankings per variant, the agreement with the human ranking, the planner's
label count, the forest plot and the rank-change charts. Built from a ``judgebias leaderboard``
result only; every name from data is escaped (HTML) or made inert (markdown)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from typing import Any

from judgebias.display import file_stem, markdown_safe

TITLE = "Leaderboard of the generators"
FOREST = "leaderboard_forest"
AGREE = ["variant", "rater", "Kendall tau-b", "Spearman rho"]


def _cell(r: Mapping[str, Any]) -> str:
    rank = (f"#{r['rank']}" if r["rank_ci_low"] == r["rank_ci_high"]
            else f"#{r['rank']} ({r['rank_ci_low']}-{r['rank_ci_high']})")
    return f"{r['strength']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] {rank}"


def _fmt(e: Mapping[str, Any] | None) -> str:
    if not e or e.get("value") is None:
        return "n/a"
    return f"{e['value']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]"


def tables(result: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(rater, header, rows) per rater: models (strongest under the first variant first) by variant."""
    raters: dict[str, list[str]] = {}
    for variant, per in (result.get("rankings") or {}).items():
        for rater in per:
            raters.setdefault(rater, []).append(variant)
    out = []
    for rater, variants in raters.items():
        cells = {v: {r["model"]: _cell(r) for r in result["rankings"][v][rater]} for v in variants}
        order = list(dict.fromkeys([*cells[variants[0]], *[m for v in variants for m in cells[v]]]))
        out.append((rater, ["model", *variants],
                    [[m, *[cells[v].get(m, "not ranked") for v in variants]] for m in order]))
    return out


def summary(result: Mapping[str, Any]) -> list[str]:
    """The recommendation and the planner as sentences (figures quoted, no markup)."""
    r = result.get("recommendation") or {}
    if "not_computed" in r or not r:
        return [f"Recommendation not computed: {r.get('not_computed', 'absent')}."]
    best = r.get("recommended")
    lines = [f"Recommended rater: {best}, read its {r['read_variant']} ranking (order of the eligible "
             f"raters: {', '.join(r['order'])})." if best else
             "No judge or panel passes the rules for these candidates: rank them with human labels."]
    plan = r.get("planner") or {}
    if plan.get("labels_needed") is not None:
        g = plan["gap"]
        lines.append(f"Top two of {plan['ranking']}: {g['first']} - {g['second']} = {_fmt(g)}; a 95% "
                     f"half-width of {plan['target_half_width']:.2f} needs {plan['labels_needed']} human "
                     f"label(s) of {plan['population']} comparisons (variance from {plan['variance_from']}).")
    elif plan:
        lines.append(f"Labels for the top-two gap: not computed ({plan.get('not_computed')}).")
    return lines


def check_rows(result: Mapping[str, Any]) -> list[list[str]]:
    r = result.get("recommendation") or {}
    return [[rater, "eligible" if info["eligible"] else "excluded", c["rule"], c["outcome"], c["figure"]]
            for rater, info in (r.get("raters") or {}).items() for c in info["checks"]]


def agreement_rows(result: Mapping[str, Any]) -> list[list[str]]:
    return [[variant, rater, _fmt(a.get("kendall_tau")), _fmt(a.get("spearman"))]
            for variant, per in (result.get("agreement_with_human") or {}).items()
            for rater, a in per.items() if "not_computed" not in a]


def _n_text(ns: list[int]) -> str:
    return f"n = {ns[0]} comparisons" if min(ns) == max(ns) else f"n = {min(ns)} to {max(ns)} comparisons"


def figure_caption(stem: str, result: Mapping[str, Any]) -> str:
    """What the leaderboard figure saved as ``<stem>.png`` shows, in words: the population (the
    generators and the comparisons each fit used), the method, the intervals' bootstrap (resamples,
    clusters); a stem it does not know is described by its words."""
    settings = result.get("settings") or {}
    details = result.get("details") or {}
    rankings = result.get("rankings") or {}
    boot = settings.get("bootstrap") or "a seeded bootstrap"
    n_models = len(result.get("models") or [])
    if stem == FOREST:
        ns = [d["n"] for per in details.values() for d in per.values() if isinstance(d.get("n"), int)]
        size = f", each fit on {_n_text(ns)}" if ns else ""
        return (f"Bradley-Terry strengths (log-odds, mean 0) of the {n_models} generators under each variant "
                f"(one column each), one colour per rater (judges, panel, humans){size}; bars: 95% "
                f"percentile intervals from {boot}.")
    for rater in rankings.get("raw", {}):
        if stem not in (f"leaderboard_ranks_{rater}", file_stem(f"leaderboard_ranks_{rater}")):
            continue
        # The chart's columns: the rater's own variants, then the panel's and the humans' rankings.
        columns = [(v, rater) for v in rankings if rater in rankings[v]]
        columns += [(v, v) for v in ("panel", "human") if v != rater and rankings.get(v, {}).get(v)]
        per = [f"{v} {details[v][who]['n']}" for v, who in columns
               if isinstance(details.get(v, {}).get(who, {}).get("n"), int)]
        size = f" (comparisons per fit: {', '.join(per)})" if per else ""
        return (f"{rater}: the rank (1 = strongest) of each of the {n_models} generators under its raw "
                f"Bradley-Terry ranking and each bias-correcting variant{size}, beside the panel's and the "
                f"humans' where present; bars: 95% rank intervals, the 2.5% and 97.5% quantiles of the "
                f"generator's rank over {boot}.")
    return "Figure: " + stem.replace("_", " ")


def _ordered_plots(plots: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(plots.items(), key=lambda kv: (kv[0] != FOREST, kv[0]))


def leaderboard_html(result: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    """The section as HTML (plots inlined as PNG data URIs, the forest plot first)."""
    e = html.escape

    def table(header: list[str], rows: list[list[str]], cls: str) -> list[str]:
        return ([f"<table class='{cls}'><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>"]
                + ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
                + ["</table>"])

    parts = [f"<h2 id='leaderboard'>{e(TITLE)}</h2>",
             f"<p>{e((result.get('settings') or {}).get('bootstrap', ''))}; strengths are "
             "Bradley-Terry log-odds (mean 0), with 95% intervals and rank intervals.</p>"]
    parts += [f"<p class='recommendation'><strong>{e(line)}</strong></p>" for line in summary(result)]
    if check_rows(result):
        parts += table(["rater", "state", "rule", "outcome", "figure"], check_rows(result), "rules")
        rules = (result.get("recommendation") or {}).get("rules") or {}
        parts.append("<ul class='family'>" + "".join(f"<li>{e(k)}: {e(v)}</li>" for k, v in rules.items())
                     + "</ul>")
    for rater, header, rows in tables(result):
        parts += [f"<h3>{e(rater)}</h3>", *table(header, rows, "leaderboard")]
    if agreement_rows(result):
        parts += ["<h3>Agreement with the human ranking</h3>",
                  *table(AGREE, agreement_rows(result), "agree")]
    for name, png in _ordered_plots(plots):
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><img alt='{e(name)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{e(figure_caption(name, result))}</figcaption></figure>")
    return "\n".join(parts)


def leaderboard_markdown(result: Mapping[str, Any], plots: Mapping[str, str]) -> str:
    """The section as markdown (``plots``: name -> relative PNG path, the forest plot first)."""
    s = markdown_safe

    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        return (["| " + " | ".join(s(h) for h in header) + " |", "|" + "---|" * len(header)]
                + ["| " + " | ".join(s(c) for c in row) + " |" for row in rows] + [""])

    lines = [f"## {TITLE}", "", s((result.get("settings") or {}).get("bootstrap", "")), ""]
    lines += [f"**{s(line)}**" for line in summary(result)] + [""]
    if check_rows(result):
        lines += table(["rater", "state", "rule", "outcome", "figure"], check_rows(result))
        rules = (result.get("recommendation") or {}).get("rules") or {}
        lines += [f"- {s(k)}: {s(v)}" for k, v in rules.items()] + [""]
    for rater, header, rows in tables(result):
        lines += [f"### {s(rater)}", "", *table(header, rows)]
    if agreement_rows(result):
        lines += ["### Agreement with the human ranking", "",
                  *table(AGREE, agreement_rows(result))]
    for name, path in _ordered_plots(plots):
        lines += [f"![{s(name)}](<{path}>)", "", f"*{s(figure_caption(name, result))}*", ""]
    return "\n".join(lines)
