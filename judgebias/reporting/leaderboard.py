"""``judgebias leaderboard``: the bias-corrected leaderboard of a pairwise table as one JSON-ready
dict (the layout of issue 31's contract, docs/metrics.md "Leaderboard") and its printed table.

The estimators live in ``judgebias.metrics`` (``bradley_terry``, ``leaderboard``, ``rank_agreement``);
this module only assembles their results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from judgebias.metrics import leaderboard as lb
from judgebias.metrics.bradley_terry import ranking_records, small_sample_warning
from judgebias.metrics.origin import SelfMap
from judgebias.metrics.rank_agreement import agreement, missing_models, rank_change
from judgebias.metrics.recommend import PANEL as rec_panel
from judgebias.reporting.recommendation import (
    audit_figures,
    format_recommendation,
    panel_audit,
    recommendation,
)
from judgebias.stats import jsonable

DESCRIPTIONS = {
    lb.RAW: "Bradley-Terry on the judge's verdicts (P(A) where present; a tie counts half)",
    lb.STYLE: "Bradley-Terry with Arena-Hard-Auto's style control: standardised length difference "
              "(lA - lB) / (lA + lB) and markdown-density differences (headers, lists, bold) as covariates",
    lb.RELATED: "Bradley-Terry without the comparisons where the judge is related (self or family) to a "
                "contestant",
    lb.RELATED_TERM: "Bradley-Terry on the judge's comparisons pooled with the other judges' unrelated ones, "
                     "with explicit self and family terms on the judge's rows",
    lb.PANEL: "Bradley-Terry on each comparison's mean vote of the judges related to neither contestant "
              "(PoLL-style panel, named per comparison)",
    lb.HUMAN_ANCHORED: "the judge's Bradley-Terry strengths corrected with the human labels by PPI++ "
                       "(prediction-powered score equation, power-tuned lambda; labels taken as a uniform "
                       "sample of the judge's comparisons)",
    lb.HUMAN: "Bradley-Terry on the human labels' vote share for A (a tie label counts half)",
}
NOT_COMPUTED: dict[str, str] = {}


def _unit(cluster_by: str) -> str:
    return {"prompt": "prompts", "none": "pairs"}.get(cluster_by, f"values of {cluster_by!r}")


def no_ranking_reason(skipped: Mapping[str, Mapping[str, str]]) -> str:
    """Why no variant could rank any model, in one line: the first rater's reason (each names the
    models, or the separate groups of models no comparison links) and how many others failed alike."""
    reasons = [r for per in skipped.values() for r in per.values() if r]
    if not reasons:
        return "no model ranking could be fitted (the table has no comparison of two models)"
    first = reasons[0]
    more = f" (and {len(reasons) - 1} other variant(s) or rater(s) for the same kind of reason)" \
        if len(reasons) > 1 else ""
    hint = ("; rank each group from its own table (the rows of its generators), or add comparisons "
            "between the groups") if "separate groups" in first else ""
    return f"no model ranking could be fitted: {first}{more}{hint}"


def leaderboard(df: pd.DataFrame, *, self_map: SelfMap | None = None, family_map: SelfMap | None = None,
                judges: Sequence[str] | None = None, reps: int = 1000, seed: int = 0,
                label_sample: int | None = None, audit: Mapping[str, Mapping[str, Any]] | None = None,
                timing: Mapping[str, Mapping[str, Any]] | None = None,
                target_half_width: float | None = None, cluster_by: str | None = None,
                margins: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Every variant's ranking per judge (and the panel's and the humans'), their agreement with the
    human ranking, what each correction moved, and which rater to use (``judgebias.reporting.recommendation``:
    ``audit`` is judge -> its ``analyze`` figures, computed from ``df`` when not given; ``timing``
    rater -> measured seconds / cost per 1,000 judgments; ``target_half_width`` the planner's target
    on the top-two gap, default the gap itself; ``cluster_by``: what the bootstrap resamples,
    ``frame.prepare``'s column, default the prompt; ``margins`` R4's margin values, ``--margin``)."""
    board = lb.fit_leaderboard(df, self_map=self_map, family_map=family_map, judges=judges, reps=reps,
                               seed=seed, label_sample=label_sample, cluster_by=cluster_by)
    if not any(board.fits.values()):
        raise ValueError(no_ranking_reason(board.skipped))
    rankings: dict[str, dict[str, list]] = {}
    details: dict[str, dict[str, dict]] = {}
    models: set[str] = set()
    for variant, fits in board.fits.items():
        for rater, fit in fits.items():
            rankings.setdefault(variant, {})[rater] = ranking_records(fit)
            models.update(fit.models)
            details.setdefault(variant, {})[rater] = {
                "n": fit.n, "method": fit.method,
                "exclusions": board.exclusions.get(variant, {}).get(rater, {}),
                **({"note": board.notes[variant][rater]} if rater in board.notes.get(variant, {}) else {}),
                **({"warning": w} if (w := small_sample_warning(fit.n, len(fit.models))) else {}),
                **({"coefficients": {c: dict(zip(("value", "ci_low", "ci_high"), fit.covariate(c),
                                                 strict=True)) for c in fit.covariates}}
                   if fit.covariates else {}),
            }
    human = board.fits[lb.HUMAN].get(lb.HUMAN)
    agree: dict[str, dict[str, dict]] = {}
    moved: dict[str, dict[str, dict]] = {}
    for variant, fits in board.fits.items():
        if variant == lb.HUMAN:
            continue
        for rater, fit in fits.items():
            if human is not None:
                try:
                    agree.setdefault(variant, {})[rater] = {k: e.to_dict()
                                                            for k, e in agreement(fit, human).items()}
                    gone = missing_models(fit, human)
                    if gone:
                        agree[variant][rater]["models_not_ranked"] = list(gone)
                except ValueError as exc:
                    agree.setdefault(variant, {})[rater] = {"not_computed": str(exc)}
            if variant == lb.RAW:
                continue
            # The panel has no raw ranking of its own: it is compared with each judge's raw one.
            befores = ({j: f for j, f in board.fits[lb.RAW].items()} if variant == lb.PANEL else
                       {rater: board.fits[lb.RAW].get(rater)})
            for name, before in befores.items():
                if before is None:
                    continue
                try:
                    moved.setdefault(variant, {})[name] = rank_change(before, fit)
                except ValueError as exc:
                    moved.setdefault(variant, {})[name] = {"not_computed": str(exc)}
    result = {
        "models": sorted(models),
        "label_sample": label_sample,
        "variants": {v: DESCRIPTIONS[v] for v in lb.VARIANTS},
        "settings": {"reps": board.reps, "seed": board.seed, "cluster_by": board.cluster_by,
                     "clusters": board.clusters,
                     "bootstrap": f"{board.reps} resamples of the {_unit(board.cluster_by)} "
                                  f"({board.clusters} clusters), seed {board.seed}; every variant and the "
                                  "human ranking refitted on the same resamples",
                     "strength_scale": "Bradley-Terry log-odds, centred (mean 0 over a ranking's models)",
                     "self_map": {k: list(v) for k, v in (self_map or {}).items()},
                     "family_map": {k: list(v) for k, v in (family_map or {}).items()}},
        "rankings": rankings,
        "human": rankings.get(lb.HUMAN, {}).get(lb.HUMAN, []),
        "details": details,
        "agreement_with_human": agree if human is not None else {},
        "rank_change": moved,
        "panels": {"comparisons_per_panel": dict(sorted(Counter(board.panels.values()).items())),
                   "per_pair": board.panels},
        "skipped": {v: r for v, r in board.skipped.items() if r},
        "not_computed": {**NOT_COMPUTED, **({} if human is not None else {
            "agreement_with_human": board.skipped[lb.HUMAN].get(lb.HUMAN, "no human ranking")})},
    }
    if audit is None:
        audit = audit_figures(df, list(board.fits[lb.RAW]), cluster_by=cluster_by)
    if lb.PANEL in board.fits[lb.PANEL]:  # the panel meets its members' rules on its pooled vote
        related = {j: mine | fam for j, (mine, fam) in board.relations.items()}
        audit = {**audit, rec_panel: panel_audit(df, list(board.fits[lb.RAW]), related,
                                                 cluster_by=cluster_by)}
    result["recommendation"] = recommendation(board, jsonable(result), audit=audit, timing=timing,
                                              target_half_width=target_half_width, margins=margins)
    return jsonable(result)


PER_BLOCK = 3


def _cell(r: Mapping[str, Any]) -> str:
    rank = f"#{r['rank']}" if r["rank_ci_low"] == r["rank_ci_high"] else \
        f"#{r['rank']} ({r['rank_ci_low']}-{r['rank_ci_high']})"
    return f"{r['strength']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] {rank}"


def _fmt(e: Mapping[str, Any]) -> str:
    if e.get("value") is None:
        return "n/a"
    return f"{e['value']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]"


def format_leaderboard(result: Mapping[str, Any]) -> str:
    """The rankings as a plain-text table per rater (strength [95% interval] #rank (rank interval)),
    then the agreement with the human ranking and what each correction moved. Names are shown as the
    caller makes them safe (``terminal_safe``)."""
    lines = ["Bradley-Terry strengths (log-odds, mean 0) with 95% intervals; "
             f"{result['settings']['bootstrap']}"]
    raters: dict[str, list[str]] = {}
    for variant, per in result["rankings"].items():
        for rater in per:
            raters.setdefault(rater, []).append(variant)
    width = max(len(m) for m in result["models"])
    for rater, variants in raters.items():
        lines += ["", f"== {rater} =="]
        cells = {v: {r["model"]: _cell(r) for r in result["rankings"][v][rater]} for v in variants}
        order = [r["model"] for r in result["rankings"][variants[0]][rater]]
        order += [m for v in variants for m in cells[v] if m not in order]
        for start in range(0, len(variants), PER_BLOCK):  # blocks of a few columns keep lines readable
            block = variants[start:start + PER_BLOCK]
            lines.append("  ".join([" " * width, *[f"{v:<34}" for v in block]]).rstrip())
            for model in dict.fromkeys(order):
                row = [f"{model:<{width}}", *[f"{cells[v].get(model, 'not ranked'):<34}" for v in block]]
                lines.append("  ".join(row).rstrip())
        for v in variants:
            coefs = result["details"][v][rater].get("coefficients")
            if coefs:
                lines.append(f"  {v} terms: " + ", ".join(f"{c} {_fmt(e)}" for c, e in coefs.items()))
            note = result["details"][v][rater].get("note")
            if note:
                lines.append(f"  {v}: {note}")
            warning = result["details"][v][rater].get("warning")
            if warning:
                lines.append(f"  {v}: warning: {warning}")
    if result["agreement_with_human"]:
        lines += ["", "Agreement with the human ranking (Kendall tau-b, Spearman rho; 95% intervals)"]
        for variant, per in result["agreement_with_human"].items():
            for rater, a in per.items():
                if "not_computed" in a:
                    lines.append(f"  {variant:<15} {rater:<24} not computed: {a['not_computed']}")
                    continue
                gone = a.get("models_not_ranked")
                extra = f"  (not ranked: {', '.join(gone)})" if gone else ""
                lines.append(f"  {variant:<15} {rater:<24} tau {_fmt(a['kendall_tau'])}  "
                             f"rho {_fmt(a['spearman'])}{extra}")
    if result["rank_change"]:
        lines += ["", "What each correction moved (against the judge's raw ranking)"]
        for variant, per in result["rank_change"].items():
            for rater, m in per.items():
                if "not_computed" in m:
                    continue
                most = ", ".join(f"{x['model']} {x['rank_before']}->{x['rank_after']}"
                                 for x in m["moved_most"])
                swaps = "; ".join(f"{a}/{b}" for a, b in m["swapped"]) or "none"
                lines.append(f"  {variant:<15} {rater:<24} largest change {m['largest_rank_change']}"
                             f"{' (' + most + ')' if most else ''}; swapped: {swaps}; "
                             f"P(top differs) {m['p_top_differs']:.2f}")
    lines += format_recommendation(result.get("recommendation") or {"not_computed": "absent"})
    for per in result["skipped"].values():
        lines += [f"skipped: {reason}" for reason in per.values()]
    for name, reason in result["not_computed"].items():
        lines.append(f"not computed {name}: {reason}")
    return "\n".join(lines)
