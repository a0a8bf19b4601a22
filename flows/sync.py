"""The nightly annotation flow: Label Studio labels in, next batch out, metrics recomputed."""

from __future__ import annotations

from prefect import flow

from judgebias.tasks import experiment as t


@flow(name="sync_annotations", log_prints=True)
def sync_annotations(
    config_path: str, overrides: dict | None = None, run_dir: str | None = None, push: bool = True
) -> dict:
    """Sync the experiment's judgment table with Label Studio and recompute every metric with the
    human labels merged in (a label-free table gives the same metrics; nothing is faked). A run whose
    pointwise scores were pushed for rating (``judgebias annotate push`` on its pointwise table) gets its
    ratings pulled, the next batch of items pushed and the pointwise population figures refreshed too
    (``sync["ratings"]``)."""
    from judgebias.config.experiment import load_config
    from judgebias.runs.store import RunStore

    cfg = load_config(config_path, overrides)
    store = RunStore(cfg.run_path(run_dir))
    result = t.sync_annotations(cfg, store, push)
    metrics = t.annotated_metrics(cfg, store, result["out"])
    return {"sync": result, "judges": sorted(metrics.get("judges", {}))}
