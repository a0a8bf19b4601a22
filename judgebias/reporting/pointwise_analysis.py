"""``analyze`` on a pointwise table: every pointwise figure each judge's columns allow, under the
JSON keys of issue 30, and a plain-text summary. A figure the table cannot support is listed under
the judge's ``skipped`` with its reason, never written as 0."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from judgebias.metrics import pointwise as P
from judgebias.metrics.frame import CLUSTER, CLUSTER_BY
from judgebias.metrics.origin import self_set
from judgebias.metrics.registry import PointwiseInputs, pointwise_records
from judgebias.stats import InsufficientData, jsonable


def _judge_figures(df: pd.DataFrame, judge: str, **inputs: Any) -> dict[str, Any]:
    """Every declared pointwise figure (``judgebias.metrics.registry.POINTWISE_FIGURES``) of one
    judge: a record keyed by its parts holds the parts that could be computed; each figure that
    could not is listed under ``skipped`` with its reason."""
    given = PointwiseInputs(df, judge, **inputs)
    skipped: dict[str, str] = {}
    out: dict[str, Any] = {}
    for record, figures in pointwise_records().items():
        for fig in figures:
            if fig.needs_pairwise and given.pairwise is None:
                skipped[fig.key] = "no pairwise table given (--pairwise)"
                continue
            try:
                est = fig.compute(given).to_dict()
            except InsufficientData as exc:
                skipped[fig.key] = str(exc)
                continue
            if fig.part:
                out.setdefault(record, {})[fig.part] = est
            else:
                out[record] = est
    out["skipped"] = skipped
    return out


def analyze_pointwise(
    df: pd.DataFrame,
    *,
    self_map: Mapping[str, Iterable[str]] | None = None,
    family_map: Mapping[str, Iterable[str]] | None = None,
    gold: Sequence[str] | None = None,
    pairwise: pd.DataFrame | None = None,
    pairwise_judge: str | None = None,
    reps: int = 2000,
    seed: int = 0,
    pairwise_judges: Mapping[str, str] | None = None,
    cluster_by: str | None = None,
) -> dict[str, Any]:
    """Figures of every judge of a validated pointwise table (``judgebias.tables.pointwise``).
    ``pairwise_judges``: per pointwise judge, the judge of ``pairwise`` it is compared with (an
    experiment's pairwise judge on the same model); others use ``pairwise_judge``. ``cluster_by``:
    the column whose equal values share a cluster (default the item; ``"none"``: rows independent)."""
    df = P.with_clusters(df, cluster_by)
    judges = sorted(j for j in df["judge"].unique() if j)
    if not judges:
        raise ValueError("the pointwise table has no judge rows (column 'judge' is empty everywhere)")
    result: dict[str, Any] = {
        "table_kind": "pointwise",
        "settings": {
            "rows": len(df),
            "items": int(df["item_id"].nunique()),
            "cluster_by": df.attrs[CLUSTER_BY],
            "clusters": int(df[CLUSTER].nunique()),
            "judges": judges,
            "gold": list(gold) if gold else "all other judges",
            "bootstrap_reps": reps,
            "seed": seed,
            "self_generators": {j: sorted(self_set(df, j, self_map)) for j in judges},
        },
        "judges": {},
    }
    def figures(table: pd.DataFrame, judge: str, pairs: pd.DataFrame | None) -> dict[str, Any]:
        twin = (pairwise_judges or {}).get(judge, pairwise_judge)
        return _judge_figures(table, judge, self_map=self_map, family_map=family_map, gold=gold,
                              pairwise=pairs, pairwise_judge=twin, reps=reps, seed=seed)

    for judge in judges:
        result["judges"][judge] = figures(df, judge, pairwise)
    # Several criteria: the pooled figures above (an item's criteria clustered together) and each
    # criterion's own (a judge calibrated on accuracy may not be on style). A pairwise verdict
    # compares whole responses, not one criterion, so the consistency stays pooled.
    criteria = _criteria(df)
    if len(criteria) > 1:
        result["settings"]["criteria"] = criteria
        result["by_criterion"] = {}
        for criterion in criteria:
            part = df[df["criterion"].astype(str) == criterion]
            result["by_criterion"][criterion] = {
                "judges": {j: figures(part, j, None) for j in judges if (part["judge"] == j).any()}}
    return jsonable(result)


def _criteria(df: pd.DataFrame) -> list[str]:
    if "criterion" not in df.columns:
        return []
    named = df["criterion"].dropna().astype(str).str.strip()
    return sorted(c for c in named.unique() if c)


def _fmt(fig: Mapping[str, Any] | None) -> str:
    if not fig or fig.get("value") is None:
        return "n/a"
    lo, hi = fig.get("ci_low"), fig.get("ci_high")
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{fig['value']:.3f}{ci} (n={fig.get('n', 0)})"


def format_pointwise(result: Mapping[str, Any]) -> str:
    """The figures as plain text lines, one block per judge (names are made terminal-safe by the
    caller), then one line per criterion and judge when the table has several."""
    settings = result["settings"]
    clusters = f", {settings['clusters']} clusters by {settings['cluster_by']}" \
        if "clusters" in settings else ""
    lines = [f"pointwise table: {settings['rows']} rows, {settings['items']} items{clusters}"]
    for judge, figs in result["judges"].items():
        lines.append(f"\njudge {judge}")
        for record, figures in pointwise_records().items():
            for fig in figures:
                est = (figs.get(record) or {}).get(fig.part) if fig.part else figs.get(record)
                if est is not None:
                    lines.append(f"  {fig.key:<36} {_fmt(est)}")
        round_share = figs.get("score_distribution", {}).get("round_share")
        if round_share:
            lines.append(f"  {'score_distribution.round_share':<36} {_fmt(round_share)}")
        for name, why in figs.get("skipped", {}).items():
            lines.append(f"  not computed: {name}: {why}")
    by = result.get("by_criterion") or {}
    if by:
        lines.append("\nby criterion (each criterion's rows alone)")
        for criterion, part in by.items():
            for judge, figs in part["judges"].items():
                agree = (figs.get("score_agreement_human") or {}).get("spearman")
                lines.append(f"  {criterion} / {judge}: spearman {_fmt(agree)}; "
                             f"bias {_fmt(figs.get('score_bias_human'))}")
    return "\n".join(lines)
