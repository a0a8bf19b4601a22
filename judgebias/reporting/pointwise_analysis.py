"""``analyze`` on a pointwise table: every pointwise figure each judge's columns allow, under the
JSON keys of issue 30, and a plain-text summary. A figure the table cannot support is listed under
the judge's ``skipped`` with its reason, never written as 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from judgebias.metrics import pointwise as P
from judgebias.metrics import pointwise_origin as O
from judgebias.metrics.frame import CLUSTER, CLUSTER_BY
from judgebias.metrics.origin import self_set
from judgebias.metrics.pointwise_perplexity import score_perplexity
from judgebias.stats import Estimate, InsufficientData, jsonable

AGREEMENT_PARTS = ("spearman", "kendall", "weighted_kappa", "mae")


def _try(skipped: dict[str, str], name: str, compute: Callable[[], Any]) -> Any:
    try:
        return compute()
    except InsufficientData as exc:
        skipped[name] = str(exc)
        return None


def _judge_figures(
    df: pd.DataFrame,
    judge: str,
    *,
    self_map,
    family_map,
    gold,
    pairwise,
    pairwise_judge,
    reps: int,
    seed: int,
) -> dict[str, Any]:
    skipped: dict[str, str] = {}
    out: dict[str, Any] = {}
    parts = {
        "spearman": lambda: P.score_spearman_human(df, judge),
        "kendall": lambda: P.score_kendall_human(df, judge),
        "weighted_kappa": lambda: P.score_kappa_human(df, judge, reps=reps, seed=seed),
        "mae": lambda: P.score_mae_human(df, judge),
    }
    agreement = {}
    for name, compute in parts.items():
        est = _try(skipped, f"score_agreement_human.{name}", compute)
        if est is not None:
            agreement[name] = est.to_dict()
    if agreement:
        out["score_agreement_human"] = agreement
    single: dict[str, Callable[[], Estimate]] = {
        "score_bias_human": lambda: P.score_bias_human(df, judge),
        "score_dbg": lambda: O.score_dbg(df, judge, gold, self_map),
        "score_family_preference": lambda: O.score_family_preference_eo(df, judge, self_map, family_map),
        "score_verbosity": lambda: O.score_verbosity(df, judge),
        "score_perplexity": lambda: score_perplexity(df, judge),
        "score_distribution": lambda: P.score_distribution(df, judge),
    }
    sp = {}
    for name, compute in (
        ("eo", lambda: O.score_self_preference_eo(df, judge, self_map)),
        ("dp", lambda: O.score_self_preference_dp(df, judge, self_map)),
    ):
        est = _try(skipped, f"score_self_preference.{name}", compute)
        if est is not None:
            sp[name] = est.to_dict()
    if sp:
        out["score_self_preference"] = sp
    if pairwise is not None:
        single["pointwise_pairwise_consistency"] = lambda: O.pointwise_pairwise_consistency(
            df, pairwise, judge, pairwise_judge
        )
    else:
        skipped["pointwise_pairwise_consistency"] = "no pairwise table given (--pairwise)"
    for name, compute in single.items():
        est = _try(skipped, name, compute)
        if est is not None:
            out[name] = est.to_dict()
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
        for part in AGREEMENT_PARTS:
            if part in figs.get("score_agreement_human", {}):
                lines.append(
                    f"  score_agreement_human.{part:<14} {_fmt(figs['score_agreement_human'][part])}"
                )
        for part in ("eo", "dp"):
            if part in figs.get("score_self_preference", {}):
                lines.append(
                    f"  score_self_preference.{part:<14} {_fmt(figs['score_self_preference'][part])}"
                )
        for name in (
            "score_bias_human",
            "score_dbg",
            "score_family_preference",
            "score_verbosity",
            "score_perplexity",
            "score_distribution",
            "pointwise_pairwise_consistency",
        ):
            if name in figs:
                lines.append(f"  {name:<36} {_fmt(figs[name])}")
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
