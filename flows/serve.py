"""Scheduled deployments served by this process (``judgebias serve``).

``build_deployments`` returns the list; ``serve`` hands it to ``prefect.serve``. To add a deployment
(or to run them on a work pool instead, see docs/scaling.md), add a row, not a call in ``serve``.
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


def watch_deployment(watch_path: str, *, name_prefix: str = "judgebias", timezone: str = "UTC"):
    """The deployment of one watched judge (``judgebias.flows.watch``), on the cron its config names;
    the audit table is checked against its pinned SHA-256 now, not at the first scheduled run."""
    from prefect.schedules import Cron

    from judgebias.config.watch import load_watch, pinned_table
    from judgebias.flows.watch import watch_judge

    settings, base = load_watch(watch_path)
    pinned_table(settings, base)
    try:
        cron = Cron(settings.cron, timezone=timezone)
    except ValueError as exc:
        raise ValueError(
            f"{watch_path}: watch.cron {settings.cron!r} is not a valid cron schedule ({exc})"
        ) from None
    return watch_judge.to_deployment(
        name=f"{name_prefix}-watch-{settings.name}", schedules=[cron],
        parameters={"config_path": watch_path}, tags=["judgebias", "watch"],
        description=f"Judge the audit set of watch {settings.name!r} and compare with its reference "
                    "(alpha spent over the declared looks); Failed/JudgeChanged when a figure changed.")


def build_deployments(
    config_path: str | None, schedule: Schedule = Schedule(), *, name_prefix: str = "judgebias",
    watches: tuple[str, ...] = ()
) -> list:
    """The runner deployments of one experiment config and of each watch config (not yet
    registered); ``config_path`` None: only the watches."""
    watched = [watch_deployment(w, name_prefix=name_prefix, timezone=schedule.timezone) for w in watches]
    if config_path is None:
        return watched
    from prefect.schedules import Cron

    from judgebias.flows.experiment import experiment
    from judgebias.flows.sync import sync_annotations

    crons = {}
    for label, cron in (("sync_cron", schedule.sync_cron), ("experiment_cron", schedule.experiment_cron)):
        try:
            crons[label] = Cron(cron, timezone=schedule.timezone)
        except ValueError as exc:
            raise ValueError(f"{label}: {cron!r} is not a valid cron schedule ({exc})") from None
    # (flow, name, schedule, topic tag, what it does): one row per deployment.
    rows = [
        (sync_annotations, "nightly-sync", "sync_cron", "annotation",
         "Pull new human labels from Label Studio, send the next batch, recompute metrics."),
        (experiment, "weekly-experiment", "experiment_cron", "experiment",
         "The full experiment: generate, judge, measure, ablations, MLflow."),
    ]
    return [flow.to_deployment(name=f"{name_prefix}-{name}", schedules=[crons[cron]],
                               parameters={"config_path": config_path}, tags=["judgebias", tag],
                               description=description)
            for flow, name, cron, tag, description in rows] + watched


def serve(config_path: str | None, schedule: Schedule = Schedule(), *, limit: int | None = None,
          watches: tuple[str, ...] = ()) -> None:
    """Register the deployments with the Prefect API and run their scheduled flow runs (blocks)."""
    from prefect import serve as prefect_serve

    prefect_serve(*build_deployments(config_path, schedule, watches=watches), limit=limit)
