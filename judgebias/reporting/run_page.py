"""What an experiment's page shows beyond its own ``analyze`` result, read from the run folder only
(so ``judgebias report RUN_FOLDER`` shows the same without the config): links to the MLflow run,
the imported data's pages and the ablations' pages, the ablations' DBG before and after with their
plot, the probes' plot, and the notes the run wrote for its page (the weak-judge caveat).

Every name here comes from the run folder (folder names, condition names, judge names): the page
escapes it; a link is relative to the page, or an http(s) address for MLflow's UI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgebias.parts import ablations, declared, probes
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore

# Written by the stage that knows the config (judgebias.stages.results): notes that depend on it.
PAGE_NOTES = "page_notes.json"


@dataclass(frozen=True)
class Link:
    text: str
    href: str
    note: str = ""


@dataclass(frozen=True)
class Ablation:
    """One ablation: DBG per judge and condition (formatted), its plot and caption, its pages."""

    title: str
    conditions: list[str]
    rows: list[tuple[str, list[str]]]  # (judge, one cell per condition)
    plot: bytes | None = None
    caption: str = ""
    pages: list[Link] = field(default_factory=list)


@dataclass(frozen=True)
class RunExtras:
    notes: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    ablations: list[Ablation] = field(default_factory=list)
    plots: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG)


def _cell(e: Mapping[str, Any] | None) -> str:
    from judgebias.reporting.cluster_text import n_text
    from judgebias.reporting.trust import fmt, fmt_ci

    if not e or e.get("value") is None:
        reason = (e or {}).get("skipped")
        return f"n/a ({reason})" if reason else "n/a"
    return f"{fmt(e['value'], True)} {fmt_ci(e, True)} n={n_text(e) or '?'}"


def _ordered(row: Mapping[str, Any]) -> list[str]:
    return sorted(row, key=lambda c: (c != "before", c))  # "before" first; JSON keys come sorted


def _ablation(store: RunStore, folder: Path, title: str, page_dir: Path) -> Ablation | None:
    from judgebias.reporting.plot_captions import caption

    rel = folder.relative_to(store.root).as_posix() + "/"
    comp_path = RunLayout(rel).comparison
    if not store.has(comp_path):
        return None
    comp = store.read_json(comp_path)
    judges = comp.get("judges") or {}
    conditions = _ordered(next(iter(judges.values()))) if judges else []
    rows = [(j, [_cell(row.get(c)) for c in conditions]) for j, row in judges.items()]
    png = store.path(RunLayout(rel).plot("dbg_before_after"))
    pages = []
    for page in sorted(folder.glob("*/report.html")) + sorted(folder.glob("report.html")):
        where = page.parent.relative_to(folder).as_posix()
        pages.append(Link(f"{title}: {'page' if where == '.' else where}",
                          Path(_rel(page, page_dir)).as_posix()))
    excluded = comp.get("excluded_from_gold") or []
    note = (f" The rewriter {comp.get('rewriter', '')!r} is left out of the gold panel "
            f"({', '.join(excluded)}), so a judge without another gold judge has no DBG here."
            if excluded else "")
    return Ablation(title, conditions, rows, png.read_bytes() if png.is_file() else None,
                    caption("dbg_before_after") + note, pages)


def _rel(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start)


def run_extras(root: str | Path, page_dir: str | Path | None = None) -> RunExtras:
    """What ``root`` (an experiment's run folder) holds for its page at ``page_dir`` (default: the
    run folder itself): an empty ``RunExtras`` for a folder without any of it."""
    from judgebias.reporting.plot_captions import caption

    store, root = RunStore(root), Path(root)
    page_dir = Path(page_dir) if page_dir is not None else root
    extras = RunExtras()
    if store.has(PAGE_NOTES):
        extras.notes.extend(str(n) for n in store.read_json(PAGE_NOTES) if n)
    if store.has(RunLayout.mlflow_link):
        link = store.read_json(RunLayout.mlflow_link)
        url, run = str(link.get("run_url") or ""), str(link.get("run_id") or "")
        if url.startswith(("http://", "https://")):
            extras.links.append(Link(f"MLflow run {run}", url,
                                     f"tracking URI {link.get('tracking_uri', '')}; the UI must be running"))
        elif run:
            extras.links.append(Link(f"MLflow run {run}", "", f"tracking URI {link.get('tracking_uri', '')}"))
        traces = link.get("traces") or {}
        if traces.get("rows"):
            page = str(traces.get("page") or "")
            extras.links.append(Link(f"{int(traces['rows'])} judgments as MLflow traces",
                                     page if page.startswith(("http://", "https://")) else "",
                                     "the experiment's Traces page; the MLflow UI must be running"))
            for q in traces.get("questions", []):
                url = str(q.get("url") or "")
                extras.links.append(Link(str(q.get("text", "")), url if url.startswith(("http://", "https://"))
                                         else "", f"filter: {q['filter']}" if q.get("filter") else ""))
    for page in sorted(root.glob(f"{declared('imported').prefix}/*/report.html")):
        extras.links.append(Link(f"imported data: {page.parent.name}", Path(_rel(page, page_dir)).as_posix(),
                                 "real judges on real data, bundled with judgebias (not from this run)"))
    # every variant folder by its part's declared prefix (judgebias.parts)
    for part in ablations():
        for folder in sorted(p for p in root.glob(f"{part.prefix}-*") if p.is_dir()):
            ab = _ablation(store, folder, part.words, page_dir)
            if ab:
                extras.ablations.append(ab)
                extras.links.extend(ab.pages)
    for folder in (f for part in probes() for f in sorted(root.glob(f"{part.prefix}-*")) if f.is_dir()):
        for png in sorted((folder / "plots").glob("*.png")):
            extras.plots.append((caption(png.stem), png.read_bytes()))
    for folder in sorted(p for p in root.glob(f"{declared('pointwise').prefix}-*") if p.is_dir()):
        found = RunStore(folder)
        judges = (found.read_json("metrics.json").get("settings") or {}).get("judges") or [] \
            if found.has("metrics.json") else []
        for png in sorted((folder / "plots").glob("*.png")):
            extras.plots.append((caption(png.stem, judges), png.read_bytes()))
    return extras


PAGE_HEADER = "page_header.json"  # the run page's title and provenance, as the flow wrote them


def write_page_header(store: RunStore, title: str, provenance: list[str]) -> None:
    store.write_json(PAGE_HEADER, {"title": title, "provenance": list(provenance)})


def page_header(root: str | Path) -> tuple[str, list[str]] | None:
    """The title and provenance the flow gave the run's page (``write_page_header``), so a page
    written again from the folder alone keeps them; None for a folder without (an analyze run)."""
    store = RunStore(root)
    if not store.has(PAGE_HEADER):
        return None
    header = store.read_json(PAGE_HEADER)
    return str(header.get("title") or ""), [str(p) for p in header.get("provenance") or []]


def back_to_run(root: str | Path, page: str | Path) -> RunExtras:
    """The extras of a page inside a run folder other than the run's own (an ablation's, the
    imported data's): a link back to the run's page."""
    href = Path(_rel(Path(root) / RunLayout().report_html, Path(page).parent)).as_posix()
    return RunExtras(links=[Link("back to the experiment's page", href, "the run this page belongs to")])


def write_page_notes(store: RunStore, notes: list[str]) -> None:
    """The notes the page shows that only the config can decide (``PAGE_NOTES``)."""
    store.write_json(PAGE_NOTES, list(notes))
