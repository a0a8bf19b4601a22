"""The Evaluator Quality Baseline (EQB) of self-preference (Roytburg et al. 2026, "Are LLM Evaluators
Really Narcissists? Sanity Checking Self-Preference Evaluations", arXiv 2601.22548).

A judge that answers a question wrongly itself tends to judge that question wrongly too, whoever
wrote the answers: it may vote for its own wrong answer because it cannot tell it is wrong, not
because it is its own. The baseline compares, on comparable questions, the judge's vote for its own
dispreferred ("wrong") answer with its vote for another model's dispreferred answer:

    EQB = P(judge votes for its own answer | own answer wrong)
          - P(judge votes for another model's answer | that answer wrong)

matched as in the paper's judge-swap test: a stratum is one question and one opponent R whose answer
beat the judge's own (the judge J judged J vs R); its baseline is the judge's vote on the same
question for each other model K whose answer also lost to R (J judged K vs R). Per stratum, the mean
vote for the own answer minus the mean vote for the K answers; EQB is the mean over strata (the
paper pairs each example's P(J) with the mean P(K) over its proxies and runs a paired t-test).
"Wrong" is the reference's dispreferred response: the human majority, or, when the table has them,
the correctness columns ``correct_a`` / ``correct_b`` (a verifiable task: the one correct response is
the preferred one). A vote is the judge's P(A) when it has one (position-averaged, as the paper's),
else 1 / 0 / 0.5 from its verdict.

The interval is cluster-robust: each stratum's cluster is that of its own rows (``prepare``'s
cluster, by default the prompt, so the strata of one question, which share the judge's own answer,
are one cluster; ``--cluster-by`` another column), CR1 variance of the mean of per-stratum
differences and t on clusters - 1 degrees of freedom (``stats.clustered_mean_t``; one stratum per
cluster: exactly the paired t interval and test).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.stats import (
    Clusters,
    Estimate,
    InsufficientData,
    cluster_note,
    clustered_mean_t,
    count_reasons,
)

CORRECT = ("correct_a", "correct_b")
PAPER = "Roytburg et al. 2026 (arXiv 2601.22548)"


def _correctness(rows: pd.DataFrame, column: str, what: str) -> np.ndarray:
    """A correctness column as 1.0 / 0.0 / NaN (missing), each distinct value parsed once; anything but
    true/false/1/0 is an error naming the column and the first row holding it."""
    def number(v) -> float:
        if isinstance(v, str):
            return math.inf
        try:
            return float(v)
        except (TypeError, ValueError):
            return math.inf

    codes, uniques = pd.factorize(rows[column], use_na_sentinel=True)
    parsed = np.array([number(u) for u in uniques] + [math.nan], dtype=float)
    x = parsed[codes]  # code -1 (missing) reads the last entry, NaN
    bad = ~np.isnan(x) & (x != 0) & (x != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what}: column {column!r} holds {rows[column].iloc[i]!r} (row {i + 1} of the "
                         "judge's rows); expected true/false or 1/0 per response, empty where unknown")
    return x


def _reference(rows: pd.DataFrame, what: str) -> tuple[np.ndarray, list[tuple[str, np.ndarray]], str]:
    """Which response the reference prefers (F.A / F.B; TIE or MISSING when none), the exclusion
    reasons where it has no side, and its name: the correctness columns when the table has them,
    else the human majority."""
    if any(c in rows.columns for c in CORRECT):
        F.require(rows, CORRECT, what)
        ca, cb = (_correctness(rows, c, what) for c in CORRECT)
        missing = np.isnan(ca) | np.isnan(cb)
        better = np.where(missing, F.MISSING, np.where(ca > cb, F.A, np.where(cb > ca, F.B, F.TIE)))
        return better, [("no_correctness", missing), ("both_or_neither_correct", better == F.TIE)], \
            "correctness (correct_a, correct_b)"
    human = rows[F.HUMAN].to_numpy()
    return human, F.human_reasons(human), "the human majority"


def _generator_codes(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray, int]:
    """One code per generator name across both columns (-1 missing) and how many there are; the
    categoricals of a table read for analysis are recoded by their categories, not row by row."""
    if isinstance(a.dtype, pd.CategoricalDtype) and isinstance(b.dtype, pd.CategoricalDtype):
        names = a.cat.categories.union(b.cat.categories)
        ca = a.cat.set_categories(names).cat.codes.to_numpy().astype(np.int64)
        cb = b.cat.set_categories(names).cat.codes.to_numpy().astype(np.int64)
        return ca, cb, max(len(names), 1)
    codes, names = pd.factorize(pd.concat([a.astype(object), b.astype(object)], ignore_index=True),
                                use_na_sentinel=True)
    return codes[:len(a)], codes[len(a):], max(len(names), 1)


# Count (question, opponent) keys in a dense array when it is at most this large (per row, plus a
# constant); beyond, renumber them first (a sort).
_DENSE_PER_ROW, _DENSE_EXTRA = 4, 1 << 16


def _stratum_sums(keys: np.ndarray, y: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, sum of y) per key 0..size-1."""
    return np.bincount(keys, minlength=size), np.bincount(keys, weights=y, minlength=size)


def _matched(question: np.ndarray, opponent: np.ndarray, y: np.ndarray, own: np.ndarray,
             other: np.ndarray, n_opp: int, cluster: np.ndarray) -> dict[str, np.ndarray]:
    """Strata (question, opponent) holding own rows and other-model rows: per stratum the mean vote
    on the own rows, on the other rows, its question, its cluster (its own rows', the first one's
    where they differ) and which own rows found a match. Keys are counted densely (a bincount, no
    sort) unless the (question, opponent) space is far larger than the rows, where they are first
    renumbered."""
    rows = own | other
    key = np.zeros(len(y), dtype=np.int64)
    key[rows] = question[rows].astype(np.int64) * n_opp + opponent[rows]
    size = int(key[rows].max()) + 1 if rows.any() else 0
    dense = size <= _DENSE_PER_ROW * len(y) + _DENSE_EXTRA
    if not dense:  # renumber the keys in use (a sort, only for a sparse key space)
        used, key[rows] = np.unique(key[rows], return_inverse=True)
        size = used.size
    n_own, s_own = _stratum_sums(key[own], y[own], size)
    n_oth, s_oth = _stratum_sums(key[other], y[other], size)
    both = np.flatnonzero((n_own > 0) & (n_oth > 0))
    matched = np.zeros(len(y), dtype=bool)
    matched[own] = (n_oth > 0)[key[own]]
    stratum = both if dense else used[both]
    first = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, key[own], cluster[own])
    return {"own": s_own[both] / n_own[both], "other": s_oth[both] / n_oth[both],
            "question": stratum // n_opp, "cluster": first[both], "matched_rows": matched}


def _mean(values: np.ndarray, clusters: Clusters, bounds: tuple[float, float]) -> dict[str, float]:
    """``clustered_mean_t``; with a single cluster (the units not independent), the mean alone."""
    if clusters.count < 2 and not clusters.singletons:
        return {"value": float(np.mean(values)), "ci_low": None, "ci_high": None, "statistic": None,
                "p_value": None, "clusters": clusters.count, "design_effect": None}
    return clustered_mean_t(values, clusters, bounds=bounds)


def _part(values: np.ndarray, clusters: Clusters, bounds: tuple[float, float], test: bool = False) -> dict:
    d = _mean(values, clusters, bounds)
    out = {"value": d["value"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": int(values.size)}
    return {**out, "p_value": d["p_value"]} if test else out


def evaluator_quality_baseline(df, judge: str, self_map: origin.SelfMap | None = None,
                               *, whose: str = "the judge") -> Estimate:
    """EQB: the judge's mean vote for its own wrong answer minus its mean vote for other models'
    wrong answers that lost to the same opponent on the same question, with a cluster-robust t
    interval over questions and a t-test of 0 (> 0: a preference for its own answers beyond what its
    own competence explains). ``details.when_own_better``: the same difference where the own answer
    (and the other model's) beat the opponent, the paper's "legitimate" side. ``whose`` names the
    own responses in messages ("the judge or its family")."""
    what = "evaluator_quality_baseline"
    F.require(df, ["judge", "generator_a", "generator_b", "prompt"], what)
    rows = F.judge_rows(df, judge, what)
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    if not (own_a | own_b).any():
        mine = sorted(origin.self_set(rows, judge, self_map))
        raise InsufficientData(f"no responses written by {whose} in its pairs (generators counted as its "
                               f"own: {mine}; --self / --family JUDGE=GENERATOR names more)")
    better, ref_reasons, reference = _reference(rows, what)
    vote = rows[F.VOTE].to_numpy(dtype=float)
    ga, gb, n_opp = _generator_codes(rows["generator_a"], rows["generator_b"])
    question = pd.factorize(rows["prompt"], use_na_sentinel=True)[0]
    sided = (better == F.A) | (better == F.B)
    usable = sided & ~np.isnan(vote) & (ga >= 0) & (gb >= 0) & (question >= 0)
    winner = np.where(better == F.A, ga, gb)
    loser = np.where(better == F.A, gb, ga)
    vote_winner = np.where(better == F.A, vote, 1.0 - vote)
    one_own = own_a ^ own_b
    own_side = np.where(own_a, F.A, F.B)
    own_lost = one_own & usable & (better != own_side)
    own_won = one_own & usable & (better == own_side)
    neither = ~own_a & ~own_b & usable
    cl = F.clusters(rows)
    codes = np.asarray(cl.codes, dtype=np.int64)
    wrong = _matched(question, winner, 1.0 - vote_winner, own_lost, neither, n_opp, codes)
    right = _matched(question, loser, vote_winner, own_won, neither, n_opp, codes)

    _, excl = count_reasons([
        ("no_own_response", ~own_a & ~own_b),
        ("both_own", own_a & own_b),
        *ref_reasons,
        ("no_question", question < 0),
        ("missing_generator", (ga < 0) | (gb < 0)),
        ("judge_missing", np.isnan(vote)),
        ("own_preferred", own_won),
        ("no_comparable_pair", own_lost & ~wrong["matched_rows"]),
    ], len(rows))
    excl.pop("no_own_response", None)  # the baseline's pool, not units left out
    if not own_lost.any():
        raise InsufficientData(f"no pair where {reference} prefers the other response over one written by "
                               f"{whose}; excluded: {excl}")
    s = wrong["own"].size
    if s == 0:
        raise InsufficientData(
            f"no comparable pair: on no question did another model's response lose to the same opponent as "
            f"a response of {whose} (the paper's matching; {int(own_lost.sum())} own responses dispreferred, "
            f"{int(neither.sum())} pairs without one); excluded: {excl}")
    strata = Clusters.of(wrong["cluster"], cl.by)
    d = _mean(wrong["own"] - wrong["other"], strata, (-1.0, 1.0))
    details = {
        "own_wrong_vote": _part(wrong["own"], strata, (0.0, 1.0)),
        "other_wrong_vote": _part(wrong["other"], strata, (0.0, 1.0)),
        "own_wrong_vote_unmatched": float(np.mean(1.0 - vote_winner[own_lost])),
        "own_wrong_rows": int(own_lost.sum()), "own_wrong_rows_matched": int(wrong["matched_rows"].sum()),
        "baseline_rows": int(neither.sum()), "questions": int(np.unique(wrong["question"]).size),
        "reference": reference,
    }
    if right["own"].size:
        beaten = Clusters.of(right["cluster"], cl.by)
        details["when_own_better"] = _part(right["own"] - right["other"], beaten, (-1.0, 1.0), test=True)
    return Estimate(
        value=d["value"], ci_low=d["ci_low"], ci_high=d["ci_high"], n=s, exclusions=excl,
        statistic=d["statistic"], p_value=d["p_value"],
        method=(f"{PAPER} evaluator quality baseline: mean over (question, opponent) strata of the vote for "
                f"the own dispreferred response minus the mean vote for other models' responses dispreferred "
                f"to the same opponent on the same question ({reference}); CR1 t interval and t-test over "
                f"{d['clusters']} clusters ({cl.by})"),
        details=details, warnings=cluster_note(d["clusters"], cl.by), clusters=d["clusters"],
        design_effect=d["design_effect"], cluster_by=cl.by)


def self_preference_eqb(df, judge: str, self_map: origin.SelfMap | None = None) -> Estimate:
    """EQB with the judge's own responses (its name, ``--self``, the table's ``judge_generator``)."""
    return evaluator_quality_baseline(df, judge, self_map)


def family_preference_eqb(df, judge: str, self_map: origin.SelfMap | None = None,
                          family_map: origin.SelfMap | None = None) -> Estimate:
    """EQB with the judge's family's responses counted as its own (``--family``)."""
    if not family_map or not family_map.get(judge):
        raise ValueError(f"family_preference_eqb: no family given for judge {judge!r} "
                         "(family_map / --family)")
    kin = origin.with_family(self_map, family_map)
    est = evaluator_quality_baseline(df, judge, kin, whose="the judge or its family")
    members = sorted(origin.self_set(df, judge, kin))
    return dataclasses.replace(est, method=f"toward the family {members}: {est.method}")
