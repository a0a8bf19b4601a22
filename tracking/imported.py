"""MLflow runs of the bundled real judgments' report cards (``judgebias.stages.imported``): one run
per dataset, tagged as imported data so nobody mistakes it for the experiment's own figures, and
logged once per bundled file (a rerun of the demo finds it by the file's digest)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from judgebias.bundled import BundledTable
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tracking.log_analysis import log_analysis, log_files
from judgebias.tracking.mlflow_run import mlflow_run
from judgebias.tracking.settings import TrackingSettings

DIGEST_TAG = "judgebias.imported_sha256"


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
                "mlflow.note.content": "\n".join(entry.provenance())}
        with mlflow_run(f"imported: {entry.title}", settings=settings, tags=tags) as run:
            pages = [store.path(layout.report_html), store.path(layout.report_md)]
            log_analysis(result, table_path=entry.path(), reports=[p for p in pages if p.is_file()],
                         extra_params={"source": entry.source, "licence": entry.licence})
            plots = Path(store.path(layout.plots))
            log_files(sorted(plots.glob("*.png")) if plots.is_dir() else [], "plots")
        out[entry.name] = run.info.run_id
        experiment = experiment or mlflow.get_experiment_by_name(settings.experiment_name)
    return out
