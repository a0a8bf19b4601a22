"""Families of the own-response figures: self-preference EO (with its TPR / TNR parts) and DP,
the mean-score DP, the family variant, DBG against a gold panel, and the perplexity figures.
Truths in closed form from each process's parameters."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as st

from judgebias.coverage import tables as T
from judgebias.coverage.registry import Family, Figure, of_estimate, of_part, safely
from judgebias.metrics.dbg import dbg_score
from judgebias.metrics.perplexity import (
    perplexity_excess,
    perplexity_familiarity,
    perplexity_own_other,
    perplexity_preference,
)
from judgebias.metrics.self_preference import (
    family_preference_eo,
    self_preference_dp,
    self_preference_eo,
    self_preference_score,
)

A, B, TIE = 0, 1, 2
RELATIVE = "relative-model"   # the generator of the family variant's "own" responses

# --- self-preference: human prefers own / other / tie (imbalanced: few pairs where humans prefer
# the other response, so TNR's domain is small), the judge's P(own) a Beta law given that, 5% of
# judge answers exactly 0.5 (a tie), 10% of pairs without an own response.
_SP_HUMAN = np.array([0.70, 0.12, 0.18])
_SP_BETA = ((4.0, 1.5), (1.6, 1.4), (2.0, 1.5))
_SP_TIE = 0.05
_SP_NO_OWN = 0.10


def _self_truths() -> dict[str, float]:
    p_own = np.array([st.beta.sf(0.5, *b) for b in _SP_BETA])      # P(judge picks own | human class)
    mean_own = np.array([st.beta.mean(*b) for b in _SP_BETA])
    tpr, tnr = p_own[0], 1.0 - p_own[1]
    dp = 2 * float(_SP_HUMAN @ p_own) - 1
    return {"self_preference_eo": tpr - tnr, "self_preference_eo.tpr": tpr, "self_preference_eo.tnr": tnr,
            "self_preference_dp": dp, "family_preference_eo": tpr - tnr,
            "self_preference_score": (1 - _SP_TIE) * float(_SP_HUMAN @ (2 * mean_own - 1))}


def _simulate_self(rng: np.random.Generator, n: int):
    human_rel = T.categorical(rng, _SP_HUMAN, n)          # own / other / tie
    p_own = rng.beta(np.take([b[0] for b in _SP_BETA], human_rel),
                     np.take([b[1] for b in _SP_BETA], human_rel))
    p_own = np.where(rng.random(n) < _SP_TIE, 0.5, p_own)
    side = rng.integers(0, 2, n)                           # 0: own response shown as A
    side = np.where(rng.random(n) < _SP_NO_OWN, -1, side)
    own_abs = np.where(side == 1, B, A)
    human = np.where(human_rel == 2, TIE, np.where(human_rel == 0, own_abs, 1 - own_abs))
    p_a = np.where(side == 1, 1 - p_own, p_own)
    gens = T.own_generators(side, own=RELATIVE)
    return T.table(n, human=T.one_label(human), columns={**gens, "p_a": p_a})


_SELF_MAP = {T.JUDGE: {RELATIVE}}
_FAMILY_MAP = {T.JUDGE: {RELATIVE}}


def _estimate_self(df) -> dict:
    out: dict = {}
    eo = safely(lambda: self_preference_eo(df, T.JUDGE, _SELF_MAP))
    if eo is not None:
        out["self_preference_eo"] = of_estimate(eo)
        out["self_preference_eo.tpr"] = of_part(eo.details["tpr"])
        out["self_preference_eo.tnr"] = of_part(eo.details["tnr"])
    out["self_preference_dp"] = safely(lambda: of_estimate(self_preference_dp(df, T.JUDGE, _SELF_MAP)))
    out["self_preference_score"] = safely(lambda: of_estimate(self_preference_score(df, T.JUDGE, _SELF_MAP)))
    out["family_preference_eo"] = safely(lambda: of_estimate(
        family_preference_eo(df, T.JUDGE, None, _FAMILY_MAP)))
    return out


# --- DBG: own pairs of three kinds; the judge votes a probability (5% exactly 0.5), two gold judges
# vote verdicts (own / other / tie) independently given the kind.
_DBG_KIND = np.array([0.5, 0.3, 0.2])                 # own better, other better, equal
_DBG_JUDGE = ((5.0, 1.5), (1.5, 2.0), (2.0, 1.2))    # Beta of the judge's P(own) per kind
_DBG_GOLD = np.array([[0.75, 0.15, 0.10], [0.15, 0.75, 0.10], [0.40, 0.40, 0.20]])
_DBG_TIE = 0.05
GOLD = ("gold-1", "gold-2")


def _dbg_truth() -> float:
    total = 0.0
    votes = np.array([1.0, 0.0, 0.5])                  # a gold verdict's vote for the own response
    for k, pk in enumerate(_DBG_KIND):
        judge_win = (1 - _DBG_TIE) * st.beta.sf(0.5, *_DBG_JUDGE[k]) + _DBG_TIE * 0.5
        gold_win = 0.0
        for i in range(3):
            for j in range(3):
                mean = (votes[i] + votes[j]) / 2
                credit = 1.0 if mean > 0.5 else 0.0 if mean < 0.5 else 0.5
                gold_win += _DBG_GOLD[k, i] * _DBG_GOLD[k, j] * credit
        total += pk * (judge_win - gold_win)
    return float(total)


def _simulate_dbg(rng: np.random.Generator, n: int):
    kind = T.categorical(rng, _DBG_KIND, n)
    p_own = rng.beta(np.take([b[0] for b in _DBG_JUDGE], kind), np.take([b[1] for b in _DBG_JUDGE], kind))
    p_own = np.where(rng.random(n) < _DBG_TIE, 0.5, p_own)
    side = rng.integers(0, 2, n)
    own_abs = np.where(side == 1, B, A)
    gold = [T.conditional(rng, kind, _DBG_GOLD) for _ in GOLD]          # own / other / tie
    gold_abs = [np.where(g == 2, TIE, np.where(g == 0, own_abs, 1 - own_abs)) for g in gold]
    pair = np.tile(np.arange(n), 1 + len(GOLD))
    gens = T.own_generators(side)
    judge = np.repeat(np.array([T.JUDGE, *GOLD], dtype=object), n)
    p_a = np.concatenate([np.where(side == 1, 1 - p_own, p_own), np.full(n * len(GOLD), np.nan)])
    verdict = np.concatenate([np.full(n, None, dtype=object), *(T.choice_labels(g) for g in gold_abs)])
    return T.table(n * (1 + len(GOLD)), pair=pair, judge=judge,
                   columns={"generator_a": np.tile(gens["generator_a"], 3),
                            "generator_b": np.tile(gens["generator_b"], 3), "p_a": p_a, "verdict": verdict})


def _estimate_dbg(df) -> dict:
    return {"dbg": safely(lambda: of_estimate(dbg_score(df, T.JUDGE)))}


# --- perplexity: own pairs (50%) and pairs of two other models; log-perplexities normal, own
# responses more familiar; the judge picks the lower-perplexity response more often, and its own
# response with a common odds ratio of 2 at equal perplexity difference; humans independent.
_PPL_OWN_SHARE = 0.5
_PPL_OWN, _PPL_OTHER = (1.0, 0.5), (1.4, 0.6)            # mean, sd of log-perplexity
_PPL_JUDGE_OTHER = np.array([0.62, 0.33, 0.05])          # picks lower / higher / tie (no own response)
_PPL_HUMAN = np.array([0.45, 0.35, 0.20])                # humans: lower / higher / tie
_PPL_OR = 2.0


def _own_pair_probs() -> np.ndarray:
    """Own pairs: P(own / other / tie) when own is lower and when it is higher, so that the odds of
    picking own are _PPL_OR times the no-own pairs' odds of picking the same-perplexity side."""
    out = []
    decided = 1 - _PPL_JUDGE_OTHER[2]
    for pick in (_PPL_JUDGE_OTHER[0], _PPL_JUDGE_OTHER[1]):   # own lower: as "picks lower"; higher
        odds = _PPL_OR * pick / (decided - pick)
        p = decided * odds / (1 + odds)
        out.append([p, decided - p, _PPL_JUDGE_OTHER[2]])
    return np.array(out)


def _ppl_truths() -> dict[str, float]:
    own_lower = st.norm.cdf((_PPL_OTHER[0] - _PPL_OWN[0]) / math.hypot(_PPL_OWN[1], _PPL_OTHER[1]))
    own = _own_pair_probs()
    decided = 1 - _PPL_JUDGE_OTHER[2]
    p_lower_own = (own_lower * own[0, 0] + (1 - own_lower) * own[1, 1]) / decided
    p_lower = _PPL_OWN_SHARE * p_lower_own + (1 - _PPL_OWN_SHARE) * _PPL_JUDGE_OTHER[0] / decided
    human = _PPL_HUMAN[0] / (_PPL_HUMAN[0] + _PPL_HUMAN[1])
    return {"perplexity_preference": p_lower, "perplexity_excess": p_lower - human,
            "perplexity_own_other": _PPL_OR, "perplexity_familiarity": _PPL_OWN[0] - _PPL_OTHER[0]}


def _simulate_perplexity(rng: np.random.Generator, n: int):
    has_own = rng.random(n) < _PPL_OWN_SHARE
    side = np.where(has_own, rng.integers(0, 2, n), -1)
    log_a = np.where(side == 0, rng.normal(*_PPL_OWN, n), rng.normal(*_PPL_OTHER, n))
    log_b = np.where(side == 1, rng.normal(*_PPL_OWN, n), rng.normal(*_PPL_OTHER, n))
    lower = np.where(log_a < log_b, A, B)
    own_abs = np.where(side == 1, B, A)
    own_is_lower = (lower == own_abs).astype(int)
    own_pick = T.conditional(rng, 1 - own_is_lower, _own_pair_probs())          # own / other / tie
    other_pick = T.categorical(rng, _PPL_JUDGE_OTHER, n)                          # lower / higher / tie
    choice = np.where(has_own, np.where(own_pick == 2, TIE, np.where(own_pick == 0, own_abs, 1 - own_abs)),
                      np.where(other_pick == 2, TIE, np.where(other_pick == 0, lower, 1 - lower)))
    h = T.categorical(rng, _PPL_HUMAN, n)
    human = np.where(h == 2, TIE, np.where(h == 0, lower, 1 - lower))
    return T.table(n, human=T.one_label(human),
                   columns={**T.own_generators(side), "verdict": T.choice_labels(choice),
                            "ppl_a": np.exp(log_a), "ppl_b": np.exp(log_b)})


def _estimate_perplexity(df) -> dict:
    return {
        "perplexity_preference": safely(lambda: of_estimate(perplexity_preference(df, T.JUDGE))),
        "perplexity_excess": safely(lambda: of_estimate(perplexity_excess(df, T.JUDGE))),
        "perplexity_own_other": safely(lambda: of_estimate(perplexity_own_other(df, T.JUDGE))),
        "perplexity_familiarity": safely(lambda: of_estimate(perplexity_familiarity(df, T.JUDGE))),
    }


FAMILIES: tuple[Family, ...] = (
    Family("self_preference", "one own response per pair, one human label",
           "humans prefer own 70%, other 12% (small TNR domain), tie 18%; judge P(own) near bounds, "
           "5% judge ties, 10% pairs without an own response",
           tuple(Figure(k, m, _self_truths()[k]) for k, m in (
               ("self_preference_eo", "Newcomb"), ("self_preference_eo.tpr", "Agresti-Coull"),
               ("self_preference_eo.tnr", "Agresti-Coull"),
               ("self_preference_dp", "Agresti-Coull mapped to 2p - 1"),
               ("self_preference_score", "t clipped to [-1, 1]"), ("family_preference_eo", "Newcomb"))),
           _simulate_self, _estimate_self),
    Family("dbg", "judge P(own) against a two-judge verdict gold panel",
           "5% judge ties at exactly 0.5; gold ties from split or tied verdicts",
           (Figure("dbg", "expanded percentile bootstrap over pairs (2000 reps)", _dbg_truth()),),
           _simulate_dbg, _estimate_dbg),
    Family("perplexity", "log-perplexities with familiar own responses",
           "50% own pairs, 5% judge ties, 20% human ties; common odds ratio 2 for own",
           tuple(Figure(k, m, _ppl_truths()[k]) for k, m in (
               ("perplexity_preference", "Agresti-Coull"), ("perplexity_excess", "Newcombe paired score"),
               ("perplexity_own_other", "Mantel-Haenszel (Robins-Breslow-Greenland)"),
               ("perplexity_familiarity", "Welch"))),
           _simulate_perplexity, _estimate_perplexity),
)
