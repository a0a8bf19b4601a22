"""Logging an ``analyze`` result of a pointwise table to MLflow, in the pairwise path's shape
(``judgebias.tracking.log_analysis``): ``<judge>.<figure>`` for the value with ``.ci_low``, ``.ci_high``,
``.n``, ``.p_value``; NaN/None left out; params; the JSON, the table and the plots as artifacts.

Where a JSON key alone would not say what its value is, the MLflow name adds it (each figure's
``mlflow_value`` in ``judgebias.metrics.registry.POINTWISE_FIGURES``):
``<judge>.score_distribution.skew``, ``<judge>.score_verbosity.slope_gap``, ...; the agreement and
self-preference records are already named by their part (``<judge>.score_agreement_human.spearman``,
``<judge>.score_self_preference.eo``). Table sizes as ``dataset.rows`` and ``dataset.items``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judgebias.metrics.registry import pointwise_records
from judgebias.tracking.log_analysis import (
    estimate_metrics,
    finite_fields,
    judge_records,
    log_figures,
    log_files,
    log_metrics_dict,
    log_params_dict,
    name_key,
    sanitize,
)


def flatten_pointwise(result: Mapping[str, Any]) -> dict[str, float]:
    """Every figure of a pointwise ``analyze`` result as flat, sanitized MLflow metric names."""
    out: dict[str, float] = {}
    declared = pointwise_records()  # how each record is logged: its value's name and details, or its parts
    for judge_name, key, rec in judge_records(result):
        judge = name_key(judge_name)
        figures = declared.get(key, ())
        if any(f.part for f in figures):  # a record keyed by its parts, each a full estimate
            for part, est in rec.items():
                if isinstance(est, Mapping):
                    out.update(estimate_metrics(f"{judge}.{key}.{part}", est))
            continue
        fig = figures[0] if figures else None
        out.update(estimate_metrics(f"{judge}.{(fig and fig.mlflow_value) or key}", rec))
        out.update(finite_fields(rec, fig.details if fig else (), f"{judge}.{key}"))
        for field in fig.detail_estimates if fig else ():
            if isinstance(rec.get(field), Mapping):
                out.update(estimate_metrics(f"{judge}.{key}.{field}", rec[field]))
    out.update(finite_fields(result.get("settings"), ("rows", "items"), "dataset"))
    # Per criterion: ``<judge>.criterion.<criterion>.<figure>`` (the pooled figures keep their names).
    for criterion, part in (result.get("by_criterion") or {}).items():
        for name, value in flatten_pointwise({"judges": part.get("judges") or {}}).items():
            judge, _, rest = name.partition(".")
            out[f"{judge}.criterion.{criterion}.{rest}"] = value
    return {sanitize(k): v for k, v in out.items()}


def pointwise_params(result: Mapping[str, Any], source: str | None = None) -> dict[str, Any]:
    settings = result.get("settings") or {}
    gold = settings.get("gold")
    params: dict[str, Any] = {
        "table_kind": "pointwise",
        "judges": ",".join(settings.get("judges") or []),
        "gold": ",".join(gold) if isinstance(gold, list) else str(gold or "all other judges"),
        "self_generators": ";".join(
            f"{j}={','.join(g)}" for j, g in (settings.get("self_generators") or {}).items()
        ) or "-",
        "bootstrap_reps": settings.get("bootstrap_reps"),
        "seed": settings.get("seed"),
    }
    for key, rec in (settings.get("margins") or {}).items():  # the bands "ok" was read against
        params[f"margin.{key}"] = rec.get("value") if isinstance(rec, Mapping) else rec
    if source:
        params["table"] = source
    return params


def log_pointwise_analysis(
    result: Mapping[str, Any],
    *,
    table_path: str | Path | None = None,
    figures: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Log one pointwise ``analyze`` result into the ACTIVE run: params, every metric, the JSON as
    ``metrics.json``, the table file under ``table/`` and the plots under ``plots/``."""
    import mlflow

    if mlflow.active_run() is None:
        raise RuntimeError("log_pointwise_analysis needs an active MLflow run "
                           "(judgebias.tracking.mlflow_run)")
    params = log_params_dict(pointwise_params(result, str(table_path) if table_path else None))
    n = log_metrics_dict(flatten_pointwise(result))
    mlflow.log_dict(dict(result), "metrics.json")
    if table_path is not None:
        mlflow.log_artifact(str(table_path), "table")
    figs = log_figures(figures) if figures else []
    return {"metrics": n, "params": len(params), "figures": len(figs)}


def log_experiment_pointwise(cfg, store, tags: Mapping[str, str]) -> dict[str, int] | None:
    """Inside an experiment's parent run: one nested run ``pointwise`` with the pointwise judges'
    figures, their table and plots (``RunLayout.pointwise``); None when the run has none."""
    from judgebias.runs.layout import RunLayout
    from judgebias.tracking.mlflow_run import mlflow_run

    layout = RunLayout.pointwise(cfg)
    if not cfg.pointwise_judges() or not store.has(layout.metrics):
        return None
    result = store.read_json(layout.metrics)
    with mlflow_run("pointwise", tags={**tags, "judgebias.kind": "pointwise"}):
        log_params_dict({"pointwise_hash": cfg.pointwise_hash(),
                         "templates": ",".join(f"{j.name}={j.template}" for j in cfg.pointwise_judges())})
        counts = log_pointwise_analysis(result, table_path=store.path(layout.table) if store.has(layout.table)
                                        else None)
        plots = store.path(layout.plots)
        pngs = sorted(plots.glob("*.png")) if plots.is_dir() else []
        log_files(pngs, "plots")
        counts["figures"] = len(pngs)
    return counts
