"""The demo's report cards of the bundled real judgments (PandaLM, LLMBar), as a flow of its own
beside the experiment's, so its stage and MLflow runs show in Prefect like the rest. ``judgebias
demo`` calls it after the experiment and prints what it returns."""

from __future__ import annotations

from prefect import flow

from judgebias.tasks import imported as t
from judgebias.tracking.settings import TrackingSettings


@flow(name="imported_report_cards", log_prints=True)
def imported_report_cards(run_folder: str, settings: TrackingSettings) -> dict:
    """Write each bundled table's report card into ``run_folder`` (only when the bundled file
    changed) and log one MLflow run per table (only once per file). Returns ``reports`` ((entry,
    analyze result) per table) and ``runs`` (table name -> MLflow run id)."""
    from judgebias.runs.store import RunStore

    store = RunStore(run_folder)
    reports = t.imported_reports(store)
    return {"reports": reports, "runs": t.log_imported(store, reports, settings)}
