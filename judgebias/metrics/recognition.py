"""Self-recognition and its link to self-preference (Panickssery et al. 2024).

Input: judgment-table rows of the ``self-recognition`` template (``judgebias.prompts.recognition``),
where ``p_a`` is the judge's probability that answer A is the one it wrote (both orders averaged),
on pairs holding exactly one of its own responses; and, for the link, the judge's ordinary
judgments of the same pairs (``p_a`` = its preference for A).

* ``self_recognition``: accuracy = share of pairs where P(own is mine) > 0.5 (Agresti-Coull interval; a
  pair at exactly 0.5 is undecided and counted apart), with the mean confidence P(own is mine)
  (t interval). 0.5 = chance.
* ``recognition_preference``: per pair, recognition confidence against preference for the own
  response; Pearson r with a Fisher-z interval and Spearman's rho, and a logistic fit of "picks
  own" on the confidence (Wald interval), as Panickssery et al. relate the two.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.stats import (
    ALPHA,
    Clusters,
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_how,
    clustered_mean_t,
    clustered_share,
)


def _own_probability(df: pd.DataFrame, judge: str, self_map, what: str) -> pd.Series:
    return _own_probability_clusters(df, judge, self_map, what)[0]


def _own_probability_clusters(df: pd.DataFrame, judge: str, self_map,
                              what: str) -> tuple[pd.Series, Clusters]:
    """P(the own response) per pair_id from ``p_a``, over pairs with exactly one own response, and
    the pairs' clusters."""
    F.require(df, ["pair_id", "judge", "generator_a", "generator_b", "p_a"], what)
    rows = df[(df["judge"] == judge).to_numpy(dtype=bool, na_value=False)]
    if rows.empty:
        raise ValueError(f"{what}: judge {judge!r} has no rows")
    if rows["pair_id"].duplicated().any():
        raise ValueError(f"{what}: pair {rows.loc[rows['pair_id'].duplicated(), 'pair_id'].iloc[0]!r} "
                         f"appears twice for {judge!r}")
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    one = own_a ^ own_b
    p = pd.to_numeric(rows["p_a"], errors="coerce").to_numpy(dtype=float)
    own = np.where(own_a, p, 1.0 - p)
    keep = one & np.isfinite(p)
    # with the pairs' clusters: their prompts, where the table has them
    return (pd.Series(own[keep], index=rows["pair_id"].to_numpy()[keep], dtype=float),
            F.column_clusters(rows).subset(keep))


def self_recognition(df: pd.DataFrame, judge: str, self_map=None) -> Estimate:
    own, clusters = _own_probability_clusters(df, judge, self_map, "self_recognition")
    undecided = int((own == 0.5).sum())
    decided = own[own != 0.5]
    n = int(decided.size)
    if n == 0:
        raise InsufficientData(f"no pair with one own response and a decided recognition probability "
                               f"({undecided} at exactly 0.5)")
    correct = int((decided > 0.5).sum())
    # The test behind the self-recognition statement (judgebias.reporting.trust): exact binomial
    # test of chance (0.5) on the decided pairs (the Wald t-test on the CR1 standard error where the
    # pairs share prompts); the interval stays Agresti-Coull.
    d = clustered_share(decided.to_numpy() > 0.5, clusters.subset((own != 0.5).to_numpy()))
    conf = clustered_mean_t(own.to_numpy(), clusters, null=0.5, bounds=(0.0, 1.0))
    how = ("Agresti-Coull interval at the effective size, Wald t-test of 1/2 on the CR1 standard error, "
           f"{clustered_how(clusters, d['clusters'])}") if d["nested"] else "Agresti-Coull interval"
    return Estimate(
        value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=n,
        exclusions={"undecided": undecided} if undecided else {},
        statistic=d["statistic"], p_value=d["p_value"],
        method="share of pairs with P(own is mine) > 0.5; " + how, **cluster_fields(d, clusters),
        details={"correct": correct,
                 "mean_confidence": {"value": conf["value"], "ci_low": conf["ci_low"],
                                     "ci_high": conf["ci_high"], "p_value": conf["p_value"],
                                     "n": int(own.size), "null": 0.5},
                 "population": f"pairs holding exactly one response of {judge}"})


def recognition_preference(recognition: pd.DataFrame, judgments: pd.DataFrame, judge: str,
                           self_map=None) -> Estimate:
    """Pearson r between recognition confidence and preference for the own response, per pair."""
    import statsmodels.api as sm
    from scipy import stats
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    rec = _own_probability(recognition, judge, self_map, "recognition_preference (recognition)")
    pref = _own_probability(judgments, judge, self_map, "recognition_preference (judgments)")
    both = pd.concat({"rec": rec, "pref": pref}, axis=1, join="inner").dropna()
    n = len(both)
    if n < 4:
        raise InsufficientData(f"{n} pair(s) with both a recognition and a preference probability (needs 4)")
    x, y = both["rec"].to_numpy(), both["pref"].to_numpy()
    if x.std() == 0 or y.std() == 0:
        raise InsufficientData("recognition or preference is constant across the pairs")
    r, p = stats.pearsonr(x, y)
    z, se = math.atanh(max(min(r, 0.999999), -0.999999)), 1 / math.sqrt(n - 3)
    zc = stats.norm.ppf(1 - ALPHA / 2)
    rho, rho_p = stats.spearmanr(x, y)
    details = {"spearman": {"value": float(rho), "p_value": float(rho_p)},
               "population": f"pairs holding exactly one response of {judge}, recognised and judged"}
    picks = (y > 0.5).astype(float)
    if 0 < picks.sum() < n:
        try:
            # On a few pairs the fit may not converge or separate: said in the figure, not as a
            # library warning on the console.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = sm.Logit(picks, sm.add_constant(x)).fit(disp=0)
            lo, hi = fit.conf_int(alpha=ALPHA)[1]
            details["logit_picks_own_on_confidence"] = {
                "coef": float(fit.params[1]), "ci_low": float(lo), "ci_high": float(hi),
                "p_value": float(fit.pvalues[1]), "n": n}
            problems = [str(w.message).split("\n")[0] for w in caught
                        if issubclass(w.category, (ConvergenceWarning, PerfectSeparationWarning))]
            if problems or not fit.mle_retvals.get("converged", True):
                said = "; ".join(dict.fromkeys(problems)) or "the optimizer did not converge"
                details["logit_picks_own_on_confidence"]["note"] = f"do not trust this fit: {said}"
        except (np.linalg.LinAlgError, ValueError) as exc:  # separation on a few pairs
            details["logit_picks_own_on_confidence"] = {"note": f"not estimable: {exc}"}
    return Estimate(value=float(r), ci_low=math.tanh(z - zc * se), ci_high=math.tanh(z + zc * se), n=n,
                    exclusions={}, statistic=float(r), p_value=float(p),
                    method="Pearson r of P(own is mine) and P(picks own); Fisher-z interval",
                    details=details)
