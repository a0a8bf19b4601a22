"""Logging a ``judgebias leaderboard`` result into the active MLflow run.

Metric names: ``leaderboard.<variant>.<rater>.<model>.strength`` (and ``.ci_low``, ``.ci_high``,
``.rank``, ``.rank_ci_low``, ``.rank_ci_high``); ``leaderboard.agreement.<variant>.<rater>.kendall_tau``
and ``.spearman`` (with ``.ci_low`` / ``.ci_high`` / ``.n``); ``leaderboard.rank_change.<variant>.<rater>``
``.largest`` and ``.p_top_differs``; covariate terms as ``leaderboard.<variant>.<rater>.term.<name>``;
the planner's ``leaderboard.planner.labels_needed`` (and its target and current half-widths); the
recommended rater as the param ``leaderboard.recommended``.
Sanitized like every other run's names (``log_analysis.sanitize``); non-finite values left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.tracking.log_analysis import (
    estimate_metrics,
    finite,
    log_figures,
    log_metrics_dict,
    log_params_dict,
    name_key,
    sanitize,
)

ROW_PARTS = ("strength", "ci_low", "ci_high", "rank", "rank_ci_low", "rank_ci_high")


def flatten_leaderboard(result: Mapping[str, Any]) -> dict[str, float]:
    """Every number of a leaderboard result as flat, sanitized MLflow metric names."""
    out: dict[str, float] = {}
    for variant, per in (result.get("rankings") or {}).items():
        for rater, rows in per.items():
            for row in rows:
                for part in ROW_PARTS:
                    if finite(row.get(part)):
                        out[f"leaderboard.{variant}.{name_key(rater)}.{name_key(row['model'])}.{part}"] = \
                            float(row[part])
            detail = (result.get("details") or {}).get(variant, {}).get(rater) or {}
            coefs = detail.get("coefficients") or {}
            for term, est in coefs.items():
                out.update(estimate_metrics(f"leaderboard.{variant}.{name_key(rater)}.term.{term}", est))
    for variant, per in (result.get("agreement_with_human") or {}).items():
        for rater, figures in per.items():
            for name in ("kendall_tau", "spearman"):
                if isinstance(figures.get(name), Mapping):
                    prefix = f"leaderboard.agreement.{variant}.{name_key(rater)}.{name}"
                    out.update(estimate_metrics(prefix, figures[name]))
    plan = (result.get("recommendation") or {}).get("planner") or {}
    for key in ("labels_needed", "target_half_width", "half_width_now"):
        if finite(plan.get(key)):
            out[f"leaderboard.planner.{key}"] = float(plan[key])
    # Each rater's time and cost per 1,000 judgments (recorded by `judgebias judge` or typed in).
    for rater, info in ((result.get("recommendation") or {}).get("raters") or {}).items():
        timing = (info.get("profile") or {}).get("timing") or {}
        for key in ("seconds_per_1000", "usd_per_1000"):
            if finite(timing.get(key)):
                out[f"leaderboard.timing.{rater}.{key}"] = float(timing[key])
    for variant, per in (result.get("rank_change") or {}).items():
        for rater, moved in per.items():
            for key, name in (("largest_rank_change", "largest"), ("p_top_differs", "p_top_differs")):
                if finite(moved.get(key)):
                    out[f"leaderboard.rank_change.{variant}.{name_key(rater)}.{name}"] = float(moved[key])
    return {sanitize(k): v for k, v in out.items()}


def log_leaderboard(result: Mapping[str, Any], *, figures: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Log one leaderboard result into the ACTIVE run: its settings as params, every number as a
    metric, the JSON as ``leaderboard.json`` and the figures under ``plots/``. Returns counts."""
    import mlflow

    if mlflow.active_run() is None:
        raise RuntimeError("log_leaderboard needs an active MLflow run "
                           "(use judgebias.tracking.mlflow_run.mlflow_run)")
    settings = result.get("settings") or {}
    params = log_params_dict({
        "leaderboard.reps": settings.get("reps"), "leaderboard.seed": settings.get("seed"),
        "leaderboard.cluster_by": settings.get("cluster_by") or "prompt",
        "leaderboard.label_sample": result.get("label_sample") or "-",
        # Which rater the rules recommend ("-": none passes them); the reasons are in leaderboard.json.
        "leaderboard.recommended": (result.get("recommendation") or {}).get("recommended") or "-",
        "leaderboard.family_map": ";".join(f"{j}={','.join(g)}" for j, g in
                                           (settings.get("family_map") or {}).items()) or "-",
        "leaderboard.self_map": ";".join(f"{j}={','.join(g)}" for j, g in
                                         (settings.get("self_map") or {}).items()) or "-",
        # The margins R4 read (its "passed" needs the interval inside them).
        **{f"leaderboard.margin.{k}": v
           for k, v in ((result.get("recommendation") or {}).get("margins") or {}).items()},
    })
    n = log_metrics_dict(flatten_leaderboard(result))
    mlflow.log_dict(dict(result), "leaderboard.json")
    figs = log_figures(figures) if figures else []
    return {"metrics": n, "params": len(params), "figures": len(figs)}
