"""Scheduled deployments served by this process (``judgebias serve``).

``build_deployments`` returns the list; ``serve`` hands it to ``prefect.serve``. To add a deployment
(or to run them on a work pool instead, see docs/scaling.md), extend the list, not ``serve``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Defaults: annotation sync and metric recompute every night, the full experiment once a week.
NIGHTLY_SYNC_CRON = "0 2 * * *"
WEEKLY_EXPERIMENT_CRON = "0 3 * * 0"


@dataclass(frozen=True)
class Schedule:
    sync_cron: str = NIGHTLY_SYNC_CRON
    experiment_cron: str = WEEKLY_EXPERIMENT_CRON
    timezone: str = "UTC"


def build_deployments(
    config_path: str, schedule: Schedule = Schedule(), *, name_prefix: str = "judgebias"
) -> list:
    """The runner deployments of one experiment config (not yet registered)."""
    from judgebias.flows.experiment import experiment
    from judgebias.flows.sync import sync_annotations
    from prefect.schedules import Cron

    crons = {}
    for label, cron in (("sync_cron", schedule.sync_cron), ("experiment_cron", schedule.experiment_cron)):
        try:
            crons[label] = Cron(cron, timezone=schedule.timezone)
        except ValueError as exc:
            raise ValueError(f"{label}: {cron!r} is not a valid cron schedule ({exc})") from None
    params = {"config_path": config_path}
    return [
        sync_annotations.to_deployment(
            name=f"{name_prefix}-nightly-sync",
            schedules=[crons["sync_cron"]],
            parameters=params,
            tags=["judgebias", "annotation"],
            description="Pull new human labels from Label Studio, send the next batch, recompute metrics.",
        ),
        experiment.to_deployment(
            name=f"{name_prefix}-weekly-experiment",
            schedules=[crons["experiment_cron"]],
            parameters=params,
            tags=["judgebias", "experiment"],
            description="The full experiment: generate, judge, measure, ablations, MLflow.",
        ),
    ]


def serve(config_path: str, schedule: Schedule = Schedule(), *, limit: int | None = None) -> None:
    """Register the deployments with the Prefect API and run their scheduled flow runs (blocks)."""
    from prefect import serve as prefect_serve

    prefect_serve(*build_deployments(config_path, schedule), limit=limit)
