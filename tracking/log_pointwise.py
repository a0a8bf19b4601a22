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
    COMPARE_JUDGES,
    behind_judges,
    estimate_metrics,
    finite_fields,
    judge_records,
    log_figures,
    log_files,
    log_judge_runs,
    log_metrics_dict,
    log_params_dict,
    sanitize,
)


def pointwise_judge_metrics(result: Mapping[str, Any], judge: str) -> dict[str, float]:
    """One judge's figures of a pointwise ``analyze`` result under names without the judge (its
    nested run's names, the same for every judge; ``criterion.<criterion>.<figure>`` per criterion)."""
    out: dict[str, float] = {}
    declared = pointwise_records()  # how each record is logged: its value's name and details, or its parts
    for key, rec in ((k, r) for j, k, r in judge_records(result) if j == judge):
        figures = declared.get(key, ())
        if any(f.part for f in figures):  # a record keyed by its parts, each a full estimate
            for part, est in rec.items():
                if isinstance(est, Mapping):
                    out.update(estimate_metrics(f"{key}.{part}", est))
            continue
        fig = figures[0] if figures else None
        out.update(estimate_metrics((fig and fig.mlflow_value) or key, rec))
        out.update(finite_fields(rec, fig.details if fig else (), key))
        for field in fig.detail_estimates if fig else ():
            if isinstance(rec.get(field), Mapping):
                out.update(estimate_metrics(f"{key}.{field}", rec[field]))
    # Per criterion: ``criterion.<criterion>.<figure>`` (the pooled figures keep their names).
    for criterion, part in (result.get("by_criterion") or {}).items():
        if judge in (part.get("judges") or {}):
            sub = pointwise_judge_metrics({"judges": {judge: part["judges"][judge]}}, judge)
            out.update({f"criterion.{criterion}.{k}": v for k, v in sub.items()})
    return {sanitize(k): v for k, v in out.items()}


def pointwise_judges(result: Mapping[str, Any]) -> list[str]:
    """The judges of a pointwise result, in its order (those only in a criterion's figures after)."""
    by_criterion = (result.get("by_criterion") or {}).values()
    return list(dict.fromkeys([*(result.get("judges") or {}),
                               *(j for part in by_criterion for j in part.get("judges") or {})]))


def pointwise_metrics_by_judge(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each judge's figures under names without the judge (``pointwise_judge_metrics``)."""
    return {judge: pointwise_judge_metrics(result, judge) for judge in pointwise_judges(result)}


def flatten_pointwise(result: Mapping[str, Any],
                      per_judge: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """Every figure of a pointwise ``analyze`` result as flat, sanitized MLflow metric names:
    ``<name_key(judge)>.`` before each of ``pointwise_judge_metrics``'s names (``per_judge``:
    ``pointwise_metrics_by_judge(result)`` when the caller has it already)."""
    out = behind_judges(pointwise_metrics_by_judge(result) if per_judge is None else per_judge)
    out.update(finite_fields(result.get("settings"), ("rows", "items"), "dataset"))
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
    judge_runs: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Log one pointwise ``analyze`` result into the ACTIVE run: params, every metric, the JSON as
    ``metrics.json``, the table file under ``table/`` and the plots under ``plots/``. With
    ``judge_runs`` (their tags), also one nested run per judge with its figures under names without
    the judge (``pointwise_judge_metrics``; ``log_analysis.log_judge_runs``), tagged with the table's
    SHA-256, and the run's description says how to compare judges across runs."""
    import mlflow

    if mlflow.active_run() is None:
        raise RuntimeError("log_pointwise_analysis needs an active MLflow run "
                           "(judgebias.tracking.mlflow_run)")
    params = log_params_dict(pointwise_params(result, str(table_path) if table_path else None))
    per_judge = pointwise_metrics_by_judge(result)
    n = log_metrics_dict(flatten_pointwise(result, per_judge))
    mlflow.log_dict(dict(result), "metrics.json")
    if table_path is not None:
        mlflow.log_artifact(str(table_path), "table")
    figs = log_figures(figures) if figures else []
    counts = {"metrics": n, "params": len(params), "figures": len(figs)}
    if judge_runs is not None:
        from judgebias.runs.store import sha256_file

        tags = {**({"judgebias.dataset_digest": sha256_file(Path(table_path))} if table_path else {}),
                "judgebias.table_kind": "pointwise", **judge_runs}
        counts["judge_runs"] = len(log_judge_runs(per_judge, tags))
        mlflow.set_tag("mlflow.note.content", COMPARE_JUDGES + "\n")
    return counts


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
