"""The leaderboard's ``recommendation``: the audit figures of each rater gathered from the table (or
an ``analyze`` result), the rules of ``judgebias.metrics.recommend`` applied, and the human labels a
target interval on the top-two gap needs. Text printed from it names every figure it rests on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import leaderboard as lb
from judgebias.metrics import recommend as rec
from judgebias.metrics import registry as R
from judgebias.stats import InsufficientData

AUDIT = ("kappa_human", "agreement_human", "human_ceiling", "position_consistency", "verbosity_bias")


def audit_figures(df: pd.DataFrame, judges: Sequence[str], *,
                  cluster_by: str | None = None) -> dict[str, dict[str, Any]]:
    """The figures the rules read (``AUDIT``), per judge, computed as ``analyze`` computes them
    (on the clusters of ``cluster_by``); a figure whose input is missing is left out (the rule then
    reads "not applicable")."""
    prep = F.prepare(df, cluster_by=cluster_by)
    present = {n.name: n.check(prep) for n in R.TABLE_NEEDS}
    out: dict[str, dict[str, Any]] = {}
    positions = prep.groupby("judge", sort=True, observed=True).indices
    for judge in judges:
        if judge not in positions:
            continue
        rows = prep.take(positions[judge])
        inputs = R.Inputs(prep, rows, judge, {}, {}, None, False, 200, 0)
        figures = {}
        for key in AUDIT:
            fig = R.FIGURES[key]
            if not all(present.get(n.name, False) for n in fig.needs):
                continue
            try:
                figures[key] = fig.compute(inputs).to_dict()
            except (InsufficientData, ValueError):
                continue
        out[judge] = figures
    return out


def panel_table(df: pd.DataFrame, judges: Sequence[str], related: Mapping[str, frozenset[str]], *,
                cluster_by: str | None = None) -> pd.DataFrame:
    """The panel as one more judge (``recommend.PANEL``): per pair, the mean vote for A of the judges
    related to neither contestant (the leaderboard's pooled vote) as its ``p_a``, and the mean of
    their per-order votes as ``p_a_ab`` / ``p_a_ba`` where each of them has both; the pair's texts,
    generators and human labels from its first judge row (and its ``cluster_by`` column, so the
    panel's figures rest on the same clusters). Pairs every judge is related to are left out, as in
    the panel's ranking."""
    prep = F.prepare(df)
    keep = [c for c in ("pair_id", "prompt", "response_a", "response_b", "generator_a", "generator_b",
                        "human", cluster_by) if c and c in df.columns and c != "none"]
    keep = list(dict.fromkeys(keep))
    parts = []
    for judge in judges:
        rows = prep[(prep["judge"] == judge).to_numpy(dtype=bool, na_value=False)]
        rel = list(related.get(judge, frozenset()))
        ok = ~(rows["generator_a"].isin(rel) | rows["generator_b"].isin(rel)).to_numpy(dtype=bool) \
            if rel and "generator_a" in rows else np.ones(len(rows), dtype=bool)
        order = {o: _order_vote(rows, o) for o in ("ab", "ba")}
        parts.append(pd.DataFrame({"pair_id": rows["pair_id"].astype(str).to_numpy()[ok],
                                   "vote": rows[F.VOTE].to_numpy(dtype=float)[ok],
                                   "ab": order["ab"][ok], "ba": order["ba"][ok]}))
    votes = pd.concat(parts, ignore_index=True).dropna(subset=["vote"])
    if votes.empty:
        raise InsufficientData("no pair has a vote of a judge related to neither contestant")
    pooled = votes.groupby("pair_id", sort=True).agg(p_a=("vote", "mean"), p_a_ab=("ab", "mean"),
                                                    p_a_ba=("ba", "mean"), k=("vote", "size"),
                                                    k_ab=("ab", "count"), k_ba=("ba", "count"))
    both = (pooled["k_ab"] == pooled["k"]) & (pooled["k_ba"] == pooled["k"])
    pooled.loc[~both, ["p_a_ab", "p_a_ba"]] = np.nan
    base = df[keep].assign(pair_id=df["pair_id"].astype(str)).drop_duplicates("pair_id")
    out = base.merge(pooled[["p_a", "p_a_ab", "p_a_ba"]], left_on="pair_id", right_index=True)
    if not out["p_a_ab"].notna().any():
        out = out.drop(columns=["p_a_ab", "p_a_ba"])
    return out.assign(judge=rec.PANEL).reset_index(drop=True)


_VOTE_OF = {"a": 1.0, "b": 0.0, "tie": 0.5}


def _order_vote(rows: pd.DataFrame, order: str) -> np.ndarray:
    """The judge's vote for A shown in one order: its P(A) there, else its verdict as 1 / 0 / 0.5."""
    p = F.float_col(rows, f"p_a_{order}") if f"p_a_{order}" in rows else np.full(len(rows), np.nan)
    if f"verdict_{order}" in rows:
        v = rows[f"verdict_{order}"].astype(object).map(_VOTE_OF).to_numpy(dtype=float)
        p = np.where(np.isfinite(p), p, v)
    return p


def panel_audit(df: pd.DataFrame, judges: Sequence[str], related: Mapping[str, frozenset[str]], *,
                cluster_by: str | None = None) -> dict[str, Any]:
    """The audit figures (``AUDIT``) of the panel's pooled vote, computed as a judge's are; {} when
    there is no panel (fewer than two judges) or no pair it could vote on."""
    if len(judges) < 2:
        return {}
    try:
        table = panel_table(df, judges, related, cluster_by=cluster_by)
    except InsufficientData:
        return {}
    return audit_figures(table, [rec.PANEL], cluster_by=cluster_by).get(rec.PANEL, {})


def _length_term(result: Mapping[str, Any], judge: str) -> Mapping[str, Any] | None:
    detail = (result.get("details") or {}).get(lb.STYLE, {}).get(judge) or {}
    return (detail.get("coefficients") or {}).get("length")


def _tau(result: Mapping[str, Any], variant: str, rater: str) -> Mapping[str, Any] | None:
    return (result.get("agreement_with_human") or {}).get(variant, {}).get(rater, {}).get("kendall_tau")


def recommendation(board: lb.Leaderboard, result: Mapping[str, Any], *,
                   audit: Mapping[str, Mapping[str, Any]] | None = None,
                   timing: Mapping[str, Mapping[str, Any]] | None = None,
                   target_half_width: float | None = None,
                   margins: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``recommendation`` block of the leaderboard JSON (``margins``: R4's margin values
    overriding the declared ones, ``recommend.with_margins``). ``audit``: judge -> its figures (an
    ``analyze`` result's ``judges``); ``timing``: rater -> measured seconds (and cost) per 1,000
    judgments with their source."""
    candidates = set(result.get("models") or [])
    profiles = []
    for judge in board.fits[lb.RAW]:
        mine, family = board.relations.get(judge, (frozenset(), frozenset()))
        profiles.append(rec.profile(
            judge, related={"self": sorted(mine & candidates), "family": sorted(family & candidates)},
            audit=(audit or {}).get(judge), length_term=_length_term(result, judge),
            tau=_tau(result, lb.RAW, judge), timing=(timing or {}).get(judge)))
    # A panel of one judge is that judge: a rater of its own only with two or more judges.
    if lb.PANEL in board.fits[lb.PANEL] and len(board.fits[lb.RAW]) >= 2:
        profiles.append(rec.profile(rec.PANEL, tau=_tau(result, lb.PANEL, lb.PANEL),
                                    audit=(audit or {}).get(rec.PANEL),
                                    timing=(timing or {}).get(rec.PANEL)))
    out = rec.choose(profiles, rec.with_margins(margins))
    out["candidates"] = sorted(candidates)
    out["planner"] = _planner(board, out, target_half_width)
    return out


def _planner(board: lb.Leaderboard, chosen: Mapping[str, Any], target: float | None) -> dict[str, Any]:
    best, variant = chosen["recommended"], chosen["read_variant"]
    if best is None:
        return {"not_computed": "no rater is eligible"}
    fit = board.fits.get(variant, {}).get(best)
    if fit is None:
        return {"not_computed": f"{variant}[{best}] has no ranking"}
    try:
        first, second = rec.top_two(fit.strengths, fit.models)
        human = board.fits[lb.HUMAN].get(lb.HUMAN)
        if human is not None and {first, second} <= set(human.models):
            g = rec.gap(first, second, human.strengths, human.boot_strengths, human.models)
            n_now, source = board.human_pairs, (f"the human ranking's bootstrap at its {board.human_pairs} "
                                                "labelled pairs (human labels alone; PPI++ with an agreeing "
                                                "judge needs no more, asymptotically)")
        else:
            g = rec.gap(first, second, fit.strengths, fit.boot_strengths, fit.models)
            n_now, source = fit.n, (f"no human ranking of both: the {variant} ranking's own {fit.n} "
                                    "comparisons stand in for labels (assumes a label as noisy as a verdict)")
        plan = rec.labels_for_gap(g, n_now, max(board.pairs, n_now), target)
    except ValueError as exc:
        return {"not_computed": str(exc)}
    return {"ranking": f"{variant}[{best}]", "gap": g, "variance_from": source, **plan}


def format_recommendation(r: Mapping[str, Any]) -> list[str]:
    """The recommendation as printed lines: the choice, each rater's checks, the planner, the rules."""
    lines = ["", "Recommendation (fixed rules on the audit figures; docs/metrics.md \"Recommendation\")"]
    if "not_computed" in r:
        return [*lines, f"  not computed: {r['not_computed']}"]
    best = r.get("recommended")
    lines.append(f"  use: {best} (read its {r['read_variant']} ranking)" if best else
                 "  use: no judge or panel passes the rules; rank with human labels")
    if r.get("order"):
        lines.append("  order of the eligible raters: " + ", ".join(r["order"]))
    for rater, info in r["raters"].items():
        state = "eligible" if info["eligible"] else "excluded"
        flags = f", flagged {'/'.join(info['flags'])}" if info["flags"] else ""
        flags += f", inconclusive {'/'.join(info['inconclusive'])}" if info.get("inconclusive") else ""
        lines.append(f"  {rater}: {state}{flags}")
        lines += [f"    {c['rule']} {c['outcome']}: {c['figure']}" for c in info["checks"]
                  if c["outcome"] != "not applicable" or rater != rec.PANEL]
        p = info["profile"]
        extra = [rec.estimate_text("tau with human ranking", p["kendall_tau_human"])]
        if p["agreement_human"]:
            extra.append(rec.estimate_text("agreement with humans", p["agreement_human"]))
        if p["ceiling_gap"]:
            extra.append(rec.estimate_text("gap to the human ceiling", p["ceiling_gap"]))
        t = p["timing"]
        extra.append(f"{t['seconds_per_1000']:.1f} s per 1,000 judgments ({t.get('source', '')})"
                     if t and t.get("seconds_per_1000") is not None
                     else "time per 1,000 judgments: not measured")
        if t and t.get("usd_per_1000") is not None:
            extra.append(f"${t['usd_per_1000']:.2f} per 1,000 judgments")
        lines.append("    " + "; ".join(extra))
    plan = r.get("planner") or {}
    if "not_computed" in plan:
        lines.append(f"  labels for the top-two gap: not computed ({plan['not_computed']})")
    elif plan:
        g = plan["gap"]
        lines.append(f"  top two of {plan['ranking']}: {g['first']} - {g['second']} = {g['value']:+.3f} "
                     f"[{g['ci_low']:+.3f}, {g['ci_high']:+.3f}]; a 95% half-width of "
                     f"{plan['target_half_width']:.3f} needs {plan['labels_needed']} human label(s) of "
                     f"{plan['population']} comparisons (variance from {plan['variance_from']})")
    lines += [f"  rule {k}: {v}" for k, v in r["rules"].items()]
    return lines
