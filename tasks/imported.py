"""Prefect tasks of the demo's imported-data report cards (``judgebias.flows.imported``): the stage
that writes them into the run folder and their MLflow runs."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgebias.stages.imported import imported_reports as _imported_reports
from judgebias.tasks.experiment import stage_task

imported_reports = stage_task(_imported_reports)


# Caching and retries as the experiment's tasks (judgebias.tasks.experiment): none; a rerun finds the runs by
# the bundled file's digest.
@task(name="log_imported", cache_policy=NO_CACHE, retries=0)
def log_imported(store, reports, settings) -> dict[str, str]:
    from judgebias.tracking.imported import log_imported as log

    return log(store, reports, settings)
