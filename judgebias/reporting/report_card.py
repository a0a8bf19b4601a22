"""One readable page per run: a judge's report card as self-contained HTML and as markdown.

Built from an ``analyze`` result only (never recomputed, never text from a model): the headline
figures with interval, sample size and what each means with its source (both declared in the
figure registry, ``judgebias.metrics.registry``), the length-controlled win
rates, the plots, the exclusions, and a short "what this judge can be trusted for" derived from the
figures by the rules in ``judgebias.reporting.trust`` (each statement names the figure it rests on; whether it
claims a finding is decided by its test, adjusted for the judge's family of tests, and the page
says in one sentence what that adjustment promises). Beyond one judge's figures: the judges side by
side, each judge's style regression with its coefficients, and what an experiment's run folder adds
(``judgebias.reporting.run_page``: notes, links, ablations, probe plots).

Each part of the page is built once as plain rows (``build_page``) and formatted twice, HTML (escaped)
and markdown (made safe): every name in them comes from data. One concept, the page, past 400 lines:
its sections were a module of their own that this one called into and back out of for every section
of both formats, so building and formatting are read here in one place.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgebias.display import markdown_safe
from judgebias.metrics import registry
from judgebias.parts import probes as declared_probes
from judgebias.reporting.cluster_text import n_text, unit_name
from judgebias.reporting.plot_captions import caption
from judgebias.reporting.run_page import RunExtras
from judgebias.reporting.trust import (
    STYLE_TERMS,
    Family,
    family_sentence,
    fmt,
    fmt_ci,
    fmt_p,
    mutual_gold,
    statements,
)
from judgebias.runs.store import atomic_write_text


def _rows_for(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    """The judge's figures in the registry's order, each with what it means and its source."""
    rows = []
    for key, fig in registry.FIGURES.items():
        est = metrics.get(key)
        if not est:
            continue
        rows.append(
            {
                "figure": fig.label.strip(" ."),
                "value": fmt(est.get("value"), fig.signed),
                "ci": fmt_ci(est, fig.signed),
                "n": n_text(est),
                "meaning": fig.meaning,
                "source": fig.source,
            }
        )
    return rows


def _probe_rows(probes: Mapping[str, Any], judge: str) -> list[dict[str, str]]:
    """The pairwise probes' figures of one judge (``result["probes"]``, written by the probe stages),
    as each probe declares them (``judgebias.parts``)."""
    return [{"figure": label, "value": fmt(est["value"], fig.signed, fig.pct),
             "ci": fmt_ci(est, fig.signed, fig.pct), "n": n_text(est), "meaning": meaning, "source": source}
            for part in declared_probes("pairwise")
            for _, fig, label, meaning, source, est in part.judge_figures(probes.get(part.name), judge)]


def _lc_rows(result: Mapping[str, Any], judge: str) -> list[dict[str, str]]:
    return [
        {
            "model": r["model"],
            "baseline": r["baseline"],
            "raw": f"{fmt(r['raw_win_rate']['value'])} {fmt_ci(r['raw_win_rate'], False)}",
            "lc": f"{fmt(r['value'])} {fmt_ci(r, False)}",
            "n": str(r["n"]),
        }
        for r in (result.get("length_controlled") or {}).get("rates") or []
        if r["judge"] == judge
    ]


@dataclass(frozen=True)
class JudgeSection:
    judge: str
    trust: list[tuple[str, str]]
    rows: list[dict[str, str]]
    lc: list[dict[str, str]]
    skipped: Mapping[str, str]
    family: str = ""  # what "adjusted for N tests" means, one sentence
    tests: str = ""  # the family's members with raw and adjusted p-values
    regression_intro: str = ""  # the style regression: what its coefficients are (report_sections)
    regression: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Page:
    """What the page says, built once from a result; the HTML and the markdown only format it."""

    title: str
    provenance: list[str]
    sections: list[JudgeSection]
    # The judges side by side (report_sections.side_by_side) and what a run folder adds (run_page).
    compare: tuple[list[str], list[tuple[str, list[str]]]] = ([], [])
    extras: RunExtras | None = None


def _tests_line(fam: Family) -> str:
    if not fam.size:
        return ""
    return f"The {fam.size} tests (raw p -> adjusted p): " + "; ".join(
        f"{t.key} {fmt_p(t.p_value)} -> {fmt_p(a)}"
        for t, a in zip(fam.tests, fam.adjusted, strict=True)) + "."


def build_page(result: Mapping[str, Any], *, title: str, provenance: Sequence[str] = (),
               multiplicity: str | None = None, extras: RunExtras | None = None,
               margins: Mapping[str, float] | None = None) -> Page:
    """``multiplicity`` ("holm" / "bh") overrides the method the analysis recorded for the judges'
    families of tests (Holm when none is recorded); ``margins``: margin values overriding those the
    analysis recorded (``--margin``; each judge's ``multiplicity.margins``); ``extras``: what an
    experiment's run folder adds (``judgebias.reporting.run_page.run_extras``). A pointwise result
    (``table_kind`` "pointwise") gets one pointwise section per judge, as an experiment's pointwise
    judges do."""
    if result.get("table_kind") == "pointwise":
        recorded = {k: v["value"] for k, v in ((result.get("settings") or {}).get("margins") or {}).items()
                    if isinstance(v, Mapping)}
        return Page(title, [*provenance, _pointwise_dataset_line(result.get("settings") or {})],
                    _pointwise_sections({"pointwise": result}, multiplicity, {**recorded, **(margins or {})}),
                    extras=extras)
    mutual, probes = mutual_gold(result), result.get("probes") or {}
    sections = []
    for judge, m in (result.get("judges") or {}).items():
        said, fam = statements(m, probes, judge, mutual_gold=mutual, method=multiplicity, margins=margins)
        sections.append(JudgeSection(judge, said, _rows_for(m) + _probe_rows(probes, judge),
                                     _lc_rows(result, judge), m.get("skipped") or {},
                                     family_sentence(fam), _tests_line(fam),
                                     regression_intro(m), regression_rows(m)))
    sections += _pointwise_sections(probes, multiplicity, margins)
    by = (result.get("settings") or {}).get("cluster_by")
    return Page(title, [*provenance, _dataset_line(result.get("dataset") or {}, by)], sections,
                side_by_side(result), extras)


def _pointwise_sections(probes: Mapping[str, Any], multiplicity: str | None,
                        margins: Mapping[str, float] | None = None) -> list[JudgeSection]:
    """One section per pointwise judge of an experiment (``probes["pointwise"]``: its figures;
    ``probes["pointwise_probes"]``: its probes), its statements decided by its own family of tests."""
    from judgebias.reporting.trust_pointwise import pointwise_rows, pointwise_statements

    figures = (probes.get("pointwise") or {}).get("judges") or {}
    pprobes = probes.get("pointwise_probes") or {}
    out = []
    for judge in dict.fromkeys([*figures, *(pprobes.get("judges") or {})]):
        figs = figures.get(judge) or {}
        said, fam = pointwise_statements(figs, pprobes, judge, multiplicity, margins)
        out.append(JudgeSection(f"{judge} (pointwise)", said, pointwise_rows(figs, pprobes, judge), [],
                                figs.get("skipped") or {}, family_sentence(fam), _tests_line(fam)))
    return out


def _pointwise_dataset_line(settings: Mapping[str, Any]) -> str:
    text = (f"pointwise table: {settings.get('rows', 0)} rows, {settings.get('items', 0)} items, "
            f"{len(settings.get('judges') or [])} judge(s)")
    if settings.get("clusters") is not None:
        text += f"; {settings['clusters']} clusters by {settings.get('cluster_by')}"
    if settings.get("criteria"):
        text += f"; criteria {', '.join(settings['criteria'])} (pooled here; per criterion in the JSON)"
    return text


def _dataset_line(ds: Mapping[str, Any], cluster_by: str | None = None) -> str:
    text = (
        f"{ds.get('rows', 0)} rows, {ds.get('pairs', 0)} pairs, {len(ds.get('judges') or [])} judge(s), "
        f"{ds.get('human_labelled_pairs', 0)} pairs with human labels"
    )
    if cluster_by and cluster_by != "none" and ds.get("clusters"):
        text += (f"; pairs nest in {unit_name(cluster_by, ds['clusters'])}: each figure's interval and "
                 "test allow for it (its n says in how many, and its design effect: the variance against "
                 "independent pairs)")
    if ds.get("fold_rules"):
        text += "; verdicts folded from both orders by " + ", ".join(
            f"{k} ({v} rows)" for k, v in ds["fold_rules"].items()
        )
    if ds.get("exclusions"):
        text += "; excluded by validation: " + ", ".join(f"{k} {v}" for k, v in ds["exclusions"].items())
    return text


# Inconclusive has its own neutral mark and colour, never the ok's green: not shown is not absent.
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


_MARK = {"ok": "✅", "caution": "⚠️", "info": "ℹ️", "inconclusive": "❔"}


# render_markdown and render_html build the same page (``page``: build_page's keywords: title,
# provenance, multiplicity, extras) and differ in what the plots are and how the page is written.
def render_markdown(result: Mapping[str, Any], *, plots: Mapping[str, str] | None = None, **page: Any) -> str:
    """The report as markdown; ``plots`` maps a plot name to its (relative) PNG path."""
    return _markdown(build_page(result, **page), plots or {})


def _markdown(page: Page, plots: Mapping[str, str], tail: str = "") -> str:
    lines = [f"# {markdown_safe(page.title)}", "", *[f"- {markdown_safe(p)}" for p in page.provenance], ""]
    lines += head_markdown(page.extras) + side_by_side_markdown(*page.compare)
    for sec in page.sections:
        lines += [f"## {markdown_safe(sec.judge)}", "", "**What this judge can be trusted for**", ""]
        lines += [f"- {_MARK[k]} {markdown_safe(t)}" for k, t in sec.trust] or ["- (no figure to judge by)"]
        lines += [x for line in (sec.family, sec.tests) if line for x in ("", f"*{line}*")]
        lines += ["", "| figure | value | 95% CI | n | meaning | source |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {r['figure']} | {r['value']} | {r['ci']} | {r['n']} | {r['meaning']} | {r['source']} |"
            for r in sec.rows
        ]
        lines += regression_markdown(sec.regression_intro, sec.regression)
        if sec.lc:
            lines += [
                "",
                "| model | baseline | raw win rate | length-controlled | n |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {markdown_safe(r['model'])} | {markdown_safe(r['baseline'])} | {r['raw']} | {r['lc']} "
                f"| {r['n']} |" for r in sec.lc
            ]
        if sec.skipped:
            # A reason may quote a judge or generator name: inert text, as every name on the page.
            lines += ["", "Not computed: " + "; ".join(f"`{k}` ({markdown_safe(v)})"
                                                       for k, v in sec.skipped.items())]
        lines.append("")
    lines += tail_markdown(page.extras)
    judges = [sec.judge for sec in page.sections]
    for name, path in plots.items():
        text = markdown_safe(caption(name, judges))
        lines += [f"![{text}](<{path}>)", "", f"*{text}*", ""]
    if tail:  # the leaderboard section (judgebias.reporting.report_card_leaderboard): the page ends with it
        lines += [tail, ""]
    return "\n".join(lines)


_CSS = """body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;width:100%}th,td{border:1px solid #ccc;padding:.3em .5em;
text-align:left;vertical-align:top}td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f3f3f3}ul.trust{list-style:none;padding:0}ul.trust li{padding:.35em .6em;margin:.25em 0;
border-left:5px solid #999;background:#fafafa}li.ok{border-color:#2a8a2a!important}
li.caution{border-color:#d08000!important}li.info{border-color:#3a6fb0!important}
li.inconclusive{border-color:#8a8a8a!important;border-left-style:dashed!important;background:#f4f4f4}
.prov{color:#555}.skipped,.family{color:#666;font-size:.9em}
.caveat{border-left:5px solid #d08000;background:#fff8ec;padding:.5em .8em}
figcaption{color:#444;font-size:.9em}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}"""


def render_html(result: Mapping[str, Any], *, plots: Mapping[str, bytes] | None = None, **page: Any) -> str:
    """The report as one self-contained HTML page (plots inlined as PNG data URIs); ``page``: as in
    ``render_markdown``."""
    return _html(build_page(result, **page), plots or {})


def _html(page: Page, plots: Mapping[str, bytes], tail: str = "") -> str:
    e = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(page.title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
        "<ul class='prov'>",
    ]
    parts += [f"<li>{e(p)}</li>" for p in page.provenance] + ["</ul>"]
    parts += head_html(page.extras) + side_by_side_html(*page.compare)
    for sec in page.sections:
        parts += [
            f"<h2 id='judge-{e(sec.judge)}'>{e(sec.judge)}</h2>",
            "<h3>What this judge can be trusted for</h3>",
            "<ul class='trust'>",
        ]
        parts += [f"<li class='{k}'><b>{e(k)}</b> {e(t)}</li>" if k == "inconclusive" else
                  f"<li class='{k}'>{e(t)}</li>" for k, t in sec.trust]
        parts.append("</ul>")
        parts += [f"<p class='family'>{e(line)}</p>" for line in (sec.family, sec.tests) if line]
        parts += [
            "<table class='figures'><tr><th>figure</th><th>value</th><th>95% CI</th><th>n</th>"
            "<th>meaning</th><th>source</th></tr>",
        ]
        parts += [
            f"<tr><td>{e(r['figure'])}</td><td class='num'>{r['value']}</td><td class='num'>{r['ci']}</td>"
            # n with its clusters ("915 in 163 prompts, deff 2.16") may wrap; a bare n does not
            f"<td class='{'num' if r['n'].isdigit() else 'n'}'>{e(r['n'])}</td><td>{e(r['meaning'])}</td>"
            f"<td>{e(r['source'])}</td></tr>"
            for r in sec.rows
        ] + ["</table>"]
        parts += regression_html(sec.regression_intro, sec.regression)
        if sec.lc:
            parts += [
                "<table class='lc'><tr><th>model</th><th>baseline</th><th>raw win rate</th>"
                "<th>length-controlled win rate</th><th>n</th></tr>"
            ]
            parts += [
                f"<tr><td>{e(r['model'])}</td><td>{e(r['baseline'])}</td><td class='num'>{r['raw']}</td>"
                f"<td class='num'>{r['lc']}</td><td class='num'>{r['n']}</td></tr>"
                for r in sec.lc
            ]
            parts.append("</table>")
        if sec.skipped:
            parts.append(
                "<p class='skipped'>Not computed: "
                + "; ".join(f"<code>{e(k)}</code> ({e(v)})" for k, v in sec.skipped.items())
                + "</p>"
            )
    parts += tail_html(page.extras)
    if plots:
        parts.append("<h2>Plots</h2>")
        judges = [sec.judge for sec in page.sections]
        for name, png in plots.items():
            data, text = base64.b64encode(png).decode("ascii"), e(caption(name, judges))
            parts.append(
                f"<figure><img alt='{text}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{text}</figcaption></figure>"
            )
    if tail:  # the leaderboard section (judgebias.reporting.report_card_leaderboard): the page ends with it
        parts.append(tail)
    parts.append("</body></html>")
    return "\n".join(parts)


def analyze_outputs(metrics_json: str | Path) -> tuple[Path, Path]:
    """(plots folder, report page) that ``analyze`` writes beside its metrics JSON."""
    path = Path(metrics_json)
    return path.with_name(f"{path.stem}_plots"), path.with_name(f"{path.stem}_report.html")


def write_report(
    html_path: str | Path,
    result: Mapping[str, Any],
    *,
    title: str,
    provenance: Sequence[str] = (),
    plot_dir: str | Path | None = None,
    multiplicity: str | None = None,
    extras: RunExtras | None = None,
    margins: Mapping[str, float] | None = None,
    leaderboard: Mapping[str, Any] | None = None,
    leaderboard_plots: str | Path | None = None,
) -> tuple[Path, Path]:
    """Write ``html_path`` and the markdown beside it (``.md``) from ``result`` and the PNGs in
    ``plot_dir`` (inlined in the HTML, linked relatively from the markdown); returns both paths.
    ``multiplicity`` and ``extras``: as in ``build_page``. ``leaderboard``: a ``judgebias
    leaderboard`` result the page ends with, with the PNGs of ``leaderboard_plots``."""
    html_path = Path(html_path)
    md_path = html_path.with_suffix(".md")
    pngs = sorted(Path(plot_dir).glob("*.png")) if plot_dir and Path(plot_dir).is_dir() else []
    page = build_page(result, title=title, provenance=provenance, multiplicity=multiplicity, extras=extras,
                      margins=margins)
    tails = _leaderboard_tails(leaderboard, leaderboard_plots, md_path.parent)
    atomic_write_text(html_path, _html(page, {p.stem: p.read_bytes() for p in pngs}, tails[0]))
    atomic_write_text(md_path, _markdown(page, {p.stem: os.path.relpath(p, md_path.parent) for p in pngs},
                                         tails[1]))
    return html_path, md_path


def _leaderboard_tails(result: Mapping[str, Any] | None, plot_dir: str | Path | None,
                       md_dir: Path) -> tuple[str, str]:
    """(HTML, markdown) of the leaderboard section, or empty strings without a leaderboard."""
    if not result:
        return "", ""
    from judgebias.reporting.report_card_leaderboard import leaderboard_html, leaderboard_markdown

    pngs = sorted(Path(plot_dir).glob("*.png")) if plot_dir and Path(plot_dir).is_dir() else []
    return (leaderboard_html(result, {p.stem: p.read_bytes() for p in pngs}),
            leaderboard_markdown(result, {p.stem: os.path.relpath(p, md_dir) for p in pngs}))
