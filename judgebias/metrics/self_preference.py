"""Self-preference bias (Wataoka et al. 2024).

* Equal Opportunity form (Definition 4.1): over pairs with exactly one response of the judge,
  with a human majority and a judge choice that are not ties, positive class = "own response is
  better": Bias = P(judge picks own | human picks own) - P(judge picks other | human picks other)
  = TPR - TNR of the confusion matrix (paper's Figure 2; GPT-4: 1852/1960 - 118/278 = 0.520).
* Demographic Parity form (Eq. 4): P(judge picks own) - P(judge picks other), no humans needed.
* Its mean-score variant: mean over pairs of score(own) - score(other) from the averaged p_a.
* Family forms: EO and DP with the judge's family's responses counted as its own (a family map:
  PandaLM-7B is a LLaMA-7B fine-tune), beside the exact-self figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.stats import (
    Clusters,
    Estimate,
    InsufficientData,
    cluster_fields,
    cluster_note,
    clustered_diff_proportions,
    clustered_mean_t,
    clustered_proportion,
    clustered_share_test,
    count_reasons,
    mean_how,
    nested,
    sign_test,
)


@dataclass(frozen=True)
class Confusion:
    """Positive class = the judge's own response is the better one."""

    tp: int  # human own, judge own
    fn: int  # human own, judge other
    fp: int  # human other, judge own
    tn: int  # human other, judge other

    def to_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "fn": self.fn, "fp": self.fp, "tn": self.tn}


def eo_from_confusion(conf: Confusion, exclusions: dict[str, int] | None = None) -> Estimate:
    """Definition 4.1 from a confusion matrix of independent pairs: TPR - TNR with a Newcomb 95%
    interval and a score test of TPR == TNR (the two rates come from disjoint sets of pairs)."""
    if min(conf.tp, conf.fn, conf.fp, conf.tn) < 0:
        raise ValueError(f"confusion counts must be >= 0, got {conf.to_dict()}")
    h_own = np.repeat([True, True, False, False], [conf.tp, conf.fn, conf.fp, conf.tn])
    j_own = np.repeat([True, False, True, False], [conf.tp, conf.fn, conf.fp, conf.tn])
    return _eo(h_own, j_own, Clusters.independent(h_own.size), exclusions or {})


def _eo(h_own: np.ndarray, j_own: np.ndarray, clusters: Clusters, exclusions: dict[str, int]) -> Estimate:
    conf = Confusion(tp=int((h_own & j_own).sum()), fn=int((h_own & ~j_own).sum()),
                     fp=int((~h_own & j_own).sum()), tn=int((~h_own & ~j_own).sum()))
    n_pos, n_neg = conf.tp + conf.fn, conf.fp + conf.tn
    if n_pos == 0 or n_neg == 0:
        raise InsufficientData(
            f"needs pairs where humans prefer the judge's own response ({n_pos}) and pairs where they "
            f"prefer the other ({n_neg}); excluded: {exclusions}")
    d = clustered_diff_proportions(j_own, h_own, ~j_own, ~h_own, clusters)
    # Each part over its own pairs, which share prompts as the difference's do (the nested coverage
    # benchmark at ICC 0.5: independent parts 0.60-0.88, these 0.895-0.985; TPR holds from 40 prompts).
    tpr_part = clustered_proportion(j_own[h_own], clusters.subset(h_own))
    tnr_part = clustered_proportion(~j_own[~h_own], clusters.subset(~h_own))
    method = "TPR - TNR; Newcomb interval, score test" if not nested(clusters) else \
        (f"TPR - TNR; Newcomb interval at the effective sizes and Wald t-test on the CR1 standard "
         f"error, {d['clusters']} clusters ({clusters.by})")
    return Estimate(
        value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n_pos + n_neg,
        exclusions=exclusions, statistic=d["statistic"], p_value=d["p_value"], method=method,
        details={"confusion": conf.to_dict(),
                 "tpr": {**_part(tpr_part), "n": n_pos}, "tnr": {**_part(tnr_part), "n": n_neg}},
        warnings=cluster_note(d["clusters"], clusters.by), clusters=d["clusters"],
        design_effect=d["design_effect"], cluster_by=clusters.by)


def _part(share: dict[str, float]) -> dict[str, float]:
    return {"value": share["value"], "ci_low": share["ci_low"], "ci_high": share["ci_high"],
            "clusters": share["clusters"], "design_effect": share["design_effect"]}


def _one_own(rows, judge, self_map):
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    own_side = np.where(own_a, F.A, F.B).astype(np.int8)  # meaningful where exactly one is own
    return own_a, own_b, own_side


def self_preference_eo(df, judge: str, self_map: origin.SelfMap | None = None) -> Estimate:
    """Self-preference bias, Equal Opportunity form (Wataoka Def. 4.1), with its confusion matrix."""
    F.require(df, ["judge", "generator_a", "generator_b", "human"], "self_preference_eo")
    rows = F.judge_rows(df, judge, "self_preference_eo")
    own_a, own_b, own_side = _one_own(rows, judge, self_map)
    human = rows[F.HUMAN].to_numpy()
    choice = rows[F.CHOICE].to_numpy()
    keep, excl = count_reasons([
        ("no_own_response", ~own_a & ~own_b),
        ("both_own", own_a & own_b),
        *F.human_reasons(human),
        *F.judge_reasons(choice),
    ], len(rows))
    h_own = human[keep] == own_side[keep]
    j_own = choice[keep] == own_side[keep]
    return _eo(h_own, j_own, F.clusters(rows, keep), excl)


def self_preference_dp(df, judge: str, self_map: origin.SelfMap | None = None) -> Estimate:
    """Self-preference bias, Demographic Parity form (Wataoka Eq. 4): P(picks own) - P(picks other)
    over pairs with exactly one own response and a non-tie choice; = 2 P(own) - 1, so the Agresti-Coull
    interval of P(own) maps onto it, and the exact binomial test is of P(own) = 1/2.
    ``details.by_position`` gives Eq. 4 literally (S = own response is B): P(Y'=B | S=B) - P(Y'=B | S=A).
    """
    F.require(df, ["judge", "generator_a", "generator_b"], "self_preference_dp")
    rows = F.judge_rows(df, judge, "self_preference_dp")
    own_a, own_b, own_side = _one_own(rows, judge, self_map)
    choice = rows[F.CHOICE].to_numpy()
    keep, excl = count_reasons([
        ("no_own_response", ~own_a & ~own_b),
        ("both_own", own_a & own_b),
        *F.judge_reasons(choice),
    ], len(rows))
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData(f"no pair with exactly one response of the judge and a non-tie choice; "
                               f"excluded: {excl}")
    picks_own = choice[keep] == own_side[keep]
    k = int(picks_own.sum())
    clusters = F.clusters(rows, keep)
    share = clustered_proportion(picks_own, clusters)
    p, lo, hi = share["value"], share["ci_low"], share["ci_high"]
    if clusters.singletons or clusters.count < 2:
        statistic, p_value = float(k), sign_test(k, n - k)
        method = "2 P(own) - 1; Agresti-Coull interval, exact binomial test of P(own) = 1/2"
    else:
        statistic, p_value = clustered_share_test(picks_own, clusters)
        method = (f"2 P(own) - 1; Agresti-Coull interval at the effective size, Wald t-test of "
                  f"P(own) = 1/2 on the CR1 standard error, {share['clusters']} clusters ({clusters.by})")
    side = own_side[keep]
    in_b, in_a = side == F.B, side == F.A
    by_position = {
        "p_own_when_own_is_a": float(picks_own[in_a].mean()) if in_a.any() else None,
        "n_own_is_a": int(in_a.sum()),
        "p_own_when_own_is_b": float(picks_own[in_b].mean()) if in_b.any() else None,
        "n_own_is_b": int(in_b.sum()),
    }
    if in_a.any() and in_b.any():
        # P(Y'=B | S=B) - P(Y'=B | S=A) with Y' binary: P(own | own is B) - (1 - P(own | own is A)).
        by_position["eq4_literal"] = float(picks_own[in_b].mean() - (1 - picks_own[in_a].mean()))
    return Estimate(
        value=2 * p - 1, ci_low=2 * lo - 1, ci_high=2 * hi - 1, n=n, exclusions=excl,
        statistic=statistic, p_value=p_value, method=method,
        details={"picked_own": k, "picked_other": n - k, "p_own": p, "by_position": by_position},
        warnings=cluster_note(share["clusters"], clusters.by), clusters=share["clusters"],
        design_effect=share["design_effect"], cluster_by=clusters.by)


def self_preference_score(df, judge: str, self_map: origin.SelfMap | None = None) -> Estimate:
    """Mean-score form of the Demographic Parity bias: mean of score(own) - score(other) =
    2 p(own) - 1 from the position-averaged probability p_a, t interval and t-test against 0."""
    F.require(df, ["judge", "generator_a", "generator_b", "p_a"], "self_preference_score")
    rows = F.judge_rows(df, judge, "self_preference_score")
    own_a, own_b, _ = _one_own(rows, judge, self_map)
    p = F.float_col(rows, "p_a")
    keep, excl = count_reasons([
        ("no_own_response", ~own_a & ~own_b),
        ("both_own", own_a & own_b),
        ("no_p_a", np.isnan(p)),
    ], len(rows))
    if not keep.any():
        raise InsufficientData("no pair with exactly one own response and a probability p_a")
    p_own = np.where(own_a[keep], p[keep], 1.0 - p[keep])
    clusters = F.clusters(rows, keep)
    d = clustered_mean_t(2 * p_own - 1, clusters, bounds=(-1.0, 1.0))
    method = "mean(score_own - score_other); " + mean_how(
        clusters, "t interval clipped to [-1, 1], one-sample t-test")
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(keep.sum()),
                    exclusions=excl, statistic=d["statistic"], p_value=d["p_value"], method=method,
                    **cluster_fields(d, clusters),
                    details={"mean_p_own": float(p_own.mean())})


def _family(fn, what: str, df, judge: str, self_map: origin.SelfMap | None,
            family_map: origin.SelfMap | None) -> Estimate:
    if not family_map or not family_map.get(judge):
        raise ValueError(f"{what}: no family given for judge {judge!r} (family_map / --family)")
    kin = origin.with_family(self_map, family_map)
    est = fn(df, judge, kin)
    members = sorted(origin.self_set(df, judge, kin))
    return dataclasses.replace(est, method=f"toward the family {members}: {est.method}")


def family_preference_eo(df, judge: str, self_map: origin.SelfMap | None = None,
                         family_map: origin.SelfMap | None = None) -> Estimate:
    """Definition 4.1 with the judge's family counted as its own."""
    return _family(self_preference_eo, "family_preference_eo", df, judge, self_map, family_map)


def family_preference_dp(df, judge: str, self_map: origin.SelfMap | None = None,
                         family_map: origin.SelfMap | None = None) -> Estimate:
    """Eq. 4 with the judge's family counted as its own."""
    return _family(self_preference_dp, "family_preference_dp", df, judge, self_map, family_map)
