"""Agreement of a judge with humans and with the gold panel: percent agreement (Agresti-Coull
interval) and Cohen's kappa (score interval on its effective sample size, ``stats.kappa``) over the
3 labels a / b / tie, on rows where both labels are present. Rows nested in clusters (pairs sharing
a prompt): the same intervals at the effective size, the sample size over the figure's design
effect (``stats.clustered_proportion``, ``stats.clustered_kappa``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.metrics.dbg import GoldVotes, gold_votes
from judgebias.stats import (
    Clusters,
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_how,
    clustered_kappa,
    clustered_proportion,
    count_reasons,
    share_how,
)

LABELS = ("a", "b", "tie")


def _paired_labels(df, judge, reference, gold, self_map, what, votes=None, rows=None):
    F.require(df, ["judge"], what)
    if reference not in ("human", "gold"):
        raise ValueError(f"{what}: reference must be 'human' or 'gold', got {reference!r}")
    prepared = F.prepare(df)
    rows = F.judge_rows(prepared if rows is None else rows, judge, what)
    choice = rows[F.CHOICE].to_numpy()
    if reference == "human":
        ref = rows[F.HUMAN].to_numpy()
        reasons = [("no_human_label", ref == F.MISSING), ("human_no_majority", ref == F.NO_MAJORITY)]
    else:
        v = (votes or gold_votes(prepared, judge, gold)).votes[rows[F.PAIR].to_numpy()]
        ref = np.where(np.isnan(v), F.MISSING, np.where(v > 0.5, F.A, np.where(v < 0.5, F.B, F.TIE)))
        reasons = [("no_gold", ref == F.MISSING)]
    keep, excl = count_reasons([*reasons, ("judge_missing", choice == F.MISSING)], len(rows))
    if not keep.any():
        raise InsufficientData(f"no row with both a judge choice and a {reference} label; excluded: {excl}")
    return _Labels(choice[keep].astype(np.int64), ref[keep].astype(np.int64), F.clusters(rows, keep), excl)


class _Labels(NamedTuple):
    """The kept rows' judge and reference codes (a, b, tie = 0, 1, 2), their clusters, the exclusions."""

    judge: np.ndarray
    ref: np.ndarray
    clusters: Clusters
    exclusions: dict[str, int]

    @property
    def table(self) -> np.ndarray:
        """Judge (rows) by reference (columns) counts."""
        return np.bincount(self.judge * 3 + self.ref, minlength=9).reshape(3, 3)


def agreement(df: pd.DataFrame, judge: str, reference: str = "human", *, gold: Sequence[str] | None = None,
              self_map: origin.SelfMap | None = None, votes: GoldVotes | None = None,
              rows: pd.DataFrame | None = None) -> Estimate:
    """Share of rows where the judge's choice equals the reference label (human majority or gold).
    ``votes`` and ``rows``: as ``dbg.dbg_score`` takes them, where the caller has them."""
    labels = _paired_labels(df, judge, reference, gold, self_map, f"agreement_{reference}", votes, rows)
    table, clusters = labels.table, labels.clusters
    d = clustered_proportion(labels.judge == labels.ref, clusters)
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(table.sum()),
                    exclusions=labels.exclusions,
                    method="percent agreement over a/b/tie; " + share_how(clusters, d),
                    details={"table": {"rows_judge_cols_" + reference: table.tolist(),
                                       "labels": list(LABELS)}}, **cluster_fields(d, clusters))


def cohen_kappa(df: pd.DataFrame, judge: str, reference: str = "human", *, gold: Sequence[str] | None = None,
                self_map: origin.SelfMap | None = None, votes: GoldVotes | None = None,
                rows: pd.DataFrame | None = None) -> Estimate:
    """Cohen's kappa between the judge and the reference over a/b/tie (95% score interval on its
    effective sample size, ``stats.kappa``). ``votes`` and ``rows``: as ``agreement`` takes them."""
    labels = _paired_labels(df, judge, reference, gold, self_map, f"kappa_{reference}", votes, rows)
    k = clustered_kappa(labels.judge, labels.ref, labels.clusters)
    method = "Cohen's kappa; Wilson interval on its effective sample size, z-test of 0" if not k["nested"] \
        else ("Cohen's kappa; Wilson interval on its effective sample size over its design effect (CR1 "
              "variance of kappa's influence values, t on clusters - 1), Wald t-test of 0, "
              f"{clustered_how(labels.clusters, k['clusters'])}")
    return Estimate(value=k["value"], ci_low=k["ci_low"], ci_high=k["ci_high"], n=labels.judge.size,
                    exclusions=labels.exclusions, statistic=k["statistic"], p_value=k["p_value"],
                    method=method,
                    details={"observed_agreement": k["observed"], "expected_agreement": k["expected"]},
                    **cluster_fields(k, labels.clusters))


def precision_cost(run: pd.DataFrame, reference: pd.DataFrame) -> dict:
    """What a judge's reduced precision costs: its judgments (``run``) against the same pairs judged
    by the same model in a reference precision, matched on ``pair_id`` in both orders. Returns the
    number of pairs and of compared judgments, the largest and mean |dP(A)| and how many verdicts
    changed. A bound seen on these pairs, not an interval: it describes only them."""
    for what, df in (("run", run), ("reference", reference)):
        missing = [c for c in ("pair_id", "p_a_ab", "p_a_ba", "verdict_ab", "verdict_ba") if c not in df]
        if missing:
            raise ValueError(f"precision_cost: the {what} table lacks column(s) {missing}")
    cols = ["pair_id", "p_a_ab", "p_a_ba", "verdict_ab", "verdict_ba"]
    both = run[cols].drop_duplicates("pair_id").merge(
        reference[cols].drop_duplicates("pair_id"), on="pair_id", suffixes=("", "_ref"))
    if both.empty:
        raise ValueError("precision_cost: no pair_id in both tables")
    diffs = pd.concat([(both[c] - both[f"{c}_ref"]).abs() for c in ("p_a_ab", "p_a_ba")]).dropna()
    if diffs.empty:
        raise ValueError("precision_cost: no judgment with P(A) in both tables")
    changed = sum(int((both[v] != both[f"{v}_ref"]).sum()) for v in ("verdict_ab", "verdict_ba"))
    return {"pairs": len(both), "judgments": len(diffs), "max_abs_dp_a": float(diffs.max()),
            "mean_abs_dp_a": float(diffs.mean()), "verdicts_changed": changed}


def agreement_two_class(df: pd.DataFrame, judge: str) -> Estimate:
    """Agreement on the pairs where the human majority prefers a side (not a tie), as on 2-class
    benchmarks (LLMBar): a judge's tie there counts as a miss; ``details.judge_ties`` says how many
    of its answers were ties, so a judge that never says tie is not read as worse than it is."""
    labels = _paired_labels(df, judge, "human", None, None, "agreement_two_class")
    table, excl = labels.table, labels.exclusions
    two = table[:, :2]  # columns: human a, human b (the tie column leaves)
    if table[:, 2].any():
        excl = {**excl, "human_tie": int(table[:, 2].sum())}
    n = int(two.sum())
    if n == 0:
        raise InsufficientData(f"no pair with a human side preference and a judge choice; excluded: {excl}")
    sided = labels.ref != F.TIE
    clusters = labels.clusters.subset(sided)
    d = clustered_proportion(labels.judge[sided] == labels.ref[sided], clusters)
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n, exclusions=excl,
                    method="percent agreement on pairs whose human majority is a or b (judge tie = miss); "
                           + share_how(clusters, d),
                    details={"judge_ties": int(two[2].sum())}, **cluster_fields(d, clusters))


def tie_rate(df: pd.DataFrame, judge: str) -> Estimate:
    """Share of the judge's choices that are ties (Agresti-Coull interval)."""
    F.require(df, ["judge"], "tie_rate")
    rows = F.judge_rows(F.prepare(df), judge, "tie_rate")
    choice = rows[F.CHOICE].to_numpy()
    keep, excl = count_reasons([("judge_missing", choice == F.MISSING)], len(rows))
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData("the judge made no choice")
    clusters = F.clusters(rows, keep)
    d = clustered_proportion(choice[keep] == F.TIE, clusters)
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n, exclusions=excl,
                    method="share of choices that are ties; " + share_how(clusters, d),
                    **cluster_fields(d, clusters))
