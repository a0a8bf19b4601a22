"""MLflow runs of the bundled real judgments' report cards (``judgebias.stages.imported``): one run
per dataset, tagged as imported data so nobody mistakes it for the experiment's own figures, and
logged once per bundled file (a rerun of the demo finds it by the file's digest)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from judgebias.bundled import BundledTable
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tracking.log_analysis import COMPARE_JUDGES, log_analysis, log_files
from judgebias.tracking.mlflow_run import mlflow_run
from judgebias.tracking.settings import TrackingSettings

DIGEST_TAG = "judgebias.imported_sha256"


def _log_disagreements(entry: BundledTable) -> str:
    """Log, into the active run, a sample of the bundled table's judgments where the judge disagrees
    with the humans' majority (too many rows for a trace each): the question a user asks of human
    labels gets traces to open. Returns the run description's paragraph naming the sample ("" where
    no judgment disagrees or the table has no human labels)."""
    import mlflow

    from judgebias.tables.files import read_table
    from judgebias.tracking.judgment_traces import (
        LAYOUT,
        disagreement_records,
        disagreements_note,
        log_records,
    )

    table, _ = read_table(entry.path())
    sample, total = disagreement_records(table)
    if not sample:
        return ""
    counts = log_records(sample, LAYOUT)
    run = mlflow.active_run()
    mlflow.set_tags({"judgebias.traces": str(counts["rows"]),
                     "judgebias.traces.sample": "judge_human_disagree"})
    return disagreements_note(counts["rows"], total, len(table), run.info.experiment_id)


def log_imported(store: RunStore, reports: Iterable[tuple[BundledTable, dict]],
                 settings: TrackingSettings) -> dict[str, str]:
    """Dataset name -> MLflow run id, logging the runs not logged before."""
    import mlflow

    settings.apply()
    experiment = mlflow.get_experiment_by_name(settings.experiment_name)
    out = {}
    for entry, result in reports:
        digest = result["source"]["sha256"]
        if experiment is not None:
            found = mlflow.search_runs([experiment.experiment_id], output_format="list", max_results=1,
                                       filter_string=f"tags.`{DIGEST_TAG}` = '{digest}'")
            if found:
                out[entry.name] = found[0].info.run_id
                continue
        layout = RunLayout.imported(entry.name)
        tags = {"judgebias.command": "demo", "judgebias.data": "imported", DIGEST_TAG: digest,
                "judgebias.dataset_digest": digest, "judgebias.judges": ",".join(result.get("judges") or {}),
                "mlflow.note.content": "\n".join(entry.provenance())}
        with mlflow_run(f"imported: {entry.title}", settings=settings, tags=tags) as run:
            pages = [store.path(layout.report_html), store.path(layout.report_md)]
            # One nested run per judge with the figures under the same names as an experiment's
            # judge runs (no judge in the name), so MLflow's compare view lines the same judge up
            # across runs; the parent's "<judge>.<figure>" names held NaN for every other run's judge.
            log_analysis(result, table_path=entry.path(), reports=[p for p in pages if p.is_file()],
                         extra_params={"source": entry.source, "licence": entry.licence},
                         judge_runs={"judgebias.data": "imported", "judgebias.dataset_digest": digest,
                                     "judgebias.template_digest": "not recorded (imported judgments)"})
            plots = Path(store.path(layout.plots))
            log_files(sorted(plots.glob("*.png")) if plots.is_dir() else [], "plots")
            note = _log_disagreements(entry)
            mlflow.set_tag("mlflow.note.content", "\n\n".join(
                [tags["mlflow.note.content"], *([note] if note else []), COMPARE_JUDGES]))
        out[entry.name] = run.info.run_id
        experiment = experiment or mlflow.get_experiment_by_name(settings.experiment_name)
    return out
