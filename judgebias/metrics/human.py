"""The human-label figures as estimands of a probability sample (see ``judgebias.metrics.survey``).

Each figure is a function of population totals of per-pair variables; the variables that need the
human majority ``H`` are observed on the labelled pairs only, and predicted on every pair from the
gold panel's vote for A (``g``: P(H = a) ~ g, P(H = b) ~ 1 - g, a tie predicted as neither):

* ``eo``: Wataoka Def. 4.1, TPR - TNR over pairs with exactly one own response and a non-tie judge
  choice, positive class "humans prefer the judge's own response"; humans' ties drop out of both rates.
  Totals: [own-and-judge-own, own, other-and-judge-other, other]; also ``tpr`` and ``tnr``.
* ``dp_human``: the humans' own-preference, P(H = own) - P(H = other) on the same pairs: the human
  baseline of the Demographic-Parity form.
* ``agreement_human`` / ``agreement_gold_human``: share of pairs with a strict human majority where
  the judge's (the gold panel's) a/b/tie choice equals it.
* ``dbg_human``: DBG with humans as gold, mean over own pairs of win(judge, own) - win(human vote
  share, own) (the DBG paper's gold rule with human votes in place of the panel's).
* ``verbosity``: Saito Eq. 6, P(judge picks longer | H = shorter) - P(judge picks shorter | H = longer),
  pairs of unequal word count with non-tie choices.

The functions only build arrays; ``survey.smooth_estimate`` does the estimation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.metrics.dbg import gold_votes, win_credit
from judgebias.metrics.survey import (
    STRATIFIED,
    T_INTERVAL,
    SampleDesign,
    newcomb_design,
    ratio,
    ratio_difference,
    smooth_estimate,
    t_p_value,
    wilson_design,
)
from judgebias.stats import Estimate, InsufficientData


@dataclass(frozen=True)
class Estimand:
    """``rates``: the (numerator, denominator) rows of the conditional rates the figure is made of:
    none (a mean: t interval on the design df), one (a rate: Wilson interval on the effective sample
    size, mapped through ``offset + scale * rate``) or two (their difference: Newcomb's interval from
    the two rates' Wilson intervals)."""

    name: str
    description: str
    g: Callable[[np.ndarray], float]
    needs_own: bool = False
    rates: tuple[tuple[int, int], ...] = ()
    offset: float = 0.0
    scale: float = 1.0

    @property
    def kind(self) -> str:
        return ("mean", "rate", "rate_difference")[len(self.rates)]


ESTIMANDS: dict[str, Estimand] = {e.name: e for e in (
    Estimand("eo", "self-preference EO, TPR - TNR (Wataoka Def. 4.1)", ratio_difference(0, 1, 2, 3), True,
             ((0, 1), (2, 3))),
    Estimand("tpr", "P(judge picks own | humans prefer own)", ratio(0, 1), True, ((0, 1),)),
    Estimand("tnr", "P(judge picks other | humans prefer other)", ratio(2, 3), True, ((2, 3),)),
    # 2 P(H = own | H not a tie) - 1: a rate on the [-1, 1] scale, so it gets the rate's interval.
    Estimand("dp_human", "humans' own-preference P(H=own) - P(H=other) (human DP baseline)",
             lambda t: 2 * t[0] / t[1] - 1 if t[1] > 0 else np.nan, True, ((0, 1),), -1.0, 2.0),
    Estimand("agreement_human", "judge-human agreement (a/b/tie, strict human majority)", ratio(0, 1),
             rates=((0, 1),)),
    Estimand("agreement_gold_human", "gold-panel-human agreement (a/b/tie, strict human majority)",
             ratio(0, 1), rates=((0, 1),)),
    Estimand("dbg_human", "DBG with the human vote share as gold (own pairs)", ratio(0, 1), True),
    Estimand("verbosity", "verbosity bias, Saito Eq. 6 (accuracy parity by length)",
             ratio_difference(0, 1, 2, 3), rates=((0, 1), (2, 3))),
)}


def pair_features(table: pd.DataFrame, judge: str, *, self_map: origin.SelfMap | None = None,
                  gold: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per pair (index ``pair_id``) with what the estimands need for ``judge``: the own side
    (0 = A, 1 = B, -1 = none or both), the judge's choice code and vote, the human majority code and
    vote share, the gold panel's vote for A (NaN without a gold vote) and the word counts."""
    F.require(table, ["pair_id", "judge", "generator_a", "generator_b", "human"], "human estimands")
    prepared = F.prepare(table)
    rows = F.judge_rows(prepared, judge, "human estimands")
    if rows["pair_id"].duplicated().any():
        dup = rows.loc[rows["pair_id"].duplicated(), "pair_id"].iloc[0]
        raise ValueError(f"judge {judge!r} has two rows for pair {dup!r}")
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    try:
        votes, _, _ = gold_votes(prepared, judge, gold)
        gvote = votes[rows[F.PAIR].to_numpy()]
    except ValueError:  # no gold judge: predictions fall back to 1/2 (PPI then cannot help)
        gvote = np.full(len(rows), np.nan)
    return pd.DataFrame({
        "own": np.where(own_a & ~own_b, F.A, np.where(own_b & ~own_a, F.B, -1)),
        "choice": rows[F.CHOICE].to_numpy(),
        "vote": rows[F.VOTE].to_numpy(dtype=float),
        "human": rows[F.HUMAN].to_numpy(),
        "human_vote": rows[F.HUMAN_VOTE].to_numpy(dtype=float),
        "gold": gvote,
        "words_a": rows[F.WORDS_A].to_numpy(),
        "words_b": rows[F.WORDS_B].to_numpy(),
    }, index=pd.Index(rows["pair_id"].to_numpy(), name="pair_id"))


def _side_prob(code_or_side: np.ndarray, p_a: np.ndarray) -> np.ndarray:
    """P(the human majority is ``side``) predicted from P(A): p_a for A, 1 - p_a for B, 0 for a tie."""
    return np.where(code_or_side == F.A, p_a, np.where(code_or_side == F.B, 1.0 - p_a, 0.0))


def variables(features: pd.DataFrame, estimand: str) -> tuple[np.ndarray, np.ndarray]:
    """(y, yhat): the (k, N) per-pair variables of ``estimand`` and their gold-panel predictions.
    ``y`` is NaN where it needs a human label the pair lacks."""
    if estimand not in ESTIMANDS:
        raise ValueError(f"unknown estimand {estimand!r} (known: {sorted(ESTIMANDS)})")
    f = features
    own = f["own"].to_numpy()
    other = np.where(own == F.A, F.B, np.where(own == F.B, F.A, -1))
    choice = f["choice"].to_numpy()
    h = f["human"].to_numpy()
    labelled = h != F.MISSING
    g = np.nan_to_num(f["gold"].to_numpy(dtype=float), nan=0.5)

    def observed(x: np.ndarray) -> np.ndarray:
        return np.where(labelled, x.astype(float), np.nan)

    judged = (choice == F.A) | (choice == F.B)
    one_own = own >= 0
    if estimand in ("eo", "tpr", "tnr", "dp_human"):
        e = (one_own & (judged if estimand != "dp_human" else True)).astype(float)
        jo = (choice == own).astype(float)
        ho, hot = (h == own).astype(float), (h == other).astype(float)
        p_own = _side_prob(own, g)
        if estimand == "dp_human":  # [humans prefer own, humans prefer one side]
            return observed(np.vstack([e * ho, e * (ho + hot)])), np.vstack([e * p_own, e])
        y = observed(np.vstack([e * ho * jo, e * ho, e * hot * (1 - jo), e * hot]))
        yhat = np.vstack([e * p_own * jo, e * p_own, e * (1 - p_own) * (1 - jo), e * (1 - p_own)])
        return y, yhat
    if estimand in ("agreement_human", "agreement_gold_human"):
        if estimand == "agreement_human":
            ref = choice
        else:
            gv = f["gold"].to_numpy(dtype=float)
            ref = np.where(np.isnan(gv), F.MISSING, np.where(gv > 0.5, F.A, np.where(gv < 0.5, F.B, F.TIE)))
        e = (ref != F.MISSING).astype(float)
        m = (h >= 0).astype(float)  # a strict human majority (a, b or tie)
        hit = (h == ref).astype(float)
        # A tie is predicted with probability 0; the denominator is predicted as "has a majority".
        return observed(np.vstack([e * m * hit, e * m])), np.vstack([e * _side_prob(ref, g), e])
    if estimand == "dbg_human":
        vote = f["vote"].to_numpy(dtype=float)
        e = (one_own & ~np.isnan(vote)).astype(float)
        jwin = win_credit(np.where(own == F.A, vote, 1 - vote))
        hv = f["human_vote"].to_numpy(dtype=float)
        hwin = win_credit(np.where(own == F.A, hv, 1 - hv))
        gwin = win_credit(np.where(own == F.A, g, 1 - g))
        d = np.where(e > 0, jwin - hwin, 0.0)
        return np.vstack([observed(d), e]), np.vstack([np.where(e > 0, jwin - gwin, 0.0), e])
    # verbosity
    wa, wb = f["words_a"].to_numpy(), f["words_b"].to_numpy()
    longer = np.where(wa > wb, F.A, np.where(wb > wa, F.B, -1))
    shorter = np.where(longer == F.A, F.B, np.where(longer == F.B, F.A, -1))
    e = ((longer >= 0) & judged).astype(float)
    jl, js = (choice == longer).astype(float), (choice == shorter).astype(float)
    hs, hl = (h == shorter).astype(float), (h == longer).astype(float)
    p_long = _side_prob(longer, g)
    y = observed(np.vstack([e * hs * jl, e * hs, e * hl * js, e * hl]))
    yhat = np.vstack([e * (1 - p_long) * jl, e * (1 - p_long), e * p_long * js, e * p_long])
    return y, yhat


def population_variables(features: pd.DataFrame, pair_ids: pd.Index, estimand: str) -> tuple[
        np.ndarray, np.ndarray]:
    """``variables`` laid out over a population's ``pair_ids`` (in that order): a pair the judge did
    not rate adds zero to every total, known without a label."""
    pos = pd.Index(pair_ids).get_indexer(features.index)
    rated = features[pos >= 0]
    y_r, yhat_r = variables(rated, estimand)
    y = np.zeros((y_r.shape[0], len(pair_ids)))
    yhat = np.zeros_like(y)
    y[:, pos[pos >= 0]], yhat[:, pos[pos >= 0]] = y_r, yhat_r
    return y, yhat


def applicable(features: pd.DataFrame, names: Iterable[str] | None = None) -> list[str]:
    """The estimands that make sense for this judge: own-response figures only when it has own pairs."""
    names = list(names) if names is not None else list(ESTIMANDS)
    has_own = bool((features["own"] >= 0).any())
    has_gold = bool(features["gold"].notna().any())
    return [n for n in names if (has_own or not ESTIMANDS[n].needs_own)
            and (has_gold or n != "agreement_gold_human")]


def estimate(y: np.ndarray, yhat: np.ndarray | None, name: str, design: SampleDesign) -> Estimate:
    """One estimand on a probability sample: Hájek (``yhat`` None) or PPI++, with the interval its
    kind calls for (point estimates and standard errors are ``survey.smooth_estimate``'s, each rate
    with its own leave-one-out power tuning and design degrees of freedom)."""
    est = ESTIMANDS[name]
    kw = {} if yhat is None else {"yhat": yhat}
    if not est.rates:
        return smooth_estimate(y, est.g, design, name=name, **kw)
    parts = [_rate(y, yhat, num, den, design, name) for num, den in est.rates]
    if len(parts) == 1:
        (p, (lo, hi), part), = parts
        value, lo, hi = est.offset + est.scale * p, est.offset + est.scale * lo, est.offset + est.scale * hi
        se = est.scale * part.details["se"]
        df = part.details["df"]
        how = "Wilson interval on the effective sample size and design df"
    else:
        (p1, ci1, r1), (p2, ci2, r2) = parts
        value = p1 - p2
        lo, hi = newcomb_design(p1, ci1, p2, ci2)
        v1, v2 = r1.details["se"] ** 2, r2.details["se"] ** 2
        se = math.sqrt(v1 + v2)
        # Welch-Satterthwaite df of the sum of the two rates' variances.
        den = (v1**2 / r1.details["df"] + v2**2 / r2.details["df"])
        df = (v1 + v2) ** 2 / den if den > 0 else min(r1.details["df"], r2.details["df"])
        how = "Newcomb interval from the rates' Wilson intervals on their effective sample sizes and df"
    # A test of "no bias" where the figure has one (0 for a difference, 1/2 for DP's rate); a plain
    # rate such as agreement has no null worth testing.
    tested = len(parts) == 2 or est.offset != 0.0
    stat = value / se if tested and se > 0 else None
    details = dict(parts[0][2].details, se=se, df=df)
    if len(parts) == 2:
        details["lambda"] = [r.details.get("lambda") for r in (r1, r2)]
        details["rates"] = [{"value": p, "ci_low": c[0], "ci_high": c[1],
                             "labels_in_domain": r.details["domain"]} for p, c, r in parts]
    return replace(parts[0][2], value=value, ci_low=lo, ci_high=hi, statistic=stat,
                   p_value=t_p_value(stat, df) if stat is not None else None,
                   method=parts[0][2].method.replace(T_INTERVAL, how), details=details)


def _rate(y: np.ndarray, yhat: np.ndarray | None, num: int, den: int, design: SampleDesign,
          name: str) -> tuple[float, tuple[float, float], Estimate]:
    """One conditional rate T_num / T_den with its Wilson interval on the effective sample size.
    A rate is in [0, 1]; a prediction-powered total of a small domain can push the ratio outside
    it, so it is clipped there (the Hájek ratio of 0/1 variables never leaves it)."""
    sub = {} if yhat is None else {"yhat": yhat[[num, den]]}
    r = smooth_estimate(y[[num, den]], ratio(0, 1), design, name=name, **sub)
    in_domain = int(np.sum(np.nan_to_num(y[den][design.sampled]) > 0))
    p = min(max(r.value, 0.0), 1.0)
    ci = wilson_design(p, r.details["se"], in_domain, r.details["df"])
    return p, ci, replace(r, details={**r.details, "domain": in_domain})


# Measured, not derived (docs/benchmarks.md, PandaLM replay, 1,000 repetitions): under the stratified
# design the intervals of a difference of two domain rates covered 0.89-0.93 at 50-200 labels; the
# Poisson design meets 0.93 everywhere. Said beside every such figure until the cause is fixed.
STRATIFIED_DIFFERENCE_WARNING = ("stratified design: this interval covered 0.89-0.93 (not 0.95) in the "
                                 "PandaLM replay at 50-200 labels; the Poisson design (the default) met 0.93")


def human_figures(features: pd.DataFrame, design: SampleDesign, pair_ids: pd.Index, *,
                  names: Iterable[str] | None = None) -> dict[str, dict]:
    """Every applicable estimand on a probability sample, Hájek and PPI++ side by side.

    ``design``: a ``survey.SampleDesign`` over ``pair_ids`` (its population, in that order);
    ``features``: ``pair_features`` of the judge (pairs it did not rate add zero to every total).
    A figure the sample cannot define (e.g. no labelled pair where humans preferred the other
    response) is reported with the reason instead of a number.
    """
    rated = features[features.index.isin(pair_ids)]
    several_strata = design.variance == STRATIFIED and len(pd.unique(np.asarray(design.stratum))) > 1
    out: dict[str, dict] = {}
    for name in applicable(rated, names):
        y, yhat = population_variables(features, pair_ids, name)
        fig: dict = {"description": ESTIMANDS[name].description, "population": design.population,
                     "population_size": design.size, "labels": design.n}
        for key, pred in (("design_based", None), ("ppi", yhat)):
            try:
                est = estimate(y, pred, name, design)
                if several_strata and ESTIMANDS[name].kind == "rate_difference":
                    est = replace(est, warnings=(*est.warnings, STRATIFIED_DIFFERENCE_WARNING))
                fig[key] = est.to_dict()
            except InsufficientData as exc:
                fig[key] = {"value": None, "insufficient": str(exc)}
        out[name] = fig
    return out
