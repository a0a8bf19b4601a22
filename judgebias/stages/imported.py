"""The report cards of the bundled real judgments (``judgebias.bundled``), written into the run
folder beside the run's own; recomputed only when the bundled file changed."""

from __future__ import annotations

from judgebias.bundled import BUNDLED, BundledTable, analyze_bundled
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, noop, timed


def imported_reports(store: RunStore, *, progress: Progress = noop) -> list[tuple[BundledTable, dict]]:
    """(entry, analyze result) of every bundled table, each with its metrics.json, plots and
    report.html under ``RunLayout.imported(name)``."""
    from judgebias.reporting import plots as plots
    from judgebias.reporting.report_card import write_report
    from judgebias.reporting.run_page import back_to_run

    out = []
    for entry in BUNDLED:
        layout = RunLayout.imported(entry.name)
        digest = entry.digest()
        if store.has(layout.metrics) and store.has(layout.report_html):
            result = store.read_json(layout.metrics)
            if (result.get("source") or {}).get("sha256") == digest:
                out.append((entry, result))
                continue
        with timed(store, layout.stage("imported_report")):
            result = analyze_bundled(entry)
            plots.save_figures(plots.figures_for(result), store.path(layout.plots))
            store.write_json(layout.metrics, result)
            write_report(store.path(layout.report_html), result,
                         title=f"Judge report card: {entry.title} (imported data)",
                         plot_dir=store.path(layout.plots), provenance=entry.provenance(),
                         extras=back_to_run(store.root, store.path(layout.report_html)))
        progress(f"imported data {entry.title}: {len(result['judges'])} judge(s)")
        out.append((entry, result))
    return out
