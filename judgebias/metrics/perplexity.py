"""Perplexity (familiarity) analysis of Wataoka et al. 2024, Section 5. Needs ppl_a / ppl_b: the
judge's perplexity of each response given the prompt.

* ``perplexity_preference`` (Figure 3): P(judge picks the lower-perplexity response), with the win
  rate of A by binned log-perplexity difference log ppl_A - log ppl_B for the judge and for humans.
* ``perplexity_excess``: the same preference minus the humans' on the same pairs (paired).
* ``perplexity_own_other`` (Figure 4): win rate by log-perplexity difference for pairs holding the
  judge's own response (own shown as A) and pairs holding none; the Mantel-Haenszel odds ratio of
  winning, own vs other, at equal perplexity difference (1 = perplexity explains it all).
* ``perplexity_familiarity`` (Figure 5): mean log-perplexity of own minus other responses (Welch).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.metrics.verbosity import bin_rates
from judgebias.stats import (
    Estimate,
    InsufficientData,
    count_reasons,
    paired_diff_proportions,
    proportion_interval,
    sign_test,
    welch,
)

LOG_PPL_EDGES = np.arange(-2.0, 2.0 + 1e-9, 0.5)


def _log_ppl(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(F.float_col(rows, "ppl_a")), np.log(F.float_col(rows, "ppl_b"))


def _rows(df, judge, what):
    F.require(df, ["judge", "ppl_a", "ppl_b"], what)
    rows = F.judge_rows(df, judge, what)
    la, lb = _log_ppl(rows)
    if not (np.isfinite(la) & np.isfinite(lb)).any():
        raise InsufficientData(f"{what}: judge {judge!r} has no row with both ppl_a and ppl_b")
    return rows, la, lb


def _choices(df, judge, what):
    """The judge's rows, log ppl_A - log ppl_B, the judge's choice and the humans' label per row."""
    rows, la, lb = _rows(df, judge, what)
    return rows, la - lb, rows[F.CHOICE].to_numpy(), rows[F.HUMAN].to_numpy()


def perplexity_preference(df: pd.DataFrame, judge: str, edges: np.ndarray = LOG_PPL_EDGES) -> Estimate:
    """P(judge picks the lower-perplexity response) with an Agresti-Coull interval and an exact binomial test
    of 1/2; ``judge_bins``/``human_bins``: P(A wins) by log ppl_A - log ppl_B (Figure 3)."""
    rows, x, choice, human = _choices(df, judge, "perplexity_preference")
    keep, excl = count_reasons([
        ("no_perplexity", ~np.isfinite(x)),
        *F.judge_reasons(choice),
        ("equal_perplexity", x == 0),
    ], len(rows))
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData(f"no row with perplexities and a non-tie choice; excluded: {excl}")
    lower = np.where(x < 0, F.A, F.B)
    k = int((choice[keep] == lower[keep]).sum())
    p, lo, hi = proportion_interval(k, n)
    judged = np.isfinite(x) & np.isin(choice, (F.A, F.B))
    details = {"judge_bins": bin_rates(x[judged], choice[judged] == F.A, edges)}
    labelled = np.isfinite(x) & np.isin(human, (F.A, F.B))
    if labelled.any():
        details["human_bins"] = bin_rates(x[labelled], human[labelled] == F.A, edges)
        hk = labelled & (x != 0)
        if hk.any():
            hp = proportion_interval(int((human[hk] == lower[hk]).sum()), int(hk.sum()))
            details["human_p_lower"] = {"value": hp[0], "ci_low": hp[1], "ci_high": hp[2], "n": int(hk.sum())}
    return Estimate(value=p, ci_low=lo, ci_high=hi, n=n, exclusions=excl, statistic=float(k),
                    p_value=sign_test(k, n - k),
                    method="P(judge picks lower perplexity); Agresti-Coull interval, exact binomial test",
                    details=details)


def perplexity_excess(df: pd.DataFrame, judge: str, *, reps: int = 2000, seed: int = 0) -> Estimate:
    """P(judge picks the lower-perplexity response) - P(humans do), on the same pairs: Newcombe's
    score interval for paired proportions and the exact sign (McNemar) test. Positive = more swayed
    by familiarity than humans (the paper's Figure 3 finding).

    The interval was a pair bootstrap until the coverage benchmark found it at 0.85 on 10-pair
    tables (0.89 even expanded): resampling a handful of -1 / 0 / +1 differences cannot see beyond
    them. ``reps`` and ``seed`` are still accepted (``analyze`` passes its bootstrap settings to
    every figure) and no longer used."""
    F.require(df, ["human"], "perplexity_excess")
    rows, x, choice, human = _choices(df, judge, "perplexity_excess")
    keep, excl = count_reasons([
        ("no_perplexity", ~np.isfinite(x)),
        ("equal_perplexity", x == 0),
        *F.human_reasons(human),
        *F.judge_reasons(choice),
    ], len(rows))
    if not keep.any():
        raise InsufficientData(f"no row with perplexities, a human label and a judge choice; "
                               f"excluded: {excl}")
    lower = np.where(x < 0, F.A, F.B)[keep]
    j, h = choice[keep] == lower, human[keep] == lower
    d = paired_diff_proportions(int((j & h).sum()), int((j & ~h).sum()), int((~j & h).sum()),
                                int((~j & ~h).sum()))
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(keep.sum()),
                    exclusions=excl, statistic=d["statistic"], p_value=d["p_value"],
                    method="paired difference; Newcombe's score interval for paired proportions, "
                           "exact McNemar test",
                    details={"judge_p_lower": float(j.mean()), "human_p_lower": float(h.mean())})


def perplexity_own_other(df: pd.DataFrame, judge: str, self_map: origin.SelfMap | None = None,
                         edges: np.ndarray = LOG_PPL_EDGES) -> Estimate:
    """Figure 4: win rate by log-perplexity difference for own-response pairs (own oriented as A)
    and pairs without an own response; value = Mantel-Haenszel odds ratio of winning (own vs other)
    pooled over the perplexity bins, with its 95% interval and the test of OR = 1."""
    from statsmodels.stats.contingency_tables import StratifiedTable

    F.require(df, ["generator_a", "generator_b"], "perplexity_own_other")
    rows, la, lb = _rows(df, judge, "perplexity_own_other")
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    choice = rows[F.CHOICE].to_numpy()
    x = la - lb
    keep, excl = count_reasons([
        ("no_perplexity", ~np.isfinite(x)),
        ("both_own", own_a & own_b),
        *F.judge_reasons(choice),
    ], len(rows))
    own = keep & (own_a ^ own_b)
    other = keep & ~own_a & ~own_b
    if not own.any() or not other.any():
        raise InsufficientData(f"needs pairs with ({int(own.sum())}) and without ({int(other.sum())}) the "
                               "judge's own response")
    # Orient own pairs so that the own response is A.
    x_own = np.where(own_a, x, -x)[own]
    win_own = (choice[own] == np.where(own_a, F.A, F.B)[own])
    x_other, win_other = x[other], choice[other] == F.A
    own_bins = bin_rates(x_own, win_own, edges)
    other_bins = bin_rates(x_other, win_other, edges)

    full = np.concatenate([[-np.inf], edges, [np.inf]])
    b_own = np.searchsorted(full, x_own, side="right") - 1
    b_other = np.searchsorted(full, x_other, side="right") - 1
    nb = full.size - 1
    w1 = np.bincount(b_own, weights=win_own, minlength=nb)
    n1 = np.bincount(b_own, minlength=nb)
    w0 = np.bincount(b_other, weights=win_other, minlength=nb)
    n0 = np.bincount(b_other, minlength=nb)
    both = (n1 > 0) & (n0 > 0)
    tables = np.stack([np.stack([w1, n1 - w1]), np.stack([w0, n0 - w0])])[:, :, both]  # 2 x 2 x K
    details = {"own_bins": own_bins, "other_bins": other_bins, "strata": int(both.sum()),
               "n_own": int(own.sum()), "n_other": int(other.sum())}
    value = lo = hi = stat = p = math.nan
    if both.any():
        st = StratifiedTable(tables.astype(float))
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(st.oddsratio_pooled)
            lo, hi = (float(v) for v in st.oddsratio_pooled_confint(alpha=0.05))
            test = st.test_null_odds(correction=False)
            stat, p = float(test.statistic), float(test.pvalue)
    else:
        details["note"] = "no perplexity bin holds both own and other pairs"
    return Estimate(value=value, ci_low=lo, ci_high=hi, n=int(own.sum() + other.sum()), exclusions=excl,
                    statistic=stat, p_value=p,
                    method="Mantel-Haenszel odds ratio (own vs other) over log-ppl bins; CMH test",
                    details=details)


def perplexity_familiarity(df: pd.DataFrame, judge: str, self_map: origin.SelfMap | None = None) -> Estimate:
    """Figure 5: mean log-perplexity of the judge's own responses minus other models' responses
    (negative = its own texts are more familiar to it), Welch interval and t-test."""
    F.require(df, ["generator_a", "generator_b"], "perplexity_familiarity")
    rows, la, lb = _rows(df, judge, "perplexity_familiarity")
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    logs = np.concatenate([la, lb])
    own = np.concatenate([own_a, own_b])
    ok = np.isfinite(logs)
    excl = {"no_perplexity": int((~ok).sum())} if (~ok).any() else {}
    x, y = logs[ok & own], logs[ok & ~own]
    if x.size < 2 or y.size < 2:
        raise InsufficientData(f"needs >= 2 own and >= 2 other responses with a perplexity (got {x.size}, "
                               f"{y.size})")
    d = welch(x, y)
    return Estimate(value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=int(x.size + y.size),
                    exclusions=excl, statistic=d["statistic"], p_value=d["p_value"],
                    method="mean log-ppl(own) - mean log-ppl(other); Welch interval and t-test",
                    details={"mean_log_ppl_own": float(x.mean()), "n_own": int(x.size),
                             "mean_log_ppl_other": float(y.mean()), "n_other": int(y.size)})
